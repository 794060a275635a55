"""Memory budgets: what each stack is given — the database's buffer pool and, on ZFS and
tarn, the ARC — under the scenario's memory variants, and the rule that keeps a run
disk-bound: the dataset at least 4× every stack's caches.

Variants: "articles" gives each stack what it says (the articles' setups: the same buffer
pool everywhere, an ARC on top for ZFS and tarn); "equal" gives every stack the same total
memory: a stack without an ARC (ext4, xfs, btrfs, bcache) gets a buffer pool equal to the
others' buffer pool + ARC, ZFS and tarn keep the split they say. A scenario running both
(`[memory] variants = ["articles", "equal"]`) gets a second copy of each stack whose memory
differs ("ext4-equal"); stacks equal in both are run once and shown in both.

Owns: resolving buffer pool and ARC sizes (a size, a share of `memory.total` such as
"75%", or the rest of the total: see as_stated), expanding stacks per variant, estimating
a dataset's size before it is loaded, and the 4× check.
Promises: pure functions of the scenario and the machine's RAM (given); a stack whose
memory cannot be derived raises BudgetError naming it and why; what each stack was given
is recorded on it (spec["memory"]) so the report can show it beside what it used.
Must never: start anything, read results, or guess a size silently (defaults are named).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

from .devices import parse_size
from .sysbench import TPCC_LIKE

MiB = 1 << 20
VARIANTS = ("articles", "equal")
ARC_STACKS = ("zfs", "tarn")
# What a stack gets when neither it nor the scenario says: MariaDB's buffer pool in
# mariadb.BASE_SETTINGS (PostgreSQL's shared_buffers in postgres.BASE_SETTINGS is the same),
# zfs-fuse's ARC as stacks._zfs starts it, tarn's own default (crates/arc: RAM / 4, ≥ 64 MiB).
DEFAULT_BUFFER_POOL = 128 * MiB
ZFS_DEFAULT_ARC = 256 * MiB
# The 4× rule: a dataset smaller than 4× a stack's caches measures the caches, not the disk.
DATASET_OVER_CACHE = 4


class BudgetError(ValueError):
    """A memory setting that cannot be resolved; the message names the stack and why."""


def tarn_default_arc(ram_bytes: int) -> int:
    return max(ram_bytes // 4, 64 * MiB)


def parse_share(value) -> float | None:
    """'75%' -> 0.75; anything else -> None (a size, handled by parse_size)."""
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            number = float(value.strip()[:-1])
        except ValueError:
            raise BudgetError(f"share {value!r} is not a number followed by %") from None
        if not 0 < number <= 100:
            raise BudgetError(f"share {value!r} must be between 0% and 100%")
        return number / 100
    return None


def is_size_or_share(value) -> bool:
    """What a stack's buffer_pool and arc accept: a size ("96M", bytes) or a share ("75%")."""
    if isinstance(value, bool):
        return False
    if parse_share(value) is not None:   # a share out of range raises BudgetError, saying so
        return True
    try:
        parse_size(value)
        return True
    except (ValueError, TypeError):
        return False


def _amount(value, total: int | None, what: str) -> int:
    share = parse_share(value)
    if share is None:
        return parse_size(value)
    if total is None:
        raise BudgetError(f"{what} = {value!r} is a share of the total memory: give [memory] total")
    return int(total * share)


@dataclass(frozen=True)
class Given:
    """The memory one stack is given: its database's buffer pool, on ZFS and tarn the ARC
    (None on a stack that has none), and the kernel page cache its database server may
    fill (None: not capped; see cage.py)."""
    buffer_pool: int
    arc: int | None
    rule: str = ""
    page_cache: int | None = None

    @property
    def total(self) -> int:
        return self.buffer_pool + (self.arc or 0) + (self.page_cache or 0)

    def record(self, variants: list[str]) -> dict:
        return {"variants": variants, "buffer_pool_bytes": self.buffer_pool, "arc_bytes": self.arc,
                "page_cache_bytes": self.page_cache, "total_bytes": self.total, "rule": self.rule}


def page_cache_of(scenario: dict) -> int | None:
    """database.page_cache: the page cache every stack's database server may fill."""
    raw = scenario.get("database", {}).get("page_cache")
    return parse_size(raw) if raw is not None else None


def mib(n: int) -> str:
    return f"{n // MiB}M" if n % MiB == 0 else str(n)


def as_stated(spec: dict, scenario: dict, ram_bytes: int) -> Given:
    """The articles' rule: what the stack says (else the scenario's database.buffer_pool,
    else the defaults). With [memory] total, shares resolve against it (less the page
    cache, which every stack gets alike), a ZFS or tarn stack that gives only its buffer
    pool gets the rest of the total as ARC, and one that gives only its ARC gets the rest as
    buffer pool — unless the scenario names one buffer pool."""
    given = _stated(spec, scenario, ram_bytes)
    return Given(given.buffer_pool, given.arc, given.rule, page_cache_of(scenario))


def _stated(spec: dict, scenario: dict, ram_bytes: int) -> Given:
    name = spec["name"]
    total = _memory_total(scenario)
    if total is not None and page_cache_of(scenario):
        total -= page_cache_of(scenario)
        if total <= 0:
            raise BudgetError(f"memory.total {scenario['memory']['total']} leaves nothing beside "
                              f"database.page_cache {scenario['database']['page_cache']}")
    db_pool = scenario.get("database", {}).get("buffer_pool")
    bp_raw, arc_raw = spec.get("buffer_pool"), _arc_raw(spec)
    has_arc = spec["fs"] in ARC_STACKS
    try:
        bp = _amount(bp_raw, total, "buffer_pool") if bp_raw is not None else None
        arc = _amount(arc_raw, total, "arc") if arc_raw is not None else None
    except BudgetError as exc:
        raise BudgetError(f"stack {name!r}: {exc}") from None
    rule = "as the stack says"
    if has_arc and total is not None and (bp is None) != (arc is None) and (bp is not None or db_pool is None):
        bp, arc, rule = _rest_of_total(name, total, bp, arc)
    if bp is None:
        bp = parse_size(db_pool) if db_pool is not None else DEFAULT_BUFFER_POOL
    if not has_arc:
        if arc is not None:
            raise BudgetError(f"stack {name!r}: 'arc' only applies to fs = \"zfs\" or \"tarn\"")
        return Given(bp, None, rule)
    if arc is None:
        arc, rule = _default_arc(spec["fs"], ram_bytes)
    return Given(bp, arc, rule)


def _rest_of_total(name: str, total: int, bp: int | None, arc: int | None) -> tuple[int, int, str]:
    """"arc = 16M" on a stack means the rest of the total is its buffer pool, and
    "buffer_pool = 75%" that the rest is its ARC."""
    if bp is None:
        bp, arc, rule = total - arc, arc, f"buffer pool = {mib(total)} total − ARC"
    else:
        arc, rule = total - bp, f"ARC = {mib(total)} total − buffer pool"
    if min(bp, arc) <= 0:
        raise BudgetError(f"stack {name!r}: the total memory {mib(total)} leaves nothing for the "
                          f"{'buffer pool' if bp <= 0 else 'ARC'}")
    return bp, arc, rule


def _default_arc(fs: str, ram_bytes: int) -> tuple[int, str]:
    if fs == "zfs":
        return ZFS_DEFAULT_ARC, "ARC: the lab's zfs-fuse default"
    return tarn_default_arc(ram_bytes), "ARC: tarn's default, a quarter of RAM"


def _arc_raw(spec: dict):
    if "arc" in spec and "arc_mb" in spec:
        raise BudgetError(f"stack {spec['name']!r}: give 'arc' or 'arc_mb', not both")
    if "arc_mb" in spec:
        return spec["arc_mb"] * MiB
    return spec.get("arc")


def _memory_total(scenario: dict) -> int | None:
    total = scenario.get("memory", {}).get("total")
    return parse_size(total) if total is not None else None


def equal_total(scenario: dict, specs: list[dict], ram_bytes: int) -> int:
    """The one total every stack gets in the "equal" variant: [memory] total, else the
    buffer pool + ARC the ZFS and tarn stacks say, which must agree."""
    total = _memory_total(scenario)
    if total is not None:
        return total
    sums = {s["name"]: as_stated(s, scenario, ram_bytes).total for s in specs if s["fs"] in ARC_STACKS}
    if not sums:
        raise BudgetError("the \"equal\" variant needs [memory] total (no ZFS or tarn stack to take it from)")
    if len(set(sums.values())) > 1:
        said = ", ".join(f"{n} {mib(v)}" for n, v in sums.items())
        raise BudgetError(f"the ZFS/tarn stacks disagree on buffer pool + ARC ({said}): give [memory] total "
                          "for the \"equal\" variant")
    return next(iter(sums.values()))


def at_equal_memory(spec: dict, scenario: dict, total: int, ram_bytes: int) -> Given:
    """The "equal" rule: a stack without an ARC gets the whole total as buffer pool; ZFS
    and tarn keep their buffer pool and get the rest as ARC."""
    stated = as_stated(spec, scenario, ram_bytes)
    pc = stated.page_cache
    if spec["fs"] not in ARC_STACKS:
        pool = total - (pc or 0)
        return Given(pool, None, f"equal memory: buffer pool = {mib(pool)}, the others' buffer pool + ARC", pc)
    if stated.total == total:
        return Given(stated.buffer_pool, stated.arc, f"equal memory: {mib(total)} as the stack splits it", pc)
    if stated.buffer_pool + (pc or 0) >= total:
        raise BudgetError(f"stack {spec['name']!r}: its buffer pool {mib(stated.buffer_pool)} leaves no ARC "
                          f"in the equal total {mib(total)}")
    return Given(stated.buffer_pool, total - stated.buffer_pool - (pc or 0),
                 f"equal memory: ARC = {mib(total)} total − buffer pool", pc)


def variants_of(scenario: dict) -> list[str]:
    variants = scenario.get("memory", {}).get("variants") or ["articles"]
    for v in variants:
        if v not in VARIANTS:
            raise BudgetError(f"memory.variants: {v!r} is not one of {', '.join(VARIANTS)}")
    if len(set(variants)) != len(variants):
        raise BudgetError(f"memory.variants lists a variant twice: {variants}")
    return list(variants)


def expand(scenario: dict, ram_bytes: int) -> list[dict]:
    """The stacks to run: each stack once per distinct memory it gets over the variants it
    takes part in (its own `variants`, else the scenario's). The first variant keeps the
    stack's name; a later one with different memory is a copy named "<name>-<variant>".
    Every stack comes back with `buffer_pool` and (ZFS, tarn) `arc_mb` resolved and
    `memory` = what it was given, in which variants, by which rule."""
    variants = variants_of(scenario)
    members = {s["name"]: _stack_variants(s, variants) for s in scenario["stacks"]}
    equal = None
    if "equal" in variants:
        equal = equal_total(scenario, [s for s in scenario["stacks"] if "equal" in members[s["name"]]], ram_bytes)
    out: list[dict] = []
    for spec in scenario["stacks"]:
        per_variant = []
        for v in members[spec["name"]]:
            given = as_stated(spec, scenario, ram_bytes) if v == "articles" else \
                at_equal_memory(spec, scenario, equal, ram_bytes)
            for entry in per_variant:
                if (entry[1].buffer_pool, entry[1].arc) == (given.buffer_pool, given.arc):
                    entry[2].append(v)
                    break
            else:
                per_variant.append((v, given, [v]))
        for i, (v, given, vs) in enumerate(per_variant):
            out.append(_resolved(spec, given, vs, rename=i > 0 and v))
    names = [s["name"] for s in out]
    for n in names:
        if names.count(n) > 1:
            raise BudgetError(f"stack name {n!r} is used twice once variants are expanded; rename a stack")
    return out


def _stack_variants(spec: dict, variants: list[str]) -> list[str]:
    own = spec.get("variants")
    if own is None:
        return variants
    for v in own:
        if v not in variants:
            raise BudgetError(f"stack {spec['name']!r}: variant {v!r} is not one of the scenario's "
                              f"memory.variants ({', '.join(variants)})")
    return [v for v in variants if v in own]


def _resolved(spec: dict, given: Given, variants: list[str], rename) -> dict:
    out = copy.deepcopy(spec)
    out.pop("arc", None)
    out.pop("variants", None)
    if rename:
        out["name"] = f"{spec['name']}-{rename}"
        out["variant_of"] = spec["name"]
    out["buffer_pool"] = mib(given.buffer_pool)
    if given.arc is not None:
        out["arc_mb"] = max(1, given.arc // MiB)
    out["memory"] = given.record(variants)
    return out


# -- datasets against caches ----------------------------------------------------------------

# Bytes on disk per row or unit, measured on this machine after `sysbench prepare` (InnoDB
# 16 KiB pages, the datadir's table files only). Rounded down: an estimate that is too small
# flags a cache as too big rather than let it pass; the measured size after the load decides.
OLTP_ROW_BYTES = 230          # sbtest row with its k index (200,000 rows: 54.5 MB)
TPCC_STOCK_ROW_BYTES = 330    # stock rows per warehouse = items
TPCC_CUSTOMER_BYTES = 1250    # per customer of a district: customer, orders, order lines, history
TPCC_ITEM_ROW_BYTES = 100     # the item table, once
TPCC_DISTRICTS = 10
OLTP = "oltp"                 # the data family of sysbench's oltp_* and select_* workloads


def family_of(workload: str) -> str:
    return TPCC_LIKE if workload == TPCC_LIKE else OLTP


def families(workloads: list[str]) -> list[str]:
    return list(dict.fromkeys(family_of(w) for w in workloads))


def estimate_dataset_bytes(family: str, params: dict) -> int:
    """The tables' size after the load, from the workload's parameters (see the constants)."""
    if family == TPCC_LIKE:
        items, customers = int(params.get("items", 100000)), int(params.get("customers", 3000))
        per_warehouse = items * TPCC_STOCK_ROW_BYTES + TPCC_DISTRICTS * customers * TPCC_CUSTOMER_BYTES
        return int(params.get("warehouses", 1)) * per_warehouse + items * TPCC_ITEM_ROW_BYTES
    return int(params.get("tables", 1)) * int(params.get("table_size", 10000)) * OLTP_ROW_BYTES


@dataclass(frozen=True)
class CacheCheck:
    """One stack against one dataset: is the dataset at least 4× its caches? (Kept as a
    dict in scenario.json and stack.json: CacheCheck(**d) reads it back.)"""
    stack: str
    family: str
    dataset_bytes: int
    cache_bytes: int
    measured: bool

    def record(self) -> dict:
        return {"stack": self.stack, "family": self.family, "dataset_bytes": self.dataset_bytes,
                "cache_bytes": self.cache_bytes, "measured": self.measured}

    @property
    def ok(self) -> bool:
        return self.dataset_bytes >= DATASET_OVER_CACHE * self.cache_bytes


def human(n: int) -> str:
    return f"{n / MiB:,.0f} MiB" if n < 10 * 1024 * MiB else f"{n / (1024 * MiB):,.1f} GiB"


def current(estimated: list[CacheCheck], measured: dict[str, list[CacheCheck]]) -> list[CacheCheck]:
    """The checks that stand: a stack measured after its load (`measured` has its name, even
    with an empty list: it passed) replaces the estimate made before."""
    return [c for c in estimated if c.stack not in measured] + [c for cs in measured.values() for c in cs]


def summary(bad: list[CacheCheck]) -> str:
    """The refusal in one sentence per dataset: 'the TPC-C-like dataset (~4,044 MiB,
    estimated before the load) is only 3.9× ext4's 1,024 MiB of cache, 3.9× tarn-meta's ...'."""
    parts = []
    for family in dict.fromkeys(c.family for c in bad):
        mine = [c for c in bad if c.family == family]
        label = "TPC-C-like" if family == TPCC_LIKE else "sysbench tables'"
        how = "measured" if mine[0].measured else "estimated before the load"
        each = ", ".join(f"{c.dataset_bytes / c.cache_bytes:.1f}× {c.stack}'s {human(c.cache_bytes)}" for c in mine)
        parts.append(f"the {label} dataset (~{human(mine[0].dataset_bytes)}, {how}) is only {each} of cache")
    return "; ".join(parts)


def check_caches(stacks: list[dict], dataset_bytes: dict[str, int], measured: bool = False) -> list[CacheCheck]:
    """Every (stack, data family) whose caches exceed dataset / 4. `stacks` are expanded
    (spec["memory"] set); `dataset_bytes` maps a family to its size."""
    bad = []
    for spec in stacks:
        cache = spec["memory"]["total_bytes"]
        for family, size in dataset_bytes.items():
            c = CacheCheck(spec["name"], family, size, cache, measured)
            if not c.ok:
                bad.append(c)
    return bad


def uncapped_caches(stacks: list[dict], scenario: dict | None = None) -> list[str]:
    """Caches left uncapped, said beside the 4× check: without database.page_cache, a
    PostgreSQL server's page cache (it reads through it), and btrfs with compression (it
    reads compressed extents through the page cache even with O_DIRECT)."""
    scenario = scenario or {}
    if page_cache_of(scenario):
        return []
    fix = "; database.page_cache caps it"
    if scenario.get("database", {}).get("engine") == "postgresql":
        return [f"{s['name']}: PostgreSQL reads through the kernel's page cache, which is not capped: its "
                "cache is shared_buffers plus free RAM" + fix for s in stacks]
    return [f"{s['name']}: btrfs reads compressed extents through the kernel's page cache even with "
            "O_DIRECT, and the page cache is not capped: its cache is the buffer pool plus free RAM" + fix
            for s in stacks if s["fs"] == "btrfs" and s.get("compression", "zstd") != "off"]

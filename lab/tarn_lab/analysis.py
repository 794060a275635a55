"""The numbers a report shows, computed from recorded results: per stack and workload the
mean TPS (min/max over repeats), the paced disk's reads, writes and I/O units per
transaction, sizes and cache hit ratios; ratios against the baseline; the headline and the
verdict.

Owns: every derived number, so the terminal, the HTML page and the comparison of two
runs show the same ones.
Promises: pure functions of the result dicts (tested on recorded runs); a number that was
not measured is None, never a guess — except I/O units of results recorded before the
pacer's counters were kept, which are a lower bound from diskstats and say so (`exact`).
Must never: read or write files, or run anything.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import mean, pstdev

from .devices import parse_size

DEFAULT_IO_UNIT = 16 * 1024


@dataclass
class Cell:
    """One stack on one workload, over its repeats."""
    stack: str
    fs: str
    workload: str
    runs: list[dict] = field(default_factory=list)

    # -- throughput and latency ---------------------------------------------------------
    @property
    def n(self) -> int:
        return len(self.runs)

    @property
    def tps_all(self) -> list[float]:
        return [r["summary"]["tps"] for r in self.runs]

    @property
    def tps(self) -> float:
        return mean(self.tps_all)

    @property
    def tps_min(self) -> float:
        return min(self.tps_all)

    @property
    def tps_max(self) -> float:
        return max(self.tps_all)

    def latency(self, key: str) -> float | None:
        values = [r["summary"]["latency_ms"].get(key) for r in self.runs]
        values = [v for v in values if v is not None]
        return mean(values) if values else None

    # -- steadiness: the per-second TPS sysbench reported -------------------------------
    @property
    def per_second_tps(self) -> list[float]:
        return [row["tps"] for r in self.runs for row in r.get("series") or []]

    @property
    def tps_cv(self) -> float | None:
        """Coefficient of variation of the per-second TPS (standard deviation over mean):
        0 for a flat line; a stack that stalls for whole seconds scores high."""
        return steadiness_of(self.per_second_tps)["tps_cv"]

    @property
    def zero_tps_seconds(self) -> int | None:
        """Seconds in which no transaction finished (over all repeats)."""
        return steadiness_of(self.per_second_tps)["zero_tps_seconds"]

    @property
    def transactions(self) -> int:
        return sum(r["summary"].get("transactions", 0) for r in self.runs)

    @property
    def seconds(self) -> float:
        return sum(max(r["summary"].get("total_time_s", 0.0), 1e-3) for r in self.runs)

    # -- the paced disk ------------------------------------------------------------------
    def data_total(self, key: str) -> int:
        return sum((r.get("device_totals") or {}).get("data", {}).get(key, 0) for r in self.runs)

    def per_txn(self, value: float | None) -> float | None:
        return None if value is None or not self.transactions else value / self.transactions

    @property
    def reads_per_txn(self) -> float | None:
        return self.per_txn(self.data_total("reads"))

    @property
    def writes_per_txn(self) -> float | None:
        return self.per_txn(self.data_total("writes"))

    @property
    def read_kib_per_txn(self) -> float | None:
        return self.per_txn(self.data_total("read_bytes") / 1024)

    @property
    def written_kib_per_txn(self) -> float | None:
        return self.per_txn(self.data_total("write_bytes") / 1024)

    def data_recorded(self, key: str) -> bool:
        """Whether any run recorded `key` for the data disk (older results lack newer keys)."""
        return any(key in ((r.get("device_totals") or {}).get("data") or {}) for r in self.runs)

    @property
    def other_device_ios(self) -> int:
        """Reads + writes of the stack's other devices (cache, log), not the host's disk."""
        return sum(v.get("reads", 0) + v.get("writes", 0) for r in self.runs
                   for k, v in (r.get("device_totals") or {}).items() if k not in ("data", "host"))

    @property
    def flushes_per_s(self) -> float | None:
        """Cache flushes the data disk completed per second (iostat's f/s); None for
        results recorded before flushes were."""
        return self.data_total("flushes") / self.seconds if self.data_recorded("flushes") else None

    @property
    def f_await_ms(self) -> float | None:
        """The mean flush's wait in ms (iostat's f_await). On the lab's loop device every
        request queued behind a flush waits with it, so a high figure stalls reads too."""
        flushes = self.data_total("flushes")
        return self.data_total("flush_ms") / flushes if flushes and self.data_recorded("flush_ms") else None

    @property
    def io_units(self) -> tuple[int, bool]:
        """(I/O units the paced disk charged over the runs, exact). Exact from the pacer's
        own counter; for older results a lower bound from diskstats (see io_units_of)."""
        total, exact = 0, True
        for r in self.runs:
            units, ok = io_units_of(r)
            total += units
            exact = exact and ok
        return total, exact

    @property
    def units_per_txn(self) -> float | None:
        return self.per_txn(self.io_units[0])

    @property
    def disk_busy(self) -> float | None:
        """Share of the paced disk's I/O budget the runs used: units charged per second of
        the pacer's own window over its IOPS (sysbench's time for older results)."""
        iops = (self.runs[0].get("settings", {}).get("disk") or {}).get("iops")
        if not iops:
            return None
        window = 0.0
        for r in self.runs:
            ns = (((r.get("pacer_delta") or {}).get("data")) or {}).get("elapsed_ns")
            window += ns / 1e9 if ns else max(r["summary"].get("total_time_s", 0.0), 1e-3)
        return self.io_units[0] / window / iops

    # -- sizes and caches ----------------------------------------------------------------
    @property
    def last(self) -> dict:
        return self.runs[-1]

    @property
    def on_disk_bytes(self) -> int | None:
        return (self.last.get("sizes") or {}).get("on_disk_bytes")

    @property
    def apparent_bytes(self) -> int | None:
        return (self.last.get("sizes") or {}).get("apparent_bytes")

    @property
    def buffer_pool_hit(self) -> float | None:
        """The database's own cache: share of page requests served without a read."""
        hits = misses = 0
        for r in self.runs:
            c = r.get("engine_cache") or {}
            if "Innodb_buffer_pool_read_requests" in c:
                misses += c.get("Innodb_buffer_pool_reads", 0)
                hits += c["Innodb_buffer_pool_read_requests"] - c.get("Innodb_buffer_pool_reads", 0)
            elif "pg_blks_hit" in c:
                hits += c["pg_blks_hit"]
                misses += c.get("pg_blks_read", 0)
        return hits / (hits + misses) if hits + misses else None

    @property
    def arc_hit(self) -> float | None:
        """The stack's own cache below the database (tarn's ARC), where it reports one."""
        hits = misses = 0
        for r in self.runs:
            arc = (((r.get("stack_engine_stats") or {}).get("delta") or {}).get("arc")) or {}
            hits += arc.get("hits", 0)
            misses += arc.get("misses", 0)
        return hits / (hits + misses) if hits + misses else None


def steadiness_of(per_second_tps: list[float]) -> dict:
    """{tps_cv, zero_tps_seconds} of per-second TPS values (None each without values)."""
    if not per_second_tps:
        return {"tps_cv": None, "zero_tps_seconds": None}
    m = mean(per_second_tps)
    return {"tps_cv": pstdev(per_second_tps) / m if m > 0 else None,
            "zero_tps_seconds": sum(1 for v in per_second_tps if v == 0)}


def steadiness(run: dict) -> dict:
    """What one run's results JSON records of its steadiness: per-second TPS CV, seconds at
    0 TPS, p99 latency, and the paced data disk's bytes, writes and I/O units per
    transaction (None where not measured)."""
    txns = run["summary"].get("transactions", 0)
    data = (run.get("device_totals") or {}).get("data", {})
    units, _ = io_units_of(run)

    def per_txn(v):
        return v / txns if txns and v is not None else None
    return {**steadiness_of([row["tps"] for row in run.get("series") or []]),
            "p99_ms": run["summary"].get("latency_ms", {}).get("p99"),
            "max_ms": run["summary"].get("latency_ms", {}).get("max"),
            "written_kib_per_txn": per_txn(data.get("write_bytes", 0) / 1024) if data else None,
            "writes_per_txn": per_txn(data.get("writes")) if data else None,
            "io_units_per_txn": per_txn(units) if units else None}


def io_unit_bytes(run: dict) -> int:
    """The paced disk's I/O size cap: the pacer charges a request of b bytes ceil(b/cap)."""
    cap = (run.get("settings", {}).get("disk") or {}).get("max_io")
    return parse_size(cap) if cap else 0


def io_units_of(run: dict) -> tuple[int, bool]:
    """I/O units one run cost the paced disk, and whether that is exact.

    The pacer counts them per request (`pacer_delta`). Results recorded before that have
    only diskstats' totals; Σ ceil(b_i/cap) ≥ max(n, ceil(Σ b_i / cap)) per direction, so
    that is returned as a lower bound."""
    delta = ((run.get("pacer_delta") or {}).get("data")) or {}
    if "io_units" in delta:
        return int(delta["io_units"]), True
    d = (run.get("device_totals") or {}).get("data", {})
    cap = io_unit_bytes(run)
    units = 0
    for count, volume in (("reads", "read_bytes"), ("writes", "write_bytes")):
        n = d.get(count, 0)
        units += max(n, math.ceil(d.get(volume, 0) / cap)) if cap else n
    return units, False


def cells_of(scenario: dict, runs: list[dict]) -> dict[tuple[str, str], Cell]:
    """(stack, workload) -> Cell, in the scenario's stack order, then workload order."""
    order = {s["name"]: i for i, s in enumerate(scenario.get("stacks", []))}
    worder = {w: i for i, w in enumerate(scenario.get("workloads", []))}
    cells: dict[tuple[str, str], Cell] = {}
    for r in sorted(runs, key=lambda r: (order.get(r["stack"], 99), worder.get(r["workload"], 99),
                                         r.get("repeat", 1))):
        key = (r["stack"], r["workload"])
        cells.setdefault(key, Cell(r["stack"], r.get("fs", ""), r["workload"])).runs.append(r)
    return cells


def stacks_of(cells: dict) -> list[str]:
    return list(dict.fromkeys(s for s, _ in cells))


def workloads_of(scenario: dict, cells: dict) -> list[str]:
    return [w for w in scenario.get("workloads", []) if any(cw == w for _, cw in cells)]


def baseline_of(scenario: dict, cells: dict) -> str | None:
    """The scenario's `baseline`, else its first stack that has results."""
    wanted = scenario.get("baseline")
    stacks = stacks_of(cells)
    if wanted:
        return wanted if wanted in stacks else None
    return stacks[0] if stacks else None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def tps_ratio_overall(cells: dict, stack: str, against: str, workloads: list[str]) -> float | None:
    """Geometric mean over the workloads both ran of stack's TPS / against's TPS."""
    return geomean([cells[(stack, w)].tps / cells[(against, w)].tps for w in workloads
                    if (stack, w) in cells and (against, w) in cells and cells[(against, w)].tps])


@dataclass
class Row:
    """One line of the ratio table: a stack on a workload against the baseline."""
    cell: Cell
    base: Cell | None

    def vs(self, get) -> float | None:
        return ratio(get(self.cell), get(self.base)) if self.base else None


def ratio_table_rows(scenario: dict, cells: dict, workload: str) -> list[Row]:
    base_name = baseline_of(scenario, cells)
    base = cells.get((base_name, workload)) if base_name else None
    return [Row(c, base) for (s, w), c in cells.items() if w == workload]


def own_baseline_rows(scenario: dict, cells: dict) -> list[Row]:
    """Stacks that name their own `baseline` (beside the scenario's), against it."""
    rows = []
    for spec in scenario.get("stacks", []):
        own = spec.get("baseline")
        if not own:
            continue
        for w in workloads_of(scenario, cells):
            if (spec["name"], w) in cells and (own, w) in cells:
                rows.append(Row(cells[(spec["name"], w)], cells[(own, w)]))
    return rows


# -- the headline -------------------------------------------------------------------------

def subject_of(scenario: dict, cells: dict) -> str | None:
    """The stack the report is about: the best tarn stack (geometric mean of TPS over the
    baseline); without one, the best stack that is not the baseline."""
    base = baseline_of(scenario, cells)
    workloads = workloads_of(scenario, cells)
    stacks = [s for s in stacks_of(cells) if s != base]
    tarn = [s for s in stacks if _fs(cells, s) == "tarn"]
    pool = tarn or stacks
    if not pool or base is None:
        return None
    return max(pool, key=lambda s: tps_ratio_overall(cells, s, base, workloads) or 0.0)


def rival_of(scenario: dict, cells: dict, subject: str) -> str | None:
    """The strongest other stack to name beside the baseline: the fastest stack that is
    neither the subject, nor the baseline, nor of the subject's kind."""
    base = baseline_of(scenario, cells)
    workloads = workloads_of(scenario, cells)
    kind = _fs(cells, subject)
    others = [s for s in stacks_of(cells) if s not in (subject, base) and _fs(cells, s) != kind]
    if not others or base is None:
        return None
    return max(others, key=lambda s: tps_ratio_overall(cells, s, base, workloads) or 0.0)


def _fs(cells: dict, stack: str) -> str:
    return next(c.fs for (s, _), c in cells.items() if s == stack)


def times(x: float) -> str:
    return f"{x:.2f}×"


def size_ratio(cells: dict, stack: str, against: str, workloads: list[str]) -> float | None:
    """Size on disk at the end of the last workload both ran."""
    for w in reversed(workloads):
        if (stack, w) in cells and (against, w) in cells:
            return ratio(cells[(stack, w)].on_disk_bytes, cells[(against, w)].on_disk_bytes)
    return None


def headline(scenario: dict, cells: dict) -> str | None:
    """One line with the answer, e.g. "tarn 4.96× ext4, 2.42× zfs on oltp_read_write;
    0.58× ext4's size on disk". None when there is nothing to compare."""
    base = baseline_of(scenario, cells)
    subject = subject_of(scenario, cells)
    workloads = workloads_of(scenario, cells)
    if subject is None or base is None:
        return None
    if len(workloads) == 1:
        w = workloads[0]
        if (subject, w) not in cells or (base, w) not in cells:
            return None
        parts = [f"{times(cells[(subject, w)].tps / cells[(base, w)].tps)} {base}"]
        rival = rival_of(scenario, cells, subject)
        if rival and (rival, w) in cells:
            parts.append(f"{times(cells[(subject, w)].tps / cells[(rival, w)].tps)} {rival}")
        line = f"{subject} {', '.join(parts)} on {w}"
    else:
        each = [f"{times(cells[(subject, w)].tps / cells[(base, w)].tps)} on {w}"
                for w in workloads if (subject, w) in cells and (base, w) in cells]
        if not each:
            return None
        line = f"{subject} vs {base}: {', '.join(each)}"
    size = size_ratio(cells, subject, base, workloads)
    if size is not None:
        line += f"; {times(size)} {base}'s size on disk"
    return line


# -- the verdict -------------------------------------------------------------------------

def pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def num(x: float | None, digits: int = 2) -> str:
    return "—" if x is None else f"{x:,.{digits}f}"


def _reads_clause(win: Cell, other: Cell) -> str:
    """How often each went to the disk for a read, per transaction."""
    r_w, r_o = win.reads_per_txn, other.reads_per_txn
    if r_w is None or r_o is None:
        return ""
    if r_w < 0.005:  # shows as 0.00: say it in words
        return f"{win.stack} did not read from the disk at all ({other.stack}: {num(r_o)} reads per transaction)"
    return f"{win.stack} read from the disk {num(r_w)} times per transaction ({other.stack} {num(r_o)})"


def _why(scenario: dict, win: Cell, other: Cell) -> str:
    """Why `win` beat `other` on a paced disk: what a transaction cost the disk, where
    reads were served, and what each transaction wrote."""
    iops = scenario.get("disk", {}).get("iops")
    unit = io_unit_bytes(win.last)
    parts = []
    units_w, units_o = win.units_per_txn, other.units_per_txn
    if iops and units_w is not None and units_o is not None:
        each = f", each of up to {unit // 1024} KiB" if unit else ""
        s = (f"The paced disk allows {iops} I/Os a second{each}, so what a transaction costs the disk "
             f"bounds TPS: {win.stack} needed {num(units_w)} I/O units per transaction, {other.stack} {num(units_o)}")
        busy_w, busy_o = win.disk_busy, other.disk_busy
        if busy_w is not None and busy_o is not None:
            s += f" (they used {pct(busy_w)} and {pct(busy_o)} of the disk's budget)"
        parts.append(s + ".")
    s = _reads_clause(win, other)
    caches = []
    if win.arc_hit is not None:
        caches.append(f"its ARC answered {pct(win.arc_hit)} of the reads that reached it")
    bp_w, bp_o = win.buffer_pool_hit, other.buffer_pool_hit
    if bp_w is not None and bp_o is not None:
        caches.append(f"the database's buffer pool hit {pct(bp_w)} of page requests on {win.stack}, "
                      f"{pct(bp_o)} on {other.stack}")
    if caches:
        s += " — " + "; ".join(caches) + " —"
    s += (f" and wrote {num(win.written_kib_per_txn, 1)} KiB per transaction "
          f"({other.stack} {num(other.written_kib_per_txn, 1)} KiB).")
    parts.append(s.strip())
    return " ".join(parts)


def verdict(scenario: dict, cells: dict) -> str | None:
    """One paragraph: which stack wins, by how much, and why."""
    workloads = workloads_of(scenario, cells)
    base = baseline_of(scenario, cells)
    if not workloads or base is None:
        return None
    sentences = []
    for i, w in enumerate(workloads):
        ranked = sorted((c for (s, cw), c in cells.items() if cw == w), key=lambda c: c.tps, reverse=True)
        if len(ranked) < 2:
            continue
        win = ranked[0]
        other = cells.get((base, w)) if win.stack != base else ranked[1]
        if other is None:
            other = ranked[1]
        runner_up = ranked[1]
        s = (f"On {w}, {win.stack} wins with {num(win.tps, 1)} TPS, {times(win.tps / other.tps)} "
             f"{other.stack} ({num(other.tps, 1)} TPS)")
        if runner_up.stack != other.stack:
            s += f" and {times(win.tps / runner_up.tps)} {runner_up.stack}, the next best"
        s += ". "
        if i == 0:  # the first workload gets the explanation; the others their numbers
            s += _why(scenario, win, other)
        sentences.append(s.strip())
    if not sentences:
        return None
    subject = subject_of(scenario, cells)
    size = size_ratio(cells, subject, base, workloads) if subject else None
    if size is not None:
        sentences.append(f"{subject} keeps the data in {times(size)} the disk space {base} needs.")
    repeated = max(c.n for c in cells.values())
    if repeated > 1:
        sentences.append(f"Each run was repeated {repeated} times; TPS is the mean, the charts show min–max.")
    return " ".join(sentences)


# -- memory: what each stack was given, and what it used -------------------------------------

MiB = 1 << 20
ARC_FILESYSTEMS = ("tarn", "zfs")


@dataclass(frozen=True)
class Memory:
    """What one stack was given (bytes; arc None on a stack without one) and the peak RSS
    of each process holding its caches over the runs (role -> bytes; empty if unsampled)."""
    buffer_pool: int | None
    arc: int | None
    primarycache: str | None = None
    buffer_pool_actual: int | None = None
    rss_max: dict = field(default_factory=dict)
    # The server's kernel page cache, where the lab capped it (database.page_cache).
    page_cache: int | None = None

    @property
    def total(self) -> int | None:
        return None if self.buffer_pool is None else self.buffer_pool + (self.arc or 0)

    @property
    def given_in_all(self) -> int | None:
        """Everything the stack was given: `total` and the capped page cache."""
        return None if self.total is None else self.total + (self.page_cache or 0)

    @property
    def server_rss(self) -> int | None:
        """The database server's peak RSS (mariadbd or postgres)."""
        return self.rss_max.get("mariadbd", self.rss_max.get("postgres"))

    def split(self) -> str:
        """'112/16 MiB (metadata)' — buffer pool / ARC, as a DBA writes a split."""
        if self.buffer_pool is None:
            return "?"
        if self.arc is None:
            return f"{self.buffer_pool // MiB} MiB buffer pool"
        text = f"{self.buffer_pool // MiB}/{self.arc // MiB} MiB"
        return text + (f" ({self.primarycache})" if self.primarycache and self.primarycache != "all" else "")


def memory_of(cell: Cell) -> Memory:
    """From the results: the memory recorded by the run (spec["memory"] and RSS), or for
    results recorded before that, the server's buffer pool setting and the stack's arc_mb."""
    run = cell.last
    settings = run.get("settings") or {}
    spec = settings.get("spec") or {}
    given = run.get("memory") or spec.get("memory") or {}
    bp = given.get("buffer_pool_bytes")
    if bp is None:
        raw = (settings.get("mariadb") or {}).get("innodb_buffer_pool_size")
        bp = parse_size(raw) if raw else None
    arc = given.get("arc_bytes") if "arc_bytes" in given else (spec["arc_mb"] * MiB if spec.get("arc_mb") else None)
    props = ((settings.get("stack") or {}).get("properties")) or {}
    rss: dict = {}
    for r in cell.runs:
        for role, s in ((r.get("memory") or {}).get("rss") or {}).items():
            if "max_bytes" in s:
                rss[role] = max(rss.get(role, 0), s["max_bytes"])
    return Memory(bp, arc, spec.get("primarycache", props.get("primarycache")),
                  given.get("buffer_pool_actual_bytes"), rss, given.get("page_cache_bytes"))


def has_rss(cells: dict) -> bool:
    return any(memory_of(c).rss_max for c in cells.values())


# -- variants: the articles' setup and equal memory ---------------------------------------------

def variant_label(variant: str | None, scenario: dict) -> str:
    if variant == "equal":
        totals = {s["memory"]["total_bytes"] for s in scenario.get("stacks", [])
                  if "equal" in (s.get("memory") or {}).get("variants", [])}
        each = f" ({totals.pop() // MiB} MiB each)" if len(totals) == 1 else ""
        return f"equal memory{each}"
    if variant == "articles":
        return "the articles' setup"
    return variant or ""


def variant_views(scenario: dict, cells: dict) -> list[tuple[str | None, dict, dict]]:
    """(variant, the scenario seen from it, its cells): one view per memory variant when a
    scenario ran several, each with its own stacks and baseline (a baseline copied for the
    variant, e.g. "ext4-equal", stands in for "ext4"); otherwise one view of everything."""
    variants = scenario.get("variants") or ["articles"]
    if len(variants) < 2:
        return [(None, scenario, cells)]
    views = []
    for v in variants:
        specs = [s for s in scenario.get("stacks", []) if v in (s.get("memory") or {}).get("variants", variants)]
        names = {s["name"] for s in specs}
        base = scenario.get("baseline")
        if base not in names:
            base = next((s["name"] for s in specs if s.get("variant_of") == base), None)
        view = {**scenario, "stacks": specs, "variants": [v]}
        if base:
            view["baseline"] = base
        else:
            view.pop("baseline", None)
        views.append((v, view, {k: c for k, c in cells.items() if k[0] in names}))
    return views


# -- the memory sweep: which split of one budget wins ------------------------------------------

# Single runs closer than this are a tie: the lab's own run-to-run noise on a shared machine.
TIE = 0.05

# tarn's default split of one memory budget (README, "Memory"): 1/4 to the buffer pool, 3/4
# to the ARC, no property tuned — the ARC holds pages compressed (zstd-1: about twice as many
# per byte as the pool). Until 2026-12-07 it was 7/8 to the pool; the memory sweep with
# repeats found 1/4 better on both workloads (docs/design/memory.md). The memory scenario runs
# it beside the other splits, and the advice says how it did against the best (issue #17).
TARN_DEFAULT_ARC_SHARE = 3 / 4


@dataclass
class Sweep:
    """One workload's splits of one total between buffer pool and ARC, for one kind of
    stack (tarn, or ZFS), beside stacks given the whole total as buffer pool."""
    workload: str
    fs: str
    total: int
    points: list[Cell]          # the splits, largest buffer pool first
    references: list[Cell]      # stacks without an ARC, all of the total as buffer pool

    @property
    def ranked(self) -> list[Cell]:
        return sorted(self.points, key=lambda c: c.tps, reverse=True)

    @property
    def best(self) -> Cell:
        return self.ranked[0]

    def tied_with_best(self) -> list[Cell]:
        """The other splits that cannot be told from the best: within TIE of its TPS, or
        with repeats, a max that reaches the best's min."""
        best = self.best
        out = []
        for c in self.ranked[1:]:
            if best.n > 1 and c.n > 1:
                if c.tps_max >= best.tps_min:
                    out.append(c)
            elif c.tps >= best.tps * (1 - TIE):
                out.append(c)
        return out

    @property
    def default(self) -> Cell | None:
        """The split at tarn's default (TARN_DEFAULT_ARC_SHARE of the total as ARC, no
        primarycache set), if the sweep ran it."""
        if self.fs != "tarn":
            return None
        for c in self.points:
            m = memory_of(c)
            if m.primarycache in (None, "all") and abs(m.arc - self.total * TARN_DEFAULT_ARC_SHARE) < MiB:
                return c
        return None

    def default_verdict(self) -> str:
        """One sentence on tarn's default split against the sweep's best; empty if not run."""
        d = self.default
        if d is None:
            return ""
        split = memory_of(d).split()
        if d is self.best:
            return f"tarn's default split ({split}, no property tuned) is the best."
        if d in self.tied_with_best():
            return f"tarn's default split ({split}, no property tuned) ties it: {num(d.tps, 1)} TPS."
        return (f"tarn's default split ({split}, no property tuned) did {num(d.tps, 1)} TPS, "
                f"{times(d.tps / self.best.tps)} the best.")

    def advice(self) -> str:
        """One sentence: how to split the budget for this workload, and what it bought."""
        best, mem = self.best, memory_of(self.best)
        what = f"{self.fs}'s ARC" + (" with primarycache=metadata" if mem.primarycache == "metadata" else "")
        s = (f"For {_label(self.workload)} with {self.total // MiB} MiB in all, give {mem.buffer_pool // MiB} MiB "
             f"to the buffer pool and {mem.arc // MiB} MiB to {what}: {num(best.tps, 1)} TPS, "
             f"{num(best.reads_per_txn)} disk reads per transaction")
        ref = max(self.references, key=lambda c: c.tps, default=None)
        if ref is not None and ref.tps:
            s += f", {times(best.tps / ref.tps)} {ref.stack} with all {self.total // MiB} MiB as buffer pool"
        ties = self.tied_with_best()
        if ties:
            s += ("; " + ", ".join(f"{memory_of(c).split()} ({num(c.tps, 1)} TPS)" for c in ties)
                  + f" {'is' if len(ties) == 1 else 'are'} within the noise of it, a tie")
        elif len(self.ranked) > 1:
            nxt = self.ranked[1]
            s += f"; the next best split, {memory_of(nxt).split()}, did {num(nxt.tps, 1)} TPS"
        verdict = self.default_verdict()
        return s + "." + (" " + verdict if verdict else "")


def _label(workload: str) -> str:
    return "TPC-C-like" if workload == "tpcc_like" else workload


def sweeps(scenario: dict, cells: dict) -> list[Sweep]:
    """Every (workload, kind of stack, total) that ran at least two different splits of the
    same total — the memory scenario's question; none for scenarios that sweep nothing."""
    out = []
    for w in workloads_of(scenario, cells):
        mine = [c for (s, cw), c in cells.items() if cw == w]
        for fs in ARC_FILESYSTEMS:
            by_total: dict[int, list[Cell]] = {}
            for c in mine:
                m = memory_of(c)
                if c.fs == fs and m.arc is not None and m.total:
                    by_total.setdefault(m.total, []).append(c)
            for total, points in by_total.items():
                splits = {(memory_of(c).buffer_pool, memory_of(c).arc, memory_of(c).primarycache) for c in points}
                if len(splits) < 2:
                    continue
                refs = [c for c in mine if memory_of(c).arc is None and memory_of(c).buffer_pool == total]
                points.sort(key=lambda c: memory_of(c).buffer_pool, reverse=True)
                out.append(Sweep(w, fs, total, points, refs))
    return out

"""Scenario files: loading, validating and sizing (quick by default, medium or full by flag).

A scenario is TOML: [disk] (the emulated cloud disk), [fast_disk] (the unthrottled local
device), [database], [workload] (threads, duration, warmup seconds, sizes, `scrub`: the
second half of each measured run with a scrub running, see scrubload; `restart`: seconds of
a run after the pool's export and import, `long`: seconds of a long run after it, see
cachephases),
`workloads = [...]`, [[stacks]], optional `baseline` (a stack the report divides every
stack's results by, the first stack if absent; a stack's own `baseline` adds one more for
it), optional `repeat` (runs per stack and workload, for min/max), optional [memory]
(`total`, `variants = ["articles", "equal"]`: see budget), `load` ("prepare" on each
stack, or "cached": a tarball per dataset made once, restored onto each stack: see
datasets), `cache_check` ("refuse", or "warn" where being disk-bound is not the question),
and [medium] / [full] which override any of those sections for that size.
Owns: the schema and its error messages, the size classes, and running the memory
expansion (budget) and the 4× check of every stack's caches against the dataset.
Promises: a bad file raises ScenarioError naming the file and the offending key; at medium
and full a stack whose caches exceed dataset/4 is refused (unless `cache_check = "warn"`),
at quick it is a warning kept in scenario["warnings"] for the report.
Must never: start anything; this module only reads files.
"""
from __future__ import annotations

import copy
import os
import tomllib
from pathlib import Path

from . import budget
from .budget import BudgetError
from .devices import parse_size
from .stacks import FILESYSTEMS, FUSE_TRANSPORTS
from .sysbench import WORKLOADS


class ScenarioError(ValueError):
    pass


SIZE = "size"          # "16K", "2G" or an int of bytes
SIZE_OR_SHARE = "size or share"   # a size, or a share of memory.total such as "75%"
INT, STR, BOOL, TABLE = int, str, bool, dict
SIZE_CLASSES = ("quick", "medium", "full")
LOADS = ("prepare", "cached")
# How a stack gets its data: sysbench prepare on it; prepare, then tar and restore on it (the
# btrfs article's method); or the dataset cache's tarball restored onto it (datasets).
DATASET_METHODS = ("prepare", "tar", "cached")
CACHE_CHECKS = ("refuse", "warn")

SCHEMA = {
    "name": STR, "title": STR, "description": STR, "article": STR, "baseline": STR,
    "workloads": list, "stacks": list, "medium": TABLE, "full": TABLE, "repeat": INT,
    "load": STR, "cache_check": STR,
    "memory": {"total": SIZE, "variants": list},
    "disk": {"size": SIZE, "iops": INT, "bandwidth": SIZE, "max_io": SIZE, "latency_us": INT},
    "fast_disk": {"size": SIZE},
    "database": {"engine": STR, "buffer_pool": SIZE, "page_cache": SIZE, "settings": TABLE},
    "workload": {"threads": INT, "duration": INT, "tables": INT, "table_size": INT,
                 "warehouses": INT, "items": INT, "customers": INT, "random_points": INT,
                 "warmup": INT, "scrub": BOOL, "restart": INT, "long": INT,
                 "incremental": INT},
}
STACK_SCHEMA = {
    "name": STR, "fs": STR, "compression": STR, "recordsize": STR, "arc_mb": INT,
    "l2arc": BOOL, "slog": BOOL, "logbias": STR, "primarycache": STR, "dataset": STR,
    "mariadb": TABLE, "postgres": TABLE, "properties": TABLE, "buffer_pool": SIZE_OR_SHARE, "notes": STR,
    "external_journal": BOOL, "baseline": STR, "arc": SIZE_OR_SHARE, "variants": list,
    "snapshot_every": INT, "snapshot_keep": INT, "move": BOOL, "transport": STR,
}
# Dataset properties given as top-level stack keys, on ZFS and tarn alike, and their values.
PROPERTY_KEYS = {"logbias": ("latency", "throughput"), "primarycache": ("all", "metadata", "none")}
REQUIRED = ("name", "workloads", "stacks", "disk")
OVERRIDABLE = ("disk", "fast_disk", "database", "workload", "workloads", "stacks", "repeat", "memory", "load",
               "cache_check")
COMPRESSION = {"btrfs": {"zstd", "lzo", "zlib", "off"},
               "zfs": {"lz4", "lzjb", "gzip", "zle", "zstd", "off", "on"}}


SCENARIO_DIR = Path(__file__).parent / "scenarios"


def available() -> dict[str, Path]:
    return {p.stem: p for p in sorted(SCENARIO_DIR.glob("*.toml"))}


def load(name_or_path: str, size: str = "quick", ram_bytes: int | None = None) -> dict:
    """A shipped scenario by name, or a .toml path; validated, sized quick, medium or full."""
    path = _path(name_or_path)
    return validate(raw(name_or_path), origin=path.name, size=size, ram_bytes=ram_bytes)


def _path(name_or_path: str) -> Path:
    path = Path(name_or_path)
    if not path.suffix:
        shipped = available()
        if name_or_path not in shipped:
            raise ScenarioError(f"unknown scenario '{name_or_path}'; shipped: {', '.join(sorted(shipped))}")
        path = shipped[name_or_path]
    return path


def raw(name_or_path: str) -> dict:
    """The scenario file as written (not validated, not sized)."""
    path = _path(name_or_path)
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{path.name}: not valid TOML: {exc}") from None


def machine_ram() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def sizes_of(raw: dict) -> list[str]:
    """The size classes a scenario offers: quick always, medium and full if it has them."""
    return ["quick"] + [s for s in SIZE_CLASSES[1:] if s in raw]


def validate(raw: dict, origin: str = "<scenario>", size: str = "quick", ram_bytes: int | None = None) -> dict:
    if size not in SIZE_CLASSES:
        raise ScenarioError(f"{origin}: size {size!r} is not one of {', '.join(SIZE_CLASSES)}")
    _check_table(raw, SCHEMA, origin, "")
    for key in REQUIRED:
        if key not in raw:
            raise ScenarioError(f"{origin}: missing required key '{key}'")
    for cls in SIZE_CLASSES[1:]:
        if cls in raw:
            for key in raw[cls]:
                if key not in OVERRIDABLE:
                    raise ScenarioError(f"{origin}: unknown key '{cls}.{key}' (allowed: {', '.join(OVERRIDABLE)})")
            _check_table({k: v for k, v in raw[cls].items()}, SCHEMA, origin, f"{cls}.")
    if size != "quick" and size not in raw:
        raise ScenarioError(f"{origin}: has no [{size}] sizes (it offers: {', '.join(sizes_of(raw))})")
    scenario = copy.deepcopy(raw)
    if size != "quick":
        for key, value in raw[size].items():
            if isinstance(value, dict) and isinstance(scenario.get(key), dict):
                scenario[key] = {**scenario[key], **value}
            else:
                scenario[key] = copy.deepcopy(value)
    for cls in SIZE_CLASSES[1:]:
        scenario.pop(cls, None)
    scenario["size_class"] = size
    _check_workloads(scenario["workloads"], origin)
    if scenario.get("repeat", 1) < 1:
        raise ScenarioError(f"{origin}: 'repeat' must be at least 1, got {scenario['repeat']!r}")
    _check_choice(scenario, "load", LOADS, origin)
    _check_choice(scenario, "cache_check", CACHE_CHECKS, origin)
    _check_engine(scenario, origin)
    _check_stacks(scenario["stacks"], origin)
    try:
        scenario["variants"] = budget.variants_of(scenario)
        scenario["stacks"] = budget.expand(scenario, ram_bytes or machine_ram())
    except BudgetError as exc:
        raise ScenarioError(f"{origin}: {exc}") from None
    _check_baselines(scenario, origin)
    scenario.setdefault("fast_disk", {"size": "1G"})
    scenario.setdefault("database", {})
    scenario.setdefault("workload", {})
    scenario["warnings"] = _check_caches(scenario, origin)
    return scenario


def _check_choice(scenario: dict, key: str, allowed: tuple, origin: str) -> None:
    if key in scenario and scenario[key] not in allowed:
        raise ScenarioError(f"{origin}: '{key}' = {scenario[key]!r} is not one of {', '.join(allowed)}")


def dataset_estimates(scenario: dict) -> dict[str, int]:
    """Each data family's estimated size once loaded (budget.estimate_dataset_bytes)."""
    params = scenario.get("workload", {})
    return {f: budget.estimate_dataset_bytes(f, params) for f in budget.families(scenario["workloads"])}


def _check_caches(scenario: dict, origin: str) -> list[str]:
    """The 4× rule before anything is built: refused at medium and full, unless the
    scenario says cache_check = "warn"; otherwise kept for the report (cache_checks), with
    the caches the lab cannot cap (the returned warnings)."""
    bad = budget.check_caches(scenario["stacks"], dataset_estimates(scenario))
    if bad and scenario["size_class"] != "quick" and scenario.get("cache_check", "refuse") == "refuse":
        raise ScenarioError(f"{origin}: at {scenario['size_class']} sizes every dataset must be at least "
                            f"{budget.DATASET_OVER_CACHE}× each stack's buffer pool + ARC + page cache, but {budget.summary(bad)} "
                            "(shrink the caches or grow the dataset; cache_check = \"warn\" runs it anyway)")
    scenario["cache_checks"] = [c.record() for c in bad]
    return budget.uncapped_caches(scenario["stacks"], scenario)


def cache_warning(checks: list[budget.CacheCheck]) -> str | None:
    """The 4× rule's failures in one loud sentence, or None."""
    if not checks:
        return None
    return (f"caches too big for the data: {budget.summary(checks)} — the rule is ≥ {budget.DATASET_OVER_CACHE}×, "
            "so these runs measure the caches more than the disk")


def _check_table(table: dict, schema: dict, origin: str, prefix: str) -> None:
    if not isinstance(table, dict):
        raise ScenarioError(f"{origin}: '{prefix.rstrip('.')}' must be a table")
    for key, value in table.items():
        where = f"{prefix}{key}"
        if key not in schema:
            raise ScenarioError(f"{origin}: unknown key '{where}' (allowed: {', '.join(sorted(schema))})")
        _check_value(value, schema[key], origin, where)


def _check_value(value, kind, origin: str, where: str) -> None:
    if isinstance(kind, dict):
        _check_table(value, kind, origin, where + ".")
    elif kind is SIZE_OR_SHARE:
        try:
            ok = budget.is_size_or_share(value)
        except BudgetError as exc:
            raise ScenarioError(f"{origin}: '{where}': {exc}") from None
        if not ok:
            raise ScenarioError(f"{origin}: '{where}' must be a size like \"96M\" or a share like \"75%\", "
                                f"got {value!r}")
    elif kind is SIZE:
        try:
            if isinstance(value, bool):
                raise ValueError
            parse_size(value)
        except (ValueError, TypeError):
            raise ScenarioError(f"{origin}: '{where}' must be a size like \"16K\" or \"2G\", got {value!r}") from None
    elif kind is INT and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
        raise ScenarioError(f"{origin}: '{where}' must be a non-negative integer, got {value!r}")
    elif kind in (STR, BOOL, list, TABLE) and not isinstance(value, kind):
        raise ScenarioError(f"{origin}: '{where}' must be a {kind.__name__}, got {value!r}")


def _check_workloads(workloads: list, origin: str) -> None:
    if not workloads:
        raise ScenarioError(f"{origin}: 'workloads' is empty")
    for i, w in enumerate(workloads):
        if w not in WORKLOADS:
            raise ScenarioError(f"{origin}: 'workloads[{i}]' = {w!r} is not one of {', '.join(WORKLOADS)}")


def _check_stacks(stacks: list, origin: str) -> None:
    if not stacks:
        raise ScenarioError(f"{origin}: 'stacks' is empty")
    names = set()
    for i, stack in enumerate(stacks):
        where = f"stacks[{i}]"
        _check_table(stack, STACK_SCHEMA, origin, where + ".")
        for key in ("name", "fs"):
            if key not in stack:
                raise ScenarioError(f"{origin}: missing required key '{where}.{key}'")
        if stack["fs"] not in FILESYSTEMS:
            raise ScenarioError(f"{origin}: '{where}.fs' = {stack['fs']!r} is not one of {', '.join(FILESYSTEMS)}")
        if stack["name"] in names:
            raise ScenarioError(f"{origin}: '{where}.name' = {stack['name']!r} is used twice")
        names.add(stack["name"])
        comp = stack.get("compression")
        if comp is not None and comp not in COMPRESSION.get(stack["fs"], {comp}):
            raise ScenarioError(f"{origin}: '{where}.compression' = {comp!r} is not one of "
                                f"{', '.join(sorted(COMPRESSION[stack['fs']]))} for {stack['fs']}")
        if stack.get("dataset", "prepare") not in DATASET_METHODS:
            raise ScenarioError(f"{origin}: '{where}.dataset' must be one of "
                                f"{', '.join(repr(m) for m in DATASET_METHODS)}")
        if "recordsize" in stack and stack["fs"] != "zfs":
            raise ScenarioError(f"{origin}: '{where}.recordsize' only applies to fs = \"zfs\"")
        if "l2arc" in stack and stack["fs"] not in ("zfs", "tarn"):
            raise ScenarioError(f"{origin}: '{where}.l2arc' only applies to fs = \"zfs\" or \"tarn\"")
        if "slog" in stack and stack["fs"] not in ("zfs", "tarn"):
            raise ScenarioError(f"{origin}: '{where}.slog' only applies to fs = \"zfs\" or \"tarn\"")
        if "transport" in stack:
            if stack["fs"] != "tarn":
                raise ScenarioError(f"{origin}: '{where}.transport' only applies to fs = \"tarn\"")
            if stack["transport"] not in FUSE_TRANSPORTS:
                raise ScenarioError(f"{origin}: '{where}.transport' = {stack['transport']!r} is not one of "
                                    f"{', '.join(FUSE_TRANSPORTS)}")
        if "properties" in stack and stack["fs"] != "tarn":
            raise ScenarioError(f"{origin}: '{where}.properties' only applies to fs = \"tarn\"")
        if stack["fs"] == "tarn" and "compression" in stack:
            # _tarn reads only properties; a top-level compression would be silently ignored.
            raise ScenarioError(f"{origin}: '{where}.compression' on fs = \"tarn\" goes in properties, "
                                f"e.g. properties = {{ compression = {stack['compression']!r} }}")
        for key in ("arc_mb", "arc"):
            if key in stack and stack["fs"] not in ("zfs", "tarn"):
                raise ScenarioError(f"{origin}: '{where}.{key}' only applies to fs = \"zfs\" or \"tarn\"")
        _check_snapshot_keys(stack, where, origin)
        if "external_journal" in stack and stack["fs"] != "ext4":
            raise ScenarioError(f"{origin}: '{where}.external_journal' only applies to fs = \"ext4\"")
        for key, allowed in PROPERTY_KEYS.items():
            if key not in stack:
                continue
            if stack["fs"] not in ("zfs", "tarn"):
                raise ScenarioError(f"{origin}: '{where}.{key}' only applies to fs = \"zfs\" or \"tarn\"")
            if stack[key] not in allowed:
                raise ScenarioError(f"{origin}: '{where}.{key}' = {stack[key]!r} is not one of {', '.join(allowed)}")
            other = stack.get("properties", {}).get(key)
            if other is not None and other != stack[key]:
                raise ScenarioError(f"{origin}: '{where}.{key}' = {stack[key]!r} and "
                                    f"'{where}.properties.{key}' = {other!r} disagree; give it once")


def _check_snapshot_keys(stack: dict, where: str, origin: str) -> None:
    """The snapshots scenario's stack keys: snapshots are tarn's; a move is tarn's send |
    recv or ext4's mariadb-backup and tar."""
    for key in ("snapshot_every", "snapshot_keep"):
        if key in stack and stack["fs"] != "tarn":
            raise ScenarioError(f"{origin}: '{where}.{key}' only applies to fs = \"tarn\"")
    if stack.get("snapshot_every") == 0 or stack.get("snapshot_keep") == 0:
        raise ScenarioError(f"{origin}: '{where}.snapshot_every' and '{where}.snapshot_keep' must be at least 1")
    if "snapshot_keep" in stack and "snapshot_every" not in stack:
        raise ScenarioError(f"{origin}: '{where}.snapshot_keep' needs '{where}.snapshot_every' (how often)")
    if stack.get("move") and stack["fs"] not in ("tarn", "ext4"):
        raise ScenarioError(f"{origin}: '{where}.move' only applies to fs = \"tarn\" (send | recv) or "
                            f"\"ext4\" (mariadb-backup, tar)")


def _check_baselines(scenario: dict, origin: str) -> None:
    """`baseline` (scenario: every stack's; stack: one more for that stack) names a stack
    of the same scenario, which the report divides by."""
    names = [s["name"] for s in scenario["stacks"]]
    if "baseline" in scenario and scenario["baseline"] not in names:
        raise ScenarioError(f"{origin}: 'baseline' = {scenario['baseline']!r} is not a stack of this "
                            f"scenario ({', '.join(names)})")
    for i, stack in enumerate(scenario["stacks"]):
        base = stack.get("baseline")
        if base is not None and (base not in names or base == stack["name"]):
            raise ScenarioError(f"{origin}: 'stacks[{i}].baseline' = {base!r} is not another stack of "
                                f"this scenario ({', '.join(n for n in names if n != stack['name'])})")


DATABASES = ("mariadb", "postgresql")


def _check_engine(scenario: dict, origin: str) -> None:
    engine = scenario.get("database", {}).get("engine", "mariadb")
    if engine not in DATABASES:
        raise ScenarioError(f"{origin}: 'database.engine' = {engine!r} is not one of {', '.join(DATABASES)}")
    cached = scenario.get("load") == "cached" or any(s.get("dataset") == "cached" for s in scenario["stacks"])
    if engine == "postgresql" and cached:
        raise ScenarioError(f"{origin}: the dataset cache (load = \"cached\") restores MariaDB datadirs; "
                            "use load = \"prepare\" with database.engine = \"postgresql\"")
    if engine == "postgresql" and "tpcc_like" in scenario["workloads"]:
        raise ScenarioError(f"{origin}: the TPC-C-like workload is written for MariaDB; "
                            "use the sysbench oltp workloads with database.engine = \"postgresql\"")

"""Scenario files: loading, validating and sizing (quick by default, full by flag).

A scenario is TOML: [disk] (the emulated cloud disk), [fast_disk] (the unthrottled local
device), [database], [workload] (threads, duration, warmup seconds, sizes),
`workloads = [...]`, [[stacks]], optional `baseline` (a stack the report divides every
stack's results by, the first stack if absent; a stack's own `baseline` adds one more for
it), optional `repeat` (runs per stack and workload, for min/max), and [full] which
overrides any of those sections for full-size runs.
Owns: the schema and its error messages.
Promises: a bad file raises ScenarioError naming the file and the offending key.
Must never: start anything; this module only reads files.
"""
from __future__ import annotations

import copy
import tomllib
from pathlib import Path

from .devices import parse_size
from .stacks import FILESYSTEMS
from .sysbench import WORKLOADS


class ScenarioError(ValueError):
    pass


SIZE = "size"          # "16K", "2G" or an int of bytes
INT, STR, BOOL, TABLE = int, str, bool, dict

SCHEMA = {
    "name": STR, "title": STR, "description": STR, "article": STR, "baseline": STR,
    "workloads": list, "stacks": list, "full": TABLE, "repeat": INT,
    "disk": {"size": SIZE, "iops": INT, "bandwidth": SIZE, "max_io": SIZE, "latency_us": INT},
    "fast_disk": {"size": SIZE},
    "database": {"engine": STR, "buffer_pool": SIZE, "settings": TABLE},
    "workload": {"threads": INT, "duration": INT, "tables": INT, "table_size": INT,
                 "warehouses": INT, "items": INT, "customers": INT, "random_points": INT,
                 "warmup": INT},
}
STACK_SCHEMA = {
    "name": STR, "fs": STR, "compression": STR, "recordsize": STR, "arc_mb": INT,
    "l2arc": BOOL, "slog": BOOL, "logbias": STR, "primarycache": STR, "dataset": STR,
    "mariadb": TABLE, "postgres": TABLE, "properties": TABLE, "buffer_pool": SIZE, "notes": STR,
    "external_journal": BOOL, "baseline": STR,
}
# Dataset properties given as top-level stack keys, on ZFS and tarn alike, and their values.
PROPERTY_KEYS = {"logbias": ("latency", "throughput"), "primarycache": ("all", "metadata", "none")}
REQUIRED = ("name", "workloads", "stacks", "disk")
OVERRIDABLE = ("disk", "fast_disk", "database", "workload", "workloads", "stacks", "repeat")
COMPRESSION = {"btrfs": {"zstd", "lzo", "zlib", "off"},
               "zfs": {"lz4", "lzjb", "gzip", "zle", "zstd", "off", "on"}}


SCENARIO_DIR = Path(__file__).parent / "scenarios"


def available() -> dict[str, Path]:
    return {p.stem: p for p in sorted(SCENARIO_DIR.glob("*.toml"))}


def load(name_or_path: str, full: bool = False) -> dict:
    """A shipped scenario by name, or a .toml path; validated, sized quick or full."""
    path = Path(name_or_path)
    if not path.suffix:
        shipped = available()
        if name_or_path not in shipped:
            raise ScenarioError(f"unknown scenario '{name_or_path}'; shipped: {', '.join(sorted(shipped))}")
        path = shipped[name_or_path]
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{path.name}: not valid TOML: {exc}") from None
    return validate(raw, origin=path.name, full=full)


def validate(raw: dict, origin: str = "<scenario>", full: bool = False) -> dict:
    _check_table(raw, SCHEMA, origin, "")
    for key in REQUIRED:
        if key not in raw:
            raise ScenarioError(f"{origin}: missing required key '{key}'")
    if "full" in raw:
        for key in raw["full"]:
            if key not in OVERRIDABLE:
                raise ScenarioError(f"{origin}: unknown key 'full.{key}' (allowed: {', '.join(OVERRIDABLE)})")
        _check_table({k: v for k, v in raw["full"].items()}, SCHEMA, origin, "full.")
    scenario = copy.deepcopy(raw)
    if full and "full" in raw:
        for key, value in raw["full"].items():
            if isinstance(value, dict) and isinstance(scenario.get(key), dict):
                scenario[key] = {**scenario[key], **value}
            else:
                scenario[key] = copy.deepcopy(value)
    scenario.pop("full", None)
    scenario["size_class"] = "full" if full else "quick"
    _check_workloads(scenario["workloads"], origin)
    if scenario.get("repeat", 1) < 1:
        raise ScenarioError(f"{origin}: 'repeat' must be at least 1, got {scenario['repeat']!r}")
    _check_engine(scenario, origin)
    _check_stacks(scenario["stacks"], origin)
    _check_baselines(scenario, origin)
    scenario.setdefault("fast_disk", {"size": "1G"})
    scenario.setdefault("database", {})
    scenario.setdefault("workload", {})
    return scenario


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
        if stack.get("dataset", "prepare") not in ("prepare", "tar"):
            raise ScenarioError(f"{origin}: '{where}.dataset' must be \"prepare\" or \"tar\"")
        for key in ("l2arc", "recordsize"):
            if key in stack and stack["fs"] != "zfs":
                raise ScenarioError(f"{origin}: '{where}.{key}' only applies to fs = \"zfs\"")
        if "slog" in stack and stack["fs"] not in ("zfs", "tarn"):
            raise ScenarioError(f"{origin}: '{where}.slog' only applies to fs = \"zfs\" or \"tarn\"")
        if "properties" in stack and stack["fs"] != "tarn":
            raise ScenarioError(f"{origin}: '{where}.properties' only applies to fs = \"tarn\"")
        if stack["fs"] == "tarn" and "compression" in stack:
            # _tarn reads only properties; a top-level compression would be silently ignored.
            raise ScenarioError(f"{origin}: '{where}.compression' on fs = \"tarn\" goes in properties, "
                                f"e.g. properties = {{ compression = {stack['compression']!r} }}")
        if "arc_mb" in stack and stack["fs"] not in ("zfs", "tarn"):
            raise ScenarioError(f"{origin}: '{where}.arc_mb' only applies to fs = \"zfs\" or \"tarn\"")
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
    if engine == "postgresql" and "tpcc_like" in scenario["workloads"]:
        raise ScenarioError(f"{origin}: the TPC-C-like workload is written for MariaDB; "
                            "use the sysbench oltp workloads with database.engine = \"postgresql\"")

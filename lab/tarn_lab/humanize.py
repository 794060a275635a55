"""Words and units for people: sizes in KiB/MiB/GiB, the emulated disk in one sentence,
the workloads a scenario runs explained, settings as key/value rows instead of dicts.

Owns: the text a report uses to describe what was measured.
Promises: pure functions; every description is built from the recorded settings, so the
report says what ran, not what a scenario file says today.
Must never: invent a value that was not recorded (a missing one is left out).
"""
from __future__ import annotations

from .devices import parse_size
from .sysbench import TPCC_LIKE

# What each workload does, in a DBA's words; a report explains only those it ran.
WORKLOAD_TEXT = {
    "oltp_read_write": "sysbench's OLTP mix: per transaction 10 primary-key point selects, 4 range "
                       "selects, 2 updates, a delete and an insert, in one transaction.",
    "oltp_update_index": "one UPDATE of an indexed column per transaction, committed at once: "
                         "every transaction is a redo-log fsync.",
    "oltp_read_only": "the read half of the OLTP mix: 10 point selects and 4 range selects per "
                      "transaction, no writes.",
    "oltp_write_only": "the write half of the OLTP mix: 2 updates, a delete and an insert per "
                       "transaction.",
    "oltp_point_select": "one primary-key lookup per transaction.",
    "select_random_points": "selects of random rows by a secondary index (random k values): "
                            "random reads across the whole table.",
    TPCC_LIKE: "TPC-C-like: the lab's sysbench Lua script written from the public TPC-C "
               "specification (new order, payment, order status, delivery, stock level) — "
               "not an audited TPC-C.",
}


def workload_label(w: str) -> str:
    return "TPC-C-like" if w == TPCC_LIKE else w


def human_bytes(n: float | None) -> str:
    """1536 -> '1.5 KiB'; whole numbers lose their '.0' (2 GiB, 16 KiB)."""
    if n is None:
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            text = f"{n:.1f}" if unit != "B" else f"{n:.0f}"
            return f"{text.removesuffix('.0')} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def describe_disk(disk: dict) -> str:
    """{'size': '2G', 'iops': 500, 'bandwidth': '8M', 'max_io': '16K'} ->
    '2 GiB paced disk: 500 IOPS, 8 MiB/s, I/Os over 16 KiB count as several'."""
    limits = []
    if disk.get("iops"):
        limits.append(f"{disk['iops']:,} IOPS")
    if disk.get("bandwidth"):
        limits.append(f"{human_bytes(parse_size(disk['bandwidth']))}/s")
    if disk.get("max_io"):
        limits.append(f"an I/O over {human_bytes(parse_size(disk['max_io']))} counts as several")
    if disk.get("latency_us"):
        limits.append(f"{disk['latency_us']} µs added latency")
    size = human_bytes(parse_size(disk["size"])) if disk.get("size") else "a"
    return f"{size} paced disk: " + (", ".join(limits) if limits else "unthrottled")


def describe_database(scenario: dict, versions: dict | None = None) -> str:
    db = scenario.get("database", {})
    engine = "PostgreSQL" if db.get("engine") == "postgresql" else "MariaDB"
    cache = "shared_buffers" if engine == "PostgreSQL" else "InnoDB buffer pool"
    text = f"a private {engine} server per stack"
    version = (versions or {}).get("mariadb") if engine == "MariaDB" else None
    if version:
        text += f" ({version.split(' for ')[0].split('Ver ')[-1]})"
    if db.get("buffer_pool"):
        text += f", {cache} {human_bytes(parse_size(db['buffer_pool']))}"
    if db.get("page_cache"):
        text += f", its kernel page cache capped at {human_bytes(parse_size(db['page_cache']))} (a memory cgroup)"
    return text


def describe_workload_params(params: dict, workloads: list[str]) -> str:
    parts = [f"{params.get('threads', 4)} client threads", f"{params.get('duration', 30)} s per run"]
    if params.get("warmup"):
        parts.append(f"after {params['warmup']} s of warm-up")
    if any(w != TPCC_LIKE for w in workloads):
        parts.append(f"{params.get('tables', 1)} table(s) of {params.get('table_size', 10000):,} rows")
    if TPCC_LIKE in workloads:
        parts.append(f"{params.get('warehouses', 1)} warehouse(s)")
    return ", ".join(parts)


def describe_load(dataset: dict) -> str:
    """How a stack got its data, how long it took here, and the tables' sizes once loaded."""
    method = dataset.get("method", "prepare")
    if method == "cached":
        made = (dataset.get("cache_made") or "").replace("T", " ")[:16]
        text = (f"copied from the dataset cache onto the paced disk in {dataset.get('restore_seconds', 0):,.0f} s "
                f"(the cache was prepared once by sysbench on {dataset.get('prepared_on', 'the host')}, in "
                f"{dataset.get('cache_prepare_seconds', 0):,.0f} s{', on ' + made if made else ''})")
    elif method == "tar":
        text = (f"sysbench prepare on the paced disk in {dataset.get('prepare_seconds', 0):,.0f} s, then written "
                f"back from a tar archive in {dataset.get('tar_seconds', 0):,.0f} s")
    else:
        text = f"sysbench prepare on the paced disk in {dataset.get('prepare_seconds', 0):,.0f} s"
    if "settle_seconds" in dataset:
        text += f", then VACUUM ANALYZE and CHECKPOINT in {dataset['settle_seconds']:,.0f} s"
    tables = dataset.get("table_bytes") or {}
    if tables:
        names = {TPCC_LIKE: "TPC-C-like", "oltp": "sysbench"}
        text += "; tables: " + ", ".join(f"{names.get(k, k)} {human_bytes(v)}" for k, v in tables.items())
    return text


def describe_stack(spec: dict) -> str:
    """The stack as a DBA would name it: 'zfs: lz4, recordsize 16k, ARC 128 MiB, SLOG'."""
    fs = spec.get("fs", "")
    bits = []
    if spec.get("compression"):
        bits.append(spec["compression"])
    props = spec.get("properties") or {}
    for key in ("compression", "recordsize"):
        if key in props:
            bits.append(props[key] if key == "compression" else f"recordsize {props[key]}")
    if spec.get("recordsize"):
        bits.append(f"recordsize {spec['recordsize']}")
    for key in ("logbias", "primarycache"):
        value = spec.get(key, props.get(key))
        if value:
            bits.append(f"{key}={value}")
    if spec.get("arc_mb"):
        bits.append(f"ARC {spec['arc_mb']} MiB")
    if spec.get("transport"):
        bits.append("FUSE over io_uring" if spec["transport"] == "uring" else "FUSE over /dev/fuse")
    if spec.get("slog"):
        bits.append("SLOG on the fast disk")
    if spec.get("l2arc"):
        bits.append("L2ARC on the fast disk")
    if spec.get("external_journal"):
        bits.append("journal on the fast disk")
    if spec.get("dataset") == "tar":
        bits.append("data restored from a tar archive")
    if spec.get("buffer_pool"):
        bits.append(f"buffer pool {spec['buffer_pool']}")
    rule = (spec.get("memory") or {}).get("rule")
    if rule and rule != "as the stack says":
        bits.append(rule)
    return f"{fs}: " + (", ".join(bits) if bits else "defaults")


def flatten(value, prefix: str = "") -> list[tuple[str, str]]:
    """Nested settings as ('stack.properties.recordsize', '16K') rows; lists (argv) joined."""
    if isinstance(value, dict):
        rows = []
        for k, v in value.items():
            rows += flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return rows
    if isinstance(value, list):
        if value and all(isinstance(v, list) for v in value):
            return [(f"{prefix}[{i}]", " ".join(map(str, v))) for i, v in enumerate(value)]
        return [(prefix, " ".join(map(str, value)))]
    if isinstance(value, int) and not isinstance(value, bool) and prefix.endswith("bytes"):
        return [(prefix, human_bytes(value))]
    return [(prefix, "—" if value is None else str(value))]

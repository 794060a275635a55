"""sysbench: building its command lines and parsing its output.

Owns: the workload names the lab knows (the built-in OLTP scripts and the TPC-C-like Lua
script shipped here), the argv for prepare/run, and parsing of the per-second report
lines and the final summary.
Promises: parsers are pure functions of text (tested on recorded outputs).
Must never: connect over TCP (it uses the server's unix socket).
"""
from __future__ import annotations

import re
from pathlib import Path

LUA_DIR = Path(__file__).parent / "lua"
BUILTIN_WORKLOADS = ("oltp_read_write", "oltp_update_index", "oltp_read_only",
                     "select_random_points", "oltp_point_select", "oltp_write_only")
TPCC_LIKE = "tpcc_like"
WORKLOADS = BUILTIN_WORKLOADS + (TPCC_LIKE,)


def script_for(workload: str) -> str:
    if workload == TPCC_LIKE:
        return str(LUA_DIR / "tpcc_like.lua")
    return workload


def base_argv(workload: str, conn, params: dict) -> list[str]:
    """`conn` is a MariaDB socket path, or the driver arguments of another server."""
    driver = (["--db-driver=mysql", f"--mysql-socket={conn}", "--mysql-user=root", "--mysql-db=sbtest"]
              if isinstance(conn, str) else list(conn))
    argv = ["sysbench", script_for(workload), *driver, f"--threads={params.get('threads', 4)}"]
    if workload == TPCC_LIKE:
        argv += [f"--scale={params.get('warehouses', 1)}", f"--items={params.get('items', 100000)}",
                 f"--customers={params.get('customers', 3000)}"]
    else:
        argv += [f"--tables={params.get('tables', 1)}", f"--table-size={params.get('table_size', 10000)}"]
        if workload == "select_random_points":
            argv += [f"--random-points={params.get('random_points', 10)}"]
    return argv


# One random distribution for prepare and run. sysbench's default is "special" (75% of the
# values in 1% of the range): a prepare without --rand-type writes the k column that way,
# and then select_random_points, which draws its k values uniformly at run time, misses
# almost every row and runs from the k index in the buffer pool, never from the disk.
RAND_TYPE = "--rand-type=uniform"


def prepare_argv(workload: str, socket: str, params: dict) -> list[str]:
    # Prepare with up to 2 threads: on a paced disk more only queue up.
    p = {**params, "threads": min(int(params.get("tables", 1)) if workload != TPCC_LIKE else 1, 2) or 1}
    return base_argv(workload, socket, p) + [RAND_TYPE, "prepare"]


def run_argv(workload: str, socket: str, params: dict) -> list[str]:
    return base_argv(workload, socket, params) + [
        f"--time={params.get('duration', 30)}", "--report-interval=1", "--percentile=95",
        # The whole latency histogram at the end: p99 (and any other percentile) is read
        # from it, while the per-second lines keep p95.
        "--histogram=on", RAND_TYPE, "run"]


INTERVAL_RE = re.compile(
    r"^\[\s*(?P<t>\d+)s\s*\]\s+thds:\s*(?P<thds>\d+)\s+tps:\s*(?P<tps>[\d.]+)\s+"
    r"qps:\s*(?P<qps>[\d.]+)\s+\(r/w/o:\s*(?P<r>[\d.]+)/(?P<w>[\d.]+)/(?P<o>[\d.]+)\)\s+"
    r"lat\s+\(ms,(?P<pct>\d+)%\):\s*(?P<lat>[\d.]+)\s+err/s:\s*(?P<err>[\d.]+)")


def parse_interval_line(line: str) -> dict | None:
    """One `[ 3s ] thds: ... tps: ...` line -> per-second numbers, or None."""
    m = INTERVAL_RE.match(line.strip())
    if not m:
        return None
    g = m.groupdict()
    return {"t": int(g["t"]), "threads": int(g["thds"]), "tps": float(g["tps"]),
            "qps": float(g["qps"]), "reads_ps": float(g["r"]), "writes_ps": float(g["w"]),
            "other_ps": float(g["o"]), "lat_p95_ms": float(g["lat"]), "err_ps": float(g["err"])}


_SUMMARY_FIELDS = {
    "read": ("queries", "read"), "write": ("queries", "write"), "other": ("queries", "other"),
    "total": ("queries", "total"),
    "min": ("latency_ms", "min"), "avg": ("latency_ms", "avg"), "max": ("latency_ms", "max"),
    "95th percentile": ("latency_ms", "p95"), "sum": ("latency_ms", "sum"),
}


HISTOGRAM_ROW_RE = re.compile(r"^\s*(?P<value>[\d.]+)\s+\|[* ]*\s(?P<count>\d+)\s*$")


def parse_histogram(text: str) -> list[tuple[float, int]]:
    """sysbench's `--histogram` block -> [(bucket value in ms, count)], in its order
    (empty when the output has none)."""
    rows: list[tuple[float, int]] = []
    inside = False
    for line in text.splitlines():
        if line.startswith("Latency histogram"):
            inside, rows = True, []
            continue
        if not inside or "distribution" in line:
            continue
        m = HISTOGRAM_ROW_RE.match(line)
        if not m:
            if rows:
                inside = False
            continue
        rows.append((float(m.group("value")), int(m.group("count"))))
    return rows


def histogram_percentile(rows: list[tuple[float, int]], percent: float) -> float | None:
    """The smallest bucket value at or under which `percent` % of the events fall (how
    sysbench computes its own percentile), or None for an empty histogram."""
    total = sum(c for _, c in rows)
    if not total:
        return None
    wanted = total * percent / 100
    seen = 0
    for value, count in rows:
        seen += count
        if seen >= wanted:
            return value
    return rows[-1][0]


def parse_summary(text: str) -> dict:
    """The end-of-run block: queries, transactions (and /s), latency min/avg/max/p95, and
    p99 from the latency histogram when the run printed one."""
    summary: dict = {"queries": {}, "latency_ms": {}}
    for raw in text.splitlines():
        line = raw.strip()
        m = re.match(r"^transactions:\s+(\d+)\s+\(([\d.]+) per sec\.\)", line)
        if m:
            summary["transactions"], summary["tps"] = int(m.group(1)), float(m.group(2))
            continue
        m = re.match(r"^queries:\s+(\d+)\s+\(([\d.]+) per sec\.\)", line)
        if m:
            summary["queries"]["total"], summary["qps"] = int(m.group(1)), float(m.group(2))
            continue
        m = re.match(r"^ignored errors:\s+(\d+)", line)
        if m:
            summary["ignored_errors"] = int(m.group(1))
            continue
        m = re.match(r"^total time:\s+([\d.]+)s", line)
        if m:
            summary["total_time_s"] = float(m.group(1))
            continue
        m = re.match(r"^([a-z0-9 ]+):\s+([\d.]+)$", line)
        if m and m.group(1) in _SUMMARY_FIELDS:
            section, key = _SUMMARY_FIELDS[m.group(1)]
            value = float(m.group(2))
            summary[section][key] = int(value) if section == "queries" else value
    if "tps" not in summary:
        raise ValueError("no 'transactions:' line in sysbench output")
    p99 = histogram_percentile(parse_histogram(text), 99)
    if p99 is not None:
        summary["latency_ms"]["p99"] = p99
    return summary


def parse_version(text: str) -> str:
    m = re.search(r"sysbench\s+([\d.]+\S*)", text)
    return m.group(1) if m else text.strip()

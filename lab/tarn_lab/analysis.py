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
from statistics import mean

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

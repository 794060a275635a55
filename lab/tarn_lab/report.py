"""Reports from a results directory, the answer first: the headline (one per memory variant
when a scenario ran the articles' setup and equal memory), warnings (caches too big for the
dataset), the ratio table against the scenario's baseline (fits 100 columns), TPS bars, the
memory sweep's splits and its advice, what each stack was given and used (RSS), the cache
device's tables (l2arc scenario: warm run, restart, long run; see cachereport), and the
verdict in the terminal; per-stack sysbench detail, devices and settings behind `--verbose`.
The HTML page (html_report) shows the same numbers in the same order.

Owns: reading <rundir>/runs/*/*.json back, and the terminal's presentation.
Promises: shows only measured numbers from the JSON files (via analysis), and every
skipped or failed stack with its reason.
Must never: run benchmarks or change results.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from . import analysis, budget, cachephases, cachereport, snapshots
from .analysis import Cell, cells_of
from .budget import CacheCheck
from .scenario import cache_warning
from .humanize import describe_disk, describe_stack, flatten, workload_label

RESULT_NAME = re.compile(r"^(?P<workload>.+?)(\.rep(?P<repeat>\d+))?\.json$")


def load_results(rundir: Path) -> tuple[dict, list[dict], list[dict]]:
    """(scenario, finished runs of every repeat, stack.json of every stack)."""
    scenario = json.loads((rundir / "scenario.json").read_text())
    runs, stacks = [], []
    order = [s["name"] for s in scenario.get("stacks", [])]
    workloads = set(scenario["workloads"])
    for stack_dir in sorted((rundir / "runs").glob("*"), key=lambda p: order.index(p.name) if p.name in order else 99):
        sj = stack_dir / "stack.json"
        if sj.exists():
            stacks.append(json.loads(sj.read_text()))
        for p in sorted(stack_dir.glob("*.json")):
            m = RESULT_NAME.match(p.name)
            if not m or m.group("workload") not in workloads:
                continue
            r = json.loads(p.read_text())
            if r.get("status") == "ok":
                r.setdefault("repeat", int(m.group("repeat") or 1))
                runs.append(r)
    return scenario, runs, stacks


# -- formatting -----------------------------------------------------------------------------

def fmt(v, digits: int = 2) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return str(v)


def fmt_tps(v: float | None) -> str:
    return "" if v is None else (f"{v:,.1f}" if v < 1000 else f"{v:,.0f}")


def fmt_ratio(v: float | None) -> str:
    return "" if v is None else f"{v:.2f}×"


def fmt_per_txn(v: float | None) -> str:
    return "" if v is None else (f"{v:.2f}" if v < 10 else f"{v:,.1f}")


def fmt_units(cell: Cell) -> str:
    """I/O units per transaction; '≥' marks a lower bound from older results."""
    value = fmt_per_txn(cell.units_per_txn)
    return value if cell.io_units[1] or not value else f"≥{value}"


def fmt_ms(v: float | None) -> str:
    return "" if v is None else (f"{v:.1f}" if v < 100 else f"{v:,.0f}")


def fmt_mib(n: int | None) -> str:
    return "" if n is None else f"{n / 2**20:,.0f}"


# -- the ratio table (terminal and HTML share its columns) -------------------------------------

def ratio_columns(baseline: str | None, repeated: bool) -> list[tuple[str, object]]:
    """(header, row -> text). Two-line headers keep the table within 100 columns."""
    # A long baseline name would widen two columns; the table's title names it anyway.
    vs = f"vs\n{baseline}" if baseline and len(baseline) <= 8 else "vs\nbase"
    cols: list[tuple[str, object]] = [
        ("stack", lambda r: r.cell.stack),
        ("TPS", lambda r: fmt_tps(r.cell.tps)),
    ]
    if repeated:
        cols.append(("min–max\nTPS", lambda r: f"{fmt_tps(r.cell.tps_min)}–{fmt_tps(r.cell.tps_max)}"
                     if r.cell.n > 1 else ""))
    cols += [
        (vs, lambda r: fmt_ratio(r.vs(lambda c: c.tps))),
        ("p95\nms", lambda r: fmt_ms(r.cell.latency("p95"))),
        ("reads\n/txn", lambda r: fmt_per_txn(r.cell.reads_per_txn)),
        ("writes\n/txn", lambda r: fmt_per_txn(r.cell.writes_per_txn)),
        ("IO units\n/txn", lambda r: fmt_units(r.cell)),
        ("KiB wr\n/txn", lambda r: fmt(r.cell.written_kib_per_txn, 1)),
        ("size\nMiB", lambda r: fmt_mib(r.cell.on_disk_bytes)),
        (vs, lambda r: fmt_ratio(r.vs(lambda c: c.on_disk_bytes))),
    ]
    return cols


def ratio_table(scenario: dict, cells: dict, workload: str, variant: str = "") -> Table:
    baseline = analysis.baseline_of(scenario, cells)
    rows = analysis.ratio_table_rows(scenario, cells, workload)
    repeated = any(r.cell.n > 1 for r in rows)
    where = f", {variant}:" if variant else ""
    t = Table(title=f"{workload_label(workload)}{where} against {baseline} (disk: the paced disk, per transaction)",
              title_justify="left", title_style="bold", box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1, 0, 0))
    for i, (header, _) in enumerate(ratio_columns(baseline, repeated)):
        t.add_column(header, justify="left" if i == 0 else "right", no_wrap=True)
    for r in rows:
        style = "bold" if r.cell.fs == "tarn" else ("dim" if r.cell.stack == baseline else "")
        t.add_row(*[get(r) for _, get in ratio_columns(baseline, repeated)], style=style)
    return t


# -- steadiness: does TPS hold on a saturated disk? ----------------------------------------

def steadiness_columns() -> list[tuple[str, object]]:
    """(header, cell -> text): the per-second TPS's spread and stalls, the latency tail,
    and what the data disk wrote per transaction."""
    return [
        ("stack", lambda c: c.stack),
        ("TPS", lambda c: fmt_tps(c.tps)),
        ("TPS CV\n/second", lambda c: fmt(c.tps_cv)),
        ("seconds\nat 0 TPS", lambda c: fmt(c.zero_tps_seconds)),
        ("p95\nms", lambda c: fmt_ms(c.latency("p95"))),
        ("p99\nms", lambda c: fmt_ms(c.latency("p99"))),
        ("max\nms", lambda c: fmt_ms(c.latency("max"))),
        ("KiB wr\n/txn", lambda c: fmt(c.written_kib_per_txn, 1)),
        ("writes\n/txn", lambda c: fmt_per_txn(c.writes_per_txn)),
        ("IO units\n/txn", lambda c: fmt_units(c)),
        ("f/s", lambda c: fmt(c.flushes_per_s, 1)),
        ("f_await\nms", lambda c: fmt(c.f_await_ms, 1)),
    ]


def steadiness_table(cells: list[Cell], workload: str, variant: str = "") -> Table:
    where = f", {variant}" if variant else ""
    t = Table(title=f"Steadiness — {workload_label(workload)}{where} (per-second TPS; data disk per transaction)",
              title_justify="left", title_style="bold", box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1, 0, 0))
    cols = steadiness_columns()
    for i, (header, _) in enumerate(cols):
        t.add_column(header, justify="left" if i == 0 else "right", no_wrap=True)
    for c in cells:
        t.add_row(*[get(c) for _, get in cols], style="bold" if c.fs == "tarn" else "")
    return t


def own_baseline_table(scenario: dict, cells: dict) -> Table | None:
    rows = analysis.own_baseline_rows(scenario, cells)
    if not rows:
        return None
    t = Table(title="Against their own baselines, same run", title_justify="left", title_style="bold",
              box=box.SIMPLE_HEAD, pad_edge=False)
    for header in ("stack", "workload", "baseline", "TPS", "p95 latency", "reads/txn", "IO units/txn"):
        t.add_column(header, justify="left" if header in ("stack", "workload", "baseline") else "right")
    for r in rows:
        t.add_row(r.cell.stack, workload_label(r.cell.workload), r.base.stack,
                  fmt_ratio(r.vs(lambda c: c.tps)), fmt_ratio(r.vs(lambda c: c.latency("p95"))),
                  fmt_ratio(r.vs(lambda c: c.reads_per_txn)), fmt_ratio(r.vs(lambda c: c.units_per_txn)))
    return t


def ratio_rows(scenario: dict, runs: list[dict]) -> list[dict]:
    """Each stack's run divided by its baseline's run of the same workload, same results
    directory: the scenario's `baseline` for every other stack, and a stack's own `baseline`
    beside it. Pairs whose baseline has no result (skipped, failed) are left out."""
    cells = cells_of(scenario, runs)
    specs = {s["name"]: s for s in scenario.get("stacks", [])}
    rows = []
    for (stack, workload), cell in cells.items():
        bases = [b for b in (scenario.get("baseline"), specs.get(stack, {}).get("baseline")) if b and b != stack]
        for b in dict.fromkeys(bases):
            base = cells.get((b, workload))
            if base is None:
                continue
            row = analysis.Row(cell, base)
            rows.append({"stack": stack, "workload": workload, "baseline": b,
                         "tps": row.vs(lambda c: c.tps),
                         "latency_avg": row.vs(lambda c: c.latency("avg")),
                         "latency_p95": row.vs(lambda c: c.latency("p95"))})
    return rows


def tps_bars(cells: list[Cell], width: int = 40) -> Table:
    """TPS per stack as bars of block characters: the main chart, in the terminal."""
    top = max((c.tps for c in cells), default=0.0) or 1.0
    t = Table.grid(padding=(0, 1))
    t.add_column(no_wrap=True)
    t.add_column(no_wrap=True)
    t.add_column(justify="right", no_wrap=True)
    for c in cells:
        t.add_row(c.stack, Text("█" * max(1, round(width * c.tps / top)), style="red" if c.fs == "tarn" else "blue"),
                  fmt_tps(c.tps))
    return t


# -- memory: the sweep's splits, and what each stack was given and used --------------------------

def mib(n: int | None) -> str:
    return "" if n is None else f"{n / 2**20:,.0f}"


def sweep_columns() -> list[tuple[str, object]]:
    """(header, (sweep, cell) -> text) for the table of one sweep's splits."""
    def rss(cell, role):
        return mib(analysis.memory_of(cell).rss_max.get(role))
    return [
        ("split\nBP/ARC", lambda sw, c: analysis.memory_of(c).split()),
        ("stack", lambda sw, c: c.stack),
        ("TPS", lambda sw, c: fmt_tps(c.tps)),
        ("vs\nbest", lambda sw, c: fmt_ratio(analysis.ratio(c.tps, sw.best.tps))),
        ("reads\n/txn", lambda sw, c: fmt_per_txn(c.reads_per_txn)),
        ("IO units\n/txn", lambda sw, c: fmt_units(c)),
        ("ARC\nhits", lambda sw, c: analysis.pct(c.arc_hit) if c.arc_hit is not None else ""),
        ("BP\nhits", lambda sw, c: analysis.pct(c.buffer_pool_hit) if c.buffer_pool_hit is not None else ""),
        ("database\nRSS MiB", lambda sw, c: mib(analysis.memory_of(c).server_rss)),
        ("daemon\nRSS MiB", lambda sw, c: rss(c, "tarn") or rss(c, "zfs-fuse")),
    ]


def sweep_rows(sweep) -> list:
    """The references (all of the budget as buffer pool) first, then the splits."""
    return sweep.references + sweep.points


def sweep_table(sweep) -> Table:
    t = Table(title=f"TPS by buffer pool / ARC split — {workload_label(sweep.workload)}, "
                    f"{sweep.total // 2**20} MiB in all", title_justify="left", title_style="bold",
              box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1, 0, 0))
    cols = sweep_columns()
    for i, (header, _) in enumerate(cols):
        t.add_column(header, justify="left" if i < 2 else "right", no_wrap=True)
    for c in sweep_rows(sweep):
        t.add_row(*[get(sweep, c) for _, get in cols], style="bold" if c is sweep.best else "")
    return t


def memory_columns() -> list[tuple[str, object]]:
    """(header, cell -> text): what a stack was given beside the RSS its processes reached."""
    def daemon(m):
        return m.rss_max.get("tarn", m.rss_max.get("zfs-fuse"))

    def total_rss(m):
        return sum(m.rss_max.values()) if m.rss_max else None
    return [
        ("stack", lambda c, m: c.stack),
        ("buffer pool\ngiven MiB", lambda c, m: mib(m.buffer_pool)),
        ("database\nRSS max", lambda c, m: mib(m.server_rss)),
        ("ARC\ngiven MiB", lambda c, m: mib(m.arc) if m.arc is not None else "—"),
        ("daemon\nRSS max", lambda c, m: mib(daemon(m)) if daemon(m) is not None else "—"),
        ("page cache\ngiven MiB", lambda c, m: mib(m.page_cache) if m.page_cache is not None else "—"),
        ("given\nin all", lambda c, m: mib(m.given_in_all)),
        ("RSS\nin all", lambda c, m: mib(total_rss(m))),
        ("RSS /\ngiven", lambda c, m: fmt_ratio(analysis.ratio(total_rss(m), m.given_in_all))),
    ]


def memory_cells(cells: dict) -> list[Cell]:
    """One cell per stack (its memory is the same on every workload), peak RSS over all."""
    out: dict[str, Cell] = {}
    for c in cells.values():
        if c.stack in out:
            out[c.stack] = Cell(c.stack, c.fs, "*", out[c.stack].runs + c.runs)
        else:
            out[c.stack] = Cell(c.stack, c.fs, "*", list(c.runs))
    return list(out.values())


MEMORY_TITLE = ("Memory: what each stack was given, and the peak resident memory (RSS, MiB) of the "
                "processes holding its caches")


def memory_table(cells: dict) -> Table:
    t = Table(title=MEMORY_TITLE, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD,
              show_edge=False, padding=(0, 1, 0, 0))
    cols = memory_columns()
    for i, (header, _) in enumerate(cols):
        t.add_column(header, justify="left" if i == 0 else "right", no_wrap=True)
    for c in memory_cells(cells):
        m = analysis.memory_of(c)
        t.add_row(*[get(c, m) for _, get in cols])
    return t


def warnings_of(scenario: dict, stacks: list[dict]) -> list[str]:
    """What the report says loudly, at the top: caches too big for the dataset (measured
    after each stack's load where it was, else estimated before the run) and the caches
    the lab cannot cap."""
    measured = {s["stack"]: [CacheCheck(**c) for c in s["cache_checks"]] for s in stacks if "cache_checks" in s}
    estimated = [CacheCheck(**c) for c in scenario.get("cache_checks", [])]
    line = cache_warning(budget.current(estimated, measured))
    return ([line] if line else []) + list(scenario.get("warnings", []))


# -- verbose detail ---------------------------------------------------------------------------

SYSBENCH_ROWS = [
    ("queries: read", lambda s: s["queries"].get("read")), ("queries: write", lambda s: s["queries"].get("write")),
    ("queries: other", lambda s: s["queries"].get("other")), ("queries: total", lambda s: s["queries"].get("total")),
    ("transactions", lambda s: s.get("transactions")), ("transactions/s", lambda s: s.get("tps")),
    ("queries/s", lambda s: s.get("qps")), ("latency min (ms)", lambda s: s["latency_ms"].get("min")),
    ("latency avg (ms)", lambda s: s["latency_ms"].get("avg")), ("latency max (ms)", lambda s: s["latency_ms"].get("max")),
    ("latency p95 (ms)", lambda s: s["latency_ms"].get("p95")),
    ("latency p99 (ms)", lambda s: s["latency_ms"].get("p99")),
]


def sysbench_table(stack: str, runs: list[dict]) -> Table:
    """sysbench's own summary of one stack, a column per run (workload, repeat)."""
    t = Table(title=f"{stack}: sysbench", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    t.add_column("")
    for r in runs:
        rep = f" #{r.get('repeat', 1)}" if r.get("repeat", 1) > 1 else ""
        t.add_column(workload_label(r["workload"]) + rep, justify="right")
    for label, get in SYSBENCH_ROWS:
        t.add_row(label, *[fmt(get(r["summary"])) for r in runs])
    return t


def devices_table(cells: dict) -> Table:
    t = Table(title="Devices over each run (data = the paced disk)", title_justify="left",
              box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("stack", "workload", "data reads", "data writes", "MiB read", "MiB written",
                "IO units", "disk busy", "cache/log I/Os", "buffer pool hits", "ARC hits"):
        t.add_column(col, justify="left" if col in ("stack", "workload") else "right")
    for c in cells.values():
        other = c.other_device_ios
        units, exact = c.io_units
        t.add_row(c.stack, workload_label(c.workload), f"{c.data_total('reads'):,}", f"{c.data_total('writes'):,}",
                  fmt(c.data_total("read_bytes") / 2**20, 1), fmt(c.data_total("write_bytes") / 2**20, 1),
                  f"{'' if exact else '≥'}{units:,}", analysis.pct(c.disk_busy) if c.disk_busy is not None else "",
                  f"{other:,}", analysis.pct(c.buffer_pool_hit) if c.buffer_pool_hit is not None else "",
                  analysis.pct(c.arc_hit) if c.arc_hit is not None else "")
    return t


def print_settings(console: Console, scenario: dict, stacks: list[dict]) -> None:
    console.print(Text(f"Disk: {describe_disk(scenario['disk'])}"))
    for s in stacks:
        if s.get("status") != "ok":
            continue
        console.print(Text(f"{s['stack']}: {describe_stack(s.get('spec') or {})}", style="bold"))
        for key, value in flatten({"settings": s.get("settings"), "database": s.get("mariadb"),
                                   "versions": s.get("versions")}):
            console.print(Text(f"    {key}: {value}"))


def section_table(title: str, cols: list, rows: list) -> Table:
    """A (title, columns, rows) section as a terminal table; Text, not markup, so brackets
    in a title or a cell print as they are."""
    t = Table(title=Text(title), title_justify="left", title_style="bold", box=box.SIMPLE_HEAD,
              show_edge=False, padding=(0, 1, 0, 0))
    for i, (header, _) in enumerate(cols):
        t.add_column(header, justify="left" if i == 0 else "right", no_wrap=True)
    for r in rows:
        t.add_row(*[Text(get(r)) for _, get in cols])
    return t


# -- the whole terminal report ------------------------------------------------------------------

def print_terminal(rundir: Path, console: Console, verbose: bool = False) -> None:
    scenario, runs, stacks = load_results(rundir)
    cells = cells_of(scenario, runs)
    console.print(Text(f"{scenario.get('title', scenario['name'])} ({scenario.get('size_class')} sizes)", style="bold"))
    views = analysis.variant_views(scenario, cells)
    for variant, view, vcells in views:
        line = analysis.headline(view, vcells)
        if line:
            label = analysis.variant_label(variant, view)
            console.print(Text(f"{label}: {line}" if variant else line, style="bold green"), soft_wrap=True)
    for sweep in analysis.sweeps(scenario, cells):
        console.print(Text(sweep.advice(), style="bold green"), soft_wrap=True)
    for warning in warnings_of(scenario, stacks):
        console.print(Text(f"WARNING {warning}", style="bold yellow"), soft_wrap=True)
    for variant, view, vcells in views:
        for w in analysis.workloads_of(view, vcells):
            console.print(ratio_table(view, vcells, w, analysis.variant_label(variant, view) if variant else ""))
            console.print(Text(f"TPS per stack — {workload_label(w)}", style="bold"))
            console.print(tps_bars([c for (s, cw), c in vcells.items() if cw == w]))
            console.print(steadiness_table([c for (s, cw), c in vcells.items() if cw == w], w,
                                           analysis.variant_label(variant, view) if variant else ""))
    for sweep in analysis.sweeps(scenario, cells):
        console.print(sweep_table(sweep))
    if analysis.has_rss(cells):
        console.print(memory_table(cells))
    own = own_baseline_table(scenario, cells)
    if own:
        console.print(own)
    for table in cachereport.terminal_tables(cachereport.cache_tables(cells, cachephases.load_phases(rundir))):
        console.print(table)
    for title, cols, rows in snapshots.sections(cells, analysis.baseline_of(scenario, cells),
                                                snapshots.load_parts(rundir)):
        console.print(section_table(title, cols, rows))
    for line in snapshots.failures(rundir):
        console.print(Text(line, style="yellow"))
    for variant, view, vcells in views:
        text = analysis.verdict(view, vcells)
        if text:
            console.print()
            label = analysis.variant_label(variant, view)
            console.print(Text(f"{label[0].upper() + label[1:]}: {text}" if variant else text))
    for s in stacks:
        if s.get("status") != "ok":
            console.print(Text(f"{s['stack']}: {s['status']}: {s.get('reason')}", style="yellow"))
        elif (s.get("spec") or {}).get("notes"):
            console.print(Text(f"{s['stack']}: note: {s['spec']['notes']}", style="cyan"))
    if not runs:
        console.print(Text("no finished runs in this results directory", style="yellow"))
    if verbose:
        for stack in analysis.stacks_of(cells):
            console.print(sysbench_table(stack, [r for c in cells.values() if c.stack == stack for r in c.runs]))
        console.print(devices_table(cells))
        print_settings(console, scenario, stacks)
    elif runs:
        console.print(Text("(--verbose: sysbench's own tables, devices, settings and versions)", style="dim"))

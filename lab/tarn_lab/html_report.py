"""The HTML report: one self-contained page to mail or attach to a ticket — the headline
(one per memory variant), the memory sweep's advice, warnings, the ratio tables against the
scenario's baseline, the sweep's splits and what each stack was given and used, the cache
device's tables (warm run, restart, long run), the verdict and the charts first; then what was measured (the disk, the database, how the data was
loaded, only the workloads that ran, the stacks); the sysbench detail, devices, settings
and versions collapsed in <details>.

Owns: report.html (and plots/*.png beside it, the same charts as files).
Promises: no external reference (images are data URIs, the style is inline, no script);
the numbers are the terminal's (both come from analysis).
Must never: run benchmarks or change results.
"""
from __future__ import annotations

import base64
import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from . import analysis, cachephases, cachereport, plots, snapshots
from .analysis import Cell, cells_of
from .devices import parse_size
from .humanize import (WORKLOAD_TEXT, describe_database, describe_disk, describe_load, describe_stack,
                       describe_workload_params, flatten, human_bytes, workload_label)
from .report import (MEMORY_TITLE, SYSBENCH_ROWS, steadiness_columns, fmt, fmt_ratio, fmt_units, load_results, memory_cells,
                     memory_columns, ratio_columns, sweep_columns, sweep_rows, warnings_of)

TEMPLATES = jinja2.Environment(loader=jinja2.PackageLoader("tarn_lab", "templates"),
                               autoescape=True, undefined=jinja2.StrictUndefined)


@dataclass
class HtmlTable:
    headers: list[str]
    rows: list[list[str]]
    caption: str = ""
    id: str = ""
    css: str = "data"
    row_classes: list[str] = field(default_factory=list)


@dataclass
class Chart:
    title: str
    data: str            # base64 PNG
    caption: str = ""


@dataclass
class Details:
    summary: str
    tables: list[HtmlTable]


@dataclass
class Page:
    title: str
    meta: str = ""
    headline: str | None = None
    more_headlines: list[str] = field(default_factory=list)   # one per further memory variant
    advice: list[str] = field(default_factory=list)           # the memory sweep's, one per workload
    warnings: list[str] = field(default_factory=list)
    tables: list[HtmlTable] = field(default_factory=list)
    verdict: str | None = None
    notes: list[str] = field(default_factory=list)
    figures: list[Chart] = field(default_factory=list)
    measured: list[tuple[str, str]] = field(default_factory=list)
    workloads: list[tuple[str, str]] = field(default_factory=list)
    details: list[Details] = field(default_factory=list)
    footer: str = ""


def render(page: Page) -> str:
    return TEMPLATES.get_template("report.html.j2").render(page=page)


def chart(fig, title: str, name: str, plots_dir: Path | None, caption: str = "") -> Chart:
    """The figure as an embedded image (and as plots/<name> beside the report)."""
    data = plots.png(fig)
    if plots_dir is not None:
        plots_dir.mkdir(exist_ok=True)
        (plots_dir / name).write_bytes(data)
    return Chart(title, base64.b64encode(data).decode("ascii"), caption)


# -- tables -----------------------------------------------------------------------------------

def ratio_html_table(scenario: dict, cells: dict, workload: str, index: int, variant: str = "") -> HtmlTable:
    baseline = analysis.baseline_of(scenario, cells)
    subject = analysis.subject_of(scenario, cells)
    rows = analysis.ratio_table_rows(scenario, cells, workload)
    cols = ratio_columns(baseline, any(r.cell.n > 1 for r in rows))
    where = f", {variant}" if variant else ""
    return HtmlTable(
        headers=[h for h, _ in cols], rows=[[get(r) for _, get in cols] for r in rows],
        caption=f"{workload_label(workload)}{where}: per stack, against {baseline} (disk numbers: the paced disk, "
                "per committed transaction)",
        id=f"ratio-{index}", css="data ratio",
        row_classes=["subject" if r.cell.stack == subject else ("baseline" if r.cell.stack == baseline else "")
                     for r in rows])


def steadiness_html_table(cells: list[Cell], workload: str, variant: str = "") -> HtmlTable:
    cols = steadiness_columns()
    where = f", {variant}" if variant else ""
    return HtmlTable(headers=[h for h, _ in cols], rows=[[get(c) for _, get in cols] for c in cells],
                     caption=f"Steadiness — {workload_label(workload)}{where}: the spread of the per-second TPS "
                             "(coefficient of variation), seconds in which no transaction finished, the latency "
                             "tail, and what the paced data disk wrote per transaction",
                     css="data ratio", row_classes=["subject" if c.fs == "tarn" else "" for c in cells])


def own_baseline_html_table(scenario: dict, cells: dict) -> HtmlTable | None:
    rows = analysis.own_baseline_rows(scenario, cells)
    if not rows:
        return None
    return HtmlTable(
        headers=["stack", "workload", "baseline", "TPS", "p95 latency", "reads/txn", "IO units/txn"],
        rows=[[r.cell.stack, workload_label(r.cell.workload), r.base.stack, fmt_ratio(r.vs(lambda c: c.tps)),
               fmt_ratio(r.vs(lambda c: c.latency("p95"))), fmt_ratio(r.vs(lambda c: c.reads_per_txn)),
               fmt_ratio(r.vs(lambda c: c.units_per_txn))] for r in rows],
        caption="Against their own baselines, same run")


def sweep_html_table(sweep, index: int) -> HtmlTable:
    cols = sweep_columns()
    rows = sweep_rows(sweep)
    return HtmlTable(headers=[h for h, _ in cols], rows=[[get(sweep, c) for _, get in cols] for c in rows],
                     caption=f"TPS by buffer pool / ARC split — {workload_label(sweep.workload)}, "
                             f"{sweep.total // 2**20} MiB in all (MiB; hits: share of reads each cache answered)",
                     id=f"sweep-{index}", css="data ratio sweep",
                     row_classes=["subject" if c is sweep.best else "" for c in rows])


def memory_html_table(cells: dict) -> HtmlTable:
    cols = memory_columns()
    rows = [[get(c, analysis.memory_of(c)) for _, get in cols] for c in memory_cells(cells)]
    return HtmlTable(headers=[h for h, _ in cols], rows=rows, caption=MEMORY_TITLE, id="memory")


def sysbench_html_table(stack: str, runs: list[dict]) -> HtmlTable:
    heads = [workload_label(r["workload"]) + (f" #{r.get('repeat', 1)}" if r.get("repeat", 1) > 1 else "")
             for r in runs]
    return HtmlTable(headers=[stack, *heads],
                     rows=[[label, *[fmt(get(r["summary"])) for r in runs]] for label, get in SYSBENCH_ROWS])


def devices_html_table(cells: dict) -> HtmlTable:
    rows = []
    for c in cells.values():
        other = c.other_device_ios
        units, exact = c.io_units
        rows.append([c.stack, workload_label(c.workload), f"{c.data_total('reads'):,}", f"{c.data_total('writes'):,}",
                     human_bytes(c.data_total("read_bytes")), human_bytes(c.data_total("write_bytes")),
                     f"{'' if exact else '≥'}{units:,}", fmt_units(c),
                     analysis.pct(c.disk_busy) if c.disk_busy is not None else "",
                     f"{other:,}", analysis.pct(c.buffer_pool_hit) if c.buffer_pool_hit is not None else "",
                     analysis.pct(c.arc_hit) if c.arc_hit is not None else "",
                     human_bytes(c.on_disk_bytes), human_bytes(c.apparent_bytes)])
    return HtmlTable(headers=["stack", "workload", "data reads", "data writes", "read", "written", "IO units",
                              "IO units/txn", "disk busy", "cache/log I/Os", "buffer pool hits", "ARC hits",
                              "on disk", "apparent"],
                     rows=rows, caption="The paced disk (data) over the measured runs, and sizes at the end")


def settings_tables(stacks: list[dict], versions: dict) -> list[HtmlTable]:
    tables = []
    for s in stacks:
        if s.get("status") != "ok":
            continue
        kv = flatten({"settings": s.get("settings"), "database": s.get("mariadb"), "dataset": s.get("dataset"),
                      "versions": s.get("versions")})
        tables.append(HtmlTable(headers=["setting", "value"], rows=[[k, v] for k, v in kv],
                                caption=f"{s['stack']}: {describe_stack(s.get('spec') or {})}", css="kv"))
    if versions:
        tables.append(HtmlTable(headers=["machine", "value"], rows=[[k, v] for k, v in flatten(versions)],
                                caption="Machine and tools", css="kv"))
    return tables


# -- the page ---------------------------------------------------------------------------------

def cache_html_tables(tables: cachereport.CacheTables) -> list[HtmlTable]:
    return [HtmlTable(headers=[h for h, _ in cols], rows=[[get(r) for _, get in cols] for r in rows],
                      caption=title, id=f"cache-{i}")
            for i, (title, cols, rows) in enumerate(cachereport.sections(tables), 1)]


def cache_charts(scenario: dict, cells: dict, phases: dict, plots_dir: Path | None) -> list[Chart]:
    """The l2arc scenario's: the hit ratio over the warm run, TPS after the restart, the long
    run (each only where there is something to draw)."""
    baseline = analysis.baseline_of(scenario, cells)
    out = []
    warm = [(c, r) for c, r in cachereport.stack_runs(cells, phases, None)
            if cachephases.l2arc_samples(r) or cachephases.cache_read_share_series(r)[0]]
    if warm:
        out.append(chart(plots.l2arc_hits_over_time(warm, baseline, "L2ARC hit ratio over time"),
                         "L2ARC hit ratio over time", "l2arc_hits.png", plots_dir))
    restart = cachereport.stack_runs(cells, phases, "restart")
    if restart:
        out.append(chart(plots.restart_over_time(restart, baseline), "TPS after a restart", "restart.png", plots_dir))
    long = cachereport.stack_runs(cells, phases, "long")
    if long:
        out.append(chart(plots.long_run_over_time(long, baseline), "Long run: TPS and L2ARC hit ratio",
                         "long_run.png", plots_dir))
    return out


def snapshot_html_tables(scenario: dict, cells: dict, parts: dict) -> list[HtmlTable]:
    """The snapshots scenario's three tables (cost of history, the move, the incremental)."""
    sections = snapshots.sections(cells, analysis.baseline_of(scenario, cells), parts)
    return [HtmlTable(headers=[h for h, _ in cols], rows=[[get(r) for _, get in cols] for r in rows],
                      caption=title, id=f"snapshots-{i}")
            for i, (title, cols, rows) in enumerate(sections, 1)]


def snapshot_charts(scenario: dict, cells: dict, plots_dir: Path | None) -> list[Chart]:
    """TPS over time with the snapshot instants marked, where a run took snapshots."""
    baseline = analysis.baseline_of(scenario, cells)
    pairs = snapshots.history_pairs(cells, baseline)
    if not pairs:
        return []
    return [chart(plots.tps_with_snapshots(pairs, baseline), "TPS with snapshots, against none",
                  "tps_snapshots.png", plots_dir)]


def charts(scenario: dict, cells: dict, plots_dir: Path | None) -> list[Chart]:
    """In a DBA's order: who serves the most TPS, what a transaction costs the disk, is the
    rate steady, how much disk the data takes."""
    baseline = analysis.baseline_of(scenario, cells)
    out = []
    workloads = analysis.workloads_of(scenario, cells)
    for w in workloads:
        mine = [c for (s, cw), c in cells.items() if cw == w]
        out.append(chart(plots.tps_bars(w, mine, baseline), f"TPS per stack, {workload_label(w)}", f"tps_bars_{w}.png", plots_dir))
        out.append(chart(plots.per_txn_bars(w, mine), f"Reads per transaction, {workload_label(w)}",
                         f"reads_per_txn_{w}.png", plots_dir))
    for i, sweep in enumerate(analysis.sweeps(scenario, cells), 1):
        out.append(chart(plots.split_bars(sweep), f"TPS by buffer pool / ARC split, {workload_label(sweep.workload)}",
                         f"split_{sweep.workload}_{i}.png", plots_dir))
    for w in workloads:
        mine = [c for (s, cw), c in cells.items() if cw == w]
        out.append(chart(plots.tps_over_time(w, mine, baseline), f"TPS over time, {workload_label(w)}", f"tps_{w}.png", plots_dir))
    last: dict[str, Cell] = {}
    for c in cells.values():
        last[c.stack] = c
    if last:
        out.append(chart(plots.size_bars(list(last.values())), "Size on disk", "size.png", plots_dir))
    return out


def measured(scenario: dict, cells: dict, versions: dict) -> list[tuple[str, str]]:
    workloads = analysis.workloads_of(scenario, cells) or scenario.get("workloads", [])
    rows = [("disk", describe_disk(scenario["disk"])),
            ("database", describe_database(scenario, versions)),
            ("workload", describe_workload_params(scenario.get("workload", {}), workloads))]
    if scenario.get("memory", {}).get("total"):
        rows.append(("memory", f"{human_bytes(parse_size(scenario['memory']['total']))} in all per stack, "
                               "split between the buffer pool and the ARC as each stack says"))
    if len(scenario.get("variants") or []) > 1:
        rows.append(("memory variants", "the articles' setup (the same buffer pool everywhere, an ARC on top for "
                                        "ZFS and tarn) and equal memory (a stack without an ARC gets the others' "
                                        "buffer pool + ARC as its buffer pool)"))
    if scenario.get("repeat", 1) > 1:
        rows.append(("repeats", f"each workload ran {scenario['repeat']} times per stack, caches dropped before each"))
    for spec in scenario.get("stacks", []):
        rows.append((spec["name"], describe_stack(spec)))
    return rows


def loads(stacks: list[dict]) -> list[tuple[str, str]]:
    """How each stack got its data and how long that took here, in words."""
    out = []
    for s in stacks:
        d = s.get("dataset") or {}
        if s.get("status") != "ok" or not d:
            continue
        out.append((f"{s['stack']}: data", describe_load(d)))
    return out


def stack_notes(stacks: list[dict]) -> list[str]:
    notes = []
    for s in stacks:
        if s.get("status") != "ok":
            notes.append(f"{s['stack']}: {s['status']} — {s.get('reason')}")
        elif (s.get("spec") or {}).get("notes"):
            notes.append(f"{s['stack']}: {s['spec']['notes']}")
    return notes


def report_page(rundir: Path, plots_dir: Path | None = None) -> Page:
    scenario, runs, stacks = load_results(rundir)
    versions = _read_json(rundir / "versions.json")
    cells = cells_of(scenario, runs)
    workloads = analysis.workloads_of(scenario, cells)
    views = analysis.variant_views(scenario, cells)
    tables, headlines = [], []
    ratio_index = 0
    for variant, view, vcells in views:
        label = analysis.variant_label(variant, view) if variant else ""
        line = analysis.headline(view, vcells)
        if line:
            headlines.append(f"{label}: {line}" if variant else line)
        for w in analysis.workloads_of(view, vcells):
            ratio_index += 1
            tables.append(ratio_html_table(view, vcells, w, ratio_index, label))
            tables.append(steadiness_html_table([c for (_, cw), c in vcells.items() if cw == w], w, label))
    sweeps = analysis.sweeps(scenario, cells)
    tables += [sweep_html_table(sw, i) for i, sw in enumerate(sweeps, 1)]
    if analysis.has_rss(cells):
        tables.append(memory_html_table(cells))
    own = own_baseline_html_table(scenario, cells)
    if own:
        tables.append(own)
    phases = cachephases.load_phases(rundir)
    tables += cache_html_tables(cachereport.cache_tables(cells, phases))
    tables += snapshot_html_tables(scenario, cells, snapshots.load_parts(rundir))
    verdicts = []
    for variant, view, vcells in views:
        text = analysis.verdict(view, vcells)
        if text:
            label = analysis.variant_label(variant, view)
            verdicts.append(f"{label[0].upper() + label[1:]}: {text}" if variant else text)
    finished = max((r.get("finished", "") for r in runs), default="").replace("T", " ")[:16]
    page = Page(title=scenario.get("title", scenario["name"]),
                meta=f"scenario {scenario['name']} · {scenario.get('size_class')} sizes · "
                     f"{len(analysis.stacks_of(cells))} stacks · finished {finished or 'no runs'}",
                headline=headlines[0] if headlines else None, more_headlines=headlines[1:],
                advice=[sw.advice() for sw in sweeps], warnings=warnings_of(scenario, stacks), tables=tables,
                verdict=" ".join(verdicts) or None, notes=stack_notes(stacks) + snapshots.failures(rundir),
                figures=(charts(scenario, cells, plots_dir) + cache_charts(scenario, cells, phases, plots_dir)
                         + snapshot_charts(scenario, cells, plots_dir))
                if cells else [],
                measured=measured(scenario, cells, versions) + loads(stacks),
                workloads=[(workload_label(w), WORKLOAD_TEXT.get(w, "")) for w in (workloads or scenario["workloads"])],
                footer=f"Raw results: {rundir / 'runs'} · report written {dt.datetime.now():%Y-%m-%d %H:%M}")
    by_stack: dict[str, list[dict]] = {}
    for c in cells.values():
        by_stack.setdefault(c.stack, []).extend(c.runs)
    page.details = [
        Details("sysbench's own numbers, per stack", [sysbench_html_table(s, rs) for s, rs in by_stack.items()]),
        Details("Devices, caches and sizes per run", [devices_html_table(cells)] if cells else []),
        Details("Settings and versions", settings_tables(stacks, versions)),
    ]
    return page


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def write_html(rundir: Path) -> Path:
    out = rundir / "report.html"
    out.write_text(render(report_page(rundir, rundir / "plots")))
    return out

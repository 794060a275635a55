"""Two results directories side by side — before and after a change: per stack and
workload the TPS, the paced disk's reads and I/O units per transaction and the size, and
after/before ratios; the baseline's own drift says how much of a change is noise.

Owns: `tarn-lab report --compare BEFORE AFTER`, in the terminal and as
<AFTER>/compare-with-<BEFORE>.html (self-contained, as report.html).
Promises: only pairs measured in both runs are divided; a stack or workload present in one
run only is listed with its side blank.
Must never: change either results directory beyond writing the comparison page.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from . import analysis, html_report, plots
from .analysis import Cell, cells_of, ratio
from .humanize import workload_label
from .report import fmt, fmt_per_txn, fmt_ratio, fmt_tps, load_results


@dataclass
class Pair:
    stack: str
    workload: str
    before: Cell | None
    after: Cell | None

    def change(self, get) -> float | None:
        if self.before is None or self.after is None:
            return None
        return ratio(get(self.after), get(self.before))


def pairs(before: dict, after: dict, order: list[str]) -> list[Pair]:
    keys = list(dict.fromkeys([*after, *before]))
    rank = {s: i for i, s in enumerate(order)}
    keys.sort(key=lambda k: (rank.get(k[0], 99), k[1]))
    return [Pair(s, w, before.get((s, w)), after.get((s, w))) for s, w in keys]


def load_pair(before_dir: Path, after_dir: Path):
    scen_b, runs_b, _ = load_results(before_dir)
    scen_a, runs_a, _ = load_results(after_dir)
    cells_b, cells_a = cells_of(scen_b, runs_b), cells_of(scen_a, runs_a)
    order = [s["name"] for s in scen_a.get("stacks", [])] + [s["name"] for s in scen_b.get("stacks", [])]
    return scen_b, scen_a, cells_b, cells_a, pairs(cells_b, cells_a, list(dict.fromkeys(order)))


def compare_headline(scen_a: dict, cells_a: dict, ps: list[Pair]) -> str | None:
    """'after/before: tarn 1.12× TPS on oltp_read_write, 0.80× reads per transaction;
    ext4 (baseline) 1.01×' — the subject's change, then the baseline's as the noise level."""
    subject = analysis.subject_of(scen_a, cells_a)
    base = analysis.baseline_of(scen_a, cells_a)
    parts = []
    for p in ps:
        if p.stack != subject or p.change(lambda c: c.tps) is None:
            continue
        text = f"{p.stack} {fmt_ratio(p.change(lambda c: c.tps))} TPS on {workload_label(p.workload)}"
        reads = p.change(lambda c: c.reads_per_txn)
        if reads is not None:
            text += f", {fmt_ratio(reads)} reads per transaction"
        parts.append(text)
    if not parts:
        return None
    drift = [p.change(lambda c: c.tps) for p in ps if p.stack == base and p.change(lambda c: c.tps) is not None]
    line = "after/before: " + "; ".join(parts)
    if drift and base != subject:
        line += f"; {base} (baseline) {', '.join(fmt_ratio(d) for d in drift)}"
    return line


def before_after(p: Pair, get, fmt_value) -> str:
    """'12.7 → 14.0'; a side that did not run is blank."""
    b = fmt_value(get(p.before)) if p.before else ""
    a = fmt_value(get(p.after)) if p.after else ""
    return f"{b} → {a}"


COLUMNS = [
    ("stack", lambda p: p.stack),
    ("TPS\nbefore → after", lambda p: before_after(p, lambda c: c.tps, fmt_tps)),
    ("TPS\n×", lambda p: fmt_ratio(p.change(lambda c: c.tps))),
    ("reads/txn\nbefore → after", lambda p: before_after(p, lambda c: c.reads_per_txn, fmt_per_txn)),
    ("IO units/txn\nbefore → after", lambda p: before_after(p, lambda c: c.units_per_txn, fmt_per_txn)),
    ("size MiB\nbefore → after", lambda p: before_after(p, lambda c: c.on_disk_bytes,
                                                         lambda v: fmt((v or 0) / 2**20, 0))),
]


def workloads_of(ps: list[Pair]) -> list[str]:
    return list(dict.fromkeys(p.workload for p in ps))


def terminal_table(ps: list[Pair], workload: str) -> Table:
    t = Table(title=f"{workload_label(workload)}: before and after, per stack", title_justify="left",
              title_style="bold", box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1, 0, 0))
    for i, (h, _) in enumerate(COLUMNS):
        t.add_column(h, justify="left" if i == 0 else "right", no_wrap=True)
    for p in ps:
        if p.workload == workload:
            t.add_row(*[get(p) for _, get in COLUMNS])
    return t


def print_compare(before_dir: Path, after_dir: Path, console: Console) -> None:
    _, scen_a, _, cells_a, ps = load_pair(before_dir, after_dir)
    console.print(Text(f"before: {before_dir}\nafter:  {after_dir}", style="dim"))
    line = compare_headline(scen_a, cells_a, ps)
    if line:
        console.print(Text(line, style="bold green"), soft_wrap=True)
    for w in workloads_of(ps):
        console.print(terminal_table(ps, w))


def write_compare_html(before_dir: Path, after_dir: Path) -> Path:
    scen_b, scen_a, cells_b, cells_a, ps = load_pair(before_dir, after_dir)
    figures = []
    for w in workloads_of(ps):
        mine = [p for p in ps if p.workload == w]
        names = [p.stack for p in mine]
        spread = any((p.before and p.before.n > 1) or (p.after and p.after.n > 1) for p in mine)
        fig = plots.before_after_bars(f"TPS per stack, before and after — {workload_label(w)}", "transactions per second",
                                      names, [p.before for p in mine], [p.after for p in mine], lambda c: c.tps, spread)
        figures.append(html_report.chart(fig, f"TPS before and after, {workload_label(w)}", "", None))
        fig = plots.before_after_bars(f"Reads per transaction, before and after — {workload_label(w)}",
                                      "disk reads per transaction", names, [p.before for p in mine],
                                      [p.after for p in mine], lambda c: c.reads_per_txn, False)
        figures.append(html_report.chart(fig, f"Reads per transaction before and after, {workload_label(w)}", "", None))
    page = html_report.Page(
        title=f"Before and after: {scen_a.get('title', scen_a['name'])}",
        meta=f"before {before_dir.name} ({scen_b['name']}) · after {after_dir.name} ({scen_a['name']})",
        headline=compare_headline(scen_a, cells_a, ps),
        tables=[html_report.HtmlTable(headers=[h for h, _ in COLUMNS],
                                      rows=[[get(p) for _, get in COLUMNS] for p in ps if p.workload == w],
                                      caption=f"{workload_label(w)}: per stack; × is after / before",
                                      id=f"ratio-{i}", css="data ratio")
                for i, w in enumerate(workloads_of(ps), 1)],
        figures=figures,
        measured=[("before", str(before_dir)), ("after", str(after_dir))],
        details=[html_report.Details("Before: the whole report", _summary_tables(before_dir)),
                 html_report.Details("After: the whole report", _summary_tables(after_dir))])
    out = after_dir / f"compare-with-{before_dir.name}.html"
    out.write_text(html_report.render(page))
    return out


def _summary_tables(rundir: Path) -> list:
    scenario, runs, _ = load_results(rundir)
    cells = cells_of(scenario, runs)
    return [html_report.ratio_html_table(scenario, cells, w, i + 100)
            for i, w in enumerate(analysis.workloads_of(scenario, cells))]

"""The report's charts, each answering one question a DBA asks: TPS per stack, reads per
transaction, TPS by buffer pool / ARC split (the memory sweep), TPS over time, size on
disk, the L2ARC hit ratio over time, TPS after a restart and over a long run, TPS with a
snapshot every few seconds (its instants marked); and before/after for a comparison.

Owns: matplotlib figures (object API, no pyplot state) and their PNG bytes.
Promises: every chart has a title, labelled axes and units; bar labels sit inside the axes
(head room above the tallest bar), so they never cover a title; min–max whiskers wherever
a stack ran more than once.
Must never: compute a number itself — values come from analysis.Cell and cachephases.
"""
from __future__ import annotations

import io

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from . import cachephases
from .analysis import Cell, memory_of
from .humanize import workload_label

TARN_RED, BASELINE_GREY = "#d62728", "#888888"
OTHERS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf"]


def stack_colors(cells: list[Cell], baseline: str | None) -> list[str]:
    """The same stack has the same colour in every chart: the baseline grey, tarn red
    (darker for a second tarn stack), the others from a palette without those two."""
    out, others, tarns = [], iter(OTHERS * 3), iter(["#d62728", "#a01c1c", "#f08080", "#6e0f0f"] * 3)
    for c in cells:
        out.append(BASELINE_GREY if c.stack == baseline else next(tarns) if c.fs == "tarn" else next(others))
    return out
HEADROOM = 1.28   # y limit over the tallest bar or whisker: room for its label


def new_figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    return buf.getvalue()


def _title(fig: Figure, question: str, subtitle: str, ax=None) -> None:
    """The question as the figure's title; the subtitle (what exactly is shown) under it
    on a single axes, under the panels otherwise — both inside the constrained layout."""
    fig.suptitle(question, fontsize=12, fontweight="bold")
    if ax is not None:
        ax.set_title(subtitle, fontsize=8, color="#555555", wrap=True)
    else:
        fig.supxlabel(subtitle, fontsize=8, color="#555555")


def _label_above(ax, xs, tops, labels) -> None:
    for x, top, text in zip(xs, tops, labels):
        ax.annotate(text, (x, top), xytext=(0, 3), textcoords="offset points",
                    ha="center", va="bottom", fontsize=8)


def _bar_width(n_stacks: int) -> float:
    return max(4.0, 1.2 * n_stacks + 2.0)


def tps_bars(workload: str, cells: list[Cell], baseline: str | None) -> Figure:
    """TPS per stack, mean of its runs, min–max whiskers where it ran more than once,
    each bar labelled with its TPS and its ratio to the baseline."""
    fig = new_figure(_bar_width(len(cells)), 3.6)
    ax = fig.add_subplot()
    names = [c.stack for c in cells]
    means = [c.tps for c in cells]
    base = next((c.tps for c in cells if c.stack == baseline), None)
    colors = stack_colors(cells, baseline)
    repeated = any(c.n > 1 for c in cells)
    yerr = [[m - c.tps_min for m, c in zip(means, cells)], [c.tps_max - m for m, c in zip(means, cells)]]
    ax.bar(names, means, color=colors, yerr=yerr if repeated else None, capsize=4)
    tops = [c.tps_max if repeated else c.tps for c in cells]
    labels = [(f"{m:,.1f}" if m < 100 else f"{m:,.0f}") + (f"\n{m / base:.2f}×" if base else "") for m in means]
    _label_above(ax, range(len(cells)), tops, labels)
    ax.set_ylim(0, max(tops + [1e-9]) * HEADROOM)
    ax.set_ylabel("transactions per second")
    ax.grid(axis="y", alpha=0.3)
    ax.tick_params(axis="x", labelrotation=15 if len(cells) > 4 else 0, labelsize=9)
    runs = max(c.n for c in cells)
    note = f"mean of {runs} runs, whiskers min–max" if repeated else "one run per stack"
    _title(fig, f"TPS per stack — {workload_label(workload)}",
           f"{note}; ratio to {baseline}" if base else note, ax)
    return fig


def per_txn_bars(workload: str, cells: list[Cell]) -> Figure:
    """Reads per transaction on the paced disk, with writes and I/O units beside them."""
    fig = new_figure(_bar_width(len(cells)) + 1.5, 3.6)
    ax = fig.add_subplot()
    series = [("disk reads", [c.reads_per_txn or 0.0 for c in cells], "#1f77b4"),
              ("disk writes", [c.writes_per_txn or 0.0 for c in cells], "#ff7f0e"),
              ("I/O units (budget)", [c.units_per_txn or 0.0 for c in cells], "#7f7f7f")]
    width = 0.8 / len(series)
    top = 0.0
    for k, (label, values, color) in enumerate(series):
        xs = [i + (k - 1) * width for i in range(len(cells))]
        ax.bar(xs, values, width, label=label, color=color)
        _label_above(ax, xs, values, [f"{v:.2f}" if v < 10 else f"{v:.1f}" for v in values])
        top = max([top] + values)
    ax.set_xticks(range(len(cells)), [c.stack for c in cells])
    ax.tick_params(axis="x", labelrotation=15 if len(cells) > 4 else 0, labelsize=9)
    ax.set_ylim(0, (top or 1.0) * HEADROOM)
    ax.set_ylabel("per transaction")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    exact = all(c.io_units[1] for c in cells)
    _title(fig, f"Reads per transaction — {workload_label(workload)}",
           "the paced disk's reads and writes (diskstats) per committed transaction; an I/O unit is "
           "one I/O of up to the disk's size cap" + ("" if exact else " (lower bound for older results)"), ax)
    return fig


def split_bars(sweep) -> Figure:
    """One budget, split differently: TPS per split (the stacks given all of it as buffer
    pool first, grey), each bar labelled with its TPS and disk reads per transaction; the
    winning split darker."""
    cells = sweep.references + sweep.points
    fig = new_figure(_bar_width(len(cells)) + 1.0, 3.8)
    ax = fig.add_subplot()
    names = [f"{memory_of(c).split()}\n{c.stack}" for c in cells]
    tps = [c.tps for c in cells]
    colors = [BASELINE_GREY if c in sweep.references else ("#a01c1c" if c is sweep.best else "#f08080") for c in cells]
    repeated = any(c.n > 1 for c in cells)
    yerr = [[c.tps - c.tps_min for c in cells], [c.tps_max - c.tps for c in cells]]
    ax.bar(range(len(cells)), tps, color=colors, yerr=yerr if repeated else None, capsize=4)
    tops = [c.tps_max if repeated else c.tps for c in cells]
    labels = [(f"{v:,.1f}" if v < 100 else f"{v:,.0f}") + f" TPS\n{c.reads_per_txn or 0:.2f} reads/txn"
              for v, c in zip(tps, cells)]
    _label_above(ax, range(len(cells)), tops, labels)
    ax.set_xticks(range(len(cells)), names)
    ax.tick_params(axis="x", labelsize=8)
    ax.set_ylim(0, max(tops + [1e-9]) * 1.4)
    ax.set_ylabel("transactions per second")
    ax.grid(axis="y", alpha=0.3)
    _title(fig, f"TPS by buffer pool / ARC split — {workload_label(sweep.workload)}",
           f"{sweep.total // 2**20} MiB in all, split buffer pool / ARC (MiB); grey: no ARC, all of it as "
           "buffer pool; dark red: the winning split", ax)
    return fig


def moving_average(values: list[float], window: int) -> list[float]:
    """Trailing mean over up to `window` points (the first points average what exists)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def mean_series(cell: Cell) -> tuple[list[int], list[float]]:
    """Per-second TPS averaged over the cell's runs, over the seconds every run reported."""
    by_t: dict[int, list[float]] = {}
    for r in cell.runs:
        for p in r.get("series", []):
            by_t.setdefault(p["t"], []).append(p["tps"])
    ts = sorted(t for t, v in by_t.items() if len(v) == cell.n)
    return ts, [sum(by_t[t]) / len(by_t[t]) for t in ts]


def tps_over_time(workload: str, cells: list[Cell], baseline: str | None = None, window: int = 5) -> Figure:
    """Per-second TPS (thin) and its moving average (bold); more than three stacks get a
    panel each on shared axes, so the lines stay readable."""
    many = len(cells) > 3
    rows = (len(cells) + 1) // 2 if many else 1
    fig = new_figure(10 if many else 9, 2.2 * rows + 1.0 if many else 3.6)
    axes = fig.subplots(rows, 2 if many else 1, sharex=True, sharey=True, squeeze=False)
    flat = list(axes.flat)
    for i, (c, color) in enumerate(zip(cells, stack_colors(cells, baseline))):
        ax = flat[i] if many else flat[0]
        t, tps = mean_series(c)
        ax.plot(t, tps, color=color, linewidth=0.7, alpha=0.45)
        ax.plot(t, moving_average(tps, window), color=color, linewidth=2, label=f"{c.stack} (mean {c.tps:,.0f})")
    for ax in flat[len(cells):] if many else []:
        ax.set_visible(False)
    for ax in flat:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="lower left")
    for ax in axes[:, 0]:
        ax.set_ylabel("TPS")
    runs = max(c.n for c in cells)
    _title(fig, f"TPS over time — {workload_label(workload)}",
           f"seconds into the run — TPS per second (thin) and its {window} s moving average (bold)"
           + (f"; mean of {runs} runs per second" if runs > 1 else ""))
    return fig


def tps_with_snapshots(pairs: list[tuple[Cell, list[float]]], baseline: str | None, window: int = 5) -> Figure:
    """TPS over time of the runs that took snapshots beside the run without (the baseline),
    each snapshot's instant a dotted vertical line in its stack's colour: does a snapshot
    (or the destroy of the oldest) dent the rate?"""
    fig = new_figure(9, 3.6)
    ax = fig.add_subplot()
    cells = [c for c, _ in pairs]
    for (cell, instants), color in zip(pairs, stack_colors(cells, baseline)):
        t, tps = mean_series(cell)
        ax.plot(t, tps, color=color, linewidth=0.7, alpha=0.45)
        mean_tps = f"{cell.tps:,.1f}" if cell.tps < 100 else f"{cell.tps:,.0f}"
        label = f"{cell.stack} (mean {mean_tps} TPS)" + (f", {len(instants)} snapshots" if instants else "")
        ax.plot(t, moving_average(tps, window), color=color, linewidth=2, label=label)
        for x in instants:
            ax.axvline(x, color=color, linewidth=0.8, linestyle=":")
    ax.set_xlabel("seconds into the run")
    ax.set_ylabel("TPS")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="lower left")
    _title(fig, "TPS with a snapshot every few seconds, against none",
           f"TPS per second (thin) and its {window} s moving average (bold); dotted: a snapshot was taken", ax)
    return fig


def size_bars(cells: list[Cell]) -> Figure:
    """Bytes on disk (measured) beside the files' apparent size, per stack."""
    fig = new_figure(_bar_width(len(cells)) + 1.5, 3.6)
    ax = fig.add_subplot()
    on_disk = [(c.on_disk_bytes or 0) / 2**20 for c in cells]
    apparent = [(c.apparent_bytes or 0) / 2**20 for c in cells]
    xs = range(len(cells))
    ax.bar([x - 0.2 for x in xs], on_disk, 0.4, label="on disk", color="#1f77b4")
    ax.bar([x + 0.2 for x in xs], apparent, 0.4, label="apparent (file sizes)", color="#bbbbbb")
    _label_above(ax, [x - 0.2 for x in xs], on_disk, [f"{v:,.0f}" for v in on_disk])
    _label_above(ax, [x + 0.2 for x in xs], apparent, [f"{v:,.0f}" for v in apparent])
    ax.set_xticks(list(xs), [c.stack for c in cells])
    ax.tick_params(axis="x", labelrotation=15 if len(cells) > 4 else 0, labelsize=9)
    ax.set_ylim(0, max(on_disk + apparent + [1.0]) * HEADROOM)
    ax.set_ylabel("MiB")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    _title(fig, "Size on disk",
           "the database's files at the end of the last run: on disk (compsize / zfs referenced / "
           "tarn used / df) and apparent (du)", ax)
    return fig


def before_after_bars(title: str, unit: str, names: list[str], before: list[Cell | None],
                      after: list[Cell | None], value, spread: bool) -> Figure:
    """Grouped bars, before and after, per stack; min–max whiskers when `spread`."""
    fig = new_figure(_bar_width(len(names)) + 1.5, 3.6)
    ax = fig.add_subplot()
    top = 0.0
    for k, (label, cells, color) in enumerate((("before", before, "#bbbbbb"), ("after", after, "#1f77b4"))):
        xs = [i + (k - 0.5) * 0.4 for i in range(len(names))]
        vals = [value(c) if c else 0.0 for c in cells]
        vals = [v or 0.0 for v in vals]
        err = None
        if spread:
            err = [[v - (c.tps_min if c else v) for v, c in zip(vals, cells)],
                   [(c.tps_max if c else v) - v for v, c in zip(vals, cells)]]
        ax.bar(xs, vals, 0.4, label=label, color=color, yerr=err, capsize=3)
        tops = [(c.tps_max if (spread and c) else v) for v, c in zip(vals, cells)]
        _label_above(ax, xs, tops, [f"{v:,.1f}" if v < 100 else f"{v:,.0f}" for v in vals])
        top = max([top] + tops)
    ax.set_xticks(range(len(names)), names)
    ax.tick_params(axis="x", labelrotation=15 if len(names) > 4 else 0, labelsize=9)
    ax.set_ylim(0, (top or 1.0) * HEADROOM)
    ax.set_ylabel(unit)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    _title(fig, title, "before (grey) and after (blue), same stacks and workload", ax)
    return fig


# -- the l2arc scenario: the cache device over time ----------------------------------------------

def _percent(values: list[float | None]) -> list[float]:
    """Ratios as percent; a second without lookups is a gap in the line (NaN), not 0%."""
    return [float("nan") if v is None else 100.0 * v for v in values]


def l2arc_hits_over_time(pairs: list[tuple[Cell, dict]], baseline: str | None, title: str,
                         window: int = 5) -> Figure:
    """The L2ARC hit ratio over a run, per stack with a cache device: the engine's own
    (hits / (hits + misses) over the last `window` seconds, solid) where it exposes one, and
    the cache device's share of the device reads for every
    stack with a cache device (over the same window, dashed)."""
    fig = new_figure(9, 3.8)
    ax = fig.add_subplot()
    cells = [c for c, _ in pairs]
    for (cell, run), color in zip(pairs, stack_colors(cells, baseline)):
        t, hits = cachephases.hit_ratio_series(run, window)
        if t:
            ax.plot(t, _percent(hits), color=color, linewidth=2, label=f"{cell.stack}: L2ARC hit ratio")
        t, share = cachephases.cache_read_share_series(run, window)
        if t:
            ax.plot(t, _percent(share), color=color, linewidth=1, linestyle="--",
                    label=f"{cell.stack}: cache device's share of reads")
    ax.set_ylim(0, 105)
    ax.set_xlabel("seconds into the run")
    ax.set_ylabel("%")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    _title(fig, title, f"over the last {window} s — solid: the engine's L2ARC hits / lookups; dashed: cache "
                       "device reads / (cache + data device reads)", ax)
    return fig


def restart_over_time(pairs: list[tuple[Cell, dict]], baseline: str | None, window: int = 5) -> Figure:
    """TPS after the restart (moving average) against the warm run's mean (dotted), the
    first minute shaded: is the cache warm again within a minute?"""
    fig = new_figure(9, 3.6)
    ax = fig.add_subplot()
    cells = [c for c, _ in pairs]
    for (cell, run), color in zip(pairs, stack_colors(cells, baseline)):
        t, tps = cachephases.tps_series(run)
        ax.plot(t, moving_average(tps, window), color=color, linewidth=2, label=f"{cell.stack} after restart")
        ax.axhline(cell.tps, color=color, linewidth=1, linestyle=":", label=f"{cell.stack} warm ({cell.tps:,.0f})")
    ax.axvspan(0, cachephases.FIRST_MINUTE, color="#eeeeee", zorder=0)
    ax.set_xlabel("seconds after the pool was imported and the database started")
    ax.set_ylabel("TPS")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    _title(fig, "TPS after a restart (export, import)",
           f"{window} s moving average; dotted: the warm run's mean; shaded: the first minute "
           f"(bar: ≥ {cachephases.RESTART_BAR:.0%} of warm)", ax)
    return fig


def long_run_over_time(pairs: list[tuple[Cell, dict]], baseline: str | None, window: int = 10) -> Figure:
    """The long run: TPS (top) and the L2ARC hit ratio (bottom) over time, the last quarter
    shaded — does the feed keep up while the data is overwritten?"""
    fig = new_figure(9, 5.6)
    top, bottom = fig.subplots(2, 1, sharex=True)
    cells = [c for c, _ in pairs]
    end = 0.0
    for (cell, run), color in zip(pairs, stack_colors(cells, baseline)):
        t, tps = cachephases.tps_series(run)
        top.plot(t, moving_average(tps, window), color=color, linewidth=2, label=cell.stack)
        end = max([end] + t)
        ht, hits = cachephases.hit_ratio_series(run, window)
        if ht:
            bottom.plot(ht, _percent(hits), color=color, linewidth=2, label=f"{cell.stack}: L2ARC hit ratio")
        else:
            st, share = cachephases.cache_read_share_series(run, window)
            if st:
                bottom.plot(st, _percent(share), color=color, linewidth=1, linestyle="--",
                            label=f"{cell.stack}: cache device's share of reads")
    for ax in (top, bottom):
        if end:
            ax.axvspan(end * 0.75, end, color="#eeeeee", zorder=0)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    top.set_ylabel("TPS")
    bottom.set_ylabel("%")
    bottom.set_ylim(0, 105)
    bottom.set_xlabel("seconds into the long run")
    _title(fig, "Long run: TPS and L2ARC hit ratio over time",
           f"{window} s moving averages; shaded: the last quarter (bar: ≥ {cachephases.LONG_BAR:.0%} of the best "
           "quarter)\ndashed: the cache device's share of reads, where the engine has no L2ARC counters")
    return fig

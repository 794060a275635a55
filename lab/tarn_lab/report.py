"""Reports from a results directory: the sysbench-style terminal table (rich) and an HTML
page with matplotlib plots (TPS over time, size per stack, TPS and read IOPS per stack).

Owns: reading <rundir>/runs/*/*.json back and presenting them; report.html and plots/.
Promises: shows only measured numbers from the JSON files, and every skipped or failed
stack with its reason; each run's settings and versions are shown beside its data.
Must never: run benchmarks or change results.
"""
from __future__ import annotations

import html
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from .sysbench import TPCC_LIKE


def workload_label(w: str) -> str:
    return "TPC-C-like" if w == TPCC_LIKE else w


def load_results(rundir: Path) -> tuple[dict, list[dict], list[dict]]:
    scenario = json.loads((rundir / "scenario.json").read_text())
    runs, stacks = [], []
    order = [s["name"] for s in scenario.get("stacks", [])]
    for stack_dir in sorted((rundir / "runs").glob("*"), key=lambda p: order.index(p.name) if p.name in order else 99):
        sj = stack_dir / "stack.json"
        if sj.exists():
            stacks.append(json.loads(sj.read_text()))
        for w in scenario["workloads"]:
            p = stack_dir / f"{w}.json"
            if p.exists():
                r = json.loads(p.read_text())
                if r.get("status") == "ok":
                    runs.append(r)
    return scenario, runs, stacks


ROWS = [
    ("SQL statistics:", None), ("    queries performed:", None),
    ("        read:", lambda s: s["queries"].get("read")), ("        write:", lambda s: s["queries"].get("write")),
    ("        other:", lambda s: s["queries"].get("other")), ("        total:", lambda s: s["queries"].get("total")),
    ("    transactions:", None), ("        total", lambda s: s.get("transactions")),
    ("        tps", lambda s: s.get("tps")), ("    qps:", lambda s: s.get("qps")), ("", None),
    ("Latency (ms):", None), ("        min:", lambda s: s["latency_ms"].get("min")),
    ("        avg:", lambda s: s["latency_ms"].get("avg")), ("        max:", lambda s: s["latency_ms"].get("max")),
    ("        95th percentile:", lambda s: s["latency_ms"].get("p95")),
]


def fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.2f}"
    return str(v)


def sysbench_tables(scenario: dict, runs: list[dict]) -> list[Table]:
    """One table per stack, workloads as columns: the ZFS-vs-ext4 article's layout."""
    tables = []
    for stack in dict.fromkeys(r["stack"] for r in runs):
        mine = {r["workload"]: r for r in runs if r["stack"] == stack}
        workloads = [w for w in scenario["workloads"] if w in mine]
        t = Table(title=stack.upper(), title_style="bold")
        t.add_column("")
        for w in workloads:
            t.add_column(workload_label(w), justify="right")
        for label, get in ROWS:
            t.add_row(label, *[fmt(get(mine[w]["summary"])) if get else "" for w in workloads])
        tables.append(t)
    return tables


def ratio_rows(scenario: dict, runs: list[dict]) -> list[dict]:
    """Each stack's run divided by its baseline's run of the same workload, same results
    directory: the scenario's `baseline` for every other stack, and a stack's own `baseline`
    beside it. Pairs whose baseline has no result (skipped, failed) are left out."""
    specs = {s["name"]: s for s in scenario.get("stacks", [])}
    by = {(r["stack"], r["workload"]): r for r in runs}
    rows = []
    for r in runs:
        bases = [b for b in (scenario.get("baseline"), specs.get(r["stack"], {}).get("baseline"))
                 if b and b != r["stack"]]
        for b in dict.fromkeys(bases):
            base = by.get((b, r["workload"]))
            if base is None:
                continue
            mine, theirs = r["summary"], base["summary"]
            div = lambda x, y: x / y if x is not None and y else None
            rows.append({"stack": r["stack"], "workload": r["workload"], "baseline": b,
                         "tps": div(mine.get("tps"), theirs.get("tps")),
                         "latency_avg": div(mine["latency_ms"].get("avg"), theirs["latency_ms"].get("avg")),
                         "latency_p95": div(mine["latency_ms"].get("p95"), theirs["latency_ms"].get("p95"))})
    return rows


RATIO_COLUMNS = (("TPS", "tps"), ("avg latency", "latency_avg"), ("p95 latency", "latency_p95"))


def fmt_ratio(v) -> str:
    return "" if v is None else f"{v:.2f}x"


def ratio_table(rows: list[dict]) -> Table:
    t = Table(title="Against the baseline, same run (stack / baseline)", title_style="bold")
    for col in ("stack", "workload", "baseline"):
        t.add_column(col)
    for label, _ in RATIO_COLUMNS:
        t.add_column(label, justify="right")
    for row in rows:
        t.add_row(row["stack"], workload_label(row["workload"]), row["baseline"],
                  *[fmt_ratio(row[key]) for _, key in RATIO_COLUMNS])
    return t


def io_and_size_table(runs: list[dict]) -> Table:
    t = Table(title="Devices and size (measured)", title_style="bold")
    for col in ("stack", "workload", "tps", "data r IOPS", "data w IOPS", "data MB read",
                "data MB written", "cache/log I/Os", "CPU busy %", "dataset on disk MiB", "apparent MiB"):
        t.add_column(col, justify="right" if col not in ("stack", "workload") else "left")
    for r in runs:
        secs = max(r["summary"].get("total_time_s", 1.0), 1e-3)
        d = r["device_totals"].get("data", {})
        other = sum(v.get("reads", 0) + v.get("writes", 0) for k, v in r["device_totals"].items() if k != "data")
        cpu = [row["cpu"]["busy"] for row in r.get("system", [])]
        t.add_row(r["stack"], workload_label(r["workload"]), fmt(r["summary"]["tps"]),
                  fmt(d.get("reads", 0) / secs), fmt(d.get("writes", 0) / secs),
                  fmt(d.get("read_bytes", 0) / 1e6), fmt(d.get("write_bytes", 0) / 1e6), str(other),
                  fmt(sum(cpu) / len(cpu) if cpu else None),
                  fmt(r["sizes"]["on_disk_bytes"] / 2**20), fmt(r["sizes"]["apparent_bytes"] / 2**20))
    return t


def print_terminal(rundir: Path, console: Console) -> None:
    scenario, runs, stacks = load_results(rundir)
    console.print(f"[bold]{scenario.get('title', scenario['name'])}[/bold] ({scenario.get('size_class')} sizes)")
    for t in sysbench_tables(scenario, runs):
        console.print(t)
    if runs:
        console.print(io_and_size_table(runs))
    ratios = ratio_rows(scenario, runs)
    if ratios:
        console.print(ratio_table(ratios))
    for s in stacks:
        if s.get("status") != "ok":
            console.print(f"[yellow]{s['stack']}: {s['status']}: {s.get('reason')}[/yellow]")
        elif (s.get("spec") or {}).get("notes"):
            console.print(f"[cyan]{s['stack']}: note: {s['spec']['notes']}[/cyan]")


def write_html(rundir: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenario, runs, stacks = load_results(rundir)
    plots = rundir / "plots"
    plots.mkdir(exist_ok=True)
    images = []
    for w in scenario["workloads"]:
        mine = [r for r in runs if r["workload"] == w]
        if not mine:
            continue
        name = _tps_over_time_plot(plt, w, mine, plots)
        images.append((f"{workload_label(w)}: TPS over time", name))
    by_stack = {}
    for r in runs:
        by_stack[r["stack"]] = r
    if by_stack:
        images.append(("Dataset size per stack", _size_plot(plt, by_stack, plots)))
    for w in scenario["workloads"]:
        mine = [r for r in runs if r["workload"] == w]
        if not mine:
            continue
        name = _tps_io_plot(plt, w, mine, plots)
        images.append((f"{workload_label(w)}: TPS, read IOPS and MB read per stack", name))
    out = rundir / "report.html"
    out.write_text(_html(scenario, runs, stacks, images, rundir))
    return out


def _label_bars(ax, bars, fmt_str: str) -> None:
    for b in bars:
        ax.annotate(fmt_str.format(b.get_height()), (b.get_x() + b.get_width() / 2, b.get_height()),
                    ha="center", va="bottom", fontsize=8)


def arc_hits_misses(r: dict) -> str:
    """The stack's own ARC counters over the run (tarn's `tarn stats`); blank where none."""
    arc = ((r.get("stack_engine_stats") or {}).get("delta") or {}).get("arc") or {}
    if "hits" not in arc:
        return ""
    return f"{arc['hits']} / {arc.get('misses', 0)}"


def run_seconds(r: dict) -> float:
    return max(r["summary"].get("total_time_s", 1.0), 1e-3)


def moving_average(values: list[float], window: int) -> list[float]:
    """Trailing mean over up to `window` points (the first points average what exists)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def _tps_over_time_plot(plt, w: str, mine: list[dict], plots: Path, window: int = 5) -> str:
    """Per-second TPS (thin) and its 5 s moving average (bold). Up to three stacks share one
    axes; more get one panel each on shared axes, so the lines stay readable."""
    many = len(mine) > 3
    rows = (len(mine) + 1) // 2 if many else 1
    fig, axes = plt.subplots(rows, 2 if many else 1, figsize=(11 if many else 9, 2.3 * rows + 1.2 if many else 3.8),
                             sharex=True, sharey=True, squeeze=False)
    flat = list(axes.flat)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, r in enumerate(mine):
        ax = flat[i] if many else flat[0]
        color = colors[i % len(colors)]
        t = [p["t"] for p in r["series"]]
        tps = [p["tps"] for p in r["series"]]
        ax.plot(t, tps, color=color, linewidth=0.7, alpha=0.45)
        ax.plot(t, moving_average(tps, window), color=color, linewidth=2,
                label=f"{r['stack']} (mean {r['summary']['tps']:.1f})")
        if many:
            ax.set_title(r["stack"], fontsize=9)
    for ax in flat[len(mine):] if many else []:
        ax.set_visible(False)
    for ax in flat:
        ax.set_ylabel("TPS (transactions/s)", fontsize=8)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper left")
    for ax in (axes[-1] if many else flat):
        ax.set_xlabel("seconds since the run started")
    fig.suptitle(f"{workload_label(w)}: TPS per second (thin) and {window} s moving average (bold)", fontsize=10)
    fig.tight_layout()
    name = f"tps_{w}.png"; fig.savefig(plots / name, dpi=90); plt.close(fig)
    return name


def _size_plot(plt, by_stack: dict, plots: Path) -> str:
    """Grouped bars per stack: bytes on disk (measured) beside the apparent (file) size."""
    names = list(by_stack)
    x = range(len(names))
    on_disk = [by_stack[n]["sizes"]["on_disk_bytes"] / 2**20 for n in names]
    apparent = [by_stack[n]["sizes"]["apparent_bytes"] / 2**20 for n in names]
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(names) + 2), 3.8))
    b1 = ax.bar([i - 0.2 for i in x], on_disk, 0.4, label="on disk (compsize / zfs referenced / df used)")
    b2 = ax.bar([i + 0.2 for i in x], apparent, 0.4, label="apparent (du -sb of the datadir)", color="tab:gray")
    _label_bars(ax, b1, "{:.0f}"); _label_bars(ax, b2, "{:.0f}")
    ax.set_xticks(list(x)); ax.set_xticklabels(names, rotation=15 if len(names) > 4 else 0)
    ax.set_ylabel("MiB"); ax.set_title("Dataset size per stack, end of the last run (MiB)")
    ax.set_ylim(0, max(on_disk + apparent + [1]) * 1.2)
    ax.legend(fontsize=8, loc="upper left"); fig.tight_layout()
    fig.savefig(plots / "size.png", dpi=90); plt.close(fig)
    return "size.png"


def _tps_io_plot(plt, w: str, mine: list[dict], plots: Path) -> str:
    """Three panels sharing the stacks: TPS, data-device read IOPS, data-device MB read."""
    labels = [r["stack"] for r in mine]
    data = [r["device_totals"].get("data", {}) for r in mine]
    panels = [("TPS", [r["summary"]["tps"] for r in mine], "transactions / s", "{:.1f}", "tab:blue"),
              ("read IOPS (data device)", [d.get("reads", 0) / run_seconds(r) for d, r in zip(data, mine)],
               "reads / s", "{:.0f}", "tab:orange"),
              ("MB read (data device)", [d.get("read_bytes", 0) / 1e6 for d in data], "MB (10^6 bytes)",
               "{:.0f}", "tab:green")]
    if len(mine) <= 3:
        fig, axes = plt.subplots(1, 3, figsize=(11, 3.6))
    else:  # many stacks: one panel per row, so the bars and their names stay legible
        fig, axes = plt.subplots(3, 1, figsize=(max(8, 1.0 * len(mine) + 3), 9), sharex=True)
    for ax, (title, values, unit, f, color) in zip(axes, panels):
        bars = ax.bar(labels, values, color=color)
        _label_bars(ax, bars, f)
        ax.set_title(title, fontsize=10); ax.set_ylabel(unit)
        ax.set_ylim(0, max(values + [1e-9]) * 1.2 or 1)
        ax.tick_params(axis="x", labelrotation=15 if len(mine) > 3 else 0, labelsize=8)
    fig.suptitle(f"{workload_label(w)}: per stack, whole run", fontsize=11)
    fig.tight_layout()
    name = f"tps_riops_{w}.png"; fig.savefig(plots / name, dpi=90); plt.close(fig)
    return name


def _html(scenario, runs, stacks, images, rundir: Path) -> str:
    e = html.escape
    parts = [f"<html><head><meta charset='utf-8'><title>{e(scenario['name'])}</title>",
             "<style>body{font-family:sans-serif;max-width:1100px;margin:auto} table{border-collapse:collapse}"
             " td,th{border:1px solid #ccc;padding:2px 6px;text-align:right} pre{background:#f4f4f4;padding:6px;"
             "overflow:auto;font-size:11px} img{max-width:100%}</style></head><body>",
             f"<h1>{e(scenario.get('title', scenario['name']))}</h1><p>{e(scenario.get('description', ''))}</p>",
             f"<p>Sizes: {e(str(scenario.get('size_class')))}. Emulated disk: {e(json.dumps(scenario['disk']))}. "
             "Workload names: TPC-C-like is a sysbench Lua script written from the public TPC-C "
             "specification, not an audited TPC-C.</p>"]
    for s in stacks:
        if s.get("status") != "ok":
            parts.append(f"<p><b>{e(s['stack'])}</b>: {e(s['status'])} — {e(str(s.get('reason')))}</p>")
        elif (s.get("spec") or {}).get("notes"):
            parts.append(f"<p><b>{e(s['stack'])}</b>: note — {e(s['spec']['notes'])}</p>")
    for stack in dict.fromkeys(r["stack"] for r in runs):
        mine = {r["workload"]: r for r in runs if r["stack"] == stack}
        ws = [w for w in scenario["workloads"] if w in mine]
        parts.append(f"<h2>{e(stack)}</h2><table><tr><th></th>" + "".join(f"<th>{e(workload_label(w))}</th>" for w in ws) + "</tr>")
        for label, get in ROWS:
            parts.append(f"<tr><td style='text-align:left;white-space:pre;font-family:monospace'>{e(label)}</td>" +
                         "".join(f"<td>{e(fmt(get(mine[w]['summary'])) if get else '')}</td>" for w in ws) + "</tr>")
        parts.append("</table>")
    parts.append("<h2>Devices and sizes</h2><table><tr>" + "".join(
        f"<th>{c}</th>" for c in ("stack", "workload", "tps", "data reads (I/Os)", "data read IOPS", "data writes (I/Os)",
                                  "data MB read", "data MB written", "cache/log I/Os", "on disk MiB", "apparent MiB",
                                  "InnoDB pool reads from disk (pages)", "stack ARC hits / misses")) + "</tr>")
    for r in runs:
        d = r["device_totals"].get("data", {})
        other = sum(v.get("reads", 0) + v.get("writes", 0) for k, v in r["device_totals"].items() if k != "data")
        cells = [r["stack"], workload_label(r["workload"]), fmt(r["summary"]["tps"]), d.get("reads", 0),
                 fmt(d.get("reads", 0) / run_seconds(r)), d.get("writes", 0),
                 fmt(d.get("read_bytes", 0) / 1e6), fmt(d.get("write_bytes", 0) / 1e6), other,
                 fmt(r["sizes"]["on_disk_bytes"] / 2**20), fmt(r["sizes"]["apparent_bytes"] / 2**20),
                 r.get("engine_cache", {}).get("Innodb_buffer_pool_reads", ""), arc_hits_misses(r)]
        parts.append("<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in cells) + "</tr>")
    parts.append("</table>")
    ratios = ratio_rows(scenario, runs)
    if ratios:
        parts.append("<h2>Against the baseline, same run (stack / baseline)</h2><table><tr>" +
                     "".join(f"<th>{e(c)}</th>" for c in ("stack", "workload", "baseline", *(l for l, _ in RATIO_COLUMNS))) + "</tr>")
        for row in ratios:
            cells = [row["stack"], workload_label(row["workload"]), row["baseline"],
                     *[fmt_ratio(row[key]) for _, key in RATIO_COLUMNS]]
            parts.append("<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in cells) + "</tr>")
        parts.append("</table>")
    for title, name in images:
        parts.append(f"<h3>{e(title)}</h3><img src='plots/{e(name)}'>")
    parts.append("<h2>Settings and versions per run</h2>")
    for r in runs:
        parts.append(f"<h4>{e(r['stack'])} / {e(workload_label(r['workload']))}</h4><pre>" +
                     e(json.dumps({"settings": r["settings"], "versions": r.get("versions"),
                                   "dataset": r.get("dataset"), "sizes": r["sizes"]}, indent=1)) + "</pre>")
    parts.append(f"<p>Raw results: {e(str(rundir / 'runs'))}</p></body></html>")
    return "\n".join(parts)

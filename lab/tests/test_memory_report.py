"""The memory side of a report, from recorded runs (fixtures/runs): the articles' setup and
equal memory side by side with a headline each, the memory sweep's winning split and its
one-sentence advice (TPS and disk reads per transaction per split, a chart), and what each
stack was given beside the RSS its processes reached."""
import copy
import io
import json
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from statistics import mean

from tarn_lab import analysis, html_report, plots, report, scenario as sc
from tarn_lab.analysis import cells_of

RUNS = Path(__file__).parent / "fixtures" / "runs"
TINY = RUNS / "tiny-repeat"
MEMORY = RUNS / "memory"
MiB = 1 << 20


def terminal(rundir: Path) -> str:
    buf = io.StringIO()
    report.print_terminal(rundir, Console(file=buf, width=100, force_terminal=False))
    return buf.getvalue()


# -- the articles' setup and equal memory, side by side -----------------------------------------

def with_equal_variant(tmp_path: Path) -> Path:
    """tiny-repeat (ext4 and tarn with a 16 MiB buffer pool, tarn + 64 MiB ARC) as if run with
    variants = ["articles", "equal"]: its stacks expanded as the lab expands them, ext4's
    recorded runs standing in for ext4-equal's with 3× the TPS."""
    rundir = tmp_path / "tiny-variants"
    shutil.copytree(TINY, rundir)
    raw = json.loads((TINY / "scenario.json").read_text())
    raw = {k: v for k, v in raw.items() if k not in ("size_class", "fast_disk")}
    raw["memory"] = {"variants": ["articles", "equal"]}
    expanded = sc.validate(raw, origin="tiny")
    (rundir / "scenario.json").write_text(json.dumps(expanded))
    (rundir / "runs" / "ext4-equal").mkdir()
    for p in (TINY / "runs" / "ext4").glob("*.json"):
        r = json.loads(p.read_text())
        if "summary" in r:
            r["stack"] = "ext4-equal"
            r["summary"]["tps"] *= 3
        else:
            r["stack"] = "ext4-equal"
        (rundir / "runs" / "ext4-equal" / p.name).write_text(json.dumps(r))
    return rundir


def test_each_variant_has_its_own_stacks_baseline_and_headline(tmp_path):
    rundir = with_equal_variant(tmp_path)
    scenario, runs, _ = report.load_results(rundir)
    cells = cells_of(scenario, runs)
    views = analysis.variant_views(scenario, cells)
    assert [(v, view["baseline"], sorted({s for s, _ in vc})) for v, view, vc in views] == [
        ("articles", "ext4", ["ext4", "tarn"]), ("equal", "ext4-equal", ["ext4-equal", "tarn"])]
    tarn = mean([r["summary"]["tps"] for r in runs if r["stack"] == "tarn"])
    ext4 = mean([r["summary"]["tps"] for r in runs if r["stack"] == "ext4"])
    assert analysis.headline(views[0][1], views[0][2]).startswith(f"tarn {tarn / ext4:.2f}× ext4 on")
    assert analysis.headline(views[1][1], views[1][2]).startswith(f"tarn {tarn / ext4 / 3:.2f}× ext4-equal on")
    assert analysis.variant_label("equal", views[1][1]) == "equal memory (80 MiB each)"   # 16 + 64


def test_the_terminal_and_the_page_show_both_setups(tmp_path):
    rundir = with_equal_variant(tmp_path)
    out = terminal(rundir)
    assert "the articles' setup: tarn 12.39× ext4 on oltp_read_write" in out
    assert "equal memory (80 MiB each): tarn 4.13× ext4-equal on oltp_read_write" in out
    assert "oltp_read_write, the articles' setup: against ext4" in out
    assert "oltp_read_write, equal memory (80 MiB each): against ext4-equal" in out
    assert out.index("oltp_read_write, the articles' setup") < out.index("oltp_read_write, equal memory")
    page = html_report.write_html(rundir).read_text()
    assert page.index("the articles&#39; setup: tarn 12.39×") < page.index("equal memory (80 MiB each): tarn 4.13×") \
        < page.index('id="ratio-1"') < page.index('id="ratio-2"')


# -- the memory sweep: which split of one budget wins (fixtures/runs/memory: `tarn-lab run memory`) --

SPLITS = ["tarn-meta", "tarn-75-25", "tarn-50-50", "tarn-25-75"]


def raw(stack: str, workload: str) -> dict:
    return json.loads((MEMORY / "runs" / stack / f"{workload}.json").read_text())


def loaded(rundir: Path = MEMORY):
    scenario, runs, _ = report.load_results(rundir)
    return scenario, cells_of(scenario, runs)


@pytest.mark.parametrize("workload", ["tpcc_like", "select_random_points"])
def test_the_sweep_finds_the_split_with_the_most_tps_from_recorded_results(workload):
    scenario, cells = loaded()
    (sweep,) = [s for s in analysis.sweeps(scenario, cells) if s.workload == workload]
    assert sweep.fs == "tarn" and sweep.total == 128 * MiB
    assert [c.stack for c in sweep.points] == SPLITS                 # largest buffer pool first
    assert [c.stack for c in sweep.references] == ["ext4"]
    tps = {s: raw(s, workload)["summary"]["tps"] for s in SPLITS}
    best = max(tps, key=tps.get)
    assert sweep.best.stack == best
    given = raw(best, workload)["memory"]
    ext4 = raw("ext4", workload)["summary"]["tps"]
    advice = sweep.advice()
    label = "TPC-C-like" if workload == "tpcc_like" else workload
    assert advice.startswith(f"For {label} with 128 MiB in all, give {given['buffer_pool_bytes'] // MiB} MiB to "
                             f"the buffer pool and {given['arc_bytes'] // MiB} MiB to tarn's ARC")
    assert f"{tps[best]:,.1f} TPS" in advice and f"{tps[best] / ext4:.2f}× ext4 with all 128 MiB" in advice
    reads = raw(best, workload)["device_totals"]["data"]["reads"] / raw(best, workload)["summary"]["transactions"]
    assert f"{reads:.2f} disk reads per transaction" in advice


def test_splits_within_the_noise_are_called_a_tie():
    scenario, runs, _ = report.load_results(MEMORY)
    runs = copy.deepcopy(runs)
    tpcc = [r for r in runs if r["workload"] == "tpcc_like" and r["stack"] in SPLITS]
    best = max(tpcc, key=lambda r: r["summary"]["tps"])
    second = next(r for r in tpcc if r is not best)
    second["summary"]["tps"] = best["summary"]["tps"] * 0.97          # 3% behind: noise
    (sweep,) = [s for s in analysis.sweeps(scenario, cells_of(scenario, runs)) if s.workload == "tpcc_like"]
    assert [c.stack for c in sweep.tied_with_best()] == [second["stack"]]
    assert "within the noise of it, a tie" in sweep.advice()
    second["summary"]["tps"] = best["summary"]["tps"] * 0.90          # 10% behind: not a tie
    (sweep,) = [s for s in analysis.sweeps(scenario, cells_of(scenario, runs)) if s.workload == "tpcc_like"]
    assert sweep.tied_with_best() == [] and "the next best split" in sweep.advice()


def test_repeated_splits_tie_when_their_min_max_overlap():
    def cell(stack, tps_values):
        runs = []
        for k, tps in enumerate(tps_values, 1):
            r = copy.deepcopy(raw(stack, "tpcc_like"))
            r["repeat"], r["summary"]["tps"] = k, tps
            runs.append(r)
        return analysis.Cell(stack, "tarn", "tpcc_like", runs)

    best = cell("tarn-meta", [100.0, 80.0])
    overlapping = cell("tarn-50-50", [85.0, 85.0])      # its max reaches the best's min
    apart = cell("tarn-25-75", [79.0, 79.0])            # below the best's min
    sweep = analysis.Sweep("tpcc_like", "tarn", 128 * MiB, [best, overlapping, apart], [])
    assert sweep.best is best and sweep.tied_with_best() == [overlapping]


def test_a_scenario_that_sweeps_nothing_has_no_sweep():
    scenario, cells = loaded(RUNS / "quick")
    assert analysis.sweeps(scenario, cells) == []


def test_the_memory_table_shows_what_each_stack_was_given_and_its_peak_rss():
    scenario, cells = loaded()
    by_stack = {c.stack: c for c in report.memory_cells(cells)}
    assert list(by_stack) == ["ext4"] + SPLITS
    for stack, cell in by_stack.items():
        m = analysis.memory_of(cell)
        runs = [raw(stack, w) for w in ("tpcc_like", "select_random_points")]
        assert m.buffer_pool == runs[0]["memory"]["buffer_pool_bytes"] == runs[0]["memory"]["buffer_pool_actual_bytes"]
        assert m.total == 128 * MiB
        roles = {"mariadbd"} if stack == "ext4" else {"mariadbd", "tarn"}
        assert set(m.rss_max) == roles
        for role in roles:
            assert m.rss_max[role] == max(r["memory"]["rss"][role]["max_bytes"] for r in runs)
            samples = [row["rss"][role] for r in runs for row in r["system"] if role in row.get("rss", {})]
            assert max(samples) <= m.rss_max[role]


def test_the_memory_report_says_the_advice_first_and_draws_the_split_chart(tmp_path):
    rundir = tmp_path / "memory"
    shutil.copytree(MEMORY, rundir)
    out = terminal(rundir)
    scenario, cells = loaded(rundir)
    sweeps = analysis.sweeps(scenario, cells)
    for sweep in sweeps:
        assert sweep.advice() in out.replace("\n", " ") or sweep.advice()[:60] in out
        assert f"TPS by buffer pool / ARC split — {sweep.workload.replace('tpcc_like', 'TPC-C-like')}" in out
    assert "Memory: what each stack was given" in out
    page = html_report.write_html(rundir).read_text()
    assert page.index('id="headline"') < page.index('class="advice"') < page.index('id="ratio-1"') \
        < page.index('id="sweep-1"') < page.index('id="memory"')
    assert page.count('alt="TPS by buffer pool / ARC split') == 2
    assert (rundir / "plots" / "split_tpcc_like_1.png").exists()


def test_the_split_chart_labels_stay_inside_and_off_the_title():
    scenario, cells = loaded()
    for sweep in analysis.sweeps(scenario, cells):
        fig = plots.split_bars(sweep)
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        title = fig._suptitle.get_window_extent(renderer)
        for ax in fig.axes:
            assert [t.get_text() for t in ax.get_xticklabels()][0].endswith("ext4")
            for label in ax.texts:
                box = label.get_window_extent(renderer)
                assert not (box.x0 < title.x1 and title.x0 < box.x1 and box.y0 < title.y1 and title.y0 < box.y1)
                assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 and box.y1 <= fig.bbox.y1


def test_the_memory_table_names_the_database_server_column_for_postgresql_too():
    m = analysis.Memory(buffer_pool=32 * MiB, arc=128 * MiB, rss_max={"postgres": 27 * MiB, "tarn": 197 * MiB})
    cols = dict(report.memory_columns())
    assert "database\nRSS max" in cols and not any(h.startswith("mariadbd") for h in cols)
    assert cols["database\nRSS max"](None, m) == report.mib(27 * MiB)
    assert cols["daemon\nRSS max"](None, m) == report.mib(197 * MiB)


def test_the_memory_table_counts_a_capped_page_cache_in_what_was_given():
    """A PostgreSQL stack is given its page cache too (database.page_cache): the table's
    "given in all" is the headline's "192 MiB each", not the buffer pool and ARC alone."""
    m = analysis.Memory(buffer_pool=32 * MiB, arc=128 * MiB, page_cache=32 * MiB,
                        rss_max={"postgres": 27 * MiB, "tarn": 197 * MiB})
    cols = dict(report.memory_columns())
    assert cols["page cache\ngiven MiB"](None, m) == report.mib(32 * MiB)
    assert cols["given\nin all"](None, m) == report.mib(192 * MiB)
    assert cols["RSS /\ngiven"](None, m) == report.fmt_ratio(224 / 192)
    mariadb = analysis.Memory(buffer_pool=64 * MiB, arc=64 * MiB, rss_max={"mariadbd": 70 * MiB})
    assert cols["page cache\ngiven MiB"](None, mariadb) == "—"
    assert cols["given\nin all"](None, mariadb) == report.mib(128 * MiB)


def default_split_cell(tps: float) -> analysis.Cell:
    """tarn-25-75's recorded TPC-C-like run as tarn's default split records it: the same
    32/96 MiB, no primarycache set, under the default stack's name."""
    r = copy.deepcopy(raw("tarn-25-75", "tpcc_like"))
    r["stack"], r["summary"]["tps"] = "tarn-default", tps
    return analysis.Cell("tarn-default", "tarn", "tpcc_like", [r])


def test_the_default_split_is_a_quarter_to_the_buffer_pool_and_three_quarters_to_the_arc():
    scenario, cells = loaded()
    (sweep,) = [s for s in analysis.sweeps(scenario, cells) if s.workload == "tpcc_like"]
    # The recorded sweep ran 32/96 MiB with nothing tuned: that is tarn's default split.
    assert sweep.default is not None and sweep.default.stack == "tarn-25-75"
    assert analysis.memory_of(sweep.default).split() == "32/96 MiB"
    # The ZFS guides' split (7/8 to the pool, metadata only) is not it.
    others = [c for c in sweep.points if c.stack != "tarn-25-75"]
    assert analysis.Sweep("tpcc_like", "tarn", 128 * MiB, others, sweep.references).default is None


@pytest.mark.parametrize("tps, verdict", [
    (1000.0, "tarn's default split (32/96 MiB, no property tuned) is the best."),
    (None, "tarn's default split (32/96 MiB, no property tuned) ties it"),
    (1.0, "tarn's default split (32/96 MiB, no property tuned) did 1.0 TPS"),
])
def test_the_advice_says_how_tarns_default_split_did_against_the_best(tps, verdict):
    scenario, cells = loaded()
    (sweep,) = [s for s in analysis.sweeps(scenario, cells) if s.workload == "tpcc_like"]
    others = [c for c in sweep.points if c.stack != "tarn-25-75"]
    sweep = analysis.Sweep("tpcc_like", "tarn", 128 * MiB, others, sweep.references)
    assert sweep.default is None and "default split" not in sweep.advice()   # not run: not said
    best_tps = sweep.best.tps
    default = default_split_cell(best_tps * 0.98 if tps is None else tps)
    sweep = analysis.Sweep("tpcc_like", "tarn", 128 * MiB, others + [default], sweep.references)
    assert sweep.default is default
    assert analysis.memory_of(default).split() == "32/96 MiB"
    assert verdict in sweep.advice()

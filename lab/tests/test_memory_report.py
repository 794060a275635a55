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
    page = html_report.write_html(rundir).read_text()
    assert page.index("the articles&#39; setup: tarn 12.39×") < page.index("equal memory (80 MiB each): tarn 4.13×") \
        < page.index('id="ratio-1"') < page.index('id="ratio-2"')

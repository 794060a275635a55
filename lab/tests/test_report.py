"""The answer first, computed right from recorded results (fixtures/runs: real runs on this
machine): the headline, the ratio table against the baseline and its per-transaction disk
numbers, the verdict; the terminal layout (fits 100 columns, detail behind --verbose)."""
import copy
import io
import json
import math
import shutil
from pathlib import Path
from statistics import mean

import pytest
from rich.console import Console

from tarn_lab import analysis, cli, report
from tarn_lab.analysis import cells_of

RUNS = Path(__file__).parent / "fixtures" / "runs"
TINY = RUNS / "tiny-repeat"
QUICK = RUNS / "quick"


def raw_runs(rundir: Path, stack: str) -> list[dict]:
    """The stack's recorded results, read directly (not through the lab's loader)."""
    return [json.loads(p.read_text()) for p in sorted((rundir / "runs" / stack).glob("oltp_read_write*.json"))]


def loaded(rundir: Path):
    scenario, runs, stacks = report.load_results(rundir)
    return scenario, cells_of(scenario, runs)


def expected_tps(rundir, stack):
    return mean(r["summary"]["tps"] for r in raw_runs(rundir, stack))


def expected_per_txn(rundir, stack, key):
    rs = raw_runs(rundir, stack)
    txns = sum(r["summary"]["transactions"] for r in rs)
    if key == "io_units":
        return sum(r["pacer_delta"]["data"]["io_units"] for r in rs) / txns
    return sum(r["device_totals"]["data"][key] for r in rs) / txns


def expected_size(rundir, stack):
    return raw_runs(rundir, stack)[-1]["sizes"]["on_disk_bytes"]


# -- the headline -------------------------------------------------------------------------------

def test_headline_of_the_repeated_run():
    scenario, cells = loaded(TINY)
    tps = expected_tps(TINY, "tarn") / expected_tps(TINY, "ext4")
    size = expected_size(TINY, "tarn") / expected_size(TINY, "ext4")
    want = f"tarn {tps:.2f}× ext4 on oltp_read_write; {size:.2f}× ext4's size on disk"
    assert analysis.headline(scenario, cells) == want
    assert want == "tarn 12.39× ext4 on oltp_read_write; 0.15× ext4's size on disk"


def test_headline_of_the_quick_run_names_the_baseline_and_the_best_rival():
    scenario, cells = loaded(QUICK)
    others = ["xfs", "btrfs-zstd", "zfs"]
    rival = max(others, key=lambda s: expected_tps(QUICK, s))
    tarn = expected_tps(QUICK, "tarn")
    size = expected_size(QUICK, "tarn") / expected_size(QUICK, "ext4")
    want = (f"tarn {tarn / expected_tps(QUICK, 'ext4'):.2f}× ext4, {tarn / expected_tps(QUICK, rival):.2f}× {rival} "
            f"on oltp_read_write; {size:.2f}× ext4's size on disk")
    assert analysis.headline(scenario, cells) == want


def test_headline_with_several_workloads_lists_each_against_the_baseline():
    scenario, runs, _ = report.load_results(TINY)
    second = copy.deepcopy(runs)
    for r in second:
        r["workload"] = "oltp_read_only"
        r["summary"]["tps"] *= 2 if r["stack"] == "tarn" else 1
    scenario = {**scenario, "workloads": ["oltp_read_write", "oltp_read_only"]}
    line = analysis.headline(scenario, cells_of(scenario, runs + second))
    assert line.startswith("tarn vs ext4: 12.39× on oltp_read_write, 24.79× on oltp_read_only;")


# -- the ratio table ------------------------------------------------------------------------------

@pytest.mark.parametrize("rundir", [TINY, QUICK], ids=["tiny-repeat", "quick"])
def test_per_transaction_disk_numbers_come_from_diskstats_and_the_pacer(rundir):
    scenario, cells = loaded(rundir)
    for (stack, _), cell in cells.items():
        assert cell.reads_per_txn == pytest.approx(expected_per_txn(rundir, stack, "reads"))
        assert cell.writes_per_txn == pytest.approx(expected_per_txn(rundir, stack, "writes"))
        assert cell.units_per_txn == pytest.approx(expected_per_txn(rundir, stack, "io_units"))
        assert cell.io_units[1], "recorded with the pacer's own counter: exact"
        # an I/O unit is at least one I/O: units >= reads + writes as the pacer saw them
        pacer = [r["pacer_delta"]["data"] for r in raw_runs(rundir, stack)]
        assert cell.io_units[0] >= sum(p["reads"] + p["writes"] for p in pacer)


def test_ratio_table_rows_against_the_baseline():
    scenario, cells = loaded(TINY)
    rows = {r.cell.stack: r for r in analysis.ratio_table_rows(scenario, cells, "oltp_read_write")}
    assert rows["ext4"].vs(lambda c: c.tps) == pytest.approx(1.0)
    assert rows["tarn"].vs(lambda c: c.tps) == pytest.approx(expected_tps(TINY, "tarn") / expected_tps(TINY, "ext4"))
    cell = rows["tarn"].cell
    tps = [r["summary"]["tps"] for r in raw_runs(TINY, "tarn")]
    assert (cell.n, cell.tps_min, cell.tps_max) == (2, min(tps), max(tps))


def table_text(table, width=300) -> list[str]:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(table)
    return [line.rstrip() for line in console.export_text().splitlines()]


@pytest.mark.parametrize("rundir", [TINY, QUICK], ids=["tiny-repeat", "quick"])
def test_ratio_table_fits_100_columns_without_cutting_a_cell(rundir):
    scenario, cells = loaded(rundir)
    lines = table_text(report.ratio_table(scenario, cells, "oltp_read_write"))
    assert max(map(len, lines)) <= 100, "\n".join(lines)
    text = "\n".join(lines)
    assert "…" not in text
    for (stack, _), cell in cells.items():
        assert any(line.startswith(stack + " ") for line in lines), stack
        assert report.fmt_tps(cell.tps) in text


def test_ratio_table_fits_100_columns_with_the_longest_stack_names_shipped():
    # zil's stacks have the longest names; the table must still fit.
    scenario, runs, _ = report.load_results(QUICK)
    names = {"ext4": "ext4-fastjournal", "tarn": "tarn-slog-throughput", "zfs": "tarn-nolog-throughput"}
    for r in runs:
        r["stack"] = names.get(r["stack"], r["stack"])
    scenario = {**scenario, "stacks": [{**s, "name": names.get(s["name"], s["name"])} for s in scenario["stacks"]],
                "baseline": "ext4-fastjournal"}
    cells = cells_of(scenario, runs + [{**r, "repeat": 2} for r in runs])  # repeats add the min–max column
    lines = table_text(report.ratio_table(scenario, cells, "oltp_read_write"))
    assert max(map(len, lines)) <= 100, "\n".join(lines)


def test_io_units_of_older_results_are_a_lower_bound_from_diskstats():
    run = {"settings": {"disk": {"max_io": "16K"}},
           "device_totals": {"data": {"reads": 10, "read_bytes": 10 * 16384,
                                      "writes": 2, "write_bytes": 4096 + 28 * 1024}}}
    units, exact = analysis.io_units_of(run)
    # reads: 10 I/Os of 16 KiB = 10 units; writes: 32 KiB in 2 I/Os is at least 2 units
    # (the truth, 4 KiB + 28 KiB, is 3: hence only a lower bound)
    assert (units, exact) == (12, False)
    run["device_totals"]["data"]["write_bytes"] = 100 * 1024
    assert analysis.io_units_of(run) == (10 + math.ceil(100 / 16), False)


# -- the verdict ----------------------------------------------------------------------------------

def test_verdict_says_who_wins_by_how_much_and_why():
    scenario, cells = loaded(TINY)
    text = analysis.verdict(scenario, cells)
    tarn, ext4 = cells[("tarn", "oltp_read_write")], cells[("ext4", "oltp_read_write")]
    assert text.startswith(f"On oltp_read_write, tarn wins with {tarn.tps:,.1f} TPS, {tarn.tps / ext4.tps:.2f}× ext4")
    assert f"{tarn.units_per_txn:.2f} I/O units per transaction, ext4 {ext4.units_per_txn:.2f}" in text
    assert f"of the disk's budget" in text
    assert tarn.reads_per_txn == 0  # all from its ARC in this run: said in words
    assert f"tarn did not read from the disk at all (ext4: {ext4.reads_per_txn:.2f} reads per transaction)" in text
    assert "its ARC answered" in text and "buffer pool hit" in text
    assert f"wrote {tarn.written_kib_per_txn:.1f} KiB per transaction" in text
    assert "repeated 2 times" in text


def test_verdict_with_disk_reads_on_both_sides():
    scenario, cells = loaded(QUICK)
    ranked = sorted((c for c in cells.values()), key=lambda c: c.tps, reverse=True)
    # drop tarn: zfs wins, and it did read from the disk
    rest = {k: c for k, c in cells.items() if k[0] != "tarn"}
    text = analysis.verdict(scenario, rest)
    zfs, ext4 = rest[("zfs", "oltp_read_write")], rest[("ext4", "oltp_read_write")]
    assert ranked[1].stack == "zfs" and text.startswith("On oltp_read_write, zfs wins")
    assert f"zfs read from the disk {zfs.reads_per_txn:.2f} times per transaction (ext4 {ext4.reads_per_txn:.2f})" in text
    assert "ARC answered" not in text       # zfs-fuse reports no ARC counters: nothing is claimed


# -- the terminal ---------------------------------------------------------------------------------

def run_cli(argv, capsys) -> tuple[int, str]:
    rc = cli.main(argv)
    return rc, capsys.readouterr().out


def copy_of(rundir: Path, tmp_path: Path) -> Path:
    dest = tmp_path / rundir.name
    shutil.copytree(rundir, dest)
    return dest


def test_terminal_report_gives_the_answer_first_and_detail_only_with_verbose(tmp_path, capsys):
    rundir = copy_of(QUICK, tmp_path)
    rc, out = run_cli(["report", str(rundir)], capsys)
    assert rc == 0
    lines = out.splitlines()
    scenario, cells = loaded(QUICK)
    assert lines[1] == analysis.headline(scenario, cells)       # right under the title
    assert lines[2].startswith("oltp_read_write against ext4")   # then the ratio table
    assert max(map(len, lines)) <= 100
    assert "sysbench" not in out.split("--verbose")[0].lower().replace("sysbench's own", "")
    assert "queries: read" not in out
    rc, verbose = run_cli(["report", str(rundir), "--verbose"], capsys)
    assert rc == 0 and "queries: read" in verbose and "Disk: 2 GiB paced disk" in verbose
    assert verbose.index(analysis.headline(scenario, cells)) < verbose.index("queries: read")


def test_compare_two_runs_side_by_side(tmp_path, capsys):
    before, after = copy_of(QUICK, tmp_path / "a"), copy_of(QUICK, tmp_path / "b")
    # "after": tarn's runs 10% faster
    for p in (after / "runs" / "tarn").glob("*.json"):
        r = json.loads(p.read_text())
        if "summary" in r:
            r["summary"]["tps"] *= 1.1
            p.write_text(json.dumps(r))
    rc, out = run_cli(["report", "--compare", str(before), str(after)], capsys)
    assert rc == 0
    # tarn read nothing from the disk in either run: no reads ratio to give
    assert "after/before: tarn 1.10× TPS on oltp_read_write; ext4 (baseline) 1.00×" in out
    lines = out.splitlines()
    assert max(len(line) for line in lines if str(tmp_path) not in line) <= 100   # paths may be long
    tarn = next(line for line in lines if line.startswith("tarn "))
    t = report.load_results(QUICK)[1]
    tps = next(r["summary"]["tps"] for r in t if r["stack"] == "tarn")
    assert f"{tps:,.1f} → {tps * 1.1:,.1f}" in tarn and "1.10×" in tarn
    html = next(after.glob("compare-with-*.html")).read_text()
    assert "after/before: tarn 1.10×" in html and "data:image/png;base64," in html


def test_steadiness_counts_stalled_seconds_and_the_spread_of_tps():
    flat = analysis.steadiness_of([100.0, 100.0, 100.0, 100.0])
    assert flat == {"tps_cv": 0.0, "zero_tps_seconds": 0}
    stalling = analysis.steadiness_of([150.0, 0.0, 150.0, 0.0])
    assert stalling["zero_tps_seconds"] == 2
    assert stalling["tps_cv"] == pytest.approx(1.0)  # σ 75 over a mean of 75
    assert analysis.steadiness_of([]) == {"tps_cv": None, "zero_tps_seconds": None}


def test_flushes_and_their_wait_come_from_the_data_disk_over_every_repeat():
    def run(flushes, flush_ms):
        data = {"reads": 0, "read_bytes": 0, "writes": 0, "write_bytes": 0, "flushes": flushes}
        if flush_ms is not None:
            data["flush_ms"] = flush_ms
        return {"summary": {"transactions": 100, "total_time_s": 10.0, "tps": 10.0, "latency_ms": {}},
                "device_totals": {"data": data}}
    cell = analysis.Cell("tarn", "tarn", "oltp_read_write", [run(400, 200), run(200, 400)])
    assert cell.flushes_per_s == pytest.approx(30.0)  # 600 flushes in 20 s
    assert cell.f_await_ms == pytest.approx(1.0)  # 600 ms over 600 flushes
    # the host's disk under the paced one is sampled beside it, but is not the stack's device
    with_devices = run(1, 1)
    with_devices["device_totals"].update({"log": {"reads": 2, "writes": 5}, "host": {"reads": 90, "writes": 900}})
    assert analysis.Cell("tarn", "tarn", "oltp_read_write", [with_devices]).other_device_ios == 7
    older = analysis.Cell("tarn", "tarn", "oltp_read_write", [run(400, None)])
    assert older.flushes_per_s == pytest.approx(40.0) and older.f_await_ms is None
    lines = table_text(report.steadiness_table([cell], "oltp_read_write"))
    assert any("f_await" in line for line in lines) and max(map(len, lines)) <= 100, "\n".join(lines)
    assert "1.0" in lines[-1].split()[-1] and "30.0" in lines[-1].split()[-2], "\n".join(lines)


def test_steadiness_of_a_recorded_run_and_its_table():
    scenario, cells = loaded(QUICK)
    run = raw_runs(QUICK, "ext4")[0]
    s = analysis.steadiness(run)
    tps = [row["tps"] for row in run["series"]]
    assert s["zero_tps_seconds"] == sum(1 for v in tps if v == 0)
    assert s["written_kib_per_txn"] == pytest.approx(
        run["device_totals"]["data"]["write_bytes"] / 1024 / run["summary"]["transactions"])
    lines = table_text(report.steadiness_table(list(cells.values()), "oltp_read_write"))
    assert max(map(len, lines)) <= 100, "\n".join(lines)
    assert any("at 0 TPS" in line for line in lines)

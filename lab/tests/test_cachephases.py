"""The l2arc scenario's numbers (issue #12): the L2ARC counters as `tarn stats l2arc --json`
prints them, the hit ratio over time, the restart's first minute against the warm run, the
long run's last quarter against its peak, and the report's tables and charts built from them."""
import json
import shutil
from pathlib import Path

import pytest

from tarn_lab import cachephases as cp
from tarn_lab import cachereport, html_report, metrics, report, scenario, stacks
from tarn_lab.analysis import cells_of

STATS_JSON = json.dumps({"l2arc": {"asize": 176186294, "blocks": 16204, "cksum_bad": 0, "feed_backlog": 0,
                                   "feed_behind": 0, "hdr_size": 658944, "hits": 7839, "misses": 17,
                                   "size": 263285248, "write_bytes": 218873856, "rebuilding": 0}}, indent=2)


# -- parsing -------------------------------------------------------------------------------------

def test_l2arc_stats_are_parsed_from_the_cli_json():
    got = stacks.parse_l2arc_stats(STATS_JSON)
    assert got["hits"] == 7839 and got["misses"] == 17 and got["hdr_size"] == 658944


@pytest.mark.parametrize("text", ["", "not json", json.dumps({"arc": {"hits": 1}}),
                                  json.dumps({"l2arc": {"hits": 1}}), json.dumps([1, 2])])
def test_anything_but_l2arc_counters_is_none(text):
    assert stacks.parse_l2arc_stats(text) is None


def test_a_probe_that_fails_or_answers_none_is_left_out_of_the_row():
    def broken():
        raise RuntimeError("daemon gone")
    row = metrics.run_probes({"l2arc": lambda: {"hits": 1}, "gone": broken, "quiet": lambda: None})
    assert row == {"l2arc": {"hits": 1}}


# -- series --------------------------------------------------------------------------------------

def system_rows(hits: list[int], misses: list[int], data_reads=None, cache_reads=None) -> list[dict]:
    rows = []
    for i, (h, m) in enumerate(zip(hits, misses)):
        row = {"t": float(i + 1), "l2arc": {"hits": h, "misses": m}}
        if data_reads is not None:
            row["data"] = {"r_iops": data_reads[i]}
            row["cache"] = {"r_iops": cache_reads[i]}
        rows.append(row)
    return rows


def test_hit_ratio_over_time_is_of_the_lookups_in_the_window():
    # 10 lookups a second: all hits for 3 s, then none for 3 s, then no lookups.
    hits = [0, 10, 20, 30, 30, 30, 30, 30]
    misses = [0, 0, 0, 0, 10, 20, 30, 30]
    ts, ratios = cp.hit_ratio_series({"system": system_rows(hits, misses)}, window=1)
    assert ts == [2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    assert ratios == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, None]


def test_cache_read_share_per_second():
    run = {"system": system_rows([0] * 3, [0] * 3, data_reads=[10, 0, 0], cache_reads=[30, 5, 0])}
    assert cp.cache_read_share_series(run) == ([1.0, 2.0, 3.0], [0.75, 1.0, None])


def test_no_cache_device_no_share_series():
    assert cp.cache_read_share_series({"system": [{"t": 1.0, "data": {"r_iops": 5}}]}) == ([], [])


# -- one run in all --------------------------------------------------------------------------------

def warm_run(tps=100.0, transactions=9000, l2=True, cache=True, arc_mb=32) -> dict:
    run = {"summary": {"tps": tps, "transactions": transactions},
           "device_totals": {"data": {"reads": 900, "write_bytes": 0}},
           "settings": {"spec": {"arc_mb": arc_mb}},
           "memory": {"rss": {"tarn": {"max_bytes": 150 * 2**20}}}}
    if cache:
        run["device_totals"]["cache"] = {"reads": 8100}
    if l2:
        run["stack_engine_stats"] = {"delta": {"l2arc": {"hits": 900, "misses": 100, "write_bytes": 2**20,
                                                         "feed_behind": 3}},
                                     "after": {"l2arc": {"size": 200 * 2**20, "asize": 80 * 2**20,
                                                         "blocks": 1000, "hdr_size": 48000}}}
    return run


def test_summary_of_a_warm_run():
    s = cp.summarize("tarn-l2arc", warm_run())
    assert s.hit_ratio == 0.9
    assert s.hdr_bytes_per_block == 48.0
    assert s.per_txn(s.data_reads) == 0.1 and s.per_txn(s.cache_reads) == 0.9
    assert s.cache_read_share == 0.9
    assert s.feed_bytes == 2**20 and s.feed_behind == 3
    assert s.daemon_rss_max == 150 * 2**20 and s.arc_max == 32 * 2**20


def test_summary_without_engine_counters_guesses_nothing():
    s = cp.summarize("zfs-l2arc", warm_run(l2=False))
    assert s.hits is None and s.hit_ratio is None and s.hdr_bytes_per_block is None and s.size is None
    assert s.cache_read_share == 0.9


# -- the restart ------------------------------------------------------------------------------------

def series(values: list[float]) -> list[dict]:
    return [{"t": i + 1, "tps": v} for i, v in enumerate(values)]


def test_restart_counts_only_the_first_minute():
    # 60 slow seconds, then fast: the first minute is 50 TPS, not the run's mean.
    after = {"series": series([50.0] * 60 + [200.0] * 30), "restart": {"export_seconds": 2.0}}
    effect = cp.restart_effect("tarn-l2arc", warm_run(tps=100.0), after)
    assert effect.seconds == 60 and effect.first_minute_tps == 50.0
    assert effect.ratio == 0.5 and effect.passed is False
    assert effect.restart == {"export_seconds": 2.0}


def test_restart_at_the_bar_passes():
    effect = cp.restart_effect("t", warm_run(tps=100.0), {"series": series([80.0] * 60)})
    assert effect.ratio == pytest.approx(0.8) and effect.passed is True


def test_restart_hit_ratio_over_the_first_minute_from_the_counters():
    rows = system_rows([0, 30] + [30] * 80, [0, 10] + [10] * 79 + [500])
    effect = cp.restart_effect("t", warm_run(), {"series": series([1.0] * 90), "system": rows})
    assert effect.first_minute_hit_ratio == 0.75


def test_restart_reports_the_index_rebuilt_at_import():
    after = {"series": series([1.0] * 60),
             "stack_engine_stats": {"after": {"l2arc": {"rebuilt_blocks": 16000, "rebuild_ms": 42, "size": 2**28}}}}
    effect = cp.restart_effect("t", warm_run(), after)
    assert (effect.rebuilt_blocks, effect.rebuild_ms, effect.rebuilt_bytes) == (16000, 42, 2**28)


def test_restart_without_a_reported_second_is_none():
    assert cp.restart_effect("t", warm_run(), {"series": []}) is None


# -- the long run -----------------------------------------------------------------------------------

def test_tps_last_quarter_against_the_peak_block():
    # 40 s at 100 TPS with a 10 s burst at 200 in the middle, the last quarter at 90.
    values = [100.0] * 10 + [200.0] * 10 + [100.0] * 10 + [90.0] * 10
    s = cp.tps_steadiness({"series": series(values)})
    assert s.peak == 200.0 and s.last_quarter == 90.0
    assert s.ratio == 0.45 and s.passed is False


def test_a_steady_run_passes():
    s = cp.tps_steadiness({"series": series([100.0] * 36 + [95.0] * 12)})
    assert s.ratio == 0.95 and s.passed is True


def test_hit_ratio_falling_behind_in_the_last_quarter_fails():
    # 40 s: 100 lookups a second, all hits for 30 s, then half of them misses.
    hits, misses, h, m = [], [], 0, 0
    for t in range(1, 41):
        h, m = (h + 100, m) if t <= 30 else (h + 50, m + 50)
        hits.append(h)
        misses.append(m)
    s = cp.hit_steadiness({"system": system_rows(hits, misses)})
    assert s.peak == 1.0 and s.last_quarter == pytest.approx(0.5)
    assert s.passed is False


def test_overwrites_are_written_bytes_over_the_tables():
    run = {"device_totals": {"data": {"write_bytes": 3 * 10**9}}, "dataset": {"table_bytes": {"tpcc_like": 10**9}}}
    assert cp.overwrites_of(run) == 3.0
    assert cp.overwrites_of({"device_totals": {}, "dataset": {}}) is None


# -- results on disk and the report ----------------------------------------------------------------

def full_run(stack: str, fs: str, tps: float, seconds: int = 90, phase=None, l2=True) -> dict:
    run = warm_run(tps=tps, l2=l2)
    run.update({"stack": stack, "fs": fs, "workload": "tpcc_like", "status": "ok", "repeat": 1, "phase": phase,
                "series": [{"t": t, "tps": tps, "qps": tps, "lat95_ms": 10.0} for t in range(1, seconds + 1)],
                "system": system_rows(list(range(0, 90 * seconds, 90)), list(range(0, 10 * seconds, 10)),
                                      data_reads=[10] * seconds, cache_reads=[90] * seconds)
                if l2 else [],
                "dataset": {"table_bytes": {"tpcc_like": 10**8}},
                "sizes": {"on_disk_bytes": 10**8, "apparent_bytes": 2 * 10**8}})
    run["summary"].update({"latency_ms": {"p95": 10.0}, "queries": {}})
    run["device_totals"]["data"]["write_bytes"] = 4 * 10**8
    return run


def results_dir(root: Path) -> Path:
    rundir = root / "l2arc-test"
    stacks_ = [("tarn-l2arc", "tarn", 300.0, True), ("tarn", "tarn", 60.0, False)]
    (rundir / "runs").mkdir(parents=True)
    (rundir / "scenario.json").write_text(json.dumps({
        "name": "l2arc", "title": "L2ARC", "size_class": "quick", "workloads": ["tpcc_like"], "baseline": "tarn",
        "disk": {"size": "3G", "iops": 500, "bandwidth": "8M", "max_io": "16K"},
        "stacks": [{"name": n, "fs": fs} for n, fs, _, _ in stacks_]}))
    for name, fs, tps, l2 in stacks_:
        d = rundir / "runs" / name
        d.mkdir()
        (d / "stack.json").write_text(json.dumps({"stack": name, "fs": fs, "status": "ok", "spec": {"name": name}}))
        (d / "tpcc_like.json").write_text(json.dumps(full_run(name, fs, tps, l2=l2)))
        (d / "tpcc_like.restart.json").write_text(json.dumps(
            {**full_run(name, fs, tps * 0.5, seconds=60, phase="restart", l2=l2),
             "restart": {"export_seconds": 1.5, "import_seconds": 0.5}}))
        (d / "tpcc_like.long.json").write_text(json.dumps(full_run(name, fs, tps, seconds=120, phase="long", l2=l2)))
    (rundir / "runs" / "tarn" / "tpcc_like.long.json").write_text(json.dumps({"status": "failed"}))
    return rundir


def test_parts_are_read_apart_from_the_runs(tmp_path):
    rundir = results_dir(tmp_path)
    _, runs, _ = report.load_results(rundir)
    assert sorted((r["stack"], r["phase"]) for r in runs) == [("tarn", None), ("tarn-l2arc", None)]
    phases = cp.load_phases(rundir)
    # The failed long part of plain tarn is not a result.
    assert sorted(phases) == [("tarn", "tpcc_like", "restart"), ("tarn-l2arc", "tpcc_like", "long"),
                              ("tarn-l2arc", "tpcc_like", "restart")]


def test_cache_tables_from_a_results_dir(tmp_path):
    rundir = results_dir(tmp_path)
    scen, runs, _ = report.load_results(rundir)
    tables = cachereport.cache_tables(cells_of(scen, runs), cp.load_phases(rundir))
    assert [e.stack for e in tables.restart] == ["tarn-l2arc", "tarn"]
    assert all(e.ratio == 0.5 and e.passed is False for e in tables.restart)
    assert [e.stack for e in tables.long] == ["tarn-l2arc"]
    assert tables.long[0].overwrites == 4.0 and tables.long[0].hits.ratio == pytest.approx(1.0)
    titles = [title for title, _, _ in cachereport.sections(tables)]
    assert titles == [cachereport.CACHE_TITLE, cachereport.READS_TITLE, cachereport.RESTART_TITLE,
                      cachereport.LONG_TITLE]
    # The cache table's hit-ratio cell: tarn's own counter where it was sampled, else the
    # cache device's share of reads, bracketed.
    _, cols, rows = cachereport.sections(tables)[0]
    hit = dict(cols)["hit\nratio"]
    assert [hit(r) for r in rows] == ["90.0%", "[90.0%]"]


def test_zfs_share_of_reads_is_bracketed_not_called_a_hit_ratio():
    s = cp.summarize("zfs-l2arc", warm_run(l2=False))
    assert cachereport.hit_or_share(s) == "[90.0%]"


def test_html_report_has_the_cache_tables_and_charts(tmp_path):
    rundir = results_dir(tmp_path)
    page = html_report.report_page(rundir, rundir / "plots")
    captions = [t.caption for t in page.tables]
    assert cachereport.RESTART_TITLE in captions and cachereport.LONG_TITLE in captions
    titles = [f.title for f in page.figures]
    assert {"L2ARC hit ratio over time", "TPS after a restart", "Long run: TPS and L2ARC hit ratio"} <= set(titles)
    assert (rundir / "plots" / "l2arc_hits.png").stat().st_size > 1000
    html_report.write_html(rundir)


def test_terminal_report_prints_the_cache_tables(tmp_path):
    from rich.console import Console
    console = Console(record=True, width=140)
    report.print_terminal(results_dir(tmp_path), console)
    text = console.export_text()
    assert "Restart (pool exported and imported" in text and "Long run: the last quarter" in text
    assert "NO" in text   # the restart at 50% of warm fails its bar, and says so
    assert "[brackets]: none, the cache device" in text   # not eaten as markup
    assert "[90.0%]" in text


# -- the scenario ------------------------------------------------------------------------------------

@pytest.mark.parametrize("size", ["quick", "medium"])
def test_shipped_l2arc_scenario_keeps_the_data_4x_the_caches(size):
    sc = scenario.load("l2arc", size)
    assert sc["cache_checks"] == []
    by_name = {s["name"]: s for s in sc["stacks"]}
    assert by_name["tarn-l2arc"]["l2arc"] is True and by_name["zfs-l2arc"]["l2arc"] is True
    assert "l2arc" not in by_name["tarn"] and "l2arc" not in by_name["zfs"]
    assert sc["workload"]["restart"] >= cp.FIRST_MINUTE and sc["workload"]["long"] > 0


def test_l2arc_key_applies_to_tarn_and_zfs_only():
    base = {"name": "x", "workloads": ["tpcc_like"], "disk": {"size": "1G"}}
    scenario.validate({**base, "stacks": [{"name": "t", "fs": "tarn", "l2arc": True}]})
    with pytest.raises(scenario.ScenarioError, match="l2arc' only applies"):
        scenario.validate({**base, "stacks": [{"name": "e", "fs": "ext4", "l2arc": True}]})


def test_shipped_fixture_dirs_are_untouched():
    # The new loader must not pick up anything in the older fixtures as a part.
    for d in (Path(__file__).parent / "fixtures" / "runs").iterdir():
        if d.is_dir():
            assert cp.load_phases(d) == {}


def test_cache_read_share_over_a_window_is_a_ratio_of_sums():
    # A second without reads does not count as 0%: it adds nothing to either sum.
    run = {"system": system_rows([0] * 3, [0] * 3, data_reads=[10, 0, 0], cache_reads=[10, 0, 30])}
    assert cp.cache_read_share_series(run, window=3) == ([1.0, 2.0, 3.0], [0.5, 0.5, 0.8])


def test_share_steadiness_for_a_stack_without_l2arc_counters():
    # 40 s: every read from the cache device for 30 s, then one in four.
    run = {"system": system_rows([0] * 40, [0] * 40, data_reads=[0] * 30 + [30] * 10,
                                 cache_reads=[100] * 30 + [10] * 10)}
    s = cp.share_steadiness(run)
    assert s.peak == 1.0 and s.last_quarter == 0.25 and s.passed is False


# -- zfs-fuse's L2ARC counters -------------------------------------------------------------------

def test_zfs_fuse_l2arc_counters_from_its_kstats(tmp_path):
    for name, value in {"l2_hits": 90, "l2_misses": 10, "l2_size": 4096, "l2_hdr_size": 512,
                        "l2_write_bytes": 8192, "l2_read_bytes": 1024, "l2_cksum_bad": 0, "l2_io_error": 0,
                        "hits": 5000}.items():
        (tmp_path / name).write_text(f"{value}\n")
    got = stacks.zfs_fuse_l2arc_stats(tmp_path)
    assert got["hits"] == 90 and got["misses"] == 10 and got["size"] == 4096 and got["hdr_size"] == 512
    assert got["write_bytes"] == 8192
    # The ARC's own hits are not the L2ARC's.
    assert set(got) == set(stacks.ZFS_FUSE_L2ARC)


def test_zfs_fuse_without_kstats_gives_none(tmp_path):
    assert stacks.zfs_fuse_l2arc_stats(tmp_path / "absent") is None


def test_only_an_l2arc_zfs_fuse_mounts_its_kstats(tmp_path):
    assert "--no-kstat-mount" in stacks.zfs_fuse_argv(tmp_path / "pid", 32)
    assert "--no-kstat-mount" not in stacks.zfs_fuse_argv(tmp_path / "pid", 32, kstats=True)


def test_the_peak_is_the_best_quarter_not_a_burst():
    # A 3 s burst at 300 TPS inside the first quarter: the peak is that quarter's mean.
    s = cp.tps_steadiness({"series": series([300.0] * 3 + [50.0] * 37)})
    assert s.peak == 125.0 and s.last_quarter == 50.0 and s.ratio == 0.4


def test_a_stack_without_a_cache_device_has_no_l2arc_row():
    plain = warm_run(cache=False)
    plain["stack_engine_stats"]["delta"]["l2arc"].update(hits=0, misses=0)
    tables = cachereport.CacheTables([cp.summarize("tarn", plain), cp.summarize("tarn-l2arc", warm_run())], [], [])
    (_, _, l2_rows), (_, _, read_rows) = cachereport.sections(tables)
    assert [r.stack for r in l2_rows] == ["tarn-l2arc"]
    assert [r.stack for r in read_rows] == ["tarn", "tarn-l2arc"]   # its reads per transaction still count

"""Parsers on outputs recorded on this machine (fixtures/: real sysbench 1.0.20, /proc files,
btrfs compsize, zfs-fuse `zfs get`, df)."""
from pathlib import Path

import pytest

from tarn_lab import metrics, sizes, sysbench

FIX = Path(__file__).parent / "fixtures"


def text(name):
    return (FIX / name).read_text()


def test_sysbench_summary_from_recorded_run():
    s = sysbench.parse_summary(text("sysbench_oltp_read_write.txt"))
    assert s["transactions"] == 14495 and s["tps"] == 482.97
    assert s["queries"] == {"read": 202930, "write": 57980, "other": 28990, "total": 289900}
    assert s["qps"] == 9659.42
    assert s["latency_ms"]["avg"] == 8.28 and s["latency_ms"]["p95"] == 16.12
    assert s["latency_ms"]["max"] == 51.57 and s["latency_ms"]["min"] == 0.79
    assert s["total_time_s"] == 30.0108


def test_sysbench_interval_lines_from_recorded_run():
    rows = [r for r in map(sysbench.parse_interval_line, text("sysbench_oltp_read_write.txt").splitlines()) if r]
    assert [r["t"] for r in rows] == list(range(1, 31))
    last = rows[-1]
    assert last == {"t": 30, "threads": 4, "tps": 409.14, "qps": 8224.17, "reads_ps": 5759.24,
                    "writes_ps": 1646.65, "other_ps": 818.29, "lat_p95_ms": 18.61, "err_ps": 0.0}


def test_sysbench_summary_rejects_output_without_transactions():
    with pytest.raises(ValueError, match="transactions"):
        sysbench.parse_summary("FATAL: error 2002: Can't connect to local server\n")


def test_diskstats_recorded():
    devs = metrics.parse_diskstats(text("diskstats.txt"))
    assert "vda" in devs
    line = next(l.split() for l in text("diskstats.txt").splitlines() if l.split()[2] == "vda")
    assert devs["vda"]["reads"] == int(line[3])
    assert devs["vda"]["read_bytes"] == int(line[5]) * 512
    assert devs["vda"]["writes"] == int(line[7])
    assert devs["vda"]["flushes"] == int(line[18]) and devs["vda"]["flush_ms"] == int(line[19])
    assert devs["vda"]["read_ms"] == int(line[6]) and devs["vda"]["write_ms"] == int(line[10])


def test_device_rates_are_deltas_per_second():
    a = {"reads": 10, "read_bytes": 1000, "writes": 0, "write_bytes": 0, "flushes": 0, "flush_ms": 5}
    b = {"reads": 30, "read_bytes": 3000, "writes": 8, "write_bytes": 4_000_000, "flushes": 2, "flush_ms": 65}
    r = metrics.device_rates(a, b, 2.0)
    assert r["r_iops"] == 10 and r["w_iops"] == 4 and r["w_mbps"] == 2.0 and r["flushes_ps"] == 1
    assert r["flush_ms_ps"] == 30 and r["f_await_ms"] == 30


def test_device_rates_give_the_mean_wait_of_each_kind_of_request():
    a = {"reads": 0, "read_bytes": 0, "read_ms": 0, "writes": 0, "write_bytes": 0, "write_ms": 0,
         "flushes": 0, "flush_ms": 0}
    b = {**a, "reads": 50, "read_ms": 600, "writes": 10, "write_ms": 25}
    r = metrics.device_rates(a, b, 1.0)
    assert r["r_await_ms"] == 12 and r["w_await_ms"] == 2.5 and r["f_await_ms"] == 0.0


def test_host_device_is_the_disk_under_a_path_and_none_off_a_block_device(tmp_path):
    names = metrics.parse_diskstats(Path("/proc/diskstats").read_text())
    host = metrics.host_device_of(str(tmp_path))
    # tmp_path may be on tmpfs or overlay (no block device): then None, never a guess
    assert host is None or host in names
    assert metrics.host_device_of("/proc") is None
    assert metrics.host_device_of(str(tmp_path / "missing")) is None


def test_device_rates_without_flushes_have_no_flush_wait():
    a = {"reads": 0, "read_bytes": 0, "writes": 0, "write_bytes": 0, "flushes": 3, "flush_ms": 9}
    r = metrics.device_rates(a, {**a, "reads": 4}, 1.0)
    assert r["flushes_ps"] == 0 and r["f_await_ms"] == 0.0


def test_proc_stat_cpu_recorded():
    cpu = metrics.parse_proc_stat_cpu(text("proc_stat.txt"))
    assert cpu["total"] > cpu["busy"] > 0
    assert metrics.cpu_percent(cpu, {k: v * 2 for k, v in cpu.items()})["busy"] == pytest.approx(
        100 * cpu["busy"] / cpu["total"])


def test_compsize_recorded():
    c = sizes.parse_compsize(text("compsize.txt"))
    assert c == {"percent": 25.0, "disk_bytes": 5496832, "uncompressed_bytes": 21782528,
                 "referenced_bytes": 21782528}


def test_zfs_get_recorded():
    z = sizes.parse_zfs_get(text("zfs_get.txt"))
    assert z == {"used": 1331200, "referenced": 1073152, "compressratio": 1.55}


def test_df_used_recorded():
    assert sizes.parse_df_used(text("df_used.txt")) == 11558912


def test_tpcc_like_lua_script_ships_and_declares_itself():
    lua = Path(sysbench.script_for(sysbench.TPCC_LIKE)).read_text()
    for tx in ("new_order", "payment", "order_status", "delivery", "stock_level"):
        assert f"local function {tx}(" in lua
    assert "TPC-C-like" in lua and "scale" in lua


def test_tpcc_like_argv_uses_warehouses_as_scale():
    argv = sysbench.run_argv("tpcc_like", "/s.sock", {"warehouses": 3, "items": 500, "customers": 30, "duration": 5})
    assert argv[1].endswith("tpcc_like.lua") and "--scale=3" in argv and "--items=500" in argv
    assert "--report-interval=1" in argv and "--mysql-socket=/s.sock" in argv and argv[-1] == "run"


def test_moving_average_is_trailing():
    from tarn_lab.plots import moving_average
    assert moving_average([2, 4, 6, 8], 2) == [2, 3, 5, 7]
    assert moving_average([], 5) == []


def test_prepare_and_run_draw_from_the_same_distribution():
    # The k column is written at prepare; select_random_points looks k values up at run time.
    # With sysbench's default ("special") at prepare and uniform at run, almost no lookup
    # finds a row and the workload never reads the disk.
    from tarn_lab.sysbench import prepare_argv, run_argv
    params = {"tables": 1, "table_size": 1000, "threads": 12}
    for w in ("select_random_points", "oltp_read_write", "tpcc_like"):
        prep = [a for a in prepare_argv(w, "/s", params) if a.startswith("--rand-type=")]
        run = [a for a in run_argv(w, "/s", params) if a.startswith("--rand-type=")]
        assert prep == run == ["--rand-type=uniform"], w


def test_ratios_against_the_scenario_and_the_stack_baseline():
    from tarn_lab.report import ratio_rows
    def run(stack, tps, avg, p95):
        return {"stack": stack, "workload": "oltp_update_index",
                "summary": {"tps": tps, "latency_ms": {"avg": avg, "p95": p95}}}
    scenario = {"baseline": "ext4", "stacks": [{"name": "ext4"}, {"name": "ext4-fj"},
                                               {"name": "tarn-slog", "baseline": "ext4-fj"}]}
    runs = [run("ext4", 100.0, 40.0, 80.0), run("ext4-fj", 200.0, 20.0, 40.0), run("tarn-slog", 150.0, 30.0, 60.0)]
    rows = {(r["stack"], r["baseline"]): r for r in ratio_rows(scenario, runs)}
    assert set(rows) == {("ext4-fj", "ext4"), ("tarn-slog", "ext4"), ("tarn-slog", "ext4-fj")}
    assert rows[("tarn-slog", "ext4")]["tps"] == 1.5 and rows[("tarn-slog", "ext4-fj")]["tps"] == 0.75
    assert rows[("tarn-slog", "ext4-fj")]["latency_p95"] == 1.5
    # a baseline without a result (skipped or failed) gives no row, not a made-up one
    assert [r for r in ratio_rows(scenario, runs[1:]) if r["baseline"] == "ext4"] == []


# -- memory: /proc/PID/status of the tarn mount daemon and its mount record, recorded during
#    `tarn-lab run memory` (stack tarn-meta: 112 MiB buffer pool, 16 MiB ARC) ---------------------

def test_proc_status_of_the_tarn_mount_daemon():
    m = metrics.parse_proc_status(text("proc_status_tarn_mount.txt"))
    assert m == {"rss_bytes": 407780 * 1024, "hwm_bytes": 466856 * 1024, "anon_bytes": 404308 * 1024,
                 "file_bytes": 3472 * 1024, "shmem_bytes": 0}


def test_proc_status_of_a_kernel_thread_has_no_memory_lines():
    assert metrics.parse_proc_status("Name:\tkworker/0:1\nState:\tI (idle)\nThreads:\t1\n") == {}


def test_proc_status_in_another_unit_is_refused_not_misread():
    with pytest.raises(ValueError, match="VmRSS in 'MB', expected kB"):
        metrics.parse_proc_status("VmRSS:\t  400 MB\n")


def test_tarn_mount_record_names_the_daemon_pid():
    from tarn_lab import stacks
    assert stacks.parse_mount_record(text("tarn_mount_record.json")) == 16801
    with pytest.raises(ValueError, match="without a pid"):
        stacks.parse_mount_record('{"pool": "p"}')


def test_tarn_daemon_pid_is_read_from_the_runs_own_run_dir(tmp_path):
    from tarn_lab import stacks
    (tmp_path / "tarn-run").mkdir()
    (tmp_path / "tarn-run" / "tarnlab25427.mount").write_text(text("tarn_mount_record.json"))
    assert stacks.tarn_daemon_pid(tmp_path, "tarnlab25427") == 16801
    assert stacks.tarn_daemon_pid(tmp_path, "otherpool") is None


def test_rss_summary_over_a_run():
    s = metrics.summarize_rss([100, 300, 200], {"hwm_bytes": 350, "rss_bytes": 200})
    assert s == {"samples": 3, "max_bytes": 300, "mean_bytes": 200, "last_bytes": 200, "hwm_bytes": 350}
    assert metrics.summarize_rss([], None) == {"samples": 0}
    # VmHWM read a page below an earlier VmRSS (seen on 6.x kernels): the peak is what was seen
    assert metrics.summarize_rss([8192, 4096], {"hwm_bytes": 4096})["hwm_bytes"] == 8192


def test_the_sampler_records_each_processes_rss_every_second():
    import os
    import subprocess
    import time
    child = subprocess.Popen(["sleep", "30"])
    try:
        with metrics.Sampler({}, interval=0.2, processes={"me": os.getpid(), "child": child.pid}) as sampler:
            time.sleep(0.5)
            child.kill()
            child.wait()
            time.sleep(0.5)
    finally:
        child.kill()
    rows = sampler.rows
    assert len(rows) >= 4 and all(row["rss"]["me"] > 10 << 20 for row in rows)
    assert "child" in rows[0]["rss"] and "child" not in rows[-1]["rss"]    # exited: left out, not zero
    me = sampler.memory["me"]
    assert me["samples"] == len(rows) + 1 and me["max_bytes"] >= me["mean_bytes"] > 0
    assert me["hwm_bytes"] >= me["max_bytes"]
    assert sampler.memory["child"]["samples"] >= 1


HISTOGRAM = """Latency histogram (values are in milliseconds)
       value  ------------- distribution ------------- count
       0.270 |**************************************** 90
       1.000 |****                                     8
      20.000 |                                         1
    1900.000 |                                         1
 
SQL statistics:
    transactions:                        100    (10.00 per sec.)
    total time:                          10.0s
Latency (ms):
         max:                                 1900.00
         95th percentile:                        1.00
"""


def test_sysbench_p99_comes_from_the_latency_histogram():
    rows = sysbench.parse_histogram(HISTOGRAM)
    assert rows == [(0.27, 90), (1.0, 8), (20.0, 1), (1900.0, 1)]
    # 99 of 100 events are at or under 20 ms: that is the p99 (sysbench's own rule).
    assert sysbench.histogram_percentile(rows, 99) == 20.0
    assert sysbench.histogram_percentile(rows, 50) == 0.27
    summary = sysbench.parse_summary(HISTOGRAM)
    assert summary["latency_ms"]["p99"] == 20.0 and summary["latency_ms"]["p95"] == 1.0


def test_a_run_without_a_histogram_has_no_p99():
    recorded = text("sysbench_oltp_read_write.txt")
    assert "p99" not in sysbench.parse_summary(recorded)["latency_ms"]
    assert "--histogram=on" in sysbench.run_argv("oltp_read_write", "/tmp/s", {})

"""Memory, for real: a tiny budget split between ext4's buffer pool and tarn's buffer pool +
ARC (the tarn stack mounted over io_uring), the data copied from the dataset cache onto
each paced disk, and the RSS of mariadbd and of the tarn mount daemon sampled every
second. About two minutes."""
import json
import os

import pytest
from rich.console import Console

from tarn_lab import progress, runner, scenario, stacks
from conftest import leftovers

TINY = {
    "name": "e2e-memory", "workloads": ["select_random_points"], "baseline": "ext4", "load": "cached",
    "memory": {"total": "32M"},
    "disk": {"size": "1G", "iops": 2000, "bandwidth": "32M", "max_io": "16K"},
    "workload": {"threads": 2, "duration": 6, "warmup": 2, "tables": 1, "table_size": 20000},
    "stacks": [{"name": "ext4", "fs": "ext4", "buffer_pool": "100%"},
               {"name": "tarn", "fs": "tarn", "buffer_pool": "50%", "transport": "uring"}],
}


def test_cached_data_and_the_memory_each_stack_was_given_and_used(real_machine, tmp_path, monkeypatch):
    if not stacks.tarn_binary().exists():
        pytest.fail("target/release/tarn missing: cargo build --release")
    monkeypatch.setenv("TARN_LAB_DATASETS", str(tmp_path / "datasets"))
    s = scenario.validate(TINY, origin="e2e")
    rundir = tmp_path / "run"
    lines: list[str] = []
    try:
        runner.run_scenario(s, rundir, Console(quiet=True), progress.PlainProgress(lines.append))
    finally:
        assert leftovers(tmp_path) == []
    made = [line for line in lines if "preparing it once" in line]
    assert len(made) == 1, lines                       # prepared once, copied onto both stacks
    info = {name: json.loads((rundir / "runs" / name / "stack.json").read_text()) for name in ("ext4", "tarn")}
    for name, i in info.items():
        assert i["status"] == "ok", i
        d = i["dataset"]
        assert d["method"] == "cached" and d["restore_seconds"] > 0 and d["prepared_on"].startswith("the host")
        assert d["table_bytes"]["oltp"] > 0
        assert i["cache_checks"] and i["cache_checks"][0]["measured"]     # 32 MiB caches, a few MiB of data
    assert info["ext4"]["dataset"]["cache_made"] == info["tarn"]["dataset"]["cache_made"]
    assert info["ext4"]["memory"]["buffer_pool_actual_bytes"] == 32 << 20
    assert info["tarn"]["memory"]["buffer_pool_actual_bytes"] == 16 << 20
    assert info["tarn"]["memory"]["arc_bytes"] == 16 << 20
    # The transport the daemon served the run with, asked of it (the kernel here offers io_uring).
    assert info["tarn"]["settings"]["fuse_transport_asked"] == "uring"
    assert info["tarn"]["settings"]["fuse_transport"] == "uring", info["tarn"]["settings"]

    r = json.loads((rundir / "runs" / "tarn" / "select_random_points.json").read_text())
    rss = r["memory"]["rss"]
    assert set(rss) == {"mariadbd", "tarn"}
    for role, summary in rss.items():
        # Sampled through the 6 s run: a round that ran long under CI's load (its probes ask
        # the daemon over its socket) skips to the next whole second, so not every second.
        assert summary["samples"] >= 3, summary
        assert 0 < summary["mean_bytes"] <= summary["max_bytes"] <= summary["hwm_bytes"], summary
    assert all("rss" in row and row["rss"]["tarn"] > 0 for row in r["system"])
    pid = r["memory"]["pids"]["tarn"]
    assert not os.path.exists(f"/proc/{pid}") or "tarn" not in open(f"/proc/{pid}/cmdline").read()   # torn down
    ext4 = json.loads((rundir / "runs" / "ext4" / "select_random_points.json").read_text())
    assert set(ext4["memory"]["rss"]) == {"mariadbd"}

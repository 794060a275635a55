"""The snapshots scenario, for real and tiny: tarn with a snapshot every 2 s (the oldest beyond
2 destroyed) during the run, then moved by `tarn send | tarn recv` onto a second paced disk and
caught up by `tarn send -i`; ext4 moved by mariadb-backup (+ prepare) and by tar. About two
minutes."""
import json
import shutil

import pytest
from rich.console import Console

from tarn_lab import progress, report, runner, scenario, snapshots, stacks
from tarn_lab.analysis import baseline_of, cells_of
from conftest import leftovers

TINY = {
    "name": "e2e-snapshots", "workloads": ["oltp_read_write"],
    "disk": {"size": "1G", "iops": 2000, "bandwidth": "32M", "max_io": "16K"},
    "database": {"buffer_pool": "16M"},
    "workload": {"threads": 2, "duration": 9, "tables": 1, "table_size": 20000,
                 "incremental": 4},
    "stacks": [{"name": "tarn-snap", "fs": "tarn", "arc_mb": 32, "snapshot_every": 2, "snapshot_keep": 2,
                "move": True},
               {"name": "ext4", "fs": "ext4", "move": True}],
}


def test_snapshots_under_load_then_the_database_moved_three_ways(real_machine, tmp_path):
    if not stacks.tarn_binary().exists():
        pytest.fail("target/release/tarn missing: cargo build --release")
    for tool in ("mariadb-backup", "mbstream"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} missing: bash lab/setup.sh installs mariadb-backup")
    s = scenario.validate(TINY, origin="e2e")
    rundir = tmp_path / "run"
    lines: list[str] = []
    try:
        runner.run_scenario(s, rundir, Console(quiet=True), progress.PlainProgress(lines.append))
    finally:
        assert leftovers(tmp_path) == []
    for name in ("tarn-snap", "ext4"):
        info = json.loads((rundir / "runs" / name / "stack.json").read_text())
        assert info["status"] == "ok", info

    run = json.loads((rundir / "runs" / "tarn-snap" / "oltp_read_write.json").read_text())
    snaps = run["snapshots"]
    assert snaps["errors"] == [], snaps
    assert len(snaps["taken"]) >= 3, snaps
    assert [d["name"] for d in snaps["destroyed"]] == [t["name"] for t in snaps["taken"]][:len(snaps["taken"]) - 2]
    assert snaps["create_ms_p50"] > 0 and snaps["create_ms_p99"] >= snaps["create_ms_p50"]
    assert run["summary"]["latency_ms"]["p99"] >= run["summary"]["latency_ms"]["p95"] > 0
    assert "snapshots every 2 s" in "\n".join(lines)

    parts = snapshots.load_parts(rundir)
    assert set(parts) == {"tarn-snap", "ext4"}, (snapshots.failures(rundir), lines)
    tarn, ext4 = parts["tarn-snap"], parts["ext4"]
    assert tarn["move"]["bytes"] > 1 << 20 and tarn["move"]["seconds"] > 0
    inc = tarn["incremental"]
    assert 0 < inc["bytes"] < tarn["move"]["bytes"], "an incremental holds only what changed"
    # InnoDB wrote during the window (its redo log at least: a 16 MiB pool need not flush a
    # page in 4 s), and the disk saw it.
    innodb = inc["innodb_written"]
    assert innodb["Innodb_data_written"] + innodb["Innodb_os_log_written"] > 0, innodb
    assert inc["pacer_delta"]["write_bytes"] > 0
    assert ext4["mariadb_backup"]["bytes"] > 1 << 20 and ext4["mariadb_backup"]["prepare_seconds"] > 0
    assert ext4["mariadb_backup"]["received_bytes"] > 1 << 20
    assert ext4["tar"]["bytes"] > 1 << 20
    # the received copy starts as a database with the source's tables, after the move and
    # after the incremental (received with -F over what its recovery changed)
    for started in (tarn["move"]["started"], inc["started"]):
        assert started["tables"] >= 1 and started["equal"], started
        assert started["source"] == started["copy"] and all(v is not None for v in started["copy"].values())

    sc, runs, _ = report.load_results(rundir)
    cells = cells_of(sc, runs)
    baseline = baseline_of(sc, cells)
    [row] = snapshots.history_rows(cells, baseline)
    # the scenario's baseline is the snapshot stack itself: no ratio is made up
    assert (baseline, row["stack"], row["ratio"]) == ("tarn-snap", "tarn-snap", None)
    assert row["snapshots"] == len(snaps["taken"])
    assert len(snapshots.sections(cells, baseline, parts)) == 4

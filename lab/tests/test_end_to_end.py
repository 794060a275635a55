"""One small scenario on ext4 and btrfs, run for real: tarn-pacer -> loop -> mkfs -> private
MariaDB -> sysbench, then the numbers read back from the results directory. About a minute."""
import json

from rich.console import Console

from tarn_lab import cage, html_report, progress, runner, scenario
from conftest import leftovers

TINY = {
    "name": "e2e", "workloads": ["oltp_read_write"],
    "disk": {"size": "1G", "iops": 2000, "bandwidth": "32M", "max_io": "16K"},
    # btrfs with compression reads through the page cache even with O_DIRECT: capped.
    "database": {"buffer_pool": "16M", "page_cache": "16M"},
    "workload": {"threads": 2, "duration": 6, "warmup": 2, "tables": 1, "table_size": 20000},
    "stacks": [{"name": "ext4", "fs": "ext4"}, {"name": "btrfs", "fs": "btrfs", "compression": "zstd"}],
}


def test_tiny_scenario_on_ext4_and_btrfs(real_machine, tmp_path):
    s = scenario.validate(TINY, origin="e2e")
    rundir = tmp_path / "run"
    lines: list[str] = []
    try:
        runner.run_scenario(s, rundir, Console(quiet=True), progress.PlainProgress(lines.append))
    finally:
        assert leftovers(tmp_path) == []
    # The user saw each stack go through the phases, in order, with the run's TPS ticking.
    for i, stack in enumerate(("ext4", "btrfs"), 1):
        seen = [p for line in lines for p in progress.PHASES if f"] {i}/2 {stack}: {p}" in line]
        assert seen == ["build stack", "load data", "warm-up", "run", "teardown"], (stack, lines)
        assert any(line.split("] ", 1)[1].startswith(f"{stack} / oltp_read_write: ") and "TPS" in line
                   for line in lines), lines
    for stack in ("ext4", "btrfs"):
        info = json.loads((rundir / "runs" / stack / "stack.json").read_text())
        assert info["status"] == "ok", info
        r = json.loads((rundir / "runs" / stack / "oltp_read_write.json").read_text())
        assert r["summary"]["tps"] > 0 and r["summary"]["transactions"] > 0
        # mariadbd ran in its memory cage: its own memory is charged there.
        caged = r["memory"]["db_cage"]
        assert caged["limit_bytes"] == 32 * 2**20 + cage.PROCESS_ALLOWANCE["mariadb"] and caged["anon_bytes"] > 0 \
            and caged["oom_kills"] == 0, caged
        assert len(r["series"]) >= 4 and all(p["tps"] >= 0 for p in r["series"])
        assert r["sizes"]["on_disk_bytes"] > 0 and r["sizes"]["apparent_bytes"] > 0
        data = r["device_totals"]["data"]
        assert data["writes"] > 0 and data["write_bytes"] > 0, "diskstats saw no I/O on the data device"
        paced = r["pacer_delta"]["data"]
        assert paced["io_units"] >= paced["reads"] + paced["writes"] > 0, paced
        assert r["warmup"]["seconds"] == 2 and r["warmup"]["tps"] > 0
        assert r["settings"]["mariadb"]["innodb_buffer_pool_size"] == "16M"
        assert r["versions"]["mariadb"] and r["versions"]["sysbench"]
    btrfs = json.loads((rundir / "runs" / "btrfs" / "oltp_read_write.json").read_text())
    assert btrfs["settings"]["mariadb"]["innodb_doublewrite"] == 0
    assert btrfs["sizes"]["compsize_uncompressed_bytes"] > 0

    # A re-run in the same directory skips the finished runs and keeps them.
    before = (rundir / "runs" / "ext4" / "oltp_read_write.json").read_text()
    runner.run_scenario(s, rundir, Console(quiet=True))
    assert (rundir / "runs" / "ext4" / "oltp_read_write.json").read_text() == before

    html = html_report.write_html(rundir)
    assert html.exists() and (rundir / "plots" / "tps_oltp_read_write.png").exists()
    assert "data:image/png;base64," in html.read_text()

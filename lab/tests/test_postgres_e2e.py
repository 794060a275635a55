"""PostgreSQL where asked: a tiny scenario with database.engine = "postgresql" on ext4, run
for real (pacer -> loop -> mkfs -> private postgres -> sysbench pgsql), numbers read back."""
import json
import os

import pytest
from rich.console import Console

from tarn_lab import cage, humanize, runner, scenario
from tarn_lab.scenario import ScenarioError
from conftest import leftovers

TINY_PG = {
    "name": "e2e-pg", "workloads": ["oltp_read_write"],
    "disk": {"size": "1G", "iops": 2000, "bandwidth": "32M", "max_io": "16K"},
    "database": {"engine": "postgresql", "buffer_pool": "16M", "page_cache": "16M"},
    "workload": {"threads": 2, "duration": 5, "tables": 1, "table_size": 10000},
    "stacks": [{"name": "ext4", "fs": "ext4"}],
}


def test_a_postgresql_scenario_runs_end_to_end(real_machine, tmp_path):
    # The server runs as the postgres user: let it through pytest's private temp dirs.
    for d in [tmp_path, *tmp_path.parents]:
        if str(d) in ("/", "/tmp"):
            break
        d.chmod(d.stat().st_mode | 0o011)
    s = scenario.validate(TINY_PG, origin="e2e-pg")
    rundir = tmp_path / "run"
    try:
        runner.run_scenario(s, rundir, Console(quiet=True))
    finally:
        assert leftovers(tmp_path) == []
    info = json.loads((rundir / "runs" / "ext4" / "stack.json").read_text())
    assert info["status"] == "ok", info
    r = json.loads((rundir / "runs" / "ext4" / "oltp_read_write.json").read_text())
    assert r["summary"]["tps"] > 0
    assert "--db-driver=pgsql" in r["settings"]["sysbench_argv"]
    assert set(r["engine_cache"]) == {"pg_blks_read", "pg_blks_hit"}
    assert r["device_totals"]["data"]["writes"] > 0
    # The load's aftermath (hint bits, visibility map) is written before the measured run.
    assert r["dataset"]["tables_vacuumed"] == TINY_PG["workload"]["tables"], r["dataset"]
    assert "VACUUM ANALYZE and CHECKPOINT" in humanize.describe_load(r["dataset"])
    # The server ran in its memory cage (its shared buffers are charged there), and the
    # cage is gone with it.
    caged = r["memory"]["db_cage"]
    assert caged["limit_bytes"] == (16 + 16) * 2**20 + cage.PROCESS_ALLOWANCE["postgresql"], caged
    assert caged["shmem_bytes"] > 0 and caged["oom_kills"] == 0, caged
    parent = cage.find_controller().parent
    assert not list(parent.glob(f"tarn-lab-{os.getpid()}-*"))


def test_an_unknown_database_engine_is_refused_by_name():
    bad = {**TINY_PG, "database": {"engine": "oracle"}}
    with pytest.raises(ScenarioError, match="database.engine"):
        scenario.validate(bad, origin="bad")
    with pytest.raises(ScenarioError, match="TPC-C-like"):
        scenario.validate({**TINY_PG, "workloads": ["tpcc_like"]}, origin="bad")

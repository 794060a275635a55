"""The results layout with repeats: which runs are still to do, and where each is kept."""
import json

from tarn_lab import runner


def test_repeats_are_kept_beside_the_first_run_and_resumed_one_by_one(tmp_path):
    scenario = {"workloads": ["oltp_read_write", "oltp_read_only"], "repeat": 3,
                "workload": {"duration": 20, "warmup": 5}}
    assert runner.result_path(tmp_path, "ext4", "oltp_read_write").name == "oltp_read_write.json"
    assert runner.result_path(tmp_path, "ext4", "oltp_read_write", 2).name == "oltp_read_write.rep2.json"
    done = runner.result_path(tmp_path, "ext4", "oltp_read_write", 2)
    done.parent.mkdir(parents=True)
    done.write_text(json.dumps({"status": "ok"}))
    runner.result_path(tmp_path, "ext4", "oltp_read_only").write_text("{half a json")  # a killed write
    assert runner.pending_runs(scenario, tmp_path, "ext4") == [
        ("oltp_read_write", 1), ("oltp_read_write", 3),
        ("oltp_read_only", 1), ("oltp_read_only", 2), ("oltp_read_only", 3)]
    assert runner.sysbench_seconds(scenario) == 25


def test_a_scenario_without_repeat_runs_each_workload_once(tmp_path):
    scenario = {"workloads": ["oltp_read_write"]}
    assert runner.pending_runs(scenario, tmp_path, "ext4") == [("oltp_read_write", 1)]
    assert runner.sysbench_seconds(scenario) == 30


def test_restart_and_long_parts_run_the_first_workload_once_per_stack():
    from tarn_lab import runner
    s = {"workloads": ["tpcc_like", "select_random_points"],
         "workload": {"duration": 90, "warmup": 60, "restart": 60, "long": 180}}
    assert runner.parts_workload(s) == "tpcc_like"
    assert runner.phase_seconds(s) == 240
    assert runner.phase_seconds({"workloads": ["tpcc_like"], "workload": {}}) == 0


def test_the_host_disk_is_sampled_beside_a_paced_stack_and_not_twice(tmp_path, monkeypatch):
    from types import SimpleNamespace
    from tarn_lab.devices import Device
    paced = Device("/dev/loop7", "data", stats_path=str(tmp_path / "data.stats.json"))
    fast = Device("/dev/loop8", "log")
    stack = SimpleNamespace(devices=[paced, fast], device_names=lambda: {"data": "loop7", "log": "loop8"})
    monkeypatch.setattr(runner, "host_device_of", lambda path: "vda" if path == str(tmp_path) else None)
    assert runner.sampled_devices(stack) == {"data": "loop7", "log": "loop8", "host": "vda"}
    # unpaced (the local NVMe only) or the host not a block device: the stack's own devices only
    assert runner.sampled_devices(SimpleNamespace(devices=[fast], device_names=lambda: {"log": "loop8"})) == {"log": "loop8"}
    monkeypatch.setattr(runner, "host_device_of", lambda path: None)
    assert runner.sampled_devices(stack) == {"data": "loop7", "log": "loop8"}

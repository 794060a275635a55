"""The scrub's cost to the database (workload.scrub): the comparison of TPS before and
during a scrub, the loop that keeps a scrub running, and the scenario that measures it."""
import time

import pytest

from tarn_lab import runner
from tarn_lab import scenario as sc
from tarn_lab.scenario import ScenarioError
from tarn_lab.scrubload import ScrubLoop, scrub_effect


def series(before: float, during: float, seconds: int = 60, switch: int = 30) -> list[dict]:
    return [{"t": t, "tps": before if t <= switch else during} for t in range(1, seconds + 1)]


def test_only_whole_seconds_before_and_inside_the_scrubs_are_compared():
    effect = scrub_effect(series(100.0, 85.0), [(30.2, 45.0), (45.1, 60.0)])
    assert effect["tps_without"] == 100.0 and effect["tps_with"] == 85.0
    assert effect["ratio"] == pytest.approx(0.85) and effect["cost"] == pytest.approx(0.15)
    # seconds 1-30 before; 32-45 and 47-60 inside (31 and 46 straddle a window's edge)
    assert (effect["seconds_without"], effect["seconds_with"], effect["scrubs"]) == (30, 28, 2)


def test_no_comparison_without_a_scrub_or_without_a_whole_second_on_either_side():
    assert scrub_effect(series(100.0, 85.0), []) is None
    assert scrub_effect(series(100.0, 85.0), [(30.2, 30.9)]) is None
    assert scrub_effect(series(100.0, 85.0), [(0.0, 60.0)]) is None


def test_the_loop_keeps_a_scrub_running_from_its_start_until_stopped():
    loop = ScrubLoop(["sleep", "0.3"], ["true"], start_after=0.2).start()
    time.sleep(1.3)
    windows = loop.stop()
    assert len(windows) >= 2 and windows[0][0] >= 0.2, windows
    assert all(end >= start for start, end in windows)
    assert windows[1][0] - windows[0][1] < 0.2, "the next scrub starts as one ends"
    assert not loop._thread.is_alive() and loop._proc.poll() is not None, "nothing left running"


def test_stop_ends_the_scrub_under_way_with_the_stop_command(tmp_path):
    flag = tmp_path / "stopped"
    loop = ScrubLoop(["sleep", "30"], ["touch", str(flag)], start_after=0.0, stop_timeout=0.5).start()
    time.sleep(0.3)
    started = time.monotonic()
    windows = loop.stop()  # the stand-in stop command does not end `sleep`: stop kills it
    assert flag.exists() and time.monotonic() - started < 5
    assert len(windows) == 1


def test_a_scrub_that_cannot_start_is_reported_not_retried():
    loop = ScrubLoop(["sh", "-c", "echo no such pool >&2; exit 1"], ["true"], start_after=0.0).start()
    time.sleep(0.5)
    assert loop.stop() == [] and loop.errors == ["no such pool"]


def test_the_scrub_scenario_runs_tarn_with_a_scrub_in_the_second_half():
    s = sc.load("scrub")
    assert s["workload"]["scrub"] is True and [st["fs"] for st in s["stacks"]] == ["tarn"]
    assert s["disk"] == sc.load("quick")["disk"]
    with pytest.raises(ScenarioError, match="scrub"):
        sc.validate({"name": "t", "workloads": ["oltp_read_write"], "disk": {"size": "1G"},
                     "stacks": [{"name": "t", "fs": "tarn"}], "workload": {"scrub": "yes"}})


def test_the_run_line_says_what_the_scrub_cost():
    effect = scrub_effect(series(100.0, 85.0), [(30.0, 60.0)])
    line = runner.scrub_line({**effect, "errors": []})
    assert "85.0 TPS against 100.0 before (0.85×, the scrub costs 15%)" in line
    assert runner.scrub_line(None) == ""
    assert "not measured (no such pool)" in runner.scrub_line({"errors": ["no such pool"]})

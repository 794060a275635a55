"""The snapshots scenario (issue #13): the snapshot loop, the counted pipe, sysbench's p99
from its histogram, and the three tables (cost of history, the move, the incremental) as the
terminal and HTML reports show them."""
import io
import json
import shutil
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console

from tarn_lab import html_report, report, snapshots, sysbench
from tarn_lab import scenario as sc
from tarn_lab.analysis import cells_of
from tarn_lab.scenario import ScenarioError

TINY = Path(__file__).parent / "fixtures" / "runs" / "tiny-repeat"

HISTOGRAM_OUTPUT = """\
Threads started!

Latency histogram (values are in milliseconds)
       value  ------------- distribution ------------- count
       1.000 |****************************************  90
       5.000 |***                                        8
      20.000 |*                                          1
     300.000 |*                                          1
 
SQL statistics:
    transactions:                        100    (10.00 per sec.)
    queries:                             2000   (200.00 per sec.)
Latency (ms):
         min:                                    0.90
         avg:                                    4.00
         max:                                  300.00
         95th percentile:                        5.00
         sum:                                  400.00
"""


# -- small pieces ---------------------------------------------------------------------------------

def test_percentile_is_the_nearest_rank():
    assert snapshots.percentile([], 50) is None
    assert snapshots.percentile([5.0], 99) == 5.0
    values = [float(v) for v in range(1, 101)]
    assert snapshots.percentile(values, 50) == 50.0
    assert snapshots.percentile(values, 99) == 99.0
    assert snapshots.percentile(list(reversed(values)), 100) == 100.0


def test_the_p99_comes_from_the_histogram():
    summary = sysbench.parse_summary(HISTOGRAM_OUTPUT)
    assert summary["latency_ms"]["p95"] == 5.0
    # 90 + 8 = 98 events at ≤ 5 ms, the 99th at 20 ms
    assert summary["latency_ms"]["p99"] == 20.0
    assert "p99" not in sysbench.parse_summary(HISTOGRAM_OUTPUT.split("Latency histogram")[0]
                                               + "SQL statistics:" + HISTOGRAM_OUTPUT.split("SQL statistics:")[1])
    assert "--histogram=on" in sysbench.run_argv("oltp_read_write", "/s", {"duration": 10})


class FakeTarn:
    """create/destroy actions that record what they were asked, and can be told to fail."""

    def __init__(self, fail_create_at: int | None = None):
        self.calls: list[tuple[str, str]] = []
        self.fail_create_at = fail_create_at
        self.lock = threading.Lock()

    def create(self, name: str):
        with self.lock:
            self.calls.append(("create", name))
            n = sum(1 for c, _ in self.calls if c == "create")
        time.sleep(0.005)
        return "pool is full" if self.fail_create_at == n else None

    def destroy(self, name: str):
        with self.lock:
            self.calls.append(("destroy", name))
        return None


def test_the_loop_takes_a_snapshot_every_interval_and_destroys_the_oldest_beyond_keep():
    fake = FakeTarn()
    loop = snapshots.SnapshotLoop(fake.create, fake.destroy, every=0.05, keep=2).start()
    time.sleep(0.5)
    record = loop.stop()
    taken = [s["name"] for s in record["taken"]]
    assert len(taken) >= 5, record
    assert taken == [f"lab{i}" for i in range(1, len(taken) + 1)]
    # the oldest go first, and never more than `keep` stay
    assert [d["name"] for d in record["destroyed"]] == taken[:len(taken) - 2]
    assert record["live"] == taken[-2:]
    creates_live = 0
    for op, _ in fake.calls:
        creates_live += 1 if op == "create" else -1
        assert creates_live <= 3  # keep + the one just created, before its destroy
    times = [s["t"] for s in record["taken"]]
    assert times == sorted(times) and times[0] >= 0.05
    assert all(s["ms"] >= 5 for s in record["taken"]), "each create is timed"
    assert record["create_ms_p50"] is not None and record["create_ms_p99"] >= record["create_ms_p50"]
    assert not loop._thread.is_alive()
    assert record["errors"] == []


def test_the_loop_keeps_its_schedule_when_a_create_is_slow_and_skips_missed_slots():
    def slow(name):
        time.sleep(0.13 if name == "lab2" else 0.06)  # lab2 runs past the next slot
    loop = snapshots.SnapshotLoop(slow, lambda name: None, every=0.1, keep=10).start()
    time.sleep(0.75)
    times = [s["t"] for s in loop.stop()["taken"]]
    # slots at 0.1, 0.2, (0.3 missed: lab2 ran until ~0.33), 0.4, 0.5, 0.6, 0.7
    assert [round(t, 1) for t in times[:3]] == [0.1, 0.2, 0.4], times
    assert all(abs(t - round(t, 1)) < 0.04 for t in times), "each create starts on its slot, not after the last"


def test_a_repeat_destroys_what_the_earlier_run_kept_first():
    fake = FakeTarn()
    loop = snapshots.SnapshotLoop(fake.create, fake.destroy, every=0.05, keep=2, prefix="lab2.",
                                  live=["lab1.4", "lab1.5"]).start()
    time.sleep(0.18)
    record = loop.stop()
    assert [d["name"] for d in record["destroyed"]][:2] == ["lab1.4", "lab1.5"]
    assert len(record["live"]) == 2 and all(n.startswith("lab2.") for n in record["live"])


def test_a_failed_create_stops_the_loop_and_is_recorded():
    fake = FakeTarn(fail_create_at=3)
    loop = snapshots.SnapshotLoop(fake.create, fake.destroy, every=0.02, keep=5).start()
    time.sleep(0.3)
    record = loop.stop()
    assert [s["name"] for s in record["taken"]] == ["lab1", "lab2"]
    assert record["errors"] == ["create lab3: pool is full"]
    assert "snapshot errors: create lab3" in snapshots.snapshot_line(record)


def test_each_repeat_names_its_own_snapshots():
    class Stack:
        dataset = "p/db"

        @staticmethod
        def tarn_argv(*args):
            return ["true", *args]
    spec = {"snapshot_every": 10, "snapshot_keep": 3}
    first, second = snapshots.snapshot_loop(spec, Stack(), 1), snapshots.snapshot_loop(spec, Stack(), 2)
    assert (first.prefix, second.prefix, first.keep, first.every) == ("lab1.", "lab2.", 3, 10)
    kept = Stack()
    kept.snapshots_kept = ["lab1.5", "lab1.6"]
    assert snapshots.snapshot_loop(spec, kept, 2).live == ["lab1.5", "lab1.6"]
    assert snapshots.snapshot_loop({}, Stack()) is None
    assert snapshots.snapshot_loop(spec, object()) is None, "a stack without tarn takes none"


def test_command_runner_gives_the_stderr_of_a_failed_command():
    ok = snapshots.command_runner(lambda name: ["true", name])
    bad = snapshots.command_runner(lambda name: ["sh", "-c", f"echo no such snapshot {name} >&2; exit 3"])
    assert ok("x") is None
    assert bad("s1") == "no such snapshot s1"


def test_the_pipe_counts_every_byte_and_refuses_a_failure_on_either_side():
    moved = snapshots.pipe_and_count(["head", "-c", "3000001", "/dev/zero"], ["wc", "-c"])
    assert moved["bytes"] == 3000001 and moved["seconds"] >= 0
    with pytest.raises(RuntimeError, match="exit 0 \\| 1"):
        snapshots.pipe_and_count(["head", "-c", "1000", "/dev/zero"], ["sh", "-c", "cat >/dev/null; exit 1"])
    with pytest.raises(RuntimeError, match="broken"):
        snapshots.pipe_and_count(["sh", "-c", "echo broken stream >&2; exit 2"], ["cat"])
    # a receiver that stops reading early: the sender is stopped, the move is a failure
    with pytest.raises(RuntimeError):
        snapshots.pipe_and_count(["cat", "/dev/zero"], ["head", "-c", "10"])


# -- the scenario ---------------------------------------------------------------------------------

def test_the_scenario_keeps_the_data_four_times_the_caches_at_medium():
    medium = sc.load("snapshots", "medium")
    assert medium["cache_checks"] == []
    assert {s["name"]: s.get("snapshot_every") for s in medium["stacks"]} == {"tarn": None, "tarn-snap": 10,
                                                                            "ext4": None}
    assert medium["baseline"] == "tarn" and medium["workload"]["incremental"] == 60


@pytest.mark.parametrize("stack, message", [
    ({"name": "e", "fs": "ext4", "snapshot_every": 10}, "only applies to fs = \"tarn\""),
    ({"name": "t", "fs": "tarn", "snapshot_keep": 3}, "snapshot_keep' needs"),
    ({"name": "t", "fs": "tarn", "snapshot_every": 0}, "at least 1"),
    ({"name": "x", "fs": "xfs", "move": True}, "move' only applies"),
])
def test_snapshot_keys_in_the_wrong_place_are_refused(stack, message):
    raw = sc.raw("snapshots")
    raw["stacks"] = [stack]
    raw.pop("baseline")
    with pytest.raises(ScenarioError, match=message.replace("(", "\\(")):
        sc.validate(raw)


# -- the tables -------------------------------------------------------------------------------------

def snapshot_record(instants_and_ms: list[tuple[float, float]], every: int = 10, keep: int = 6) -> dict:
    taken = [{"name": f"lab{i}", "t": t, "ms": ms} for i, (t, ms) in enumerate(instants_and_ms, 1)]
    return {"every": every, "keep": keep, "taken": taken, "destroyed": [{"name": "lab1", "t": 60.0, "ms": 3.0}],
            "live": [], "errors": []}


def with_snapshots(rundir: Path, stack: str, p99: float) -> None:
    """The fixture's runs of `stack` as if they had taken snapshots, with a p99."""
    for p in (rundir / "runs" / stack).glob("oltp_read_write*.json"):
        r = json.loads(p.read_text())
        r["snapshots"] = snapshot_record([(10.0, 40.0), (20.0, 60.0), (30.0, 500.0)])
        r["summary"]["latency_ms"]["p99"] = p99
        p.write_text(json.dumps(r))


PARTS = {
    "ext4": {"status": "ok", "mariadb_backup": {"bytes": 1000 * 2**20, "seconds": 150.0},
             "tar": {"bytes": 1100 * 2**20, "seconds": 125.0}},
    "tarn": {"status": "ok", "move": {"bytes": 400 * 2**20, "seconds": 50.0,
                                      "started": {"start_seconds": 4.5, "checksum_seconds": 20.0, "tables": 3,
                                                  "equal": True}},
             "incremental": {"seconds_of_workload": 60, "bytes": 20 * 2**20, "seconds": 3.0,
                             "innodb_written": {"Innodb_data_written": 30 * 2**20, "Innodb_os_log_written": 10 * 2**20},
                             "pacer_delta": {"write_bytes": 80 * 2**20},
                             "started": {"start_seconds": 6.5, "checksum_seconds": 21.0, "tables": 3,
                                         "equal": False}}},
}


@pytest.fixture
def snap_rundir(tmp_path) -> Path:
    rundir = tmp_path / "run"
    shutil.copytree(TINY, rundir)
    with_snapshots(rundir, "tarn", p99=12.0)
    for r in (rundir / "runs" / "ext4").glob("oltp_read_write*.json"):
        d = json.loads(r.read_text())
        d["summary"]["latency_ms"]["p99"] = 30.0
        r.write_text(json.dumps(d))
    for stack, rec in PARTS.items():
        (rundir / "runs" / stack / snapshots.PARTS_FILE).write_text(json.dumps(rec))
    (rundir / "runs" / "ext4" / "ignored").mkdir()
    return rundir


def test_history_compares_the_run_with_snapshots_against_the_baseline(snap_rundir):
    scenario, runs, _ = report.load_results(snap_rundir)
    cells = cells_of(scenario, runs)
    rows = snapshots.history_rows(cells, "ext4")
    assert [r["stack"] for r in rows] == ["tarn"], "only the stack that took snapshots"
    row = rows[0]
    tarn, ext4 = cells[("tarn", "oltp_read_write")], cells[("ext4", "oltp_read_write")]
    assert row["ratio"] == pytest.approx(tarn.tps / ext4.tps)
    assert (row["p99_ms"], row["baseline_p99_ms"]) == (12.0, 30.0)
    n = len(tarn.runs)
    assert row["snapshots"] == 3 * n and row["destroyed"] == n
    assert row["create_p50_ms"] == 60.0 and row["create_p99_ms"] == 500.0
    # no baseline, or the baseline itself: no ratio made up
    assert snapshots.history_rows(cells, None)[0]["ratio"] is None
    assert snapshots.history_rows(cells, "tarn")[0]["baseline_tps"] is None


def test_the_move_and_the_incremental_are_ratios_to_tarns():
    moves = snapshots.move_rows(PARTS)
    assert [r["how"] for r in moves][0] == "tarn: tarn send | tarn recv", "tarn's row first"
    by = {r["how"]: r for r in moves}
    assert by["tarn: tarn send | tarn recv"]["time_vs_tarn"] == 1.0
    assert by["ext4: mariadb-backup --stream + --prepare"]["time_vs_tarn"] == pytest.approx(3.0)
    assert by["ext4: mariadb-backup --stream + --prepare"]["bytes_vs_tarn"] == pytest.approx(2.5)
    assert by["ext4: tar of the stopped datadir"]["time_vs_tarn"] == pytest.approx(2.5)
    [inc] = snapshots.incremental_rows(PARTS)
    assert inc["vs_innodb"] == pytest.approx(0.5) and inc["vs_device"] == pytest.approx(0.25)
    assert inc["vs_full"] == pytest.approx(0.05)
    # without tarn's move there is nothing to divide by
    assert snapshots.move_rows({"ext4": PARTS["ext4"]})[0]["time_vs_tarn"] is None
    assert snapshots.sections({}, None, {}) == []


def test_the_received_copy_started_as_a_database_says_whether_its_tables_match():
    full, inc = snapshots.started_rows(PARTS)
    assert (full["copy"], full["start_seconds"], full["tables"], full["equal"]) == ("full (send | recv)", 4.5, 3, True)
    assert inc["copy"].startswith("incremental") and inc["equal"] is False
    cols = dict(snapshots.started_columns())
    assert cols["checksums"](full) == "equal" and cols["checksums"](inc) == "DIFFERENT"
    assert snapshots.started_rows({"ext4": PARTS["ext4"]}) == [], "only a received copy is started"


def test_the_checksums_are_read_for_every_table_of_the_workload():
    class Server:
        def sql(self, statement):
            if statement.startswith("SHOW TABLES"):
                return "sbtest1\nsbtest2\n"
            assert statement == "CHECKSUM TABLE sbtest.`sbtest1`, sbtest.`sbtest2`", statement
            return "sbtest.sbtest1\t123\nsbtest.sbtest2\tNULL\n"
    assert snapshots.table_checksums(Server()) == {"sbtest.sbtest1": 123, "sbtest.sbtest2": None}


def test_failed_parts_are_not_reported_as_numbers(snap_rundir):
    (snap_rundir / "runs" / "ext4" / snapshots.PARTS_FILE).write_text(
        json.dumps({"stack": "ext4", "status": "failed", "reason": "mbstream missing"}))
    assert list(snapshots.load_parts(snap_rundir)) == ["tarn"]
    assert snapshots.failures(snap_rundir) == ["ext4: the move / incremental parts failed — mbstream missing"]
    assert "ext4: the move / incremental parts failed — mbstream missing" in html_report.report_page(snap_rundir).notes


def test_the_terminal_report_shows_the_four_tables(snap_rundir):
    out = io.StringIO()
    report.print_terminal(snap_rundir, Console(file=out, width=200, color_system=None))
    text = out.getvalue()
    for title in ("Cost of history", "Moving the database", "Incremental send", "The received copy started"):
        assert title in text
    assert "3.00×" in text and "2.50×" in text, "mariadb-backup 3× tarn's time, 2.5× its bytes"
    assert "0.050×" in text, "the incremental is 5% of the full stream"
    assert "500 ms" in text and "12.0 ms" in text and "30.0 ms" in text


def test_the_html_report_has_the_tables_and_the_chart_with_the_snapshot_instants(snap_rundir):
    page = html_report.report_page(snap_rundir)
    captions = [t.caption for t in page.tables]
    assert snapshots.HISTORY_TITLE in captions and snapshots.MOVE_TITLE in captions
    assert snapshots.INCREMENTAL_TITLE in captions and snapshots.STARTED_TITLE in captions
    assert "TPS with snapshots, against none" in [f.title for f in page.figures]
    scenario, runs, _ = report.load_results(snap_rundir)
    pairs = snapshots.history_pairs(cells_of(scenario, runs), "ext4")
    assert [(c.stack, t) for c, t in pairs] == [("ext4", []), ("tarn", [10.0, 20.0, 30.0])]

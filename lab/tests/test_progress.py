"""The progress display: plain timestamped lines when stdout is not a terminal (snapshot),
the live display on one, and the ETA behind both."""
import datetime as dt
import io
from pathlib import Path

from rich.console import Console

from tarn_lab import progress
from tarn_lab.progress import Eta, LiveProgress, PlainProgress, StackPlan

SNAPSHOT = Path(__file__).parent / "snapshots" / "plain_progress.txt"


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def wall(self) -> dt.datetime:
        return dt.datetime(2025, 3, 14, 9, 30, 0) + dt.timedelta(seconds=self.t)


def scripted_run(p: progress.Progress, clock: FakeClock) -> None:
    """What the runner reports for: ext4 measured (warm-up, two repeats), zfs skipped,
    tarn failing while it loads its data."""
    def run(phase, detail, seconds, tps, iops):
        p.phase(phase, detail, total=seconds)
        for t in range(1, seconds + 1):
            clock.t += 1
            p.tick(t, tps + t, iops)
        p.sysbench_done(seconds)

    p.begin("quick", [StackPlan("ext4", 2 * 25), StackPlan("zfs", 2 * 25), StackPlan("tarn", 2 * 25)])
    p.stack(1, "ext4")
    p.phase("build stack", "ext4 on the paced disk, then MariaDB")
    clock.t += 7
    p.phase("load data", "sysbench prepare oltp_read_write")
    clock.t += 41
    for repeat in (1, 2):
        run("warm-up", "oltp_read_write", 5, 400.0, None)
        run("run", f"oltp_read_write, repeat {repeat} of 2", 20, 480.0, 497.0)
        p.note(f"ext4 / oltp_read_write: {481.5 + repeat:.1f} TPS, p95 16.1 ms")
    p.phase("teardown")
    clock.t += 3
    p.stack_done(True)
    p.stack(2, "zfs")
    p.note("zfs: skipped: no kernel ZFS and zfs-fuse missing: apt-get install zfs-fuse")
    p.stack_done(False)
    p.stack(3, "tarn")
    p.phase("build stack", "tarn on the paced disk, then MariaDB")
    clock.t += 4
    p.phase("load data", "sysbench prepare oltp_read_write")
    clock.t += 12
    p.note("tarn: failed: `sysbench ... prepare` exited 1: [FATAL] lost connection")
    p.phase("teardown")
    clock.t += 2
    p.stack_done(True)


def plain_lines() -> list[str]:
    clock = FakeClock()
    lines: list[str] = []
    p = PlainProgress(lines.append, clock=clock, wall=clock.wall, every=10)
    with p:
        scripted_run(p, clock)
    return lines


def test_plain_progress_matches_the_snapshot():
    got = "\n".join(plain_lines()) + "\n"
    assert got == SNAPSHOT.read_text(), "plain progress output changed:\n" + got


def test_plain_progress_is_what_a_log_reader_needs():
    lines = plain_lines()
    # every line is timestamped with wall time and time since the start
    assert all(line.startswith("[09:") and " +" in line.split("]")[0] for line in lines)
    # each of the five phases shows, with stack i of N
    for phase in progress.PHASES:
        assert any(f"1/3 ext4: {phase}" in line for line in lines), phase
    # during warm-up and run, a line every 10 s with TPS (and the disk's IOPS when running)
    run_ticks = [line for line in lines if ": run oltp_read_write" in line and "TPS" in line]
    assert len(run_ticks) == 4 and all("disk IOPS" in line for line in run_ticks)
    # after a stack, how long it took and what is left
    assert any("1/3 ext4: done in" in line and "ETA ~" in line for line in lines)


def test_eta_is_a_lower_bound_until_a_stack_finished_then_an_estimate():
    eta = Eta([StackPlan("a", 60), StackPlan("b", 60)])
    eta.start_stack(0, 0.0)
    left, known = eta.remaining(10.0)
    assert (left, known) == (120.0, False)      # sysbench seconds only: a lower bound
    eta.sysbench_progress(30)
    assert eta.remaining(50.0) == (90.0, False)
    eta.sysbench_finished(60)
    eta.finish_stack(100.0, ran=True)           # 100 s for 60 s of sysbench: 40 s overhead
    assert eta.remaining(100.0) == (100.0, True)
    eta.start_stack(1, 100.0)
    assert eta.remaining(110.0) == (90.0, True)  # 10 s of its 40 s overhead spent


def test_a_skipped_stack_teaches_the_eta_nothing():
    eta = Eta([StackPlan("a", 60), StackPlan("b", 60)])
    eta.start_stack(0, 0.0)
    eta.finish_stack(1.0, ran=False)
    assert eta.remaining(1.0) == (60.0, False)


def test_human_durations():
    assert [progress.human_duration(s) for s in (0, 42, 65, 3600 + 180)] == ["0s", "42s", "1m 05s", "1h 03m"]


def test_not_a_terminal_gives_plain_lines_a_terminal_the_live_display():
    piped = Console(file=io.StringIO())
    assert isinstance(progress.for_console(piped), PlainProgress)
    tty = Console(file=io.StringIO(), force_terminal=True)
    assert isinstance(progress.for_console(tty), LiveProgress)


def test_live_display_shows_stack_phase_tps_iops_and_eta():
    clock = FakeClock()
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    live = LiveProgress(console, clock=clock)
    live.begin("quick", [StackPlan("ext4", 30), StackPlan("tarn", 30)])
    live.stack(2, "tarn")
    live.phase("run", "oltp_read_write", total=30)
    clock.t = 50
    live.tick(12, 2401.4, 498.0)
    render = Console(file=io.StringIO(), width=120, record=True)
    render.print(live)
    screen = render.export_text()
    for expected in ("quick: stack 2 of 2", "tarn: run oltp_read_write", "12/30 s", "2,401 TPS",
                     "498 disk IOPS", "elapsed 50s", "ETA ≥"):
        assert expected in screen, (expected, screen)

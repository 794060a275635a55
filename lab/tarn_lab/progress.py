"""What a user sees while a scenario runs: a live display on a terminal, plain timestamped
lines anywhere else (CI, logs, a pipe).

Owns: the phases of a run as the user sees them (build stack, load data, warm-up, run,
teardown), stack i of N, elapsed time and the ETA, and during warm-up and run the current
TPS and the paced disk's IOPS.
Promises: the plain lines are a pure function of the events and the clock (snapshot-tested);
the ETA is a lower bound ("≥") until one stack has finished, an estimate ("~") after.
Must never: slow the benchmark — the runner's reading loop only stores numbers here; the
live display renders on rich's own refresh thread, twice a second.
"""
from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Callable

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

PHASES = ("build stack", "load data", "warm-up", "run", "teardown")


def human_duration(seconds: float) -> str:
    """1m 05s, 2h 03m, 42s: what a person reads at a glance."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s // 3600}h {s % 3600 // 60:02d}m"


@dataclass
class StackPlan:
    """One stack's share of the scenario: the sysbench seconds it will run (warm-ups and
    measured runs of its pending workloads), known before it starts."""
    name: str
    sysbench_seconds: float


class Eta:
    """Time left in the scenario. Sysbench's seconds are known from the scenario; the rest
    of a stack (build, load, teardown) is learned from the stacks that finished."""

    def __init__(self, plan: list[StackPlan]):
        self.plan = plan
        self.overheads: list[float] = []   # per finished stack: its time outside sysbench
        self.current = -1
        self.stack_started = 0.0
        self.sysbench_done = 0.0            # seconds of sysbench finished in the current stack
        self.sysbench_now = 0.0             # seconds into the sysbench process running now

    def start_stack(self, index: int, now: float) -> None:
        self.current, self.stack_started = index, now
        self.sysbench_done = self.sysbench_now = 0.0

    def sysbench_progress(self, seconds: float) -> None:
        self.sysbench_now = seconds

    def sysbench_finished(self, seconds: float) -> None:
        self.sysbench_done += seconds
        self.sysbench_now = 0.0

    def finish_stack(self, now: float, ran: bool) -> None:
        """`ran`: the stack was built and measured (a skip teaches nothing about overheads)."""
        if ran:
            spent = now - self.stack_started
            self.overheads.append(max(0.0, spent - self.sysbench_done))
        self.current += 1
        self.sysbench_done = self.sysbench_now = 0.0
        self.stack_started = now

    def remaining(self, now: float) -> tuple[float, bool]:
        """(seconds left, exact_enough): False while no stack has finished — then the
        number covers sysbench time only and is a lower bound."""
        known = bool(self.overheads)
        overhead = sum(self.overheads) / len(self.overheads) if known else 0.0
        left = 0.0
        first = max(self.current, 0)
        for i in range(first, len(self.plan)):
            run = self.plan[i].sysbench_seconds
            if i == self.current:
                ran = self.sysbench_done + self.sysbench_now
                spent_outside = max(0.0, (now - self.stack_started) - ran)
                left += max(0.0, run - ran) + max(0.0, overhead - spent_outside)
            else:
                left += run + overhead
        return left, known


def format_eta(left: float, known: bool) -> str:
    return f"ETA {'~' if known else '≥'}{human_duration(left)}"


@dataclass
class State:
    """What the display shows; the runner writes it, the display reads it."""
    scenario: str = ""
    stacks: int = 0
    index: int = 0          # 1-based stack number
    stack: str = ""
    phase: str = ""
    detail: str = ""
    run_t: int = 0          # seconds into the current warm-up or run
    run_total: int = 0
    tps: float | None = None
    iops: float | None = None
    started: float | None = None   # clock() at begin
    extra: dict = field(default_factory=dict)


class Progress:
    """The events the runner reports. This base class keeps the state and the ETA; the two
    subclasses show them."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.state = State()
        self.eta = Eta([])

    # -- lifecycle -----------------------------------------------------------------
    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        pass

    def begin(self, scenario: str, plan: list[StackPlan]) -> None:
        self.state = State(scenario=scenario, stacks=len(plan), started=self.clock())
        self.eta = Eta(plan)
        runs = sum(p.sysbench_seconds for p in plan)
        self.say(f"{scenario}: {len(plan)} stacks, {human_duration(runs)} of sysbench in all")

    def stack(self, index: int, name: str) -> None:
        self.state.index, self.state.stack = index, name
        self.state.phase = self.state.detail = ""
        self.eta.start_stack(index - 1, self.clock())

    def phase(self, phase: str, detail: str = "", total: int = 0) -> None:
        assert phase in PHASES, phase  # the display and its tests know these five
        s = self.state
        s.phase, s.detail, s.run_t, s.run_total, s.tps, s.iops = phase, detail, 0, total, None, None
        self.say(self._where() + (f" ({detail})" if detail else ""))

    def tick(self, t: int, tps: float | None, iops: float | None) -> None:
        """One sysbench report line: `t` seconds into the warm-up or run."""
        s = self.state
        s.run_t, s.tps, s.iops = t, tps, iops
        self.eta.sysbench_progress(t)

    def sysbench_done(self, seconds: float) -> None:
        self.eta.sysbench_finished(seconds)

    def stack_done(self, ran: bool) -> None:
        now = self.clock()
        spent = now - self.eta.stack_started
        self.eta.finish_stack(now, ran)
        left, known = self.eta.remaining(now)
        tail = f"; {format_eta(left, known)}" if self.state.index < self.state.stacks else ""
        what = f"done in {human_duration(spent)}" if ran else "not run"
        self.say(f"{self._prefix()}: {what}{tail}")

    def note(self, message: str) -> None:
        """A line worth keeping in the log: a run's result, a skip, a failure."""
        self.say(message)

    def say(self, line: str) -> None:
        raise NotImplementedError

    def elapsed(self) -> float:
        return 0.0 if self.state.started is None else self.clock() - self.state.started

    # -- text ----------------------------------------------------------------------
    def _prefix(self) -> str:
        s = self.state
        return f"{s.index}/{s.stacks} {s.stack}"

    def _where(self) -> str:
        s = self.state
        return f"{self._prefix()}: {s.phase}"

    def _numbers(self) -> str:
        s = self.state
        parts = [f"{s.run_t}/{s.run_total} s"]
        if s.tps is not None:
            parts.append(f"{s.tps:,.0f} TPS")
        if s.iops is not None:
            parts.append(f"{s.iops:,.0f} disk IOPS")
        return ", ".join(parts)


class PlainProgress(Progress):
    """Timestamped lines: one per phase, and during warm-up and run one every `every`
    seconds with the current TPS and IOPS."""

    def __init__(self, write: Callable[[str], None], clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], dt.datetime] = dt.datetime.now, every: int = 10):
        super().__init__(clock)
        self.write, self.wall, self.every = write, wall, every

    def say(self, line: str) -> None:
        self.write(f"[{self.wall().strftime('%H:%M:%S')} +{human_duration(self.elapsed())}] {line}")

    def tick(self, t: int, tps: float | None, iops: float | None) -> None:
        super().tick(t, tps, iops)
        if t > 0 and t % self.every == 0:
            detail = f" {self.state.detail}" if self.state.detail else ""
            self.say(f"{self._where()}{detail}: {self._numbers()}")


class LiveProgress(Progress):
    """A rich Live display: the scenario line with an overall bar, elapsed and ETA, and the
    current stack's phase with TPS and IOPS; lines worth keeping print above it."""

    def __init__(self, console: Console, clock: Callable[[], float] = time.monotonic):
        super().__init__(clock)
        self.console = console
        self.live = Live(self, console=console, refresh_per_second=2, transient=True)

    def __enter__(self) -> "LiveProgress":
        self.live.start()
        return self

    def __exit__(self, *exc) -> None:
        self.live.stop()

    def say(self, line: str) -> None:
        elapsed = human_duration(self.elapsed())
        # Text, not markup: an error message may hold brackets rich would parse.
        self.console.print(Text.assemble((f"+{elapsed} ", "dim"), line), highlight=False)

    def __rich__(self):
        s = self.state
        elapsed = self.elapsed()
        left, known = self.eta.remaining(self.clock())
        done = elapsed / (elapsed + left) if elapsed + left > 0 else 0.0
        top = one_line_grid(3)
        where = f"stack {s.index} of {s.stacks}" if s.index else "starting"
        top.add_row(Text(f"{s.scenario}: {where}", style="bold"),
                    ProgressBar(total=1.0, completed=done, width=24),
                    Text(f"elapsed {human_duration(elapsed)}  {format_eta(left, known)}"))
        line = Text(f"{s.stack}: {s.phase}", style="cyan", no_wrap=True, overflow="ellipsis")
        if s.detail:
            line.append(f" {s.detail}")
        if s.phase in ("warm-up", "run") and s.run_total:
            numbers = one_line_grid(2)
            numbers.add_row(ProgressBar(total=s.run_total, completed=s.run_t, width=24),
                            Text(self._numbers(), style="bold"))
            return Group(top, line, numbers)
        return Group(top, line)


def one_line_grid(columns: int) -> Table:
    """A grid whose cells never wrap: the display keeps its height on a narrow terminal
    (long text is cut with an ellipsis instead)."""
    grid = Table.grid(padding=(0, 1))
    for _ in range(columns):
        grid.add_column(no_wrap=True, overflow="ellipsis")
    return grid


def for_console(console: Console) -> Progress:
    """Live on a terminal; plain lines when stdout is a pipe, a file or CI."""
    if console.is_terminal and not console.quiet:
        return LiveProgress(console)
    return PlainProgress(lambda line: console.print(line, markup=False, highlight=False, soft_wrap=True))

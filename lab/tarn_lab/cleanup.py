"""The teardown stack: everything the lab starts is registered here, undone in reverse.

Owns: the order of teardown (last built, first undone) and the conversion of SIGTERM
into KeyboardInterrupt so Ctrl-C and kill both unwind through it.
Promises: every registered undo runs once, even if an earlier one fails; failures are
reported, not swallowed silently.
Must never: undo things it did not register (no killing by name, no `losetup -D`).
"""
from __future__ import annotations

import os
import signal
import sys
import time
from typing import Callable


class Teardown:
    def __init__(self, log: Callable[[str], None] = lambda m: print(m, file=sys.stderr)):
        self._undo: list[tuple[str, Callable[[], None]]] = []
        self._log = log

    def push(self, what: str, undo: Callable[[], None]) -> None:
        self._undo.append((what, undo))

    def close(self) -> list[str]:
        failures = []
        while self._undo:
            what, undo = self._undo.pop()
            try:
                undo()
            except BaseException as exc:  # keep going: one stuck mount must not leak the rest
                failures.append(f"{what}: {exc}")
                self._log(f"teardown: {what} failed: {exc}")
        return failures

    def __enter__(self) -> "Teardown":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def sigterm_as_keyboard_interrupt() -> None:
    """Make `kill PID` unwind like Ctrl-C, so teardown runs."""
    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, handler)


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except (FileNotFoundError, IndexError):
        return False


def stop_pid(pid: int, grace: float = 60.0) -> None:
    """SIGTERM our own pid, wait up to grace seconds, then SIGKILL it."""
    if not pid_alive(pid):
        _reap(pid)
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        _reap(pid)
        if not pid_alive(pid):
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    for _ in range(50):
        _reap(pid)
        if not pid_alive(pid):
            return
        time.sleep(0.1)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass

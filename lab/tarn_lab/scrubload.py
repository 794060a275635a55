"""A scrub's cost to the database (issue #10: "a running scrub costs the database under 20%
of its TPS on the paced disk"), measured inside one run: the first half of the measured
run is plain, then a scrub runs on the stack's pool until the run ends (a scrub that
finishes is followed by the next at once), and the per-second TPS outside and inside the
scrub windows are compared.

Owns: `ScrubLoop` (keeps scrubs running from a moment of the run to its end, recording
when each ran) and `scrub_effect` (the comparison, from sysbench's per-second rows).
Promises: only seconds wholly inside a scrub window count as "with scrub", only seconds
wholly before the first one as "without"; the loop's scrubs are stopped before `stop`
returns.
Must never: leave a scrub process running after `stop`, or count a second twice.
"""
from __future__ import annotations

import subprocess
import threading
import time
from typing import Callable


def scrub_effect(series: list[dict], windows: list[tuple[float, float]]) -> dict | None:
    """TPS without and with a scrub running: `series` is sysbench's per-second rows (`t`
    is the end of the row's second, counted from the run's start), `windows` the
    (start, end) seconds of each scrub. None when either side has no whole second."""
    if not windows:
        return None
    first = min(start for start, _ in windows)
    inside = lambda t: any(start <= t - 1 and t <= end for start, end in windows)  # noqa: E731
    without = [r["tps"] for r in series if r["t"] <= first]
    with_scrub = [r["tps"] for r in series if inside(r["t"])]
    if not without or not with_scrub:
        return None
    tps_without = sum(without) / len(without)
    tps_with = sum(with_scrub) / len(with_scrub)
    ratio = tps_with / tps_without if tps_without else 0.0
    return {"tps_without": tps_without, "tps_with": tps_with, "ratio": ratio, "cost": 1.0 - ratio,
            "seconds_without": len(without), "seconds_with": len(with_scrub), "scrubs": len(windows),
            "windows": [[round(s, 2), round(e, 2)] for s, e in windows]}


class ScrubLoop:
    """From `start_after` seconds after `start()` until `stop()`, keeps a scrub running:
    `start_argv` runs one scrub in the foreground (returns when it is done), `stop_argv`
    stops the one under way. Windows are seconds since `start()`."""

    def __init__(self, start_argv: list[str], stop_argv: list[str], start_after: float,
                 clock: Callable[[], float] = time.monotonic, stop_timeout: float = 60.0):
        self.start_argv, self.stop_argv, self.start_after = start_argv, stop_argv, start_after
        # How long a stopped scrub may take to end before it is killed.
        self.stop_timeout = stop_timeout
        self.clock = clock
        self.windows: list[tuple[float, float]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="scrub-loop", daemon=True)
        self._t0 = 0.0

    def start(self) -> "ScrubLoop":
        self._t0 = self.clock()
        self._thread.start()
        return self

    def _loop(self) -> None:
        if self._stop.wait(self.start_after):
            return
        while not self._stop.is_set():
            began = self.clock() - self._t0
            with self._lock:
                if self._stop.is_set():
                    return
                self._proc = subprocess.Popen(self.start_argv, stdout=subprocess.DEVNULL,
                                              stderr=subprocess.PIPE, text=True)
            _, err = self._proc.communicate()
            ended = self.clock() - self._t0
            if self._proc.returncode != 0 and not self._stop.is_set():
                self.errors.append(err.strip()[-500:])
                return  # a scrub that cannot start will not start on the next try either
            self.windows.append((began, ended))

    def stop(self) -> list[tuple[float, float]]:
        """Stops the scrub under way (recorded up to now) and the loop; the windows."""
        with self._lock:
            self._stop.set()
            proc = self._proc
        if proc and proc.poll() is None:
            subprocess.run(self.stop_argv, capture_output=True, timeout=60)
            try:
                proc.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._thread.join(timeout=120)
        return self.windows

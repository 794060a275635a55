"""A memory cage for the database server: a memory cgroup of its own, so the kernel's page
cache it fills is capped like the caches the lab sizes (buffer pool, ARC).

Why: PostgreSQL reads through the page cache, and so does btrfs with compression even
under O_DIRECT. Uncapped, their cache is the machine's free RAM (gigabytes here), the
dataset fits in it and a run measures RAM, not the disk — the 4× rule cannot hold.
`database.page_cache` caps it: the server and every process it forks run in a cgroup
limited, for the measured parts (warm-up and run: `tighten`), to buffer pool + page cache
+ PROCESS_ALLOWANCE (the server's own memory, by engine). Reclaim inside the cgroup takes
the page cache first (shared buffers are shared memory, which has no swap to go to), so what the
server caches in the kernel stays near `page_cache`. tarn's FUSE pages and ext4's pages
are charged alike: to the process that reads them. The load runs uncapped: PostgreSQL's
index builds take maintenance_work_mem (64 MiB) per table at once, which the allowance
for a run's backends does not hold (the OOM killer ended them when it did).

Owns: finding the memory controller (cgroup v2, or v1's memory hierarchy), creating the
cgroup with its limit, the command that starts a process inside it, reading its usage,
and removing it.
Promises: a cage is removed by its teardown (after the server it holds is stopped); the
cgroup is the lab's own (named tarn-lab-<pid>-<name>), never another's.
Must never: move a process it did not start, or change a cgroup it did not create.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from .cleanup import Teardown

MiB = 1 << 20
# What the server's processes take besides the buffer pool and the page cache, by engine.
# PostgreSQL: the postmaster and backends (catalog caches, work_mem), autovacuum, the
# checkpointer. MariaDB: its log buffer, I/O rings and threads — measured here at 79 MiB of
# anonymous memory beside a full 16 MiB pool (95 MiB in all: the OOM killer ended it in a
# 96 MiB cage once its pool was full) and ~100 MiB beside a 128 MiB one.
PROCESS_ALLOWANCE = {"postgresql": 64 * MiB, "mariadb": 128 * MiB}
CGROUP_ROOT = Path("/sys/fs/cgroup")


class CageError(RuntimeError):
    """The page cache cannot be capped here; the message says why and what to do."""


@dataclass(frozen=True)
class Controller:
    """Where memory cgroups are made: `parent` (a directory) and the hierarchy's version."""
    parent: Path
    v2: bool


def find_controller(proc_cgroup: str | None = None, root: Path = CGROUP_ROOT) -> Controller:
    """v1's memory hierarchy under the lab's own memory cgroup (it inherits its limit), else
    cgroup v2's root (a non-root v2 cgroup holding processes cannot give children the
    memory controller)."""
    text = proc_cgroup if proc_cgroup is not None else Path("/proc/self/cgroup").read_text()
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            parent = root / "memory" / path.lstrip("/")
            if parent.is_dir():
                return Controller(parent, v2=False)
    controllers = root / "cgroup.controllers"
    if controllers.exists() and "memory" in controllers.read_text().split():
        return Controller(root, v2=True)
    raise CageError("no cgroup memory controller here (neither cgroup v2 with memory nor v1's memory "
                    "hierarchy is mounted under /sys/fs/cgroup): the database's page cache cannot be capped; "
                    "run on a machine with it, or remove database.page_cache from the scenario")


class MemoryCage:
    """One memory cgroup with a limit; `command(argv)` starts argv inside it."""

    def __init__(self, path: Path, v2: bool, limit_bytes: int):
        self.path, self.v2, self.limit_bytes = path, v2, limit_bytes

    @classmethod
    def create(cls, name: str, limit_bytes: int, teardown: Teardown,
               controller: Controller | None = None) -> "MemoryCage":
        c = controller or find_controller()
        if c.v2:
            _enable_memory(c.parent)
        path = c.parent / f"tarn-lab-{os.getpid()}-{name}"
        try:
            path.mkdir()
        except OSError as exc:
            raise CageError(f"cannot create the memory cgroup {path} ({exc}): the lab caps the database's "
                            "page cache as root; run it as root, or remove database.page_cache") from None
        cage = cls(path, c.v2, limit_bytes)
        teardown.push(f"remove memory cgroup {path}", cage.remove)
        return cage

    def tighten(self) -> None:
        """Sets the limit (before a measured part; the kernel reclaims down to it)."""
        knob = self.path / ("memory.max" if self.v2 else "memory.limit_in_bytes")
        try:
            knob.write_text(f"{self.limit_bytes}\n")
        except OSError as exc:
            raise CageError(f"cannot lower the database server's memory cgroup {self.path} to "
                            f"{self.limit_bytes >> 20} MiB ({exc}): it holds more than that besides its page cache; "
                            "give database.page_cache or the buffer pool more room") from None
        # The peak then counts from here, not from the uncapped load (where the kernel
        # lets it be reset; otherwise usage() reports the peak since the cage was made).
        peak = self.path / ("memory.peak" if self.v2 else "memory.max_usage_in_bytes")
        try:
            if peak.exists():
                peak.write_text("0\n")
        except OSError:
            pass

    def command(self, argv: list[str]) -> list[str]:
        """argv started inside the cage: a shell joins it, then becomes argv."""
        return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.path / "cgroup.procs"), *argv]

    def usage(self) -> dict:
        """What the cage holds now: its limit, peak, the page cache in it (file pages that
        are not shared memory, i.e. not PostgreSQL's shared buffers), the shared memory and
        the processes' own (anonymous) memory."""
        stat = _stat(self.path / "memory.stat")
        if self.v2:
            peak = _number(self.path / "memory.peak")
            file_bytes = stat.get("file", 0)
        else:
            peak = _number(self.path / "memory.max_usage_in_bytes")
            file_bytes = stat.get("cache", 0)
        shmem = stat.get("shmem", 0)
        events = _stat(self.path / ("memory.events" if self.v2 else "memory.oom_control"))
        return {"limit_bytes": self.limit_bytes, "peak_bytes": peak,
                "page_cache_bytes": max(file_bytes - shmem, 0), "shmem_bytes": shmem,
                "anon_bytes": stat.get("anon" if self.v2 else "rss", 0), "oom_kills": events.get("oom_kill", 0)}

    def remove(self) -> None:
        """Removes the cgroup once its processes are gone (their pages move to the parent)."""
        _remove(self.path)


def _enable_memory(parent: Path) -> None:
    control = parent / "cgroup.subtree_control"
    if "memory" not in control.read_text().split():
        try:
            control.write_text("+memory\n")
        except OSError as exc:
            raise CageError(f"cannot enable the memory controller in {control} ({exc}): run the lab as root, "
                            "or remove database.page_cache") from None


def _remove(path: Path, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while path.exists():
        try:
            path.rmdir()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)  # a process of the server still exiting


def _stat(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            out[key] = int(value)
    return out


def _number(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None

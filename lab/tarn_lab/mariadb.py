"""A private MariaDB server per run: own datadir on the stack, own socket, no TCP.

Owns: the server's config file, initializing the datadir, starting mariadbd directly and
stopping it by its pid, and reading InnoDB's buffer pool counters.
Promises: the server listens only on its unix socket (skip-networking); stop() always
runs through the Teardown.
Must never: use or stop the system's MariaDB service, or listen on a TCP port.
"""
from __future__ import annotations

import hashlib
import subprocess
import tempfile
import time
from pathlib import Path

from .cleanup import Teardown, pid_alive, stop_pid
from .devices import parse_size
from .shell import CommandFailed, require, run, tool_version

BASE_SETTINGS = {
    "innodb_buffer_pool_size": "128M",
    "innodb_log_file_size": "64M",
    "innodb_flush_log_at_trx_commit": 1,
    "innodb_io_capacity": 200,
    "max_connections": 200,
    "performance_schema": "OFF",
}


# InnoDB's page cleaner (MariaDB ≥ 10.5) keeps `innodb_lru_scan_depth` pages of the buffer
# pool on its free list: evicted ahead of need, holding no data. The default, 1536 pages
# (24 MiB), is 19% of a 128 MiB pool — measured here on TPC-C at 128M, ext4 missed the pool
# 6.85 times a transaction with it and 4.36 with 128 (1.50× the TPS), and how fast a stack's
# writes complete decided how much of the pool stood empty. Every lab server keeps 1/64 of its
# pool's pages free instead (within MariaDB's minimum and its default), as a DBA would for a
# small pool, so that no stack's cache is cut by the cleaner's reserve.
FREE_LIST_SHARE = 64
FREE_LIST_MIN, FREE_LIST_MAX = 100, 1536
PAGE_BYTES = 16 << 10


def free_list_pages(pool_size) -> int:
    """`innodb_lru_scan_depth` for a buffer pool of `pool_size` ('112M', bytes)."""
    pages = parse_size(pool_size) // PAGE_BYTES
    return max(FREE_LIST_MIN, min(FREE_LIST_MAX, pages // FREE_LIST_SHARE))


# sockaddr_un holds 108 bytes with the NUL: mariadbd refuses (and exits) on a longer path.
SOCKET_PATH_MAX = 107


def socket_path(rundir: Path) -> Path:
    """The server's unix socket: in its run dir, or — when that path is too long for a
    socket (a deep pytest or dataset-cache directory) — a short name in the temp dir,
    unique per run dir."""
    beside = rundir / "mysqld.sock"
    if len(str(beside).encode()) <= SOCKET_PATH_MAX:
        return beside
    digest = hashlib.sha256(str(rundir.resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"tarn-lab-mysqld-{digest}.sock"


class PrivateMariaDB:
    def __init__(self, datadir: Path, rundir: Path, settings: dict):
        self.datadir, self.rundir = datadir, rundir
        self.socket = socket_path(rundir)
        self.settings = {**BASE_SETTINGS, **settings}
        self.settings.setdefault("innodb_lru_scan_depth",
                                 free_list_pages(self.settings["innodb_buffer_pool_size"]))
        self.pid: int | None = None
        # A memory cgroup the server runs in (cage.py), when its page cache is capped.
        self.cage = None

    def config_text(self) -> str:
        lines = ["[mariadbd]", f"datadir={self.datadir}", f"socket={self.socket}",
                 f"pid-file={self.rundir / 'mysqld.pid'}", f"log-error={self.rundir / 'error.log'}",
                 "skip-networking", "bind-address=127.0.0.1", "user=root",
                 "skip-name-resolve", "skip-log-bin"]
        lines += [f"{k}={v}" for k, v in self.settings.items()]
        return "\n".join(lines) + "\n"

    def sysbench_args(self) -> list[str]:
        return ["--db-driver=mysql", f"--mysql-socket={self.socket}", "--mysql-user=root", "--mysql-db=sbtest"]

    @property
    def config_path(self) -> Path:
        return self.rundir / "my.cnf"

    def start(self, teardown: Teardown, initialize: bool = True) -> None:
        require("mariadbd")
        self.rundir.mkdir(parents=True, exist_ok=True)
        self.datadir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(self.config_text())
        if initialize:
            run(["mariadb-install-db", f"--defaults-file={self.config_path}", "--user=root",
                 "--auth-root-authentication-method=socket", "--skip-test-db"], timeout=600)
        log = open(self.rundir / "mariadbd.out", "ab")
        argv = ["mariadbd", f"--defaults-file={self.config_path}"]
        proc = subprocess.Popen(self.cage.command(argv) if self.cage else argv,
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.pid = proc.pid
        teardown.push(f"stop mariadbd pid {proc.pid}", self.stop)
        self._wait_ready(proc)

    def _wait_ready(self, proc: subprocess.Popen, seconds: float = 300) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"mariadbd exited {proc.returncode}: {self.error_log_tail()}")
            ping = subprocess.run(["mariadb-admin", f"--socket={self.socket}", "-uroot", "ping"],
                                  capture_output=True, text=True)
            if ping.returncode == 0:
                return
            time.sleep(0.5)
        raise RuntimeError(f"mariadbd not ready after {seconds}s: {self.error_log_tail()}")

    def error_log_tail(self) -> str:
        try:
            return (self.rundir / "error.log").read_text()[-1500:]
        except OSError:
            return "(no error log)"

    def stop(self) -> None:
        if self.pid is not None and pid_alive(self.pid):
            # A clean shutdown flushes the buffer pool; on a 500-IOPS disk that takes time.
            stop_pid(self.pid, grace=300)
        self.pid = None

    def sql(self, statement: str) -> str:
        return run(["mariadb", f"--socket={self.socket}", "-uroot", "-N", "-B", "-e", statement])

    def status_counters(self, names: list[str]) -> dict[str, int]:
        out = self.sql("SHOW GLOBAL STATUS")
        wanted = set(names)
        counters = {}
        for line in out.splitlines():
            key, _, value = line.partition("\t")
            if key in wanted:
                try:
                    counters[key] = int(value)
                except ValueError:
                    pass
        return counters

    def buffer_pool_bytes(self) -> int | None:
        """The buffer pool the running server actually has (it may round what it was given)."""
        try:
            return int(self.sql("SELECT @@innodb_buffer_pool_size").strip())
        except (CommandFailed, ValueError):
            return None

    @staticmethod
    def version() -> str:
        return tool_version(["mariadbd", "--version"])


INNODB_CACHE_COUNTERS = ["Innodb_buffer_pool_read_requests", "Innodb_buffer_pool_reads",
                         "Innodb_data_read", "Innodb_data_written", "Innodb_pages_written"]
PrivateMariaDB.CACHE_COUNTERS = INNODB_CACHE_COUNTERS

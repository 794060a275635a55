"""A private PostgreSQL server per run, for scenarios whose database.engine is
"postgresql": own data directory on the stack, own unix socket directory, no TCP.

Owns: initdb, the server's settings, starting postgres directly (as the postgres user)
and stopping it by its pid, and reading its buffer cache counters.
Promises: the server listens only on its unix socket (listen_addresses is empty);
stop() always runs through the Teardown.
Must never: use or stop the system's PostgreSQL service, or listen on a TCP port.
"""
from __future__ import annotations

import glob
import os
import pwd
import subprocess
import time
from pathlib import Path

from .cleanup import Teardown, pid_alive, stop_pid
from .shell import MissingTool, run, tool_version

BASE_SETTINGS = {
    "shared_buffers": "128MB",
    "max_connections": 200,
    "synchronous_commit": "on",
    "fsync": "on",
}

CACHE_COUNTERS = ["pg_blks_read", "pg_blks_hit"]


def pg_bin(tool: str) -> str:
    """The newest installed PostgreSQL's binary (Debian keeps them out of PATH)."""
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{tool}"), key=lambda p: int(p.split("/")[4]))
    if not found:
        raise MissingTool(tool)
    return found[-1]


def _as_postgres() -> dict:
    entry = pwd.getpwnam("postgres")
    return {"user": entry.pw_uid, "group": entry.pw_gid}


class PrivatePostgres:
    CACHE_COUNTERS = CACHE_COUNTERS

    def __init__(self, datadir: Path, rundir: Path, settings: dict):
        self.datadir, self.rundir = datadir, rundir
        self.socket = rundir  # libpq takes a socket directory as the host
        self.settings = {**BASE_SETTINGS, **settings}
        self.pid: int | None = None
        # A memory cgroup the server runs in (cage.py), when its page cache is capped.
        self.cage = None

    def sysbench_args(self) -> list[str]:
        return ["--db-driver=pgsql", f"--pgsql-host={self.rundir}", "--pgsql-user=postgres", "--pgsql-db=sbtest"]

    def start(self, teardown: Teardown, initialize: bool = True) -> None:
        user = _as_postgres()
        for d in (self.rundir, self.datadir):
            d.mkdir(parents=True, exist_ok=True)
            os.chown(d, user["user"], user["group"])
        if initialize:
            init = subprocess.run([pg_bin("initdb"), "-D", str(self.datadir), "-A", "trust", "-U", "postgres"],
                                  capture_output=True, text=True, **user)
            if init.returncode != 0:
                raise RuntimeError(f"initdb failed (the postgres user must be able to reach {self.datadir}): "
                                   f"{(init.stderr or init.stdout)[-800:]}")
        argv = [pg_bin("postgres"), "-D", str(self.datadir), "-k", str(self.rundir), "-c", "listen_addresses="]
        for k, v in self.settings.items():
            argv += ["-c", f"{k}={v}"]
        log = open(self.rundir / "postgres.log", "ab")
        if self.cage:
            # Joins the cage as root, then drops to the postgres user (setpriv execs it).
            argv = self.cage.command(["setpriv", f"--reuid={user['user']}", f"--regid={user['group']}",
                                      "--init-groups", "--", *argv])
            user = {}
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, **user)
        self.pid = proc.pid
        teardown.push(f"stop postgres pid {proc.pid}", self.stop)
        self._wait_ready(proc)
        if initialize:
            self.sql("CREATE DATABASE sbtest", db="postgres")

    def _wait_ready(self, proc: subprocess.Popen, seconds: float = 300) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"postgres exited {proc.returncode}: {self.log_tail()}")
            ready = subprocess.run([pg_bin("pg_isready"), "-h", str(self.rundir), "-U", "postgres"], capture_output=True)
            if ready.returncode == 0:
                return
            time.sleep(0.5)
        raise RuntimeError(f"postgres not ready after {seconds}s: {self.log_tail()}")

    def log_tail(self) -> str:
        try:
            return (self.rundir / "postgres.log").read_text()[-1500:]
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.pid is not None and pid_alive(self.pid):
            stop_pid(self.pid, grace=300)
        self.pid = None

    def sql(self, statement: str, db: str = "sbtest", timeout: float | None = 600) -> str:
        return run(["psql", "-h", str(self.rundir), "-U", "postgres", "-d", db, "-At", "-c", statement],
                   timeout=timeout)

    def settle_after_load(self) -> int:
        """What a DBA runs after a bulk load (and pgbench -i does): VACUUM ANALYZE, then
        CHECKPOINT. The first reads of freshly loaded rows set their hint bits and the
        visibility map, dirtying every page of the tables; left to the measured run, those
        writes are the run's largest part on a stack that writes back within seconds
        (tarn, ZFS: a txg) and largely deferred past the run on one that keeps them in its
        page cache (ext4's 30 s writeback), so the stacks would not be compared on the
        workload. The checkpoint makes them durable on every stack first."""
        self.sql("VACUUM ANALYZE", timeout=24 * 3600)
        self.sql("CHECKPOINT", timeout=24 * 3600)
        return self.tables_vacuumed()

    def tables_vacuumed(self) -> int:
        """Tables of the benchmark's database that a manual VACUUM and ANALYZE went over."""
        out = self.sql("SELECT count(*) FROM pg_stat_user_tables WHERE last_vacuum IS NOT NULL "
                       "AND last_analyze IS NOT NULL")
        return int(out.strip() or 0)

    def status_counters(self, names: list[str]) -> dict[str, int]:
        out = self.sql("SELECT blks_read, blks_hit FROM pg_stat_database WHERE datname = 'sbtest'")
        read, _, hit = out.strip().partition("|")
        values = {"pg_blks_read": int(read or 0), "pg_blks_hit": int(hit or 0)}
        return {k: v for k, v in values.items() if k in names}

    def buffer_pool_bytes(self) -> int | None:
        """shared_buffers as the running server has it (pg_settings counts 8 kB blocks)."""
        try:
            out = self.sql("SELECT setting::bigint * 8192 FROM pg_settings WHERE name = 'shared_buffers'", db="postgres")
            return int(out.strip())
        except (RuntimeError, ValueError):
            return None

    @staticmethod
    def version() -> str:
        try:
            return tool_version([pg_bin("postgres"), "--version"])
        except MissingTool:
            return "not installed"

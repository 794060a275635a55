"""The snapshots scenario (issue #13): what a history of snapshots costs a running database,
how long moving the database to a second node takes, and what an incremental send weighs.

Three parts. (1) Cost of history: during a measured run on a tarn stack with
`snapshot_every` / `snapshot_keep`, a loop takes `tarn snap create POOL/DS@NAME` every so
many seconds (each create timed) and destroys the oldest beyond `keep`; the run is compared
with the scenario's baseline stack (the same stack and data without snapshots): mean TPS
ratio, p99 latency of both, create latency p50 / p99. (2) Moving the database (a stack's
`move = true`): on tarn, `tarn send POOL/DS@SNAP | tarn recv` into a second pool on a second
paced disk; on ext4, `mariadb-backup --backup --stream=xbstream | mbstream -x` + `--prepare`
and `tar` of the stopped datadir onto an ext4 on a second paced disk: seconds and bytes
through the pipe. (3) Incremental (`workload.incremental = S`, tarn stacks with `move`): S
seconds of the workload after the move's snapshot, then `tarn send -i` of the change into the
second pool: its bytes against InnoDB's written bytes and the paced disk's written bytes
over the same seconds, and against the full stream. After the move and after the incremental
the received copy is started as a database (`ReceivedCopy`): MariaDB recovers on the
mounted received dataset and `CHECKSUM TABLE` of every table is compared with the source's.

Owns: `SnapshotLoop`, `pipe_and_count`, the move and incremental parts (written as
runs/<stack>/snapshots.json), and the derivations and table rows of the three parts.
Promises: the table functions are pure functions of the result dicts; a number not measured
is None, never a guess; the loop's creates and destroys are finished before `stop` returns;
every pool, mount, disk and server a part starts is registered on the Teardown.
Must never: touch the stack's pool beyond its own snapshots, or keep a run's data past it.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from statistics import mean
from typing import Callable

PARTS_FILE = "snapshots.json"
SNAPSHOT_PREFIX = "lab"
CHUNK = 1 << 20


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank percentile (q in 0..100) of `values`; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


# -- part 1: a snapshot every so many seconds, the oldest destroyed ---------------------------

class SnapshotLoop:
    """From `start()` until `stop()`, at every multiple of `every` seconds: `create(name)`
    (timed), then `destroy(oldest)` while more than `keep` of its snapshots are live. `create` and
    `destroy` return None on success or the error text. Times are seconds since `start()`."""

    def __init__(self, create: Callable[[str], str | None], destroy: Callable[[str], str | None],
                 every: float, keep: int, prefix: str = SNAPSHOT_PREFIX, live: list[str] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        assert every > 0 and keep >= 1, (every, keep)
        self.create, self.destroy, self.every, self.keep, self.clock = create, destroy, every, keep, clock
        # Names are unique per loop: a repeat's loop must not meet the snapshots an earlier
        # run of the same stack kept.
        self.prefix = prefix
        self.taken: list[dict] = []       # {"name", "t", "ms"} per snapshot created
        self.destroyed: list[dict] = []   # {"name", "t", "ms"}
        self.errors: list[str] = []
        # Oldest first; a repeat's loop starts with what the earlier run kept, so `keep`
        # bounds the stack's whole history, not each run's.
        self.live: list[str] = list(live or [])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="snapshot-loop", daemon=True)
        self._t0 = 0.0

    def start(self) -> "SnapshotLoop":
        self._t0 = self.clock()
        self._thread.start()
        return self

    def _timed(self, action, name: str) -> tuple[float, float, str | None]:
        began = self.clock()
        err = action(name)
        return began - self._t0, (self.clock() - began) * 1000.0, err

    def _loop(self) -> None:
        # On a fixed schedule (every, 2 × every, …), not `every` after the last one ended: a
        # create that takes seconds under load must not stretch the interval. A slot missed
        # while a create or destroy ran is skipped, not made up in a burst.
        n, due = 0, self.every
        while not self._stop.wait(max(0.0, due - (self.clock() - self._t0))):
            n += 1
            name = f"{self.prefix}{n}"
            t, ms, err = self._timed(self.create, name)
            if err:
                self.errors.append(f"create {name}: {err[-300:]}")
                return  # a create that fails will fail again; the run says so
            self.taken.append({"name": name, "t": round(t, 3), "ms": round(ms, 2)})
            self.live.append(name)
            while len(self.live) > self.keep:
                oldest = self.live.pop(0)
                t, ms, err = self._timed(self.destroy, oldest)
                if err:
                    self.errors.append(f"destroy {oldest}: {err[-300:]}")
                    return
                self.destroyed.append({"name": oldest, "t": round(t, 3), "ms": round(ms, 2)})
            due += self.every
            now = self.clock() - self._t0
            if due < now:
                due += math.ceil((now - due) / self.every) * self.every

    def stop(self) -> dict:
        """Stops the loop (a create or destroy under way finishes first); its record."""
        self._stop.set()
        self._thread.join(timeout=300)
        return self.record()

    def record(self) -> dict:
        create_ms = [s["ms"] for s in self.taken]
        return {"every": self.every, "keep": self.keep, "taken": self.taken, "destroyed": self.destroyed,
                "live": list(self.live), "errors": self.errors,
                "create_ms_p50": percentile(create_ms, 50), "create_ms_p99": percentile(create_ms, 99),
                "create_ms_max": max(create_ms) if create_ms else None}


def command_runner(argv_of: Callable[[str], list[str]]) -> Callable[[str], str | None]:
    """A SnapshotLoop action from an argv builder: None on exit 0, else the stderr text."""
    def action(name: str) -> str | None:
        proc = subprocess.run(argv_of(name), capture_output=True, text=True, timeout=600)
        return None if proc.returncode == 0 else (proc.stderr.strip() or f"exit {proc.returncode}")
    return action


def snapshot_loop(spec: dict, stack, repeat: int = 1) -> SnapshotLoop | None:
    """The loop a stack's `snapshot_every` asks for in run `repeat` (None without it, or on
    a stack that cannot take snapshots); its snapshots are named lab<repeat>.<n>."""
    every = int(spec.get("snapshot_every", 0))
    if every <= 0 or getattr(stack, "tarn_argv", None) is None:
        return None
    ds = stack.dataset
    kept = getattr(stack, "snapshots_kept", None) or []
    return SnapshotLoop(command_runner(lambda n: stack.tarn_argv("snap", "create", f"{ds}@{n}")),
                        command_runner(lambda n: stack.tarn_argv("snap", "destroy", f"{ds}@{n}")),
                        every=every, keep=int(spec.get("snapshot_keep", 6)), prefix=f"{SNAPSHOT_PREFIX}{repeat}.",
                        live=kept)


def snapshot_line(record: dict | None) -> str:
    """What the loop did, for the run's log line ("" when there was none)."""
    if not record:
        return ""
    line = (f"; {len(record['taken'])} snapshots every {record['every']} s (keep {record['keep']}), "
            f"create p50 {fmt_ms(record['create_ms_p50'])} p99 {fmt_ms(record['create_ms_p99'])}")
    return line + (f"; snapshot errors: {record['errors'][0]}" if record.get("errors") else "")


# -- moving bytes through a pipe, counted ------------------------------------------------------

def pipe_and_count(src: list[str], dst: list[str], timeout: float = 6 * 3600) -> dict:
    """`src | dst`, the bytes that went through counted: {"bytes", "seconds"} (the time from
    start until both have exited). Raises RuntimeError with both stderr tails when either
    fails."""
    t0 = time.monotonic()
    with open(os.devnull, "rb") as devnull:
        sender = subprocess.Popen(src, stdin=devnull, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    receiver = subprocess.Popen(dst, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    errs = {"src": b"", "dst": b""}
    readers = [threading.Thread(target=lambda k=k, p=p: errs.__setitem__(k, p.stderr.read()), daemon=True)
               for k, p in (("src", sender), ("dst", receiver))]
    for r in readers:
        r.start()
    moved = 0
    broken = False
    try:
        while True:
            chunk = sender.stdout.read1(CHUNK)
            if not chunk:
                break
            try:
                receiver.stdin.write(chunk)
            except BrokenPipeError:
                broken = True
                break
            moved += len(chunk)
        try:
            receiver.stdin.close()
        except BrokenPipeError:
            broken = True
        if broken:
            sender.kill()
        rc_src = sender.wait(timeout=timeout)
        rc_dst = receiver.wait(timeout=timeout)
    finally:
        for p in (sender, receiver):
            if p.poll() is None:
                p.kill()
                p.wait()
        for r in readers:
            r.join(timeout=10)
    seconds = time.monotonic() - t0
    if rc_src != 0 or rc_dst != 0 or broken:
        raise RuntimeError(f"{' '.join(src[-3:])} | {' '.join(dst[-3:])} failed (exit {rc_src} | {rc_dst}): "
                           f"{errs['src'].decode(errors='replace')[-500:]} {errs['dst'].decode(errors='replace')[-500:]}")
    return {"bytes": moved, "seconds": round(seconds, 2)}


def timed(argv: list[str], timeout: float = 6 * 3600) -> float:
    """Runs argv; its seconds. Raises RuntimeError with its stderr tail when it fails."""
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:3])} failed (exit {proc.returncode}): {proc.stderr.strip()[-800:]}")
    return round(time.monotonic() - t0, 2)


def tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


# -- parts 2 and 3, run after a stack's measured runs ------------------------------------------

def wants_parts(spec: dict) -> bool:
    return bool(spec.get("move"))


def run_parts(scenario: dict, spec: dict, stack, db, workdir: Path, teardown, progress, run_minute) -> dict:
    """The move (and on tarn the incremental after it) for one stack; the record written
    as runs/<stack>/snapshots.json by the caller. `run_minute(seconds)` runs the workload
    for that many seconds on the stack's database and returns its sysbench summary."""
    if stack.fs == "tarn":
        return tarn_parts(scenario, stack, db, workdir, teardown, progress, run_minute)
    if stack.fs == "ext4":
        return ext4_parts(scenario, stack, db, workdir, teardown, progress)
    raise RuntimeError(f"move: no way to move a {stack.fs} stack (tarn and ext4 only)")


def tarn_parts(scenario, stack, db, workdir, teardown, progress, run_minute) -> dict:
    """send | recv of the dataset's snapshot into a second pool on a second paced disk,
    then (workload.incremental) that many seconds of the workload and `send -i` of the
    change into the same received dataset."""
    from .devices import start_paced_disk
    from .shell import run
    remote = start_paced_disk(workdir, scenario["disk"], teardown, role="remote")
    pool = f"{stack.pool}rx"
    run(stack.tarn_argv("pool", "create", "-f", "-o", "ashift=12", pool, remote.path))
    teardown.push(f"export tarn pool {pool}", lambda: run(stack.tarn_argv("pool", "export", pool), check=False))
    ds, target = stack.dataset, f"{pool}/db"
    progress.phase("run", f"move: tarn send {ds}@move | tarn recv {target} (second pool, second paced disk)")
    created_ms = timed(stack.tarn_argv("snap", "create", f"{ds}@move")) * 1000
    moved = pipe_and_count(stack.tarn_argv("send", f"{ds}@move"), stack.tarn_argv("recv", target))
    out = {"stack": stack.name, "fs": "tarn",
           "move": {"method": "tarn send | tarn recv", **moved, "snapshot_ms": round(created_ms, 1),
                    "argv": " ".join(["tarn", "send", f"{ds}@move", "|", "tarn", "recv", target]),
                    "remote_device": remote.path}}
    progress.note(f"{stack.name}: moved by send | recv: {moved['bytes'] / 2**20:,.0f} MiB in {moved['seconds']:,.0f} s")
    copy = ReceivedCopy(stack, db, target, workdir, teardown)
    out["move"]["started"] = copy.check(progress, "move")
    seconds = int(scenario.get("workload", {}).get("incremental", 0))
    if seconds > 0:
        out["incremental"] = incremental(stack, db, ds, target, seconds, progress, run_minute)
        out["incremental"]["started"] = copy.check(progress, "incremental")
    return out


def table_checksums(db) -> dict[str, int | None]:
    """`CHECKSUM TABLE` of every table of the workload's database (sbtest): name -> checksum."""
    tables = [t for t in db.sql("SHOW TABLES FROM sbtest").split() if t]
    if not tables:
        return {}
    out = {}
    for line in db.sql("CHECKSUM TABLE " + ", ".join(f"sbtest.`{t}`" for t in tables)).splitlines():
        name, _, value = line.partition("\t")
        out[name] = int(value) if value.strip().isdigit() else None
    return out


class ReceivedCopy:
    """The received dataset started as a database (the second node taking over): mounted
    from the second pool, a MariaDB started on its datadir (crash recovery of the snapshot,
    which was taken under a running server), `CHECKSUM TABLE` of every table there and on the
    source at the same time (each on its own paced disk; the source is idle, so it still
    holds what the snapshot holds), then the copy's server stopped and the dataset unmounted,
    so the next incremental can be received into it (with -F: the server's recovery changed
    it since its snapshot, as on a real standby)."""

    def __init__(self, stack, db, target: str, workdir: Path, teardown):
        self.stack, self.db, self.target, self.teardown = stack, db, target, teardown
        self.mnt = workdir / "received-mnt"
        self.rundir = workdir / "received-mariadb"
        self.datadir = self.mnt / Path(db.datadir).relative_to(stack.mountpoint)
        self.arc_mb = stack.settings.get("arc_mb") if isinstance(stack.settings.get("arc_mb"), int) else None

    def check(self, progress, label: str) -> dict:
        from .devices import umount_if_mounted
        from .mariadb import PrivateMariaDB
        from .shell import run
        progress.phase("run", f"{label}: MariaDB started on the received {self.target}, CHECKSUM TABLE on both")
        self.mnt.mkdir(parents=True, exist_ok=True)
        argv = self.stack.tarn_argv("mount", self.target, str(self.mnt))
        if self.arc_mb:  # the second pool's daemon gets the stack's ARC, not a quarter of the RAM
            argv = argv[:1] + [f"TARN_ARC_MAX={self.arc_mb}M"] + argv[1:]
        run(argv, timeout=600)
        unmount = lambda: (run(self.stack.tarn_argv("umount", str(self.mnt)), check=False, timeout=600),  # noqa: E731
                           umount_if_mounted(str(self.mnt)))
        self.teardown.push(f"tarn umount {self.mnt}", unmount)
        copy = PrivateMariaDB(self.datadir, self.rundir, self.db.settings)
        t0 = time.monotonic()
        copy.start(self.teardown, initialize=False)
        started = time.monotonic() - t0
        sums: dict[str, dict] = {}
        errors: list[str] = []

        def checksum(key: str, server) -> None:
            try:
                sums[key] = table_checksums(server)
            except Exception as e:  # noqa: BLE001 - said in the record, the other side goes on
                errors.append(f"{key}: {e}")

        t1 = time.monotonic()
        threads = [threading.Thread(target=checksum, args=(k, d)) for k, d in (("source", self.db), ("copy", copy))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        checked = time.monotonic() - t1
        copy.stop()
        unmount()
        if errors:
            raise RuntimeError(f"{label}: CHECKSUM TABLE failed: {'; '.join(errors)}")
        source, received = sums["source"], sums["copy"]
        equal = bool(source) and source == received
        progress.note(f"{self.stack.name}: {label}: the received copy started in {started:,.1f} s; "
                      f"{len(source)} tables' CHECKSUM TABLE {'equal to' if equal else 'DIFFERENT from'} the source's")
        return {"start_seconds": round(started, 1), "checksum_seconds": round(checked, 1), "tables": len(source),
                "equal": equal, "source": source, "copy": received}


INNODB_WRITE_COUNTERS = ["Innodb_data_written", "Innodb_os_log_written", "Innodb_pages_written"]


def incremental(stack, db, ds: str, target: str, seconds: int, progress, run_minute) -> dict:
    from .devices import counters_delta, read_fresh_pacer_stats
    data = next(d for d in stack.devices if d.role == "data")
    before = db.status_counters(INNODB_WRITE_COUNTERS)
    pacer_before = read_fresh_pacer_stats(data)
    progress.phase("run", f"incremental: {seconds} s of the workload, then tarn send -i @move {ds}@after",
                   total=seconds)
    summary = run_minute(seconds)
    after = db.status_counters(INNODB_WRITE_COUNTERS)
    pacer_after = read_fresh_pacer_stats(data)
    timed(stack.tarn_argv("snap", "create", f"{ds}@after"))
    # -F: the copy was started as a database after the move, which changed it since @move.
    sent = pipe_and_count(stack.tarn_argv("send", "-i", "@move", f"{ds}@after"),
                          stack.tarn_argv("recv", "-F", target))
    progress.note(f"{stack.name}: incremental after {seconds} s: {sent['bytes'] / 2**20:,.1f} MiB in "
                  f"{sent['seconds']:,.0f} s")
    return {"seconds_of_workload": seconds, "workload_tps": summary.get("tps"),
            "transactions": summary.get("transactions"), **sent,
            "innodb_written": {k: after.get(k, 0) - before.get(k, 0) for k in INNODB_WRITE_COUNTERS},
            "pacer_delta": counters_delta(pacer_before, pacer_after)}


def ext4_parts(scenario, stack, db, workdir, teardown, progress) -> dict:
    """The same move without tarn: mariadb-backup's stream (server running) extracted and
    prepared on an ext4 on a second paced disk; then tar of the stopped datadir there."""
    from .devices import start_paced_disk, umount_if_mounted
    from .shell import require, run
    remote = start_paced_disk(workdir, scenario["disk"], teardown, role="remote")
    mnt = workdir / "remote-mnt"
    mnt.mkdir(parents=True, exist_ok=True)
    run(["mkfs.ext4", "-F", "-q", "-E", "lazy_itable_init=0,lazy_journal_init=0", remote.path])
    run(["mount", "-o", "noatime", remote.path, str(mnt)])
    teardown.push(f"umount {mnt}", lambda: umount_if_mounted(str(mnt)))
    out: dict = {"stack": stack.name, "fs": "ext4", "remote_device": remote.path}
    backup = mnt / "backup"
    backup.mkdir()
    scratch = workdir / "mariadb-backup-tmp"
    scratch.mkdir(parents=True, exist_ok=True)
    tool = require("mariadb-backup")
    progress.phase("run", "move: mariadb-backup --backup --stream=xbstream | mbstream -x, then --prepare")
    streamed = pipe_and_count(
        [tool, f"--defaults-file={db.config_path}", "--backup", "--stream=xbstream", f"--socket={db.socket}",
         "--user=root", f"--datadir={db.datadir}", f"--target-dir={scratch}"],
        [require("mbstream"), "-x", "-C", str(backup)])
    prepare = timed([tool, "--prepare", f"--target-dir={backup}"])
    synced = timed(["sync", "-f", str(mnt)])
    out["mariadb_backup"] = {"method": "mariadb-backup --backup --stream=xbstream | mbstream -x; --prepare",
                             "bytes": streamed["bytes"], "stream_seconds": streamed["seconds"],
                             "prepare_seconds": prepare, "sync_seconds": synced,
                             "seconds": round(streamed["seconds"] + prepare + synced, 2),
                             "received_bytes": tree_bytes(backup)}
    progress.note(f"{stack.name}: moved by mariadb-backup: {streamed['bytes'] / 2**20:,.0f} MiB in "
                  f"{out['mariadb_backup']['seconds']:,.0f} s (stream {streamed['seconds']:,.0f} s, "
                  f"prepare {prepare:,.0f} s)")
    shutil.rmtree(backup)
    run(["fstrim", str(mnt)], check=False)
    progress.phase("run", "move: tar of the stopped datadir | tar -x on the second disk")
    t0 = time.monotonic()
    db.stop()
    stopped = time.monotonic() - t0
    dest = mnt / "tar"
    dest.mkdir()
    copied = pipe_and_count(["tar", "-C", str(db.datadir.parent), "-cf", "-", db.datadir.name],
                            ["tar", "-C", str(dest), "-xf", "-"])
    synced = timed(["sync", "-f", str(mnt)])
    out["tar"] = {"method": "mariadbd stopped; tar -cf - DATADIR | tar -xf -", "bytes": copied["bytes"],
                  "stop_seconds": round(stopped, 2), "copy_seconds": copied["seconds"], "sync_seconds": synced,
                  "seconds": round(stopped + copied["seconds"] + synced, 2)}
    progress.note(f"{stack.name}: moved by tar: {copied['bytes'] / 2**20:,.0f} MiB in {out['tar']['seconds']:,.0f} s")
    return out


def write_parts(rundir: Path, stack: str, record: dict) -> Path:
    path = rundir / "runs" / stack / PARTS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({**record, "status": "ok"}, indent=1))
    tmp.rename(path)
    return path


def load_parts(rundir: Path) -> dict[str, dict]:
    """stack -> its finished snapshots.json."""
    out = {}
    for p in sorted((rundir / "runs").glob(f"*/{PARTS_FILE}")):
        try:
            record = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if record.get("status") == "ok":
            out[p.parent.name] = record
    return out


def failures(rundir: Path) -> list[str]:
    """A line per stack whose parts failed (the report says why their numbers are missing)."""
    out = []
    for p in sorted((rundir / "runs").glob(f"*/{PARTS_FILE}")):
        try:
            record = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if record.get("status") != "ok":
            out.append(f"{p.parent.name}: the move / incremental parts failed — {record.get('reason')}")
    return out


# -- the tables ----------------------------------------------------------------------------------

def fmt_ms(v: float | None) -> str:
    return "—" if v is None else (f"{v:,.0f} ms" if v >= 100 else f"{v:.1f} ms")


def _fmt(v: float | None, spec: str, suffix: str = "") -> str:
    return "—" if v is None else f"{v:{spec}}{suffix}"


def _p99(run: dict) -> float | None:
    return (run.get("summary") or {}).get("latency_ms", {}).get("p99")


def history_rows(cells: dict, baseline: str | None) -> list[dict]:
    """Per stack and workload whose runs took snapshots, against the baseline stack's runs
    of the same workload (no snapshots): mean TPS, its ratio, p99 both, create latency."""
    rows = []
    for (stack, workload), cell in cells.items():
        records = [r["snapshots"] for r in cell.runs if r.get("snapshots")]
        if not records:
            continue
        base = cells.get((baseline, workload)) if baseline and baseline != stack else None
        create_ms = [s["ms"] for rec in records for s in rec["taken"]]
        base_tps = base.tps if base else None
        rows.append({"stack": stack, "workload": workload, "baseline": baseline if base else None,
                     "tps": cell.tps, "baseline_tps": base_tps,
                     "ratio": cell.tps / base_tps if base_tps else None,
                     "p99_ms": _mean_or_none([_p99(r) for r in cell.runs]),
                     "baseline_p99_ms": _mean_or_none([_p99(r) for r in base.runs]) if base else None,
                     "snapshots": len(create_ms), "destroyed": sum(len(rec["destroyed"]) for rec in records),
                     "every": records[0]["every"], "keep": records[0]["keep"],
                     "create_p50_ms": percentile(create_ms, 50), "create_p99_ms": percentile(create_ms, 99),
                     "errors": [e for rec in records for e in rec.get("errors", [])]})
    return rows


def _mean_or_none(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return mean(got) if got else None


def move_rows(parts: dict[str, dict]) -> list[dict]:
    """One row per way of moving the database: seconds, bytes through the pipe, and both
    against tarn send | recv (the first tarn stack's)."""
    rows = []
    for stack, rec in parts.items():
        if "move" in rec:
            rows.append({"how": f"{stack}: tarn send | tarn recv", "seconds": rec["move"]["seconds"],
                         "bytes": rec["move"]["bytes"], "tarn": True})
        for key, label in (("mariadb_backup", "mariadb-backup --stream + --prepare"), ("tar", "tar of the stopped datadir")):
            if key in rec:
                rows.append({"how": f"{stack}: {label}", "seconds": rec[key]["seconds"],
                             "bytes": rec[key]["bytes"], "tarn": False})
    rows.sort(key=lambda r: not r["tarn"])  # tarn's first: the others are divided by it
    ref = next((r for r in rows if r["tarn"]), None)
    for r in rows:
        r["time_vs_tarn"] = r["seconds"] / ref["seconds"] if ref and ref["seconds"] else None
        r["bytes_vs_tarn"] = r["bytes"] / ref["bytes"] if ref and ref["bytes"] else None
    return rows


def incremental_rows(parts: dict[str, dict]) -> list[dict]:
    """The incremental stream against what the workload wrote over the same seconds and
    against the full stream."""
    rows = []
    for stack, rec in parts.items():
        inc = rec.get("incremental")
        if not inc:
            continue
        innodb = inc.get("innodb_written") or {}
        innodb_bytes = (innodb.get("Innodb_data_written") or 0) + (innodb.get("Innodb_os_log_written") or 0)
        device = (inc.get("pacer_delta") or {}).get("write_bytes")
        full = (rec.get("move") or {}).get("bytes")
        rows.append({"stack": stack, "seconds": inc["seconds_of_workload"], "bytes": inc["bytes"],
                     "send_seconds": inc["seconds"], "innodb_bytes": innodb_bytes or None,
                     "device_bytes": device, "full_bytes": full,
                     "vs_innodb": inc["bytes"] / innodb_bytes if innodb_bytes else None,
                     "vs_device": inc["bytes"] / device if device else None,
                     "vs_full": inc["bytes"] / full if full else None})
    return rows


def started_rows(parts: dict[str, dict]) -> list[dict]:
    """The received copy started as a database, after the move and after the incremental:
    how long its server took to start (crash recovery) and whether every table's CHECKSUM
    TABLE equals the source's."""
    rows = []
    for stack, rec in parts.items():
        for label, part in (("full (send | recv)", rec.get("move")), ("incremental (send -i | recv -F)",
                                                                      rec.get("incremental"))):
            got = (part or {}).get("started")
            if got:
                rows.append({"stack": stack, "copy": label, "start_seconds": got["start_seconds"],
                             "checksum_seconds": got["checksum_seconds"], "tables": got["tables"],
                             "equal": got["equal"]})
    return rows


def _mib(n: int | None) -> str:
    return "—" if n is None else f"{n / 2**20:,.1f}"


HISTORY_TITLE = ("Cost of history: a snapshot every few seconds (the oldest destroyed beyond keep) against the "
                 "same stack and data without snapshots; p99 latency; snapshot create latency under load")
MOVE_TITLE = "Moving the database to a second node (a second paced disk): time and bytes through the pipe"
INCREMENTAL_TITLE = ("Incremental send after the workload ran: its bytes against what the workload wrote "
                     "(InnoDB: data + redo; the paced disk's written bytes) and against the full stream")

STARTED_TITLE = ("The received copy started as a database: MariaDB on the received dataset (crash recovery), "
                 "CHECKSUM TABLE of every table there against the source's")


def history_columns() -> list[tuple[str, Callable]]:
    return [("stack", lambda r: r["stack"]),
            ("snap-\nshots", lambda r: str(r["snapshots"])),
            ("every s,\nkeep", lambda r: f"{r['every']}, {r['keep']}"),
            ("TPS", lambda r: _fmt(r["tps"], ",.1f")),
            ("TPS\nwithout", lambda r: _fmt(r["baseline_tps"], ",.1f")),
            ("TPS\nratio", lambda r: _fmt(r["ratio"], ".3f", "×")),
            ("p99", lambda r: fmt_ms(r["p99_ms"])),
            ("p99\nwithout", lambda r: fmt_ms(r["baseline_p99_ms"])),
            ("create\np50", lambda r: fmt_ms(r["create_p50_ms"])),
            ("create\np99", lambda r: fmt_ms(r["create_p99_ms"]))]


def move_columns() -> list[tuple[str, Callable]]:
    return [("how", lambda r: r["how"]),
            ("seconds", lambda r: _fmt(r["seconds"], ",.1f")),
            ("MiB\nmoved", lambda r: _mib(r["bytes"])),
            ("time /\ntarn's", lambda r: _fmt(r["time_vs_tarn"], ".2f", "×")),
            ("bytes /\ntarn's", lambda r: _fmt(r["bytes_vs_tarn"], ".2f", "×"))]


def incremental_columns() -> list[tuple[str, Callable]]:
    return [("stack", lambda r: r["stack"]),
            ("work-\nload s", lambda r: str(r["seconds"])),
            ("MiB\nsent", lambda r: _mib(r["bytes"])),
            ("InnoDB\nMiB wr", lambda r: _mib(r["innodb_bytes"])),
            ("sent /\nInnoDB", lambda r: _fmt(r["vs_innodb"], ".2f", "×")),
            ("disk\nMiB wr", lambda r: _mib(r["device_bytes"])),
            ("sent /\ndisk", lambda r: _fmt(r["vs_device"], ".2f", "×")),
            ("full\nMiB", lambda r: _mib(r["full_bytes"])),
            ("sent /\nfull", lambda r: _fmt(r["vs_full"], ".3f", "×"))]


def started_columns() -> list[tuple[str, Callable]]:
    return [("stack", lambda r: r["stack"]),
            ("copy", lambda r: r["copy"]),
            ("start s", lambda r: _fmt(r["start_seconds"], ",.1f")),
            ("tables", lambda r: str(r["tables"])),
            ("checksums", lambda r: "equal" if r["equal"] else "DIFFERENT"),
            ("checksum s", lambda r: _fmt(r["checksum_seconds"], ",.1f"))]


def sections(cells: dict, baseline: str | None, parts: dict[str, dict]) -> list[tuple[str, list, list]]:
    """(title, columns, rows) of each of the four tables that has rows, in the report's order."""
    out = []
    for title, cols, rows in ((HISTORY_TITLE, history_columns(), history_rows(cells, baseline)),
                              (MOVE_TITLE, move_columns(), move_rows(parts)),
                              (INCREMENTAL_TITLE, incremental_columns(), incremental_rows(parts)),
                              (STARTED_TITLE, started_columns(), started_rows(parts))):
        if rows:
            out.append((title, cols, rows))
    return out


def history_pairs(cells: dict, baseline: str | None) -> list[tuple[object, list[float]]]:
    """(cell, snapshot instants of its last run) for the TPS-over-time chart: the stacks
    that took snapshots, with the baseline's cell (no instants) first."""
    out = []
    for (stack, workload), cell in cells.items():
        record = cell.runs[-1].get("snapshots")
        if record:
            base = cells.get((baseline, workload)) if baseline else None
            if base and all(c is not base for c, _ in out):
                out.append((base, []))
            out.append((cell, [s["t"] for s in record["taken"]]))
    return out

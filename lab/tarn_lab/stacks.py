"""Stacks: a filesystem (or pool) built on the paced disk, mounted, ready for a datadir.

Owns: mkfs/mount of ext4 (journal in place or on the fast device), xfs, btrfs
(compress=zstd|lzo), ZFS (kernel ZFS if the module is loaded, else a private zfs-fuse
daemon; compression, recordsize, ARC size, L2ARC, SLOG, logbias), ext4 on bcache, and tarn
(`tarn mount`; properties such as logbias, SLOG, ARC size, an L2ARC on the fast device); the
database settings each stack wants (doublewrite off on copy-on-write stacks, as the articles
did); and the restart of a ZFS or tarn pool (export, import, mount) for the l2arc scenario.
Promises: a stack this machine cannot build raises StackSkipped with the reason; every
mount, pool and daemon it starts is registered on the Teardown.
Must never: touch pools, mounts or daemons it did not create.
"""
from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from .cleanup import Teardown, stop_pid
from .devices import REPO_ROOT, Device, is_mounted, start_fast_disk, start_paced_disk, umount_if_mounted
from .shell import require, run, tool_version

FILESYSTEMS = ("ext4", "xfs", "btrfs", "zfs", "bcache", "tarn")
COPY_ON_WRITE = {"btrfs", "zfs", "tarn"}


class StackSkipped(RuntimeError):
    """This machine cannot build the stack; the message is the reason for the report."""


@dataclass
class BuiltStack:
    name: str
    fs: str
    mountpoint: Path
    devices: list[Device]
    settings: dict                      # what was actually built, for the results json
    db_overrides: dict = field(default_factory=dict)
    pool: str | None = None             # zfs pool name, for size queries
    versions: dict = field(default_factory=dict)
    engine_stats: object = None         # () -> dict of the stack's own cache/io counters, if any
    # The stack's own daemons whose memory is sampled: {"tarn": pid} or {"zfs-fuse": pid}.
    processes: dict = field(default_factory=dict)
    # (stop: bool) -> argv that runs one scrub of the pool in the foreground, or stops it;
    # None where the stack has no scrub (workload.scrub measures its cost).
    scrub_argv: object = None
    # () -> the L2ARC's counters now (`tarn stats l2arc --json`), or None: sampled each second
    # of a run on stacks whose engine exposes them (tarn with a cache device).
    l2arc_stats: object = None
    # () -> dict: export and import the pool with the same devices and mount it again (the
    # database must be stopped first); what was done and how long it took. None where the
    # stack has no pool to export.
    restart: object = None
    # (*args) -> argv of a tarn command on this run's pools (private cache file and run dir),
    # and the dataset the database lives on: the snapshots scenario's snap, send and recv.
    tarn_argv: object = None
    dataset: str | None = None
    # The snapshots the last measured run's loop left, oldest first (the next run's starts there).
    snapshots_kept: list = field(default_factory=list)

    def device_names(self) -> dict[str, str]:
        return {d.role: d.name for d in self.devices}


def build_stack(spec: dict, disk: dict, fast_disk: dict, workdir: Path, teardown: Teardown) -> BuiltStack:
    fs = spec["fs"]
    check_buildable(spec)
    mnt = workdir / "mnt"
    mnt.mkdir(parents=True, exist_ok=True)
    data = start_paced_disk(workdir, disk, teardown, role="data")
    builder = {"ext4": _ext4, "xfs": _xfs, "btrfs": _btrfs, "zfs": _zfs,
               "bcache": _bcache, "tarn": _tarn}[fs]
    stack = builder(spec, data, fast_disk, workdir, mnt, teardown)
    stack.db_overrides = {**default_db_overrides(fs), **spec.get("mariadb", {})}
    return stack


def zfs_fuse_wait_seconds() -> float:
    return float(os.environ.get("TARN_LAB_ZFS_FUSE_WAIT", 1800))


def zfs_fuse_running() -> bool:
    """A live zfs-fuse process (zombies, state Z, do not count: they hold nothing)."""
    proc = subprocess.run(["pgrep", "-x", "zfs-fuse"], capture_output=True, text=True)
    for pid in proc.stdout.split():
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                    return True
        except (OSError, IndexError):
            pass
    return False


def wait_for_no_zfs_fuse(seconds: float, log=None, poll: float = 5.0) -> bool:
    """zfs-fuse allows one daemon per machine: when another lab run (or anyone) has one,
    wait for it to exit rather than skip at once. True when none is running."""
    deadline = time.monotonic() + seconds
    told = False
    while zfs_fuse_running():
        if time.monotonic() >= deadline:
            return False
        if log and not told:
            log(f"another zfs-fuse daemon is running; waiting up to {seconds:.0f}s for it to exit")
            told = True
        time.sleep(poll)
    return True


def check_buildable(spec: dict, log=None) -> None:
    """Raise StackSkipped before anything is started if the machine lacks what fs needs."""
    fs = spec["fs"]
    if fs == "bcache":
        if not os.path.isdir("/sys/fs/bcache"):
            raise StackSkipped("kernel has no bcache (no /sys/fs/bcache)")
        if not _which("make-bcache"):
            raise StackSkipped("make-bcache missing: apt-get install bcache-tools")
    if fs == "tarn":
        binary = tarn_binary()
        if not binary.exists():
            raise StackSkipped("tarn mount not available yet (no target/release/tarn)")
        proc = subprocess.run([str(binary), "mount", "--help"], capture_output=True, text=True)
        if proc.returncode != 0:
            raise StackSkipped("tarn mount not available yet")
    if fs == "zfs" and not _kernel_zfs():
        if _which("zfs-fuse") is None:
            raise StackSkipped("no kernel ZFS and zfs-fuse missing: apt-get install zfs-fuse")
        if not wait_for_no_zfs_fuse(zfs_fuse_wait_seconds(), log):
            raise StackSkipped("a zfs-fuse daemon not started by this run was still running after "
                               f"{zfs_fuse_wait_seconds():.0f}s of waiting; the lab needs its own "
                               "(zfs-fuse allows one per machine; TARN_LAB_ZFS_FUSE_WAIT sets the wait)")


def default_db_overrides(fs: str) -> dict:
    """What the articles set per stack: no doublewrite on CoW; O_DIRECT where it works."""
    overrides = {"innodb_flush_method": "O_DIRECT"}
    if fs in COPY_ON_WRITE:
        overrides["innodb_doublewrite"] = 0
    if fs == "zfs":
        # ZFS (and FUSE) reject O_DIRECT; the ZFS article used O_DSYNC for the redo log.
        overrides["innodb_flush_method"] = "O_DSYNC" if _kernel_zfs() else "fsync"
        overrides["innodb_use_native_aio"] = 0
    # tarn's FUSE mount passes O_DIRECT through (reads and writes bypass the kernel page
    # cache), so InnoDB runs on it as on ext4: the default O_DIRECT above.
    return overrides


def tarn_binary() -> Path:
    return Path(os.environ.get("TARN_BIN", REPO_ROOT / "target" / "release" / "tarn"))


def _which(tool: str):
    import shutil
    return shutil.which(tool)


def _kernel_zfs() -> bool:
    return os.path.isdir("/sys/module/zfs")


def _mount(dev: str, mnt: Path, options: str, teardown: Teardown, fstype: str | None = None) -> None:
    argv = ["mount"] + (["-t", fstype] if fstype else []) + ["-o", options, dev, str(mnt)]
    run(argv)
    teardown.push(f"umount {mnt}", lambda: umount_if_mounted(str(mnt)))


def _ext4(spec, data, fast, workdir, mnt, teardown) -> BuiltStack:
    # lazy init off: otherwise ext4 zeroes inode tables in the background during the run.
    mkfs = ["mkfs.ext4", "-F", "-q", "-E", "lazy_itable_init=0,lazy_journal_init=0"]
    devices, options, settings = [data], "noatime", {}
    if spec.get("external_journal"):
        # ext4's answer to a SLOG: the whole journal (jbd2) on the fast device, so a
        # commit's journal write and flush go there; file data still goes to the paced disk.
        log = start_fast_disk(workdir, fast.get("size", "1G"), teardown, role="log")
        run(["mke2fs", "-F", "-q", "-O", "journal_dev", "-b", "4096", log.path])
        mkfs += ["-b", "4096", "-J", f"device={log.path}"]
        # journal_path: find the journal by path, not by the device number kept in the superblock.
        options += f",journal_path={log.path}"
        devices.append(log)
        settings["journal"] = f"external, on the fast disk ({log.path})"
    run(mkfs + [data.path])
    _mount(data.path, mnt, options, teardown)
    settings.update({"mkfs": " ".join(mkfs), "mount": options})
    return BuiltStack(spec["name"], "ext4", mnt, devices, settings,
                      versions={"e2fsprogs": tool_version(["mkfs.ext4", "-V"])})


def _xfs(spec, data, fast, workdir, mnt, teardown) -> BuiltStack:
    run(["mkfs.xfs", "-f", "-q", data.path])
    _mount(data.path, mnt, "noatime", teardown)
    return BuiltStack(spec["name"], "xfs", mnt, [data], {"mkfs": "mkfs.xfs", "mount": "noatime"},
                      versions={"xfsprogs": tool_version(["mkfs.xfs", "-V"])})


def _btrfs(spec, data, fast, workdir, mnt, teardown) -> BuiltStack:
    compression = spec.get("compression", "zstd")
    run(["mkfs.btrfs", "-f", "-q", data.path])
    options = f"noatime,compress={compression}" if compression != "off" else "noatime"
    _mount(data.path, mnt, options, teardown)
    return BuiltStack(spec["name"], "btrfs", mnt, [data], {"mount": options},
                      versions={"btrfs-progs": tool_version(["mkfs.btrfs", "--version"])})


# zfs-fuse (pool version 23) predates lz4 and zstd: the nearest it has is lzjb.
ZFS_FUSE_COMPRESSION = {"lz4": "lzjb", "zstd": "lzjb"}


def _zfs(spec, data, fast, workdir, mnt, teardown) -> BuiltStack:
    settings: dict = {}
    pool = f"tarnlab{os.getpid()}"
    compression = spec.get("compression", "lz4")
    zfs_fuse_pid = None
    if not _kernel_zfs():
        arc_mb = max(16, int(spec.get("arc_mb", 256)))
        settings["zfs_fuse_argv"], zfs_fuse_pid = _start_zfs_fuse(workdir, arc_mb, teardown,
                                                                  kstats=bool(spec.get("l2arc")))
        settings["implementation"] = "zfs-fuse"
        settings["arc_max_mb"] = arc_mb
        if compression in ZFS_FUSE_COMPRESSION:
            settings["compression_requested"] = compression
            compression = ZFS_FUSE_COMPRESSION[compression]
    else:
        settings["implementation"] = "kernel zfs"
    props = {"compression": compression, "recordsize": spec.get("recordsize", "16k"),
             "atime": "off", "logbias": spec.get("logbias", "latency"),
             "primarycache": spec.get("primarycache", "all")}
    argv = ["zpool", "create", "-f", "-m", str(mnt)]
    for k, v in props.items():
        argv += ["-O", f"{k}={v}"]
    argv += [pool, data.path]
    devices = [data]
    if spec.get("slog"):
        log = start_fast_disk(workdir, fast.get("size", "1G"), teardown, role="log")
        argv += ["log", log.path]
        devices.append(log)
    if spec.get("l2arc"):
        cache = start_fast_disk(workdir, fast.get("size", "1G"), teardown, role="cache")
        argv += ["cache", cache.path]
        devices.append(cache)
    run(argv)
    teardown.push(f"destroy pool {pool}", lambda: _destroy_pool(pool, mnt))
    settings.update(props)
    settings["pool"] = pool
    # zfs-fuse's L2ARC counters, from its kstat mount (an L2ARC stack's daemon has one).
    l2arc = (lambda: zfs_fuse_l2arc_stats()) if zfs_fuse_pid and spec.get("l2arc") else None
    return BuiltStack(spec["name"], "zfs", mnt, devices, settings, pool=pool,
                      versions={"zfs": settings["implementation"],
                                "zfs-fuse": tool_version(["dpkg-query", "-W", "-f=${Version}", "zfs-fuse"])},
                      processes={"zfs-fuse": zfs_fuse_pid} if zfs_fuse_pid else {},
                      restart=lambda: _zfs_restart(pool, devices, workdir), l2arc_stats=l2arc,
                      engine_stats=(lambda: {"l2arc": l2arc()}) if l2arc else None)


ZFS_FUSE_KSTATS = Path("/zfs-kstat/zfs/arcstats")
# zfs-fuse's arcstats (pool v23) under tarn's names (`tarn stats l2arc`): the same meaning.
# It has no compressed L2ARC (so no stored size) and no count of cached blocks.
ZFS_FUSE_L2ARC = {"hits": "l2_hits", "misses": "l2_misses", "size": "l2_size", "hdr_size": "l2_hdr_size",
                  "write_bytes": "l2_write_bytes", "read_bytes": "l2_read_bytes", "cksum_bad": "l2_cksum_bad",
                  "io_errors": "l2_io_error"}


def zfs_fuse_l2arc_stats(root: Path = ZFS_FUSE_KSTATS) -> dict | None:
    """zfs-fuse's L2ARC counters from its kstat mount, under tarn's names; None when the
    kstats cannot be read (no kstat mount)."""
    out = {}
    for name, kstat in ZFS_FUSE_L2ARC.items():
        try:
            out[name] = int((root / kstat).read_text().strip())
        except (OSError, ValueError):
            return None
    return out


def device_dir(workdir: Path, devices: list[Device]) -> Path:
    """A directory holding only this stack's devices (symlinks), for `import -d`: the
    import then looks at nothing else, so it can never find another pool's devices."""
    where = workdir / "import-devices"
    where.mkdir(parents=True, exist_ok=True)
    for dev in devices:
        link = where / dev.name
        if not link.is_symlink():
            link.symlink_to(dev.path)
    return where


def _zfs_restart(pool: str, devices: list[Device], workdir: Path) -> dict:
    """zpool export, then import from the same devices (the filesystem mounts itself)."""
    t0 = time.monotonic()
    run(["zpool", "export", pool], timeout=600)
    exported = time.monotonic()
    run(["zpool", "import", "-d", str(device_dir(workdir, devices)), pool], timeout=600)
    return {"how": "zpool export, zpool import -d (same devices)",
            "export_seconds": round(exported - t0, 1), "import_seconds": round(time.monotonic() - exported, 1)}


# zfs-fuse's caching flags for the lab's daemon. Without them two kernel caches sit outside
# ZFS and serve reads from RAM, so a small-ARC run is not disk-bound: the page cache above
# the FUSE mount (--disable-page-cache) and the block cache of the vdev below ZFS
# (--disable-block-cache: the vdev is opened O_DIRECT). With both, the ARC is the only cache,
# as on kernel ZFS. Recorded per run in the stack settings.
ZFS_FUSE_CACHE_FLAGS = ["--disable-page-cache", "--disable-block-cache"]


def zfs_fuse_argv(pidfile: Path, arc_mb: int, kstats: bool = False) -> list[str]:
    """With kstats, the daemon mounts its counters at /zfs-kstat (the l2arc scenario reads the
    L2ARC's there); otherwise not, so no stack leaves a mount outside its work directory."""
    return ["zfs-fuse", "--pidfile", str(pidfile), *([] if kstats else ["--no-kstat-mount"]), "-m", str(arc_mb),
            "--fuse-attr-timeout", "1", "--fuse-entry-timeout", "1", *ZFS_FUSE_CACHE_FLAGS]


def _start_zfs_fuse(workdir: Path, arc_mb: int, teardown: Teardown, kstats: bool = False) -> tuple[list[str], int]:
    pidfile = workdir / "zfs-fuse.pid"
    pidfile.unlink(missing_ok=True)
    if kstats:
        # Runs after the daemon is stopped (the teardown is a stack): the daemon unmounts its
        # kstats as it exits, this only clears a mount a killed daemon left behind.
        teardown.push("umount /zfs-kstat if left", lambda: umount_if_mounted("/zfs-kstat"))
    # Daemonizes; the pidfile names our daemon so teardown stops exactly it.
    argv = zfs_fuse_argv(pidfile, arc_mb, kstats)
    run(argv)
    deadline = time.monotonic() + 20
    while not (pidfile.exists() and pidfile.read_text().strip()):
        if time.monotonic() > deadline:
            raise RuntimeError("zfs-fuse did not write its pidfile")
        time.sleep(0.1)
    pid = int(pidfile.read_text().strip())
    teardown.push(f"stop zfs-fuse pid {pid}", lambda: stop_pid(pid, grace=30))
    # The daemon answers on its socket a moment after forking.
    for _ in range(50):
        if subprocess.run(["zpool", "list"], capture_output=True).returncode == 0:
            return argv, pid
        time.sleep(0.2)
    raise RuntimeError("zfs-fuse daemon did not answer `zpool list`")


def _destroy_pool(pool: str, mnt: Path) -> None:
    for _ in range(10):
        proc = subprocess.run(["zpool", "destroy", "-f", pool], capture_output=True, text=True)
        if proc.returncode == 0 or "no such pool" in proc.stderr:
            break
        time.sleep(1)
    umount_if_mounted(str(mnt))


def _bcache(spec, data, fast, workdir, mnt, teardown) -> BuiltStack:
    # ext4 on a bcache device: the paced disk as backing, the fast disk as cache (writethrough,
    # a read cache as in the L2ARC article).
    cache = start_fast_disk(workdir, fast.get("size", "1G"), teardown, role="cache")
    run(["make-bcache", "--wipe-bcache", "-B", data.path, "-C", cache.path])
    for dev in (data.path, cache.path):
        subprocess.run(["sh", "-c", f"echo {dev} > /sys/fs/bcache/register"], capture_output=True)
    sysdir = Path("/sys/block") / data.name / "bcache"
    deadline = time.monotonic() + 10
    while not (sysdir / "dev").exists():
        if time.monotonic() > deadline:
            raise StackSkipped("bcache did not register the backing device")
        time.sleep(0.2)
    bdev = "/dev/" + os.path.basename(os.path.realpath(sysdir / "dev"))
    teardown.push(f"stop {bdev}", lambda: _stop_bcache(sysdir, cache))
    run(["mkfs.ext4", "-F", "-q", "-E", "lazy_itable_init=0,lazy_journal_init=0", bdev])
    _mount(bdev, mnt, "noatime", teardown)
    return BuiltStack(spec["name"], "bcache", mnt, [data, cache],
                      {"cache_mode": "writethrough", "bcache_device": bdev})


def _stop_bcache(sysdir: Path, cache: Device) -> None:
    (sysdir / "stop").write_text("1")
    uuid_dir = Path("/sys/block") / cache.name / "bcache" / "set"
    if uuid_dir.exists():
        (uuid_dir / "stop").write_text("1")
    time.sleep(1)


def tarn_command(workdir: Path, *args: str, arc_mb: int | None = None) -> list[str]:
    """A tarn command whose pool cache and run dir are private to this run, so the lab
    never sees or touches pools it did not create."""
    env = [f"TARN_CACHE_FILE={workdir / 'tarn-cache.json'}", f"TARN_RUN_DIR={workdir / 'tarn-run'}"]
    if arc_mb:
        env.append(f"TARN_ARC_MAX={arc_mb}M")
    return ["env", *env, str(tarn_binary()), *args]


# How a tarn stack's mount takes the kernel's requests (`tarn mount --transport`; a stack
# that names none gets tarn's default, /dev/fuse).
FUSE_TRANSPORTS = ("dev", "uring")
TARN_DEFAULT_PROPERTIES = {"recordsize": "16K", "compression": "lz4", "atime": "off"}
# Stack keys that are dataset properties on ZFS and on tarn alike: given at the top level of
# a tarn stack they become tarn properties (the scenario check refuses a conflicting value
# in `properties`).
TARN_PROPERTY_KEYS = ("logbias", "primarycache")


def tarn_properties(spec: dict) -> dict:
    """The dataset properties a tarn stack is created with: the lab's defaults, the
    top-level property keys (logbias, primarycache), then `properties`."""
    top = {k: spec[k] for k in TARN_PROPERTY_KEYS if k in spec}
    return {**TARN_DEFAULT_PROPERTIES, **top, **spec.get("properties", {})}


def _tarn(spec, data, fast, workdir, mnt, teardown) -> BuiltStack:
    """A tarn pool on the paced disk's loop device, one dataset mounted through FUSE."""
    pool = f"tarnlab{os.getpid()}"
    props = tarn_properties(spec)
    ashift = str(spec.get("ashift", 12))
    devices = [data]
    vdevs = [data.path]
    if spec.get("slog"):
        # The separate intent log on the fast device, as the ZFS article's SLOG.
        log = start_fast_disk(workdir, fast.get("size", "1G"), teardown, role="log")
        vdevs += ["log", log.path]
        devices.append(log)
    if spec.get("l2arc"):
        # The L2ARC on the fast device, as the zfs-l2arc stack's: same size, same role.
        cache = start_fast_disk(workdir, fast.get("size", "1G"), teardown, role="cache")
        vdevs += ["cache", cache.path]
        devices.append(cache)
    run(tarn_command(workdir, "pool", "create", "-f", "-o", f"ashift={ashift}", pool, *vdevs))
    teardown.push(f"export tarn pool {pool}", lambda: run(tarn_command(workdir, "pool", "export", pool), check=False))
    options = [a for k, v in props.items() for a in ("-o", f"{k}={v}")]
    run(tarn_command(workdir, "ds", "create", *options, f"{pool}/db"))
    arc_mb = spec.get("arc_mb")
    transport = spec.get("transport")
    run(tarn_command(workdir, *tarn_mount_args(f"{pool}/db", mnt, transport), arc_mb=arc_mb))
    teardown.push(f"tarn umount {mnt}", lambda: (run(tarn_command(workdir, "umount", str(mnt)), check=False),
                                                  umount_if_mounted(str(mnt))))
    settings = {"properties": props, "ashift": ashift, "vdev": data.path, "arc_mb": arc_mb or "default (1/4 of RAM)",
                "slog": bool(spec.get("slog")), "l2arc": bool(spec.get("l2arc")),
                "fuse_transport_asked": transport or "default (dev)",
                **served_transport(workdir, pool, mnt)}
    pid = tarn_daemon_pid(workdir, pool)
    settings["mount_daemon_pid"] = pid
    stack = BuiltStack(spec["name"], "tarn", mnt, devices, settings, pool=pool,
                       versions={"tarn": tool_version([str(tarn_binary()), "--version"])},
                       engine_stats=lambda: tarn_stats(workdir, pool), processes={"tarn": pid} if pid else {},
                       scrub_argv=lambda stop: tarn_command(workdir, "pool", "scrub", *(["-s"] if stop else []), pool),
                       l2arc_stats=(lambda: tarn_l2arc_stats(workdir, pool)) if spec.get("l2arc") else None)
    stack.restart = lambda: _tarn_restart(stack, workdir, arc_mb, transport)
    stack.tarn_argv = lambda *args: tarn_command(workdir, *args)
    stack.dataset = f"{pool}/db"
    return stack


def _tarn_restart(stack: BuiltStack, workdir: Path, arc_mb: int | None, transport: str | None) -> dict:
    """tarn umount, pool export, pool import from the same devices (cache device included),
    mount again with the same ARC cap; the new daemon's pid replaces the old one's."""
    pool, mnt = stack.pool, str(stack.mountpoint)
    t0 = time.monotonic()
    run(tarn_command(workdir, "umount", mnt), timeout=600)
    run(tarn_command(workdir, "pool", "export", pool), timeout=600)
    exported = time.monotonic()
    # -d with each device path: the import looks at nothing else, and the pool keeps the
    # /dev/loopN paths it was created with.
    run(tarn_command(workdir, "pool", "import", *[a for d in stack.devices for a in ("-d", d.path)], pool),
        timeout=600)
    run(tarn_command(workdir, *tarn_mount_args(f"{pool}/db", mnt, transport), arc_mb=arc_mb), timeout=600)
    pid = tarn_daemon_pid(workdir, pool)
    stack.processes = {"tarn": pid} if pid else {}
    stack.settings["mount_daemon_pid_after_restart"] = pid
    stack.settings["fuse_transport_after_restart"] = served_transport(workdir, pool, mnt)["fuse_transport"]
    return {"how": "tarn umount, pool export, pool import -d DEV… (same devices), tarn mount",
            "export_seconds": round(exported - t0, 1), "import_seconds": round(time.monotonic() - exported, 1)}


def tarn_mount_args(dataset: str, mountpoint, transport: str | None) -> list[str]:
    """`tarn mount` with the stack's FUSE transport (None: tarn's default, /dev/fuse)."""
    return ["mount", *(["--transport", transport] if transport else []), dataset, str(mountpoint)]


def served_transport(workdir: Path, pool: str, mountpoint) -> dict:
    """Which FUSE transport the daemon really serves the mount with (`tarn stats fuse`):
    a `uring` mount falls back to /dev/fuse where the kernel refuses it, and the results
    must say what was measured, not what was asked."""
    proc = subprocess.run(tarn_command(workdir, "stats", "fuse", pool, "--json"),
                          capture_output=True, text=True, timeout=30)
    found = parse_fuse_mounts(proc.stdout, str(mountpoint)) if proc.returncode == 0 else None
    if found is None:
        return {"fuse_transport": "unknown (tarn stats fuse did not answer)"}
    out = {"fuse_transport": found["transport"]}
    if found.get("fallback"):
        out["fuse_transport_fallback"] = found["fallback"]
    return out


def parse_fuse_mounts(text: str, mountpoint: str) -> dict | None:
    """`tarn stats fuse --json` output -> the entry of the mount at MOUNTPOINT (with its
    "transport"), or None when the text is not that or names no such mount."""
    import json
    try:
        mounts = json.loads(text)
    except ValueError:
        return None
    if not isinstance(mounts, list):
        return None
    for m in mounts:
        if isinstance(m, dict) and m.get("mountpoint") == mountpoint and isinstance(m.get("transport"), str):
            return m
    return None


def parse_mount_record(text: str) -> int:
    """A `tarn mount` daemon's record (TARN_RUN_DIR/<pool>.mount, JSON) -> its pid."""
    import json
    pid = json.loads(text).get("pid")
    if not isinstance(pid, int) or pid <= 0:
        raise ValueError(f"tarn mount record without a pid: {text[:200]!r}")
    return pid


def tarn_daemon_pid(workdir: Path, pool: str) -> int | None:
    """The pid of the daemon serving this run's pool, from its mount record (None if the
    record cannot be read: memory is then not sampled, and the results say so)."""
    try:
        return parse_mount_record((workdir / "tarn-run" / f"{pool}.mount").read_text())
    except (OSError, ValueError):
        return None


def tarn_stats(workdir: Path, pool: str) -> dict | None:
    """`tarn stats all POOL --json` (the mount daemon's arc/zil/txg/io counters), or None."""
    import json
    proc = subprocess.run(tarn_command(workdir, "stats", "all", pool, "--json"),
                          capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        return None
    try:
        return json.loads(proc.stdout)
    except ValueError:
        return None


def tarn_l2arc_stats(workdir: Path, pool: str) -> dict | None:
    """`tarn stats l2arc POOL --json`'s counters, or None if the daemon did not answer."""
    proc = subprocess.run(tarn_command(workdir, "stats", "l2arc", pool, "--json"),
                          capture_output=True, text=True, timeout=10)
    return parse_l2arc_stats(proc.stdout) if proc.returncode == 0 else None


def parse_l2arc_stats(text: str) -> dict | None:
    """`tarn stats l2arc --json` output -> its counters ({"hits": …, "misses": …}), or None
    when the text is not that (a daemon that has no L2ARC section, or garbage)."""
    import json
    try:
        section = json.loads(text).get("l2arc")
    except (ValueError, AttributeError):
        return None
    if not isinstance(section, dict) or not {"hits", "misses"} <= section.keys():
        return None
    return {k: v for k, v in section.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def counter_deltas(before: dict | None, after: dict | None) -> dict | None:
    """Per-section differences of two engine-stats snapshots (gauges come out as deltas too;
    the 'after' snapshot is kept beside them for those)."""
    if not before or not after:
        return None
    out: dict = {}
    for section, values in after.items():
        if isinstance(values, dict):
            prev = before.get(section, {})
            out[section] = {k: v - prev.get(k, 0) for k, v in values.items()
                            if isinstance(v, (int, float)) and isinstance(prev.get(k, 0), (int, float))}
    return out

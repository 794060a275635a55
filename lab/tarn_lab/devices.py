"""Block devices the stacks are built on: the paced "cloud disk" and the fast local device.

Owns: starting tarn-pacer (the FUSE pacing layer, a Rust binary in the workspace),
attaching its `disk` file to a loop device, and attaching plain image files (the
unthrottled "local NVMe") to loop devices.
Promises: every pacer, loop device and mount it creates is registered on the Teardown,
and is undone by its own pid / device name.
Must never: pace I/O in Python, detach loop devices it did not attach, or fake a pacer.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from .cleanup import Teardown, pid_alive, stop_pid
from .shell import run

REPO_ROOT = Path(__file__).resolve().parents[2]


class PacerMissing(RuntimeError):
    pass


@dataclass
class Device:
    path: str            # /dev/loopN
    role: str            # data | cache | log
    stats_path: str | None = None   # the pacer's per-second JSON, when paced

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


def pacer_binary() -> Path:
    """tarn-pacer from $TARN_PACER, else target/release/tarn-pacer at the repo root."""
    env = os.environ.get("TARN_PACER")
    path = Path(env) if env else REPO_ROOT / "target" / "release" / "tarn-pacer"
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise PacerMissing(
            f"tarn-pacer not found at {path}: build it with `cargo build --release` at the "
            f"repo root (or set TARN_PACER to its path)")
    return path


def parse_size(text: str | int) -> int:
    """'16K' / '8M' / '2G' / 4096 -> bytes (binary units, as the tools use them)."""
    if isinstance(text, int):
        return text
    s = str(text).strip().upper().removesuffix("B").removesuffix("I")
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    if s and s[-1] in units:
        return int(float(s[:-1]) * units[s[-1]])
    return int(s)


def is_mounted(path: str) -> bool:
    real = os.path.realpath(path)
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == real for line in f)


def umount_if_mounted(path: str) -> None:
    for _ in range(20):
        if not is_mounted(path):
            return
        proc = subprocess.run(["umount", path], capture_output=True, text=True)
        if proc.returncode == 0:
            continue
        time.sleep(0.5)  # busy right after a server exit: retry briefly
    if is_mounted(path):
        run(["umount", "-l", path])


def attach_loop(image: str, teardown: Teardown, role: str, stats: str | None = None) -> Device:
    # --direct-io=on keeps the loop device from caching a second copy of every page, so the
    # filesystem above sees the disk's real speed, not the loop's page cache.
    dev = run(["losetup", "--find", "--show", "--direct-io=on", image]).strip()
    teardown.push(f"detach {dev}", lambda: detach_loop(dev))
    return Device(path=dev, role=role, stats_path=stats)


def detach_loop(dev: str) -> None:
    for _ in range(20):
        proc = subprocess.run(["losetup", "-d", dev], capture_output=True, text=True)
        if proc.returncode == 0:
            return
        time.sleep(0.5)
    raise RuntimeError(f"could not detach {dev}: {proc.stderr.strip()}")


def start_paced_disk(workdir: Path, disk: dict, teardown: Teardown, role: str = "data") -> Device:
    """Start tarn-pacer over a sparse backing file and attach its disk to a loop device."""
    binary = pacer_binary()
    workdir.mkdir(parents=True, exist_ok=True)
    backing, mnt, stats = workdir / f"{role}.backing", workdir / f"{role}.pacer", workdir / f"{role}.stats.json"
    mnt.mkdir(exist_ok=True)
    argv = [str(binary), "--backing", str(backing), "--size", str(parse_size(disk["size"])),
            "--mountpoint", str(mnt), "--stats", str(stats)]
    for key, flag in (("iops", "--iops"), ("bandwidth", "--bandwidth"),
                      ("max_io", "--max-io"), ("latency_us", "--latency-us")):
        if disk.get(key):
            value = disk[key] if key in ("iops", "latency_us") else parse_size(disk[key])
            argv += [flag, str(value)]
    out = run(argv, timeout=60)
    pid = _pid_from_pacer_output(out)
    teardown.push(f"remove {backing}", lambda: backing.unlink(missing_ok=True))
    teardown.push(f"stop tarn-pacer pid {pid}", lambda: _stop_pacer(pid, str(mnt)))
    _wait_for(lambda: (mnt / "disk").exists(), 30, f"tarn-pacer never showed {mnt}/disk")
    return attach_loop(str(mnt / "disk"), teardown, role, stats=str(stats))


def _pid_from_pacer_output(out: str) -> int:
    lines = [l for l in out.strip().splitlines() if l.strip()]
    if not lines or not lines[-1].startswith("pid="):
        raise RuntimeError(f"tarn-pacer did not print pid=<N> last; it printed: {out!r}")
    return int(lines[-1].split("=", 1)[1])


def _stop_pacer(pid: int, mnt: str) -> None:
    stop_pid(pid, grace=30)
    umount_if_mounted(mnt)


def start_fast_disk(workdir: Path, size: str | int, teardown: Teardown, role: str) -> Device:
    """The unthrottled 'local NVMe': a sparse image file on a loop device."""
    workdir.mkdir(parents=True, exist_ok=True)
    image = workdir / f"{role}.img"
    with open(image, "wb") as f:
        f.truncate(parse_size(size))
    teardown.push(f"remove {image}", lambda: image.unlink(missing_ok=True))
    return attach_loop(str(image), teardown, role)


def read_pacer_stats(dev: Device) -> dict | None:
    if not dev.stats_path:
        return None
    try:
        return json.loads(Path(dev.stats_path).read_text())
    except (OSError, ValueError):
        return None


def read_fresh_pacer_stats(dev: Device, timeout: float = 3.0, poll: float = 0.05) -> dict | None:
    """The pacer's counters as of now: it rewrites its stats file once a second, so wait
    for the next rewrite rather than take a snapshot up to a second old. None if the
    device is not paced; the last snapshot read if no rewrite came within `timeout`."""
    first = read_pacer_stats(dev)
    if first is None:
        return None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(poll)
        now = read_pacer_stats(dev)
        if now is not None and now.get("elapsed_ns") != first.get("elapsed_ns"):
            return now
    return first


def counters_delta(before: dict | None, after: dict | None) -> dict | None:
    """after - before for every numeric counter both snapshots hold."""
    if before is None or after is None:
        return None
    return {k: after[k] - before[k] for k in after
            if isinstance(after[k], (int, float)) and isinstance(before.get(k), (int, float))}


def _wait_for(cond, seconds: float, message: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise RuntimeError(message)

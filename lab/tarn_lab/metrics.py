"""Per-second system metrics: per-device IOPS and MB/s from /proc/diskstats, CPU from
/proc/stat, the resident memory (RSS) of the processes that hold a stack's caches —
mariadbd (the buffer pool), the `tarn mount` daemon or zfs-fuse (the ARC) — from
/proc/PID/status, and the counters of any probe it is given (the L2ARC's, each second).

Owns: parsing those files and a sampler thread that turns counter deltas into rates, one
row per second, for the data/cache/log devices separately, with each process's RSS.
Promises: parsers are pure functions of text; the sampler stops when its `with` ends; a
process that has exited is left out of the rows from then on, not counted as zero; a probe
that fails or answers None leaves its key out of that second's row.
Must never: write anything to the system; it only reads /proc (and runs its probes).
"""
from __future__ import annotations

import os
import threading
import time

SECTOR = 512  # /proc/diskstats counts 512-byte sectors whatever the device's block size


def parse_diskstats(text: str) -> dict[str, dict[str, int]]:
    """device name -> {reads, read_bytes, read_ms, writes, write_bytes, write_ms, flushes,
    flush_ms}. The _ms fields are the kernel's time spent on completed requests of that
    kind; divided by their count they are iostat's r_await, w_await and f_await. On a loop
    device a flush holds the requests queued behind it, so flush_ms is read time lost too."""
    devices = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) < 14:
            continue
        devices[f[2]] = {
            "reads": int(f[3]), "read_bytes": int(f[5]) * SECTOR, "read_ms": int(f[6]),
            "writes": int(f[7]), "write_bytes": int(f[9]) * SECTOR, "write_ms": int(f[10]),
            "flushes": int(f[18]) if len(f) >= 20 else 0,
            "flush_ms": int(f[19]) if len(f) >= 20 else 0,
        }
    return devices


def parse_proc_stat_cpu(text: str) -> dict[str, int]:
    """The aggregate `cpu` line -> {busy, idle, iowait, total} in jiffies."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            v = [int(x) for x in line.split()[1:]]
            user, nice, system, idle, iowait, irq, softirq, steal = (v + [0] * 8)[:8]
            total = user + nice + system + idle + iowait + irq + softirq + steal
            return {"busy": total - idle - iowait, "idle": idle, "iowait": iowait, "total": total,
                    "user": user + nice, "system": system + irq + softirq}
    raise ValueError("no aggregate cpu line in /proc/stat")


# /proc/PID/status memory lines, in kB: the resident set, its peak, and its parts.
STATUS_KEYS = {"VmRSS": "rss_bytes", "VmHWM": "hwm_bytes", "RssAnon": "anon_bytes",
               "RssFile": "file_bytes", "RssShmem": "shmem_bytes"}


def parse_proc_status(text: str) -> dict[str, int]:
    """/proc/PID/status -> {rss_bytes, hwm_bytes, anon_bytes, file_bytes, shmem_bytes}
    (those present; a kernel thread has none)."""
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in STATUS_KEYS:
            value, _, unit = rest.strip().partition(" ")
            if unit.strip() != "kB":
                raise ValueError(f"/proc status: {key} in {unit!r}, expected kB")
            out[STATUS_KEYS[key]] = int(value) * 1024
    return out


def read_process_memory(pid: int) -> dict[str, int] | None:
    """The process's memory now, or None once it has exited."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return parse_proc_status(f.read()) or None
    except (FileNotFoundError, ProcessLookupError):
        return None


def summarize_rss(samples: list[int], last: dict | None) -> dict:
    """Per-second RSS samples of one process -> max, mean and last, with its peak: the
    kernel's own (VmHWM, which also sees between samples) from the last reading, but never
    below the largest sample — the kernel sums RSS from per-CPU counters and raises VmHWM
    lazily, so a VmHWM read after a VmRSS can be a few pages smaller than it."""
    out = {"samples": len(samples)}
    if samples:
        out.update({"max_bytes": max(samples), "mean_bytes": int(sum(samples) / len(samples)),
                    "last_bytes": samples[-1]})
    if last and "hwm_bytes" in last:
        out["hwm_bytes"] = max(last["hwm_bytes"], out.get("max_bytes", 0))
    return out


def device_rates(before: dict, after: dict, seconds: float) -> dict[str, float]:
    d = {k: after[k] - before[k] for k in after}
    return {"r_iops": d["reads"] / seconds, "w_iops": d["writes"] / seconds,
            "r_mbps": d["read_bytes"] / seconds / 1e6, "w_mbps": d["write_bytes"] / seconds / 1e6,
            "flushes_ps": d["flushes"] / seconds,
            # ms of each second spent flushing, and the mean flush's wait (iostat's f_await)
            "flush_ms_ps": d.get("flush_ms", 0) / seconds,
            "f_await_ms": _await(d.get("flush_ms", 0), d["flushes"]),
            "r_await_ms": _await(d.get("read_ms", 0), d["reads"]),
            "w_await_ms": _await(d.get("write_ms", 0), d["writes"])}


def _await(ms: int, count: int) -> float:
    """The mean completed request's time in ms, 0 when none completed."""
    return ms / count if count else 0.0


def host_device_of(path: str) -> str | None:
    """The kernel name (as in /proc/diskstats) of the block device holding `path`, or None
    when it is not on one (tmpfs, overlay). The lab samples it as the "host" device: a
    second in which the paced disk completed nothing can then be told apart — the host's
    disk under the pacer's backing file stalled too, or only the pacer did."""
    try:
        st = os.stat(path)
        target = os.path.realpath(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    except OSError:
        return None
    name = os.path.basename(target)
    return name if os.path.exists(target) and name else None


def cpu_percent(before: dict, after: dict) -> dict[str, float]:
    total = max(after["total"] - before["total"], 1)
    return {k: 100.0 * (after[k] - before[k]) / total for k in ("busy", "user", "system", "iowait")}


def read_diskstats() -> dict:
    with open("/proc/diskstats") as f:
        return parse_diskstats(f.read())


def read_cpu() -> dict:
    with open("/proc/stat") as f:
        return parse_proc_stat_cpu(f.read())


def run_probes(probes: dict) -> dict:
    """Each probe's answer under its name; one that raises or answers None is left out
    (counters are extra: a failed read must not stop the sampling)."""
    out = {}
    for name, probe in probes.items():
        try:
            value = probe()
        except Exception:
            continue
        if value is not None:
            out[name] = value
    return out


class Sampler:
    """Samples once a second in a thread; `rows` holds one dict per second (with "rss":
    {role: bytes} for the processes given, and each probe's answer under its name);
    `memory` summarizes each process's RSS."""

    def __init__(self, devices: dict[str, str], interval: float = 1.0, processes: dict[str, int] | None = None,
                 probes: dict | None = None):
        self.devices = devices            # role -> kernel device name (loop3)
        self.processes = dict(processes or {})   # role -> pid (mariadbd, tarn, zfs-fuse)
        self.probes = dict(probes or {})  # name -> () -> dict | None (the L2ARC's counters)
        self.interval = interval
        self.rows: list[dict] = []
        self.totals: dict[str, dict] = {}
        self.memory: dict[str, dict] = {}
        self._rss: dict[str, list[int]] = {role: [] for role in self.processes}
        self._last_status: dict[str, dict] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> "Sampler":
        self._start_disk, self._start_cpu = read_diskstats(), read_cpu()
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        end = read_diskstats()
        for role, name in self.devices.items():
            if name in end and name in self._start_disk:
                self.totals[role] = {k: end[name][k] - self._start_disk[name][k] for k in end[name]}
        self._sample_memory()
        self.memory = {role: summarize_rss(self._rss[role], self._last_status.get(role)) for role in self.processes}

    def _sample_memory(self) -> dict[str, int]:
        now = {}
        for role, pid in self.processes.items():
            status = read_process_memory(pid)
            if status and "rss_bytes" in status:
                self._last_status[role] = status
                self._rss[role].append(status["rss_bytes"])
                now[role] = status["rss_bytes"]
        return now

    def _loop(self) -> None:
        prev_disk, prev_cpu, prev_t = self._start_disk, self._start_cpu, self._t0
        while not self._stop.wait(self.interval - ((time.monotonic() - self._t0) % self.interval)):
            now_disk, now_cpu, now_t = read_diskstats(), read_cpu(), time.monotonic()
            dt = max(now_t - prev_t, 1e-3)
            row = {"t": round(now_t - self._t0, 2), "cpu": cpu_percent(prev_cpu, now_cpu)}
            for role, name in self.devices.items():
                if name in now_disk and name in prev_disk:
                    row[role] = device_rates(prev_disk[name], now_disk[name], dt)
            if self.processes:
                row["rss"] = self._sample_memory()
            row.update(run_probes(self.probes))
            self.rows.append(row)
            prev_disk, prev_cpu, prev_t = now_disk, now_cpu, now_t

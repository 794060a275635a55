"""The pacer's IOPS limit holds against /proc/diskstats, through the lab's own stack builder:
ext4 on the paced disk at a low IOPS limit, read and written directly and through the page
cache; the loop device's counters must stay under limit x 1.3 plus one second of burst."""
import os
import subprocess
import time

from tarn_lab.cleanup import Teardown
from tarn_lab.metrics import read_diskstats
from tarn_lab.stacks import build_stack
from conftest import leftovers

LIMIT = 100  # IOPS


def io_count(dev: str) -> int:
    d = read_diskstats()[dev]
    return d["reads"] + d["writes"]


def test_iops_limit_holds_for_direct_and_buffered_io(real_machine, tmp_path):
    disk = {"size": "512M", "iops": LIMIT, "bandwidth": "64M", "max_io": "16K"}
    with Teardown() as td:
        stack = build_stack({"name": "ext4", "fs": "ext4"}, disk, {}, tmp_path / "w", td)
        dev = stack.device_names()["data"]
        target = stack.mountpoint / "f"
        phases = {
            # Buffered writes then fsync: writeback is what cgroup v1 throttling misses.
            "buffered write": ["dd", "if=/dev/urandom", f"of={target}", "bs=1M", "count=8", "conv=fsync"],
            # Direct 4 KiB reads at random offsets: one I/O each, far more than the limit asks for.
            "direct read": ["fio", "--name=r", f"--filename={target}", "--rw=randread", "--bs=4k",
                            "--direct=1", "--runtime=5", "--time_based", "--iodepth=8",
                            "--ioengine=libaio", "--output=/dev/null"],
        }
        for phase, argv in phases.items():
            subprocess.run(["sync"])
            start_ios, t0 = io_count(dev), time.monotonic()
            subprocess.run(argv, check=True, capture_output=True, timeout=300)
            elapsed = time.monotonic() - t0
            ios = io_count(dev) - start_ios
            allowed = LIMIT * 1.3 * elapsed + LIMIT
            print(f"{phase}: {ios} I/Os in {elapsed:.1f}s = {ios / elapsed:.0f} IOPS (limit {LIMIT})")
            assert ios > 0, f"{phase}: diskstats counted no I/O"
            assert ios <= allowed, f"{phase}: {ios} I/Os in {elapsed:.1f}s exceeds {LIMIT} IOPS"
    assert leftovers(tmp_path) == []

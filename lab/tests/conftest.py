"""Shared requirements of the tests that build real stacks."""
import os

import pytest

from tarn_lab.devices import PacerMissing, pacer_binary


@pytest.fixture
def real_machine():
    """Root, /dev/fuse, loop devices and tarn-pacer. A missing pacer FAILS (CI builds it)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (loop devices, mounts)")
    for path in ("/dev/fuse", "/dev/loop-control"):
        if not os.path.exists(path):
            pytest.skip(f"needs {path}")
    try:
        return pacer_binary()
    except PacerMissing as exc:
        pytest.fail(str(exc))


def leftovers(root) -> list[str]:
    """Mounts, loop devices and mariadbd processes that still reference root."""
    root = str(root)
    found = []
    with open("/proc/self/mounts") as f:
        found += [l.split()[1] for l in f if root in l]
    import subprocess
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    found += [l for l in loops.splitlines() if root in l]
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = open(f"/proc/{pid}/cmdline").read()
            except OSError:
                continue
            if root in cmd:
                found.append(f"pid {pid}: {cmd}")
    return found

"""Running external commands and naming the Debian package of a missing tool.

Owns: the one place commands are run, so errors carry the command and its stderr.
Promises: a missing tool raises MissingTool naming the package to install.
Must never: run a shell string (arguments are lists, nothing is interpolated).
"""
from __future__ import annotations

import shutil
import subprocess

# Which Debian package provides each tool the lab calls, for "install X" messages.
DEBIAN_PACKAGE_OF = {
    "mkfs.ext4": "e2fsprogs", "mkfs.xfs": "xfsprogs", "mkfs.btrfs": "btrfs-progs",
    "btrfs": "btrfs-progs", "compsize": "btrfs-compsize", "zfs-fuse": "zfs-fuse",
    "zpool": "zfs-fuse", "zfs": "zfs-fuse", "mariadbd": "mariadb-server",
    "mariadb-install-db": "mariadb-server", "mariadb": "mariadb-client",
    "mariadb-admin": "mariadb-client", "sysbench": "sysbench", "losetup": "mount",
    "mount": "mount", "umount": "mount", "tar": "tar", "make-bcache": "bcache-tools",
    "fusermount3": "fuse3", "df": "coreutils",
}


class MissingTool(RuntimeError):
    """A command the lab needs is not installed."""

    def __init__(self, tool: str):
        package = DEBIAN_PACKAGE_OF.get(tool, tool)
        super().__init__(f"'{tool}' not found: install it with `apt-get install {package}`")
        self.tool = tool
        self.package = package


class CommandFailed(RuntimeError):
    def __init__(self, argv: list[str], returncode: int, stderr: str):
        tail = stderr.strip()[-2000:]
        super().__init__(f"`{' '.join(argv)}` exited {returncode}: {tail}")
        self.argv, self.returncode, self.stderr = argv, returncode, stderr


def require(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise MissingTool(tool)
    return path


def run(argv: list[str], check: bool = True, timeout: float | None = 600,
        input: str | None = None) -> str:
    """Run argv, return its stdout; raise CommandFailed on a non-zero exit if check."""
    require(argv[0])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=input)
    if check and proc.returncode != 0:
        raise CommandFailed(argv, proc.returncode, proc.stderr or proc.stdout)
    return proc.stdout


def tool_version(argv: list[str]) -> str:
    """First line of a tool's version output, or why there is none."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unavailable ({exc})"
    out = (proc.stdout or proc.stderr).strip().splitlines()
    return out[0] if out else "unknown"

"""Stacks this machine cannot build are skipped with a reason, before anything starts."""
import os

import pytest

from tarn_lab import stacks
from tarn_lab.shell import MissingTool, require


def test_tarn_without_mount_subcommand_is_skipped(tmp_path, monkeypatch):
    fake = tmp_path / "tarn"
    fake.write_text("#!/bin/sh\necho 'unknown subcommand' >&2\nexit 2\n")
    fake.chmod(0o755)
    monkeypatch.setenv("TARN_BIN", str(fake))
    with pytest.raises(stacks.StackSkipped, match="tarn mount not available yet"):
        stacks.check_buildable({"name": "t", "fs": "tarn"})


def test_tarn_binary_absent_is_skipped(tmp_path, monkeypatch):
    monkeypatch.setenv("TARN_BIN", str(tmp_path / "nope"))
    with pytest.raises(stacks.StackSkipped, match="tarn mount not available yet"):
        stacks.check_buildable({"name": "t", "fs": "tarn"})


@pytest.mark.skipif(os.path.isdir("/sys/fs/bcache"), reason="this kernel has bcache")
def test_bcache_without_kernel_support_is_skipped():
    with pytest.raises(stacks.StackSkipped, match="bcache"):
        stacks.check_buildable({"name": "b", "fs": "bcache"})


def test_copy_on_write_stacks_turn_doublewrite_off():
    assert stacks.default_db_overrides("btrfs")["innodb_doublewrite"] == 0
    assert stacks.default_db_overrides("zfs")["innodb_doublewrite"] == 0
    assert "innodb_doublewrite" not in stacks.default_db_overrides("ext4")


def test_missing_tool_names_the_debian_package():
    with pytest.raises(MissingTool, match="apt-get install btrfs-compsize"):
        stacks_require_missing("compsize")


def stacks_require_missing(tool):
    # Pretend the tool is absent by searching an empty PATH.
    old = os.environ["PATH"]
    os.environ["PATH"] = "/nonexistent"
    try:
        require(tool)
    finally:
        os.environ["PATH"] = old


def test_lab_zfs_fuse_daemon_bypasses_the_kernel_caches(tmp_path):
    # Without these the page cache above the FUSE mount and the vdev's block cache serve
    # reads from RAM, and a small-ARC ZFS run is not disk-bound.
    argv = stacks.zfs_fuse_argv(tmp_path / "pid", 16)
    assert "--disable-page-cache" in argv and "--disable-block-cache" in argv
    assert argv[argv.index("-m") + 1] == "16"


def test_zfs_stack_waits_for_a_foreign_zfs_fuse_then_builds(monkeypatch):
    # Another lab run's zfs-fuse (one daemon per machine) is waited out, not a skip.
    states = iter([True, True, False])
    monkeypatch.setattr(stacks, "zfs_fuse_running", lambda: next(states))
    said = []
    assert stacks.wait_for_no_zfs_fuse(60, said.append, poll=0.01)
    assert len(said) == 1 and "waiting" in said[0]


def test_zfs_stack_skipped_when_the_foreign_zfs_fuse_stays(monkeypatch):
    monkeypatch.setattr(stacks, "_kernel_zfs", lambda: False)
    monkeypatch.setattr(stacks, "_which", lambda tool: "/usr/sbin/" + tool)
    monkeypatch.setattr(stacks, "zfs_fuse_running", lambda: True)
    monkeypatch.setenv("TARN_LAB_ZFS_FUSE_WAIT", "0.05")
    with pytest.raises(stacks.StackSkipped, match="still running after"):
        stacks.check_buildable({"name": "z", "fs": "zfs"})


def test_engine_counter_deltas():
    before = {"arc": {"hits": 10, "misses": 4, "size": 100}, "io": {"blocks_read": 7}}
    after = {"arc": {"hits": 25, "misses": 9, "size": 80}, "io": {"blocks_read": 10}}
    d = stacks.counter_deltas(before, after)
    assert d == {"arc": {"hits": 15, "misses": 5, "size": -20}, "io": {"blocks_read": 3}}
    assert stacks.counter_deltas(None, after) is None


def test_tarn_honours_logbias_and_primarycache_given_as_stack_keys():
    # Documented stack keys (they work on ZFS); on tarn they become dataset properties.
    props = stacks.tarn_properties({"name": "t", "fs": "tarn", "logbias": "throughput",
                                    "primarycache": "metadata", "properties": {"recordsize": "32K"}})
    assert props["logbias"] == "throughput" and props["primarycache"] == "metadata"
    assert props["recordsize"] == "32K" and props["compression"] == "lz4"
    assert "logbias" not in stacks.tarn_properties({"name": "t", "fs": "tarn"})


def test_a_tarn_stack_mounts_with_the_transport_it_names():
    assert stacks.tarn_mount_args("p/db", "/mnt/x", "uring") == ["mount", "--transport", "uring", "p/db", "/mnt/x"]
    assert stacks.tarn_mount_args("p/db", "/mnt/x", None) == ["mount", "p/db", "/mnt/x"]


# `tarn stats fuse POOL --json` as the daemon prints it (crates/control MountInfo): one
# mount asked for uring and refused by the kernel, one on the rings.
FUSE_JSON = """[{"dataset": "p/a", "mountpoint": "/mnt/a", "transport": "dev", "ring_requests": 0,
  "dev_requests": 12, "fallback": "the kernel refused FUSE over io_uring at INIT"},
 {"dataset": "p/db", "mountpoint": "/mnt/db", "transport": "uring", "ring_requests": 940, "dev_requests": 3,
  "fallback": null}]"""


def test_the_transport_served_is_read_for_the_stacks_mountpoint():
    assert stacks.parse_fuse_mounts(FUSE_JSON, "/mnt/db")["transport"] == "uring"
    refused = stacks.parse_fuse_mounts(FUSE_JSON, "/mnt/a")
    assert refused["transport"] == "dev" and "refused" in refused["fallback"]
    assert stacks.parse_fuse_mounts(FUSE_JSON, "/mnt/other") is None
    assert stacks.parse_fuse_mounts("error: no daemon", "/mnt/db") is None
    assert stacks.parse_fuse_mounts('{"mounts": 3}', "/mnt/db") is None


def test_ext4_with_its_journal_on_the_fast_device(real_machine, tmp_path):
    from conftest import leftovers
    from tarn_lab.cleanup import Teardown
    from tarn_lab.shell import run
    spec = {"name": "e", "fs": "ext4", "external_journal": True}
    disk = {"size": "256M", "iops": 2000, "max_io": "16K"}
    try:
        with Teardown() as teardown:
            built = stacks.build_stack(spec, disk, {"size": "64M"}, tmp_path / "w", teardown)
            roles = built.device_names()
            assert set(roles) == {"data", "log"}
            header = run(["dumpe2fs", "-h", f"/dev/{roles['data']}"])
            assert "Journal device" in header
            assert "journal_path=" in built.settings["mount"] and "external" in built.settings["journal"]
            (built.mountpoint / "f").write_text("x")
            os.sync()
    finally:
        assert leftovers(tmp_path) == []

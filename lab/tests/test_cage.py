"""The database server's memory cage (database.page_cache): where the cgroup is made, what
the command that starts a server inside it runs, what its usage reads — and, as root, that
a file read inside it really leaves no more page cache than the limit allows."""
import os
import subprocess

import pytest

from tarn_lab import cage
from tarn_lab.cage import CageError, Controller, MemoryCage
from tarn_lab.cleanup import Teardown

MiB = 1 << 20


def test_v1_memory_hierarchy_is_used_under_the_labs_own_cgroup(tmp_path):
    (tmp_path / "memory" / "jobs" / "mine").mkdir(parents=True)
    proc = "5:cpu:/\n4:memory:/jobs/mine\n0::/\n"
    assert cage.find_controller(proc, tmp_path) == Controller(tmp_path / "memory" / "jobs" / "mine", v2=False)


def test_v2_is_used_at_its_root_and_its_absence_is_a_clear_error(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpu io memory pids\n")
    assert cage.find_controller("0::/user.slice/session-1.scope\n", tmp_path) == Controller(tmp_path, v2=True)
    (tmp_path / "cgroup.controllers").write_text("cpu io\n")
    with pytest.raises(CageError, match="no cgroup memory controller here.*remove database.page_cache"):
        cage.find_controller("0::/\n", tmp_path)


def test_a_cage_is_made_with_its_limit_and_removed_by_its_teardown(tmp_path):
    (tmp_path / "cgroup.subtree_control").write_text("cpu memory\n")
    with Teardown() as teardown:
        c = MemoryCage.create("ext4", 96 * MiB, teardown, Controller(tmp_path, v2=True))
        assert c.path.name == f"tarn-lab-{os.getpid()}-ext4"
        assert not (c.path / "memory.max").exists(), "no limit while the data loads"
        c.tighten()
        assert (c.path / "memory.max").read_text() == f"{96 * MiB}\n"
        argv = c.command(["postgres", "-D", "/data"])
        assert argv[:3] == ["sh", "-c", 'echo $$ > "$0" && exec "$@"']
        assert argv[3:] == [str(c.path / "cgroup.procs"), "postgres", "-D", "/data"]
        (c.path / "memory.max").unlink()   # a fake cgroup: only the kernel removes its files
    assert not c.path.exists()


def test_usage_is_the_page_cache_without_the_shared_buffers(tmp_path):
    v1 = MemoryCage(tmp_path, v2=False, limit_bytes=100)
    (tmp_path / "memory.stat").write_text("cache 50000\nrss 7000\nshmem 20000\nmapped_file 1\n")
    (tmp_path / "memory.max_usage_in_bytes").write_text("90000\n")
    (tmp_path / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    assert v1.usage() == {"limit_bytes": 100, "peak_bytes": 90000, "page_cache_bytes": 30000, "shmem_bytes": 20000,
                          "anon_bytes": 7000, "oom_kills": 2}
    v2 = MemoryCage(tmp_path, v2=True, limit_bytes=100)
    (tmp_path / "memory.stat").write_text("anon 7000\nfile 50000\nshmem 20000\n")
    assert v2.usage()["page_cache_bytes"] == 30000 and v2.usage()["peak_bytes"] is None
    assert v2.usage()["anon_bytes"] == 7000


def test_a_file_read_inside_a_cage_is_cached_only_up_to_its_limit(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (cgroups)")
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:
        for _ in range(96):
            f.write(os.urandom(MiB))
        f.flush()
        os.fsync(f.fileno())
        # Out of the page cache, so the read inside the cage brings its pages in itself.
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    with Teardown() as teardown:
        c = MemoryCage.create("probe", 32 * MiB, teardown)
        c.tighten()
        subprocess.run(c.command(["cat", str(big)]), stdout=subprocess.DEVNULL, check=True)
        used = c.usage()
        assert used["peak_bytes"] is None or used["peak_bytes"] <= 32 * MiB, used
        # Read once and whole, the file would leave 96 MiB cached; the cage keeps a third.
        assert 0 < used["page_cache_bytes"] <= 32 * MiB, used
        path = c.path
    assert not path.exists()

"""Dataset sizes: a tarn stack reports its datasets' own `used`, as ZFS does."""
from types import SimpleNamespace

from tarn_lab import sizes


def test_tarn_size_is_the_datasets_used_not_the_pool_allocation(tmp_path):
    (tmp_path / "ibdata1").write_bytes(b"x" * 10000)
    stats = {"space": {"datasets_used_bytes": 123456, "datasets_logical_bytes": 200000,
                       "allocated_sector_bytes": 999999}}
    stack = SimpleNamespace(fs="tarn", pool="p", mountpoint=tmp_path, engine_stats=lambda: stats)
    got = sizes.measure(stack, tmp_path)
    assert got["on_disk_bytes"] == 123456
    assert got["tarn_logical_bytes"] == 200000
    assert got["apparent_bytes"] >= 10000


def test_a_tarn_stack_without_counters_falls_back_to_df(tmp_path):
    stack = SimpleNamespace(fs="tarn", pool="p", mountpoint=tmp_path, engine_stats=lambda: None)
    got = sizes.measure(stack, tmp_path)
    assert got["on_disk_bytes"] == got["df_used_bytes"]

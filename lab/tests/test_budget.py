"""Memory budgets: what each stack is given under the articles' setup and at equal memory,
the sweep's shares of one total, and the 4× rule of a dataset against every stack's caches
(refused at medium and full, a warning at quick, checked again on the measured tables)."""
import pytest

from tarn_lab import budget
from tarn_lab import scenario as sc
from tarn_lab.budget import MiB, BudgetError, CacheCheck
from tarn_lab.scenario import ScenarioError

RAM = 24 << 30   # this machine's: tarn's default ARC is a quarter of it


def scenario(stacks, **extra):
    return {"name": "t", "workloads": ["oltp_read_write"], "disk": {"size": "1G"},
            "database": {"buffer_pool": "32M"}, "workload": {"tables": 10, "table_size": 1_000_000},
            "stacks": stacks, **extra}


def given(s: dict) -> dict:
    """name -> (buffer pool MiB, ARC MiB or None, variants) of a validated scenario."""
    return {st["name"]: (st["memory"]["buffer_pool_bytes"] // MiB,
                         None if st["memory"]["arc_bytes"] is None else st["memory"]["arc_bytes"] // MiB,
                         st["memory"]["variants"]) for st in s["stacks"]}


EXT4 = {"name": "ext4", "fs": "ext4"}
ZFS = {"name": "zfs", "fs": "zfs", "arc_mb": 64}
TARN = {"name": "tarn", "fs": "tarn", "arc_mb": 64}


def test_the_articles_setup_gives_every_stack_the_same_buffer_pool_and_zfs_and_tarn_an_arc_on_top():
    s = sc.validate(scenario([EXT4, ZFS, TARN]))
    assert given(s) == {"ext4": (32, None, ["articles"]), "zfs": (32, 64, ["articles"]), "tarn": (32, 64, ["articles"])}


def test_equal_memory_gives_ext4_the_others_buffer_pool_plus_arc_as_its_buffer_pool():
    s = sc.validate(scenario([EXT4, ZFS, TARN], memory={"variants": ["equal"]}))
    # one variant: the stacks keep their names; ext4 now has 32 + 64 MiB of buffer pool
    assert given(s) == {"ext4": (96, None, ["equal"]), "zfs": (32, 64, ["equal"]), "tarn": (32, 64, ["equal"])}
    ext4 = s["stacks"][0]
    assert ext4["buffer_pool"] == "96M" and "others' buffer pool + ARC" in ext4["memory"]["rule"]


def test_both_variants_run_a_copy_of_the_stacks_whose_memory_differs():
    s = sc.validate(scenario([EXT4, ZFS, TARN], memory={"variants": ["articles", "equal"]}))
    assert [st["name"] for st in s["stacks"]] == ["ext4", "ext4-equal", "zfs", "tarn"]
    assert given(s)["ext4-equal"] == (96, None, ["equal"])
    assert given(s)["tarn"] == (32, 64, ["articles", "equal"])     # run once, shown in both
    assert s["stacks"][1]["variant_of"] == "ext4"


def test_equal_memory_with_a_total_gives_zfs_and_tarn_the_rest_as_arc_keeping_their_buffer_pool():
    bias = {"name": "zfs-arc-bias", "fs": "zfs", "arc_mb": 192, "buffer_pool": "8M"}
    s = sc.validate(scenario([EXT4, bias, TARN], memory={"variants": ["articles", "equal"], "total": "128M"}))
    g = given(s)
    assert g["ext4-equal"] == (128, None, ["equal"])
    assert g["zfs-arc-bias"] == (8, 192, ["articles"]) and g["zfs-arc-bias-equal"] == (8, 120, ["equal"])
    assert g["tarn"] == (32, 64, ["articles"]) and g["tarn-equal"] == (32, 96, ["equal"])


def test_equal_memory_refuses_stacks_that_disagree_on_the_total():
    bias = {"name": "zfs-arc-bias", "fs": "zfs", "arc_mb": 192, "buffer_pool": "8M"}
    with pytest.raises(ScenarioError, match=r"disagree on buffer pool \+ ARC \(zfs-arc-bias 200M, tarn 96M\)"):
        sc.validate(scenario([EXT4, bias, TARN], memory={"variants": ["equal"]}), origin="t.toml")


def test_a_stack_can_keep_out_of_a_variant():
    bias = {"name": "zfs-arc-bias", "fs": "zfs", "arc_mb": 192, "buffer_pool": "8M", "variants": ["articles"]}
    s = sc.validate(scenario([EXT4, bias, TARN], memory={"variants": ["articles", "equal"]}))
    assert given(s)["zfs-arc-bias"] == (8, 192, ["articles"]) and given(s)["ext4-equal"] == (96, None, ["equal"])
    with pytest.raises(ScenarioError, match="variant 'equal' is not one of the scenario's memory.variants"):
        sc.validate(scenario([EXT4, {**TARN, "variants": ["equal"]}]))


def test_shares_and_the_rest_of_one_total():
    stacks = [{"name": "ext4", "fs": "ext4", "buffer_pool": "100%"},
              {"name": "meta", "fs": "tarn", "arc": "12.5%", "primarycache": "metadata"},
              {"name": "t75", "fs": "tarn", "buffer_pool": "75%"},
              {"name": "t32", "fs": "tarn", "buffer_pool": "32M", "arc": "64M"}]
    s = sc.validate(scenario(stacks, memory={"total": "128M"}, database={}))
    assert {n: g[:2] for n, g in given(s).items()} == {"ext4": (128, None), "meta": (112, 16), "t75": (96, 32),
                                                        "t32": (32, 64)}
    # a scenario that names one buffer pool for all keeps it for a stack giving only its ARC
    s = sc.validate(scenario(stacks[1:2], memory={"total": "128M"}))
    assert given(s)["meta"][:2] == (32, 16)
    with pytest.raises(ScenarioError, match="stack 'x': the total memory 128M leaves nothing for the ARC"):
        sc.validate(scenario([{"name": "x", "fs": "tarn", "buffer_pool": "128M"}], memory={"total": "128M"}))


def test_defaults_are_named_not_guessed():
    s = sc.validate(scenario([{"name": "z", "fs": "zfs"}, {"name": "t", "fs": "tarn"}], database={}),
                    ram_bytes=RAM)
    z, t = s["stacks"]
    assert z["memory"]["arc_bytes"] == budget.ZFS_DEFAULT_ARC and "zfs-fuse default" in z["memory"]["rule"]
    assert t["memory"]["arc_bytes"] == RAM // 4 and "quarter of RAM" in t["memory"]["rule"]
    assert z["memory"]["buffer_pool_bytes"] == budget.DEFAULT_BUFFER_POOL


# -- the 4× rule ---------------------------------------------------------------------------------

def test_dataset_estimates_follow_the_workload_parameters():
    oltp = budget.estimate_dataset_bytes("oltp", {"tables": 10, "table_size": 1_000_000})
    assert 2.0e9 < oltp < 2.6e9          # the reference rig's "10 tables × 1M rows ≈ 2.4 GB"
    # measured here: 8 warehouses at the specification's sizes, 593 MB of tables
    tpcc = budget.estimate_dataset_bytes("tpcc_like", {"warehouses": 8, "items": 100000, "customers": 3000})
    assert 0.9 * 593e6 < tpcc <= 593e6
    assert budget.estimate_dataset_bytes("tpcc_like", {"warehouses": 16}) > 1.9 * tpcc


def test_medium_refuses_a_stack_whose_caches_exceed_a_quarter_of_the_dataset():
    raw = scenario([EXT4, {"name": "tarn", "fs": "tarn", "arc_mb": 1024}],
                   medium={"workload": {"tables": 1, "table_size": 1_000_000}})
    with pytest.raises(ScenarioError) as err:
        sc.validate(raw, origin="t.toml", size="medium")
    text = str(err.value)
    assert "at medium sizes every dataset must be at least 4× each stack's buffer pool + ARC" in text
    assert "tarn's 1,056 MiB of cache" in text and "ext4" not in text.split("but", 1)[1]


def test_quick_warns_instead_and_keeps_the_checks_for_the_report():
    raw = scenario([EXT4, {"name": "tarn", "fs": "tarn", "arc_mb": 1024}])
    raw["workload"] = {"tables": 1, "table_size": 1_000_000}
    s = sc.validate(raw, size="quick")
    assert [c["stack"] for c in s["cache_checks"]] == ["tarn"]
    line = sc.cache_warning([CacheCheck(**c) for c in s["cache_checks"]])
    assert line.startswith("caches too big for the data: the sysbench tables' dataset (~219 MiB, estimated")
    assert "0.2× tarn's 1,056 MiB" in line


def test_cache_check_warn_runs_a_medium_scenario_anyway():
    raw = scenario([{"name": "tarn", "fs": "tarn", "arc_mb": 1024}], cache_check="warn",
                   medium={"workload": {"tables": 1, "table_size": 1_000_000}})
    assert sc.validate(raw, size="medium")["cache_checks"]


def test_every_shipped_medium_keeps_each_dataset_four_times_every_stacks_caches():
    for name in sc.available():
        s = sc.load(name, size="medium")
        assert s["cache_checks"] == [], name
        for spec in s["stacks"]:
            for family, size in sc.dataset_estimates(s).items():
                assert size >= 4 * spec["memory"]["total_bytes"], (name, spec["name"], family)


def test_the_measured_check_replaces_the_estimate():
    est = [CacheCheck("a", "oltp", 100, 50, False), CacheCheck("b", "oltp", 100, 50, False)]
    measured = {"a": [], "b": [CacheCheck("b", "oltp", 120, 50, True)]}   # a passed once measured
    assert budget.current(est, measured) == [CacheCheck("b", "oltp", 120, 50, True)]
    assert budget.check_caches([{"name": "a", "memory": {"total_bytes": 50}}], {"oltp": 200}, True) == []
    assert budget.check_caches([{"name": "a", "memory": {"total_bytes": 51}}], {"oltp": 200}, True) == \
        [CacheCheck("a", "oltp", 200, 51, True)]


def test_btrfs_page_cache_is_said_to_be_uncapped():
    s = sc.validate(scenario([{"name": "b", "fs": "btrfs", "compression": "zstd"}]))
    assert any("b: btrfs reads compressed extents through the kernel's page cache" in w for w in s["warnings"])


def test_a_capped_page_cache_counts_in_every_stacks_caches_and_silences_the_uncapped_warning():
    btrfs = {"name": "b", "fs": "btrfs", "compression": "zstd"}
    s = sc.validate(scenario([EXT4, TARN, btrfs], database={"buffer_pool": "32M", "page_cache": "16M"}))
    mem = {st["name"]: st["memory"] for st in s["stacks"]}
    assert mem["ext4"]["page_cache_bytes"] == 16 * MiB and mem["ext4"]["total_bytes"] == 48 * MiB
    assert mem["tarn"]["total_bytes"] == (32 + 64 + 16) * MiB
    assert not any("page cache" in w for w in s["warnings"])


def test_an_uncapped_postgresql_page_cache_is_said_for_every_stack():
    pg = {"engine": "postgresql", "buffer_pool": "32M"}
    s = sc.validate(scenario([EXT4, TARN], database=pg))
    said = [w for w in s["warnings"] if "PostgreSQL reads through the kernel's page cache" in w]
    assert len(said) == 2 and all("database.page_cache caps it" in w for w in said)


def test_equal_memory_keeps_the_page_cache_alike_and_gives_ext4_the_rest_as_buffer_pool():
    s = sc.validate(scenario([EXT4, TARN], memory={"variants": ["equal"]},
                             database={"buffer_pool": "32M", "page_cache": "16M"}))
    assert given(s) == {"ext4": (96, None, ["equal"]), "tarn": (32, 64, ["equal"])}
    assert {st["memory"]["total_bytes"] for st in s["stacks"]} == {112 * MiB}
    with pytest.raises(ScenarioError, match="leaves nothing beside database.page_cache"):
        sc.validate(scenario([EXT4, TARN], memory={"total": "16M"}, database={"page_cache": "16M"}))


def test_a_share_must_be_a_number():
    with pytest.raises(BudgetError, match="share 'lots%' is not a number followed by %"):
        budget.parse_share("lots%")

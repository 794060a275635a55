"""Scenario files: every shipped one validates at both sizes; bad files name the bad key."""
import pytest

from tarn_lab import scenario as sc
from tarn_lab.scenario import ScenarioError

GOOD = {"name": "t", "workloads": ["oltp_read_write"], "disk": {"size": "1G", "iops": 500},
        "stacks": [{"name": "e", "fs": "ext4"}]}


def bad(**changes):
    s = {**GOOD, **changes}
    return s


@pytest.mark.parametrize("name", sorted(sc.available()))
@pytest.mark.parametrize("size", sc.SIZE_CLASSES)
def test_shipped_scenarios_validate_at_every_size(name, size):
    s = sc.load(name, size=size)
    assert s["stacks"] and s["workloads"] and s["size_class"] == size


def test_quick_is_shipped_and_has_the_four_filesystems():
    fss = {s["fs"] for s in sc.load("quick")["stacks"]}
    assert {"ext4", "xfs", "btrfs", "zfs"} <= fss


def test_medium_and_full_override_sizes():
    quick, medium, full = (sc.load("quick", size=size) for size in sc.SIZE_CLASSES)
    assert quick["workload"]["table_size"] < medium["workload"]["table_size"] <= full["workload"]["table_size"]
    assert medium["load"] == "cached" and "load" not in quick


def test_a_scenario_without_medium_sizes_says_which_it_has():
    with pytest.raises(ScenarioError, match=r"bad.toml: has no \[medium\] sizes \(it offers: quick\)"):
        sc.validate(GOOD, origin="bad.toml", size="medium")
    with pytest.raises(ScenarioError, match="size 'huge' is not one of quick, medium, full"):
        sc.validate(GOOD, origin="bad.toml", size="huge")


@pytest.mark.parametrize("scenario, message", [
    (bad(disks={}), "unknown key 'disks'"),
    (bad(disk={"size": "1G", "iops": "fast"}), "'disk.iops' must be a non-negative integer"),
    (bad(disk={"size": "lots"}), "'disk.size' must be a size"),
    (bad(disk={"size": "1G", "iopz": 3}), "unknown key 'disk.iopz'"),
    (bad(workloads=["oltp_fly"]), "'workloads[0]' = 'oltp_fly'"),
    (bad(stacks=[{"name": "e", "fs": "ntfs"}]), "'stacks[0].fs' = 'ntfs'"),
    (bad(stacks=[{"name": "e", "fs": "ext4", "recordsiz": "16k"}]), "unknown key 'stacks[0].recordsiz'"),
    (bad(stacks=[{"name": "e", "fs": "ext4", "recordsize": "16k"}]), "'stacks[0].recordsize' only applies to fs = \"zfs\""),
    (bad(stacks=[{"name": "b", "fs": "btrfs", "compression": "lz4"}]), "'stacks[0].compression' = 'lz4'"),
    (bad(stacks=[{"fs": "ext4"}]), "missing required key 'stacks[0].name'"),
    (bad(stacks=[{"name": "e", "fs": "ext4"}, {"name": "e", "fs": "xfs"}]), "'stacks[1].name' = 'e' is used twice"),
    (bad(stacks=[{"name": "t", "fs": "tarn", "compression": "zstd"}]), "'stacks[0].compression' on fs = \"tarn\" goes in properties"),
    (bad(stacks=[{"name": "z", "fs": "zfs", "properties": {"recordsize": "16K"}}]), "'stacks[0].properties' only applies to fs = \"tarn\""),
    (bad(stacks=[{"name": "t", "fs": "tarn", "notes": 3}]), "'stacks[0].notes' must be a str"),
    (bad(full={"disk": {"iops": -1}}), "'full.disk.iops' must be a non-negative integer"),
    (bad(full={"name": "x"}), "unknown key 'full.name'"),
    (bad(workload={"threads": 2, "durations": 3}), "unknown key 'workload.durations'"),
    (bad(stacks=[{"name": "e", "fs": "ext4", "logbias": "throughput"}]), "'stacks[0].logbias' only applies to fs = \"zfs\" or \"tarn\""),
    (bad(stacks=[{"name": "t", "fs": "tarn", "logbias": "fast"}]), "'stacks[0].logbias' = 'fast' is not one of latency, throughput"),
    (bad(stacks=[{"name": "t", "fs": "tarn", "logbias": "latency", "properties": {"logbias": "throughput"}}]),
     "'stacks[0].logbias' = 'latency' and 'stacks[0].properties.logbias' = 'throughput' disagree"),
    (bad(stacks=[{"name": "x", "fs": "xfs", "external_journal": True}]), "'stacks[0].external_journal' only applies to fs = \"ext4\""),
    (bad(baseline="xfs"), "'baseline' = 'xfs' is not a stack of this scenario"),
    (bad(stacks=[{"name": "e", "fs": "ext4", "baseline": "e"}]), "'stacks[0].baseline' = 'e' is not another stack"),
    (bad(repeat=0), "'repeat' must be at least 1"),
    (bad(medium={"name": "x"}), "unknown key 'medium.name'"),
    (bad(load="restore"), "'load' = 'restore' is not one of prepare, cached"),
    (bad(stacks=[{"name": "e", "fs": "ext4", "buffer_pool": "lots"}]),
     "'stacks[0].buffer_pool' must be a size like \"96M\" or a share like \"75%\""),
    (bad(stacks=[{"name": "e", "fs": "ext4", "buffer_pool": "150%"}]), "share '150%' must be between 0% and 100%"),
    (bad(stacks=[{"name": "e", "fs": "ext4", "arc": "16M"}]), "'stacks[0].arc' only applies to fs = \"zfs\" or \"tarn\""),
    (bad(stacks=[{"name": "e", "fs": "ext4", "buffer_pool": "50%"}]),
     "stack 'e': buffer_pool = '50%' is a share of the total memory: give [memory] total"),
    (bad(stacks=[{"name": "t", "fs": "tarn", "arc": "16M", "arc_mb": 16}]), "stack 't': give 'arc' or 'arc_mb', not both"),
    (bad(memory={"variants": ["articles", "cheap"]}), "memory.variants: 'cheap' is not one of articles, equal"),
    (bad(stacks=[{"name": "e", "fs": "ext4", "dataset": "cached"}], database={"engine": "postgresql"}),
     "the dataset cache (load = \"cached\") restores MariaDB datadirs"),
    (bad(repeat="twice"), "'repeat' must be a non-negative integer"),
    (bad(stacks=[{"name": "e", "fs": "ext4", "transport": "uring"}]), "'stacks[0].transport' only applies to fs = \"tarn\""),
    (bad(stacks=[{"name": "t", "fs": "tarn", "transport": "ring"}]), "'stacks[0].transport' = 'ring' is not one of dev, uring"),
])
def test_bad_scenarios_name_the_key(scenario, message):
    with pytest.raises(ScenarioError) as err:
        sc.validate(scenario, origin="bad.toml")
    assert message in str(err.value) and "bad.toml" in str(err.value)


def test_missing_required_key():
    s = dict(GOOD); del s["disk"]
    with pytest.raises(ScenarioError, match="missing required key 'disk'"):
        sc.validate(s, origin="bad.toml")


def test_toml_syntax_error_names_the_file(tmp_path):
    p = tmp_path / "broken.toml"
    p.write_text("name = \n")
    with pytest.raises(ScenarioError, match="broken.toml: not valid TOML"):
        sc.load(str(p))


def test_unknown_scenario_lists_the_shipped_ones():
    with pytest.raises(ScenarioError, match="shipped: .*quick"):
        sc.load("nope")


def test_tarn_is_in_the_article_scenarios():
    for name in ("zfs-vs-ext4", "tpcc-like", "recordsize", "l2arc"):
        tarn = [s for s in sc.load(name)["stacks"] if s["fs"] == "tarn"]
        assert tarn, name
        assert all(s["properties"]["recordsize"] in ("16K", "32K") for s in tarn), name
    # The l2arc scenario: tarn with its L2ARC on the fast device, and plain tarn with the same
    # ARC as the no-L2ARC baseline.
    tarn = {s["name"]: s for s in sc.load("l2arc")["stacks"] if s["fs"] == "tarn"}
    assert tarn["tarn-l2arc"]["l2arc"] is True and "l2arc" not in tarn["tarn"]
    assert tarn["tarn-l2arc"]["arc_mb"] == tarn["tarn"]["arc_mb"]


def test_zil_scenario_covers_logbias_and_slog_against_ext4():
    s = sc.load("zil")
    assert s["workloads"] == ["oltp_update_index"] and s["baseline"] == "ext4"
    tarn = {(st.get("slog", False), st["logbias"]) for st in s["stacks"] if st["fs"] == "tarn"}
    assert tarn == {(False, "latency"), (False, "throughput"), (True, "latency"), (True, "throughput")}
    ext4 = {st["name"]: st for st in s["stacks"] if st["fs"] == "ext4"}
    assert "ext4" in ext4 and any(st.get("external_journal") for st in ext4.values())
    # the SLOG stacks are also divided by ext4 with its journal on the same fast device
    for st in s["stacks"]:
        if st.get("slog"):
            assert ext4[st["baseline"]].get("external_journal"), st["name"]
    assert s["disk"] == sc.load("quick")["disk"]


def test_only_keeps_the_named_stacks_and_what_was_said_about_them():
    from tarn_lab import cli
    s = cli.only_stacks(sc.load("tpcc-like", size="quick"), "ext4,btrfs")
    assert [st["name"] for st in s["stacks"]] == ["ext4", "btrfs"]
    assert {c["stack"] for c in s["cache_checks"]} == {"ext4", "btrfs"}
    assert [w.split(":")[0] for w in s["warnings"]] == ["btrfs"]
    with pytest.raises(ScenarioError, match="--only: no stack nope in tpcc-like"):
        cli.only_stacks(s, "nope")


def test_size_flags_and_their_aliases():
    from tarn_lab import cli

    def size(*flags):
        return cli.size_of(cli.build_parser().parse_args(["run", "memory", *flags]))
    assert size() == "quick" and size("--quick") == "quick" and size("--full") == "full"
    assert size("--size", "medium") == "medium" and size("--size", "full") == "full"
    with pytest.raises(SystemExit):
        size("--quick", "--size", "medium")

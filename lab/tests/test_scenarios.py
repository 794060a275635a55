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
@pytest.mark.parametrize("full", [False, True])
def test_shipped_scenarios_validate(name, full):
    s = sc.load(name, full=full)
    assert s["stacks"] and s["workloads"] and s["size_class"] == ("full" if full else "quick")


def test_quick_is_shipped_and_has_the_four_filesystems():
    fss = {s["fs"] for s in sc.load("quick")["stacks"]}
    assert {"ext4", "xfs", "btrfs", "zfs"} <= fss


def test_full_overrides_sizes():
    quick, full = sc.load("quick"), sc.load("quick", full=True)
    assert full["workload"]["table_size"] > quick["workload"]["table_size"]


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
    (bad(repeat="twice"), "'repeat' must be a non-negative integer"),
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
    l2arc_tarn = [s for s in sc.load("l2arc")["stacks"] if s["fs"] == "tarn"][0]
    assert "no L2ARC" in l2arc_tarn["notes"]


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

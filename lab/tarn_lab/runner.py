"""Running a scenario: for each stack, build it, load the dataset (sysbench prepare on the
stack, or the dataset cache's prepared copy restored onto it) into a private MariaDB, check the
dataset against the stack's caches (the 4× rule, measured), run each workload (warm-up
first when the scenario asks, `repeat` times) while sampling metrics — the paced disk, CPU,
the RSS of mariadbd and of the stack's own daemon, the L2ARC's counters — and write one JSON
result per run; then the parts of their own a scenario asks for, on its first workload
(`workload.restart`: the pool exported and imported, then a run; `workload.long`: a long
run); tell the progress display what happens.

Owns: the results directory layout —
  <rundir>/scenario.json, <rundir>/runs/<stack>/<workload>.json (+ .sysbench.txt; a
  repeat k > 1 is <workload>.rep<k>.json; the restart and long parts are
  <workload>.restart.json and <workload>.long.json), <rundir>/runs/<stack>/stack.json
  (skipped/failed reason, how the data was loaded and in how long, the tables' bytes,
  the memory given, warnings), <rundir>/work/ (scratch).
Promises: finished runs are kept and skipped on a re-run in the same directory; every
stack is torn down (mounts, loops, servers) before the next starts, also on Ctrl-C; the
paced disk's counters (I/O units included) are recorded over exactly the measured run.
Must never: delete results, or leave anything running after it returns or raises.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import time
from pathlib import Path

from rich.console import Console

from .analysis import steadiness
from . import budget, datasets
from . import progress as progress_mod
from . import sizes as sizes_mod
from .cage import PROCESS_ALLOWANCE, MemoryCage
from .cleanup import Teardown
from .devices import (REPO_ROOT, PacerMissing, counters_delta, pacer_binary, read_fresh_pacer_stats,
                      read_pacer_stats)
from .mariadb import INNODB_CACHE_COUNTERS, PrivateMariaDB
from .postgres import PrivatePostgres
from .cachephases import phase_file
from .metrics import Sampler, host_device_of
from .scrubload import ScrubLoop, scrub_effect
from . import snapshots as snapshots_mod
from .progress import Progress, StackPlan
from .shell import MissingTool, require, run, tool_version
from .stacks import StackSkipped, build_stack, check_buildable, counter_deltas
from .sysbench import TPCC_LIKE, parse_interval_line, parse_summary, prepare_argv, run_argv


def default_rundir(scenario: dict) -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return REPO_ROOT / "lab-results" / f"{scenario['name']}-{stamp}"


def latest_rundir(name: str) -> Path | None:
    root = REPO_ROOT / "lab-results"
    dirs = sorted(root.glob(f"{name}-*")) if root.exists() else []
    return dirs[-1] if dirs else None


def result_path(rundir: Path, stack: str, workload: str, repeat: int = 1) -> Path:
    # Repeat 1 keeps the name results had before repeats existed.
    suffix = "" if repeat == 1 else f".rep{repeat}"
    return rundir / "runs" / stack / f"{workload}{suffix}.json"


def repeats(scenario: dict) -> int:
    return max(1, int(scenario.get("repeat", 1)))


def pending_runs(scenario: dict, rundir: Path, stack: str) -> list[tuple[str, int]]:
    """(workload, repeat) pairs of this stack without a finished result, in run order."""
    return [(w, k) for w in scenario["workloads"] for k in range(1, repeats(scenario) + 1)
            if not is_finished(rundir, stack, w, k)]


def sysbench_seconds(scenario: dict) -> int:
    """Seconds one run keeps sysbench busy: its warm-up and its measured time."""
    params = scenario.get("workload", {})
    return int(params.get("warmup", 0)) + int(params.get("duration", 30))


def parts_workload(scenario: dict) -> str:
    """The workload the restart and long parts run: the scenario's first."""
    return scenario["workloads"][0]


def phase_seconds(scenario: dict) -> int:
    """Seconds the restart and long parts add to a stack (0 when the scenario has none)."""
    params = scenario.get("workload", {})
    return int(params.get("restart", 0)) + int(params.get("long", 0)) + int(params.get("incremental", 0))


def is_finished(rundir: Path, stack: str, workload: str, repeat: int = 1) -> bool:
    p = result_path(rundir, stack, workload, repeat)
    try:
        return json.loads(p.read_text()).get("status") == "ok"
    except (OSError, ValueError):
        return False


def preflight() -> None:
    """Fail early, naming what to install or build, before anything is started."""
    if os.geteuid() != 0:
        raise RuntimeError("tarn-lab needs root (loop devices, mounts, FUSE)")
    if not os.path.exists("/dev/fuse"):
        raise RuntimeError("/dev/fuse missing: the pacer needs FUSE (apt-get install fuse3)")
    for tool in ("losetup", "mount", "mariadbd", "mariadb-install-db", "mariadb-admin", "mariadb", "sysbench"):
        require(tool)
    pacer_binary()


def machine_versions() -> dict:
    pacer = None
    try:
        p = pacer_binary()
        pacer = {"path": str(p), "mtime": dt.datetime.fromtimestamp(p.stat().st_mtime).isoformat()}
    except PacerMissing as exc:
        pacer = str(exc)
    return {"kernel": platform.release(), "python": platform.python_version(),
            "mariadb": PrivateMariaDB.version(), "sysbench": tool_version(["sysbench", "--version"]),
            "tarn-pacer": pacer, "cpus": os.cpu_count(),
            "mem_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")}


def run_scenario(scenario: dict, rundir: Path, console: Console, progress: Progress | None = None,
                 load_only: bool = False) -> Path:
    preflight()
    rundir.mkdir(parents=True, exist_ok=True)
    (rundir / "scenario.json").write_text(json.dumps(scenario, indent=2))
    versions = machine_versions()
    (rundir / "versions.json").write_text(json.dumps(versions, indent=2))
    plan = [StackPlan(spec["name"], 0 if load_only else
                      len(pending_runs(scenario, rundir, spec["name"])) * sysbench_seconds(scenario)
                      + (phase_seconds(scenario) if any(w == parts_workload(scenario) for w, _ in
                                                        pending_runs(scenario, rundir, spec["name"])) else 0))
            for spec in scenario["stacks"]]
    progress = progress or progress_mod.for_console(console)
    with progress:
        progress.begin(scenario["name"], plan)
        for index, spec in enumerate(scenario["stacks"], 1):
            progress.stack(index, spec["name"])
            ran = run_stack(scenario, spec, rundir, versions, progress, load_only)
            progress.stack_done(ran)
    shutil.rmtree(rundir / "work", ignore_errors=True)
    return rundir


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.rename(path)  # atomic: a Ctrl-C never leaves a half-written "finished" result


def run_stack(scenario: dict, spec: dict, rundir: Path, versions: dict, progress: Progress,
              load_only: bool = False) -> bool:
    """Build, load and measure one stack; True if it was built (ran), False if skipped.
    With load_only, stop after the load (its time and the tables' sizes are recorded)."""
    name = spec["name"]
    pending = pending_runs(scenario, rundir, name)
    stack_json = rundir / "runs" / name / "stack.json"
    if not pending:
        progress.note(f"{name}: all runs finished earlier, skipped")
        return False
    try:
        check_buildable(spec, log=lambda m: progress.note(f"{name}: {m}"))
    except (StackSkipped, MissingTool) as exc:
        progress.note(f"{name}: skipped: {exc}")
        write_json(stack_json, {"stack": name, "fs": spec["fs"], "status": "skipped", "reason": str(exc)})
        return False
    workdir = rundir / "work" / name
    shutil.rmtree(workdir, ignore_errors=True)
    with Teardown(log=progress.note) as teardown:
        try:
            stack, db, prepared = build_and_load(scenario, spec, workdir, teardown, progress,
                                                 list(dict.fromkeys(w for w, _ in pending)))
            cache_checks = check_loaded_dataset(spec, db, prepared, progress)
            memory = {**spec.get("memory", {}), "buffer_pool_actual_bytes": db.buffer_pool_bytes()}
            stack_info = {"stack": name, "fs": spec["fs"], "status": "ok", "settings": stack.settings,
                          "spec": spec, "devices": stack.device_names(), "dataset": prepared,
                          "mariadb": db.settings, "versions": stack.versions, "memory": memory,
                          "cache_checks": cache_checks}
            write_json(stack_json, stack_info)
            if load_only:
                progress.note(f"{name}: loaded in {load_seconds(prepared):,.0f} s ({prepared['method']}); "
                              "--load-only: no runs")
                pending = []
            for workload, repeat in pending:
                result = run_workload(scenario, spec, stack, db, workload, repeat, rundir, progress)
                result.update({"versions": {**versions, **stack.versions}, "dataset": prepared})
                result["memory"] = {**memory, **result.get("memory", {})}
                write_json(result_path(rundir, name, workload, repeat), result)
                progress.note(run_line(name, workload, result))
            if parts_workload(scenario) in {w for w, _ in pending}:
                run_phases(scenario, spec, stack, db, parts_workload(scenario), rundir, versions, memory,
                           prepared, teardown, progress)
                run_snapshot_parts(scenario, spec, stack, db, workdir, rundir, teardown, progress)
        except StackSkipped as exc:
            progress.note(f"{name}: skipped: {exc}")
            write_json(stack_json, {"stack": name, "fs": spec["fs"], "status": "skipped", "reason": str(exc)})
        except KeyboardInterrupt:
            progress.note(f"{name}: interrupted; tearing down (finished results are kept)")
            raise
        except Exception as exc:
            progress.note(f"{name}: failed: {exc}")
            write_json(stack_json, {"stack": name, "fs": spec["fs"], "status": "failed", "reason": str(exc)})
        finally:
            progress.phase("teardown")
    shutil.rmtree(workdir, ignore_errors=True)
    return True


def build_and_load(scenario, spec, workdir, teardown, progress: Progress, workloads: list[str]):
    """The stack built on the paced disk, its database started and its data loaded:
    (stack, database, how the data was loaded). The dataset cache is made (once) before
    the stack is built, so nothing waits on it half-built."""
    cache = None
    if dataset_method(scenario, spec) == "cached":
        progress.phase("load data", "the dataset cache (made once, then reused)")
        cache = datasets.ensure(scenario["workloads"], scenario.get("workload", {}),
                                note=lambda m: progress.note(f"{spec['name']}: {m}"))
    progress.phase("build stack", f"{spec['fs']} on the paced disk, then {database_name(scenario)}")
    stack = build_stack(spec, scenario["disk"], scenario.get("fast_disk", {}), workdir, teardown)
    if cache:
        progress.phase("load data", f"copying the cached {cache[0].name} onto the paced disk")
        prepared = restore_cached(cache, stack)
        db = start_database(scenario, spec, stack, workdir, teardown, initialize=False)
    else:
        db = start_database(scenario, spec, stack, workdir, teardown)
        prepared = load_dataset(scenario, spec, stack, db, workdir, teardown, progress, workloads)
    return stack, db, prepared


def dataset_method(scenario: dict, spec: dict) -> str:
    """The stack's own `dataset`, else the scenario's `load`, else sysbench prepare."""
    return spec.get("dataset", scenario.get("load", "prepare"))


def load_seconds(prepared: dict) -> float:
    return sum(prepared.get(k, 0.0) for k in ("prepare_seconds", "settle_seconds", "tar_seconds", "restore_seconds"))


def restore_cached(cache: tuple[Path, dict], stack) -> dict:
    """The dataset cache's datadir copied onto the stack's paced disk; what the results
    say about it: which copy, how it was made, and how long the restore took here."""
    copy, made = cache
    info = {"method": "cached", "cache": str(copy), "cache_bytes": made.get("bytes"),
            "cache_made": made.get("made"), "cache_prepare_argv": made.get("prepare_argv"),
            "cache_prepare_seconds": made.get("prepare_seconds"), "prepared_on": made.get("prepared_on"),
            "restored_by": "cp -a onto the paced disk (each file written once, sequentially), then sync"}
    info["restore_seconds"] = datasets.restore(copy, stack.mountpoint)
    return info


def check_loaded_dataset(spec: dict, db, prepared: dict, progress: Progress) -> list[dict]:
    """The tables' bytes as loaded, recorded, and the 4× rule checked on them: a stack
    whose caches exceed the measured dataset / 4 is warned about loudly (its data is on
    the disk already; the report carries the warning). The failed checks, as records."""
    prepared["table_bytes"] = sizes_mod.table_bytes(db.datadir)
    if "memory" not in spec or not prepared["table_bytes"]:
        return []
    bad = budget.check_caches([spec], prepared["table_bytes"], measured=True)
    if bad:
        progress.note(f"WARNING {spec['name']}: {budget.summary(bad)} (the rule is ≥ "
                      f"{budget.DATASET_OVER_CACHE}×)")
    return [c.record() for c in bad]


def database_name(scenario: dict) -> str:
    return "PostgreSQL" if scenario.get("database", {}).get("engine") == "postgresql" else "MariaDB"


def database_settings(scenario: dict, spec: dict, stack) -> dict:
    db = scenario.get("database", {})
    settings = dict(stack.db_overrides)
    pool = spec.get("buffer_pool", db.get("buffer_pool"))
    if pool:
        settings["innodb_buffer_pool_size"] = pool
    settings.update(db.get("settings", {}))
    settings.update(spec.get("mariadb", {}))
    return settings


def start_database(scenario, spec, stack, workdir, teardown, initialize: bool = True):
    if scenario.get("database", {}).get("engine") == "postgresql":
        db = PrivatePostgres(stack.mountpoint / "pgdata", workdir / "postgres", postgres_settings(scenario, spec, stack))
        db.cage = database_cage(spec, teardown, "postgresql")
        db.start(teardown, initialize=initialize)
        return db
    datadir = stack.mountpoint / datasets.DATADIR
    db = PrivateMariaDB(datadir, workdir / "mariadb", database_settings(scenario, spec, stack))
    db.cage = database_cage(spec, teardown, "mariadb")
    db.start(teardown, initialize=initialize)
    db.sql("CREATE DATABASE IF NOT EXISTS sbtest")
    return db


def database_cage(spec: dict, teardown: Teardown, engine: str) -> MemoryCage | None:
    """The server's memory cgroup when the scenario caps its page cache (database.page_cache):
    buffer pool + page cache + the `engine`'s process allowance. The server keeps it across
    its restarts; its teardown, pushed first, removes it after the server stops."""
    given = spec.get("memory") or {}
    page_cache = given.get("page_cache_bytes")
    if not page_cache:
        return None
    limit = given["buffer_pool_bytes"] + page_cache + PROCESS_ALLOWANCE[engine]
    return MemoryCage.create(spec["name"], limit, teardown)


def postgres_settings(scenario: dict, spec: dict, stack) -> dict:
    """As for MariaDB: the buffer size from the scenario, and no torn-page protection on
    copy-on-write stacks (full_page_writes off, as doublewrite off for InnoDB)."""
    db = scenario.get("database", {})
    settings = {}
    pool = spec.get("buffer_pool", db.get("buffer_pool"))
    if pool:
        settings["shared_buffers"] = str(pool).upper().rstrip("B") + "B"
    if stack.fs in ("btrfs", "zfs", "tarn"):
        settings["full_page_writes"] = "off"
    settings.update(db.get("settings", {}))
    settings.update(spec.get("postgres", {}))
    return settings


def load_dataset(scenario, spec, stack, db, workdir, teardown, progress: Progress, workloads) -> dict:
    """sysbench prepare (once per data family), or prepare then restore from a tar archive."""
    params = scenario.get("workload", {})
    families = []
    for w in workloads:
        fam = TPCC_LIKE if w == TPCC_LIKE else "oltp_read_write"
        if fam not in families:
            families.append(fam)
    info: dict = {"method": spec.get("dataset", "prepare")}
    t0 = time.monotonic()
    info["prepare_argv"] = []
    for fam in families:
        argv = prepare_argv(fam, db.sysbench_args(), params)
        info["prepare_argv"].append(argv)
        progress.phase("load data", f"sysbench prepare {fam}")
        run(argv, timeout=24 * 3600)
    info["prepare_seconds"] = round(time.monotonic() - t0, 1)
    if isinstance(db, PrivatePostgres):
        progress.phase("load data", "VACUUM ANALYZE and CHECKPOINT after the load (as pgbench -i)")
        t1 = time.monotonic()
        info["tables_vacuumed"] = db.settle_after_load()
        info["settle_seconds"] = round(time.monotonic() - t1, 1)
    info["sizes_after_prepare"] = sizes_mod.measure(stack, db.datadir)
    if info["method"] == "tar":
        progress.phase("load data", "restoring the dataset from a tar archive")
        info["tar_seconds"] = restore_from_tar(db, stack, workdir, teardown)
        info["sizes_after_restore"] = sizes_mod.measure(stack, db.datadir)
    return info


def restore_from_tar(db: PrivateMariaDB, stack, workdir: Path, teardown: Teardown) -> float:
    """As in the btrfs article: the dataset is written back by large sequential writes."""
    db.stop()
    archive = workdir / "dataset.tar"
    run(["tar", "-C", str(db.datadir.parent), "-cf", str(archive), db.datadir.name], timeout=24 * 3600)
    shutil.rmtree(db.datadir)
    run(["sync"])
    t0 = time.monotonic()
    run(["tar", "-C", str(db.datadir.parent), "-xf", str(archive)], timeout=24 * 3600)
    run(["sync"])
    seconds = time.monotonic() - t0
    archive.unlink()
    db.start(teardown, initialize=False)
    return round(seconds, 1)


def drop_caches() -> None:
    # Every run starts cold, so no stack profits from what the previous step left in RAM.
    subprocess.run(["sync"])
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        pass


def stream_sysbench(argv: list[str], seconds: int, on_row) -> tuple[str, int, list[dict]]:
    """Run sysbench, handing each per-second report line to `on_row` as it arrives.
    Returns (its whole output, exit code, the per-second rows)."""
    lines, series = [], []
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in proc.stdout:
            lines.append(line)
            row = parse_interval_line(line)
            if row:
                series.append(row)
                on_row(row)
        proc.wait(timeout=seconds + 600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return "".join(lines), proc.returncode, series


def warm_up(scenario, spec, db, workload, progress: Progress) -> dict | None:
    """`workload.warmup` seconds of the same workload, not measured: caches fill before
    the measured run starts. None when the scenario asks for no warm-up."""
    params = scenario.get("workload", {})
    seconds = int(params.get("warmup", 0))
    if seconds <= 0:
        return None
    argv = run_argv(workload, db.sysbench_args(), {**params, "duration": seconds})
    progress.phase("warm-up", workload, total=seconds)
    output, rc, _ = stream_sysbench(argv, seconds, lambda row: progress.tick(row["t"], row["tps"], None))
    progress.sysbench_done(seconds)
    if rc != 0:
        raise RuntimeError(f"sysbench {workload} warm-up exited {rc}: {output[-1500:]}")
    return {"seconds": seconds, "tps": parse_summary(output).get("tps")}


def latest_iops(sampler: Sampler, role: str = "data") -> float | None:
    """The paced disk's reads + writes per second over the sampler's last second."""
    if not sampler.rows:
        return None
    rates = sampler.rows[-1].get(role)
    return rates["r_iops"] + rates["w_iops"] if rates else None


def sampled_devices(stack) -> dict[str, str]:
    """The stack's devices by role, and as "host" the machine's disk under the paced disk's
    backing file (where it has one): a second at 0 TPS whose paced disk completed nothing
    is read against whether the host's disk did."""
    devices = stack.device_names()
    paced = [d for d in stack.devices if d.stats_path]
    host = host_device_of(str(Path(paced[0].stats_path).parent)) if paced else None
    if host and host not in devices.values():
        devices["host"] = host
    return devices


def pacer_snapshot(stack) -> dict:
    return {d.role: read_fresh_pacer_stats(d) for d in stack.devices if d.stats_path}


def run_workload(scenario, spec, stack, db, workload, repeat, rundir, progress: Progress,
                 phase: str | None = None, seconds: int | None = None) -> dict:
    """One measured run; a `phase` (restart, long) runs `seconds` instead of the scenario's
    duration, without warm-up."""
    params = scenario.get("workload", {})
    if phase:
        params = {**params, "duration": seconds, "warmup": 0}
    argv = run_argv(workload, db.sysbench_args(), params)
    duration = int(params.get("duration", 30))
    drop_caches()
    if getattr(db, "cage", None):
        db.cage.tighten()  # the page cache cap holds from here (the load ran uncapped)
    warmup = warm_up({**scenario, "workload": params}, spec, db, workload, progress)
    before = db.status_counters(db.CACHE_COUNTERS)
    engine_before = _engine_stats(stack)
    pacer_before = pacer_snapshot(stack)
    started = dt.datetime.now().isoformat(timespec="seconds")
    n = repeats(scenario)
    progress.phase("run", workload + (f", {phase} part" if phase else f", repeat {repeat} of {n}" if n > 1 else ""),
                   total=duration)
    scrubs = scrub_loop(params, stack, duration)
    snaps = None if phase else snapshots_mod.snapshot_loop(spec, stack, repeat)
    probes = {"l2arc": stack.l2arc_stats} if getattr(stack, "l2arc_stats", None) else {}
    if spec["fs"] == "tarn" and getattr(stack, "engine_stats", None):
        # The txg, intent-log and I/O-queue counters each second: a second at 0 TPS is
        # read against what the engine did in it (waits for dirty_max, syncs, queue waits).
        probes["tarn"] = lambda: engine_second(stack.engine_stats())
    with Sampler(sampled_devices(stack), processes=memory_processes(stack, db), probes=probes) as sampler:
        if scrubs:
            scrubs.start()
        if snaps:
            snaps.start()
        try:
            output, returncode, series = stream_sysbench(
                argv, duration, lambda row: progress.tick(row["t"], row["tps"], latest_iops(sampler)))
        finally:
            windows = scrubs.stop() if scrubs else []
            snapshot_record = snaps.stop() if snaps else None
            if snapshot_record:
                stack.snapshots_kept = snapshot_record["live"]
        # Inside the sampler: the pacer's window closes with the diskstats window.
        pacer_after = pacer_snapshot(stack)
    progress.sysbench_done(duration)
    log = (rundir / "runs" / spec["name"] / phase_file(workload, phase) if phase
           else result_path(rundir, spec["name"], workload, repeat)).with_suffix(".sysbench.txt")
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(" ".join(argv) + "\n" + output)
    if returncode != 0:
        raise RuntimeError(f"sysbench {workload} exited {returncode}: {output[-1500:]}")
    after = db.status_counters(db.CACHE_COUNTERS)
    engine_after = _engine_stats(stack)
    result = {
        "scenario": scenario["name"], "size_class": scenario.get("size_class"), "stack": spec["name"],
        "fs": spec["fs"], "workload": workload, "repeat": repeat, "phase": phase, "status": "ok", "started": started,
        "finished": dt.datetime.now().isoformat(timespec="seconds"), "warmup": warmup,
        "settings": {"disk": scenario["disk"], "fast_disk": scenario.get("fast_disk", {}),
                     "stack": stack.settings, "spec": spec, "mariadb": db.settings,
                     "workload": params, "sysbench_argv": argv},
        "devices": stack.device_names(),
        "summary": parse_summary(output), "series": series, "system": sampler.rows,
        "device_totals": sampler.totals,
        "pacer_stats": {d.role: read_pacer_stats(d) for d in stack.devices if d.stats_path},
        # The paced disk's own counters over the measured run; io_units is what the disk
        # charged (an I/O of b bytes costs ceil(b / max_io)).
        "pacer_delta": {role: counters_delta(pacer_before.get(role), pacer_after.get(role))
                        for role in pacer_after},
        "engine_cache": {k: after.get(k, 0) - before.get(k, 0) for k in db.CACHE_COUNTERS},
        # workload.scrub: TPS before the scrub and while one ran, in this same run.
        "scrub": ({**(scrub_effect(series, windows) or {}), "errors": scrubs.errors} if scrubs else None),
        # A stack's snapshot_every: each snapshot's instant (seconds into the run, as the
        # series' t) and create latency, and what was destroyed.
        "snapshots": snapshot_record,
        "stack_engine_stats": {"delta": counter_deltas(engine_before, engine_after), "after": engine_after}
        if engine_after else None,
        "sizes": sizes_mod.measure(stack, db.datadir),
        # Each cache holder's resident memory over the run (mariadbd: the buffer pool; the
        # tarn daemon or zfs-fuse: the ARC), beside what the stack was given.
        "memory": {"rss": sampler.memory, "pids": sampler.processes,
                   # The server's cgroup at the run's end (database.page_cache): its page cache.
                   "db_cage": db.cage.usage() if getattr(db, "cage", None) else None},
    }
    result["steadiness"] = steadiness(result)
    return result


def engine_second(stats: dict | None) -> dict | None:
    """The per-second part of `tarn stats all --json`: its txg, zil and io counters."""
    if not stats:
        return None
    return {group: stats[group] for group in ("txg", "zil", "io") if isinstance(stats.get(group), dict)}


def run_phases(scenario, spec, stack, db, workload, rundir, versions, memory, prepared, teardown,
               progress: Progress) -> None:
    """The parts of their own, after the workload's measured runs: `workload.restart` — the
    database stopped, the pool exported and imported from the same devices, the database
    started, then a run of that many seconds without warm-up (is the cache warm again?);
    `workload.long` — a run of that many seconds (does the feed keep up?). Each is written
    as <workload>.<part>.json beside the runs."""
    params = scenario.get("workload", {})
    name = spec["name"]
    done: dict = {}
    if int(params.get("restart", 0)) > 0:
        if stack.restart is None:
            progress.note(f"{name}: no restart part ({stack.fs} has no pool to export and import)")
        else:
            progress.phase("build stack", f"restart: stop {database_name(scenario)}, export and import the pool")
            db.stop()
            done = stack.restart()
            db.start(teardown, initialize=False)
            progress.note(f"{name}: pool exported and imported ({done.get('export_seconds')} s + "
                          f"{done.get('import_seconds')} s)")
            write_phase(scenario, spec, stack, db, workload, "restart", int(params["restart"]), rundir, versions,
                        memory, prepared, progress, extra={"restart": done})
    if int(params.get("long", 0)) > 0:
        write_phase(scenario, spec, stack, db, workload, "long", int(params["long"]), rundir, versions, memory,
                    prepared, progress)


def write_phase(scenario, spec, stack, db, workload, phase, seconds, rundir, versions, memory, prepared,
                progress: Progress, extra: dict | None = None) -> None:
    result = run_workload(scenario, spec, stack, db, workload, 1, rundir, progress, phase=phase, seconds=seconds)
    result.update({"versions": {**versions, **stack.versions}, "dataset": prepared, **(extra or {})})
    result["memory"] = {**memory, **result.get("memory", {})}
    write_json(rundir / "runs" / spec["name"] / phase_file(workload, phase), result)
    progress.note(run_line(spec["name"], f"{workload} ({phase})", result))


def run_snapshot_parts(scenario, spec, stack, db, workdir, rundir, teardown, progress: Progress) -> None:
    """A stack's `move` (and on tarn the incremental after it), after its measured runs;
    written as runs/<stack>/snapshots.json. A failure is noted and recorded, the stack's
    measured runs are kept."""
    if not snapshots_mod.wants_parts(spec):
        return
    workload = parts_workload(scenario)

    def run_minute(seconds: int) -> dict:
        argv = run_argv(workload, db.sysbench_args(), {**scenario.get("workload", {}), "duration": seconds})
        output, rc, _ = stream_sysbench(argv, seconds, lambda row: progress.tick(row["t"], row["tps"], None))
        if rc != 0:
            raise RuntimeError(f"sysbench {workload} exited {rc}: {output[-1500:]}")
        return parse_summary(output)

    try:
        record = snapshots_mod.run_parts(scenario, spec, stack, db, workdir, teardown, progress, run_minute)
    except Exception as exc:  # the measured runs stand; the parts say why they are missing
        progress.note(f"{spec['name']}: snapshot parts failed: {exc}")
        write_json(rundir / "runs" / spec["name"] / snapshots_mod.PARTS_FILE,
                   {"stack": spec["name"], "status": "failed", "reason": str(exc)})
        return
    snapshots_mod.write_parts(rundir, spec["name"], record)


def scrub_loop(params: dict, stack, duration: int) -> ScrubLoop | None:
    """With `workload.scrub`, a loop that keeps a scrub of the stack's pool running over the
    second half of the measured run (None without it, or on a stack that has no scrub)."""
    if not params.get("scrub") or not stack.scrub_argv:
        return None
    return ScrubLoop(stack.scrub_argv(False), stack.scrub_argv(True), start_after=duration / 2)


def scrub_line(scrub: dict | None) -> str:
    """What a running scrub cost, for the run's log line ("" when not measured)."""
    if not scrub:
        return ""
    if "ratio" not in scrub:
        return "; scrub cost not measured" + (f" ({scrub['errors'][0]})" if scrub.get("errors") else "")
    return (f"; with a scrub running {scrub['tps_with']:,.1f} TPS against {scrub['tps_without']:,.1f} "
            f"before ({scrub['ratio']:.2f}×, the scrub costs {scrub['cost']:.0%})")


def memory_processes(stack, db) -> dict[str, int]:
    """The processes whose RSS is sampled: the database server and the stack's daemon."""
    role = "postgres" if isinstance(db, PrivatePostgres) else "mariadbd"
    return {**stack.processes, **({role: db.pid} if db.pid else {})}


def _engine_stats(stack) -> dict | None:
    if not getattr(stack, "engine_stats", None):
        return None
    try:
        return stack.engine_stats()
    except Exception:  # counters are extra; a failed read must not fail the run
        return None


def run_line(stack: str, workload: str, result: dict) -> str:
    """One line per finished run for the log: the numbers a DBA looks at first."""
    s = result["summary"]
    data = result["device_totals"].get("data", {})
    txns = max(s.get("transactions", 0), 1)
    return (f"{stack} / {workload}: {s['tps']:,.1f} TPS, p95 {s['latency_ms'].get('p95', 0):.1f} ms, "
            f"{data.get('reads', 0) / txns:.2f} disk reads and {data.get('writes', 0) / txns:.2f} writes "
            f"per transaction, {result['sizes']['on_disk_bytes'] / 2**20:,.0f} MiB on disk"
            + scrub_line(result.get("scrub")) + snapshots_mod.snapshot_line(result.get("snapshots")))

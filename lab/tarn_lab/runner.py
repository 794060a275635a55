"""Running a scenario: for each stack, build it, start a private MariaDB, load the dataset,
run each workload while sampling metrics, and write one JSON result per run.

Owns: the results directory layout —
  <rundir>/scenario.json, <rundir>/runs/<stack>/<workload>.json (+ .sysbench.txt),
  <rundir>/runs/<stack>/stack.json (skipped/failed reason, dataset sizes), <rundir>/work/ (scratch).
Promises: finished runs are kept and skipped on a re-run in the same directory; every
stack is torn down (mounts, loops, servers) before the next starts, also on Ctrl-C.
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

from . import sizes as sizes_mod
from .cleanup import Teardown
from .devices import REPO_ROOT, PacerMissing, pacer_binary, read_pacer_stats
from .mariadb import INNODB_CACHE_COUNTERS, PrivateMariaDB
from .postgres import PrivatePostgres
from .metrics import Sampler
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


def result_path(rundir: Path, stack: str, workload: str) -> Path:
    return rundir / "runs" / stack / f"{workload}.json"


def is_finished(rundir: Path, stack: str, workload: str) -> bool:
    p = result_path(rundir, stack, workload)
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


def run_scenario(scenario: dict, rundir: Path, console: Console) -> Path:
    preflight()
    rundir.mkdir(parents=True, exist_ok=True)
    (rundir / "scenario.json").write_text(json.dumps(scenario, indent=2))
    versions = machine_versions()
    (rundir / "versions.json").write_text(json.dumps(versions, indent=2))
    for spec in scenario["stacks"]:
        run_stack(scenario, spec, rundir, versions, console)
    shutil.rmtree(rundir / "work", ignore_errors=True)
    return rundir


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.rename(path)  # atomic: a Ctrl-C never leaves a half-written "finished" result


def run_stack(scenario: dict, spec: dict, rundir: Path, versions: dict, console: Console) -> None:
    name = spec["name"]
    pending = [w for w in scenario["workloads"] if not is_finished(rundir, name, w)]
    stack_json = rundir / "runs" / name / "stack.json"
    if not pending:
        console.print(f"[dim]{name}: all runs finished earlier, skipped[/dim]")
        return
    try:
        check_buildable(spec, log=lambda m: console.print(f"[yellow]{name}: {m}[/yellow]"))
    except (StackSkipped, MissingTool) as exc:
        console.print(f"[yellow]{name}: skipped: {exc}[/yellow]")
        write_json(stack_json, {"stack": name, "fs": spec["fs"], "status": "skipped", "reason": str(exc)})
        return
    workdir = rundir / "work" / name
    shutil.rmtree(workdir, ignore_errors=True)
    started = time.monotonic()
    with Teardown(log=lambda m: console.print(f"[red]{m}[/red]")) as teardown:
        try:
            with console.status(f"{name}: building {spec['fs']} on the paced disk"):
                stack = build_stack(spec, scenario["disk"], scenario.get("fast_disk", {}), workdir, teardown)
            db = start_database(scenario, spec, stack, workdir, teardown, console)
            prepared = load_dataset(scenario, spec, stack, db, workdir, teardown, console, pending)
            stack_info = {"stack": name, "fs": spec["fs"], "status": "ok", "settings": stack.settings,
                          "spec": spec, "devices": stack.device_names(), "dataset": prepared,
                          "mariadb": db.settings, "versions": stack.versions}
            write_json(stack_json, stack_info)
            for workload in pending:
                result = run_workload(scenario, spec, stack, db, workload, rundir, console)
                result.update({"versions": {**versions, **stack.versions}, "dataset": prepared})
                write_json(result_path(rundir, name, workload), result)
                print_run_line(console, name, workload, result)
        except StackSkipped as exc:
            console.print(f"[yellow]{name}: skipped: {exc}[/yellow]")
            write_json(stack_json, {"stack": name, "fs": spec["fs"], "status": "skipped", "reason": str(exc)})
        except KeyboardInterrupt:
            console.print(f"[red]{name}: interrupted; tearing down (finished results are kept)[/red]")
            raise
        except Exception as exc:
            console.print(f"[red]{name}: failed: {exc}[/red]")
            write_json(stack_json, {"stack": name, "fs": spec["fs"], "status": "failed", "reason": str(exc)})
        finally:
            console.print(f"[dim]{name}: tearing down[/dim]")
    shutil.rmtree(workdir, ignore_errors=True)
    console.print(f"[dim]{name}: done in {time.monotonic() - started:.0f}s[/dim]")


def database_settings(scenario: dict, spec: dict, stack) -> dict:
    db = scenario.get("database", {})
    settings = dict(stack.db_overrides)
    pool = spec.get("buffer_pool", db.get("buffer_pool"))
    if pool:
        settings["innodb_buffer_pool_size"] = pool
    settings.update(db.get("settings", {}))
    settings.update(spec.get("mariadb", {}))
    return settings


def start_database(scenario, spec, stack, workdir, teardown, console):
    if scenario.get("database", {}).get("engine") == "postgresql":
        db = PrivatePostgres(stack.mountpoint / "pgdata", workdir / "postgres", postgres_settings(scenario, spec, stack))
        with console.status(f"{spec['name']}: initializing and starting PostgreSQL"):
            db.start(teardown)
        return db
    datadir = stack.mountpoint / "mysql"
    db = PrivateMariaDB(datadir, workdir / "mariadb", database_settings(scenario, spec, stack))
    with console.status(f"{spec['name']}: initializing and starting MariaDB"):
        db.start(teardown)
        db.sql("CREATE DATABASE IF NOT EXISTS sbtest")
    return db


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


def load_dataset(scenario, spec, stack, db, workdir, teardown, console, workloads) -> dict:
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
        with console.status(f"{spec['name']}: sysbench prepare ({fam}) on the paced disk"):
            run(argv, timeout=24 * 3600)
    info["prepare_seconds"] = round(time.monotonic() - t0, 1)
    info["sizes_after_prepare"] = sizes_mod.measure(stack, db.datadir)
    if info["method"] == "tar":
        with console.status(f"{spec['name']}: restoring the dataset from a tar archive"):
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


def run_workload(scenario, spec, stack, db, workload, rundir, console) -> dict:
    params = scenario.get("workload", {})
    argv = run_argv(workload, db.sysbench_args(), params)
    duration = int(params.get("duration", 30))
    drop_caches()
    before = db.status_counters(db.CACHE_COUNTERS)
    engine_before = _engine_stats(stack)
    started = dt.datetime.now().isoformat(timespec="seconds")
    lines, series = [], []
    with Sampler(stack.device_names()) as sampler:
        with console.status(f"{spec['name']} / {workload}: starting") as status:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            try:
                for line in proc.stdout:
                    lines.append(line)
                    row = parse_interval_line(line)
                    if row:
                        series.append(row)
                        status.update(f"{spec['name']} / {workload}: {row['t']}/{duration}s  "
                                      f"tps {row['tps']:.1f}  qps {row['qps']:.1f}  p95 {row['lat_p95_ms']:.1f} ms")
                proc.wait(timeout=duration + 600)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    output = "".join(lines)
    log = result_path(rundir, spec["name"], workload).with_suffix(".sysbench.txt")
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(" ".join(argv) + "\n" + output)
    if proc.returncode != 0:
        raise RuntimeError(f"sysbench {workload} exited {proc.returncode}: {output[-1500:]}")
    after = db.status_counters(db.CACHE_COUNTERS)
    engine_after = _engine_stats(stack)
    return {
        "scenario": scenario["name"], "size_class": scenario.get("size_class"), "stack": spec["name"],
        "fs": spec["fs"], "workload": workload, "status": "ok", "started": started,
        "finished": dt.datetime.now().isoformat(timespec="seconds"),
        "settings": {"disk": scenario["disk"], "fast_disk": scenario.get("fast_disk", {}),
                     "stack": stack.settings, "spec": spec, "mariadb": db.settings,
                     "workload": params, "sysbench_argv": argv},
        "devices": stack.device_names(),
        "summary": parse_summary(output), "series": series, "system": sampler.rows,
        "device_totals": sampler.totals,
        "pacer_stats": {d.role: read_pacer_stats(d) for d in stack.devices if d.stats_path},
        "engine_cache": {k: after.get(k, 0) - before.get(k, 0) for k in db.CACHE_COUNTERS},
        "stack_engine_stats": {"delta": counter_deltas(engine_before, engine_after), "after": engine_after}
        if engine_after else None,
        "sizes": sizes_mod.measure(stack, db.datadir),
    }


def _engine_stats(stack) -> dict | None:
    if not getattr(stack, "engine_stats", None):
        return None
    try:
        return stack.engine_stats()
    except Exception:  # counters are extra; a failed read must not fail the run
        return None


def print_run_line(console: Console, stack: str, workload: str, result: dict) -> None:
    s = result["summary"]
    data = result["device_totals"].get("data", {})
    console.print(f"[green]{stack} / {workload}[/green]: tps {s['tps']:.2f}  qps {s.get('qps', 0):.2f}  "
                  f"avg {s['latency_ms'].get('avg', 0):.2f} ms  p95 {s['latency_ms'].get('p95', 0):.2f} ms  "
                  f"data reads {data.get('reads', 0)} writes {data.get('writes', 0)}  "
                  f"size {result['sizes']['on_disk_bytes'] / 2**20:.1f} MiB")

"""The dataset cache: a MariaDB datadir holding a scenario's data (its workloads' data
families at its sizes), prepared once by sysbench on the host's own disk — not the paced
one — after a slow shutdown, kept as it is, and copied onto each stack's paced disk.

Why: loading gigabytes with `sysbench prepare` on a 500-IOPS disk takes longer than the
runs (InnoDB writes every page two or three times: doublewrite, redo, data). Copying a
prepared datadir writes each byte once, file by file, sequentially — the btrfs article's
"restored from tar" — and every stack starts from the very same rows. The results say so
(dataset.method = "cached", with how the copy was made and how long the restore took).
The datadir is kept as a directory, not a tar archive: an archive would need the space
twice while it is made, and full sizes are tens of GB.

Owns: the cache directory (lab-results/datasets, or $TARN_LAB_DATASETS), the cache key
(what makes two datasets the same), preparing a copy once under a lock, restoring one.
Promises: a cached datadir is complete or absent (prepared under a temporary name, then
renamed); <name>.json beside it records how it was made (argv, seconds, MariaDB version,
the tables' bytes per data family); two lab runs wanting the same dataset prepare it once.
Must never: reuse a copy made from other data parameters, another sysbench script or
another MariaDB version; change a cached copy once made; touch anything outside the cache
directory and the stack's datadir.
"""
from __future__ import annotations

import datetime as dt
import fcntl
import hashlib
import json
import os
import shutil
import time
from pathlib import Path

from . import budget
from .cleanup import Teardown
from .devices import REPO_ROOT
from .mariadb import PrivateMariaDB
from .shell import run
from .sizes import table_bytes
from .sysbench import LUA_DIR, RAND_TYPE, TPCC_LIKE, prepare_argv

# Bump when what goes into a cached copy changes (settings of the preparing server, layout).
CACHE_FORMAT = 1
# The preparing server: a big buffer pool and no per-commit flushing make the one-time load
# fast; a slow shutdown (full purge, change buffer merged) leaves a datadir any server of the
# same version starts from without recovery.
PREPARE_SETTINGS = {"innodb_buffer_pool_size": "512M", "innodb_flush_log_at_trx_commit": 0,
                    "innodb_doublewrite": 0, "innodb_fast_shutdown": 0}
# The parameters that decide a family's rows (threads and durations do not).
DATA_PARAMS = {TPCC_LIKE: ("warehouses", "items", "customers"), budget.OLTP: ("tables", "table_size")}
DATADIR = "mysql"


def cache_dir() -> Path:
    return Path(os.environ.get("TARN_LAB_DATASETS", REPO_ROOT / "lab-results" / "datasets"))


def identity(families: list[str], params: dict, mariadb_version: str) -> dict:
    """Everything that makes two cached datasets the same."""
    data = {f: {k: params.get(k) for k in DATA_PARAMS[f]} for f in families}
    lua = hashlib.sha256((LUA_DIR / "tpcc_like.lua").read_bytes()).hexdigest()[:16] if TPCC_LIKE in families else None
    return {"format": CACHE_FORMAT, "families": families, "data": data, "rand": RAND_TYPE,
            "tpcc_like_lua": lua, "mariadb": mariadb_version}


def cache_name(ident: dict) -> str:
    """A name a person can read, and a hash for the rest: tpcc_like-9wh-oltp-1x2500000-1a2b3c4d"""
    parts = []
    for fam in ident["families"]:
        d = ident["data"][fam]
        if fam == TPCC_LIKE:
            parts.append(f"tpcc_like-{d['warehouses'] or 1}wh")
        else:
            parts.append(f"oltp-{d['tables'] or 1}x{d['table_size'] or 10000}")
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:8]
    return "-".join(parts) + f"-{digest}"


def ensure(workloads: list[str], params: dict, note=lambda m: None) -> tuple[Path, dict]:
    """The cached copy for these workloads' data, prepared now if absent: (its directory,
    holding the datadir `mysql/`; how it was made)."""
    families = budget.families(workloads)
    ident = identity(families, params, PrivateMariaDB.version())
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    copy = root / cache_name(ident)
    with open(root / f"{copy.name}.lock", "w") as lock:
        if not copy.exists():
            note(f"dataset cache: no {copy.name} yet; preparing it once on the host's disk (unpaced)")
        fcntl.flock(lock, fcntl.LOCK_EX)  # another lab run may be preparing the same dataset
        if not copy.exists():
            _prepare(copy, ident, families, params, note)
    return copy, json.loads((root / f"{copy.name}.json").read_text())


def _prepare(copy: Path, ident: dict, families: list[str], params: dict, note) -> None:
    scratch = copy.with_name(f".{copy.name}.preparing")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    t0 = time.monotonic()
    argvs = []
    try:
        with Teardown(log=note) as teardown:
            db = PrivateMariaDB(scratch / DATADIR, scratch / "run", PREPARE_SETTINGS)
            db.start(teardown)
            db.sql("CREATE DATABASE IF NOT EXISTS sbtest")
            for fam in families:
                argv = prepare_argv(TPCC_LIKE if fam == TPCC_LIKE else "oltp_read_write", db.sysbench_args(), params)
                argvs.append(argv)
                note(f"dataset cache: sysbench prepare of {fam} ({' '.join(a for a in argv if a.startswith('--') and 'mysql' not in a)})")
                run(argv, timeout=24 * 3600)
            db.stop()
        shutil.rmtree(scratch / "run")
        info = {"identity": ident, "path": str(copy), "bytes": _tree_bytes(scratch),
                "made": dt.datetime.now().isoformat(timespec="seconds"), "prepare_argv": argvs,
                "prepare_seconds": round(time.monotonic() - t0, 1), "prepared_on": "the host's own disk, not paced",
                "server_settings": PREPARE_SETTINGS, "table_bytes": table_bytes(scratch / DATADIR)}
        copy.with_name(f"{copy.name}.json").write_text(json.dumps(info, indent=1))
        scratch.rename(copy)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def restore(copy: Path, mountpoint: Path) -> float:
    """Copy the cached datadir onto the stack (the paced disk), synced; the seconds it took."""
    t0 = time.monotonic()
    run(["cp", "-a", str(copy / DATADIR), str(mountpoint)], timeout=24 * 3600)
    run(["sync"], timeout=24 * 3600)
    return round(time.monotonic() - t0, 1)

"""The dataset's size on disk at the end of a run: df, du, btrfs compsize, ZFS properties;
and the tables' own bytes per data family (what the 4× rule compares caches with).

Owns: running those tools and parsing their outputs into bytes.
Promises: parsers are pure functions of text; sizes are bytes (ints).
Must never: change anything on the filesystem it measures.
"""
from __future__ import annotations

import re
from pathlib import Path

from .budget import OLTP
from .shell import run
from .sysbench import TPCC_LIKE


def parse_df_used(text: str) -> int:
    """`df -B1 --output=used PATH` -> bytes used."""
    lines = [l.strip() for l in text.strip().splitlines() if l.strip()]
    return int(lines[-1])


def parse_du_bytes(text: str) -> int:
    return int(text.split()[0])


def parse_compsize(text: str) -> dict:
    """`compsize -b DIR` TOTAL line -> disk / uncompressed / referenced bytes and percent."""
    for line in text.splitlines():
        f = line.split()
        if f and f[0] == "TOTAL":
            return {"percent": float(f[1].rstrip("%")), "disk_bytes": int(f[2]),
                    "uncompressed_bytes": int(f[3]), "referenced_bytes": int(f[4])}
    raise ValueError(f"no TOTAL line in compsize output: {text[:200]!r}")


def parse_zfs_get(text: str) -> dict:
    """`zfs get -Hp -o property,value used,referenced,compressratio POOL` -> dict."""
    props: dict = {}
    for line in text.splitlines():
        f = line.split("\t")
        if len(f) != 2:
            continue
        key, value = f
        if key == "compressratio":
            props[key] = float(value.rstrip("x"))
        else:
            try:
                props[key] = int(value)
            except ValueError:
                props[key] = value
    return props


OLTP_TABLE = re.compile(r"^sbtest\d+\.ibd$")


def table_bytes(datadir: Path) -> dict[str, int]:
    """The tables' files (apparent size) of the sbtest database, per data family: sysbench's
    sbtestN tables are "oltp", the rest are the TPC-C-like tables. Empty for a datadir
    without sbtest (PostgreSQL's is laid out otherwise)."""
    out: dict[str, int] = {}
    db = Path(datadir) / "sbtest"
    if not db.is_dir():
        return out
    for f in db.glob("*.ibd"):
        family = OLTP if OLTP_TABLE.match(f.name) else TPCC_LIKE
        out[family] = out.get(family, 0) + f.stat().st_size
    return out


def measure(stack, datadir: Path) -> dict:
    """Every size this stack can report, in bytes."""
    sizes = {"df_used_bytes": parse_df_used(run(["df", "-B1", "--output=used", str(stack.mountpoint)])),
             "apparent_bytes": parse_du_bytes(run(["du", "-sb", str(datadir)]))}
    if stack.fs == "btrfs":
        run(["btrfs", "filesystem", "sync", str(stack.mountpoint)])
        try:
            c = parse_compsize(run(["compsize", "-b", str(datadir)]))
            sizes.update({"compsize_" + k: v for k, v in c.items()})
            sizes["on_disk_bytes"] = c["disk_bytes"]
        except Exception as exc:  # compsize is optional; df still says something
            sizes["compsize_error"] = str(exc)
    if stack.fs == "zfs" and stack.pool:
        z = parse_zfs_get(run(["zfs", "get", "-Hp", "-o", "property,value",
                               "used,referenced,compressratio", stack.pool]))
        sizes.update({"zfs_" + k: v for k, v in z.items()})
        sizes["on_disk_bytes"] = z.get("referenced", sizes["df_used_bytes"])
    if stack.fs == "tarn" and getattr(stack, "engine_stats", None):
        # As for ZFS, the dataset's own `used` (blocks as of the last commit), not df's
        # pool allocation, which also counts the live intent log and frees not yet released.
        space = (stack.engine_stats() or {}).get("space", {})
        if "datasets_used_bytes" in space:
            sizes["tarn_used_bytes"] = space["datasets_used_bytes"]
            sizes["tarn_logical_bytes"] = space.get("datasets_logical_bytes", 0)
            sizes["on_disk_bytes"] = space["datasets_used_bytes"]
    if "on_disk_bytes" not in sizes:
        sizes["on_disk_bytes"] = sizes["df_used_bytes"]
    return sizes

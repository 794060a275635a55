"""The l2arc scenario's numbers: how much a cache device serves, over time and in all, and
its two extra parts — the run after a restart (the pool exported and imported: is the cache
warm again within a minute?) and the long run (does the feed keep up while the working set
is overwritten?).

A run records, each second, the engine's L2ARC counters where the engine exposes them
(`tarn stats l2arc --json`; zfs-fuse's arcstats from its kstat mount, under tarn's names; in
the sampler's rows as "l2arc") and every device's reads (diskstats, "data" and "cache"). From
them: the L2ARC hit ratio over time (the engine's own hits / (hits + misses)), and for every
stack with a cache device the cache device's share of the device reads, a different number
and labelled as such.

Owns: those derivations, the restart and long-run comparisons and their bars (restart: the
first minute ≥ 80% of the warm run's TPS; long run: the last quarter ≥ 90% of the peak), and
the result files of the two parts (<workload>.restart.json, <workload>.long.json).
Promises: pure functions of the result dicts, except `load_phases` which only reads files; a
number that was not measured is None, never a guess.
Must never: run anything or change results.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from statistics import mean

PHASES = ("restart", "long")
RESTART_BAR = 0.80      # issue #12: ≥ 80% of warm TPS within the first minute after a restart
LONG_BAR = 0.90         # issue #12: the last quarter ≥ 90% of the peak (TPS and hit ratio)
FIRST_MINUTE = 60       # seconds


def phase_file(workload: str, phase: str) -> str:
    """The result file of a part of its own: `tpcc_like.restart.json` (the report's loader of
    ordinary runs skips it: its workload name is not one of the scenario's)."""
    assert phase in PHASES, phase
    return f"{workload}.{phase}.json"


def load_phases(rundir: Path) -> dict[tuple[str, str, str], dict]:
    """(stack, workload, phase) -> the finished result of that part."""
    out = {}
    for p in sorted((rundir / "runs").glob("*/*.json")):
        workload, dot, rest = p.name.partition(".")
        phase = rest.removesuffix(".json")
        if not dot or phase not in PHASES:
            continue
        try:
            result = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if result.get("status") == "ok":
            out[(p.parent.name, workload, phase)] = result
    return out


# -- per-second series ----------------------------------------------------------------------

def l2arc_samples(run: dict) -> list[tuple[float, dict]]:
    """(seconds into the run, the engine's L2ARC counters then), where they were sampled."""
    return [(row["t"], row["l2arc"]) for row in run.get("system", []) if isinstance(row.get("l2arc"), dict)]


def _ratio(hits: float, misses: float) -> float | None:
    total = hits + misses
    return hits / total if total > 0 else None


def hit_ratio_between(a: dict, b: dict) -> float | None:
    """The L2ARC hit ratio of the lookups between two counter snapshots (None: no lookup)."""
    return _ratio(b.get("hits", 0) - a.get("hits", 0), b.get("misses", 0) - a.get("misses", 0))


def hit_ratio_series(run: dict, window: int = 5) -> tuple[list[float], list[float | None]]:
    """The engine's L2ARC hit ratio over time: at each sample, over the `window` seconds
    before it (None where nothing was looked up). Empty without engine samples."""
    samples = l2arc_samples(run)
    ts, ratios = [], []
    for i in range(1, len(samples)):
        t, now = samples[i]
        _, then = samples[max(0, i - window)]
        ts.append(t)
        ratios.append(hit_ratio_between(then, now))
    return ts, ratios


def cache_read_share_series(run: dict, window: int = 1) -> tuple[list[float], list[float | None]]:
    """Each second, the cache device's reads over the data and cache devices' reads in the
    `window` seconds up to it (None in a window without reads). Empty for a stack without a
    cache device."""
    rows = [r for r in run.get("system", []) if r.get("cache") is not None and r.get("data") is not None]
    ts, shares = [], []
    for i, row in enumerate(rows):
        span = rows[max(0, i - window + 1):i + 1]
        ts.append(row["t"])
        shares.append(_ratio(sum(r["cache"]["r_iops"] for r in span), sum(r["data"]["r_iops"] for r in span)))
    return ts, shares


def tps_series(run: dict) -> tuple[list[int], list[float]]:
    rows = run.get("series", [])
    return [r["t"] for r in rows], [r["tps"] for r in rows]


# -- one run in all ---------------------------------------------------------------------------

@dataclass
class CacheSummary:
    """One run's cache device in numbers (None: not measured on this stack)."""
    stack: str
    tps: float
    transactions: int
    hits: int | None = None
    misses: int | None = None
    size: int | None = None           # logical bytes the cache holds at the end
    asize: int | None = None          # stored (compressed) bytes
    blocks: int | None = None
    hdr_size: int | None = None       # RAM of the index, outside arc_max
    feed_bytes: int | None = None     # written to the cache device during the run
    feed_behind: int | None = None    # blocks not cached because the feed queue was full
    data_reads: int | None = None     # device reads over the run
    cache_reads: int | None = None
    daemon_rss_max: int | None = None
    arc_max: int | None = None

    @property
    def hit_ratio(self) -> float | None:
        return None if self.hits is None else _ratio(self.hits, self.misses or 0)

    @property
    def hdr_bytes_per_block(self) -> float | None:
        return self.hdr_size / self.blocks if self.hdr_size is not None and self.blocks else None

    def per_txn(self, n: int | None) -> float | None:
        return n / self.transactions if n is not None and self.transactions else None

    @property
    def cache_read_share(self) -> float | None:
        if self.cache_reads is None or self.data_reads is None:
            return None
        return _ratio(self.cache_reads, self.data_reads)


def summarize(stack: str, run: dict) -> CacheSummary:
    engine = run.get("stack_engine_stats") or {}
    delta = (engine.get("delta") or {}).get("l2arc")
    after = (engine.get("after") or {}).get("l2arc")
    totals = run.get("device_totals", {})
    summary = CacheSummary(stack, run["summary"]["tps"], run["summary"].get("transactions", 0))
    if delta is not None and after is not None:
        summary.hits, summary.misses = int(delta.get("hits", 0)), int(delta.get("misses", 0))
        summary.feed_bytes, summary.feed_behind = delta.get("write_bytes"), delta.get("feed_behind")
        summary.size, summary.asize = after.get("size"), after.get("asize")
        summary.blocks, summary.hdr_size = after.get("blocks"), after.get("hdr_size")
    if "data" in totals:
        summary.data_reads = totals["data"].get("reads")
    if "cache" in totals:
        summary.cache_reads = totals["cache"].get("reads")
    rss = ((run.get("memory") or {}).get("rss") or {})
    daemon = rss.get("tarn") or rss.get("zfs-fuse") or {}
    summary.daemon_rss_max = daemon.get("max_bytes")
    arc_mb = ((run.get("settings") or {}).get("spec") or {}).get("arc_mb")
    summary.arc_max = arc_mb * 2**20 if arc_mb else None
    return summary


# -- the restart --------------------------------------------------------------------------------

@dataclass
class RestartEffect:
    stack: str
    warm_tps: float
    first_minute_tps: float
    seconds: int                      # of the restart run inside the first minute
    restart: dict                     # what was done, how long export and import took
    first_minute_hit_ratio: float | None = None
    rebuilt_blocks: int | None = None  # the L2ARC's index rebuilt from the cache device at import
    rebuild_ms: int | None = None
    rebuilt_bytes: int | None = None   # the cache's logical size at the end of the run

    @property
    def ratio(self) -> float | None:
        return self.first_minute_tps / self.warm_tps if self.warm_tps > 0 else None

    @property
    def passed(self) -> bool | None:
        return None if self.ratio is None else self.ratio >= RESTART_BAR


def restart_effect(stack: str, warm: dict, after: dict, first: int = FIRST_MINUTE) -> RestartEffect | None:
    """TPS over the first minute after the restart against the warm run's mean TPS. None
    when the restart run reported no second."""
    rows = [r for r in after.get("series", []) if r["t"] <= first]
    if not rows:
        return None
    samples = [(t, c) for t, c in l2arc_samples(after) if t <= first + 1]
    hit = hit_ratio_between(samples[0][1], samples[-1][1]) if len(samples) > 1 else None
    l2 = ((after.get("stack_engine_stats") or {}).get("after") or {}).get("l2arc") or {}
    return RestartEffect(stack, warm["summary"]["tps"], mean(r["tps"] for r in rows), len(rows),
                         after.get("restart") or {}, hit, l2.get("rebuilt_blocks"), l2.get("rebuild_ms"),
                         l2.get("size"))


# -- the long run -------------------------------------------------------------------------------
# "Peak" is the best quarter of the run, so the last quarter is held against a stretch of the
# same length: a txg sync can stall commits for seconds, and a peak of a few seconds would
# measure that burstiness, not whether the feed keeps up.

@dataclass
class Steadiness:
    """A value over the run's best quarter (its peak) against its last quarter."""
    peak: float | None
    last_quarter: float | None

    @property
    def ratio(self) -> float | None:
        if self.peak is None or self.last_quarter is None or self.peak <= 0:
            return None
        return self.last_quarter / self.peak

    @property
    def passed(self) -> bool | None:
        return None if self.ratio is None else self.ratio >= LONG_BAR


def quarter_of(t: float, end: float) -> int:
    """Which quarter (0–3) of a run ending at `end` the second `t` (1-based) falls in."""
    return min(3, int(4 * (t - 1) / end)) if end > 0 else 0


def tps_steadiness(run: dict) -> Steadiness:
    """Mean TPS of each quarter of the run: the best against the last."""
    ts, tps = tps_series(run)
    if not ts:
        return Steadiness(None, None)
    quarters: dict[int, list[float]] = {}
    for t, v in zip(ts, tps):
        quarters.setdefault(quarter_of(t, ts[-1]), []).append(v)
    means = {q: mean(v) for q, v in quarters.items()}
    return Steadiness(max(means.values()), means.get(3))


def _quarter_ratios(samples: list[tuple[float, object]], ratio_between) -> dict[int, float | None]:
    """Each quarter's ratio, from the samples at its two ends (cumulative counters)."""
    end = samples[-1][0]
    bounds: dict[int, list] = {}
    for i, (t, _) in enumerate(samples):
        bounds.setdefault(quarter_of(t, end), []).append(i)
    out = {}
    for q, idx in bounds.items():
        first = max(0, idx[0] - 1)    # the sample before the quarter opens it
        out[q] = ratio_between(samples[first][1], samples[idx[-1]][1])
    return out


def _steadiness(ratios: dict[int, float | None]) -> Steadiness:
    known = [v for v in ratios.values() if v is not None]
    return Steadiness(max(known) if known else None, ratios.get(3))


def hit_steadiness(run: dict) -> Steadiness:
    """The engine's L2ARC hit ratio of each quarter's lookups: the best against the last."""
    samples = l2arc_samples(run)
    if len(samples) < 2:
        return Steadiness(None, None)
    return _steadiness(_quarter_ratios(samples, hit_ratio_between))


def share_steadiness(run: dict) -> Steadiness:
    """The cache device's share of each quarter's device reads, as hit_steadiness (for a
    stack whose engine gives no L2ARC counters)."""
    rows = [(r["t"], r) for r in run.get("system", []) if r.get("cache") is not None and r.get("data") is not None]
    if len(rows) < 2:
        return Steadiness(None, None)
    end = rows[-1][0]
    sums: dict[int, list[float]] = {}
    for t, r in rows:
        acc = sums.setdefault(quarter_of(t, end), [0.0, 0.0])
        acc[0] += r["cache"]["r_iops"]
        acc[1] += r["data"]["r_iops"]
    return _steadiness({q: _ratio(c, d) for q, (c, d) in sums.items()})


@dataclass
class LongEffect:
    stack: str
    seconds: int
    tps: Steadiness
    hits: Steadiness                  # the engine's hit ratio (tarn)
    share: Steadiness                 # the cache device's share of reads (every cache stack)
    overwrites: float | None          # bytes written to the data device / the tables' bytes
    feed_behind: int | None


def overwrites_of(run: dict) -> float | None:
    """How many times over the run wrote the tables' bytes to the data device."""
    written = run.get("device_totals", {}).get("data", {}).get("write_bytes")
    tables = (run.get("dataset") or {}).get("table_bytes") or {}
    total = sum(tables.values()) if isinstance(tables, dict) else tables
    return written / total if written is not None and total else None


def long_effect(stack: str, run: dict) -> LongEffect:
    delta = ((run.get("stack_engine_stats") or {}).get("delta") or {}).get("l2arc") or {}
    return LongEffect(stack, len(run.get("series", [])), tps_steadiness(run), hit_steadiness(run),
                      share_steadiness(run), overwrites_of(run), delta.get("feed_behind"))

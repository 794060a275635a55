"""The l2arc scenario's tables, for the terminal and the HTML page alike: the cache device
over the warm run (L2ARC hits, misses, size, header bytes per block, feed bytes; device reads
per transaction, the daemon's RSS against arc_max), the restart (first minute against the
warm run, bar 80%) and the long run (last quarter against the best quarter, bar 90%).

Owns: the columns of those three tables and which runs fill them.
Promises: the numbers come from cachephases (measured, or empty); where the engine gave no
L2ARC counters, the cache device's share of reads stands in for the hit ratio, in [brackets],
and the caption says so.
Must never: run anything or change results.
"""
from __future__ import annotations

from dataclasses import dataclass

from rich import box
from rich.table import Table
from rich.text import Text

from . import cachephases as cp
from .analysis import Cell

CACHE_TITLE = ("The L2ARC over the warm run (the engine's counters: `tarn stats l2arc`, zfs-fuse's arcstats "
               "kstats; [brackets]: none, the cache device's share of device reads), sizes in MiB")
READS_TITLE = ("Device reads per transaction over the warm run, and the daemon's peak RSS against arc_max "
               "(MiB; the L2ARC's headers are outside arc_max)")
RESTART_TITLE = (f"Restart (pool exported and imported, same devices): TPS over the first minute against the "
                 f"warm run's (bar ≥ {cp.RESTART_BAR:.0%})")
LONG_TITLE = (f"Long run: the last quarter against the best quarter, the peak (bar ≥ {cp.LONG_BAR:.0%}); "
              "overwrites: bytes written to the data device / the tables' bytes")


@dataclass
class CacheTables:
    """The rows of the three tables, from a results directory's cells and parts."""
    cache: list[cp.CacheSummary]
    restart: list[cp.RestartEffect]
    long: list[cp.LongEffect]

    def __bool__(self) -> bool:
        return bool(self.restart or self.long or any((s.hits or s.misses) or s.cache_reads is not None
                                                     for s in self.cache))


def cache_tables(cells: dict, phases: dict) -> CacheTables:
    """Per stack (in the cells' order), the last run of each workload, and its parts."""
    cache, restart, long = [], [], []
    for (stack, workload), cell in cells.items():
        warm = cell.runs[-1]
        cache.append(cp.summarize(stack, warm))
        after = phases.get((stack, workload, "restart"))
        effect = cp.restart_effect(stack, warm, after) if after else None
        if effect:
            restart.append(effect)
        run = phases.get((stack, workload, "long"))
        if run:
            long.append(cp.long_effect(stack, run))
    return CacheTables(cache, restart, long)


def pct(v: float | None) -> str:
    return "" if v is None else f"{100 * v:.1f}%"


def mib(n: float | None) -> str:
    return "" if n is None else f"{n / 2**20:,.1f}"


def count(n: int | None) -> str:
    return "" if n is None else f"{n:,}"


def per_txn(v: float | None) -> str:
    return "" if v is None else f"{v:.2f}"


def bar(passed: bool | None) -> str:
    return "" if passed is None else ("yes" if passed else "NO")


def hit_or_share(s: cp.CacheSummary) -> str:
    if s.hit_ratio is not None:
        return pct(s.hit_ratio)
    return f"[{pct(s.cache_read_share)}]" if s.cache_read_share is not None else ""


def cache_columns() -> list[tuple[str, object]]:
    return [
        ("stack", lambda s: s.stack),
        ("TPS", lambda s: f"{s.tps:,.1f}"),
        ("L2 hits", lambda s: count(s.hits)),
        ("L2\nmisses", lambda s: count(s.misses)),
        ("hit\nratio", hit_or_share),
        ("size\nlogical", lambda s: mib(s.size)),
        ("size\nstored", lambda s: mib(s.asize)),
        ("blocks", lambda s: count(s.blocks)),
        ("header\nB/block", lambda s: "" if s.hdr_bytes_per_block is None else f"{s.hdr_bytes_per_block:.1f}"),
        ("feed\nMiB", lambda s: mib(s.feed_bytes)),
        ("feed\nbehind", lambda s: count(s.feed_behind)),
    ]


def reads_columns() -> list[tuple[str, object]]:
    return [
        ("stack", lambda s: s.stack),
        ("TPS", lambda s: f"{s.tps:,.1f}"),
        ("data dev\nreads/txn", lambda s: per_txn(s.per_txn(s.data_reads))),
        ("cache dev\nreads/txn", lambda s: per_txn(s.per_txn(s.cache_reads))),
        ("cache share\nof reads", lambda s: pct(s.cache_read_share)),
        ("daemon\nRSS max", lambda s: mib(s.daemon_rss_max)),
        ("arc_max", lambda s: mib(s.arc_max)),
        ("L2 headers", lambda s: mib(s.hdr_size)),
    ]


def restart_columns() -> list[tuple[str, object]]:
    return [
        ("stack", lambda e: e.stack),
        ("warm\nTPS", lambda e: f"{e.warm_tps:,.1f}"),
        ("first min\nTPS", lambda e: f"{e.first_minute_tps:,.1f}"),
        ("ratio", lambda e: pct(e.ratio)),
        (f"≥ {cp.RESTART_BAR:.0%}", lambda e: bar(e.passed)),
        ("L2 hits\n1st min", lambda e: pct(e.first_minute_hit_ratio)),
        ("export\ns", lambda e: f"{e.restart.get('export_seconds', '')}"),
        ("import\ns", lambda e: f"{e.restart.get('import_seconds', '')}"),
        ("blocks\nrebuilt", lambda e: count(e.rebuilt_blocks)),
        ("rebuild\nms", lambda e: count(e.rebuild_ms)),
    ]


def _hits(e: cp.LongEffect) -> cp.Steadiness:
    return e.hits if e.hits.peak is not None else e.share


def _bracket(e: cp.LongEffect, text: str) -> str:
    return text if e.hits.peak is not None or not text else f"[{text}]"


def long_columns() -> list[tuple[str, object]]:
    return [
        ("stack", lambda e: e.stack),
        ("s", lambda e: str(e.seconds)),
        ("over-\nwrites", lambda e: "" if e.overwrites is None else f"{e.overwrites:.2f}×"),
        ("TPS\npeak", lambda e: "" if e.tps.peak is None else f"{e.tps.peak:,.1f}"),
        ("TPS last\nquarter", lambda e: "" if e.tps.last_quarter is None else f"{e.tps.last_quarter:,.1f}"),
        ("TPS\nratio", lambda e: pct(e.tps.ratio)),
        (f"≥ {cp.LONG_BAR:.0%}", lambda e: bar(e.tps.passed)),
        ("hits\npeak", lambda e: _bracket(e, pct(_hits(e).peak))),
        ("hits last\nquarter", lambda e: _bracket(e, pct(_hits(e).last_quarter))),
        ("hits\nratio", lambda e: _bracket(e, pct(_hits(e).ratio))),
        (f"≥ {cp.LONG_BAR:.0%} ", lambda e: bar(_hits(e).passed)),
        ("feed\nbehind", lambda e: count(e.feed_behind)),
    ]


def sections(tables: CacheTables) -> list[tuple[str, list[tuple[str, object]], list]]:
    """(title, columns, rows) of each table that has rows, in the report's order."""
    out = []
    # A stack without a cache device looks nothing up in an L2ARC: its row would be empty.
    rows = [s for s in tables.cache if (s.hits or s.misses) or s.cache_reads is not None]
    if rows:
        out.append((CACHE_TITLE, cache_columns(), rows))
        out.append((READS_TITLE, reads_columns(), tables.cache))
    if tables.restart:
        out.append((RESTART_TITLE, restart_columns(), tables.restart))
    if tables.long:
        out.append((LONG_TITLE, long_columns(), tables.long))
    return out


def terminal_tables(tables: CacheTables) -> list[Table]:
    out = []
    for title, cols, rows in sections(tables):
        # Text, not markup: "[brackets]" in a title or a cell must print as they are.
        t = Table(title=Text(title), title_justify="left", title_style="bold", box=box.SIMPLE_HEAD,
                  show_edge=False, padding=(0, 1, 0, 0))
        for i, (header, _) in enumerate(cols):
            t.add_column(header, justify="left" if i == 0 else "right", no_wrap=True)
        for r in rows:
            t.add_row(*[Text(get(r)) for _, get in cols])
        out.append(t)
    return out


def stack_runs(cells: dict, phases: dict, phase: str | None) -> list[tuple[Cell, dict]]:
    """(the stack's cell, its run) for the warm runs (phase None) or one part's runs, for
    the charts; stacks in the cells' order."""
    out = []
    for (stack, workload), cell in cells.items():
        run = cell.runs[-1] if phase is None else phases.get((stack, workload, phase))
        if run:
            out.append((cell, run))
    return out

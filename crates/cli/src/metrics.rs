//! The counters of `tarn stats` in Prometheus's text exposition format (version 0.0.4),
//! for `tarn stats --prometheus` and `tarn exporter`.
//!
//! Owns: the metric names (`tarn_<group>_<counter>`, the names `tarn stats` shows), their
//! type (counter or gauge) and their help text. Promises: every counter `tarn stats`
//! shows is exported, with one `# HELP` and one `# TYPE` line per metric followed by one
//! sample per pool (label `pool`); a counter this table does not know yet is still
//! exported, as `untyped`, so nothing `tarn stats` shows is ever missing here.
//! Must never: emit two families of the same name, or a label value that breaks the
//! format (pool names are escaped).

use std::collections::BTreeMap;
use std::fmt::Write;

use tarn_pool::PoolStats;

/// The counter groups of `tarn stats`, in its order, with their counters by name.
pub fn groups(stats: &PoolStats) -> Vec<(&'static str, BTreeMap<String, u64>)> {
    let arc = stats.arc.fields().into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    vec![
        ("arc", arc),
        ("zil", stats.zil.clone()),
        ("txg", stats.txg.clone()),
        ("io", stats.io.clone()),
        ("space", stats.space.clone()),
        ("l2arc", stats.l2arc.clone()),
    ]
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Only grows while the pool stays open (it starts again at 0 when it is reopened).
    Counter,
    /// A level: a size, a budget, a txg number.
    Gauge,
}

/// (group, counter, kind, help) for every counter `tarn stats` shows today.
const METRICS: &[(&str, &str, Kind, &str)] = &[
    ("l2arc", "hits", Kind::Counter, "ARC misses served by a cache device (verified against the block pointer)."),
    ("l2arc", "misses", Kind::Counter, "ARC misses no cache device could serve (read from the pool's devices)."),
    ("l2arc", "read_bytes", Kind::Counter, "Stored bytes read from cache devices for hits."),
    ("l2arc", "write_bytes", Kind::Counter, "Bytes the feed wrote to cache devices (log blocks and blocks)."),
    ("l2arc", "writes", Kind::Counter, "Chunks (one device write each) the feed wrote."),
    ("l2arc", "written_blocks", Kind::Counter, "Blocks the feed wrote to cache devices."),
    ("l2arc", "size", Kind::Gauge, "Logical bytes of the blocks the cache devices hold."),
    ("l2arc", "asize", Kind::Gauge, "Stored (compressed) bytes of the blocks the cache devices hold."),
    ("l2arc", "blocks", Kind::Gauge, "Blocks in the L2ARC's index."),
    ("l2arc", "hdr_size", Kind::Gauge, "RAM the L2ARC's index takes, outside arc_max (ZFS's l2_hdr_size)."),
    ("l2arc", "cksum_bad", Kind::Counter, "Cache reads that did not match the block pointer: counted misses."),
    ("l2arc", "io_errors", Kind::Counter, "Cache device read errors: counted misses."),
    ("l2arc", "feed_behind", Kind::Counter, "Evicted blocks not cached because the feed queue was full."),
    ("l2arc", "feed_backlog", Kind::Gauge, "Bytes queued for the feed workers."),
    (
        "l2arc",
        "feed_skipped_prefetch",
        Kind::Counter,
        "Read-ahead blocks never asked for, not cached (l2arc_noprefetch).",
    ),
    (
        "l2arc",
        "feed_skipped_policy",
        Kind::Counter,
        "Evicted blocks not cached because their dataset's secondarycache is none or metadata.",
    ),
    ("l2arc", "feed_helpers_started", Kind::Counter, "Extra feed workers started while the queue was over half full."),
    ("l2arc", "freed", Kind::Counter, "Cached blocks dropped because the pool freed them."),
    (
        "l2arc",
        "freed_while_queued",
        Kind::Counter,
        "Of freed: blocks the pool freed while they waited in the feed queue, dropped once written.",
    ),
    ("l2arc", "hdr_bytes_per_block", Kind::Gauge, "hdr_size per block in the index, rounded (the aim: at most 48)."),
    ("l2arc", "written_data", Kind::Counter, "Blocks written to the cache devices: file data."),
    (
        "l2arc",
        "written_metadata",
        Kind::Counter,
        "Blocks written to the cache devices: datasets' indirect, dnode and directory blocks.",
    ),
    (
        "l2arc",
        "written_pool_metadata",
        Kind::Counter,
        "Blocks written to the cache devices: the pool's own metadata (no dataset).",
    ),
    ("l2arc", "rebuilt_blocks", Kind::Counter, "Blocks indexed from the cache devices' log blocks at import."),
    (
        "l2arc",
        "rebuild_stale",
        Kind::Counter,
        "Entries a rebuild left out: the pool had freed their block (or never committed it).",
    ),
    ("l2arc", "rebuild_ms", Kind::Gauge, "Milliseconds the last index rebuild took, summed over devices."),
    ("l2arc", "rebuilding", Kind::Gauge, "Cache devices still rebuilding their index."),
    ("arc", "hits", Kind::Counter, "Reads served by the ARC."),
    ("arc", "misses", Kind::Counter, "Reads the ARC could not serve (read from disk)."),
    ("arc", "recency_hits", Kind::Counter, "ARC hits on blocks seen once (the recency list, T1)."),
    ("arc", "frequency_hits", Kind::Counter, "ARC hits on blocks seen more than once (the frequency list, T2)."),
    (
        "arc",
        "ghost_recency_hits",
        Kind::Counter,
        "Misses on blocks recently evicted from the recency list (B1): the recency side grows.",
    ),
    (
        "arc",
        "ghost_frequency_hits",
        Kind::Counter,
        "Misses on blocks recently evicted from the frequency list (B2): the frequency side grows.",
    ),
    ("arc", "evictions", Kind::Counter, "Blocks evicted from the ARC."),
    ("arc", "prefetch_reads", Kind::Counter, "Blocks read ahead by sequential prefetch."),
    ("arc", "prefetch_hits", Kind::Counter, "Demand reads that found a prefetched block."),
    ("arc", "written_blocks", Kind::Counter, "Blocks kept in the ARC as a txg wrote them."),
    (
        "arc",
        "prefetch_evicted_unread",
        Kind::Counter,
        "Blocks read ahead and evicted before any reader asked for them.",
    ),
    (
        "arc",
        "prefetch_streams",
        Kind::Counter,
        "Read-ahead streams confirmed: reads in record order that began reading ahead.",
    ),
    (
        "arc",
        "prefetch_off_switches",
        Kind::Counter,
        "Files whose read-ahead was wasted and was switched off for a while.",
    ),
    (
        "arc",
        "prefetch_late",
        Kind::Counter,
        "Read-ahead blocks a reader reached before they were cached (read twice, or dropped).",
    ),
    ("arc", "hot_copy_hits", Kind::Counter, "Reads served from the decompressed copies of hot blocks."),
    ("arc", "hot_copies_size", Kind::Gauge, "Bytes held by the decompressed copies of hot blocks."),
    ("arc", "size", Kind::Gauge, "Bytes held by the ARC (compressed, as stored)."),
    ("arc", "target_recency", Kind::Gauge, "Target size in bytes of the recency list (ARC's p)."),
    ("arc", "max", Kind::Gauge, "The ARC budget in bytes (arc_max)."),
    ("arc", "recency_size", Kind::Gauge, "Bytes in the recency list (T1)."),
    ("arc", "frequency_size", Kind::Gauge, "Bytes in the frequency list (T2)."),
    ("arc", "ghost_recency_size", Kind::Gauge, "Bytes the recency ghost list (B1) remembers."),
    ("arc", "ghost_frequency_size", Kind::Gauge, "Bytes the frequency ghost list (B2) remembers."),
    ("arc", "compressed_size", Kind::Gauge, "Bytes of the cached blocks as stored (compressed)."),
    ("arc", "logical_size", Kind::Gauge, "Bytes of the cached blocks once decompressed."),
    ("arc", "data_size", Kind::Gauge, "Bytes of file data in the ARC."),
    ("arc", "metadata_size", Kind::Gauge, "Bytes of metadata (indirect blocks, dnodes, the MOS) in the ARC."),
    ("arc", "blocks", Kind::Gauge, "Blocks in the ARC."),
    ("arc", "headers_size", Kind::Gauge, "Bytes of the ARC's bookkeeping (cached blocks' and ghosts' headers, the data policy's read counts)."),
    (
        "arc",
        "decoded_indirect_size",
        Kind::Gauge,
        "Bytes of decoded indirect blocks kept within the budget (dbuf cache).",
    ),
    (
        "arc",
        "decoded_objects_size",
        Kind::Gauge,
        "Bytes of decoded objects (dnodes, directory entries) kept within the budget (dnode cache).",
    ),
    ("arc", "metadata_limit", Kind::Gauge, "Metadata (cached and decoded) evicted last while under this many bytes."),
    (
        "arc",
        "dirty_size",
        Kind::Gauge,
        "Dirty bytes of the open and syncing txgs, held inside the budget (cached blocks make room for them).",
    ),
    (
        "arc",
        "accounted_size",
        Kind::Gauge,
        "Bytes the budget accounts for: blocks, headers, hot copies, decoded metadata, dirty data.",
    ),
    ("arc", "rss", Kind::Gauge, "Resident memory of the process holding the pool, in bytes."),
    ("arc", "other_size", Kind::Gauge, "Resident bytes the budget does not account for (rss - accounted_size)."),
    (
        "arc",
        "heap_other_size",
        Kind::Gauge,
        "Of other_size: live allocations outside the budget (buffers in flight, intent-log copies, tables).",
    ),
    (
        "arc",
        "allocator_slack_size",
        Kind::Gauge,
        "Of other_size: resident memory with nothing allocated in it (the allocator's free and partly used pages, code, stacks).",
    ),
    ("zil", "commits", Kind::Counter, "Intent-log commits (fsyncs and sync writes, grouped)."),
    ("zil", "blocks_written", Kind::Counter, "Intent-log blocks written."),
    ("zil", "bytes_written", Kind::Counter, "Bytes written to the intent log."),
    ("zil", "records_written", Kind::Counter, "Intent-log records written."),
    (
        "zil",
        "indirect_records",
        Kind::Counter,
        "Writes logged as a pointer to a block written in place (data not copied).",
    ),
    ("zil", "copied_bytes", Kind::Counter, "File data copied into the intent log (the txg writes it again)."),
    ("zil", "commit_us", Kind::Counter, "Microseconds fsyncs spent committing the intent log, all together."),
    ("zil", "max_commit_us", Kind::Gauge, "The longest intent-log commit, in microseconds."),
    (
        "zil",
        "fallback_syncs",
        Kind::Counter,
        "Fsyncs that could not write the log and waited for a whole txg commit instead.",
    ),
    (
        "zil",
        "settle_waits",
        Kind::Counter,
        "Bulk fsyncs that waited for their data's syncing txg instead of copying it into the log.",
    ),
    ("txg", "open", Kind::Gauge, "The open transaction group's number."),
    ("txg", "synced", Kind::Gauge, "The last transaction group committed to disk."),
    ("txg", "dirty_open_bytes", Kind::Gauge, "Dirty bytes in the open transaction group."),
    ("txg", "dirty_syncing_bytes", Kind::Gauge, "Dirty bytes in the transaction group being synced."),
    ("txg", "dirty_max_bytes", Kind::Gauge, "The write throttle's limit on dirty bytes (dirty_max)."),
    ("txg", "dirty_sync_bytes", Kind::Gauge, "Dirty bytes in the open transaction group that start a sync early."),
    ("txg", "delayed_writes", Kind::Counter, "Writes the throttle delayed (dirty data above 60 % of the dirty limit)."),
    ("txg", "delay_us", Kind::Counter, "Microseconds writers spent in the throttle's delay, all together."),
    ("txg", "dirty_max_waits", Kind::Counter, "Writes that waited for a commit (dirty data over the dirty limit)."),
    ("txg", "dirty_max_wait_us", Kind::Counter, "Microseconds writers waited for a commit over the dirty limit."),
    (
        "txg",
        "dirty_limit_bytes",
        Kind::Gauge,
        "The dirty limit in force: dirty_max, or what the disks write in one txg timeout at the measured rate.",
    ),
    ("txg", "write_rate_bytes_per_sec", Kind::Gauge, "Dirty bytes a sync retires per second, smoothed over syncs."),
    ("txg", "syncs", Kind::Counter, "Transaction groups synced and committed."),
    ("txg", "sync_us", Kind::Counter, "Microseconds spent syncing transaction groups, all together."),
    ("txg", "max_sync_us", Kind::Gauge, "The longest sync of a transaction group, in microseconds."),
    ("txg", "last_sync_us", Kind::Gauge, "The last sync of a transaction group, in microseconds."),
    ("txg", "last_sync_bytes", Kind::Gauge, "Dirty bytes of the last transaction group synced."),
    (
        "txg",
        "quiesce_us",
        Kind::Counter,
        "Microseconds quiesces took (waiting for the holds on a txg to end), all together.",
    ),
    ("txg", "max_quiesce_us", Kind::Gauge, "The longest quiesce of a transaction group, in microseconds."),
    ("io", "blocks_written", Kind::Counter, "Blocks written by transaction groups."),
    ("io", "logical_bytes_written", Kind::Counter, "Bytes of blocks written, before compression."),
    ("io", "physical_bytes_written", Kind::Counter, "Bytes of blocks written, as stored (compressed)."),
    ("io", "runs_written", Kind::Counter, "Runs of sectors written (one write each per mirror side)."),
    ("io", "written_bytes_data", Kind::Counter, "Stored bytes of the file records written."),
    ("io", "written_bytes_indirect", Kind::Counter, "Stored bytes of the indirect blocks written."),
    ("io", "written_bytes_dnodes", Kind::Counter, "Stored bytes of the dnode table's blocks written."),
    ("io", "written_bytes_directory", Kind::Counter, "Stored bytes of the directory records written."),
    ("io", "written_bytes_mos", Kind::Counter, "Stored bytes of the pool's own metadata (MOS) written."),
    ("io", "blocks_read", Kind::Counter, "Blocks read from the devices."),
    ("io", "physical_bytes_read", Kind::Counter, "Stored bytes of the blocks read from the devices."),
    ("io", "device_bytes_read", Kind::Counter, "Bytes the devices transferred for block reads (whole sectors)."),
    ("io", "checksum_errors", Kind::Counter, "Block reads whose checksum did not match."),
    ("space", "allocated_sector_bytes", Kind::Gauge, "Bytes of the sectors holding live data."),
    ("space", "live_bytes", Kind::Gauge, "Live bytes in those sectors (the rest is lost to partly freed sectors)."),
    ("space", "datasets_used_bytes", Kind::Gauge, "Bytes the datasets' blocks take, as of the last commit (zfs used)."),
    (
        "space",
        "datasets_logical_bytes",
        Kind::Gauge,
        "Bytes of the datasets' data before compression, as of the last commit.",
    ),
    (
        "space",
        "map_memory_bytes",
        Kind::Gauge,
        "Memory the space maps' per-sector counts hold, outside the ARC's budget (part of heap_other_size).",
    ),
];

/// What each read kind counts (the suffix of the per-kind counters).
const READ_KINDS: &[(&str, &str)] = &[
    ("demand", "file data a reader asked for"),
    ("indirect", "indirect blocks"),
    ("dnode", "dnode-table blocks"),
    ("directory", "directory blocks"),
    ("pool", "the pool's own metadata (MOS)"),
    ("prefetch", "sequential read-ahead"),
    ("rmw", "the old record under a partial write (read-modify-write)"),
    ("logfetch", "a logged write's data fetched at fsync"),
    ("scrub", "scrub, past the cache"),
    ("import", "the import walk and intent-log replay, past the cache"),
];

/// The per-kind counters: (group, prefix, kind, help before the kind's description).
const PER_KIND: &[(&str, &str, Kind, &str)] = &[
    ("arc", "hits_", Kind::Counter, "Reads served by the ARC or its decompressed copies:"),
    ("arc", "misses_", Kind::Counter, "Reads the ARC could not serve (read from the devices):"),
    ("io", "reads_", Kind::Counter, "Device reads:"),
    ("io", "read_bytes_", Kind::Counter, "Bytes the devices transferred (whole sectors) for reads:"),
];

/// The I/O classes of the devices' queues, as `tarn stats io` names them.
const IO_CLASSES: &[&str] = &["sync_read", "sync_write", "async_read", "async_write", "scrub"];

/// (suffix, kind, help) of each per-class counter of `tarn stats io` (`sync_read_issued` …).
const IO_CLASS_METRICS: &[(&str, Kind, &str)] = &[
    ("issued", Kind::Counter, "I/Os admitted to the devices"),
    ("bytes", Kind::Counter, "bytes those I/Os moved"),
    ("waited", Kind::Counter, "I/Os that waited for admission"),
    ("wait_us", Kind::Counter, "microseconds spent waiting for admission, all I/Os together"),
    ("avg_wait_us", Kind::Gauge, "mean microseconds an I/O waited for admission"),
    ("avg_device_us", Kind::Gauge, "mean microseconds from admission to completion"),
];

fn describe(group: &str, name: &str) -> Option<(Kind, String)> {
    if let Some(&(_, _, kind, help)) = METRICS.iter().find(|(g, n, _, _)| *g == group && *n == name) {
        return Some((kind, help.to_string()));
    }
    if let Some(per_kind) = PER_KIND.iter().filter(|(g, _, _, _)| *g == group).find_map(|&(_, prefix, kind, help)| {
        let what = READ_KINDS.iter().find(|(k, _)| name.strip_prefix(prefix) == Some(k))?.1;
        Some((kind, format!("{help} {what}.")))
    }) {
        return Some(per_kind);
    }
    if group != "io" {
        return None;
    }
    let (class, suffix) = IO_CLASSES.iter().find_map(|c| Some((*c, name.strip_prefix(c)?.strip_prefix('_')?)))?;
    let &(_, kind, help) = IO_CLASS_METRICS.iter().find(|(s, _, _)| *s == suffix)?;
    Some((kind, format!("{} I/O (summed over devices): {help}.", class.replace('_', " "))))
}

/// The exposition text for `pools` (name and counters): one family per counter, with a
/// sample per pool that has it, families in `tarn stats` order; `only` a group (`arc`,
/// `zil`…) or all of them.
pub fn render(pools: &[(String, PoolStats)], only: Option<&str>) -> String {
    // A Vec, not a map: families keep `tarn stats` order.
    let mut families: Vec<Family> = Vec::new();
    for (pool, stats) in pools {
        for (group, counters) in groups(stats).into_iter().filter(|(g, _)| only.is_none_or(|o| o == *g)) {
            for (counter, value) in counters {
                let name = format!("tarn_{group}_{counter}");
                match families.iter_mut().find(|f| f.name == name) {
                    Some(f) => f.samples.push((pool, value)),
                    None => families.push(Family { name, group, counter, samples: vec![(pool.as_str(), value)] }),
                }
            }
        }
    }
    let mut out = String::new();
    for f in families {
        let (kind, help) = match describe(f.group, &f.counter) {
            Some((Kind::Counter, help)) => ("counter", help),
            Some((Kind::Gauge, help)) => ("gauge", help),
            None => ("untyped", format!("tarn stats {} {}.", f.group, f.counter)),
        };
        // Writing to a String cannot fail.
        let _ = writeln!(out, "# HELP {} {help}", f.name);
        let _ = writeln!(out, "# TYPE {} {kind}", f.name);
        for (pool, value) in f.samples {
            let _ = writeln!(out, "{}{{pool=\"{}\"}} {value}", f.name, escape_label(pool));
        }
    }
    out
}

/// One metric family: a counter of `tarn stats` and its value in each pool.
struct Family<'a> {
    name: String,
    group: &'static str,
    counter: String,
    samples: Vec<(&'a str, u64)>,
}

/// A label value as the format wants it: backslash, double quote and newline escaped.
pub fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counters of a real pool, fresh from `Pool::stats`.
    fn real_stats() -> PoolStats {
        let dir = tempfile::tempdir().expect("tempdir");
        let img = dir.path().join("d0.img");
        let opts = tarn_pool::CreateOptions { size: Some(64 << 20), ..Default::default() };
        let pool = tarn_pool::Pool::create("m", &[tarn_pool::VdevSpec::Disk(img)], &opts).expect("create");
        let stats = pool.stats();
        pool.close().expect("close");
        stats
    }

    #[test]
    fn every_counter_of_tarn_stats_has_a_type_and_help() {
        let stats = real_stats();
        for (group, counters) in groups(&stats) {
            for name in counters.keys() {
                assert!(describe(group, name).is_some(), "{group} {name}: add it to METRICS with its type and help");
            }
        }
    }

    #[test]
    fn each_family_has_help_and_type_once_and_a_sample_per_pool() {
        let stats = real_stats();
        let text = render(&[("a".into(), stats.clone()), ("b\"c".into(), stats)], None);
        assert_eq!(text.matches("# HELP tarn_arc_hits ").count(), 1, "{text}");
        assert_eq!(text.matches("# TYPE tarn_arc_hits counter\n").count(), 1, "{text}");
        assert!(text.contains("# TYPE tarn_arc_size gauge\n"), "{text}");
        assert!(text.contains("tarn_zil_commits{pool=\"a\"} "), "{text}");
        assert!(text.contains("tarn_zil_commits{pool=\"b\\\"c\"} "), "{text}");
        // Every sample line follows its family's HELP and TYPE lines.
        let mut current = String::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                current = rest.split(' ').next().unwrap_or_default().to_string();
            } else if !line.starts_with('#') {
                assert!(line.starts_with(&format!("{current}{{")), "sample outside its family: {line}");
            }
        }
    }

    #[test]
    fn a_counter_the_table_does_not_know_is_still_exported() {
        let mut stats = real_stats();
        stats.zil.insert("brand_new".into(), 7);
        let text = render(&[("p".into(), stats)], None);
        assert!(text.contains("# TYPE tarn_zil_brand_new untyped\ntarn_zil_brand_new{pool=\"p\"} 7\n"), "{text}");
    }

    #[test]
    fn one_group_alone() {
        let text = render(&[("p".into(), real_stats())], Some("zil"));
        assert!(text.contains("tarn_zil_commits{pool=\"p\"}") && !text.contains("tarn_arc_"), "{text}");
    }
}

//! The L2ARC's counters (ZFS's l2_* arcstats), the consistent view `tarn stats l2arc`
//! and Prometheus read (`L2Snapshot`), and each cache device as `pool status` shows it.
//!
//! Owns: the counters and how they are summed over the devices.
//!
//! Promises: a snapshot takes no lock a read or the feed takes (relaxed atomics, the
//! device list read without a lock); removed devices are left out.
//!
//! Must never: change the cache.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::{DevState, L2Arc};

/// The cache's counters (ZFS's l2_* arcstats).
#[derive(Default)]
pub struct Counters {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub read_bytes: AtomicU64,
    pub write_bytes: AtomicU64,
    pub writes: AtomicU64,
    pub written_blocks: AtomicU64,
    /// `written_blocks` by kind: file data, a dataset's metadata (indirect, dnode and
    /// directory blocks), the pool's own metadata (no dataset: always cached).
    pub written_data: AtomicU64,
    pub written_metadata: AtomicU64,
    pub written_pool_metadata: AtomicU64,
    pub cksum_bad: AtomicU64,
    pub io_errors: AtomicU64,
    /// Evicted blocks not cached because the queue was full.
    pub feed_behind: AtomicU64,
    pub feed_skipped_prefetch: AtomicU64,
    pub feed_helpers_started: AtomicU64,
    /// Evicted blocks not cached because their dataset's `secondarycache` says so.
    pub feed_skipped_policy: AtomicU64,
    /// Entries dropped because the pool freed their block.
    pub freed: AtomicU64,
    /// Of `freed`: blocks freed while queued for the feed, forgotten once indexed.
    pub freed_while_queued: AtomicU64,
}

/// A consistent view for `tarn stats l2arc` and Prometheus.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct L2Snapshot {
    pub hits: u64,
    pub misses: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub writes: u64,
    pub written_blocks: u64,
    /// `written_blocks` by kind: file data, datasets' metadata, the pool's metadata.
    #[serde(default)]
    pub written_data: u64,
    #[serde(default)]
    pub written_metadata: u64,
    #[serde(default)]
    pub written_pool_metadata: u64,
    /// Logical and allocated bytes of the blocks the devices hold.
    pub size: u64,
    pub asize: u64,
    /// Blocks indexed, and the RAM the index takes (outside `arc_max`).
    pub blocks: u64,
    pub hdr_size: u64,
    /// `hdr_size / blocks`, rounded (0 with no block): the RAM each cached block costs.
    #[serde(default)]
    pub hdr_bytes_per_block: u64,
    pub cksum_bad: u64,
    pub io_errors: u64,
    pub feed_behind: u64,
    pub feed_backlog: u64,
    pub feed_skipped_prefetch: u64,
    pub feed_helpers_started: u64,
    pub feed_skipped_policy: u64,
    pub freed: u64,
    #[serde(default)]
    pub freed_while_queued: u64,
    pub rebuilt_blocks: u64,
    /// Entries the rebuild left out because the pool no longer holds their block.
    pub rebuild_stale: u64,
    pub rebuild_ms: u64,
    /// Devices still rebuilding their index.
    pub rebuilding: u64,
}

impl L2Snapshot {
    /// (name, value) pairs in a fixed order (CLI tables, Prometheus).
    pub fn fields(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("hits", self.hits),
            ("misses", self.misses),
            ("read_bytes", self.read_bytes),
            ("write_bytes", self.write_bytes),
            ("writes", self.writes),
            ("written_blocks", self.written_blocks),
            ("written_data", self.written_data),
            ("written_metadata", self.written_metadata),
            ("written_pool_metadata", self.written_pool_metadata),
            ("size", self.size),
            ("asize", self.asize),
            ("blocks", self.blocks),
            ("hdr_size", self.hdr_size),
            ("hdr_bytes_per_block", self.hdr_bytes_per_block),
            ("cksum_bad", self.cksum_bad),
            ("io_errors", self.io_errors),
            ("feed_behind", self.feed_behind),
            ("feed_backlog", self.feed_backlog),
            ("feed_skipped_prefetch", self.feed_skipped_prefetch),
            ("feed_helpers_started", self.feed_helpers_started),
            ("feed_skipped_policy", self.feed_skipped_policy),
            ("freed", self.freed),
            ("freed_while_queued", self.freed_while_queued),
            ("rebuilt_blocks", self.rebuilt_blocks),
            ("rebuild_stale", self.rebuild_stale),
            ("rebuild_ms", self.rebuild_ms),
            ("rebuilding", self.rebuilding),
        ]
    }

    /// Whether `name` only grows (a Prometheus counter) or goes up and down (a gauge).
    pub fn is_counter(name: &str) -> bool {
        !matches!(
            name,
            "size"
                | "asize"
                | "blocks"
                | "hdr_size"
                | "hdr_bytes_per_block"
                | "feed_backlog"
                | "rebuilding"
                | "rebuild_ms"
        )
    }
}

/// One cache device as `pool status` shows it.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct CacheDevStatus {
    pub guid: u64,
    pub path: String,
    pub state: DevState,
    pub note: Option<String>,
    pub size: u64,
    pub asize: u64,
    pub lsize: u64,
    pub blocks: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub io_errors: u64,
    /// Reads whose bytes did not match the block pointer.
    #[serde(default)]
    pub cksum_errors: u64,
    /// Percent of the ring the rebuild has walked (100 when done).
    pub rebuild_percent: u64,
}

impl L2Arc {
    pub fn snapshot(&self) -> L2Snapshot {
        let c = &self.shared.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut s = L2Snapshot {
            hits: get(&c.hits),
            misses: get(&c.misses),
            read_bytes: get(&c.read_bytes),
            write_bytes: get(&c.write_bytes),
            writes: get(&c.writes),
            written_blocks: get(&c.written_blocks),
            written_data: get(&c.written_data),
            written_metadata: get(&c.written_metadata),
            written_pool_metadata: get(&c.written_pool_metadata),
            cksum_bad: get(&c.cksum_bad),
            io_errors: get(&c.io_errors),
            feed_behind: get(&c.feed_behind),
            feed_backlog: get(&self.shared.queue.backlog),
            feed_skipped_prefetch: get(&c.feed_skipped_prefetch),
            feed_helpers_started: get(&c.feed_helpers_started),
            feed_skipped_policy: get(&c.feed_skipped_policy),
            freed: get(&c.freed),
            freed_while_queued: get(&c.freed_while_queued),
            ..L2Snapshot::default()
        };
        for d in self.shared.devs.iter().filter(|d| d.state() != DevState::Removed) {
            let (asize, lsize) = d.sizes();
            s.asize += asize;
            s.size += lsize;
            s.blocks += d.index.entries();
            s.hdr_size += d.header_bytes();
            s.rebuilt_blocks += get(&d.counters.rebuilt_blocks);
            s.rebuild_stale += get(&d.counters.rebuild_stale);
            s.rebuild_ms += get(&d.counters.rebuild_ms);
            // From attach, not from when its thread starts: a device whose rebuild has not
            // begun is not ready for the feed either (as `L2Arc::rebuilding` says), so a
            // caller that waits for this to reach 0 never sees the gap before the thread runs.
            s.rebuilding += (d.state() == DevState::Rebuilding || (d.usable() && !d.feed_ready())) as u64;
        }
        s.hdr_bytes_per_block = (s.hdr_size + s.blocks / 2).checked_div(s.blocks).unwrap_or(0);
        s
    }

    pub fn devices(&self) -> Vec<CacheDevStatus> {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        self.shared
            .devs
            .iter()
            .filter(|d| d.state() != DevState::Removed)
            .map(|d| {
                let (asize, lsize) = d.sizes();
                let ring = d.ring_size().max(1);
                let rebuild_percent = match d.state() {
                    DevState::Rebuilding => get(&d.rebuild_scanned) * 100 / ring,
                    _ => 100,
                };
                CacheDevStatus {
                    guid: d.guid,
                    path: d.path.display().to_string(),
                    state: d.state(),
                    note: d.note(),
                    size: d.device_size(),
                    asize,
                    lsize,
                    blocks: d.index.entries(),
                    read_bytes: get(&d.counters.read_bytes),
                    write_bytes: get(&d.counters.write_bytes),
                    io_errors: get(&d.counters.io_errors),
                    cksum_errors: get(&d.counters.cksum_errors),
                    rebuild_percent,
                }
            })
            .collect()
    }
}

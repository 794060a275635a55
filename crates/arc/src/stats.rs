//! The cache's counters and the consistent view of them `tarn stats arc` and the
//! Prometheus exporter show.
//!
//! Owns: `Counters` (relaxed atomics, bumped on the read and insert paths), `ArcSnapshot`
//! (sizes taken under the cache's lock with the counters beside them) and the counter
//! names and Prometheus types.
//!
//! Promises: the snapshot's sizes are one consistent reading of the lists and the data
//! policy; every field has a stable name (`fields`), in declaration order.
//!
//! Must never: take the cache's lock on the read path (counting is atomic adds only).
use std::sync::atomic::{AtomicU64, Ordering};

use crate::{ArcCache, PerKind, READ_KINDS};

/// Counters; read them with `ArcCache::snapshot`.
#[derive(Default)]
pub struct Counters {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub t1_hits: AtomicU64,
    pub t2_hits: AtomicU64,
    pub ghost_b1_hits: AtomicU64,
    pub ghost_b2_hits: AtomicU64,
    pub evictions: AtomicU64,
    pub inserts: AtomicU64,
    pub prefetch_inserts: AtomicU64,
    pub prefetch_hits: AtomicU64,
    pub written_inserts: AtomicU64,
    /// Read-ahead blocks the data policy evicted before any demand read asked for them.
    pub prefetch_evicted_unread: AtomicU64,
    /// Read-ahead streams confirmed (reads in record order that began reading ahead), and
    /// files whose read-ahead was wasted and switched off for a while (`objects` counts
    /// both): with `prefetch_reads` and `prefetch_hits`, where read-ahead comes from.
    pub prefetch_streams: AtomicU64,
    pub prefetch_off_switches: AtomicU64,
    /// Read-ahead records a reader reached before they were cached (its own read went to
    /// the device too, or the request had been dropped).
    pub prefetch_late: AtomicU64,
    /// Hits (in the ARC or its decompressed copies) and misses, by read kind.
    pub kind_hits: PerKind,
    pub kind_misses: PerKind,
}

/// A consistent view of the cache for `tarn stats arc` and Prometheus.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct ArcSnapshot {
    pub hits: u64,
    pub misses: u64,
    pub recency_hits: u64,
    pub frequency_hits: u64,
    pub ghost_recency_hits: u64,
    pub ghost_frequency_hits: u64,
    pub evictions: u64,
    /// Blocks read ahead by sequential prefetch, and demand reads that found one.
    #[serde(default)]
    pub prefetch_reads: u64,
    #[serde(default)]
    pub prefetch_hits: u64,
    /// Blocks kept in the cache as they were written.
    #[serde(default)]
    pub written_blocks: u64,
    /// Read-ahead blocks evicted before any demand read asked for them.
    #[serde(default)]
    pub prefetch_evicted_unread: u64,
    /// Read-ahead streams confirmed, and files switched off for wasting read-ahead.
    #[serde(default)]
    pub prefetch_streams: u64,
    #[serde(default)]
    pub prefetch_off_switches: u64,
    /// Read-ahead records a reader reached before they were cached.
    #[serde(default)]
    pub prefetch_late: u64,
    /// Reads served from the decompressed copies (filled in by the io pipeline).
    #[serde(default)]
    pub hot_copy_hits: u64,
    #[serde(default)]
    pub hot_copies_size: u64,
    pub size: u64,
    pub target_recency: u64,
    pub max: u64,
    pub recency_size: u64,
    pub frequency_size: u64,
    pub ghost_recency_size: u64,
    pub ghost_frequency_size: u64,
    pub compressed_size: u64,
    pub logical_size: u64,
    pub data_size: u64,
    pub metadata_size: u64,
    pub blocks: u64,
    /// Hits (ARC or decompressed copy) and misses by read kind, indexed by
    /// `ReadKind::index`.
    #[serde(default)]
    pub kind_hits: [u64; READ_KINDS],
    #[serde(default)]
    pub kind_misses: [u64; READ_KINDS],
    /// Bookkeeping of the cached blocks and of their ghosts: the ARC lists' (see
    /// `ENTRY_HEADER_BYTES`) and the data policy's (`DATA_HEADER_BYTES` a block, and its
    /// read counts, sized by `arc_max`).
    #[serde(default)]
    pub headers_size: u64,
    /// Decoded indirect blocks (ZFS's dbuf cache), within the budget.
    #[serde(default)]
    pub decoded_indirect_size: u64,
    /// Decoded objects: dnodes in memory, directory entries (ZFS's dnode cache).
    #[serde(default)]
    pub decoded_objects_size: u64,
    /// All metadata (cached blocks and decoded) may take this much before it is evicted
    /// like data (ZFS's arc_meta_limit).
    #[serde(default)]
    pub metadata_limit: u64,
    /// Dirty data of the open and syncing txgs, held inside the budget (as ZFS's arc_size
    /// counts anonymous dirty buffers): cached blocks make room for it.
    #[serde(default)]
    pub dirty_size: u64,
    /// Everything the budget covers, as held now: blocks, headers, hot copies, decoded
    /// metadata, dirty data.
    #[serde(default)]
    pub accounted_size: u64,
    /// The process's resident memory (filled in by the pool, from /proc/self/statm), and
    /// the part of it the budget does not account for (code, stacks, buffers in flight,
    /// the allocator's slack).
    #[serde(default)]
    pub rss: u64,
    #[serde(default)]
    pub other_size: u64,
    /// `other_size` split, when the binary tells the engine what its allocator has handed
    /// out (`set_allocated_bytes`; 0 for both otherwise): live allocations the budget does
    /// not cover — buffers in flight, intent-log copies, compression output, tables …
    #[serde(default)]
    pub heap_other_size: u64,
    /// … and resident memory with nothing allocated in it: the allocator's free pages not
    /// yet returned, partly used pages, code and stacks (rss − allocated). A lower bound:
    /// zeroed buffers allocated but not yet touched count as allocated and are not
    /// resident, so `heap_other_size` (at most `other_size`) may take some of the slack.
    #[serde(default)]
    pub allocator_slack_size: u64,
}

/// Counter names of `ArcSnapshot::kind_hits` and `kind_misses`, by `ReadKind::index`.
const KIND_HIT_NAMES: [&str; READ_KINDS] = [
    "hits_demand",
    "hits_indirect",
    "hits_dnode",
    "hits_directory",
    "hits_pool",
    "hits_prefetch",
    "hits_rmw",
    "hits_logfetch",
    "hits_scrub",
    "hits_import",
];
const KIND_MISS_NAMES: [&str; READ_KINDS] = [
    "misses_demand",
    "misses_indirect",
    "misses_dnode",
    "misses_directory",
    "misses_pool",
    "misses_prefetch",
    "misses_rmw",
    "misses_logfetch",
    "misses_scrub",
    "misses_import",
];

impl ArcCache {
    pub fn snapshot(&self) -> ArcSnapshot {
        let decoded_indirect_size = self.decoded_bytes.load(Ordering::Relaxed);
        let decoded_objects_size = self.objects_bytes.load(Ordering::Relaxed);
        let g = self.inner.lock();
        let (l, d) = (&g.lists, &g.data);
        // The data policy's read counts are bookkeeping too: fixed by `arc_max`.
        let headers_size = l.headers() + d.header_bytes() + d.sketch_bytes();
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (window_ghosts, main_ghosts) = d.ghost_bytes();
        let size = l.t1_bytes + l.t2_bytes + d.block_bytes();
        ArcSnapshot {
            hits: get(&c.hits),
            misses: get(&c.misses),
            recency_hits: get(&c.t1_hits),
            frequency_hits: get(&c.t2_hits),
            ghost_recency_hits: get(&c.ghost_b1_hits) + d.ghost_hits.window,
            ghost_frequency_hits: get(&c.ghost_b2_hits) + d.ghost_hits.main,
            evictions: get(&c.evictions),
            prefetch_reads: get(&c.prefetch_inserts),
            written_blocks: get(&c.written_inserts),
            prefetch_hits: get(&c.prefetch_hits),
            prefetch_evicted_unread: l.unread_prefetch_evictions + get(&c.prefetch_evicted_unread),
            prefetch_streams: get(&c.prefetch_streams),
            prefetch_off_switches: get(&c.prefetch_off_switches),
            prefetch_late: get(&c.prefetch_late),
            hot_copy_hits: 0,
            hot_copies_size: 0,
            size,
            target_recency: l.p + d.window_target(),
            max: l.c,
            recency_size: l.t1_bytes + d.window_bytes,
            frequency_size: l.t2_bytes + d.main_bytes,
            ghost_recency_size: l.b1_bytes + window_ghosts,
            ghost_frequency_size: l.b2_bytes + main_ghosts,
            compressed_size: size,
            logical_size: l.logical_bytes + d.logical_bytes,
            data_size: l.data_bytes + d.block_bytes(),
            metadata_size: l.metadata_bytes,
            blocks: (l.t1.len() + l.t2.len() + d.blocks()) as u64,
            kind_hits: c.kind_hits.values(),
            kind_misses: c.kind_misses.values(),
            headers_size,
            decoded_indirect_size,
            decoded_objects_size,
            metadata_limit: l.meta_limit(),
            // The hot copies' actual size is added by whoever owns them (the pipeline).
            dirty_size: l.dirty,
            accounted_size: size + headers_size + decoded_indirect_size + decoded_objects_size + l.dirty,
            rss: 0,
            other_size: 0,
            heap_other_size: 0,
            allocator_slack_size: 0,
        }
    }
}

impl ArcSnapshot {
    /// The counters as Prometheus text exposition.
    pub fn prometheus(&self) -> String {
        let mut out = String::new();
        for (name, value) in self.fields() {
            let counter = name.ends_with("hits") || name.starts_with("hits_") || name.starts_with("misses");
            let kind =
                if counter || name == "evictions" || name.starts_with("prefetch_") { "counter" } else { "gauge" };
            out.push_str(&format!("# TYPE tarn_arc_{name} {kind}\ntarn_arc_{name} {value}\n"));
        }
        out
    }

    /// (name, value) of every counter and size, in declaration order.
    pub fn fields(&self) -> Vec<(&'static str, u64)> {
        let mut fields = vec![
            ("hits", self.hits),
            ("misses", self.misses),
            ("recency_hits", self.recency_hits),
            ("frequency_hits", self.frequency_hits),
            ("ghost_recency_hits", self.ghost_recency_hits),
            ("ghost_frequency_hits", self.ghost_frequency_hits),
            ("evictions", self.evictions),
            ("prefetch_reads", self.prefetch_reads),
            ("prefetch_hits", self.prefetch_hits),
            ("written_blocks", self.written_blocks),
            ("prefetch_evicted_unread", self.prefetch_evicted_unread),
            ("prefetch_streams", self.prefetch_streams),
            ("prefetch_off_switches", self.prefetch_off_switches),
            ("prefetch_late", self.prefetch_late),
            ("hot_copy_hits", self.hot_copy_hits),
            ("hot_copies_size", self.hot_copies_size),
            ("size", self.size),
            ("target_recency", self.target_recency),
            ("max", self.max),
            ("recency_size", self.recency_size),
            ("frequency_size", self.frequency_size),
            ("ghost_recency_size", self.ghost_recency_size),
            ("ghost_frequency_size", self.ghost_frequency_size),
            ("compressed_size", self.compressed_size),
            ("logical_size", self.logical_size),
            ("data_size", self.data_size),
            ("metadata_size", self.metadata_size),
            ("blocks", self.blocks),
            ("headers_size", self.headers_size),
            ("decoded_indirect_size", self.decoded_indirect_size),
            ("decoded_objects_size", self.decoded_objects_size),
            ("metadata_limit", self.metadata_limit),
            ("dirty_size", self.dirty_size),
            ("accounted_size", self.accounted_size),
            ("rss", self.rss),
            ("other_size", self.other_size),
            ("heap_other_size", self.heap_other_size),
            ("allocator_slack_size", self.allocator_slack_size),
        ];
        fields.extend(KIND_HIT_NAMES.into_iter().zip(self.kind_hits));
        fields.extend(KIND_MISS_NAMES.into_iter().zip(self.kind_misses));
        fields
    }
}

//! arc — the adaptive replacement cache: blocks kept in RAM as they are on disk
//! (compressed), under a byte budget `arc_max`.
//!
//! Owns: the four ARC lists — T1 (seen once, recently), T2 (seen at least twice), and
//! their ghosts B1/B2 (keys only, of blocks recently evicted from T1/T2) — and the target
//! `p` for T1's share, which ghost hits steer: a hit in B1 says "recency deserved more
//! room", a hit in B2 says "frequency did". Counters in the spirit of ZFS's arcstats.
//! Beside it, `HotCopies`: a small LRU of decompressed copies of blocks read in parts
//! again while cached, under its own share of `arc_max` and charged as they grow.
//!
//! The budget covers more than the cached blocks (as ZFS's `arc_size` counts headers,
//! dbufs and dnodes): the lists' own headers, the hot copies (what they hold), the
//! decoded indirect blocks (`keep_decoded`, ZFS's dbuf cache: a CLOCK under its share,
//! each entry dropped at will since its block can be read again) and the decoded objects
//! their owner reports (`charge`, ZFS's dnode cache), and the txgs' dirty data
//! (`set_dirty`, as ZFS's arc_size counts anonymous dirty buffers). Blocks make room for
//! all of these; a block is charged the allocator's slot it occupies (`set_alloc_size`).
//! File data is kept by the data policy (`DataPolicy`; `policy/` by default, the ARC
//! lists under `DataPolicy::Arc`), within the same budget: it gets what the rest leaves.
//! Metadata is evicted last while all metadata (cached and decoded) is under
//! `META_LIMIT_QUARTERS` of the budget, like ZFS's `arc_meta_limit`.
//!
//! Promises: the blocks, headers, hot copies, decoded metadata and dirty data never
//! exceed `arc_max` after an insert, a charge, a growth of dirty data, of the hot copies
//! (`evict_to_budget`) or a shrink
//! (`set_max`) returns, whichever policy keeps the data (unless what cannot be evicted —
//! the objects' owner's pinned ones, dirty data — is over it alone); a one-time scan only cycles through T1 and leaves the frequently used
//! set in T2 alone; a block is keyed by its identity (vdev, offset, birth txg), so a
//! rewritten block never hits a stale copy.
//!
//! Must never: hold data that was not verified (callers insert only checksummed bytes),
//! be needed for correctness — losing the cache costs speed, never data — or touch a
//! device (the pipeline reads the devices and inserts here).
//!
//! Modules, one concern each: `lists` (the ARC lists, their ghosts and eviction order),
//! `budget` (what `arc_max` covers, the split between the lists and the data policy,
//! making room), `lookup` (the read and insert paths), `policy` (the data policy: `frequency`, `eviction`), `sink`
//! (where evicted blocks go: the L2ARC's feed), `decoded` (decoded indirect blocks under
//! their CLOCK), `hot` (the decompressed copies), `stats` (counters and the snapshot),
//! `memory` (the process's memory as the OS sees it), `access` (read kinds and pages),
//! `compact` (tables that emptied give their room back).
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// The cache's tables hash with foldhash, not std's SipHash: a hit looks a block up in
/// several of them under the ARC's lock (the entry, its list, its page's read count), and
/// SipHash's cost per lookup was the larger part of that. The keys are block addresses
/// and page ids, seeded per table, not text an attacker picks.
pub(crate) type Map<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
pub(crate) type LinkedMap<K, V> = hashlink::LinkedHashMap<K, V, foldhash::fast::RandomState>;

mod access;
mod budget;
pub mod compact;
mod decoded;
mod hot;
#[cfg(feature = "jemalloc")]
pub mod jemalloc;
mod lists;
mod lookup;
mod memory;
mod policy;
mod sink;
mod stats;

pub use access::{Access, PageId, PerKind, ReadKind, READ_KINDS};
use budget::Inner;
pub use budget::{DataPolicy, Outside, DECODED_SHARE, OBJECTS_SHARE};
use decoded::Clock;
pub use decoded::Decoded;
pub use hot::{HotCopies, HOT_HEADER_BYTES};
use lists::Lists;
pub use lists::{ENTRY_HEADER_BYTES, GHOST_HEADER_BYTES};
pub use memory::{
    add_untouched, allocated_bytes, release_free_pages_over, release_memory, resident_bytes, set_alloc_size,
    set_allocated_bytes, set_free_page_bytes, set_memory_release, sub_untouched_bytes, untouched_bytes,
    FREE_PAGES_KEPT,
};
use policy::DataCache;
pub use policy::DATA_HEADER_BYTES;
use sink::SinkSlot;
pub use sink::{Departing, EvictSink};
pub use stats::{ArcSnapshot, Counters};

/// A block's identity: where it lives and when it was born.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct BlockKey {
    pub vdev: u16,
    pub offset: u64,
    pub birth: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    Data,
    Metadata,
}

/// What became of a block, as far as the cache knows (for read-ahead's judgement).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Residency {
    Cached,
    /// Read ahead, then evicted before any demand read found it.
    EvictedUnread,
    /// Neither cached nor remembered as an unread read-ahead.
    Unknown,
}

/// The cache: its lists and data policy behind one lock, the decoded metadata it budgets
/// for, its counters.
pub struct ArcCache {
    inner: Mutex<Inner>,
    /// Where evicted blocks are offered (shared with the lists and the data policy).
    sink: SinkSlot,
    /// The data policy (also in `inner`; fixed for the cache's life, read without the lock).
    policy: DataPolicy,
    pub counters: Counters,
    /// Decoded indirect blocks kept for their trees (`keep_decoded`).
    decoded: Mutex<Clock>,
    decoded_bytes: AtomicU64,
    /// Decoded objects, as their owner charges them.
    objects_bytes: AtomicU64,
    /// What the hot copies made by `hot_copies` hold (they keep it up to date).
    hot_bytes: std::sync::Arc<AtomicU64>,
    /// `Lists::c`, readable without the lock.
    max_bytes: AtomicU64,
}

impl ArcCache {
    /// A cache of `max_bytes` with the default data policy.
    pub fn new(max_bytes: u64) -> ArcCache {
        ArcCache::with_policy(max_bytes, DataPolicy::default())
    }

    pub fn with_policy(max_bytes: u64, policy: DataPolicy) -> ArcCache {
        let sink = SinkSlot::default();
        let lists = Lists { c: max_bytes, p: max_bytes / 2, sink: sink.clone(), ..Default::default() };
        let data = match policy {
            DataPolicy::SecondLevel => DataCache::new(max_bytes, sink.clone()),
            DataPolicy::Arc => DataCache::unused(sink.clone()),
        };
        ArcCache {
            inner: Mutex::new(Inner { lists, data, policy }),
            sink,
            policy,
            counters: Counters::default(),
            decoded: Mutex::new(Clock::default()),
            decoded_bytes: AtomicU64::new(0),
            objects_bytes: AtomicU64::new(0),
            hot_bytes: std::sync::Arc::default(),
            max_bytes: AtomicU64::new(max_bytes),
        }
    }

    /// Offers every block the cache evicts from now on to `sink` (the L2ARC's feed), under
    /// the cache's lock: the sink must only queue it, never wait or touch a device. Set
    /// once; a second call is refused (`false`).
    pub fn set_evict_sink(&self, sink: std::sync::Arc<dyn EvictSink>) -> bool {
        self.sink.set(sink)
    }

    /// A default budget: a quarter of the machine's memory.
    pub fn default_max() -> u64 {
        (memory::total_memory() / 4).max(64 << 20)
    }

    pub fn max(&self) -> u64 {
        self.max_bytes.load(Ordering::Relaxed)
    }

    pub fn policy(&self) -> DataPolicy {
        self.policy
    }

    /// Whether a block of `class` read for `kind` would be kept (so a caller can skip
    /// copying bytes the cache would not take). Takes no lock.
    ///
    /// Under the second-level policy, file data read to be rewritten (read-modify-write,
    /// a log fetch) or read ahead through `insert` is not: its next version comes with the
    /// write, and read-ahead enters through `insert_prefetched`. A directory's records are
    /// data blocks read as metadata: kept.
    pub fn keeps(&self, class: Class, kind: ReadKind) -> bool {
        class == Class::Metadata
            || self.policy == DataPolicy::Arc
            || matches!(kind, ReadKind::Demand | ReadKind::Directory)
    }
}

//! arc — the adaptive replacement cache: blocks kept in RAM as they are on disk
//! (compressed), under a byte budget `arc_max`.
//!
//! Owns: the four ARC lists — T1 (seen once, recently), T2 (seen at least twice), and
//! their ghosts B1/B2 (keys only, of blocks recently evicted from T1/T2) — and the target
//! `p` for T1's share, which ghost hits steer: a hit in B1 says "recency deserved more
//! room", a hit in B2 says "frequency did". Counters in the spirit of ZFS's arcstats.
//! Beside it, `HotCopies`: a small LRU of decompressed copies of the blocks read again
//! while cached, under its own share of `arc_max`.
//!
//! The budget covers more than the cached blocks (as ZFS's `arc_size` counts headers,
//! dbufs and dnodes): the lists' own headers, the hot copies' share (reserved), the
//! decoded indirect blocks (`keep_decoded`, ZFS's dbuf cache: a CLOCK under its share,
//! each entry dropped at will since its block can be read again) and the decoded objects
//! their owner reports (`charge`, ZFS's dnode cache). Blocks make room for all of these.
//! File data is kept by the data policy (`DataPolicy`; `policy.rs` by default, the ARC
//! lists under `DataPolicy::Arc`), within the same budget: it gets what the rest leaves.
//! Metadata is evicted last while all metadata (cached and decoded) is under
//! `META_LIMIT_QUARTERS` of the budget, like ZFS's `arc_meta_limit`.
//!
//! Promises: the blocks, headers, reserved hot share and decoded metadata never exceed
//! `arc_max` after an insert, a charge or a shrink (`set_max`) returns, whichever policy
//! keeps the data (unless what cannot be evicted — the objects' owner's pinned ones — is
//! over it alone); a one-time scan only cycles through T1 and leaves the frequently used
//! set in T2 alone; a block is keyed by its identity (vdev, offset, birth txg), so a
//! rewritten block never hits a stale copy.
//!
//! Must never: hold data that was not verified (callers insert only checksummed bytes),
//! be needed for correctness — losing the cache costs speed, never data — or touch a
//! device (the pipeline reads the devices and inserts here).
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use hashlink::LinkedHashMap;
use parking_lot::Mutex;

mod access;
mod policy;
mod sink;

pub use access::{Access, PageId, PerKind, ReadKind, READ_KINDS};
use policy::{DataCache, Evicted, Found};
use sink::SinkSlot;
pub use sink::{Departing, EvictSink};

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

struct Entry {
    bytes: Arc<[u8]>,
    lsize: u32,
    class: Class,
    /// Read ahead and not yet asked for: its first demand read is not a second access.
    prefetched: bool,
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

/// An evicted block the ghost lists remember: its size, and whether it was read ahead
/// and never asked for.
#[derive(Clone, Copy)]
struct Ghost {
    size: u64,
    unread_prefetch: bool,
}

/// Bytes a cached block's bookkeeping takes besides its bytes: the list node (key, entry,
/// links), the table slot, the shared buffer's counts and the allocator's rounding.
pub const ENTRY_HEADER_BYTES: u64 =
    (std::mem::size_of::<BlockKey>() + std::mem::size_of::<Entry>() + 2 * 8 + 8 + 16 + 32) as u64;
/// Bytes a ghost (a key remembered after eviction) takes.
pub const GHOST_HEADER_BYTES: u64 =
    (std::mem::size_of::<BlockKey>() + std::mem::size_of::<Ghost>() + 2 * 8 + 8 + 16) as u64;
/// The ghosts' headers may take at most this fraction of the budget (small blocks would
/// otherwise make 2 × `arc_max` of ghosts cost real memory).
const GHOST_HEADER_SHARE: u64 = 32;
/// Decoded indirect blocks (`keep_decoded`) may take this fraction of the budget.
pub const DECODED_SHARE: u64 = 8;
/// Decoded objects (`charge`) should stay under this fraction of the budget; their owner
/// evicts clean ones beyond it (`objects_over_share`).
pub const OBJECTS_SHARE: u64 = 8;
/// Metadata is evicted last while all of it (blocks and decoded) is under this share (in
/// quarters) of the budget — ZFS's arc_meta_limit, 75 %.
const META_LIMIT_QUARTERS: u64 = 3;

/// Memory the budget covers that is not a cached block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outside {
    /// Decoded objects (dnodes in memory, directory entries, their block-tree maps).
    Objects,
}

#[derive(Default)]
struct Lists {
    t1: LinkedHashMap<BlockKey, Entry>,
    t2: LinkedHashMap<BlockKey, Entry>,
    b1: LinkedHashMap<BlockKey, Ghost>,
    b2: LinkedHashMap<BlockKey, Ghost>,
    t1_bytes: u64,
    t2_bytes: u64,
    b1_bytes: u64,
    b2_bytes: u64,
    /// Target bytes for T1.
    p: u64,
    /// The budget (arc_max).
    c: u64,
    logical_bytes: u64,
    data_bytes: u64,
    metadata_bytes: u64,
    /// Read-ahead blocks evicted unread.
    unread_prefetch_evictions: u64,
    /// Metadata bytes in T1 and T2 (the rest of each list is data).
    t1_meta: u64,
    t2_meta: u64,
    /// Bytes held for the hot copies (their whole share: they fill it quickly and are
    /// filled on the read path, where no eviction may run).
    reserved: u64,
    /// Where evicted blocks are offered (the L2ARC's feed), if anywhere.
    sink: SinkSlot,
}

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
    /// Bookkeeping of the blocks in the ARC lists and of their ghosts (see
    /// `ENTRY_HEADER_BYTES`).
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
    /// Everything the budget covers, as held now: blocks, headers, hot copies, decoded
    /// metadata.
    #[serde(default)]
    pub accounted_size: u64,
    /// The process's resident memory (filled in by the pool, from /proc/self/statm), and
    /// the part of it the budget does not account for (code, stacks, dirty data, buffers
    /// in flight, the allocator's slack).
    #[serde(default)]
    pub rss: u64,
    #[serde(default)]
    pub other_size: u64,
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

/// Which policy keeps file data (metadata always lives in the ARC lists).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DataPolicy {
    /// A window and a frequency-admitted main area, counted per page (`policy.rs`): the
    /// policy for a cache under a database's buffer pool, and the default.
    #[default]
    SecondLevel,
    /// Data in the ARC lists beside metadata, keyed by block (tarn before issue #17);
    /// kept to measure the default against.
    Arc,
}

/// Everything behind the cache's one lock.
///
/// One budget (`lists.c`, arc_max) covers both parts and what lies outside them (headers,
/// the hot copies' reserve, decoded metadata). Metadata is preferred as ZFS's
/// arc_meta_limit says: while all metadata is under `meta_limit`, room for it is taken
/// from data first; beyond it, metadata makes room from its own lists. Data gets what is
/// left (`rebudget_data`).
struct Inner {
    /// The ARC lists: metadata, and data too under `DataPolicy::Arc`.
    lists: Lists,
    /// Data under `DataPolicy::SecondLevel`; its budget is what the rest leaves.
    data: DataCache,
    policy: DataPolicy,
}

impl Inner {
    fn lists_bytes(&self) -> u64 {
        self.lists.t1_bytes + self.lists.t2_bytes
    }

    /// What the data policy holds within the budget: its blocks. (Its bookkeeping is not
    /// counted: the policy's hit ratios, `tests/trace_fixture.rs`, are held at a budget
    /// of block bytes; its ghosts are capped at 1/32 of its budget.)
    fn data_held(&self) -> u64 {
        self.data.bytes()
    }

    /// Everything but the data policy: the lists' blocks and headers, the reserve, and
    /// `outside` (decoded metadata).
    fn beside_data(&self, outside: u64) -> u64 {
        self.lists_bytes() + self.lists.headers() + self.lists.reserved + outside
    }

    /// Gives data what the rest leaves of the budget (less `incoming` bytes about to be
    /// added beside it); evicts data to fit.
    fn rebudget_data(&mut self, outside: u64, incoming: u64) -> Evicted {
        let budget = match self.policy {
            DataPolicy::SecondLevel => {
                let rest = self.beside_data(outside) + incoming;
                self.lists.c.saturating_sub(rest)
            }
            DataPolicy::Arc => 0,
        };
        self.data.set_budget(budget)
    }

    /// Makes room for `incoming` bytes of the lists (0: fits the budget again). Data gives
    /// way first while metadata is under its limit; beyond it the lists evict first, and
    /// data gives what they could not.
    fn make_room(&mut self, incoming: u64, after_b2_hit: bool, outside: u64) -> Evicted {
        let mut ev = Evicted::default();
        let keep_meta = self.lists.metadata_bytes + outside + incoming <= self.lists.meta_limit();
        if keep_meta {
            ev += self.rebudget_data(outside, incoming + ENTRY_HEADER_BYTES);
        }
        let data = self.data_held();
        ev.blocks += self.lists.make_room(incoming, after_b2_hit, outside, data);
        if !keep_meta {
            // The lists may have emptied and still not made room: decoded metadata alone
            // can be over the limit, as just after a shrink (the objects' owner trims its
            // share only after `set_max`). Without this a shrink left data at its old
            // budget (issue #11).
            ev += self.rebudget_data(outside, incoming);
        }
        ev
    }

    /// Makes room for `incoming` bytes of data: metadata over its limit gives way (as it
    /// would in one LRU with data), then data's budget is what is left.
    fn room_for_data(&mut self, incoming: u64, outside: u64) -> Evicted {
        let held = self.data_held() + incoming;
        let mut ev = Evicted::default();
        ev.blocks += self.lists.evict_until(false, outside, |l| {
            l.metadata_bytes + outside <= l.meta_limit()
                || l.t1_bytes + l.t2_bytes + l.headers() + l.reserved + outside + held <= l.c
        });
        ev += self.rebudget_data(outside, 0);
        ev
    }

    fn bytes(&self) -> u64 {
        self.lists_bytes() + self.data.bytes()
    }
}

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
    /// `Lists::c`, readable without the lock.
    max_bytes: AtomicU64,
}

/// Where a lookup found a block, for the counters.
enum Hit {
    Recency,
    Frequency,
    /// The first demand read of a read-ahead block (in the recency list or window).
    Prefetched,
}

impl ArcCache {
    /// A cache of `max_bytes` with the default data policy.
    pub fn new(max_bytes: u64) -> ArcCache {
        ArcCache::with_policy(max_bytes, DataPolicy::default())
    }

    pub fn with_policy(max_bytes: u64, policy: DataPolicy) -> ArcCache {
        let sink = SinkSlot::default();
        let lists = Lists { c: max_bytes, p: max_bytes / 2, sink: sink.clone(), ..Default::default() };
        let data = DataCache::new(
            match policy {
                DataPolicy::SecondLevel => max_bytes,
                DataPolicy::Arc => 0,
            },
            sink.clone(),
        );
        ArcCache {
            inner: Mutex::new(Inner { lists, data, policy }),
            sink,
            policy,
            counters: Counters::default(),
            decoded: Mutex::new(Clock::default()),
            decoded_bytes: AtomicU64::new(0),
            objects_bytes: AtomicU64::new(0),
            max_bytes: AtomicU64::new(max_bytes),
        }
    }

    /// Bytes held outside the lists that the budget covers (decoded metadata).
    fn outside(&self) -> u64 {
        self.decoded_bytes.load(Ordering::Relaxed) + self.objects_bytes.load(Ordering::Relaxed)
    }

    /// Offers every block the cache evicts from now on to `sink` (the L2ARC's feed), under
    /// the cache's lock: the sink must only queue it, never wait or touch a device. Set
    /// once; a second call is refused (`false`).
    pub fn set_evict_sink(&self, sink: std::sync::Arc<dyn EvictSink>) -> bool {
        self.sink.set(sink)
    }

    /// A default budget: a quarter of the machine's memory.
    pub fn default_max() -> u64 {
        (total_memory() / 4).max(64 << 20)
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

    /// Changes the budget at run time; shrinking evicts at once (decoded indirect blocks
    /// too; the objects' owner trims its own, see `objects_over_share`).
    pub fn set_max(&self, bytes: u64) {
        {
            let mut g = self.inner.lock();
            g.lists.c = bytes;
            g.lists.p = g.lists.p.min(bytes);
            self.max_bytes.store(bytes, Ordering::Relaxed);
        }
        let dropped = self.decoded.lock().evict_to(bytes / DECODED_SHARE, &self.decoded_bytes);
        drop(dropped);
        self.evict_to_budget();
    }

    /// Sets the bytes held for the hot copies (their share of the budget).
    pub fn set_reserved(&self, bytes: u64) {
        self.inner.lock().lists.reserved = bytes;
        self.evict_to_budget();
    }

    /// Evicts blocks until everything the budget covers fits in it.
    fn evict_to_budget(&self) {
        let outside = self.outside();
        let mut g = self.inner.lock();
        let ev = g.make_room(0, false, outside);
        g.lists.trim_ghosts();
        drop(g);
        self.count_evicted(ev);
    }

    /// Adds `bytes` to what `what` holds within the budget, evicting blocks to make room.
    /// Called where the owner grows (loading an object), never on a cached read.
    pub fn charge(&self, what: Outside, bytes: u64) {
        match what {
            Outside::Objects => self.objects_bytes.fetch_add(bytes, Ordering::Relaxed),
        };
        self.evict_to_budget();
    }

    /// `what` gave back `bytes` it had charged.
    pub fn discharge(&self, what: Outside, bytes: u64) {
        let counter = match what {
            Outside::Objects => &self.objects_bytes,
        };
        let before = counter.fetch_sub(bytes, Ordering::Relaxed);
        assert!(before >= bytes, "invariant broken: {what:?} gave back {bytes} bytes but held {before}");
    }

    /// True while the decoded objects are over their share: their owner should evict
    /// clean ones.
    pub fn objects_over_share(&self) -> bool {
        self.objects_bytes.load(Ordering::Relaxed) > self.max() / OBJECTS_SHARE
    }

    /// Keeps a decoded indirect block `value` of `bytes` for its tree, which holds it
    /// weakly: the cache holds the one lasting reference and drops it (CLOCK: a block
    /// touched since the hand last passed gets a second chance) when decoded blocks go
    /// over their share. The tree reads it again through the ARC when it is gone.
    pub fn keep_decoded<T: Send + Sync + 'static>(&self, value: T, bytes: u64) -> Arc<Decoded<T>> {
        let kept = Arc::new(Decoded { value, touched: AtomicBool::new(true) });
        let share = self.max() / DECODED_SHARE;
        let dropped = {
            let mut clock = self.decoded.lock();
            clock.ring.push_back((kept.clone(), bytes));
            self.decoded_bytes.fetch_add(bytes, Ordering::Relaxed);
            clock.evict_to(share, &self.decoded_bytes)
        };
        drop(dropped); // freed outside the lock
        self.evict_to_budget();
        kept
    }

    /// The cached physical bytes of `key`, promoting it; the hit or miss is counted under
    /// `access.kind`. A demand read of file data also counts toward its page's frequency
    /// (`access.page`), hit or miss.
    pub fn get(&self, key: &BlockKey, access: Access) -> Option<Arc<[u8]>> {
        let found = self.lookup(key, access);
        match &found {
            Some((_, hit)) => {
                self.counters.kind_hits.add(access.kind, 1);
                self.counters.hits.fetch_add(1, Ordering::Relaxed);
                let list = match hit {
                    Hit::Recency => &self.counters.t1_hits,
                    Hit::Frequency => &self.counters.t2_hits,
                    Hit::Prefetched => {
                        self.counters.prefetch_hits.fetch_add(1, Ordering::Relaxed);
                        &self.counters.t1_hits
                    }
                };
                list.fetch_add(1, Ordering::Relaxed);
            }
            None => {
                self.counters.kind_misses.add(access.kind, 1);
                self.counters.misses.fetch_add(1, Ordering::Relaxed);
            }
        }
        found.map(|(bytes, _)| bytes)
    }

    /// Counts a read of `kind` served by a decompressed copy (`HotCopies`): a hit of the
    /// cache as a whole, though not of the lists.
    pub fn note_hot_hit(&self, kind: ReadKind) {
        self.counters.kind_hits.add(kind, 1);
    }

    /// Counts a read of `kind` that did not look in the cache (prefetch of a block not
    /// cached, scrub, import): it goes to the device.
    pub fn note_bypass(&self, kind: ReadKind) {
        self.counters.kind_misses.add(kind, 1);
    }

    fn lookup(&self, key: &BlockKey, access: Access) -> Option<(Arc<[u8]>, Hit)> {
        let mut g = self.inner.lock();
        // File data lives in the data policy; so does a directory's record (a data block
        // read as metadata), found there by its key.
        if g.policy == DataPolicy::SecondLevel && (access.kind.is_data() || g.data.contains(key)) {
            return match g.data.get(key, access.page, access.kind == ReadKind::Demand) {
                Found::Hit { bytes, prefetched: true, .. } => Some((bytes, Hit::Prefetched)),
                Found::Hit { bytes, window: true, .. } => Some((bytes, Hit::Recency)),
                Found::Hit { bytes, window: false, .. } => Some((bytes, Hit::Frequency)),
                Found::Miss => None,
            };
        }
        let l = &mut g.lists;
        if let Some(e) = l.t1.get_mut(key).filter(|e| e.prefetched) {
            // First demand read of a read-ahead block: it stays in the recency list.
            e.prefetched = false;
            let bytes = e.bytes.clone();
            l.t1.to_back(key);
            return Some((bytes, Hit::Prefetched));
        }
        if let Some(e) = l.t1.remove(key) {
            let bytes = e.bytes.clone();
            let size = e.bytes.len() as u64;
            l.t1_bytes -= size;
            l.t2_bytes += size;
            if e.class == Class::Metadata {
                l.t1_meta -= size;
                l.t2_meta += size;
            }
            l.t2.insert(*key, e);
            return Some((bytes, Hit::Recency));
        }
        l.t2.to_back(key).map(|e| (e.bytes.clone(), Hit::Frequency))
    }

    /// Caches a block just read (and verified) from disk. File data read for a demand
    /// read enters the data policy; data read to be rewritten (read-modify-write, a log
    /// fetch) does not: its next version comes with the write.
    pub fn insert(&self, key: BlockKey, bytes: Arc<[u8]>, lsize: u32, class: Class, access: Access) {
        if !self.in_lists(class) {
            if !self.keeps(class, access.kind) {
                return;
            }
            let size = bytes.len() as u64;
            self.insert_data(size, |d| d.insert_read(key, bytes, lsize, access.page), &key);
            self.counters.inserts.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.insert_entry(key, Entry { bytes, lsize, class, prefetched: false });
    }

    /// Caches a block just written (counts as neither a hit nor a miss). File data takes
    /// the place of its page's older version if that is cached.
    pub fn insert_written(&self, key: BlockKey, bytes: Arc<[u8]>, lsize: u32, class: Class, page: Option<PageId>) {
        let added = if self.in_lists(class) {
            self.insert_entry(key, Entry { bytes, lsize, class, prefetched: false })
        } else {
            let size = bytes.len() as u64;
            self.insert_data(size, |d| d.insert_written(key, bytes, lsize, page), &key)
        };
        if added {
            self.counters.written_inserts.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Caches a block read ahead of demand (sequential prefetch).
    pub fn insert_prefetched(&self, key: BlockKey, bytes: Arc<[u8]>, lsize: u32, class: Class, page: Option<PageId>) {
        let added = if self.in_lists(class) {
            self.insert_entry(key, Entry { bytes, lsize, class, prefetched: true })
        } else {
            let size = bytes.len() as u64;
            self.insert_data(size, |d| d.insert_prefetched(key, bytes, lsize, page), &key)
        };
        if added {
            self.counters.prefetch_inserts.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn contains(&self, key: &BlockKey) -> bool {
        let g = self.inner.lock();
        g.lists.t1.contains_key(key) || g.lists.t2.contains_key(key) || g.data.contains(key)
    }

    /// Whether `key` is cached, or was read ahead and evicted unread.
    pub fn residency(&self, key: &BlockKey) -> Residency {
        let g = self.inner.lock();
        let l = &g.lists;
        if l.t1.contains_key(key) || l.t2.contains_key(key) || g.data.contains(key) {
            Residency::Cached
        } else if l.b1.get(key).is_some_and(|g| g.unread_prefetch) || g.data.evicted_unread(key) {
            Residency::EvictedUnread
        } else {
            Residency::Unknown
        }
    }

    /// Adds an entry to the ARC lists. Returns whether the entry was added.
    fn insert_entry(&self, key: BlockKey, entry: Entry) -> bool {
        let size = entry.bytes.len() as u64;
        let outside = self.outside();
        let mut g = self.inner.lock();
        let l = &mut g.lists;
        if size > l.c || l.t1.contains_key(&key) || l.t2.contains_key(&key) {
            return false;
        }
        let (to_t2, after_b2_hit) = if let Some(ghost) = l.b1.remove(&key) {
            // Recency was evicted too early: give T1 more room.
            l.b1_bytes -= ghost.size;
            let step = size * (l.b2_bytes / l.b1_bytes.max(1)).max(1);
            l.p = (l.p + step).min(l.c);
            self.counters.ghost_b1_hits.fetch_add(1, Ordering::Relaxed);
            (true, false)
        } else if let Some(ghost) = l.b2.remove(&key) {
            // Frequency was evicted too early: give T2 more room.
            l.b2_bytes -= ghost.size;
            let step = size * (l.b1_bytes / l.b2_bytes.max(1)).max(1);
            l.p = l.p.saturating_sub(step);
            self.counters.ghost_b2_hits.fetch_add(1, Ordering::Relaxed);
            (true, true)
        } else {
            (false, false)
        };
        let mut ev = g.make_room(size, after_b2_hit, outside);
        if to_t2 {
            g.lists.add_t2(key, entry);
        } else {
            g.lists.add_t1(key, entry);
        }
        g.lists.trim_ghosts();
        // Data's budget follows what the lists now hold.
        ev += g.rebudget_data(outside, 0);
        assert!(g.bytes() <= g.lists.c, "cache over its budget: {} > {}", g.bytes(), g.lists.c);
        drop(g);
        self.counters.inserts.fetch_add(1, Ordering::Relaxed);
        self.count_evicted(ev);
        true
    }

    /// Whether blocks of `class` live in the ARC lists (else in the data policy).
    fn in_lists(&self, class: Class) -> bool {
        class == Class::Metadata || self.policy == DataPolicy::Arc
    }

    /// Adds a data block to the data policy with `add`, after making room for its `size`.
    fn insert_data(&self, size: u64, add: impl FnOnce(&mut DataCache) -> Evicted, key: &BlockKey) -> bool {
        let outside = self.outside();
        let mut g = self.inner.lock();
        let mut ev = g.room_for_data(size, outside);
        ev += add(&mut g.data);
        // Its bookkeeping is counted too.
        ev += g.rebudget_data(outside, 0);
        let added = g.data.contains(key);
        drop(g);
        self.count_evicted(ev);
        added
    }

    fn count_evicted(&self, ev: Evicted) {
        self.counters.evictions.fetch_add(ev.blocks, Ordering::Relaxed);
        self.counters.prefetch_evicted_unread.fetch_add(ev.unread_prefetch, Ordering::Relaxed);
    }

    /// Forgets a block whose space was freed.
    pub fn remove(&self, key: &BlockKey) {
        let mut g = self.inner.lock();
        g.data.remove(key);
        let l = &mut g.lists;
        if let Some(e) = l.t1.remove(key) {
            l.t1_bytes -= e.bytes.len() as u64;
            l.account(&e, false, true);
        } else if let Some(e) = l.t2.remove(key) {
            l.t2_bytes -= e.bytes.len() as u64;
            l.account(&e, false, false);
        } else if let Some(g) = l.b1.remove(key) {
            l.b1_bytes -= g.size;
        } else if let Some(g) = l.b2.remove(key) {
            l.b2_bytes -= g.size;
        }
    }

    pub fn snapshot(&self) -> ArcSnapshot {
        let decoded_indirect_size = self.decoded_bytes.load(Ordering::Relaxed);
        let decoded_objects_size = self.objects_bytes.load(Ordering::Relaxed);
        let g = self.inner.lock();
        let (l, d) = (&g.lists, &g.data);
        let headers_size = l.headers();
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (window_ghosts, main_ghosts) = d.ghost_bytes();
        let size = l.t1_bytes + l.t2_bytes + d.bytes();
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
            data_size: l.data_bytes + d.bytes(),
            metadata_size: l.metadata_bytes,
            blocks: (l.t1.len() + l.t2.len() + d.blocks()) as u64,
            kind_hits: c.kind_hits.values(),
            kind_misses: c.kind_misses.values(),
            headers_size,
            decoded_indirect_size,
            decoded_objects_size,
            metadata_limit: l.meta_limit(),
            // The hot copies' actual size is added by whoever owns them (the pipeline).
            accounted_size: size + headers_size + decoded_indirect_size + decoded_objects_size,
            rss: 0,
            other_size: 0,
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
                if counter || name == "evictions" || name == "prefetch_evicted_unread" { "counter" } else { "gauge" };
            out.push_str(&format!("# TYPE tarn_arc_{name} {kind}\ntarn_arc_{name} {value}\n"));
        }
        out
    }
}

impl Lists {
    /// Counts `e` in (or out of) the class sizes and its list's metadata bytes.
    fn account(&mut self, e: &Entry, add: bool, in_t1: bool) {
        let size = e.bytes.len() as u64;
        let list_meta = if in_t1 { &mut self.t1_meta } else { &mut self.t2_meta };
        if e.class == Class::Metadata {
            if add {
                *list_meta += size;
            } else {
                *list_meta -= size;
            }
        }
        let class = match e.class {
            Class::Data => &mut self.data_bytes,
            Class::Metadata => &mut self.metadata_bytes,
        };
        if add {
            *class += size;
            self.logical_bytes += e.lsize as u64;
        } else {
            *class -= size;
            self.logical_bytes -= e.lsize as u64;
        }
    }

    fn add_t1(&mut self, key: BlockKey, e: Entry) {
        self.t1_bytes += e.bytes.len() as u64;
        self.account(&e, true, true);
        self.t1.insert(key, e);
    }

    fn add_t2(&mut self, key: BlockKey, e: Entry) {
        self.t2_bytes += e.bytes.len() as u64;
        self.account(&e, true, false);
        self.t2.insert(key, e);
    }

    /// No block cached (ghosts may remain).
    fn is_empty(&self) -> bool {
        self.t1.is_empty() && self.t2.is_empty()
    }

    /// The bookkeeping bytes of the cached blocks and the ghosts.
    fn headers(&self) -> u64 {
        (self.t1.len() + self.t2.len()) as u64 * ENTRY_HEADER_BYTES
            + (self.b1.len() + self.b2.len()) as u64 * GHOST_HEADER_BYTES
    }

    fn meta_limit(&self) -> u64 {
        self.c / 4 * META_LIMIT_QUARTERS
    }

    /// Evicts until `incoming` more bytes fit beside the headers, the reserved share,
    /// `outside` (decoded metadata) and `data` (what the data policy holds). Returns how
    /// many were evicted.
    fn make_room(&mut self, incoming: u64, after_b2_hit: bool, outside: u64, data: u64) -> u64 {
        self.evict_until(after_b2_hit, outside, |l| {
            l.t1_bytes + l.t2_bytes + l.headers() + l.reserved + outside + data + incoming <= l.c
        })
    }

    /// Evicts until `done` says so or the lists are empty: from T1 while it is over its
    /// target (or exactly at it after a B2 ghost hit), else from T2 — data first while
    /// metadata (with `outside`, the decoded metadata) is under its limit. Returns how many
    /// were evicted.
    fn evict_until(&mut self, after_b2_hit: bool, outside: u64, done: impl Fn(&Lists) -> bool) -> u64 {
        let mut n = 0;
        while !self.is_empty() && !done(self) {
            let from_t1 = !self.t1.is_empty()
                && (self.t1_bytes > self.p || (after_b2_hit && self.t1_bytes == self.p) || self.t2.is_empty());
            let keep_meta = self.metadata_bytes + outside <= self.meta_limit();
            let (from_t1, (key, e)) = self.pop_victim(from_t1, keep_meta);
            let size = e.bytes.len() as u64;
            self.sink.offer(key, &e.bytes, e.lsize, e.class, e.prefetched);
            self.account(&e, false, from_t1);
            let ghost = Ghost { size, unread_prefetch: e.prefetched };
            self.unread_prefetch_evictions += e.prefetched as u64;
            if from_t1 {
                self.t1_bytes -= size;
                self.b1.insert(key, ghost);
                self.b1_bytes += size;
            } else {
                self.t2_bytes -= size;
                self.b2.insert(key, ghost);
                self.b2_bytes += size;
            }
            n += 1;
        }
        n
    }

    /// The block to evict from T1 (`from_t1`) or T2. With `keep_meta`, the least recently
    /// used *data* block of that list — or of the other, if that list holds only
    /// metadata — the metadata before it moving behind it in the same order (so each
    /// class stays in LRU order); metadata only when no data is left.
    fn pop_victim(&mut self, from_t1: bool, keep_meta: bool) -> (bool, (BlockKey, Entry)) {
        let data_in = |l: &Lists, t1: bool| if t1 { l.t1_bytes > l.t1_meta } else { l.t2_bytes > l.t2_meta };
        let list = if !keep_meta || data_in(self, from_t1) {
            from_t1
        } else if data_in(self, !from_t1) {
            !from_t1
        } else {
            from_t1
        };
        let wants_data = keep_meta && data_in(self, list);
        let l = if list { &mut self.t1 } else { &mut self.t2 };
        if wants_data {
            while let Some((&key, e)) = l.front() {
                if e.class == Class::Data {
                    break;
                }
                l.to_back(&key);
            }
        }
        (list, l.pop_front().expect("a non-empty list"))
    }

    /// Ghosts remember at most `c` bytes each side: |T1|+|B1| <= c, total <= 2c; and their
    /// headers take at most 1/GHOST_HEADER_SHARE of the budget.
    fn trim_ghosts(&mut self) {
        while self.t1_bytes + self.b1_bytes > self.c {
            let Some((_, g)) = self.b1.pop_front() else {
                break;
            };
            self.b1_bytes -= g.size;
        }
        while self.t1_bytes + self.t2_bytes + self.b1_bytes + self.b2_bytes > 2 * self.c {
            let Some((_, g)) = self.b2.pop_front() else {
                break;
            };
            self.b2_bytes -= g.size;
        }
        let ghost_max = self.c / GHOST_HEADER_SHARE;
        while (self.b1.len() + self.b2.len()) as u64 * GHOST_HEADER_BYTES > ghost_max {
            let side = if self.b1_bytes >= self.b2_bytes { &mut self.b1 } else { &mut self.b2 };
            let Some((_, g)) = side.pop_front() else { break };
            if self.b1_bytes >= self.b2_bytes {
                self.b1_bytes -= g.size;
            } else {
                self.b2_bytes -= g.size;
            }
        }
    }
}

/// A decoded metadata block kept by `ArcCache::keep_decoded`, with its CLOCK bit.
pub struct Decoded<T> {
    value: T,
    touched: AtomicBool,
}

impl<T> Decoded<T> {
    /// The value, marked as used (no lock on the read path; the bit is written only when
    /// it changes, so readers of a hot block do not bounce its cache line).
    pub fn get(&self) -> &T {
        if !self.touched.load(Ordering::Relaxed) {
            self.touched.store(true, Ordering::Relaxed);
        }
        &self.value
    }
}

/// What the CLOCK needs of a decoded block, whatever its type.
trait Touched: Send + Sync {
    /// Clears the bit; returns whether it was set.
    fn take_touched(&self) -> bool;
}

impl<T: Send + Sync> Touched for Decoded<T> {
    fn take_touched(&self) -> bool {
        self.touched.swap(false, Ordering::Relaxed)
    }
}

/// The decoded blocks in CLOCK order (front: where the hand is).
#[derive(Default)]
struct Clock {
    ring: std::collections::VecDeque<(Arc<dyn Touched>, u64)>,
}

impl Clock {
    /// Drops blocks until `bytes` (the counter) is at most `max`; returns them, to be
    /// freed after the lock is released. A touched block goes round once more.
    fn evict_to(&mut self, max: u64, bytes: &AtomicU64) -> Vec<Arc<dyn Touched>> {
        let mut dropped = Vec::new();
        // Every block can be passed over at most once before all bits are clear.
        let mut second_chances = self.ring.len();
        while bytes.load(Ordering::Relaxed) > max {
            let Some((block, size)) = self.ring.pop_front() else { break };
            if second_chances > 0 && block.take_touched() {
                second_chances -= 1;
                self.ring.push_back((block, size));
                continue;
            }
            bytes.fetch_sub(size, Ordering::Relaxed);
            dropped.push(block);
        }
        dropped
    }
}

/// How the process's allocator gives free memory back to the OS, if the binary said
/// (`set_memory_release`).
static MEMORY_RELEASE: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Sets, once, how to give the allocator's free memory back to the OS: the binary chooses
/// the allocator, the engine knows when a shrink made memory free.
pub fn set_memory_release(release: fn()) {
    let _ = MEMORY_RELEASE.set(release);
}

/// Gives the allocator's free memory back to the OS, if the binary said how.
pub fn release_memory() {
    if let Some(release) = MEMORY_RELEASE.get() {
        release();
    }
}

/// The process's resident memory in bytes, from /proc/self/statm (0 if it cannot be
/// read).
pub fn resident_bytes() -> u64 {
    let page = 4096; // statm counts pages; every Linux platform tarn runs on has 4 KiB ones
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|n| n.parse::<u64>().ok()))
        .map_or(0, |pages| pages * page)
}

/// Physical memory in bytes, from /proc/meminfo (1 GiB if it cannot be read).
fn total_memory() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(1 << 30, |kb| kb * 1024)
}

impl ArcSnapshot {
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
            ("accounted_size", self.accounted_size),
            ("rss", self.rss),
            ("other_size", self.other_size),
        ];
        fields.extend(KIND_HIT_NAMES.into_iter().zip(self.kind_hits));
        fields.extend(KIND_MISS_NAMES.into_iter().zip(self.kind_misses));
        fields
    }
}

type HotList = LinkedHashMap<BlockKey, Arc<[u8]>>;

/// A bounded set of hot decompressed copies: blocks read again while in the ARC are
/// kept decompressed too, so the hottest records cost a copy instead of a decompression.
/// Plain LRU under its own byte budget; counted in the ARC's stats.
pub struct HotCopies {
    /// The copies in LRU order, and their total bytes.
    lists: Mutex<(HotList, u64)>,
    max: AtomicU64,
    pub hits: AtomicU64,
}

impl HotCopies {
    pub fn new(max_bytes: u64) -> HotCopies {
        HotCopies {
            lists: Mutex::new((LinkedHashMap::new(), 0)),
            max: AtomicU64::new(max_bytes),
            hits: AtomicU64::new(0),
        }
    }

    /// Copies the decompressed block into `out` if it is here.
    pub fn copy_out(&self, key: &BlockKey, out: &mut [u8]) -> bool {
        let mut l = self.lists.lock();
        match l.0.to_back(key) {
            Some(bytes) if bytes.len() == out.len() => {
                out.copy_from_slice(bytes);
                drop(l);
                self.hits.fetch_add(1, Ordering::Relaxed);
                true
            }
            _ => false,
        }
    }

    pub fn insert(&self, key: BlockKey, bytes: &[u8]) {
        let max = self.max.load(Ordering::Relaxed);
        let size = bytes.len() as u64;
        if size > max {
            return;
        }
        let mut l = self.lists.lock();
        if l.0.contains_key(&key) {
            return;
        }
        while l.1 + size > max {
            let Some((_, b)) = l.0.pop_front() else { break };
            l.1 -= b.len() as u64;
        }
        l.0.insert(key, Arc::from(bytes));
        l.1 += size;
    }

    pub fn remove(&self, key: &BlockKey) {
        let mut l = self.lists.lock();
        if let Some(b) = l.0.remove(key) {
            l.1 -= b.len() as u64;
        }
    }

    pub fn set_max(&self, bytes: u64) {
        self.max.store(bytes, Ordering::Relaxed);
        let mut l = self.lists.lock();
        while l.1 > bytes {
            let Some((_, b)) = l.0.pop_front() else { break };
            l.1 -= b.len() as u64;
        }
    }

    pub fn size(&self) -> u64 {
        self.lists.lock().1
    }
}

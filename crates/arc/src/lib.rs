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
//! Metadata is evicted last while all metadata (cached and decoded) is under
//! `META_LIMIT_SHARE` of the budget, like ZFS's `arc_meta_limit`.
//!
//! Promises: the blocks, headers, reserved hot share and decoded metadata never exceed
//! `arc_max` after an insert or a charge returns (unless what cannot be evicted — the
//! objects' owner's pinned ones — is over it alone); a one-time scan only cycles through
//! T1 and leaves the frequently used set in T2 alone; a block is keyed by its identity
//! (vdev, offset, birth txg), so a rewritten block never hits a stale copy.
//!
//! Must never: hold data that was not verified (callers insert only checksummed bytes),
//! be needed for correctness — losing the cache costs speed, never data — or touch a
//! device (the pipeline reads the devices and inserts here).
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use hashlink::LinkedHashMap;
use parking_lot::Mutex;

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

/// Bytes a cached block's bookkeeping takes besides its bytes: the list node (key, entry,
/// links), the table slot, the shared buffer's counts and the allocator's rounding.
pub const ENTRY_HEADER_BYTES: u64 =
    (std::mem::size_of::<BlockKey>() + std::mem::size_of::<Entry>() + 2 * 8 + 8 + 16 + 32) as u64;
/// Bytes a ghost (a key remembered after eviction) takes.
pub const GHOST_HEADER_BYTES: u64 = (std::mem::size_of::<BlockKey>() + 8 + 2 * 8 + 8 + 16) as u64;
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
    b1: LinkedHashMap<BlockKey, u64>,
    b2: LinkedHashMap<BlockKey, u64>,
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
    /// Metadata bytes in T1 and T2 (the rest of each list is data).
    t1_meta: u64,
    t2_meta: u64,
    /// Bytes held for the hot copies (their whole share: they fill it quickly and are
    /// filled on the read path, where no eviction may run).
    reserved: u64,
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
    /// Bookkeeping of the cached blocks and of the ghosts (see `ENTRY_HEADER_BYTES`).
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

pub struct ArcCache {
    lists: Mutex<Lists>,
    pub counters: Counters,
    /// Decoded indirect blocks kept for their trees (`keep_decoded`).
    decoded: Mutex<Clock>,
    decoded_bytes: AtomicU64,
    /// Decoded objects, as their owner charges them.
    objects_bytes: AtomicU64,
    /// `Lists::c`, readable without the lock.
    max_bytes: AtomicU64,
}

impl ArcCache {
    pub fn new(max_bytes: u64) -> ArcCache {
        let lists = Lists { c: max_bytes, p: max_bytes / 2, ..Default::default() };
        ArcCache {
            lists: Mutex::new(lists),
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

    /// A default budget: a quarter of the machine's memory.
    pub fn default_max() -> u64 {
        (total_memory() / 4).max(64 << 20)
    }

    pub fn max(&self) -> u64 {
        self.max_bytes.load(Ordering::Relaxed)
    }

    /// Changes the budget at run time; shrinking evicts at once (decoded indirect blocks
    /// too; the objects' owner trims its own, see `objects_over_share`).
    pub fn set_max(&self, bytes: u64) {
        {
            let mut l = self.lists.lock();
            l.c = bytes;
            l.p = l.p.min(bytes);
            self.max_bytes.store(bytes, Ordering::Relaxed);
        }
        let dropped = self.decoded.lock().evict_to(bytes / DECODED_SHARE, &self.decoded_bytes);
        drop(dropped);
        self.evict_to_budget();
    }

    /// Sets the bytes held for the hot copies (their share of the budget).
    pub fn set_reserved(&self, bytes: u64) {
        self.lists.lock().reserved = bytes;
        self.evict_to_budget();
    }

    /// Evicts blocks until everything the budget covers fits in it.
    fn evict_to_budget(&self) {
        let outside = self.outside();
        let mut l = self.lists.lock();
        let evicted = l.make_room(0, false, outside);
        l.trim_ghosts();
        drop(l);
        self.counters.evictions.fetch_add(evicted, Ordering::Relaxed);
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

    /// The cached physical bytes of `key`, promoting it (T1 → T2, or to T2's MRU end).
    pub fn get(&self, key: &BlockKey) -> Option<Arc<[u8]>> {
        let mut l = self.lists.lock();
        if let Some(e) = l.t1.get_mut(key).filter(|e| e.prefetched) {
            // First demand read of a read-ahead block: it stays in the recency list.
            e.prefetched = false;
            let bytes = e.bytes.clone();
            l.t1.to_back(key);
            drop(l);
            self.counters.prefetch_hits.fetch_add(1, Ordering::Relaxed);
            self.hit(&self.counters.t1_hits);
            return Some(bytes);
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
            drop(l);
            self.hit(&self.counters.t1_hits);
            return Some(bytes);
        }
        if let Some(e) = l.t2.to_back(key) {
            let bytes = e.bytes.clone();
            drop(l);
            self.hit(&self.counters.t2_hits);
            return Some(bytes);
        }
        drop(l);
        self.counters.misses.fetch_add(1, Ordering::Relaxed);
        None
    }

    fn hit(&self, list: &AtomicU64) {
        self.counters.hits.fetch_add(1, Ordering::Relaxed);
        list.fetch_add(1, Ordering::Relaxed);
    }

    /// Caches a block just read (and verified) from disk.
    pub fn insert(&self, key: BlockKey, bytes: Arc<[u8]>, lsize: u32, class: Class) {
        self.insert_entry(key, Entry { bytes, lsize, class, prefetched: false });
    }

    /// Caches a block just written (it enters the recency list, like a first read, but
    /// counts as neither a hit nor a miss).
    pub fn insert_written(&self, key: BlockKey, bytes: Arc<[u8]>, lsize: u32, class: Class) {
        if self.insert_entry(key, Entry { bytes, lsize, class, prefetched: false }) {
            self.counters.written_inserts.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Caches a block read ahead of demand (sequential prefetch).
    pub fn insert_prefetched(&self, key: BlockKey, bytes: Arc<[u8]>, lsize: u32, class: Class) {
        if self.insert_entry(key, Entry { bytes, lsize, class, prefetched: true }) {
            self.counters.prefetch_inserts.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn contains(&self, key: &BlockKey) -> bool {
        let l = self.lists.lock();
        l.t1.contains_key(key) || l.t2.contains_key(key)
    }

    /// Returns whether the entry was added.
    fn insert_entry(&self, key: BlockKey, entry: Entry) -> bool {
        let size = entry.bytes.len() as u64;
        let outside = self.outside();
        let mut l = self.lists.lock();
        if size > l.c || l.t1.contains_key(&key) || l.t2.contains_key(&key) {
            return false;
        }
        let evicted = if let Some(ghost) = l.b1.remove(&key) {
            // Recency was evicted too early: give T1 more room.
            l.b1_bytes -= ghost;
            let step = size * (l.b2_bytes / l.b1_bytes.max(1)).max(1);
            l.p = (l.p + step).min(l.c);
            self.counters.ghost_b1_hits.fetch_add(1, Ordering::Relaxed);
            let n = l.make_room(size, false, outside);
            l.add_t2(key, entry);
            n
        } else if let Some(ghost) = l.b2.remove(&key) {
            // Frequency was evicted too early: give T2 more room.
            l.b2_bytes -= ghost;
            let step = size * (l.b1_bytes / l.b2_bytes.max(1)).max(1);
            l.p = l.p.saturating_sub(step);
            self.counters.ghost_b2_hits.fetch_add(1, Ordering::Relaxed);
            let n = l.make_room(size, true, outside);
            l.add_t2(key, entry);
            n
        } else {
            let n = l.make_room(size, false, outside);
            l.add_t1(key, entry);
            n
        };
        l.trim_ghosts();
        debug_assert!(l.t1_bytes + l.t2_bytes <= l.c, "ARC over budget");
        drop(l);
        self.counters.inserts.fetch_add(1, Ordering::Relaxed);
        self.counters.evictions.fetch_add(evicted, Ordering::Relaxed);
        true
    }

    /// Forgets a block whose space was freed.
    pub fn remove(&self, key: &BlockKey) {
        let mut l = self.lists.lock();
        if let Some(e) = l.t1.remove(key) {
            l.t1_bytes -= e.bytes.len() as u64;
            l.account(&e, false, true);
        } else if let Some(e) = l.t2.remove(key) {
            l.t2_bytes -= e.bytes.len() as u64;
            l.account(&e, false, false);
        } else if let Some(g) = l.b1.remove(key) {
            l.b1_bytes -= g;
        } else if let Some(g) = l.b2.remove(key) {
            l.b2_bytes -= g;
        }
    }

    pub fn snapshot(&self) -> ArcSnapshot {
        let decoded_indirect_size = self.decoded_bytes.load(Ordering::Relaxed);
        let decoded_objects_size = self.objects_bytes.load(Ordering::Relaxed);
        let l = self.lists.lock();
        let headers_size = l.headers();
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ArcSnapshot {
            hits: get(&c.hits),
            misses: get(&c.misses),
            recency_hits: get(&c.t1_hits),
            frequency_hits: get(&c.t2_hits),
            ghost_recency_hits: get(&c.ghost_b1_hits),
            ghost_frequency_hits: get(&c.ghost_b2_hits),
            evictions: get(&c.evictions),
            prefetch_reads: get(&c.prefetch_inserts),
            written_blocks: get(&c.written_inserts),
            prefetch_hits: get(&c.prefetch_hits),
            hot_copy_hits: 0,
            hot_copies_size: 0,
            size: l.t1_bytes + l.t2_bytes,
            target_recency: l.p,
            max: l.c,
            recency_size: l.t1_bytes,
            frequency_size: l.t2_bytes,
            ghost_recency_size: l.b1_bytes,
            ghost_frequency_size: l.b2_bytes,
            compressed_size: l.t1_bytes + l.t2_bytes,
            logical_size: l.logical_bytes,
            data_size: l.data_bytes,
            metadata_size: l.metadata_bytes,
            blocks: (l.t1.len() + l.t2.len()) as u64,
            headers_size,
            decoded_indirect_size,
            decoded_objects_size,
            metadata_limit: l.meta_limit(),
            // The hot copies' actual size is added by whoever owns them (the pipeline).
            accounted_size: l.t1_bytes + l.t2_bytes + headers_size + decoded_indirect_size + decoded_objects_size,
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
            let kind =
                if name.ends_with("hits") || name == "misses" || name == "evictions" { "counter" } else { "gauge" };
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

    /// The bookkeeping bytes of the cached blocks and the ghosts.
    fn headers(&self) -> u64 {
        (self.t1.len() + self.t2.len()) as u64 * ENTRY_HEADER_BYTES
            + (self.b1.len() + self.b2.len()) as u64 * GHOST_HEADER_BYTES
    }

    fn meta_limit(&self) -> u64 {
        self.c / 4 * META_LIMIT_QUARTERS
    }

    /// Evicts until `incoming` more bytes fit beside the headers, the reserved share and
    /// `outside` (decoded metadata): from T1 while it is over its target (or exactly at
    /// it after a B2 ghost hit), else from T2 — data first while metadata is under its
    /// limit. Returns how many were evicted.
    fn make_room(&mut self, incoming: u64, after_b2_hit: bool, outside: u64) -> u64 {
        let mut n = 0;
        while !(self.t1.is_empty() && self.t2.is_empty())
            && self.t1_bytes + self.t2_bytes + self.headers() + self.reserved + outside + incoming > self.c
        {
            let from_t1 = !self.t1.is_empty()
                && (self.t1_bytes > self.p || (after_b2_hit && self.t1_bytes == self.p) || self.t2.is_empty());
            let keep_meta = self.metadata_bytes + outside <= self.meta_limit();
            let (from_t1, (key, e)) = self.pop_victim(from_t1, keep_meta);
            let size = e.bytes.len() as u64;
            self.account(&e, false, from_t1);
            if from_t1 {
                self.t1_bytes -= size;
                self.b1.insert(key, size);
                self.b1_bytes += size;
            } else {
                self.t2_bytes -= size;
                self.b2.insert(key, size);
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
            self.b1_bytes -= g;
        }
        while self.t1_bytes + self.t2_bytes + self.b1_bytes + self.b2_bytes > 2 * self.c {
            let Some((_, g)) = self.b2.pop_front() else {
                break;
            };
            self.b2_bytes -= g;
        }
        let ghost_max = self.c / GHOST_HEADER_SHARE;
        while (self.b1.len() + self.b2.len()) as u64 * GHOST_HEADER_BYTES > ghost_max {
            let side = if self.b1_bytes >= self.b2_bytes { &mut self.b1 } else { &mut self.b2 };
            let Some((_, g)) = side.pop_front() else { break };
            if self.b1_bytes >= self.b2_bytes {
                self.b1_bytes -= g;
            } else {
                self.b2_bytes -= g;
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
        vec![
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
        ]
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

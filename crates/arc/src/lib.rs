//! arc — the adaptive replacement cache: blocks kept in RAM as they are on disk
//! (compressed), under a byte budget `arc_max`.
//!
//! Owns: the four ARC lists — T1 (seen once, recently), T2 (seen at least twice), and
//! their ghosts B1/B2 (keys only, of blocks recently evicted from T1/T2) — and the target
//! `p` for T1's share, which ghost hits steer: a hit in B1 says "recency deserved more
//! room", a hit in B2 says "frequency did". Counters in the spirit of ZFS's arcstats.
//! Beside it, `HotCopies`: a small LRU of decompressed copies of the blocks read again
//! while cached, under its own budget (a share of `arc_max`).
//!
//! Promises: resident bytes never exceed `arc_max` after an insert returns; a one-time
//! scan only cycles through T1 and leaves the frequently used set in T2 alone; a block is
//! keyed by its identity (vdev, offset, birth txg), so a rewritten block never hits a
//! stale copy.
//!
//! Must never: hold data that was not verified (callers insert only checksummed bytes),
//! be needed for correctness — losing the cache costs speed, never data — or touch a
//! device (the pipeline reads the devices and inserts here).
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use hashlink::LinkedHashMap;
use parking_lot::Mutex;

mod access;
mod policy;

pub use access::{Access, PageId, PerKind, ReadKind, READ_KINDS};
use policy::{DataCache, Evicted, Found};

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

/// Under `SecondLevel`, metadata may take up to 1/METADATA_SHARE of the budget from data
/// (it is preferred: a metadata miss costs a data read its own read first).
const METADATA_SHARE: u64 = 2;

/// Everything behind the cache's one lock.
struct Inner {
    /// The ARC lists: metadata, and data too under `DataPolicy::Arc`. Their `c` is
    /// metadata's ceiling (or the whole budget under `Arc`).
    lists: Lists,
    /// Data under `DataPolicy::SecondLevel`; its budget is what metadata leaves.
    data: DataCache,
    policy: DataPolicy,
    /// The budget (arc_max).
    max: u64,
}

impl Inner {
    fn new(max: u64, policy: DataPolicy) -> Inner {
        let mut inner = Inner { lists: Lists::default(), data: DataCache::new(0), policy, max: 0 };
        inner.set_max(max);
        inner
    }

    /// Whether blocks of `class` live in the ARC lists.
    fn in_lists(&self, class: Class) -> bool {
        class == Class::Metadata || self.policy == DataPolicy::Arc
    }

    fn lists_bytes(&self) -> u64 {
        self.lists.t1_bytes + self.lists.t2_bytes
    }

    /// Gives data what metadata leaves of the budget; evicts data to fit.
    fn rebudget_data(&mut self) -> Evicted {
        let budget = match self.policy {
            DataPolicy::SecondLevel => self.max.saturating_sub(self.lists_bytes()),
            DataPolicy::Arc => 0,
        };
        self.data.set_budget(budget)
    }

    /// Returns how many blocks were evicted.
    fn set_max(&mut self, bytes: u64) -> Evicted {
        self.max = bytes;
        self.lists.c = match self.policy {
            DataPolicy::SecondLevel => bytes / METADATA_SHARE,
            DataPolicy::Arc => bytes,
        };
        if self.lists.p == 0 && self.lists.t1.is_empty() && self.lists.t2.is_empty() {
            self.lists.p = self.lists.c / 2;
        }
        self.lists.p = self.lists.p.min(self.lists.c);
        let mut ev = Evicted { blocks: self.lists.make_room(0, false), unread_prefetch: 0 };
        self.lists.trim_ghosts();
        ev += self.rebudget_data();
        ev
    }

    fn bytes(&self) -> u64 {
        self.lists_bytes() + self.data.bytes()
    }
}

pub struct ArcCache {
    inner: Mutex<Inner>,
    /// The data policy (also in `inner`; fixed for the cache's life, read without the lock).
    policy: DataPolicy,
    pub counters: Counters,
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
        ArcCache { inner: Mutex::new(Inner::new(max_bytes, policy)), policy, counters: Counters::default() }
    }

    /// A default budget: a quarter of the machine's memory.
    pub fn default_max() -> u64 {
        (total_memory() / 4).max(64 << 20)
    }

    pub fn max(&self) -> u64 {
        self.inner.lock().max
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

    /// Changes the budget at run time; shrinking evicts at once.
    pub fn set_max(&self, bytes: u64) {
        let ev = self.inner.lock().set_max(bytes);
        self.count_evicted(ev);
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
            l.t2.insert(*key, e);
            return Some((bytes, Hit::Recency));
        }
        l.t2.to_back(key).map(|e| (e.bytes.clone(), Hit::Frequency))
    }

    /// Caches a block just read (and verified) from disk. File data read for a demand
    /// read enters the data policy; data read to be rewritten (read-modify-write, a log
    /// fetch) does not: its next version comes with the write.
    pub fn insert(&self, key: BlockKey, bytes: Arc<[u8]>, lsize: u32, class: Class, access: Access) {
        let mut g = self.inner.lock();
        if !g.in_lists(class) {
            if !self.keeps(class, access.kind) {
                return;
            }
            let mut ev = g.rebudget_data();
            ev += g.data.insert_read(key, bytes, lsize, access.page);
            drop(g);
            self.counters.inserts.fetch_add(1, Ordering::Relaxed);
            self.count_evicted(ev);
            return;
        }
        drop(g);
        self.insert_entry(key, Entry { bytes, lsize, class, prefetched: false });
    }

    /// Caches a block just written (counts as neither a hit nor a miss). File data takes
    /// the place of its page's older version if that is cached.
    pub fn insert_written(&self, key: BlockKey, bytes: Arc<[u8]>, lsize: u32, class: Class, page: Option<PageId>) {
        let mut g = self.inner.lock();
        let added = if g.in_lists(class) {
            drop(g);
            self.insert_entry(key, Entry { bytes, lsize, class, prefetched: false })
        } else {
            let mut ev = g.rebudget_data();
            ev += g.data.insert_written(key, bytes, lsize, page);
            let added = g.data.contains(&key);
            drop(g);
            self.count_evicted(ev);
            added
        };
        if added {
            self.counters.written_inserts.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Caches a block read ahead of demand (sequential prefetch).
    pub fn insert_prefetched(&self, key: BlockKey, bytes: Arc<[u8]>, lsize: u32, class: Class, page: Option<PageId>) {
        let mut g = self.inner.lock();
        let added = if g.in_lists(class) {
            drop(g);
            self.insert_entry(key, Entry { bytes, lsize, class, prefetched: true })
        } else {
            let mut ev = g.rebudget_data();
            ev += g.data.insert_prefetched(key, bytes, lsize, page);
            let added = g.data.contains(&key);
            drop(g);
            self.count_evicted(ev);
            added
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
        let mut g = self.inner.lock();
        let l = &mut g.lists;
        if size > l.c || l.t1.contains_key(&key) || l.t2.contains_key(&key) {
            return false;
        }
        let evicted = if let Some(ghost) = l.b1.remove(&key) {
            // Recency was evicted too early: give T1 more room.
            l.b1_bytes -= ghost.size;
            let step = size * (l.b2_bytes / l.b1_bytes.max(1)).max(1);
            l.p = (l.p + step).min(l.c);
            self.counters.ghost_b1_hits.fetch_add(1, Ordering::Relaxed);
            let n = l.make_room(size, false);
            l.add_t2(key, entry);
            n
        } else if let Some(ghost) = l.b2.remove(&key) {
            // Frequency was evicted too early: give T2 more room.
            l.b2_bytes -= ghost.size;
            let step = size * (l.b1_bytes / l.b2_bytes.max(1)).max(1);
            l.p = l.p.saturating_sub(step);
            self.counters.ghost_b2_hits.fetch_add(1, Ordering::Relaxed);
            let n = l.make_room(size, true);
            l.add_t2(key, entry);
            n
        } else {
            let n = l.make_room(size, false);
            l.add_t1(key, entry);
            n
        };
        l.trim_ghosts();
        debug_assert!(l.t1_bytes + l.t2_bytes <= l.c, "ARC over budget");
        // Metadata grew: data makes room.
        let mut ev = Evicted { blocks: evicted, unread_prefetch: 0 };
        ev += g.rebudget_data();
        assert!(g.bytes() <= g.max, "cache over its budget: {} > {}", g.bytes(), g.max);
        drop(g);
        self.counters.inserts.fetch_add(1, Ordering::Relaxed);
        self.count_evicted(ev);
        true
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
            l.account(&e, false);
        } else if let Some(e) = l.t2.remove(key) {
            l.t2_bytes -= e.bytes.len() as u64;
            l.account(&e, false);
        } else if let Some(g) = l.b1.remove(key) {
            l.b1_bytes -= g.size;
        } else if let Some(g) = l.b2.remove(key) {
            l.b2_bytes -= g.size;
        }
    }

    pub fn snapshot(&self) -> ArcSnapshot {
        let g = self.inner.lock();
        let (l, d) = (&g.lists, &g.data);
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
            max: g.max,
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
    fn account(&mut self, e: &Entry, add: bool) {
        let size = e.bytes.len() as u64;
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
        self.account(&e, true);
        self.t1.insert(key, e);
    }

    fn add_t2(&mut self, key: BlockKey, e: Entry) {
        self.t2_bytes += e.bytes.len() as u64;
        self.account(&e, true);
        self.t2.insert(key, e);
    }

    /// Evicts until `incoming` more bytes fit: from T1 while it is over its target (or
    /// exactly at it after a B2 ghost hit), else from T2. Returns how many were evicted.
    fn make_room(&mut self, incoming: u64, after_b2_hit: bool) -> u64 {
        let mut n = 0;
        while self.t1_bytes + self.t2_bytes + incoming > self.c {
            let from_t1 = !self.t1.is_empty()
                && (self.t1_bytes > self.p || (after_b2_hit && self.t1_bytes == self.p) || self.t2.is_empty());
            let (key, e) = if from_t1 { self.t1.pop_front() } else { self.t2.pop_front() }.expect("a non-empty list");
            let size = e.bytes.len() as u64;
            self.account(&e, false);
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

    /// Ghosts remember at most `c` bytes each side: |T1|+|B1| <= c, total <= 2c.
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
    }
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

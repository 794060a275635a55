//! The data policy of a cache that sits under a database's buffer pool: which file data
//! blocks stay in RAM.
//!
//! Why not ARC. Under InnoDB (or any buffer pool) the reads that reach tarn are the pool's
//! misses: a page just read is in the pool now and will not be asked for again until the
//! pool evicts it, so recency says little, and ARC's "seen twice" is weak evidence. What
//! predicts the next read is how often the *page* comes back from the pool. Measured on a
//! TPC-C-like trace (8 warehouses, 64 MiB buffer pool, 64 MiB cache; `benches/trace.rs`
//! over the whole recorded trace): the pages that reach tarn are read 1 to 19 times in two
//! minutes; LRU hits 0.46 of demand reads, ARC 0.50, this policy 0.60, Belady's OPT 0.88.
//! On sysbench select_random_points (32 MiB pool, 32 MiB cache): LRU 0.45, ARC 0.49, this
//! policy 0.50, OPT 0.56. `tests/trace_fixture.rs` keeps these gains.
//!
//! How. A page's frequency is counted by its logical identity (`PageId`: dataset, object,
//! record), so it survives copy-on-write rewrites, which give the page a new block (and a
//! new `BlockKey`) every time the database flushes it. Blocks enter a small recency
//! *window* (LRU); a block leaving the window is *admitted* to the *main* area only if its
//! page has been read more often than the block main would evict (TinyLFU's admission,
//! Einziger et al.); main evicts the least read page first (LRU among equals). A page
//! written while an older version is cached takes that version's place (and rank); a page
//! written without one enters the window, so a just-flushed page read again soon (InnoDB's
//! LRU flush, a redo-log record's next partial write) still hits. The window's share
//! adapts, ARC-style, by ghost hits: a page the window let go and read again grows it, a
//! page main evicted and read again shrinks it — so a recency-heavy workload (a cache with
//! no buffer pool above it) gets a large window, a frequency-heavy one a small window.
//! Only recency's evidence grows the window: a ghost hit of a page read at most
//! `RECENCY_READS_MAX` times. A page read more often belongs to main, whose admission
//! takes it as its count grows; and a page never read (only written) leaves no ghost.
//! Without these two rules the steering fed on itself under a buffer pool: after a
//! restore wrote the whole dataset through the cache, the written pages were the window's
//! ghosts, each first read of one grew the window, a grown window made most ghosts window
//! ghosts, and the window took the whole cache — on TPC-C-like at equal memory (issue #17,
//! 64 MiB buffer pool, 64 MiB cache) the policy became an LRU and hit 0.38 of demand reads
//! where plain ARC hits 0.45 (`tests/trace_fixture.rs`, `tpcc9-restore-eq64`).
//! The counts live in a count-min sketch (`sketch`) sized by `arc_max`, so a page is
//! still known when it comes back from the pool thousands of reads later; they halve
//! every `AGE_READS_PER_ENTRY` reads per cached block, so yesterday's hot set fades.
//! Nothing to tune.
//!
//! Owns: the data blocks' window, main area (one LRU per read count), ghosts, the pages'
//! read counts and the window's adaptive share.
//!
//! Promises: the resident bytes never exceed the budget after any call returns; a block
//! is keyed by its physical identity, so a rewritten page never serves a stale version
//! (the page index only decides placement); the ghosts are bounded by the budget and the
//! read counts fixed by `arc_max`; each block is charged its bookkeeping
//! (`DATA_HEADER_BYTES`) beside its bytes, the read counts are charged whole, and tables
//! that emptied give their room back (`compact`).
//!
//! Must never: touch metadata (the ARC lists own it), hold bytes that were not verified
//! (callers insert verified bytes only), or be needed for correctness.
//!
//! Modules: this one (the entries, the bookkeeping and the calls the ARC makes),
//! `frequency` (counting reads, their aging, and the ghost hits that steer the window's
//! share), `sketch` (the read counts), `eviction` (where a block sits, admission to main,
//! eviction and ghosts).
use std::mem::size_of;
use std::sync::Arc;

use crate::compact::{compact, compact_tight, Rule};
use crate::memory::charged_bytes;
use crate::sink::SinkSlot;
use crate::{BlockKey, LinkedMap, Map, PageId};

mod eviction;
mod frequency;
mod sketch;

use sketch::FrequencySketch;

/// Read counts saturate here (one main-area list per count).
const MAX_FREQ: u8 = 15;
/// A window ghost hit grows the window only for a page read at most this many times
/// (this read included): a page the reader comes back to once more.
const RECENCY_READS_MAX: u8 = 2;
/// The window's share of the budget: at least 1% (TinyLFU's default), at most nearly all
/// (a workload only recency serves makes the cache an LRU).
const WINDOW_MIN_PER_MILLE: u64 = 10;
const WINDOW_MAX_PER_MILLE: u64 = 990;
/// Every this many demand reads per cached block (at least `AGE_MIN_ENTRIES` blocks), all
/// read counts halve.
const AGE_READS_PER_ENTRY: u64 = 16;
const AGE_MIN_ENTRIES: usize = 4096;
/// The tables are looked at for compaction at most once per this many blocks leaving.
const COMPACT_EVERY_MIN: usize = 4096;
/// Read-ahead blocks evicted unread that are remembered (for read-ahead's judgement).
const UNREAD_REMEMBERED: usize = 4096;
/// Bytes a remembered page (a ghost) takes: its list node, links and table slot.
const REMEMBERED_BYTES: u64 = (size_of::<Ident>() + 8 + 2 * 8 + 8 + 16) as u64;

/// A list node's allocation: its payload and two links, in the allocator's 16-byte steps.
pub(crate) const fn node_bytes(payload: usize) -> usize {
    (payload + 2 * 8).div_ceil(16) * 16
}

/// A table slot of `slot` bytes and its control byte, counted 3/2: a hash table is
/// between 7/16 and 7/8 full (compacted when far emptier, `crate::compact`).
pub(crate) const fn table_bytes(slot: usize) -> usize {
    (slot + 1) * 3 / 2
}

/// What the policy's bookkeeping of one cached block takes, charged to the budget beside
/// its bytes as the ARC lists charge `ENTRY_HEADER_BYTES` (ZFS its `arc_buf_hdr_t`): its
/// entry, its page's slot and its node in the window or main (the read counts live in
/// the sketch, charged whole: `sketch_bytes`). Without it a tiny file's block (tens of
/// bytes) cost ten times that uncharged, and 200,000 files held ~90 MiB beyond `arc_max`
/// (issue #11, `crates/pool/tests/memory_files.rs`).
pub const DATA_HEADER_BYTES: u64 = (table_bytes(size_of::<BlockKey>() + size_of::<Entry>())
    + table_bytes(size_of::<PageId>() + size_of::<BlockKey>())
    + node_bytes(size_of::<BlockKey>())
    + table_bytes(8)) as u64;
/// The ghosts' bookkeeping may take at most this fraction of the data's budget (small
/// blocks would otherwise make a budget's worth of ghosts cost real memory).
const GHOST_HEADER_SHARE: u64 = 32;

/// Whose read count a block carries: its page's, or (a block with no known page) its own.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(crate) enum Ident {
    Page(PageId),
    Block(BlockKey),
}

impl Ident {
    pub(crate) fn of(key: BlockKey, page: Option<PageId>) -> Ident {
        page.map_or(Ident::Block(key), Ident::Page)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Region {
    Window,
    /// The main area, in the list of this read count.
    Main(u8),
}

pub(crate) struct Entry {
    pub(crate) bytes: Arc<[u8]>,
    /// What the budget charges for `bytes` (`memory::charged_bytes`) and the entry's
    /// bookkeeping (`DATA_HEADER_BYTES`), fixed at insert.
    pub(crate) charge: u64,
    pub(crate) lsize: u32,
    ident: Ident,
    region: Region,
    /// Read ahead and not yet asked for.
    pub(crate) prefetched: bool,
}

/// What a lookup found.
pub(crate) enum Found {
    /// Cached; `window` says where (for the recency/frequency hit counters), `prefetched`
    /// that this was the first demand read of a read-ahead block.
    Hit {
        bytes: Arc<[u8]>,
        window: bool,
        prefetched: bool,
    },
    Miss,
}

/// What a call evicted (for the counters).
#[derive(Default, Debug, Clone, Copy)]
pub(crate) struct Evicted {
    pub(crate) blocks: u64,
    pub(crate) unread_prefetch: u64,
}

impl std::ops::AddAssign for Evicted {
    fn add_assign(&mut self, o: Evicted) {
        self.blocks += o.blocks;
        self.unread_prefetch += o.unread_prefetch;
    }
}

/// Ghost-hit counts, for the counters.
#[derive(Default, Debug, Clone, Copy)]
pub(crate) struct GhostHits {
    pub(crate) window: u64,
    pub(crate) main: u64,
}

#[derive(Default)]
pub(crate) struct DataCache {
    /// Bytes the data may use (the cache's budget less what metadata holds).
    budget: u64,
    /// The window's target share in bytes (adaptive).
    window_target: u64,
    entries: Map<BlockKey, Entry>,
    /// The cached version of each page (a write of the page replaces it in place).
    pages: Map<PageId, BlockKey>,
    window: LinkedMap<BlockKey, ()>,
    main: [LinkedMap<BlockKey, ()>; MAX_FREQ as usize + 1],
    pub(crate) window_bytes: u64,
    pub(crate) main_bytes: u64,
    pub(crate) logical_bytes: u64,
    /// Read counts of pages, cached or not (sized by the cache's `arc_max`).
    sketch: FrequencySketch,
    reads_since_aging: u64,
    /// Pages the window let go without admitting them, and pages main evicted, with
    /// their sizes.
    window_ghosts: LinkedMap<Ident, u64>,
    main_ghosts: LinkedMap<Ident, u64>,
    window_ghost_bytes: u64,
    main_ghost_bytes: u64,
    /// Read-ahead blocks evicted before anyone read them.
    unread_evicted: LinkedMap<BlockKey, ()>,
    /// Blocks that left since the tables were last looked at for compaction
    /// (`maybe_compact`).
    left_since_compact: usize,
    pub(crate) ghost_hits: GhostHits,
    /// Where evicted blocks are offered (the L2ARC's feed).
    sink: SinkSlot,
}

impl DataCache {
    /// A data cache within `budget`, its read counts sized for it.
    pub(crate) fn new(budget: u64, sink: SinkSlot) -> DataCache {
        DataCache::with_sketch(budget, sink, FrequencySketch::with_budget(budget))
    }

    /// A data cache that holds nothing and counts nothing (`DataPolicy::Arc`: the ARC
    /// lists keep the data).
    pub(crate) fn unused(sink: SinkSlot) -> DataCache {
        DataCache::with_sketch(0, sink, FrequencySketch::default())
    }

    fn with_sketch(budget: u64, sink: SinkSlot, sketch: FrequencySketch) -> DataCache {
        let mut d = DataCache { sink, sketch, ..DataCache::default() };
        d.set_budget(budget);
        d.window_target = d.window_min();
        d
    }

    fn window_min(&self) -> u64 {
        (self.budget * WINDOW_MIN_PER_MILLE / 1000).max(1)
    }

    fn window_max(&self) -> u64 {
        self.budget * WINDOW_MAX_PER_MILLE / 1000
    }

    /// Everything the policy holds within its budget: its blocks and their headers (each
    /// entry is charged both, so the window's and main's shares count them too).
    pub(crate) fn bytes(&self) -> u64 {
        self.window_bytes + self.main_bytes
    }

    /// The headers' part of `bytes` (`DATA_HEADER_BYTES` a cached block).
    pub(crate) fn header_bytes(&self) -> u64 {
        self.entries.len() as u64 * DATA_HEADER_BYTES
    }

    /// The blocks' part of `bytes`.
    pub(crate) fn block_bytes(&self) -> u64 {
        self.bytes() - self.header_bytes()
    }

    /// The read counts' memory: fixed by `arc_max`, held within the budget beside the
    /// data (`Inner::beside_data`).
    pub(crate) fn sketch_bytes(&self) -> u64 {
        self.sketch.bytes()
    }

    /// Sizes the read counts for a new `arc_max` (a new size starts them at zero, and main
    /// is filed again by them; the same size keeps them). A cache that counts nothing
    /// (`unused`) stays so.
    pub(crate) fn size_sketch(&mut self, arc_max: u64) {
        if self.sketch.bytes() > 0 && !self.sketch.sized_for(arc_max) {
            self.sketch = FrequencySketch::with_budget(arc_max);
            self.reads_since_aging = 0;
            self.refile_main();
        }
    }

    pub(crate) fn blocks(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn window_target(&self) -> u64 {
        self.window_target
    }

    pub(crate) fn ghost_bytes(&self) -> (u64, u64) {
        (self.window_ghost_bytes, self.main_ghost_bytes)
    }

    pub(crate) fn contains(&self, key: &BlockKey) -> bool {
        self.entries.contains_key(key)
    }

    /// Read ahead and evicted unread (remembered for a while).
    pub(crate) fn evicted_unread(&self, key: &BlockKey) -> bool {
        self.unread_evicted.contains_key(key)
    }

    /// Sets the bytes data may use; evicts at once to fit.
    pub(crate) fn set_budget(&mut self, budget: u64) -> Evicted {
        self.budget = budget;
        self.window_target = self.window_target.clamp(self.window_min(), self.window_max().max(self.window_min()));
        let mut ev = Evicted::default();
        while self.bytes() > self.budget {
            ev += self.evict_one();
        }
        // The ghosts' bound follows the budget down.
        eviction::trim_ghosts(&mut self.window_ghosts, &mut self.window_ghost_bytes, budget);
        eviction::trim_ghosts(&mut self.main_ghosts, &mut self.main_ghost_bytes, budget);
        self.maybe_compact();
        ev
    }

    /// A read of `key` (page `page`): the cached bytes, if any. A demand read counts
    /// toward its page's frequency (hit or miss), and a miss on a ghost steers the window.
    pub(crate) fn get(&mut self, key: &BlockKey, page: Option<PageId>, demand: bool) -> Found {
        let ident = Ident::of(*key, page);
        let count = demand.then(|| self.count_read(ident));
        let Some(e) = self.entries.get_mut(key) else {
            if demand {
                self.steer_window(ident);
            }
            return Found::Miss;
        };
        let bytes = e.bytes.clone();
        let window = e.region == Region::Window;
        let prefetched = demand && std::mem::take(&mut e.prefetched);
        let own = e.ident;
        if let Some(count) = count {
            // The entry's own page, which the read may name differently (a clone's or
            // snapshot's objset reading a shared block, a page unknown at insert).
            let count = if own == ident { count } else { self.freq(own) };
            self.touch(key, count);
        }
        Found::Hit { bytes, window, prefetched }
    }

    /// Caches a block read from the devices (after `get` missed), just written, or read
    /// ahead of demand (`prefetched`: it waits in the window like a first read, and its
    /// first demand read is not a second access). The block takes the place (area and
    /// rank) of its page's older version if that is cached, else it enters the window.
    pub(crate) fn insert(
        &mut self,
        key: BlockKey,
        bytes: Arc<[u8]>,
        lsize: u32,
        page: Option<PageId>,
        prefetched: bool,
    ) -> Evicted {
        let size = charged_bytes(bytes.len()) + DATA_HEADER_BYTES;
        if size > self.budget || self.entries.contains_key(&key) {
            return Evicted::default();
        }
        let ident = Ident::of(key, page);
        // An older version of the page gives its place to this one.
        let region = match page.and_then(|p| self.pages.get(&p).copied()) {
            Some(old) => self.take(&old).map_or(Region::Window, |e| e.region),
            None => Region::Window,
        };
        let region = match region {
            Region::Main(_) => Region::Main(self.freq(ident)),
            Region::Window => Region::Window,
        };
        self.place(key, Entry { bytes, charge: size, lsize, ident, region, prefetched });
        let ev = self.balance();
        self.maybe_compact();
        ev
    }

    /// Forgets a block whose space was freed.
    pub(crate) fn remove(&mut self, key: &BlockKey) {
        self.take(key);
        self.maybe_compact();
    }

    /// Looks at the tables once as many blocks have left as are cached (at least
    /// `COMPACT_EVERY_MIN`): amortized, a few comparisons per block that left.
    fn maybe_compact(&mut self) {
        if self.left_since_compact >= self.entries.len().max(COMPACT_EVERY_MIN) {
            self.compact();
        }
    }

    /// Gives back the room of every table the cached blocks no longer fill (after a
    /// shrink, or when small blocks gave way to large ones): entries, lists and ghosts
    /// whose blocks left keep no memory (issue #11).
    pub(crate) fn compact(&mut self) {
        self.compact_by(|t| compact(t));
    }

    /// After a shrink of the budget: every table gives back its room beyond its entries
    /// (`compact_tight`), not only those left mostly empty.
    pub(crate) fn compact_after_shrink(&mut self) {
        self.compact_by(|t| compact_tight(t));
    }

    fn compact_by(&mut self, rule: Rule) {
        self.left_since_compact = 0;
        rule(&mut self.entries);
        rule(&mut self.pages);
        rule(&mut self.window);
        for list in &mut self.main {
            rule(list);
        }
        rule(&mut self.window_ghosts);
        rule(&mut self.main_ghosts);
        rule(&mut self.unread_evicted);
    }
}

#[cfg(test)]
mod tests;

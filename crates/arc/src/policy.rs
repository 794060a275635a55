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
//! Counts halve every `AGE_READS_PER_ENTRY` reads per cached block, so yesterday's hot set
//! fades. Nothing to tune.
//!
//! Owns: the data blocks' window, main area (one LRU per read count), ghosts, page
//! history and the window's adaptive share.
//!
//! Promises: the resident bytes never exceed the budget after any call returns; a block
//! is keyed by its physical identity, so a rewritten page never serves a stale version
//! (the page index only decides placement); the history and ghosts are bounded by the
//! number of cached blocks.
//!
//! Must never: touch metadata (the ARC lists own it), hold bytes that were not verified
//! (callers insert verified bytes only), or be needed for correctness.
use std::collections::HashMap;
use std::mem::size_of;
use std::sync::Arc;

use hashlink::LinkedHashMap;

use crate::memory::charged_bytes;
use crate::sink::SinkSlot;
use crate::{BlockKey, Class, PageId};

/// Read counts saturate here (one main-area list per count).
const MAX_FREQ: u8 = 15;
/// A window ghost hit grows the window only for a page read at most this many times
/// (this read included): a page the reader comes back to once more.
const RECENCY_READS_MAX: u8 = 2;
/// The window's share of the budget: at least 1% (TinyLFU's default), at most nearly all
/// (a workload only recency serves makes the cache an LRU).
const WINDOW_MIN_PER_MILLE: u64 = 10;
const WINDOW_MAX_PER_MILLE: u64 = 990;
/// Page histories remembered per cached block (a page read once, evicted and read again
/// must still be known).
const HISTORY_PER_ENTRY: usize = 4;
/// Histories are kept for at least this many pages, however small the cache.
const HISTORY_MIN: usize = 4096;
/// Every this many demand reads per cached block, all read counts halve.
const AGE_READS_PER_ENTRY: u64 = 16;
/// Read-ahead blocks evicted unread that are remembered (for read-ahead's judgement).
const UNREAD_REMEMBERED: usize = 4096;
/// Bytes a remembered page (a ghost) takes: its list node, links and table slot.
const REMEMBERED_BYTES: u64 = (size_of::<Ident>() + 8 + 2 * 8 + 8 + 16) as u64;
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
    /// What the budget charges for `bytes` (`memory::charged_bytes`), fixed at insert.
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
    entries: HashMap<BlockKey, Entry>,
    /// The cached version of each page (a write of the page replaces it in place).
    pages: HashMap<PageId, BlockKey>,
    window: LinkedHashMap<BlockKey, ()>,
    main: [LinkedHashMap<BlockKey, ()>; MAX_FREQ as usize + 1],
    pub(crate) window_bytes: u64,
    pub(crate) main_bytes: u64,
    pub(crate) logical_bytes: u64,
    /// Read counts of pages (cached or not), least recently read first.
    history: LinkedHashMap<Ident, u8>,
    reads_since_aging: u64,
    /// Pages the window let go without admitting them, and pages main evicted, with
    /// their sizes.
    window_ghosts: LinkedHashMap<Ident, u64>,
    main_ghosts: LinkedHashMap<Ident, u64>,
    window_ghost_bytes: u64,
    main_ghost_bytes: u64,
    /// Read-ahead blocks evicted before anyone read them.
    unread_evicted: LinkedHashMap<BlockKey, ()>,
    pub(crate) ghost_hits: GhostHits,
    /// Where evicted blocks are offered (the L2ARC's feed).
    sink: SinkSlot,
}

impl DataCache {
    pub(crate) fn new(budget: u64, sink: SinkSlot) -> DataCache {
        let mut d = DataCache { sink, ..DataCache::default() };
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

    pub(crate) fn bytes(&self) -> u64 {
        self.window_bytes + self.main_bytes
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
        trim_ghosts(&mut self.window_ghosts, &mut self.window_ghost_bytes, budget);
        trim_ghosts(&mut self.main_ghosts, &mut self.main_ghost_bytes, budget);
        ev
    }

    /// A read of `key` (page `page`): the cached bytes, if any. A demand read counts
    /// toward its page's frequency (hit or miss), and a miss on a ghost steers the window.
    pub(crate) fn get(&mut self, key: &BlockKey, page: Option<PageId>, demand: bool) -> Found {
        let ident = Ident::of(*key, page);
        if demand {
            self.count_read(ident);
        }
        let Some(e) = self.entries.get_mut(key) else {
            if demand {
                self.steer_window(ident);
            }
            return Found::Miss;
        };
        let bytes = e.bytes.clone();
        let window = e.region == Region::Window;
        let prefetched = demand && std::mem::take(&mut e.prefetched);
        if demand {
            self.touch(key);
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
        let size = charged_bytes(bytes.len());
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
        self.balance()
    }

    /// Forgets a block whose space was freed.
    pub(crate) fn remove(&mut self, key: &BlockKey) {
        self.take(key);
    }

    /// A page's read count.
    fn freq(&self, ident: Ident) -> u8 {
        self.history.get(&ident).copied().unwrap_or(0)
    }

    fn count_read(&mut self, ident: Ident) {
        let f = self.history.remove(&ident).unwrap_or(0);
        self.history.insert(ident, (f + 1).min(MAX_FREQ));
        let limit = (self.entries.len() * HISTORY_PER_ENTRY).max(HISTORY_MIN);
        while self.history.len() > limit {
            self.history.pop_front();
        }
        self.reads_since_aging += 1;
        if self.reads_since_aging >= AGE_READS_PER_ENTRY * (self.entries.len().max(HISTORY_MIN) as u64) {
            self.age();
        }
    }

    /// Halves every read count (the main area's lists follow).
    fn age(&mut self) {
        self.reads_since_aging = 0;
        for f in self.history.values_mut() {
            *f /= 2;
        }
        let keys: Vec<BlockKey> = self.main.iter().flat_map(|l| l.keys().copied()).collect();
        for key in keys {
            let Some(e) = self.entries.get(&key) else { continue };
            let (ident, Region::Main(old)) = (e.ident, e.region) else { continue };
            let new = self.freq(ident);
            if new != old {
                self.main[old as usize].remove(&key);
                self.main[new as usize].insert(key, ());
                self.entries.get_mut(&key).expect("just seen").region = Region::Main(new);
            }
        }
    }

    /// A demand miss on a page the window let go says the window is too small (if the
    /// page is recency's: read at most `RECENCY_READS_MAX` times); on a page main evicted,
    /// that main is.
    fn steer_window(&mut self, ident: Ident) {
        if let Some(size) = self.window_ghosts.remove(&ident) {
            self.window_ghost_bytes -= size;
            if self.freq(ident) <= RECENCY_READS_MAX {
                let step = size * (self.main_ghost_bytes / self.window_ghost_bytes.max(1)).max(1);
                self.window_target = (self.window_target + step).min(self.window_max().max(self.window_min()));
            }
            self.ghost_hits.window += 1;
        } else if let Some(size) = self.main_ghosts.remove(&ident) {
            self.main_ghost_bytes -= size;
            let step = size * (self.window_ghost_bytes / self.main_ghost_bytes.max(1)).max(1);
            self.window_target = self.window_target.saturating_sub(step).max(self.window_min());
            self.ghost_hits.main += 1;
        }
    }

    /// A demand hit: to the window's MRU end, or up one list in main.
    fn touch(&mut self, key: &BlockKey) {
        let e = self.entries.get_mut(key).expect("touched entries exist");
        match e.region {
            Region::Window => {
                self.window.to_back(key);
            }
            Region::Main(old) => {
                let new = self.history.get(&e.ident).copied().unwrap_or(0);
                e.region = Region::Main(new);
                self.main[old as usize].remove(key);
                self.main[new as usize].insert(*key, ());
            }
        }
    }

    fn place(&mut self, key: BlockKey, e: Entry) {
        let size = e.charge;
        match e.region {
            Region::Window => {
                self.window.insert(key, ());
                self.window_bytes += size;
            }
            Region::Main(f) => {
                self.main[f as usize].insert(key, ());
                self.main_bytes += size;
            }
        }
        if let Ident::Page(p) = e.ident {
            self.pages.insert(p, key);
        }
        self.logical_bytes += e.lsize as u64;
        self.entries.insert(key, e);
    }

    /// Removes a block from wherever it is.
    fn take(&mut self, key: &BlockKey) -> Option<Entry> {
        let e = self.entries.remove(key)?;
        let size = e.charge;
        match e.region {
            Region::Window => {
                self.window.remove(key);
                self.window_bytes -= size;
            }
            Region::Main(f) => {
                self.main[f as usize].remove(key);
                self.main_bytes -= size;
            }
        }
        if let Ident::Page(p) = e.ident {
            if self.pages.get(&p) == Some(key) {
                self.pages.remove(&p);
            }
        }
        self.logical_bytes -= e.lsize as u64;
        Some(e)
    }

    /// The block main would evict next: the least read page, least recently read first.
    fn main_victim(&self) -> Option<BlockKey> {
        self.main.iter().find_map(|l| l.front().map(|(k, _)| *k))
    }

    /// Moves blocks out of the window (admitting or dropping them) until it is within its
    /// share, then evicts from main until it is within the rest.
    fn balance(&mut self) -> Evicted {
        let mut ev = Evicted::default();
        while self.window_bytes > self.window_target {
            let Some((&candidate, _)) = self.window.front() else { break };
            ev += self.admit_or_drop(candidate);
        }
        // Main gives up what a grown window now claims.
        let main_room = self.budget.saturating_sub(self.window_target);
        while self.main_bytes > main_room {
            let Some(victim) = self.main_victim() else { break };
            let v = self.take(&victim).expect("victim exists");
            ev += self.drop_block(victim, v, true);
        }
        while self.bytes() > self.budget {
            ev += self.evict_one();
        }
        debug_assert!(self.bytes() <= self.budget, "data over its budget");
        ev
    }

    /// The window's oldest block goes to main if its page is read more often than what
    /// main would evict for it; else it leaves the cache.
    fn admit_or_drop(&mut self, candidate: BlockKey) -> Evicted {
        let mut ev = Evicted::default();
        let e = self.take(&candidate).expect("window blocks exist");
        let size = e.charge;
        let freq = self.freq(e.ident);
        let main_room = self.budget.saturating_sub(self.window_target);
        while self.main_bytes + size > main_room {
            let Some(victim) = self.main_victim() else { break };
            let victim_freq = match self.entries[&victim].region {
                Region::Main(f) => f,
                Region::Window => unreachable!("main lists hold main blocks"),
            };
            // Ties keep the incumbent: a scan of pages read once cannot flush pages read
            // once before them.
            if freq <= victim_freq {
                ev += self.drop_block(candidate, e, false);
                return ev;
            }
            let v = self.take(&victim).expect("victim exists");
            ev += self.drop_block(victim, v, true);
        }
        if self.main_bytes + size > main_room {
            ev += self.drop_block(candidate, e, false);
            return ev;
        }
        self.place(candidate, Entry { region: Region::Main(freq), ..e });
        ev
    }

    /// Evicts one block: from main first, the window when main is empty.
    fn evict_one(&mut self) -> Evicted {
        if let Some(victim) = self.main_victim() {
            let v = self.take(&victim).expect("victim exists");
            return self.drop_block(victim, v, true);
        }
        match self.window.front().map(|(k, _)| *k) {
            Some(oldest) => {
                let e = self.take(&oldest).expect("window blocks exist");
                self.drop_block(oldest, e, false)
            }
            None => Evicted::default(),
        }
    }

    /// A block leaves the cache; its page is remembered as a ghost of where it was.
    fn drop_block(&mut self, key: BlockKey, e: Entry, from_main: bool) -> Evicted {
        let size = e.charge;
        let objset = match e.ident {
            Ident::Page(page) => Some(page.objset),
            Ident::Block(_) => None,
        };
        self.sink.offer(key, &e.bytes, e.lsize, Class::Data, e.prefetched, objset);
        // A page never read has no evidence to leave (see the module's comment).
        if self.freq(e.ident) > 0 {
            let (ghosts, bytes) = if from_main {
                (&mut self.main_ghosts, &mut self.main_ghost_bytes)
            } else {
                (&mut self.window_ghosts, &mut self.window_ghost_bytes)
            };
            if let Some(old) = ghosts.insert(e.ident, size) {
                *bytes -= old;
            }
            *bytes += size;
            trim_ghosts(ghosts, bytes, self.budget);
        }
        if e.prefetched {
            self.unread_evicted.insert(key, ());
            while self.unread_evicted.len() > UNREAD_REMEMBERED {
                self.unread_evicted.pop_front();
            }
        }
        Evicted { blocks: 1, unread_prefetch: e.prefetched as u64 }
    }
}

/// Forgets the oldest ghosts until they describe at most `budget` bytes and their
/// bookkeeping takes at most 1/`GHOST_HEADER_SHARE` of it.
fn trim_ghosts(ghosts: &mut LinkedHashMap<Ident, u64>, bytes: &mut u64, budget: u64) {
    let ghost_max = budget / GHOST_HEADER_SHARE;
    while *bytes > budget || ghosts.len() as u64 * REMEMBERED_BYTES > ghost_max {
        let Some((_, s)) = ghosts.pop_front() else { break };
        *bytes -= s;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u64, v: u64) -> BlockKey {
        BlockKey { vdev: 0, offset: n << 20 | v, birth: v }
    }

    fn page(n: u64) -> PageId {
        PageId { objset: 1, object: 2, blkid: n }
    }

    fn bytes(size: usize) -> Arc<[u8]> {
        Arc::from(vec![0u8; size])
    }

    impl DataCache {
        /// Every count agrees with the blocks themselves.
        fn check(&self) {
            let window: u64 = self.window.keys().map(|k| self.entries[k].charge).sum();
            let main: u64 = self.main.iter().flat_map(|l| l.keys()).map(|k| self.entries[k].charge).sum();
            assert_eq!((window, main), (self.window_bytes, self.main_bytes));
            let listed = self.window.len() + self.main.iter().map(|l| l.len()).sum::<usize>();
            assert_eq!(listed, self.entries.len(), "every block is in exactly one list");
            for (k, e) in &self.entries {
                match e.region {
                    Region::Window => assert!(self.window.contains_key(k)),
                    Region::Main(f) => assert!(self.main[f as usize].contains_key(k)),
                }
            }
            for (p, k) in &self.pages {
                assert_eq!(self.entries[k].ident, Ident::Page(*p), "the page index points at the page's block");
            }
            assert!(self.bytes() <= self.budget, "{} over the budget {}", self.bytes(), self.budget);
            assert!(self.window_ghost_bytes <= self.budget && self.main_ghost_bytes <= self.budget);
            assert!(self.history.len() <= (self.entries.len() * HISTORY_PER_ENTRY).max(HISTORY_MIN));
        }
    }

    #[test]
    fn random_reads_writes_frees_and_budget_changes_keep_every_count_right() {
        let mut d = DataCache::new(200 * 4096, SinkSlot::default());
        let mut version = [0u64; 600];
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for step in 0..60_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let n = if x.is_multiple_of(3) { (x >> 8) % 40 } else { (x >> 8) % 600 };
            let size = 1000 + ((x >> 20) % 7000) as usize;
            let v = version[n as usize];
            match (x >> 40) % 10 {
                0..=5 => {
                    if let Found::Miss = d.get(&key(n, v), Some(page(n)), true) {
                        d.insert(key(n, v), bytes(size), 16384, Some(page(n)), false);
                    }
                }
                6 | 7 => {
                    // Rewritten: the new version is cached, the old one freed.
                    version[n as usize] += 1;
                    d.insert(key(n, v + 1), bytes(size), 16384, Some(page(n)), false);
                    d.remove(&key(n, v));
                    assert!(!d.contains(&key(n, v)));
                }
                8 => {
                    d.insert(key(n, v), bytes(size), 16384, Some(page(n)), true);
                }
                _ => {
                    if step % 1000 == 0 {
                        d.set_budget(100 * 4096 + (x >> 30) % (300 * 4096));
                    }
                }
            }
            d.check();
        }
    }

    #[test]
    fn a_written_page_takes_its_older_versions_place_and_rank() {
        let mut d = DataCache::new(100 * 4096, SinkSlot::default());
        for _ in 0..5 {
            for n in 0..10 {
                if let Found::Miss = d.get(&key(n, 0), Some(page(n)), true) {
                    d.insert(key(n, 0), bytes(4096), 16384, Some(page(n)), false);
                }
            }
        }
        // Push the first pages out of the window into main with enough traffic.
        for n in 100..200 {
            if let Found::Miss = d.get(&key(n, 0), Some(page(n)), true) {
                d.insert(key(n, 0), bytes(4096), 16384, Some(page(n)), false);
            }
        }
        let before = d.entries[&key(3, 0)].region;
        assert!(matches!(before, Region::Main(f) if f >= 5), "{before:?}");
        d.insert(key(3, 1), bytes(4096), 16384, Some(page(3)), false);
        assert!(!d.contains(&key(3, 0)), "the old version is replaced");
        assert_eq!(d.entries[&key(3, 1)].region, before);
        d.check();
    }

    #[test]
    fn counts_halve_with_age_so_an_old_hot_set_can_be_replaced() {
        let mut d = DataCache::new(50 * 4096, SinkSlot::default());
        let read = |d: &mut DataCache, n: u64| {
            if let Found::Miss = d.get(&key(n, 0), Some(page(n)), true) {
                d.insert(key(n, 0), bytes(4096), 16384, Some(page(n)), false);
                false
            } else {
                true
            }
        };
        for _ in 0..MAX_FREQ as u64 {
            for n in 0..40 {
                read(&mut d, n);
            }
        }
        // A new hot set, read over and over: once counts have aged it takes over.
        let mut hits = 0;
        for round in 0..20_000u64 {
            hits += read(&mut d, 1000 + round % 40) as u64;
        }
        assert!(hits > 15_000, "the new hot set is cached: {hits}");
        assert!((0..40).filter(|&n| d.contains(&key(n, 0))).count() < 10);
        d.check();
    }
}

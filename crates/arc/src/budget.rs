//! The budget: what `arc_max` covers and how it is shared.
//!
//! Owns: `Inner` (everything behind the cache's one lock: the ARC lists and the data
//! policy), the split of the budget between them (data gets what the rest leaves), making
//! room for an insert, and the memory the budget covers beside cached blocks (the hot
//! copies as they grow, decoded indirect blocks and objects: `charge`; the txgs' dirty
//! data: `set_dirty`).
//!
//! Promises: after an insert, a charge or a shrink (`set_max`) returns, the blocks,
//! headers, hot copies and decoded metadata fit `arc_max` (unless the objects' owner's
//! pinned ones alone are over it); metadata is evicted last while all of it is under
//! its limit (`Lists::meta_limit`, 75 %).
//!
//! Must never: evict outside the cache's lock, or let data keep a budget the rest has
//! taken back (issue #11).
use std::sync::atomic::Ordering;

use crate::lists::Lists;
use crate::policy::{DataCache, Evicted};
use crate::ArcCache;

/// Decoded indirect blocks (`keep_decoded`) may take this fraction of the budget.
pub const DECODED_SHARE: u64 = 8;
/// Decoded objects (`charge`) should stay under this fraction of the budget; their owner
/// evicts clean ones beyond it (`objects_over_share`).
pub const OBJECTS_SHARE: u64 = 8;

/// Memory the budget covers that is not a cached block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outside {
    /// Decoded objects (dnodes in memory, directory entries, their block-tree maps).
    Objects,
}

/// Which policy keeps file data (metadata always lives in the ARC lists).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DataPolicy {
    /// A window and a frequency-admitted main area, counted per page (`policy/`): the
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
/// the hot copies, decoded metadata). Metadata is preferred as ZFS's
/// arc_meta_limit says: while all metadata is under `meta_limit`, room for it is taken
/// from data first; beyond it, metadata makes room from its own lists. Data gets what is
/// left (`rebudget_data`).
pub(crate) struct Inner {
    /// The ARC lists: metadata, and data too under `DataPolicy::Arc`.
    pub(crate) lists: Lists,
    /// Data under `DataPolicy::SecondLevel`; its budget is what the rest leaves.
    pub(crate) data: DataCache,
    pub(crate) policy: DataPolicy,
}

impl Inner {
    fn lists_bytes(&self) -> u64 {
        self.lists.t1_bytes + self.lists.t2_bytes
    }

    /// What the data policy holds within the budget: its blocks and their bookkeeping
    /// (`policy::DATA_HEADER_BYTES` a block), and its read counts.
    fn data_held(&self) -> u64 {
        self.data.bytes() + self.data.sketch_bytes()
    }

    /// Everything but the data policy's blocks: the lists' blocks and headers, the dirty
    /// data, the data policy's read counts (fixed by `arc_max`) and `outside` (decoded
    /// metadata, hot copies).
    fn beside_data(&self, outside: u64) -> u64 {
        self.lists_bytes() + self.lists.headers() + self.lists.dirty + self.data.sketch_bytes() + outside
    }

    /// Gives data what the rest leaves of the budget (less `incoming` bytes about to be
    /// added beside it); evicts data to fit.
    pub(crate) fn rebudget_data(&mut self, outside: u64, incoming: u64) -> Evicted {
        let budget = match self.policy {
            DataPolicy::SecondLevel => {
                let rest = self.beside_data(outside) + incoming;
                self.lists.c.saturating_sub(rest)
            }
            DataPolicy::Arc => 0,
        };
        self.data.set_budget(budget)
    }

    /// Makes room for `incoming` bytes of the lists (0: fits the budget again): a block
    /// and, for a new entry, its header. Data gives way first while metadata is under its
    /// limit; beyond it the lists evict first, and data gives what they could not.
    pub(crate) fn make_room(&mut self, incoming: u64, after_b2_hit: bool, outside: u64) -> Evicted {
        let mut ev = Evicted::default();
        let keep_meta = self.lists.metadata_bytes + outside + incoming <= self.lists.meta_limit();
        if keep_meta {
            ev += self.rebudget_data(outside, incoming);
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
    pub(crate) fn room_for_data(&mut self, incoming: u64, outside: u64) -> Evicted {
        let held = self.data_held() + incoming;
        let mut ev = Evicted::default();
        ev.blocks += self.lists.evict_until(false, outside, |l| {
            l.metadata_bytes + outside <= l.meta_limit()
                || l.t1_bytes + l.t2_bytes + l.headers() + l.dirty + outside + held <= l.c
        });
        ev += self.rebudget_data(outside, 0);
        ev
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.lists_bytes() + self.data.bytes()
    }
}

impl ArcCache {
    /// Bytes held outside the lists that the budget covers (decoded metadata, the hot
    /// copies as they are now).
    pub(crate) fn outside(&self) -> u64 {
        self.decoded_bytes.load(Ordering::Relaxed)
            + self.objects_bytes.load(Ordering::Relaxed)
            + self.hot_bytes.load(Ordering::Relaxed)
    }

    /// Changes the budget at run time; shrinking evicts at once (decoded indirect blocks
    /// too; the objects' owner trims its own, see `objects_over_share`).
    pub fn set_max(&self, bytes: u64) {
        let shrink = bytes < self.max_bytes.load(Ordering::Relaxed);
        {
            let mut g = self.inner.lock();
            g.lists.c = bytes;
            g.lists.p = g.lists.p.min(bytes);
            g.data.size_sketch(bytes);
            self.max_bytes.store(bytes, Ordering::Relaxed);
        }
        let dropped = self.decoded.lock().evict_to(bytes / DECODED_SHARE, &self.decoded_bytes);
        drop(dropped);
        self.evict_to_budget();
        // What left the lists and the data policy leaves no room behind in their tables
        // (a shrink is rare: the rehash is not on any I/O path).
        if shrink {
            let mut g = self.inner.lock();
            g.lists.compact(|t| crate::compact::compact_tight(t));
            g.data.compact_after_shrink();
        }
    }

    /// Evicts blocks until everything the budget covers fits in it (after the hot copies
    /// grew: `HotCopies::insert` returns true).
    pub fn evict_to_budget(&self) {
        let outside = self.outside();
        let mut g = self.inner.lock();
        let ev = g.make_room(0, false, outside);
        g.lists.trim_ghosts();
        drop(g);
        self.count_evicted(ev);
    }

    /// The txgs' dirty data (open + syncing) is now `bytes`: it is held inside the budget,
    /// so when it grew, cached blocks are evicted to make room for it (ZFS counts anonymous
    /// dirty buffers in arc_size). The write throttle's `dirty_max` remains the limit on
    /// dirty data itself; this never waits. Told by the txg engine's dirty observer on each
    /// change of a percent of `dirty_max` — never on the read path or in an fsync.
    pub fn set_dirty(&self, bytes: u64) {
        let outside = self.outside();
        let mut g = self.inner.lock();
        let grew = bytes > g.lists.dirty;
        g.lists.dirty = bytes;
        if !grew {
            return;
        }
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

    pub(crate) fn count_evicted(&self, ev: Evicted) {
        self.counters.evictions.fetch_add(ev.blocks, Ordering::Relaxed);
        self.counters.prefetch_evicted_unread.fetch_add(ev.unread_prefetch, Ordering::Relaxed);
    }
}

//! The ARC lists: T1 (seen once, recently), T2 (seen at least twice), their ghosts B1/B2
//! (keys only, of blocks recently evicted from T1/T2) and the target `p` for T1's share,
//! which ghost hits steer.
//!
//! Owns: the lists' entries and byte counts (by list, by class), the ghosts, the order in
//! which blocks are evicted (T1 over its target first, data before metadata while
//! metadata is under its limit) and the bookkeeping bytes every entry and ghost costs.
//!
//! Promises: every count matches the lists after any method returns; each evicted block
//! is offered to the sink once, then remembered as a ghost; the ghosts stay within `c`
//! bytes each side, `2c` in all, and 1/`GHOST_HEADER_SHARE` of the budget in headers.
//!
//! Must never: decide the budget's split with the data policy (`budget` does), or hold a
//! block the caller did not verify.
use std::sync::Arc;

use crate::lookup::Hit;
use crate::memory::charged_bytes;
use crate::sink::SinkSlot;
use crate::{BlockKey, Class, LinkedMap};

/// A cached block in T1 or T2.
pub(crate) struct Entry {
    pub(crate) bytes: Arc<[u8]>,
    /// What the budget charges for `bytes`: the allocator's slot (`memory::charged_bytes`),
    /// fixed when the entry is made so that adding and removing it always agree.
    pub(crate) charge: u64,
    pub(crate) lsize: u32,
    pub(crate) class: Class,
    /// Read ahead and not yet asked for: its first demand read is not a second access.
    pub(crate) prefetched: bool,
    /// The dataset it belongs to (`NO_OBJSET`: the pool's, or not known), for the
    /// L2ARC's `secondarycache` when it leaves. A word, not an `Option` (16 bytes).
    objset: u64,
}

/// `Entry::objset` of a block of no known dataset.
const NO_OBJSET: u64 = u64::MAX;

impl Entry {
    pub(crate) fn new(bytes: Arc<[u8]>, lsize: u32, class: Class, prefetched: bool, objset: Option<u64>) -> Entry {
        let objset = objset.unwrap_or(NO_OBJSET);
        Entry { charge: charged_bytes(bytes.len()), bytes, lsize, class, prefetched, objset }
    }

    pub(crate) fn objset(&self) -> Option<u64> {
        (self.objset != NO_OBJSET).then_some(self.objset)
    }
}

/// An evicted block the ghost lists remember: its size, and whether it was read ahead
/// and never asked for.
#[derive(Clone, Copy)]
pub(crate) struct Ghost {
    pub(crate) size: u64,
    pub(crate) unread_prefetch: bool,
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
/// Metadata is evicted last while all of it (blocks and decoded) is under this share (in
/// quarters) of the budget — ZFS's arc_meta_limit, 75 %.
const META_LIMIT_QUARTERS: u64 = 3;

/// Which ghost list remembered a block being inserted again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GhostHit {
    /// B1: recency was evicted too early.
    Recency,
    /// B2: frequency was evicted too early.
    Frequency,
}

#[derive(Default)]
pub(crate) struct Lists {
    pub(crate) t1: LinkedMap<BlockKey, Entry>,
    pub(crate) t2: LinkedMap<BlockKey, Entry>,
    pub(crate) b1: LinkedMap<BlockKey, Ghost>,
    pub(crate) b2: LinkedMap<BlockKey, Ghost>,
    pub(crate) t1_bytes: u64,
    pub(crate) t2_bytes: u64,
    pub(crate) b1_bytes: u64,
    pub(crate) b2_bytes: u64,
    /// Target bytes for T1.
    pub(crate) p: u64,
    /// The budget (arc_max).
    pub(crate) c: u64,
    pub(crate) logical_bytes: u64,
    pub(crate) data_bytes: u64,
    pub(crate) metadata_bytes: u64,
    /// Read-ahead blocks evicted unread.
    pub(crate) unread_prefetch_evictions: u64,
    /// Metadata bytes in T1 and T2 (the rest of each list is data).
    pub(crate) t1_meta: u64,
    pub(crate) t2_meta: u64,
    /// Dirty bytes of the open and syncing txgs (`ArcCache::set_dirty`): held inside the
    /// budget as ZFS's arc_size counts anonymous dirty buffers, so cached blocks make room
    /// for them and the DBA has one number.
    pub(crate) dirty: u64,
    /// Where evicted blocks are offered (the L2ARC's feed), if anywhere.
    pub(crate) sink: SinkSlot,
}

impl Lists {
    /// Counts `e` in (or out of) the class sizes and its list's metadata bytes.
    pub(crate) fn account(&mut self, e: &Entry, add: bool, in_t1: bool) {
        let size = e.charge;
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

    pub(crate) fn add_t1(&mut self, key: BlockKey, e: Entry) {
        self.t1_bytes += e.charge;
        self.account(&e, true, true);
        self.t1.insert(key, e);
    }

    pub(crate) fn add_t2(&mut self, key: BlockKey, e: Entry) {
        self.t2_bytes += e.charge;
        self.account(&e, true, false);
        self.t2.insert(key, e);
    }

    /// A read of `key`: its bytes, if cached. The first demand read of a read-ahead block
    /// leaves it in T1; any other hit in T1 moves it to T2; a hit in T2 makes it the most
    /// recent there.
    pub(crate) fn promote(&mut self, key: &BlockKey) -> Option<(Arc<[u8]>, Hit)> {
        if let Some(e) = self.t1.get_mut(key).filter(|e| e.prefetched) {
            // First demand read of a read-ahead block: it stays in the recency list.
            e.prefetched = false;
            let bytes = e.bytes.clone();
            self.t1.to_back(key);
            return Some((bytes, Hit::Prefetched));
        }
        if let Some(e) = self.t1.remove(key) {
            let bytes = e.bytes.clone();
            let size = e.charge;
            self.t1_bytes -= size;
            self.t2_bytes += size;
            if e.class == Class::Metadata {
                self.t1_meta -= size;
                self.t2_meta += size;
            }
            self.t2.insert(*key, e);
            return Some((bytes, Hit::Recency));
        }
        self.t2.to_back(key).map(|e| (e.bytes.clone(), Hit::Frequency))
    }

    /// Forgets `key`'s ghost, if it has one, and steers T1's target `p` by it for a block
    /// of `size` coming back.
    pub(crate) fn ghost_hit(&mut self, key: &BlockKey, size: u64) -> Option<GhostHit> {
        if let Some(ghost) = self.b1.remove(key) {
            // Recency was evicted too early: give T1 more room.
            self.b1_bytes -= ghost.size;
            let step = size * (self.b2_bytes / self.b1_bytes.max(1)).max(1);
            self.p = (self.p + step).min(self.c);
            Some(GhostHit::Recency)
        } else if let Some(ghost) = self.b2.remove(key) {
            // Frequency was evicted too early: give T2 more room.
            self.b2_bytes -= ghost.size;
            let step = size * (self.b1_bytes / self.b2_bytes.max(1)).max(1);
            self.p = self.p.saturating_sub(step);
            Some(GhostHit::Frequency)
        } else {
            None
        }
    }

    /// Forgets a block whose space was freed: its entry or its ghost.
    pub(crate) fn forget(&mut self, key: &BlockKey) {
        if let Some(e) = self.t1.remove(key) {
            self.t1_bytes -= e.charge;
            self.account(&e, false, true);
        } else if let Some(e) = self.t2.remove(key) {
            self.t2_bytes -= e.charge;
            self.account(&e, false, false);
        } else if let Some(g) = self.b1.remove(key) {
            self.b1_bytes -= g.size;
        } else if let Some(g) = self.b2.remove(key) {
            self.b2_bytes -= g.size;
        }
    }

    /// No block cached (ghosts may remain).
    pub(crate) fn is_empty(&self) -> bool {
        self.t1.is_empty() && self.t2.is_empty()
    }

    /// The bookkeeping bytes of the cached blocks and the ghosts.
    pub(crate) fn headers(&self) -> u64 {
        (self.t1.len() + self.t2.len()) as u64 * ENTRY_HEADER_BYTES
            + (self.b1.len() + self.b2.len()) as u64 * GHOST_HEADER_BYTES
    }

    pub(crate) fn meta_limit(&self) -> u64 {
        self.c / 4 * META_LIMIT_QUARTERS
    }

    /// Evicts until `incoming` more bytes fit beside the headers, the dirty data,
    /// `outside` (decoded metadata and hot copies) and `data` (what the data policy holds). Returns how
    /// many were evicted.
    pub(crate) fn make_room(&mut self, incoming: u64, after_b2_hit: bool, outside: u64, data: u64) -> u64 {
        self.evict_until(after_b2_hit, outside, |l| {
            l.t1_bytes + l.t2_bytes + l.headers() + l.dirty + outside + data + incoming <= l.c
        })
    }

    /// Evicts until `done` says so or the lists are empty: from T1 while it is over its
    /// target (or exactly at it after a B2 ghost hit), else from T2 — data first while
    /// metadata (with `outside`, the decoded metadata) is under its limit. Returns how many
    /// were evicted.
    pub(crate) fn evict_until(&mut self, after_b2_hit: bool, outside: u64, done: impl Fn(&Lists) -> bool) -> u64 {
        let mut n = 0;
        while !self.is_empty() && !done(self) {
            let from_t1 = !self.t1.is_empty()
                && (self.t1_bytes > self.p || (after_b2_hit && self.t1_bytes == self.p) || self.t2.is_empty());
            let keep_meta = self.metadata_bytes + outside <= self.meta_limit();
            let (from_t1, (key, e)) = self.pop_victim(from_t1, keep_meta);
            let size = e.charge;
            self.sink.offer(key, &e.bytes, e.lsize, e.class, e.prefetched, e.objset());
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

    /// Gives back the room of lists the budget no longer fills (after a shrink), by `rule`.
    pub(crate) fn compact(&mut self, rule: crate::compact::Rule) {
        for list in [&mut self.t1, &mut self.t2] {
            rule(list);
        }
        for ghosts in [&mut self.b1, &mut self.b2] {
            rule(ghosts);
        }
    }

    /// Ghosts remember at most `c` bytes each side: |T1|+|B1| <= c, total <= 2c; and their
    /// headers take at most 1/GHOST_HEADER_SHARE of the budget.
    pub(crate) fn trim_ghosts(&mut self) {
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

//! The read and insert paths: a lookup (promoting what it finds), inserts of blocks read,
//! written or read ahead, residency queries and forgetting a freed block.
//!
//! Owns: which part keeps a block (metadata in the ARC lists, file data in the data policy
//! unless `DataPolicy::Arc`), the hit/miss counting of each read, and the order of an
//! insert (steer by a ghost, make room, add, trim the ghosts, rebudget data).
//!
//! Promises: one lock taken per call; the cache is within its budget when an insert
//! returns (asserted); a block is found only by its identity (vdev, offset, birth).
//!
//! Must never: read a device or allocate on a hit beyond the `Arc` clone of the bytes.
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::lists::{Entry, GhostHit, ENTRY_HEADER_BYTES};
use crate::memory::charged_bytes;
use crate::policy::{DataCache, Evicted, Found};
use crate::{Access, ArcCache, BlockKey, Class, DataPolicy, PageId, ReadKind, Residency};

/// Where a lookup found a block, for the counters.
pub(crate) enum Hit {
    Recency,
    Frequency,
    /// The first demand read of a read-ahead block (in the recency list or window).
    Prefetched,
}

impl ArcCache {
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
        g.lists.promote(key)
    }

    /// Caches a block just read (and verified) from disk. File data read for a demand
    /// read enters the data policy; data read to be rewritten (read-modify-write, a log
    /// fetch) does not: its next version comes with the write.
    pub fn insert(&self, key: BlockKey, bytes: Arc<[u8]>, lsize: u32, class: Class, access: Access) {
        if !self.in_lists(class) {
            if !self.keeps(class, access.kind) {
                return;
            }
            let size = charged_bytes(bytes.len());
            self.insert_data(size, |d| d.insert(key, bytes, lsize, access.page, false), &key);
            self.counters.inserts.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.insert_entry(key, Entry::new(bytes, lsize, class, false, access.objset));
    }

    /// Caches a block just written (counts as neither a hit nor a miss). File data takes
    /// the place of its page's older version if that is cached.
    /// `objset`: the dataset the block belongs to (`page`'s for a record), if any.
    pub fn insert_written(
        &self,
        key: BlockKey,
        bytes: Arc<[u8]>,
        lsize: u32,
        class: Class,
        page: Option<PageId>,
        objset: Option<u64>,
    ) {
        if self.insert_unasked(key, bytes, lsize, class, page, objset, false) {
            self.counters.written_inserts.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Caches a block read ahead of demand (sequential prefetch).
    pub fn insert_prefetched(&self, key: BlockKey, bytes: Arc<[u8]>, lsize: u32, class: Class, page: Option<PageId>) {
        if self.insert_unasked(key, bytes, lsize, class, page, page.map(|p| p.objset), true) {
            self.counters.prefetch_inserts.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Caches a block no read asked for (written, or read ahead: `prefetched`) where its
    /// class lives. Returns whether it was added.
    #[allow(clippy::too_many_arguments)] // a block's identity, its bytes and how it came
    fn insert_unasked(
        &self,
        key: BlockKey,
        bytes: Arc<[u8]>,
        lsize: u32,
        class: Class,
        page: Option<PageId>,
        objset: Option<u64>,
        prefetched: bool,
    ) -> bool {
        if self.in_lists(class) {
            self.insert_entry(key, Entry::new(bytes, lsize, class, prefetched, objset))
        } else {
            let size = charged_bytes(bytes.len());
            self.insert_data(size, |d| d.insert(key, bytes, lsize, page, prefetched), &key)
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
        let size = entry.charge;
        let outside = self.outside();
        let mut g = self.inner.lock();
        let l = &mut g.lists;
        if size > l.c || l.t1.contains_key(&key) || l.t2.contains_key(&key) {
            return false;
        }
        let ghost = l.ghost_hit(&key, size);
        if let Some(hit) = ghost {
            let counter = match hit {
                GhostHit::Recency => &self.counters.ghost_b1_hits,
                GhostHit::Frequency => &self.counters.ghost_b2_hits,
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }
        // A block remembered by a ghost has been seen before: it enters T2.
        let to_t2 = ghost.is_some();
        let after_b2_hit = ghost == Some(GhostHit::Frequency);
        // Its header counts too (the lists' headers grow when it is added).
        let mut ev = g.make_room(size + ENTRY_HEADER_BYTES, after_b2_hit, outside);
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

    /// Forgets a block whose space was freed.
    pub fn remove(&self, key: &BlockKey) {
        let mut g = self.inner.lock();
        g.data.remove(key);
        g.lists.forget(key);
    }
}

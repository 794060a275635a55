//! The hot copies: decompressed copies of blocks read in parts again while cached.
//!
//! Why only then. A reader that takes a whole record into its own buffer — a database's
//! buffer pool reading with O_DIRECT, the kernel's page cache over a FUSE mount — holds
//! the decompressed page itself afterwards; a copy here would be a second one, taking
//! the room of compressed blocks the reader does not hold (issue #17: under a 64 MiB
//! buffer pool with a 64 MiB ARC, copies served 2% of the hits while their 4 MiB share
//! was kept from data). A reader of parts of a record (small buffered reads, the
//! engine's own readers) comes back for the next part: a copy saves decompressing the
//! record again. The caller says which (`zio::HotCopy`).
//!
//! Owns: the copies in LRU order under their own byte budget (at most a share of
//! `arc_max`, set by their owner, the pipeline), their hit counter, and the count of
//! their bytes that the ARC's budget covers (shared with the `ArcCache` that made them).
//!
//! Promises: the copies never exceed their budget after any call returns; the ARC's
//! count of their bytes is updated under their lock, so it is never behind by more than
//! the call in progress; a copy is keyed by its block's identity, so a rewritten block
//! never hits a stale copy.
//!
//! Must never: copy a block larger than its whole budget, evict ARC blocks itself (the
//! caller does, `ArcCache::evict_to_budget`, when `insert` says the copies grew), or hold
//! bytes the cache would not (callers copy in verified, decompressed blocks only).
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::memory::charged_bytes;
use crate::policy::{node_bytes, table_bytes};
use crate::{ArcCache, BlockKey, LinkedMap};

type HotList = LinkedMap<BlockKey, Arc<[u8]>>;

/// What a copy's bookkeeping takes besides its bytes: its node in the LRU (key, the
/// shared buffer's pointer and length, links) and the node's table slot.
pub const HOT_HEADER_BYTES: u64 =
    (node_bytes(std::mem::size_of::<BlockKey>() + std::mem::size_of::<Arc<[u8]>>()) + table_bytes(8)) as u64;

/// What a copy of `len` bytes holds: the allocator's slot for the shared buffer (its two
/// counts included) and its bookkeeping. Charged whole: counted by their length, the
/// copies of 20,000 tiny files read through a mount (512 bytes each, 704 held) held
/// 4 MiB beyond `arc_max` (issue #11). A function of the length alone (the allocator's
/// slot sizes are set once, before any cache is made), so a copy's charge is the same
/// when it leaves as when it came.
fn charge(len: usize) -> u64 {
    charged_bytes(len) + HOT_HEADER_BYTES
}

/// A bounded set of hot decompressed copies (see the module comment for which blocks
/// get one). Plain LRU under its own byte budget; counted in the ARC's stats and budget.
pub struct HotCopies {
    /// The copies in LRU order, and their total bytes.
    lists: Mutex<(HotList, u64)>,
    max: AtomicU64,
    /// The total, as the ARC's budget counts it (`ArcCache::outside`).
    held: Arc<AtomicU64>,
    pub hits: AtomicU64,
}

impl ArcCache {
    /// Hot copies of at most `max_bytes`, whose bytes this cache's budget covers.
    pub fn hot_copies(&self, max_bytes: u64) -> HotCopies {
        HotCopies {
            lists: Mutex::new((LinkedMap::default(), 0)),
            max: AtomicU64::new(max_bytes),
            held: self.hot_bytes.clone(),
            hits: AtomicU64::new(0),
        }
    }
}

impl HotCopies {
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

    /// Keeps a copy of `bytes`. Returns whether the copies now hold more than before: the
    /// caller then makes room in the ARC (`ArcCache::evict_to_budget`).
    pub fn insert(&self, key: BlockKey, bytes: &[u8]) -> bool {
        let max = self.max.load(Ordering::Relaxed);
        let size = charge(bytes.len());
        if size > max {
            return false;
        }
        let mut l = self.lists.lock();
        if l.0.contains_key(&key) {
            return false;
        }
        let before = l.1;
        while l.1 + size > max {
            let Some((_, b)) = l.0.pop_front() else { break };
            l.1 -= charge(b.len());
        }
        l.0.insert(key, Arc::from(bytes));
        l.1 += size;
        self.held.store(l.1, Ordering::Relaxed);
        l.1 > before
    }

    pub fn remove(&self, key: &BlockKey) {
        let mut l = self.lists.lock();
        if let Some(b) = l.0.remove(key) {
            l.1 -= charge(b.len());
            self.held.store(l.1, Ordering::Relaxed);
        }
    }

    pub fn set_max(&self, bytes: u64) {
        self.max.store(bytes, Ordering::Relaxed);
        let mut l = self.lists.lock();
        while l.1 > bytes {
            let Some((_, b)) = l.0.pop_front() else { break };
            l.1 -= charge(b.len());
        }
        self.held.store(l.1, Ordering::Relaxed);
        crate::compact::compact(&mut l.0);
    }

    pub fn size(&self) -> u64 {
        self.lists.lock().1
    }
}

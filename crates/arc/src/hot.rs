//! The hot copies: decompressed copies of the blocks read again while cached.
//!
//! Owns: the copies in LRU order under their own byte budget (a reserved share of
//! `arc_max`, set by their owner, the pipeline) and their hit counter.
//!
//! Promises: the copies never exceed their budget after any call returns; a copy is keyed
//! by its block's identity, so a rewritten block never hits a stale copy.
//!
//! Must never: copy a block larger than its whole budget, or hold bytes the cache would
//! not (callers copy in verified, decompressed blocks only).
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use hashlink::LinkedHashMap;
use parking_lot::Mutex;

use crate::BlockKey;

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
        crate::compact::compact(&mut l.0);
    }

    pub fn size(&self) -> u64 {
        self.lists.lock().1
    }
}

//! What the pool tells the L2ARC's rebuild about the blocks its log blocks name, and its
//! feed about blocks freed while they were queued.
//!
//! Owns: `CachedBlocks`, the pool's side of `tarn_l2arc::PoolBlocks`.
//!
//! Promises: says "gone" only for a block that cannot be live: born after the txg the
//! pool was imported at (a txg that never committed), or whose bytes the space maps no
//! longer count as live (freed since it was cached). Either way dropping the entry costs
//! nothing but a hit that could never have happened.
//!
//! Must never: keep the pipeline alive (it holds the cache that holds this: a weak
//! reference), or take more than one space map's lock per question.
use std::sync::Weak;

use tarn_arc::BlockKey;
use tarn_zio::Zio;

pub(crate) struct CachedBlocks {
    pub(crate) zio: Weak<Zio>,
    /// The last committed txg at import: no block of the log can be born after it.
    pub(crate) imported_at: u64,
}

impl CachedBlocks {
    /// For a cache attached with no rebuild to come (its devices start empty).
    pub(crate) fn without_rebuild(zio: &std::sync::Arc<Zio>) -> std::sync::Arc<CachedBlocks> {
        std::sync::Arc::new(CachedBlocks { zio: std::sync::Arc::downgrade(zio), imported_at: u64::MAX })
    }
}

impl tarn_l2arc::PoolBlocks for CachedBlocks {
    fn may_be_live(&self, key: &BlockKey, psize: u32) -> bool {
        if key.birth > self.imported_at {
            return false;
        }
        // The pool is closing: keep the entry (the cache goes with it).
        let Some(zio) = self.zio.upgrade() else { return true };
        zio.may_be_live(key.vdev, key.offset, psize)
    }

    fn still_allocated(&self, key: &BlockKey, psize: u32) -> bool {
        let Some(zio) = self.zio.upgrade() else { return true };
        zio.may_be_live(key.vdev, key.offset, psize)
    }
}

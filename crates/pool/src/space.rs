//! Space a writer may use: the reserve kept free for metadata and commits (slop), and
//! the admission check every dirtying write passes (`SpaceOracle`).
//!
//! Owns: the slop rule and the sum that decides ENOSPC.
//!
//! Promises: a write is admitted only if free space covers it plus every dirty byte
//! already accepted (open and syncing txgs) plus the slop, which keeps room for the
//! metadata and root a commit writes; `available` (what statfs and `tarn get available`
//! show) is the same sum, so `df` agrees with the ENOSPC a writer gets.
//!
//! Must never: take a space-map lock (the admission check runs on every write; it reads
//! the free-byte counters the pipeline mirrors for it).
use std::sync::Arc;

use tarn_dataset::{FsError, SpaceOracle};
use tarn_txg::TxgEngine;
use tarn_zio::Zio;

use crate::pool::Pool;

/// The reserve kept free: 1/32 of the pool, at least 4 MiB, at most half.
fn slop(total: u64) -> u64 {
    (total / 32).max(4 << 20).min(total / 2)
}

/// What a dataset asks before it accepts dirty data.
pub(crate) struct PoolSpace {
    pub(crate) zio: Arc<Zio>,
    pub(crate) txg: Arc<TxgEngine>,
}

impl SpaceOracle for PoolSpace {
    fn reserve(&self, bytes: u64) -> Result<(), FsError> {
        let (total, _, free) = self.zio.space();
        let t = self.txg.stats();
        let needed = bytes + t.dirty_open + t.dirty_syncing + slop(total);
        if free < needed {
            return Err(FsError::NoSpace);
        }
        Ok(())
    }
}

impl Pool {
    /// Bytes a writer can still use: free space less the reserve kept for metadata and
    /// less the data already accepted into the open and syncing txgs but not yet placed.
    /// This is the sum `PoolSpace::reserve` refuses writes by, so statfs (df) agrees with
    /// the ENOSPC a writer gets; without the dirty bytes a full pool looked half empty.
    pub fn available(&self) -> u64 {
        let (total, _, free) = self.inner.ctx.zio.space();
        let t = self.inner.ctx.txg.stats();
        free.saturating_sub(slop(total) + t.dirty_open + t.dirty_syncing)
    }
}

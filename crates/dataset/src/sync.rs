//! Durability: fsync, the intent log's questions at commit time, and this dataset's part
//! of a txg (quiesce and sync).
//!
//! Owns: when an fsync needs the log (not if its object's last change is committed, nor
//! with `sync=disabled`), the fallback to a txg commit when the log cannot be written, the
//! dataset's encoding policy for the blocks it writes, and its space counters.
//!
//! Promises: `fsync` returns only when the object's last change is durable; a queued
//! write's data is given to the log as objects finds it (`ObjSet::write_early`), the
//! early write encoded as the txg would encode it.
//!
//! Must never: ask whether the pool has a log device (the log policy does), free a block
//! (the pool frees what `sync` returns), or hold an object lock across a log commit.
use std::sync::atomic::Ordering;

use tarn_objects::{EarlyData, EarlyWant, ObjError, SyncPolicy, SyncResult};
use tarn_zil::{Placement, SourceError, WantedData, WriteData, WriteSource};

use crate::{Dataset, FsError, SyncMode};

impl Dataset {
    /// Returns once everything written to `ino` so far is durable.
    pub fn fsync(&self, ino: u64) -> Result<(), FsError> {
        if self.effective().sync == SyncMode::Disabled {
            return Ok(());
        }
        let txg = self.os.get(ino)?.lock().last_dirty_txg();
        self.commit_log(ino, txg)
    }

    /// Makes everything changed so far durable: one intent-log write (shared with
    /// concurrent callers); if the log cannot be written, a txg commit instead.
    pub(crate) fn commit_log(&self, ino: u64, txg: u64) -> Result<(), FsError> {
        if self.os.ctx().txg.synced() >= txg {
            return Ok(());
        }
        match self.zil.commit_for(self.id, ino, self) {
            Ok(()) => Ok(()),
            // The failed commit had taken its records off the queue — this file's and the
            // namespace changes of any txg so far — so commit everything they belong to.
            Err(_) => {
                self.zil.stats.fallback_syncs.fetch_add(1, Ordering::Relaxed);
                Ok(self.os.ctx().txg.sync_all()?)
            }
        }
    }

    /// How this dataset's blocks are encoded, in a txg's sync and in early writes alike.
    fn sync_policy(&self) -> SyncPolicy {
        let eff = self.eff.read();
        SyncPolicy { compression: eff.compression, checksum: eff.checksum, cache: eff.primarycache }
    }

    pub fn quiesce(&self, txg: u64) -> Result<(), ObjError> {
        *self.unlinked_at_quiesce.lock() = self.unlinked.lock().iter().copied().collect();
        self.os.quiesce(txg)
    }

    /// Writes this dataset's part of txg `txg` and updates its space counters. The blocks
    /// the result lists (`SyncResult::blocks_to_free`) are the caller's to free in `txg`.
    pub fn sync(&self, txg: u64) -> Result<SyncResult, ObjError> {
        let r = self.os.sync(txg, self.sync_policy())?;
        self.used_physical.fetch_add(r.allocated_physical, Ordering::Relaxed);
        self.used_logical.fetch_add(r.allocated_logical, Ordering::Relaxed);
        self.used_physical
            .fetch_sub(r.freed_physical.min(self.used_physical.load(Ordering::Relaxed)), Ordering::Relaxed);
        self.used_logical.fetch_sub(r.freed_logical.min(self.used_logical.load(Ordering::Relaxed)), Ordering::Relaxed);
        Ok(r)
    }
}

/// The intent log asks, at fsync, for the data of queued writes: objects finds it and,
/// where the log policy placed it in place, writes its record early.
impl WriteSource for Dataset {
    fn write_data(
        &self,
        txg: u64,
        ino: u64,
        off: u64,
        len: u64,
        placement: Placement,
    ) -> Result<WriteData, SourceError> {
        let in_place = placement == Placement::InPlace;
        Ok(write_data_of(self.os.write_early(ino, txg, off, len, in_place, self.sync_policy())?))
    }

    /// The records a bulk fsync writes in place go to the devices together.
    fn write_data_many(&self, wanted: &[WantedData]) -> Result<Vec<WriteData>, SourceError> {
        let wants: Vec<EarlyWant> = wanted
            .iter()
            .map(|w| EarlyWant {
                id: w.obj,
                txg: w.txg,
                off: w.offset,
                len: w.len,
                may_write_in_place: w.placement == Placement::InPlace,
            })
            .collect();
        let answers = self.os.write_early_many(&wants, self.sync_policy())?;
        Ok(answers.into_iter().map(write_data_of).collect())
    }

    /// A txg that is no longer open is waited for until it commits (an fsync holds no
    /// txg hold or object lock here, so the sync it waits for cannot wait for it).
    fn settle(&self, txg: u64) -> Result<(), SourceError> {
        let engine = &self.os.ctx().txg;
        if txg < engine.open_txg() && engine.synced() < txg {
            self.zil.stats.settle_waits.fetch_add(1, Ordering::Relaxed);
            engine.wait_synced(txg)?;
        }
        Ok(())
    }
}

fn write_data_of(early: EarlyData) -> WriteData {
    match early {
        EarlyData::InPlace { block_offset, bp } => WriteData::InPlace { block_offset, bp },
        EarlyData::Copied(data) => WriteData::Copied(data),
        EarlyData::Committed => WriteData::Committed,
    }
}

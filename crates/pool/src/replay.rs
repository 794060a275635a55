//! Intent-log replay at import: re-apply, in order, every logged change newer than the
//! committed txg, then commit them in a txg of their own and retire the old chain.
//!
//! Owns: the mapping from a logged object id to the id replay re-created it under, and
//! the report of what was replayed.
//!
//! Promises: records are applied in log order (the order their fsyncs depended on); the
//! replayed changes and the new chain's head are committed before import returns, so an
//! fsync acknowledged after import is found through the new head; a record that cannot
//! be applied is reported, not fatal.
//!
//! Must never: log what it replays (the log is in replay mode), or free the old chain's
//! blocks before the txg that no longer points at them commits.
use std::collections::HashMap;

use tarn_dataset::{Dataset, FsError, NewObject, SetAttr};
use tarn_objects::Timespec;
use tarn_zil::{Chained, Op, Record};

use crate::error::PoolError;
use crate::pool::Pool;

/// Ids of objects re-created by replay, keyed by (dataset, id the log used).
type IdMap = HashMap<(u64, u64), u64>;

impl Pool {
    pub(crate) fn replay_log(&self, chained: Chained, committed_txg: u64) -> Result<(), PoolError> {
        let zil = &self.inner.zil;
        zil.set_replaying(true);
        let mut ids = IdMap::new();
        let mut failed = Vec::new();
        for r in &chained.records {
            if let Err(e) = self.replay_one(r, &mut ids) {
                failed.push(format!("txg {} {}: {e}", r.txg, op_name(&r.op)));
            }
        }
        zil.set_replaying(false);
        for e in &chained.blocks {
            self.inner.ctx.zio.free_extent(e);
        }
        for bp in &chained.indirect {
            self.inner.ctx.zio.free(bp);
        }
        // The replayed changes and the new chain's head are committed before anyone
        // writes: an fsync acknowledged from here on is found through the new head.
        // (A txg is forced even when nothing was replayed: the committed root must point
        // at the chain this import writes to.)
        self.force_txg()?;
        let report = replay_summary(&chained, committed_txg, &failed);
        if !failed.is_empty() || chained.stopped_early {
            *self.inner.replay_trouble.lock() = report.clone();
        }
        *self.inner.replay_report.lock() = report;
        Ok(())
    }

    /// What import's replay may have missed (records it could not apply, a log that
    /// ended early, a missing log device after a crash); None when it was whole.
    pub fn replay_trouble(&self) -> Option<String> {
        self.inner.replay_trouble.lock().clone()
    }

    /// What import found in the intent log (None when there was nothing to replay).
    pub fn replay_report(&self) -> Option<String> {
        self.inner.replay_report.lock().clone()
    }

    fn dataset_by_id(&self, id: u64) -> Option<std::sync::Arc<Dataset>> {
        self.inner.datasets.read().values().find(|(m, _)| m.id == id).map(|(_, d)| d.clone())
    }

    fn replay_one(&self, r: &Record, ids: &mut IdMap) -> Result<(), FsError> {
        let Some(ds) = self.dataset_by_id(r.dataset) else {
            return Err(FsError::Invalid(format!("dataset {} no longer exists", r.dataset)));
        };
        let id = |obj: u64| ids.get(&(r.dataset, obj)).copied().unwrap_or(obj);
        match &r.op {
            Op::Write { obj, offset, data } => ds.write(id(*obj), *offset, data).map(|_| ()),
            Op::Truncate { obj, size } => {
                ds.setattr(id(*obj), &SetAttr { size: Some(*size), ..Default::default() }).map(|_| ())
            }
            Op::Create { parent, obj, kind, mode, uid, gid, rdev, name, target } => {
                let what = match kind {
                    2 => NewObject::Dir,
                    3 => NewObject::Symlink(target),
                    4 => NewObject::Special { rdev: *rdev },
                    _ => NewObject::File,
                };
                let attr = ds.create(id(*parent), name, what, *mode, *uid, *gid)?;
                ids.insert((r.dataset, *obj), attr.ino);
                Ok(())
            }
            Op::Remove { parent, name, is_dir } => {
                if *is_dir {
                    ds.rmdir(id(*parent), name)
                } else {
                    ds.unlink(id(*parent), name)
                }
            }
            Op::Rename { sdir, sname, ddir, dname, noreplace } => {
                ds.rename(id(*sdir), sname, id(*ddir), dname, *noreplace)
            }
            Op::Link { obj, dir, name } => ds.link(id(*obj), id(*dir), name).map(|_| ()),
            Op::SetAttr { obj, mode, uid, gid, atime, mtime } => {
                let ts = |t: &Option<(i64, u32)>| t.map(|(sec, nsec)| Timespec { sec, nsec });
                let set = SetAttr { mode: *mode, uid: *uid, gid: *gid, size: None, atime: ts(atime), mtime: ts(mtime) };
                ds.setattr(id(*obj), &set).map(|_| ())
            }
            Op::PunchHole { obj, offset, len } => ds.punch_hole(id(*obj), *offset, *len),
            Op::WriteIndirect { .. } => {
                unreachable!("read_chain turns indirect writes into writes")
            }
        }
    }
}

fn op_name(op: &Op) -> &'static str {
    match op {
        Op::Write { .. } => "write",
        Op::Truncate { .. } => "truncate",
        Op::Create { .. } => "create",
        Op::Remove { .. } => "remove",
        Op::Rename { .. } => "rename",
        Op::Link { .. } => "link",
        Op::SetAttr { .. } => "setattr",
        Op::PunchHole { .. } => "punch hole",
        Op::WriteIndirect { .. } => "indirect write",
    }
}

fn replay_summary(chained: &Chained, committed_txg: u64, failed: &[String]) -> Option<String> {
    if chained.records.is_empty() && !chained.stopped_early {
        return None;
    }
    let first = chained.records.first().map_or(0, |r| r.txg);
    let last = chained.records.last().map_or(0, |r| r.txg);
    let mut msg = format!(
        "replayed {} intent-log records (txgs {first}..{last}) on top of committed txg {committed_txg}",
        chained.records.len()
    );
    if chained.stopped_early {
        msg.push_str(&format!(
            "; the log ended early ({}): changes logged after that point were not replayed",
            chained.end
        ));
    }
    if !failed.is_empty() {
        msg.push_str(&format!("; {} could not be applied, first: {}", failed.len(), failed[0]));
    }
    Some(msg)
}

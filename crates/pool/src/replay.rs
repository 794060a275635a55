//! Intent-log replay at import: re-apply, in order, every logged change newer than the
//! txg replay began on, keep the replayed chain in every root until the last record is
//! committed, then retire it in a txg of its own.
//!
//! Owns: applying the records through the dataset API, and the report of what was
//! replayed.
//!
//! Promises: records are applied in log order (the order their fsyncs depended on), each
//! exactly once across any number of crashes during replay: the root of every txg replay
//! commits still names the replayed chain and records how many records it holds and the
//! ids their creates gave (`tarn_zil::ReplayProgress`, noted from inside each change's
//! own txg hold), and a resumed import starts after them. Only a txg after the last
//! record names the new chain and frees the old one, and import returns once it has
//! committed, so an fsync acknowledged after import is found through the new head. A
//! record that cannot be applied is reported, not fatal; a crash never turns an applied
//! record into a skipped one (it is committed and counted, or applied again).
//!
//! Must never: log what it replays (the log is in replay mode), or free the old chain's
//! blocks before the txg that no longer points at them commits.
use tarn_dataset::{Dataset, FsError, NewObject, SetAttr};
use tarn_objects::Timespec;
use tarn_zil::{Chained, Op, Record, ReplayProgress, ReplaySource};

use crate::error::PoolError;
use crate::pool::Pool;

impl Pool {
    /// Replays `chained` (None: the root named no log), from where `resumed` says an
    /// earlier import's replay got, on a root of txg `committed_txg`.
    pub(crate) fn replay_log(
        &self,
        chained: Option<Chained>,
        resumed: Option<ReplayProgress>,
        committed_txg: u64,
    ) -> Result<(), PoolError> {
        let Some((mut chained, head)) = chained.and_then(|c| c.head.map(|h| (c, h))) else {
            // No log to replay (a version-1 root): the next root must still name the
            // chain this import writes to.
            return self.force_txg();
        };
        let zil = &self.inner.zil;
        let progress = resumed.unwrap_or_else(|| ReplayProgress::starting(committed_txg));
        let total = chained.records.len() as u64;
        let start = progress.replayed.min(total);
        zil.begin_replay(ReplaySource {
            head,
            blocks: std::mem::take(&mut chained.blocks),
            indirect: std::mem::take(&mut chained.indirect),
            progress: progress.clone(),
        });
        let mut failed = Vec::new();
        for (i, r) in chained.records.iter().enumerate().skip(start as usize) {
            zil.replay_next(i as u64, created_by(r));
            if let Err(e) = self.replay_one(r) {
                let report = format!("txg {} {}: {e}", r.txg, op_name(&r.op));
                zil.replay_skipped(i as u64, report.clone());
                failed.push(report);
            }
        }
        self.end_replay()?;
        let summary = Summary { chained: &chained, progress: &progress, start, committed_txg, failed: &failed };
        let report = summary.text();
        if summary.troubled() {
            *self.inner.replay_trouble.lock() = report.clone();
        }
        *self.inner.replay_report.lock() = report;
        Ok(())
    }

    /// Commits the txg whose root names this import's chain instead of the replayed one,
    /// and frees that (the log learns the txg while it is held open, so every replayed
    /// change is in it or before it). Forced even when nothing was replayed: the
    /// committed root must point at the chain this import writes to.
    fn end_replay(&self) -> Result<(), PoolError> {
        let engine = &self.inner.ctx.txg;
        let txg = {
            let hold = engine.hold(0).map_err(FsError::from)?;
            self.inner.zil.finish_replay(hold.txg);
            hold.txg
        };
        engine.wait_synced(txg).map_err(FsError::from)?;
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

    /// Applies one record. Objects the log created are named by the id replay gave them
    /// (the create itself tells the log that id, in its own txg).
    fn replay_one(&self, r: &Record) -> Result<(), FsError> {
        let Some(ds) = self.dataset_by_id(r.dataset) else {
            return Err(FsError::Invalid(format!("dataset {} no longer exists", r.dataset)));
        };
        let zil = &self.inner.zil;
        let id = |obj: u64| zil.replayed_id(r.dataset, obj);
        match &r.op {
            Op::Write { obj, offset, data } => ds.write(id(*obj), *offset, data).map(|_| ()),
            Op::Truncate { obj, size } => {
                ds.setattr(id(*obj), &SetAttr { size: Some(*size), ..Default::default() }).map(|_| ())
            }
            Op::Create { parent, kind, mode, uid, gid, rdev, name, target, .. } => {
                let what = match kind {
                    2 => NewObject::Dir,
                    3 => NewObject::Symlink(target),
                    4 => NewObject::Special { rdev: *rdev },
                    _ => NewObject::File,
                };
                ds.create(id(*parent), name, what, *mode, *uid, *gid).map(|_| ())
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

/// The object a record creates, as (dataset, id in the log).
fn created_by(r: &Record) -> Option<(u64, u64)> {
    match r.op {
        Op::Create { obj, .. } => Some((r.dataset, obj)),
        _ => None,
    }
}

/// What an import's replay did, for its report.
struct Summary<'a> {
    chained: &'a Chained,
    /// Where the committed root said replay got (a fresh start: nothing replayed).
    progress: &'a ReplayProgress,
    /// The first record this import applied.
    start: u64,
    committed_txg: u64,
    failed: &'a [String],
}

impl Summary<'_> {
    fn resumed(&self) -> bool {
        self.progress.replayed > 0
    }

    /// The chain now holds fewer records than an earlier import had replayed (a block it
    /// read then no longer verifies): what follows them cannot be known.
    fn shorter(&self) -> bool {
        self.progress.replayed > self.chained.records.len() as u64
    }

    /// Something acknowledged may be missing.
    fn troubled(&self) -> bool {
        !self.failed.is_empty() || self.chained.stopped_early || self.progress.skipped > 0 || self.shorter()
    }

    fn text(&self) -> Option<String> {
        let c = self.chained;
        if c.records.is_empty() && !c.stopped_early && !self.resumed() {
            return None;
        }
        let applied = &c.records[self.start as usize..];
        let first = applied.first().map_or(0, |r| r.txg);
        let last = applied.last().map_or(0, |r| r.txg);
        let mut msg = format!(
            "replayed {} intent-log records (txgs {first}..{last}) on top of committed txg {}",
            applied.len(),
            self.committed_txg
        );
        if self.resumed() {
            msg.push_str(&format!(
                "; resumed an interrupted replay after the {} records of {} (logged after txg {}) an earlier import had \
                 committed",
                self.start,
                c.records.len(),
                self.progress.claim_txg
            ));
        }
        if self.shorter() {
            msg.push_str(&format!(
                "; the log now ends after {} records, but an earlier import had replayed {}: changes logged after \
                 those may not have been replayed",
                c.records.len(),
                self.progress.replayed
            ));
        }
        if c.stopped_early {
            msg.push_str(&format!(
                "; the log ended early ({}): changes logged after that point were not replayed",
                c.end
            ));
        }
        if self.progress.skipped > 0 {
            let first = self.progress.first_skipped.as_deref().unwrap_or("?");
            msg.push_str(&format!(
                "; {} could not be applied before the interruption, first: {first}",
                self.progress.skipped
            ));
        }
        if !self.failed.is_empty() {
            msg.push_str(&format!("; {} could not be applied, first: {}", self.failed.len(), self.failed[0]));
        }
        Some(msg)
    }
}

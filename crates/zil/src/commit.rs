//! Committing the log for one fsync: take the changes it needs, resolve queued writes
//! into records (copied bytes, or pointers to records written in place), append them to
//! the chain in ticket order, flush.
//!
//! Owns: the commit's steps and group commit (whoever takes a record writes and flushes
//! it before releasing the chain lock, so a caller that finds nothing left to take knows
//! it is durable).
//!
//! Promises: when `commit_for` returns Ok, every change the fsync needs (its object's and
//! every namespace change queued before the call) is durable, and so is every change of
//! an earlier commit it had to follow; a failed commit makes every later commit fail until
//! the txg holding the lost records commits, so no fsync returns on a log that misses one;
//! a commit holds at most about `COMMIT_BATCH_BYTES` of copied data at once (it appends
//! batch by batch, flushing once at the end).
//!
//! Must never: hold the chain lock while fetching data or writing blocks in place (a
//! redo-log fsync would wait behind a data file's bulk commit), or append a block whose
//! in-place data is not flushed with it.
use std::iter::Peekable;
use std::sync::atomic::Ordering;
use std::time::Instant;
use std::vec::IntoIter;

use tarn_zio::BlockPtr;

use crate::chain::Chain;
use crate::policy::{self, CommitCopies, Placement};
use crate::queue::{Queued, Taken};
use crate::record::{Op, Record};
use crate::tickets::Ticket;
use crate::{Zil, ZilError, MAX_WRITE_RECORD};

/// Where the data of a write queued by `log_write` is, as the layer above says at commit
/// time.
pub enum WriteData {
    /// Written in place (not yet flushed) as the record-sized block `bp` starting at file
    /// offset `block_offset`; the txg adopts that block instead of writing it again.
    InPlace { block_offset: u64, bp: BlockPtr },
    /// The bytes themselves, as of the write's txg (the block could not be written early,
    /// e.g. its txg is already syncing).
    Copied(Vec<u8>),
    /// The write's txg is committed: nothing to log.
    Committed,
}

/// One queued write whose data a commit asks the layer above for (`write_data_many`).
#[derive(Clone, Copy, Debug)]
pub struct WantedData {
    pub txg: u64,
    pub obj: u64,
    pub offset: u64,
    pub len: u64,
    pub placement: Placement,
}

/// An error of the layer above while it fetched or wrote a write's data.
pub type SourceError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The layer above, asked at commit time for the data of a queued write (ZFS's
/// `zl_get_data`). It must return the bytes as of the write's txg, or newer.
pub trait WriteSource {
    /// `placement` says whether the record should be written in place, if it can be.
    fn write_data(
        &self,
        txg: u64,
        obj: u64,
        offset: u64,
        len: u64,
        placement: Placement,
    ) -> Result<WriteData, SourceError>;

    /// The data of several queued writes, answered in order. A source that writes records
    /// in place writes those of one call together (a bulk fsync's pages in one device
    /// write rather than one each); the default asks `write_data` for each.
    fn write_data_many(&self, wanted: &[WantedData]) -> Result<Vec<WriteData>, SourceError> {
        wanted.iter().map(|w| self.write_data(w.txg, w.obj, w.offset, w.len, w.placement)).collect()
    }

    /// Returns once txg `txg` is committed if it is no longer open (quiescing or
    /// syncing); at once while it is open. A bulk commit calls it before taking its
    /// writes (`Zil::settle_bulk`). The default waits for nothing: such writes are then
    /// copied into the log, which is correct, only slower.
    fn settle(&self, _txg: u64) -> Result<(), SourceError> {
        Ok(())
    }
}

/// Copied file data a commit resolves before appending it to the chain: what one fsync
/// holds in memory at once (the copies, then their encoded records and log blocks),
/// however much of its file's data the log copies.
pub const COMMIT_BATCH_BYTES: usize = 1 << 20;

/// A batch of a commit's records, and the vdevs it wrote in place (flushed with its log
/// blocks).
struct Resolved {
    records: Vec<(u64, Record)>,
    in_place_vdevs: Vec<u16>,
}

impl Zil {
    /// Makes durable what an fsync of object `obj` of `dataset` needs: that object's own
    /// queued changes and every namespace change queued so far (creates, renames… must
    /// replay in order), as ZFS's per-object zil_commit does. Other files' data stays
    /// queued — a database's WAL fsync does not drag its data files' pages through the
    /// log.
    ///
    /// Queued writes are resolved through `source` (the dataset): blocks written in place
    /// are written before the log block, and one flush covers both, so a log block that
    /// survives a crash never points at a block that did not.
    pub fn commit_for(&self, dataset: u64, obj: u64, source: &dyn WriteSource) -> Result<(), ZilError> {
        let started = Instant::now();
        let result = self.commit_for_timed(dataset, obj, source);
        let us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.stats.commit_us.fetch_add(us, Ordering::Relaxed);
        self.stats.max_commit_us.fetch_max(us, Ordering::Relaxed);
        result
    }

    fn commit_for_timed(&self, dataset: u64, obj: u64, source: &dyn WriteSource) -> Result<(), ZilError> {
        let key = (dataset, obj);
        self.settle_bulk(key, source)?;
        let (taken, ticket) = {
            let mut q = self.queue.lock();
            let target = q.last_seq();
            let taken = q.take_for(key, target);
            let namespace = taken.iter().any(|(_, item)| item.object().is_none());
            (taken, self.tickets.open(key, namespace))
        };
        let result = self.commit_ticket(&ticket, taken, source);
        self.tickets.close(&ticket);
        result?;
        self.stats.commits.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// A bulk commit writes its object's data in place (`policy::bulk`), but a write
    /// whose txg is no longer open cannot be written in place for that txg: it would be
    /// copied into the log instead — megabytes written twice, appended under the chain
    /// lock that every other fsync's append (a database's redo-log fsync) waits for, on
    /// a disk the syncing txg is busy with. That txg writes the data anyway, so wait for
    /// it to commit first (ZFS's dmu_sync answers EALREADY for a syncing txg), holding
    /// nothing of the log: no queue or chain lock, no ticket, no sync hold on the devices.
    /// At most one txg syncs and one quiesces at a time, so settling the newest txg of
    /// the object's changes and the one before it covers every txg that is not open.
    fn settle_bulk(&self, key: (u64, u64), source: &dyn WriteSource) -> Result<(), ZilError> {
        let Some(outlook) = self.queue.lock().outlook(key) else {
            return Ok(());
        };
        if !policy::bulk(outlook.copied, self.zio.has_log_device()) {
            return Ok(());
        }
        source.settle(outlook.newest_txg).map_err(ZilError::Source)?;
        if outlook.oldest_txg < outlook.newest_txg {
            source.settle(outlook.newest_txg - 1).map_err(ZilError::Source)?;
        }
        Ok(())
    }

    /// Resolves without the chain lock, then waits its turn and appends — a batch of at
    /// most about `COMMIT_BATCH_BYTES` of copied data at a time, so a commit never holds
    /// more than that in memory, whatever its file's dirty data (a bulk fsync with a log
    /// device copies every write). The first batch is resolved before waiting for the
    /// ticket (its I/O overlaps earlier commits), the next ones after appending the one
    /// before: the records keep their order, and a dependent commit waits for the ticket,
    /// which closes only after the last batch is flushed.
    fn commit_ticket(&self, ticket: &Ticket, taken: Taken, source: &dyn WriteSource) -> Result<(), ZilError> {
        // From the first write in place to the flush, this is sync I/O on every device:
        // the txg's writes stay out of the devices' queues ahead of it.
        let _sync = self.zio.hold_sync();
        let newest_txg = taken.iter().map(|(_, q)| q.txg()).max().unwrap_or(0);
        let copies = Queued::copies(taken.iter().map(|(_, q)| q));
        let mut items = taken.into_iter().peekable();
        let mut waited = false;
        loop {
            let resolved = self.resolve_batch(&mut items, copies, source);
            let last = items.peek().is_none();
            if !waited {
                self.tickets.wait_for_earlier(ticket);
                waited = true;
            }
            let mut chain = self.chain.lock();
            let appended = resolved.and_then(|resolved| self.append_batch(&mut chain, resolved, last));
            if appended.is_err() {
                chain.failed_txg = chain.failed_txg.max(newest_txg).max(1);
            }
            if appended.is_err() || last {
                return appended;
            }
        }
    }

    /// Appends one batch of a commit's records; the last batch also flushes.
    fn append_batch(&self, chain: &mut Chain, resolved: Resolved, last: bool) -> Result<(), ZilError> {
        if chain.failed_txg != 0 {
            // An earlier commit failed after taking records off the queue (ones this
            // fsync needs, perhaps): only a txg commit makes them durable now.
            return Err(ZilError::Unsettled(chain.failed_txg));
        }
        for vdev in resolved.in_place_vdevs {
            chain.wrote_to(vdev);
        }
        // A txg that committed while this commit resolved holds these records already
        // (and replay would skip them): they need no log space.
        let committed = chain.committed_txg();
        let mut records = resolved.records;
        records.retain(|(_, r)| r.txg > committed);
        if !records.is_empty() {
            self.write_blocks(chain, &records)?;
        }
        if !last {
            return Ok(());
        }
        // Also flushes what earlier commits, and this one's earlier batches, appended
        // and left unflushed.
        self.flush_written(chain)
    }

    /// Flushes the vdevs written since their last flush (a failed commit's writes too, so
    /// a chain block it left unflushed is durable before any block after it counts).
    fn flush_written(&self, chain: &mut Chain) -> Result<(), ZilError> {
        if !chain.unflushed.is_empty() {
            self.zio.flush_tops(&chain.unflushed)?;
            chain.unflushed.clear();
        }
        Ok(())
    }

    /// Turns queued changes into records, from `items` until the batch holds
    /// `COMMIT_BATCH_BYTES` of copied data or `items` ends: writes become a copy of their
    /// bytes or a pointer to their record written in place, as the log policy says
    /// (`copies`: the file data the whole commit would copy as queued); writes of
    /// committed txgs are dropped. Consecutive writes are asked for together, as many as
    /// the batch could still hold copied, so their records written in place share device
    /// writes.
    fn resolve_batch(
        &self,
        items: &mut Peekable<IntoIter<(u64, Queued)>>,
        copies: CommitCopies,
        source: &dyn WriteSource,
    ) -> Result<Resolved, ZilError> {
        let log_device = self.zio.has_log_device();
        let mut out = Resolved { records: Vec::new(), in_place_vdevs: Vec::new() };
        let mut held = 0;
        let mut writes: Vec<(u64, u64, WantedData)> = Vec::new();
        while held < COMMIT_BATCH_BYTES {
            let Some((seq, item)) = items.next() else { break };
            let mut wanted_bytes = match item {
                Queued::Ready(r) => {
                    out.records.push((seq, r));
                    continue;
                }
                Queued::Write { txg, dataset, obj, offset, len, whole, placement } => {
                    let placement = policy::at_commit(placement, whole, copies, log_device);
                    writes.push((seq, dataset, WantedData { txg, obj, offset, len, placement }));
                    len as usize
                }
            };
            // A write's copy is at most its length: the batch's bound holds for the group.
            while let Some((_, Queued::Write { len, .. })) = items.peek() {
                if held + wanted_bytes + *len as usize > COMMIT_BATCH_BYTES {
                    break;
                }
                let Some((seq, Queued::Write { txg, dataset, obj, offset, len, whole, placement })) = items.next()
                else {
                    unreachable!("the item just peeked is a write")
                };
                let placement = policy::at_commit(placement, whole, copies, log_device);
                writes.push((seq, dataset, WantedData { txg, obj, offset, len, placement }));
                wanted_bytes += len as usize;
            }
            held += self.resolve_writes(&mut writes, source, &mut out)?;
        }
        Ok(out)
    }

    /// Asks `source` for the data of `writes` (drained) at once and adds their records to
    /// `out`; returns the bytes copied.
    fn resolve_writes(
        &self,
        writes: &mut Vec<(u64, u64, WantedData)>,
        source: &dyn WriteSource,
        out: &mut Resolved,
    ) -> Result<usize, ZilError> {
        let wanted: Vec<WantedData> = writes.iter().map(|(_, _, w)| *w).collect();
        let answers = source.write_data_many(&wanted).map_err(ZilError::Source)?;
        assert_eq!(answers.len(), wanted.len(), "the source answers every write it is asked for");
        let mut copied = 0;
        for ((seq, dataset, w), data) in writes.drain(..).zip(answers) {
            let WantedData { txg, obj, offset, len, .. } = w;
            match data {
                WriteData::InPlace { block_offset, bp } => {
                    if !out.in_place_vdevs.contains(&bp.vdev) {
                        out.in_place_vdevs.push(bp.vdev);
                    }
                    self.stats.indirect_records.fetch_add(1, Ordering::Relaxed);
                    let op = Op::WriteIndirect { obj, offset, len, block_offset, bp };
                    out.records.push((seq, Record { txg, dataset, op }));
                }
                WriteData::Copied(data) => {
                    copied += data.len();
                    self.stats.copied_bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
                    push_copied(&mut out.records, seq, txg, dataset, obj, offset, data);
                }
                WriteData::Committed => {}
            }
        }
        Ok(copied)
    }
}

/// Appends copied write data as records of at most `MAX_WRITE_RECORD` bytes each. A
/// write queued to go in place spans up to a whole record (128 KiB, or more with a
/// larger recordsize), and comes back copied when its txg stopped being open before the
/// fsync; one record that size would not fit any log block.
fn push_copied(out: &mut Vec<(u64, Record)>, seq: u64, txg: u64, dataset: u64, obj: u64, offset: u64, data: Vec<u8>) {
    if data.len() <= MAX_WRITE_RECORD {
        out.push((seq, Record { txg, dataset, op: Op::Write { obj, offset, data } }));
        return;
    }
    for (i, piece) in data.chunks(MAX_WRITE_RECORD).enumerate() {
        let offset = offset + (i * MAX_WRITE_RECORD) as u64;
        out.push((seq, Record { txg, dataset, op: Op::Write { obj, offset, data: piece.to_vec() } }));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use tarn_vdev::{BlockDevice, FileDevice, Leaf, TopVdev, VdevTree};
    use tarn_zio::Zio;

    use super::{SourceError, WriteData, WriteSource, COMMIT_BATCH_BYTES};
    use crate::policy::{LogBias, Placement};
    use crate::{LoggedWrite, Zil, ZilStats};

    const RECORD: u64 = 128 << 10;

    fn zio(dir: &std::path::Path) -> Arc<Zio> {
        let path = dir.join("zil.img");
        let dev = FileDevice::open_or_create(&path, Some(256 << 20)).expect("image file");
        let asize = TopVdev::asize_of(dev.size(), 12);
        let leaf = Leaf::new(1, path.display().to_string(), Some(Arc::new(dev)));
        let zio = Arc::new(Zio::new(VdevTree::new(vec![TopVdev::new(0, 2, 12, asize, vec![leaf])], 12)));
        zio.finish_load();
        zio
    }

    /// Hands out every write's bytes as a copy (as when its txg stopped being open), and
    /// records the most copied data ever handed out and not yet written to the log.
    struct Copying<'a> {
        stats: &'a ZilStats,
        handed_out: AtomicU64,
        most_unwritten: AtomicU64,
    }

    impl WriteSource for Copying<'_> {
        fn write_data(&self, _: u64, _: u64, _: u64, len: u64, _: Placement) -> Result<WriteData, SourceError> {
            let handed_out = self.handed_out.fetch_add(len, Ordering::SeqCst) + len;
            let written = self.stats.bytes_written.load(Ordering::SeqCst);
            self.most_unwritten.fetch_max(handed_out.saturating_sub(written), Ordering::SeqCst);
            Ok(WriteData::Copied(vec![7u8; len as usize]))
        }
    }

    /// A commit of 32 MiB of copied data appends its log blocks as the copies come, so
    /// the fsync holds about one batch of them at a time, not the file's data.
    #[test]
    fn a_commit_holds_at_most_a_batch_of_copied_data() {
        let dir = tempfile::tempdir().unwrap();
        let zil = Zil::new(zio(dir.path()), 42, 1);
        let total = 32u64 << 20;
        zil.log_write(&LoggedWrite {
            txg: 5,
            dataset: 1,
            obj: 9,
            offset: 0,
            len: total,
            blksz: RECORD,
            logbias: LogBias::Latency,
        });
        let source = Copying { stats: &zil.stats, handed_out: AtomicU64::new(0), most_unwritten: AtomicU64::new(0) };
        zil.commit_for(1, 9, &source).unwrap();
        assert_eq!(source.handed_out.load(Ordering::SeqCst), total);
        assert!(zil.stats.bytes_written.load(Ordering::SeqCst) >= total, "every copied byte is in the log");
        let most = source.most_unwritten.load(Ordering::SeqCst);
        assert!(
            most <= COMMIT_BATCH_BYTES as u64 + RECORD,
            "the commit held {most} bytes of copied data not yet in the log (a batch is {COMMIT_BATCH_BYTES})"
        );
    }
}

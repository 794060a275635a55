//! Early writes (ZFS's dmu_sync): at fsync, the intent log asks for the bytes of a write
//! made in a txg that has not committed; the record holding them is written in place
//! now, and the txg later adopts that block instead of writing the record again.
//!
//! Owns: finding the data of a logged write as of its txg, writing the record early with
//! the dataset's encoding policy, and the adoption bookkeeping — `Changes::early` (blocks
//! written for records of the open txg) and `Changes::orphans` (blocks whose record
//! changed after: no tree will point at them, the sync returns them to be freed) — and
//! late arrivals (ZFS's `dmu_sync_late_arrival`): a record whose txg is no longer open is
//! written anew, out of band, never adopted, and returned as an orphan by the first sync
//! of that txg or a later one (`ObjSet::late_orphans`).
//!
//! Promises: a block is written early only while its txg is held open, so the record is
//! still that txg's when the block is noted for adoption; the sync adopts it only if the
//! record is the very buffer that was written (asserted), else returns it as an orphan; a
//! late block is freed with a txg no older than its record's, so it stays allocated while
//! the log may need it; if the txg synced its own block already, the log points at that
//! one; only a caller that asked for no write in place, a hole, or a range the record
//! does not hold gets the bytes copied — so a bulk fsync racing a txg's quiesce never
//! holds the file's data twice in memory.
//!
//! Must never: wait for a txg (the caller holds the intent log: `try_hold_open` only), or
//! free a block (orphans go back to the caller through `SyncResult`).
use std::sync::Arc;

use tarn_txg::TxgHold;
use tarn_zio::{Access, BlockPtr, BlockType, CachePolicy, IoClass, PageId, PendingBlock, ReadKind, Zio, ZioError};

use crate::object::{ObjState, Object, Record, Source};
use crate::objset::{ObjSet, SyncPolicy};
use crate::ObjError;

/// The data of a logged write, as the intent log gets it.
#[derive(Debug, PartialEq, Eq)]
pub enum EarlyData {
    /// Written in place (not yet flushed) as the record-sized block `bp` starting at file
    /// offset `block_offset`; the txg adopts that block unless the record changes again.
    InPlace { block_offset: u64, bp: BlockPtr },
    /// The bytes themselves, as of the write's txg.
    Copied(Vec<u8>),
    /// The write's txg is committed (or the object never reached a committed txg and is
    /// gone): nothing to log.
    Committed,
}

/// What `ObjState::log_data` finds for bytes written in a txg.
enum LogData {
    /// The open record holding the bytes: to be written in place.
    Record { blkid: u64, block_offset: u64, rec: Record },
    /// The record as of a txg that is no longer open (or is closing), in memory: to be
    /// written anew as a late block.
    Late { block_offset: u64, rec: Record },
    /// The block the txg's own sync wrote for the record (born in that txg, not yet
    /// committed): the log points at it.
    Synced { block_offset: u64, bp: BlockPtr },
    /// The bytes themselves, as of that txg.
    Bytes(Vec<u8>),
    /// The txg is committed.
    Committed,
}

/// One write the intent log wants the data of: bytes [off, off + len) (within one
/// record) of object `id`, written in txg `txg`; `may_write_in_place` as in `write_early`.
#[derive(Clone, Copy, Debug)]
pub struct EarlyWant {
    pub id: u64,
    pub txg: u64,
    pub off: u64,
    pub len: u64,
    pub may_write_in_place: bool,
}

/// What one wanted write comes to before any record is written in place: its answer, or
/// the record to write with the hold that keeps its txg open until the block is noted.
enum Prepared<'a> {
    Done(EarlyData),
    Write(InPlaceRecord<'a>),
}

/// Record bytes written in place in one go (`write_early_many`): a run's worth, so one
/// chunk is a few device writes and holds the open txg only while they last.
const IN_PLACE_CHUNK_BYTES: usize = 1 << 20;

/// Records to write in place together, and the answers waiting for their blocks.
#[derive(Default)]
struct InPlaceChunk<'a> {
    records: Vec<InPlaceRecord<'a>>,
    /// (answer, record) pairs: two writes into one record share its block.
    waiting: Vec<(usize, usize)>,
    bytes: usize,
}

impl<'a> InPlaceChunk<'a> {
    fn add(&mut self, answer: usize, r: InPlaceRecord<'a>) {
        let same = |q: &InPlaceRecord| q.blkid == r.blkid && Arc::ptr_eq(&q.obj, &r.obj) && Arc::ptr_eq(&q.rec, &r.rec);
        let at = match self.records.iter().position(same) {
            Some(at) => at,
            None => {
                self.bytes += r.rec.len();
                self.records.push(r);
                self.records.len() - 1
            }
        };
        self.waiting.push((answer, at));
    }

    /// Writes the records, notes each block for adoption, answers the waiting writes,
    /// then lets the holds go (the chunk is empty again).
    fn write(&mut self, zio: &Zio, policy: SyncPolicy, answers: &mut [Option<EarlyData>]) -> Result<(), ObjError> {
        let bps = write_in_place(zio, &self.records, policy)?;
        for (r, bp) in self.records.iter().zip(&bps) {
            r.obj.lock().set_early_block(r.blkid, &r.rec, *bp);
        }
        for (answer, at) in self.waiting.drain(..) {
            answers[answer] = Some(EarlyData::InPlace { block_offset: self.records[at].block_offset, bp: bps[at] });
        }
        self.records.clear(); // the holds go only now that every block is noted for adoption
        self.bytes = 0;
        Ok(())
    }
}

/// A record of the open txg to be written in place for the log.
struct InPlaceRecord<'a> {
    obj: Arc<Object>,
    blkid: u64,
    block_offset: u64,
    rec: Record,
    page: PageId,
    txg: u64,
    /// Keeps `txg` open, so the record is still that txg's when its block is noted for
    /// adoption (released only after `set_early_block`).
    _open: TxgHold<'a>,
}

impl ObjSet {
    /// The data of bytes [off, off + len) (within one record) of object `id`, written in
    /// txg `txg`, for the intent log. With `may_write_in_place` and `txg` still open, the
    /// record is written in place now, encoded by `policy`, and noted for adoption by the
    /// txg; otherwise the bytes are copied as of `txg`.
    pub fn write_early(
        &self,
        id: u64,
        txg: u64,
        off: u64,
        len: u64,
        may_write_in_place: bool,
        policy: SyncPolicy,
    ) -> Result<EarlyData, ObjError> {
        let want = EarlyWant { id, txg, off, len, may_write_in_place };
        Ok(self.write_early_many(&[want], policy)?.pop().expect("one answer per wanted write"))
    }

    /// `write_early` for several writes at once, answered in order. The records they
    /// write in place are written together, in one run on the devices where they fit:
    /// a bulk fsync of a database file's pages costs a device write per `max_io` of them
    /// rather than one per page. They go in chunks of about `IN_PLACE_CHUNK_BYTES`, each
    /// noted for adoption and its holds released before the next is prepared, so the open
    /// txg is never kept from closing for longer than one chunk's write. Fails as a whole
    /// (the log then commits a txg instead); a chunk whose write failed part-way leaves
    /// the blocks already placed allocated until the next import rebuilds the space maps,
    /// as a failed single write always did its block.
    pub fn write_early_many(&self, wants: &[EarlyWant], policy: SyncPolicy) -> Result<Vec<EarlyData>, ObjError> {
        let mut answers: Vec<Option<EarlyData>> = Vec::with_capacity(wants.len());
        let mut chunk = InPlaceChunk::default();
        for want in wants {
            match self.prepare_early(*want, policy)? {
                Prepared::Done(data) => answers.push(Some(data)),
                Prepared::Write(r) => {
                    chunk.add(answers.len(), r);
                    answers.push(None);
                    if chunk.bytes >= IN_PLACE_CHUNK_BYTES {
                        chunk.write(&self.ctx().zio, policy, &mut answers)?;
                    }
                }
            }
        }
        chunk.write(&self.ctx().zio, policy, &mut answers)?;
        Ok(answers.into_iter().map(|a| a.expect("every wanted write answered")).collect())
    }

    /// Finds what the log gets for one wanted write: an answer at once (committed, copied
    /// bytes, the block its txg or an earlier fsync wrote, a late block written now), or
    /// the open record to write in place.
    fn prepare_early(&self, want: EarlyWant, policy: SyncPolicy) -> Result<Prepared<'_>, ObjError> {
        let EarlyWant { id, txg, off, len, may_write_in_place } = want;
        let obj = match self.get_including_freed(id) {
            Ok(obj) => obj,
            // Never created in a committed txg and already gone: nothing to replay it on.
            Err(ObjError::NoObject(_)) => return Ok(Prepared::Done(EarlyData::Committed)),
            Err(e) => return Err(e),
        };
        let ctx = self.ctx();
        // Holding `txg` open keeps the record in its changes while its block is written,
        // so the txg can adopt the block. Not waiting: the log is held (see try_hold_open).
        let hold = if may_write_in_place { ctx.txg.try_hold_open(txg) } else { None };
        let wanted = Wanted { txg, off, len, in_place: may_write_in_place, held_open: hold.is_some() };
        let mut st = obj.lock();
        let done = match st.log_data(&ctx.zio, ctx.txg.synced(), wanted)? {
            LogData::Committed => EarlyData::Committed,
            LogData::Bytes(data) => EarlyData::Copied(data),
            LogData::Synced { block_offset, bp } => EarlyData::InPlace { block_offset, bp },
            LogData::Late { block_offset, rec } => {
                drop(st);
                drop(hold);
                let bp = self.write_late(&rec, txg, policy)?;
                EarlyData::InPlace { block_offset, bp }
            }
            LogData::Record { blkid, block_offset, rec } => {
                if let Some(bp) = st.early_block(blkid, &rec) {
                    return Ok(Prepared::Done(EarlyData::InPlace { block_offset, bp }));
                }
                let page = st.page(blkid);
                drop(st); // readers and writers of the file go on while the block is written
                let open = hold.expect("an open record is only handed out to a caller holding its txg");
                return Ok(Prepared::Write(InPlaceRecord { obj, blkid, block_offset, rec, page, txg, _open: open }));
            }
        };
        Ok(Prepared::Done(done))
    }

    /// Writes `rec`, record of txg `txg` (no longer open), as a block of its own for the
    /// log to point at. No tree will: it is returned as an orphan by the first sync of
    /// `txg` or a later txg that starts after this (`late_orphans`), so it is released
    /// only once `txg` has committed — until then a replay may need it.
    fn write_late(&self, rec: &Record, txg: u64, policy: SyncPolicy) -> Result<BlockPtr, ZioError> {
        // Not cached, not traced as the page's: nothing will read it but a replay.
        let block = PendingBlock {
            data: rec,
            compression: policy.compression,
            checksum: policy.checksum,
            level: 0,
            block_type: BlockType::Data,
            cache: CachePolicy::None,
            page: None,
            objset: Some(self.id()),
            stored: None,
        };
        let bp = self.ctx().zio.write_blocks_as(&[block], txg, IoClass::SyncWrite)?.pop().expect("one block written");
        self.add_late_orphan(txg, bp);
        Ok(bp)
    }
}

/// What the log asks of `ObjState::log_data`: bytes [off, off + len) written in txg
/// `txg`; whether it wants them written in place, and whether it holds `txg` open.
#[derive(Clone, Copy)]
struct Wanted {
    txg: u64,
    off: u64,
    len: u64,
    in_place: bool,
    held_open: bool,
}

/// Writes the open txg's records `records` in place, together (one run on the devices
/// where they fit), as blocks born in that txg.
fn write_in_place(zio: &Zio, records: &[InPlaceRecord], policy: SyncPolicy) -> Result<Vec<BlockPtr>, ZioError> {
    let Some(txg) = records.first().map(|r| r.txg) else { return Ok(Vec::new()) };
    // Every record is held open in its txg, and only one txg is open at a time.
    assert!(records.iter().all(|r| r.txg == txg), "records written in place belong to the one open txg");
    let blocks: Vec<PendingBlock> = records
        .iter()
        .map(|r| PendingBlock {
            data: &r.rec,
            compression: policy.compression,
            checksum: policy.checksum,
            level: 0,
            block_type: BlockType::Data,
            cache: policy.cache,
            page: Some(r.page),
            objset: Some(r.page.objset),
            stored: None,
        })
        .collect();
    // The fsync that asked waits for these writes: they go ahead of the txg's writes.
    zio.write_blocks_as(&blocks, txg, IoClass::SyncWrite)
}

impl ObjState {
    /// What the intent log needs, at commit time, for bytes [off, off + len) (within one
    /// record) written in txg `txg`; `synced` is the last committed txg. While `txg` is
    /// open and the caller holds it, the record itself, to be written in place. Otherwise
    /// the record as `txg` sees it — from the open changes if they are `txg`'s (it is
    /// closing), else from below them (`txg` is syncing, or synced and not yet committed:
    /// the tree then holds exactly its state) — to be written late if the caller wants it
    /// in place, or the block `txg` wrote for it; else a copy of the bytes.
    fn log_data(&mut self, zio: &Zio, synced: u64, w: Wanted) -> Result<LogData, ZioError> {
        let Wanted { txg, off, len, .. } = w;
        if txg <= synced {
            return Ok(LogData::Committed);
        }
        let blksz = self.blksz();
        let blkid = off / blksz;
        let block_offset = blkid * blksz;
        let in_open = self.open.txg == txg;
        let whole_range = off + len <= block_offset + blksz;
        if in_open && w.held_open && w.in_place && whole_range {
            if let Some(rec) = self.open.records.get(&blkid).filter(|r| r.len() as u64 == blksz) {
                return Ok(LogData::Record { blkid, block_offset, rec: rec.clone() });
            }
        }
        let source = if in_open { self.source(zio, blkid)? } else { self.source_below_open(zio, blkid)? };
        let holds = |size: u64| whole_range && off + len <= block_offset + size;
        if w.in_place && !(in_open && w.held_open) {
            match &source {
                Source::Mem(rec) if holds(rec.len() as u64) => {
                    return Ok(LogData::Late { block_offset, rec: rec.clone() });
                }
                // Only a block born in `txg` is surely not in the committed tree (which
                // claims it at import) and stays allocated until `txg` commits.
                Source::Disk(bp) if bp.birth == txg && holds(bp.lsize as u64) => {
                    return Ok(LogData::Synced { block_offset, bp: *bp });
                }
                _ => {}
            }
        }
        let in_rec = (off - block_offset) as usize;
        let mut out = vec![0u8; len as usize];
        let mut copy_from = |rec: &[u8]| {
            let avail = rec.len().saturating_sub(in_rec).min(out.len());
            out[..avail].copy_from_slice(&rec[in_rec..in_rec + avail]);
        };
        match source {
            Source::Mem(r) => copy_from(&r),
            Source::Disk(bp) => copy_from(&zio.read(&bp, Access::page(ReadKind::LogFetch, self.page(blkid)))?),
            Source::Hole => {}
        }
        Ok(LogData::Bytes(out))
    }

    /// The block already written in place for `rec` (record `blkid` of the open txg), if
    /// the record has not changed since.
    fn early_block(&self, blkid: u64, rec: &Record) -> Option<BlockPtr> {
        self.open.early.get(&blkid).filter(|(r, _)| Arc::ptr_eq(r, rec)).map(|(_, bp)| *bp)
    }

    /// Records that `rec` (record `blkid` of the open txg) was written in place as `bp`.
    /// The caller holds the open txg, so these changes are still that txg's. A record
    /// that changed meanwhile leaves `bp` an orphan.
    fn set_early_block(&mut self, blkid: u64, rec: &Record, bp: BlockPtr) {
        let unchanged = self.open.records.get(&blkid).is_some_and(|r| Arc::ptr_eq(r, rec));
        if !unchanged {
            self.open.orphans.push(bp);
            return;
        }
        if let Some((_, old)) = self.open.early.insert(blkid, (rec.clone(), bp)) {
            self.open.orphans.push(old);
        }
    }
}

/// What the sync does with record `rec` of txg `txg` given the block written early for
/// it, if any: the block when the record is the very buffer that was written (`Arc`
/// identity: while `Changes::early` holds the buffer, a write copies it rather than
/// changing it), else `None` and the block is an orphan.
pub(crate) fn adoptable(
    early: Option<(Record, BlockPtr)>,
    rec: &Record,
    txg: u64,
    orphans: &mut Vec<BlockPtr>,
) -> Option<BlockPtr> {
    match early {
        Some((written, bp)) if Arc::ptr_eq(&written, rec) => {
            assert!(
                bp.lsize as usize == rec.len() && bp.birth == txg,
                "invariant broken: a block is adopted only if its record is unchanged (block of {} bytes born in txg \
                 {}, record of {} bytes in txg {txg})",
                bp.lsize,
                bp.birth,
                rec.len()
            );
            Some(bp)
        }
        other => {
            orphans.extend(other.map(|(_, bp)| bp));
            None
        }
    }
}

//! Early writes (ZFS's dmu_sync): at fsync, the intent log asks for the bytes of a write
//! made in a txg that has not committed; the record holding them is written in place
//! now, and the txg later adopts that block instead of writing the record again.
//!
//! Owns: finding the data of a logged write as of its txg, writing the record early with
//! the dataset's encoding policy, and the adoption bookkeeping — `Changes::early` (blocks
//! written for records of the open txg) and `Changes::orphans` (blocks whose record
//! changed after: no tree will point at them, the sync returns them to be freed).
//!
//! Promises: a block is written early only while its txg is held open, so the record is
//! still that txg's when the block is noted for adoption; the sync adopts it only if the
//! record is the very buffer that was written (asserted), else returns it as an orphan;
//! if the txg is syncing already, or the caller asked for no early write, the bytes are
//! copied instead.
//!
//! Must never: wait for a txg (the caller holds the intent log: `try_hold_open` only), or
//! free a block (orphans go back to the caller through `SyncResult`).
use std::sync::Arc;

use tarn_zio::{Access, BlockPtr, BlockType, IoClass, PageId, PendingBlock, ReadKind, Zio, ZioError};

use crate::object::{ObjState, Record, Source};
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
    /// The bytes themselves, as of that txg.
    Bytes(Vec<u8>),
    /// The txg is committed.
    Committed,
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
        let obj = match self.get_including_freed(id) {
            Ok(obj) => obj,
            // Never created in a committed txg and already gone: nothing to replay it on.
            Err(ObjError::NoObject(_)) => return Ok(EarlyData::Committed),
            Err(e) => return Err(e),
        };
        let ctx = self.ctx();
        // Holding `txg` open keeps the record in its changes while its block is written,
        // so the txg can adopt the block. Not waiting: the log is held (see try_hold_open).
        let hold = if may_write_in_place { ctx.txg.try_hold_open(txg) } else { None };
        let mut st = obj.lock();
        let (blkid, block_offset, rec) = match st.log_data(&ctx.zio, txg, ctx.txg.synced(), off, len, hold.is_some())? {
            LogData::Committed => return Ok(EarlyData::Committed),
            LogData::Bytes(data) => return Ok(EarlyData::Copied(data)),
            LogData::Record { blkid, block_offset, rec } => (blkid, block_offset, rec),
        };
        if let Some(bp) = st.early_block(blkid, &rec) {
            return Ok(EarlyData::InPlace { block_offset, bp });
        }
        let page = st.page(blkid);
        drop(st); // readers and writers of the file go on while the block is written
        let bp = write_record(&ctx.zio, &rec, page, txg, policy)?;
        obj.lock().set_early_block(blkid, &rec, bp);
        drop(hold);
        Ok(EarlyData::InPlace { block_offset, bp })
    }
}

/// Writes one data record as a block born in `txg`.
fn write_record(zio: &Zio, rec: &Record, page: PageId, txg: u64, policy: SyncPolicy) -> Result<BlockPtr, ZioError> {
    let block = PendingBlock {
        data: rec,
        compression: policy.compression,
        checksum: policy.checksum,
        level: 0,
        block_type: BlockType::Data,
        cache: policy.cache,
        page: Some(page),
        objset: Some(page.objset),
    };
    // The fsync that asked waits for this write: it goes ahead of the txg's writes.
    Ok(zio.write_blocks_as(&[block], txg, IoClass::SyncWrite)?.pop().expect("one block written"))
}

impl ObjState {
    /// What the intent log needs, at commit time, for bytes [off, off + len) (within one
    /// record) written in txg `txg`; `synced` is the last committed txg. While `txg` is
    /// open and the caller holds it (`may_write_early`), the record itself, to be written
    /// in place; otherwise a copy of the bytes as `txg` sees them: from the open changes
    /// if they are `txg`'s, else from below them (`txg` is syncing, or synced and not yet
    /// committed — the tree then holds exactly its state).
    fn log_data(
        &mut self,
        zio: &Zio,
        txg: u64,
        synced: u64,
        off: u64,
        len: u64,
        may_write_early: bool,
    ) -> Result<LogData, ZioError> {
        if txg <= synced {
            return Ok(LogData::Committed);
        }
        let blksz = self.blksz();
        let blkid = off / blksz;
        let in_open = self.open.txg == txg;
        if in_open && may_write_early && off + len <= (blkid + 1) * blksz {
            if let Some(rec) = self.open.records.get(&blkid).filter(|r| r.len() as u64 == blksz) {
                return Ok(LogData::Record { blkid, block_offset: blkid * blksz, rec: rec.clone() });
            }
        }
        let source = if in_open { self.source(zio, blkid)? } else { self.source_below_open(zio, blkid)? };
        let in_rec = (off - blkid * blksz) as usize;
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

//! Changing an object's bytes in the open txg: write, truncate, punch a hole, and the
//! block size of a file still made of one block.
//!
//! Owns: the open txg's records of one object and the rules that shape them — a partial
//! record is read-modify-write, a whole one a fresh buffer; a file smaller than a record
//! is one block of its own size (rounded to 512 bytes) until it grows past one record.
//!
//! Promises: after each operation, a read returns exactly what POSIX says the file holds
//! (bytes past a shrink are gone, bytes past a growth or in a hole are zeros); size,
//! mtime and ctime follow; the change is noted as the open txg's.
//!
//! Must never: touch the syncing txg's records or the tree (a sync may be writing them).
use std::sync::Arc;

use tarn_zio::{ReadKind, Zio, ZioError};

use crate::dnode::Timespec;
use crate::object::ObjState;

/// Smallest block size step for a file still made of one block.
const MIN_BLOCK: u32 = 512;

impl ObjState {
    /// Grows the block size of a file that is still one block, so that a file smaller
    /// than a record is one block of its own size.
    ///
    /// The test is "no data beyond block 0", not "size <= block size": a file extended by
    /// truncate or fallocate before its first write (as InnoDB does) must still get
    /// `recordsize` blocks, not stay made of 512-byte ones.
    ///
    /// Returns the dirty bytes this adds to the open txg: the grown block 0 less what of it
    /// was already dirty (see `write`).
    pub fn fit_block_size(&mut self, zio: &Zio, end: u64, recordsize: u32) -> Result<u64, ZioError> {
        let blksz = self.dnode.blksz;
        if end <= blksz as u64 || blksz >= recordsize || !self.has_only_block_zero() {
            return Ok(0);
        }
        let wanted = (end.min(recordsize as u64) as u32).next_multiple_of(MIN_BLOCK).min(recordsize);
        let wanted = if end > recordsize as u64 { recordsize } else { wanted };
        if wanted <= blksz {
            return Ok(0);
        }
        let mut rec0 = if self.dnode.size > 0 { self.load_record(zio, 0, ReadKind::Rmw)? } else { Vec::new() };
        self.dnode.blksz = wanted;
        rec0.resize(wanted as usize, 0);
        if self.dnode.size == 0 {
            return Ok(0);
        }
        let dirty_before = self.open.records.get(&0).map_or(0, |r| r.len() as u64);
        self.open.records.insert(0, Arc::new(rec0));
        Ok(wanted as u64 - dirty_before.min(wanted as u64))
    }

    /// True while no record beyond the first exists (on disk, syncing or open): the only
    /// time the block size may change.
    fn has_only_block_zero(&self) -> bool {
        self.tree.nlevels() <= 1
            && self.open.records.keys().all(|&b| b == 0)
            && self.syncing.records.keys().all(|&b| b == 0)
            && self.open.stored.keys().all(|&b| b == 0)
            && self.syncing.stored.keys().all(|&b| b == 0)
    }

    /// Writes `data` at `off` into the open txg `txg`. Returns the dirty bytes the write
    /// added: the size of each record it dirtied first in this txg, nothing for a record
    /// already dirty (as ZFS charges a dbuf's size once per txg). A page rewritten many
    /// times in one txg — a database's log page at every commit — costs the txg, the
    /// write throttle and the ARC's dirty share one record, which is what the sync writes.
    pub fn write(&mut self, zio: &Zio, txg: u64, off: u64, data: &[u8], recordsize: u32) -> Result<u64, ZioError> {
        let end = off + data.len() as u64;
        let mut newly_dirty = self.fit_block_size(zio, end, recordsize)?;
        let blksz = self.blksz();
        let mut done = 0usize;
        while done < data.len() {
            let pos = off + done as u64;
            let blkid = pos / blksz;
            let in_rec = (pos % blksz) as usize;
            let n = (blksz as usize - in_rec).min(data.len() - done);
            if self.open.records.get(&blkid).is_none_or(|r| r.is_empty()) {
                newly_dirty += blksz;
            }
            let rec = self.record_for_write(zio, blkid, in_rec == 0 && n == blksz as usize)?;
            rec[in_rec..in_rec + n].copy_from_slice(&data[done..done + n]);
            done += n;
        }
        if end > self.dnode.size {
            self.dnode.size = end;
        }
        self.touch_data(txg);
        Ok(newly_dirty)
    }

    /// Sets the file size; bytes past a shrink are gone, bytes past a growth are zeros.
    pub fn truncate(&mut self, zio: &Zio, txg: u64, size: u64) -> Result<(), ZioError> {
        let blksz = self.blksz();
        if size < self.dnode.size {
            let keep = size.div_ceil(blksz);
            self.open.records.retain(|&b, _| b < keep);
            self.open.stored.retain(|&b, _| b < keep);
            self.open.truncate_blocks = Some(self.open.truncate_blocks.map_or(keep, |t| t.min(keep)));
            let tail = (size % blksz) as usize;
            if tail != 0 {
                let rec = self.record_for_write(zio, size / blksz, false)?;
                rec[tail..].fill(0);
            }
        }
        self.dnode.size = size;
        self.touch_data(txg);
        Ok(())
    }

    /// Zeros [off, off+len) without changing the size; whole records become holes.
    pub fn punch_hole(&mut self, zio: &Zio, txg: u64, off: u64, len: u64) -> Result<(), ZioError> {
        let end = off.saturating_add(len).min(self.dnode.size);
        let blksz = self.blksz();
        let mut pos = off;
        while pos < end {
            let blkid = pos / blksz;
            let in_rec = pos % blksz;
            let n = (blksz - in_rec).min(end - pos);
            if n == blksz {
                self.open.records.insert(blkid, Arc::new(Vec::new()));
            } else {
                let rec = self.record_for_write(zio, blkid, false)?;
                rec[in_rec as usize..(in_rec + n) as usize].fill(0);
            }
            pos += n;
        }
        self.touch_data(txg);
        Ok(())
    }

    /// The bytes changed in txg `txg`: mtime and ctime are now, and the open changes are
    /// that txg's.
    fn touch_data(&mut self, txg: u64) {
        let now = Timespec::now();
        self.dnode.mtime = now;
        self.dnode.ctime = now;
        self.changed_in(txg);
    }

    /// Notes that the open changes belong to txg `txg`.
    pub(crate) fn changed_in(&mut self, txg: u64) {
        self.last_dirty_txg = txg;
        self.open.txg = txg;
    }

    /// The open txg's copy of record `blkid`, made from the current bytes unless the
    /// caller overwrites it whole.
    fn record_for_write(&mut self, zio: &Zio, blkid: u64, whole: bool) -> Result<&mut Vec<u8>, ZioError> {
        let blksz = self.blksz() as usize;
        let present = self.open.records.get(&blkid).is_some_and(|r| !r.is_empty());
        if !present {
            let fresh = if whole { vec![0u8; blksz] } else { self.load_record(zio, blkid, ReadKind::Rmw)? };
            self.open.records.insert(blkid, Arc::new(fresh));
        }
        let rec = Arc::make_mut(self.open.records.get_mut(&blkid).expect("inserted"));
        if rec.len() < blksz {
            rec.resize(blksz, 0);
        }
        Ok(rec)
    }
}

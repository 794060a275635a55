//! One object (file, directory, symlink) in memory: its dnode as the open txg sees it,
//! its block tree as committed, and its changes per txg (open and syncing).
//!
//! A write lands in the open txg's records (read-modify-write of a partial record); a
//! quiesce freezes them as the syncing txg's; the sync writes them and updates the tree.
//! A read looks in the open records, then the syncing ones, then the tree.
use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};
use tarn_zio::{BlockPtr, CachePolicy, Zio, ZioError};

use crate::dir::{self, Entries};
use crate::dnode::{Dnode, ObjType, Timespec};
use crate::tree::BlockTree;
use crate::ObjError;

/// Smallest block size step for a file still made of one block.
const MIN_BLOCK: u32 = 512;

/// A record's content in a txg's changes; an empty vector is a hole (zeros, no block).
pub type Record = Arc<Vec<u8>>;

#[derive(Default)]
pub struct Changes {
    /// The txg these changes belong to (0 while there are none).
    pub txg: u64,
    pub records: BTreeMap<u64, Record>,
    /// Records an fsync already wrote in place for the intent log (indirect writes): if
    /// the record is still that very buffer when its txg syncs, the txg adopts the block
    /// instead of writing it again.
    pub early: BTreeMap<u64, (Record, BlockPtr)>,
    /// Blocks written early that the txg will not adopt (the record changed again). The
    /// log may point at them until this txg commits, so they are freed in its sync.
    pub orphans: Vec<BlockPtr>,
    /// Records at or beyond this index were cut off by a truncate in this txg.
    pub truncate_blocks: Option<u64>,
    /// The dnode as of the quiesce (syncing side only).
    pub dnode: Option<Dnode>,
    pub free_object: bool,
}

impl Changes {
    fn is_empty(&self) -> bool {
        self.records.is_empty()
            && self.early.is_empty()
            && self.orphans.is_empty()
            && self.truncate_blocks.is_none()
            && !self.free_object
    }
}

/// What the intent log gets for bytes written in a txg (see `ObjState::log_data`).
pub enum LogData {
    /// The open record holding the bytes: write it in place and log a pointer.
    Record { blkid: u64, block_offset: u64, rec: Record },
    /// The bytes themselves, as of that txg.
    Bytes(Vec<u8>),
    /// The txg is committed.
    Committed,
}

pub struct ObjState {
    pub dnode: Dnode,
    pub tree: BlockTree,
    pub open: Changes,
    pub syncing: Changes,
    pub last_dirty_txg: u64,
    /// Loaded entries of a directory; `dir_dirty` says they changed in the open txg.
    pub dir: Option<Entries>,
    pub dir_dirty: bool,
    /// The object was freed (its dnode slot will be zeroed).
    pub gone: bool,
    /// Sequential-read detection: the record the next read would start at if the reader
    /// goes on in order, how many reads in a row did, and how far read-ahead has gone.
    seq_next: u64,
    seq_run: u32,
    prefetched_to: u64,
}

pub struct Object {
    pub id: u64,
    state: Mutex<ObjState>,
}

/// Where a record's current bytes are.
enum Source {
    Mem(Record),
    Disk(BlockPtr),
    Hole,
}

impl Object {
    pub fn new(id: u64, dnode: Dnode) -> Object {
        let tree = BlockTree::new(dnode.root, dnode.nlevels);
        Object {
            id,
            state: Mutex::new(ObjState {
                dnode,
                tree,
                open: Changes::default(),
                syncing: Changes::default(),
                last_dirty_txg: 0,
                dir: None,
                dir_dirty: false,
                gone: false,
                seq_next: 0,
                seq_run: 0,
                prefetched_to: 0,
            }),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, ObjState> {
        self.state.lock()
    }

    pub fn dnode(&self) -> Dnode {
        self.state.lock().dnode.clone()
    }
}

impl ObjState {
    fn blksz(&self) -> u64 {
        self.dnode.blksz as u64
    }

    fn source(&mut self, zio: &Zio, blkid: u64) -> Result<Source, ZioError> {
        if let Some(r) = self.open.records.get(&blkid) {
            return Ok(Source::Mem(r.clone()));
        }
        if self.open.truncate_blocks.is_some_and(|t| blkid >= t) {
            return Ok(Source::Hole);
        }
        self.source_below_open(zio, blkid)
    }

    /// Where record `blkid` is as the syncing (or last synced) txg sees it.
    fn source_below_open(&mut self, zio: &Zio, blkid: u64) -> Result<Source, ZioError> {
        if let Some(r) = self.syncing.records.get(&blkid) {
            return Ok(Source::Mem(r.clone()));
        }
        if self.syncing.truncate_blocks.is_some_and(|t| blkid >= t) {
            return Ok(Source::Hole);
        }
        Ok(match self.tree.get(zio, blkid)? {
            Some(bp) => Source::Disk(bp),
            None => Source::Hole,
        })
    }

    /// The whole record `blkid` as bytes of the current block size (zeros for a hole).
    fn load_record(&mut self, zio: &Zio, blkid: u64) -> Result<Vec<u8>, ZioError> {
        let blksz = self.blksz() as usize;
        let mut out = match self.source(zio, blkid)? {
            Source::Mem(r) if r.is_empty() => vec![0u8; blksz],
            Source::Mem(r) => r.as_ref().clone(),
            Source::Disk(bp) => zio.read(&bp)?,
            Source::Hole => vec![0u8; blksz],
        };
        out.resize(blksz, 0);
        Ok(out)
    }

    /// Copies file bytes [off, off + buf.len()) into `buf`, clamped to the file size.
    /// Disk reads happen with the object unlocked, so one slow read does not stall other
    /// readers and writers of the same file.
    pub fn read(
        mut guard: MutexGuard<'_, ObjState>,
        zio: &Zio,
        reclaim: &parking_lot::RwLock<()>,
        off: u64,
        buf: &mut [u8],
        policy: CachePolicy,
    ) -> Result<usize, ZioError> {
        let size = guard.dnode.size;
        if off >= size {
            return Ok(0);
        }
        let len = (buf.len() as u64).min(size - off) as usize;
        let blksz = guard.blksz();
        let mut done = 0usize;
        let mut disk_reads: Vec<(BlockPtr, usize, usize, usize)> = Vec::new();
        while done < len {
            let pos = off + done as u64;
            let blkid = pos / blksz;
            let in_rec = (pos % blksz) as usize;
            let n = (blksz as usize - in_rec).min(len - done);
            match guard.source(zio, blkid)? {
                Source::Mem(r) if !r.is_empty() => buf[done..done + n].copy_from_slice(&r[in_rec..in_rec + n]),
                Source::Disk(bp) => disk_reads.push((bp, in_rec, done, n)),
                _ => buf[done..done + n].fill(0),
            }
            done += n;
        }
        if policy == CachePolicy::All && len > 0 {
            let (first, last) = (off / blksz, (off + len as u64 - 1) / blksz);
            guard.read_ahead(zio, first, last)?;
        }
        // Hold off the release of freed blocks while we read blocks the tree pointed to.
        let _reclaim = reclaim.read_recursive();
        drop(guard);
        for (bp, in_rec, at, n) in disk_reads {
            if in_rec == 0 && n == bp.lsize as usize {
                zio.read_cached(&bp, &mut buf[at..at + n], policy)?;
            } else {
                let mut rec = vec![0u8; bp.lsize as usize];
                zio.read_cached(&bp, &mut rec, policy)?;
                let avail = rec.len().saturating_sub(in_rec).min(n);
                buf[at..at + avail].copy_from_slice(&rec[in_rec..in_rec + avail]);
                buf[at + avail..at + n].fill(0);
            }
        }
        Ok(len)
    }

    /// What the intent log needs, at commit time, for bytes [off, off + len) (within one
    /// record) written in txg `txg`; `synced` is the last committed txg. While `txg` is
    /// open and the caller holds it (`may_write_early`), the record itself, to be written
    /// in place; otherwise a copy of the bytes as `txg` sees them: from the open changes
    /// if they are `txg`'s, else from below them (`txg` is syncing, or synced and not yet
    /// committed — the tree then holds exactly its state).
    pub fn log_data(&mut self, zio: &Zio, txg: u64, synced: u64, off: u64, len: u64, may_write_early: bool) -> Result<LogData, ZioError> {
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
            Source::Disk(bp) => copy_from(&zio.read(&bp)?),
            Source::Hole => {}
        }
        Ok(LogData::Bytes(out))
    }

    /// The block already written in place for `rec` (record `blkid` of the open txg), if
    /// the record has not changed since.
    pub fn early_block(&self, blkid: u64, rec: &Record) -> Option<BlockPtr> {
        self.open.early.get(&blkid).filter(|(r, _)| Arc::ptr_eq(r, rec)).map(|(_, bp)| *bp)
    }

    /// Records that `rec` (record `blkid` of the open txg) was written in place as `bp`.
    /// The caller holds the open txg, so these changes are still that txg's.
    pub fn set_early_block(&mut self, blkid: u64, rec: &Record, bp: BlockPtr) {
        let unchanged = self.open.records.get(&blkid).is_some_and(|r| Arc::ptr_eq(r, rec));
        if !unchanged {
            self.open.orphans.push(bp);
            return;
        }
        if let Some((_, old)) = self.open.early.insert(blkid, (rec.clone(), bp)) {
            self.open.orphans.push(old);
        }
    }

    /// Sequential prefetch (like ZFS's zfetch): after a few reads in record order, asks
    /// for the next records to be read into the ARC, the distance doubling up to 32.
    fn read_ahead(&mut self, zio: &Zio, first: u64, last: u64) -> Result<(), ZioError> {
        if first == self.seq_next {
            self.seq_run = self.seq_run.saturating_add(1);
        } else if first + 1 != self.seq_next {
            self.seq_run = 0;
            self.prefetched_to = 0;
        }
        self.seq_next = last + 1;
        if self.seq_run < 2 {
            return Ok(());
        }
        let distance = 1u64 << self.seq_run.min(5);
        let records = self.dnode.size.div_ceil(self.blksz());
        let from = (last + 1).max(self.prefetched_to);
        let to = (last + 1 + distance).min(records);
        let mut bps = Vec::new();
        for blkid in from..to {
            if let Source::Disk(bp) = self.source(zio, blkid)? {
                bps.push(bp);
            }
        }
        self.prefetched_to = to.max(self.prefetched_to);
        zio.prefetch(&bps);
        Ok(())
    }

    /// Grows the block size of a file that is still one block, so that a file smaller
    /// than a record is one block of its own size.
    ///
    /// The test is "no data beyond block 0", not "size <= block size": a file extended by
    /// truncate or fallocate before its first write (as InnoDB does) must still get
    /// `recordsize` blocks, not stay made of 512-byte ones.
    pub fn fit_block_size(&mut self, zio: &Zio, end: u64, recordsize: u32) -> Result<(), ZioError> {
        let blksz = self.dnode.blksz;
        if end <= blksz as u64 || blksz >= recordsize || !self.has_only_block_zero() {
            return Ok(());
        }
        let wanted = (end.min(recordsize as u64) as u32).next_multiple_of(MIN_BLOCK).min(recordsize);
        let wanted = if end > recordsize as u64 { recordsize } else { wanted };
        if wanted <= blksz {
            return Ok(());
        }
        let mut rec0 = if self.dnode.size > 0 { self.load_record(zio, 0)? } else { Vec::new() };
        self.dnode.blksz = wanted;
        rec0.resize(wanted as usize, 0);
        if self.dnode.size > 0 {
            self.open.records.insert(0, Arc::new(rec0));
        }
        Ok(())
    }

    /// True while no record beyond the first exists (on disk, syncing or open): the only
    /// time the block size may change.
    fn has_only_block_zero(&self) -> bool {
        self.tree.nlevels() <= 1
            && self.open.records.keys().all(|&b| b == 0)
            && self.syncing.records.keys().all(|&b| b == 0)
    }

    /// Writes `data` at `off` into the open txg.
    pub fn write(&mut self, zio: &Zio, txg: u64, off: u64, data: &[u8], recordsize: u32) -> Result<(), ZioError> {
        let end = off + data.len() as u64;
        self.fit_block_size(zio, end, recordsize)?;
        let blksz = self.blksz();
        let mut done = 0usize;
        while done < data.len() {
            let pos = off + done as u64;
            let blkid = pos / blksz;
            let in_rec = (pos % blksz) as usize;
            let n = (blksz as usize - in_rec).min(data.len() - done);
            let rec = self.record_for_write(zio, blkid, in_rec == 0 && n == blksz as usize)?;
            rec[in_rec..in_rec + n].copy_from_slice(&data[done..done + n]);
            done += n;
        }
        if end > self.dnode.size {
            self.dnode.size = end;
        }
        let now = Timespec::now();
        self.dnode.mtime = now;
        self.dnode.ctime = now;
        self.changed_in(txg);
        Ok(())
    }

    /// Notes that the open changes belong to txg `txg`.
    fn changed_in(&mut self, txg: u64) {
        self.last_dirty_txg = txg;
        self.open.txg = txg;
    }

    /// The open txg's copy of record `blkid`, made from the current bytes unless the
    /// caller overwrites it whole.
    fn record_for_write(&mut self, zio: &Zio, blkid: u64, whole: bool) -> Result<&mut Vec<u8>, ZioError> {
        let blksz = self.blksz() as usize;
        let present = self.open.records.get(&blkid).is_some_and(|r| !r.is_empty());
        if !present {
            let fresh = if whole { vec![0u8; blksz] } else { self.load_record(zio, blkid)? };
            self.open.records.insert(blkid, Arc::new(fresh));
        }
        let rec = Arc::make_mut(self.open.records.get_mut(&blkid).expect("inserted"));
        if rec.len() < blksz {
            rec.resize(blksz, 0);
        }
        Ok(rec)
    }

    /// Sets the file size; bytes past a shrink are gone, bytes past a growth are zeros.
    pub fn truncate(&mut self, zio: &Zio, txg: u64, size: u64) -> Result<(), ZioError> {
        let blksz = self.blksz();
        if size < self.dnode.size {
            let keep = size.div_ceil(blksz);
            self.open.records.retain(|&b, _| b < keep);
            self.open.truncate_blocks = Some(self.open.truncate_blocks.map_or(keep, |t| t.min(keep)));
            let tail = (size % blksz) as usize;
            if tail != 0 {
                let rec = self.record_for_write(zio, size / blksz, false)?;
                rec[tail..].fill(0);
            }
        }
        self.dnode.size = size;
        let now = Timespec::now();
        self.dnode.mtime = now;
        self.dnode.ctime = now;
        self.changed_in(txg);
        Ok(())
    }

    /// Zeros [off, off+len) without changing the size; whole records become holes.
    pub fn punch_hole(&mut self, zio: &Zio, txg: u64, off: u64, len: u64) -> Result<(), ZioError> {
        let end = (off + len).min(self.dnode.size);
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
        self.dnode.mtime = Timespec::now();
        self.dnode.ctime = self.dnode.mtime;
        self.changed_in(txg);
        Ok(())
    }

    /// Loads a directory's entries on first use.
    pub fn dir_entries(&mut self, zio: &Zio) -> Result<&mut Entries, ObjError> {
        if self.dnode.obj_type != ObjType::Dir {
            return Err(ObjError::NotDir);
        }
        if self.dir.is_none() {
            let mut bytes = vec![0u8; self.dnode.size as usize];
            let size = self.dnode.size;
            let blksz = self.blksz();
            let mut at = 0u64;
            while at < size {
                let rec = self.load_record(zio, at / blksz)?;
                let n = (blksz.min(size - at)) as usize;
                bytes[at as usize..at as usize + n].copy_from_slice(&rec[..n]);
                at += n as u64;
            }
            self.dir = Some(dir::decode(&bytes).map_err(|e| ObjError::Corrupt(e.to_string()))?);
        }
        Ok(self.dir.as_mut().expect("loaded"))
    }

    /// Moves the open txg's changes to the syncing side (the txg barrier is held).
    pub fn quiesce(&mut self, zio: &Zio, txg: u64) -> Result<(), ZioError> {
        assert!(self.syncing.is_empty() && self.syncing.dnode.is_none(), "object {} synced twice", self.dnode.gen);
        if self.dir_dirty && !self.gone {
            let bytes = dir::encode(self.dir.as_ref().expect("dirty directory is loaded"));
            self.write(zio, txg, 0, &bytes, 16384)?;
            self.truncate(zio, txg, bytes.len() as u64)?;
            self.dir_dirty = false;
        }
        self.syncing = std::mem::take(&mut self.open);
        self.syncing.dnode = Some(self.dnode.clone());
        Ok(())
    }

    /// The dnode as of the syncing txg, pointing at the tree just written.
    pub fn syncing_dnode_bytes(&self, out: &mut [u8]) {
        let mut d = self.syncing.dnode.clone().unwrap_or_else(|| self.dnode.clone());
        d.root = self.tree.root();
        d.nlevels = self.tree.nlevels();
        d.encode(out);
    }

    /// The syncing txg is written: drop its changes, keep the tree's new root.
    pub fn finish_sync(&mut self) {
        self.syncing = Changes::default();
        self.dnode.root = self.tree.root();
        self.dnode.nlevels = self.tree.nlevels();
    }

    /// A record of the syncing txg to change during the sync itself (the dnode table is
    /// written this way: its records change only while a txg syncs).
    pub fn syncing_record_mut(&mut self, zio: &Zio, blkid: u64) -> Result<&mut Vec<u8>, ZioError> {
        if !self.syncing.records.contains_key(&blkid) {
            let blksz = self.blksz() as usize;
            let mut rec = match self.tree.get(zio, blkid)? {
                Some(bp) => zio.read(&bp)?,
                None => vec![0u8; blksz],
            };
            rec.resize(blksz, 0);
            self.syncing.records.insert(blkid, Arc::new(rec));
        }
        Ok(Arc::make_mut(self.syncing.records.get_mut(&blkid).expect("inserted")))
    }
}

//! One object (file, directory, symlink) in memory: its dnode as the open txg sees it,
//! its block tree as committed, and its changes per txg (open and syncing).
//!
//! Owns: the object's lock and the lock-order rule (a thread holds one object lock at a
//! time — the one exception, an object just allocated and reachable by no name, has its
//! own handle, `FreshObject`), and the read path.
//!
//! Promises: a read returns what the last write left (open records, then syncing ones,
//! then the tree), reading disk — records and the indirect blocks above them — with the
//! object unlocked; taking a second object lock stops loudly (an always-on assert)
//! instead of risking a deadlock.
//!
//! Must never: hand out its state without the lock, or read a block the tree pointed to
//! outside a reclaim section (the block could be freed and reused under it).
//!
//! A write lands in the open txg's records (read-modify-write of a partial record,
//! `data.rs`); a quiesce freezes them as the syncing txg's and the sync writes them and
//! updates the tree (`changes.rs`, `objset.rs`).
use std::cell::Cell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};
use tarn_zio::{Access, BlockPtr, CachePolicy, HotCopy, PageId, ReadKind, Residency, StoredAs, Zio, ZioError};

use crate::changes::Changes;
use crate::dir::Entries;
use crate::dnode::Dnode;
use crate::tree::{self, BlockTree, InMemory};
use crate::zfetch::{Ahead, Fate, Zfetch, ZfetchEvent};
use crate::Ctx;

/// A record's content in a txg's changes; an empty vector is a hole (zeros, no block).
pub(crate) type Record = Arc<Vec<u8>>;

/// A whole record as its sender stored it: the block's bytes and how they were made.
#[derive(Clone, Debug)]
pub(crate) struct StoredRecord {
    pub(crate) data: Arc<Vec<u8>>,
    pub(crate) how: StoredAs,
}

impl StoredRecord {
    /// The record's logical bytes (a read of a record received as stored; rare: the
    /// dataset receiving it is hidden, so only a truncate's tail comes here).
    fn logical(&self) -> Record {
        let mut out = vec![0u8; self.how.lsize as usize];
        let done = self.how.compression.decompress(&self.data, &mut out);
        assert!(done.is_ok(), "invariant broken: a stored record was verified before it was set ({done:?})");
        Arc::new(out)
    }
}

/// The state behind an object's lock. Its fields are the crate's: the layers above change
/// an object only through the named operations (`data.rs`, `metadata.rs`), where the rules
/// live.
pub struct ObjState {
    /// Which object set and object this is: with a record number, a page's logical
    /// identity (`PageId`), which the cache and the read trace follow across rewrites.
    pub(crate) objset: u64,
    pub(crate) id: u64,
    pub(crate) dnode: Dnode,
    pub(crate) tree: BlockTree,
    pub(crate) open: Changes,
    pub(crate) syncing: Changes,
    pub(crate) last_dirty_txg: u64,
    /// Loaded entries of a directory; `dir_dirty` says they changed in the open txg.
    pub(crate) dir: Option<Entries>,
    pub(crate) dir_dirty: bool,
    /// The object was freed (its dnode slot will be zeroed).
    pub(crate) gone: bool,
    /// Sequential read-ahead: the streams of this file and its waste accounting.
    zfetch: Zfetch,
    /// Bytes of the loaded directory entries (names and their map), for the budget.
    pub(crate) dir_bytes: u64,
    /// Bytes this object has charged to the ARC's budget (`recharge`).
    pub(crate) charged: u64,
}

pub struct Object {
    id: u64,
    /// Looked up since the object cache's hand last passed (CLOCK): set without a lock.
    pub(crate) touched: AtomicBool,
    state: Mutex<ObjState>,
}

/// What a cached object costs besides its directory entries and tree map: the object,
/// its `Arc`, the cache's node, the allocator's rounding.
pub(crate) const OBJECT_BYTES: u64 = std::mem::size_of::<Object>() as u64 + 16 + 64 + 32;
/// What one indirect block known to a tree costs in its map (the block itself is the
/// decoded cache's).
const TREE_NODE_BYTES: u64 = 48;
/// What one directory entry costs besides its name: the name's vector and allocation,
/// the entry, its share of the map's nodes.
pub(crate) const DIR_ENTRY_BYTES: u64 = 24 + 16 + 16 + 40;

thread_local! {
    /// Object locks this thread holds (see `Object::lock`).
    static OBJECT_LOCKS_HELD: Cell<u32> = const { Cell::new(0) };
}

/// One object lock counted against its thread; uncounted when dropped.
struct Held;

impl Held {
    /// Counts a lock about to be taken by a thread that may already hold `allowed` others.
    fn take(allowed: u32) -> Held {
        OBJECT_LOCKS_HELD.with(|held| {
            assert!(
                held.get() <= allowed,
                "invariant broken: a thread holds one object lock at a time (lock order; the one exception is a \
                 new object under its parent, through FreshObject) — this one would be lock number {}",
                held.get() + 1
            );
            held.set(held.get() + 1);
        });
        Held
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        OBJECT_LOCKS_HELD.with(|held| held.set(held.get() - 1));
    }
}

/// An object's state, locked.
pub struct ObjGuard<'a> {
    // Field order matters: the lock is released before the count drops.
    state: MutexGuard<'a, ObjState>,
    _held: Held,
}

impl Deref for ObjGuard<'_> {
    type Target = ObjState;
    fn deref(&self) -> &ObjState {
        &self.state
    }
}

impl DerefMut for ObjGuard<'_> {
    fn deref_mut(&mut self) -> &mut ObjState {
        &mut self.state
    }
}

/// An object just allocated (`ObjSet::alloc`) and not yet reachable by any name: the one
/// object a thread may lock while holding another's lock — `create` fills in the new
/// object under its parent's lock. Nobody else can reach it, so no lock order is at risk.
pub struct FreshObject(pub(crate) Arc<Object>);

impl FreshObject {
    pub fn id(&self) -> u64 {
        self.0.id
    }

    /// Locks the new object; allowed while this thread holds one other object lock.
    pub fn lock(&self) -> ObjGuard<'_> {
        let held = Held::take(1);
        ObjGuard { state: self.0.state.lock(), _held: held }
    }

    /// The object, to be reached by name from now on.
    pub fn into_object(self) -> Arc<Object> {
        self.0
    }
}

/// Where a record's current bytes are.
pub(crate) enum Source {
    Mem(Record),
    Disk(BlockPtr),
    Hole,
}

impl Object {
    pub(crate) fn new(objset: u64, id: u64, dnode: Dnode) -> Object {
        let tree = BlockTree::new(dnode.root, dnode.nlevels, Some(objset));
        Object {
            id,
            touched: AtomicBool::new(true),
            state: Mutex::new(ObjState {
                objset,
                id,
                dnode,
                tree,
                open: Changes::default(),
                syncing: Changes::default(),
                last_dirty_txg: 0,
                dir: None,
                dir_dirty: false,
                gone: false,
                zfetch: Zfetch::default(),
                dir_bytes: 0,
                charged: OBJECT_BYTES,
            }),
        }
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// Locks the object. A thread holds one object lock at a time: asserted here, so a
    /// change that would take two (and could deadlock against another thread taking them
    /// the other way round) stops at once, in any build.
    pub fn lock(&self) -> ObjGuard<'_> {
        let held = Held::take(0);
        ObjGuard { state: self.state.lock(), _held: held }
    }

    /// The sync thread's own lock order: the dnode table's lock, then one object's at a
    /// time. No other thread takes the dnode table's lock while it holds an object's
    /// (checked by `lock`), so this cannot deadlock.
    pub(crate) fn lock_for_sync(&self) -> MutexGuard<'_, ObjState> {
        self.state.lock()
    }

    /// A copy of the dnode as the open txg sees it.
    pub fn dnode(&self) -> Dnode {
        self.lock().dnode.clone()
    }

    /// Marks the object used (the object cache's CLOCK bit).
    pub(crate) fn touch(&self) {
        // Written only when it changes: readers of a hot object do not bounce its line.
        if !self.touched.load(Ordering::Relaxed) {
            self.touched.store(true, Ordering::Relaxed);
        }
    }

    /// The bytes the object has charged, if it may leave the cache now: nobody else holds
    /// it (`only_ref`, the caller holds the cache's lock, so no one can take it meanwhile),
    /// its lock is free and it holds nothing that is not on disk as of a committed txg
    /// (`synced`). Never waits for the lock.
    pub(crate) fn evictable(self: &Arc<Self>, synced: u64) -> Option<u64> {
        if Arc::strong_count(self) != 1 {
            return None;
        }
        let st = self.state.try_lock()?;
        st.is_clean(synced).then_some(st.charged)
    }
}

impl ObjGuard<'_> {
    /// Copies file bytes [off, off + buf.len()) into `buf`, clamped to the file size.
    /// Disk reads happen with the object unlocked (the guard is given up), so one slow
    /// read does not stall other readers and writers of the same file.
    pub fn read(mut self, ctx: &Ctx, off: u64, buf: &mut [u8], policy: CachePolicy) -> Result<usize, ZioError> {
        let zio = &ctx.zio;
        let size = self.dnode.size;
        if off >= size {
            return Ok(0);
        }
        let len = (buf.len() as u64).min(size - off) as usize;
        let blksz = self.blksz();
        // Opened with the object locked, before the first pointer is found: a txg that
        // frees a block this read found waits for it, even when the object is unlocked
        // and relocked in between for an indirect block (`source_unlocked_io`).
        let _reclaim = ctx.reclaim.reading();
        let mut done = 0usize;
        // (block, page, offset in the record, offset in `buf`, length, whether the read
        // reaches the end of the file).
        let mut disk_reads: Vec<(BlockPtr, PageId, usize, usize, usize, bool)> = Vec::new();
        while done < len {
            let pos = off + done as u64;
            let blkid = pos / blksz;
            let in_rec = (pos % blksz) as usize;
            let n = (blksz as usize - in_rec).min(len - done);
            match self.source_unlocked_io(ctx, blkid)? {
                Source::Mem(r) if !r.is_empty() => buf[done..done + n].copy_from_slice(&r[in_rec..in_rec + n]),
                Source::Disk(bp) => disk_reads.push((bp, self.page(blkid), in_rec, done, n, pos + n as u64 >= size)),
                _ => buf[done..done + n].fill(0),
            }
            done += n;
        }
        if policy == CachePolicy::All && len > 0 {
            let (first, last) = (off / blksz, (off + len as u64 - 1) / blksz);
            if let Some(ahead) = self.plan_read_ahead(zio, first, last) {
                self.read_ahead(ctx, ahead)?;
            }
        }
        drop(self);
        for (bp, page, in_rec, at, n, to_eof) in disk_reads {
            if in_rec == 0 && n == bp.lsize as usize {
                // The reader takes the whole record and holds it: no second copy here.
                zio.read_cached(
                    &bp,
                    &mut buf[at..at + n],
                    policy,
                    HotCopy::Skip,
                    Access::page(ReadKind::Demand, page),
                )?;
            } else {
                // A part: the reader will likely want the rest, kept decompressed — unless
                // it read from the record's start to the end of the file, which is all the
                // record holds (a small file's one record; the tail past the end is zeros).
                let hot = if in_rec == 0 && to_eof { HotCopy::Skip } else { HotCopy::Keep };
                let mut rec = vec![0u8; bp.lsize as usize];
                zio.read_cached(&bp, &mut rec, policy, hot, Access::page(ReadKind::Demand, page))?;
                let avail = rec.len().saturating_sub(in_rec).min(n);
                buf[at..at + avail].copy_from_slice(&rec[in_rec..in_rec + avail]);
                buf[at + avail..at + n].fill(0);
            }
        }
        Ok(len)
    }
}

impl ObjGuard<'_> {
    /// Asks the ARC to read records `ahead` in the background. Their pointers are found
    /// as a demand read's are: an indirect block not in memory is read with the object
    /// unlocked, so a stream crossing into a cold part of a big file never holds the
    /// file's other readers behind that device read.
    fn read_ahead(&mut self, ctx: &Ctx, ahead: Ahead) -> Result<(), ZioError> {
        let mut blocks = Vec::new();
        for blkid in ahead.from..ahead.to {
            if let Source::Disk(bp) = self.source_unlocked_io(ctx, blkid)? {
                blocks.push((bp, self.page(blkid)));
            }
        }
        ctx.zio.prefetch(&blocks);
        Ok(())
    }

    /// Where record `blkid` is, as `source` says, but an indirect block on the way that is
    /// not in memory is read with the object unlocked (inside the caller's reclaim section,
    /// opened before it looked anything up, so the block cannot be freed and reused
    /// meanwhile): other readers and writers of the file go on during the device read. What
    /// the tree looks like once relocked decides; a path that keeps changing under these
    /// reads is finally read under the lock.
    fn source_unlocked_io(&mut self, ctx: &Ctx, blkid: u64) -> Result<Source, ZioError> {
        for _ in 0..UNLOCKED_INDIRECT_READS {
            if let Some(s) = ObjState::changed(&self.open, blkid).or_else(|| ObjState::changed(&self.syncing, blkid)) {
                return Ok(s);
            }
            let bp = match self.tree.lookup_in_memory(blkid) {
                InMemory::Found(p) => return Ok(p.map_or(Source::Hole, Source::Disk)),
                InMemory::Unloaded { bp, .. } => bp,
            };
            let objset = self.tree.objset();
            let block = MutexGuard::unlocked(&mut self.state, || tree::read_block(&ctx.zio, bp, objset));
            self.tree.adopt(blkid, &block?);
        }
        self.source(&ctx.zio, blkid)
    }
}

/// Indirect blocks a read may fetch with its object unlocked before it reads under the
/// lock: one per level of the deepest tree, and then some for a path that changed.
const UNLOCKED_INDIRECT_READS: usize = 8;

impl ObjState {
    pub(crate) fn blksz(&self) -> u64 {
        self.dnode.blksz as u64
    }

    /// The logical identity of record `blkid` of this object.
    pub(crate) fn page(&self, blkid: u64) -> PageId {
        PageId { objset: self.objset, object: self.id, blkid }
    }

    /// Nothing here that a reload from disk would not give back: no change in the open or
    /// syncing txg, no dirty directory, and its last change committed (an fsync of it
    /// has nothing to wait for).
    fn is_clean(&self, synced: u64) -> bool {
        self.open.is_empty()
            && self.syncing.is_empty()
            && self.syncing.dnode.is_none()
            && !self.dir_dirty
            && self.last_dirty_txg <= synced
    }

    /// What the object costs in memory now (see `OBJECT_BYTES`).
    fn footprint(&self) -> u64 {
        OBJECT_BYTES + self.tree.known_blocks() as u64 * TREE_NODE_BYTES + self.dir_bytes
    }

    /// Brings the object's charge to the ARC's budget up to date.
    pub(crate) fn recharge(&mut self, zio: &Zio) {
        let now = self.footprint();
        if now > self.charged {
            zio.arc.charge(tarn_arc::Outside::Objects, now - self.charged);
        } else if now < self.charged {
            zio.arc.discharge(tarn_arc::Outside::Objects, self.charged - now);
        }
        self.charged = now;
    }

    pub(crate) fn source(&mut self, zio: &Zio, blkid: u64) -> Result<Source, ZioError> {
        match Self::changed(&self.open, blkid) {
            Some(s) => Ok(s),
            None => self.source_below_open(zio, blkid),
        }
    }

    /// Where record `blkid` is as the syncing (or last synced) txg sees it.
    pub(crate) fn source_below_open(&mut self, zio: &Zio, blkid: u64) -> Result<Source, ZioError> {
        if let Some(s) = Self::changed(&self.syncing, blkid) {
            return Ok(s);
        }
        Ok(match self.tree.get(zio, blkid)? {
            Some(bp) => Source::Disk(bp),
            None => Source::Hole,
        })
    }

    /// Record `blkid` as one txg's changes have it; `None` when they leave it alone.
    fn changed(changes: &Changes, blkid: u64) -> Option<Source> {
        if let Some(r) = changes.records.get(&blkid) {
            return Some(Source::Mem(r.clone()));
        }
        if let Some(s) = changes.stored.get(&blkid) {
            return Some(Source::Mem(s.logical()));
        }
        changes.truncate_blocks.is_some_and(|t| blkid >= t).then_some(Source::Hole)
    }

    /// The whole record `blkid` as bytes of the current block size (zeros for a hole);
    /// a read from the devices is counted as `kind` (read-modify-write, or a directory's
    /// entries: directories are stored as data blocks).
    pub(crate) fn load_record(&mut self, zio: &Zio, blkid: u64, kind: ReadKind) -> Result<Vec<u8>, ZioError> {
        let blksz = self.blksz() as usize;
        let mut out = match self.source(zio, blkid)? {
            Source::Mem(r) if r.is_empty() => vec![0u8; blksz],
            Source::Mem(r) => r.as_ref().clone(),
            Source::Disk(bp) => zio.read(&bp, Access::page(kind, self.page(blkid)))?,
            Source::Hole => vec![0u8; blksz],
        };
        out.resize(blksz, 0);
        Ok(out)
    }

    /// Sequential read-ahead (ZFS's zfetch, `zfetch.rs`): a read of records [first, last]
    /// may call for the next records to be read into the ARC (`ObjGuard::read_ahead`
    /// asks for them). No I/O here: only the residency of records already known.
    fn plan_read_ahead(&mut self, zio: &Zio, first: u64, last: u64) -> Option<Ahead> {
        let records = self.dnode.size.div_ceil(self.blksz());
        let mut zfetch = std::mem::take(&mut self.zfetch);
        let fate = |blkid: u64| match self.tree.peek(blkid) {
            Some(bp) => match zio.residency(&bp) {
                Residency::Cached => Fate::Cached,
                Residency::EvictedUnread => Fate::EvictedUnread,
                Residency::Unknown => Fate::Unknown,
            },
            None => Fate::Unknown,
        };
        let late_before = zfetch.late;
        let ahead = zfetch.access(first, last, records, fate);
        let counters = &zio.arc.counters;
        if zfetch.late > late_before {
            counters.prefetch_late.fetch_add(zfetch.late - late_before, Ordering::Relaxed);
        }
        match zfetch.event {
            Some(ZfetchEvent::StreamConfirmed) => counters.prefetch_streams.fetch_add(1, Ordering::Relaxed),
            Some(ZfetchEvent::SwitchedOff) => counters.prefetch_off_switches.fetch_add(1, Ordering::Relaxed),
            None => 0,
        };
        self.zfetch = zfetch;
        ahead
    }
}

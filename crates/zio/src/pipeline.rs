//! The pipeline itself: the vdev tree, one space map per top-level vdev, the caches, and
//! the operations on space that every path shares (claim, free, release, accounting), plus
//! the ordering between block writes, flushes and the uberblock.
//!
//! Owns: the `Zio` handle and its space maps; the count of completed writes and how far a
//! full flush has made them durable (`WriteMark`).
//!
//! Promises: a freed block's sectors are reused only after `release_deferred` (the
//! freeing txg committed); `write_uberblock` refuses (panics) unless every write before
//! the caller's mark has been flushed, so an uberblock never points at blocks a crash
//! could lose; the free-byte counters a writer reads never take a map lock.
//!
//! Must never: free on its own account (callers decide when, the txg commit releases),
//! or hold a space-map lock across device I/O.
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;
use tarn_alloc::SpaceMap;
use tarn_arc::{Access, ArcCache, HotCopies, PerKind, ReadKind};
use tarn_vdev::{Slots, TopVdev, Uberblock, VdevError, VdevTree};

use crate::read::arc_key;
use crate::trace::{open_trace, Event, TraceFile};
use crate::{BlockPtr, BlockType, ZioError};

/// The decompressed copies may take at most this fraction of the ARC's budget (charged
/// within it as they grow: `HotCopies`).
pub const HOT_SHARE: u64 = 16;

#[derive(Default)]
pub struct ZioStats {
    pub blocks_written: AtomicU64,
    pub logical_bytes_written: AtomicU64,
    pub physical_bytes_written: AtomicU64,
    pub runs_written: AtomicU64,
    /// Stored bytes of the blocks written, by block type (`written_bytes`): where a
    /// transaction's write bytes go (records, or the tree and dnodes above them).
    written_bytes_by_type: [AtomicU64; BlockType::ALL.len()],
    pub blocks_read: AtomicU64,
    /// Stored bytes of the blocks read from the devices.
    pub physical_bytes_read: AtomicU64,
    /// Bytes the devices transferred for them (whole sectors around each block).
    pub device_bytes_read: AtomicU64,
    pub checksum_errors: AtomicU64,
    /// Device reads and the bytes they transferred, by read kind.
    pub kind_reads: PerKind,
    pub kind_read_bytes: PerKind,
}

impl ZioStats {
    /// Stored bytes written so far in blocks of type `t`.
    pub fn written_bytes(&self, t: BlockType) -> u64 {
        self.written_bytes_by_type[t as usize - 1].load(Ordering::Relaxed)
    }

    pub(crate) fn note_written(&self, t: BlockType, stored: u64) {
        self.written_bytes_by_type[t as usize - 1].fetch_add(stored, Ordering::Relaxed);
    }
}

/// A point in the stream of completed device writes (block runs and extents). A full
/// flush started after the mark makes every write before it durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct WriteMark(u64);

pub struct Zio {
    pub vdevs: VdevTree,
    /// One per top-level vdev, by vdev number (each set before its vdev joins the tree).
    pub(crate) maps: Slots<Mutex<SpaceMap>>,
    /// Free bytes per vdev, mirrored from the maps so writers can check space without
    /// taking a map lock the sync thread is using.
    free: Slots<AtomicU64>,
    /// Where the next run or extent is looked for first (rotates over the stripe).
    pub(crate) next_top: AtomicUsize,
    pub stats: ZioStats,
    /// Verified physical blocks kept in RAM (compressed, as on disk).
    pub arc: ArcCache,
    /// Decompressed copies of the blocks read most recently out of the ARC.
    pub hot: HotCopies,
    /// `TARN_READ_TRACE=FILE`: every block read, written, freed and read ahead is
    /// appended to FILE (format: `trace.rs`), to replay through cache policies.
    pub(crate) trace: Option<TraceFile>,
    /// Read-ahead requests for the prefetch workers (started by `start_prefetch`).
    pub(crate) prefetch: Mutex<Option<crossbeam_channel::Sender<crate::prefetch::PrefetchRequest>>>,
    /// Device writes completed (block runs and extents), for `WriteMark`.
    writes_done: AtomicU64,
    /// The highest `writes_done` a full flush has covered.
    flushed_through: AtomicU64,
    /// Blocks no copy of which verified, not yet taken by the pool's error log.
    pub(crate) failed_reads: Mutex<Vec<BlockPtr>>,
    /// The second-level cache, once cache devices are attached (`attach_l2arc`). Unset,
    /// a read pays one atomic load for it.
    pub(crate) l2: std::sync::OnceLock<std::sync::Arc<tarn_l2arc::L2Arc>>,
    /// Blocks freed since the L2ARC last forgot a batch (see `free`).
    l2_freed: Mutex<Vec<tarn_l2arc::FreedBlock>>,
}

/// The L2ARC forgets freed blocks in batches of at most this many (24 bytes each):
/// one per txg, or more for a txg that frees more (a dataset destroyed).
const L2_FREE_BATCH: usize = 1 << 16;

impl Zio {
    /// A pipeline with every sector free; the importer claims the live blocks and then
    /// calls `finish_load`.
    pub fn new(vdevs: VdevTree) -> Zio {
        let budget = ArcCache::default_max();
        let maps = Slots::new(vdevs.tops.iter().map(|t| Mutex::new(SpaceMap::new(t.asize, t.ashift))).collect());
        let free = Slots::new(vdevs.tops.iter().map(|_| AtomicU64::new(0)).collect());
        let arc = ArcCache::new(budget);
        let hot = arc.hot_copies(budget / HOT_SHARE);
        Zio {
            vdevs,
            maps,
            free,
            next_top: AtomicUsize::new(0),
            stats: ZioStats::default(),
            arc,
            hot,
            trace: open_trace(),
            prefetch: Mutex::new(None),
            writes_done: AtomicU64::new(0),
            flushed_through: AtomicU64::new(0),
            failed_reads: Mutex::new(Vec::new()),
            l2: std::sync::OnceLock::new(),
            l2_freed: Mutex::new(Vec::new()),
        }
        .with_cache_budget(budget)
    }

    fn with_cache_budget(self, bytes: u64) -> Zio {
        self.set_cache_budget(bytes);
        self
    }

    /// Sets the memory budget of the caches (`arc_max`): the ARC's blocks, the hot copies
    /// (at most their share, charged as they grow) and the decoded metadata. Shrinking
    /// evicts at once.
    pub fn set_cache_budget(&self, bytes: u64) {
        self.hot.set_max(bytes / HOT_SHARE);
        self.arc.set_max(bytes);
    }

    /// Puts `l2` behind the ARC: blocks the ARC evicts feed it, ARC misses look in it
    /// before the devices. `rebuild`: its devices kept their rings (an import). Set
    /// once; a second call is refused (`false`).
    pub fn attach_l2arc(&self, l2: std::sync::Arc<tarn_l2arc::L2Arc>, rebuild: bool) -> bool {
        if self.l2.get().is_some() {
            return false;
        }
        let sink = l2.start(rebuild);
        if self.l2.set(l2).is_err() {
            return false;
        }
        self.arc.set_evict_sink(sink)
    }

    /// The second-level cache, if cache devices are attached.
    pub fn l2arc(&self) -> Option<&std::sync::Arc<tarn_l2arc::L2Arc>> {
        self.l2.get()
    }

    /// Adds a top-level vdev (in state `Adding`) to the open pool, every sector of it
    /// free; returns its number. Nothing is allocated on it until it is `Active`.
    pub fn add_top(&self, top: TopVdev) -> Result<usize, ZioError> {
        let full = || ZioError::Vdev(VdevError::TooManyVdevs { max: tarn_vdev::MAX_TOPS });
        assert_eq!(self.maps.len(), self.vdevs.tops.len(), "one space map per vdev");
        let mut map = SpaceMap::new(top.asize, top.ashift);
        map.rebuild_free();
        // The map and its free-byte mirror come first: whoever sees the vdev finds them.
        self.free.push(AtomicU64::new(map.free_bytes())).map_err(|_| full())?;
        self.maps.push(Mutex::new(map)).map_err(|_| full())?;
        Ok(self.vdevs.add_top(top)?)
    }

    /// Runs `f` on vdev `top`'s space map and refreshes its free-byte mirror.
    pub(crate) fn with_map<R>(&self, top: usize, f: impl FnOnce(&mut SpaceMap) -> R) -> R {
        let mut map = self.maps[top].lock();
        let r = f(&mut map);
        self.free[top].store(map.free_bytes(), Ordering::Relaxed);
        r
    }

    /// Marks a block found by the import walk live.
    pub fn claim(&self, bp: &BlockPtr) -> Result<(), ZioError> {
        self.check_bounds(bp)?;
        self.with_map(bp.vdev as usize, |m| m.claim(bp.offset, bp.psize as u64)).map_err(|o| ZioError::Overlap {
            vdev: bp.vdev,
            offset: o.offset,
            len: o.len,
        })
    }

    /// False if the `psize` stored bytes at `offset` of vdev `vdev` cannot be a live
    /// block (their sectors hold fewer live bytes, or no such vdev): asked by the L2ARC's
    /// rebuild to drop entries of blocks freed since they were cached. True is "maybe".
    pub fn may_be_live(&self, vdev: u16, offset: u64, psize: u32) -> bool {
        match self.maps.get(vdev as usize) {
            Some(map) => map.lock().may_hold(offset, psize as u64),
            None => false,
        }
    }

    /// After the import walk: every sector no claimed block touches becomes free.
    pub fn finish_load(&self) {
        for top in 0..self.maps.len() {
            self.with_map(top, |m| m.rebuild_free());
        }
    }

    /// (total, allocated, free) bytes of the data vdevs (log devices are apart, as
    /// `zpool list` shows them).
    pub fn space(&self) -> (u64, u64, u64) {
        let data = || self.vdevs.tops.iter().filter(|t| !t.is_log);
        let total: u64 = data().map(|t| (t.asize >> t.ashift) << t.ashift).sum();
        let free: u64 = data().map(|t| self.free[t.index].load(Ordering::Relaxed)).sum();
        (total, total - free, free)
    }

    /// (total, free) bytes of top-level vdev `top` (`zpool iostat -v` capacity).
    pub fn top_space(&self, top: usize) -> (u64, u64) {
        let t = &self.vdevs.tops[top];
        let total = (t.asize >> t.ashift) << t.ashift;
        (total, self.free[top].load(Ordering::Relaxed))
    }

    /// (bytes of sectors holding live data, live bytes) over all vdevs.
    pub fn occupancy(&self) -> (u64, u64) {
        self.maps.iter().fold((0, 0), |(s, b), m| {
            let m = m.lock();
            let (n, live) = m.occupancy();
            (s + n * m.sector_size(), b + live)
        })
    }

    /// Heap bytes the space maps hold (outside the caches' budget).
    pub fn space_map_bytes(&self) -> u64 {
        self.maps.iter().map(|m| m.lock().heap_bytes()).sum()
    }

    /// Bytes that return to the free pool once the syncing txg commits.
    pub fn deferred_bytes(&self) -> u64 {
        self.maps.iter().map(|m| m.lock().deferred_bytes()).sum()
    }

    pub(crate) fn check_bounds(&self, bp: &BlockPtr) -> Result<(), ZioError> {
        let top = self.vdevs.tops.get(bp.vdev as usize).ok_or(ZioError::NoSuchVdev { vdev: bp.vdev })?;
        if bp.offset + bp.psize as u64 > top.asize || bp.psize == 0 || bp.lsize == 0 {
            return Err(ZioError::OutOfBounds { vdev: bp.vdev, offset: bp.offset, psize: bp.psize });
        }
        Ok(())
    }

    pub(crate) fn sector(&self, top: usize) -> u64 {
        self.vdevs.tops[top].sector()
    }

    /// Drops the block's bytes from its space map; its sectors wait for the txg commit.
    /// The L2ARC forgets it with the rest of the txg's frees (`forget_l2_freed`), before
    /// its sectors can be reused: until then the cached copy is still the block's bytes,
    /// and its identity (address and birth) keeps any later block at the address from
    /// being served it.
    pub fn free(&self, bp: &BlockPtr) {
        self.trace_event(Event::Free, bp, Access::of(ReadKind::Demand));
        self.arc.remove(&arc_key(bp));
        self.hot.remove(&arc_key(bp));
        if self.l2.get().is_some() {
            let full = {
                let mut freed = self.l2_freed.lock();
                freed.push(tarn_l2arc::FreedBlock { key: arc_key(bp), psize: bp.psize, lsize: bp.lsize });
                freed.len() >= L2_FREE_BATCH
            };
            if full {
                self.forget_l2_freed();
            }
        }
        self.with_map(bp.vdev as usize, |m| m.free(bp.offset, bp.psize as u64));
    }

    /// The L2ARC forgets the blocks freed since its last batch, in one pass over its index
    /// shards.
    pub fn forget_l2_freed(&self) {
        let Some(l2) = self.l2.get() else { return };
        let mut batch = std::mem::take(&mut *self.l2_freed.lock());
        l2.forget_batch(&mut batch);
    }

    /// Called after the freeing txg's uberblock is durable. The L2ARC forgets the txg's
    /// frees first: their sectors may be reused from here on.
    pub fn release_deferred(&self) {
        self.forget_l2_freed();
        for top in 0..self.maps.len() {
            self.with_map(top, |m| m.release_deferred());
        }
    }

    /// Counts one completed device write (see `WriteMark`).
    pub(crate) fn note_write(&self) {
        self.writes_done.fetch_add(1, Ordering::Release);
    }

    /// Every device write completed so far is before this mark.
    pub fn write_mark(&self) -> WriteMark {
        WriteMark(self.writes_done.load(Ordering::Acquire))
    }

    /// Flushes every device: every write completed before the call is durable after it.
    pub fn flush(&self) -> Result<(), ZioError> {
        let mark = self.writes_done.load(Ordering::Acquire);
        self.vdevs.flush_all()?;
        self.flushed_through.fetch_max(mark, Ordering::AcqRel);
        Ok(())
    }

    /// Marks a sync operation under way on every device until the guard is dropped:
    /// an intent-log commit takes it from its first write to its flush, so the txg's
    /// writes stay at their minimum in flight and do not slip into the devices' queues
    /// between the commit's writes and its flush (see `tarn_vdev::IoQueue::begin_sync`).
    pub fn hold_sync(&self) -> tarn_vdev::SyncHold<'_> {
        self.vdevs.hold_sync()
    }

    /// Flushes only the top-level vdevs `tops` (every side of each). This does not move
    /// the flushed mark: an uberblock needs every device flushed.
    pub fn flush_tops(&self, tops: &[u16]) -> Result<(), ZioError> {
        for &top in tops {
            self.vdevs.tops[top as usize].flush()?;
        }
        Ok(())
    }

    /// Writes the uberblock of a txg into both labels of every device (flushed). `covers`
    /// is a mark taken after the last block the uberblock reaches was written.
    ///
    /// Panics if a full flush has not covered `covers`: writing the uberblock first would
    /// let a crash leave a committed root pointing at blocks that never reached the disk.
    pub fn write_uberblock(&self, ub: &Uberblock, covers: WriteMark) -> Result<(), ZioError> {
        let flushed = self.flushed_through.load(Ordering::Acquire);
        assert!(
            flushed >= covers.0,
            "commit order violated: the uberblock of txg {} would be written before the blocks it points to are \
             flushed (writes flushed through #{flushed}, the txg needs #{})",
            ub.txg,
            covers.0
        );
        self.vdevs.write_uberblock(ub)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tarn_vdev::{BlockDevice, FileDevice, Leaf, TopVdev, Uberblock, VdevTree};

    use crate::{PendingBlock, Zio};

    /// A pipeline over one 8 MiB image file, everything free.
    fn zio(dir: &tempfile::TempDir) -> Zio {
        let dev = FileDevice::open_or_create(&dir.path().join("d.img"), Some(8 << 20)).unwrap();
        let asize = TopVdev::asize_of(dev.size(), 12);
        let leaf = Leaf::new(1, "d.img".into(), Some(Arc::new(dev) as Arc<dyn BlockDevice>));
        let zio = Zio::new(VdevTree::new(vec![TopVdev::new(0, 1, 12, asize, vec![leaf])], 12));
        zio.finish_load();
        zio
    }

    fn write_one(zio: &Zio, txg: u64) -> crate::BlockPtr {
        let data = vec![3u8; 4096];
        let block = PendingBlock::pool_metadata(&data);
        zio.write_blocks(&[block], txg).unwrap()[0]
    }

    fn ub(txg: u64, bp: &crate::BlockPtr) -> Uberblock {
        Uberblock { txg, pool_guid: 1, guid_sum: 1, timestamp: 0, root: bp.to_bytes() }
    }

    #[test]
    fn an_uberblock_after_a_full_flush_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let zio = zio(&dir);
        let bp = write_one(&zio, 1);
        let mark = zio.write_mark();
        zio.flush().unwrap();
        zio.write_uberblock(&ub(1, &bp), mark).unwrap();
        assert_eq!(zio.read(&bp, crate::Access::of(crate::ReadKind::Pool)).unwrap(), vec![3u8; 4096]);
    }

    #[test]
    #[should_panic(expected = "commit order violated")]
    fn an_uberblock_before_its_blocks_are_flushed_stops_the_pool() {
        let dir = tempfile::tempdir().unwrap();
        let zio = zio(&dir);
        zio.flush().unwrap();
        let bp = write_one(&zio, 1);
        let mark = zio.write_mark();
        let _ = zio.write_uberblock(&ub(1, &bp), mark);
    }

    #[test]
    #[should_panic(expected = "commit order violated")]
    fn a_flush_of_some_vdevs_does_not_cover_an_uberblock() {
        let dir = tempfile::tempdir().unwrap();
        let zio = zio(&dir);
        let bp = write_one(&zio, 1);
        let mark = zio.write_mark();
        zio.flush_tops(&[0]).unwrap();
        let _ = zio.write_uberblock(&ub(1, &bp), mark);
    }

    #[test]
    fn a_second_pointer_to_a_full_sector_is_refused_at_claim() {
        let dir = tempfile::tempdir().unwrap();
        let zio = zio(&dir);
        // Bytes that do not compress: the block fills its sector.
        let data = crate::codec::tests::incompressible(4096);
        let bp = zio.write_blocks(&[PendingBlock::pool_metadata(&data)], 1).unwrap()[0];
        assert_eq!(bp.psize, 4096, "the test needs a block that fills its sector");
        let err = zio.claim(&bp).unwrap_err();
        assert!(matches!(err, crate::ZioError::Overlap { vdev: 0, len: 4096, .. }), "{err:?}");
        assert!(err.to_string().contains("overlaps bytes another block holds"), "{err}");
        assert_eq!(zio.read(&bp, crate::Access::of(crate::ReadKind::Pool)).unwrap(), data, "the block is untouched");
    }

    #[test]
    fn a_freed_block_is_reused_only_after_release() {
        let dir = tempfile::tempdir().unwrap();
        let zio = zio(&dir);
        let (_, _, free0) = zio.space();
        let bp = write_one(&zio, 1);
        zio.free(&bp);
        assert!(zio.space().2 < free0, "a free waits for the txg to commit");
        assert_eq!(zio.deferred_bytes(), 4096);
        zio.release_deferred();
        assert_eq!(zio.space().2, free0);
    }
}

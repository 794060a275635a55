//! The write and read pipelines over the vdev tree and its space maps.
//!
//! Writing a batch (one txg's blocks, or a subset): compress every block in parallel,
//! checksum the physical bytes, pack them back to back into runs of whole free sectors
//! (raw blocks start on a sector boundary so a raw 16 KiB page is one 16 KiB read), write
//! each run with one I/O, and hand back the block pointers.
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use rayon::prelude::*;
use tarn_alloc::{Run, SpaceMap};
use tarn_arc::{ArcCache, BlockKey, Class, HotCopies};
use tarn_vdev::{ReadMode, VdevError, VdevTree};

use crate::{BlockPtr, BlockType, ChecksumKind, Compression};

thread_local! {
    /// Per-thread buffer for the physical bytes of a read: reused, so a 16 KiB page read
    /// allocates nothing.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Largest run written with one I/O.
const RUN_BYTES: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ZioError {
    #[error("checksum mismatch in {what} block at vdev {vdev} offset {offset}")]
    Checksum { what: &'static str, vdev: u16, offset: u64 },
    #[error(transparent)]
    Vdev(#[from] VdevError),
    #[error("corrupt block pointer: {0}")]
    Corrupt(String),
    #[error("{0}; upgrade tarn")]
    Unsupported(String),
    #[error("out of space: no free run of {0} bytes on any vdev")]
    NoSpace(u64),
}

/// A block to write; it borrows its bytes so the caller's buffers are not copied.
pub struct PendingBlock<'a> {
    pub data: &'a [u8],
    pub compression: Compression,
    pub checksum: ChecksumKind,
    pub level: u8,
    pub block_type: BlockType,
    /// Whether the written block stays in the ARC (as ZFS keeps what it writes): a block
    /// just loaded or updated is likely read soon, and reading it back would cost an I/O.
    pub cache: CachePolicy,
}

#[derive(Default)]
pub struct ZioStats {
    pub blocks_written: AtomicU64,
    pub logical_bytes_written: AtomicU64,
    pub physical_bytes_written: AtomicU64,
    pub runs_written: AtomicU64,
    pub blocks_read: AtomicU64,
    pub physical_bytes_read: AtomicU64,
    pub checksum_errors: AtomicU64,
}

pub struct Zio {
    pub vdevs: VdevTree,
    maps: Vec<Mutex<SpaceMap>>,
    /// Free bytes per vdev, mirrored from the maps so writers can check space without
    /// taking a map lock the sync thread is using.
    free: Vec<AtomicU64>,
    next_top: AtomicUsize,
    pub stats: ZioStats,
    /// Verified physical blocks kept in RAM (compressed, as on disk).
    pub arc: ArcCache,
    /// Decompressed copies of the blocks read most recently out of the ARC.
    pub hot: HotCopies,
    /// `TARN_READ_TRACE=FILE`: every block read (identity, physical and logical size) is
    /// appended to FILE, to replay through cache policies (crates/arc/benches/trace.rs).
    trace: Option<Mutex<std::io::BufWriter<std::fs::File>>>,
    /// Read-ahead requests for the prefetch workers (started by `start_prefetch`).
    prefetch: Mutex<Option<crossbeam_channel::Sender<BlockPtr>>>,
}

/// The decompressed copies get this fraction of the ARC's budget.
pub const HOT_SHARE: u64 = 16;

/// Blocks waiting for read-ahead at most; more are dropped (prefetch is a hint).
const PREFETCH_QUEUE: usize = 256;
const PREFETCH_WORKERS: usize = 2;

/// A run of whole sectors outside any block tree (an intent-log block).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Extent {
    pub vdev: u16,
    pub offset: u64,
    pub len: u64,
}

/// Which blocks a read may leave in the ARC (the `primarycache` property).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CachePolicy {
    All,
    Metadata,
    None,
}

impl CachePolicy {
    fn admits(self, block_type: BlockType) -> bool {
        match self {
            CachePolicy::All => true,
            CachePolicy::Metadata => block_type != BlockType::Data,
            CachePolicy::None => false,
        }
    }
}

fn open_trace() -> Option<Mutex<std::io::BufWriter<std::fs::File>>> {
    let path = std::env::var_os("TARN_READ_TRACE")?;
    let file = std::fs::OpenOptions::new().create(true).append(true).open(path).ok()?;
    Some(Mutex::new(std::io::BufWriter::new(file)))
}

fn arc_key(bp: &BlockPtr) -> BlockKey {
    BlockKey { vdev: bp.vdev, offset: bp.offset, birth: bp.birth }
}

/// One block after compression and checksum, before placement.
struct Encoded<'a> {
    payload: std::borrow::Cow<'a, [u8]>,
    compression: Compression,
    checksum: [u8; 32],
}

/// A run being filled.
struct OpenRun {
    top: usize,
    run: Run,
    buf: Vec<u8>,
    cursor: usize,
    placed: Vec<(u64, u64)>,
}

impl Zio {
    /// A pipeline with every sector free; the importer claims the live blocks and then
    /// calls `finish_load`.
    pub fn new(vdevs: VdevTree) -> Zio {
        let maps = vdevs.tops.iter().map(|t| Mutex::new(SpaceMap::new(t.asize, t.ashift))).collect();
        let free = vdevs.tops.iter().map(|_| AtomicU64::new(0)).collect();
        Zio {
            vdevs,
            maps,
            free,
            next_top: AtomicUsize::new(0),
            stats: ZioStats::default(),
            arc: ArcCache::new(ArcCache::default_max()),
            hot: HotCopies::new(ArcCache::default_max() / HOT_SHARE),
            trace: open_trace(),
            prefetch: Mutex::new(None),
        }
    }

    /// Runs `f` on vdev `top`'s space map and refreshes its free-byte mirror.
    fn with_map<R>(&self, top: usize, f: impl FnOnce(&mut SpaceMap) -> R) -> R {
        let mut map = self.maps[top].lock();
        let r = f(&mut map);
        self.free[top].store(map.free_bytes(), Ordering::Relaxed);
        r
    }

    pub fn claim(&self, bp: &BlockPtr) -> Result<(), ZioError> {
        self.check_bounds(bp)?;
        self.with_map(bp.vdev as usize, |m| m.claim(bp.offset, bp.psize as u64));
        Ok(())
    }

    pub fn finish_load(&self) {
        for top in 0..self.maps.len() {
            self.with_map(top, |m| m.rebuild_free());
        }
    }

    /// (total, allocated, free) bytes over all vdevs.
    /// (total, allocated, free) bytes of the data vdevs (log devices are apart, as
    /// `zpool list` shows them).
    pub fn space(&self) -> (u64, u64, u64) {
        let data = || self.vdevs.tops.iter().filter(|t| !t.is_log);
        let total: u64 = data().map(|t| (t.asize >> t.ashift) << t.ashift).sum();
        let free: u64 = data().map(|t| self.free[t.index].load(Ordering::Relaxed)).sum();
        (total, total - free, free)
    }

    /// (bytes of sectors holding live data, live bytes) over all vdevs.
    pub fn occupancy(&self) -> (u64, u64) {
        self.maps.iter().fold((0, 0), |(s, b), m| {
            let m = m.lock();
            let (n, live) = m.occupancy();
            (s + n * m.sector_size(), b + live)
        })
    }

    /// Bytes that return to the free pool once the syncing txg commits.
    pub fn deferred_bytes(&self) -> u64 {
        self.maps.iter().map(|m| m.lock().deferred_bytes()).sum()
    }

    fn check_bounds(&self, bp: &BlockPtr) -> Result<(), ZioError> {
        let top = self
            .vdevs
            .tops
            .get(bp.vdev as usize)
            .ok_or_else(|| ZioError::Corrupt(format!("vdev {} does not exist", bp.vdev)))?;
        if bp.offset + bp.psize as u64 > top.asize || bp.psize == 0 || bp.lsize == 0 {
            return Err(ZioError::Corrupt(format!(
                "block at vdev {} offset {} size {} lies outside the device",
                bp.vdev, bp.offset, bp.psize
            )));
        }
        Ok(())
    }

    /// Compresses, checksums, packs and writes `blocks`; returns their pointers in order.
    pub fn write_blocks(&self, blocks: &[PendingBlock], birth: u64) -> Result<Vec<BlockPtr>, ZioError> {
        let encoded: Vec<Encoded> = blocks.par_iter().map(encode).collect();
        let mut ptrs = Vec::with_capacity(blocks.len());
        let remaining_total: u64 = encoded.iter().map(|e| e.payload.len() as u64).sum();
        let mut remaining = remaining_total;
        let mut open: Option<OpenRun> = None;
        for (block, enc) in blocks.iter().zip(&encoded) {
            let psize = enc.payload.len();
            let raw = enc.compression == Compression::Off;
            let (top, offset) = self.place(&mut open, psize, raw, remaining)?;
            remaining -= psize as u64;
            ptrs.push(BlockPtr {
                vdev: top as u16,
                compression: enc.compression,
                checksum_kind: block.checksum,
                level: block.level,
                block_type: block.block_type,
                offset,
                psize: psize as u32,
                lsize: block.data.len() as u32,
                birth,
                checksum: enc.checksum,
            });
            let run = open.as_mut().expect("placed into an open run");
            let at = (offset - run.run.first * self.sector(top)) as usize;
            run.buf[at..at + psize].copy_from_slice(&enc.payload);
            if block.cache.admits(block.block_type) {
                let bp = ptrs.last().expect("just pushed");
                self.arc.insert_written(arc_key(bp), Arc::from(&enc.payload[..]), bp.lsize, class_of(bp.block_type));
            }
            self.stats.logical_bytes_written.fetch_add(block.data.len() as u64, Ordering::Relaxed);
        }
        if let Some(run) = open.take() {
            self.close_run(run)?;
        }
        self.stats.blocks_written.fetch_add(blocks.len() as u64, Ordering::Relaxed);
        Ok(ptrs)
    }

    fn sector(&self, top: usize) -> u64 {
        self.vdevs.tops[top].sector()
    }

    /// Finds room for a block of `psize` bytes, closing the open run and opening a new
    /// one when it does not fit. Returns (top, byte offset).
    fn place(
        &self,
        open: &mut Option<OpenRun>,
        psize: usize,
        align: bool,
        remaining: u64,
    ) -> Result<(usize, u64), ZioError> {
        if let Some(run) = open.as_mut() {
            let sector = self.sector(run.top) as usize;
            let at = if align { run.cursor.next_multiple_of(sector) } else { run.cursor };
            if at + psize <= run.buf.len() {
                return Ok(self.commit_place(run, at, psize));
            }
        }
        if let Some(run) = open.take() {
            self.close_run(run)?;
        }
        let mut run = self.open_run(psize as u64, remaining)?;
        let placed = self.commit_place(&mut run, 0, psize);
        *open = Some(run);
        Ok(placed)
    }

    fn commit_place(&self, run: &mut OpenRun, at: usize, psize: usize) -> (usize, u64) {
        let offset = run.run.first * self.sector(run.top) + at as u64;
        run.cursor = at + psize;
        run.placed.push((offset, psize as u64));
        (run.top, offset)
    }

    /// Takes a run of free sectors from the next vdev that has one, rotating across the
    /// stripe so data spreads over every top-level vdev.
    fn open_run(&self, min_bytes: u64, remaining: u64) -> Result<OpenRun, ZioError> {
        let n = self.maps.len();
        let start = self.next_top.fetch_add(1, Ordering::Relaxed);
        for k in 0..n {
            let top = (start + k) % n;
            if self.vdevs.tops[top].is_log {
                continue; // log devices hold only intent-log blocks
            }
            let sector = self.sector(top);
            let min = min_bytes.div_ceil(sector);
            let want = remaining.min(RUN_BYTES).max(min_bytes).div_ceil(sector);
            if let Some(run) = self.with_map(top, |m| m.alloc_run(min, want)) {
                let len = (run.sectors * sector) as usize;
                return Ok(OpenRun { top, run, buf: vec![0u8; len], cursor: 0, placed: Vec::new() });
            }
        }
        Err(ZioError::NoSpace(min_bytes))
    }

    /// Claims the placed blocks, gives back unused sectors, and writes the run.
    fn close_run(&self, run: OpenRun) -> Result<(), ZioError> {
        let sector = self.sector(run.top);
        let used = (run.cursor as u64).div_ceil(sector);
        self.with_map(run.top, |map| {
            for &(off, len) in &run.placed {
                map.claim(off, len);
            }
            map.return_unused(run.run.first + used, run.run.sectors - used);
        });
        let bytes = &run.buf[..(used * sector) as usize];
        self.vdevs.tops[run.top].write(run.run.first * sector, bytes)?;
        self.stats.runs_written.fetch_add(1, Ordering::Relaxed);
        self.stats.physical_bytes_written.fetch_add(run.cursor as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Reads a block from the devices themselves, past the ARC (scrub, import walk):
    /// verifies every copy it touches and repairs mirrors.
    pub fn read_from_devices(&self, bp: &BlockPtr) -> Result<Vec<u8>, ZioError> {
        self.check_bounds(bp)?;
        let mut out = vec![0u8; bp.lsize as usize];
        self.read_from_disk(bp, &mut out, CachePolicy::None, false)?;
        Ok(out)
    }

    /// Reads and verifies a block; returns its logical bytes.
    pub fn read(&self, bp: &BlockPtr) -> Result<Vec<u8>, ZioError> {
        let mut out = vec![0u8; bp.lsize as usize];
        self.read_into(bp, &mut out)?;
        Ok(out)
    }

    /// Reads and verifies a block into `out` (exactly `lsize` bytes), through the ARC.
    pub fn read_into(&self, bp: &BlockPtr, out: &mut [u8]) -> Result<(), ZioError> {
        self.read_cached(bp, out, CachePolicy::All)
    }

    /// Scrub read: verifies every copy of the block (each side of a mirror), rewriting
    /// bad ones from a good one; returns its logical bytes. Bypasses the ARC.
    pub fn read_all_copies(&self, bp: &BlockPtr) -> Result<Vec<u8>, ZioError> {
        self.check_bounds(bp)?;
        let mut out = vec![0u8; bp.lsize as usize];
        self.read_from_disk(bp, &mut out, CachePolicy::None, true)?;
        Ok(out)
    }

    /// Like `read_into`, leaving the block in the ARC only if `policy` admits it.
    pub fn read_cached(&self, bp: &BlockPtr, out: &mut [u8], policy: CachePolicy) -> Result<(), ZioError> {
        self.check_bounds(bp)?;
        if let Some(t) = &self.trace {
            use std::io::Write;
            let _ = writeln!(t.lock(), "{} {} {} {} {}", bp.vdev, bp.offset, bp.birth, bp.psize, bp.lsize);
        }
        let key = arc_key(bp);
        if bp.compression != Compression::Off && self.hot.copy_out(&key, out) {
            return Ok(());
        }
        if let Some(phys) = self.arc.get(&key) {
            bp.compression.decompress(&phys, out).map_err(ZioError::Corrupt)?;
            if bp.compression != Compression::Off {
                self.hot.insert(key, out); // read again while cached: keep it ready
            }
            return Ok(());
        }
        self.read_from_disk(bp, out, policy, false)
    }

    fn read_from_disk(&self, bp: &BlockPtr, out: &mut [u8], policy: CachePolicy, all_sides: bool) -> Result<(), ZioError> {
        assert_eq!(out.len(), bp.lsize as usize, "read buffer must be the logical size");
        let top = &self.vdevs.tops[bp.vdev as usize];
        let verify = |d: &[u8]| bp.checksum_kind.digest(d) == bp.checksum;
        SCRATCH.with_borrow_mut(|scratch| {
            let range = self.read_verified(top, bp, &verify, scratch, all_sides)?;
            let phys = &scratch[range];
            if policy.admits(bp.block_type) {
                self.arc.insert(arc_key(bp), Arc::from(phys), bp.lsize, class_of(bp.block_type));
            }
            bp.compression.decompress(phys, out).map_err(ZioError::Corrupt)
        })
    }

    fn read_verified(
        &self,
        top: &tarn_vdev::TopVdev,
        bp: &BlockPtr,
        verify: &dyn Fn(&[u8]) -> bool,
        scratch: &mut Vec<u8>,
        all_sides: bool,
    ) -> Result<std::ops::Range<usize>, ZioError> {
        let mode = if all_sides { ReadMode::AllSides } else { ReadMode::FirstGood };
        let range = top.read(bp.offset, bp.psize as usize, verify, scratch, mode);
        let range = range.map_err(|e| match e {
            VdevError::Checksum { .. } => {
                self.stats.checksum_errors.fetch_add(1, Ordering::Relaxed);
                ZioError::Checksum { what: block_kind(bp.block_type), vdev: bp.vdev, offset: bp.offset }
            }
            other => ZioError::Vdev(other),
        })?;
        self.stats.blocks_read.fetch_add(1, Ordering::Relaxed);
        self.stats.physical_bytes_read.fetch_add(range.len() as u64, Ordering::Relaxed);
        Ok(range)
    }

    /// Drops the block's bytes from its space map; its sectors wait for the txg commit.
    pub fn free(&self, bp: &BlockPtr) {
        self.arc.remove(&arc_key(bp));
        self.hot.remove(&arc_key(bp));
        self.with_map(bp.vdev as usize, |m| m.free(bp.offset, bp.psize as u64));
    }

    /// Called after the freeing txg's uberblock is durable.
    pub fn release_deferred(&self) {
        for top in 0..self.maps.len() {
            self.with_map(top, |m| m.release_deferred());
        }
    }

    /// Starts the read-ahead workers. They hold only a weak reference, so they end when
    /// the pipeline is dropped.
    pub fn start_prefetch(self: &Arc<Self>) {
        let (tx, rx) = crossbeam_channel::bounded::<BlockPtr>(PREFETCH_QUEUE);
        for i in 0..PREFETCH_WORKERS {
            let rx = rx.clone();
            let zio = Arc::downgrade(self);
            let spawned = std::thread::Builder::new().name(format!("prefetch{i}")).spawn(move || {
                while let Ok(bp) = rx.recv() {
                    let Some(zio) = zio.upgrade() else { return };
                    zio.prefetch_one(&bp);
                }
            });
            if spawned.is_err() {
                return; // no read-ahead: only speed is lost
            }
        }
        *self.prefetch.lock() = Some(tx);
    }

    /// Asks for `bps` to be read into the ARC ahead of demand; never blocks.
    pub fn prefetch(&self, bps: &[BlockPtr]) {
        let guard = self.prefetch.lock();
        let Some(tx) = guard.as_ref() else { return };
        for bp in bps {
            if !self.arc.contains(&arc_key(bp)) && tx.try_send(*bp).is_err() {
                break;
            }
        }
    }

    /// Reads one block into the ARC, quietly: the block may have been freed and its
    /// space reused since it was asked for, which is not an error.
    fn prefetch_one(&self, bp: &BlockPtr) {
        if self.arc.contains(&arc_key(bp)) || self.check_bounds(bp).is_err() {
            return;
        }
        let top = &self.vdevs.tops[bp.vdev as usize];
        let verify = |d: &[u8]| bp.checksum_kind.digest(d) == bp.checksum;
        let mut span = Vec::new();
        if let Ok(range) = top.read(bp.offset, bp.psize as usize, &verify, &mut span, ReadMode::Quiet) {
            self.arc.insert_prefetched(arc_key(bp), Arc::from(&span[range]), bp.lsize, class_of(bp.block_type));
        }
    }

    /// True while a separate log device can take intent-log blocks.
    pub fn has_log_device(&self) -> bool {
        self.vdevs.tops.iter().any(|t| t.is_log && t.usable() && t.asize > 0)
    }

    /// Allocates `bytes` (rounded up to whole sectors) outside any block tree, for an
    /// intent-log block. The extent is live until `free_extent`.
    /// A separate log device is used when one is usable; the data vdevs otherwise.
    pub fn alloc_extent(&self, bytes: u64) -> Result<Extent, ZioError> {
        let n = self.maps.len();
        let start = self.next_top.fetch_add(1, Ordering::Relaxed);
        let has_log = self.has_log_device();
        for k in 0..n {
            let top = (start + k) % n;
            let t = &self.vdevs.tops[top];
            if t.is_log != has_log || !t.usable() {
                continue;
            }
            let sector = self.sector(top);
            let sectors = bytes.div_ceil(sector);
            let got = self.with_map(top, |m| {
                let run = m.alloc_run(sectors, sectors)?;
                m.claim(run.first * sector, sectors * sector);
                Some(run)
            });
            if let Some(run) = got {
                return Ok(Extent { vdev: top as u16, offset: run.first * sector, len: sectors * sector });
            }
        }
        Err(ZioError::NoSpace(bytes))
    }

    /// Marks an extent found at import (a log block) live.
    pub fn claim_extent(&self, e: &Extent) -> Result<(), ZioError> {
        self.check_extent(e)?;
        self.with_map(e.vdev as usize, |m| m.claim(e.offset, e.len));
        Ok(())
    }

    /// Frees an extent; like any free, it is reused only after the txg commits.
    pub fn free_extent(&self, e: &Extent) {
        self.with_map(e.vdev as usize, |m| m.free(e.offset, e.len));
    }

    fn check_extent(&self, e: &Extent) -> Result<(), ZioError> {
        let top = self.vdevs.tops.get(e.vdev as usize).ok_or_else(|| ZioError::Corrupt(format!("vdev {} does not exist", e.vdev)))?;
        if e.len == 0 || e.offset % top.sector() != 0 || e.len % top.sector() != 0 || e.offset + e.len > top.asize {
            return Err(ZioError::Corrupt(format!("extent at vdev {} offset {} length {} is not valid", e.vdev, e.offset, e.len)));
        }
        Ok(())
    }

    /// Writes `data` at the start of extent `e` (padded to whole sectors, on every side
    /// of a mirror; data already a whole number of sectors is written without a copy).
    /// Not flushed.
    pub fn write_extent(&self, e: &Extent, data: &[u8]) -> Result<(), ZioError> {
        self.check_extent(e)?;
        let top = &self.vdevs.tops[e.vdev as usize];
        let len = (data.len() as u64).next_multiple_of(top.sector());
        assert!(len <= e.len, "log block larger than its extent");
        if len == data.len() as u64 {
            top.write(e.offset, data)?;
        } else {
            let mut buf = data.to_vec();
            buf.resize(len as usize, 0);
            top.write(e.offset, &buf)?;
        }
        Ok(())
    }

    /// The sector size of vdev `vdev`.
    pub fn sector_size(&self, vdev: u16) -> u64 {
        self.vdevs.tops[vdev as usize].sector()
    }

    /// Reads `len` bytes at the start of extent `e`, from a side whose bytes `verify`
    /// accepts (a mirror tries every side). The caller checks the content.
    pub fn read_extent(&self, e: &Extent, len: u64, verify: &dyn Fn(&[u8]) -> bool) -> Result<Vec<u8>, ZioError> {
        self.check_extent(e)?;
        let mut scratch = Vec::new();
        let range = self.vdevs.tops[e.vdev as usize].read(e.offset, len.min(e.len) as usize, verify, &mut scratch, ReadMode::Quiet)?;
        Ok(scratch[range].to_vec())
    }

    pub fn flush(&self) -> Result<(), ZioError> {
        Ok(self.vdevs.flush_all()?)
    }

    /// Flushes only the top-level vdevs `tops` (every side of each).
    pub fn flush_tops(&self, tops: &[u16]) -> Result<(), ZioError> {
        for &top in tops {
            self.vdevs.tops[top as usize].flush()?;
        }
        Ok(())
    }
}

fn class_of(t: BlockType) -> Class {
    if t == BlockType::Data {
        Class::Data
    } else {
        Class::Metadata
    }
}

fn block_kind(t: BlockType) -> &'static str {
    match t {
        BlockType::Data => "data",
        BlockType::Indirect => "indirect",
        BlockType::Dnodes => "dnode",
        BlockType::Directory => "directory",
        BlockType::Mos => "pool root",
    }
}

fn encode<'a>(block: &PendingBlock<'a>) -> Encoded<'a> {
    let (payload, compression) = match block.compression.compress(block.data) {
        Some(packed) => (std::borrow::Cow::Owned(packed), block.compression),
        None => (std::borrow::Cow::Borrowed(block.data), Compression::Off),
    };
    let checksum = block.checksum.digest(&payload);
    Encoded { payload, compression, checksum }
}

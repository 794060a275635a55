//! The write and read pipelines over the vdev tree and its space maps.
//!
//! Writing a batch (one txg's blocks, or a subset): compress every block in parallel,
//! checksum the physical bytes, pack them back to back into runs of whole free sectors
//! (raw blocks start on a sector boundary so a raw 16 KiB page is one 16 KiB read), write
//! each run with one I/O, and hand back the block pointers.
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;
use rayon::prelude::*;
use tarn_alloc::{Run, SpaceMap};
use tarn_vdev::{VdevError, VdevTree};

use crate::{BlockPtr, BlockType, ChecksumKind, Compression};

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
    #[error("out of space: no free run of {0} bytes on any vdev")]
    NoSpace(u64),
}

pub struct PendingBlock {
    pub data: Vec<u8>,
    pub compression: Compression,
    pub checksum: ChecksumKind,
    pub level: u8,
    pub block_type: BlockType,
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
    next_top: AtomicUsize,
    pub stats: ZioStats,
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
        Zio { vdevs, maps, next_top: AtomicUsize::new(0), stats: ZioStats::default() }
    }

    pub fn claim(&self, bp: &BlockPtr) -> Result<(), ZioError> {
        self.check_bounds(bp)?;
        self.maps[bp.vdev as usize].lock().claim(bp.offset, bp.psize as u64);
        Ok(())
    }

    pub fn finish_load(&self) {
        for m in &self.maps {
            m.lock().rebuild_free();
        }
    }

    /// (total, allocated, free) bytes over all vdevs.
    pub fn space(&self) -> (u64, u64, u64) {
        self.maps.iter().fold((0, 0, 0), |(t, a, f), m| {
            let m = m.lock();
            (t + m.total_bytes(), a + m.allocated_bytes(), f + m.free_bytes())
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
            let sector = self.sector(top);
            let min = min_bytes.div_ceil(sector);
            let want = remaining.min(RUN_BYTES).max(min_bytes).div_ceil(sector);
            if let Some(run) = self.maps[top].lock().alloc_run(min, want) {
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
        {
            let mut map = self.maps[run.top].lock();
            for &(off, len) in &run.placed {
                map.claim(off, len);
            }
            map.return_unused(run.run.first + used, run.run.sectors - used);
        }
        let bytes = &run.buf[..(used * sector) as usize];
        self.vdevs.tops[run.top].write(run.run.first * sector, bytes)?;
        self.stats.runs_written.fetch_add(1, Ordering::Relaxed);
        self.stats.physical_bytes_written.fetch_add(run.cursor as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Reads and verifies a block; returns its logical bytes.
    pub fn read(&self, bp: &BlockPtr) -> Result<Vec<u8>, ZioError> {
        let mut out = vec![0u8; bp.lsize as usize];
        self.read_into(bp, &mut out)?;
        Ok(out)
    }

    /// Reads and verifies a block into `out` (exactly `lsize` bytes).
    pub fn read_into(&self, bp: &BlockPtr, out: &mut [u8]) -> Result<(), ZioError> {
        self.read_into_sides(bp, out, false)
    }

    /// Scrub read: verifies every copy of the block (each side of a mirror), rewriting
    /// bad ones from a good one; returns its logical bytes.
    pub fn read_all_copies(&self, bp: &BlockPtr) -> Result<Vec<u8>, ZioError> {
        let mut out = vec![0u8; bp.lsize as usize];
        self.read_into_sides(bp, &mut out, true)?;
        Ok(out)
    }

    fn read_into_sides(&self, bp: &BlockPtr, out: &mut [u8], all: bool) -> Result<(), ZioError> {
        self.check_bounds(bp)?;
        assert_eq!(out.len(), bp.lsize as usize, "read buffer must be the logical size");
        let top = &self.vdevs.tops[bp.vdev as usize];
        let verify = |d: &[u8]| bp.checksum_kind.digest(d) == bp.checksum;
        let phys = if all {
            top.read_all_sides(bp.offset, bp.psize as usize, &verify)
        } else {
            top.read(bp.offset, bp.psize as usize, &verify)
        };
        let phys = phys.map_err(|e| match e {
            VdevError::Checksum { .. } => {
                self.stats.checksum_errors.fetch_add(1, Ordering::Relaxed);
                ZioError::Checksum { what: block_kind(bp.block_type), vdev: bp.vdev, offset: bp.offset }
            }
            other => ZioError::Vdev(other),
        })?;
        self.stats.blocks_read.fetch_add(1, Ordering::Relaxed);
        self.stats.physical_bytes_read.fetch_add(phys.len() as u64, Ordering::Relaxed);
        bp.compression.decompress(&phys, out).map_err(ZioError::Corrupt)
    }

    /// Drops the block's bytes from its space map; its sectors wait for the txg commit.
    pub fn free(&self, bp: &BlockPtr) {
        self.maps[bp.vdev as usize].lock().free(bp.offset, bp.psize as u64);
    }

    /// Called after the freeing txg's uberblock is durable.
    pub fn release_deferred(&self) {
        for m in &self.maps {
            m.lock().release_deferred();
        }
    }

    pub fn flush(&self) -> Result<(), ZioError> {
        Ok(self.vdevs.flush_all()?)
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

fn encode(block: &PendingBlock) -> Encoded<'_> {
    let (payload, compression) = match block.compression.compress(&block.data) {
        Some(packed) => (std::borrow::Cow::Owned(packed), block.compression),
        None => (std::borrow::Cow::Borrowed(&block.data[..]), Compression::Off),
    };
    let checksum = block.checksum.digest(&payload);
    Encoded { payload, compression, checksum }
}

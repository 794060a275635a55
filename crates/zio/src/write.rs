//! The write path: a batch of logical blocks (one txg's, or an fsync's early write)
//! becomes packed, checksummed physical blocks on the devices.
//!
//! Theory of operation. The blocks of the batch are compressed and checksummed in
//! parallel (rayon), a slice of about `ENCODE_BYTES` at a time, so a txg's compressed
//! copies never pile up beside its records. The blocks are then placed in order, back to
//! back, into runs of whole free sectors taken from one top-level vdev at a time
//! (rotating over the stripe), each slice written before the next is compressed; a raw
//! block starts on a sector boundary, so a raw 16 KiB page is read back with one 16 KiB
//! read. A run is written with one I/O per mirror side when it is full or the batch ends;
//! its unused tail goes back to the map. A block's bytes are claimed in the map before its
//! run is written, so no other batch can be handed its sectors. A txg's batch is written
//! as `IoClass::AsyncWrite` (`write_blocks`); a batch an fsync waits for names its class
//! (`write_blocks_as`, `IoClass::SyncWrite`). The devices cut a run into pieces of at
//! most their `max_io`.
//!
//! Owns: packing and the run buffers; what a written block leaves in the ARC.
//!
//! A block may come already stored (`PendingBlock::stored`: a received stream's block,
//! compressed as its sender stored it): it is checksummed and placed as given, never
//! compressed again.
//!
//! Promises: a block is never placed where a live byte is; a block that does not shrink
//! by 1/8 is stored raw; the pointers come back in the order of the blocks.
//!
//! Must never: flush (the caller orders flushes against the uberblock), or hide a failed
//! run write (the error is returned and the txg fails, rather than a pointer to sectors
//! that hold nothing).
use std::sync::atomic::Ordering;
use std::sync::Arc;

use rayon::prelude::*;
use tarn_alloc::Run;

use tarn_arc::{Access, PageId, ReadKind};

use crate::read::{arc_key, class_of};
use crate::trace::Event;
use crate::{BlockPtr, BlockType, ChecksumKind, Compression, IoClass, Zio, ZioError};

/// Largest run written with one I/O.
const RUN_BYTES: u64 = 1 << 20;

/// A batch is compressed this many logical bytes at a time, each slice placed and
/// written before the next is compressed: a txg's batch can be hundreds of MiB, and its
/// compressed copies are held outside both the ARC's budget and `dirty_max` until
/// placed (issue #11: compressing whole txgs held 107 MiB of them at the peak of four
/// sequential writers). 8 MiB keeps every rayon worker busy with 512 records of 16 KiB.
const ENCODE_BYTES: u64 = 8 << 20;

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
    /// The record the block holds (level-0 blocks of an object), so the cache and the
    /// trace follow the page across rewrites; `None` for indirect blocks and pool blocks.
    pub page: Option<PageId>,
    /// The dataset the block belongs to (its record's, or that of an indirect, dnode or
    /// directory block); `None` for the pool's own blocks. The L2ARC's `secondarycache`
    /// asks it when the block leaves the ARC.
    pub objset: Option<u64>,
    /// `Some`: `data` is the block as stored already (compressed with this codec, of
    /// this logical size), written as it is; `compression` is then not used.
    pub stored: Option<StoredAs>,
}

impl<'a> PendingBlock<'a> {
    /// A block of the pool's own metadata (the MOS, and what it names: dead-list chunks):
    /// lz4, xxh3, not kept in the ARC, of no dataset.
    pub fn pool_metadata(data: &'a [u8]) -> PendingBlock<'a> {
        PendingBlock {
            data,
            compression: Compression::Lz4,
            checksum: ChecksumKind::Xxh3,
            level: 0,
            block_type: BlockType::Mos,
            cache: CachePolicy::None,
            page: None,
            objset: None,
            stored: None,
        }
    }
}

/// How the bytes of an already stored block were made: their codec and logical size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoredAs {
    pub compression: Compression,
    pub lsize: u32,
}

impl PendingBlock<'_> {
    /// The block's logical size.
    fn lsize(&self) -> u32 {
        self.stored.map_or(self.data.len() as u32, |s| s.lsize)
    }
}

/// Which blocks a read or write may leave in the ARC (the `primarycache` property).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CachePolicy {
    All,
    Metadata,
    None,
}

impl CachePolicy {
    pub(crate) fn admits(self, block_type: BlockType) -> bool {
        match self {
            CachePolicy::All => true,
            CachePolicy::Metadata => block_type != BlockType::Data,
            CachePolicy::None => false,
        }
    }
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
    /// Compresses, checksums, packs and writes a txg's `blocks` (as async writes);
    /// returns their pointers in order.
    pub fn write_blocks(&self, blocks: &[PendingBlock], birth: u64) -> Result<Vec<BlockPtr>, ZioError> {
        self.write_blocks_as(blocks, birth, IoClass::AsyncWrite)
    }

    /// Like `write_blocks`, with the device I/O in `class` (`IoClass::SyncWrite` for
    /// blocks an fsync waits for).
    pub fn write_blocks_as(
        &self,
        blocks: &[PendingBlock],
        birth: u64,
        class: IoClass,
    ) -> Result<Vec<BlockPtr>, ZioError> {
        let mut ptrs = Vec::with_capacity(blocks.len());
        let mut open: Option<OpenRun> = None;
        // Logical bytes of the blocks after the current slice: an upper bound of what
        // they will take, so runs are sized as when the whole batch was known.
        let mut later: u64 = blocks.iter().map(|b| b.data.len() as u64).sum();
        let mut start = 0;
        while start < blocks.len() {
            let end = encode_slice_end(blocks, start);
            let slice = &blocks[start..end];
            later -= slice.iter().map(|b| b.data.len() as u64).sum::<u64>();
            let encoded: Vec<Encoded> = slice.par_iter().map(encode).collect();
            let mut remaining = encoded.iter().map(|e| e.payload.len() as u64).sum::<u64>() + later;
            for (block, enc) in slice.iter().zip(&encoded) {
                ptrs.push(self.place_encoded(&mut open, block, enc, remaining, birth, class)?);
                remaining -= enc.payload.len() as u64;
            }
            start = end;
        }
        if let Some(run) = open.take() {
            self.close_run(run, class)?;
        }
        self.stats.blocks_written.fetch_add(blocks.len() as u64, Ordering::Relaxed);
        Ok(ptrs)
    }

    /// Places one encoded block into the open run (opening another when it is full),
    /// leaves it in the ARC if its policy says so, and returns its pointer.
    fn place_encoded(
        &self,
        open: &mut Option<OpenRun>,
        block: &PendingBlock,
        enc: &Encoded,
        remaining: u64,
        birth: u64,
        class: IoClass,
    ) -> Result<BlockPtr, ZioError> {
        let psize = enc.payload.len();
        let raw = enc.compression == Compression::Off;
        let (top, offset) = self.place(open, psize, raw, remaining, class)?;
        let bp = BlockPtr {
            vdev: top as u16,
            compression: enc.compression,
            checksum_kind: block.checksum,
            level: block.level,
            block_type: block.block_type,
            offset,
            psize: psize as u32,
            lsize: block.lsize(),
            birth,
            checksum: enc.checksum,
        };
        let run = open.as_mut().expect("placed into an open run");
        let at = (offset - run.run.first * self.sector(top)) as usize;
        run.buf[at..at + psize].copy_from_slice(&enc.payload);
        // The kind is not a read's: a written block is named by its type in the trace.
        self.trace_event(Event::Write, &bp, Access { kind: ReadKind::Demand, page: block.page, objset: block.objset });
        if block.cache.admits(block.block_type) {
            self.arc.insert_written(
                arc_key(&bp),
                Arc::from(&enc.payload[..]),
                bp.lsize,
                class_of(bp.block_type),
                block.page,
                block.objset,
            );
        }
        self.stats.logical_bytes_written.fetch_add(u64::from(block.lsize()), Ordering::Relaxed);
        self.stats.note_written(bp.block_type, psize as u64);
        Ok(bp)
    }

    /// Finds room for a block of `psize` bytes, closing the open run and opening a new
    /// one when it does not fit. Returns (top, byte offset).
    fn place(
        &self,
        open: &mut Option<OpenRun>,
        psize: usize,
        align: bool,
        remaining: u64,
        class: IoClass,
    ) -> Result<(usize, u64), ZioError> {
        if let Some(run) = open.as_mut() {
            let sector = self.sector(run.top) as usize;
            let at = if align { run.cursor.next_multiple_of(sector) } else { run.cursor };
            if at + psize <= run.buf.len() {
                return Ok(self.commit_place(run, at, psize));
            }
        }
        if let Some(run) = open.take() {
            self.close_run(run, class)?;
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
        let n = self.vdevs.tops.len();
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
    fn close_run(&self, run: OpenRun, class: IoClass) -> Result<(), ZioError> {
        let sector = self.sector(run.top);
        let used = (run.cursor as u64).div_ceil(sector);
        self.with_map(run.top, |map| {
            for &(off, len) in &run.placed {
                map.claim(off, len).expect("blocks packed into a run just allocated overlap nothing");
            }
            map.return_unused(run.run.first + used, run.run.sectors - used);
        });
        let bytes = &run.buf[..(used * sector) as usize];
        self.vdevs.tops[run.top].write(run.run.first * sector, bytes, class)?;
        self.note_write();
        self.stats.runs_written.fetch_add(1, Ordering::Relaxed);
        self.stats.physical_bytes_written.fetch_add(run.cursor as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// The end of the slice of `blocks` from `start` that is compressed at once: about
/// `ENCODE_BYTES` of logical data, at least one block.
fn encode_slice_end(blocks: &[PendingBlock], start: usize) -> usize {
    let mut bytes = 0u64;
    let mut end = start;
    while end < blocks.len() && (end == start || bytes + blocks[end].data.len() as u64 <= ENCODE_BYTES) {
        bytes += blocks[end].data.len() as u64;
        end += 1;
    }
    end
}

fn encode<'a>(block: &PendingBlock<'a>) -> Encoded<'a> {
    let (payload, compression) = match block.stored {
        Some(s) => (std::borrow::Cow::Borrowed(block.data), s.compression),
        None => match block.compression.compress(block.data) {
            Some(packed) => (std::borrow::Cow::Owned(packed), block.compression),
            None => (std::borrow::Cow::Borrowed(block.data), Compression::Off),
        },
    };
    let checksum = block.checksum.digest(&payload);
    Encoded { payload, compression, checksum }
}

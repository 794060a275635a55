//! The read path: a block pointer becomes the block's verified logical bytes.
//!
//! Theory of operation. `read_cached` (every demand read: a 16 KiB page) looks in order
//! at the hot decompressed copies (one copy out; only for a reader of parts of a record,
//! `HotCopy::Keep` — a whole-record reader holds the page itself and takes neither their
//! lock nor a copy), the ARC (one decompression), then the
//! device: the sector span is read into a per-thread scratch buffer, the physical bytes
//! are checked against the pointer's checksum (a mirror tries its sides until one
//! verifies, and rewrites the bad ones), kept in the ARC if the cache policy admits the
//! block, and decompressed into the caller's buffer. Scrub and the import walk read past
//! the ARC (`read_from_devices`, `read_all_copies`): they check what the devices hold.
//!
//! Owns: the verified-read logic and the per-thread scratch buffer.
//!
//! Promises: bytes reach the caller only after the physical bytes matched the checksum;
//! a 16 KiB page read that misses the caches allocates nothing on this path; a checksum
//! failure is counted (pipeline and device counters), named, and its block remembered
//! for the pool's error log (`take_failed_reads`) unless a scan made the read (the scan
//! logs it with its place). Scrub and resilver reads go to the devices through their
//! own entry points (`read_all_copies`, `resilver_block`).
//! Demand reads and the import walk go as `IoClass::SyncRead`; the devices give scrub and
//! resilver I/O the scrub class at those entry points.
//!
//! Must never: return unverified bytes, or insert unverified bytes into the ARC.
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tarn_arc::{Access, BlockKey, Class, ReadKind};
use tarn_vdev::{IoClass, ReadMode, VdevError};

use crate::trace::{refine, Event, Outcome};
use crate::{BlockPtr, BlockType, CachePolicy, Compression, Zio, ZioError};

/// Whether a read of a compressed block leaves a decompressed copy in the hot copies
/// (`tarn_arc::HotCopies`) when the ARC serves it, and looks there first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HotCopy {
    /// The reader takes parts of the record (it will likely come back for the rest), or
    /// reads the engine's own blocks: keep a copy of a block read again while cached.
    Keep,
    /// The reader takes the whole record into its own buffer and holds it (a database's
    /// buffer pool with O_DIRECT, the kernel's page cache over FUSE): no copy here.
    Skip,
}

thread_local! {
    /// Per-thread buffer for the physical bytes of a read: reused, so a 16 KiB page read
    /// allocates nothing.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// What a scrub read found: the verified logical bytes, and how many copies (mirror
/// sides) did not verify and were rewritten from a good one.
#[derive(Debug)]
pub struct CopiesRead {
    pub data: Vec<u8>,
    pub bad_copies: u32,
}

/// How many failed blocks are remembered between two `take_failed_reads`.
pub const FAILED_READS_MAX: usize = 4096;

pub(crate) fn arc_key(bp: &BlockPtr) -> BlockKey {
    BlockKey { vdev: bp.vdev, offset: bp.offset, birth: bp.birth }
}

pub(crate) fn class_of(t: BlockType) -> Class {
    if t == BlockType::Data {
        Class::Data
    } else {
        Class::Metadata
    }
}

/// The block's kind in messages.
pub(crate) fn block_kind(t: BlockType) -> &'static str {
    match t {
        BlockType::Data => "data",
        BlockType::Indirect => "indirect",
        BlockType::Dnodes => "dnode",
        BlockType::Directory => "directory",
        BlockType::Mos => "pool root",
    }
}

impl Zio {
    /// Reads a block from the devices themselves, past the ARC (the import walk and
    /// intent-log replay, counted as `import`): verifies every copy it touches and
    /// repairs mirrors.
    pub fn read_from_devices(&self, bp: &BlockPtr) -> Result<Vec<u8>, ZioError> {
        self.check_bounds(bp)?;
        let mut out = vec![0u8; bp.lsize as usize];
        let access = Access::of(ReadKind::Import);
        self.arc.note_bypass(access.kind);
        self.read_from_disk(bp, &mut out, CachePolicy::None, ReadMode::FirstGood, access)?;
        Ok(out)
    }

    /// Reads and verifies a block through the ARC; returns its logical bytes. `access`
    /// says why (refined by the block's type, see `ReadKind`).
    pub fn read(&self, bp: &BlockPtr, access: Access) -> Result<Vec<u8>, ZioError> {
        let mut out = vec![0u8; bp.lsize as usize];
        self.read_into(bp, &mut out, access)?;
        Ok(out)
    }

    /// Reads and verifies a block into `out` (exactly `lsize` bytes), through the ARC.
    pub fn read_into(&self, bp: &BlockPtr, out: &mut [u8], access: Access) -> Result<(), ZioError> {
        self.read_cached(bp, out, CachePolicy::All, HotCopy::Keep, access)
    }

    /// The block's stored bytes (`psize` of them, compressed as on disk), verified
    /// against its checksum: what a send stream carries, so nothing is decompressed or
    /// compressed again. Served from the ARC when it holds the block; a device read is
    /// not cached (a send walks a whole dataset once).
    pub fn read_stored(&self, bp: &BlockPtr) -> Result<Vec<u8>, ZioError> {
        self.check_bounds(bp)?;
        let access = refine(Access::of(ReadKind::Import), bp.block_type);
        if let Some(phys) = self.arc.get(&arc_key(bp), access) {
            return Ok(phys.to_vec());
        }
        self.arc.note_bypass(access.kind);
        let top = &self.vdevs.tops[bp.vdev as usize];
        let verify = |d: &[u8]| bp.checksum_kind.digest(d) == bp.checksum;
        SCRATCH.with_borrow_mut(|scratch| {
            let (range, _) = self.read_verified(top, bp, &verify, scratch, ReadMode::FirstGood, access.kind)?;
            Ok(scratch[range].to_vec())
        })
    }

    /// Scrub read: verifies every copy of the block (each side of a mirror), rewriting
    /// bad ones from a good one. Bypasses the ARC; counted as `scrub`. Goes to the devices
    /// as scrub I/O (`TopVdev::scrub_read`).
    pub fn read_all_copies(&self, bp: &BlockPtr) -> Result<CopiesRead, ZioError> {
        self.check_bounds(bp)?;
        let mut data = vec![0u8; bp.lsize as usize];
        let access = Access::of(ReadKind::Scrub);
        self.arc.note_bypass(access.kind);
        let bad_copies = self.read_from_disk(bp, &mut data, CachePolicy::None, ReadMode::AllSides, access)?;
        Ok(CopiesRead { data, bad_copies })
    }

    /// Resilver: copies the block from a side that verifies to every side that missed
    /// its birth txg (`TopVdev::resilver`); returns how many sides were written (0: none
    /// needed it). Bypasses the ARC.
    pub fn resilver_block(&self, bp: &BlockPtr) -> Result<u32, ZioError> {
        self.check_bounds(bp)?;
        let top = &self.vdevs.tops[bp.vdev as usize];
        let verify = |d: &[u8]| bp.checksum_kind.digest(d) == bp.checksum;
        let mut scratch = Vec::new();
        let len = bp.psize as usize;
        top.resilver(bp.offset, len, bp.birth, &verify, &mut scratch).map_err(|e| match e {
            VdevError::Checksum { .. } => {
                // The resilver logs it itself, knowing where the block is.
                ZioError::Checksum { what: block_kind(bp.block_type), vdev: bp.vdev, offset: bp.offset }
            }
            other => ZioError::Vdev(other),
        })
    }

    /// Remembers a block no copy of which verified, for the pool's error log (bounded:
    /// past `FAILED_READS_MAX` the oldest are kept and the rest dropped).
    fn note_failed_read(&self, bp: &BlockPtr) {
        let mut failed = self.failed_reads.lock();
        if failed.len() < FAILED_READS_MAX && !failed.contains(bp) {
            failed.push(*bp);
        }
    }

    /// The blocks no copy of which verified since the last call (the pool turns them
    /// into its error log).
    pub fn take_failed_reads(&self) -> Vec<BlockPtr> {
        std::mem::take(&mut *self.failed_reads.lock())
    }

    /// Like `read_into`, leaving the block in the ARC only if `policy` admits it, and a
    /// decompressed copy of it only if `hot` says so.
    pub fn read_cached(
        &self,
        bp: &BlockPtr,
        out: &mut [u8],
        policy: CachePolicy,
        hot: HotCopy,
        access: Access,
    ) -> Result<(), ZioError> {
        self.check_bounds(bp)?;
        let access = refine(access, bp.block_type);
        let key = arc_key(bp);
        let copies = hot == HotCopy::Keep && bp.compression != Compression::Off;
        if copies && self.hot.copy_out(&key, out) {
            self.arc.note_hot_hit(access.kind);
            self.trace_event(Event::Read(Outcome::HotCopy), bp, access);
            return Ok(());
        }
        if let Some(phys) = self.arc.get(&key, access) {
            self.trace_event(Event::Read(Outcome::Arc), bp, access);
            decompress(bp, &phys, out)?;
            // Read again while cached: keep it ready, within the ARC's budget.
            if copies && self.hot.insert(key, out) {
                self.arc.evict_to_budget();
            }
            return Ok(());
        }
        self.trace_event(Event::Read(Outcome::Device), bp, access);
        if let Some(l2) = self.l2.get() {
            if self.read_l2(l2, bp, out, policy, access)? {
                return Ok(());
            }
        }
        self.read_from_disk(bp, out, policy, ReadMode::FirstGood, access).map(|_| ())
    }

    /// Serves an ARC miss from the L2ARC if a cache device holds the block and its bytes
    /// match the pointer's checksum; false (a counted miss) otherwise, and the caller
    /// reads the pool's devices. A bad copy is never an error.
    fn read_l2(
        &self,
        l2: &tarn_l2arc::L2Arc,
        bp: &BlockPtr,
        out: &mut [u8],
        policy: CachePolicy,
        access: Access,
    ) -> Result<bool, ZioError> {
        let key = arc_key(bp);
        SCRATCH.with_borrow_mut(|scratch| {
            let Some((dev, range)) = l2.read(&key, bp.psize, scratch) else { return Ok(false) };
            let phys = &scratch[range];
            if bp.checksum_kind.digest(phys) != bp.checksum {
                l2.note_bad(dev, &key, bp.psize, bp.lsize);
                return Ok(false);
            }
            l2.note_hit(bp.psize);
            let class = class_of(bp.block_type);
            if policy.admits(bp.block_type) && self.arc.keeps(class, access.kind) {
                self.arc.insert(key, Arc::from(phys), bp.lsize, class, access);
            }
            decompress(bp, phys, out)?;
            Ok(true)
        })
    }

    /// Reads, verifies and decompresses from the devices; returns how many copies were
    /// bad (and repaired).
    fn read_from_disk(
        &self,
        bp: &BlockPtr,
        out: &mut [u8],
        policy: CachePolicy,
        mode: ReadMode,
        access: Access,
    ) -> Result<u32, ZioError> {
        assert_eq!(out.len(), bp.lsize as usize, "read buffer must be the logical size");
        let top = &self.vdevs.tops[bp.vdev as usize];
        let verify = |d: &[u8]| bp.checksum_kind.digest(d) == bp.checksum;
        SCRATCH.with_borrow_mut(|scratch| {
            let (range, bad_copies) = self.read_verified(top, bp, &verify, scratch, mode, access.kind)?;
            let phys = &scratch[range];
            let class = class_of(bp.block_type);
            if policy.admits(bp.block_type) && self.arc.keeps(class, access.kind) {
                self.arc.insert(arc_key(bp), Arc::from(phys), bp.lsize, class, access);
            }
            decompress(bp, phys, out)?;
            Ok(bad_copies)
        })
    }

    fn read_verified(
        &self,
        top: &tarn_vdev::TopVdev,
        bp: &BlockPtr,
        verify: &dyn Fn(&[u8]) -> bool,
        scratch: &mut Vec<u8>,
        mode: ReadMode,
        kind: ReadKind,
    ) -> Result<(std::ops::Range<usize>, u32), ZioError> {
        let (offset, len, birth) = (bp.offset, bp.psize as usize, bp.birth);
        let read = match mode {
            ReadMode::AllSides => top.scrub_read(offset, len, birth, verify, scratch),
            _ => top.read_block(offset, len, birth, verify, scratch, mode, IoClass::SyncRead),
        };
        let read = read.map_err(|e| match e {
            VdevError::Checksum { .. } => {
                self.stats.checksum_errors.fetch_add(1, Ordering::Relaxed);
                // A scrub logs what it finds itself, knowing where the block is.
                if mode != ReadMode::AllSides {
                    self.note_failed_read(bp);
                }
                ZioError::Checksum { what: block_kind(bp.block_type), vdev: bp.vdev, offset: bp.offset }
            }
            other => ZioError::Vdev(other),
        })?;
        self.count_device_read(kind, read.range.len() as u64, scratch.len() as u64);
        Ok((read.range, read.bad_sides))
    }
}

fn decompress(bp: &BlockPtr, phys: &[u8], out: &mut [u8]) -> Result<(), ZioError> {
    bp.compression.decompress(phys, out).map_err(|source| ZioError::Decompress {
        what: block_kind(bp.block_type),
        vdev: bp.vdev,
        offset: bp.offset,
        source,
    })
}

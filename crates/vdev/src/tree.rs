//! The vdev tree: a stripe of top-level vdevs, each a single disk or a mirror.
//!
//! Offsets given to a `TopVdev` are offsets into its data area (after label 0, before
//! label 1); the same offset is used on every side of a mirror.
//!
//! Every read and write of a leaf passes its admission gate (`IoQueue`) under the
//! caller's I/O class. A write longer than the top-level vdev's `max_io` is cut into
//! pieces of at most `max_io`, each admitted on its own, so a sync I/O waits behind a
//! piece in the device's queue, never behind a whole 1 MiB run (a cloud volume, the
//! loop device and the lab's pacer all serve in arrival order).
//!
//! Owns: the top-level vdevs over their leaves (`leaf.rs`: one device, its counters,
//! queue and DTL; `top_state.rs`: their life through add and remove), mirror reads and
//! self-healing, writes and flushes on every side, the scrub and resilver I/O entry
//! points, and where labels and uberblocks go on each device.
//!
//! Promises: a read hands back only bytes the caller's verifier accepted, and rewrites
//! each bad side it found from the good copy; a side that missed a block's txg (its DTL
//! covers the block's birth) is read only when no other side verifies, and its bad copy
//! is then not counted as an error; a write succeeds if one side took it (a side that
//! failed is faulted and no longer written); labels are written label 0 everywhere before
//! label 1, so a crash leaves one whole copy per device; uberblock txgs only grow
//! (`write_uberblock` asserts it). Scrub and resilver I/O enter through `scrub_read` and
//! `resilver`, and only there: both go as `IoClass::Scrub`. No leaf I/O bypasses the
//! leaf's queue.
//!
//! Must never: interpret the bytes it reads (the verifier does), write past a vdev's
//! data area, or start a thread for a write of one piece (every hot-path write).
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};

use crate::dtl::UNKNOWN_BIRTH;
use crate::label::{slot_count, slot_size, Label, LabelDecode, Uberblock, CONFIG_AREA};
use crate::leaf::{Leaf, LeafHealth};
use crate::queue::{ClassStats, IoClass};
use crate::slots::Slots;
use crate::top_state::TopState;
use crate::{BlockDevice, VdevError, LABEL_SIZE};

/// How a read treats the sides of a mirror.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadMode {
    /// Stop at the first side that verifies; count and repair the bad ones before it.
    FirstGood,
    /// Verify every side (scrub); count and repair every bad one.
    AllSides,
    /// Stop at the first side that verifies; a side that does not is not an error (an
    /// intent-log block that was never written ends the log).
    Quiet,
}

/// A verified read: where the bytes are in the caller's buffer, and how many sides did
/// not verify (and were rewritten).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SidesRead {
    pub range: std::ops::Range<usize>,
    pub bad_sides: u32,
}

/// First byte of the data area on every device: label 0 plus a reserve for later use.
pub const DATA_START: u64 = 2 * LABEL_SIZE;

/// The largest piece a write is cut into by default: ZFS's aggregation limit for
/// non-rotating devices (zfs_vdev_aggregation_limit_non_rotating). A 1 MiB run is then
/// eight I/Os, and a sync I/O behind one waits for 128 KiB, not 1 MiB (on the lab's
/// paced disk, 16 ms instead of 128 ms). `TopVdev::set_max_io` changes it (the pool
/// reads `TARN_VDEV_MAX_IO`).
pub const DEFAULT_MAX_IO: u64 = 128 << 10;

pub struct TopVdev {
    pub index: usize,
    pub guid: u64,
    pub ashift: u32,
    /// Bytes of data area, the same on every side.
    pub asize: u64,
    pub leaves: Vec<Leaf>,
    /// A separate intent-log device: only log blocks are allocated on it.
    pub is_log: bool,
    /// A `TopState` (see `top_state.rs`).
    pub(crate) state: AtomicU8,
    rotor: AtomicUsize,
    /// Writes are cut into pieces of at most this many bytes (a multiple of the sector).
    max_io: AtomicU64,
}

impl TopVdev {
    pub fn new(index: usize, guid: u64, ashift: u32, asize: u64, leaves: Vec<Leaf>) -> TopVdev {
        assert!(!leaves.is_empty(), "a top-level vdev has at least one device");
        let max_io = AtomicU64::new(Self::round_max_io(DEFAULT_MAX_IO, ashift));
        TopVdev {
            index,
            guid,
            ashift,
            asize,
            leaves,
            is_log: false,
            state: AtomicU8::new(TopState::Active as u8),
            rotor: AtomicUsize::new(0),
            max_io,
        }
    }

    /// The place of a removed log device (`TopConfig::Hole`): no device, no space.
    pub fn hole(index: usize, ashift: u32) -> TopVdev {
        let max_io = AtomicU64::new(Self::round_max_io(DEFAULT_MAX_IO, ashift));
        TopVdev {
            index,
            guid: 0,
            ashift,
            asize: 0,
            leaves: Vec::new(),
            is_log: true,
            state: AtomicU8::new(TopState::Removed as u8),
            rotor: AtomicUsize::new(0),
            max_io,
        }
    }

    /// The largest piece a write to this vdev is cut into.
    pub fn max_io(&self) -> u64 {
        self.max_io.load(Ordering::Relaxed)
    }

    /// Sets the largest piece a write is cut into (rounded down to whole sectors, at
    /// least one sector).
    pub fn set_max_io(&self, bytes: u64) {
        self.max_io.store(Self::round_max_io(bytes, self.ashift), Ordering::Relaxed);
    }

    fn round_max_io(bytes: u64, ashift: u32) -> u64 {
        let sector = 1u64 << ashift;
        (bytes & !(sector - 1)).max(sector)
    }

    /// Marks this top-level vdev as a separate log device.
    pub fn as_log(mut self) -> TopVdev {
        self.is_log = true;
        self
    }

    /// True if at least one side can be read and written (never for a removed vdev).
    pub fn usable(&self) -> bool {
        !self.is_removed() && self.leaves.iter().any(|l| l.health() == LeafHealth::Online)
    }

    /// Data-area size a device of `size` bytes offers, aligned to the sector size.
    pub fn asize_of(size: u64, ashift: u32) -> u64 {
        if size < 2 * LABEL_SIZE + DATA_START {
            return 0;
        }
        let end = Leaf::label1_offset(size);
        let raw = end.saturating_sub(DATA_START);
        raw & !((1u64 << ashift) - 1)
    }

    pub fn is_mirror(&self) -> bool {
        self.leaves.len() > 1
    }

    pub fn sector(&self) -> u64 {
        1 << self.ashift
    }

    /// The alignment a read of this vdev needs: the largest any usable side needs, at
    /// most a pool sector.
    pub fn read_align(&self) -> u64 {
        let align = self.leaves.iter().filter_map(|l| l.usable()).map(|d| d.read_align()).max().unwrap_or(1);
        assert!(align.is_power_of_two(), "a device's read alignment is a power of two, not {align}");
        align.min(self.sector())
    }

    /// Reads `len` bytes at `offset` of the data area as I/O of `class`; the caller's
    /// `verify` decides whether a copy is good, and `mode` what a bad side means (see
    /// `ReadMode`).
    ///
    /// `span` is the caller's scratch buffer (reused across reads, so the hot path does
    /// not allocate); the verified bytes are `span[returned range]`.
    pub fn read(
        &self,
        offset: u64,
        len: usize,
        verify: &dyn Fn(&[u8]) -> bool,
        span: &mut Vec<u8>,
        mode: ReadMode,
        class: IoClass,
    ) -> Result<std::ops::Range<usize>, VdevError> {
        self.read_sides(offset, len, verify, span, mode, class).map(|r| r.range)
    }

    /// Like `read`, and says how many sides returned bad bytes (each counted in its
    /// leaf's checksum errors and rewritten from the good copy). The block's birth is
    /// not known (an intent-log extent): a side that missed txgs is read last.
    pub fn read_sides(
        &self,
        offset: u64,
        len: usize,
        verify: &dyn Fn(&[u8]) -> bool,
        out: &mut Vec<u8>,
        mode: ReadMode,
        class: IoClass,
    ) -> Result<SidesRead, VdevError> {
        self.read_copies(offset, len, UNKNOWN_BIRTH, verify, out, mode, class)
    }

    /// The read of a block born in txg `birth` (see `read_sides`): a side that missed
    /// that txg is read only if no other side verifies.
    // The block's place, its birth, the verifier, the caller's buffer, and how and as
    // what to read: each is the caller's to choose (as `read_copies`).
    #[allow(clippy::too_many_arguments)]
    pub fn read_block(
        &self,
        offset: u64,
        len: usize,
        birth: u64,
        verify: &dyn Fn(&[u8]) -> bool,
        out: &mut Vec<u8>,
        mode: ReadMode,
        class: IoClass,
    ) -> Result<SidesRead, VdevError> {
        self.read_copies(offset, len, birth, verify, out, mode, class)
    }

    /// Scrub I/O: verifies every side holding the block born in txg `birth`, rewriting
    /// bad ones from a good one (as `ReadMode::AllSides`). The scrub's entry point: an
    /// I/O scheduler gives these reads the scrub class here.
    pub fn scrub_read(
        &self,
        offset: u64,
        len: usize,
        birth: u64,
        verify: &dyn Fn(&[u8]) -> bool,
        out: &mut Vec<u8>,
    ) -> Result<SidesRead, VdevError> {
        let mode = ReadMode::AllSides;
        self.read_copies(offset, len, birth, verify, out, mode, IoClass::Scrub)
    }

    /// Resilver I/O: if a side missed txg `birth`, reads the block from a side that
    /// verifies and writes it to every side that missed it. Returns how many sides were
    /// written (0: none needed it, and nothing was read). The resilver's entry point: an
    /// I/O scheduler gives these reads and writes the resilver class here.
    pub fn resilver(
        &self,
        offset: u64,
        len: usize,
        birth: u64,
        verify: &dyn Fn(&[u8]) -> bool,
        scratch: &mut Vec<u8>,
    ) -> Result<u32, VdevError> {
        let needs = |l: &Leaf| l.usable().is_some() && l.dtl.covers(birth);
        if !self.leaves.iter().any(needs) {
            return Ok(0);
        }
        let mode = ReadMode::FirstGood;
        self.read_copies(offset, len, birth, verify, scratch, mode, IoClass::Scrub)?;
        let (start, end, _) = self.read_span(offset, len, IoClass::Scrub);
        let span = &scratch[..(end - start) as usize];
        let mut written = 0;
        for leaf in self.leaves.iter().filter(|l| needs(l)) {
            let Some(dev) = leaf.usable() else { continue };
            match leaf.write_dev(&**dev, span, DATA_START + start, IoClass::Scrub) {
                Ok(()) => written += 1,
                Err(_) => leaf.fault(),
            }
        }
        Ok(written)
    }

    /// The `align`-aligned span `[start, end)` holding `len` bytes at `offset`, and where
    /// those bytes begin in it.
    fn span_of(offset: u64, len: usize, align: u64) -> (u64, u64, usize) {
        let start = offset & !(align - 1);
        let end = (offset + len as u64).next_multiple_of(align);
        (start, end, (offset - start) as usize)
    }

    /// The span a read of `len` bytes at `offset` reads: for the pool's own work the
    /// smallest the devices can read (not whole pool sectors: a packed compressed block
    /// costs the disk its stored size); for a scan whole sectors, which a resilver writes
    /// back as they are.
    fn read_span(&self, offset: u64, len: usize, class: IoClass) -> (u64, u64, usize) {
        let align = match class {
            IoClass::Scrub => self.sector(),
            _ => self.read_align(),
        };
        Self::span_of(offset, len, align)
    }

    /// Reads the copies of a block: first the sides that hold its txg (in rotation),
    /// then, only if none verified, the sides that missed it (their bad bytes are
    /// expected there, so not counted). See `ReadMode` for what each mode verifies.
    #[allow(clippy::too_many_arguments)]
    fn read_copies(
        &self,
        offset: u64,
        len: usize,
        birth: u64,
        verify: &dyn Fn(&[u8]) -> bool,
        out: &mut Vec<u8>,
        mode: ReadMode,
        class: IoClass,
    ) -> Result<SidesRead, VdevError> {
        let all = mode == ReadMode::AllSides;
        assert!(offset + len as u64 <= self.asize, "read past the end of vdev {}", self.index);
        let (start, end, skip) = self.read_span(offset, len, class);
        out.resize((end - start) as usize, 0);
        let first = self.rotor.fetch_add(1, Ordering::Relaxed);
        let n = self.leaves.len();
        let mut bad_sides = Vec::new();
        let mut detail = String::new();
        let mut saw_checksum_error = false;
        let mut good: Option<Vec<u8>> = None;
        for missed_pass in [false, true] {
            for k in 0..n {
                let i = (first + k) % n;
                let leaf = &self.leaves[i];
                if leaf.dtl.covers(birth) != missed_pass {
                    continue;
                }
                let Some(dev) = leaf.usable() else { continue };
                let span = &mut out[..(end - start) as usize];
                if let Err(e) = leaf.read_dev(&**dev, span, DATA_START + start, class) {
                    leaf.read_errors.fetch_add(1, Ordering::Relaxed);
                    detail = format!("{}: {e}", leaf.path);
                    continue;
                }
                if !verify(&span[skip..skip + len]) {
                    saw_checksum_error = true;
                    if mode != ReadMode::Quiet && !missed_pass {
                        leaf.checksum_errors.fetch_add(1, Ordering::Relaxed);
                        bad_sides.push(i);
                    }
                    continue;
                }
                if all {
                    good.get_or_insert_with(|| span.to_vec());
                    continue;
                }
                self.repair(&bad_sides, span, start, class.repair());
                return Ok(SidesRead { range: skip..skip + len, bad_sides: bad_sides.len() as u32 });
            }
            if let Some(good) = good.take() {
                self.repair(&bad_sides, &good, start, class.repair());
                out[..good.len()].copy_from_slice(&good);
                return Ok(SidesRead { range: skip..skip + len, bad_sides: bad_sides.len() as u32 });
            }
        }
        if saw_checksum_error {
            Err(VdevError::Checksum { top: self.index, offset })
        } else {
            Err(VdevError::NoCopy { top: self.index, offset, detail })
        }
    }

    /// Self-healing: rewrite the sectors of the sides that returned bad data.
    fn repair(&self, bad_sides: &[usize], good_span: &[u8], start: u64, class: IoClass) {
        for &i in bad_sides {
            let leaf = &self.leaves[i];
            if let Some(dev) = leaf.usable() {
                if leaf.write_dev(&**dev, good_span, DATA_START + start, class).is_err() {
                    leaf.write_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Writes sector-aligned `data` at `offset` on every side as I/O of `class`, in
    /// pieces of at most `max_io`; succeeds if one side took every piece.
    pub fn write(&self, offset: u64, data: &[u8], class: IoClass) -> Result<(), VdevError> {
        let sector = self.sector();
        assert!(offset.is_multiple_of(sector) && (data.len() as u64).is_multiple_of(sector), "unaligned vdev write");
        assert!(offset + data.len() as u64 <= self.asize, "write past the end of vdev {}", self.index);
        assert!(!self.is_removed(), "write to removed vdev {}", self.index);
        let max_io = self.max_io() as usize;
        self.on_every_side(|leaf, dev| leaf.write_pieces(dev, class, data, DATA_START + offset, max_io))
    }

    pub fn flush(&self) -> Result<(), VdevError> {
        if self.is_removed() {
            return Ok(()); // holds nothing of the pool's any more
        }
        self.on_every_side(|leaf, dev| leaf.flush_dev(dev))
    }

    fn on_every_side(&self, op: impl Fn(&Leaf, &dyn BlockDevice) -> std::io::Result<()>) -> Result<(), VdevError> {
        let mut ok = false;
        let mut detail = String::new();
        for leaf in &self.leaves {
            let Some(dev) = leaf.usable() else { continue };
            match op(leaf, &**dev) {
                Ok(()) => ok = true,
                Err(e) => {
                    leaf.fault();
                    detail = format!("{}: {e}", leaf.path);
                }
            }
        }
        if ok {
            Ok(())
        } else {
            Err(VdevError::WriteFailed { top: self.index, detail })
        }
    }
}

/// The pool's devices: a stripe over top-level vdevs.
pub struct VdevTree {
    /// Indexed by vdev number; grows when a device is added to the open pool.
    pub tops: Slots<TopVdev>,
    pub ashift: u32,
    /// The txg of the newest uberblock written or imported: the next must be newer.
    last_uberblock_txg: AtomicU64,
}

impl VdevTree {
    pub fn new(tops: Vec<TopVdev>, ashift: u32) -> VdevTree {
        VdevTree { tops: Slots::new(tops), ashift, last_uberblock_txg: AtomicU64::new(0) }
    }

    /// Records the txg of the uberblock the pool was opened at: every uberblock written
    /// from now on must be newer.
    pub fn set_committed_txg(&self, txg: u64) {
        self.last_uberblock_txg.store(txg, Ordering::Release);
    }

    pub fn flush_all(&self) -> Result<(), VdevError> {
        for top in self.tops.iter() {
            if !top.in_service() || (top.is_log && !top.usable()) {
                continue; // a missing log device holds nothing of the pool's state
            }
            top.flush()?;
        }
        Ok(())
    }

    /// The devices of the vdevs in service (not one being added or removed).
    pub fn leaves(&self) -> impl Iterator<Item = &Leaf> {
        self.tops.iter().filter(|t| t.in_service()).flat_map(|t| t.leaves.iter())
    }

    /// The I/O counters of every class, summed over every device (indexed by
    /// `IoClass::index`).
    pub fn queue_stats(&self) -> [ClassStats; IoClass::COUNT] {
        let mut sum = [ClassStats::default(); IoClass::COUNT];
        for leaf in self.leaves() {
            for (total, class) in sum.iter_mut().zip(leaf.queue.stats()) {
                total.add(&class);
            }
        }
        sum
    }

    /// Marks a sync operation (an fsync: its writes, then its flush) under way on every
    /// device until the returned guard is dropped: meanwhile async I/O and scrub stay at
    /// their minimum in flight (see `IoQueue::begin_sync`). No allocation: the guard
    /// walks the same leaves again when dropped.
    pub fn hold_sync(&self) -> SyncHold<'_> {
        let tops = self.tops.len();
        for leaf in self.leaves_of_first(tops) {
            leaf.queue.begin_sync();
        }
        SyncHold { tree: self, tops }
    }

    /// Every leaf of the first `tops` top-level vdevs, whatever their state. A sync hold
    /// begins and ends on exactly this set: the tree may grow (`add_top`) and a vdev
    /// change state (added, removed) while an fsync holds it, and an end on a queue
    /// whose begin was skipped would break its count.
    fn leaves_of_first(&self, tops: usize) -> impl Iterator<Item = &Leaf> {
        self.tops.iter().take(tops).flat_map(|t| t.leaves.iter())
    }

    /// Dirty data is `percent` of `dirty_max`: sets every device's async-write limit
    /// (more txg writes in flight as dirty data nears the throttle).
    pub fn set_dirty_percent(&self, percent: u32) {
        for leaf in self.leaves() {
            leaf.queue.set_dirty_percent(percent);
        }
    }

    /// Sets the largest piece writes are cut into, on every top-level vdev.
    pub fn set_max_io(&self, bytes: u64) {
        for top in self.tops.iter() {
            top.set_max_io(bytes);
        }
    }

    /// Writes the config area of both labels on every device (pool create, export,
    /// config change), those being added too, not those removed. Label 0 everywhere,
    /// flush, then label 1, so a crash leaves one consistent copy on each device. Devices
    /// being added come first: a config naming a device is never written before that
    /// device can be recognised as the pool's.
    pub fn write_labels(&self, template: &Label) -> Result<(), VdevError> {
        let adding = || self.tops.iter().filter(|t| t.state() == TopState::Adding);
        let others = || self.tops.iter().filter(|t| !matches!(t.state(), TopState::Adding | TopState::Removed));
        for which in 0..2 {
            for top in adding().chain(others()) {
                for leaf in &top.leaves {
                    let Some(dev) = leaf.usable() else { continue };
                    let mut label = template.clone();
                    label.vdev_guid = leaf.guid;
                    label.top_index = top.index as u32;
                    label.asize = top.asize;
                    let at = if which == 0 { 0 } else { Leaf::label1_offset(dev.size()) };
                    let io = |source| VdevError::Io { path: leaf.path.clone().into(), source };
                    leaf.write_dev(&**dev, &label.encode(), at, IoClass::SyncWrite).map_err(io)?;
                    leaf.flush_dev(&**dev).map_err(io)?;
                }
            }
        }
        Ok(())
    }

    /// Writes `ub` into its ring slot in both labels of every device. The caller has
    /// flushed everything the uberblock points to; this flushes the uberblock itself.
    ///
    /// Panics if `ub.txg` is not above every uberblock written (or imported) before: an
    /// older txg in a newer slot would make import pick a root that lost commits.
    pub fn write_uberblock(&self, ub: &Uberblock) -> Result<(), VdevError> {
        let previous = self.last_uberblock_txg.fetch_max(ub.txg, Ordering::AcqRel);
        assert!(ub.txg > previous, "txg numbers only grow: uberblock of txg {} written after txg {previous}", ub.txg);
        let slot = slot_size(self.ashift);
        let index = (ub.txg % slot_count(self.ashift) as u64) as usize;
        let mut buf = vec![0u8; slot];
        buf[..crate::label::UBERBLOCK_BYTES].copy_from_slice(&ub.encode());
        let mut any = false;
        let mut detail = String::new();
        for leaf in self.leaves() {
            let Some(dev) = leaf.usable() else { continue };
            let mut ok = true;
            for base in [0, Leaf::label1_offset(dev.size())] {
                let at = base + CONFIG_AREA as u64 + (index * slot) as u64;
                let written = leaf.write_dev(&**dev, &buf, at, IoClass::SyncWrite);
                if let Err(e) = written.and_then(|_| leaf.flush_dev(&**dev)) {
                    leaf.write_errors.fetch_add(1, Ordering::Relaxed);
                    detail = format!("{}: {e}", leaf.path);
                    ok = false;
                }
            }
            any |= ok;
        }
        if any {
            Ok(())
        } else {
            Err(VdevError::WriteFailed { top: 0, detail })
        }
    }
}

/// A sync operation under way on every device of a tree (`VdevTree::hold_sync`).
#[must_use = "the sync operation ends when the guard is dropped"]
pub struct SyncHold<'a> {
    tree: &'a VdevTree,
    /// How many top-level vdevs the tree had when the hold began.
    tops: usize,
}

impl Drop for SyncHold<'_> {
    fn drop(&mut self) {
        for leaf in self.tree.leaves_of_first(self.tops) {
            leaf.queue.end_sync();
        }
    }
}

/// What one device's labels say: its config and every valid uberblock in either ring.
pub struct DeviceLabels {
    pub label: Label,
    pub uberblocks: Vec<Uberblock>,
}

/// Reads both labels of a device. Refuses a device with no valid label, one whose label
/// (or newest uberblock) has a format version this build does not know, and one whose
/// label has a field that makes no sense (`Label::validate`), naming the field.
pub fn read_device_labels(dev: &dyn BlockDevice) -> Result<DeviceLabels, VdevError> {
    let path = dev.path().to_path_buf();
    let min = 2 * LABEL_SIZE + DATA_START;
    if dev.size() < min {
        return Err(VdevError::TooSmall { path, size: dev.size(), min });
    }
    let mut label = None;
    let mut unknown_version = None;
    // Reported apart from a label's version, so the message names the right structure.
    let mut unknown_ub_version = None;
    let mut uberblocks = Vec::new();
    for base in [0, Leaf::label1_offset(dev.size())] {
        let mut area = vec![0u8; LABEL_SIZE as usize];
        dev.read_at(&mut area, base).map_err(|source| VdevError::Io { path: path.clone(), source })?;
        match Label::decode(&area[..CONFIG_AREA]) {
            LabelDecode::Ok(l) => {
                // Before any field is used: an ashift of 99 would size the ring wrong.
                if let Err(source) = l.validate() {
                    let source = Box::new(source);
                    return Err(VdevError::BadLabel { path, source });
                }
                let slot = slot_size(l.ashift);
                for s in 0..slot_count(l.ashift) {
                    let at = CONFIG_AREA + s * slot;
                    match Uberblock::decode(&area[at..at + slot]) {
                        Ok(Some(ub)) if ub.pool_guid == l.pool_guid => uberblocks.push(ub),
                        Ok(_) => {}
                        Err(v) => unknown_ub_version = Some(v),
                    }
                }
                label.get_or_insert(l);
            }
            LabelDecode::Version(v) => unknown_version = Some(v),
            LabelDecode::Invalid => {}
        }
    }
    match (label, unknown_version) {
        (_, Some(found)) => {
            // A newer tarn wrote this device; guessing at its format could corrupt it.
            Err(VdevError::UnsupportedVersion { path, found, supported: crate::LABEL_VERSION })
        }
        (_, None) if unknown_ub_version.is_some() => Err(VdevError::UnsupportedUberblockVersion {
            path,
            found: unknown_ub_version.unwrap_or_default(),
            supported: crate::UBERBLOCK_VERSION,
        }),
        (Some(label), _) => Ok(DeviceLabels { label, uberblocks }),
        (None, _) => Err(VdevError::NotTarn { path }),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use parking_lot::Mutex;

    use super::*;
    use crate::iostat::IoSnapshot;
    use crate::test_devices::{mirror, ub, MemDevice};

    #[test]
    fn an_all_sides_read_counts_and_repairs_the_bad_side() {
        let (tree, devs) = mirror();
        let top = &tree.tops[0];
        top.write(0, &[7u8; 4096], IoClass::AsyncWrite).unwrap();
        devs[1].write_at(&[9u8; 16], DATA_START + 100).unwrap();
        let verify = |d: &[u8]| d.iter().all(|&b| b == 7);
        let mut span = Vec::new();
        let read = top.read_sides(0, 4096, &verify, &mut span, ReadMode::AllSides, IoClass::SyncRead).unwrap();
        assert_eq!((read.range, read.bad_sides), (0..4096, 1));
        assert_eq!(top.leaves[1].status().checksum_errors, 1);
        let again = top.read_sides(0, 4096, &verify, &mut span, ReadMode::AllSides, IoClass::SyncRead).unwrap();
        assert_eq!(again.bad_sides, 0, "the bad side was rewritten from the good one");
    }

    #[test]
    fn a_side_that_missed_txgs_is_not_trusted_for_them_until_resilvered() {
        let (tree, devs) = mirror();
        let top = &tree.tops[0];
        // Side 1 was away for txgs 5..=9: it holds older bytes where the block is.
        top.write(0, &[7u8; 4096], IoClass::AsyncWrite).unwrap();
        devs[1].write_at(&[1u8; 4096], DATA_START).unwrap();
        top.leaves[1].add_missed_txgs(5, 9);
        let verify = |d: &[u8]| d.iter().all(|&b| b == 7);
        let mut span = Vec::new();
        for _ in 0..4 {
            // Every rotation: the stale side is never tried while the other verifies.
            let read = top.read_block(0, 4096, 7, &verify, &mut span, ReadMode::FirstGood, IoClass::SyncRead).unwrap();
            assert_eq!(read.bad_sides, 0);
        }
        let scrub = top.scrub_read(0, 4096, 7, &verify, &mut span).unwrap();
        assert_eq!(scrub.bad_sides, 0, "a scrub leaves the missed copy to the resilver");
        assert_eq!(top.leaves[1].status().checksum_errors, 0, "a stale copy is not a device error");
        assert_eq!(top.leaves[1].status().missed_txgs, Some((5, 9)));
        // A block born before the side left is read from it as from any side.
        assert_eq!(top.resilver(0, 4096, 3, &verify, &mut span).unwrap(), 0);
        assert_eq!(top.resilver(0, 4096, 7, &verify, &mut span).unwrap(), 1);
        let mut side1 = vec![0u8; 4096];
        devs[1].read_at(&mut side1, DATA_START).unwrap();
        assert_eq!(side1, vec![7u8; 4096], "the resilver copied the block");
        top.leaves[1].clear_missed_txgs();
        assert_eq!(top.leaves[1].status().missed_txgs, None);
    }

    #[test]
    fn with_only_a_stale_side_left_its_good_copy_is_still_read() {
        let (tree, devs) = mirror();
        let top = &tree.tops[0];
        top.write(0, &[7u8; 4096], IoClass::AsyncWrite).unwrap();
        devs[0].write_at(&[2u8; 4096], DATA_START).unwrap();
        top.leaves[1].add_missed_txgs(5, 9);
        let verify = |d: &[u8]| d.iter().all(|&b| b == 7);
        let mut span = Vec::new();
        let read = top.read_block(0, 4096, 7, &verify, &mut span, ReadMode::FirstGood, IoClass::SyncRead).unwrap();
        assert_eq!(&span[read.range], &[7u8; 4096][..]);
        assert_eq!(read.bad_sides, 1, "the side that should have had it is bad");
    }

    #[test]
    fn io_counters_count_demand_and_scan_traffic() {
        let (tree, _) = mirror();
        let top = &tree.tops[0];
        let before: Vec<IoSnapshot> = top.leaves.iter().map(|l| l.iostat()).collect();
        top.write(0, &[7u8; 8192], IoClass::AsyncWrite).unwrap();
        let verify = |d: &[u8]| d.iter().all(|&b| b == 7);
        let mut span = Vec::new();
        top.read_block(0, 8192, 1, &verify, &mut span, ReadMode::FirstGood, IoClass::SyncRead).unwrap();
        top.scrub_read(0, 8192, 1, &verify, &mut span).unwrap();
        let after: Vec<IoSnapshot> = top.leaves.iter().map(|l| l.iostat()).collect();
        let d: Vec<IoSnapshot> = after.iter().zip(&before).map(|(a, b)| a.since(b)).collect();
        let total = d[0].add(&d[1]);
        assert_eq!((total.write_ops, total.write_bytes), (2, 16384));
        assert_eq!((total.read_ops, total.read_bytes), (3, 3 * 8192));
        assert_eq!((total.scan_ops, total.scan_bytes), (2, 16384));
        let (in_flight, last) = top.leaves[0].demand_activity();
        assert_eq!(in_flight, 0);
        assert!(last > 0, "a demand write was seen");
    }

    /// Records the (offset, length) of every write it takes.
    struct Recording {
        inner: Arc<MemDevice>,
        writes: Mutex<Vec<(u64, usize)>>,
    }

    impl BlockDevice for Recording {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
            self.inner.read_at(buf, offset)
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
            self.writes.lock().push((offset, buf.len()));
            self.inner.write_at(buf, offset)
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
        fn size(&self) -> u64 {
            self.inner.size()
        }
        fn path(&self) -> &Path {
            self.inner.path()
        }
    }

    #[test]
    fn a_long_write_is_cut_into_pieces_of_at_most_max_io() {
        let rec = Arc::new(Recording { inner: MemDevice::new("r"), writes: Mutex::new(Vec::new()) });
        let leaf = Leaf::new(1, "r".into(), Some(rec.clone() as Arc<dyn BlockDevice>));
        let top = TopVdev::new(0, 9, 12, TopVdev::asize_of(4 << 20, 12), vec![leaf]);
        top.set_max_io(16 << 10);
        let data: Vec<u8> = (0..100 << 10).map(|i| (i % 251) as u8).collect();
        top.write(8192, &data, IoClass::AsyncWrite).unwrap();
        let mut writes = rec.writes.lock().clone();
        writes.sort_unstable();
        let expected: Vec<(u64, usize)> =
            (0..7u64).map(|k| (DATA_START + 8192 + k * (16 << 10), if k < 6 { 16 << 10 } else { 4 << 10 })).collect();
        assert_eq!(writes, expected);
        let mut span = Vec::new();
        let range = top.read(8192, data.len(), &|_| true, &mut span, ReadMode::FirstGood, IoClass::SyncRead).unwrap();
        assert_eq!(&span[range], &data[..], "every piece landed where it belongs");
        let stats = top.leaves[0].queue().stats()[IoClass::AsyncWrite.index()];
        assert_eq!((stats.issued, stats.bytes), (7, 100 << 10));
    }

    #[test]
    fn max_io_is_whole_sectors() {
        let (tree, _) = mirror();
        tree.set_max_io(5000);
        assert_eq!(tree.tops[0].max_io(), 4096);
        tree.set_max_io(0);
        assert_eq!(tree.tops[0].max_io(), 4096);
        let fresh = TopVdev::new(0, 1, 9, 1 << 20, vec![Leaf::new(1, "/x".into(), None)]);
        assert_eq!(fresh.max_io(), DEFAULT_MAX_IO);
    }

    #[test]
    fn scrub_and_resilver_io_goes_as_the_scrub_class() {
        let (tree, devs) = mirror();
        let top = &tree.tops[0];
        top.write(0, &[7u8; 4096], IoClass::AsyncWrite).unwrap();
        devs[1].write_at(&[1u8; 4096], DATA_START).unwrap();
        top.leaves[1].add_missed_txgs(5, 9);
        let verify = |d: &[u8]| d.iter().all(|&b| b == 7);
        let mut span = Vec::new();
        top.scrub_read(0, 4096, 7, &verify, &mut span).unwrap();
        assert_eq!(top.resilver(0, 4096, 7, &verify, &mut span).unwrap(), 1);
        let scrub = |leaf: &Leaf| leaf.queue().stats()[IoClass::Scrub.index()];
        // The scrub read side 0 (side 1 missed the block's txg); the resilver read side 0
        // and wrote side 1.
        assert_eq!((scrub(&top.leaves[0]).issued, scrub(&top.leaves[1]).issued), (2, 1));
        let demand_reads = |leaf: &Leaf| leaf.queue().stats()[IoClass::SyncRead.index()].issued;
        assert_eq!(demand_reads(&top.leaves[0]) + demand_reads(&top.leaves[1]), 0);
    }

    #[test]
    fn uberblocks_of_growing_txgs_are_written() {
        let (tree, _) = mirror();
        tree.set_committed_txg(4);
        tree.write_uberblock(&ub(5)).unwrap();
        tree.write_uberblock(&ub(9)).unwrap();
    }

    #[test]
    #[should_panic(expected = "txg numbers only grow")]
    fn an_uberblock_txg_that_does_not_grow_stops_the_pool() {
        let (tree, _) = mirror();
        tree.write_uberblock(&ub(5)).unwrap();
        let _ = tree.write_uberblock(&ub(5));
    }

    #[test]
    #[should_panic(expected = "txg numbers only grow")]
    fn an_uberblock_older_than_the_imported_one_stops_the_pool() {
        let (tree, _) = mirror();
        tree.set_committed_txg(7);
        let _ = tree.write_uberblock(&ub(6));
    }
}

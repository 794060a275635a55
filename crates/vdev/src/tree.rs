//! The vdev tree: a stripe of top-level vdevs, each a single disk or a mirror.
//!
//! Offsets given to a `TopVdev` are offsets into its data area (after label 0, before
//! label 1); the same offset is used on every side of a mirror.
//!
//! Owns: the leaves and their health, error counters, I/O counters and missed txgs
//! (DTL), mirror reads and self-healing, writes and flushes on every side, the scrub and
//! resilver I/O entry points, and where labels and uberblocks go on each device.
//!
//! Promises: a read hands back only bytes the caller's verifier accepted, and rewrites
//! each bad side it found from the good copy; a side that missed a block's txg (its DTL
//! covers the block's birth) is read only when no other side verifies, and its bad copy
//! is then not counted as an error; a write succeeds if one side took it (a side that
//! failed is faulted and no longer written); labels are written label 0 everywhere before
//! label 1, so a crash leaves one whole copy per device; uberblock txgs only grow
//! (`write_uberblock` asserts it). Scrub and resilver I/O enter through `scrub_read` and
//! `resilver`, and only there (an I/O scheduler tags them there).
//!
//! Must never: interpret the bytes it reads (the verifier does), or write past a
//! vdev's data area.
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::dtl::{Dtl, UNKNOWN_BIRTH};
use crate::iostat::{IoCounters, IoSnapshot, Traffic};
use crate::label::{slot_count, slot_size, Label, LabelDecode, Uberblock, CONFIG_AREA};
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum LeafHealth {
    Online,
    /// The device could not be opened at import.
    Unavail,
    /// Writes to it failed; it is no longer written.
    Faulted,
}

pub struct Leaf {
    pub guid: u64,
    pub path: String,
    dev: Option<Arc<dyn BlockDevice>>,
    faulted: std::sync::atomic::AtomicBool,
    read_errors: AtomicU64,
    write_errors: AtomicU64,
    checksum_errors: AtomicU64,
    io: IoCounters,
    /// The txgs this side missed (it was away): a resilver brings it up to date.
    dtl: Dtl,
}

/// What `status` shows of one device.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct LeafStatus {
    pub path: String,
    pub guid: u64,
    pub health: LeafHealth,
    pub read_errors: u64,
    pub write_errors: u64,
    pub checksum_errors: u64,
    /// The txgs (first, last) whose writes this side missed, until a resilver has
    /// copied them (`zpool status` shows such a side as resilvering).
    #[serde(default)]
    pub missed_txgs: Option<(u64, u64)>,
}

impl Leaf {
    pub fn new(guid: u64, path: String, dev: Option<Arc<dyn BlockDevice>>) -> Leaf {
        Leaf {
            guid,
            path,
            dev,
            faulted: Default::default(),
            read_errors: AtomicU64::new(0),
            write_errors: AtomicU64::new(0),
            checksum_errors: AtomicU64::new(0),
            io: IoCounters::default(),
            dtl: Dtl::default(),
        }
    }

    /// The device, while it is present and not faulted.
    pub fn device(&self) -> Option<&Arc<dyn BlockDevice>> {
        self.usable()
    }

    fn usable(&self) -> Option<&Arc<dyn BlockDevice>> {
        if self.faulted.load(Ordering::Relaxed) {
            return None;
        }
        self.dev.as_ref()
    }

    pub fn health(&self) -> LeafHealth {
        if self.dev.is_none() {
            LeafHealth::Unavail
        } else if self.faulted.load(Ordering::Relaxed) {
            LeafHealth::Faulted
        } else {
            LeafHealth::Online
        }
    }

    pub fn status(&self) -> LeafStatus {
        LeafStatus {
            path: self.path.clone(),
            guid: self.guid,
            health: self.health(),
            read_errors: self.read_errors.load(Ordering::Relaxed),
            write_errors: self.write_errors.load(Ordering::Relaxed),
            checksum_errors: self.checksum_errors.load(Ordering::Relaxed),
            missed_txgs: self.dtl.range(),
        }
    }

    /// Operations, bytes and service time so far (`tarn pool iostat`).
    pub fn iostat(&self) -> IoSnapshot {
        self.io.snapshot()
    }

    /// Demand operations under way on this device, and when the last one ended
    /// (`iostat::now_ns`; 0: none yet). A scrub or resilver yields to them.
    pub fn demand_activity(&self) -> (u32, u64) {
        self.io.demand()
    }

    /// The txgs (first, last) whose writes this side missed, if any.
    pub fn missed_txgs(&self) -> Option<(u64, u64)> {
        self.dtl.range()
    }

    /// Records that this side missed the writes of txgs `first..=last` (it was away):
    /// reads stop trusting its copies of blocks born then until `clear_missed_txgs`.
    pub fn add_missed_txgs(&self, first: u64, last: u64) {
        self.dtl.add(first, last);
    }

    /// A resilver copied every block born in the missed txgs to this side.
    pub fn clear_missed_txgs(&self) {
        self.dtl.clear();
    }

    /// A write to the side failed: it is counted, and the side is no longer written
    /// (nor read) until the pool is imported again.
    fn fault(&self) {
        self.write_errors.fetch_add(1, Ordering::Relaxed);
        self.faulted.store(true, Ordering::Relaxed);
    }

    /// Reads from the device, counted in its I/O statistics.
    fn read_dev(&self, dev: &Arc<dyn BlockDevice>, buf: &mut [u8], at: u64, traffic: Traffic) -> std::io::Result<()> {
        let timing = self.io.start(traffic);
        let r = dev.read_at(buf, at);
        timing.done(false, buf.len());
        r
    }

    /// Writes to the device, counted in its I/O statistics.
    fn write_dev(&self, dev: &Arc<dyn BlockDevice>, buf: &[u8], at: u64, traffic: Traffic) -> std::io::Result<()> {
        let timing = self.io.start(traffic);
        let r = dev.write_at(buf, at);
        timing.done(true, buf.len());
        r
    }

    /// Flushes the device (demand activity, not an operation iostat counts).
    fn flush_dev(&self, dev: &Arc<dyn BlockDevice>) -> std::io::Result<()> {
        let timing = self.io.start(Traffic::Demand);
        let r = dev.flush();
        timing.flushed();
        r
    }

    /// Restores counters saved by an earlier import (they persist across imports). Adds
    /// to what this import already counted (a damaged newest root block passed over
    /// while choosing the uberblock must still show in `status`).
    pub fn restore_counters(&self, read: u64, write: u64, checksum: u64) {
        self.read_errors.fetch_add(read, Ordering::Relaxed);
        self.write_errors.fetch_add(write, Ordering::Relaxed);
        self.checksum_errors.fetch_add(checksum, Ordering::Relaxed);
    }

    pub fn clear_counters(&self) {
        self.read_errors.store(0, Ordering::Relaxed);
        self.write_errors.store(0, Ordering::Relaxed);
        self.checksum_errors.store(0, Ordering::Relaxed);
    }

    /// Offset of label 1: the last whole label-sized slice of the device.
    fn label1_offset(size: u64) -> u64 {
        (size / LABEL_SIZE) * LABEL_SIZE - LABEL_SIZE
    }
}

pub struct TopVdev {
    pub index: usize,
    pub guid: u64,
    pub ashift: u32,
    /// Bytes of data area, the same on every side.
    pub asize: u64,
    pub leaves: Vec<Leaf>,
    /// A separate intent-log device: only log blocks are allocated on it.
    pub is_log: bool,
    rotor: AtomicUsize,
}

impl TopVdev {
    pub fn new(index: usize, guid: u64, ashift: u32, asize: u64, leaves: Vec<Leaf>) -> TopVdev {
        assert!(!leaves.is_empty(), "a top-level vdev has at least one device");
        TopVdev { index, guid, ashift, asize, leaves, is_log: false, rotor: AtomicUsize::new(0) }
    }

    /// Marks this top-level vdev as a separate log device.
    pub fn as_log(mut self) -> TopVdev {
        self.is_log = true;
        self
    }

    /// True if at least one side can be read and written.
    pub fn usable(&self) -> bool {
        self.leaves.iter().any(|l| l.health() == LeafHealth::Online)
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

    /// Reads `len` bytes at `offset` of the data area; the caller's `verify` decides
    /// whether a copy is good, and `mode` what a bad side means (see `ReadMode`).
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
    ) -> Result<std::ops::Range<usize>, VdevError> {
        self.read_sides(offset, len, verify, span, mode).map(|r| r.range)
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
    ) -> Result<SidesRead, VdevError> {
        self.read_copies(offset, len, UNKNOWN_BIRTH, verify, out, mode, Traffic::Demand)
    }

    /// The read of a block born in txg `birth` (see `read_sides`): a side that missed
    /// that txg is read only if no other side verifies.
    pub fn read_block(
        &self,
        offset: u64,
        len: usize,
        birth: u64,
        verify: &dyn Fn(&[u8]) -> bool,
        out: &mut Vec<u8>,
        mode: ReadMode,
    ) -> Result<SidesRead, VdevError> {
        self.read_copies(offset, len, birth, verify, out, mode, Traffic::Demand)
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
        self.read_copies(offset, len, birth, verify, out, mode, Traffic::Scan)
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
        self.read_copies(offset, len, birth, verify, scratch, mode, Traffic::Scan)?;
        let (start, end, _) = self.span_of(offset, len);
        let span = &scratch[..(end - start) as usize];
        let mut written = 0;
        for leaf in self.leaves.iter().filter(|l| needs(l)) {
            let Some(dev) = leaf.usable() else { continue };
            match leaf.write_dev(dev, span, DATA_START + start, Traffic::Scan) {
                Ok(()) => written += 1,
                Err(_) => leaf.fault(),
            }
        }
        Ok(written)
    }

    /// The sector-aligned span `[start, end)` holding `len` bytes at `offset`, and where
    /// those bytes begin in it.
    fn span_of(&self, offset: u64, len: usize) -> (u64, u64, usize) {
        let sector = self.sector();
        let start = offset & !(sector - 1);
        let end = (offset + len as u64 + sector - 1) & !(sector - 1);
        (start, end, (offset - start) as usize)
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
        traffic: Traffic,
    ) -> Result<SidesRead, VdevError> {
        let all = mode == ReadMode::AllSides;
        assert!(offset + len as u64 <= self.asize, "read past the end of vdev {}", self.index);
        let (start, end, skip) = self.span_of(offset, len);
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
                if let Err(e) = leaf.read_dev(dev, span, DATA_START + start, traffic) {
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
                self.repair(&bad_sides, span, start, traffic);
                return Ok(SidesRead { range: skip..skip + len, bad_sides: bad_sides.len() as u32 });
            }
            if let Some(good) = good.take() {
                self.repair(&bad_sides, &good, start, traffic);
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
    fn repair(&self, bad_sides: &[usize], good_span: &[u8], start: u64, traffic: Traffic) {
        for &i in bad_sides {
            let leaf = &self.leaves[i];
            if let Some(dev) = leaf.usable() {
                if leaf.write_dev(dev, good_span, DATA_START + start, traffic).is_err() {
                    leaf.write_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Writes sector-aligned `data` at `offset` on every side; succeeds if one side did.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), VdevError> {
        let sector = self.sector();
        assert!(offset.is_multiple_of(sector) && (data.len() as u64).is_multiple_of(sector), "unaligned vdev write");
        assert!(offset + data.len() as u64 <= self.asize, "write past the end of vdev {}", self.index);
        self.on_every_side(|leaf, dev| leaf.write_dev(dev, data, DATA_START + offset, Traffic::Demand))
    }

    pub fn flush(&self) -> Result<(), VdevError> {
        self.on_every_side(|leaf, dev| leaf.flush_dev(dev))
    }

    fn on_every_side(&self, op: impl Fn(&Leaf, &Arc<dyn BlockDevice>) -> std::io::Result<()>) -> Result<(), VdevError> {
        let mut ok = false;
        let mut detail = String::new();
        for leaf in &self.leaves {
            let Some(dev) = leaf.usable() else { continue };
            match op(leaf, dev) {
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
    pub tops: Vec<TopVdev>,
    pub ashift: u32,
    /// The txg of the newest uberblock written or imported: the next must be newer.
    last_uberblock_txg: AtomicU64,
}

impl VdevTree {
    pub fn new(tops: Vec<TopVdev>, ashift: u32) -> VdevTree {
        VdevTree { tops, ashift, last_uberblock_txg: AtomicU64::new(0) }
    }

    /// Records the txg of the uberblock the pool was opened at: every uberblock written
    /// from now on must be newer.
    pub fn set_committed_txg(&self, txg: u64) {
        self.last_uberblock_txg.store(txg, Ordering::Release);
    }

    pub fn flush_all(&self) -> Result<(), VdevError> {
        for top in &self.tops {
            if top.is_log && !top.usable() {
                continue; // a missing log device holds nothing of the pool's state
            }
            top.flush()?;
        }
        Ok(())
    }

    pub fn leaves(&self) -> impl Iterator<Item = &Leaf> {
        self.tops.iter().flat_map(|t| t.leaves.iter())
    }

    /// Writes the config area of both labels on every device (pool create, export,
    /// config change). Label 0 everywhere, flush, then label 1, so a crash leaves one
    /// consistent copy on each device.
    pub fn write_labels(&self, template: &Label) -> Result<(), VdevError> {
        for which in 0..2 {
            for top in &self.tops {
                for leaf in &top.leaves {
                    let Some(dev) = leaf.usable() else { continue };
                    let mut label = template.clone();
                    label.vdev_guid = leaf.guid;
                    label.top_index = top.index as u32;
                    label.asize = top.asize;
                    let at = if which == 0 { 0 } else { Leaf::label1_offset(dev.size()) };
                    let io = |source| VdevError::Io { path: leaf.path.clone().into(), source };
                    leaf.write_dev(dev, &label.encode(), at, Traffic::Demand).map_err(io)?;
                    leaf.flush_dev(dev).map_err(io)?;
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
                let written = leaf.write_dev(dev, &buf, at, Traffic::Demand);
                if let Err(e) = written.and_then(|_| leaf.flush_dev(dev)) {
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
    use std::path::{Path, PathBuf};

    use parking_lot::Mutex;

    use super::*;

    /// A device in memory, so a test can damage one side of a mirror.
    struct MemDevice {
        bytes: Mutex<Vec<u8>>,
        path: PathBuf,
    }

    impl MemDevice {
        fn new(name: &str) -> Arc<MemDevice> {
            Arc::new(MemDevice { bytes: Mutex::new(vec![0u8; 4 << 20]), path: PathBuf::from(name) })
        }
    }

    impl BlockDevice for MemDevice {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
            let b = self.bytes.lock();
            buf.copy_from_slice(&b[offset as usize..offset as usize + buf.len()]);
            Ok(())
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
            self.bytes.lock()[offset as usize..offset as usize + buf.len()].copy_from_slice(buf);
            Ok(())
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
        fn size(&self) -> u64 {
            self.bytes.lock().len() as u64
        }
        fn path(&self) -> &Path {
            &self.path
        }
    }

    fn mirror() -> (VdevTree, Vec<Arc<MemDevice>>) {
        let devs = vec![MemDevice::new("a"), MemDevice::new("b")];
        let leaves = devs
            .iter()
            .enumerate()
            .map(|(i, d)| {
                Leaf::new(i as u64 + 1, d.path.display().to_string(), Some(d.clone() as Arc<dyn BlockDevice>))
            })
            .collect();
        let asize = TopVdev::asize_of(4 << 20, 12);
        (VdevTree::new(vec![TopVdev::new(0, 9, 12, asize, leaves)], 12), devs)
    }

    fn ub(txg: u64) -> Uberblock {
        Uberblock { txg, pool_guid: 1, guid_sum: 3, timestamp: 0, root: [0; 64] }
    }

    #[test]
    fn an_all_sides_read_counts_and_repairs_the_bad_side() {
        let (tree, devs) = mirror();
        let top = &tree.tops[0];
        top.write(0, &[7u8; 4096]).unwrap();
        devs[1].write_at(&[9u8; 16], DATA_START + 100).unwrap();
        let verify = |d: &[u8]| d.iter().all(|&b| b == 7);
        let mut span = Vec::new();
        let read = top.read_sides(0, 4096, &verify, &mut span, ReadMode::AllSides).unwrap();
        assert_eq!((read.range, read.bad_sides), (0..4096, 1));
        assert_eq!(top.leaves[1].status().checksum_errors, 1);
        let again = top.read_sides(0, 4096, &verify, &mut span, ReadMode::AllSides).unwrap();
        assert_eq!(again.bad_sides, 0, "the bad side was rewritten from the good one");
    }

    #[test]
    fn a_side_that_missed_txgs_is_not_trusted_for_them_until_resilvered() {
        let (tree, devs) = mirror();
        let top = &tree.tops[0];
        // Side 1 was away for txgs 5..=9: it holds older bytes where the block is.
        top.write(0, &[7u8; 4096]).unwrap();
        devs[1].write_at(&[1u8; 4096], DATA_START).unwrap();
        top.leaves[1].add_missed_txgs(5, 9);
        let verify = |d: &[u8]| d.iter().all(|&b| b == 7);
        let mut span = Vec::new();
        for _ in 0..4 {
            // Every rotation: the stale side is never tried while the other verifies.
            let read = top.read_block(0, 4096, 7, &verify, &mut span, ReadMode::FirstGood).unwrap();
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
        top.write(0, &[7u8; 4096]).unwrap();
        devs[0].write_at(&[2u8; 4096], DATA_START).unwrap();
        top.leaves[1].add_missed_txgs(5, 9);
        let verify = |d: &[u8]| d.iter().all(|&b| b == 7);
        let mut span = Vec::new();
        let read = top.read_block(0, 4096, 7, &verify, &mut span, ReadMode::FirstGood).unwrap();
        assert_eq!(&span[read.range], &[7u8; 4096][..]);
        assert_eq!(read.bad_sides, 1, "the side that should have had it is bad");
    }

    #[test]
    fn io_counters_count_demand_and_scan_traffic() {
        let (tree, _) = mirror();
        let top = &tree.tops[0];
        let before: Vec<IoSnapshot> = top.leaves.iter().map(|l| l.iostat()).collect();
        top.write(0, &[7u8; 8192]).unwrap();
        let verify = |d: &[u8]| d.iter().all(|&b| b == 7);
        let mut span = Vec::new();
        top.read_block(0, 8192, 1, &verify, &mut span, ReadMode::FirstGood).unwrap();
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

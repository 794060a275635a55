//! The vdev tree: a stripe of top-level vdevs, each a single disk or a mirror.
//!
//! Offsets given to a `TopVdev` are offsets into its data area (after label 0, before
//! label 1); the same offset is used on every side of a mirror.
//!
//! Owns: the leaves and their health and error counters, mirror reads and self-healing,
//! writes and flushes on every side, and where labels and uberblocks go on each device.
//!
//! Promises: a read hands back only bytes the caller's verifier accepted, and rewrites
//! each bad side it found from the good copy; a write succeeds if one side took it (a
//! side that failed is faulted and no longer written); labels are written label 0
//! everywhere before label 1, so a crash leaves one whole copy per device; uberblock txgs
//! only grow (`write_uberblock` asserts it).
//!
//! Must never: interpret the bytes it reads (the verifier does), or write past a
//! vdev's data area.
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

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
        }
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
        }
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
        assert!(
            !leaves.is_empty(),
            "a top-level vdev has at least one device"
        );
        TopVdev {
            index,
            guid,
            ashift,
            asize,
            leaves,
            is_log: false,
            rotor: AtomicUsize::new(0),
        }
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
        self.read_sides(offset, len, verify, span, mode)
            .map(|r| r.range)
    }

    /// Like `read`, and says how many sides returned bad bytes (each counted in its
    /// leaf's checksum errors and rewritten from the good copy).
    pub fn read_sides(
        &self,
        offset: u64,
        len: usize,
        verify: &dyn Fn(&[u8]) -> bool,
        out: &mut Vec<u8>,
        mode: ReadMode,
    ) -> Result<SidesRead, VdevError> {
        let all = mode == ReadMode::AllSides;
        assert!(
            offset + len as u64 <= self.asize,
            "read past the end of vdev {}",
            self.index
        );
        let sector = self.sector();
        let start = offset & !(sector - 1);
        let end = (offset + len as u64 + sector - 1) & !(sector - 1);
        let skip = (offset - start) as usize;
        out.resize((end - start) as usize, 0);
        let span = &mut out[..(end - start) as usize];
        let first = self.rotor.fetch_add(1, Ordering::Relaxed);
        let n = self.leaves.len();
        let mut bad_sides = Vec::new();
        let mut detail = String::new();
        let mut saw_checksum_error = false;
        let mut good: Option<Vec<u8>> = None;
        for k in 0..n {
            let i = (first + k) % n;
            let leaf = &self.leaves[i];
            let Some(dev) = leaf.usable() else { continue };
            if let Err(e) = dev.read_at(span, DATA_START + start) {
                leaf.read_errors.fetch_add(1, Ordering::Relaxed);
                detail = format!("{}: {e}", leaf.path);
                continue;
            }
            if !verify(&span[skip..skip + len]) {
                saw_checksum_error = true;
                if mode != ReadMode::Quiet {
                    leaf.checksum_errors.fetch_add(1, Ordering::Relaxed);
                    bad_sides.push(i);
                }
                continue;
            }
            if all {
                good.get_or_insert_with(|| span.to_vec());
                continue;
            }
            self.repair(&bad_sides, span, start);
            return Ok(SidesRead {
                range: skip..skip + len,
                bad_sides: bad_sides.len() as u32,
            });
        }
        if let Some(good) = good {
            self.repair(&bad_sides, &good, start);
            out[..good.len()].copy_from_slice(&good);
            return Ok(SidesRead {
                range: skip..skip + len,
                bad_sides: bad_sides.len() as u32,
            });
        }
        if saw_checksum_error {
            Err(VdevError::Checksum {
                top: self.index,
                offset,
            })
        } else {
            Err(VdevError::NoCopy {
                top: self.index,
                offset,
                detail,
            })
        }
    }

    /// Self-healing: rewrite the sectors of the sides that returned bad data.
    fn repair(&self, bad_sides: &[usize], good_span: &[u8], start: u64) {
        for &i in bad_sides {
            let leaf = &self.leaves[i];
            if let Some(dev) = leaf.usable() {
                if dev.write_at(good_span, DATA_START + start).is_err() {
                    leaf.write_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Writes sector-aligned `data` at `offset` on every side; succeeds if one side did.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), VdevError> {
        let sector = self.sector();
        assert!(
            offset.is_multiple_of(sector) && (data.len() as u64).is_multiple_of(sector),
            "unaligned vdev write"
        );
        assert!(
            offset + data.len() as u64 <= self.asize,
            "write past the end of vdev {}",
            self.index
        );
        self.on_every_side(|dev| dev.write_at(data, DATA_START + offset))
    }

    pub fn flush(&self) -> Result<(), VdevError> {
        self.on_every_side(|dev| dev.flush())
    }

    fn on_every_side(
        &self,
        op: impl Fn(&Arc<dyn BlockDevice>) -> std::io::Result<()>,
    ) -> Result<(), VdevError> {
        let mut ok = false;
        let mut detail = String::new();
        for leaf in &self.leaves {
            let Some(dev) = leaf.usable() else { continue };
            match op(dev) {
                Ok(()) => ok = true,
                Err(e) => {
                    leaf.write_errors.fetch_add(1, Ordering::Relaxed);
                    leaf.faulted.store(true, Ordering::Relaxed);
                    detail = format!("{}: {e}", leaf.path);
                }
            }
        }
        if ok {
            Ok(())
        } else {
            Err(VdevError::WriteFailed {
                top: self.index,
                detail,
            })
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
        VdevTree {
            tops,
            ashift,
            last_uberblock_txg: AtomicU64::new(0),
        }
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
                    let at = if which == 0 {
                        0
                    } else {
                        Leaf::label1_offset(dev.size())
                    };
                    let io = |source| VdevError::Io {
                        path: leaf.path.clone().into(),
                        source,
                    };
                    dev.write_at(&label.encode(), at).map_err(io)?;
                    dev.flush().map_err(io)?;
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
        assert!(
            ub.txg > previous,
            "txg numbers only grow: uberblock of txg {} written after txg {previous}",
            ub.txg
        );
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
                if let Err(e) = dev.write_at(&buf, at).and_then(|_| dev.flush()) {
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

/// Reads both labels of a device. Refuses a device with no valid label, or whose label
/// (or newest uberblock) has a format version this build does not know.
pub fn read_device_labels(dev: &dyn BlockDevice) -> Result<DeviceLabels, VdevError> {
    let path = dev.path().to_path_buf();
    let min = 2 * LABEL_SIZE + DATA_START;
    if dev.size() < min {
        return Err(VdevError::TooSmall {
            path,
            size: dev.size(),
            min,
        });
    }
    let mut label = None;
    let mut unknown_version = None;
    // Reported apart from a label's version, so the message names the right structure.
    let mut unknown_ub_version = None;
    let mut uberblocks = Vec::new();
    for base in [0, Leaf::label1_offset(dev.size())] {
        let mut area = vec![0u8; LABEL_SIZE as usize];
        dev.read_at(&mut area, base)
            .map_err(|source| VdevError::Io {
                path: path.clone(),
                source,
            })?;
        match Label::decode(&area[..CONFIG_AREA]) {
            LabelDecode::Ok(l) => {
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
            Err(VdevError::UnsupportedVersion {
                path,
                found,
                supported: crate::LABEL_VERSION,
            })
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
            Arc::new(MemDevice {
                bytes: Mutex::new(vec![0u8; 4 << 20]),
                path: PathBuf::from(name),
            })
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
                Leaf::new(
                    i as u64 + 1,
                    d.path.display().to_string(),
                    Some(d.clone() as Arc<dyn BlockDevice>),
                )
            })
            .collect();
        let asize = TopVdev::asize_of(4 << 20, 12);
        (
            VdevTree::new(vec![TopVdev::new(0, 9, 12, asize, leaves)], 12),
            devs,
        )
    }

    fn ub(txg: u64) -> Uberblock {
        Uberblock {
            txg,
            pool_guid: 1,
            guid_sum: 3,
            timestamp: 0,
            root: [0; 64],
        }
    }

    #[test]
    fn an_all_sides_read_counts_and_repairs_the_bad_side() {
        let (tree, devs) = mirror();
        let top = &tree.tops[0];
        top.write(0, &[7u8; 4096]).unwrap();
        devs[1].write_at(&[9u8; 16], DATA_START + 100).unwrap();
        let verify = |d: &[u8]| d.iter().all(|&b| b == 7);
        let mut span = Vec::new();
        let read = top
            .read_sides(0, 4096, &verify, &mut span, ReadMode::AllSides)
            .unwrap();
        assert_eq!((read.range, read.bad_sides), (0..4096, 1));
        assert_eq!(top.leaves[1].status().checksum_errors, 1);
        let again = top
            .read_sides(0, 4096, &verify, &mut span, ReadMode::AllSides)
            .unwrap();
        assert_eq!(
            again.bad_sides, 0,
            "the bad side was rewritten from the good one"
        );
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

//! The vdev tree: a stripe of top-level vdevs (`top.rs`, each a single disk or a mirror;
//! reads in `reads.rs`), and where labels and uberblocks go on each device.
//!
//! Owns: the list of top-level vdevs (grows when a device is added to the open pool),
//! flushing every device, labels and the uberblock ring on every device, the pool-wide
//! I/O settings (max_io, dirty percent for the queues) and the sync hold that tells
//! every device's queue a txg sync is under way.
//! Promises: labels are written label 0 everywhere before label 1, so a crash leaves one
//! whole copy per device; uberblock txgs only grow (`write_uberblock` asserts it); a
//! device's labels are refused when unknown, invalid or of a newer version, naming why.
//! Must never: write an uberblock older than or equal to the last one.
use std::sync::atomic::{AtomicU64, Ordering};

use crate::label::{slot_count, slot_size, Label, LabelDecode, Uberblock, CONFIG_AREA};
use crate::leaf::Leaf;
use crate::queue::{ClassStats, IoClass};
use crate::slots::Slots;
use crate::top::{TopVdev, DATA_START};
use crate::top_state::TopState;
use crate::{BlockDevice, VdevError, LABEL_SIZE};

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
    use super::*;
    use crate::iostat::IoSnapshot;
    use crate::reads::ReadMode;
    use crate::test_devices::{mirror, ub};

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

//! A leaf vdev: one device of the pool, with its health, its error and I/O counters, its
//! admission gate (`IoQueue`) and the txgs it missed (its DTL).
//!
//! Owns: every read, write and flush of one device — each passes the leaf's queue under
//! the caller's I/O class — the cutting of a long write into pieces of at most `max_io`,
//! and the counters `status` and `iostat` show.
//! Promises: a failed write faults the leaf (it is no longer written) and counts a write
//! error; a failed read counts a read error; counters only grow until cleared.
//! Must never: let an I/O bypass the queue, or start a thread for a write of one piece
//! (every hot-path write).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::dtl::Dtl;
use crate::iostat::{IoCounters, IoSnapshot, Traffic};
use crate::queue::{IoClass, IoPermit, IoQueue};
use crate::{BlockDevice, LABEL_SIZE};

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
    pub(crate) dev: Option<Arc<dyn BlockDevice>>,
    pub(crate) faulted: std::sync::atomic::AtomicBool,
    pub(crate) read_errors: AtomicU64,
    pub(crate) write_errors: AtomicU64,
    pub(crate) checksum_errors: AtomicU64,
    pub(crate) io: IoCounters,
    /// The txgs this side missed (it was away): a resilver brings it up to date.
    pub(crate) dtl: Dtl,
    /// The admission gate every I/O to this device passes.
    pub(crate) queue: IoQueue,
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
            queue: IoQueue::default(),
        }
    }

    /// Waits for leave to issue one I/O of `class` moving `bytes` to this device; the
    /// I/O ends when the permit is dropped. For I/O issued outside `TopVdev`'s methods.
    pub fn admit(&self, class: IoClass, bytes: u64) -> IoPermit<'_> {
        self.queue.admit(class, bytes)
    }

    /// This device's admission gate (limits, counters).
    pub fn queue(&self) -> &IoQueue {
        &self.queue
    }

    /// The device, while it is present and not faulted.
    pub fn device(&self) -> Option<&Arc<dyn BlockDevice>> {
        self.usable()
    }

    pub(crate) fn usable(&self) -> Option<&Arc<dyn BlockDevice>> {
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
    pub(crate) fn fault(&self) {
        self.write_errors.fetch_add(1, Ordering::Relaxed);
        self.faulted.store(true, Ordering::Relaxed);
    }

    /// Reads from the device as I/O of `class` (admitted by the queue first), counted in
    /// its I/O statistics.
    pub(crate) fn read_dev(
        &self,
        dev: &dyn BlockDevice,
        buf: &mut [u8],
        at: u64,
        class: IoClass,
    ) -> std::io::Result<()> {
        let _permit = self.queue.admit(class, buf.len() as u64);
        let timing = self.io.start(traffic_of(class));
        let r = dev.read_at(buf, at);
        timing.done(false, buf.len());
        r
    }

    /// Writes to the device as I/O of `class` (admitted by the queue first), counted in
    /// its I/O statistics.
    pub(crate) fn write_dev(&self, dev: &dyn BlockDevice, buf: &[u8], at: u64, class: IoClass) -> std::io::Result<()> {
        let _permit = self.queue.admit(class, buf.len() as u64);
        let timing = self.io.start(traffic_of(class));
        let r = dev.write_at(buf, at);
        timing.done(true, buf.len());
        r
    }

    /// Writes `data` at byte `at` in pieces of at most `max_io`, each admitted as
    /// `class`, one after another on the caller's thread — unless the class's limit has
    /// been raised above its minimum (async writes, as dirty data nears the throttle):
    /// then up to that limit of threads (the caller and scoped helpers) issue pieces at
    /// once, so a device that serves several I/Os at once drains the txg faster. Helpers
    /// are not started otherwise: on a busy CPU a helper that is scheduled late would
    /// hold up the write it was meant to speed up. The gate decides when each piece goes.
    pub(crate) fn write_pieces(
        &self,
        dev: &dyn BlockDevice,
        class: IoClass,
        data: &[u8],
        at: u64,
        max_io: usize,
    ) -> std::io::Result<()> {
        let pieces = data.len().div_ceil(max_io);
        if pieces <= 1 {
            return self.write_dev(dev, data, at, class);
        }
        let next = AtomicUsize::new(0);
        let stop = AtomicBool::new(false);
        let failure: Mutex<Option<std::io::Error>> = Mutex::new(None);
        let issue = || loop {
            let k = next.fetch_add(1, Ordering::Relaxed);
            if k >= pieces || stop.load(Ordering::Relaxed) {
                return;
            }
            let start = k * max_io;
            let piece = &data[start..(start + max_io).min(data.len())];
            if let Err(e) = self.write_dev(dev, piece, at + start as u64, class) {
                stop.store(true, Ordering::Relaxed);
                failure.lock().get_or_insert(e);
                return;
            }
        };
        let limit = self.queue.limit(class);
        let helpers =
            if limit > self.queue.config().limits(class).min_active { (limit as usize).min(pieces) - 1 } else { 0 };
        std::thread::scope(|s| {
            for _ in 0..helpers {
                let spawned = std::thread::Builder::new().name("vdev-write".into()).spawn_scoped(s, issue);
                if spawned.is_err() {
                    break; // fewer pieces in flight at once; the write still completes
                }
            }
            issue();
        });
        failure.into_inner().map_or(Ok(()), Err)
    }

    /// Flushes the device (demand activity, not an operation iostat counts). A flush is
    /// not admitted through the queue: it is a barrier, not a transfer (ZFS does not
    /// queue it either).
    pub(crate) fn flush_dev(&self, dev: &dyn BlockDevice) -> std::io::Result<()> {
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

    /// Zeroes both labels of this device (it left the pool) and lets other openers have
    /// it. A device that is gone has nothing to wipe.
    pub(crate) fn wipe_labels_and_release(&self) -> Result<(), crate::VdevError> {
        let Some(dev) = self.dev.as_ref() else { return Ok(()) };
        let zeros = vec![0u8; LABEL_SIZE as usize];
        let io = |source| crate::VdevError::Io { path: self.path.clone().into(), source };
        for at in [0, Self::label1_offset(dev.size())] {
            self.write_dev(&**dev, &zeros, at, IoClass::SyncWrite).map_err(io)?;
        }
        self.flush_dev(&**dev).map_err(io)?;
        dev.release();
        Ok(())
    }

    /// Offset of label 1: the last whole label-sized slice of the device.
    pub(crate) fn label1_offset(size: u64) -> u64 {
        (size / LABEL_SIZE) * LABEL_SIZE - LABEL_SIZE
    }
}

/// Scrub and resilver I/O count as scan traffic in iostat (and a scan yields to the
/// rest); every other class is demand.
pub(crate) fn traffic_of(class: IoClass) -> Traffic {
    match class {
        IoClass::Scrub => Traffic::Scan,
        _ => Traffic::Demand,
    }
}

//! Per-device I/O accounting: what `tarn pool iostat` shows (operations, bytes and
//! service time, read and write, for each leaf), and the demand activity a scrub or
//! resilver watches so it can get out of the database's way.
//!
//! Two kinds of traffic reach a device: *demand* (everything the pool does for its users:
//! reads, txg and intent-log writes, repairs found on the way, labels) and *scan* (a
//! scrub's or resilver's own reads and writes). Both count in the operation, byte and
//! time totals; scan traffic is also counted apart, and only demand traffic counts as
//! activity a scan yields to.
//!
//! Owns: `IoCounters` (atomics, kept by each leaf) and `IoSnapshot` (what is read out).
//!
//! Promises: counting costs two clock reads and a few relaxed atomic adds per device
//! operation, never a lock or an allocation (a 16 KiB page read goes through here);
//! counters only grow (`iostat` shows differences between two snapshots).
//!
//! Must never: decide anything about an I/O: it only counts.
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// Whose I/O it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Traffic {
    /// The pool's own work for its users.
    Demand,
    /// A scrub's or resilver's reads and writes.
    Scan,
}

/// Nanoseconds since the first call in this process: a monotonic clock that fits in an
/// atomic.
pub fn now_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// The counters of one leaf.
#[derive(Default)]
pub(crate) struct IoCounters {
    read_ops: AtomicU64,
    read_bytes: AtomicU64,
    read_ns: AtomicU64,
    write_ops: AtomicU64,
    write_bytes: AtomicU64,
    write_ns: AtomicU64,
    scan_ops: AtomicU64,
    scan_bytes: AtomicU64,
    scan_ns: AtomicU64,
    /// Demand operations under way on this device right now.
    demand_in_flight: AtomicU32,
    /// When the last demand operation ended (`now_ns`), 0 if none yet.
    demand_last_ns: AtomicU64,
}

/// The counters of one leaf at one moment. Every field only grows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IoSnapshot {
    pub read_ops: u64,
    pub read_bytes: u64,
    /// Total time reads took on the device (service time), nanoseconds.
    pub read_ns: u64,
    pub write_ops: u64,
    pub write_bytes: u64,
    pub write_ns: u64,
    /// Scrub and resilver operations (also counted in read or write above).
    pub scan_ops: u64,
    pub scan_bytes: u64,
    pub scan_ns: u64,
}

impl IoSnapshot {
    /// Counter by counter `self + other` (a mirror's or a pool's total).
    pub fn add(&self, o: &IoSnapshot) -> IoSnapshot {
        IoSnapshot {
            read_ops: self.read_ops + o.read_ops,
            read_bytes: self.read_bytes + o.read_bytes,
            read_ns: self.read_ns + o.read_ns,
            write_ops: self.write_ops + o.write_ops,
            write_bytes: self.write_bytes + o.write_bytes,
            write_ns: self.write_ns + o.write_ns,
            scan_ops: self.scan_ops + o.scan_ops,
            scan_bytes: self.scan_bytes + o.scan_bytes,
            scan_ns: self.scan_ns + o.scan_ns,
        }
    }

    /// Counter by counter `self - earlier` (what happened between two snapshots).
    pub fn since(&self, earlier: &IoSnapshot) -> IoSnapshot {
        IoSnapshot {
            read_ops: self.read_ops.saturating_sub(earlier.read_ops),
            read_bytes: self.read_bytes.saturating_sub(earlier.read_bytes),
            read_ns: self.read_ns.saturating_sub(earlier.read_ns),
            write_ops: self.write_ops.saturating_sub(earlier.write_ops),
            write_bytes: self.write_bytes.saturating_sub(earlier.write_bytes),
            write_ns: self.write_ns.saturating_sub(earlier.write_ns),
            scan_ops: self.scan_ops.saturating_sub(earlier.scan_ops),
            scan_bytes: self.scan_bytes.saturating_sub(earlier.scan_bytes),
            scan_ns: self.scan_ns.saturating_sub(earlier.scan_ns),
        }
    }
}

/// A device operation in progress, counted when it ends (`done`).
pub(crate) struct Timing<'a> {
    io: &'a IoCounters,
    traffic: Traffic,
    started: u64,
}

impl IoCounters {
    /// Starts timing one operation.
    pub(crate) fn start(&self, traffic: Traffic) -> Timing<'_> {
        if traffic == Traffic::Demand {
            self.demand_in_flight.fetch_add(1, Ordering::Relaxed);
        }
        Timing { io: self, traffic, started: now_ns() }
    }

    pub(crate) fn snapshot(&self) -> IoSnapshot {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        IoSnapshot {
            read_ops: get(&self.read_ops),
            read_bytes: get(&self.read_bytes),
            read_ns: get(&self.read_ns),
            write_ops: get(&self.write_ops),
            write_bytes: get(&self.write_bytes),
            write_ns: get(&self.write_ns),
            scan_ops: get(&self.scan_ops),
            scan_bytes: get(&self.scan_bytes),
            scan_ns: get(&self.scan_ns),
        }
    }

    /// Demand operations under way, and when the last one ended (`now_ns`; 0: never).
    pub(crate) fn demand(&self) -> (u32, u64) {
        (self.demand_in_flight.load(Ordering::Relaxed), self.demand_last_ns.load(Ordering::Relaxed))
    }
}

impl Timing<'_> {
    /// Ends a cache flush: not an operation `iostat` counts, but demand activity a scan
    /// waits behind (an fsync waits for it).
    pub(crate) fn flushed(self) {
        if self.traffic == Traffic::Demand {
            self.io.demand_last_ns.store(now_ns(), Ordering::Relaxed);
            self.io.demand_in_flight.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Counts the operation as a read (`write` false) or a write of `bytes`.
    pub(crate) fn done(self, write: bool, bytes: usize) {
        let end = now_ns();
        let took = end.saturating_sub(self.started);
        let io = self.io;
        let (ops, total, time) = if write {
            (&io.write_ops, &io.write_bytes, &io.write_ns)
        } else {
            (&io.read_ops, &io.read_bytes, &io.read_ns)
        };
        ops.fetch_add(1, Ordering::Relaxed);
        total.fetch_add(bytes as u64, Ordering::Relaxed);
        time.fetch_add(took, Ordering::Relaxed);
        match self.traffic {
            Traffic::Scan => {
                io.scan_ops.fetch_add(1, Ordering::Relaxed);
                io.scan_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
                io.scan_ns.fetch_add(took, Ordering::Relaxed);
            }
            Traffic::Demand => {
                io.demand_last_ns.store(end, Ordering::Relaxed);
                io.demand_in_flight.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

//! The per-class counters of a leaf's queue (issued, bytes, waited, time waiting, time
//! in the device) and the summable `ClassStats` that `tarn stats io` shows.
//!
//! Owns: the counters, relaxed atomics bumped on the I/O path.
//!
//! Promises: a snapshot never blocks an I/O (no lock).
//!
//! Must never: take part in admission.

use std::sync::atomic::{AtomicU64, Ordering};

/// What one class did on one leaf (or summed over leaves).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ClassStats {
    /// I/Os admitted.
    pub issued: u64,
    /// Bytes those I/Os moved.
    pub bytes: u64,
    /// I/Os that had to wait for admission.
    pub waited: u64,
    /// Time spent waiting for admission, all I/Os together.
    pub wait_us: u64,
    /// Time from admission to completion (in the device), all I/Os together.
    pub device_us: u64,
}

impl ClassStats {
    pub fn add(&mut self, other: &ClassStats) {
        self.issued += other.issued;
        self.bytes += other.bytes;
        self.waited += other.waited;
        self.wait_us += other.wait_us;
        self.device_us += other.device_us;
    }

    /// Mean wait for admission over every I/O issued.
    pub fn avg_wait_us(&self) -> u64 {
        self.wait_us.checked_div(self.issued).unwrap_or(0)
    }

    /// Mean time in the device over every I/O issued.
    pub fn avg_device_us(&self) -> u64 {
        self.device_us.checked_div(self.issued).unwrap_or(0)
    }
}

#[derive(Default)]
pub(super) struct ClassCounters {
    pub(super) issued: AtomicU64,
    pub(super) bytes: AtomicU64,
    pub(super) waited: AtomicU64,
    pub(super) wait_ns: AtomicU64,
    pub(super) device_ns: AtomicU64,
}

impl ClassCounters {
    /// The counters now, in microseconds.
    pub(super) fn snapshot(&self) -> ClassStats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ClassStats {
            issued: get(&self.issued),
            bytes: get(&self.bytes),
            waited: get(&self.waited),
            wait_us: get(&self.wait_ns) / 1000,
            device_us: get(&self.device_ns) / 1000,
        }
    }
}

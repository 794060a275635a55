//! Serving a block from a cache device.
//!
//! Owns: the device read of one block and the read faults it counts.
//!
//! Promises: bytes are returned only from a span the ring still holds, checked before
//! and after the device read (a chunk written over them meanwhile makes it a miss); the
//! caller verifies them against the block pointer.
//!
//! Must never: block on a writer's device I/O, take a lock beyond the index's shard, or
//! read a device that is leaving.
use std::sync::atomic::Ordering;

use tarn_arc::BlockKey;

use super::CacheDev;
use crate::layout::BLOCK_ALIGN;

/// Read errors after which a device is dropped (a few may be transient; many mean it is
/// going).
const READ_ERRORS_TO_FAULT: u64 = 16;

/// What a device read found.
pub enum DevRead {
    /// The block's stored bytes are `scratch[range]`.
    Hit(std::ops::Range<usize>),
    Miss,
    IoError,
}

impl CacheDev {
    /// Reads `key`'s stored bytes (`psize` of them) into `scratch`, if this device holds
    /// them. The caller verifies them against the block pointer.
    pub fn read(&self, key: &BlockKey, psize: u32, scratch: &mut Vec<u8>) -> DevRead {
        let (Some(dev), Some(g)) = (&self.dev, &self.geometry) else { return DevRead::Miss };
        if self.in_flight.leaving.load(Ordering::Relaxed) {
            return DevRead::Miss; // removed: not even its (empty) index is locked
        }
        let Some(pos) = self.index.get(key) else { return DevRead::Miss };
        let Some(_io) = self.begin_io() else { return DevRead::Miss };
        let abs = pos * BLOCK_ALIGN;
        if abs < self.floor() || !self.usable() {
            self.index.remove(key); // overwritten: its chunk left the ring's sums already
            return DevRead::Miss;
        }
        let at = g.start + abs % g.size();
        let align = dev.read_align().max(1);
        let start = at / align * align;
        let end = (at + psize as u64).div_ceil(align) * align;
        if end > g.end {
            return DevRead::Miss;
        }
        scratch.resize((end - start) as usize, 0);
        if dev.read_at(scratch, start).is_err() {
            let errors = self.counters.io_errors.fetch_add(1, Ordering::Relaxed) + 1;
            if errors >= READ_ERRORS_TO_FAULT {
                self.fault(format!("dropped after {errors} read errors"));
            }
            return DevRead::IoError;
        }
        if abs < self.floor() {
            return DevRead::Miss; // overwritten while we read it
        }
        self.counters.read_bytes.fetch_add(psize as u64, Ordering::Relaxed);
        let from = (at - start) as usize;
        DevRead::Hit(from..from + psize as usize)
    }
}

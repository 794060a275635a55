//! Serving a block from a cache device.
//!
//! Owns: the device read of one block and the faults it counts: I/O errors, and bytes
//! that do not match the block pointer (checksum errors).
//!
//! Promises: bytes are returned only from a span the ring still holds, checked before
//! and after the device read (a chunk written over them meanwhile makes it a miss); the
//! caller verifies them against the block pointer.
//!
//! Must never: block on a writer's device I/O, take a lock beyond the index's shard, or
//! read a device that is leaving.
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tarn_arc::BlockKey;

use super::CacheDev;
use crate::layout::BLOCK_ALIGN;

/// Read errors after which a device is dropped (a few may be transient; many mean it is
/// going).
const READ_ERRORS_TO_FAULT: u64 = 16;
/// Checksum errors within `CKSUM_WINDOW` after which a device is dropped: ZFS's fault
/// diagnosis (ZED) FAULTs a vdev at 10 checksum errors in 600 s (`checksum_N`,
/// `checksum_T`). A healthy device never returns wrong bytes (its ECC turns media errors
/// into I/O errors), so this many means the device or its path corrupts data: every
/// further hit would cost a device read and then the pool read anyway. A few spread over
/// hours (a cosmic ray) only cost their entries. Only blocks written since the device
/// joined (this session) count: a power cut may leave a chunk whose log block reached the
/// device and whose blocks did not, and the rebuild restores its entries — wrong bytes
/// that say nothing of the device.
pub(crate) const CKSUM_ERRORS_TO_FAULT: usize = 10;
pub(crate) const CKSUM_WINDOW: Duration = Duration::from_secs(600);

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

    /// Bytes this device returned for `key` did not match the block pointer: forgets the
    /// entry and counts the error; drops the device once `CKSUM_ERRORS_TO_FAULT` of them,
    /// on blocks written this session, fall within `CKSUM_WINDOW`. True if this error
    /// dropped it.
    pub fn note_bad_bytes(&self, key: &BlockKey, psize: u32, lsize: u32) -> bool {
        let at = self.forget_at(key, psize, lsize);
        let total = self.counters.cksum_errors.fetch_add(1, Ordering::Relaxed) + 1;
        let this_session = at.is_some_and(|abs| abs >= self.session_start.load(Ordering::Acquire));
        if !this_session {
            return false; // restored by a rebuild (or already forgotten): no evidence
        }
        let now = Instant::now();
        let recent = {
            let mut recent = self.cksum_recent.lock();
            while recent.front().is_some_and(|t| now.duration_since(*t) > CKSUM_WINDOW) {
                recent.pop_front();
            }
            recent.push_back(now);
            if recent.len() > CKSUM_ERRORS_TO_FAULT {
                recent.pop_front();
            }
            recent.len()
        };
        if recent < CKSUM_ERRORS_TO_FAULT || !self.usable() {
            return false;
        }
        self.fault(format!(
            "dropped after {recent} checksum errors in {} s ({total} in all): it returns wrong bytes",
            CKSUM_WINDOW.as_secs()
        ));
        true
    }
}

//! The log policy: where the bytes of a logged write go — copied into the log
//! (`logbias=latency`: one small log write, the data written again by the txg) or written
//! in place and logged as a pointer (ZFS's WR_INDIRECT: the data written once, the txg
//! adopts the block).
//!
//! Owns: the one decision, from everything it depends on — the dataset's `logbias`, the
//! write's size, whether the pool has a separate log device, and how much file data one
//! commit would copy (the bulk rule).
//!
//! Promises: the same inputs always give the same answer; nothing else in the engine
//! decides this (the dataset passes its `logbias` and the write's size, the log asks the
//! devices).
//!
//! Must never: look at data, take a lock, or do I/O — it is a pure function, tested by a
//! table of cases below.

/// The dataset's `logbias` property.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogBias {
    /// Make fsync fast: small writes are copied into the log.
    #[default]
    Latency,
    /// Write data once: every write goes in place, the log carries pointers.
    Throughput,
}

/// Where one queued write's bytes reach the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// The bytes are copied into a log block.
    Copy,
    /// The touched record is written in place and the log carries a pointer to it.
    InPlace,
}

/// Without a log device, writes at least this large go in place rather than being copied
/// into a log on the data disks (ZFS's zfs_immediate_write_sz): copying them would write
/// the data twice to the same disk.
pub const IMMEDIATE_WRITE_BYTES: usize = 32 << 10;

/// Without a log device, a commit that would copy more than this much file data into the
/// log writes it in place instead: written once rather than twice. A database's data-file
/// fsync after a page flush is the case; a redo-log fsync never is.
pub const BULK_IN_PLACE: u64 = 256 << 10;

/// The decision when a write is queued: `logbias=throughput` always goes in place; with
/// `latency`, a large write goes in place only when the log shares the data disks (with a
/// log device, copying is the cheap path: the log device takes it, the data disks wait for
/// the txg).
pub fn at_write(logbias: LogBias, len: u64, log_device: bool) -> Placement {
    let large = len >= IMMEDIATE_WRITE_BYTES as u64;
    if logbias == LogBias::Throughput || (large && !log_device) {
        Placement::InPlace
    } else {
        Placement::Copy
    }
}

/// Whether a commit that would copy `copied_by_commit` bytes of file data is a bulk
/// commit, whose writes all go in place (`at_commit`).
pub fn bulk(copied_by_commit: u64, log_device: bool) -> bool {
    copied_by_commit > BULK_IN_PLACE && !log_device
}

/// The decision when a commit resolves a queued write: what `at_write` chose, unless the
/// commit as a whole would copy more than `BULK_IN_PLACE` bytes of file data into a log on
/// the data disks (`copied_by_commit`: the bytes of its writes placed `Copy`).
pub fn at_commit(queued: Placement, copied_by_commit: u64, log_device: bool) -> Placement {
    if bulk(copied_by_commit, log_device) {
        Placement::InPlace
    } else {
        queued
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use LogBias::{Latency, Throughput};
    use Placement::{Copy, InPlace};

    const K: u64 = 1024;

    /// One row per case: logbias, write size, log device, bytes the commit copies, and
    /// where the write's data goes.
    #[test]
    fn the_policy_table() {
        let table: &[(LogBias, u64, bool, u64, Placement, &str)] = &[
            (Latency, 700, false, 700, Copy, "a redo-log append is copied"),
            (Latency, 700, true, 700, Copy, "… with a log device too"),
            (Latency, 32 * K - 1, false, 32 * K - 1, Copy, "just under the immediate-write size"),
            (Latency, 32 * K, false, 0, InPlace, "a large write without a log device goes in place"),
            (Latency, 1024 * K, true, 1024 * K, Copy, "a log device takes large writes (bulk rule off too)"),
            (Throughput, 700, false, 0, InPlace, "throughput: always in place"),
            (Throughput, 700, true, 0, InPlace, "throughput: in place even with a log device"),
            (Latency, 16 * K, false, 256 * K, Copy, "exactly the bulk limit is still copied"),
            (Latency, 16 * K, false, 256 * K + 1, InPlace, "a bulk commit without a log device goes in place"),
            (Latency, 16 * K, true, 4096 * K, Copy, "no bulk rule with a log device"),
        ];
        for &(bias, len, log_device, copied, want, why) in table {
            let queued = at_write(bias, len, log_device);
            assert_eq!(at_commit(queued, copied, log_device), want, "{why}");
        }
    }

    #[test]
    fn the_default_logbias_is_latency() {
        assert_eq!(LogBias::default(), Latency);
    }
}

//! The log policy: where the bytes of a logged write go — copied into the log
//! (`logbias=latency`: one small log write, the data written again by the txg) or written
//! in place and logged as a pointer (ZFS's WR_INDIRECT: the data written once, the txg
//! adopts the block).
//!
//! Owns: the one decision, from everything it depends on — the dataset's `logbias`, the
//! write's size, whether the pool has a separate log device, and how much file data one
//! commit would copy (the bulk rule) and how much of it is whole records (the page-batch
//! rule).
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

/// What one commit would copy into the log as queued: all file data placed `Copy`, and
/// the part of it that covers whole records (a database page written in one call, on a
/// dataset whose `recordsize` is the page size).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommitCopies {
    pub all: u64,
    pub whole_records: u64,
}

/// The decision when a commit resolves a queued write: what `at_write` chose, unless, on a
/// log that shares the data disks,
/// - the commit as a whole would copy more than `BULK_IN_PLACE` bytes (every write goes
///   in place), or
/// - the write covers a whole record and the commit would copy at least
///   `IMMEDIATE_WRITE_BYTES` of whole records (the page-batch rule).
///
/// Why the page-batch rule: a page flush of a few pages fsynced together (InnoDB's page
/// cleaner, a PostgreSQL checkpoint of a small file) copied into the log is written twice
/// to the same disk — raw into the log now, compressed by the txg later. In place it is
/// written once, compressed, and the log takes a pointer: one more device write for the
/// log block, fewer bytes from two records on. Measured in the lab's TPC-C-like run at
/// equal memory (issue #17): 55 MB of the 75 MB of file data copied into the log in
/// 120 s were data-file pages in commits of 2 to 40 of them. A redo-log or WAL append
/// (partial records) is still copied: one log write is its fastest fsync. ZFS applies the
/// same size (`zfs_immediate_write_sz`) to each write call alone, which a database's
/// page-sized writes never reach.
pub fn at_commit(queued: Placement, whole_record: bool, copies: CommitCopies, log_device: bool) -> Placement {
    if log_device || queued == Placement::InPlace {
        return queued;
    }
    let page_batch = whole_record && copies.whole_records >= IMMEDIATE_WRITE_BYTES as u64;
    if bulk(copies.all, log_device) || page_batch {
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

    /// One row per case: logbias, write size, whether it covers a whole record, log
    /// device, bytes the commit copies (all, whole records), and where the write's data
    /// goes.
    #[test]
    fn the_policy_table() {
        type Row = (LogBias, u64, bool, bool, (u64, u64), Placement, &'static str);
        let table: &[Row] = &[
            (Latency, 700, false, false, (700, 0), Copy, "a redo-log append is copied"),
            (Latency, 700, false, true, (700, 0), Copy, "… with a log device too"),
            (Latency, 32 * K - 1, false, false, (32 * K - 1, 0), Copy, "just under the immediate-write size"),
            (Latency, 32 * K, false, false, (0, 0), InPlace, "a large write without a log device goes in place"),
            (
                Latency,
                1024 * K,
                false,
                true,
                (1024 * K, 0),
                Copy,
                "a log device takes large writes (bulk rule off too)",
            ),
            (Throughput, 700, false, false, (0, 0), InPlace, "throughput: always in place"),
            (Throughput, 700, false, true, (0, 0), InPlace, "throughput: in place even with a log device"),
            (Latency, 16 * K, false, false, (256 * K, 0), Copy, "exactly the bulk limit is still copied"),
            (
                Latency,
                16 * K,
                false,
                false,
                (256 * K + 1, 0),
                InPlace,
                "a bulk commit without a log device goes in place",
            ),
            (Latency, 16 * K, false, true, (4096 * K, 0), Copy, "no bulk rule with a log device"),
            (Latency, 16 * K, true, false, (16 * K, 16 * K), Copy, "one whole page fsynced alone is copied"),
            (Latency, 16 * K, true, false, (40 * K, 32 * K), InPlace, "two whole pages in one commit go in place"),
            (Latency, 8 * K, true, false, (40 * K, 32 * K), InPlace, "… four 8 KiB pages too"),
            (Latency, 8 * K, true, false, (32 * K, 24 * K), Copy, "three 8 KiB pages are copied"),
            (Latency, 8 * K, false, false, (40 * K, 32 * K), Copy, "a partial write beside a page batch is copied"),
            (Latency, 16 * K, true, true, (64 * K, 64 * K), Copy, "a log device takes a page batch"),
        ];
        for &(bias, len, whole, log_device, (all, whole_records), want, why) in table {
            let queued = at_write(bias, len, log_device);
            let copies = CommitCopies { all, whole_records };
            assert_eq!(at_commit(queued, whole, copies, log_device), want, "{why}");
        }
    }

    #[test]
    fn the_default_logbias_is_latency() {
        assert_eq!(LogBias::default(), Latency);
    }
}

//! zil — the intent log: what makes fsync cost one small log write instead of a txg.
//!
//! Owns: the in-memory queue of changes not yet committed by a txg (itxs), the log
//! policy (copy into the log, or write in place), the chain of log blocks on disk (each
//! names the pre-allocated place of the next), group commit, and reading the chain back
//! for replay at import.
//!
//! Promises: when `commit_for` returns, every change its fsync needs is durable (its log
//! block is written and the devices flushed); concurrent commits share log writes; the
//! head of the chain is recorded in every txg's root, and replay applies exactly the
//! records newer than the committed txg, in order, stopping at the first block that does
//! not verify (a torn or never-written block ends the chain, it never corrupts it); the
//! roots committed during replay keep the replayed chain and count the records they
//! hold, so a crash during replay resumes after them (`progress`).
//!
//! Must never: drop a queued change before the txg that contains it is committed, or
//! free a log block the committed root still points into.
//!
//! # Theory of operation
//!
//! **Queue.** Every change the dataset makes is queued under its txg hold (`log`,
//! `log_write`), so each list of the queue is in txg order. A namespace change (create,
//! remove, rename, link) goes to the namespace list, every other change to its object's
//! list. A write is queued as a note — object, range, and where its bytes will go as the
//! log policy decides from `logbias`, its size and the log device — never as a copy:
//! data no fsync asks for is never copied (`queue.rs`, `policy.rs`).
//!
//! **Tickets.** An fsync takes, under the queue lock, its object's changes and every
//! namespace change queued so far, and opens a ticket. Tickets order the appends: a
//! commit appends only after every earlier commit that took namespace changes or the same
//! object has appended (`tickets.rs`), so replay sees changes in the order they depend
//! on, and a redo-log fsync never waits behind a data file's bulk commit.
//!
//! **Resolve.** Without any lock of the log, each taken write is resolved through the
//! `WriteSource` (the dataset, which asks objects — ZFS's dmu_sync): its bytes copied as
//! of its txg, or its record written in place and a pointer logged (the txg later adopts
//! that block), or nothing if its txg has committed meanwhile. A commit that would copy
//! more than `BULK_IN_PLACE` bytes into a log on the data disks writes them in place
//! instead (`commit.rs`).
//!
//! **Append.** Under the chain lock the records are packed into log blocks, each written
//! where the previous block said the next would be, with the next place pre-allocated
//! (`chain.rs`, `block.rs`). A commit resolves and appends in batches of at most about
//! `COMMIT_BATCH_BYTES` of copied data, so no fsync holds more than that in memory.
//!
//! **Flush.** One flush of every vdev written since the last flush — the log blocks and
//! the blocks written in place together — and the fsync returns. A failed commit marks
//! the chain: every later commit fails (its caller then commits a txg) until the txg
//! holding the lost records commits.
//!
//! **Retire.** Each txg's root records the chain's head: the first block with a record
//! newer than that txg (`head_for_txg`); blocks before it become obsolete and are freed
//! with that txg. When the txg commits, its queued changes are dropped (`txg_committed`).
//!
//! **Replay progress** (`progress.rs`). While import replays, every root names the
//! replayed chain and records how many records its txg holds: a replayed change reaches
//! `log`/`log_write` under its own txg hold, which note that txg as its record's instead
//! of queueing it. The first txg at or after the one `finish_replay` names switches the
//! root to this chain and frees the replayed one.
//!
//! **Replay** (`replay.rs`) relies on: blocks verify by checksum, pool guid and
//! sequence number, so a torn or stale block ends the chain; a block written in place is
//! flushed with the log block that points at it, so a pointer that does not verify means
//! its fsync never returned; records appear in an order that respects their
//! dependencies (tickets); and a record's txg says whether the committed root holds it.

mod block;
mod chain;
mod commit;
pub mod policy;
mod progress;
mod queue;
mod record;
mod replay;
mod tickets;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tarn_zio::{Extent, Zio, ZioError};

pub use block::{BlockError, BLOCK_HEADER};
pub use commit::{SourceError, WantedData, WriteData, WriteSource, COMMIT_BATCH_BYTES};
pub use policy::{LogBias, Placement, BULK_IN_PLACE};
pub use progress::{LogRoot, ReplayProgress, ReplaySource};
pub use record::{Op, Record, RecordError, RECORD_HEADER};
pub use replay::{read_chain, ChainEnd, Chained};

use chain::Chain;
use progress::Replaying;
use queue::{Queue, Queued};
use tickets::Tickets;

/// Version 2 added indirect-write records (type 9); version-1 blocks are still read.
pub const ZIL_VERSION: u32 = 2;
const OLDEST_READABLE: u32 = 1;
/// Largest log block; a commit with more to say chains several.
pub const MAX_BLOCK: u64 = 128 << 10;
/// Largest data carried by one write record; bigger writes are split.
pub const MAX_WRITE_RECORD: usize = 64 << 10;

/// Where the chain starts: kept in the pool root (MOS) of every txg.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogHead {
    pub extent: Extent,
    pub seq: u64,
}

/// A write to queue (`Zil::log_write`): bytes [offset, offset + len) of object `obj` of
/// `dataset`, made in txg `txg`, in records of `blksz` bytes, under the dataset's
/// `logbias`.
#[derive(Clone, Copy, Debug)]
pub struct LoggedWrite {
    pub txg: u64,
    pub dataset: u64,
    pub obj: u64,
    pub offset: u64,
    pub len: u64,
    pub blksz: u64,
    pub logbias: LogBias,
}

#[derive(Default)]
pub struct ZilStats {
    pub commits: AtomicU64,
    pub blocks_written: AtomicU64,
    pub bytes_written: AtomicU64,
    pub records_written: AtomicU64,
    /// Writes logged as a pointer to a block written in place (their data not copied).
    pub indirect_records: AtomicU64,
    /// File data copied into the log (written again by its txg).
    pub copied_bytes: AtomicU64,
    /// Microseconds fsyncs spent in `commit_for`, all together, and the longest one.
    pub commit_us: AtomicU64,
    pub max_commit_us: AtomicU64,
    /// Fsyncs whose log commit failed and that committed a txg instead (counted by the
    /// caller, which does the fallback).
    pub fallback_syncs: AtomicU64,
    /// Bulk commits that waited for their writes' syncing txg to commit instead of
    /// copying them into the log (counted by the source, as it starts to wait).
    pub settle_waits: AtomicU64,
}

#[derive(Debug, thiserror::Error)]
pub enum ZilError {
    #[error(transparent)]
    Zio(#[from] ZioError),
    #[error(
        "intent log block {seq} has version {version} (this tarn reads {OLDEST_READABLE} to {ZIL_VERSION}); import the pool with the tarn that wrote it"
    )]
    UnsupportedVersion { seq: u64, version: u32 },
    #[error("an earlier intent-log commit failed; changes up to txg {0} need a txg commit")]
    Unsettled(u64),
    #[error("fetching the data of a logged write: {0}")]
    Source(#[source] SourceError),
}

pub struct Zil {
    zio: Arc<Zio>,
    pool_guid: u64,
    queue: Mutex<Queue>,
    /// One committer appends log blocks at a time; others wait and often find their
    /// records already written (group commit).
    chain: Mutex<Chain>,
    tickets: Tickets,
    /// Set while import replays a chain: changes are noted as the record's, not logged.
    replaying: AtomicBool,
    /// The replay under way, until the txg that retires its chain (`progress`).
    replay: Mutex<Option<Replaying>>,
    pub stats: ZilStats,
}

impl Zil {
    /// A fresh, empty chain (pool create, or after replay at import). `first_seq` must be
    /// above every sequence number an older chain used.
    pub fn new(zio: Arc<Zio>, pool_guid: u64, first_seq: u64) -> Zil {
        Zil {
            zio,
            pool_guid,
            queue: Mutex::new(Queue::new()),
            chain: Mutex::new(Chain::new(first_seq)),
            tickets: Tickets::default(),
            replaying: AtomicBool::new(false),
            replay: Mutex::new(None),
            stats: ZilStats::default(),
        }
    }

    /// While replaying, changes are not logged again (`begin_replay`, `finish_replay`).
    fn set_replaying(&self, on: bool) {
        self.replaying.store(on, Ordering::SeqCst);
    }

    /// Whether import is replaying: every change must still reach `log`/`log_write`
    /// (whatever the dataset's `sync`), which note the txg it joined as the record's.
    pub fn is_replaying(&self) -> bool {
        self.replaying.load(Ordering::Relaxed)
    }

    /// Queues a change made in txg `txg` (called under the change's txg hold, so the
    /// queue is in txg order). While replaying, notes instead that the record being
    /// replayed has a change in `txg`.
    pub fn log(&self, txg: u64, dataset: u64, op: Op) {
        if self.is_replaying() {
            self.note_replayed(txg, dataset, Some(&op));
            return;
        }
        self.enqueue(Queued::Ready(Record { txg, dataset, op }));
    }

    fn enqueue(&self, item: Queued) {
        self.queue.lock().push(item);
    }

    /// Queues a write; its data is fetched from the object at commit. Placed `InPlace` by
    /// the log policy, the commit writes each touched record in place and logs a pointer:
    /// one entry per record, so each resolves to one block. Otherwise the bytes are
    /// copied into the log at commit, in entries of at most `MAX_WRITE_RECORD` bytes.
    pub fn log_write(&self, w: &LoggedWrite) {
        if self.is_replaying() {
            self.note_replayed(w.txg, w.dataset, None);
            return;
        }
        let LoggedWrite { txg, dataset, obj, offset, len, blksz, logbias } = *w;
        assert!(blksz > 0, "record size of object {obj} is zero");
        let placement = policy::at_write(logbias, len, self.zio.has_log_device());
        let end = offset + len;
        let mut at = offset;
        while at < end {
            let mut piece = (blksz - at % blksz).min(end - at);
            if placement == Placement::Copy {
                piece = piece.min(MAX_WRITE_RECORD as u64);
            }
            let whole = piece == blksz;
            self.enqueue(Queued::Write { txg, dataset, obj, offset: at, len: piece, whole, placement });
            at += piece;
        }
    }

    /// Txg `txg` is committed: its queued changes no longer need the log.
    pub fn txg_committed(&self, txg: u64) {
        self.chain.lock().txg_committed(txg);
        self.queue.lock().drop_committed(txg);
    }

    /// The highest sequence number this chain has used or reserved.
    pub fn next_seq(&self) -> u64 {
        self.chain.lock().next_seq()
    }
}

//! Scrub and resilver — the scan, after ZFS's dsl_scan: a background walk of every block
//! of the pool that verifies each copy and repairs mirror sides (scrub), or copies to a
//! mirror side the blocks born while it was away (resilver).
//!
//! Theory of operation. A scan runs on a thread of its own in the process that holds
//! the pool; `scrub_start` returns at once. The thread walks the tree in slices
//! (`scanwalk`): each slice is one reclaim section (no block it reaches can be
//! freed and reused under it) for about `SLICE`, then records a bookmark — a position in
//! the walk order (dataset id, object, record) before which everything was examined —
//! and lets go, so the txg commit is never held up for long. The next slice walks the
//! tree as it is then, from the bookmark. A scrub reads only blocks born up to the txg
//! it started at (newer ones were written since, and checked on their way in); a
//! resilver passes over every subtree born before the first txg a side missed. The
//! scan's record (kind, state, progress, bookmark) is kept in the MOS, so the line
//! `pool status` shows outlives an export, and a scan cut short by a close resumes:
//! a resilver at the next import, a scrub when `scrub_start` (or `resume_scan`) is
//! called. When a scan ends, a commit persists what it found.
//!
//! Pacing (`ScanPace`). A background scan yields to the pool's own I/O: before each
//! read it waits while a demand I/O (a read, a txg or intent-log write, a flush) is in
//! flight on the devices it would read, at most `DEMAND_WAIT`; after recent demand I/O
//! (within `SCAN_IDLE`) it waits `SCAN_DELAY` per I/O (ZFS's old scan_idle and
//! scrub_delay); and it never goes past `bytes_per_sec`. A foreground scrub (a command
//! on a pool no one else uses) runs at full speed.
//!
//! Owns: the scan record and its states, the scan thread, the error log's rotation at
//! the start and end of a scrub, clearing a side's missed txgs after its resilver.
//!
//! Promises: one scan at a time; a scrub is refused while a resilver runs (the resilver
//! comes first); a close stops the scan at a bookmark and the final commit keeps it;
//! `scrub` (foreground) checks everything committed before it was called.
//!
//! Must never: change a block's contents other than rewriting a copy from a verified
//! one, read outside a reclaim section, or keep one open for more than a slice.
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::error::PoolError;
use crate::pool::{now_secs, Inner, Pool};
use crate::scanwalk::{scan_slice, Pacer, SliceEnd};

/// What a scan does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScanKind {
    /// Verify every copy of every block, repairing mirror sides.
    Scrub,
    /// Copy to the mirror sides that missed txgs the blocks born in them.
    Resilver,
}

impl std::fmt::Display for ScanKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ScanKind::Scrub => "scrub",
            ScanKind::Resilver => "resilver",
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScanState {
    /// Under way, or cut short by a close (then `ScanStatus::running` is false).
    Scanning,
    Finished,
    Canceled,
}

/// A position in the scan's walk order: every block before it was examined. Datasets
/// go by id (the pool's root block comes before them all), within a dataset its head
/// and then its snapshots by txg; in a tree, its dead list's chunks first (`object` 0,
/// `blkid` the chunks done), then objects by number, and an object's blocks by the
/// first record under them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Bookmark {
    pub dataset: u64,
    /// The tree of the dataset: 0 for its head, else the txg of its snapshot (MOS
    /// version 4; absent in older roots, which had only heads).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub snapshot: u64,
    pub object: u64,
    pub blkid: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// The last scan, or the one under way (kept in the MOS).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ScanRecord {
    pub kind: ScanKind,
    pub state: ScanState,
    /// Unix seconds.
    pub started: u64,
    /// Unix seconds; 0 while scanning.
    pub ended: u64,
    /// Seconds spent scanning (not counting time the pool was closed).
    pub active_secs: f64,
    /// Allocated bytes when the scan started: what `examined` is measured against.
    pub to_examine: u64,
    /// Physical bytes of the blocks walked so far.
    pub examined: u64,
    pub blocks: u64,
    /// Bytes written: bad copies rewritten (scrub), copies made (resilver).
    pub repaired: u64,
    /// Copies that did not verify and were rewritten from a good one.
    pub bad_copies: u64,
    /// Blocks no copy of which verified (they are in the error log).
    pub errors: u64,
    /// Scrub: the newest txg read (blocks born later were written since it started).
    /// Resilver: the last txg a side missed.
    pub max_txg: u64,
    /// Resilver: the first txg a side missed (0 for a scrub).
    pub min_txg: u64,
    /// Where a scan cut short resumes; `None` before the first slice and once it ended.
    pub bookmark: Option<Bookmark>,
}

impl ScanRecord {
    fn new(kind: ScanKind, to_examine: u64, min_txg: u64, max_txg: u64) -> ScanRecord {
        ScanRecord {
            kind,
            state: ScanState::Scanning,
            started: now_secs(),
            ended: 0,
            active_secs: 0.0,
            to_examine,
            examined: 0,
            blocks: 0,
            repaired: 0,
            bad_copies: 0,
            errors: 0,
            max_txg,
            min_txg,
            bookmark: None,
        }
    }

    /// True if a resilver copies blocks born in txg `birth`.
    pub(crate) fn in_missed_range(&self, birth: u64) -> bool {
        (self.min_txg..=self.max_txg).contains(&birth)
    }
}

/// What `status` shows of the scan.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ScanStatus {
    #[serde(flatten)]
    pub record: ScanRecord,
    /// A thread is scanning now (false for a scan cut short by a close, or ended).
    pub running: bool,
}

/// How a scan shares the devices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanPace {
    /// Wait behind demand I/O and space scan I/Os out after it (see the module header).
    pub yield_to_demand: bool,
    /// Bytes per second at most; 0: no limit.
    pub bytes_per_sec: u64,
}

/// The background scan rate when `TARN_SCAN_RATE` does not say: 64 MiB/s.
pub const DEFAULT_SCAN_RATE: u64 = 64 << 20;

impl ScanPace {
    /// A command on a pool no one else uses: as fast as the devices go.
    pub const FULL_SPEED: ScanPace = ScanPace { yield_to_demand: false, bytes_per_sec: 0 };

    /// Beside a database: yields to demand I/O, at most `TARN_SCAN_RATE` bytes per
    /// second (a size such as `32M`; default `DEFAULT_SCAN_RATE`, 0 for no limit).
    pub fn background() -> ScanPace {
        let rate = std::env::var("TARN_SCAN_RATE")
            .ok()
            .and_then(|v| tarn_dataset::props::parse_size(&v))
            .unwrap_or(DEFAULT_SCAN_RATE);
        ScanPace { yield_to_demand: true, bytes_per_sec: rate }
    }
}

/// What a foreground scrub found (`Pool::scrub`).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct ScrubResult {
    pub blocks: u64,
    pub bytes: u64,
    /// Blocks no copy of which verified.
    pub errors: u64,
    /// Bad copies found (mirror sides that did not verify), each rewritten from a good
    /// copy where the block had one.
    pub checksum_errors_seen: u64,
    pub seconds: f64,
}

/// What the scan thread is asked to do.
const RUN: u8 = 0;
/// Stop at a bookmark (the pool is closing); the scan stays in progress.
const PAUSE: u8 = 1;
/// Stop for good (`scrub -s`).
const CANCEL: u8 = 2;

#[derive(Default)]
struct ScanShared {
    record: Option<ScanRecord>,
    running: bool,
}

/// The scan's state, shared by the handle and the scan thread.
#[derive(Default)]
pub(crate) struct ScanCtl {
    shared: Mutex<ScanShared>,
    changed: Condvar,
    request: AtomicU8,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl ScanCtl {
    /// The record to persist in the MOS.
    pub(crate) fn record(&self) -> Option<ScanRecord> {
        self.shared.lock().record.clone()
    }

    pub(crate) fn restore(&self, record: Option<ScanRecord>) {
        self.shared.lock().record = record;
    }

    /// True if the scan thread was asked to stop (checked between blocks).
    pub(crate) fn stop_requested(&self) -> bool {
        self.request.load(Ordering::Relaxed) != RUN
    }
}

impl Inner {
    /// Starts the scan thread on `record` (the caller checked that none runs).
    fn spawn_scan(self: &Arc<Self>, record: ScanRecord, pace: ScanPace) {
        let mut shared = self.scan.shared.lock();
        shared.record = Some(record);
        shared.running = true;
        drop(shared);
        self.scan.request.store(RUN, Ordering::Relaxed);
        let inner = self.clone();
        let handle = std::thread::Builder::new()
            .name(format!("tarn-scan-{}", self.name))
            .spawn(move || inner.scan_thread(pace))
            .expect("the scan thread starts");
        // A previous scan's thread has ended (running was false): reap it.
        if let Some(old) = self.scan.thread.lock().replace(handle) {
            let _ = old.join();
        }
    }

    fn scan_thread(self: Arc<Self>, pace: ScanPace) {
        let mut pacer = Pacer::new(pace);
        while let Some(mut record) = self.scan.record() {
            let request = self.scan.request.load(Ordering::Relaxed);
            if request == CANCEL {
                self.end_scan(record, ScanState::Canceled);
                break;
            }
            if request == PAUSE {
                break;
            }
            let began = std::time::Instant::now();
            let end = scan_slice(&self, &mut record, &mut pacer);
            record.active_secs += began.elapsed().as_secs_f64();
            match end {
                SliceEnd::Done => {
                    self.end_scan(record, ScanState::Finished);
                    break;
                }
                SliceEnd::Paused(at) => {
                    record.bookmark = Some(at);
                    self.scan.shared.lock().record = Some(record);
                    self.scan.changed.notify_all();
                }
            }
        }
        self.scan.shared.lock().running = false;
        self.scan.changed.notify_all();
    }

    /// Closes a scan: its record, the error log's rotation (scrub), the missed txgs it
    /// copied (resilver); then a commit persists them.
    fn end_scan(&self, mut record: ScanRecord, state: ScanState) {
        record.state = state;
        record.ended = now_secs();
        record.bookmark = None;
        match (record.kind, state) {
            (ScanKind::Scrub, ScanState::Finished) => self.errlog.lock().scrub_finished(),
            (ScanKind::Scrub, _) => {
                // Canceled: nothing found before it is forgotten.
                let mut log = self.errlog.lock();
                let last = std::mem::take(&mut log.last);
                log.current.extend(last);
            }
            (ScanKind::Resilver, ScanState::Finished) => self.resilvered(&record),
            (ScanKind::Resilver, _) => {}
        }
        self.scan.shared.lock().record = Some(record);
        // The blocks it rewrote are flushed by this commit before its uberblock, and
        // its record, the error log and the cleared missed txgs go into its MOS. A
        // suspended pool cannot commit; the import after it scans again.
        if let Ok(hold) = self.ctx.txg.hold(0) {
            let txg = hold.txg;
            drop(hold);
            let _ = self.ctx.txg.wait_synced(txg);
        }
    }

    /// A resilver walked the whole tree: every side it was for holds its missed txgs.
    fn resilvered(&self, record: &ScanRecord) {
        for leaf in self.ctx.zio.vdevs.leaves() {
            let Some((first, last)) = leaf.missed_txgs() else {
                continue;
            };
            // A side that failed meanwhile was not written; one that missed more than
            // this resilver copied keeps its range for the next.
            if leaf.device().is_some() && first >= record.min_txg && last <= record.max_txg {
                leaf.clear_missed_txgs();
            }
        }
    }

    /// The first and last txg any side missed, if one did.
    pub(crate) fn missed_range(&self) -> Option<(u64, u64)> {
        self.ctx.zio.vdevs.leaves().filter_map(|l| l.missed_txgs()).reduce(|(a, b), (c, d)| (a.min(c), b.max(d)))
    }
}

impl Pool {
    /// The last scan, or the one under way.
    pub fn scan(&self) -> Option<ScanStatus> {
        let shared = self.inner.scan.shared.lock();
        shared.record.clone().map(|record| ScanStatus { record, running: shared.running })
    }

    /// Starts a scrub in the background (`zpool scrub`) and returns at once; it yields
    /// to the pool's own I/O (`ScanPace::background`). A scrub cut short by a close
    /// resumes where it stopped.
    pub fn scrub_start(&self) -> Result<(), PoolError> {
        self.scrub_start_with(ScanPace::background())
    }

    /// `scrub_start` with the given pace.
    pub fn scrub_start_with(&self, pace: ScanPace) -> Result<(), PoolError> {
        let shared = self.inner.scan.shared.lock();
        let previous = shared.record.clone();
        let running = shared.running;
        drop(shared);
        let record = match previous {
            Some(r) if running || r.kind == ScanKind::Resilver && r.state == ScanState::Scanning => {
                return Err(PoolError::ScanInProgress { pool: self.inner.name.clone(), kind: r.kind.to_string() })
            }
            Some(r) if r.kind == ScanKind::Scrub && r.state == ScanState::Scanning => r,
            _ => {
                self.inner.errlog.lock().scrub_started();
                let (_, allocated, _) = self.inner.ctx.zio.space();
                let synced = self.inner.ctx.txg.synced();
                ScanRecord::new(ScanKind::Scrub, allocated, 0, synced)
            }
        };
        self.inner.spawn_scan(record, pace);
        Ok(())
    }

    /// Stops the scrub under way, or one cut short by a close (`zpool scrub -s`): it
    /// is recorded as canceled. A resilver cannot be stopped.
    pub fn scrub_stop(&self) -> Result<(), PoolError> {
        let shared = self.inner.scan.shared.lock();
        let record = shared.record.clone();
        let running = shared.running;
        drop(shared);
        match record {
            Some(r) if r.state == ScanState::Scanning && r.kind == ScanKind::Scrub => {
                if running {
                    self.inner.scan.request.store(CANCEL, Ordering::Relaxed);
                    self.scan_wait();
                } else {
                    self.inner.end_scan(r, ScanState::Canceled);
                }
                Ok(())
            }
            Some(r) if r.state == ScanState::Scanning => {
                Err(PoolError::ScanInProgress { pool: self.inner.name.clone(), kind: r.kind.to_string() })
            }
            _ => Err(PoolError::NoScrub(self.inner.name.clone())),
        }
    }

    /// Waits until no scan runs; returns the record it left.
    pub fn scan_wait(&self) -> Option<ScanRecord> {
        let mut shared = self.inner.scan.shared.lock();
        while shared.running {
            self.inner.scan.changed.wait(&mut shared);
        }
        shared.record.clone()
    }

    /// Waits at most `timeout` for the scan to end or make progress; returns its state.
    pub fn scan_wait_for(&self, timeout: Duration) -> Option<ScanStatus> {
        let mut shared = self.inner.scan.shared.lock();
        if shared.running {
            self.inner.scan.changed.wait_for(&mut shared, timeout);
        }
        drop(shared);
        self.scan()
    }

    /// Resumes a scrub a close cut short, in the background (for the process that
    /// holds the pool, when it starts). Nothing happens if there is none.
    pub fn resume_scan(&self) -> Result<(), PoolError> {
        match self.scan() {
            Some(s) if !s.running && s.record.state == ScanState::Scanning => self.scrub_start(),
            _ => Ok(()),
        }
    }

    /// Reads and verifies every block committed before the call, every copy, at full
    /// speed (repairing mirror sides), and waits for the end; a resilver under way is
    /// waited for first. The result is persisted like a background scrub's.
    pub fn scrub(&self) -> Result<ScrubResult, PoolError> {
        if let Some(cut_short) = self.scan_wait() {
            if cut_short.kind == ScanKind::Scrub && cut_short.state == ScanState::Scanning {
                // It would resume from where it stopped, and miss what came since.
                self.inner.end_scan(cut_short, ScanState::Canceled);
            }
        }
        self.sync()?;
        let zio = &self.inner.ctx.zio;
        let cksum_before: u64 = zio.vdevs.leaves().map(|l| l.status().checksum_errors).sum();
        self.scrub_start_with(ScanPace::FULL_SPEED)?;
        let record = self.scan_wait().expect("a scrub that was started leaves a record");
        let cksum_after: u64 = zio.vdevs.leaves().map(|l| l.status().checksum_errors).sum();
        Ok(ScrubResult {
            blocks: record.blocks,
            bytes: record.examined,
            errors: record.errors,
            checksum_errors_seen: cksum_after.saturating_sub(cksum_before),
            seconds: record.active_secs,
        })
    }

    /// Starts (or resumes) the resilver of the sides that missed txgs, if any did.
    pub(crate) fn resilver_if_needed(&self) {
        let Some((first, last)) = self.inner.missed_range() else {
            return;
        };
        let previous = self.inner.scan.record();
        let record = match previous {
            Some(r)
                if r.kind == ScanKind::Resilver
                    && r.state == ScanState::Scanning
                    && (r.min_txg, r.max_txg) == (first, last) =>
            {
                r
            }
            other => {
                if let Some(r) = other.filter(|r| r.state == ScanState::Scanning) {
                    // A scrub cut short gives way; what it had found is kept.
                    self.inner.end_scan(r, ScanState::Canceled);
                }
                let (_, allocated, _) = self.inner.ctx.zio.space();
                ScanRecord::new(ScanKind::Resilver, allocated, first, last)
            }
        };
        self.inner.spawn_scan(record, ScanPace::background());
    }

    /// Stops the scan at a bookmark (the pool is closing); it stays in progress.
    /// Returns true if one was running (its bookmark is newer than the last commit).
    pub(crate) fn pause_scan(&self) -> bool {
        let was_running = self.inner.scan.shared.lock().running;
        self.inner.scan.request.store(PAUSE, Ordering::Relaxed);
        self.scan_wait();
        if let Some(t) = self.inner.scan.thread.lock().take() {
            let _ = t.join();
        }
        was_running
    }
}

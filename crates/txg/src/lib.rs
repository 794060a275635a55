//! txg — transaction groups: open → quiescing → syncing → committed.
//!
//! Theory of operation. At any moment one txg is *open*: every change joins it through a
//! `TxgHold` (a shared hold on the barrier, an `RwLock`) for the change's whole duration.
//! The sync thread wakes when the open txg has something in it and either the timeout
//! passed, its dirty bytes reached `dirty_sync`, someone waits for it (`wait_synced`:
//! fsync fallback, `sync=always` without a log, `pool sync`), or the pool is closing.
//! It then:
//!
//! 1. *quiesces* txg N: takes the barrier exclusively (so no change is half made; new
//!    holds wait from the moment it asks, unless their thread already holds), asks
//!    the target to freeze N's changes, and opens N+1 — writers continue at once;
//! 2. *syncs* N without the barrier: the target writes N's blocks, flushes, and writes
//!    the uberblock; only then is N *committed* (`synced`), and waiters are woken.
//!
//! A failed or panicking quiesce or sync *suspends* the engine: nothing after it
//! commits, every later hold fails with the typed reason, and the pool must be exported
//! and re-imported (it resumes from the last committed txg).
//!
//! Dirty data slows writers down before it stops them: see `throttle` (ZFS's
//! dmu_tx_delay). The sync of the open txg starts early once it holds `dirty_sync` bytes
//! (`DIRTY_SYNC_PERCENT` of `dirty_max`, ZFS's zfs_dirty_data_sync_percent).
//!
//! Modules: `state` (the txg numbers and dirty counts, and their asserted transitions),
//! `throttle` (the delay curve, the write throttle and the dirty observer), `sync` (the
//! sync thread: quiesce, sync, commit, suspend), `error` (why holds and waits fail).
//!
//! Owns: the txg numbers, the barrier between changes and a quiesce, dirty-data
//! accounting and the write throttle (its curve and counters), the sync thread and its
//! timer, and the waits (`wait_synced`) that commits and the intent log's fallback use.
//!
//! Promises: every change made under a `TxgHold` belongs to exactly one txg; the sync of
//! txg N starts only after every hold on N is released, and N+1's sync starts only after
//! N committed; txg numbers only grow (the open txg, the committed one, each strictly
//! after the last: asserted); a writer is delayed only above the curve's minimum, by at
//! most `DelayCurve::max` per hold, and stopped only while dirty data is over
//! `dirty_max`, never for a whole sync below it; a failed sync suspends the pool (every
//! later hold fails) instead of committing anything partial, and no waiter is left
//! waiting forever.
//!
//! Must never: know what is being synced (the layer above implements `SyncTarget`), or
//! hold its state lock while the target runs, a writer sleeps, or the observer runs.
use std::sync::atomic::AtomicU32;
use std::sync::OnceLock;
use std::time::Duration;

use parking_lot::{Condvar, Mutex, RwLock, RwLockReadGuard};

mod error;
pub mod rate;
mod state;
mod sync;
mod throttle;

pub use error::{SyncFailure, TxgError};
use state::State;
use throttle::dirty_percent;
pub use throttle::{write_delay, DelayCurve, DirtyObserver};

/// What the txg engine drives. Implemented by the pool.
pub trait SyncTarget: Send + Sync {
    /// Why a sync failed, as the target knows it.
    type Error: std::error::Error + Send + Sync + 'static;
    /// Called while no hold exists: freeze the open txg's changes as txg `txg`'s.
    fn quiesce(&self, txg: u64);
    /// Write txg `txg` and commit it (uberblock durable) before returning.
    fn sync(&self, txg: u64) -> Result<(), Self::Error>;
}

#[derive(Clone, Debug)]
pub struct TxgConfig {
    /// Commit at least this often when anything is dirty.
    pub timeout: Duration,
    /// Writers are delayed above `DelayCurve::min_percent` of this (open + syncing
    /// dirty bytes), and stopped above it.
    pub dirty_max: u64,
    /// A sync starts early once the open txg has this many dirty bytes (scaled down
    /// with the dirty limit, when the measured write rate holds that below `dirty_max`).
    pub dirty_sync: u64,
    /// Hold dirty data to what the disks write in one `timeout`, as measured over the
    /// last syncs (`rate`), instead of to `dirty_max` alone: the delay curve and early
    /// syncs then follow the disks' real speed.
    pub pace_to_write_rate: bool,
}

/// The default `dirty_sync`, in percent of `dirty_max` (ZFS's
/// zfs_dirty_data_sync_percent); `TxgEngine::set_dirty_max` keeps this ratio.
pub const DIRTY_SYNC_PERCENT: u64 = 20;

impl Default for TxgConfig {
    fn default() -> Self {
        let dirty_max = 256 << 20;
        TxgConfig {
            timeout: Duration::from_secs(5),
            dirty_max,
            dirty_sync: dirty_max * DIRTY_SYNC_PERCENT / 100,
            pace_to_write_rate: true,
        }
    }
}

struct Tuning {
    config: TxgConfig,
    curve: DelayCurve,
}

pub struct TxgEngine {
    state: Mutex<State>,
    changed: Condvar,
    barrier: RwLock<()>,
    /// The config and the delay curve, read together once per hold.
    tuning: Mutex<Tuning>,
    observer: OnceLock<DirtyObserver>,
    /// The dirty percent the observer heard last.
    told_percent: AtomicU32,
}

/// Proof that a change is being made in txg `txg`; the txg cannot quiesce while it lives.
pub struct TxgHold<'a> {
    pub txg: u64,
    _guard: RwLockReadGuard<'a, ()>,
}

impl<'a> TxgHold<'a> {
    fn new(txg: u64, guard: RwLockReadGuard<'a, ()>) -> TxgHold<'a> {
        HOLDS_ON_THIS_THREAD.set(HOLDS_ON_THIS_THREAD.get() + 1);
        TxgHold { txg, _guard: guard }
    }
}

impl Drop for TxgHold<'_> {
    fn drop(&mut self) {
        HOLDS_ON_THIS_THREAD.set(HOLDS_ON_THIS_THREAD.get() - 1);
    }
}

thread_local! {
    /// Txg holds the current thread has (of any engine). A thread that already holds one
    /// never waits for a quiesce to take another: the quiesce waits for its first.
    static HOLDS_ON_THIS_THREAD: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

#[derive(Clone, Debug, Default)]
pub struct TxgStats {
    pub open: u64,
    pub synced: u64,
    pub dirty_open: u64,
    pub dirty_syncing: u64,
    pub dirty_max: u64,
    pub dirty_sync: u64,
    /// Holds the delay curve slowed down, and for how long in all.
    pub delayed_writes: u64,
    pub delay_us: u64,
    /// Holds that found dirty data over `dirty_max` and waited for a commit, and for
    /// how long in all.
    pub dirty_max_waits: u64,
    pub dirty_max_wait_us: u64,
    /// The dirty limit in force: `dirty_max`, or less once syncs measured the disks'
    /// write rate (`rate`). The delay curve and early syncs are shares of it.
    pub dirty_limit: u64,
    /// Dirty bytes a sync retires per second, smoothed (0 before the first measure).
    pub write_rate: u64,
    /// Syncs committed, their time in all and the longest, the last one's time and
    /// dirty bytes.
    pub syncs: u64,
    pub sync_us: u64,
    pub max_sync_us: u64,
    pub last_sync_us: u64,
    pub last_sync_bytes: u64,
    /// Time quiesces took (waiting for the holds on the txg to end, then freezing its
    /// changes), in all and the longest: a snapshot or an fsync fallback waits for it.
    pub quiesce_us: u64,
    pub max_quiesce_us: u64,
}

impl TxgEngine {
    /// `last_committed` is the txg of the uberblock the pool was opened at.
    pub fn new(last_committed: u64, config: TxgConfig) -> TxgEngine {
        TxgEngine {
            state: Mutex::new(State::new(last_committed)),
            changed: Condvar::new(),
            barrier: RwLock::new(()),
            tuning: Mutex::new(Tuning { config, curve: DelayCurve::default() }),
            observer: OnceLock::new(),
            told_percent: AtomicU32::new(0),
        }
    }

    pub fn set_config(&self, config: TxgConfig) {
        self.tuning.lock().config = config;
        self.changed.notify_all();
        self.tell_dirty();
    }

    /// Changes `dirty_max` at run time (`tarn tune`); `dirty_sync` follows at
    /// `DIRTY_SYNC_PERCENT` of it. Writers waiting for room re-check at once.
    pub fn set_dirty_max(&self, bytes: u64) {
        {
            let c = &mut self.tuning.lock().config;
            c.dirty_max = bytes.max(1);
            c.dirty_sync = (c.dirty_max * DIRTY_SYNC_PERCENT / 100).max(1);
        }
        self.changed.notify_all();
        self.tell_dirty();
    }

    pub fn config(&self) -> TxgConfig {
        self.tuning.lock().config.clone()
    }

    pub fn stats(&self) -> TxgStats {
        let config = self.tuning.lock().config.clone();
        let (dirty_max, dirty_sync) = (config.dirty_max, config.dirty_sync);
        let s = self.state.lock();
        let limit = dirty_limit(&s, &config);
        TxgStats {
            open: s.open,
            synced: s.synced,
            dirty_open: s.dirty_open,
            dirty_syncing: s.dirty_syncing,
            dirty_max,
            dirty_sync,
            delayed_writes: s.throttle.delayed_writes,
            delay_us: micros(s.throttle.delay),
            dirty_max_waits: s.throttle.dirty_max_waits,
            dirty_max_wait_us: micros(s.throttle.dirty_max_wait),
            dirty_limit: limit,
            write_rate: s.rate.bytes_per_sec().unwrap_or(0),
            syncs: s.syncs.count,
            sync_us: micros(s.syncs.time),
            max_sync_us: micros(s.syncs.max),
            last_sync_us: micros(s.syncs.last),
            last_sync_bytes: s.syncs.last_bytes,
            quiesce_us: micros(s.syncs.quiesce_time),
            max_quiesce_us: micros(s.syncs.quiesce_max),
        }
    }

    /// Joins the open txg for a change that will dirty about `dirty_bytes`. A change
    /// that dirties anything first passes the write throttle (see the module header).
    pub fn hold(&self, dirty_bytes: u64) -> Result<TxgHold<'_>, TxgError> {
        let (config, curve) = {
            let t = self.tuning.lock();
            (t.config.clone(), t.curve)
        };
        if dirty_bytes > 0 {
            self.throttle(dirty_bytes, &config, &curve)?;
        }
        self.wait_out_quiesce();
        // Recursive read: a thread that already holds may join again without deadlocking
        // against a pending quiesce.
        let guard = self.barrier.read_recursive();
        let mut s = self.state.lock();
        check_usable(&s)?;
        s.dirty_open += dirty_bytes;
        s.holds_in_open += 1;
        let txg = s.open;
        let limit = dirty_limit(&s, &config);
        if s.dirty_open >= sync_threshold(&config, limit) {
            self.changed.notify_all();
        }
        let percent = dirty_percent(s.dirty(), limit);
        drop(s);
        if dirty_bytes > 0 {
            self.tell_percent(percent);
        }
        Ok(TxgHold::new(txg, guard))
    }

    /// Waits while the sync thread quiesces, unless this thread already holds (then the
    /// quiesce waits for it, and waiting here would deadlock). Without this, a new shared
    /// hold gets past the barrier whenever another is still held, so a few writers whose
    /// holds overlap (each one short: a record's read-modify-write, a directory change)
    /// kept the quiesce waiting for seconds on a busy disk: a snapshot or an fsync's
    /// fallback waits for that quiesce.
    fn wait_out_quiesce(&self) {
        if HOLDS_ON_THIS_THREAD.get() > 0 {
            return;
        }
        let mut s = self.state.lock();
        while s.quiescing && s.error.is_none() {
            self.changed.wait(&mut s);
        }
    }

    /// Joins txg `txg` only if it is still open and no quiesce is under way; never waits
    /// (no throttle). For work that must finish inside `txg` but runs where waiting could
    /// deadlock (an fsync writing a block in place while it holds the intent log).
    pub fn try_hold_open(&self, txg: u64) -> Option<TxgHold<'_>> {
        let guard = self.barrier.try_read_recursive()?;
        let s = self.state.lock();
        (s.open == txg && s.error.is_none() && !s.closing).then(|| TxgHold::new(txg, guard))
    }

    /// Adds dirty bytes found after the hold was taken (a read-modify-write that grew).
    pub fn add_dirty(&self, bytes: u64) {
        self.state.lock().dirty_open += bytes;
        self.tell_dirty();
    }

    /// Replaces a hold's estimate (`hold(estimated)`) by the dirty bytes the change really
    /// added, once the caller knows them (a write into a record already dirty in this txg
    /// adds none; one into a larger record adds the whole record). Called while the hold
    /// is still held, so the bytes are still the open txg's.
    pub fn settle_dirty(&self, estimated: u64, actual: u64) {
        if estimated == actual {
            return;
        }
        {
            let mut s = self.state.lock();
            assert!(
                s.dirty_open >= estimated,
                "invariant broken: the open txg holds {} dirty bytes, less than a hold's estimate of {estimated}",
                s.dirty_open
            );
            s.dirty_open = s.dirty_open - estimated + actual;
        }
        self.tell_dirty();
    }

    /// The error that suspended the pool, if one did. Unlike `hold`, asking does not
    /// join (and so dirty) the open txg.
    pub fn suspended(&self) -> Option<SyncFailure> {
        self.state.lock().error.clone()
    }

    /// Dirty bytes of the open and syncing txgs (what the throttle weighs against
    /// `dirty_max`).
    pub fn dirty_bytes(&self) -> u64 {
        self.state.lock().dirty()
    }

    /// The last committed txg.
    pub fn synced(&self) -> u64 {
        self.state.lock().synced
    }

    pub fn open_txg(&self) -> u64 {
        self.state.lock().open
    }

    /// Returns once txg `txg` is committed (starting its sync now if it is still open).
    pub fn wait_synced(&self, txg: u64) -> Result<(), TxgError> {
        let mut s = self.state.lock();
        loop {
            // Nothing joined the open txg: what the caller needs is everything before it.
            let target = if txg >= s.open && s.holds_in_open == 0 { s.open - 1 } else { txg };
            if s.synced >= target {
                return Ok(());
            }
            if let Some(e) = &s.error {
                return Err(TxgError::Suspended(e.clone()));
            }
            s.wanted = s.wanted.max(target);
            self.changed.notify_all();
            self.changed.wait(&mut s);
        }
    }

    /// Commits everything changed so far.
    pub fn sync_all(&self) -> Result<(), TxgError> {
        let txg = self.state.lock().open;
        self.wait_synced(txg)
    }
}

/// The dirty limit in force (see `TxgStats::dirty_limit`).
pub(crate) fn dirty_limit(s: &State, config: &TxgConfig) -> u64 {
    if config.pace_to_write_rate {
        s.rate.limit(config.dirty_max, config.timeout)
    } else {
        config.dirty_max
    }
}

/// Dirty bytes of the open txg that start its sync early: `dirty_sync`, scaled down
/// with the dirty limit when the measured write rate holds it below `dirty_max` (the
/// configured share of the limit is kept).
pub(crate) fn sync_threshold(config: &TxgConfig, limit: u64) -> u64 {
    if limit >= config.dirty_max {
        return config.dirty_sync;
    }
    (config.dirty_sync as u128 * limit as u128 / config.dirty_max.max(1) as u128).max(1) as u64
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn check_usable(s: &State) -> Result<(), TxgError> {
    if let Some(e) = &s.error {
        return Err(TxgError::Suspended(e.clone()));
    }
    if s.closing {
        return Err(TxgError::Closing);
    }
    Ok(())
}

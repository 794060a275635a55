//! txg — transaction groups: open → quiescing → syncing → committed.
//!
//! Theory of operation. At any moment one txg is *open*: every change joins it through a
//! `TxgHold` (a shared hold on the barrier, an `RwLock`) for the change's whole duration.
//! The sync thread wakes when the open txg has something in it and either the timeout
//! passed, its dirty bytes reached `dirty_sync`, someone waits for it (`wait_synced`:
//! fsync fallback, `sync=always` without a log, `pool sync`), or the pool is closing.
//! It then:
//!
//! 1. *quiesces* txg N: takes the barrier exclusively (so no change is half made), asks
//!    the target to freeze N's changes, and opens N+1 — writers continue at once;
//! 2. *syncs* N without the barrier: the target writes N's blocks, flushes, and writes
//!    the uberblock; only then is N *committed* (`synced`), and waiters are woken.
//!
//! A failed or panicking quiesce or sync *suspends* the engine: nothing after it
//! commits, every later hold fails with the typed reason, and the pool must be exported
//! and re-imported (it resumes from the last committed txg).
//!
//! The write throttle (ZFS's dmu_tx_delay). Dirty bytes of the open and syncing txgs
//! (*dirty*) decide how long a writer's `hold` waits, so writers slow down smoothly as
//! the disks fall behind instead of running free until `dirty_max` and then stopping:
//!
//! * up to `DelayCurve::min_percent` (60 %) of `dirty_max`: no delay;
//! * above it: `scale · (dirty − min) / (dirty_max − dirty)` (`write_delay`), at most
//!   `DelayCurve::max`. Delays are spaced that far apart across all writers (each
//!   wakes at the later of its own start plus the delay and the previous wake-up plus
//!   the delay), so the curve sets the rate of writes, whatever the number of writers;
//! * past `dirty_max`: the writer waits until the syncing txg commits (a hard stop the
//!   curve should make rare).
//!
//! The sync of the open txg starts early once it holds `dirty_sync` bytes
//! (`DIRTY_SYNC_PERCENT` of `dirty_max`, ZFS's zfs_dirty_data_sync_percent). A dirty
//! observer (`set_dirty_observer`) hears dirty data as a percent of `dirty_max`: the pool
//! lets more txg writes into the devices as it grows.
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
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock, RwLockReadGuard};

/// Why the engine stopped committing. Cloned to every caller that finds the pool
/// suspended; the target's own error is kept as the source, for callers that downcast.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SyncFailure {
    /// The target could not write or commit txg `txg` (an I/O error, no space for the
    /// pool's root block…).
    #[error("txg {txg}: {source}")]
    Target {
        txg: u64,
        #[source]
        source: Arc<dyn std::error::Error + Send + Sync>,
    },
    /// The target or the engine panicked: a bug, caught so that waiters see an error
    /// instead of waiting forever.
    #[error("internal error in the txg sync (txg {txg}): {message}")]
    Panicked { txg: u64, message: String },
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum TxgError {
    #[error("pool is suspended after a failed commit: {0}; export and re-import it (nothing committed before the failure is lost)")]
    Suspended(SyncFailure),
    #[error("pool is closing")]
    Closing,
}

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
    /// A sync starts early once the open txg has this many dirty bytes.
    pub dirty_sync: u64,
}

/// The default `dirty_sync`, in percent of `dirty_max` (ZFS's
/// zfs_dirty_data_sync_percent); `TxgEngine::set_dirty_max` keeps this ratio.
pub const DIRTY_SYNC_PERCENT: u64 = 20;

impl Default for TxgConfig {
    fn default() -> Self {
        let dirty_max = 256 << 20;
        TxgConfig { timeout: Duration::from_secs(5), dirty_max, dirty_sync: dirty_max * DIRTY_SYNC_PERCENT / 100 }
    }
}

/// The shape of the write throttle's delay (ZFS's zfs_delay_min_dirty_percent,
/// zfs_delay_scale and zfs_delay_max_ns; see `write_delay`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DelayCurve {
    /// No delay while dirty data is at most this percent of `dirty_max`.
    pub min_percent: u32,
    /// The delay when dirty data is midway between the minimum and `dirty_max`.
    pub scale: Duration,
    /// The longest delay of one hold.
    pub max: Duration,
}

impl Default for DelayCurve {
    /// ZFS's defaults: the curve starts at 60 % of `dirty_max`; at 80 % a write waits
    /// 500 µs (2,000 writes a second), at 90 % 1.5 ms, at 99 % 19.5 ms, and never more
    /// than 100 ms.
    fn default() -> Self {
        DelayCurve { min_percent: 60, scale: Duration::from_micros(500), max: Duration::from_millis(100) }
    }
}

/// How long a write is delayed when `dirty` bytes are dirty: zero up to
/// `curve.min_percent` of `dirty_max`, then `scale · (dirty − min) / (dirty_max − dirty)`
/// — growing without bound as dirty data nears `dirty_max` — capped at `curve.max`.
pub fn write_delay(dirty: u64, dirty_max: u64, curve: &DelayCurve) -> Duration {
    let min = (dirty_max as u128 * curve.min_percent.min(100) as u128 / 100) as u64;
    if dirty <= min {
        return Duration::ZERO;
    }
    if dirty >= dirty_max {
        return curve.max;
    }
    let ns = curve.scale.as_nanos() * (dirty - min) as u128 / (dirty_max - dirty) as u128;
    Duration::from_nanos(ns.min(curve.max.as_nanos()) as u64)
}

/// Hears dirty data as a percent of `dirty_max` (`TxgEngine::set_dirty_observer`).
pub type DirtyObserver = Box<dyn Fn(u32) + Send + Sync>;

fn dirty_percent(dirty: u64, dirty_max: u64) -> u32 {
    (dirty as u128 * 100 / dirty_max.max(1) as u128).min(1000) as u32
}

struct Tuning {
    config: TxgConfig,
    curve: DelayCurve,
}

struct State {
    open: u64,
    synced: u64,
    dirty_open: u64,
    dirty_syncing: u64,
    holds_in_open: u64,
    /// Highest txg someone is waiting to see committed.
    wanted: u64,
    error: Option<SyncFailure>,
    closing: bool,
    last_sync: Instant,
    /// When the last delayed writer was let go: the next one goes a delay after it.
    last_wakeup: Instant,
    throttle: ThrottleCounters,
}

#[derive(Clone, Copy, Debug, Default)]
struct ThrottleCounters {
    delayed_writes: u64,
    delay: Duration,
    dirty_max_waits: u64,
    dirty_max_wait: Duration,
}

impl State {
    fn new(last_committed: u64) -> State {
        State {
            open: last_committed + 1,
            synced: last_committed,
            dirty_open: 0,
            dirty_syncing: 0,
            holds_in_open: 0,
            wanted: 0,
            error: None,
            closing: false,
            last_sync: Instant::now(),
            last_wakeup: Instant::now(),
            throttle: ThrottleCounters::default(),
        }
    }

    fn dirty(&self) -> u64 {
        self.dirty_open + self.dirty_syncing
    }

    /// Txg `txg` was quiesced: it becomes the syncing txg and `txg + 1` opens.
    fn quiesced(&mut self, txg: u64) {
        assert_eq!(txg, self.open, "txg numbers only grow: quiesced txg {txg} is not the open txg {}", self.open);
        assert!(
            txg > self.synced,
            "txg numbers only grow: quiesced txg {txg} is not after committed txg {}",
            self.synced
        );
        self.open = txg + 1;
        self.dirty_syncing = self.dirty_open;
        self.dirty_open = 0;
        self.holds_in_open = 0;
    }

    /// Txg `txg` is committed (its uberblock is durable).
    fn committed(&mut self, txg: u64) {
        assert!(txg > self.synced, "txg numbers only grow: txg {txg} committed after txg {}", self.synced);
        assert!(txg < self.open, "txg {txg} committed while it is still open (open: {})", self.open);
        self.synced = txg;
    }
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

    /// Changes the write throttle's delay curve.
    pub fn set_delay_curve(&self, curve: DelayCurve) {
        self.tuning.lock().curve = curve;
    }

    /// Installs the one observer of dirty data (in percent of `dirty_max`), told on
    /// every change of the percent. It runs without the engine's locks held and must be
    /// quick (the pool sets the devices' async-write limits).
    ///
    /// Panics if an observer is already installed.
    pub fn set_dirty_observer(&self, observer: DirtyObserver) {
        assert!(self.observer.set(observer).is_ok(), "the txg engine has one dirty observer");
        self.told_percent.store(u32::MAX, Ordering::Relaxed);
        self.tell_dirty();
    }

    pub fn stats(&self) -> TxgStats {
        let (dirty_max, dirty_sync) = {
            let c = &self.tuning.lock().config;
            (c.dirty_max, c.dirty_sync)
        };
        let s = self.state.lock();
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
        }
    }

    /// Joins the open txg for a change that will dirty about `dirty_bytes`. A change
    /// that dirties anything first passes the write throttle (see the module header).
    pub fn hold(&self, dirty_bytes: u64) -> Result<TxgHold<'_>, TxgError> {
        let (dirty_max, dirty_sync, curve) = {
            let t = self.tuning.lock();
            (t.config.dirty_max, t.config.dirty_sync, t.curve)
        };
        if dirty_bytes > 0 {
            self.throttle(dirty_bytes, dirty_max, &curve)?;
        }
        // Recursive read: a thread that already holds may join again without deadlocking
        // against a pending quiesce.
        let guard = self.barrier.read_recursive();
        let mut s = self.state.lock();
        check_usable(&s)?;
        s.dirty_open += dirty_bytes;
        s.holds_in_open += 1;
        let txg = s.open;
        if s.dirty_open >= dirty_sync {
            self.changed.notify_all();
        }
        let percent = dirty_percent(s.dirty(), dirty_max);
        drop(s);
        if dirty_bytes > 0 {
            self.tell_percent(percent);
        }
        Ok(TxgHold { txg, _guard: guard })
    }

    /// The write throttle for a change of `dirty_bytes`: waits while dirty data is over
    /// `dirty_max` (a commit makes room), then sleeps along the delay curve.
    fn throttle(&self, dirty_bytes: u64, dirty_max: u64, curve: &DelayCurve) -> Result<(), TxgError> {
        let asked = Instant::now();
        let mut s = self.state.lock();
        let mut waited_for_room = false;
        loop {
            check_usable(&s)?;
            if s.dirty() + dirty_bytes <= dirty_max || s.dirty() == 0 {
                break;
            }
            waited_for_room = true;
            s.wanted = s.wanted.max(s.open);
            self.changed.notify_all();
            self.changed.wait_for(&mut s, Duration::from_millis(100));
        }
        if waited_for_room {
            s.throttle.dirty_max_waits += 1;
            s.throttle.dirty_max_wait += asked.elapsed();
        }
        let delay = write_delay(s.dirty(), dirty_max, curve);
        let now = Instant::now();
        if delay.is_zero() || now >= asked + delay {
            return Ok(()); // this writer has already waited that long
        }
        // Spaced `delay` after the previous delayed writer: the curve sets the rate of
        // writes, not each writer's pause (ZFS's dp_last_wakeup).
        let wakeup = (asked + delay).max(s.last_wakeup + delay);
        s.last_wakeup = wakeup;
        s.throttle.delayed_writes += 1;
        s.throttle.delay += wakeup - now;
        drop(s);
        std::thread::sleep(wakeup - now);
        Ok(())
    }

    /// Tells the observer dirty data's percent of `dirty_max`, if it changed.
    fn tell_dirty(&self) {
        if self.observer.get().is_none() {
            return;
        }
        let dirty_max = self.tuning.lock().config.dirty_max;
        let dirty = self.state.lock().dirty();
        self.tell_percent(dirty_percent(dirty, dirty_max));
    }

    fn tell_percent(&self, percent: u32) {
        let Some(observer) = self.observer.get() else {
            return;
        };
        if self.told_percent.swap(percent, Ordering::Relaxed) != percent {
            observer(percent);
        }
    }

    /// Joins txg `txg` only if it is still open and no quiesce is under way; never waits
    /// (no throttle). For work that must finish inside `txg` but runs where waiting could
    /// deadlock (an fsync writing a block in place while it holds the intent log).
    pub fn try_hold_open(&self, txg: u64) -> Option<TxgHold<'_>> {
        let guard = self.barrier.try_read_recursive()?;
        let s = self.state.lock();
        (s.open == txg && s.error.is_none() && !s.closing).then_some(TxgHold { txg, _guard: guard })
    }

    /// Adds dirty bytes found after the hold was taken (a read-modify-write that grew).
    pub fn add_dirty(&self, bytes: u64) {
        self.state.lock().dirty_open += bytes;
        self.tell_dirty();
    }

    /// The error that suspended the pool, if one did. Unlike `hold`, asking does not
    /// join (and so dirty) the open txg.
    pub fn suspended(&self) -> Option<SyncFailure> {
        self.state.lock().error.clone()
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

    /// Starts the sync thread. It runs until `close`, or until a failure suspends the
    /// engine.
    pub fn start<T: SyncTarget + 'static>(self: &Arc<Self>, target: Arc<T>) -> std::thread::JoinHandle<()> {
        let me = Arc::clone(self);
        std::thread::Builder::new()
            .name("txg_sync".into())
            .spawn(move || {
                // The engine's own invariants are asserted in the loop. If one breaks, the
                // thread dies loudly, but first the engine is suspended so that no waiter
                // waits for a commit that will never come.
                let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| me.sync_loop(&*target)));
                if let Err(panic) = run {
                    me.suspend_after_panic(&panic);
                    std::panic::resume_unwind(panic);
                }
            })
            .expect("spawn txg sync thread")
    }

    fn suspend_after_panic(&self, panic: &Box<dyn std::any::Any + Send>) {
        let mut s = self.state.lock();
        let txg = s.open;
        s.error.get_or_insert(SyncFailure::Panicked { txg, message: panic_message(panic.as_ref()) });
        self.changed.notify_all();
    }

    /// Stops the sync thread after it commits whatever is open.
    pub fn close(&self) {
        let mut s = self.state.lock();
        s.closing = true;
        s.wanted = s.wanted.max(s.open);
        self.changed.notify_all();
    }

    fn sync_loop<T: SyncTarget>(&self, target: &T) {
        loop {
            let Some(txg) = self.wait_for_work() else {
                return;
            };
            // A panic in quiesce or sync is a bug, but it must suspend the pool rather
            // than kill this thread and leave every `wait_synced` caller waiting forever.
            let quiesced = {
                let _exclusive = self.barrier.write();
                let q = catch_panic(txg, || {
                    target.quiesce(txg);
                    Ok::<(), std::convert::Infallible>(())
                });
                self.state.lock().quiesced(txg);
                q
            };
            let result = quiesced.and_then(|()| catch_panic(txg, || target.sync(txg)));
            let mut s = self.state.lock();
            match result {
                Ok(()) => s.committed(txg),
                Err(e) => s.error = Some(e),
            }
            s.dirty_syncing = 0;
            s.last_sync = Instant::now();
            self.changed.notify_all();
            let failed = s.error.is_some();
            drop(s);
            self.tell_dirty();
            if failed {
                return;
            }
        }
    }

    /// Sleeps until the open txg should sync; `None` when closing with nothing to do.
    fn wait_for_work(&self) -> Option<u64> {
        let mut s = self.state.lock();
        loop {
            let cfg = self.tuning.lock().config.clone();
            let anything = s.holds_in_open > 0;
            let due = s.last_sync.elapsed() >= cfg.timeout;
            let asked = s.wanted >= s.open;
            let full = s.dirty_open >= cfg.dirty_sync;
            if anything && (due || asked || full || s.closing) {
                return Some(s.open);
            }
            if s.closing {
                s.synced = s.synced.max(s.open - 1);
                self.changed.notify_all();
                return None;
            }
            if asked && !anything {
                // Nothing changed in the open txg: what was asked for is already durable.
                s.wanted = s.synced;
                self.changed.notify_all();
            }
            let wait = cfg.timeout.saturating_sub(s.last_sync.elapsed()).max(Duration::from_millis(10));
            self.changed.wait_for(&mut s, wait);
        }
    }
}

/// Runs one step of the target for txg `txg`, turning its error or its panic into the
/// failure that suspends the engine.
fn catch_panic<E: std::error::Error + Send + Sync + 'static>(
    txg: u64,
    f: impl FnOnce() -> Result<(), E>,
) -> Result<(), SyncFailure> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(SyncFailure::Target { txg, source: Arc::new(e) }),
        Err(panic) => Err(SyncFailure::Panicked { txg, message: panic_message(panic.as_ref()) }),
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into())
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("disk on fire")]
    struct Fire;

    /// Syncs succeed until txg `fail_at`, which fails (or panics, if `panic`).
    struct Target {
        fail_at: u64,
        panic: bool,
        synced: AtomicU64,
    }

    impl SyncTarget for Target {
        type Error = Fire;
        fn quiesce(&self, _txg: u64) {}
        fn sync(&self, txg: u64) -> Result<(), Fire> {
            if txg == self.fail_at {
                if self.panic {
                    panic!("bug in the target");
                }
                return Err(Fire);
            }
            self.synced.store(txg, Ordering::SeqCst);
            Ok(())
        }
    }

    fn engine(fail_at: u64, panic: bool) -> (Arc<TxgEngine>, Arc<Target>, std::thread::JoinHandle<()>) {
        let engine = Arc::new(TxgEngine::new(10, TxgConfig::default()));
        let target = Arc::new(Target { fail_at, panic, synced: AtomicU64::new(0) });
        let thread = engine.start(target.clone());
        (engine, target, thread)
    }

    #[test]
    fn a_held_txg_commits_and_the_next_one_opens() {
        let (engine, target, thread) = engine(0, false);
        let txg = engine.hold(100).unwrap().txg;
        assert_eq!(txg, 11, "the first txg opened is the one after the committed txg");
        engine.wait_synced(txg).unwrap();
        assert_eq!((engine.synced(), target.synced.load(Ordering::SeqCst)), (11, 11));
        assert_eq!(engine.hold(0).unwrap().txg, 12);
        engine.close();
        thread.join().unwrap();
    }

    #[test]
    fn a_failed_sync_suspends_with_the_targets_error() {
        let (engine, _, thread) = engine(11, false);
        let txg = engine.hold(1).unwrap().txg;
        let err = engine.wait_synced(txg).unwrap_err();
        let TxgError::Suspended(SyncFailure::Target { txg: 11, source }) = &err else { panic!("{err:?}") };
        assert!(source.downcast_ref::<Fire>().is_some(), "the target's error is kept as the source");
        assert!(err.to_string().contains("txg 11: disk on fire"), "{err}");
        assert!(matches!(engine.hold(1), Err(TxgError::Suspended(_))), "every later hold fails");
        assert!(engine.suspended().is_some());
        thread.join().unwrap();
    }

    #[test]
    fn a_panicking_sync_suspends_instead_of_hanging_waiters() {
        let (engine, _, thread) = engine(11, true);
        let txg = engine.hold(1).unwrap().txg;
        let err = engine.wait_synced(txg).unwrap_err();
        assert!(
            matches!(&err, TxgError::Suspended(SyncFailure::Panicked { txg: 11, message }) if message == "bug in the target"),
            "{err:?}"
        );
        thread.join().unwrap();
    }

    const MIB: u64 = 1 << 20;

    fn delay_at(percent: u64) -> Duration {
        write_delay(percent * MIB, 100 * MIB, &DelayCurve::default())
    }

    #[test]
    fn the_delay_curve_is_zero_below_its_minimum() {
        for percent in [0, 1, 30, 59, 60] {
            assert_eq!(delay_at(percent), Duration::ZERO, "at {percent}%");
        }
        assert!(delay_at(61) > Duration::ZERO);
    }

    #[test]
    fn the_delay_curve_has_zfs_values_at_its_documented_points() {
        // scale · (dirty − 60%) / (100% − dirty), with scale 500 µs.
        assert_eq!(delay_at(70), Duration::from_nanos(166_666));
        assert_eq!(delay_at(80), Duration::from_micros(500));
        assert_eq!(delay_at(90), Duration::from_micros(1500));
        assert_eq!(delay_at(99), Duration::from_micros(19_500));
    }

    #[test]
    fn the_delay_curve_grows_and_is_capped() {
        let curve = DelayCurve::default();
        let max = 256 * MIB;
        let delays: Vec<Duration> = (0..=1000).map(|k| write_delay(max * k / 1000, max, &curve)).collect();
        assert!(delays.windows(2).all(|w| w[0] <= w[1]), "monotonic");
        assert!(delays.iter().all(|&d| d <= curve.max), "capped");
        assert_eq!(write_delay(max - 1, max, &curve), curve.max);
        assert_eq!(write_delay(max, max, &curve), curve.max);
        assert_eq!(write_delay(2 * max, max, &curve), curve.max);
    }

    /// An engine with no sync thread: holds only add dirty data.
    fn idle_engine(dirty_max: u64) -> TxgEngine {
        let engine = TxgEngine::new(1, TxgConfig { dirty_max, ..TxgConfig::default() });
        engine.set_delay_curve(DelayCurve {
            min_percent: 60,
            scale: Duration::from_millis(10),
            max: Duration::from_millis(100),
        });
        engine
    }

    #[test]
    fn below_the_curve_a_writer_is_not_delayed() {
        let engine = idle_engine(100 * MIB);
        drop(engine.hold(50 * MIB).unwrap());
        for _ in 0..10 {
            drop(engine.hold(1).unwrap());
        }
        let t = engine.stats();
        assert_eq!((t.delayed_writes, t.delay_us, t.dirty_max_waits), (0, 0, 0));
    }

    #[test]
    fn above_the_curve_writers_are_spaced_by_the_delay() {
        let engine = Arc::new(idle_engine(100 * MIB));
        drop(engine.hold(80 * MIB).unwrap()); // midway: the delay is the scale, 10 ms
        let started = Instant::now();
        let writers: Vec<_> = (0..4)
            .map(|_| {
                let engine = engine.clone();
                std::thread::spawn(move || {
                    for _ in 0..3 {
                        drop(engine.hold(1).unwrap());
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        // 12 writes, each let go 10 ms after the one before, whatever the writer.
        assert!(started.elapsed() >= Duration::from_millis(110), "{:?}", started.elapsed());
        let t = engine.stats();
        assert_eq!(t.delayed_writes, 12);
        assert!(t.delay_us >= 110_000, "{}", t.delay_us);
    }

    #[test]
    fn tuning_dirty_max_moves_the_sync_threshold_and_the_curve() {
        let engine = idle_engine(1000 * MIB);
        drop(engine.hold(100 * MIB).unwrap());
        drop(engine.hold(1).unwrap());
        assert_eq!(engine.stats().delayed_writes, 0, "10 % of dirty_max");
        engine.set_dirty_max(125 * MIB);
        let t = engine.stats();
        assert_eq!((t.dirty_max, t.dirty_sync), (125 * MIB, 25 * MIB));
        drop(engine.hold(1).unwrap());
        assert_eq!(engine.stats().delayed_writes, 1, "80 % of the new dirty_max");
    }

    #[test]
    fn the_observer_hears_dirty_data_in_percent_of_dirty_max() {
        let engine = idle_engine(100 * MIB);
        let heard = Arc::new(Mutex::new(Vec::new()));
        let h = heard.clone();
        engine.set_dirty_observer(Box::new(move |p| h.lock().push(p)));
        drop(engine.hold(30 * MIB).unwrap());
        drop(engine.hold(1).unwrap()); // still 30 %: not told again
        engine.add_dirty(15 * MIB);
        engine.set_dirty_max(50 * MIB);
        assert_eq!(*heard.lock(), [0, 30, 45, 90]);
    }

    /// Syncs wait until the gate opens.
    struct GatedTarget {
        open: std::sync::Mutex<bool>,
        opened: std::sync::Condvar,
    }

    impl SyncTarget for GatedTarget {
        type Error = Fire;
        fn quiesce(&self, _txg: u64) {}
        fn sync(&self, _txg: u64) -> Result<(), Fire> {
            let mut open = self.open.lock().unwrap();
            while !*open {
                open = self.opened.wait(open).unwrap();
            }
            Ok(())
        }
    }

    #[test]
    fn a_writer_over_dirty_max_waits_for_a_commit() {
        let engine = Arc::new(TxgEngine::new(10, TxgConfig::default()));
        let target = Arc::new(GatedTarget { open: std::sync::Mutex::new(false), opened: std::sync::Condvar::new() });
        let thread = engine.start(target.clone());
        engine.set_dirty_max(4 * MIB);
        drop(engine.hold(4 * MIB).unwrap()); // past dirty_sync: txg 11 starts syncing
        for _ in 0..4000 {
            if engine.stats().dirty_syncing == 4 * MIB {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(engine.stats().dirty_syncing, 4 * MIB, "txg 11 is syncing");
        let writer = {
            let engine = engine.clone();
            std::thread::spawn(move || drop(engine.hold(MIB).unwrap()))
        };
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(engine.stats().synced, 10, "the gate still holds txg 11");
        *target.open.lock().unwrap() = true;
        target.opened.notify_all();
        writer.join().unwrap();
        let t = engine.stats();
        assert_eq!(t.dirty_max_waits, 1, "4 + 1 MiB do not fit under 4 MiB");
        assert!(t.synced >= 11, "the commit of txg 11 made room");
        engine.close();
        thread.join().unwrap();
    }

    #[test]
    #[should_panic(expected = "txg numbers only grow")]
    fn committing_a_txg_twice_stops() {
        let mut s = State::new(4);
        s.quiesced(5);
        s.committed(5);
        s.quiesced(6);
        s.committed(5);
    }

    #[test]
    #[should_panic(expected = "txg numbers only grow")]
    fn quiescing_a_txg_that_is_not_open_stops() {
        let mut s = State::new(4);
        s.quiesced(5);
        s.quiesced(5);
    }

    #[test]
    #[should_panic(expected = "still open")]
    fn committing_the_open_txg_stops() {
        let mut s = State::new(4);
        s.committed(5);
    }
}

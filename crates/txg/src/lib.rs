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
//! and re-imported (it resumes from the last committed txg). Dirty bytes of the open and
//! syncing txgs feed the write throttle: a writer waits only while they exceed
//! `dirty_max`.
//!
//! Owns: the txg numbers, the barrier between changes and a quiesce, dirty-data
//! accounting and the write throttle, the sync thread and its timer, and the waits
//! (`wait_synced`) that commits and the intent log's fallback use.
//!
//! Promises: every change made under a `TxgHold` belongs to exactly one txg; the sync of
//! txg N starts only after every hold on N is released, and N+1's sync starts only after
//! N committed; txg numbers only grow (the open txg, the committed one, each strictly
//! after the last: asserted); a writer waits only when dirty data passes `dirty_max`,
//! never for the whole sync; a failed sync suspends the pool (every later hold fails)
//! instead of committing anything partial, and no waiter is left waiting forever.
//!
//! Must never: know what is being synced (the layer above implements `SyncTarget`), or
//! hold its state lock while the target runs.
use std::sync::Arc;
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
    /// Writers wait while open + syncing dirty bytes exceed this.
    pub dirty_max: u64,
    /// A sync starts early once the open txg has this many dirty bytes.
    pub dirty_sync: u64,
}

impl Default for TxgConfig {
    fn default() -> Self {
        TxgConfig { timeout: Duration::from_secs(5), dirty_max: 256 << 20, dirty_sync: 64 << 20 }
    }
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
        }
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
    config: Mutex<TxgConfig>,
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
}

impl TxgEngine {
    /// `last_committed` is the txg of the uberblock the pool was opened at.
    pub fn new(last_committed: u64, config: TxgConfig) -> TxgEngine {
        TxgEngine {
            state: Mutex::new(State::new(last_committed)),
            changed: Condvar::new(),
            barrier: RwLock::new(()),
            config: Mutex::new(config),
        }
    }

    pub fn set_config(&self, config: TxgConfig) {
        *self.config.lock() = config;
        self.changed.notify_all();
    }

    pub fn stats(&self) -> TxgStats {
        let s = self.state.lock();
        TxgStats { open: s.open, synced: s.synced, dirty_open: s.dirty_open, dirty_syncing: s.dirty_syncing }
    }

    /// Joins the open txg for a change that will dirty about `dirty_bytes`. Waits while
    /// dirty data is over the limit (the write throttle).
    pub fn hold(&self, dirty_bytes: u64) -> Result<TxgHold<'_>, TxgError> {
        let dirty_max = self.config.lock().dirty_max;
        {
            let mut s = self.state.lock();
            loop {
                check_usable(&s)?;
                if dirty_bytes == 0
                    || s.dirty_open + s.dirty_syncing + dirty_bytes <= dirty_max
                    || s.dirty_open + s.dirty_syncing == 0
                {
                    break;
                }
                s.wanted = s.wanted.max(s.open);
                self.changed.notify_all();
                self.changed.wait_for(&mut s, Duration::from_millis(100));
            }
        }
        // Recursive read: a thread that already holds may join again without deadlocking
        // against a pending quiesce.
        let guard = self.barrier.read_recursive();
        let mut s = self.state.lock();
        check_usable(&s)?;
        s.dirty_open += dirty_bytes;
        s.holds_in_open += 1;
        let txg = s.open;
        let dirty_sync = self.config.lock().dirty_sync;
        if s.dirty_open >= dirty_sync {
            self.changed.notify_all();
        }
        Ok(TxgHold { txg, _guard: guard })
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
            if s.error.is_some() {
                return;
            }
        }
    }

    /// Sleeps until the open txg should sync; `None` when closing with nothing to do.
    fn wait_for_work(&self) -> Option<u64> {
        let mut s = self.state.lock();
        loop {
            let cfg = self.config.lock().clone();
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

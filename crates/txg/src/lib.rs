//! txg — transaction groups: open → quiescing → syncing → committed.
//!
//! Owns: the txg numbers, the barrier between changes and a quiesce, dirty-data
//! accounting and the write throttle, the sync thread and its timer, and the waits
//! (`wait_synced`) that fsync uses until the ZIL makes it cheaper.
//!
//! Promises: every change made under a `TxgHold` belongs to exactly one txg; the sync of
//! txg N starts only after every hold on N is released, and N+1's sync starts only after
//! N committed; a writer waits only when dirty data passes `dirty_max`, never for the
//! whole sync; a failed sync suspends the pool (every later hold fails) instead of
//! committing anything partial.
//!
//! Must never: know what is being synced. The layer above implements `SyncTarget`.
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock, RwLockReadGuard};

#[derive(Debug, Clone, thiserror::Error)]
pub enum TxgError {
    #[error("pool is suspended after a failed commit: {0}; export and re-import it (nothing committed before the failure is lost)")]
    Suspended(String),
    #[error("pool is closing")]
    Closing,
}

/// What the txg engine drives. Implemented by the pool.
pub trait SyncTarget: Send + Sync {
    /// Called while no hold exists: freeze the open txg's changes as txg `txg`'s.
    fn quiesce(&self, txg: u64);
    /// Write txg `txg` and commit it (uberblock durable) before returning.
    fn sync(&self, txg: u64) -> Result<(), String>;
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
    error: Option<String>,
    closing: bool,
    last_sync: Instant,
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
            state: Mutex::new(State {
                open: last_committed + 1,
                synced: last_committed,
                dirty_open: 0,
                dirty_syncing: 0,
                holds_in_open: 0,
                wanted: 0,
                error: None,
                closing: false,
                last_sync: Instant::now(),
            }),
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
                if dirty_bytes == 0 || s.dirty_open + s.dirty_syncing + dirty_bytes <= dirty_max
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
    pub fn suspended(&self) -> Option<String> {
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

    /// Starts the sync thread. It runs until `close`.
    pub fn start(self: &Arc<Self>, target: Arc<dyn SyncTarget>) -> std::thread::JoinHandle<()> {
        let me = Arc::clone(self);
        std::thread::Builder::new()
            .name("txg_sync".into())
            .spawn(move || me.sync_loop(&*target))
            .expect("spawn txg sync thread")
    }

    /// Stops the sync thread after it commits whatever is open.
    pub fn close(&self) {
        let mut s = self.state.lock();
        s.closing = true;
        s.wanted = s.wanted.max(s.open);
        self.changed.notify_all();
    }

    fn sync_loop(&self, target: &dyn SyncTarget) {
        loop {
            let Some(txg) = self.wait_for_work() else { return };
            // A panic in quiesce or sync is a bug, but it must suspend the pool rather
            // than kill this thread and leave every `wait_synced` caller waiting forever.
            let quiesced = {
                let _exclusive = self.barrier.write();
                let q = catch_panic(|| {
                    target.quiesce(txg);
                    Ok(())
                });
                let mut s = self.state.lock();
                s.open = txg + 1;
                s.dirty_syncing = s.dirty_open;
                s.dirty_open = 0;
                s.holds_in_open = 0;
                q
            };
            let result = quiesced.and_then(|()| catch_panic(|| target.sync(txg)));
            let mut s = self.state.lock();
            match result {
                Ok(()) => s.synced = txg,
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

fn catch_panic(f: impl FnOnce() -> Result<(), String>) -> Result<(), String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown panic".into());
        Err(format!("internal error in the txg sync: {msg}"))
    })
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

//! The sync thread: waits for work (timeout, `dirty_sync`, a waiter, closing), quiesces
//! the open txg under the barrier, syncs it through the target without the barrier, then
//! marks it committed and wakes the waiters.
//!
//! Owns: the thread's loop and timer, closing, and turning the target's error or panic
//! into the failure that suspends the engine.
//!
//! Promises: txg N+1's sync starts only after N committed; a failed or panicking quiesce
//! or sync suspends the engine (nothing after it commits) and wakes every waiter.
//!
//! Must never: hold the state lock while the target runs, or leave a waiter waiting for
//! a commit that will never come.
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{dirty_limit, sync_threshold, SyncFailure, SyncTarget, TxgEngine};

impl TxgEngine {
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
            let bytes = self.state.lock().dirty_syncing;
            let started = Instant::now();
            let result = quiesced.and_then(|()| catch_panic(txg, || target.sync(txg)));
            let took = started.elapsed();
            let mut s = self.state.lock();
            match result {
                Ok(()) => {
                    s.committed(txg);
                    s.syncs.record(bytes, took);
                    if self.tuning.lock().config.pace_to_write_rate {
                        s.rate.observe(bytes, took);
                    }
                }
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
            let full = s.dirty_open >= sync_threshold(&cfg, dirty_limit(&s, &cfg));
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

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;
    use crate::{TxgConfig, TxgError};

    #[derive(Debug, thiserror::Error)]
    #[error("disk on fire")]
    pub(crate) struct Fire;

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
}

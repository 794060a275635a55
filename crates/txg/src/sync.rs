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
        s.quiescing = false;
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
            let asked = Instant::now();
            // New holds wait from here until the quiesce is done (see `TxgEngine::hold`):
            // the barrier alone lets a new shared hold in while any other is held, so
            // overlapping changes would keep the quiesce out for as long as they overlap.
            self.state.lock().quiescing = true;
            let quiesced = {
                let _exclusive = self.barrier.write();
                let q = catch_panic(txg, || {
                    target.quiesce(txg);
                    Ok::<(), std::convert::Infallible>(())
                });
                let mut s = self.state.lock();
                s.quiescing = false;
                s.quiesced(txg);
                s.syncs.record_quiesce(asked.elapsed());
                self.changed.notify_all();
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

    /// Four writers whose holds overlap without a gap (each 5 ms, a busy disk's
    /// read-modify-write): before new holds waited for a pending quiesce, the quiesce got
    /// the barrier only when all four happened to be out at once, which here was never,
    /// and `wait_synced` (a snapshot) never returned.
    #[test]
    fn overlapping_holds_do_not_keep_a_quiesce_out() {
        use std::sync::atomic::AtomicBool;
        use std::sync::mpsc;

        let (engine, _, thread) = engine(0, false);
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..4)
            .map(|i| {
                let (engine, stop) = (engine.clone(), stop.clone());
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(i)); // staggered: always one held
                    while !stop.load(Ordering::Relaxed) {
                        let hold = engine.hold(1).unwrap();
                        std::thread::sleep(Duration::from_millis(5));
                        drop(hold);
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(50));
        let (done, took) = mpsc::channel();
        let waiter = {
            let engine = engine.clone();
            std::thread::spawn(move || {
                for _ in 0..5 {
                    let started = Instant::now();
                    let txg = engine.hold(0).unwrap().txg;
                    engine.wait_synced(txg).unwrap();
                    done.send(started.elapsed()).unwrap();
                }
            })
        };
        for i in 0..5 {
            let t = took.recv_timeout(Duration::from_secs(10));
            assert!(
                matches!(t, Ok(d) if d < Duration::from_secs(1)),
                "commit {i} asked for by wait_synced: {t:?} (overlapping holds kept the quiesce out)"
            );
        }
        stop.store(true, Ordering::Relaxed);
        for w in writers {
            w.join().unwrap();
        }
        waiter.join().unwrap();
        let stats = engine.stats();
        assert!(stats.max_quiesce_us < 1_000_000, "{stats:?}");
        engine.close();
        thread.join().unwrap();
    }

    /// A thread that already holds takes another hold while a quiesce waits for it: it
    /// must not wait for that quiesce (which waits for its first hold).
    #[test]
    fn a_second_hold_on_a_holding_thread_does_not_wait_for_the_quiesce() {
        let (engine, _, thread) = engine(0, false);
        let first = engine.hold(1).unwrap();
        let waiter = {
            let engine = engine.clone();
            let txg = first.txg;
            std::thread::spawn(move || engine.wait_synced(txg))
        };
        // Until the sync thread is waiting for the barrier (quiescing).
        let deadline = Instant::now() + Duration::from_secs(10);
        while !engine.state.lock().quiescing {
            assert!(Instant::now() < deadline, "the quiesce never started");
            std::thread::sleep(Duration::from_millis(1));
        }
        let second = engine.hold(1).unwrap();
        assert_eq!(second.txg, first.txg, "the second hold joins the same txg");
        drop(second);
        drop(first);
        waiter.join().unwrap().unwrap();
        engine.close();
        thread.join().unwrap();
    }
}

//! When a freed block may be reused: a grace period over the reads that may still use it.
//!
//! A reader finds a block pointer in a tree, then reads the block with no lock held. A txg
//! that rewrote that block frees the old one when it commits; before the space is handed
//! out again, every read that might still use the old block must have ended. Readers open
//! a *section* (`reading`) before they let go of what told them the pointer (the object's
//! lock, or a root they read inside the section); the txg commit waits for the sections
//! open when it asks (`wait_for_readers`), then releases its frees.
//!
//! Why not a reader-writer lock (as before). A writer on a lock waits for a moment with no
//! reader at all. Readers must be able to open a section while they already hold one (a
//! walk that reads objects), so they could not queue behind a waiting writer, and on a
//! disk saturated with reads there is always a reader: the commit waited for a gap, 20 to
//! 50 s on the lab's paced disk with four PostgreSQL readers, holding every writer at
//! `dirty_max` meanwhile (0 TPS). Here the commit waits only for sections older than its
//! call, and new sections never wait, as RCU's grace periods.
//!
//! How. Sections are counted by the parity of the epoch they opened in. `wait_for_readers`
//! moves the epoch on and waits for the old parity's count to drain. A reader increments
//! its parity's count and checks the epoch again: if it moved meanwhile, it moves to the
//! new parity, so a wait that saw the old count at zero never misses a section that then
//! reads an old pointer (SRCU's check). All of this is SeqCst: each side writes one word
//! and then reads the other's.
//!
//! Owns: the epoch, the section counts, the wait.
//!
//! Promises: `wait_for_readers` returns only after every section opened before it was
//! called has ended, and is never held up by a section opened after; a section opens
//! without waiting, also inside another one.
//!
//! Must never: make a reader wait, or let `wait_for_readers` return while a section that
//! was open at its call is still open.
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

#[derive(Default)]
pub struct Reclaim {
    epoch: AtomicU64,
    /// Open sections by the parity of the epoch they opened in.
    open: [AtomicU64; 2],
    /// A `wait_for_readers` is waiting: the last section of a parity to end wakes it.
    waiting: AtomicBool,
    /// One grace period at a time (the sync thread's, and a test's).
    serial: Mutex<()>,
    drained: Mutex<()>,
    wake: Condvar,
}

/// An open read section (see the module header); it ends when dropped.
#[must_use = "the section ends when this is dropped"]
pub struct Reading<'a> {
    reclaim: &'a Reclaim,
    parity: usize,
}

impl Reclaim {
    pub fn new() -> Self {
        Self::default()
    }

    /// Opens a read section: no block a tree pointed to when it opened is reused before it
    /// ends. Never waits.
    pub fn reading(&self) -> Reading<'_> {
        let mut epoch = self.epoch.load(SeqCst);
        loop {
            let parity = (epoch & 1) as usize;
            self.open[parity].fetch_add(1, SeqCst);
            let now = self.epoch.load(SeqCst);
            if now == epoch {
                return Reading { reclaim: self, parity };
            }
            // A grace period began between the two loads: it may already have seen this
            // parity drained, so the section counts under the new one.
            self.end(parity);
            epoch = now;
        }
    }

    /// Returns once every section opened before this call has ended. Sections opened
    /// meanwhile do not hold it up.
    pub fn wait_for_readers(&self) {
        let _serial = self.serial.lock();
        let old = (self.epoch.fetch_add(1, SeqCst) & 1) as usize;
        if self.open[old].load(SeqCst) == 0 {
            return;
        }
        self.waiting.store(true, SeqCst);
        let mut drained = self.drained.lock();
        while self.open[old].load(SeqCst) != 0 {
            // The timeout only bounds a missed wake-up; `end` wakes it.
            self.wake.wait_for(&mut drained, Duration::from_millis(100));
        }
        self.waiting.store(false, SeqCst);
    }

    fn end(&self, parity: usize) {
        let before = self.open[parity].fetch_sub(1, SeqCst);
        assert!(before > 0, "a reclaim section ended twice");
        if before == 1 && self.waiting.load(SeqCst) {
            let _drained = self.drained.lock();
            self.wake.notify_all();
        }
    }
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        self.reclaim.end(self.parity);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::sync::Arc;
    use std::thread;

    /// Waits up to `secs` for `rx`, failing with `what` otherwise: a hang is a failure here.
    fn within<T>(rx: &mpsc::Receiver<T>, secs: u64, what: &str) -> T {
        rx.recv_timeout(Duration::from_secs(secs)).unwrap_or_else(|_| panic!("{what}"))
    }

    /// Waits until a `wait_for_readers` is under way on `r` (it has moved the epoch past
    /// `epoch` and found readers).
    fn until_waiting(r: &Reclaim, epoch: u64) {
        for _ in 0..10_000 {
            if r.epoch.load(SeqCst) > epoch && r.waiting.load(SeqCst) {
                return;
            }
            thread::sleep(Duration::from_millis(1));
        }
        panic!("wait_for_readers never began waiting");
    }

    #[test]
    fn a_wait_outlasts_every_section_opened_before_it() {
        let r = Arc::new(Reclaim::new());
        let section = r.reading();
        let (done_tx, done_rx) = mpsc::channel();
        let waiter = {
            let r = r.clone();
            thread::spawn(move || {
                r.wait_for_readers();
                done_tx.send(()).expect("test alive");
            })
        };
        until_waiting(&r, 0);
        assert!(
            done_rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "the wait returned while a section opened before it was still open"
        );
        drop(section);
        within(&done_rx, 10, "the wait did not return once the old section ended");
        waiter.join().expect("waiter");
    }

    #[test]
    fn sections_opened_after_a_wait_began_never_hold_it_up() {
        // A relay of readers: there is always a section open (each opens before the
        // previous one ends), as on a disk saturated with reads. A reader-writer lock
        // whose readers may re-enter waited here forever.
        let r = Arc::new(Reclaim::new());
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let relay = {
            let r = r.clone();
            thread::spawn(move || {
                let mut held = r.reading();
                while stop_rx.try_recv().is_err() {
                    let next = r.reading();
                    thread::sleep(Duration::from_millis(1));
                    held = next;
                }
                drop(held);
            })
        };
        thread::sleep(Duration::from_millis(20));
        let (done_tx, done_rx) = mpsc::channel();
        let waiter = {
            let r = r.clone();
            thread::spawn(move || {
                for _ in 0..5 {
                    r.wait_for_readers();
                }
                done_tx.send(()).expect("test alive");
            })
        };
        within(&done_rx, 30, "a txg's wait for readers was starved by readers that kept coming");
        stop_tx.send(()).expect("relay alive");
        relay.join().expect("relay");
        waiter.join().expect("waiter");
    }

    #[test]
    fn a_section_opens_at_once_while_a_wait_is_pending() {
        // With a fair reader-writer lock a reader queues behind the waiting writer, which
        // waits for the first reader: a walk that opens a section inside its own would
        // deadlock, and every reader would stop for the length of the oldest read.
        let r = Arc::new(Reclaim::new());
        let outer = r.reading();
        let waiter = {
            let r = r.clone();
            thread::spawn(move || r.wait_for_readers())
        };
        until_waiting(&r, 0);
        let (tx, rx) = mpsc::channel();
        let reader = {
            let r = r.clone();
            thread::spawn(move || {
                let _s = r.reading();
                tx.send(()).expect("test alive");
            })
        };
        within(&rx, 10, "a section waited for a pending wait_for_readers");
        reader.join().expect("reader");
        drop(outer);
        waiter.join().expect("waiter");
    }

    #[test]
    fn concurrent_sections_and_waits_keep_the_counts_exact() {
        let r = Arc::new(Reclaim::new());
        let readers: Vec<_> = (0..4)
            .map(|_| {
                let r = r.clone();
                thread::spawn(move || {
                    for _ in 0..20_000 {
                        let _s = r.reading();
                    }
                })
            })
            .collect();
        for _ in 0..200 {
            r.wait_for_readers();
        }
        for t in readers {
            t.join().expect("reader");
        }
        assert_eq!([r.open[0].load(SeqCst), r.open[1].load(SeqCst)], [0, 0], "a section was lost or counted twice");
    }
}

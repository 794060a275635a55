//! Tests of the admission rule: priority between classes, sync operations, limits, the
//! idle fast path and the async-write ramp.

use std::sync::atomic::AtomicUsize;
use std::sync::{mpsc, Arc};

use super::*;

fn config(limits: [(u32, u32); IoClass::COUNT]) -> QueueConfig {
    QueueConfig {
        limits: limits.map(|(min_active, max_active)| ClassLimits { min_active, max_active }),
        ..QueueConfig::default()
    }
}

/// Waits (bounded) until `cond` holds: the tests order events by state, not time.
fn until(what: &str, cond: impl Fn() -> bool) {
    for _ in 0..4000 {
        if cond() {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("timed out waiting until {what}");
}

/// Threads that each take a permit, report it, and hold it until told to finish.
struct Issuer {
    finish: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

fn issue(queue: &Arc<IoQueue>, class: IoClass, label: &'static str, order: &Arc<Mutex<Vec<&'static str>>>) -> Issuer {
    let (finish, wait) = mpsc::channel::<()>();
    let (queue, order) = (queue.clone(), order.clone());
    let thread = std::thread::spawn(move || {
        let _permit = queue.admit(class, 4096);
        order.lock().push(label);
        let _ = wait.recv();
    });
    Issuer { finish, thread }
}

impl Issuer {
    fn finish(self) {
        self.finish.send(()).unwrap();
        self.thread.join().unwrap();
    }
}

#[test]
fn a_sync_write_is_admitted_before_queued_async_writes() {
    // Async writes: one at a time, so the second and third queue behind the first.
    let queue = Arc::new(IoQueue::new(config([(10, 10), (10, 10), (1, 3), (1, 1), (1, 3)])));
    let order = Arc::new(Mutex::new(Vec::new()));
    let first = issue(&queue, IoClass::AsyncWrite, "async 1", &order);
    until("the first async write is in flight", || queue.active(IoClass::AsyncWrite) == 1);
    let queued: Vec<Issuer> =
        ["async 2", "async 3"].into_iter().map(|label| issue(&queue, IoClass::AsyncWrite, label, &order)).collect();
    until("both async writes wait", || *queue.waiters.lock() == [0, 0, 0, 2, 0]);
    let sync = issue(&queue, IoClass::SyncWrite, "sync", &order);
    until("the sync write is in flight", || queue.active(IoClass::SyncWrite) == 1);
    assert_eq!(*order.lock(), ["async 1", "sync"]);
    first.finish();
    until("one queued async write is admitted", || order.lock().len() == 3);
    sync.finish();
    // Whichever of the two was admitted first must end before the other can start.
    for issuer in &queued {
        issuer.finish.send(()).unwrap();
    }
    for issuer in queued {
        issuer.thread.join().unwrap();
    }
    let got = order.lock().clone();
    assert_eq!(&got[..2], ["async 1", "sync"], "{got:?}");
    let s = queue.stats()[IoClass::AsyncWrite.index()];
    assert_eq!((s.issued, s.waited), (3, 2));
    assert_eq!(queue.stats()[IoClass::SyncWrite.index()].waited, 0);
}

#[test]
fn async_writes_beyond_their_minimum_wait_while_sync_io_is_in_flight() {
    // Async writes: 1 at once always, up to 3 on a device with no sync I/O.
    let mut cfg = config([(10, 10), (10, 10), (1, 3), (1, 3), (1, 3)]);
    cfg.async_write_min_dirty_percent = 0;
    cfg.async_write_max_dirty_percent = 1;
    let queue = Arc::new(IoQueue::new(cfg));
    queue.set_dirty_percent(100);
    let order = Arc::new(Mutex::new(Vec::new()));
    let read = issue(&queue, IoClass::SyncRead, "read", &order);
    until("the read is in flight", || queue.active(IoClass::SyncRead) == 1);
    let a1 = issue(&queue, IoClass::AsyncWrite, "async 1", &order);
    until("async 1 is in flight (its minimum)", || queue.active(IoClass::AsyncWrite) == 1);
    let a2 = issue(&queue, IoClass::AsyncWrite, "async 2", &order);
    until("async 2 waits: above the minimum, a read in flight", || {
        queue.waiters.lock()[IoClass::AsyncWrite.index()] == 1
    });
    read.finish();
    until("async 2 goes once the read ended", || queue.active(IoClass::AsyncWrite) == 2);
    a1.finish();
    a2.finish();
    assert_eq!(*order.lock(), ["read", "async 1", "async 2"]);
}

#[test]
fn a_sync_operation_holds_async_writes_to_their_minimum_between_its_ios() {
    let mut cfg = config([(10, 10), (10, 10), (1, 3), (1, 3), (1, 3)]);
    cfg.async_write_min_dirty_percent = 0;
    cfg.async_write_max_dirty_percent = 1;
    let queue = Arc::new(IoQueue::new(cfg));
    queue.set_dirty_percent(100);
    let order = Arc::new(Mutex::new(Vec::new()));
    // An fsync wrote its log block and has not flushed yet: no sync I/O in flight.
    queue.begin_sync();
    let a1 = issue(&queue, IoClass::AsyncWrite, "async 1", &order);
    until("async 1 in flight (its minimum)", || queue.active(IoClass::AsyncWrite) == 1);
    let a2 = issue(&queue, IoClass::AsyncWrite, "async 2", &order);
    until("async 2 waits for the fsync to end", || queue.waiters.lock()[IoClass::AsyncWrite.index()] == 1);
    // Sync I/O itself is not held back.
    drop(queue.admit(IoClass::SyncWrite, 4096));
    drop(queue.admit(IoClass::SyncRead, 4096));
    queue.end_sync();
    until("async 2 goes once the fsync ended", || queue.active(IoClass::AsyncWrite) == 2);
    a1.finish();
    a2.finish();
    assert_eq!(queue.syncs_under_way(), 0);
}

#[test]
fn a_waiting_higher_class_holds_back_lower_classes_above_their_minimum() {
    // One sync read at a time; a second waits, and its waiting keeps prefetch at 1.
    let queue = Arc::new(IoQueue::new(config([(1, 1), (10, 10), (1, 3), (2, 10), (1, 3)])));
    let order = Arc::new(Mutex::new(Vec::new()));
    let r1 = issue(&queue, IoClass::SyncRead, "read 1", &order);
    until("read 1 in flight", || queue.active(IoClass::SyncRead) == 1);
    let r2 = issue(&queue, IoClass::SyncRead, "read 2", &order);
    until("read 2 waits", || queue.waiters.lock()[IoClass::SyncRead.index()] == 1);
    let p1 = issue(&queue, IoClass::AsyncRead, "prefetch 1", &order);
    until("prefetch 1 in flight (its minimum)", || queue.active(IoClass::AsyncRead) == 1);
    let p2 = issue(&queue, IoClass::AsyncRead, "prefetch 2", &order);
    until("prefetch 2 waits", || queue.waiters.lock()[IoClass::AsyncRead.index()] == 1);
    r1.finish();
    until("read 2 admitted", || order.lock().contains(&"read 2"));
    r2.finish();
    p1.finish();
    until("prefetch 2 admitted", || order.lock().contains(&"prefetch 2"));
    p2.finish();
    let got = order.lock().clone();
    assert_eq!(got, ["read 1", "prefetch 1", "read 2", "prefetch 2"]);
}

#[test]
fn each_class_respects_its_max_active() {
    let cfg = config([(2, 3), (1, 2), (1, 2), (1, 4), (1, 1)]);
    let queue = Arc::new(IoQueue::new(cfg.clone()));
    queue.set_dirty_percent(100);
    let peaks: Arc<[AtomicUsize; IoClass::COUNT]> = Arc::new(Default::default());
    let in_flight: Arc<[AtomicUsize; IoClass::COUNT]> = Arc::new(Default::default());
    let threads: Vec<_> = (0..40)
        .map(|t| {
            let class = IoClass::ALL[t % IoClass::COUNT];
            let (queue, peaks, in_flight) = (queue.clone(), peaks.clone(), in_flight.clone());
            std::thread::spawn(move || {
                for _ in 0..50 {
                    let _permit = queue.admit(class, 1);
                    let now = in_flight[class.index()].fetch_add(1, Ordering::SeqCst) + 1;
                    peaks[class.index()].fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_micros(200));
                    in_flight[class.index()].fetch_sub(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    for class in IoClass::ALL {
        let peak = peaks[class.index()].load(Ordering::SeqCst) as u32;
        let max = cfg.limits(class).max_active;
        assert!((1..=max).contains(&peak), "{}: {peak} in flight, max {max}", class.name());
        assert_eq!(queue.stats()[class.index()].issued, 8 * 50);
        assert_eq!(queue.active(class), 0);
    }
}

#[test]
fn an_idle_device_admits_without_waiting() {
    let queue = IoQueue::default();
    for class in IoClass::ALL {
        drop(queue.admit(class, 16384));
    }
    let stats = queue.stats();
    assert!(stats.iter().all(|s| s.issued == 1 && s.waited == 0 && s.bytes == 16384));
}

#[test]
fn the_async_write_limit_ramps_with_dirty_data_as_zfs_does() {
    let cfg = QueueConfig::default();
    assert_eq!(async_write_limit(&cfg, 0), 2);
    assert_eq!(async_write_limit(&cfg, 30), 2);
    assert_eq!(async_write_limit(&cfg, 45), 6);
    assert_eq!(async_write_limit(&cfg, 60), 10);
    assert_eq!(async_write_limit(&cfg, 150), 10);
    let limits: Vec<u32> = (0..=100).map(|p| async_write_limit(&cfg, p)).collect();
    assert!(limits.windows(2).all(|w| w[0] <= w[1]), "monotonic");
}

#[test]
#[should_panic(expected = "scrub limits")]
fn a_class_without_a_minimum_is_refused() {
    IoQueue::new(config([(1, 1), (1, 1), (1, 1), (1, 1), (0, 1)]));
}

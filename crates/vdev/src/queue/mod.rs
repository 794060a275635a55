//! Admission of I/O to one leaf device by priority class, as ZFS's vdev_queue.
//!
//! Theory of operation. Every read or write of a leaf names its class (`IoClass`), in
//! priority order: sync read (a demand read someone waits for), sync write (intent-log
//! blocks, blocks an fsync writes in place, labels and uberblocks), async read
//! (read-ahead), async write (a txg's blocks), scrub (scrub and resilver). Before its
//! I/O, the caller asks the leaf's `IoQueue` for a permit, issues the I/O on its own
//! thread, and drops the permit. There are no worker threads: on an idle device a permit
//! costs one compare-and-swap — no lock, no allocation, no thread hand-off. A class is
//! admitted
//!
//! * always while it has fewer than `min_active` I/Os in flight, so every class makes
//!   progress;
//! * never while it has its limit in flight: `max_active`, except for async writes,
//!   whose limit grows with dirty data from `min_active` to `max_active`
//!   (`async_write_limit`, ZFS's vdev_queue_max_async_writes);
//! * in between, only while no class of higher priority has I/O in flight or waiting,
//!   and — for the classes below sync write — while no sync operation is under way
//!   (`begin_sync`: an fsync, from its first write to its flush).
//!
//! The last rule is stricter than ZFS's, which only looks at queued I/O. tarn's callers
//! issue their own I/O, so a sync I/O under its limit never waits here: it waits in the
//! device's own queue, which on a cloud volume, a loop device or the lab's pacer serves
//! in arrival order. Keeping lower classes out of the device while sync I/O is there is
//! the only way to keep that wait short. That holds from an fsync's first write to its
//! flush: the flush is not an I/O of any class (a barrier), so without `begin_sync` the
//! async writes held back while the log block was in flight would be let in the moment
//! it completed — just ahead of the flush.
//!
//! Owns: the per-class counts of I/O in flight on one leaf, the admission rule, the
//! async-write limit, and the per-class counters (issued, bytes, waited, time waiting,
//! time in the device).
//!
//! Promises: a class never has more than its limit in flight; a class below its minimum
//! is admitted at once; a class above its minimum is not admitted while a higher class
//! has I/O in flight or waiting (or, below sync write, while a sync operation is under
//! way); a waiter is woken whenever a change could admit it.
//!
//! Must never: do I/O itself, hold its lock while a caller's I/O runs, or take its lock
//! on the way in when the device is idle.
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// The priority classes, highest first (ZFS's zio_priority_t order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IoClass {
    /// A demand read: a caller waits for the bytes (a page read, an import walk, log
    /// replay).
    SyncRead,
    /// A write an fsync waits for: intent-log blocks, blocks written in place for the
    /// log, labels and uberblocks.
    SyncWrite,
    /// Read-ahead: nobody waits for it yet.
    AsyncRead,
    /// A txg's blocks, written by the sync thread.
    AsyncWrite,
    /// Scrub and resilver: verifying and repairing in the background.
    Scrub,
}

impl IoClass {
    pub const COUNT: usize = 5;
    /// Every class, highest priority first.
    pub const ALL: [IoClass; IoClass::COUNT] =
        [IoClass::SyncRead, IoClass::SyncWrite, IoClass::AsyncRead, IoClass::AsyncWrite, IoClass::Scrub];

    /// The name counters are published under (`sync_read_issued` …).
    pub fn name(self) -> &'static str {
        match self {
            IoClass::SyncRead => "sync_read",
            IoClass::SyncWrite => "sync_write",
            IoClass::AsyncRead => "async_read",
            IoClass::AsyncWrite => "async_write",
            IoClass::Scrub => "scrub",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    /// The class of the write that repairs a bad copy a read of this class found: the
    /// reader waits for the repair, so it keeps the reader's urgency.
    pub fn repair(self) -> IoClass {
        match self {
            IoClass::SyncRead => IoClass::SyncWrite,
            IoClass::AsyncRead => IoClass::AsyncWrite,
            other => other,
        }
    }
}

/// How many I/Os of one class may be in flight on one leaf.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassLimits {
    /// Admitted at once below this, whatever else is in flight (at least 1).
    pub min_active: u32,
    /// Never more than this in flight (at most `MAX_ACTIVE`).
    pub max_active: u32,
}

/// The most I/Os of one class a queue can count in flight.
pub const MAX_ACTIVE: u32 = 255;

/// The limits of every class, and where the async-write limit ramps with dirty data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueConfig {
    /// Indexed by `IoClass::index`.
    pub limits: [ClassLimits; IoClass::COUNT],
    /// Below this percent of `dirty_max`, async writes are held to their minimum.
    pub async_write_min_dirty_percent: u32,
    /// From this percent of `dirty_max` on, async writes may use their maximum.
    pub async_write_max_dirty_percent: u32,
}

impl Default for QueueConfig {
    /// OpenZFS's defaults (zfs_vdev_{class}_{min,max}_active and
    /// zfs_vdev_async_write_active_{min,max}_dirty_percent). Sync classes get 10 at
    /// once: each is a caller waiting, and a device serves 10 small I/Os about as fast
    /// as one. Read-ahead gets 1 to 3: it is a hint. Async writes get 2 while little is
    /// dirty, so they stay out of sync I/O's way, and up to 10 as dirty data nears the
    /// throttle, when the txg must drain faster. Scrub and resilver get 1 to 3, and above
    /// 1 only on an otherwise idle device (the admission rule).
    fn default() -> Self {
        let l = |min_active, max_active| ClassLimits { min_active, max_active };
        QueueConfig {
            limits: [l(10, 10), l(10, 10), l(1, 3), l(2, 10), l(1, 3)],
            async_write_min_dirty_percent: 30,
            async_write_max_dirty_percent: 60,
        }
    }
}

impl QueueConfig {
    pub fn limits(&self, class: IoClass) -> ClassLimits {
        self.limits[class.index()]
    }

    /// Panics unless every class has 1 ≤ min ≤ max ≤ `MAX_ACTIVE` and the dirty
    /// percents are ordered: a queue built on a broken config could stall a class.
    fn check(&self) {
        for class in IoClass::ALL {
            let l = self.limits(class);
            assert!(
                1 <= l.min_active && l.min_active <= l.max_active && l.max_active <= MAX_ACTIVE,
                "{} limits must satisfy 1 <= min <= max <= {MAX_ACTIVE}: {l:?}",
                class.name()
            );
        }
        assert!(
            self.async_write_min_dirty_percent < self.async_write_max_dirty_percent,
            "async-write dirty percents must grow"
        );
    }
}

/// How many async writes may be in flight when dirty data is `dirty_percent` of
/// `dirty_max`: the minimum up to `async_write_min_dirty_percent`, the maximum from
/// `async_write_max_dirty_percent` on, linear in between (ZFS's
/// vdev_queue_max_async_writes).
pub fn async_write_limit(config: &QueueConfig, dirty_percent: u32) -> u32 {
    let ClassLimits { min_active, max_active } = config.limits(IoClass::AsyncWrite);
    let (lo, hi) = (config.async_write_min_dirty_percent, config.async_write_max_dirty_percent);
    if dirty_percent <= lo {
        return min_active;
    }
    if dirty_percent >= hi {
        return max_active;
    }
    min_active + (dirty_percent - lo) * (max_active - min_active) / (hi - lo)
}

/// What one class did on one leaf (or summed over leaves).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ClassStats {
    /// I/Os admitted.
    pub issued: u64,
    /// Bytes those I/Os moved.
    pub bytes: u64,
    /// I/Os that had to wait for admission.
    pub waited: u64,
    /// Time spent waiting for admission, all I/Os together.
    pub wait_us: u64,
    /// Time from admission to completion (in the device), all I/Os together.
    pub device_us: u64,
}

impl ClassStats {
    pub fn add(&mut self, other: &ClassStats) {
        self.issued += other.issued;
        self.bytes += other.bytes;
        self.waited += other.waited;
        self.wait_us += other.wait_us;
        self.device_us += other.device_us;
    }

    /// Mean wait for admission over every I/O issued.
    pub fn avg_wait_us(&self) -> u64 {
        self.wait_us.checked_div(self.issued).unwrap_or(0)
    }

    /// Mean time in the device over every I/O issued.
    pub fn avg_device_us(&self) -> u64 {
        self.device_us.checked_div(self.issued).unwrap_or(0)
    }
}

#[derive(Default)]
struct ClassCounters {
    issued: AtomicU64,
    bytes: AtomicU64,
    waited: AtomicU64,
    wait_ns: AtomicU64,
    device_ns: AtomicU64,
}

/// The state word: 8 bits of in-flight count per class (bits 8·i..8·i+8), one "has
/// waiters" bit per class (bit 40 + i), and the sync operations under way (bits 48..64).
/// One word, so the fast path is one CAS.
const ACTIVE_BITS: u32 = 8;
const WAIT_SHIFT: u32 = ACTIVE_BITS * IoClass::COUNT as u32;
const WAIT_MASK: u64 = ((1 << IoClass::COUNT) - 1) << WAIT_SHIFT;
const SYNC_SHIFT: u32 = 48;
const SYNC_ONE: u64 = 1 << SYNC_SHIFT;

fn syncs_of(state: u64) -> u64 {
    state >> SYNC_SHIFT
}

fn active_of(state: u64, class: IoClass) -> u32 {
    ((state >> (ACTIVE_BITS * class.index() as u32)) & 0xff) as u32
}

fn one(class: IoClass) -> u64 {
    1 << (ACTIVE_BITS * class.index() as u32)
}

fn wait_bit(class: IoClass) -> u64 {
    1 << (WAIT_SHIFT + class.index() as u32)
}

/// The admission gate of one leaf device.
pub struct IoQueue {
    config: QueueConfig,
    /// The async-write limit for the current dirty data (`async_write_limit`).
    async_write_max: AtomicU32,
    /// In-flight counts and waiter bits (see `ACTIVE_BITS`).
    state: AtomicU64,
    /// Waiters per class. Held only on the slow path, never across I/O.
    waiters: Mutex<[u32; IoClass::COUNT]>,
    wake: Condvar,
    counters: [ClassCounters; IoClass::COUNT],
}

/// Leave to issue one I/O; dropping it ends the I/O.
#[must_use = "the I/O is in flight only while the permit lives"]
pub struct IoPermit<'a> {
    queue: &'a IoQueue,
    class: IoClass,
    admitted: Instant,
}

impl Drop for IoPermit<'_> {
    fn drop(&mut self) {
        self.queue.finish(self.class, self.admitted);
    }
}

impl Default for IoQueue {
    fn default() -> Self {
        IoQueue::new(QueueConfig::default())
    }
}

impl IoQueue {
    /// Panics on a config that could stall a class (see `QueueConfig::check`).
    pub fn new(config: QueueConfig) -> IoQueue {
        config.check();
        let async_write_max = async_write_limit(&config, 0);
        IoQueue {
            config,
            async_write_max: AtomicU32::new(async_write_max),
            state: AtomicU64::new(0),
            waiters: Mutex::new([0; IoClass::COUNT]),
            wake: Condvar::new(),
            counters: Default::default(),
        }
    }

    pub fn config(&self) -> &QueueConfig {
        &self.config
    }

    /// Waits until an I/O of `class` moving `bytes` may be issued (see the module
    /// header), and returns the permit that ends it when dropped.
    pub fn admit(&self, class: IoClass, bytes: u64) -> IoPermit<'_> {
        if !self.try_take(class) {
            self.admit_slowly(class);
        }
        let c = &self.counters[class.index()];
        c.issued.fetch_add(1, Ordering::Relaxed);
        c.bytes.fetch_add(bytes, Ordering::Relaxed);
        IoPermit { queue: self, class, admitted: Instant::now() }
    }

    /// How many I/Os of `class` may be in flight now.
    pub fn limit(&self, class: IoClass) -> u32 {
        match class {
            IoClass::AsyncWrite => self.async_write_max.load(Ordering::Relaxed),
            _ => self.config.limits(class).max_active,
        }
    }

    /// I/Os of `class` in flight now.
    pub fn active(&self, class: IoClass) -> u32 {
        active_of(self.state.load(Ordering::Acquire), class)
    }

    /// Sets the async-write limit for dirty data at `dirty_percent` of `dirty_max`.
    pub fn set_dirty_percent(&self, dirty_percent: u32) {
        let limit = async_write_limit(&self.config, dirty_percent);
        let before = self.async_write_max.swap(limit, Ordering::AcqRel);
        if limit > before && self.state.load(Ordering::Acquire) & WAIT_MASK != 0 {
            self.wake_waiters();
        }
    }

    /// The counters of every class, indexed by `IoClass::index`.
    pub fn stats(&self) -> [ClassStats; IoClass::COUNT] {
        std::array::from_fn(|i| {
            let c = &self.counters[i];
            let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
            ClassStats {
                issued: get(&c.issued),
                bytes: get(&c.bytes),
                waited: get(&c.waited),
                wait_us: get(&c.wait_ns) / 1000,
                device_us: get(&c.device_ns) / 1000,
            }
        })
    }

    /// The admission rule of the module header, on one state word.
    fn may_issue(&self, state: u64, class: IoClass) -> bool {
        let active = active_of(state, class);
        if active >= self.limit(class) {
            return false;
        }
        if active < self.config.limits(class).min_active {
            return true;
        }
        let sync_under_way = class > IoClass::SyncWrite && syncs_of(state) > 0;
        !sync_under_way
            && IoClass::ALL[..class.index()]
                .iter()
                .all(|&higher| active_of(state, higher) == 0 && state & wait_bit(higher) == 0)
    }

    /// A sync operation begins on this device (an fsync: its log writes, then a flush):
    /// until `end_sync`, the classes below sync write stay at their minimum, as if a
    /// sync write were in flight between its I/Os too.
    pub fn begin_sync(&self) {
        let before = self.state.fetch_add(SYNC_ONE, Ordering::AcqRel);
        assert!(syncs_of(before) < (1 << (64 - SYNC_SHIFT)) - 1, "too many sync operations under way on one device");
    }

    /// Ends a sync operation `begin_sync` began.
    pub fn end_sync(&self) {
        let before = self.state.fetch_sub(SYNC_ONE, Ordering::AcqRel);
        assert!(syncs_of(before) > 0, "a sync operation ended twice");
        if before & WAIT_MASK != 0 {
            self.wake_waiters();
        }
    }

    /// Sync operations under way (`begin_sync` not yet ended).
    pub fn syncs_under_way(&self) -> u64 {
        syncs_of(self.state.load(Ordering::Acquire))
    }

    /// Counts one more I/O of `class` in flight if the rule admits it now.
    fn try_take(&self, class: IoClass) -> bool {
        let mut state = self.state.load(Ordering::Acquire);
        loop {
            if !self.may_issue(state, class) {
                return false;
            }
            match self.state.compare_exchange_weak(state, state + one(class), Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(now) => state = now,
            }
        }
    }

    /// Waits for admission. The waiter bit is set before the rule is tried again under
    /// the lock, so `finish` either ran before the retry (and the retry sees its
    /// effect) or sees the bit and wakes us after we sleep (it takes the lock first).
    fn admit_slowly(&self, class: IoClass) {
        let started = Instant::now();
        let i = class.index();
        let mut waiters = self.waiters.lock();
        waiters[i] += 1;
        self.state.fetch_or(wait_bit(class), Ordering::AcqRel);
        while !self.try_take(class) {
            self.wake.wait(&mut waiters);
        }
        waiters[i] -= 1;
        if waiters[i] == 0 {
            self.state.fetch_and(!wait_bit(class), Ordering::AcqRel);
            // Lower classes held back by this class's waiting may go now.
            self.wake.notify_all();
        }
        drop(waiters);
        let c = &self.counters[i];
        c.waited.fetch_add(1, Ordering::Relaxed);
        c.wait_ns.fetch_add(nanos(started.elapsed()), Ordering::Relaxed);
    }

    fn finish(&self, class: IoClass, admitted: Instant) {
        self.counters[class.index()].device_ns.fetch_add(nanos(admitted.elapsed()), Ordering::Relaxed);
        let before = self.state.fetch_sub(one(class), Ordering::AcqRel);
        debug_assert!(active_of(before, class) > 0, "an I/O ended twice");
        if before & WAIT_MASK != 0 {
            self.wake_waiters();
        }
    }

    fn wake_waiters(&self) {
        let _waiters = self.waiters.lock();
        self.wake.notify_all();
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
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

    fn issue(
        queue: &Arc<IoQueue>,
        class: IoClass,
        label: &'static str,
        order: &Arc<Mutex<Vec<&'static str>>>,
    ) -> Issuer {
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
}

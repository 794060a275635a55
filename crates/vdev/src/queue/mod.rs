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
//!
//! Modules: this one (the gate: `IoQueue`, its permits and the admission rule),
//! `class` (the classes, their limits, the async-write ramp), `state` (the one atomic
//! word the fast path works on), `stats` (the per-class counters).
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

mod class;
mod state;
mod stats;

pub use class::{async_write_limit, ClassLimits, IoClass, QueueConfig, MAX_ACTIVE};
use state::{active_of, one, syncs_of, wait_bit, SYNC_ONE, SYNC_SHIFT, WAIT_MASK};
use stats::ClassCounters;
pub use stats::ClassStats;

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
        std::array::from_fn(|i| self.counters[i].snapshot())
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
mod tests;

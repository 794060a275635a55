//! The I/O priority classes of a leaf device, highest first (ZFS's zio_priority_t), each
//! one's in-flight limits, and the async-write limit that ramps with dirty data (ZFS's
//! vdev_queue_max_async_writes).
//!
//! Owns: the class order, OpenZFS's default limits, and the check that a config cannot
//! stall a class.
//!
//! Promises: `QueueConfig::check` refuses (panics on) limits outside 1 ≤ min ≤ max ≤
//! `MAX_ACTIVE` or dirty percents that do not grow; the async-write limit stays within
//! its class's min and max.
//!
//! Must never: admit or count I/O (the gate in `queue` does).

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
    pub(super) fn check(&self) {
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

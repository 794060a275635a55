//! The pool's measured write rate, and the dirty limit it sets. A sync retires its txg's
//! dirty bytes in some time; smoothed over syncs, that is how fast the disks absorb dirty
//! data. Dirty data is then held to what they write in one txg timeout
//! (`WriteRate::limit`): a txg at the limit syncs in about the timeout, the delay curve
//! starts at 60 % of *that*, and early syncs at 20 % of it — instead of at fixed shares
//! of a `dirty_max` sized by memory, which on a slow disk (the lab's paced 8 MB/s) is many
//! seconds of writes: writers then ran free until a long sync, and stopped behind it.
//!
//! Owns: the rate estimate (bytes per second, smoothed) and the limit it implies.
//!
//! Promises: the limit is never above `dirty_max` nor below `LIMIT_FLOOR` (or
//! `dirty_max`, if smaller); with no measurement yet it is `dirty_max`; a sync of fewer
//! than `MIN_SAMPLE` bytes does not move the estimate (its flushes, not its bytes, set its
//! time).
//!
//! Must never: block, or read a clock (the caller measures the sync).
use std::time::Duration;

/// A sync of fewer bytes says more about the disk's flush latency than its rate.
pub const MIN_SAMPLE: u64 = 1 << 20;
/// The dirty limit never goes below this: writers always have a few MiB to fill before
/// the curve slows them, whatever the disks did lately.
pub const LIMIT_FLOOR: u64 = 8 << 20;
/// The window the limit is sized to hold at least: with a very short txg timeout (tests,
/// a tuned pool) the limit still covers a second of writes.
const MIN_WINDOW: Duration = Duration::from_secs(1);
/// Weight of the newest sync in the smoothed rate: a quarter, so one odd sync (a burst of
/// fsyncs sharing the disk) moves the limit by a quarter of its surprise.
const NEWEST_WEIGHT: f64 = 0.25;

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WriteRate {
    bytes_per_sec: Option<f64>,
}

impl WriteRate {
    /// A sync retired `bytes` dirty bytes in `took`.
    pub fn observe(&mut self, bytes: u64, took: Duration) {
        if bytes < MIN_SAMPLE || took.is_zero() {
            return;
        }
        let newest = bytes as f64 / took.as_secs_f64();
        self.bytes_per_sec = Some(match self.bytes_per_sec {
            None => newest,
            Some(old) => old * (1.0 - NEWEST_WEIGHT) + newest * NEWEST_WEIGHT,
        });
    }

    /// Bytes per second, smoothed; None before the first sync worth measuring.
    pub fn bytes_per_sec(&self) -> Option<u64> {
        self.bytes_per_sec.map(|r| r as u64)
    }

    /// Dirty bytes the disks write in one `timeout` (at least `MIN_WINDOW`), within
    /// [`LIMIT_FLOOR`, `dirty_max`]; `dirty_max` before any measurement.
    pub fn limit(&self, dirty_max: u64, timeout: Duration) -> u64 {
        let Some(rate) = self.bytes_per_sec else {
            return dirty_max;
        };
        let window = timeout.max(MIN_WINDOW).as_secs_f64();
        let bytes = (rate * window).min(u64::MAX as f64) as u64;
        bytes.clamp(LIMIT_FLOOR.min(dirty_max), dirty_max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const FIVE_S: Duration = Duration::from_secs(5);

    #[test]
    fn before_any_sync_the_limit_is_dirty_max() {
        assert_eq!(WriteRate::default().limit(256 * MIB, FIVE_S), 256 * MIB);
    }

    #[test]
    fn a_slow_disk_holds_dirty_data_to_one_timeout_of_its_writes() {
        let mut r = WriteRate::default();
        r.observe(16 * MIB, Duration::from_secs(2)); // 8 MiB/s, the lab's paced disk
        assert_eq!(r.bytes_per_sec(), Some(8 * MIB));
        assert_eq!(r.limit(256 * MIB, FIVE_S), 40 * MIB);
    }

    #[test]
    fn the_limit_stays_between_the_floor_and_dirty_max() {
        let mut slow = WriteRate::default();
        slow.observe(MIB, Duration::from_secs(10));
        assert_eq!(slow.limit(256 * MIB, FIVE_S), LIMIT_FLOOR);
        assert_eq!(slow.limit(4 * MIB, FIVE_S), 4 * MIB, "never above dirty_max");
        let mut fast = WriteRate::default();
        fast.observe(1024 * MIB, Duration::from_millis(100));
        assert_eq!(fast.limit(256 * MIB, FIVE_S), 256 * MIB);
    }

    #[test]
    fn small_syncs_do_not_move_the_rate_and_new_ones_move_it_by_a_quarter() {
        let mut r = WriteRate::default();
        r.observe(MIN_SAMPLE - 1, Duration::from_secs(1));
        assert_eq!(r.bytes_per_sec(), None);
        r.observe(8 * MIB, Duration::from_secs(1));
        r.observe(16 * MIB, Duration::from_secs(1));
        assert_eq!(r.bytes_per_sec(), Some(10 * MIB));
    }

    #[test]
    fn a_short_timeout_still_holds_a_second_of_writes() {
        let mut r = WriteRate::default();
        r.observe(32 * MIB, Duration::from_secs(1));
        assert_eq!(r.limit(256 * MIB, Duration::from_millis(50)), 32 * MIB);
    }
}

//! The write throttle (ZFS's dmu_tx_delay). Dirty bytes of the open and syncing txgs
//! (*dirty*) decide how long a writer's `hold` waits, so writers slow down smoothly as
//! the disks fall behind instead of running free until `dirty_max` and then stopping:
//!
//! * up to `DelayCurve::min_percent` (60 %) of `dirty_max`: no delay;
//! * above it: `scale · (dirty − min) / (dirty_max − dirty)` (`write_delay`), at most
//!   `DelayCurve::max`. Delays are spaced that far apart across all writers (each
//!   wakes at the later of its own start plus the delay and the previous wake-up plus
//!   the delay), so the curve sets the rate of writes, whatever the number of writers;
//! * past `dirty_max`: the writer waits until the syncing txg commits (a hard stop the
//!   curve should make rare).
//!
//! A dirty observer (`set_dirty_observer`) hears dirty data as a percent of `dirty_max`:
//! the pool lets more txg writes into the devices as it grows.
//!
//! Owns: the delay curve, the throttle's wait and sleep, its counters, and the observer
//! of dirty data.
//!
//! Promises: a writer is delayed only above the curve's minimum, by at most
//! `DelayCurve::max` per hold, and stopped only while dirty data is over `dirty_max`,
//! never for a whole sync below it; the observer hears each change of the percent once.
//!
//! Must never: sleep, or run the observer, with the engine's state lock held.
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::{check_usable, dirty_limit, TxgConfig, TxgEngine, TxgError};

/// The shape of the write throttle's delay (ZFS's zfs_delay_min_dirty_percent,
/// zfs_delay_scale and zfs_delay_max_ns; see `write_delay`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DelayCurve {
    /// No delay while dirty data is at most this percent of `dirty_max`.
    pub min_percent: u32,
    /// The delay when dirty data is midway between the minimum and `dirty_max`.
    pub scale: Duration,
    /// The longest delay of one hold.
    pub max: Duration,
}

impl Default for DelayCurve {
    /// ZFS's defaults: the curve starts at 60 % of `dirty_max`; at 80 % a write waits
    /// 500 µs (2,000 writes a second), at 90 % 1.5 ms, at 99 % 19.5 ms, and never more
    /// than 100 ms.
    fn default() -> Self {
        DelayCurve { min_percent: 60, scale: Duration::from_micros(500), max: Duration::from_millis(100) }
    }
}

/// How long a write is delayed when `dirty` bytes are dirty: zero up to
/// `curve.min_percent` of `dirty_max`, then `scale · (dirty − min) / (dirty_max − dirty)`
/// — growing without bound as dirty data nears `dirty_max` — capped at `curve.max`.
pub fn write_delay(dirty: u64, dirty_max: u64, curve: &DelayCurve) -> Duration {
    let min = (dirty_max as u128 * curve.min_percent.min(100) as u128 / 100) as u64;
    if dirty <= min {
        return Duration::ZERO;
    }
    if dirty >= dirty_max {
        return curve.max;
    }
    let ns = curve.scale.as_nanos() * (dirty - min) as u128 / (dirty_max - dirty) as u128;
    Duration::from_nanos(ns.min(curve.max.as_nanos()) as u64)
}

/// Hears dirty data as a percent of `dirty_max` (`TxgEngine::set_dirty_observer`).
pub type DirtyObserver = Box<dyn Fn(u32) + Send + Sync>;

pub(crate) fn dirty_percent(dirty: u64, dirty_max: u64) -> u32 {
    (dirty as u128 * 100 / dirty_max.max(1) as u128).min(1000) as u32
}

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ThrottleCounters {
    pub(crate) delayed_writes: u64,
    pub(crate) delay: Duration,
    pub(crate) dirty_max_waits: u64,
    pub(crate) dirty_max_wait: Duration,
}

impl TxgEngine {
    /// Changes the write throttle's delay curve.
    pub fn set_delay_curve(&self, curve: DelayCurve) {
        self.tuning.lock().curve = curve;
    }

    /// Installs the one observer of dirty data (in percent of `dirty_max`), told on
    /// every change of the percent. It runs without the engine's locks held and must be
    /// quick (the pool sets the devices' async-write limits).
    ///
    /// Panics if an observer is already installed.
    pub fn set_dirty_observer(&self, observer: DirtyObserver) {
        assert!(self.observer.set(observer).is_ok(), "the txg engine has one dirty observer");
        self.told_percent.store(u32::MAX, Ordering::Relaxed);
        self.tell_dirty();
    }

    /// The write throttle for a change of `dirty_bytes`: waits while dirty data is over
    /// `dirty_max` (a commit makes room), then sleeps along the delay curve.
    pub(crate) fn throttle(&self, dirty_bytes: u64, config: &TxgConfig, curve: &DelayCurve) -> Result<(), TxgError> {
        let asked = Instant::now();
        let mut s = self.state.lock();
        let mut waited_for_room = false;
        let mut limit;
        loop {
            check_usable(&s)?;
            limit = dirty_limit(&s, config);
            if s.dirty() + dirty_bytes <= limit || s.dirty() == 0 {
                break;
            }
            waited_for_room = true;
            s.wanted = s.wanted.max(s.open);
            self.changed.notify_all();
            self.changed.wait_for(&mut s, Duration::from_millis(100));
        }
        if waited_for_room {
            s.throttle.dirty_max_waits += 1;
            s.throttle.dirty_max_wait += asked.elapsed();
        }
        let delay = write_delay(s.dirty(), limit, curve);
        let now = Instant::now();
        if delay.is_zero() || now >= asked + delay {
            return Ok(()); // this writer has already waited that long
        }
        // Spaced `delay` after the previous delayed writer: the curve sets the rate of
        // writes, not each writer's pause (ZFS's dp_last_wakeup).
        let wakeup = (asked + delay).max(s.last_wakeup + delay);
        s.last_wakeup = wakeup;
        s.throttle.delayed_writes += 1;
        s.throttle.delay += wakeup - now;
        drop(s);
        std::thread::sleep(wakeup - now);
        Ok(())
    }

    /// Tells the observer dirty data's percent of `dirty_max`, if it changed.
    pub(crate) fn tell_dirty(&self) {
        if self.observer.get().is_none() {
            return;
        }
        let config = self.tuning.lock().config.clone();
        let percent = {
            let s = self.state.lock();
            dirty_percent(s.dirty(), dirty_limit(&s, &config))
        };
        self.tell_percent(percent);
    }

    pub(crate) fn tell_percent(&self, percent: u32) {
        let Some(observer) = self.observer.get() else {
            return;
        };
        if self.told_percent.swap(percent, Ordering::Relaxed) != percent {
            observer(percent);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use parking_lot::Mutex;

    use super::*;
    use crate::sync::tests::Fire;
    use crate::{SyncTarget, TxgConfig};

    const MIB: u64 = 1 << 20;

    fn delay_at(percent: u64) -> Duration {
        write_delay(percent * MIB, 100 * MIB, &DelayCurve::default())
    }

    #[test]
    fn the_delay_curve_is_zero_below_its_minimum() {
        for percent in [0, 1, 30, 59, 60] {
            assert_eq!(delay_at(percent), Duration::ZERO, "at {percent}%");
        }
        assert!(delay_at(61) > Duration::ZERO);
    }

    #[test]
    fn the_delay_curve_has_zfs_values_at_its_documented_points() {
        // scale · (dirty − 60%) / (100% − dirty), with scale 500 µs.
        assert_eq!(delay_at(70), Duration::from_nanos(166_666));
        assert_eq!(delay_at(80), Duration::from_micros(500));
        assert_eq!(delay_at(90), Duration::from_micros(1500));
        assert_eq!(delay_at(99), Duration::from_micros(19_500));
    }

    #[test]
    fn the_delay_curve_grows_and_is_capped() {
        let curve = DelayCurve::default();
        let max = 256 * MIB;
        let delays: Vec<Duration> = (0..=1000).map(|k| write_delay(max * k / 1000, max, &curve)).collect();
        assert!(delays.windows(2).all(|w| w[0] <= w[1]), "monotonic");
        assert!(delays.iter().all(|&d| d <= curve.max), "capped");
        assert_eq!(write_delay(max - 1, max, &curve), curve.max);
        assert_eq!(write_delay(max, max, &curve), curve.max);
        assert_eq!(write_delay(2 * max, max, &curve), curve.max);
    }

    /// An engine with no sync thread: holds only add dirty data.
    fn idle_engine(dirty_max: u64) -> TxgEngine {
        let engine = TxgEngine::new(1, TxgConfig { dirty_max, ..TxgConfig::default() });
        engine.set_delay_curve(DelayCurve {
            min_percent: 60,
            scale: Duration::from_millis(10),
            max: Duration::from_millis(100),
        });
        engine
    }

    #[test]
    fn below_the_curve_a_writer_is_not_delayed() {
        let engine = idle_engine(100 * MIB);
        drop(engine.hold(50 * MIB).unwrap());
        for _ in 0..10 {
            drop(engine.hold(1).unwrap());
        }
        let t = engine.stats();
        assert_eq!((t.delayed_writes, t.delay_us, t.dirty_max_waits), (0, 0, 0));
    }

    #[test]
    fn above_the_curve_writers_are_spaced_by_the_delay() {
        let engine = Arc::new(idle_engine(100 * MIB));
        drop(engine.hold(80 * MIB).unwrap()); // midway: the delay is the scale, 10 ms
        let started = Instant::now();
        let writers: Vec<_> = (0..4)
            .map(|_| {
                let engine = engine.clone();
                std::thread::spawn(move || {
                    for _ in 0..3 {
                        drop(engine.hold(1).unwrap());
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        // 12 writes, each let go 10 ms after the one before, whatever the writer.
        assert!(started.elapsed() >= Duration::from_millis(110), "{:?}", started.elapsed());
        let t = engine.stats();
        assert_eq!(t.delayed_writes, 12);
        assert!(t.delay_us >= 110_000, "{}", t.delay_us);
    }

    #[test]
    fn tuning_dirty_max_moves_the_sync_threshold_and_the_curve() {
        let engine = idle_engine(1000 * MIB);
        drop(engine.hold(100 * MIB).unwrap());
        drop(engine.hold(1).unwrap());
        assert_eq!(engine.stats().delayed_writes, 0, "10 % of dirty_max");
        engine.set_dirty_max(125 * MIB);
        let t = engine.stats();
        assert_eq!((t.dirty_max, t.dirty_sync), (125 * MIB, 25 * MIB));
        drop(engine.hold(1).unwrap());
        assert_eq!(engine.stats().delayed_writes, 1, "80 % of the new dirty_max");
    }

    #[test]
    fn the_observer_hears_dirty_data_in_percent_of_dirty_max() {
        let engine = idle_engine(100 * MIB);
        let heard = Arc::new(Mutex::new(Vec::new()));
        let h = heard.clone();
        engine.set_dirty_observer(Box::new(move |p| h.lock().push(p)));
        drop(engine.hold(30 * MIB).unwrap());
        drop(engine.hold(1).unwrap()); // still 30 %: not told again
        engine.add_dirty(15 * MIB);
        engine.set_dirty_max(50 * MIB);
        assert_eq!(*heard.lock(), [0, 30, 45, 90]);
    }

    /// Each sync takes at least `0`: a disk of known top speed.
    struct SlowTarget(Duration);

    impl SyncTarget for SlowTarget {
        type Error = Fire;
        fn quiesce(&self, _txg: u64) {}
        fn sync(&self, _txg: u64) -> Result<(), Fire> {
            std::thread::sleep(self.0);
            Ok(())
        }
    }

    /// Syncs one 4 MiB txg on a disk that takes at least 500 ms for it (at most 8 MiB/s),
    /// then fills `fill` bytes (70 % of the dirty limit that measure set if None) and
    /// asks for one more byte. Returns the engine's stats after that.
    fn after_a_slow_sync(pace: bool, fill: Option<u64>) -> crate::TxgStats {
        let config =
            TxgConfig { dirty_max: 1024 * MIB, dirty_sync: 1024 * MIB, pace_to_write_rate: pace, ..Default::default() };
        let engine = Arc::new(TxgEngine::new(10, config));
        engine.set_delay_curve(DelayCurve {
            min_percent: 60,
            scale: Duration::from_millis(10),
            max: Duration::from_millis(100),
        });
        let thread = engine.start(Arc::new(SlowTarget(Duration::from_millis(500))));
        let txg = engine.hold(4 * MIB).unwrap().txg;
        engine.wait_synced(txg).unwrap();
        let limit = engine.stats().dirty_limit;
        drop(engine.hold(fill.unwrap_or(limit * 7 / 10)).unwrap());
        drop(engine.hold(1).unwrap());
        let stats = engine.stats();
        engine.close();
        thread.join().unwrap();
        stats
    }

    #[test]
    fn the_curve_starts_at_60_percent_of_what_the_disks_write_in_a_timeout() {
        let t = after_a_slow_sync(true, None);
        // 4 MiB in at least 500 ms: at most 8 MiB/s, so at most 40 MiB in the 5 s timeout.
        assert!(t.write_rate > 0 && t.write_rate <= 8 * MIB, "{t:?}");
        assert!(t.dirty_limit >= crate::rate::LIMIT_FLOOR && t.dirty_limit <= 40 * MIB, "{t:?}");
        assert_eq!((t.syncs, t.last_sync_bytes), (1, 4 * MIB));
        assert!(t.max_sync_us >= 500_000 && t.sync_us >= t.max_sync_us, "{t:?}");
        // 70 % of the measured limit (under 3 % of dirty_max): on the curve.
        assert_eq!(t.delayed_writes, 1, "{t:?}");
        assert_eq!(t.dirty_max_waits, 0, "{t:?}");
    }

    #[test]
    fn without_pacing_the_same_dirty_data_is_not_delayed() {
        // 28 MiB: at least 70 % of the paced limit above, under 3 % of dirty_max.
        let t = after_a_slow_sync(false, Some(28 * MIB));
        assert_eq!((t.dirty_limit, t.write_rate), (1024 * MIB, 0));
        assert_eq!(t.delayed_writes, 0, "{t:?}");
    }

    /// Syncs wait until the gate opens.
    struct GatedTarget {
        open: std::sync::Mutex<bool>,
        opened: std::sync::Condvar,
    }

    impl SyncTarget for GatedTarget {
        type Error = Fire;
        fn quiesce(&self, _txg: u64) {}
        fn sync(&self, _txg: u64) -> Result<(), Fire> {
            let mut open = self.open.lock().unwrap();
            while !*open {
                open = self.opened.wait(open).unwrap();
            }
            Ok(())
        }
    }

    #[test]
    fn a_writer_over_dirty_max_waits_for_a_commit() {
        let engine = Arc::new(TxgEngine::new(10, TxgConfig::default()));
        let target = Arc::new(GatedTarget { open: std::sync::Mutex::new(false), opened: std::sync::Condvar::new() });
        let thread = engine.start(target.clone());
        engine.set_dirty_max(4 * MIB);
        drop(engine.hold(4 * MIB).unwrap()); // past dirty_sync: txg 11 starts syncing
        for _ in 0..4000 {
            if engine.stats().dirty_syncing == 4 * MIB {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(engine.stats().dirty_syncing, 4 * MIB, "txg 11 is syncing");
        let writer = {
            let engine = engine.clone();
            std::thread::spawn(move || drop(engine.hold(MIB).unwrap()))
        };
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(engine.stats().synced, 10, "the gate still holds txg 11");
        *target.open.lock().unwrap() = true;
        target.opened.notify_all();
        writer.join().unwrap();
        let t = engine.stats();
        assert_eq!(t.dirty_max_waits, 1, "4 + 1 MiB do not fit under 4 MiB");
        assert!(t.synced >= 11, "the commit of txg 11 made room");
        engine.close();
        thread.join().unwrap();
    }
}

//! The pacing model of the emulated cloud disk: token buckets for IOPS and bandwidth,
//! an I/O size cap, and a fixed added latency.
//!
//! Owns: the decision *when* a request may reach the backing file. Promises:
//! - a request of `len` bytes costs `ceil(len / max_io)` I/O units (1 when uncapped)
//!   and `len` bytes of bandwidth;
//! - each bucket holds at most `burst = rate / 10` tokens (100 ms worth, at least one
//!   unit / one byte), so over any window of T seconds the admitted units stay
//!   ≤ iops·T + burst and the admitted bytes ≤ bandwidth·T + burst (+ one request
//!   larger than the burst, which is admitted with a full bucket and leaves a debt);
//! - both buckets are charged at the instant the request is admitted, so a request held
//!   back by one bucket cannot later burst through the other;
//! - admission is first-come first-served in one virtual timeline, decided under a short
//!   lock; callers then sleep *outside* the lock, so many requests can wait and run
//!   concurrently.
//!
//! Must never: sleep or do I/O while holding the lock, or spin.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Limits of the emulated disk; 0 means unlimited for every field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    pub iops: u64,
    pub bandwidth: u64,
    pub max_io: u64,
    pub latency_us: u64,
}

/// What admitting one request decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admission {
    /// I/O units the request was charged (after size-cap splitting).
    pub units: u64,
    /// How long the caller must wait for the buckets (0 when tokens were there).
    pub throttle: Duration,
    /// Fixed latency to add on top, the emulated round trip.
    pub latency: Duration,
}

/// One token bucket whose level is known as of the pacer's virtual clock.
#[derive(Debug)]
struct Bucket {
    rate: f64,
    burst: f64,
    level: f64,
}

impl Bucket {
    /// A full bucket for `rate` tokens per second, or None for "unlimited".
    fn new(rate: u64) -> Option<Bucket> {
        if rate == 0 {
            return None;
        }
        let rate = rate as f64;
        // 100 ms of tokens: enough to absorb a readahead or journal burst without
        // letting a one-second sample exceed the limit by more than 10 %.
        let burst = (rate / 10.0).max(1.0);
        Some(Bucket { rate, burst, level: burst })
    }

    /// Seconds after `now` until `need` tokens are there. A request larger than the
    /// whole bucket waits for a full bucket and then goes into debt, so huge requests
    /// are possible but still pay for every token.
    fn wait_for(&self, need: f64) -> f64 {
        let need = need.min(self.burst);
        ((need - self.level) / self.rate).max(0.0)
    }

    fn refill(&mut self, seconds: f64) {
        self.level = (self.level + seconds * self.rate).min(self.burst);
    }
}

/// Virtual timeline shared by both buckets.
#[derive(Debug)]
struct Timeline {
    /// Seconds since `origin` of the latest admission; buckets' levels are as of it.
    clock: f64,
    iops: Option<Bucket>,
    bandwidth: Option<Bucket>,
}

/// The shared pacer: one per disk, used by every FUSE worker thread.
#[derive(Debug)]
pub struct Pacer {
    max_io: u64,
    latency: Duration,
    origin: Instant,
    timeline: Mutex<Timeline>,
}

impl Pacer {
    pub fn new(limits: Limits) -> Pacer {
        Pacer {
            max_io: limits.max_io,
            latency: Duration::from_micros(limits.latency_us),
            origin: Instant::now(),
            timeline: Mutex::new(Timeline {
                clock: 0.0,
                iops: Bucket::new(limits.iops),
                bandwidth: Bucket::new(limits.bandwidth),
            }),
        }
    }

    /// The fixed added latency alone, for requests that cost no tokens (fsync).
    pub fn admission_latency(&self) -> Duration {
        self.latency
    }

    /// I/O units for a request of `len` bytes: the size cap splits big requests the way
    /// a cloud volume counts them; a zero-length request still costs one I/O.
    pub fn units_for(&self, len: u64) -> u64 {
        if self.max_io == 0 {
            1
        } else {
            len.div_ceil(self.max_io).max(1)
        }
    }

    /// Admit a request of `len` bytes now; the caller sleeps the returned durations.
    pub fn admit(&self, len: u64) -> Admission {
        let now = self.origin.elapsed().as_secs_f64();
        self.admit_at(len, now)
    }

    /// Admission at an explicit time (seconds since the pacer's origin), the pure core
    /// that the unit tests drive with a simulated clock.
    fn admit_at(&self, len: u64, now: f64) -> Admission {
        let units = self.units_for(len);
        let mut guard = self.timeline.lock();
        let tl = &mut *guard; // plain &mut so both buckets can be borrowed at once
                              // Requests are served in admission order: none is granted before an earlier one.
        let start = now.max(tl.clock);
        let since = start - tl.clock;
        let costs = [(units as f64), (len as f64)];
        let mut grant = start;
        for (bucket, cost) in [&mut tl.iops, &mut tl.bandwidth].into_iter().zip(costs) {
            if let Some(b) = bucket {
                b.refill(since);
                grant = grant.max(start + b.wait_for(cost));
            }
        }
        // Charge both buckets as of the grant time.
        let wait = grant - start;
        for (bucket, cost) in [&mut tl.iops, &mut tl.bandwidth].into_iter().zip(costs) {
            if let Some(b) = bucket {
                b.refill(wait);
                b.level -= cost;
            }
        }
        tl.clock = grant;
        Admission { units, throttle: Duration::from_secs_f64((grant - now).max(0.0)), latency: self.latency }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pacer(iops: u64, bandwidth: u64, max_io: u64) -> Pacer {
        Pacer::new(Limits { iops, bandwidth, max_io, latency_us: 0 })
    }

    #[test]
    fn size_cap_splits_into_units() {
        let p = pacer(0, 0, 16 * 1024);
        assert_eq!(p.units_for(0), 1);
        assert_eq!(p.units_for(4096), 1);
        assert_eq!(p.units_for(16 * 1024), 1);
        assert_eq!(p.units_for(16 * 1024 + 1), 2);
        assert_eq!(p.units_for(128 * 1024), 8);
        assert_eq!(pacer(0, 0, 0).units_for(1 << 20), 1);
    }

    #[test]
    fn unlimited_never_waits() {
        let p = pacer(0, 0, 0);
        for i in 0..10_000 {
            assert_eq!(p.admit_at(1 << 20, i as f64 * 1e-6).throttle, Duration::ZERO);
        }
    }

    #[test]
    fn burst_is_free_then_rate_applies() {
        let p = pacer(100, 0, 0); // burst = 10 units
        for _ in 0..10 {
            assert_eq!(p.admit_at(4096, 0.0).throttle, Duration::ZERO);
        }
        let eleventh = p.admit_at(4096, 0.0).throttle.as_secs_f64();
        assert!((eleventh - 0.01).abs() < 1e-9, "{eleventh}");
        let twelfth = p.admit_at(4096, 0.0).throttle.as_secs_f64();
        assert!((twelfth - 0.02).abs() < 1e-9, "{twelfth}");
    }

    #[test]
    fn bucket_refills_over_idle_time_but_not_beyond_burst() {
        let p = pacer(100, 0, 0);
        for _ in 0..10 {
            p.admit_at(1, 0.0);
        }
        // After 10 idle seconds only 10 tokens (the burst) are available, not 1000.
        let waits: Vec<f64> = (0..12).map(|_| p.admit_at(1, 10.0).throttle.as_secs_f64()).collect();
        assert!(waits[..10].iter().all(|w| *w == 0.0), "{waits:?}");
        assert!(waits[10] > 0.0 && waits[11] > waits[10], "{waits:?}");
    }

    #[test]
    fn oversize_request_waits_for_full_bucket_then_owes() {
        let p = pacer(0, 1000, 0); // burst 100 bytes
        assert_eq!(p.admit_at(1000, 0.0).throttle, Duration::ZERO);
        // 900 bytes of debt plus 100 for the next one: 1 s.
        let next = p.admit_at(100, 0.0).throttle.as_secs_f64();
        assert!((next - 1.0).abs() < 1e-9, "{next}");
    }

    /// Admit a stream of requests at arbitrary arrival times and check that, in every
    /// window, what was granted respects rate × window + burst for both limits.
    #[test]
    fn grants_respect_both_limits_in_every_window() {
        let (iops, bw, cap) = (200u64, 4u64 << 20, 16u64 << 10);
        let p = pacer(iops, bw, cap);
        let mut seed = 0x9e3779b97f4a7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut grants = Vec::new(); // (grant time, units, bytes)
        let mut now = 0.0;
        for _ in 0..5000 {
            now += (next() % 1000) as f64 * 1e-5; // arrivals up to 10 ms apart
            let len = [512u64, 4096, 16384, 65536, 131072, 1 << 20][(next() % 6) as usize];
            let a = p.admit_at(len, now);
            grants.push((now + a.throttle.as_secs_f64(), a.units, len));
        }
        grants.sort_by(|a, b| a.0.total_cmp(&b.0));
        for window in [0.1f64, 0.5, 1.0, 3.0] {
            for (i, &(t0, _, _)) in grants.iter().enumerate() {
                let inside = grants[i..].iter().take_while(|g| g.0 <= t0 + window + 1e-9);
                let (units, bytes) = inside.fold((0u64, 0u64), |acc, g| (acc.0 + g.1, acc.1 + g.2));
                let max_units = iops as f64 * window + iops as f64 / 10.0 + 64.0;
                let max_bytes = bw as f64 * window + bw as f64 / 10.0 + (1u64 << 20) as f64;
                assert!(units as f64 <= max_units, "window {window}: {units} units");
                assert!(bytes as f64 <= max_bytes, "window {window}: {bytes} bytes");
            }
        }
        // And the pacer is not simply refusing: over the run it nears the IOPS limit.
        let span = grants.last().map(|g| g.0).unwrap_or(0.0);
        let total_units: u64 = grants.iter().map(|g| g.1).sum();
        assert!(total_units as f64 / span > iops as f64 * 0.8);
    }

    #[test]
    fn latency_is_reported_separately() {
        let p = Pacer::new(Limits { latency_us: 1500, ..Limits::default() });
        let a = p.admit(4096);
        assert_eq!(a.latency, Duration::from_micros(1500));
        assert_eq!(a.throttle, Duration::ZERO);
    }
}

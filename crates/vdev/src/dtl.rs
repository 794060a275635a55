//! The dirty time log of one mirror side (ZFS's DTL): the range of txgs whose writes it
//! missed while it was away, so its copies of blocks born in that range are stale.
//!
//! A side that comes back is written again at once, so only blocks born while it was
//! away (`first..=last`) are missing on it. Reads do not trust it for those blocks, and a
//! resilver copies exactly those blocks to it, then clears the range.
//!
//! Owns: the range and the test a read makes against it.
//!
//! Promises: the test is two relaxed atomic loads (it is on the 16 KiB page read path);
//! an empty range covers nothing; `covers(UNKNOWN_BIRTH)` is true while the range is not
//! empty (a block whose birth is not known may be one the side missed).
//!
//! Must never: shrink a range by itself: only a finished resilver clears it.
use std::sync::atomic::{AtomicU64, Ordering};

/// The birth txg of a read whose block has none (an intent-log extent).
pub const UNKNOWN_BIRTH: u64 = u64::MAX;

pub(crate) struct Dtl {
    first: AtomicU64,
    last: AtomicU64,
}

impl Default for Dtl {
    fn default() -> Self {
        Dtl { first: AtomicU64::new(u64::MAX), last: AtomicU64::new(0) }
    }
}

impl Dtl {
    /// The missed txgs, `None` when the side is up to date.
    pub(crate) fn range(&self) -> Option<(u64, u64)> {
        let first = self.first.load(Ordering::Acquire);
        let last = self.last.load(Ordering::Acquire);
        (first <= last).then_some((first, last))
    }

    /// True if the side may lack the block born in txg `birth`.
    pub(crate) fn covers(&self, birth: u64) -> bool {
        let first = self.first.load(Ordering::Relaxed);
        let last = self.last.load(Ordering::Relaxed);
        first <= last && (birth == UNKNOWN_BIRTH || (first..=last).contains(&birth))
    }

    /// Widens the range to cover `first..=last` too.
    pub(crate) fn add(&self, first: u64, last: u64) {
        assert!(first <= last, "a missed range has first <= last");
        self.first.fetch_min(first, Ordering::AcqRel);
        self.last.fetch_max(last, Ordering::AcqRel);
    }

    /// Empties the range (a resilver finished). `first` goes first, so a concurrent
    /// reader sees the old range or an empty one, never a wider one.
    pub(crate) fn clear(&self) {
        self.first.store(u64::MAX, Ordering::Release);
        self.last.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_covers_its_txgs_and_unknown_births_only_while_set() {
        let d = Dtl::default();
        assert!(d.range().is_none());
        assert!(!d.covers(5) && !d.covers(UNKNOWN_BIRTH));
        d.add(10, 20);
        d.add(15, 25);
        assert_eq!(d.range(), Some((10, 25)));
        assert!(d.covers(10) && d.covers(25) && d.covers(UNKNOWN_BIRTH));
        assert!(!d.covers(9) && !d.covers(26));
        d.clear();
        assert!(d.range().is_none() && !d.covers(12));
    }
}

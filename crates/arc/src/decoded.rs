//! Decoded indirect blocks kept for their trees (ZFS's dbuf cache), within the budget.
//!
//! Owns: the one lasting reference to each decoded block (trees hold them weakly), their
//! CLOCK ring and its hand, and their bytes' share of the budget (`DECODED_SHARE`).
//!
//! Promises: a block touched since the hand last passed gets one second chance; a block
//! no tree can reach any more (the old version of an indirect block a txg rewrote: its
//! tree holds the new one) leaves within `SWEEP_EVERY_PER_BLOCK` keeps, so the share
//! holds live blocks and dead ones do not take the budget from cached blocks (issue
//! #17: a database rewriting pages all over its tables filled the share with them); a
//! block dropped is freed after the ring's lock is released; reading a kept block takes
//! no lock.
//!
//! Must never: be the only way to a block (its tree reads it again through the ARC), or
//! write the touched bit of a hot block on every read (its cache line would bounce).
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::{ArcCache, DECODED_SHARE};

/// The ring is swept for unreachable blocks once this many blocks per block in it
/// (times 1/8) were kept since the last sweep: at most an eighth of it is dead, and a
/// sweep's cost is spread over the keeps that made it needed.
const SWEEP_EVERY_PER_BLOCK: usize = 8;

impl ArcCache {
    /// Keeps a decoded indirect block `value` of `bytes` for its tree, which holds it
    /// weakly: the cache holds the one lasting reference and drops it (CLOCK: a block
    /// touched since the hand last passed gets a second chance) when decoded blocks go
    /// over their share. The tree reads it again through the ARC when it is gone.
    pub fn keep_decoded<T: Send + Sync + 'static>(&self, value: T, bytes: u64) -> Arc<Decoded<T>> {
        let kept = Arc::new(Decoded { value, touched: AtomicBool::new(true) });
        let share = self.max() / DECODED_SHARE;
        let dropped = {
            let mut clock = self.decoded.lock();
            let mut dropped = clock.sweep_if_due(&self.decoded_bytes);
            clock.ring.push_back((kept.clone(), bytes));
            self.decoded_bytes.fetch_add(bytes, Ordering::Relaxed);
            dropped.extend(clock.evict_to(share, &self.decoded_bytes));
            dropped
        };
        drop(dropped); // freed outside the lock
        self.evict_to_budget();
        kept
    }
}

/// A decoded metadata block kept by `ArcCache::keep_decoded`, with its CLOCK bit.
pub struct Decoded<T> {
    value: T,
    touched: AtomicBool,
}

impl<T> Decoded<T> {
    /// The value, marked as used (no lock on the read path; the bit is written only when
    /// it changes, so readers of a hot block do not bounce its cache line).
    pub fn get(&self) -> &T {
        if !self.touched.load(Ordering::Relaxed) {
            self.touched.store(true, Ordering::Relaxed);
        }
        &self.value
    }
}

/// What the CLOCK needs of a decoded block, whatever its type.
pub(crate) trait Touched: Send + Sync {
    /// Clears the bit; returns whether it was set.
    fn take_touched(&self) -> bool;
}

impl<T: Send + Sync> Touched for Decoded<T> {
    fn take_touched(&self) -> bool {
        self.touched.swap(false, Ordering::Relaxed)
    }
}

/// The decoded blocks in CLOCK order (front: where the hand is).
#[derive(Default)]
pub(crate) struct Clock {
    ring: std::collections::VecDeque<(Arc<dyn Touched>, u64)>,
    /// Blocks kept since the last sweep for unreachable ones.
    kept_since_sweep: usize,
}

impl Clock {
    /// Drops the blocks no one can reach any more, if enough were kept since the last
    /// sweep; returns them, to be freed after the lock is released. Unreachable: the ring
    /// holds the only reference and no tree a weak one (a tree gives its weak reference
    /// up when a txg replaces the block; a caller that was just handed a block holds a
    /// strong one until its tree has the weak one).
    pub(crate) fn sweep_if_due(&mut self, bytes: &AtomicU64) -> Vec<Arc<dyn Touched>> {
        self.kept_since_sweep += 1;
        if self.kept_since_sweep * SWEEP_EVERY_PER_BLOCK < self.ring.len() {
            return Vec::new();
        }
        self.kept_since_sweep = 0;
        let mut dropped = Vec::new();
        self.ring.retain(|(block, size)| {
            let reachable = Arc::strong_count(block) > 1 || Arc::weak_count(block) > 0;
            if !reachable {
                bytes.fetch_sub(*size, Ordering::Relaxed);
                dropped.push(block.clone());
            }
            reachable
        });
        dropped
    }

    /// Drops blocks until `bytes` (the counter) is at most `max`; returns them, to be
    /// freed after the lock is released. A touched block goes round once more.
    pub(crate) fn evict_to(&mut self, max: u64, bytes: &AtomicU64) -> Vec<Arc<dyn Touched>> {
        let mut dropped = Vec::new();
        // Every block can be passed over at most once before all bits are clear.
        let mut second_chances = self.ring.len();
        while bytes.load(Ordering::Relaxed) > max {
            let Some((block, size)) = self.ring.pop_front() else { break };
            if second_chances > 0 && block.take_touched() {
                second_chances -= 1;
                self.ring.push_back((block, size));
                continue;
            }
            bytes.fetch_sub(size, Ordering::Relaxed);
            dropped.push(block);
        }
        crate::compact::compact(&mut self.ring);
        dropped
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Weak};

    use crate::ArcCache;

    /// A block its tree still points at (a weak reference) stays; one no one can reach
    /// leaves at the next sweep, and its bytes leave the budget; neither was over the share.
    #[test]
    fn unreachable_blocks_leave_reachable_ones_stay() {
        let arc = ArcCache::new(64 << 20);
        let live: Weak<_> = Arc::downgrade(&arc.keep_decoded(1u64, 1000));
        drop(arc.keep_decoded(2u64, 1000)); // its tree replaced it
        assert_eq!(arc.snapshot().decoded_indirect_size, 2000);
        let held = arc.keep_decoded(3u64, 1000); // handed out, no weak one yet
        let s = arc.snapshot();
        assert_eq!(s.decoded_indirect_size, 2000, "the unreachable block left: {s:?}");
        assert_eq!(live.upgrade().map(|b| *b.get()), Some(1), "the reachable one stayed");
        drop(arc.keep_decoded(4u64, 1000));
        assert_eq!(*held.get(), 3);
        assert_eq!(arc.snapshot().decoded_indirect_size, 3000, "the handed-out block stayed");
    }
}

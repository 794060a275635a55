//! Decoded indirect blocks kept for their trees (ZFS's dbuf cache), within the budget.
//!
//! Owns: the one lasting reference to each decoded block (trees hold them weakly), their
//! CLOCK ring and its hand, and their bytes' share of the budget (`DECODED_SHARE`).
//!
//! Promises: a block touched since the hand last passed gets one second chance; a block
//! dropped is freed after the ring's lock is released; reading a kept block takes no lock.
//!
//! Must never: be the only way to a block (its tree reads it again through the ARC), or
//! write the touched bit of a hot block on every read (its cache line would bounce).
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::{ArcCache, DECODED_SHARE};

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
            clock.ring.push_back((kept.clone(), bytes));
            self.decoded_bytes.fetch_add(bytes, Ordering::Relaxed);
            clock.evict_to(share, &self.decoded_bytes)
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
}

impl Clock {
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

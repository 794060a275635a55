//! The state word of a leaf's queue: in-flight counts per class, a "has waiters" bit per
//! class, and the sync operations under way, packed in one `u64` so the fast path of
//! admission is one compare-and-swap.
//!
//! Owns: the layout of that word and its accessors.
//!
//! Promises: each class's count fits its 8 bits (`MAX_ACTIVE` is 255).
//!
//! Must never: hold state of its own (the word lives in `IoQueue`).

use super::IoClass;

/// The state word: 8 bits of in-flight count per class (bits 8·i..8·i+8), one "has
/// waiters" bit per class (bit 40 + i), and the sync operations under way (bits 48..64).
/// One word, so the fast path is one CAS.
pub(super) const ACTIVE_BITS: u32 = 8;
pub(super) const WAIT_SHIFT: u32 = ACTIVE_BITS * IoClass::COUNT as u32;
pub(super) const WAIT_MASK: u64 = ((1 << IoClass::COUNT) - 1) << WAIT_SHIFT;
pub(super) const SYNC_SHIFT: u32 = 48;
pub(super) const SYNC_ONE: u64 = 1 << SYNC_SHIFT;

pub(super) fn syncs_of(state: u64) -> u64 {
    state >> SYNC_SHIFT
}

pub(super) fn active_of(state: u64, class: IoClass) -> u32 {
    ((state >> (ACTIVE_BITS * class.index() as u32)) & 0xff) as u32
}

pub(super) fn one(class: IoClass) -> u64 {
    1 << (ACTIVE_BITS * class.index() as u32)
}

pub(super) fn wait_bit(class: IoClass) -> u64 {
    1 << (WAIT_SHIFT + class.index() as u32)
}

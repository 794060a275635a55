//! The hot copies inside the budget (issue #17): they are charged what they hold, not a
//! fixed share — while there are none, compressed blocks have the whole budget; as they
//! grow, cached blocks make room (`evict_to_budget`); when they shrink, the room is the
//! blocks' again.
use std::sync::Arc;

use tarn_arc::{Access, ArcCache, BlockKey, Class, ReadKind};

const DEMAND: Access = Access::of(ReadKind::Demand);
const BLOCK: usize = 16384;
const MAX: u64 = 4 << 20;
const HOT_MAX: u64 = MAX / 16;
/// Room a full cache may leave: one block with its bookkeeping, rounded up to two blocks.
const SLACK: u64 = 2 * BLOCK as u64;

fn key(n: u64) -> BlockKey {
    BlockKey { vdev: 0, offset: n * BLOCK as u64, birth: 1 }
}

fn fill(arc: &ArcCache, from: u64) {
    for n in from..from + 2 * MAX / BLOCK as u64 {
        arc.insert(key(n), Arc::from(vec![n as u8; BLOCK]), BLOCK as u32, Class::Data, DEMAND);
    }
}

/// Everything the budget covers but the copies (the cache's own snapshot leaves them to
/// their owner, the pipeline, to add).
fn blocks_held(arc: &ArcCache) -> u64 {
    arc.snapshot().accounted_size
}

#[test]
fn copies_are_charged_as_they_grow_and_give_their_room_back() {
    let arc = ArcCache::new(MAX);
    let hot = arc.hot_copies(HOT_MAX);
    fill(&arc, 0);
    // No copies: the blocks fill the budget but for at most one block and the bookkeeping
    // each block is charged beside its bytes (`DATA_HEADER_BYTES` and the lists' headers).
    let full = blocks_held(&arc);
    assert!(full + SLACK >= MAX && full <= MAX, "blocks held {full} of {MAX}");

    // Copies up to their share: blocks give them room.
    for n in 0..2 * HOT_MAX / BLOCK as u64 {
        if hot.insert(key(n), &vec![n as u8; BLOCK]) {
            arc.evict_to_budget();
        }
        assert!(blocks_held(&arc) + hot.size() <= MAX, "after copy {n}: over the budget");
    }
    let copy = BLOCK as u64 + tarn_arc::HOT_HEADER_BYTES;
    assert!(hot.size() <= HOT_MAX && hot.size() + copy > HOT_MAX, "the copies stop at their share: {}", hot.size());
    assert!(blocks_held(&arc) + hot.size() <= MAX);
    let mut out = vec![0u8; BLOCK];
    let last = 2 * HOT_MAX / BLOCK as u64 - 1;
    assert!(hot.copy_out(&key(last), &mut out) && out == vec![last as u8; BLOCK], "the newest copy is served");
    assert!(!hot.copy_out(&key(0), &mut out), "the oldest copy was dropped");

    // The copies go (their share shrinks to nothing): new blocks have the whole budget.
    hot.set_max(0);
    assert_eq!(hot.size(), 0);
    fill(&arc, 10_000);
    let refilled = blocks_held(&arc);
    assert!(refilled + SLACK >= MAX && refilled <= MAX, "blocks held {refilled} of {MAX} after the copies went");
}

#[test]
fn a_copy_is_charged_its_bookkeeping_beside_its_bytes() {
    let arc = ArcCache::new(MAX);
    let hot = arc.hot_copies(MAX / 2);
    // A tiny file's record: its node and table slot cost more than its bytes.
    for n in 0..1000 {
        hot.insert(key(n), &[n as u8; 512]);
    }
    assert_eq!(hot.size(), 1000 * (512 + tarn_arc::HOT_HEADER_BYTES));
    for n in 0..500 {
        hot.remove(&key(n));
    }
    assert_eq!(hot.size(), 500 * (512 + tarn_arc::HOT_HEADER_BYTES), "a copy leaves with what it was charged");
    hot.set_max(0);
    assert_eq!(hot.size(), 0);
}

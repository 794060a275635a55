//! A cached block is charged the slot the allocator hands out for it, and a buffer never
//! written is counted untouched to its slot's end (issue #11), when the
//! binary says how big that is (`set_alloc_size`); alone in its test binary, since the
//! hook is set once per process.
use std::sync::Arc;

use tarn_arc::{Access, ArcCache, BlockKey, Class, ReadKind};

/// An allocator whose slots are whole 4 KiB pages.
fn page_slots(len: usize) -> usize {
    len.next_multiple_of(4096)
}

#[test]
fn a_block_is_charged_its_allocator_slot_and_the_budget_holds_slots() {
    tarn_arc::set_alloc_size(page_slots);
    let max = 1 << 20;
    let arc = ArcCache::new(max);
    // 5,000 bytes (and the Arc's two counters) take a 8 KiB slot.
    let key = |n: u64| BlockKey { vdev: 0, offset: n << 20, birth: 1 };
    arc.insert(key(0), Arc::from(vec![7u8; 5000]), 16384, Class::Metadata, Access::of(ReadKind::Demand));
    let s = arc.snapshot();
    assert_eq!(s.size, 8192, "{s:?}");
    // As many blocks as 8 KiB slots fit, not as 5,000-byte lengths would.
    for n in 1..400 {
        arc.insert(key(n), Arc::from(vec![n as u8; 5000]), 16384, Class::Data, Access::of(ReadKind::Demand));
    }
    let s = arc.snapshot();
    assert!(s.accounted_size <= max, "{s:?}");
    assert_eq!(s.size % 8192, 0, "every block charged a whole slot: {s:?}");
    assert!(s.blocks * 8192 <= max, "{s:?}");
}

#[test]
fn an_untouched_buffer_is_counted_to_the_end_of_its_slot() {
    tarn_arc::set_alloc_size(page_slots);
    let before = tarn_arc::untouched_bytes();
    // A 10,000-byte buffer sits in a 12 KiB slot; 3,000 bytes of it are ever written, so
    // the allocator counts 9,288 bytes that never become resident (not 7,000).
    let untouched = tarn_arc::add_untouched(10_000, 3_000);
    assert_eq!(untouched, 12_288 - 3_000);
    assert_eq!(tarn_arc::untouched_bytes(), before + untouched);
    tarn_arc::sub_untouched_bytes(untouched);
    assert_eq!(tarn_arc::untouched_bytes(), before);
}

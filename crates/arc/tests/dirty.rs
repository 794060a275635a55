//! Dirty data inside the budget (issue #11): as the txgs' dirty bytes grow, cached blocks
//! — data and metadata, under either data policy — are evicted so that cached + dirty +
//! the rest stay within `arc_max`; when dirty data is written out, the room is the cache's
//! again.
use std::sync::Arc;

use tarn_arc::{Access, ArcCache, BlockKey, Class, DataPolicy, ReadKind};

const DEMAND: Access = Access::of(ReadKind::Demand);
const BLOCK: usize = 16384;
const MAX: u64 = 4 << 20;

fn key(n: u64) -> BlockKey {
    BlockKey { vdev: 0, offset: n * BLOCK as u64, birth: 1 }
}

/// A cache of `MAX` under `policy`, filled with as many data and metadata blocks as fit.
fn full_cache(policy: DataPolicy) -> ArcCache {
    let arc = ArcCache::with_policy(MAX, policy);
    for n in 0..(2 * MAX / BLOCK as u64) {
        let class = if n % 2 == 0 { Class::Data } else { Class::Metadata };
        arc.insert(key(n), Arc::from(vec![n as u8; BLOCK]), BLOCK as u32, class, DEMAND);
    }
    arc
}

#[test]
fn cached_blocks_make_room_for_dirty_data_under_either_policy() {
    for policy in [DataPolicy::SecondLevel, DataPolicy::Arc] {
        let arc = full_cache(policy);
        let before = arc.snapshot();
        assert!(before.size > MAX / 2, "{policy:?}: the cache filled: {before:?}");

        arc.set_dirty(MAX / 2);
        let s = arc.snapshot();
        assert_eq!(s.dirty_size, MAX / 2, "{policy:?}");
        assert!(s.accounted_size <= MAX, "{policy:?}: cached + dirty over the budget: {s:?}");
        assert!(s.size + s.headers_size + MAX / 2 <= MAX, "{policy:?}: blocks did not make room: {s:?}");

        // Written out: the room is the cache's again.
        arc.set_dirty(0);
        for n in 1000..1000 + MAX / BLOCK as u64 {
            arc.insert(key(n), Arc::from(vec![1u8; BLOCK]), BLOCK as u32, Class::Data, DEMAND);
            arc.insert(key(n + 5000), Arc::from(vec![2u8; BLOCK]), BLOCK as u32, Class::Metadata, DEMAND);
        }
        let s = arc.snapshot();
        assert_eq!(s.dirty_size, 0);
        assert!(s.size > MAX / 2, "{policy:?}: the cache did not get its room back: {s:?}");
        assert!(s.accounted_size <= MAX, "{policy:?}: {s:?}");
    }
}

#[test]
fn inserts_beside_dirty_data_keep_everything_within_the_budget() {
    let arc = ArcCache::new(MAX);
    arc.set_dirty(3 * MAX / 4);
    for n in 0..(2 * MAX / BLOCK as u64) {
        let class = if n % 3 == 0 { Class::Metadata } else { Class::Data };
        arc.insert(key(n), Arc::from(vec![n as u8; BLOCK]), BLOCK as u32, class, DEMAND);
        let s = arc.snapshot();
        assert!(s.accounted_size <= MAX, "after block {n}: {s:?}");
    }
}

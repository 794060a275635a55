//! The replacement policy as a user of the cache notices it: a scan does not flush the
//! hot set, ghost hits move the split, and the budget holds under concurrent use. The ARC
//! lists (metadata; data under `DataPolicy::Arc`) and the default data policy
//! (`DataPolicy::SecondLevel`) are both checked.
use std::sync::Arc;

use tarn_arc::{Access, ArcCache, BlockKey, Class, DataPolicy, Outside, PageId, ReadKind, OBJECTS_SHARE};

const DEMAND: Access = Access::of(ReadKind::Demand);

const BLOCK: usize = 4096;

fn key(n: u64) -> BlockKey {
    BlockKey { vdev: 0, offset: n * BLOCK as u64, birth: 1 }
}

/// Reads block `n` through the cache, inserting on a miss as the io pipeline does.
fn read(arc: &ArcCache, n: u64) -> bool {
    if arc.get(&key(n), DEMAND).is_some() {
        return true;
    }
    arc.insert(key(n), Arc::from(vec![n as u8; BLOCK]), 16384, Class::Data, DEMAND);
    false
}

/// The ARC lists as they keep data (tarn before issue #17, and metadata today).
fn arc_lists(max: u64) -> ArcCache {
    ArcCache::with_policy(max, DataPolicy::Arc)
}

#[test]
fn a_one_time_scan_does_not_flush_the_frequently_used_set() {
    for policy in [DataPolicy::Arc, DataPolicy::SecondLevel] {
        one_time_scan(ArcCache::with_policy(100 * BLOCK as u64, policy));
    }
}

fn one_time_scan(arc: ArcCache) {
    // A hot set of 40 blocks, each read twice: they live in the frequency list.
    for _ in 0..2 {
        for n in 0..40 {
            read(&arc, n);
        }
    }
    // A scan of 1,000 blocks read once each.
    for n in 1000..2000 {
        read(&arc, n);
    }
    let hot_hits = (0..40).filter(|&n| arc.get(&key(n), DEMAND).is_some()).count();
    assert_eq!(hot_hits, 40, "every hot block survived the scan");
    // (A plain LRU of the same size would hold only the last 100 scan blocks.)
    let s = arc.snapshot();
    assert!(s.frequency_size >= 40 * BLOCK as u64);
    assert!(s.size <= s.max);
}

#[test]
fn ghost_hits_steer_the_split_between_recency_and_frequency() {
    let arc = arc_lists(64 * BLOCK as u64);
    // 32 frequently used blocks fill the frequency side.
    for _ in 0..2 {
        for n in 0..32 {
            read(&arc, n);
        }
    }
    let start = arc.snapshot().target_recency;
    // A loop over 48 once-read blocks does not fit in what is left: re-reads find the
    // blocks in the recency ghost list, which grows the recency target.
    for _ in 0..4 {
        for n in 100..148 {
            read(&arc, n);
        }
    }
    let s = arc.snapshot();
    assert!(s.ghost_recency_hits > 0, "re-reads hit the recency ghosts: {s:?}");
    assert!(s.target_recency > start, "recency target grew from {start}: {s:?}");
    // The frequency side gave room; its evicted blocks are ghosts now. Wanting them back
    // hits the frequency ghosts, which shrinks the recency target again.
    let grown = s.target_recency;
    for n in 0..32 {
        read(&arc, n);
    }
    let s = arc.snapshot();
    assert!(s.ghost_frequency_hits > 0, "hot blocks came back from the frequency ghosts: {s:?}");
    assert!(s.target_recency < grown, "recency target shrank from {grown}: {s:?}");
}

#[test]
fn compressed_blocks_count_their_physical_size_and_report_logical() {
    let arc = ArcCache::new(1 << 20);
    for n in 0..10 {
        arc.insert(key(n), Arc::from(vec![0u8; 5000]), 16384, Class::Data, DEMAND);
    }
    arc.insert(key(99), Arc::from(vec![0u8; 2000]), 32768, Class::Metadata, Access::of(ReadKind::Indirect));
    let s = arc.snapshot();
    assert_eq!(s.compressed_size, 52_000);
    assert_eq!(s.logical_size, 10 * 16384 + 32768);
    assert_eq!((s.data_size, s.metadata_size), (50_000, 2000));
    // Three times as many 16 KiB records fit as an uncompressed cache would hold.
    assert!(s.logical_size as f64 / s.compressed_size as f64 > 3.0);
}

#[test]
fn the_budget_holds_under_concurrent_readers_and_shrinks_at_run_time() {
    for policy in [DataPolicy::Arc, DataPolicy::SecondLevel] {
        budget_under_concurrency(policy);
    }
}

fn budget_under_concurrency(policy: DataPolicy) {
    let arc = Arc::new(ArcCache::with_policy(256 * BLOCK as u64, policy));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let arc = arc.clone();
            std::thread::spawn(move || {
                let mut x = t + 1;
                for _ in 0..20_000 {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let n = if x >> 60 < 12 { (x >> 33) % 200 } else { (x >> 33) % 5000 };
                    read(&arc, n);
                    let s = arc.snapshot();
                    assert!(s.size <= s.max, "over budget: {} > {}", s.size, s.max);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = arc.snapshot();
    assert!(s.hits > 0 && s.misses > 0 && s.evictions > 0);
    arc.set_max(32 * BLOCK as u64);
    let s = arc.snapshot();
    assert!(s.size <= 32 * BLOCK as u64, "shrinking evicts at once: {}", s.size);
    let text = s.prometheus();
    assert!(text.contains("# TYPE tarn_arc_hits counter\ntarn_arc_hits "), "{text}");
}

#[test]
fn a_prefetched_block_read_once_is_not_taken_for_a_frequent_one() {
    let arc = arc_lists(64 * BLOCK as u64);
    arc.insert_prefetched(key(1), Arc::from(vec![1u8; BLOCK]), 16384, Class::Data, None);
    assert!(arc.get(&key(1), DEMAND).is_some());
    let s = arc.snapshot();
    assert_eq!((s.prefetch_reads, s.prefetch_hits), (1, 1));
    assert_eq!(s.frequency_size, 0, "the first demand read of a read-ahead block keeps it in recency");
    assert!(arc.get(&key(1), DEMAND).is_some());
    assert_eq!(arc.snapshot().frequency_size, BLOCK as u64, "a second demand read promotes it");
    assert_eq!(arc.snapshot().prefetch_hits, 1);
}

fn page(n: u64) -> PageId {
    PageId { objset: 1, object: 7, blkid: n }
}

/// Version `v` of page `n`: a rewritten page is a new block (copy-on-write).
fn version(n: u64, v: u64) -> BlockKey {
    BlockKey { vdev: 0, offset: (n * 64 + v) * BLOCK as u64, birth: v + 1 }
}

/// A demand read of version `v` of page `n`, inserting on a miss as the pipeline does.
fn read_page(arc: &ArcCache, n: u64, v: u64) -> bool {
    let access = Access::page(ReadKind::Demand, page(n));
    if arc.get(&version(n, v), access).is_some() {
        return true;
    }
    arc.insert(version(n, v), Arc::from(vec![n as u8; BLOCK]), 16384, Class::Data, access);
    false
}

/// The buffer pool above flushes page `n` as version `v`; the txg frees version `v - 1`.
fn rewrite_page(arc: &ArcCache, n: u64, v: u64) {
    arc.insert_written(version(n, v), Arc::from(vec![n as u8; BLOCK]), 16384, Class::Data, Some(page(n)), None);
    arc.remove(&version(n, v - 1));
}

#[test]
fn a_page_keeps_its_rank_across_rewrites_and_the_cache_serves_only_the_new_version() {
    let arc = ArcCache::new(64 * BLOCK as u64);
    // 40 pages read three times each: the frequently read set.
    for _ in 0..3 {
        for n in 0..40 {
            read_page(&arc, n, 0);
        }
    }
    // Each is rewritten (a new block per page), then a scan of 400 pages read once.
    for n in 0..40 {
        rewrite_page(&arc, n, 1);
    }
    for n in 1000..1400 {
        read_page(&arc, n, 0);
    }
    assert!(arc.get(&version(5, 0), DEMAND).is_none(), "the old version is gone");
    let hot = (0..40).filter(|&n| read_page(&arc, n, 1)).count();
    assert_eq!(hot, 40, "every rewritten hot page is still cached: {:?}", arc.snapshot());
    let s = arc.snapshot();
    assert!(s.size <= s.max);
}

#[test]
fn under_a_buffer_pool_the_most_read_pages_win_where_arc_and_lru_keep_the_recent_ones() {
    // The pattern a cache under a buffer pool sees: 30 pages come back again and again
    // (the pool's misses of its warm pages) among a stream of pages read once, each
    // warm page about every 60 reads. The cache holds 40 blocks.
    let hits = |arc: &ArcCache| {
        let mut hits = 0;
        let mut cold = 10_000;
        for round in 0..200u64 {
            for k in 0..60u64 {
                let n = if k % 2 == 0 { (round * 7 + k / 2) % 30 } else { cold };
                cold += k % 2;
                hits += (read_page(arc, n, 0) && n < 30) as u64;
            }
        }
        hits
    };
    let second_level = hits(&ArcCache::new(40 * BLOCK as u64));
    let arc = hits(&arc_lists(40 * BLOCK as u64));
    assert!(second_level > 5000, "warm pages hit: {second_level} of 6000");
    assert!(second_level > arc + 1000, "second-level {second_level} against ARC {arc}");
}

#[test]
fn a_recency_workload_grows_the_window_and_hits_like_lru() {
    // Each page is read twice, 20 reads apart, then never again: only recency helps.
    let arc = ArcCache::new(64 * BLOCK as u64);
    let mut hits = 0;
    for n in 0..4000u64 {
        read_page(&arc, n, 0);
        if n >= 20 {
            hits += read_page(&arc, n - 20, 0) as u64;
        }
    }
    let s = arc.snapshot();
    assert!(hits > 3000, "second reads hit once the window has grown: {hits} of 3980, {s:?}");
    assert!(s.target_recency > 20 * BLOCK as u64, "the window grew: {s:?}");
}

#[test]
fn metadata_is_kept_beside_data_within_the_one_budget() {
    let arc = ArcCache::new(64 * BLOCK as u64);
    let meta = Access::of(ReadKind::Indirect);
    for n in 0..20 {
        arc.insert(key(5000 + n), Arc::from(vec![0u8; BLOCK]), 32768, Class::Metadata, meta);
    }
    for n in 0..500 {
        read_page(&arc, n, 0);
    }
    let s = arc.snapshot();
    assert!(s.size <= s.max, "{s:?}");
    assert_eq!(s.metadata_size, 20 * BLOCK as u64, "data does not push metadata out: {s:?}");
    assert!((0..20).all(|n| arc.get(&key(5000 + n), meta).is_some()));
    // Metadata may take up to its limit (three quarters, ZFS's arc_meta_limit) from data,
    // no more: data keeps the rest, less the cache's own bookkeeping.
    for n in 20..200 {
        arc.insert(key(5000 + n), Arc::from(vec![0u8; BLOCK]), 32768, Class::Metadata, meta);
    }
    let s = arc.snapshot();
    assert_eq!(s.metadata_limit, s.max / 4 * 3);
    assert!(s.metadata_size <= s.metadata_limit && s.size <= s.max, "{s:?}");
    assert!(s.accounted_size <= s.max, "{s:?}");
    assert!(s.data_size + s.headers_size >= s.max / 4 - 2 * BLOCK as u64, "data keeps its quarter: {s:?}");
}

#[test]
fn a_read_ahead_block_evicted_unread_is_counted_and_remembered() {
    let arc = ArcCache::new(64 * BLOCK as u64);
    arc.insert_prefetched(version(1, 0), Arc::from(vec![1u8; BLOCK]), 16384, Class::Data, Some(page(1)));
    assert_eq!(arc.residency(&version(1, 0)), tarn_arc::Residency::Cached);
    for n in 100..300 {
        read_page(&arc, n, 0);
    }
    assert_eq!(arc.residency(&version(1, 0)), tarn_arc::Residency::EvictedUnread);
    let s = arc.snapshot();
    assert_eq!((s.prefetch_reads, s.prefetch_evicted_unread), (1, 1), "{s:?}");
}

#[test]
fn a_directory_record_read_as_metadata_is_cached_under_either_policy() {
    // Directories are stored as data blocks and read as `Directory`.
    let dir = Access::of(ReadKind::Directory);
    for policy in [DataPolicy::Arc, DataPolicy::SecondLevel] {
        let arc = ArcCache::with_policy(64 * BLOCK as u64, policy);
        assert!(arc.get(&key(1), dir).is_none());
        assert!(arc.keeps(Class::Data, ReadKind::Directory));
        arc.insert(key(1), Arc::from(vec![1u8; BLOCK]), 16384, Class::Data, dir);
        assert_eq!(arc.get(&key(1), dir).as_deref(), Some(&[1u8; BLOCK][..]), "{policy:?}");
        // Written, then read back as a directory.
        arc.insert_written(key(2), Arc::from(vec![2u8; BLOCK]), 16384, Class::Data, None, None);
        assert!(arc.get(&key(2), dir).is_some(), "{policy:?}");
        let s = arc.snapshot();
        assert_eq!(s.kind_hits[ReadKind::Directory.index()], 2, "{policy:?}");
    }
}

#[test]
fn a_shrink_evicts_down_to_the_new_budget_under_every_policy_even_with_metadata_over_its_limit() {
    for policy in [DataPolicy::SecondLevel, DataPolicy::Arc] {
        shrink_with_metadata_over_its_new_limit(policy);
    }
}

/// What a mount holds after many files were created and read (issue #11): decoded objects
/// at their share, decoded indirect blocks, metadata blocks, and file data read, read
/// again and rewritten through the paths the pipeline uses. A shrink to a quarter makes
/// the metadata (blocks and decoded) more than the new metadata limit: it must still give
/// back everything over the new budget, data included.
fn shrink_with_metadata_over_its_new_limit(policy: DataPolicy) {
    let max = 1024 * BLOCK as u64;
    let arc = ArcCache::with_policy(max, policy);
    arc.charge(Outside::Objects, max / OBJECTS_SHARE);
    let decoded: Vec<_> = (0..32).map(|n| arc.keep_decoded(n, BLOCK as u64)).collect();
    let meta = Access::of(ReadKind::Indirect);
    for n in 0..100 {
        arc.insert(key(100_000 + n), Arc::from(vec![0u8; BLOCK]), 16384, Class::Metadata, meta);
    }
    for round in 0..3 {
        for n in 0..600 {
            read_page(&arc, n, 0);
        }
        if round == 2 {
            for n in 0..100 {
                rewrite_page(&arc, n, 1);
            }
        }
    }
    let full = arc.snapshot();
    assert!(full.data_size >= max / 2, "{policy:?}: data fills the cache first: {full:?}");
    assert!(full.accounted_size <= max, "{policy:?}: {full:?}");

    let small = max / 4;
    arc.set_max(small);
    let s = arc.snapshot();
    assert!(
        s.metadata_size + s.decoded_indirect_size + s.decoded_objects_size > 0,
        "{policy:?}: the case under test keeps some metadata: {s:?}"
    );
    assert!(s.size <= small, "{policy:?}: cached blocks over the new budget: {s:?}");
    assert!(s.blocks * BLOCK as u64 <= small, "{policy:?}: {} blocks still cached: {s:?}", s.blocks);
    assert!(s.accounted_size <= small, "{policy:?}: accounted over the new budget: {s:?}");
    drop(decoded);
}

/// The data policy's read counts (a sketch sized by `arc_max`, issue #17) are bookkeeping
/// the budget covers: shown in `headers_size` on an empty cache, made smaller by a shrink,
/// absent when the ARC lists keep data.
#[test]
fn the_read_counts_are_charged_and_follow_arc_max() {
    const MIB: u64 = 1 << 20;
    let arc = ArcCache::new(1024 * MIB);
    let large = arc.snapshot().headers_size;
    assert!((512 * 1024..=2 * MIB).contains(&large), "a 1 GiB cache's read counts: {large} bytes");
    arc.set_max(64 * MIB);
    let small = arc.snapshot().headers_size;
    assert!(small * 8 <= large && small > 0, "after the shrink to 64 MiB: {small} bytes (was {large})");
    for n in 0..100_000 {
        read_page(&arc, n % 20_000, 0);
    }
    let s = arc.snapshot();
    assert!(s.accounted_size <= 64 * MIB, "blocks, their headers and the read counts fit: {s:?}");
    assert_eq!(arc_lists(1024 * MIB).snapshot().headers_size, 0, "no data policy, no read counts");
    let grown = ArcCache::new(0);
    grown.set_max(1024 * MIB);
    assert_eq!(grown.snapshot().headers_size, large, "a cache made empty and grown counts as one made at its size");
}

//! The replacement policy as a user of the cache notices it: a scan does not flush the
//! hot set, ghost hits move the split, and the budget holds under concurrent use.
use std::sync::Arc;

use tarn_arc::{ArcCache, BlockKey, Class};

const BLOCK: usize = 4096;

fn key(n: u64) -> BlockKey {
    BlockKey { vdev: 0, offset: n * BLOCK as u64, birth: 1 }
}

/// Reads block `n` through the cache, inserting on a miss as the io pipeline does.
fn read(arc: &ArcCache, n: u64) -> bool {
    if arc.get(&key(n)).is_some() {
        return true;
    }
    arc.insert(key(n), Arc::from(vec![n as u8; BLOCK]), 16384, Class::Data);
    false
}

#[test]
fn a_one_time_scan_does_not_flush_the_frequently_used_set() {
    let arc = ArcCache::new(100 * BLOCK as u64);
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
    let hot_hits = (0..40).filter(|&n| arc.get(&key(n)).is_some()).count();
    assert_eq!(hot_hits, 40, "every hot block survived the scan");
    // (A plain LRU of the same size would hold only the last 100 scan blocks.)
    let s = arc.snapshot();
    assert!(s.frequency_size >= 40 * BLOCK as u64);
    assert!(s.size <= s.max);
}

#[test]
fn ghost_hits_steer_the_split_between_recency_and_frequency() {
    let arc = ArcCache::new(64 * BLOCK as u64);
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
        arc.insert(key(n), Arc::from(vec![0u8; 5000]), 16384, Class::Data);
    }
    arc.insert(key(99), Arc::from(vec![0u8; 2000]), 32768, Class::Metadata);
    let s = arc.snapshot();
    assert_eq!(s.compressed_size, 52_000);
    assert_eq!(s.logical_size, 10 * 16384 + 32768);
    assert_eq!((s.data_size, s.metadata_size), (50_000, 2000));
    // Three times as many 16 KiB records fit as an uncompressed cache would hold.
    assert!(s.logical_size as f64 / s.compressed_size as f64 > 3.0);
}

#[test]
fn the_budget_holds_under_concurrent_readers_and_shrinks_at_run_time() {
    let arc = Arc::new(ArcCache::new(256 * BLOCK as u64));
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
    let arc = ArcCache::new(64 * BLOCK as u64);
    arc.insert_prefetched(key(1), Arc::from(vec![1u8; BLOCK]), 16384, Class::Data);
    assert!(arc.get(&key(1)).is_some());
    let s = arc.snapshot();
    assert_eq!((s.prefetch_reads, s.prefetch_hits), (1, 1));
    assert_eq!(s.frequency_size, 0, "the first demand read of a read-ahead block keeps it in recency");
    assert!(arc.get(&key(1)).is_some());
    assert_eq!(arc.snapshot().frequency_size, BLOCK as u64, "a second demand read promotes it");
    assert_eq!(arc.snapshot().prefetch_hits, 1);
}

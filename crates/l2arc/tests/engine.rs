//! The L2ARC engine on image files: feed, read, wrap, rebuild after reopen, blank and
//! foreign devices, and the RAM its index takes per block.
mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{fail_all_when, Hooked, Io, Then};
use tarn_arc::{BlockKey, Class, Departing, EvictSink};
use tarn_l2arc::{CacheSpec, DevState, FreedBlock, L2Arc, PoolBlocks};

const POOL: u64 = 0x5eed;
const GUID: u64 = 0xcace;

fn image(dir: &Path, name: &str, size: u64) -> std::path::PathBuf {
    let p = dir.join(name);
    let f = std::fs::File::create(&p).unwrap();
    f.set_len(size).unwrap();
    p
}

fn spec(path: &Path) -> Vec<CacheSpec> {
    vec![CacheSpec { guid: GUID, path: path.to_path_buf() }]
}

/// A block's stored bytes, different for every key and size.
fn bytes_of(key: &BlockKey, len: usize) -> Arc<[u8]> {
    let seed = key.offset.wrapping_mul(31) ^ key.birth.wrapping_mul(1_000_003);
    (0..len).map(|i| (seed.wrapping_add(i as u64 * 7) % 251) as u8).collect::<Vec<_>>().into()
}

fn key(n: u64) -> BlockKey {
    BlockKey { vdev: (n % 2) as u16, offset: n * 8192, birth: 10 + n }
}

fn evict(sink: &Arc<dyn EvictSink>, k: BlockKey, len: usize) {
    let bytes = bytes_of(&k, len);
    sink.evicted(Departing {
        key: k,
        bytes: &bytes,
        lsize: 16384,
        class: Class::Data,
        unread_prefetch: false,
        objset: None,
    });
}

/// Feeds `keys` one at a time (waiting while the queue is full) until each is written.
fn feed_all(l2: &L2Arc, sink: &Arc<dyn EvictSink>, keys: &[BlockKey], len: usize) {
    for k in keys {
        let before = l2.snapshot().written_blocks + l2.snapshot().feed_behind;
        evict(sink, *k, len);
        let deadline = Instant::now() + Duration::from_secs(10);
        while l2.snapshot().written_blocks + l2.snapshot().feed_behind == before
            && l2.snapshot().feed_backlog > 0
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    wait_drained(l2);
}

fn wait_drained(l2: &L2Arc) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while l2.snapshot().feed_backlog > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    // The last chunk is written after the queue empties.
    std::thread::sleep(Duration::from_millis(300));
}

fn wait_rebuilt(l2: &L2Arc) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while l2.rebuilding() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(!l2.rebuilding(), "rebuild did not finish");
}

/// Reads `k`; returns its bytes only if the device had them.
fn read(l2: &L2Arc, k: &BlockKey, len: usize) -> Option<Vec<u8>> {
    let mut scratch = Vec::new();
    let (_, range) = l2.read(k, len as u32, &mut scratch)?;
    Some(scratch[range].to_vec())
}

#[test]
fn fed_blocks_read_back_and_survive_reopen_and_a_foreign_or_blank_device_starts_empty() {
    let dir = tempfile::tempdir().unwrap();
    let path = image(dir.path(), "cache.img", 64 << 20);
    let keys: Vec<BlockKey> = (0..2000).map(key).collect();
    {
        let l2 = L2Arc::open(POOL, &spec(&path));
        let sink = l2.start(true);
        assert_eq!(l2.devices()[0].note.as_deref(), Some("initialised: blank device"));
        feed_all(&l2, &sink, &keys, 5000);
        for k in &keys {
            assert_eq!(read(&l2, k, 5000).as_deref(), Some(&bytes_of(k, 5000)[..]), "{k:?}");
        }
        // Another birth at the same address is another block: never served.
        let reborn = BlockKey { birth: keys[0].birth + 1, ..keys[0] };
        assert_eq!(read(&l2, &reborn, 5000), None);
        l2.forget(&keys[1], 5000, 16384);
        assert_eq!(read(&l2, &keys[1], 5000), None);
    }
    // The sink holds the devices as the ARC would: both go before the devices reopen.
    let l2 = L2Arc::open(POOL, &spec(&path));
    let started = Instant::now();
    let sink = l2.start(true);
    wait_rebuilt(&l2);
    eprintln!("rebuild of {} blocks: {:?}", keys.len(), started.elapsed());
    let note = l2.devices()[0].note.clone().unwrap_or_default();
    assert!(note.starts_with("index rebuilt: 2000 blocks"), "{note}");
    for k in &keys {
        assert_eq!(read(&l2, k, 5000).as_deref(), Some(&bytes_of(k, 5000)[..]), "after reopen: {k:?}");
    }
    drop((sink, l2));
    let other = L2Arc::open(POOL + 1, &spec(&path));
    let sink = other.start(true);
    let note = other.devices()[0].note.clone().unwrap();
    assert!(note.starts_with("initialised: cache of another pool"), "{note}");
    assert_eq!(read(&other, &keys[5], 5000), None);
    drop((sink, other));
    std::fs::File::create(&path).unwrap().set_len(64 << 20).unwrap();
    let blank = L2Arc::open(POOL, &spec(&path));
    let _sink = blank.start(true);
    assert_eq!(blank.devices()[0].note.as_deref(), Some("initialised: blank device"));
    assert_eq!(read(&blank, &keys[5], 5000), None);
}

/// A pool that still holds only the blocks with an even offset step, born up to `committed`.
struct EvenBlocks {
    committed: u64,
}

impl PoolBlocks for EvenBlocks {
    fn may_be_live(&self, key: &BlockKey, _psize: u32) -> bool {
        key.birth <= self.committed && (key.offset / 8192).is_multiple_of(2)
    }
}

#[test]
fn a_rebuild_leaves_out_blocks_the_pool_no_longer_holds_and_counts_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = image(dir.path(), "cache.img", 64 << 20);
    let keys: Vec<BlockKey> = (0..1000).map(key).collect();
    {
        let l2 = L2Arc::open(POOL, &spec(&path));
        let sink = l2.start(true);
        feed_all(&l2, &sink, &keys, 5000);
        assert_eq!(l2.snapshot().blocks, 1000);
    }
    let l2 = L2Arc::open(POOL, &spec(&path));
    // Keys 0..900 were committed (birth 10..909); the last 100 were born after.
    assert!(l2.set_pool_blocks(Arc::new(EvenBlocks { committed: 909 })));
    let sink = l2.start(true);
    wait_rebuilt(&l2);
    let s = l2.snapshot();
    assert_eq!(s.blocks, 450, "only the even blocks born up to txg 909: {s:?}");
    assert_eq!(s.rebuild_stale, 550, "{s:?}");
    assert_eq!(s.size, 450 * 16384, "size counts only what is indexed: {s:?}");
    for (n, k) in keys.iter().enumerate() {
        let kept = n < 900 && n % 2 == 0;
        assert_eq!(read(&l2, k, 5000).is_some(), kept, "block {n}");
    }
    drop((sink, l2));
}

#[test]
fn a_wrapped_ring_serves_only_what_it_still_holds_and_rebuilds_across_the_wrap() {
    let dir = tempfile::tempdir().unwrap();
    let path = image(dir.path(), "small.img", 8 << 20);
    let keys: Vec<BlockKey> = (0..5000).map(key).collect();
    {
        let l2 = L2Arc::open(POOL, &spec(&path));
        let sink = l2.start(true);
        feed_all(&l2, &sink, &keys, 7000); // ~34 MiB through an 8 MiB ring
        let served: Vec<_> = keys.iter().filter(|k| read(&l2, k, 7000).is_some()).collect();
        assert!(served.len() > 500, "only {} blocks served", served.len());
        assert!(served.len() < 1200, "{} blocks in an 8 MiB ring", served.len());
        for k in &keys {
            if let Some(b) = read(&l2, k, 7000) {
                assert_eq!(&b[..], &bytes_of(k, 7000)[..], "wrong bytes for {k:?}");
            }
        }
        assert!(read(&l2, &keys[4999], 7000).is_some(), "the newest block is served");
        let snap = l2.snapshot();
        assert!(snap.asize <= 8 << 20 && snap.asize > 4 << 20, "{snap:?}");
        drop(sink);
    }
    let l2 = L2Arc::open(POOL, &spec(&path));
    let _sink = l2.start(true);
    wait_rebuilt(&l2);
    let mut after = 0;
    for k in &keys {
        if let Some(b) = read(&l2, k, 7000) {
            assert_eq!(&b[..], &bytes_of(k, 7000)[..], "wrong bytes after rebuild for {k:?}");
            after += 1;
        }
    }
    assert!(after > 500, "only {after} blocks after rebuild");
    assert!(read(&l2, &keys[4999], 7000).is_some());
}

#[test]
fn a_missing_device_is_unavailable_and_costs_nothing_but_hits() {
    let dir = tempfile::tempdir().unwrap();
    let l2 = L2Arc::open(POOL, &spec(&dir.path().join("gone.img")));
    let sink = l2.start(true);
    let d = &l2.devices()[0];
    assert_eq!(d.state, DevState::Unavail);
    assert!(d.note.as_deref().unwrap().contains("initialised at the next import"), "{:?}", d.note);
    evict(&sink, key(1), 100);
    assert_eq!(read(&l2, &key(1), 100), None);
}

#[test]
fn a_device_that_appears_or_comes_back_is_reattached_unless_autoreplace_is_off() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("late.img");
    let l2 = L2Arc::open(POOL, &spec(&path));
    let sink = l2.start(true);
    assert_eq!(l2.reattach(true), Vec::<std::path::PathBuf>::new(), "still missing");
    assert_eq!(l2.devices()[0].state, DevState::Unavail);
    image(dir.path(), "late.img", 64 << 20);
    assert_eq!(l2.reattach(false), Vec::<std::path::PathBuf>::new(), "cacheautoreplace=off leaves it");
    assert_eq!(l2.reattach(true), vec![path.clone()]);
    let devices = l2.devices();
    assert_eq!(devices.len(), 1, "the old slot is not shown: {devices:?}");
    assert_eq!(devices[0].state, DevState::Online);
    let keys: Vec<BlockKey> = (0..50).map(key).collect();
    feed_all(&l2, &sink, &keys, 3000);
    // Ten reads whose bytes the caller found wrong: dropped at the tenth.
    for (n, k) in keys[..10].iter().enumerate() {
        assert_eq!(l2.devices()[0].state, DevState::Online, "still used after {n} errors");
        let mut scratch = Vec::new();
        let (slot, _) = l2.read(k, 3000, &mut scratch).expect("held");
        l2.note_bad(slot, k, 3000, 16384);
    }
    let d = &l2.devices()[0];
    assert_eq!((d.state.clone(), d.cksum_errors), (DevState::Faulted, 10), "{d:?}");
    assert_eq!(read(&l2, &keys[20], 3000), None, "nothing read from it");
    assert_eq!(l2.reattach(false), vec![path], "a faulted device is tried again whatever autoreplace says");
    feed_all(&l2, &sink, &keys, 3000);
    assert_eq!(read(&l2, &keys[20], 3000).as_deref(), Some(&bytes_of(&keys[20], 3000)[..]));
}

#[test]
fn wrong_bytes_in_entries_a_rebuild_restored_are_misses_that_never_drop_the_device() {
    // After a power cut a chunk's log block may be on the device and its blocks not.
    let dir = tempfile::tempdir().unwrap();
    let path = image(dir.path(), "cache.img", 64 << 20);
    let keys: Vec<BlockKey> = (0..40).map(key).collect();
    {
        let l2 = L2Arc::open(POOL, &spec(&path));
        let sink = l2.start(true);
        feed_all(&l2, &sink, &keys[..20], 3000);
    }
    let l2 = L2Arc::open(POOL, &spec(&path));
    let sink = l2.start(true);
    wait_rebuilt(&l2);
    for k in &keys[..20] {
        let mut scratch = Vec::new();
        let (slot, _) = l2.read(k, 3000, &mut scratch).expect("rebuilt");
        l2.note_bad(slot, k, 3000, 16384);
    }
    let d = &l2.devices()[0];
    assert_eq!((d.state.clone(), d.cksum_errors), (DevState::Online, 20), "{d:?}");
    // Blocks written this session are evidence: ten of them drop it.
    feed_all(&l2, &sink, &keys[20..], 3000);
    for k in &keys[20..30] {
        let mut scratch = Vec::new();
        let (slot, _) = l2.read(k, 3000, &mut scratch).expect("written");
        l2.note_bad(slot, k, 3000, 16384);
    }
    assert_eq!(l2.devices()[0].state, DevState::Faulted);
}

#[test]
fn a_trickle_of_evictions_is_written_in_few_large_chunks_not_one_per_block() {
    let dir = tempfile::tempdir().unwrap();
    let path = image(dir.path(), "cache.img", 64 << 20);
    let l2 = L2Arc::open(POOL, &spec(&path));
    let sink = l2.start(true);
    let keys: Vec<BlockKey> = (0..300).map(key).collect();
    let started = Instant::now();
    for k in &keys {
        // One block a millisecond: the queue is dry between blocks, as under TPC-C.
        evict(&sink, *k, 5000);
        std::thread::sleep(Duration::from_millis(1));
    }
    wait_drained(&l2);
    let s = l2.snapshot();
    assert_eq!(s.written_blocks, 300);
    // A chunk is written when it holds 256 KiB or a round (1/8 s) after its first
    // block: at most one per round that passed, and far fewer than one per block.
    let rounds = started.elapsed().as_millis() as u64 / (1000 / tarn_l2arc::ROUNDS_PER_SEC) + 2;
    assert!(s.writes <= rounds.min(300 / 8), "{} chunk writes for 300 blocks in {rounds} rounds", s.writes);
    for k in &keys {
        assert_eq!(read(&l2, k, 5000).as_deref(), Some(&bytes_of(k, 5000)[..]), "{k:?}");
    }
}

#[test]
fn index_ram_per_block_stays_under_48_bytes_at_every_fill() {
    let dir = tempfile::tempdir().unwrap();
    // Entries are inserted through a real device so the figure is the one status shows.
    let path = image(dir.path(), "big.img", 256 << 20);
    let l2 = L2Arc::open(POOL, &spec(&path));
    let sink = l2.start(true);
    let mut worst: f64 = 0.0;
    let mut n = 0u64;
    for step in 0..8 {
        let keys: Vec<BlockKey> = (n..n + 4000).map(key).collect();
        n += 4000;
        for k in &keys {
            evict(&sink, *k, 600);
        }
        wait_drained(&l2);
        let s = l2.snapshot();
        if s.blocks > 10_000 {
            let per = s.hdr_size as f64 / s.blocks as f64;
            eprintln!("step {step}: {} blocks, {} header bytes, {per:.1} bytes per block", s.blocks, s.hdr_size);
            worst = worst.max(per);
        }
    }
    assert!(worst > 0.0);
    assert!(worst <= 48.0, "{worst:.1} bytes per cached block");
}

#[test]
fn a_device_added_to_a_running_cache_is_fed_and_read_and_a_removed_one_is_let_go_while_reads_go_on() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let path = image(dir.path(), "added.img", 64 << 20);
    let l2 = Arc::new(L2Arc::open(POOL, &[]));
    let sink = l2.start(false);
    assert!(l2.devices().is_empty());
    let dev = Arc::new(tarn_vdev::FileDevice::open(&path).unwrap());
    l2.add_device(&spec(&path)[0], dev.clone()).unwrap();
    assert!(l2.add_device(&spec(&path)[0], dev.clone()).is_err(), "the same device twice");
    assert_eq!(tarn_l2arc::cache_owner(dev.as_ref()), Some(POOL), "initialised as this pool's");
    drop(dev);
    let keys: Vec<BlockKey> = (0..500).map(key).collect();
    feed_all(&l2, &sink, &keys, 3000);
    assert_eq!(l2.devices()[0].state, DevState::Online);
    for k in &keys {
        assert_eq!(read(&l2, k, 3000).as_deref(), Some(&bytes_of(k, 3000)[..]), "{k:?}");
    }
    // Readers go on while the device leaves: each read is the right bytes or a miss.
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (l2, keys, stop, served) = (l2.clone(), keys.clone(), stop.clone(), served.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    for k in &keys {
                        if let Some(b) = read(&l2, k, 3000) {
                            assert_eq!(&b[..], &bytes_of(k, 3000)[..], "wrong bytes for {k:?}");
                            served.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(l2.remove_device(GUID).unwrap(), Some(path.clone()));
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().expect("a reader saw wrong bytes");
    }
    assert!(served.load(Ordering::Relaxed) > 0, "reads were served before the removal");
    assert!(l2.devices().is_empty(), "a removed device is not shown");
    assert_eq!(l2.snapshot().blocks, 0);
    assert!(keys.iter().all(|k| read(&l2, k, 3000).is_none()), "nothing is served from a removed device");
    assert_eq!(l2.remove_device(GUID).unwrap(), None, "removed already");
    // The header is zeroed and the device let go: another opener may have it.
    let again = tarn_vdev::FileDevice::open(&path).expect("the device was let go");
    assert_eq!(tarn_l2arc::cache_owner(&again), None);
    evict(&sink, key(7), 3000); // the sink has no device to feed: dropped, no panic
}

#[test]
fn a_device_that_starts_failing_is_dropped_after_its_errors_and_costs_only_hits() {
    let dir = tempfile::tempdir().unwrap();
    let path = image(dir.path(), "failing.img", 64 << 20);
    let failing = Arc::new(AtomicBool::new(false));
    let dev = Arc::new(Hooked::new(tarn_vdev::FileDevice::open(&path).unwrap(), fail_all_when(&failing)));
    let l2 = L2Arc::open_devices(POOL, vec![(spec(&path)[0].clone(), dev.clone() as Arc<dyn tarn_vdev::BlockDevice>)]);
    let sink = l2.start(false);
    let keys: Vec<BlockKey> = (0..300).map(key).collect();
    feed_all(&l2, &sink, &keys, 4000);
    assert!(read(&l2, &keys[0], 4000).is_some());
    failing.store(true, Ordering::Relaxed);
    for k in &keys {
        assert_eq!(read(&l2, k, 4000), None, "a failing device serves nothing");
    }
    let d = &l2.devices()[0];
    assert_eq!(d.state, DevState::Faulted);
    let note = d.note.clone().unwrap_or_default();
    assert!(note.starts_with("dropped after 16 read errors"), "{note}");
    let snap = l2.snapshot();
    assert_eq!((snap.io_errors, snap.blocks), (16, 0), "16 errors, then nothing more is tried");
    // The feed stops writing to it: nothing more is queued for a faulted device.
    evict(&sink, key(1000), 4000);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(l2.snapshot().written_blocks, snap.written_blocks);
}

#[test]
fn a_txgs_frees_are_forgotten_in_one_batch_never_served_and_give_their_header_ram_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = image(dir.path(), "frees.img", 64 << 20);
    let l2 = L2Arc::open(POOL, &spec(&path));
    l2.tunables().set("l2arc_headroom", 64).unwrap();
    let sink = l2.start(true);
    let keys: Vec<BlockKey> = (0..20_000).map(key).collect();
    for chunk in keys.chunks(2000) {
        for k in chunk {
            evict(&sink, *k, 600);
        }
        wait_drained(&l2);
    }
    let full = l2.snapshot();
    assert_eq!(full.blocks, 20_000, "{full:?}");
    let mut freed: Vec<FreedBlock> =
        keys[..18_000].iter().map(|k| FreedBlock { key: *k, psize: 600, lsize: 16384 }).collect();
    // A block at a freed address born again (reused space) was never cached: not forgotten.
    freed.push(FreedBlock {
        key: BlockKey { birth: keys[18_500].birth + 1, ..keys[18_500] },
        psize: 600,
        lsize: 16384,
    });
    l2.forget_batch(&mut freed);
    let after = l2.snapshot();
    assert_eq!((after.blocks, after.freed), (2_000, 18_000), "{after:?}");
    assert_eq!(after.size, 2_000 * 16384, "{after:?}");
    assert!(after.hdr_size * 4 < full.hdr_size, "header RAM given back: {} -> {}", full.hdr_size, after.hdr_size);
    eprintln!("hdr_size {} -> {} bytes; {} bytes per block", full.hdr_size, after.hdr_size, after.hdr_bytes_per_block);
    for (n, k) in keys.iter().enumerate() {
        let got = read(&l2, k, 600);
        if n < 18_000 {
            assert_eq!(got, None, "freed block {n} served");
        } else {
            assert_eq!(got.as_deref(), Some(&bytes_of(k, 600)[..]), "block {n}");
        }
    }
    // The freed space reused by new blocks: they are cached and served, never the old bytes.
    let reborn: Vec<BlockKey> = keys[..100].iter().map(|k| BlockKey { birth: k.birth + 1_000_000, ..*k }).collect();
    feed_all(&l2, &sink, &reborn, 600);
    for (old, new) in keys.iter().zip(&reborn) {
        assert_eq!(read(&l2, old, 600), None);
        assert_eq!(read(&l2, new, 600).as_deref(), Some(&bytes_of(new, 600)[..]));
    }
}

/// A pool whose blocks with an odd offset step were all freed.
struct OddFreed;

impl PoolBlocks for OddFreed {
    fn may_be_live(&self, _key: &BlockKey, _psize: u32) -> bool {
        true
    }
    fn still_allocated(&self, key: &BlockKey, _psize: u32) -> bool {
        (key.offset / 8192).is_multiple_of(2)
    }
}

#[test]
fn a_block_freed_while_it_waits_in_the_feed_queue_is_not_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = image(dir.path(), "queued.img", 64 << 20);
    // A cache device whose chunk writes take 300 ms (the feed's chunks are in flight a while).
    let dev = Arc::new(Hooked::new(tarn_vdev::FileDevice::open(&path).unwrap(), |io| match io {
        Io::Write { offset, .. } if offset > 0 => Then::Delay(Duration::from_millis(300)),
        _ => Then::Pass,
    }));
    let l2 = L2Arc::open_devices(POOL, vec![(spec(&path)[0].clone(), dev as Arc<dyn tarn_vdev::BlockDevice>)]);
    assert!(l2.set_pool_blocks(Arc::new(OddFreed)));
    l2.tunables().set("l2arc_headroom", 64).unwrap();
    let sink = l2.start(false);
    let keys: Vec<BlockKey> = (0..300).map(key).collect();
    for k in &keys {
        evict(&sink, *k, 4000);
    }
    // The txg that freed the odd blocks commits while they are queued or being written:
    // there is nothing to forget yet.
    let mut freed: Vec<FreedBlock> =
        keys.iter().skip(1).step_by(2).map(|k| FreedBlock { key: *k, psize: 4000, lsize: 16384 }).collect();
    l2.forget_batch(&mut freed);
    assert_eq!(l2.snapshot().written_blocks, 0, "a chunk was written before the frees");
    wait_drained(&l2);
    std::thread::sleep(Duration::from_millis(600));
    let s = l2.snapshot();
    assert_eq!(s.written_blocks, 300, "{s:?}");
    assert_eq!(s.blocks, 150, "only the blocks still allocated are kept: {s:?}");
    assert_eq!((s.freed, s.freed_while_queued), (150, 150), "{s:?}");
    for (n, k) in keys.iter().enumerate() {
        assert_eq!(read(&l2, k, 4000).is_some(), n % 2 == 0, "block {n}");
    }
    drop(sink);
}

#[test]
fn a_chunk_write_cut_short_by_a_kill_leaves_no_entry_naming_bytes_that_are_not_there() {
    let dir = tempfile::tempdir().unwrap();
    let path = image(dir.path(), "cut.img", 64 << 20);
    let keys: Vec<BlockKey> = (0..100).map(key).collect();
    {
        // A cache device that cuts one write short, as a process killed during a large
        // buffered write leaves it (Linux ends the write between pages): half its bytes
        // reach the device, and every write after it is lost with the process.
        let (cut_next, dead) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let dev = Arc::new(Hooked::new(tarn_vdev::FileDevice::open(&path).unwrap(), {
            let (cut_next, dead) = (cut_next.clone(), dead.clone());
            move |io| match io {
                Io::Write { .. } if dead.load(Ordering::SeqCst) => Then::Keep(0),
                Io::Write { offset, len } if offset > 0 && cut_next.load(Ordering::SeqCst) => {
                    dead.store(true, Ordering::SeqCst);
                    Then::Keep((len / 2) / 4096 * 4096)
                }
                _ => Then::Pass,
            }
        }));
        let l2 =
            L2Arc::open_devices(POOL, vec![(spec(&path)[0].clone(), dev.clone() as Arc<dyn tarn_vdev::BlockDevice>)]);
        let sink = l2.start(true);
        feed_all(&l2, &sink, &keys[..50], 3000);
        cut_next.store(true, Ordering::SeqCst);
        feed_all(&l2, &sink, &keys[50..], 3000);
        assert!(dead.load(Ordering::SeqCst), "the second chunk's write was cut");
    }
    let l2 = L2Arc::open(POOL, &spec(&path));
    let _sink = l2.start(true);
    wait_rebuilt(&l2);
    let mut back = 0;
    for k in &keys {
        if let Some(b) = read(&l2, k, 3000) {
            assert_eq!(
                &b[..],
                &bytes_of(k, 3000)[..],
                "{k:?}: a rebuilt entry names bytes that never reached the device"
            );
            back += 1;
        }
    }
    assert!(back >= 50, "the whole chunks before the cut are rebuilt: {back}");
}

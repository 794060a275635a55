//! The L2ARC through the pool: no wrong data under churn with a tiny ARC and a cache
//! device (every read against a `Vec<u8>` model), corruption on the cache device (misses
//! counted, right bytes), blank, shrunken, foreign and missing cache devices at import (the pool
//! imports ONLINE, the device is initialised or shown UNAVAIL), and a warm cache right
//! after export and import.
mod common;

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::db::{create_db_pool, fast_txg, wait_rebuilt, Rng};
use tarn_dataset::{Dataset, NewObject, ROOT_ID};
use tarn_pool::{ImportOptions, Pool};

const PAGE: u64 = 16384;
const PAGES: u64 = 256;
const TINY_ARC: u64 = 96 << 10;

/// A pool on one data image with one cache image, a 4 MiB file of 16 KiB pages.
fn pool_with_cache(dir: &Path) -> (Pool, PathBuf, PathBuf, u64, Vec<u8>) {
    let (img, cache) = (dir.join("d0.img"), dir.join("cache.img"));
    let (pool, ds) = create_db_pool(&img, 128 << 20, vec![cache.clone()]);
    let ino = ds.create(ROOT_ID, b"t", NewObject::File, 0o644, 0, 0).unwrap().ino;
    let mut model = Vec::new();
    for p in 0..PAGES {
        let data = if p % 3 == 0 { common::noise(p, PAGE as usize) } else { common::pattern(p, PAGE as usize) };
        ds.write(ino, p * PAGE, &data).unwrap();
        model.extend_from_slice(&data);
    }
    drop(ds);
    pool.sync().unwrap();
    pool.set_arc_max(TINY_ARC);
    (pool, img, cache, ino, model)
}

fn l2(pool: &Pool, name: &str) -> u64 {
    pool.stats().l2arc.get(name).copied().unwrap_or_else(|| panic!("no l2arc counter {name}"))
}

fn read_page(ds: &Dataset, ino: u64, model: &[u8], p: u64) {
    let mut buf = vec![0u8; PAGE as usize];
    let n = ds.read(ino, p * PAGE, &mut buf).unwrap_or_else(|e| panic!("page {p}: {e}"));
    assert_eq!(n, PAGE as usize, "page {p} read short");
    assert!(buf[..] == model[(p * PAGE) as usize..((p + 1) * PAGE) as usize], "page {p}: wrong bytes");
}

/// Reads every page (the ARC, far too small, evicts them to the cache), then waits for
/// the feed to write what it queued.
fn read_all_and_settle(pool: &Pool, ds: &Dataset, ino: u64, model: &[u8]) {
    for p in 0..PAGES {
        read_page(ds, ino, model, p);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while l2(pool, "feed_backlog") > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(400));
}

#[test]
fn no_wrong_data_with_a_tiny_arc_and_a_cache_device_then_warm_after_import() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, img, _cache, ino, mut model) = pool_with_cache(dir.path());
    let ds = pool.dataset("tank/db").unwrap();
    let mut rng = Rng(0x12_2A7C);
    for step in 0..6000 {
        let p = if rng.below(2) == 0 { rng.below(32) } else { rng.below(PAGES) };
        match rng.below(100) {
            0..=69 => read_page(&ds, ino, &model, p),
            // A rewrite: a new block; the old one is freed and must never be served.
            70..=89 => {
                let data = common::pattern(rng.next(), PAGE as usize);
                ds.write(ino, p * PAGE, &data).unwrap();
                model[(p * PAGE) as usize..((p + 1) * PAGE) as usize].copy_from_slice(&data);
            }
            90..=94 => pool.sync().unwrap(),
            _ => std::thread::sleep(Duration::from_millis(2)), // let the feed catch up
        }
        if step % 1000 == 999 {
            eprintln!("step {step}: {:?}", pool.stats().l2arc);
        }
    }
    let hits = l2(&pool, "hits");
    assert!(hits > 200, "the cache served reads: {:?}", pool.stats().l2arc);
    assert_eq!(l2(&pool, "cksum_bad"), 0);
    assert_eq!(l2(&pool, "io_errors"), 0);
    assert!(l2(&pool, "freed") > 0, "rewrites dropped cached versions: {:?}", pool.stats().l2arc);
    read_all_and_settle(&pool, &ds, ino, &model);
    drop(ds);
    pool.export().unwrap();

    let started = Instant::now();
    let pool = Pool::import_paths(&[img], &ImportOptions { txg: fast_txg() }).unwrap();
    pool.set_arc_max(TINY_ARC);
    wait_rebuilt(&pool);
    eprintln!("import and rebuild: {:?}, {:?}", started.elapsed(), pool.stats().l2arc);
    let status = pool.status();
    assert_eq!(status.state, "ONLINE");
    assert_eq!(status.caches.len(), 1);
    assert_eq!(status.caches[0].state.name(), "ONLINE");
    let ds = pool.dataset("tank/db").unwrap();
    for p in 0..PAGES {
        read_page(&ds, ino, &model, p);
    }
    let hits = l2(&pool, "hits");
    assert!(hits > PAGES / 2, "warm right after import: {hits} hits of {PAGES} pages; {:?}", pool.stats().l2arc);
    drop(ds);
    pool.export().unwrap();
}

#[test]
fn a_rebuild_after_import_leaves_out_blocks_freed_since_they_were_cached() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, img, _cache, ino, mut model) = pool_with_cache(dir.path());
    let ds = pool.dataset("tank/db").unwrap();
    read_all_and_settle(&pool, &ds, ino, &model);
    let cached = l2(&pool, "blocks");
    assert!(cached > PAGES / 2, "the cache holds the file: {:?}", pool.stats().l2arc);
    // Every page rewritten: each cached version is freed (and forgotten by the index).
    for p in 0..PAGES {
        let data = common::pattern(p + 7 * PAGES, PAGE as usize);
        ds.write(ino, p * PAGE, &data).unwrap();
        model[(p * PAGE) as usize..((p + 1) * PAGE) as usize].copy_from_slice(&data);
    }
    pool.sync().unwrap();
    read_all_and_settle(&pool, &ds, ino, &model);
    let before = l2(&pool, "blocks");
    let size_before = l2(&pool, "size");
    drop(ds);
    pool.export().unwrap();

    let pool = Pool::import_paths(&[img], &ImportOptions { txg: fast_txg() }).unwrap();
    pool.set_arc_max(TINY_ARC);
    wait_rebuilt(&pool);
    let stats = pool.stats().l2arc;
    eprintln!("before export: {before} blocks, {size_before} bytes; after import: {stats:?}");
    // A few blocks may go in after import (the import's own reads), none come back.
    let after = l2(&pool, "blocks");
    assert!(after <= before + 16, "freed blocks came back: {before} before export, {after} after; {stats:?}");
    assert!(l2(&pool, "size") <= size_before + 16 * PAGE, "size inflated: {stats:?}");
    assert!(l2(&pool, "rebuild_stale") >= cached / 2, "the freed versions were counted: {stats:?}");
    let ds = pool.dataset("tank/db").unwrap();
    for p in 0..PAGES {
        read_page(&ds, ino, &model, p);
    }
    assert_eq!(l2(&pool, "cksum_bad"), 0);
    drop(ds);
    pool.export().unwrap();
}

#[test]
fn freed_blocks_leave_the_index_at_their_txgs_commit_and_reused_space_is_never_served_old_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, _img, _cache, ino, mut model) = pool_with_cache(dir.path());
    let ds = pool.dataset("tank/db").unwrap();
    read_all_and_settle(&pool, &ds, ino, &model);
    let full = pool.stats().l2arc;
    let cached = l2(&pool, "blocks");
    assert!(cached > PAGES / 2, "the cache holds the file: {full:?}");
    // Every page freed: the txg's frees are forgotten in one batch when it commits.
    ds.punch_hole(ino, 0, PAGES * PAGE).unwrap();
    pool.sync().unwrap();
    let emptied = pool.stats().l2arc;
    eprintln!("cached: {full:?}\nafter the free: {emptied:?}");
    assert!(l2(&pool, "freed") >= cached - 8, "the file's cached blocks were forgotten: {emptied:?}");
    assert!(l2(&pool, "blocks") <= 8, "{emptied:?}");
    assert!(l2(&pool, "hdr_size") < full["hdr_size"], "header RAM given back: {full:?} -> {emptied:?}");
    // The freed space is reused by new pages: what is read is always the new bytes, and
    // the cache never returned the old ones (they would fail the checksum: cksum_bad).
    for p in 0..PAGES {
        // As compressible as the first version: all-pattern pages (~90 bytes stored
        // each) would all fit in the tiny ARC and never reach the cache device.
        let seed = p + 11 * PAGES;
        let data = if p % 3 == 0 { common::noise(seed, PAGE as usize) } else { common::pattern(seed, PAGE as usize) };
        ds.write(ino, p * PAGE, &data).unwrap();
        model[(p * PAGE) as usize..((p + 1) * PAGE) as usize].copy_from_slice(&data);
    }
    pool.sync().unwrap();
    read_all_and_settle(&pool, &ds, ino, &model);
    read_all_and_settle(&pool, &ds, ino, &model);
    let stats = pool.stats().l2arc;
    assert!(l2(&pool, "hits") > full["hits"], "the new pages were served from the cache: {stats:?}");
    assert_eq!((l2(&pool, "cksum_bad"), l2(&pool, "io_errors")), (0, 0), "{stats:?}");
    drop(ds);
    pool.export().unwrap();
}

#[test]
fn a_cache_device_returning_wrong_bytes_is_dropped_then_tried_again_by_clear() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, img, cache, ino, model) = pool_with_cache(dir.path());
    let ds = pool.dataset("tank/db").unwrap();
    read_all_and_settle(&pool, &ds, ino, &model);
    read_all_and_settle(&pool, &ds, ino, &model);
    let hits = l2(&pool, "hits");
    assert!(hits > PAGES / 2, "the cache is warm: {:?}", pool.stats().l2arc);
    // Flip a byte in every 512 bytes of the ring (past the 4 KiB header): the device
    // returns wrong bytes, never an I/O error.
    let f = std::fs::OpenOptions::new().read(true).write(true).open(&cache).unwrap();
    let used = (l2(&pool, "asize") * 2).min(f.metadata().unwrap().len() - 8192);
    let mut b = [0u8; 1];
    for at in (4096 + 700..4096 + used).step_by(512) {
        f.read_exact_at(&mut b, at).unwrap();
        f.write_all_at(&[b[0] ^ 0x5a], at).unwrap();
    }
    // Out of record order, so read-ahead never runs: its reads would race the demand
    // reads for the cache device and count checksum errors past the tenth.
    for p in (0..PAGES).map(|i| i * 97 % PAGES) {
        read_page(&ds, ino, &model, p);
    }
    let bad = l2(&pool, "cksum_bad");
    assert_eq!(bad, 10, "counted misses until the device was dropped: {:?}", pool.stats().l2arc);
    let status = pool.status();
    assert_eq!(status.state, "ONLINE", "a cache device never degrades the pool");
    assert_eq!(status.data_errors, 0, "a bad cache copy is not a pool error");
    let c = &status.caches[0];
    assert_eq!((c.state.name(), c.cksum_errors), ("FAULTED", 10));
    let note = c.note.clone().unwrap_or_default();
    assert!(note.starts_with("dropped after 10 checksum errors in 600 s"), "{note}");
    assert!(note.contains("`tarn pool clear tank` tries it again"), "{note}");
    assert!(note.contains(&format!("`tarn pool remove tank {}` takes it out", cache.display())), "{note}");
    let hits = l2(&pool, "hits");
    read_all_and_settle(&pool, &ds, ino, &model);
    assert_eq!(l2(&pool, "hits"), hits, "nothing more is read from it");
    assert_eq!(l2(&pool, "cksum_bad"), bad);

    // The device was fixed (here: its bytes are as good as its ring is fresh): clear.
    pool.clear_errors().unwrap();
    let c = pool.status().caches.remove(0);
    assert_eq!((c.state.name(), c.cksum_errors), ("ONLINE", 0), "{c:?}");
    read_all_and_settle(&pool, &ds, ino, &model);
    read_all_and_settle(&pool, &ds, ino, &model);
    assert!(l2(&pool, "hits") > hits + PAGES / 2, "fed and read again: {:?}", pool.stats().l2arc);
    assert_eq!(l2(&pool, "cksum_bad"), bad, "its fresh ring holds good bytes");
    drop(ds);
    pool.export().unwrap();
    // Re-attached at the next import too (its ring rebuilt).
    let pool = Pool::import_paths(&[img], &ImportOptions { txg: fast_txg() }).unwrap();
    wait_rebuilt(&pool);
    assert_eq!(pool.status().caches[0].state.name(), "ONLINE");
    pool.export().unwrap();
}

#[test]
fn blank_foreign_and_missing_cache_devices_never_stop_an_import() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, img, cache, ino, model) = pool_with_cache(dir.path());
    let ds = pool.dataset("tank/db").unwrap();
    read_all_and_settle(&pool, &ds, ino, &model);
    drop(ds);
    pool.export().unwrap();
    let import = || Pool::import_paths(std::slice::from_ref(&img), &ImportOptions { txg: fast_txg() }).unwrap();

    // The VM moved host: the device came back blank.
    std::fs::File::create(&cache).unwrap().set_len(64 << 20).unwrap();
    let pool = import();
    let status = pool.status();
    assert_eq!(status.state, "ONLINE");
    assert_eq!(status.caches[0].note.as_deref(), Some("initialised: blank device"), "{:?}", status.caches);
    let ds = pool.dataset("tank/db").unwrap();
    read_all_and_settle(&pool, &ds, ino, &model);
    drop(ds);
    pool.export().unwrap();

    // The new host's device is smaller than the one the cache was written on: its ring
    // would run past the end, so the cache starts afresh on what there is.
    std::fs::OpenOptions::new().write(true).open(&cache).unwrap().set_len(32 << 20).unwrap();
    let pool = import();
    let status = pool.status();
    assert_eq!(status.state, "ONLINE");
    assert_eq!(status.caches[0].note.as_deref(), Some("initialised: device smaller than its cache"));
    pool.set_arc_max(TINY_ARC);
    let ds = pool.dataset("tank/db").unwrap();
    read_all_and_settle(&pool, &ds, ino, &model);
    let hits = l2(&pool, "hits");
    for p in 0..PAGES {
        read_page(&ds, ino, &model, p);
    }
    assert!(l2(&pool, "hits") > hits, "the re-initialised smaller device serves reads again");
    drop(ds);
    pool.export().unwrap();

    // Another pool's cache device at the configured path.
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let (o, _, ocache, _, _) = pool_with_cache(&other);
    o.export().unwrap();
    std::fs::copy(&ocache, &cache).unwrap();
    let pool = import();
    let status = pool.status();
    assert_eq!(status.state, "ONLINE");
    let note = status.caches[0].note.clone().unwrap_or_default();
    assert!(note.starts_with("initialised: cache of another pool"), "{note}");
    let ds = pool.dataset("tank/db").unwrap();
    for p in 0..PAGES {
        read_page(&ds, ino, &model, p);
    }
    drop(ds);
    pool.export().unwrap();

    // Gone altogether.
    std::fs::remove_file(&cache).unwrap();
    let pool = import();
    let status = pool.status();
    assert_eq!(status.state, "ONLINE");
    assert_eq!(status.caches[0].state.name(), "UNAVAIL");
    let ds = pool.dataset("tank/db").unwrap();
    for p in 0..PAGES {
        read_page(&ds, ino, &model, p);
    }
    drop(ds);
    pool.export().unwrap();
}

/// Sequential 128 KiB reads of a file 8 × the ARC (issue #12: "128 KiB sequential reads
/// barely used the L2ARC"): blocks read ahead and evicted before any read asked for them
/// are left out (`l2arc_noprefetch`, as ZFS), but every block a read asked for is fed,
/// so the second pass is served from the cache device.
#[test]
fn a_sequential_128k_scan_is_served_from_the_cache_device_on_its_second_pass() {
    let dir = tempfile::tempdir().unwrap();
    let (img, cache) = (dir.path().join("d0.img"), dir.path().join("cache.img"));
    let (pool, ds) = create_db_pool(&img, 512 << 20, vec![cache]);
    pool.set_property("tank/db", "recordsize", "128K").unwrap();
    let ino = ds.create(ROOT_ID, b"scan", NewObject::File, 0o644, 0, 0).unwrap().ino;
    const REC: u64 = 128 << 10;
    const RECORDS: u64 = 512; // 64 MiB, incompressible
    for r in 0..RECORDS {
        ds.write(ino, r * REC, &common::noise(r, REC as usize)).unwrap();
    }
    pool.sync().unwrap();
    pool.set_arc_max(8 << 20);
    let mut buf = vec![0u8; REC as usize];
    let mut scan = || {
        for r in 0..RECORDS {
            assert_eq!(ds.read(ino, r * REC, &mut buf).unwrap(), REC as usize);
            assert!(buf == common::noise(r, REC as usize), "record {r}: wrong bytes");
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while l2(&pool, "feed_backlog") > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(400));
    };
    scan();
    let (hits, misses) = (l2(&pool, "hits"), l2(&pool, "misses"));
    scan();
    let stats = pool.stats().l2arc;
    eprintln!("after two scans: {stats:?}");
    assert!(l2(&pool, "hits") - hits >= RECORDS * 9 / 10, "second pass from the cache device: {stats:?}");
    assert!(l2(&pool, "misses") - misses <= RECORDS / 10, "{stats:?}");
    drop(ds);
    pool.export().unwrap();
}

//! Cache devices added to and removed from an open pool (issue #12, second increment):
//! a device added to a pool that had none fills and serves; one removed while readers go
//! on leaves without a wrong byte, its header zeroed, free to reuse; the config follows
//! across export and import; bad input is refused by name and changes nothing.
mod common;
/// `Hooked`, the cache device that fails (slows, cuts short) its I/O when told: shared with
/// the L2ARC's own tests.
#[path = "../../l2arc/tests/common/mod.rs"]
mod hooked;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hooked::{fail_all_when, Hooked};
use tarn_dataset::{Dataset, NewObject, ROOT_ID};
use tarn_pool::{CreateOptions, DeviceClass, ImportOptions, Pool, PoolError, VdevSpec};
use tarn_txg::TxgConfig;

const MB: u64 = 1 << 20;
const PAGE: u64 = 16384;
const PAGES: u64 = 256;
/// Far smaller than the file: nearly every read misses the ARC and evicts a block.
const TINY_ARC: u64 = 96 << 10;

fn txg() -> TxgConfig {
    TxgConfig { timeout: Duration::from_millis(50), ..Default::default() }
}

/// Pool `tank` on one data image, no cache device, with a 4 MiB file of 16 KiB pages in
/// `tank/db`; returns the pool, the data image, the file and its bytes.
fn pool_without_cache(dir: &Path) -> (Pool, PathBuf, u64, Vec<u8>) {
    let img = dir.join("d0.img");
    let opts = CreateOptions { size: Some(128 * MB), txg: txg(), ..Default::default() };
    let pool = Pool::create("tank", &[VdevSpec::Disk(img.clone())], &opts).unwrap();
    let ds = pool.create_dataset("tank/db").unwrap();
    pool.set_property("tank/db", "recordsize", "16K").unwrap();
    let ino = ds.create(ROOT_ID, b"t", NewObject::File, 0o644, 0, 0).unwrap().ino;
    let mut model = Vec::new();
    for p in 0..PAGES {
        let data = if p % 3 == 0 { common::noise(p, PAGE as usize) } else { common::pattern(p, PAGE as usize) };
        ds.write(ino, p * PAGE, &data).unwrap();
        model.extend_from_slice(&data);
    }
    pool.sync().unwrap();
    pool.set_arc_max(TINY_ARC);
    (pool, img, ino, model)
}

fn add_cache(pool: &Pool, path: &Path) -> Result<Vec<PathBuf>, PoolError> {
    pool.add_devices(DeviceClass::Cache, &[VdevSpec::Disk(path.to_path_buf())], false, Some(64 * MB))
}

fn l2(pool: &Pool, name: &str) -> u64 {
    pool.stats().l2arc.get(name).copied().unwrap_or(0)
}

fn check_page(ds: &Dataset, ino: u64, model: &[u8], p: u64) {
    let mut buf = vec![0u8; PAGE as usize];
    let n = ds.read(ino, p * PAGE, &mut buf).unwrap_or_else(|e| panic!("page {p}: {e}"));
    assert_eq!(n, PAGE as usize, "page {p} read short");
    assert!(buf[..] == model[(p * PAGE) as usize..((p + 1) * PAGE) as usize], "page {p}: wrong bytes");
}

/// Reads every page twice (the tiny ARC evicts them to the cache), letting the feed
/// write what it queued in between.
fn read_all_twice(pool: &Pool, ds: &Dataset, ino: u64, model: &[u8]) {
    for _ in 0..2 {
        for p in 0..PAGES {
            check_page(ds, ino, model, p);
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while l2(pool, "feed_backlog") > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The pool whose cache header a device carries, if any (a closed device).
fn owner(path: &Path) -> Option<u64> {
    let dev = tarn_vdev::FileDevice::open(path).expect("the device is free");
    tarn_l2arc::cache_owner(&dev)
}

#[test]
fn a_cache_added_to_an_open_pool_serves_and_a_removed_one_leaves_while_reads_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, img, ino, model) = pool_without_cache(dir.path());
    let cache = dir.path().join("cache.img");
    assert!(pool.status().caches.is_empty());
    assert_eq!(add_cache(&pool, &cache).unwrap(), vec![cache.clone()]);
    let status = pool.status();
    assert_eq!(status.caches.len(), 1, "status follows the add at once");
    assert_eq!((status.caches[0].path.as_str(), status.caches[0].state.name()), (cache.to_str().unwrap(), "ONLINE"));
    let ds = pool.dataset("tank/db").unwrap();
    read_all_twice(&pool, &ds, ino, &model);
    assert!(l2(&pool, "hits") > 0, "the added device served reads: {:?}", pool.stats().l2arc);
    assert!(pool.status().caches[0].blocks > 0);

    // Readers go on through the removal: every page right, whether the cache served it.
    let stop = Arc::new(AtomicBool::new(false));
    let pool = Arc::new(pool);
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (ds, model, stop) = (pool.dataset("tank/db").unwrap(), model.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut p = r * 17;
                while !stop.load(Ordering::Relaxed) {
                    check_page(&ds, ino, &model, p % PAGES);
                    p += 1;
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    let removed = pool.remove_device(cache.to_str().unwrap()).unwrap();
    assert_eq!((removed.class, removed.paths), (DeviceClass::Cache, vec![cache.clone()]));
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().expect("a reader saw wrong bytes or an error");
    }
    assert!(pool.status().caches.is_empty(), "status follows the removal at once");
    let hits = l2(&pool, "hits");
    for p in 0..PAGES {
        check_page(&ds, ino, &model, p);
    }
    assert_eq!(l2(&pool, "hits"), hits, "nothing is served from a removed device");
    assert_eq!(owner(&cache), None, "its header is zeroed and the device let go");
    let e = pool.remove_device(cache.to_str().unwrap()).unwrap_err();
    assert!(matches!(e, PoolError::NotInPool { .. }), "removed already: {e}");

    // Added again, then the config names it across export and import.
    add_cache(&pool, &cache).unwrap();
    drop(ds);
    let Ok(pool) = Arc::try_unwrap(pool) else { panic!("the readers are gone") };
    pool.export().unwrap();
    let pool = Pool::import_paths(&[img], &ImportOptions { txg: txg() }).unwrap();
    assert_eq!(pool.status().caches.len(), 1, "the import opens the added device");
    common::db::wait_rebuilt(&pool); // its ring is read back in the background first
    assert_eq!(pool.status().caches[0].state.name(), "ONLINE");
    pool.remove_device(cache.to_str().unwrap()).unwrap();
    pool.export().unwrap();
    let pool = Pool::import_paths(&[dir.path().join("d0.img")], &ImportOptions { txg: txg() }).unwrap();
    assert!(pool.status().caches.is_empty(), "the removal outlives the import");
    let ds = pool.dataset("tank/db").unwrap();
    for p in 0..PAGES {
        check_page(&ds, ino, &model, p);
    }
    drop(ds);
    pool.export().unwrap();
}

#[test]
fn bad_cache_adds_and_removes_are_refused_by_name_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, img, _, _) = pool_without_cache(dir.path());
    let cache = dir.path().join("cache.img");
    add_cache(&pool, &cache).unwrap();
    // A cache device of another pool, exported: still that pool's.
    let other_cache = dir.path().join("other-cache.img");
    let opts = CreateOptions { size: Some(64 * MB), caches: vec![other_cache.clone()], ..Default::default() };
    Pool::create("other", &[VdevSpec::Disk(dir.path().join("other.img"))], &opts).unwrap().export().unwrap();
    let small = dir.path().join("small.img");
    let before = format!("{:?}", pool.status().caches.iter().map(|c| (&c.path, c.guid)).collect::<Vec<_>>());
    let refusals: Vec<(Result<Vec<PathBuf>, PoolError>, &str)> = vec![
        (add_cache(&pool, &cache), "given twice"),
        (add_cache(&pool, &img), "given twice"),
        (add_cache(&pool, &other_cache), "cache device of another pool"),
        (pool.add_devices(DeviceClass::Cache, &[VdevSpec::Disk(small.clone())], false, Some(8 * MB)), "too small"),
        (
            pool.add_devices(DeviceClass::Cache, &[VdevSpec::Disk(dir.path().join("nonexistent/c.img"))], false, None),
            "",
        ),
        (
            pool.add_devices(DeviceClass::Cache, &[VdevSpec::Mirror(vec![small.clone(), cache.clone()])], false, None),
            "never mirrored",
        ),
        (pool.add_devices(DeviceClass::Cache, &[], false, None), "at least one cache device"),
    ];
    for (i, (result, says)) in refusals.into_iter().enumerate() {
        let e = result.expect_err("refused").to_string();
        assert!(e.contains(says) && !e.contains('\n'), "refusal {i}: {e}");
    }
    for (name, says) in
        [("/nonexistent/cache.img", "no such device in pool 'tank'"), (img.to_str().unwrap(), "data vdevs")]
    {
        let e = pool.remove_device(name).unwrap_err().to_string();
        assert!(e.contains(says), "remove {name}: {e}");
    }
    assert!(!small.exists(), "a refused add leaves no image behind");
    let after = format!("{:?}", pool.status().caches.iter().map(|c| (&c.path, c.guid)).collect::<Vec<_>>());
    assert_eq!(before, after, "the cache devices are as they were");
    // With -f the other pool's cache device is taken (that pool only loses its cache).
    pool.add_devices(DeviceClass::Cache, &[VdevSpec::Disk(other_cache.clone())], true, None).unwrap();
    assert_eq!(pool.status().caches.len(), 2);
    pool.export().unwrap();
}

/// Writes `PAGES` incompressible pages to a new file `t` of dataset `name`.
fn filled_dataset(pool: &Pool, name: &str, seed: u64) -> (u64, Vec<u8>) {
    let ds = pool.create_dataset(name).unwrap();
    pool.set_property(name, "recordsize", "16K").unwrap();
    let ino = ds.create(ROOT_ID, b"t", NewObject::File, 0o644, 0, 0).unwrap().ino;
    let mut model = Vec::new();
    for p in 0..PAGES {
        let data = common::noise(seed + p, PAGE as usize);
        ds.write(ino, p * PAGE, &data).unwrap();
        model.extend_from_slice(&data);
    }
    (ino, model)
}

/// Hits the cache served while every page of `name`'s file was read twice.
fn hits_reading(pool: &Pool, name: &str, ino: u64, model: &[u8]) -> u64 {
    let before = l2(pool, "hits");
    read_all_twice(pool, &pool.dataset(name).unwrap(), ino, model);
    l2(pool, "hits") - before
}

#[test]
fn secondarycache_none_and_metadata_keep_a_datasets_file_blocks_off_the_cache_and_a_change_applies_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache.img");
    let opts = CreateOptions { size: Some(256 * MB), txg: txg(), caches: vec![cache], ..Default::default() };
    let pool = Pool::create("tank", &[VdevSpec::Disk(dir.path().join("d0.img"))], &opts).unwrap();
    let (kept_ino, kept) = filled_dataset(&pool, "tank/kept", 1 << 20);
    let (off_ino, off) = filled_dataset(&pool, "tank/off", 2 << 20);
    let (meta_ino, meta) = filled_dataset(&pool, "tank/meta", 3 << 20);
    pool.set_property("tank/off", "secondarycache", "none").unwrap();
    pool.set_property("tank/meta", "secondarycache", "metadata").unwrap();
    pool.sync().unwrap();
    pool.set_arc_max(TINY_ARC);

    assert!(hits_reading(&pool, "tank/kept", kept_ino, &kept) > PAGES / 2, "{:?}", pool.stats().l2arc);
    let skipped = l2(&pool, "feed_skipped_policy");
    assert_eq!(hits_reading(&pool, "tank/off", off_ino, &off), 0, "none: {:?}", pool.stats().l2arc);
    // The file's indirect block, its dnode's and the directory's may be served (they are
    // metadata, evicted from the tiny ARC too): a handful, never its pages.
    let meta_hits = hits_reading(&pool, "tank/meta", meta_ino, &meta);
    assert!(
        meta_hits <= 4,
        "metadata: {meta_hits} hits, more than the file's metadata blocks: {:?}",
        pool.stats().l2arc
    );
    assert!(l2(&pool, "feed_skipped_policy") >= skipped + PAGES, "{:?}", pool.stats().l2arc);

    // Inherited from the parent, and changed while the blocks sit in the ARC: the blocks
    // fed afterwards follow the new value.
    pool.set_property("tank", "secondarycache", "none").unwrap();
    pool.inherit_property("tank/off", "secondarycache").unwrap();
    pool.set_property("tank/meta", "secondarycache", "all").unwrap();
    assert!(hits_reading(&pool, "tank/meta", meta_ino, &meta) > PAGES / 2, "all again: {:?}", pool.stats().l2arc);
    let skipped = l2(&pool, "feed_skipped_policy");
    assert_eq!(hits_reading(&pool, "tank/off", off_ino, &off), 0, "inherited none: {:?}", pool.stats().l2arc);
    assert!(l2(&pool, "feed_skipped_policy") > skipped);
    pool.export().unwrap();
}

#[test]
fn a_cache_device_failing_mid_run_is_dropped_the_pool_stays_online_and_reads_stay_right() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, img, ino, model) = pool_without_cache(dir.path());
    let cache = dir.path().join("cache.img");
    std::fs::File::create(&cache).unwrap().set_len(64 * MB).unwrap();
    let failing = Arc::new(AtomicBool::new(false));
    let dev = Arc::new(Hooked::new(tarn_vdev::FileDevice::open(&cache).unwrap(), fail_all_when(&failing)));
    pool.add_cache_devices(vec![dev.clone() as Arc<dyn tarn_vdev::BlockDevice>], false).unwrap();
    let ds = pool.dataset("tank/db").unwrap();
    read_all_twice(&pool, &ds, ino, &model);
    assert!(l2(&pool, "hits") > 0, "{:?}", pool.stats().l2arc);
    failing.store(true, Ordering::Relaxed);
    read_all_twice(&pool, &ds, ino, &model);
    let status = pool.status();
    assert_eq!(status.state, "ONLINE", "a cache device never degrades the pool");
    let c = &status.caches[0];
    assert_eq!(c.state.name(), "FAULTED");
    assert!(c.note.as_deref().unwrap_or("").starts_with("dropped after"), "the reason: {:?}", c.note);
    let hits = l2(&pool, "hits");
    read_all_twice(&pool, &ds, ino, &model);
    assert_eq!(l2(&pool, "hits"), hits, "nothing more is read from it");
    assert_eq!(status.data_errors, 0);
    // Removed while faulted: the config forgets it though its header cannot be zeroed.
    drop(ds);
    pool.remove_device(cache.to_str().unwrap()).unwrap();
    assert!(pool.status().caches.is_empty());
    pool.export().unwrap();
    let pool = Pool::import_paths(&[img], &ImportOptions { txg: txg() }).unwrap();
    assert!(pool.status().caches.is_empty(), "the config forgot it");
    pool.export().unwrap();
}

#[test]
fn cacheautoreplace_initialises_a_blank_cache_device_at_import_unless_it_is_off() {
    let dir = tempfile::tempdir().unwrap();
    let (img, cache) = (dir.path().join("d0.img"), dir.path().join("cache.img"));
    let opts = CreateOptions { size: Some(128 * MB), txg: txg(), caches: vec![cache.clone()], ..Default::default() };
    let pool = Pool::create("tank", &[VdevSpec::Disk(img.clone())], &opts).unwrap();
    let row = |pool: &Pool| {
        let r = pool.get_pool_properties(Some("cacheautoreplace")).unwrap().remove(0);
        (r.value, r.source)
    };
    assert_eq!(row(&pool), ("on".to_string(), "default".to_string()));
    for (name, value, says) in [
        ("cacheautoreplace", "maybe", "use on | off"),
        ("autoexpand", "on", "unknown pool property 'autoexpand'; pool properties: cacheautoreplace"),
    ] {
        let e = pool.set_pool_property(name, value).unwrap_err().to_string();
        assert!(e.contains(says), "{e}");
    }
    pool.set_pool_property("cacheautoreplace", "off").unwrap();
    pool.export().unwrap();
    let blank = || std::fs::File::create(&cache).unwrap().set_len(64 * MB).unwrap(); // the VM moved
    blank();
    let pool = Pool::import_paths(std::slice::from_ref(&img), &ImportOptions { txg: txg() }).unwrap();
    assert_eq!(row(&pool), ("off".to_string(), "local".to_string()), "kept in the pool");
    let c = pool.status().caches.remove(0);
    assert_eq!(c.state.name(), "UNAVAIL");
    assert_eq!(
        c.note.as_deref(),
        Some("blank device; not initialised: cacheautoreplace=off (tarn pool remove, then add, to use it)")
    );
    assert_eq!(pool.status().state, "ONLINE");
    pool.set_pool_property("cacheautoreplace", "on").unwrap();
    pool.export().unwrap();
    assert_eq!(owner(&cache), None, "left untouched while off");
    let pool = Pool::import_paths(std::slice::from_ref(&img), &ImportOptions { txg: txg() }).unwrap();
    assert_eq!(row(&pool).1, "default", "setting the default clears the setting");
    let c = pool.status().caches.remove(0);
    assert_eq!((c.state.name(), c.note.as_deref()), ("ONLINE", Some("initialised: blank device")));
    pool.export().unwrap();
    assert!(owner(&cache).is_some(), "initialised by itself");
}

/// Reads every record of the sparse file and looks up and reads every small file (the
/// ARC, far too small, evicts their data, indirect, dnode and directory blocks), then
/// waits for the feed to write what it queued.
fn churn_metadata(pool: &Pool, ds: &Dataset, sparse: u64, files: u64) {
    let mut buf = vec![0u8; PAGE as usize];
    for _ in 0..2 {
        for r in 0..SPARSE_RECORDS {
            let n = ds.read(sparse, r * SPARSE_STRIDE * PAGE, &mut buf).unwrap();
            assert_eq!(n, PAGE as usize);
            assert!(buf[..] == common::pattern(r, PAGE as usize)[..], "record {r}: wrong bytes");
        }
        for f in 0..files {
            let ino = ds.lookup(ROOT_ID, format!("f{f}").as_bytes()).unwrap().ino;
            let n = ds.read(ino, 0, &mut buf).unwrap();
            assert_eq!(&buf[..n], format!("file {f}").as_bytes());
        }
        ds.trim_cache();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while l2(pool, "feed_backlog") > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(400));
}

/// One record every `SPARSE_STRIDE` (an indirect block's fan-out): each has its own
/// indirect block.
const SPARSE_STRIDE: u64 = 512;
const SPARSE_RECORDS: u64 = 96;

fn written(pool: &Pool) -> [u64; 3] {
    [l2(pool, "written_data"), l2(pool, "written_metadata"), l2(pool, "written_pool_metadata")]
}

#[test]
fn secondarycache_metadata_feeds_a_datasets_indirect_dnode_and_directory_blocks_and_none_keeps_them_off() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache.img");
    let opts = CreateOptions { size: Some(256 * MB), txg: txg(), caches: vec![cache], ..Default::default() };
    let pool = Pool::create("tank", &[VdevSpec::Disk(dir.path().join("d0.img"))], &opts).unwrap();
    let ds = pool.create_dataset("tank/m").unwrap();
    pool.set_property("tank/m", "recordsize", "16K").unwrap();
    let sparse = ds.create(ROOT_ID, b"sparse", NewObject::File, 0o644, 0, 0).unwrap().ino;
    for r in 0..SPARSE_RECORDS {
        ds.write(sparse, r * SPARSE_STRIDE * PAGE, &common::pattern(r, PAGE as usize)).unwrap();
    }
    let files = 300;
    for f in 0..files {
        let ino = ds.create(ROOT_ID, format!("f{f}").as_bytes(), NewObject::File, 0o644, 0, 0).unwrap().ino;
        ds.write(ino, 0, format!("file {f}").as_bytes()).unwrap();
    }
    pool.set_property("tank/m", "secondarycache", "metadata").unwrap();
    pool.sync().unwrap();
    pool.set_arc_max(TINY_ARC);

    churn_metadata(&pool, &ds, sparse, files);
    let [data, meta, _] = written(&pool);
    assert_eq!(data, 0, "metadata: no file data: {:?}", pool.stats().l2arc);
    assert!(meta >= SPARSE_RECORDS, "metadata: the dataset's indirect blocks at least: {:?}", pool.stats().l2arc);

    pool.set_property("tank/m", "secondarycache", "none").unwrap();
    let before = written(&pool);
    let skipped = l2(&pool, "feed_skipped_policy");
    churn_metadata(&pool, &ds, sparse, files);
    let after = written(&pool);
    assert_eq!(after[..2], before[..2], "none: neither data nor the dataset's metadata: {:?}", pool.stats().l2arc);
    assert!(l2(&pool, "feed_skipped_policy") > skipped + SPARSE_RECORDS);

    pool.set_property("tank/m", "secondarycache", "all").unwrap();
    let before = written(&pool);
    churn_metadata(&pool, &ds, sparse, files);
    let after = written(&pool);
    assert!(after[0] > before[0] + SPARSE_RECORDS / 2, "all: data: {:?}", pool.stats().l2arc);
    drop(ds);
    pool.export().unwrap();
}

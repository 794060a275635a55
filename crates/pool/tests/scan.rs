//! Scrub and resilver in the background, the error log behind `status -v`, and the I/O
//! counters behind `iostat` (issue #10): what an operator sees of a pool that runs.
//!
//! A background scrub repairs mirror sides while writes go on, can be stopped, and its
//! line in `status` outlives an export; one cut short resumes where it stopped and
//! counts every block once. A mirror side that was away is resilvered with exactly what
//! it missed, and no read trusts its stale copies meanwhile. Permanent errors are named
//! by file. Every device counts its operations.
mod common;

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tarn_dataset::{Dataset, FsError, NewObject, ROOT_ID};
use tarn_pool::{CreateOptions, ImportOptions, Pool, ScanKind, ScanPace, ScanState, VdevSpec};

use common::image::{flip, image_bytes, locate};

/// A pool of raw records (the test finds a file's bytes in the image).
fn new_pool(specs: &[VdevSpec]) -> Pool {
    let opts = CreateOptions { size: Some(128 << 20), ..Default::default() };
    let pool = Pool::create("tank", specs, &opts).unwrap();
    pool.set_property("tank", "compression", "off").unwrap();
    pool
}

fn mirror(dir: &Path) -> (PathBuf, PathBuf, Pool) {
    let a = dir.join("a.img");
    let b = dir.join("b.img");
    let pool = new_pool(&[VdevSpec::Mirror(vec![a.clone(), b.clone()])]);
    (a, b, pool)
}

fn import(paths: &[PathBuf]) -> Pool {
    Pool::import_paths(paths, &ImportOptions::default()).unwrap_or_else(|e| panic!("import failed: {e}"))
}

fn write_file(ds: &Dataset, dir: u64, name: &str, data: &[u8]) -> u64 {
    let a = ds.create(dir, name.as_bytes(), NewObject::File, 0o644, 0, 0).unwrap();
    ds.write(a.ino, 0, data).unwrap();
    a.ino
}

fn read_named(ds: &Dataset, name: &str) -> Result<Vec<u8>, FsError> {
    let ino = ds.lookup(ROOT_ID, name.as_bytes())?.ino;
    common::read_file(ds, ino)
}

fn checksum_errors(pool: &Pool) -> Vec<u64> {
    pool.status().vdevs.iter().flat_map(|t| t.leaves.iter().map(|l| l.checksum_errors)).collect()
}

/// A pace slow enough that a scan of a few megabytes takes many slices.
const SLOW: ScanPace = ScanPace { yield_to_demand: true, bytes_per_sec: 2 << 20 };

#[test]
fn a_background_scrub_repairs_a_mirror_while_writes_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, pool) = mirror(dir.path());
    let ds = pool.dataset("tank").unwrap();
    let files: Vec<Vec<u8>> = (0..12).map(|i| common::noise(300 + i, 200_000)).collect();
    for (i, f) in files.iter().enumerate() {
        write_file(&ds, ROOT_ID, &format!("f{i}"), f);
    }
    drop(ds);
    pool.export().unwrap();
    let mut spots = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let side = if i % 2 == 0 { &a } else { &b };
        let at = locate(side, &f[150_000..150_064]);
        flip(side, at + 5);
        spots.push((side.clone(), at, f[150_000..150_064].to_vec()));
    }

    let pool = import(&[a.clone(), b.clone()]);
    let ds = pool.dataset("tank").unwrap();
    let stop = AtomicBool::new(false);
    let started = std::time::Instant::now();
    let status = std::thread::scope(|s| {
        // A database's worth of writes and fsyncs beside the scrub.
        s.spawn(|| {
            let ino = write_file(&ds, ROOT_ID, "busy", b"");
            let mut round = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let page = common::noise(round, 16384);
                ds.write(ino, (round % 64) * 16384, &page).unwrap();
                ds.fsync(ino).unwrap();
                round += 1;
            }
        });
        pool.scrub_start().unwrap();
        let running = pool.scan().expect("a scrub was started");
        assert_eq!((running.record.kind, running.record.state), (ScanKind::Scrub, ScanState::Scanning));
        assert!(started.elapsed() < Duration::from_secs(2), "scrub_start returns at once");
        let end = pool.scan_wait().expect("the scrub ends");
        stop.store(true, Ordering::Relaxed);
        end
    });
    assert_eq!(status.state, ScanState::Finished, "{status:?}");
    assert_eq!(status.errors, 0, "every block had a good copy: {status:?}");
    assert_eq!(status.bad_copies, 12, "each damaged copy found once: {status:?}");
    assert!(status.repaired >= 12 * 64, "{status:?}");
    assert!(status.examined >= 12 * 200_000 && status.ended >= status.started);
    for (side, at, want) in &spots {
        assert_eq!(&image_bytes(side, *at, 64), want, "repaired in {}", side.display());
    }
    for (i, f) in files.iter().enumerate() {
        assert_eq!(&read_named(&ds, &format!("f{i}")).unwrap(), f);
    }
    drop(ds);
    assert_eq!(pool.scrub().unwrap().checksum_errors_seen, 0, "nothing left to repair");
}

#[test]
fn a_scrub_stopped_is_canceled_and_the_line_survives_export() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, pool) = mirror(dir.path());
    let ds = pool.dataset("tank").unwrap();
    for i in 0..8 {
        write_file(&ds, ROOT_ID, &format!("f{i}"), &common::noise(i, 500_000));
    }
    drop(ds);
    pool.sync().unwrap();
    assert!(matches!(pool.scrub_stop(), Err(tarn_pool::PoolError::NoScrub(_))));
    pool.scrub_start_with(SLOW).unwrap();
    assert!(matches!(pool.scrub_start(), Err(tarn_pool::PoolError::ScanInProgress { .. })), "one scan at a time");
    std::thread::sleep(Duration::from_millis(300));
    pool.scrub_stop().unwrap();
    let s = pool.scan().unwrap();
    assert_eq!((s.record.state, s.running), (ScanState::Canceled, false));
    assert!(s.record.ended > 0 && s.record.examined < s.record.to_examine);
    pool.export().unwrap();
    let pool = import(&[a.clone(), b.clone()]);
    let after = pool.scan().expect("the scan line is kept in the pool");
    assert_eq!(after.record, s.record, "export and import keep it as it was");

    let done = pool.scrub().unwrap();
    assert_eq!(done.errors, 0);
    let s = pool.scan().unwrap().record;
    pool.export().unwrap();
    let pool = import(&[a, b]);
    let kept = pool.scan().unwrap();
    assert_eq!((kept.record.state, kept.running), (ScanState::Finished, false));
    assert_eq!(kept.record, s);
}

#[test]
fn a_scrub_cut_short_by_a_close_resumes_and_counts_every_block_once() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, pool) = mirror(dir.path());
    let ds = pool.dataset("tank").unwrap();
    let sub = ds.create(ROOT_ID, b"sub", NewObject::Dir, 0o755, 0, 0).unwrap().ino;
    for i in 0..40 {
        let parent = if i % 3 == 0 { sub } else { ROOT_ID };
        write_file(&ds, parent, &format!("f{i}"), &common::noise(i, 100_000 + i as usize * 999));
    }
    drop(ds);
    pool.create_dataset("tank/db").unwrap();
    let db = pool.dataset("tank/db").unwrap();
    write_file(&db, ROOT_ID, "ibdata1", &common::noise(99, 900_000));
    drop(db);
    pool.sync().unwrap();
    // A full scrub's count, to compare with.
    let full = pool.scrub().unwrap();

    pool.scrub_start_with(SLOW).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    pool.close().unwrap();
    let pool = import(&[a.clone(), b.clone()]);
    let cut = pool.scan().unwrap();
    assert_eq!((cut.record.state, cut.running), (ScanState::Scanning, false), "{cut:?}");
    assert!(cut.record.bookmark.is_some(), "it knows where it stopped");
    assert!(cut.record.blocks > 0 && cut.record.blocks < full.blocks, "{cut:?}");
    // The holder of the pool resumes it; a background scan, at full speed here.
    pool.scrub_start_with(ScanPace::FULL_SPEED).unwrap();
    let end = pool.scan_wait().unwrap();
    assert_eq!(end.state, ScanState::Finished);
    assert_eq!(end.blocks, full.blocks, "every block counted once: {end:?} vs {full:?}");
    // The same bytes but for the root block, which now also records the scan.
    assert!(end.examined.abs_diff(full.bytes) < 4096, "{end:?} vs {full:?}");
    assert!(end.started == cut.record.started, "the same scrub, resumed");
}

#[test]
fn status_v_names_the_files_with_permanent_errors() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("d.img");
    let pool = new_pool(&[VdevSpec::Disk(img.clone())]);
    pool.create_dataset("tank/db").unwrap();
    let db = pool.dataset("tank/db").unwrap();
    let sub = db.create(ROOT_ID, b"data", NewObject::Dir, 0o755, 0, 0).unwrap().ino;
    let bad = common::noise(7, 64 * 1024);
    let gone = common::noise(8, 64 * 1024);
    write_file(&db, sub, "ibdata1", &bad);
    write_file(&db, ROOT_ID, "tmpfile", &gone);
    write_file(&db, ROOT_ID, "fine", &common::noise(9, 64 * 1024));
    drop(db);
    pool.export().unwrap();
    flip(&img, locate(&img, &bad[1000..1064]));
    flip(&img, locate(&img, &gone[1000..1064]));

    let pool = import(std::slice::from_ref(&img));
    let status = pool.status();
    assert_eq!((status.state.as_str(), status.data_errors), ("ONLINE", 0));
    let db = pool.dataset("tank/db").unwrap();
    let ino = db.lookup(sub, b"ibdata1").unwrap().ino;
    assert!(common::read_file(&db, ino).is_err(), "the damaged block is EIO");
    assert_eq!(pool.data_errors(), 1, "a failed read goes into the error log");
    assert_eq!(pool.error_files(), vec!["tank/db:/data/ibdata1".to_string()]);

    let scrub = pool.scrub().unwrap();
    assert_eq!(scrub.errors, 2, "{scrub:?}");
    assert_eq!(
        pool.status_verbose().error_files,
        vec!["tank/db:/data/ibdata1".to_string(), "tank/db:/tmpfile".to_string()]
    );
    // Unlinked while open: the object has no path any more.
    let tmp = db.lookup(ROOT_ID, b"tmpfile").unwrap().ino;
    db.open(tmp).unwrap();
    db.unlink(ROOT_ID, b"tmpfile").unwrap();
    assert!(pool.error_files().contains(&format!("tank/db:<{tmp:#x}>")));
    db.release(tmp).unwrap();
    drop(db);
    pool.export().unwrap();

    let pool = import(std::slice::from_ref(&img));
    assert_eq!(pool.data_errors(), 2, "the error log is kept in the pool");
    pool.scrub().unwrap();
    assert_eq!(
        pool.error_files(),
        vec!["tank/db:/data/ibdata1".to_string()],
        "a finished scrub drops what it did not find again (the file was freed)"
    );
    pool.clear_errors().unwrap();
    assert_eq!((pool.data_errors(), pool.error_files().len()), (0, 0));
    assert_eq!(pool.scrub().unwrap().errors, 1, "still damaged: found again");
    assert_eq!(pool.error_files(), vec!["tank/db:/data/ibdata1".to_string()]);
}

/// Writes into a pool whose side `b` is away, as the test of a resilver needs.
fn mirror_with_a_side_away(dir: &Path) -> (PathBuf, PathBuf, Vec<(String, Vec<u8>)>) {
    let (a, b, pool) = mirror(dir);
    let ds = pool.dataset("tank").unwrap();
    let mut files = Vec::new();
    for i in 0..6 {
        let data = common::noise(500 + i, 120_000);
        write_file(&ds, ROOT_ID, &format!("old{i}"), &data);
        files.push((format!("old{i}"), data));
    }
    drop(ds);
    pool.export().unwrap();

    // b is missing at import: the pool runs degraded and b misses these txgs.
    let pool = import(std::slice::from_ref(&a));
    assert_eq!(pool.status().state, "DEGRADED");
    let ds = pool.dataset("tank").unwrap();
    for i in 0..6 {
        let data = common::noise(600 + i, 150_000);
        write_file(&ds, ROOT_ID, &format!("new{i}"), &data);
        files.push((format!("new{i}"), data));
        pool.sync().unwrap();
    }
    // A rewrite of an old file: its new blocks are missing on b too.
    let data = common::noise(700, 120_000);
    let ino = ds.lookup(ROOT_ID, b"old0").unwrap().ino;
    ds.write(ino, 0, &data).unwrap();
    files[0].1 = data;
    drop(ds);
    pool.export().unwrap();
    (a, b, files)
}

#[test]
fn a_returning_mirror_side_is_resilvered_and_its_stale_copies_never_read() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, files) = mirror_with_a_side_away(dir.path());

    let pool = import(&[a.clone(), b.clone()]);
    let status = pool.status();
    let leaves = &status.vdevs[0].leaves;
    assert_eq!(status.state, "ONLINE");
    assert!(leaves[0].missed_txgs.is_none());
    let (first, last) = leaves[1]
        .missed_txgs
        .or_else(|| pool.scan().map(|s| (s.record.min_txg, s.record.max_txg)))
        .expect("b missed txgs");
    assert!(first <= last && last <= status.txg);
    // Reads while the resilver runs never try b's stale copies (they would fail their
    // checksum and count on b).
    let ds = pool.dataset("tank").unwrap();
    for (name, data) in &files {
        assert_eq!(&read_named(&ds, name).unwrap(), data, "{name}");
    }
    let end = pool.scan_wait().expect("a resilver ran");
    assert_eq!((end.kind, end.state, end.errors), (ScanKind::Resilver, ScanState::Finished, 0));
    assert!(end.repaired >= 6 * 150_000, "it copied what b missed: {end:?}");
    // Six new files of two 128K records, the rewritten record, and metadata; the five
    // old files b already has (another 600K) are not copied.
    assert!(end.repaired < 6 * 262_144 + 122_880 + 400_000, "and not the blocks b already had: {end:?}");
    assert_eq!(checksum_errors(&pool), vec![0, 0], "no stale copy was trusted");
    assert!(pool.status().vdevs[0].leaves[1].missed_txgs.is_none());
    drop(ds);
    pool.export().unwrap();

    // The resilvered side alone holds everything: damage every block of a's data area.
    let len = std::fs::metadata(&a).unwrap().len();
    let wipe = vec![0x5au8; 1 << 20];
    let f = std::fs::OpenOptions::new().write(true).open(&a).unwrap();
    let mut at = tarn_vdev::DATA_START;
    while at + (wipe.len() as u64) < len - 2 * tarn_vdev::LABEL_SIZE {
        f.write_all_at(&wipe, at).unwrap();
        at += wipe.len() as u64;
    }
    drop(f);
    let pool = import(&[a, b]);
    assert_eq!(pool.scan().map(|s| s.record.kind), Some(ScanKind::Resilver), "nothing new to do");
    let ds = pool.dataset("tank").unwrap();
    for (name, data) in &files {
        assert_eq!(&read_named(&ds, name).unwrap(), data, "{name} read from b");
    }
}

#[test]
fn a_resilver_cut_short_resumes_at_the_next_import() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, files) = mirror_with_a_side_away(dir.path());
    let pool = import(&[a.clone(), b.clone()]);
    assert!(
        matches!(pool.scrub_start(), Err(tarn_pool::PoolError::ScanInProgress { .. }))
            || pool.scan().is_some_and(|s| s.record.state == ScanState::Finished)
    );
    pool.close().unwrap();
    // Whether it finished or not, after this import b is whole.
    let pool = import(&[a.clone(), b.clone()]);
    let end = pool.scan_wait().expect("a resilver ran");
    assert_eq!((end.kind, end.state), (ScanKind::Resilver, ScanState::Finished));
    assert!(pool.status().vdevs[0].leaves[1].missed_txgs.is_none());
    pool.export().unwrap();
    let pool = import(&[b]);
    let ds = pool.dataset("tank").unwrap();
    for (name, data) in &files {
        assert_eq!(&read_named(&ds, name).unwrap(), data, "{name} on b alone");
    }
}

#[test]
fn iostat_counts_every_device_and_sums_them() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, pool) = mirror(dir.path());
    let before = pool.iostat();
    let ds = pool.dataset("tank").unwrap();
    write_file(&ds, ROOT_ID, "f", &common::noise(1, 1 << 20));
    drop(ds);
    pool.export().unwrap();
    let pool = import(&[a, b]);
    let start = pool.iostat();
    let ds = pool.dataset("tank").unwrap();
    read_named(&ds, "f").unwrap();
    let now = pool.iostat();
    assert!(now.elapsed_ns > start.elapsed_ns);
    let d = now.io.since(&start.io);
    assert!(d.read_ops > 0 && d.read_bytes >= 1 << 20, "{d:?}");
    let mirror = &now.vdevs[0];
    assert_eq!(mirror.name, "mirror-0");
    assert_eq!(mirror.leaves.len(), 2);
    let sum = mirror.leaves[0].io.add(&mirror.leaves[1].io);
    assert_eq!(mirror.io, sum, "a mirror's counters are its sides'");
    assert_eq!(now.io, mirror.io, "the pool's are its vdevs'");
    assert!(now.alloc >= 1 << 20 && now.alloc + now.free > 100 << 20);
    assert_eq!((mirror.alloc, mirror.free), (now.alloc, now.free));
    assert!(before.io.write_ops > 0, "create wrote labels and a txg");
    // A scrub's I/O is counted apart too.
    pool.scrub().unwrap();
    let after = pool.iostat();
    assert!(after.io.scan_ops > now.io.scan_ops);
    assert!(after.io.read_ops - now.io.read_ops >= after.io.scan_ops - now.io.scan_ops);
}

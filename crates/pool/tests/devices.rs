//! Log devices added to and removed from an open pool (issue #10, `pool add|remove` on a
//! mounted pool): the intent log crosses over to a new log device and back to the data
//! devices without losing an acknowledged record, a crash image taken at any moment after
//! imports with everything fsynced, the vdev numbers stay put (a removed log leaves a
//! hole), and bad input changes nothing.
mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use tarn_dataset::{NewObject, ROOT_ID};
use tarn_pool::{member_of, CreateOptions, DeviceClass, ImportOptions, Pool, PoolError, VdevSpec};
use tarn_txg::TxgConfig;

const MB: u64 = 1 << 20;

/// Txgs commit only when asked: what an fsync acknowledged lives in the intent log alone.
fn never_commit() -> ImportOptions {
    ImportOptions { txg: TxgConfig { timeout: Duration::from_secs(3600), ..Default::default() } }
}

/// A closed pool `tank` on `dir/data.img`, opened again with txgs that never commit alone.
fn open_new(dir: &Path) -> (PathBuf, Pool) {
    let data = dir.join("data.img");
    let opts = CreateOptions { size: Some(256 * MB), ..Default::default() };
    Pool::create("tank", &[VdevSpec::Disk(data.clone())], &opts).unwrap().close().unwrap();
    let pool = Pool::import_paths(std::slice::from_ref(&data), &never_commit()).unwrap();
    (data, pool)
}

fn add_log(pool: &Pool, path: &Path) -> Result<Vec<PathBuf>, PoolError> {
    pool.add_devices(DeviceClass::Log, &[VdevSpec::Disk(path.to_path_buf())], false, Some(64 * MB))
}

/// Writes `payload` to a new file `name` in 700-byte pieces, each fsynced.
fn fsynced(pool: &Pool, name: &str, payload: &[u8]) {
    let ds = pool.dataset("tank").unwrap();
    let f = ds.create(ROOT_ID, name.as_bytes(), NewObject::File, 0o644, 0, 0).unwrap();
    for (i, chunk) in payload.chunks(700).enumerate() {
        ds.write(f.ino, (i * 700) as u64, chunk).unwrap();
        ds.fsync(f.ino).unwrap();
    }
}

fn read(pool: &Pool, name: &str) -> Option<Vec<u8>> {
    let ds = pool.dataset("tank").unwrap();
    let a = ds.lookup(ROOT_ID, name.as_bytes()).ok()?;
    common::read_file(&ds, a.ino).ok()
}

/// Writes to the log devices since the pool was opened.
fn log_writes(pool: &Pool) -> u64 {
    pool.iostat().vdevs.iter().filter(|v| v.log).map(|v| v.io.write_ops).sum()
}

/// The crash: copies of the devices as they are now (every write issued is in them, no
/// txg after the last one committed), in `to`.
fn crash_image(devices: &[&Path], to: &Path) -> Vec<PathBuf> {
    devices
        .iter()
        .map(|d| {
            let copy = to.join(d.file_name().unwrap());
            std::fs::copy(d, &copy).unwrap();
            copy
        })
        .collect()
}

#[test]
fn a_log_added_to_an_open_pool_takes_the_next_fsyncs_and_a_crash_loses_none() {
    let dir = tempfile::tempdir().unwrap();
    let (data, pool) = open_new(dir.path());
    let before = common::noise(1, 7000);
    fsynced(&pool, "before", &before);
    let slog = dir.path().join("slog.img");
    assert_eq!(add_log(&pool, &slog).unwrap(), vec![slog.clone()]);
    let status = pool.status();
    assert!(status.vdevs.iter().any(|t| t.log && t.leaves[0].path == slog.display().to_string()), "{status:?}");
    let after = common::noise(2, 7000);
    fsynced(&pool, "after", &after);
    assert!(log_writes(&pool) >= 10, "the fsyncs after the add went to the new log: {}", log_writes(&pool));
    let crashed = tempfile::tempdir().unwrap();
    let images = crash_image(&[&data, &slog], crashed.path());
    drop(pool);
    let pool = Pool::import_paths(&images, &ImportOptions::default()).unwrap();
    assert_eq!(read(&pool, "before").as_deref(), Some(&before[..]), "logged in the pool before the add");
    assert_eq!(read(&pool, "after").as_deref(), Some(&after[..]), "logged on the new log device");
    assert!(pool.status().vdevs.iter().any(|t| t.log), "the log device is part of the pool");
}

#[test]
fn a_removed_log_hands_the_intent_log_back_to_the_pool_and_is_free_to_reuse() {
    let dir = tempfile::tempdir().unwrap();
    let (data, pool) = open_new(dir.path());
    let slog = dir.path().join("slog.img");
    add_log(&pool, &slog).unwrap();
    let on_log = common::noise(3, 7000);
    fsynced(&pool, "on-log", &on_log);
    let removed = pool.remove_device(slog.to_str().unwrap()).unwrap();
    assert_eq!((removed.class, removed.paths), (DeviceClass::Log, vec![slog.clone()]));
    assert!(!pool.status().vdevs.iter().any(|t| t.log), "status shows no log device");
    assert_eq!(member_of(&slog), None, "its labels are wiped");
    let in_pool = common::noise(4, 7000);
    fsynced(&pool, "in-pool", &in_pool);
    // The crash, with the pool's data device alone: nothing needed the log any more.
    let crashed = tempfile::tempdir().unwrap();
    let images = crash_image(&[&data], crashed.path());
    // The removed device is usable at once, by this very process, without -f.
    let opts = CreateOptions { size: Some(256 * MB), ..Default::default() };
    Pool::create("other", &[VdevSpec::Disk(slog.clone())], &opts).unwrap().close().unwrap();
    drop(pool);
    let pool = Pool::import_paths(&images, &ImportOptions::default()).unwrap();
    assert_eq!(pool.replay_report().filter(|r| r.contains("missing")), None, "no log device is missing");
    assert_eq!(read(&pool, "on-log").as_deref(), Some(&on_log[..]));
    assert_eq!(read(&pool, "in-pool").as_deref(), Some(&in_pool[..]), "logged in the pool after the remove");
}

#[test]
fn a_hole_keeps_the_numbers_of_the_logs_after_it_across_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let (data, pool) = open_new(dir.path());
    let (first, second) = (dir.path().join("log1.img"), dir.path().join("log2.img"));
    add_log(&pool, &first).unwrap();
    add_log(&pool, &second).unwrap();
    pool.remove_device(first.to_str().unwrap()).unwrap();
    let payload = common::noise(5, 7000);
    fsynced(&pool, "on-second", &payload);
    let crashed = tempfile::tempdir().unwrap();
    let images = crash_image(&[&data, &second], crashed.path());
    drop(pool);
    let pool = Pool::import_paths(&images, &ImportOptions::default()).unwrap();
    assert_eq!(read(&pool, "on-second").as_deref(), Some(&payload[..]), "replayed from the log after the hole");
    let logs: Vec<String> = pool.status().vdevs.iter().filter(|t| t.log).map(|t| t.name.clone()).collect();
    assert_eq!(logs, vec![images[1].display().to_string()]);
    // Removing the last log leaves a trailing hole, which the next import drops.
    pool.remove_device(images[1].to_str().unwrap()).unwrap();
    pool.close().unwrap();
    let pool = Pool::import_paths(&images[..1], &ImportOptions::default()).unwrap();
    assert!(pool.status().vdevs.iter().all(|t| !t.log));
    add_log(&pool, &first).unwrap();
    pool.close().unwrap();
    let pool = Pool::import_paths(&[images[0].clone(), first.clone()], &ImportOptions::default()).unwrap();
    assert!(pool.status().vdevs.iter().any(|t| t.log), "a log added after the holes imports");
}

#[test]
fn bad_adds_and_removes_are_refused_by_name_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (data, pool) = open_new(dir.path());
    let before = format!("{:?}", pool.status().vdevs);
    let d = |p: &Path| vec![VdevSpec::Disk(p.to_path_buf())];
    // Already in this pool.
    let err = pool.add_devices(DeviceClass::Log, &d(&data), false, None).unwrap_err();
    assert!(matches!(err, PoolError::DuplicateDevice(_)), "{err}");
    // A device of another pool.
    let foreign = dir.path().join("foreign.img");
    let opts = CreateOptions { size: Some(128 * MB), ..Default::default() };
    Pool::create("other", &[VdevSpec::Disk(foreign.clone())], &opts).unwrap().close().unwrap();
    let err = pool.add_devices(DeviceClass::Log, &d(&foreign), false, None).unwrap_err();
    assert!(matches!(err, PoolError::InUse { .. }) && err.to_string().contains("'other'"), "{err}");
    // Missing, without --size to create it.
    let missing = dir.path().join("missing.img");
    let err = pool.add_devices(DeviceClass::Log, &d(&missing), false, None).unwrap_err();
    assert!(err.to_string().contains("no such device"), "{err}");
    assert!(!missing.exists());
    // Too small: and the image it created is gone again.
    let small = dir.path().join("small.img");
    let err = pool.add_devices(DeviceClass::Log, &d(&small), false, Some(8 * MB)).unwrap_err();
    assert!(matches!(err, PoolError::TooSmall { .. }), "{err}");
    assert!(!small.exists(), "a refused add leaves no image behind");
    // One bad device of two: neither is added.
    let good = dir.path().join("good.img");
    let two = [VdevSpec::Disk(good.clone()), VdevSpec::Disk(foreign.clone())];
    assert!(pool.add_devices(DeviceClass::Log, &two, false, Some(64 * MB)).is_err());
    assert!(!good.exists());
    // Removing what is not in the pool, a data vdev, one side of a log mirror.
    let err = pool.remove_device("/nonexistent/dev").unwrap_err();
    assert!(matches!(err, PoolError::NotInPool { .. }) && err.to_string().contains("no such device"), "{err}");
    let err = pool.remove_device(data.to_str().unwrap()).unwrap_err();
    assert!(err.to_string().contains("removing data vdevs is not supported"), "{err}");
    assert_eq!(format!("{:?}", pool.status().vdevs), before, "nothing changed");
    let (a, b) = (dir.path().join("m1.img"), dir.path().join("m2.img"));
    pool.add_devices(DeviceClass::Log, &[VdevSpec::Mirror(vec![a.clone(), b.clone()])], false, Some(64 * MB)).unwrap();
    let err = pool.remove_device(a.to_str().unwrap()).unwrap_err();
    assert!(matches!(err, PoolError::MirrorSide { .. }) && err.to_string().contains("mirror-1"), "{err}");
    pool.remove_device("mirror-1").unwrap();
    assert_eq!((member_of(&a), member_of(&b)), (None, None), "both sides left the pool");
    assert_eq!(format!("{:?}", pool.status().vdevs), before);
}

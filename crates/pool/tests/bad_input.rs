//! Bad input: damaged or missing labels, a truncated device, a device of another pool, a
//! file that is not a tarn device, unknown format versions, invalid property values, a
//! device too small, a full pool, a device already in use. Each is refused with an error
//! whose message names the problem, and nothing stored is harmed: the pool re-imports
//! afterwards with every file intact.
mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use tarn_dataset::{FsError, NewObject, ROOT_ID};
use tarn_pool::{CreateOptions, ImportOptions, Pool, PoolError, VdevSpec};
use tarn_vdev::{BlockDevice, TopVdev, DATA_START, LABEL_SIZE};
use tarn_zio::{BlockPtr, Compression};
use xxhash_rust::xxh3::xxh3_128;

const CONFIG_AREA: u64 = 64 * 1024;
const SLOT: u64 = 4096; // ashift 12

type Files = BTreeMap<String, Vec<u8>>;

/// A pool on one image file with a few files; returns the image and the files.
fn make_pool(dir: &Path, name: &str, size: u64) -> (PathBuf, Files) {
    let img = dir.join(format!("{name}.img"));
    let opts = CreateOptions { size: Some(size), ..Default::default() };
    let pool = Pool::create(name, &[VdevSpec::Disk(img.clone())], &opts).unwrap();
    let ds = pool.dataset(name).unwrap();
    let mut files = Files::new();
    for i in 0..4u64 {
        let data =
            if i % 2 == 0 { common::noise(i + 100, 30_000 * (i as usize + 1)) } else { common::pattern(i, 50_000) };
        let a = ds.create(ROOT_ID, format!("f{i}").as_bytes(), NewObject::File, 0o644, 0, 0).unwrap();
        ds.write(a.ino, 0, &data).unwrap();
        files.insert(format!("f{i}"), data);
    }
    drop(ds);
    pool.export().unwrap();
    (img, files)
}

/// Imports and checks every file; exports again.
fn assert_intact(paths: &[PathBuf], name: &str, files: &Files) {
    let pool = Pool::import_paths(paths, &ImportOptions::default()).unwrap_or_else(|e| panic!("re-import failed: {e}"));
    let ds = pool.dataset(name).unwrap();
    assert_eq!(&common::read_tree(&ds).unwrap(), files, "files changed");
    drop(ds);
    assert_eq!(pool.scrub().unwrap().errors, 0);
    pool.export().unwrap();
}

fn import_err(paths: &[PathBuf]) -> String {
    match Pool::import_paths(paths, &ImportOptions::default()) {
        Ok(_) => panic!("import of {paths:?} should have been refused"),
        Err(e) => e.to_string(),
    }
}

fn assert_mentions(msg: &str, words: &[&str]) {
    for w in words {
        assert!(msg.contains(w), "error message should mention '{w}': {msg}");
    }
}

fn read_at(path: &Path, at: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    std::fs::File::open(path).unwrap().read_exact_at(&mut b, at).unwrap();
    b
}

fn write_at(path: &Path, at: u64, data: &[u8]) {
    std::fs::OpenOptions::new().write(true).open(path).unwrap().write_all_at(data, at).unwrap();
}

fn label1(path: &Path) -> u64 {
    let size = std::fs::metadata(path).unwrap().len();
    (size / LABEL_SIZE) * LABEL_SIZE - LABEL_SIZE
}

#[test]
fn damaged_label_zero_is_covered_by_label_one() {
    let dir = tempfile::tempdir().unwrap();
    let (img, files) = make_pool(dir.path(), "tank", 128 << 20);
    let mut junk = read_at(&img, 100, 64);
    junk.iter_mut().for_each(|b| *b ^= 0xff);
    write_at(&img, 100, &junk);
    assert_intact(&[img], "tank", &files);
}

#[test]
fn damaged_or_missing_labels_are_not_a_tarn_device_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let (img, files) = make_pool(dir.path(), "tank", 128 << 20);
    let l1 = label1(&img);
    let saved: Vec<(u64, Vec<u8>)> = [0, l1].iter().map(|&b| (b, read_at(&img, b, CONFIG_AREA as usize))).collect();

    // Damaged: one flipped byte in each label's config.
    for (base, area) in &saved {
        let mut a = area.clone();
        a[200] ^= 1;
        write_at(&img, *base, &a);
    }
    let before = std::fs::read(&img).unwrap();
    let msg = import_err(std::slice::from_ref(&img));
    assert_mentions(&msg, &["not a tarn device", &img.display().to_string()]);
    assert!(std::fs::read(&img).unwrap() == before, "a refused import must not write");

    // Missing: both labels zeroed.
    for (base, _) in &saved {
        write_at(&img, *base, &vec![0u8; LABEL_SIZE as usize]);
    }
    assert_mentions(&import_err(std::slice::from_ref(&img)), &["not a tarn device"]);
    // Restoring only the config areas is not enough: the uberblock rings were zeroed
    // with them, so there is no committed txg, and import must say so rather than guess.
    for (base, area) in &saved {
        write_at(&img, *base, area);
    }
    let msg = Pool::import_paths(std::slice::from_ref(&img), &ImportOptions::default()).err().map(|e| e.to_string());
    assert_mentions(&msg.expect("no committed txg to import"), &["cannot be imported", "uberblock"]);
    // (a_refused_import_leaves_the_pool_whole shows the data itself was never touched.)
    let _ = files;
}

#[test]
fn a_refused_import_leaves_the_pool_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (img, files) = make_pool(dir.path(), "tank", 128 << 20);
    let l1 = label1(&img);
    let saved: Vec<(u64, Vec<u8>)> = [0, l1].iter().map(|&b| (b, read_at(&img, b, CONFIG_AREA as usize))).collect();
    for (base, _) in &saved {
        write_at(&img, *base, &vec![0u8; CONFIG_AREA as usize]);
    }
    assert_mentions(&import_err(std::slice::from_ref(&img)), &["not a tarn device"]);
    for (base, area) in &saved {
        write_at(&img, *base, area);
    }
    assert_intact(&[img], "tank", &files);
}

#[test]
fn truncated_device_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let (img, files) = make_pool(dir.path(), "tank", 128 << 20);
    let full = std::fs::metadata(&img).unwrap().len();
    let tail = read_at(&img, full / 2, (full / 2) as usize);
    let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
    f.set_len(full / 2).unwrap();
    let msg = import_err(std::slice::from_ref(&img));
    assert_mentions(&msg, &[&img.display().to_string(), "smaller"]);
    // Put the tail back: the pool is whole again.
    f.set_len(full).unwrap();
    write_at(&img, full / 2, &tail);
    assert_intact(std::slice::from_ref(&img), "tank", &files);
    // Cut below any tarn device size: "too small".
    let saved = std::fs::read(&img).unwrap();
    f.set_len(100_000).unwrap();
    assert_mentions(&import_err(std::slice::from_ref(&img)), &["too small"]);
    std::fs::write(&img, saved).unwrap();
    assert_intact(&[img], "tank", &files);
}

#[test]
fn device_of_another_pool_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (tank, tank_files) = make_pool(dir.path(), "tank", 128 << 20);
    let (other, other_files) = make_pool(dir.path(), "other", 128 << 20);
    let msg = import_err(&[tank.clone(), other.clone()]);
    assert_mentions(&msg, &["another pool", "other", &other.display().to_string()]);
    assert_intact(&[tank], "tank", &tank_files);
    assert_intact(&[other], "other", &other_files);
}

#[test]
fn a_file_that_is_not_a_tarn_device_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.bin");
    std::fs::write(&junk, common::noise(5, 70 << 20)).unwrap();
    assert_mentions(&import_err(std::slice::from_ref(&junk)), &["not a tarn device", "junk.bin"]);
    let tiny = dir.path().join("tiny.bin");
    std::fs::write(&tiny, b"hello").unwrap();
    assert_mentions(&import_err(&[tiny]), &["too small", "tiny.bin"]);
    // Creating a pool on the junk file is fine: it holds no tarn label.
    let pool = Pool::create("fresh", &[VdevSpec::Disk(junk.clone())], &CreateOptions::default()).unwrap();
    pool.export().unwrap();
    Pool::import_paths(&[junk], &ImportOptions::default()).unwrap().export().unwrap();
}

fn set_version_and_reseal_label(area: &mut [u8], version: u32) {
    area[8..12].copy_from_slice(&version.to_le_bytes());
    area[16..32].fill(0);
    let sum = xxh3_128(area);
    area[16..32].copy_from_slice(&sum.to_le_bytes());
}

#[test]
fn unknown_label_version_is_refused_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let (img, files) = make_pool(dir.path(), "tank", 128 << 20);
    let bases = [0, label1(&img)];
    let saved: Vec<Vec<u8>> = bases.iter().map(|&b| read_at(&img, b, CONFIG_AREA as usize)).collect();
    for (b, area) in bases.iter().zip(&saved) {
        let mut a = area.clone();
        set_version_and_reseal_label(&mut a, 99);
        write_at(&img, *b, &a);
    }
    let msg = import_err(std::slice::from_ref(&img));
    assert_mentions(&msg, &["label", "version 99", "not supported"]);
    // Creating a pool over a device written by a newer tarn is refused too.
    let err = Pool::create("new", &[VdevSpec::Disk(img.clone())], &CreateOptions::default()).err();
    assert!(err.is_some(), "creating over a device of unknown format must need force");
    for (b, area) in bases.iter().zip(&saved) {
        write_at(&img, *b, area);
    }
    assert_intact(&[img], "tank", &files);
}

fn newest_uberblock(img: &Path) -> tarn_vdev::Uberblock {
    let dev = common::MemDevice::new(std::fs::read(img).unwrap(), "probe");
    let labels = tarn_vdev::read_device_labels(dev.as_ref() as &dyn BlockDevice).unwrap();
    labels.uberblocks.into_iter().max_by_key(|u| u.txg).unwrap()
}

fn slot_offsets(img: &Path, txg: u64) -> Vec<u64> {
    let slot = txg % tarn_vdev::slot_count(12) as u64;
    [0, label1(img)].iter().map(|b| b + CONFIG_AREA + slot * SLOT).collect()
}

#[test]
fn unknown_uberblock_version_is_refused_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let (img, files) = make_pool(dir.path(), "tank", 128 << 20);
    let ub = newest_uberblock(&img);
    let spots = slot_offsets(&img, ub.txg);
    let saved: Vec<Vec<u8>> = spots.iter().map(|&at| read_at(&img, at, 256)).collect();
    for (&at, b) in spots.iter().zip(&saved) {
        let mut b = b.clone();
        b[8..12].copy_from_slice(&99u32.to_le_bytes());
        let sum = xxh3_128(&b[..240]);
        b[240..256].copy_from_slice(&sum.to_le_bytes());
        write_at(&img, at, &b);
    }
    let msg = import_err(std::slice::from_ref(&img));
    assert_mentions(&msg, &["uberblock", "version 99", "not supported"]);
    for (&at, b) in spots.iter().zip(&saved) {
        write_at(&img, at, b);
    }
    assert_intact(&[img], "tank", &files);
}

#[test]
fn unknown_pool_root_version_is_refused_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let (img, files) = make_pool(dir.path(), "tank", 128 << 20);
    let ub = newest_uberblock(&img);
    let bp = BlockPtr::decode(&ub.root).unwrap().unwrap();
    let phys = read_at(&img, DATA_START + bp.offset, bp.psize as usize);
    let mut json = vec![0u8; bp.lsize as usize];
    bp.compression.decompress(&phys, &mut json).unwrap();
    let text = String::from_utf8(json).unwrap();
    let current = format!("{{\"version\":{},", tarn_pool::MOS_VERSION);
    assert!(text.starts_with(&current), "MOS JSON starts with its version: {}", &text[..40]);
    let patched = text.replacen(&current, "{\"version\":9,", 1).into_bytes();
    // Store the patched root raw at the end of the (empty) data area and point a resealed
    // uberblock at it.
    let size = std::fs::metadata(&img).unwrap().len();
    let asize = TopVdev::asize_of(size, 12);
    let off = (asize - patched.len() as u64) & !(SLOT - 1);
    let new_bp = BlockPtr {
        compression: Compression::Off,
        offset: off,
        psize: patched.len() as u32,
        lsize: patched.len() as u32,
        checksum: bp.checksum_kind.digest(&patched),
        ..bp
    };
    write_at(&img, DATA_START + off, &patched);
    let spots = slot_offsets(&img, ub.txg);
    let saved: Vec<Vec<u8>> = spots.iter().map(|&at| read_at(&img, at, 256)).collect();
    let sealed = tarn_vdev::Uberblock { root: new_bp.to_bytes(), ..ub.clone() }.encode();
    for &at in &spots {
        write_at(&img, at, &sealed);
    }
    let msg = import_err(std::slice::from_ref(&img));
    assert_mentions(&msg, &["version 9", "not supported"]);
    for (&at, b) in spots.iter().zip(&saved) {
        write_at(&img, at, b);
    }
    assert_intact(&[img], "tank", &files);
}

#[test]
fn invalid_property_values_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (img, files) = make_pool(dir.path(), "tank", 128 << 20);
    let pool = Pool::import_paths(std::slice::from_ref(&img), &ImportOptions::default()).unwrap();
    pool.set_property("tank", "recordsize", "16K").unwrap();
    let cases: [(&str, &str, &[&str]); 7] = [
        ("recordsize", "3K", &["3K", "recordsize", "power of two"]),
        ("recordsize", "2M", &["2M", "recordsize"]),
        ("compression", "gzip", &["gzip", "compression", "lz4"]),
        ("sync", "sometimes", &["sometimes", "sync", "always"]),
        ("checksum", "md5", &["md5", "checksum"]),
        ("colour", "blue", &["unknown property", "colour"]),
        ("used", "1G", &["read-only", "used"]),
    ];
    for (prop, value, words) in cases {
        match pool.set_property("tank", prop, value) {
            Err(e @ PoolError::Property(_)) => assert_mentions(&e.to_string(), words),
            other => panic!("{prop}={value}: expected a property error, got {other:?}"),
        }
    }
    let err = pool.set_property("tank/nope", "recordsize", "16K").unwrap_err();
    assert_mentions(&err.to_string(), &["tank/nope"]);
    let rs = pool.get_properties("tank", Some("recordsize")).unwrap();
    assert_eq!((rs[0].value.as_str(), rs[0].source.as_str()), ("16K", "local"), "a refused value changes nothing");
    pool.export().unwrap();
    assert_intact(std::slice::from_ref(&img), "tank", &files);
    let pool = Pool::import_paths(&[img], &ImportOptions::default()).unwrap();
    assert_eq!(pool.get_properties("tank", Some("recordsize")).unwrap()[0].value, "16K");
    pool.export().unwrap();
}

#[test]
fn a_device_too_small_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("small.img");
    let opts = CreateOptions { size: Some(32 << 20), ..Default::default() };
    let err = Pool::create("tank", &[VdevSpec::Disk(img.clone())], &opts).err().expect("refused");
    assert_mentions(&err.to_string(), &["too small", "small.img", &(64u64 << 20).to_string()]);
    assert!(matches!(err, PoolError::TooSmall { .. }));
}

#[test]
fn a_full_pool_gives_enospc_keeps_data_and_recovers_after_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("full.img");
    let opts = CreateOptions { size: Some(64 << 20), ..Default::default() };
    let pool = Pool::create("tank", &[VdevSpec::Disk(img.clone())], &opts).unwrap();
    pool.set_property("tank", "compression", "off").unwrap();
    let ds = pool.dataset("tank").unwrap();
    let mut files = Files::new();
    let chunk = 1 << 20;
    let mut hit_enospc = false;
    'fill: for i in 0..200u64 {
        let name = format!("f{i}");
        let ino = ds.create(ROOT_ID, name.as_bytes(), NewObject::File, 0o644, 0, 0).unwrap().ino;
        files.insert(name.clone(), Vec::new());
        for k in 0..4u64 {
            let data = common::noise(i * 10 + k, chunk);
            match ds.write(ino, k * chunk as u64, &data) {
                Ok(_) => files.get_mut(&name).unwrap().extend_from_slice(&data),
                Err(FsError::NoSpace) => {
                    hit_enospc = true;
                    break 'fill;
                }
                Err(e) => panic!("writing {name}: expected NoSpace at worst, got {e}"),
            }
        }
        pool.sync().unwrap_or_else(|e| panic!("commit failed near full (after {name}): {e}"));
    }
    assert!(hit_enospc, "a 64 MiB pool must fill up");
    let written: usize = files.values().map(|v| v.len()).sum();
    assert!(written >= 40 << 20, "only {} MiB fit in a 64 MiB pool", written >> 20);
    pool.sync().unwrap_or_else(|e| panic!("the accepted writes must commit: {e}"));
    // A write that got ENOSPC stored nothing: the model has exactly what was accepted.
    assert_eq!(common::read_tree(&ds).unwrap(), files);
    drop(ds);
    pool.export().unwrap();

    let pool = Pool::import_paths(std::slice::from_ref(&img), &ImportOptions::default()).unwrap();
    let ds = pool.dataset("tank").unwrap();
    assert_eq!(common::read_tree(&ds).unwrap(), files, "every accepted write survives export+import");
    assert!(matches!(
        ds.write(ds.lookup(ROOT_ID, b"f0").unwrap().ino, 0, &common::noise(9999, 8 << 20)),
        Err(FsError::NoSpace)
    ));
    // Deleting frees space: writes work again.
    let names: Vec<String> = files.keys().cloned().collect();
    for name in names.iter().step_by(2) {
        ds.unlink(ROOT_ID, name.as_bytes()).unwrap();
        files.remove(name);
    }
    pool.sync().unwrap();
    let ino = ds.create(ROOT_ID, b"after", NewObject::File, 0o644, 0, 0).unwrap().ino;
    let data = common::noise(4242, 8 << 20);
    ds.write(ino, 0, &data).expect("space freed by deletes is usable again");
    files.insert("after".into(), data);
    pool.sync().unwrap();
    drop(ds);
    pool.export().unwrap();
    assert_intact(&[img], "tank", &files);
}

#[test]
fn creating_over_a_device_in_use_is_refused_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let (img, files) = make_pool(dir.path(), "tank", 128 << 20);
    let err = Pool::create("new", &[VdevSpec::Disk(img.clone())], &CreateOptions::default()).err().expect("refused");
    assert_mentions(&err.to_string(), &["tank", "img", "-f"]);
    // While the pool is imported, even force cannot take the device.
    let pool = Pool::import_paths(std::slice::from_ref(&img), &ImportOptions::default()).unwrap();
    let force = CreateOptions { force: true, ..Default::default() };
    let err = Pool::create("new", &[VdevSpec::Disk(img.clone())], &force).err().expect("busy");
    assert_mentions(&err.to_string(), &["in use"]);
    let err = Pool::import_paths(std::slice::from_ref(&img), &ImportOptions::default()).err().expect("busy");
    assert_mentions(&err.to_string(), &["in use"]);
    pool.export().unwrap();
    assert_intact(std::slice::from_ref(&img), "tank", &files);
    // With force, and the pool not imported, the device is reused.
    let pool = Pool::create("new", &[VdevSpec::Disk(img.clone())], &force).unwrap();
    assert_eq!(common::read_tree(&pool.dataset("new").unwrap()).unwrap(), Files::new());
    pool.export().unwrap();
}

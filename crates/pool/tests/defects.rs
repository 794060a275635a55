//! Regressions of issue #10's defects, at the pool's API: each was hit by a new user
//! and now has the answer a user expects.
//!
//! 2: an invalid property at dataset create creates nothing. 3: a device of a newer
//! format is reported by a search of devices, not left out. 4: devices are shown by the
//! path they were opened from. 5: a failed create leaves no image file behind. 6: a
//! device given twice is named as such. 7: label fields that make no sense are refused
//! by name. 8: names follow ZFS's rules, and `:` is refused. 10: a new, empty pool
//! holds no data.
mod common;

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use tarn_dataset::{NewObject, ROOT_ID};
use tarn_pool::{discover, CreateOptions, DeviceClass, ImportOptions, Pool, PoolError, VdevSpec};
use tarn_vdev::{Label, LabelDecode, LABEL_SIZE};
use xxhash_rust::xxh3::xxh3_128;

const CONFIG_AREA: usize = 64 * 1024;

fn opts() -> CreateOptions {
    CreateOptions { size: Some(128 << 20), ..Default::default() }
}

fn one_disk(dir: &Path, name: &str) -> (PathBuf, Pool) {
    let img = dir.join(format!("{name}.img"));
    let pool = Pool::create(name, &[VdevSpec::Disk(img.clone())], &opts()).unwrap();
    (img, pool)
}

fn import(paths: &[PathBuf]) -> Result<Pool, PoolError> {
    Pool::import_paths(paths, &ImportOptions::default())
}

fn label1(path: &Path) -> u64 {
    let size = std::fs::metadata(path).unwrap().len();
    (size / LABEL_SIZE) * LABEL_SIZE - LABEL_SIZE
}

/// Rewrites both labels of `img` through `change`, with a valid checksum, as a label
/// damaged by someone who knew the format would be.
fn reseal_labels(img: &Path, change: impl Fn(&mut Label)) {
    let f = std::fs::OpenOptions::new().read(true).write(true).open(img).unwrap();
    for base in [0, label1(img)] {
        let mut area = vec![0u8; CONFIG_AREA];
        f.read_exact_at(&mut area, base).unwrap();
        let LabelDecode::Ok(mut label) = Label::decode(&area) else { panic!("a valid label to start from") };
        change(&mut label);
        // `encode` checks nothing: it writes what it is given, as a buggy tool would.
        f.write_all_at(&label.encode(), base).unwrap();
    }
}

/// Defect 2.
#[test]
fn an_invalid_property_at_create_creates_no_dataset() {
    let dir = tempfile::tempdir().unwrap();
    let (_, pool) = one_disk(dir.path(), "tank");
    for bad in [
        [("recordsize", "3K"), ("atime", "off")],
        [("atime", "off"), ("compression", "gzip-99")],
        [("nosuchprop", "1"), ("atime", "off")],
        [("used", "1"), ("atime", "off")],
    ] {
        let err = pool.create_dataset_with("tank/x", &bad).err().expect("refused");
        assert!(matches!(err, PoolError::Property(_)), "{err}");
        assert!(matches!(pool.dataset("tank/x"), Err(PoolError::NoSuchDataset(_))), "{bad:?} left a dataset behind");
    }
    pool.create_dataset_with("tank/x", &[("recordsize", "16K"), ("atime", "off")]).unwrap();
    let rs = pool.get_properties("tank/x", Some("recordsize")).unwrap();
    assert_eq!((rs[0].value.as_str(), rs[0].source.as_str()), ("16K", "local"));
    pool.export().unwrap();
}

/// Defect 3 (the search of devices) and defect 7 (label fields).
#[test]
fn a_search_reports_devices_it_cannot_use_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let (img, pool) = one_disk(dir.path(), "tank");
    pool.export().unwrap();
    let (other, pool) = one_disk(dir.path(), "ok");
    pool.export().unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"not a device").unwrap();
    let f = std::fs::OpenOptions::new().read(true).write(true).open(&img).unwrap();
    for base in [0, label1(&img)] {
        let mut area = vec![0u8; CONFIG_AREA];
        f.read_exact_at(&mut area, base).unwrap();
        area[8..12].copy_from_slice(&7u32.to_le_bytes());
        area[16..32].fill(0);
        let sum = xxh3_128(&area);
        area[16..32].copy_from_slice(&sum.to_le_bytes());
        f.write_all_at(&area, base).unwrap();
    }
    let found = discover(&[dir.path().to_path_buf()]);
    assert_eq!(found.pools.len(), 1, "the good pool is listed");
    assert_eq!(found.pools[0].devices, vec![other]);
    assert_eq!(found.unusable.len(), 1, "the text file is not a device: {found:?}");
    assert_eq!(found.unusable[0].path, img);
    let why = &found.unusable[0].reason;
    assert!(why.contains("version 7") && why.contains("upgrade tarn"), "{why}");
}

/// Defect 7.
#[test]
fn label_fields_that_make_no_sense_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    type Change = fn(&mut Label);
    let cases: [(&str, Change); 6] = [
        ("ashift", |l| l.ashift = 0),
        ("ashift", |l| l.ashift = 99),
        ("top_index", |l| l.top_index = 5),
        ("pool_name", |l| l.pool_name.clear()),
        ("pool_name", |l| l.pool_name = "../etc".into()),
        ("pool_name", |l| l.pool_name = "a/b".into()),
    ];
    for (i, (field, change)) in cases.into_iter().enumerate() {
        let (img, pool) = one_disk(dir.path(), &format!("p{i}"));
        pool.export().unwrap();
        reseal_labels(&img, change);
        let err = import(std::slice::from_ref(&img)).err().expect("refused");
        let msg = err.to_string();
        assert!(msg.contains(&format!("`{field}`")) && !msg.contains("truncated"), "{field}: {msg}");
        let found = discover(std::slice::from_ref(&img));
        assert!(found.pools.is_empty() && found.unusable.len() == 1, "{field}");
    }
}

/// Defect 4.
#[test]
fn a_device_is_shown_by_the_path_it_was_imported_from() {
    let dir = tempfile::tempdir().unwrap();
    let (img, pool) = one_disk(dir.path(), "tank");
    pool.export().unwrap();
    let moved = dir.path().join("moved.img");
    std::fs::rename(&img, &moved).unwrap();
    let pool = import(std::slice::from_ref(&moved)).unwrap();
    let path = moved.display().to_string();
    assert_eq!(pool.status().vdevs[0].leaves[0].path, path);
    assert_eq!(pool.status().vdevs[0].name, path);
    assert_eq!(pool.device_paths(), vec![moved.clone()]);
    pool.export().unwrap();
    // The labels now say where it is.
    let found = discover(std::slice::from_ref(&moved));
    let label = &found.pools[0].label;
    let paths: Vec<String> = label.tree.tops[0].leaves().into_iter().map(|(_, p)| p).collect();
    assert_eq!(paths, vec![path]);
}

/// Defect 5.
#[test]
fn a_failed_create_leaves_no_image_file_and_a_retry_works() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("t.img");
    for size in [10 << 20, 0] {
        let o = CreateOptions { size: Some(size), ..Default::default() };
        let err = Pool::create("tank", &[VdevSpec::Disk(img.clone())], &o).err();
        assert!(matches!(err, Some(PoolError::TooSmall { .. })), "{err:?}");
        assert!(!img.exists(), "size {size}: the image file was left behind");
    }
    // A mirror whose second side fails: the first side's new image goes too, and an
    // image that was there before stays.
    let kept = dir.path().join("kept.img");
    std::fs::write(&kept, b"someone's file").unwrap();
    let specs = [VdevSpec::Mirror(vec![img.clone(), kept.clone()])];
    assert!(Pool::create("tank", &specs, &opts()).is_err());
    assert!(!img.exists());
    assert_eq!(std::fs::read(&kept).unwrap(), b"someone's file");
    Pool::create("tank", &[VdevSpec::Disk(img.clone())], &opts()).unwrap().export().unwrap();
}

/// Defect 6.
#[test]
fn a_device_given_twice_is_named_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("t.img");
    let twice = dir.path().join(".").join("t.img");
    let started = std::time::Instant::now();
    for specs in [
        vec![VdevSpec::Mirror(vec![img.clone(), img.clone()])],
        vec![VdevSpec::Disk(img.clone()), VdevSpec::Disk(twice.clone())],
    ] {
        let err = Pool::create("tank", &specs, &opts()).err().expect("refused");
        assert!(matches!(err, PoolError::DuplicateDevice(_)), "{err}");
        assert!(err.to_string().contains("given twice"), "{err}");
        assert!(!img.exists(), "nothing was created");
    }
    let o = CreateOptions { logs: vec![VdevSpec::Disk(img.clone())], ..opts() };
    let err = Pool::create("tank", &[VdevSpec::Disk(img.clone())], &o).err();
    assert!(matches!(err, Some(PoolError::DuplicateDevice(_))), "{err:?}");
    assert!(started.elapsed().as_secs() < 3, "not a lock timeout");
    // Adding a pool's own device as its log.
    let (data, pool) = one_disk(dir.path(), "tank");
    let err = pool.add_devices(DeviceClass::Log, &[VdevSpec::Disk(data.clone())], false, None).err();
    assert!(matches!(err, Some(PoolError::DuplicateDevice(_))), "{err:?}");
}

/// Defect 8.
#[test]
fn names_follow_zfs_rules_and_refuse_the_path_separator() {
    let dir = tempfile::tempdir().unwrap();
    let (_, pool) = one_disk(dir.path(), "tank");
    for good in ["tank/db", "tank/db-1.x_y", "tank/2024", "tank/a/b"] {
        if good == "tank/a/b" {
            pool.create_dataset("tank/a").unwrap();
        }
        pool.create_dataset(good).unwrap_or_else(|e| panic!("{good}: {e}"));
    }
    for bad in ["tank/a:b", "tank/", "tank//x", "tank/.", "tank/..", "tank/-x", "tank/a b", "tank/é"] {
        let err = pool.create_dataset(bad).err().unwrap_or_else(|| panic!("{bad} accepted"));
        assert!(matches!(err, PoolError::BadName(..)), "{bad}: {err}");
    }
    let colon = pool.create_dataset("tank/a:b").err().unwrap().to_string();
    assert!(colon.contains("POOL/DS:PATH"), "{colon}");
    let long = format!("tank/{}", "x".repeat(251));
    assert!(pool.create_dataset(&long).is_err(), "256 characters");
    pool.create_dataset(&long[..255]).unwrap();
    for bad_pool in ["mirror", "mirror2", "raidz", "spare-1", "log", "1tank", "a:b"] {
        let img = dir.path().join("x.img");
        let err = Pool::create(bad_pool, &[VdevSpec::Disk(img.clone())], &opts()).err();
        assert!(matches!(err, Some(PoolError::BadName(..))), "{bad_pool}: {err:?}");
        assert!(!img.exists());
    }
}

/// Defect 10.
#[test]
fn a_new_empty_pool_holds_no_data() {
    let dir = tempfile::tempdir().unwrap();
    let (img, pool) = one_disk(dir.path(), "tank");
    assert!(!pool.holds_data().unwrap());
    pool.export().unwrap();
    let pool = import(std::slice::from_ref(&img)).unwrap();
    assert!(!pool.holds_data().unwrap(), "after a re-import too");
    let ds = pool.dataset("tank").unwrap();
    ds.create(ROOT_ID, b"f", NewObject::File, 0o644, 0, 0).unwrap();
    assert!(pool.holds_data().unwrap(), "a file");
    ds.unlink(ROOT_ID, b"f").unwrap();
    drop(ds);
    assert!(!pool.holds_data().unwrap());
    pool.create_dataset("tank/db").unwrap();
    assert!(pool.holds_data().unwrap(), "a dataset");
    pool.destroy().unwrap();
}

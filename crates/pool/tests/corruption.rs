//! Corruption: bytes flipped in the image under the pool. A damaged data, indirect,
//! dnode or root (MOS) block is never returned as data: the read fails with an I/O
//! error, `status` counts a checksum error on the device, `scrub` reports it. On a
//! mirror the read succeeds from the good side and the bad copy is rewritten. A damaged
//! newest root or uberblock makes import fall back to the previous txg.
mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tarn_dataset::{Dataset, FsError, NewObject, ROOT_ID};
use tarn_pool::{CreateOptions, ImportOptions, Pool, VdevSpec};
use tarn_vdev::{BlockDevice, DATA_START, LABEL_SIZE};
use tarn_zio::BlockPtr;

use common::image::{flip, image_bytes, locate};

fn new_pool(dir: &Path, specs: &[VdevSpec]) -> Pool {
    let opts = CreateOptions { size: Some(128 << 20), ..Default::default() };
    let pool = Pool::create("tank", specs, &opts).unwrap();
    // Raw records, so the test can find a file's bytes in the image.
    pool.set_property("tank", "compression", "off").unwrap();
    let _ = dir;
    pool
}

fn write_file(ds: &Dataset, name: &str, data: &[u8]) -> u64 {
    let a = ds.create(ROOT_ID, name.as_bytes(), NewObject::File, 0o644, 0, 0).unwrap();
    ds.write(a.ino, 0, data).unwrap();
    a.ino
}

fn read_named(ds: &Dataset, name: &str) -> Result<Vec<u8>, FsError> {
    let ino = ds.lookup(ROOT_ID, name.as_bytes())?.ino;
    common::read_file(ds, ino)
}

fn checksum_errors(pool: &Pool) -> Vec<(String, u64)> {
    pool.status().vdevs.iter().flat_map(|t| t.leaves.iter().map(|l| (l.path.clone(), l.checksum_errors))).collect()
}

fn import(paths: &[PathBuf]) -> Pool {
    Pool::import_paths(paths, &ImportOptions::default()).unwrap_or_else(|e| panic!("import failed: {e}"))
}

fn assert_io(r: Result<Vec<u8>, FsError>, what: &str) {
    match r {
        Err(FsError::Io(cause)) => {
            assert!(cause.to_string().contains("checksum"), "{what}: I/O error should say checksum: {cause}")
        }
        Err(e) => panic!("{what}: expected an I/O error, got {e:?}"),
        Ok(_) => panic!("{what}: read returned data from a corrupt block"),
    }
}

#[test]
fn flipped_data_byte_gives_eio_counts_and_scrub_reports() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("d.img");
    let pool = new_pool(dir.path(), &[VdevSpec::Disk(img.clone())]);
    let ds = pool.dataset("tank").unwrap();
    let victim = common::noise(11, 64 * 1024);
    let other = common::noise(12, 200 * 1024);
    write_file(&ds, "victim", &victim);
    write_file(&ds, "other", &other);
    drop(ds);
    pool.export().unwrap();

    flip(&img, locate(&img, &victim[5000..5064]) + 10);

    let pool = import(std::slice::from_ref(&img));
    let ds = pool.dataset("tank").unwrap();
    assert_eq!(checksum_errors(&pool)[0].1, 0);
    assert_io(read_named(&ds, "victim"), "read of the damaged file");
    assert_eq!(read_named(&ds, "other").unwrap(), other, "an undamaged file reads fine");
    assert!(checksum_errors(&pool)[0].1 >= 1, "status must count the checksum error: {:?}", pool.status());
    let scrub = pool.scrub().unwrap();
    assert_eq!(scrub.errors, 1, "scrub reports exactly the one damaged block: {scrub:?}");
    // The counters are persisted: they survive export and import.
    drop(ds);
    pool.export().unwrap();
    let pool = import(std::slice::from_ref(&img));
    assert!(checksum_errors(&pool)[0].1 >= 2, "counters persist across import: {:?}", pool.status());
    // A rewrite of the damaged file makes it whole again.
    let ds = pool.dataset("tank").unwrap();
    let ino = ds.lookup(ROOT_ID, b"victim").unwrap().ino;
    ds.write(ino, 0, &victim).unwrap();
    pool.sync().unwrap();
    assert_eq!(read_named(&ds, "victim").unwrap(), victim);
    assert_eq!(pool.scrub().unwrap().errors, 0);
}

/// Flips a byte of the block `bp` points to (single-device pool), in the image file.
fn flip_block(img: &Path, bp: &BlockPtr) {
    assert_eq!(bp.vdev, 0);
    flip(img, DATA_START + bp.offset + bp.psize as u64 / 2);
}

#[test]
fn flipped_indirect_block_gives_eio_for_that_file_only() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("d.img");
    let pool = new_pool(dir.path(), &[VdevSpec::Disk(img.clone())]);
    let ds = pool.dataset("tank").unwrap();
    let big = common::noise(21, 3 << 20); // 24 records of 128K: a tree with an indirect block
    let small = common::noise(22, 10_000);
    let ino = write_file(&ds, "big", &big);
    write_file(&ds, "small", &small);
    pool.sync().unwrap();
    let root = {
        let obj = tarn_dataset::object_of(&ds, ino).unwrap();
        let st = obj.lock();
        assert!(st.dnode().nlevels >= 2, "the file should have an indirect block");
        st.dnode().root.unwrap()
    };
    assert_eq!(root.block_type, tarn_zio::BlockType::Indirect);
    drop(ds);
    pool.export().unwrap();

    flip_block(&img, &root);

    let pool = import(std::slice::from_ref(&img));
    let ds = pool.dataset("tank").unwrap();
    assert_io(read_named(&ds, "big"), "read through a damaged indirect block");
    assert_eq!(read_named(&ds, "small").unwrap(), small);
    assert!(checksum_errors(&pool)[0].1 >= 1, "status counts it: {:?}", pool.status());
    assert!(pool.scrub().unwrap().errors >= 1, "scrub reports it");
    // Removing the damaged file must not take the pool down.
    ds.unlink(ROOT_ID, b"big").unwrap();
    pool.sync().unwrap_or_else(|e| panic!("pool failed to commit the removal of a damaged file: {e}"));
    write_file(&ds, "new", &small);
    drop(ds);
    pool.export().unwrap();
    let pool = import(&[img]);
    let ds = pool.dataset("tank").unwrap();
    assert_eq!(read_named(&ds, "new").unwrap(), small);
    assert_eq!(read_named(&ds, "small").unwrap(), small);
    assert_eq!(pool.scrub().unwrap().errors, 0, "nothing damaged is left reachable");
}

#[test]
fn flipped_dnode_block_gives_eio_not_wrong_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("d.img");
    let pool = new_pool(dir.path(), &[VdevSpec::Disk(img.clone())]);
    pool.create_dataset("tank/other").unwrap();
    let ds = pool.dataset("tank").unwrap();
    write_file(&ds, "f", &common::noise(31, 50_000));
    let other = pool.dataset("tank/other").unwrap();
    let keep = common::noise(32, 50_000);
    write_file(&other, "g", &keep);
    pool.sync().unwrap();
    let meta = ds.meta_dnode();
    assert_eq!(meta.nlevels, 1, "a small dnode table is one block");
    let dnodes = meta.root.unwrap();
    assert_eq!(dnodes.block_type, tarn_zio::BlockType::Dnodes);
    drop((ds, other));
    pool.export().unwrap();

    flip_block(&img, &dnodes);

    let pool = import(std::slice::from_ref(&img));
    let ds = pool.dataset("tank").unwrap();
    match ds.lookup(ROOT_ID, b"f") {
        Err(FsError::Io(_)) => {}
        other => {
            panic!("lookup through a damaged dnode block: expected an I/O error, got {other:?}")
        }
    }
    let other = pool.dataset("tank/other").unwrap();
    assert_eq!(read_named(&other, "g").unwrap(), keep, "another dataset is unaffected");
    assert!(checksum_errors(&pool)[0].1 >= 1, "status counts it: {:?}", pool.status());
    assert!(pool.scrub().unwrap().errors >= 1, "scrub reports it");
}

#[test]
fn mirror_reads_the_good_side_and_rewrites_the_bad_one() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.img");
    let b = dir.path().join("b.img");
    let pool = new_pool(dir.path(), &[VdevSpec::Mirror(vec![a.clone(), b.clone()])]);
    let ds = pool.dataset("tank").unwrap();
    let data = common::noise(41, 100_000);
    write_file(&ds, "f", &data);
    drop(ds);
    pool.export().unwrap();

    let at = locate(&b, &data[7000..7064]);
    assert_eq!(locate(&a, &data[7000..7064]), at, "both sides hold the block at the same place");
    flip(&b, at + 3);

    let pool = import(&[a.clone(), b.clone()]);
    let ds = pool.dataset("tank").unwrap();
    // Reads alternate between the sides; within a few reads the bad side is hit.
    for _ in 0..6 {
        assert_eq!(read_named(&ds, "f").unwrap(), data, "a mirror returns good data");
    }
    let errs = checksum_errors(&pool);
    assert_eq!(errs[0].1, 0, "side a is clean: {errs:?}");
    assert!(errs[1].1 >= 1, "side b's checksum error is counted: {errs:?}");
    assert_eq!(image_bytes(&b, at, 64), data[7000..7064], "the bad copy was rewritten from the good one");
    drop(ds);
    pool.export().unwrap();
}

#[test]
fn mirror_scrub_finds_and_repairs_every_bad_copy() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.img");
    let b = dir.path().join("b.img");
    let pool = new_pool(dir.path(), &[VdevSpec::Mirror(vec![a.clone(), b.clone()])]);
    let ds = pool.dataset("tank").unwrap();
    let files: Vec<Vec<u8>> = (0..8).map(|i| common::noise(50 + i, 30_000)).collect();
    for (i, f) in files.iter().enumerate() {
        write_file(&ds, &format!("f{i}"), f);
    }
    drop(ds);
    pool.export().unwrap();
    // Damage every file's block, half of them on side a, half on side b.
    let mut spots = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let side = if i % 2 == 0 { &a } else { &b };
        let at = locate(side, &f[100..164]);
        flip(side, at + 1);
        spots.push((side.clone(), at, f[100..164].to_vec()));
    }

    let pool = import(&[a.clone(), b.clone()]);
    let scrub = pool.scrub().unwrap();
    assert_eq!(scrub.errors, 0, "every block has a good copy: {scrub:?}");
    assert_eq!(scrub.checksum_errors_seen, 8, "scrub must check every copy, not one per block: {scrub:?}");
    let errs = checksum_errors(&pool);
    assert_eq!((errs[0].1, errs[1].1), (4, 4), "per-side counts: {errs:?}");
    for (side, at, want) in &spots {
        assert_eq!(&image_bytes(side, *at, 64), want, "scrub rewrote the bad copy in {}", side.display());
    }
    let ds = pool.dataset("tank").unwrap();
    for (i, f) in files.iter().enumerate() {
        assert_eq!(&read_named(&ds, &format!("f{i}")).unwrap(), f);
    }
    drop(ds);
    assert_eq!(pool.scrub().unwrap().checksum_errors_seen, 0, "a second scrub finds nothing");
}

/// Builds a pool whose newest txg replaced file `a` and added `b`; returns the image
/// path, the old and new content of `a`, and the newest uberblock's txg.
fn two_txgs(dir: &Path) -> (PathBuf, Vec<u8>, Vec<u8>, u64) {
    let img = dir.join("d.img");
    let pool = new_pool(dir, &[VdevSpec::Disk(img.clone())]);
    let ds = pool.dataset("tank").unwrap();
    let v1 = common::noise(61, 40_000);
    let v2 = common::noise(62, 40_000);
    let ino = write_file(&ds, "a", &v1);
    pool.sync().unwrap();
    ds.write(ino, 0, &v2).unwrap();
    write_file(&ds, "b", &v2);
    pool.sync().unwrap();
    let txg = pool.status().txg;
    drop(ds);
    pool.close().unwrap();
    (img, v1, v2, txg)
}

fn newest_uberblock(img: &Path) -> tarn_vdev::Uberblock {
    let dev = common::MemDevice::new(std::fs::read(img).unwrap(), "probe");
    let labels = tarn_vdev::read_device_labels(dev.as_ref() as &dyn BlockDevice).unwrap();
    labels.uberblocks.into_iter().max_by_key(|u| u.txg).unwrap()
}

fn assert_fell_back(img: &Path, v1: &[u8], txg: u64) {
    let pool = import(&[img.to_path_buf()]);
    assert_eq!(pool.opened_at_txg(), txg - 1, "import uses the previous txg");
    let ds = pool.dataset("tank").unwrap();
    let files = common::read_tree(&ds).unwrap();
    assert_eq!(files.keys().collect::<Vec<_>>(), vec!["a"], "the state of the previous txg");
    assert_eq!(files["a"], v1);
    // The pool carries on from there.
    write_file(&ds, "c", v1);
    drop(ds);
    pool.export().unwrap();
    let pool = import(&[img.to_path_buf()]);
    let ds = pool.dataset("tank").unwrap();
    assert_eq!(read_named(&ds, "c").unwrap(), v1);
    assert_eq!(pool.scrub().unwrap().errors, 0);
}

#[test]
fn damaged_newest_root_block_falls_back_to_the_previous_txg() {
    let dir = tempfile::tempdir().unwrap();
    let (img, v1, _v2, txg) = two_txgs(dir.path());
    let ub = newest_uberblock(&img);
    assert_eq!(ub.txg, txg);
    let mos = BlockPtr::decode(&ub.root).unwrap().unwrap();
    assert_eq!(mos.block_type, tarn_zio::BlockType::Mos);
    flip_block(&img, &mos);
    assert_fell_back(&img, &v1, txg);
    // (Checked after: an import commits a txg of its own, the intent log's new head.)
    let pool = import(std::slice::from_ref(&img));
    assert!(checksum_errors(&pool)[0].1 >= 1, "status shows the checksum error found at import: {:?}", pool.status());
}

#[test]
fn damaged_newest_uberblock_falls_back_to_the_previous_txg() {
    let dir = tempfile::tempdir().unwrap();
    let (img, v1, _v2, txg) = two_txgs(dir.path());
    let size = std::fs::metadata(&img).unwrap().len();
    let slots = tarn_vdev::slot_count(12) as u64;
    let label1 = (size / LABEL_SIZE) * LABEL_SIZE - LABEL_SIZE;
    for base in [0, label1] {
        flip(&img, base + 64 * 1024 + (txg % slots) * 4096 + 20);
    }
    assert_fell_back(&img, &v1, txg);
}

#[test]
fn in_memory_device_corruption_is_detected_too() {
    // The same promise through the BlockDevice trait: a device that returns flipped bytes.
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("d.img");
    let pool = new_pool(dir.path(), &[VdevSpec::Disk(img.clone())]);
    let ds = pool.dataset("tank").unwrap();
    let data = common::noise(71, 20_000);
    write_file(&ds, "f", &data);
    drop(ds);
    pool.export().unwrap();
    let mut bytes = std::fs::read(&img).unwrap();
    let at = common::find_all(&bytes, &data[0..64])[0];
    bytes[at + 7] ^= 1;
    let dev = common::MemDevice::new(bytes, "mem");
    let pool = Pool::import(vec![dev as Arc<dyn BlockDevice>], &ImportOptions::default()).unwrap();
    let ds = pool.dataset("tank").unwrap();
    assert_io(read_named(&ds, "f"), "single flipped bit");
    assert!(checksum_errors(&pool)[0].1 >= 1);
}

//! Dead lists (snapshot destroy without a tree walk): the lists against the walks they
//! replace (`Pool::verify_dead_lists`) across random writes, snapshots and destroys of any
//! snapshot against a model; the allocated count against the import walk (a block freed
//! while referenced, or leaked, shows there); a pool written before dead lists (MOS
//! version 4) imported and its snapshots destroyed; and power cuts at every point of a
//! write stream holding snapshot takes, destroys and dead-list updates. Scrub and
//! resilver reach the lists' chunks: a damaged chunk is repaired from the other mirror
//! side, or named as its snapshot's dead list on a lone device; a returning side gets the
//! chunks written while it was away. In a pool ENOSPC hit because a snapshot holds its
//! data, rollback and snapshot destroy work and give the space back.
mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::image::flip;
use common::{noise, read_tree, write, Ev, Model, OverlayDevice, RecDevice};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tarn_dataset::{Dataset, ROOT_ID};
use tarn_pool::{CreateOptions, ImportOptions, Pool, VdevSpec};
use tarn_txg::TxgConfig;
use tarn_vdev::{BlockDevice, LABEL_SIZE};

fn remove(ds: &Dataset, model: &mut Model, name: &str) {
    ds.unlink(ROOT_ID, name.as_bytes()).unwrap();
    model.remove(name);
}

/// A few random overwrites, new files and removals.
fn churn(ds: &Dataset, model: &mut Model, rng: &mut StdRng) {
    for _ in 0..rng.gen_range(2..6) {
        let name = format!("f{}", rng.gen_range(0..6));
        if rng.gen_range(0..8) == 0 && model.contains_key(&name) {
            remove(ds, model, &name);
        } else {
            let off = rng.gen_range(0..40) * 16384;
            let len = rng.gen_range(1..200_000);
            write(ds, model, &name, off, &noise(rng.gen(), len));
        }
    }
}

fn allocated(pool: &Pool) -> u64 {
    pool.sync().unwrap();
    pool.status().allocated
}

fn new_pool(dir: &Path) -> (Pool, PathBuf) {
    let img = dir.join("d0.img");
    let opts = CreateOptions { size: Some(512 << 20), ..Default::default() };
    let pool = Pool::create("tank", &[VdevSpec::Disk(img.clone())], &opts).unwrap();
    pool.create_dataset("tank/db").unwrap();
    (pool, img)
}

fn reimport(pool: Pool, img: &Path) -> Pool {
    pool.export().unwrap();
    Pool::import_paths(&[img.to_path_buf()], &ImportOptions::default()).unwrap()
}

/// The running pool's allocated bytes are what the import walk finds (a block freed while
/// referenced, or leaked, shows as a difference), and every snapshot reads back.
fn check_across_import(pool: Pool, img: &Path, snaps: &BTreeMap<String, Model>, head: &Model, why: &str) -> Pool {
    let before = allocated(&pool);
    let pool = reimport(pool, img);
    let after = allocated(&pool);
    assert!(
        after.abs_diff(before) <= 64 << 10,
        "{why}: running pool had {before} bytes allocated, import found {after}"
    );
    for (name, want) in snaps {
        let got = read_tree(&pool.snapshot_dataset(name).unwrap()).unwrap();
        assert!(got == *want, "{why}: {name} differs from the model");
    }
    assert!(read_tree(&pool.dataset("tank/db").unwrap()).unwrap() == *head, "{why}: head differs");
    pool
}

/// Random writes, snapshots and destroys (oldest, middle, newest) against a model: after
/// every step the dead lists name exactly the blocks the walks find, and across imports
/// the allocated count is the import walk's. Then every snapshot is destroyed and the
/// pool holds what the head alone holds.
#[test]
fn dead_lists_match_the_walks_across_random_snapshots_and_destroys() {
    let dir = tempfile::tempdir().unwrap();
    let (mut pool, img) = new_pool(dir.path());
    let mut rng = StdRng::seed_from_u64(13);
    let mut model = Model::new();
    let mut snaps: BTreeMap<String, Model> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut checked = 0;
    for step in 0..40u64 {
        let ds = pool.dataset("tank/db").unwrap();
        churn(&ds, &mut model, &mut rng);
        if rng.gen_bool(0.3) {
            pool.sync().unwrap();
            churn(&ds, &mut model, &mut rng);
        }
        if rng.gen_bool(0.6) || order.is_empty() {
            let name = format!("tank/db@s{step}");
            pool.create_snapshots(std::slice::from_ref(&name), false).unwrap();
            snaps.insert(name.clone(), model.clone());
            order.push(name);
        }
        // Writes in the same txg as a destroy: the head's list changes in it too.
        churn(&ds, &mut model, &mut rng);
        if order.len() > 3 || (rng.gen_bool(0.3) && !order.is_empty()) {
            let victim = match rng.gen_range(0..3) {
                0 => 0,
                1 => order.len() - 1,
                _ => rng.gen_range(0..order.len()),
            };
            let name = order.remove(victim);
            let before = allocated(&pool);
            pool.destroy_snapshot(&name).unwrap();
            snaps.remove(&name);
            assert!(allocated(&pool) <= before + (256 << 10), "step {step}: destroying {name} allocated space");
        }
        checked += pool.verify_dead_lists().unwrap_or_else(|e| panic!("step {step}: {e}"));
        drop(ds);
        if step % 8 == 7 {
            pool = check_across_import(pool, &img, &snaps, &model, &format!("step {step}"));
            checked += pool.verify_dead_lists().unwrap_or_else(|e| panic!("step {step}, imported: {e}"));
        }
    }
    assert!(checked >= 40, "only {checked} snapshot lists compared");
    let head_only = {
        for name in order.drain(..).rev() {
            pool.destroy_snapshot(&name).unwrap();
        }
        snaps.clear();
        allocated(&pool)
    };
    let pool = check_across_import(pool, &img, &snaps, &model, "all destroyed");
    assert!(allocated(&pool).abs_diff(head_only) <= 64 << 10);
    let scrub = pool.scrub().unwrap();
    assert_eq!(scrub.errors, 0, "{scrub:?}");
    pool.export().unwrap();
}

/// A clone's and a promoted clone's lists match the walks too.
#[test]
fn dead_lists_of_clones_and_promoted_clones_match_the_walks() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, img) = new_pool(dir.path());
    let mut rng = StdRng::seed_from_u64(5);
    let mut model = Model::new();
    let ds = pool.dataset("tank/db").unwrap();
    churn(&ds, &mut model, &mut rng);
    pool.create_snapshots(&["tank/db@a".into()], false).unwrap();
    churn(&ds, &mut model, &mut rng);
    pool.create_snapshots(&["tank/db@b".into()], false).unwrap();
    churn(&ds, &mut model, &mut rng);
    pool.clone_snapshot("tank/db@b", "tank/c", &[]).unwrap();
    let clone = pool.dataset("tank/c").unwrap();
    let mut cmodel = read_tree(&clone).unwrap();
    churn(&clone, &mut cmodel, &mut rng);
    pool.create_snapshots(&["tank/c@c1".into()], false).unwrap();
    churn(&clone, &mut cmodel, &mut rng);
    pool.create_snapshots(&["tank/c@c2".into()], false).unwrap();
    churn(&clone, &mut cmodel, &mut rng);
    assert!(pool.verify_dead_lists().unwrap() >= 4);
    pool.promote("tank/c").unwrap();
    churn(&clone, &mut cmodel, &mut rng);
    churn(&ds, &mut model, &mut rng);
    assert!(pool.verify_dead_lists().unwrap() >= 4);
    pool.destroy_snapshot("tank/c@c1").unwrap();
    pool.verify_dead_lists().unwrap();
    drop((ds, clone));
    pool.destroy_dataset("tank/db").unwrap();
    pool.destroy_snapshot("tank/c@b").unwrap();
    pool.destroy_snapshot("tank/c@a").unwrap();
    pool.verify_dead_lists().unwrap();
    let before = allocated(&pool);
    let pool = reimport(pool, &img);
    assert!(allocated(&pool).abs_diff(before) <= 64 << 10);
    assert!(read_tree(&pool.dataset("tank/c").unwrap()).unwrap() == cmodel);
    pool.verify_dead_lists().unwrap();
    pool.export().unwrap();
}

/// A pool an older tarn wrote (MOS version 5: no dead lists) imports; its snapshots are
/// destroyed by the walk, and each new snapshot starts a list that the next root (version
/// 6) keeps.
#[test]
fn a_pool_without_dead_lists_is_imported_and_its_snapshots_destroyed_by_the_walk() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, img) = new_pool(dir.path());
    pool.write_root_version_for_test(tarn_pool::MOS_VERSION - 1);
    let mut rng = StdRng::seed_from_u64(21);
    let mut model = Model::new();
    let mut snaps: BTreeMap<String, Model> = BTreeMap::new();
    let ds = pool.dataset("tank/db").unwrap();
    for i in 0..4 {
        churn(&ds, &mut model, &mut rng);
        let name = format!("tank/db@old{i}");
        pool.create_snapshots(std::slice::from_ref(&name), false).unwrap();
        snaps.insert(name, model.clone());
    }
    churn(&ds, &mut model, &mut rng);
    drop(ds);
    let pool = check_across_import(pool, &img, &snaps, &model, "version 5 root");
    // No list is known yet: nothing to compare, and destroys walk.
    assert_eq!(pool.verify_dead_lists().unwrap(), 0);
    pool.destroy_snapshot("tank/db@old1").unwrap();
    snaps.remove("tank/db@old1");
    let ds = pool.dataset("tank/db").unwrap();
    churn(&ds, &mut model, &mut rng);
    pool.create_snapshots(&["tank/db@new".into()], false).unwrap();
    snaps.insert("tank/db@new".into(), model.clone());
    churn(&ds, &mut model, &mut rng);
    // The head's list started at the new snapshot: known, and right.
    assert_eq!(pool.verify_dead_lists().unwrap(), 1);
    drop(ds);
    let pool = check_across_import(pool, &img, &snaps, &model, "after the upgrade");
    assert_eq!(pool.verify_dead_lists().unwrap(), 1);
    for name in ["tank/db@new", "tank/db@old3", "tank/db@old0", "tank/db@old2"] {
        pool.destroy_snapshot(name).unwrap();
        snaps.remove(name);
        pool.verify_dead_lists().unwrap();
    }
    let pool = check_across_import(pool, &img, &snaps, &model, "all destroyed");
    pool.export().unwrap();
}

// ---- scrub and resilver ----

/// Writes a file, snapshots it as `@a`, overwrites it (the old blocks go on the head's
/// dead list) and snapshots `@b`, which takes that list: `@b`'s list has chunks.
fn snapshots_with_a_dead_list(pool: &Pool, ds_name: &str) -> Model {
    let ds = pool.dataset(ds_name).unwrap();
    let mut model = Model::new();
    write(&ds, &mut model, "f", 0, &noise(1, 600_000));
    pool.create_snapshots(&[format!("{ds_name}@a")], false).unwrap();
    write(&ds, &mut model, "f", 0, &noise(2, 600_000));
    pool.sync().unwrap();
    pool.create_snapshots(&[format!("{ds_name}@b")], false).unwrap();
    write(&ds, &mut model, "g", 0, &noise(3, 200_000));
    model
}

/// Damages every chunk of a tree's dead list in image `img` (chunks are `(vdev, offset,
/// psize)`, on the pool's one top-level vdev).
fn damage_chunks(img: &Path, chunks: &[(u16, u64, u32)]) {
    for &(_, offset, psize) in chunks {
        flip(img, tarn_vdev::DATA_START + offset + u64::from(psize) / 2);
    }
}

fn mirror_pool(dir: &Path) -> (PathBuf, PathBuf, Pool) {
    let (a, b) = (dir.join("a.img"), dir.join("b.img"));
    let opts = CreateOptions { size: Some(128 << 20), ..Default::default() };
    let pool = Pool::create("tank", &[VdevSpec::Mirror(vec![a.clone(), b.clone()])], &opts).unwrap();
    pool.create_dataset("tank/db").unwrap();
    (a, b, pool)
}

fn import_paths(paths: &[PathBuf]) -> Pool {
    Pool::import_paths(paths, &ImportOptions::default()).unwrap_or_else(|e| panic!("import failed: {e}"))
}

/// A chunk damaged on one side of a mirror: the scrub finds the bad copy and rewrites it
/// from the other side, so the chunk survives the other side's damage next.
#[test]
fn scrub_repairs_a_dead_list_chunk_from_the_other_mirror_side() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, pool) = mirror_pool(dir.path());
    let model = snapshots_with_a_dead_list(&pool, "tank/db");
    let chunks = pool.dead_list_chunks_for_test("tank/db@b");
    assert!(!chunks.is_empty(), "@b took the head's dead list");
    pool.export().unwrap();

    damage_chunks(&a, &chunks);
    let pool = import_paths(&[a.clone(), b.clone()]);
    let scrub = pool.scrub().unwrap();
    assert_eq!(scrub.errors, 0, "{scrub:?}");
    assert_eq!(scrub.checksum_errors_seen, chunks.len() as u64, "the scrub read every chunk's copies: {scrub:?}");
    pool.export().unwrap();

    damage_chunks(&b, &chunks);
    let pool = import_paths(&[a, b]);
    pool.verify_dead_lists().unwrap();
    let scrub = pool.scrub().unwrap();
    assert_eq!(scrub.errors, 0, "side a was repaired: {scrub:?}");
    assert!(read_tree(&pool.dataset("tank/db").unwrap()).unwrap() == model);
    pool.destroy_snapshot("tank/db@a").unwrap();
    pool.verify_dead_lists().unwrap();
    pool.export().unwrap();
}

/// A chunk damaged on a lone device: the scrub counts it and names it as its snapshot's
/// dead list. Destroying the snapshot whose destroy reads it goes through (the chunk's
/// entries stay allocated until the next import, which frees them), nothing else is
/// harmed, and after that import the pool holds what the walk counts and scrubs clean.
#[test]
fn scrub_names_a_damaged_dead_list_chunk_on_a_lone_device() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, img) = new_pool(dir.path());
    let model = snapshots_with_a_dead_list(&pool, "tank/db");
    let b_model = {
        let mut m = model.clone();
        m.remove("g");
        m
    };
    let chunks = pool.dead_list_chunks_for_test("tank/db@b");
    assert!(!chunks.is_empty());
    pool.export().unwrap();

    damage_chunks(&img, &chunks);
    let pool = import_paths(std::slice::from_ref(&img));
    let scrub = pool.scrub().unwrap();
    assert_eq!(scrub.errors, chunks.len() as u64, "{scrub:?}");
    assert_eq!(pool.error_files(), vec!["tank/db@b:<dead list>".to_string()]);
    assert!(pool.verify_dead_lists().is_err(), "the list does not read");
    // Destroying @a reads @b's list (the blocks only @a holds).
    pool.destroy_snapshot("tank/db@a").unwrap();
    assert!(read_tree(&pool.snapshot_dataset("tank/db@b").unwrap()).unwrap() == b_model);
    assert!(read_tree(&pool.dataset("tank/db").unwrap()).unwrap() == model);
    // @b's own list is not known any more; the head's (against @b) still is.
    assert_eq!(pool.verify_dead_lists().unwrap(), 1);
    let mut snaps = BTreeMap::new();
    snaps.insert("tank/db@b".to_string(), b_model);
    // The import frees the entries of the chunk that did not read (only @a held them);
    // from then on the running count is the walk's.
    let leaked = allocated(&pool);
    let pool = reimport(pool, &img);
    assert!(allocated(&pool) < leaked, "the import freed what only @a held");
    let pool = check_across_import(pool, &img, &snaps, &model, "after the destroy");
    let scrub = pool.scrub().unwrap();
    assert_eq!(scrub.errors, 0, "the damaged chunk was freed: {scrub:?}");
    pool.destroy_snapshot("tank/db@b").unwrap();
    let pool = check_across_import(pool, &img, &BTreeMap::new(), &model, "all destroyed");
    pool.export().unwrap();
}

/// Chunks written while a mirror side was away are copied to it by the resilver: with
/// the other side's chunks damaged afterwards, every list still reads.
#[test]
fn resilver_copies_dead_list_chunks_to_a_returning_side() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, pool) = mirror_pool(dir.path());
    pool.export().unwrap();
    let pool = import_paths(std::slice::from_ref(&a));
    assert_eq!(pool.status().state, "DEGRADED");
    let model = snapshots_with_a_dead_list(&pool, "tank/db");
    let chunks = pool.dead_list_chunks_for_test("tank/db@b");
    assert!(!chunks.is_empty());
    pool.export().unwrap();

    let pool = import_paths(&[a.clone(), b.clone()]);
    let end = pool.scan_wait().expect("a resilver ran");
    assert_eq!((end.kind, end.errors), (tarn_pool::ScanKind::Resilver, 0), "{end:?}");
    pool.export().unwrap();

    damage_chunks(&a, &chunks);
    let pool = import_paths(&[a, b]);
    // The scrub first (a read of a damaged copy repairs it from the other side too).
    let scrub = pool.scrub().unwrap();
    assert_eq!((scrub.errors, scrub.checksum_errors_seen), (0, chunks.len() as u64), "{scrub:?}");
    pool.verify_dead_lists().unwrap();
    assert!(read_tree(&pool.dataset("tank/db").unwrap()).unwrap() == model);
    pool.export().unwrap();
}

/// A list of several chunks scrubbed slowly (about one chunk a slice): slices pause
/// among its chunks (bookmark object 0) and resume after them, and the scrub counts each
/// block once, as a foreground one does.
#[test]
fn a_slow_scrub_pauses_among_a_dead_lists_chunks_and_counts_each_once() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, _img) = new_pool(dir.path());
    pool.set_property("tank/db", "recordsize", "4K").unwrap();
    let ds = pool.dataset("tank/db").unwrap();
    let mut model = Model::new();
    // Compressible records: many blocks, few bytes to scan.
    write(&ds, &mut model, "f", 0, &common::pattern(1, 2100 * 4096));
    pool.create_snapshots(&["tank/db@a".into()], false).unwrap();
    write(&ds, &mut model, "f", 0, &common::pattern(2, 2100 * 4096));
    pool.create_snapshots(&["tank/db@b".into()], false).unwrap();
    drop(ds);
    let chunks = pool.dead_list_chunks_for_test("tank/db@b");
    assert!(chunks.len() >= 2, "{chunks:?}");
    let full = pool.scrub().unwrap();

    // Slower than a chunk per slice.
    let largest = chunks.iter().map(|c| u64::from(c.2)).max().unwrap();
    pool.scrub_start_with(tarn_pool::ScanPace { yield_to_demand: false, bytes_per_sec: largest * 5 }).unwrap();
    let mut paused_in_list = 0;
    while let Some(s) = pool.scan_wait_for(Duration::from_millis(5)) {
        if s.record.bookmark.is_some_and(|b| b.object == 0 && b.blkid > 0) {
            paused_in_list += 1;
        }
        if !s.running {
            break;
        }
    }
    let end = pool.scan_wait().unwrap();
    assert!(paused_in_list > 0, "no slice ended among the chunks: {end:?}");
    assert_eq!((end.errors, end.blocks), (0, full.blocks), "every block counted once: {end:?} vs {full:?}");
    pool.export().unwrap();
}

// ---- a full pool ----

/// Writes 1 MiB files `PREFIX0`, `PREFIX1`, … until the pool refuses one with ENOSPC;
/// returns how many it took in full.
fn fill(ds: &Dataset, model: &mut Model, prefix: &str, seed: u64) -> u64 {
    for i in 0.. {
        let name = format!("{prefix}{i}");
        let ino = ds.create(ROOT_ID, name.as_bytes(), tarn_dataset::NewObject::File, 0o644, 0, 0).unwrap().ino;
        match ds.write(ino, 0, &noise(seed + i, 1 << 20)) {
            Ok(_) => {
                model.insert(name, noise(seed + i, 1 << 20));
            }
            Err(tarn_dataset::FsError::NoSpace) => {
                ds.unlink(ROOT_ID, name.as_bytes()).unwrap();
                return i;
            }
            Err(e) => panic!("{name}: {e}"),
        }
    }
    unreachable!()
}

/// A pool that ENOSPC hit because a snapshot holds most of its data: rollback and
/// snapshot destroy still work (the slop reserve writers cannot use is there for
/// them), the destroy gives the space back, and writes succeed again.
#[test]
fn rollback_and_snapshot_destroy_work_in_a_pool_full_because_of_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("d0.img");
    let opts = CreateOptions { size: Some(96 << 20), ..Default::default() };
    let pool = Pool::create("tank", &[VdevSpec::Disk(img.clone())], &opts).unwrap();
    pool.create_dataset("tank/db").unwrap();
    let ds = pool.dataset("tank/db").unwrap();
    let mut model = Model::new();
    let old = fill(&ds, &mut model, "old", 0);
    assert!(old >= 60, "only {old} MiB fit");
    pool.create_snapshots(&["tank/db@full".into()], false).unwrap();
    let at_snapshot = model.clone();
    for name in at_snapshot.keys() {
        remove(&ds, &mut model, name);
    }
    pool.sync().unwrap();
    // The snapshot holds every removed block: still full.
    let new = fill(&ds, &mut model, "new", 1000);
    assert!(new <= 2, "{new} MiB fit after removing what the snapshot holds");
    drop(ds);

    pool.rollback("tank/db@full").unwrap_or_else(|e| panic!("rollback in a full pool: {e}"));
    let ds = pool.dataset("tank/db").unwrap();
    assert!(read_tree(&ds).unwrap() == at_snapshot, "the head is the snapshot again");
    let mut model = at_snapshot;
    for name in model.clone().keys() {
        remove(&ds, &mut model, name);
    }
    pool.sync().unwrap();
    assert!(pool.available() < 4 << 20, "still full: {} bytes available", pool.available());

    pool.destroy_snapshot("tank/db@full").unwrap_or_else(|e| panic!("destroy in a full pool: {e}"));
    pool.sync().unwrap();
    assert!(pool.available() >= old << 20, "the destroy gave the space back: {} available", pool.available());
    let again = fill(&ds, &mut model, "again", 2000);
    assert!(again + 2 >= old, "{again} MiB fit again, {old} at first");
    drop(ds);
    let pool = check_across_import(pool, &img, &BTreeMap::new(), &model, "refilled");
    assert_eq!(pool.scrub().unwrap().errors, 0);
    pool.export().unwrap();
}

// ---- power cuts ----

/// Only explicit syncs (and the snapshot commands' own) commit.
fn manual_txgs() -> TxgConfig {
    TxgConfig { timeout: Duration::from_secs(3600), ..Default::default() }
}

fn base_image() -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("base.img");
    let opts = CreateOptions { size: Some(96 << 20), txg: manual_txgs(), ..Default::default() };
    let pool = Pool::create("tank", &[VdevSpec::Disk(path.clone())], &opts).unwrap();
    pool.set_property("tank", "recordsize", "16K").unwrap();
    pool.close().unwrap();
    std::fs::read(&path).unwrap()
}

/// A committed state: the head's files, each snapshot's, and where its commit ended in
/// the event stream.
struct Committed {
    head: Model,
    snaps: BTreeMap<String, Model>,
    end: usize,
}

/// Writes, snapshots and destroys of the oldest, a middle and the newest snapshot, each
/// destroy in a txg that also frees head blocks (dead-list updates).
fn record_workload(dev: &Arc<RecDevice>) -> Vec<Committed> {
    let pool = Pool::import(vec![dev.clone() as Arc<dyn BlockDevice>], &ImportOptions { txg: manual_txgs() }).unwrap();
    let ds = pool.dataset("tank").unwrap();
    let mut rng = StdRng::seed_from_u64(99);
    let mut model = Model::new();
    let mut snaps: BTreeMap<String, Model> = BTreeMap::new();
    let mut states = vec![Committed { head: Model::new(), snaps: BTreeMap::new(), end: dev.events() }];
    let mut commit = |head: &Model, snaps: &BTreeMap<String, Model>| {
        states.push(Committed { head: head.clone(), snaps: snaps.clone(), end: dev.events() });
    };
    for round in 0..6 {
        churn(&ds, &mut model, &mut rng);
        pool.sync().unwrap();
        commit(&model, &snaps);
        let name = format!("tank@r{round}");
        pool.create_snapshots(std::slice::from_ref(&name), false).unwrap();
        snaps.insert(name, model.clone());
        commit(&model, &snaps);
        churn(&ds, &mut model, &mut rng);
        pool.sync().unwrap();
        commit(&model, &snaps);
        if round >= 2 {
            let names: Vec<String> = snaps.keys().cloned().collect();
            let victim = names[[0, names.len() / 2, names.len() - 1][round % 3]].clone();
            // The head's writes join the destroy's txg.
            churn(&ds, &mut model, &mut rng);
            pool.destroy_snapshot(&victim).unwrap();
            snaps.remove(&victim);
            // The destroy's txg may not hold all the writes: commit the rest.
            pool.sync().unwrap();
            commit(&model, &snaps);
        }
    }
    drop(ds);
    pool.close().unwrap();
    states
}

fn is_uberblock_write(off: u64, size: u64) -> bool {
    let label1 = (size / LABEL_SIZE) * LABEL_SIZE - LABEL_SIZE;
    let cfg = LABEL_SIZE - 192 * 1024;
    (off >= cfg && off < LABEL_SIZE) || (off >= label1 + cfg && off < label1 + LABEL_SIZE)
}

/// Power cut after each prefix of the write stream (and with the writes since the last
/// flush in a random subset): the image imports as one committed state, with its
/// snapshots and their contents; the dead lists match the walks; every snapshot can then
/// be destroyed through them, leaving exactly what the import walk counts (nothing freed
/// twice, nothing leaked); and the pool scrubs clean.
#[test]
fn power_cuts_amid_snapshot_destroys_and_dead_list_updates_leave_a_consistent_pool() {
    let base = Arc::new(base_image());
    let size = base.len() as u64;
    let log = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let dev = RecDevice::shared((*base).clone(), "rec", 0, log.clone());
    let states = record_workload(&dev);
    drop(dev);
    let events: Vec<(usize, Ev)> = log.lock().clone();
    let n = events.len();
    let state_of: Vec<usize> = (0..n).map(|i| states.iter().position(|s| s.end > i).unwrap_or(states.len())).collect();
    let flushes: Vec<usize> = (0..n).filter(|&i| matches!(events[i].1, Ev::Flush)).collect();
    let mut rng = StdRng::seed_from_u64(3);
    let mut cuts: Vec<(String, Vec<usize>)> = Vec::new();
    // Cut at every flush and just before it (everything of the txg written, nothing
    // flushed), and a random subset of each flush interval's writes.
    let mut start = 0;
    for &f in &flushes {
        cuts.push((format!("after flush {f}"), (0..=f).collect()));
        cuts.push((format!("before flush {f}"), (0..f).collect()));
        let mut subset: Vec<usize> = (0..start).collect();
        subset.extend((start..f).filter(|_| rng.gen_bool(0.5)));
        cuts.push((format!("subset of {start}..{f}"), subset));
        start = f + 1;
    }
    let mut seen = std::collections::BTreeSet::new();
    for (what, applied) in &cuts {
        let img = Arc::new(OverlayDevice::new(base.clone(), "cut"));
        let mut newest = 0;
        for &i in applied {
            if let Ev::Write { off, data } = &events[i].1 {
                img.write_at(data, *off).unwrap();
                if is_uberblock_write(*off, size) {
                    newest = newest.max(state_of[i]);
                }
            }
        }
        let want = &states[newest];
        let dev = || vec![img.clone() as Arc<dyn BlockDevice>];
        let pool = Pool::import(dev(), &ImportOptions { txg: manual_txgs() })
            .unwrap_or_else(|e| panic!("{what}: import failed: {e}"));
        let names: Vec<String> =
            pool.snapshot_names("tank").unwrap().into_iter().map(|s| format!("tank@{s}")).collect();
        assert_eq!(names, want.snaps.keys().cloned().collect::<Vec<_>>(), "{what}: snapshots of state {newest}");
        for (name, files) in &want.snaps {
            assert!(read_tree(&pool.snapshot_dataset(name).unwrap()).unwrap() == *files, "{what}: {name} differs");
        }
        assert!(read_tree(&pool.dataset("tank").unwrap()).unwrap() == want.head, "{what}: head differs");
        pool.verify_dead_lists().unwrap_or_else(|e| panic!("{what}: {e}"));
        let scrub = pool.scrub().unwrap();
        assert_eq!(scrub.errors, 0, "{what}: {scrub:?}");
        for name in &names {
            pool.destroy_snapshot(name).unwrap();
        }
        let running = allocated(&pool);
        pool.close().unwrap();
        let pool = Pool::import(dev(), &ImportOptions { txg: manual_txgs() }).unwrap();
        let walked = allocated(&pool);
        assert!(
            walked.abs_diff(running) <= 64 << 10,
            "{what}: after destroying every snapshot the pool had {running} bytes allocated, the import walk found {walked}"
        );
        assert!(read_tree(&pool.dataset("tank").unwrap()).unwrap() == want.head, "{what}: head differs after");
        pool.close().unwrap();
        seen.insert(newest);
    }
    assert!(seen.len() >= states.len() / 2, "the cuts landed in only {} of {} states", seen.len(), states.len());
}

//! Snapshots and clones: contents frozen while the head changes (against a model of
//! every file), space freed exactly by destroys (back to the pool's free count, nothing
//! a remaining snapshot, clone or head holds), clones writable and independent,
//! rollback, and bad input refused with nothing changed. Every scenario ends with an
//! export and import, whose walk rebuilds the space maps from the trees: a block freed
//! while still referenced, or leaked, shows there as a different allocated count or a
//! file that no longer reads back.
mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{noise, read_tree, write, Model};
use tarn_dataset::{Dataset, FsError, NewObject, SetAttr, ROOT_ID};
use tarn_pool::{CreateOptions, ImportOptions, Pool, PoolError, VdevSpec};

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

fn allocated(pool: &Pool) -> u64 {
    pool.sync().unwrap();
    pool.status().allocated
}

fn truncate(ds: &Dataset, model: &mut Model, name: &str, size: u64) {
    let ino = ds.lookup(ROOT_ID, name.as_bytes()).unwrap().ino;
    ds.setattr(ino, &SetAttr { size: Some(size), ..Default::default() }).unwrap();
    model.get_mut(name).unwrap().resize(size as usize, 0);
}

fn remove(ds: &Dataset, model: &mut Model, name: &str) {
    ds.unlink(ROOT_ID, name.as_bytes()).unwrap();
    model.remove(name);
}

/// Step `round` of a changing head: overwrites, appends, a truncate, a new file and a
/// removed one, so snapshots differ from each other in every way a tree can.
fn change(ds: &Dataset, model: &mut Model, round: u64) {
    write(ds, model, "a", round * 7000, &noise(round, 40_000));
    write(ds, model, "b", 0, &noise(100 + round, 300_000));
    write(ds, model, &format!("new{round}"), 0, &noise(200 + round, 20_000 + round as usize * 1000));
    if round >= 2 {
        truncate(ds, model, "a", 10_000 + round * 3000);
        remove(ds, model, &format!("new{}", round - 2));
    }
}

fn assert_snapshot(pool: &Pool, name: &str, want: &Model) {
    let snap = pool.snapshot_dataset(name).unwrap();
    let got = read_tree(&snap).unwrap();
    assert_eq!(got.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>(), "{name}: files");
    assert!(got == *want, "{name}: contents differ from the model");
}

#[test]
fn snapshots_stay_frozen_while_the_head_changes_and_across_import() {
    let dir = tempfile::tempdir().unwrap();
    let (mut pool, img) = new_pool(dir.path());
    let mut model = Model::new();
    let mut frozen: Vec<(String, Model)> = Vec::new();
    for round in 0..5 {
        let ds = pool.dataset("tank/db").unwrap();
        change(&ds, &mut model, round);
        if round % 2 == 0 {
            pool.sync().unwrap();
        }
        let name = format!("tank/db@s{round}");
        pool.create_snapshots(std::slice::from_ref(&name), false).unwrap();
        frozen.push((name, model.clone()));
        // Changes after the snapshot, in the same txg as nothing: the snapshot is the
        // committed root, not what came after.
        write(&ds, &mut model, "a", 0, &noise(900 + round, 5000));
    }
    for (name, want) in &frozen {
        assert_snapshot(&pool, name, want);
    }
    assert!(read_tree(&pool.dataset("tank/db").unwrap()).unwrap() == model, "head differs from the model");
    pool = reimport(pool, &img);
    for (name, want) in &frozen {
        assert_snapshot(&pool, name, want);
    }
    // Destroy the middle, then the oldest, then the newest: the others still read back,
    // after each destroy and after an import.
    for victim in [2usize, 0, 4] {
        let before = allocated(&pool);
        pool.destroy_snapshot(&frozen[victim].0).unwrap();
        assert!(allocated(&pool) <= before, "a destroy never allocates");
        pool.verify_dead_lists().unwrap();
        frozen[victim].1.clear();
        for (name, want) in frozen.iter().filter(|(_, m)| !m.is_empty()) {
            assert_snapshot(&pool, name, want);
        }
        let alloc = allocated(&pool);
        pool = reimport(pool, &img);
        let rebuilt = allocated(&pool);
        assert!(
            rebuilt.abs_diff(alloc) <= 64 << 10,
            "import found {rebuilt} bytes allocated, the running pool had {alloc}: a block was leaked or freed while referenced"
        );
        for (name, want) in frozen.iter().filter(|(_, m)| !m.is_empty()) {
            assert_snapshot(&pool, name, want);
        }
        assert!(read_tree(&pool.dataset("tank/db").unwrap()).unwrap() == model);
    }
    let names = pool.snapshot_names("tank/db").unwrap();
    assert_eq!(names, vec!["s1".to_string(), "s3".to_string()]);
    let scrub = pool.scrub().unwrap();
    assert_eq!(scrub.errors, 0, "{scrub:?}");
    pool.export().unwrap();
}

#[test]
fn a_snapshot_keeps_overwritten_blocks_and_its_destroy_gives_them_back() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, img) = new_pool(dir.path());
    let ds = pool.dataset("tank/db").unwrap();
    let mut model = Model::new();
    write(&ds, &mut model, "big", 0, &noise(1, 8 << 20));
    let base = allocated(&pool);
    pool.create_snapshots(&["tank/db@keep".into()], false).unwrap();
    let snap_model = model.clone();
    write(&ds, &mut model, "big", 0, &noise(2, 8 << 20));
    let with_snapshot = allocated(&pool);
    assert!(with_snapshot >= base + (8 << 20), "the old blocks stay: {base} -> {with_snapshot}");
    // A scrub reads both versions, each block once: the snapshot's too, though no head
    // holds them any more.
    let scrub = pool.scrub().unwrap();
    assert!(scrub.bytes >= 16 << 20 && scrub.bytes <= with_snapshot, "scrub examined {} bytes", scrub.bytes);
    assert_eq!(scrub.errors, 0);
    let list = pool.snapshots(Some("tank/db")).unwrap();
    assert_eq!(list.len(), 1);
    assert!(list[0].used >= 8 << 20 && list[0].used < 9 << 20, "{:?}", list[0]);
    assert!(list[0].referenced >= 8 << 20, "{:?}", list[0]);
    let props: BTreeMap<String, String> = pool
        .get_properties("tank/db", None)
        .unwrap()
        .into_iter()
        .map(|r| (r.property, r.raw.unwrap_or(r.value)))
        .collect();
    let usedbysnapshots: u64 = props["usedbysnapshots"].parse().unwrap();
    let used: u64 = props["used"].parse().unwrap();
    let referenced: u64 = props["referenced"].parse().unwrap();
    assert_eq!(usedbysnapshots, list[0].used);
    assert_eq!(used, referenced + usedbysnapshots);
    assert!(props["written"].parse::<u64>().unwrap() >= 8 << 20);
    assert_eq!(props["origin"], "-");
    assert_snapshot(&pool, "tank/db@keep", &snap_model);

    pool.destroy_snapshot("tank/db@keep").unwrap();
    let after = allocated(&pool);
    assert!(after.abs_diff(base) <= 256 << 10, "destroy gives the 8 MiB back: {base} before, {after} after");
    drop(ds);
    let pool = reimport(pool, &img);
    assert!(allocated(&pool).abs_diff(after) <= 64 << 10);
    assert!(read_tree(&pool.dataset("tank/db").unwrap()).unwrap() == model);
    pool.export().unwrap();
}

#[test]
fn a_recursive_snapshot_takes_every_dataset_below_in_one_txg() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, img) = new_pool(dir.path());
    pool.create_dataset("tank/db/logs").unwrap();
    let mut m1 = Model::new();
    let mut m2 = Model::new();
    write(&pool.dataset("tank/db").unwrap(), &mut m1, "data", 0, &noise(1, 50_000));
    write(&pool.dataset("tank/db/logs").unwrap(), &mut m2, "log", 0, &noise(2, 50_000));
    let taken = pool.create_snapshots(&["tank/db@r".into()], true).unwrap();
    assert_eq!(taken, vec!["tank/db@r".to_string(), "tank/db/logs@r".to_string()]);
    let list = pool.snapshots(None).unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[0].txg, list[1].txg, "one txg for both: {list:?}");
    let pool = reimport(pool, &img);
    assert_snapshot(&pool, "tank/db@r", &m1);
    assert_snapshot(&pool, "tank/db/logs@r", &m2);
    pool.export().unwrap();
}

#[test]
fn a_clone_is_writable_independent_and_holds_its_origin() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, img) = new_pool(dir.path());
    let ds = pool.dataset("tank/db").unwrap();
    let mut model = Model::new();
    write(&ds, &mut model, "f", 0, &noise(1, 2 << 20));
    write(&ds, &mut model, "g", 0, &noise(2, 100_000));
    pool.create_snapshots(&["tank/db@base".into()], false).unwrap();
    let snap_model = model.clone();
    let before_clone = allocated(&pool);
    pool.clone_snapshot("tank/db@base", "tank/copy", &[("recordsize", "16K")]).unwrap();
    assert!(allocated(&pool) <= before_clone + (256 << 10), "a clone copies nothing");
    let copy = pool.dataset("tank/copy").unwrap();
    assert!(read_tree(&copy).unwrap() == snap_model);
    let mut clone_model = snap_model.clone();
    write(&copy, &mut clone_model, "f", 4096, &noise(3, 1 << 20));
    remove(&copy, &mut clone_model, "g");
    write(&copy, &mut clone_model, "h", 0, &noise(4, 10_000));
    write(&ds, &mut model, "f", 0, &noise(5, 2 << 20));
    pool.sync().unwrap();
    assert!(read_tree(&copy).unwrap() == clone_model);
    assert!(read_tree(&ds).unwrap() == model);
    assert_snapshot(&pool, "tank/db@base", &snap_model);
    let origin = pool.get_properties("tank/copy", Some("origin")).unwrap();
    assert_eq!(origin[0].value, "tank/db@base");
    drop((ds, copy));

    let err = pool.destroy_snapshot("tank/db@base").unwrap_err();
    assert!(matches!(err, PoolError::SnapshotHasClones { .. }), "{err}");
    assert!(err.to_string().contains("tank/copy"), "{err}");
    let err = pool.destroy_dataset("tank/db").unwrap_err();
    assert!(matches!(err, PoolError::HasSnapshots { .. }), "{err}");

    let pool = reimport(pool, &img);
    let copy = pool.dataset("tank/copy").unwrap();
    assert!(read_tree(&copy).unwrap() == clone_model);
    assert!(read_tree(&pool.dataset("tank/db").unwrap()).unwrap() == model);
    assert_snapshot(&pool, "tank/db@base", &snap_model);
    drop(copy);

    // The clone goes, then its origin: each time only what no one else holds is freed.
    pool.destroy_dataset("tank/copy").unwrap();
    assert_snapshot(&pool, "tank/db@base", &snap_model);
    pool.destroy_snapshot("tank/db@base").unwrap();
    let alloc = allocated(&pool);
    let pool = reimport(pool, &img);
    assert!(allocated(&pool).abs_diff(alloc) <= 64 << 10);
    assert!(read_tree(&pool.dataset("tank/db").unwrap()).unwrap() == model);
    assert_eq!(pool.scrub().unwrap().errors, 0);
    pool.export().unwrap();
}

#[test]
fn rollback_returns_the_head_to_the_newest_snapshot_and_frees_what_came_after() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, img) = new_pool(dir.path());
    let ds = pool.dataset("tank/db").unwrap();
    let mut model = Model::new();
    write(&ds, &mut model, "f", 0, &noise(1, 1 << 20));
    pool.create_snapshots(&["tank/db@one".into()], false).unwrap();
    write(&ds, &mut model, "f", 0, &noise(2, 1 << 20));
    pool.create_snapshots(&["tank/db@two".into()], false).unwrap();
    let at_two = model.clone();
    let base = allocated(&pool);
    write(&ds, &mut model, "f", 0, &noise(3, 4 << 20));
    write(&ds, &mut model, "other", 0, &noise(4, 1 << 20));
    drop(ds);
    let err = pool.rollback("tank/db@one").unwrap_err();
    assert!(matches!(err, PoolError::SnapshotNotNewest { .. }), "{err}");
    assert!(err.to_string().contains("tank/db@two"), "{err}");
    pool.rollback("tank/db@two").unwrap();
    let after = allocated(&pool);
    assert!(after.abs_diff(base) <= 256 << 10, "rollback frees the newer blocks: {base} -> {after}");
    let ds = pool.dataset("tank/db").unwrap();
    assert!(read_tree(&ds).unwrap() == at_two);
    let mut model = at_two.clone();
    write(&ds, &mut model, "after", 0, &noise(5, 30_000));
    drop(ds);
    let pool = reimport(pool, &img);
    assert!(read_tree(&pool.dataset("tank/db").unwrap()).unwrap() == model);
    assert_snapshot(&pool, "tank/db@two", &at_two);
    pool.export().unwrap();
}

#[test]
fn bad_snapshot_commands_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, _img) = new_pool(dir.path());
    let mut model = Model::new();
    write(&pool.dataset("tank/db").unwrap(), &mut model, "f", 0, &noise(1, 10_000));
    pool.create_snapshots(&["tank/db@a".into()], false).unwrap();
    for bad in ["tank/db", "tank/db@", "tank/db@a@b", "tank/db@a/b", "tank/db@a b", "other/db@x", "tank//db@x"] {
        let err = pool.create_snapshots(&[bad.into()], false).unwrap_err();
        assert!(matches!(err, PoolError::BadName(..)), "{bad}: {err}");
    }
    let err = pool.create_snapshots(&["tank/nope@x".into()], false).unwrap_err();
    assert!(matches!(err, PoolError::NoSuchDataset(_)), "{err}");
    let err = pool.create_snapshots(&["tank/db@a".into()], false).unwrap_err();
    assert!(matches!(err, PoolError::SnapshotExists(_)), "{err}");
    // One bad name in a list refuses all of it.
    let err = pool.create_snapshots(&["tank/db@b".into(), "tank/db@a".into()], false).unwrap_err();
    assert!(matches!(err, PoolError::SnapshotExists(_)), "{err}");
    assert_eq!(pool.snapshot_names("tank/db").unwrap(), vec!["a".to_string()]);
    let err = pool.destroy_snapshot("tank/db@zz").unwrap_err();
    assert!(matches!(err, PoolError::NoSuchSnapshot(_)), "{err}");
    let err = pool.clone_snapshot("tank/db@a", "tank/db", &[]).unwrap_err();
    assert!(matches!(err, PoolError::DatasetExists(_)), "{err}");
    let err = pool.clone_snapshot("tank/db@a", "tank/c", &[("recordsize", "3K")]).unwrap_err();
    assert!(matches!(err, PoolError::Property(_)), "{err}");
    assert!(pool.dataset("tank/c").is_err());
    let err = pool.rollback("tank/db@zz").unwrap_err();
    assert!(matches!(err, PoolError::NoSuchSnapshot(_)), "{err}");
    // A snapshot's contents refuse every change.
    let snap = pool.snapshot_dataset("tank/db@a").unwrap();
    let f = snap.lookup(ROOT_ID, b"f").unwrap();
    assert!(matches!(snap.write(f.ino, 0, b"x"), Err(FsError::ReadOnly)));
    assert!(matches!(snap.create(ROOT_ID, b"n", NewObject::File, 0o644, 0, 0), Err(FsError::ReadOnly)));
    assert!(matches!(snap.unlink(ROOT_ID, b"f"), Err(FsError::ReadOnly)));
    assert_snapshot(&pool, "tank/db@a", &model);
}

const CHILD_ENV: &str = "TARN_SNAP_KILL9_CHILD";

fn digest(m: &Model) -> String {
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(common::describe(m).as_bytes()))
}

/// The child's side: import, then write to a few files and take and destroy snapshots
/// forever, logging each snapshot with the digest of the files it must hold once its
/// create returned ("S name digest"), and each destroy once it returned ("D name").
fn snap_child(img: &Path, log: &Path, iter: u64) {
    use rand::{Rng, SeedableRng};
    use std::io::Write;
    let txg = tarn_txg::TxgConfig { timeout: std::time::Duration::from_millis(100), ..Default::default() };
    let pool = Pool::import_paths(&[img.to_path_buf()], &ImportOptions { txg }).expect("child: import");
    let ds = pool.dataset("tank/db").unwrap();
    let mut model = read_tree(&ds).unwrap();
    let mut out = std::fs::OpenOptions::new().append(true).create(true).open(log).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(iter);
    let mut n = 0u64;
    loop {
        n += 1;
        let name = format!("f{}", rng.gen_range(0..4));
        let off = rng.gen_range(0..200_000u64);
        write(&ds, &mut model, &name, off, &noise(iter * 1_000_000 + n, rng.gen_range(1..60_000)));
        if n.is_multiple_of(5) {
            let snap = format!("tank/db@i{iter}n{n}");
            pool.create_snapshots(std::slice::from_ref(&snap), false).unwrap();
            out.write_all(format!("S {snap} {}\n", digest(&model)).as_bytes()).unwrap();
            let names = pool.snapshot_names("tank/db").unwrap();
            if names.len() > 3 {
                let victim = format!("tank/db@{}", names[rng.gen_range(0..names.len())]);
                out.write_all(format!("d {victim}\n").as_bytes()).unwrap();
                pool.destroy_snapshot(&victim).unwrap();
                out.write_all(format!("D {victim}\n").as_bytes()).unwrap();
            }
        }
    }
}

#[test]
fn snap_kill9_child() {
    // Runs only when spawned by `kill9_during_snapshot_create_and_destroy_leaves_a_consistent_pool`.
    let Ok(img) = std::env::var(CHILD_ENV) else { return };
    let log = PathBuf::from(std::env::var("TARN_LOG").unwrap());
    let iter: u64 = std::env::var("TARN_ITER").unwrap().parse().unwrap();
    snap_child(Path::new(&img), &log, iter);
}

/// kill -9 while snapshots are taken and destroyed under writes: every import finds
/// each snapshot whose create returned (unless its destroy began), holding exactly the
/// files it was taken with; every block of every snapshot and of the head reads back
/// and scrubs clean.
#[test]
fn kill9_during_snapshot_create_and_destroy_leaves_a_consistent_pool() {
    use rand::{Rng, SeedableRng};
    let dir = tempfile::tempdir().unwrap();
    let (pool, img) = new_pool(dir.path());
    pool.export().unwrap();
    let log = dir.path().join("snaps.log");
    let exe = std::env::current_exe().unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut checked = 0;
    for iter in 1..=6u64 {
        let err_path = dir.path().join(format!("child{iter}.err"));
        let mut child = std::process::Command::new(&exe)
            .args(["snap_kill9_child", "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, &img)
            .env("TARN_LOG", &log)
            .env("TARN_ITER", iter.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&err_path).unwrap())
            .spawn()
            .unwrap();
        let want = rng.gen_range(2..8);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let mine = text.lines().filter(|l| l.contains(&format!("@i{iter}n"))).count();
            if mine >= want {
                break;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("child {iter} exited ({status}): {}", std::fs::read_to_string(&err_path).unwrap());
            }
            assert!(std::time::Instant::now() < deadline, "child {iter} made too few snapshots in 60 s");
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        std::thread::sleep(std::time::Duration::from_millis(rng.gen_range(0..150)));
        child.kill().unwrap();
        child.wait().unwrap();
        let mut text = std::fs::read_to_string(&log).unwrap();
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
            std::fs::write(&log, &text).unwrap();
        }

        let pool = Pool::import_paths(std::slice::from_ref(&img), &ImportOptions::default())
            .unwrap_or_else(|e| panic!("iteration {iter}: import after SIGKILL failed: {e}"));
        let present: Vec<String> =
            pool.snapshot_names("tank/db").unwrap().into_iter().map(|s| format!("tank/db@{s}")).collect();
        let mut taken: BTreeMap<String, String> = BTreeMap::new();
        let mut destroying: Vec<String> = Vec::new();
        for line in text.lines() {
            match line.split(' ').collect::<Vec<_>>().as_slice() {
                ["S", name, digest] => {
                    taken.insert(name.to_string(), digest.to_string());
                }
                ["d", name] => destroying.push(name.to_string()),
                ["D", name] => {
                    taken.remove(*name);
                }
                _ => {}
            }
        }
        for (name, want) in &taken {
            if !destroying.contains(name) {
                assert!(present.contains(name), "iteration {iter}: {name} was taken and is gone: {present:?}");
            }
            if present.contains(name) {
                let got = read_tree(&pool.snapshot_dataset(name).unwrap())
                    .unwrap_or_else(|e| panic!("iteration {iter}: {name} does not read: {e}"));
                assert_eq!(&digest(&got), want, "iteration {iter}: {name} holds other files than it was taken with");
                checked += 1;
            }
        }
        // Snapshots the log does not know were taken as the child died: they read too.
        for name in present.iter().filter(|n| !taken.contains_key(*n)) {
            read_tree(&pool.snapshot_dataset(name).unwrap()).unwrap();
        }
        read_tree(&pool.dataset("tank/db").unwrap()).unwrap();
        // The dead lists the killed process left name exactly what the walks find.
        pool.verify_dead_lists().unwrap_or_else(|e| panic!("iteration {iter}: {e}"));
        let scrub = pool.scrub().unwrap();
        assert_eq!(scrub.errors, 0, "iteration {iter}: {scrub:?}");
        pool.close().unwrap();
    }
    assert!(checked >= 6, "only {checked} snapshots checked");
}

/// `tarn promote`: the clone takes its origin's snapshots up to the one it came from,
/// the origin becomes its clone, other clones follow their snapshots — and then the
/// original dataset can be destroyed with the clone living on. Contents of every head and
/// snapshot against the model, and the allocated count across imports (a block freed while
/// still held, or leaked, shows there), after the promote and after each destroy.
#[test]
fn promote_hands_the_origins_snapshots_to_the_clone_and_frees_nothing_held() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, img) = new_pool(dir.path());
    let ds = pool.dataset("tank/db").unwrap();
    let mut model = Model::new();
    change(&ds, &mut model, 0);
    change(&ds, &mut model, 1);
    pool.create_snapshots(&["tank/db@s1".into()], false).unwrap();
    let m1 = model.clone();
    change(&ds, &mut model, 2);
    pool.create_snapshots(&["tank/db@s2".into()], false).unwrap();
    let m2 = model.clone();
    change(&ds, &mut model, 3);
    pool.create_snapshots(&["tank/db@s3".into()], false).unwrap();
    let m3 = model.clone();
    change(&ds, &mut model, 4);
    pool.clone_snapshot("tank/db@s2", "tank/copy", &[]).unwrap();
    pool.clone_snapshot("tank/db@s1", "tank/other", &[]).unwrap();
    let copy = pool.dataset("tank/copy").unwrap();
    let mut copy_model = m2.clone();
    write(&copy, &mut copy_model, "b", 5000, &noise(50, 200_000));
    write(&copy, &mut copy_model, "c", 0, &noise(51, 70_000));
    pool.create_snapshots(&["tank/copy@c1".into()], false).unwrap();
    let c1 = copy_model.clone();
    write(&copy, &mut copy_model, "a", 0, &noise(60, 90_000));
    remove(&copy, &mut copy_model, "new1");

    // Bad input first: nothing changes.
    let err = pool.promote("tank/db").unwrap_err();
    assert!(matches!(err, PoolError::NotAClone(_)), "{err}");
    pool.create_snapshots(&["tank/copy@s1".into()], false).unwrap();
    let err = pool.promote("tank/copy").unwrap_err();
    assert!(matches!(err, PoolError::PromoteNameConflict { .. }) && err.to_string().contains("tank/copy@s1"), "{err}");
    pool.destroy_snapshot("tank/copy@s1").unwrap();
    assert_eq!(pool.snapshot_names("tank/db").unwrap(), ["s1", "s2", "s3"]);

    let before = allocated(&pool);
    pool.promote("tank/copy").unwrap();
    assert_eq!(allocated(&pool), before, "a promote moves no block");
    assert_eq!(pool.snapshot_names("tank/copy").unwrap(), ["s1", "s2", "c1"]);
    assert_eq!(pool.snapshot_names("tank/db").unwrap(), ["s3"]);
    let origin = |ds: &str| pool.get_properties(ds, Some("origin")).unwrap()[0].value.clone();
    assert_eq!(origin("tank/copy"), "-");
    assert_eq!(origin("tank/db"), "tank/copy@s2");
    assert_eq!(origin("tank/other"), "tank/copy@s1");
    for (name, want) in [("tank/copy@s1", &m1), ("tank/copy@s2", &m2), ("tank/copy@c1", &c1), ("tank/db@s3", &m3)] {
        assert_snapshot(&pool, name, want);
    }
    // Both heads keep changing after the promote; the frees they cause respect the new lists.
    change(&ds, &mut model, 5);
    write(&copy, &mut copy_model, "b", 0, &noise(80, 300_000));
    remove(&copy, &mut copy_model, "c");
    drop((ds, copy));
    let alloc = allocated(&pool);
    let pool = reimport(pool, &img);
    assert!(allocated(&pool).abs_diff(alloc) <= 64 << 10, "no block leaked or freed while held");
    assert!(read_tree(&pool.dataset("tank/db").unwrap()).unwrap() == model);
    assert!(read_tree(&pool.dataset("tank/copy").unwrap()).unwrap() == copy_model);
    assert!(read_tree(&pool.dataset("tank/other").unwrap()).unwrap() == m1);
    assert_eq!(pool.snapshot_names("tank/copy").unwrap(), ["s1", "s2", "c1"], "the promote is in the MOS");

    // The original can go now; the clone and its snapshots live on.
    pool.destroy_snapshot("tank/db@s3").unwrap();
    pool.destroy_dataset("tank/db").unwrap();
    pool.destroy_dataset("tank/other").unwrap();
    pool.destroy_snapshot("tank/copy@s1").unwrap();
    let alloc = allocated(&pool);
    let pool = reimport(pool, &img);
    assert!(allocated(&pool).abs_diff(alloc) <= 64 << 10, "destroys after a promote free exactly what no one holds");
    assert!(read_tree(&pool.dataset("tank/copy").unwrap()).unwrap() == copy_model);
    assert_snapshot(&pool, "tank/copy@s2", &m2);
    assert_snapshot(&pool, "tank/copy@c1", &c1);
    assert_eq!(pool.scrub().unwrap().errors, 0);
    pool.export().unwrap();
}

/// `ds list` USED as ZFS's: a dataset is charged what its snapshots alone hold, a clone
/// only what it does not share with its origin, a parent the sum of its children.
#[test]
fn ds_list_used_counts_snapshots_and_not_what_a_clone_shares() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, _img) = new_pool(dir.path());
    let ds = pool.dataset("tank/db").unwrap();
    let mut model = Model::new();
    write(&ds, &mut model, "f", 0, &noise(1, 8 << 20));
    pool.sync().unwrap();
    let used = |name: &str| pool.datasets_info().into_iter().find(|d| d.name == name).unwrap().used;
    let head_only = used("tank/db");
    pool.create_snapshots(&["tank/db@s".into()], false).unwrap();
    write(&ds, &mut model, "f", 0, &noise(2, 8 << 20));
    pool.sync().unwrap();
    let with_snap = used("tank/db");
    assert!(with_snap > head_only + (7 << 20), "the snapshot's 8 MiB count: {head_only} -> {with_snap}");
    pool.clone_snapshot("tank/db@s", "tank/copy", &[]).unwrap();
    let copy = pool.dataset("tank/copy").unwrap();
    assert!(used("tank/copy") < 1 << 20, "a fresh clone shares everything: {}", used("tank/copy"));
    write(&copy, &mut model, "g", 0, &noise(3, 2 << 20));
    pool.sync().unwrap();
    let c = used("tank/copy");
    assert!(c > (3 << 19) && c < 3 << 20, "the clone is charged its own 2 MiB: {c}");
    assert_eq!(used("tank"), used("tank/db") + c + root_own(&pool), "a parent is charged its children");
    drop((ds, copy));
    pool.export().unwrap();
}

/// What the root dataset itself is charged (its head: it has no snapshots here).
fn root_own(pool: &Pool) -> u64 {
    pool.dataset("tank").unwrap().used().physical
}

/// Record `seq` of writer `w`: 4 KiB that say whose and which they are.
fn record(w: u64, seq: u64) -> Vec<u8> {
    let mut r = noise(w << 32 | seq, 4096);
    r[..16].copy_from_slice(&[w.to_le_bytes(), seq.to_le_bytes()].concat());
    r
}

/// Snapshots taken while four writers append records and fsync each one (a database's
/// log): each snapshot is crash consistent — every writer's file in it is a run of whole
/// records from the first, holding at least every record whose fsync returned before the
/// create was asked for — and a create returns within a few commits although the
/// writers' txg holds overlap all the time (before new holds waited out a pending
/// quiesce, a create could wait as long as the overlap lasted). Destroying the older
/// snapshots (the next tree a snapshot: the command finds the frees) and the newest
/// (the sync walks) frees exactly what the model of the space says, checked by a
/// reimport's walk.
#[test]
fn snapshots_of_fsyncing_writers_hold_every_acknowledged_record_and_come_quickly() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    let dir = tempfile::tempdir().unwrap();
    let (pool, img) = new_pool(dir.path());
    let before = allocated(&pool);
    let ds = pool.dataset("tank/db").unwrap();
    const WRITERS: u64 = 4;
    let inos: Vec<u64> = (0..WRITERS)
        .map(|w| ds.create(ROOT_ID, format!("log{w}").as_bytes(), NewObject::File, 0o644, 0, 0).unwrap().ino)
        .collect();
    let acked: Arc<Vec<AtomicU64>> = Arc::new((0..WRITERS).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (ds, acked, stop, ino) = (ds.clone(), acked.clone(), stop.clone(), inos[w as usize]);
            std::thread::spawn(move || {
                let mut seq = 0;
                while !stop.load(Ordering::Relaxed) && seq < 20_000 {
                    ds.write(ino, seq * 4096, &record(w, seq)).unwrap();
                    ds.fsync(ino).unwrap();
                    seq += 1;
                    acked[w as usize].store(seq, Ordering::SeqCst);
                }
            })
        })
        .collect();
    let mut taken = Vec::new();
    for n in 0..6 {
        std::thread::sleep(Duration::from_millis(150));
        let floor: Vec<u64> = acked.iter().map(|a| a.load(Ordering::SeqCst)).collect();
        let name = format!("tank/db@s{n}");
        let started = Instant::now();
        pool.create_snapshots(std::slice::from_ref(&name), false).unwrap();
        let took = started.elapsed();
        assert!(took < Duration::from_secs(10), "{name}: create took {took:?} under fsyncing writers");
        taken.push((name, floor));
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    for (name, floor) in &taken {
        let snap = pool.snapshot_dataset(name).unwrap();
        for w in 0..WRITERS {
            let ino = snap.lookup(ROOT_ID, format!("log{w}").as_bytes()).unwrap().ino;
            let got = common::read_file(&snap, ino).unwrap();
            assert_eq!(got.len() % 4096, 0, "{name}: log{w} ends inside a record");
            let whole = (got.len() / 4096) as u64;
            assert!(
                whole >= floor[w as usize],
                "{name}: log{w} has {whole} records, {} were acknowledged before the create",
                floor[w as usize]
            );
            for seq in 0..whole {
                let at = (seq * 4096) as usize;
                assert!(got[at..at + 4096] == record(w, seq)[..], "{name}: log{w} record {seq} is not whole");
            }
        }
    }
    // s1..s4: the next tree is a snapshot; s5: the newest, the next tree is the head.
    for n in [2, 1, 3, 5, 4, 0] {
        pool.destroy_snapshot(&format!("tank/db@s{n}")).unwrap();
    }
    let head = read_tree(&ds).unwrap();
    let after = allocated(&pool);
    drop(ds);
    let pool = reimport(pool, &img);
    assert!(allocated(&pool).abs_diff(after) <= 64 << 10, "the import's walk finds what the destroys left");
    let ds = pool.dataset("tank/db").unwrap();
    assert!(read_tree(&ds).unwrap() == head, "the head reads back after the destroys and a reimport");
    for w in 0..WRITERS {
        ds.unlink(ROOT_ID, format!("log{w}").as_bytes()).unwrap();
    }
    let empty = allocated(&pool);
    assert!(empty.abs_diff(before) <= 256 << 10, "every block the snapshots held is freed: {before} -> {empty}");
    drop(ds);
    pool.export().unwrap();
}

//! Crash safety of a receive (issue #13): a child process receives an incremental chain
//! (full, then two increments, then destroys it all and starts again), resuming whatever
//! receive it finds interrupted, while a second thread takes, clones and destroys
//! snapshots of another dataset of the same pool. It is SIGKILLed at random instants.
//! After every kill: the receiving pool imports and scrubs clean; the received dataset
//! is absent, or its snapshots are a prefix of the sender's, each equal to the sender's,
//! its head one of them whole (never half a stream); an interrupted receive is resumable
//! — resumed here from its token, it ends equal to the sender's snapshot; the sender's
//! pool, read by the child, is unchanged.
#[path = "../../pool/tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{noise, read_tree};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tarn_dataset::{Dataset, NewObject, ROOT_ID};
use tarn_pool::{CreateOptions, ImportOptions, Pool, VdevSpec};
use tarn_send::{SendBase, SendRecv};
use tarn_txg::TxgConfig;

const CHILD_ENV: &str = "TARN_RECV_CRASH_CHILD";
const SNAPS: [&str; 3] = ["s0", "s1", "s2"];
const TARGET: &str = "dst/copy";

type Files = BTreeMap<String, Vec<u8>>;

fn fast_txgs() -> ImportOptions {
    ImportOptions { txg: TxgConfig { timeout: Duration::from_millis(200), ..Default::default() } }
}

fn write_file(ds: &Dataset, name: &str, off: u64, data: &[u8]) {
    let ino = match ds.lookup(ROOT_ID, name.as_bytes()) {
        Ok(a) => a.ino,
        Err(_) => ds.create(ROOT_ID, name.as_bytes(), NewObject::File, 0o644, 0, 0).unwrap().ino,
    };
    ds.write(ino, off, data).unwrap();
}

/// The sender: three snapshots whose streams each span several resume-token updates
/// (4 MiB apart). Returns every snapshot's files.
fn make_source(img: &Path) -> Vec<Files> {
    let opts = CreateOptions { size: Some(256 << 20), ..Default::default() };
    let pool = Pool::create("src", &[VdevSpec::Disk(img.to_path_buf())], &opts).unwrap();
    let ds = pool.create_dataset_with("src/db", &[("compression", "lz4"), ("recordsize", "16K")]).unwrap();
    let mut models = Vec::new();
    for (k, snap) in SNAPS.iter().enumerate() {
        let k = k as u64;
        write_file(&ds, &format!("new{k}"), 0, &noise(k + 1, 6 << 20));
        write_file(&ds, "shared", k * (1 << 20), &noise(k + 100, 3 << 20));
        pool.create_snapshots(&[format!("src/db@{snap}")], false).unwrap();
        models.push(read_tree(&pool.snapshot_dataset(&format!("src/db@{snap}")).unwrap()).unwrap());
    }
    drop(ds);
    pool.close().unwrap();
    models
}

/// One step of the child's receiving loop.
fn receive_step(src: &Pool, dst: &Pool) {
    let mut stream = Vec::new();
    if let Some(token) = dst.resume_token(TARGET) {
        src.send_resume(&token, &mut stream, &mut |_| {}).unwrap();
        dst.receive(TARGET, false, &mut &stream[..], &mut |_| {}).unwrap();
        return;
    }
    let have = if dst.dataset_exists(TARGET) { dst.snapshot_names(TARGET).unwrap() } else { Vec::new() };
    let next = match have.last().map(|n| SNAPS.iter().position(|s| s == n).unwrap()) {
        None if dst.dataset_exists(TARGET) => {
            // Killed while destroying it: finish.
            return dst.destroy_dataset(TARGET).unwrap();
        }
        None => 0,
        Some(k) if k + 1 == SNAPS.len() => {
            for name in have.iter().rev() {
                dst.destroy_snapshot(&format!("{TARGET}@{name}")).unwrap();
            }
            return dst.destroy_dataset(TARGET).unwrap();
        }
        Some(k) => k + 1,
    };
    let base = if next == 0 { SendBase::Full } else { SendBase::Incremental(SNAPS[next - 1]) };
    src.send(&format!("src/db@{}", SNAPS[next]), base, &mut stream, &mut |_| {}).unwrap();
    dst.receive(TARGET, false, &mut &stream[..], &mut |_| {}).unwrap();
}

/// The child's second thread: snapshots, clones and destroys of `dst/local` under writes.
fn churn(dst: &Pool, seed: u64) {
    // A clone an earlier child was killed before destroying holds its snapshot.
    for name in dst.dataset_names().into_iter().filter(|n| n.starts_with("dst/clone")) {
        dst.destroy_dataset(&name).unwrap();
    }
    let ds = dst.dataset("dst/local").unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut snaps: Vec<String> = dst.snapshot_names("dst/local").unwrap();
    for n in 0.. {
        write_file(&ds, &format!("f{}", rng.gen_range(0..4)), rng.gen_range(0..1 << 20), &noise(seed + n, 100_000));
        let name = format!("c{seed}x{n}");
        dst.create_snapshots(&[format!("dst/local@{name}")], false).unwrap();
        snaps.push(name.clone());
        let clone = format!("dst/clone{seed}x{n}");
        dst.clone_snapshot(&format!("dst/local@{name}"), &clone, &[]).unwrap();
        dst.destroy_dataset(&clone).unwrap();
        while snaps.len() > 3 {
            dst.destroy_snapshot(&format!("dst/local@{}", snaps.remove(0))).unwrap();
        }
    }
}

#[test]
fn recv_crash_child() {
    // Runs only when spawned by `a_receive_killed_at_any_instant_is_absent_resumable_or_complete`.
    let Ok(dir) = std::env::var(CHILD_ENV) else { return };
    let dir = PathBuf::from(dir);
    let seed: u64 = std::env::var("TARN_SEED").unwrap().parse().unwrap();
    let src = Pool::import_paths(&[dir.join("src.img")], &fast_txgs()).expect("child: import src");
    let dst = Pool::import_paths(&[dir.join("dst.img")], &fast_txgs()).expect("child: import dst");
    std::fs::File::create(dir.join("ready")).unwrap().write_all(b"ready\n").unwrap();
    std::thread::scope(|s| {
        s.spawn(|| churn(&dst, seed));
        loop {
            receive_step(&src, &dst);
        }
    });
}

/// What the receiving pool holds of `TARGET` after a kill: absent, or whole snapshots
/// equal to the sender's and a head equal to one of them; an interrupted receive is
/// resumed from its token. Returns whether one was.
fn check_target(dst: &Pool, src: &Pool, models: &[Files], iter: u64) -> bool {
    let resumed = match dst.resume_token(TARGET) {
        Some(token) => {
            let mut stream = Vec::new();
            src.send_resume(&token, &mut stream, &mut |_| {}).unwrap();
            let got = dst.receive(TARGET, false, &mut &stream[..], &mut |_| {});
            let got = got.unwrap_or_else(|e| panic!("iteration {iter}: the interrupted receive does not resume: {e}"));
            assert_eq!(got.received.len(), 1, "iteration {iter}");
            true
        }
        None => false,
    };
    if !dst.dataset_exists(TARGET) {
        return resumed;
    }
    let names = dst.snapshot_names(TARGET).unwrap();
    assert!(
        names.len() <= SNAPS.len() && names.iter().zip(SNAPS).all(|(n, s)| n == s),
        "iteration {iter}: {TARGET} has snapshots {names:?}"
    );
    for (k, name) in names.iter().enumerate() {
        let files = read_tree(&dst.snapshot_dataset(&format!("{TARGET}@{name}")).unwrap()).unwrap();
        assert!(files == models[k], "iteration {iter}: {TARGET}@{name} is not the sender's");
    }
    let head = read_tree(&dst.dataset(TARGET).unwrap()).unwrap();
    let whole = models.iter().skip(names.len().saturating_sub(1)).any(|m| *m == head);
    assert!(whole, "iteration {iter}: the head of {TARGET} is no snapshot of the sender's (half a stream?)");
    resumed
}

#[test]
fn a_receive_killed_at_any_instant_is_absent_resumable_or_complete() {
    let dir = tempfile::tempdir().unwrap();
    let (src_img, dst_img) = (dir.path().join("src.img"), dir.path().join("dst.img"));
    let models = make_source(&src_img);
    let opts = CreateOptions { size: Some(256 << 20), ..Default::default() };
    let dst = Pool::create("dst", &[VdevSpec::Disk(dst_img.clone())], &opts).unwrap();
    dst.create_dataset("dst/local").unwrap();
    // The checks read the received head: with atime on, a read would change it, and the
    // child's next increment would be refused (rightly) without -F.
    dst.set_property("dst", "atime", "off").unwrap();
    dst.close().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut rng = StdRng::seed_from_u64(13);
    let mut resumed = 0;
    let mut kills = 0;
    // Ten kills, and more (up to 30) until one has hit a receive in flight: on a loaded
    // machine a token may not yet be committed when ten kills come.
    for iter in 1..=30u64 {
        if iter > 10 && resumed > 0 {
            break;
        }
        kills += 1;
        let _ = std::fs::remove_file(dir.path().join("ready"));
        let stderr = std::fs::File::create(dir.path().join(format!("child{iter}.err"))).unwrap();
        let mut child = std::process::Command::new(&exe)
            .args(["recv_crash_child", "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, dir.path())
            .env("TARN_SEED", iter.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !dir.path().join("ready").exists() {
            if let Ok(Some(status)) = child.try_wait() {
                let err = std::fs::read_to_string(dir.path().join(format!("child{iter}.err"))).unwrap();
                panic!("child {iter} exited before it was ready ({status}): {err}");
            }
            assert!(Instant::now() < deadline, "child {iter} not ready in 60 s");
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(rng.gen_range(50..1500)));
        if let Ok(Some(status)) = child.try_wait() {
            let err = std::fs::read_to_string(dir.path().join(format!("child{iter}.err"))).unwrap();
            panic!("child {iter} exited on its own ({status}): {err}");
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();

        let src = Pool::import_paths(std::slice::from_ref(&src_img), &ImportOptions::default())
            .unwrap_or_else(|e| panic!("iteration {iter}: the sender's pool does not import: {e}"));
        let dst = Pool::import_paths(std::slice::from_ref(&dst_img), &ImportOptions::default())
            .unwrap_or_else(|e| panic!("iteration {iter}: import after SIGKILL failed: {e}"));
        resumed += u32::from(check_target(&dst, &src, &models, iter));
        for (k, snap) in SNAPS.iter().enumerate() {
            let files = read_tree(&src.snapshot_dataset(&format!("src/db@{snap}")).unwrap()).unwrap();
            assert!(files == models[k], "iteration {iter}: the sender's @{snap} changed");
        }
        assert_eq!(read_tree(&src.dataset("src/db").unwrap()).unwrap(), models[2], "iteration {iter}: sender's head");
        assert_eq!(dst.scrub().unwrap().errors, 0, "iteration {iter}: scrub of the receiver found damage");
        assert_eq!(src.scrub().unwrap().errors, 0, "iteration {iter}: scrub of the sender found damage");
        src.close().unwrap();
        dst.close().unwrap();
    }
    println!("{resumed} of {kills} kills left a receive to resume");
    // The child spends most of its time receiving: kills that all missed every receive
    // would mean the test no longer tests what it says.
    assert!(resumed >= 1, "no kill hit a receive in flight");
}

//! Crash safety. (1) Record every write and flush a pool sends to its device during a
//! multi-txg workload, then import images built from many points of that stream — cut
//! at and between flushes, with the last write torn, and with the writes since the last
//! flush applied in a random subset (a disk cache may reorder them). Each image must
//! import, scrub clean, and show exactly the files of one committed txg: the newest one
//! whose uberblock reached the image. (2) ztest-style: a child process writes and
//! fsyncs, logging what fsync acknowledged; it is SIGKILLed at random moments, and every
//! acknowledged write must be there after re-import; (3) the same with a cache device
//! fed while the children are killed, garbled as a power cut would leave it: the cache
//! rebuilds what verifies, stays ONLINE and never serves a wrong byte.
mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Ev, OverlayDevice, RecDevice};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tarn_dataset::{Dataset, FsError, NewObject, SetAttr, ROOT_ID};
use tarn_pool::{CreateOptions, ImportOptions, Pool, VdevSpec};
use tarn_txg::TxgConfig;
use tarn_vdev::{BlockDevice, LABEL_SIZE};

type Files = BTreeMap<String, Vec<u8>>;

/// Only explicit syncs commit, so the test knows every committed state.
fn manual_txgs() -> TxgConfig {
    TxgConfig { timeout: Duration::from_secs(3600), ..Default::default() }
}

/// A small pool (one disk, or a 2-way mirror) made on files, closed, and loaded into
/// memory: one image per device.
fn base_images(mirror: bool) -> Vec<Vec<u8>> {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> =
        (0..if mirror { 2 } else { 1 }).map(|i| dir.path().join(format!("base{i}.img"))).collect();
    let spec = if mirror { VdevSpec::Mirror(paths.clone()) } else { VdevSpec::Disk(paths[0].clone()) };
    let opts = CreateOptions { size: Some(64 << 20), txg: manual_txgs(), ..Default::default() };
    let pool = Pool::create("tank", &[spec], &opts).unwrap();
    pool.set_property("tank", "recordsize", "16K").unwrap();
    pool.close().unwrap();
    paths.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

/// The workload's view of the dataset, kept alongside the pool.
struct Model<'a> {
    ds: &'a Dataset,
    files: Files,
}

impl Model<'_> {
    fn dir_and_name(&self, path: &str) -> (u64, Vec<u8>) {
        match path.rsplit_once('/') {
            Some((d, n)) => (self.ds.lookup(ROOT_ID, d.as_bytes()).unwrap().ino, n.as_bytes().to_vec()),
            None => (ROOT_ID, path.as_bytes().to_vec()),
        }
    }
    fn ino(&self, path: &str) -> Option<u64> {
        let (d, n) = self.dir_and_name(path);
        match self.ds.lookup(d, &n) {
            Ok(a) => Some(a.ino),
            Err(FsError::NotFound) => None,
            Err(e) => panic!("lookup {path}: {e}"),
        }
    }
    fn write(&mut self, path: &str, off: usize, data: &[u8]) {
        let ino = self.ino(path).unwrap_or_else(|| {
            let (d, n) = self.dir_and_name(path);
            self.ds.create(d, &n, NewObject::File, 0o644, 0, 0).unwrap().ino
        });
        self.ds.write(ino, off as u64, data).unwrap();
        let f = self.files.entry(path.to_string()).or_default();
        if f.len() < off + data.len() {
            f.resize(off + data.len(), 0);
        }
        f[off..off + data.len()].copy_from_slice(data);
    }
    fn truncate(&mut self, path: &str, size: usize) {
        let ino = self.ino(path).unwrap();
        self.ds.setattr(ino, &SetAttr { size: Some(size as u64), ..Default::default() }).unwrap();
        self.files.get_mut(path).unwrap().resize(size, 0);
    }
    fn unlink(&mut self, path: &str) {
        let (d, n) = self.dir_and_name(path);
        self.ds.unlink(d, &n).unwrap();
        self.files.remove(path);
    }
    fn rename(&mut self, from: &str, to: &str) {
        let (sd, sn) = self.dir_and_name(from);
        let (dd, dn) = self.dir_and_name(to);
        self.ds.rename(sd, &sn, dd, &dn, false).unwrap();
        let f = self.files.remove(from).unwrap();
        self.files.insert(to.to_string(), f);
    }
    fn punch(&mut self, path: &str, off: usize, len: usize) {
        let ino = self.ino(path).unwrap();
        self.ds.punch_hole(ino, off as u64, len as u64).unwrap();
        let f = self.files.get_mut(path).unwrap();
        let end = (off + len).min(f.len());
        if off < end {
            f[off..end].fill(0);
        }
    }
}

/// A committed state: the files, and where in the event stream its sync ended.
struct Committed {
    files: Files,
    end: usize,
}

/// Runs the workload on a recording device; returns the committed states in order
/// (state 0 is the base image's).
fn record_workload(devs: &[Arc<RecDevice>], random_txgs: usize) -> Vec<Committed> {
    let dev = &devs[0];
    let handles: Vec<Arc<dyn BlockDevice>> = devs.iter().map(|d| d.clone() as Arc<dyn BlockDevice>).collect();
    let pool = Pool::import(handles, &ImportOptions { txg: manual_txgs() }).unwrap();
    let ds = pool.dataset("tank").unwrap();
    let mut states = vec![Committed { files: Files::new(), end: dev.events() }];
    let mut m = Model { ds: &ds, files: Files::new() };
    let mut rng = StdRng::seed_from_u64(7);
    let commit = |m: &Model, pool: &Pool, states: &mut Vec<Committed>| {
        pool.sync().unwrap();
        assert_eq!(common::read_tree(m.ds).unwrap(), m.files, "live pool differs from the model");
        states.push(Committed { files: m.files.clone(), end: dev.events() });
    };

    ds.create(ROOT_ID, b"d", NewObject::Dir, 0o755, 0, 0).unwrap();
    m.write("a", 0, &common::noise(1, 100_000));
    m.write("b", 0, &common::pattern(2, 40_000));
    m.write("d/c", 0, &common::noise(3, 5_000));
    commit(&m, &pool, &mut states);

    m.write("a", 33_333, &common::pattern(4, 20_000));
    m.write("b", 40_000, &common::noise(5, 10_000));
    m.write("e", 0, &common::noise(6, 70_000));
    commit(&m, &pool, &mut states);

    m.truncate("a", 30_000);
    m.unlink("b");
    m.rename("e", "d/e2");
    commit(&m, &pool, &mut states);

    m.truncate("a", 200_000);
    m.write("a", 190_000, &common::noise(7, 20_000));
    m.write("f", 0, &common::noise(8, 300_000));
    commit(&m, &pool, &mut states);

    m.write("f", 0, &common::pattern(9, 300_000));
    m.unlink("d/c");
    m.punch("a", 16_384, 16_384 * 3);
    commit(&m, &pool, &mut states);

    // A few txgs of random overwrites, appends and truncates over the same files.
    let names = ["a", "f", "g", "d/e2", "d/h"];
    for _ in 0..random_txgs {
        for _ in 0..6 {
            let name = names[rng.gen_range(0..names.len())];
            let len = rng.gen_range(1..60_000);
            let off = if rng.gen_bool(0.5) { rng.gen_range(0..40) * 4096 } else { rng.gen_range(0..250_000) };
            let seed = rng.gen();
            match rng.gen_range(0..10) {
                0 if m.files.contains_key(name) => m.truncate(name, rng.gen_range(0..150_000)),
                1 if m.files.contains_key(name) && m.files.len() > 2 => m.unlink(name),
                _ => m.write(name, off, &common::noise(seed, len)),
            }
        }
        commit(&m, &pool, &mut states);
    }
    drop(m);
    drop(ds);
    pool.close().unwrap();
    states
}

fn is_uberblock_write(off: u64, size: u64) -> bool {
    let label1 = (size / LABEL_SIZE) * LABEL_SIZE - LABEL_SIZE;
    let cfg = tarn_vdev::LABEL_SIZE - 192 * 1024; // the config area: 64 KiB
    (off >= cfg && off < LABEL_SIZE) || (off >= label1 + cfg && off < label1 + LABEL_SIZE)
}

/// An image to test: the base with some of the events applied, the last maybe torn.
struct Cut {
    what: String,
    /// (event index, bytes of it applied)
    applied: Vec<(usize, usize)>,
}

/// Imports the image `cut` describes and checks it; returns which committed state it is.
fn check_cut(
    bases: &[Arc<Vec<u8>>],
    events: &[(usize, Ev)],
    states: &[Committed],
    sync_of: &[usize],
    cut: &Cut,
) -> usize {
    let images: Vec<Arc<OverlayDevice>> =
        bases.iter().enumerate().map(|(i, b)| Arc::new(OverlayDevice::new(b.clone(), &format!("crash{i}")))).collect();
    let size = bases[0].len() as u64;
    let mut newest = 0usize;
    for &(i, n) in &cut.applied {
        if let (d, Ev::Write { off, data }) = &events[i] {
            let n = n.min(data.len());
            images[*d].write_at(&data[..n], *off).unwrap();
            if is_uberblock_write(*off, size) && n >= tarn_vdev::Uberblock::encode(&dummy_ub()).len() {
                newest = newest.max(sync_of[i]);
            }
        }
    }
    let devs: Vec<Arc<dyn BlockDevice>> = images.into_iter().map(|d| d as Arc<dyn BlockDevice>).collect();
    let pool = Pool::import(devs, &ImportOptions { txg: manual_txgs() })
        .unwrap_or_else(|e| panic!("{}: import failed: {e}", cut.what));
    let ds = pool.dataset("tank").unwrap();
    let found = common::read_tree(&ds).unwrap_or_else(|e| panic!("{}: reading files: {e}", cut.what));
    let want = &states[newest].files;
    if &found != want {
        let matches: Vec<usize> = states.iter().enumerate().filter(|(_, s)| s.files == found).map(|(i, _)| i).collect();
        panic!(
            "{}: files are not those of committed state {newest} (they match states {matches:?})\nfound: {}\nwant:  {}",
            cut.what,
            common::describe(&found),
            common::describe(want)
        );
    }
    drop(ds);
    let scrub = pool.scrub().unwrap();
    assert_eq!((scrub.errors, scrub.checksum_errors_seen), (0, 0), "{}: scrub found damage", cut.what);
    pool.close().unwrap();
    newest
}

fn dummy_ub() -> tarn_vdev::Uberblock {
    tarn_vdev::Uberblock { txg: 0, pool_guid: 0, guid_sum: 0, timestamp: 0, root: [0; 64] }
}

#[test]
fn every_prefix_of_the_write_stream_imports_as_one_committed_txg() {
    crash_cuts(false);
}

#[test]
fn every_prefix_of_a_mirror_write_stream_imports_as_one_committed_txg() {
    crash_cuts(true);
}

fn crash_cuts(mirror: bool) {
    let bases = base_images(mirror);
    let size = bases[0].len() as u64;
    let log = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let devs: Vec<Arc<RecDevice>> = bases
        .iter()
        .enumerate()
        .map(|(i, b)| RecDevice::shared(b.clone(), &format!("rec{i}"), i, log.clone()))
        .collect();
    let states = record_workload(&devs, 5);
    drop(devs);
    let events: Vec<(usize, Ev)> = log.lock().clone();
    let n = events.len();
    // Which committed state an event's txg produces.
    let sync_of: Vec<usize> = (0..n).map(|i| states.iter().position(|s| s.end > i).unwrap_or(states.len())).collect();
    let flushes: Vec<usize> = (0..n).filter(|&i| matches!(events[i].1, Ev::Flush)).collect();
    let writes: Vec<usize> = (0..n).filter(|&i| matches!(events[i].1, Ev::Write { .. })).collect();
    let ubs = writes
        .iter()
        .filter(|&&i| matches!(&events[i].1, Ev::Write { off, .. } if is_uberblock_write(*off, size)))
        .count();
    assert!(ubs >= 2 * bases.len() * (states.len() - 1), "expected two uberblock writes per device per txg, saw {ubs}");
    println!(
        "{n} events ({} writes, {} flushes, {ubs} uberblock writes), {} committed states",
        writes.len(),
        flushes.len(),
        states.len()
    );

    let mut rng = StdRng::seed_from_u64(42);
    let mut cuts = Vec::new();
    // Every prefix: at each flush and between flushes.
    for i in 0..=n {
        cuts.push(Cut { what: format!("prefix of {i} events"), applied: (0..i).map(|k| (k, usize::MAX)).collect() });
    }
    // The last write torn: only part of its bytes reached the disk.
    for &w in &writes {
        let Ev::Write { data, .. } = &events[w].1 else { unreachable!() };
        for _ in 0..3 {
            let t = rng.gen_range(1..data.len().max(2));
            let mut applied: Vec<(usize, usize)> = (0..w).map(|k| (k, usize::MAX)).collect();
            applied.push((w, t));
            cuts.push(Cut { what: format!("{w} events then {t} of {} bytes of event {w}", data.len()), applied });
        }
    }
    // Writes since the last flush in a random subset (reordered by a cache), the last
    // applied one sometimes torn.
    let mut starts = vec![0usize];
    starts.extend(flushes.iter().map(|f| f + 1));
    for (k, &s) in starts.iter().enumerate() {
        let end = flushes.get(k).copied().unwrap_or(n);
        let pending: Vec<usize> = (s..end).collect();
        if pending.len() < 2 {
            continue;
        }
        for trial in 0..8 {
            let mut applied: Vec<(usize, usize)> = (0..s).map(|k| (k, usize::MAX)).collect();
            let subset: Vec<usize> = pending.iter().copied().filter(|_| rng.gen_bool(0.5)).collect();
            for (j, &w) in subset.iter().enumerate() {
                let Ev::Write { data, .. } = &events[w].1 else { unreachable!() };
                let torn = trial % 2 == 1 && j + 1 == subset.len();
                applied.push((w, if torn { rng.gen_range(1..data.len().max(2)) } else { usize::MAX }));
            }
            cuts.push(Cut { what: format!("flush interval {s}..{end}, subset {subset:?} (trial {trial})"), applied });
        }
    }
    println!("{} images to import", cuts.len());
    let shared: Vec<Arc<Vec<u8>>> = bases.into_iter().map(Arc::new).collect();
    let started = Instant::now();
    let mut seen = std::collections::BTreeSet::new();
    for cut in &cuts {
        seen.insert(check_cut(&shared, &events, &states, &sync_of, cut));
    }
    assert_eq!(seen.len(), states.len(), "the cuts should land in every committed state");
    println!("checked in {:.1}s", started.elapsed().as_secs_f64());
}

// ---- kill -9 loop ----

const CHILD_ENV: &str = "TARN_KILL9_CHILD";

/// One region a child wrote: (file, offset, length).
type Region = (String, u64, usize);

fn region_data(seq: u64, len: usize) -> Vec<u8> {
    common::noise(seq.wrapping_mul(1_000_003), len)
}

/// The child's side: import, then write+fsync forever over `files` files, logging intent
/// before each write and the acknowledgement after its fsync returned.
fn child_main(img: &Path, log: &Path, iter: u64, files: u64) {
    let pool = Pool::import_paths(
        &[img.to_path_buf()],
        &ImportOptions { txg: TxgConfig { timeout: Duration::from_millis(200), ..Default::default() } },
    )
    .expect("child: import");
    // Every other child writes data in place at fsync and logs pointers (throughput);
    // the others copy small writes into the log (writes of 32 KiB or more go in place).
    let logbias = if iter.is_multiple_of(2) { "throughput" } else { "latency" };
    pool.set_property("tank", "logbias", logbias).expect("child: set logbias");
    let ds = pool.dataset("tank").unwrap();
    let mut out = std::fs::OpenOptions::new().append(true).create(true).open(log).unwrap();
    let mut rng = StdRng::seed_from_u64(iter * 977 + std::process::id() as u64);
    let mut mine: Vec<Region> = Vec::new();
    let mut seq = iter * 1_000_000;
    loop {
        seq += 1;
        // Mostly new regions, sometimes an overwrite of one written before.
        let region = if !mine.is_empty() && rng.gen_bool(0.3) {
            mine[rng.gen_range(0..mine.len())].clone()
        } else {
            let name = format!("it{iter}-f{}", rng.gen_range(0..files));
            let len = rng.gen_range(1..40_000);
            // Regions never overlap: each has its own 48 KiB slot.
            let r = (name, mine.len() as u64 * 49_152 + rng.gen_range(0..4096), len);
            mine.push(r.clone());
            r
        };
        let (name, off, len) = &region;
        // One write(2) per line, so a kill leaves at most the last line partial.
        out.write_all(format!("W {seq} {name} {off} {len}\n").as_bytes()).unwrap();
        let ino = match ds.lookup(ROOT_ID, name.as_bytes()) {
            Ok(a) => a.ino,
            Err(_) => ds.create(ROOT_ID, name.as_bytes(), NewObject::File, 0o644, 0, 0).unwrap().ino,
        };
        ds.write(ino, *off, &region_data(seq, *len)).unwrap();
        if rng.gen_bool(0.7) {
            ds.fsync(ino).unwrap();
            out.write_all(format!("A {seq}\n").as_bytes()).unwrap();
        }
    }
}

#[test]
fn kill9_child() {
    // Runs only when spawned by `sigkill_loop_keeps_every_acknowledged_write`.
    if std::env::var(CHILD_ENV).is_err() {
        return;
    }
    let img = PathBuf::from(std::env::var("TARN_IMG").unwrap());
    let log = PathBuf::from(std::env::var("TARN_LOG").unwrap());
    let iter: u64 = std::env::var("TARN_ITER").unwrap().parse().unwrap();
    let files: u64 = std::env::var("TARN_FILES").unwrap().parse().unwrap();
    child_main(&img, &log, iter, files);
}

/// What the log says: for every region, the acknowledged seq and any later writes
/// that were in flight (they may or may not have made it).
fn expected_regions(log: &str) -> BTreeMap<Region, (Option<u64>, Vec<u64>)> {
    let mut by_seq: BTreeMap<u64, Region> = BTreeMap::new();
    let mut out: BTreeMap<Region, (Option<u64>, Vec<u64>)> = BTreeMap::new();
    // Only whole lines: the kill may cut the last one short.
    for line in log.split_inclusive('\n').filter(|l| l.ends_with('\n')) {
        let parts: Vec<&str> = line.trim_end().split(' ').collect();
        match parts.as_slice() {
            ["W", seq, name, off, len] => {
                let r: Region = (name.to_string(), off.parse().unwrap(), len.parse().unwrap());
                let seq: u64 = seq.parse().unwrap();
                by_seq.insert(seq, r.clone());
                out.entry(r).or_default().1.push(seq);
            }
            ["A", seq] => {
                let seq: u64 = seq.parse().unwrap();
                let r = by_seq[&seq].clone();
                let e = out.get_mut(&r).unwrap();
                e.0 = Some(seq);
                // An acknowledged write makes every earlier one of this region history.
                e.1.retain(|&s| s > seq);
            }
            // A line cut by the kill.
            _ => {}
        }
    }
    out
}

#[test]
fn sigkill_loop_keeps_every_acknowledged_write() {
    sigkill_loop(None, 3, false);
}

/// With a cache device fed all the time (a small ARC evicts what the children write and
/// read), killed while the feed writes; every other import first garbles random 4 KiB
/// pieces of the cache device, as a power cut losing or tearing its latest writes would.
/// The pool imports, the cache rebuilds what verifies (or drops it) and stays ONLINE,
/// and every read matches the model: the cache never serves a wrong byte.
#[test]
fn sigkill_loop_with_a_cache_device_keeps_every_acknowledged_write_and_never_a_wrong_byte() {
    sigkill_loop(Some(256 << 10), 20, true);
}

/// The same with a cache so small that the children's metadata — indirect blocks,
/// dnodes, directory entries — is evicted and read again all the time (the decoded
/// caches get 1/8 of 256 KiB each: less than one indirect block, a few dozen objects),
/// and the checks after each import run under the same budget.
#[test]
fn sigkill_loop_with_metadata_evicted_keeps_every_acknowledged_write() {
    sigkill_loop(Some(256 << 10), 60, false);
}

/// Kills children writing over `files` files each, with the ARC's budget `arc_max` if
/// given (and a cache device if `cache`), and checks every acknowledged write after
/// each kill.
fn sigkill_loop(arc_max: Option<u64>, files: u64, cache: bool) {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("k.img");
    let log = dir.path().join("acks.log");
    let cache_img = dir.path().join("cache.img");
    if cache {
        std::fs::File::create(&cache_img).unwrap().set_len(64 << 20).unwrap();
    }
    let caches = if cache { vec![cache_img.clone()] } else { Vec::new() };
    let opts = CreateOptions { size: Some(256 << 20), caches, ..Default::default() };
    let mut l2_hits = 0;
    Pool::create("tank", &[VdevSpec::Disk(img.clone())], &opts).unwrap().close().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut rng = StdRng::seed_from_u64(99);
    let mut total_acks = 0;
    for iter in 1..=10u64 {
        let stderr = std::fs::File::create(dir.path().join(format!("child{iter}.err"))).unwrap();
        let mut child = std::process::Command::new(&exe)
            .args(["kill9_child", "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, "1")
            .env("TARN_IMG", &img)
            .env("TARN_LOG", &log)
            .env("TARN_ITER", iter.to_string())
            .env("TARN_FILES", files.to_string())
            .env("TARN_ARC_MAX", arc_max.map_or(String::new(), |b| b.to_string()))
            .stdout(std::process::Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap();
        // Let it acknowledge a few writes, then kill it at a random moment.
        let want_acks = rng.gen_range(1..25);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let acks = std::fs::read_to_string(&log)
                .unwrap_or_default()
                .lines()
                .filter(|l| l.starts_with(&format!("A {iter}")))
                .count();
            if acks >= want_acks {
                break;
            }
            if let Ok(Some(status)) = child.try_wait() {
                let err = std::fs::read_to_string(dir.path().join(format!("child{iter}.err"))).unwrap();
                panic!("child {iter} exited on its own ({status}): {err}");
            }
            assert!(Instant::now() < deadline, "child {iter} acknowledged only {acks} writes in 60 s");
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(Duration::from_millis(rng.gen_range(0..120)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        // End a line the kill cut short, so the next child's first line stands alone.
        let text = std::fs::read(&log).unwrap();
        if text.last().is_some_and(|&b| b != b'\n') {
            std::fs::OpenOptions::new().append(true).open(&log).unwrap().write_all(b"\n").unwrap();
        }

        if cache && iter.is_multiple_of(2) {
            garble_cache_device(&cache_img, &mut rng);
        }
        let pool = Pool::import_paths(std::slice::from_ref(&img), &ImportOptions::default())
            .unwrap_or_else(|e| panic!("iteration {iter}: import after SIGKILL failed: {e}"));
        if let Some(bytes) = arc_max {
            pool.set_arc_max(bytes);
        }
        let l2_before = if cache { wait_cache_rebuilt(&pool, iter) } else { 0 };
        let ds = pool.dataset("tank").unwrap();
        let text = std::fs::read_to_string(&log).unwrap();
        let mut acked = 0;
        for ((name, off, len), (ack, later)) in expected_regions(&text) {
            let Some(ack) = ack else { continue };
            acked += 1;
            let ino = ds
                .lookup(ROOT_ID, name.as_bytes())
                .unwrap_or_else(|e| panic!("iteration {iter}: {name} lost: {e}"))
                .ino;
            let mut buf = vec![0u8; len];
            assert_eq!(ds.read(ino, off, &mut buf).unwrap(), len, "iteration {iter}: {name} too short");
            let ok = buf == region_data(ack, len) || later.iter().any(|&s| buf == region_data(s, len));
            assert!(ok, "iteration {iter}: {name} at {off}+{len}: acknowledged write {ack} is not there (later in-flight writes: {later:?})");
        }
        total_acks = acked;
        if cache {
            let stats = pool.stats().l2arc;
            eprintln!("iteration {iter}: {stats:?}");
            l2_hits += stats["hits"] - l2_before;
            let c = &pool.status().caches[0];
            assert_eq!(c.state.name(), "ONLINE", "iteration {iter}: the cache device stays in use: {c:?}");
            // A child may be killed before its first txg reaches the feed (a fast machine
            // acknowledges its writes within one txg); the reads above evicted blocks, so
            // let this import feed them and the next import rebuild and read them back.
            wait_cache_fed(&pool, iter);
        }
        drop(ds);
        let scrub = pool.scrub().unwrap();
        assert_eq!(scrub.errors, 0, "iteration {iter}: scrub found damage");
        pool.close().unwrap();
    }
    println!("{total_acks} acknowledged regions verified");
    assert!(total_acks >= 5);
    if cache {
        assert!(l2_hits > 0, "the rebuilt caches served reads");
    }
}

/// Waits until the feed has written what the ARC evicted (or its backlog is empty).
fn wait_cache_fed(pool: &Pool, iter: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let l2 = pool.stats().l2arc;
        if l2["written_blocks"] > 0 || l2["feed_backlog"] == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "iteration {iter}: the feed wrote nothing in 30 s: {l2:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits for the cache device's rebuild; returns the L2ARC's hits so far.
fn wait_cache_rebuilt(pool: &Pool, iter: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    while pool.stats().l2arc["rebuilding"] > 0 {
        assert!(Instant::now() < deadline, "iteration {iter}: the cache's rebuild did not end");
        std::thread::sleep(Duration::from_millis(5));
    }
    pool.stats().l2arc["hits"]
}

/// A power cut's damage to the cache device: 64 random 4 KiB pieces of its first 8 MiB
/// (where the children's chunks are) past the header zeroed or overwritten with noise.
fn garble_cache_device(path: &Path, rng: &mut StdRng) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    for _ in 0..64 {
        let at = 4096 * rng.gen_range(1..2048u64);
        let piece = if rng.gen_bool(0.5) { vec![0u8; 4096] } else { common::noise(at, 4096) };
        f.write_all_at(&piece, at).unwrap();
    }
}

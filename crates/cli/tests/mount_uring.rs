//! `tarn mount --transport uring`: the requests really travel on the io_uring rings (the
//! daemon's own counters, `tarn stats fuse`), data written and fsynced there survives a
//! remount and a kill -9 of the daemon, a reader killed mid-read does not hang, and a
//! clean unmount ends the daemon; concurrent overlapping writes and reads on the rings
//! each see exactly one written version of every page (against a model of the
//! versions); a kernel refusing io_uring (forced by a test hook) gets the mount served
//! over /dev/fuse with one line saying why, in the log and in `tarn stats fuse` too. The
//! other mount suites run on uring with TARN_TEST_TRANSPORT=uring.

mod common;

use std::fs::{self, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::Env;

/// The first mount's entry in `tarn stats fuse tank --json`.
fn fuse_stats(env: &Env) -> serde_json::Value {
    let text = env.ok(&["stats", "fuse", "tank", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&text).expect("stats fuse json");
    v[0].clone()
}

fn uring_mount<'a>(env: &'a Env, name: &str) -> common::Mounted<'a> {
    common::enable_uring();
    env.mount(name, &["--transport", "uring"])
}

#[test]
fn data_requests_travel_on_the_rings_not_dev_fuse() {
    let env = Env::with_pool("512M");
    let m = uring_mount(&env, "mnt");
    let before = fuse_stats(&env);
    assert_eq!(before["transport"], "uring", "{before}");
    let block: Vec<u8> = (0..16384u32).map(|i| (i % 251) as u8).collect();
    {
        // O_DIRECT: each write and read is a FUSE request, not the page cache's.
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_DIRECT)
            .open(m.p("pages"))
            .expect("create");
        let mut buf = AlignedPage::new();
        buf.0.copy_from_slice(&block);
        for i in 0..64u64 {
            f.write_all_at(&buf.0, i * 16384).expect("write");
        }
        f.sync_data().expect("fdatasync");
        for i in 0..64u64 {
            let mut back = AlignedPage::new();
            f.read_exact_at(&mut back.0, i * 16384).expect("read");
            assert!(back.0 == buf.0, "page {i} read back differs");
        }
    }
    let after = fuse_stats(&env);
    let ring = after["ring_requests"].as_u64().expect("ring count");
    let dev = after["dev_requests"].as_u64().expect("dev count");
    assert!(ring >= 129, "64 writes, an fdatasync and 64 reads went by the rings: {after}");
    // FORGET and INTERRUPT are all /dev/fuse still carries.
    assert!(dev <= 8, "data requests must not reach /dev/fuse: {after}");
    m.umount();
    let m = uring_mount(&env, "mnt");
    assert_eq!(fs::read(m.p("pages")).expect("read after remount"), block.repeat(64));
    m.umount();
}

/// A 16 KiB page aligned for O_DIRECT.
#[repr(C, align(4096))]
struct AlignedPage([u8; 16384]);

impl AlignedPage {
    fn new() -> Box<AlignedPage> {
        Box::new(AlignedPage([0; 16384]))
    }
}

#[test]
fn a_killed_reader_does_not_hang_and_unmount_and_kill_9_end_cleanly() {
    let env = Env::with_pool("512M");
    let m = uring_mount(&env, "mnt");
    let big = m.p("big");
    fs::write(&big, vec![7u8; 256 << 20]).expect("write 256 MiB");
    common::killed_readers_end_at_once(&big);
    m.umount();
    // fsynced data survives a kill -9 of a uring daemon, and the dead mount clears.
    let m = uring_mount(&env, "mnt");
    let f = OpenOptions::new().write(true).create(true).truncate(true).open(m.p("synced")).expect("create");
    f.write_all_at(b"fsynced before the kill", 0).expect("write");
    f.sync_all().expect("fsync");
    drop(f);
    m.crash();
    let m = uring_mount(&env, "mnt");
    assert_eq!(fs::read(m.p("synced")).expect("read"), b"fsynced before the kill");
    m.umount();
}

/// Page `n` as version `v` wrote it (incompressible, different in every 4 KiB).
fn page_v(n: u64, v: u64) -> Vec<u8> {
    common::page_v(n, v, 16384)
}

/// Per page: the last version whose write returned, and the last one started. One
/// writer per page, so versions only grow.
struct Model(Mutex<Vec<(u64, u64)>>);

impl Model {
    fn get(&self, n: u64) -> (u64, u64) {
        self.0.lock().expect("model")[n as usize]
    }
    fn set(&self, n: u64, at: impl FnOnce(&mut (u64, u64))) {
        at(&mut self.0.lock().expect("model")[n as usize]);
    }
}

/// Which version of page `n` `bytes` (part `part` of the page, 4 KiB-aligned) is: one
/// between the last acknowledged before the read began and the last started when it
/// ended, or None (torn, stale or garbage).
fn version_of(n: u64, bytes: &[u8], part: usize, lo: u64, hi: u64) -> Option<u64> {
    (lo..=hi).find(|&v| bytes == &page_v(n, v)[part..part + bytes.len()])
}

/// Writers of versions of their own pages and readers of overlapping spans, all with
/// O_DIRECT (each a request, not the page cache's), many requests in flight at once
/// on the rings: every read sees exactly one version of each page it covers, never
/// older than one already acknowledged, whatever ring entry served it.
#[test]
fn concurrent_overlapping_writes_and_reads_on_the_rings_each_see_one_version_of_a_page() {
    const PAGES: u64 = 64;
    let env = Env::with_pool("512M");
    env.ok(&["set", "recordsize=16K", "tank/db"]);
    let m = uring_mount(&env, "mnt");
    let open = || {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .custom_flags(libc::O_DIRECT)
            .open(m.p("t"))
            .expect("open")
    };
    let f = Arc::new(open());
    let mut buf = AlignedPage::new();
    for n in 0..PAGES {
        buf.0.copy_from_slice(&page_v(n, 0));
        f.write_all_at(&buf.0, n * 16384).expect("fill");
    }
    let model = Arc::new(Model(Mutex::new(vec![(0, 0); PAGES as usize])));
    let stop = Arc::new(AtomicBool::new(false));
    let (reads, writes) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let before = fuse_stats(&env)["ring_requests"].as_u64().expect("ring count");
    // Two writers: one the even pages, one the odd; each fdatasyncs now and then.
    let writers: Vec<_> = (0..2u64)
        .map(|w| {
            let (f, model, stop, writes) = (f.clone(), model.clone(), stop.clone(), writes.clone());
            std::thread::spawn(move || {
                let mut buf = AlignedPage::new();
                let mut x = 0x5EED + w;
                let mut version = 1;
                while !stop.load(Ordering::Relaxed) {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let n = ((x >> 33) % (PAGES / 2)) * 2 + w;
                    buf.0.copy_from_slice(&page_v(n, version));
                    model.set(n, |p| p.1 = version);
                    f.write_all_at(&buf.0, n * 16384).expect("write");
                    model.set(n, |p| p.0 = version);
                    if version % 8 == 0 {
                        f.sync_data().expect("fdatasync");
                    }
                    version += 1;
                    writes.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    // Readers of 32 KiB spans (a page of each writer) and of single 4 KiB blocks.
    let readers: Vec<_> = (0..3u64)
        .map(|r| {
            let (f, model, stop, reads) = (f.clone(), model.clone(), stop.clone(), reads.clone());
            std::thread::spawn(move || {
                let mut span = AlignedSpan::new();
                let mut x = 0xBEEF + r;
                while !stop.load(Ordering::Relaxed) {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let n = (x >> 33) % (PAGES - 1);
                    let (block, len) = if r == 2 { (((x >> 20) % 4) as usize * 4096, 4096) } else { (0, 32768) };
                    let lo = [model.get(n).0, model.get(n + 1).0];
                    f.read_exact_at(&mut span.0[..len], n * 16384 + block as u64).expect("read");
                    let hi = [model.get(n).1, model.get(n + 1).1];
                    for (i, part) in span.0[..len].chunks(16384).enumerate() {
                        let page = n + i as u64;
                        let seen = version_of(page, part, block, lo[i], hi[i]);
                        assert!(
                            seen.is_some(),
                            "page {page} (bytes {block}..{}): no single version in {}..={} (torn, stale or garbage)",
                            block + part.len(),
                            lo[i],
                            hi[i]
                        );
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(4));
    stop.store(true, Ordering::Relaxed);
    for t in writers.into_iter().chain(readers) {
        t.join().expect("a writer failed or a reader saw a wrong page");
    }
    let (reads, writes) = (reads.load(Ordering::Relaxed), writes.load(Ordering::Relaxed));
    assert!(reads >= 1000 && writes >= 500, "a real load: {reads} reads, {writes} writes");
    let ring = fuse_stats(&env)["ring_requests"].as_u64().expect("ring count") - before;
    assert!(ring >= reads + writes, "the load went by the rings: {ring} ring requests");
    // At rest every page is its last acknowledged version, read back whole.
    for n in 0..PAGES {
        f.read_exact_at(&mut buf.0, n * 16384).expect("read at rest");
        assert!(page_v(n, model.get(n).0) == buf.0, "page {n} is not its last written version");
    }
    drop(f);
    m.umount();
}

/// Two pages aligned for O_DIRECT.
#[repr(C, align(4096))]
struct AlignedSpan([u8; 32768]);

impl AlignedSpan {
    fn new() -> Box<AlignedSpan> {
        Box::new(AlignedSpan([0; 32768]))
    }
}

/// Runs `tarn mount --transport uring` with the refusal hook at `stage`: its stderr,
/// asserting the mount worked.
fn refused_mount<'a>(env: &'a Env, name: &str, stage: &str) -> (common::Mounted<'a>, String) {
    let mp = env.path(name);
    fs::create_dir_all(&mp).expect("mkdir mountpoint");
    let out = env.tarn_with_env(
        &["mount", "tank/db", mp.to_str().expect("utf8"), "--transport", "uring"],
        &[("TARN_TEST_REFUSE_URING", stage)],
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "a refused io_uring must not fail the mount: {err}");
    (common::Mounted::adopt(env, &mp), err)
}

/// A kernel that refuses FUSE over io_uring, at the module parameter or at INIT (forced
/// by the daemon's test hook on this kernel, which has it): `--transport uring` still
/// mounts, served over /dev/fuse, and says so in exactly one line naming the reason; the
/// daemon's log keeps the line, `tarn stats fuse` shows the transport really used and
/// why, and the data is served.
#[test]
fn a_kernel_refusing_io_uring_gets_dev_fuse_and_one_line_saying_why() {
    common::enable_uring();
    for (stage, reason) in
        [("knob", "enable_uring is off and cannot be set here"), ("init", "did not offer it at FUSE INIT")]
    {
        let env = Env::with_pool("512M");
        env.ok(&["ds", "create", "tank/db2"]);
        let (m, err) = refused_mount(&env, "mnt", stage);
        assert_eq!(err.lines().count(), 1, "{stage}: one line, got: {err}");
        assert!(err.starts_with("tarn mount: warning: FUSE over io_uring is unavailable ("), "{stage}: {err}");
        assert!(err.contains(reason), "{stage}: the reason: {err}");
        assert!(err.trim_end().ends_with("is served over /dev/fuse"), "{stage}: which transport: {err}");
        let stats = fuse_stats(&env);
        assert_eq!(stats["transport"], "dev", "{stage}: {stats}");
        assert!(stats["fallback"].as_str().is_some_and(|w| w.contains(reason)), "{stage}: {stats}");
        let text = env.ok(&["stats", "fuse", "tank"]);
        assert!(text.contains("uring_refused"), "{stage}: {text}");
        fs::write(m.p("f"), b"served over /dev/fuse").expect("write");
        assert_eq!(fs::read(m.p("f")).expect("read"), b"served over /dev/fuse");
        if stage == "init" {
            // tarn's own session serves /dev/fuse then: its counters show it.
            assert_eq!(stats["ring_requests"], 0, "{stats}");
            assert!(fuse_stats(&env)["dev_requests"].as_u64().is_some_and(|n| n > 0));
        }
        let log = fs::read_to_string(env.run_dir().join("tank.log")).expect("daemon log");
        assert!(log.lines().any(|l| l == err.trim_end()), "{stage}: the log keeps the line: {log}");
        // A mount asked of the running daemon (on its control socket): the same line,
        // said by the command that asked.
        let mp2 = env.path("mnt2");
        fs::create_dir_all(&mp2).expect("mkdir");
        let out = env.tarn(&["mount", "tank/db2", mp2.to_str().expect("utf8"), "--transport", "uring"]);
        let _detach = common::DetachOnDrop(mp2.clone());
        let err2 = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stage}: {err2}");
        assert_eq!(err2.lines().count(), 1, "{stage}: one line, got: {err2}");
        assert!(err2.contains("tank/db2") && err2.contains(reason), "{stage}: {err2}");
        env.ok(&["umount", mp2.to_str().expect("utf8")]);
        m.umount();
    }
}

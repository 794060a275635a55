//! Cache devices (L2ARC, issue #12) through the `tarn` binary: `pool add POOL cache DEV`
//! and `pool remove POOL DEV` on a mounted pool (served by its daemon while a writer
//! fsyncs through the mount) and on a closed one, `pool status`'s cache section following
//! live, `pool history`, bad input refused in one line; kill -9 of the daemon under a
//! write and read load with a cache device: every fsync-acknowledged byte is there, no
//! read ever returns wrong bytes, and the cache rebuilds and serves after import; a cache
//! device returning wrong bytes is FAULTED in status (with the fix) and `pool clear`
//! brings it back while mounted.

mod common;

use std::fs::{self, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Env;

/// Page `n` as version `v` wrote it: incompressible, so 32 MiB of pages cannot sit in a
/// 16 MiB ARC.
fn page_v(n: u64, v: u64) -> Vec<u8> {
    common::page_v(n, v, 16384)
}

fn page(n: u64) -> Vec<u8> {
    page_v(n, 0)
}

/// 32 MiB of 16 KiB pages: twice the smallest ARC, so reading it evicts to the cache.
const PAGES: u64 = 2048;

fn s(p: &Path) -> &str {
    p.to_str().expect("utf8 path")
}

/// Writes every page at version 0 and fsyncs.
fn fill(f: &fs::File) {
    for n in 0..PAGES {
        f.write_all_at(&page(n), n * 16384).expect("write");
    }
    f.sync_all().expect("fsync");
}

/// Drops the kernel's cached pages of `f` (clean after fsync), so reads reach the pool.
fn drop_page_cache(f: &fs::File) {
    use std::os::fd::AsRawFd;
    // SAFETY: an advisory call on a descriptor we own; no memory is involved.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0, "posix_fadvise");
}

/// The lines of `pool status`'s cache section (empty if it has none).
fn cache_section(status: &str) -> Vec<String> {
    let mut lines = status.lines().skip_while(|l| l.trim_end() != "cache");
    let _title = lines.next();
    lines.take_while(|l| l.starts_with("  ")).map(|l| l.trim().to_string()).collect()
}

#[test]
fn cache_devices_are_added_and_removed_on_a_mounted_and_a_closed_pool() {
    let env = Env::with_pool("512M");
    let m = env.mount("mnt", &[]);
    let file = m.p("table.ibd");
    let f = OpenOptions::new().create(true).truncate(true).write(true).read(true).open(&file).expect("create");
    fill(&f);
    let cache = env.path("cache.img");
    env.ok(&["pool", "add", "tank", "cache", s(&cache), "--size", "128M"]);
    let status = env.ok(&["pool", "status", "tank"]);
    let section = cache_section(&status);
    assert_eq!(section.len(), 1, "one cache device, served live: {status}");
    assert!(section[0].starts_with(s(&cache)) && section[0].contains("ONLINE"), "{status}");
    env.ok(&["tune", "tank", "arc_max=16M"]);
    for _ in 0..2 {
        drop_page_cache(&f);
        for n in 0..PAGES {
            let mut buf = vec![0u8; 16384];
            f.read_exact_at(&mut buf, n * 16384).expect("read");
            assert!(buf == page(n), "page {n} wrong with a cache device");
        }
    }
    let written = || -> u64 {
        let stats = env.ok(&["stats", "l2arc", "tank", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&stats).expect("json");
        v["l2arc"]["written_blocks"].as_u64().unwrap_or_else(|| panic!("no written_blocks: {stats}"))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while written() == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(written() > 0, "the added device is fed: {}", env.ok(&["stats", "l2arc", "tank"]));

    let e = env.fails(&["pool", "add", "tank", "cache", s(&cache)]);
    assert!(e.contains("given twice"), "{e}");
    let e = env.fails(&["pool", "add", "tank", "cache", "mirror", s(&env.path("a.img")), s(&env.path("b.img"))]);
    assert!(e.contains("never mirrored"), "{e}");
    env.ok(&["pool", "remove", "tank", s(&cache)]);
    let status = env.ok(&["pool", "status", "tank"]);
    assert!(cache_section(&status).is_empty() && !status.contains("cache.img"), "{status}");
    let e = env.fails(&["pool", "remove", "tank", s(&cache)]);
    assert!(e.contains("no such device in pool 'tank'"), "removed already: {e}");
    for n in 0..PAGES {
        let mut buf = vec![0u8; 16384];
        f.read_exact_at(&mut buf, n * 16384).expect("read after the removal");
        assert!(buf == page(n), "page {n} wrong after the removal");
    }
    drop(f);
    m.umount();

    // The closed pool: the same commands open it, change it and close it.
    env.ok(&["pool", "add", "tank", "cache", s(&cache)]);
    let status = env.ok(&["pool", "status", "tank"]);
    assert_eq!(cache_section(&status).len(), 1, "{status}");
    env.ok(&["pool", "remove", "tank", s(&cache)]);
    assert!(cache_section(&env.ok(&["pool", "status", "tank"])).is_empty());
    let history = env.ok(&["pool", "history", "tank"]);
    assert_eq!(history.matches("tarn pool add tank cache").count(), 2, "{history}");
    assert_eq!(history.matches("tarn pool remove tank").count(), 2, "{history}");
    assert!(!fs::read_to_string(env.path("pools.json")).expect("cache file").contains("cache.img"));
    // The device left for good: a new pool may take it without -f.
    env.ok(&["pool", "create", "other", s(&cache)]);

    // The pool property `cacheautoreplace`, on the closed pool and served by a daemon.
    assert_eq!(env.ok(&["pool", "get", "-H", "all", "tank"]), "tank\tcacheautoreplace\ton\tdefault\n");
    env.ok(&["pool", "set", "cacheautoreplace=off", "tank"]);
    let m = env.mount("mnt", &[]);
    assert_eq!(env.ok(&["pool", "get", "-H", "cacheautoreplace", "tank"]), "tank\tcacheautoreplace\toff\tlocal\n");
    let e = env.fails(&["pool", "set", "cacheautoreplace=sometimes", "tank"]);
    assert!(e.contains("invalid value 'sometimes' for property 'cacheautoreplace': use on | off"), "{e}");
    let e = env.fails(&["pool", "get", "autoexpand", "tank"]);
    assert!(e.contains("unknown pool property 'autoexpand'"), "{e}");
    env.ok(&["pool", "set", "cacheautoreplace=on", "tank"]);
    m.umount();
    assert!(env.ok(&["pool", "history", "tank"]).contains("tarn pool set cacheautoreplace=off tank"));
}

/// The versions of each page a reader may find. Per page: every version started, in
/// order (the fill's 0 first), and how many of them were acknowledged (their fsync
/// returned). A read may return the last version acknowledged before it began or any
/// version started since (a write that overlapped the read may or may not be in it):
/// reads are atomic and never go back past an acknowledged write, but a read is not a
/// snapshot taken at the moment it returns.
struct Versions(Mutex<Vec<(Vec<u64>, usize)>>);

impl Versions {
    fn new() -> Versions {
        Versions(Mutex::new(vec![(vec![0], 1); PAGES as usize]))
    }

    fn started(&self, n: u64, version: u64) {
        self.0.lock().expect("versions")[n as usize].0.push(version);
    }

    fn acknowledged(&self, n: u64) {
        let page = &mut self.0.lock().expect("versions")[n as usize];
        page.1 = page.0.len();
    }

    /// Where a read of page `n` beginning now may start finding versions: the last one
    /// acknowledged.
    fn since(&self, n: u64) -> usize {
        self.0.lock().expect("versions")[n as usize].1 - 1
    }

    /// Whether `bytes` are a version of page `n` a read that began at `since` may find.
    fn allows(&self, n: u64, since: usize, bytes: &[u8]) -> bool {
        let started = self.0.lock().expect("versions")[n as usize].0[since..].to_vec();
        started.into_iter().any(|v| bytes == page_v(n, v))
    }
}

/// Reads every page (the kernel's copies dropped first), each against `versions`; panics
/// on a wrong page.
fn check_all(f: &fs::File, versions: &Versions) {
    drop_page_cache(f);
    let mut buf = vec![0u8; 16384];
    // In an order read-ahead does not follow: read-ahead goes to the pool's devices.
    for n in (0..PAGES).map(|i| i * 997 % PAGES) {
        f.read_exact_at(&mut buf, n * 16384).expect("read");
        assert!(versions.allows(n, versions.since(n), &buf), "page {n}: bytes of no version written");
    }
}

/// A 16 KiB page aligned for O_DIRECT.
#[repr(C, align(4096))]
struct AlignedPage([u8; 16384]);

fn l2_stat(env: &Env, name: &str) -> u64 {
    let stats = env.ok(&["stats", "l2arc", "tank", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&stats).expect("json");
    v["l2arc"][name].as_u64().unwrap_or_else(|| panic!("no l2arc counter {name}: {stats}"))
}

#[test]
fn kill_9_under_a_write_and_read_load_with_a_cache_device_loses_no_fsync_and_the_cache_comes_back_warm() {
    let env = Env::with_pool("512M");
    let cache = env.path("cache.img");
    env.ok(&["pool", "add", "tank", "cache", s(&cache), "--size", "256M"]);
    env.ok(&["set", "recordsize=16K", "tank/db"]);
    let m = env.mount("mnt", &[]);
    env.ok(&["tune", "tank", "arc_max=16M"]);
    let f = Arc::new(
        OpenOptions::new().create(true).truncate(true).write(true).read(true).open(m.p("t.ibd")).expect("create"),
    );
    fill(&f);
    let versions = Arc::new(Versions::new());
    check_all(&f, &versions);
    check_all(&f, &versions);
    let deadline = Instant::now() + Duration::from_secs(20);
    while l2_stat(&env, "written_blocks") < PAGES / 4 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let stats = env.ok(&["stats", "l2arc", "tank"]);
    assert!(l2_stat(&env, "written_blocks") >= PAGES / 4, "the cache filled before the load: {stats}");

    // The load: a writer rewriting random pages, each fsynced; readers checking pages.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (f, versions, stop) = (f.clone(), versions.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut x = 0x5EED_u64;
            let mut version = 1;
            while !stop.load(Ordering::Relaxed) {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let n = (x >> 33) % PAGES;
                versions.started(n, version);
                if f.write_all_at(&page_v(n, version), n * 16384).and_then(|()| f.sync_data()).is_err() {
                    return; // the daemon died: this version may or may not be there
                }
                versions.acknowledged(n);
                version += 1;
            }
        })
    };
    // The readers use O_DIRECT: every read is answered by the pool (ARC, cache device or
    // disk), which is what must never return wrong bytes. A buffered read racing the
    // buffered write of its page may mix the two versions in the kernel's page cache
    // (FUSE copies a write's bytes into the cache before sending it, and a buffered read
    // takes no lock against that: ext4 does the same), on either transport; that is no
    // byte the pool returned.
    let direct =
        Arc::new(OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(m.p("t.ibd")).expect("open O_DIRECT"));
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (f, versions, stop) = (direct.clone(), versions.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut buf = Box::new(AlignedPage([0u8; 16384]));
                let mut n = r * 1000;
                while !stop.load(Ordering::Relaxed) {
                    n = (n + 7) % PAGES;
                    let since = versions.since(n);
                    if f.read_exact_at(&mut buf.0, n * 16384).is_err() {
                        return; // the daemon died
                    }
                    assert!(versions.allows(n, since, &buf.0), "page {n}: bytes of no version written");
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(3));
    assert!(l2_stat(&env, "hits") > 0, "the cache served reads under the load");
    m.crash();
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer");
    for r in readers {
        r.join().expect("a reader saw wrong bytes");
    }
    drop((f, direct));

    // Import: every acknowledged version is there (or the one in flight), and the cache
    // rebuilt its index and serves.
    let m = env.mount("mnt", &[]);
    env.ok(&["tune", "tank", "arc_max=16M"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while l2_stat(&env, "rebuilding") > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(l2_stat(&env, "rebuilt_blocks") > 0, "the cache's index came back from its log blocks");
    let f = OpenOptions::new().read(true).open(m.p("t.ibd")).expect("open after the crash");
    check_all(&f, &versions);
    assert!(l2_stat(&env, "hits") > 0, "warm right after the crash: hits on the first pass");
    check_all(&f, &versions);
    assert_eq!(l2_stat(&env, "cksum_bad"), 0, "no rebuilt entry named bytes that did not verify");
    let status = env.ok(&["pool", "status", "tank"]);
    assert!(cache_section(&status)[0].contains("ONLINE"), "{status}");
    drop(f);
    m.umount();
}

/// Reads every page through the mount (its kernel cache dropped first), checking bytes.
fn read_all(f: &fs::File) {
    drop_page_cache(f);
    for n in 0..PAGES {
        let mut buf = vec![0u8; 16384];
        f.read_exact_at(&mut buf, n * 16384).expect("read");
        assert!(buf == page(n), "page {n} wrong");
    }
}

#[test]
fn a_cache_device_returning_wrong_bytes_is_faulted_in_status_and_pool_clear_brings_it_back_while_mounted() {
    let env = Env::with_pool("512M");
    let cache = env.path("cache.img");
    env.ok(&["pool", "add", "tank", "cache", s(&cache), "--size", "128M"]);
    let m = env.mount("mnt", &[]);
    let f = OpenOptions::new().create(true).truncate(true).write(true).read(true).open(m.p("t.ibd")).expect("create");
    fill(&f);
    env.ok(&["tune", "tank", "arc_max=16M"]);
    let hits = || -> u64 {
        let stats = env.ok(&["stats", "l2arc", "tank", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&stats).expect("json");
        v["l2arc"]["hits"].as_u64().unwrap_or_else(|| panic!("no hits: {stats}"))
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while hits() < PAGES / 4 {
        assert!(Instant::now() < deadline, "the cache never served: {}", env.ok(&["stats", "l2arc", "tank"]));
        read_all(&f);
    }
    // Bit flips on the device (not I/O errors): every 512 bytes of its first 64 MiB.
    let dev = OpenOptions::new().read(true).write(true).open(&cache).expect("cache image");
    let mut b = [0u8; 1];
    for at in (4096 + 700..64 << 20).step_by(512) {
        dev.read_exact_at(&mut b, at).expect("read");
        dev.write_all_at(&[b[0] ^ 0x5a], at).expect("write");
    }
    dev.sync_all().expect("sync");
    read_all(&f);
    let status = env.ok(&["pool", "status", "tank"]);
    let section = cache_section(&status);
    assert!(section[0].contains("FAULTED") && section[0].contains("checksum errors"), "{status}");
    assert!(status.contains("state: ONLINE"), "a cache device never degrades the pool: {status}");
    assert!(status.contains("A cache device was dropped (FAULTED)"), "{status}");
    assert!(status.contains("`tarn pool clear tank` to use it again"), "{status}");
    assert!(status.contains("errors: No known data errors"), "{status}");

    env.ok(&["pool", "clear", "tank"]);
    let status = env.ok(&["pool", "status", "tank"]);
    assert!(cache_section(&status)[0].contains("ONLINE"), "re-attached while mounted: {status}");
    let before = hits();
    let deadline = Instant::now() + Duration::from_secs(60);
    while hits() < before + PAGES / 4 {
        assert!(Instant::now() < deadline, "not fed again: {}", env.ok(&["stats", "l2arc", "tank"]));
        read_all(&f);
    }
    drop(f);
    m.umount();
}

//! Cache devices (L2ARC, issue #12) through the `tarn` binary: `pool add POOL cache DEV`
//! and `pool remove POOL DEV` on a mounted pool (served by its daemon while a writer
//! fsyncs through the mount) and on a closed one, `pool status`'s cache section following
//! live, `pool history`, bad input refused in one line.

mod common;

use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;

use common::Env;

/// 32 MiB of 16 KiB pages: twice the smallest ARC, so reading it evicts to the cache.
const PAGES: u64 = 2048;

fn s(p: &Path) -> &str {
    p.to_str().expect("utf8 path")
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
    let page = |n: u64| -> Vec<u8> {
        // Incompressible, so 32 MiB of it cannot sit in a 16 MiB ARC.
        let mut x = n.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..16384)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    };
    for n in 0..PAGES {
        f.write_all_at(&page(n), n * 16384).expect("write");
    }
    f.sync_all().expect("fsync");
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
}

//! `tarn stats`: the engine's counters as a DBA reads arcstats — from the mount daemon
//! while a dataset is mounted, and as JSON or Prometheus text for scripts.
mod common;

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::time::{Duration, Instant};

use common::Env;

fn stat(env: &Env, args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&env.ok(args)).expect("stats --json is JSON")
}

#[test]
fn a_mounted_pool_publishes_its_counters() {
    let env = Env::with_pool("256M");
    let m = env.mount("mnt", &[]);
    // fsyncs go through the intent log; O_DIRECT reads go through the ARC.
    let path = m.p("redo");
    let mut f = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path).unwrap();
    for i in 0..20u8 {
        f.write_all(&[i; 4096]).unwrap();
        f.sync_data().unwrap();
    }
    drop(f);
    let deadline = Instant::now() + Duration::from_secs(10);
    let zil = loop {
        let v = stat(&env, &["stats", "zil", "tank", "--json"]);
        if v["zil"]["commits"].as_u64().unwrap_or(0) >= 20 || Instant::now() > deadline {
            break v;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(zil["zil"]["commits"].as_u64().unwrap() >= 20, "each fsync committed the log: {zil}");
    assert!(zil["zil"]["bytes_written"].as_u64().unwrap() >= 20 * 4096, "{zil}");
    let mut r = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(&path).unwrap();
    let mut buf = vec![0u8; 8192];
    // O_DIRECT needs an aligned buffer: read through a 4 KiB-aligned slice.
    let off = buf.as_ptr().align_offset(4096);
    let aligned = &mut buf[off..off + 4096];
    use std::io::Read;
    for _ in 0..3 {
        use std::io::Seek;
        r.seek(std::io::SeekFrom::Start(0)).unwrap();
        r.read_exact(aligned).unwrap();
    }
    drop(r);
    std::thread::sleep(Duration::from_millis(1500));
    let text = env.ok(&["stats", "arc", "tank"]);
    assert!(text.contains("arc  hits") && text.contains("arc  max"), "{text}");
    let space = stat(&env, &["stats", "space", "tank", "--json"]);
    assert!(space["space"]["datasets_used_bytes"].as_u64().is_some_and(|b| b > 0), "{space}");
    // The ARC budget changes at run time.
    env.ok(&["tune", "tank", "arc_max=64M"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while stat(&env, &["stats", "arc", "tank", "--json"])["arc"]["max"].as_u64() != Some(64 << 20) {
        assert!(Instant::now() < deadline, "arc_max was not applied");
        std::thread::sleep(Duration::from_millis(200));
    }
    let err = env.fails(&["tune", "tank", "arc_max=lots"]);
    assert!(err.contains("invalid arc_max"), "{err}");
    // So does the write throttle's dirty_max, and the early-sync threshold with it.
    env.ok(&["tune", "tank", "dirty_max=64M"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let txg = stat(&env, &["stats", "txg", "tank", "--json"]);
        if txg["txg"]["dirty_max_bytes"].as_u64() == Some(64 << 20) {
            assert_eq!(txg["txg"]["dirty_sync_bytes"].as_u64(), Some((64 << 20) / 5));
            break;
        }
        assert!(Instant::now() < deadline, "dirty_max was not applied: {txg}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let err = env.fails(&["tune", "tank", "dirty_max=1M"]);
    assert!(err.contains("invalid dirty_max"), "{err}");
    let prom = env.ok(&["stats", "all", "tank", "--prometheus"]);
    assert!(
        prom.contains("tarn_arc_hits{pool=\"tank\"} ") && prom.contains("tarn_zil_commits{pool=\"tank\"} "),
        "{prom}"
    );
    m.umount();
    // Unmounted: the pool is opened by the command itself; the counters are there, fresh.
    let v = stat(&env, &["stats", "all", "tank", "--json"]);
    assert!(v["arc"]["max"].as_u64().unwrap() > 0 && v["txg"]["synced"].as_u64().unwrap() > 0, "{v}");
}

//! The operator's pool from the command line (issue #10): scrub with its line in
//! `status`, `scrub -s` and `-d`, `status -v` naming damaged files, `clear`, `iostat`,
//! and the defects a new user hit (1-8, 10, 12), each as the user typed it.
//!
//! These run against pools no daemon holds (each command opens the pool). Once the
//! control socket serves a mounted pool, the same commands are run against a mounted
//! pool under a database's writes (tests of that crate), with these as the reference.
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        Env { dir: tempfile::tempdir().expect("temp dir") }
    }
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    fn tarn_env(&self, args: &[&str], vars: &[(&str, &str)]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_tarn"))
            .args(args)
            .env("TARN_CACHE_FILE", self.path("cache.json"))
            .env("TARN_RUN_DIR", self.path("run"))
            .envs(vars.iter().copied())
            .output()
            .expect("run tarn")
    }
    fn tarn(&self, args: &[&str]) -> Output {
        self.tarn_env(args, &[])
    }
    fn ok(&self, args: &[&str]) -> String {
        let out = self.tarn(args);
        assert!(out.status.success(), "tarn {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
    /// A command that must fail with exit 1 and one line; returns the line.
    fn fails(&self, args: &[&str]) -> String {
        let out = self.tarn(args);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "tarn {args:?}: {err}");
        assert!(!err.contains("panicked"), "tarn {args:?} panicked: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        err
    }
    /// Pool `tank` on one image, raw records, and dataset `tank/db` holding `noise.bin`.
    fn pool_with_file(&self) -> (String, Vec<u8>) {
        let img = s(&self.path("d0.img"));
        self.ok(&["pool", "create", "--size", "128M", "tank", &img]);
        self.ok(&["set", "compression=off", "tank"]);
        self.ok(&["ds", "create", "tank/db"]);
        let data = noise(7, 300_000);
        let host = self.path("noise.bin");
        std::fs::write(&host, &data).unwrap();
        self.ok(&["put", &s(&host), "tank/db"]);
        (img, data)
    }
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Flips a byte of the one place `needle` occurs in the image.
fn damage(img: &str, needle: &[u8]) {
    let bytes = std::fs::read(img).unwrap();
    let at = bytes.windows(needle.len()).position(|w| w == needle).expect("the file's bytes are in the image");
    let f = std::fs::OpenOptions::new().write(true).open(img).unwrap();
    f.write_all_at(&[bytes[at] ^ 0x5a], at as u64).unwrap();
}

#[test]
fn scrub_status_v_and_clear_read_like_zpool() {
    let env = Env::new();
    let (img, data) = env.pool_with_file();
    let out = env.ok(&["pool", "scrub", "tank"]);
    assert!(out.contains("0 bad copies found, 0 unrecoverable"), "{out}");
    let status = env.ok(&["pool", "status", "tank"]);
    assert!(status.contains("scan: scrub repaired 0B in 00:00:0") && status.contains("with 0 errors on"), "{status}");
    env.ok(&["pool", "export", "tank"]);
    damage(&img, &data[200_000..200_064]);
    env.ok(&["pool", "import", "-d", &s(&env.path("")), "tank"]);

    let err = env.fails(&["pool", "scrub", "tank"]);
    assert!(err.contains("1 blocks could not be read") && err.contains("status -v tank"), "{err}");
    let status = env.ok(&["pool", "status", "tank"]);
    for needle in [
        "with 1 errors on",
        "errors: 1 data errors, use '-v' for a list",
        "status: One or more devices has experienced an error resulting in data corruption",
    ] {
        assert!(status.contains(needle), "status lacks {needle:?}:\n{status}");
    }
    let verbose = env.ok(&["pool", "status", "-v", "tank"]);
    assert!(
        verbose.contains("errors: Permanent errors have been detected in the following files:")
            && verbose.contains("        tank/db:/noise.bin"),
        "{verbose}"
    );
    let json: serde_json::Value = serde_json::from_str(&env.ok(&["pool", "status", "-v", "--json", "tank"])).unwrap();
    assert_eq!(json[0]["data_errors"], 1);
    assert_eq!(json[0]["error_files"][0], "tank/db:/noise.bin");
    assert_eq!(json[0]["scan"]["kind"], "scrub");

    env.ok(&["pool", "clear", "tank"]);
    assert!(env.ok(&["pool", "status", "tank"]).contains("errors: No known data errors"));
    env.fails(&["pool", "scrub", "tank"]);
    assert!(env.ok(&["pool", "status", "-v", "tank"]).contains("tank/db:/noise.bin"), "found again by the next scrub");
}

#[test]
fn a_scrub_in_its_own_process_is_stopped_with_s() {
    let env = Env::new();
    let img = s(&env.path("d0.img"));
    env.ok(&["pool", "create", "--size", "256M", "tank", &img]);
    let host = env.path("big.bin");
    std::fs::write(&host, noise(3, 24 << 20)).unwrap();
    env.ok(&["put", &s(&host), "tank"]);
    let err = env.fails(&["pool", "scrub", "-s", "tank"]);
    assert!(err.contains("no scrub in progress"), "{err}");

    // 24 MiB at 1 MiB/s: it is still running when stopped.
    let out = env.tarn_env(&["pool", "scrub", "-d", "tank"], &[("TARN_SCAN_RATE", "1M")]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("started in the background"), "{said}");
    let err = env.fails(&["pool", "scrub", "-d", "tank"]);
    assert!(err.contains("is running (pid"), "one scrub at a time: {err}");
    let err = env.fails(&["pool", "status", "tank"]);
    assert!(err.contains("tank.scrub.log") && err.contains("scrub -s tank"), "who holds it: {err}");
    std::thread::sleep(Duration::from_millis(1500));
    let started = Instant::now();
    let out = env.ok(&["pool", "scrub", "-s", "tank"]);
    assert!(out.contains("scrub of 'tank' canceled"), "{out}");
    assert!(started.elapsed() < Duration::from_secs(20));
    let status = env.ok(&["pool", "status", "tank"]);
    assert!(status.contains("scan: scrub canceled on"), "{status}");
    let log = std::fs::read_to_string(env.path("run/tank.scrub.log")).unwrap();
    assert!(log.contains("scrub of 'tank' canceled"), "{log}");
    // A new scrub starts from the beginning and finishes.
    let out = env.ok(&["pool", "scrub", "tank"]);
    assert!(out.contains("0 unrecoverable"), "{out}");
    assert!(env.ok(&["pool", "status", "tank"]).contains("scan: scrub repaired 0B"));
}

#[test]
fn iostat_shows_zpool_columns_and_numbers_that_follow_the_io() {
    let env = Env::new();
    let a = s(&env.path("a.img"));
    let b = s(&env.path("b.img"));
    env.ok(&["pool", "create", "--size", "128M", "tank", "mirror", &a, &b]);
    let out = env.ok(&["pool", "iostat", "tank"]);
    let lines: Vec<&str> = out.lines().collect();
    for (line, words) in [
        (0, &["capacity", "operations", "bandwidth"][..]),
        (1, &["pool", "alloc", "free", "read", "write"][..]),
        (3, &["tank"][..]),
    ] {
        for w in words {
            assert!(lines[line].contains(w), "line {line} lacks {w}:\n{out}");
        }
    }
    let verbose = env.ok(&["pool", "iostat", "-v", "-l"]);
    for needle in ["mirror-0", &a, &b, "disk_wait", "scan", "wait"] {
        assert!(verbose.contains(needle), "-v -l lacks {needle}:\n{verbose}");
    }
    // The first report covers the import (it read labels and metadata); an idle
    // interval after it reads and writes nothing.
    let out = env.ok(&["pool", "iostat", "-H", "-p", "tank", "0.3", "2"]);
    let rows: Vec<Vec<u64>> =
        out.lines().map(|l| l.split('\t').skip(1).map(|c| c.parse().unwrap()).collect()).collect();
    assert_eq!(rows.len(), 2, "{out}");
    assert!(rows[0][2] > 0 && rows[0][4] > 0, "import reads: {out}");
    assert_eq!((rows[1][2], rows[1][3]), (0, 0), "an idle interval: {out}");
    assert!(rows[0][0] > 0 && rows[0][1] > 100 << 20, "alloc and free in bytes: {out}");
    let err = env.tarn(&["pool", "iostat", "tank", "0"]);
    assert_eq!(err.status.code(), Some(2), "a bad interval is a usage error");
}

/// Defect 1: a remembered pool whose device is gone, or holds another pool.
#[test]
fn an_unavailable_pool_is_listed_as_such_and_export_forgets_it() {
    let env = Env::new();
    let (_, _) = env.pool_with_file();
    let gone = env.path("gone.img");
    env.ok(&["pool", "create", "--size", "128M", "lost", &s(&gone)]);
    let reused = s(&env.path("reused.img"));
    env.ok(&["pool", "create", "--size", "128M", "old", &reused]);
    std::fs::remove_file(&gone).unwrap();
    env.ok(&["pool", "create", "-f", "--size", "128M", "new", &reused]);

    let out = env.tarn(&["pool", "list"]);
    assert!(out.status.success());
    let list = String::from_utf8_lossy(&out.stdout);
    let row = |name: &str| list.lines().find(|l| l.starts_with(name)).unwrap_or("").to_string();
    assert!(row("tank").ends_with("ONLINE") && row("new").ends_with("ONLINE"), "{list}");
    assert!(row("lost").ends_with("UNAVAIL") && row("old").ends_with("UNAVAIL"), "{list}");
    let why = String::from_utf8_lossy(&out.stderr);
    assert!(why.contains("gone.img") && why.contains("another pool"), "{why}");
    let datasets = env.ok(&["ds", "list"]);
    assert!(datasets.contains("tank/db") && datasets.contains("new"), "{datasets}");
    let status = env.ok(&["pool", "status", "lost"]);
    assert!(status.contains("state: UNAVAIL") && status.contains("gone.img"), "{status}");

    env.ok(&["pool", "export", "lost"]);
    let err = env.fails(&["pool", "destroy", "old"]);
    assert!(err.contains("unavailable") && err.contains("destroy -f old"), "{err}");
    env.ok(&["pool", "destroy", "-f", "old"]);
    let list = env.ok(&["pool", "list"]);
    assert!(!list.contains("lost") && !list.contains("old"), "{list}");
    assert!(env.ok(&["pool", "status", "new"]).contains("ONLINE"), "new is untouched");
}

/// Defects 2, 8 (dataset create) and 10 (destroy of an empty pool).
#[test]
fn dataset_create_checks_first_and_an_empty_pool_is_destroyed_without_f() {
    let env = Env::new();
    let img = s(&env.path("d0.img"));
    env.ok(&["pool", "create", "--size", "128M", "tank", &img]);
    let err = env.fails(&["ds", "create", "-o", "atime=off", "-o", "recordsize=3K", "tank/x"]);
    assert!(err.contains("recordsize"), "{err}");
    assert!(!env.ok(&["ds", "list"]).contains("tank/x"), "nothing was created");
    let err = env.fails(&["ds", "create", "tank/a:b"]);
    assert!(err.contains("':' is not allowed"), "{err}");
    env.ok(&["pool", "destroy", "tank"]);
    env.ok(&["pool", "create", "--size", "128M", "tank", &img]);
    env.ok(&["ds", "create", "tank/x"]);
    let err = env.fails(&["pool", "destroy", "tank"]);
    assert!(err.contains("holds data") && err.contains("-f"), "{err}");
    env.ok(&["pool", "destroy", "-f", "tank"]);
}

/// Defects 5 and 6 (create).
#[test]
fn a_failed_create_leaves_nothing_and_a_device_twice_is_named() {
    let env = Env::new();
    let img = env.path("t.img");
    for size in ["10M", "0"] {
        let err = env.fails(&["pool", "create", "--size", size, "tank", &s(&img)]);
        assert!(err.contains("too small"), "{err}");
        assert!(!img.exists(), "--size {size} left {}", img.display());
    }
    let started = Instant::now();
    let err = env.fails(&["pool", "create", "--size", "128M", "tank", "mirror", &s(&img), &s(&img)]);
    assert!(err.contains("given twice"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(4), "not a lock timeout");
    env.ok(&["pool", "create", "--size", "128M", "tank", &s(&img)]);
}

/// Defects 3, 4 and 12 (finding and importing pools; 7 is tested in the pool crate).
#[test]
fn import_lists_only_what_it_can_import_and_says_why_not() {
    let env = Env::new();
    let devs = env.path("devs");
    std::fs::create_dir(&devs).unwrap();
    let here = s(&devs.join("here.img"));
    let away = devs.join("away.img");
    env.ok(&["pool", "create", "--size", "128M", "here", &here]);
    env.ok(&["pool", "create", "--size", "128M", "away", &s(&away)]);
    env.ok(&["pool", "export", "away"]);
    let list = env.ok(&["pool", "import", "-d", &s(&devs)]);
    assert!(list.contains("pool: away") && !list.contains("pool: here"), "{list}");

    // Defect 4: moved while exported, shown where it is now.
    let moved = env.path("moved");
    std::fs::create_dir(&moved).unwrap();
    std::fs::rename(&away, moved.join("away.img")).unwrap();
    env.ok(&["pool", "import", "-d", &s(&moved), "away"]);
    let status = env.ok(&["pool", "status", "away"]);
    assert!(status.contains(&s(&moved.join("away.img"))), "{status}");
    env.ok(&["pool", "export", "away"]);

    // Defect 3: a newer label version is named, not "no pools available".
    let img = moved.join("away.img");
    let f = std::fs::OpenOptions::new().read(true).write(true).open(&img).unwrap();
    let size = f.metadata().unwrap().len();
    for base in [0, (size / (256 << 10)) * (256 << 10) - (256 << 10)] {
        let mut area = vec![0u8; 64 << 10];
        f.read_exact_at(&mut area, base).unwrap();
        area[8..12].copy_from_slice(&9u32.to_le_bytes());
        area[16..32].fill(0);
        let sum = xxhash(&area);
        area[16..32].copy_from_slice(&sum);
        f.write_all_at(&area, base).unwrap();
    }
    let err = env.fails(&["pool", "import", "-d", &s(&moved)]);
    assert!(err.contains("version 9 is not supported") && err.contains("upgrade tarn"), "{err}");
    let err = env.fails(&["pool", "import", "-d", &s(&moved), "away"]);
    assert!(err.contains("upgrade tarn"), "{err}");
}

/// xxh3-128 of `area`, little-endian, as the label stores it.
fn xxhash(area: &[u8]) -> [u8; 16] {
    xxhash_rust::xxh3::xxh3_128(area).to_le_bytes()
}

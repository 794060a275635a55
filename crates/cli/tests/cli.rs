//! The `tarn` command as a user meets it: output that reads like zpool/zfs, and one clear
//! error line with a non-zero exit for every kind of bad input.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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
    fn tarn(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_tarn"))
            .args(args)
            .env("TARN_CACHE_FILE", self.path("cache.json"))
            .env("TARN_RUN_DIR", self.path("run"))
            .output()
            .expect("run tarn")
    }
    fn ok(&self, args: &[&str]) -> String {
        let out = self.tarn(args);
        assert!(out.status.success(), "tarn {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
    /// Runs a command that must fail; returns its one-line error.
    fn fails(&self, args: &[&str]) -> String {
        let out = self.tarn(args);
        assert!(!out.status.success(), "tarn {args:?} should have failed");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!err.contains("panicked"), "tarn {args:?} panicked: {err}");
        err
    }
    fn create_pool(&self) -> String {
        let img = self.path("d0.img").display().to_string();
        self.ok(&["pool", "create", "--size", "256M", "tank", &img]);
        img
    }
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

#[test]
fn status_and_list_read_like_zpool() {
    let env = Env::new();
    let a = s(&env.path("a.img"));
    let b = s(&env.path("b.img"));
    env.ok(&["pool", "create", "--size", "128M", "tank", "mirror", &a, &b]);
    let status = env.ok(&["pool", "status", "tank"]);
    for needle in ["pool: tank", "state: ONLINE", "mirror-0", "READ", "WRITE", "CKSUM", &a, &b, "No known data errors"]
    {
        assert!(status.contains(needle), "status lacks {needle:?}:\n{status}");
    }
    let list = env.ok(&["pool", "list", "-H", "-p"]);
    let cols: Vec<&str> = list.trim().split('\t').collect();
    assert_eq!(cols[0], "tank");
    assert!(cols[1].parse::<u64>().unwrap() > 100 << 20, "pool size in bytes: {list}");
    assert_eq!(cols[5], "ONLINE");
    let json: serde_json::Value = serde_json::from_str(&env.ok(&["pool", "status", "--json"])).unwrap();
    assert_eq!(json[0]["vdevs"][0]["leaves"].as_array().unwrap().len(), 2);
}

#[test]
fn properties_inherit_with_sources_and_bad_values_are_refused() {
    let env = Env::new();
    env.create_pool();
    env.ok(&["set", "compression=zstd-3", "tank"]);
    env.ok(&["ds", "create", "-o", "recordsize=16k", "tank/db"]);
    let out = env.ok(&["get", "-H", "compression,recordsize,sync", "tank/db"]);
    assert!(out.contains("tank/db\tcompression\tzstd-3\tinherited from tank"), "{out}");
    assert!(out.contains("tank/db\trecordsize\t16K\tlocal"), "{out}");
    assert!(out.contains("tank/db\tsync\tstandard\tdefault"), "{out}");
    let err = env.fails(&["set", "recordsize=3K", "tank/db"]);
    assert!(err.contains("invalid value '3K' for property 'recordsize'") && err.contains("power of two"), "{err}");
    let err = env.fails(&["set", "compression=zstd-42", "tank/db"]);
    assert!(err.contains("zstd-1"), "{err}");
    let err = env.fails(&["set", "used=5", "tank/db"]);
    assert!(err.contains("read-only"), "{err}");
    let err = env.fails(&["set", "colour=blue", "tank/db"]);
    assert!(err.contains("unknown property 'colour'"), "{err}");
    // The refused values changed nothing.
    let out = env.ok(&["get", "-H", "recordsize", "tank/db"]);
    assert!(out.contains("16K"), "{out}");
    env.ok(&["inherit", "recordsize", "tank/db"]);
    assert!(env.ok(&["get", "-H", "recordsize", "tank/db"]).contains("128K\tdefault"));
}

#[test]
fn files_put_into_a_dataset_survive_export_and_import() {
    let env = Env::new();
    env.create_pool();
    let src = env.path("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    let page: Vec<u8> = (0..100_000u32).map(|i| (i % 97) as u8).collect();
    std::fs::write(src.join("sub/data.ibd"), &page).unwrap();
    env.ok(&["ds", "create", "tank/db"]);
    env.ok(&["put", &s(&src), "tank/db"]);
    env.ok(&["pool", "export", "tank"]);
    let err = env.fails(&["pool", "status", "tank"]);
    assert!(err.contains("no such pool 'tank'") && err.contains("import"), "{err}");
    let listing = env.ok(&["pool", "import", "-d", &s(env.dir.path())]);
    assert!(listing.contains("pool: tank") && listing.contains("Exported"), "{listing}");
    env.ok(&["pool", "import", "-d", &s(env.dir.path()), "tank"]);
    let out = Command::new(env!("CARGO_BIN_EXE_tarn"))
        .args(["cat", "tank/db:/src/sub/data.ibd"])
        .env("TARN_CACHE_FILE", env.path("cache.json"))
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(out.stdout, page);
    let used = env.ok(&["get", "-H", "-p", "compressratio", "tank/db"]);
    let ratio: f64 = used.split('\t').nth(2).unwrap().parse().unwrap();
    assert!(ratio > 2.0, "a repetitive file compresses: {used}");
}

#[test]
fn bad_devices_and_arguments_get_one_clear_line() {
    let env = Env::new();
    let small = s(&env.path("small.img"));
    let err = env.fails(&["pool", "create", "--size", "16M", "tank", &small]);
    assert!(err.contains("too small") && err.contains("67108864"), "{err}");
    let err = env.fails(&["pool", "create", "tank", &s(&env.path("missing.img"))]);
    assert!(err.contains("no such device") && err.contains("--size"), "{err}");
    let err = env.fails(&["pool", "create", "--size", "lots", "tank", &small]);
    assert!(err.contains("invalid --size 'lots'"), "{err}");
    let err = env.fails(&["pool", "create", "--size", "128M", "9tank", &s(&env.path("x.img"))]);
    assert!(err.contains("invalid pool or dataset name"), "{err}");
    let err = env.fails(&["pool", "create", "--size", "128M", "tank", "mirror", &s(&env.path("y.img"))]);
    assert!(err.contains("mirror needs at least two devices"), "{err}");

    let img = env.create_pool();
    let err = env.fails(&["pool", "create", "--size", "128M", "other", &img]);
    assert!(err.contains("is part of pool 'tank'") && err.contains("-f"), "{err}");

    let junk = env.path("junk.img");
    std::fs::write(&junk, vec![0x5au8; 70 << 20]).unwrap();
    let out = env.ok(&["pool", "import", "-d", &s(&junk)]);
    assert!(out.contains("no pools available"), "{out}");
    let err = env.fails(&["pool", "import", "-d", &s(&junk), "tank2"]);
    assert!(err.contains("no pool 'tank2' found"), "{err}");
    let err = env.fails(&["ds", "create", "tank/a/b"]);
    assert!(err.contains("'tank/a' does not exist"), "{err}");
    let err = env.fails(&["get", "all", "nopool/x"]);
    assert!(err.contains("no such pool 'nopool'"), "{err}");
    // The pool is unharmed by all of the above.
    assert!(env.ok(&["pool", "status", "tank"]).contains("ONLINE"));
}

/// A pool on a real block device (a loop device here): opened with O_DIRECT, so the host's
/// page cache is not a hidden second cache; data round-trips through export and import.
#[test]
fn a_pool_on_a_block_device() {
    let env = Env::new();
    let img = env.path("loop.img");
    std::fs::write(&img, vec![0u8; 96 << 20]).unwrap();
    let out = Command::new("losetup")
        .args(["--find", "--show", &s(&img)])
        .output()
        .expect("losetup (util-linux) is installed");
    assert!(
        out.status.success(),
        "losetup failed (needs root and loop devices): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
    struct Detach(String);
    impl Drop for Detach {
        fn drop(&mut self) {
            let _ = Command::new("losetup").args(["-d", &self.0]).status();
        }
    }
    let _guard = Detach(dev.clone());
    env.ok(&["pool", "create", "blk", &dev]);
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 241) as u8).collect();
    std::fs::write(src.join("f"), &data).unwrap();
    env.ok(&["put", &s(&src), "blk"]);
    env.ok(&["pool", "export", "blk"]);
    env.ok(&["pool", "import", "-d", &dev, "blk"]);
    let out = env.tarn(&["cat", "blk:/src/f"]);
    assert!(out.status.success());
    assert_eq!(out.stdout, data);
    assert!(env.ok(&["pool", "scrub", "blk"]).contains("0 unrecoverable"));
    env.ok(&["pool", "destroy", "-f", "blk"]);
}

/// The README's promise: exit 1 for a command that failed, 2 for a malformed command
/// line (clap's own rejections and the ones only tarn can see), one line either way
/// for tarn's own messages.
#[test]
fn a_malformed_command_line_exits_2_and_a_failed_command_1() {
    let env = Env::new();
    env.create_pool();
    let code = |args: &[&str]| {
        let out = env.tarn(args);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!err.contains("panicked"), "tarn {args:?} panicked: {err}");
        (out.status.code(), err)
    };
    for malformed in [
        &["pool", "frobnicate"][..],
        &["set", "recordsize=16K"],
        &["set", "recordsize", "tank"],
        &["pool", "create", "--size", "128M", "t2", "mirror", "/nonexistent/a.img"],
        &["pool", "create", "--size", "lots", "t2", "/nonexistent/a.img"],
        &["tune", "tank", "colour=blue"],
        &["mount", "tank", "--also", "other/ds"],
    ] {
        let (status, err) = code(malformed);
        assert_eq!(status, Some(2), "tarn {malformed:?} is malformed: {err}");
        if malformed[1] != "frobnicate" {
            assert_eq!(err.trim_end().lines().count(), 1, "tarn {malformed:?}: one line: {err}");
        }
    }
    for failed in [&["set", "recordsize=3K", "tank"][..], &["pool", "status", "nopool"], &["cat", "tank:/missing"]] {
        let (status, err) = code(failed);
        assert_eq!(status, Some(1), "tarn {failed:?} failed: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "tarn {failed:?}: one line: {err}");
    }
    let (_, err) = code(&["cat", "tank:/missing"]);
    assert!(err.contains("/missing") && err.contains("no such file"), "{err}");
}

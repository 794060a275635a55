//! System integration, as an operator meets it: mount(8) and fstab through the
//! `mount.fuse.tarn` helper, the commands the systemd units run, the Prometheus
//! exporter scraped over HTTP, shell completions and man pages; and two rough edges of
//! issue #10 (defect 11: an image larger than its disk warns; defect 13: an export right
//! after `fusermount3 -u` waits for the daemon instead of failing "in use"; a mounted pool is
//! exported by its daemon).
mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{wait_exit, wait_gone, Env, Mounted};
use tarn_daemon::mounts::is_listed;

/// The repository's root (contrib/ and its units live there).
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repo root")
}

fn tarn_bin() -> &'static str {
    env!("CARGO_BIN_EXE_tarn")
}

/// A command run the way mount(8) runs a helper: no PATH, the caller's other
/// variables (here the test's private pool cache and run directory, and the tarn under
/// test as TARN_BIN).
fn as_mount_runs(env: &Env, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new(program);
    c.env_remove("PATH")
        .env("TARN_BIN", tarn_bin())
        .env("TARN_CACHE_FILE", env.path("pools.json"))
        .env("TARN_RUN_DIR", env.run_dir());
    c
}

fn run(c: &mut Command) -> (bool, String, String) {
    let out = c.output().expect("run");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The atime of `p` in seconds.
fn atime(p: &Path) -> i64 {
    std::fs::metadata(p).expect("stat").atime()
}

/// Sets the atime of `p` far in the past (mtime stays), so any recorded read moves it.
fn age_atime(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).expect("path");
    let times = [libc::timespec { tv_sec: 1000, tv_nsec: 0 }, libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT }];
    // SAFETY: a valid path and a two-element array, as utimensat wants.
    assert_eq!(unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0) }, 0, "utimensat");
}

#[test]
fn the_mount_helper_translates_options_the_way_mount8_calls_it() {
    let env = Env::with_pool("256M");
    let helper = repo().join("contrib/mount.fuse.tarn");
    let mp = env.path("mnt");
    std::fs::create_dir_all(&mp).expect("mkdir");
    let mps = mp.to_str().expect("utf8");

    // -f (fake) and -v: says what it would run, mounts nothing.
    let (ok, _, err) = run(as_mount_runs(&env, &helper).args(["tank/db", mps, "-f", "-v", "-o", "rw,noatime"]));
    assert!(ok && err.contains("mount tank/db") && err.contains("rw,noatime"), "{err}");
    assert!(!is_listed(&mp.canonicalize().expect("mp")), "-f mounted something");

    // An option tarn does not know fails the mount, naming it, and mounts nothing.
    let (ok, _, err) = run(as_mount_runs(&env, &helper).args(["tank/db", mps, "-o", "rw,bogus"]));
    assert!(!ok && err.trim().lines().count() == 1 && err.contains("'bogus'"), "{err}");
    assert!(env.daemon_pid().is_none(), "a refused mount left a daemon");

    // An fstab line's words, as mount(8) hands them over (it keeps _netdev and nofail).
    let (ok, out, err) = run(as_mount_runs(&env, &helper).args(["tank/db", mps, "-o", "rw,noatime,_netdev,nofail"]));
    assert!(ok && out.is_empty() && err.is_empty(), "helper failed: {err}");
    let m = Mounted::adopt(&env, &mp);
    std::fs::write(m.p("f"), b"page").expect("write");
    age_atime(&m.p("f"));
    assert_eq!(std::fs::read(m.p("f")).expect("read"), b"page");
    assert_eq!(atime(&m.p("f")), 1000, "noatime: a read must not move atime");
    m.umount();

    // ro: reads work, every change is refused by the kernel.
    let (ok, _, err) = run(as_mount_runs(&env, &helper).args(["tank/db", mps, "-o", "ro"]));
    assert!(ok, "ro mount failed: {err}");
    let m = Mounted::adopt(&env, &mp);
    assert_eq!(std::fs::read(m.p("f")).expect("read on ro"), b"page");
    let e = std::fs::write(m.p("g"), b"x").expect_err("a write on a ro mount");
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    assert_eq!(atime(&m.p("f")), 1000, "ro: a read must not move atime");
    m.umount();

    // Without noatime, the dataset's atime=on records the read (relatime).
    env.ok(&["mount", "tank/db", mps, "-o", "defaults"]);
    let m = Mounted::adopt(&env, &mp);
    std::fs::read(m.p("f")).expect("read");
    let deadline = Instant::now() + Duration::from_secs(5);
    while atime(&m.p("f")) == 1000 {
        assert!(Instant::now() < deadline, "a read on an atime mount never moved atime");
        std::thread::sleep(Duration::from_millis(50));
    }
    m.umount();
}

/// `mount -t fuse.tarn` and an fstab line, through mount(8) itself and the helper that
/// scripts/setup.sh installs in /sbin.
#[test]
fn mount_t_fuse_tarn_and_an_fstab_line_work() {
    let installed = Path::new("/sbin/mount.fuse.tarn");
    assert!(
        installed.exists(),
        "/sbin/mount.fuse.tarn is not installed: run scripts/setup.sh (scripts/install-system.sh installs it)"
    );
    let env = Env::with_pool("256M");
    let mp = env.path("mnt");
    std::fs::create_dir_all(&mp).expect("mkdir");
    let mps = mp.to_str().expect("utf8");

    let (ok, _, err) =
        run(as_mount_runs(&env, "/usr/bin/mount").args(["-t", "fuse.tarn", "-o", "noatime", "tank/db", mps]));
    assert!(ok, "mount -t fuse.tarn failed: {err}");
    let m = Mounted::adopt(&env, &mp);
    std::fs::write(m.p("via-mount8"), b"1").expect("write");
    let (ok, _, err) = run(Command::new("/usr/bin/umount").arg(mps));
    assert!(ok, "umount: {err}");
    m.gone(); // the daemon committed and exited on its own after umount(8)

    let fstab = env.path("fstab");
    std::fs::write(&fstab, format!("# a test fstab\ntank/db  {mps}  fuse.tarn  defaults,_netdev,noatime  0 0\n"))
        .expect("fstab");
    let (ok, _, err) = run(as_mount_runs(&env, "/usr/bin/mount").args(["--fstab", fstab.to_str().expect("utf8"), mps]));
    assert!(ok, "mount of the fstab line failed: {err}");
    let m = Mounted::adopt(&env, &mp);
    assert_eq!(std::fs::read(m.p("via-mount8")).expect("committed by the first mount"), b"1");
    m.umount();
}

/// The `Exec…=` command lines of a shipped unit, with the installed binary replaced by
/// the tarn under test and `%I` by `instance`.
fn unit_commands(unit: &str, key: &str, instance: &str) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(repo().join("contrib/systemd").join(unit)).expect("unit");
    text.lines()
        .filter_map(|l| l.strip_prefix(&format!("{key}=")))
        .map(|cmd| {
            cmd.split_whitespace()
                .map(|w| w.replace("/usr/local/bin/tarn", tarn_bin()).replace("%I", instance))
                .collect()
        })
        .collect()
}

fn run_unit_command(env: &Env, argv: &[String]) {
    let (ok, _, err) = run(as_mount_runs(env, &argv[0]).args(&argv[1..]));
    assert!(ok, "{argv:?} failed: {err}");
}

#[test]
fn the_systemd_units_verify_and_their_commands_mount_and_commit() {
    // systemd-analyze verify on copies naming the tarn under test (it checks that the
    // command exists); else at least each unit has its sections and an absolute ExecStart.
    let verify_dir = tempfile::tempdir().expect("tempdir");
    for unit in ["tarn-import.service", "tarn-mount@.service", "tarn-exporter.service"] {
        let text = std::fs::read_to_string(repo().join("contrib/systemd").join(unit)).expect("unit");
        assert!(text.contains("[Unit]") && text.contains("[Service]") && text.contains("[Install]"), "{unit}");
        assert!(text.contains("ExecStart=/usr/local/bin/tarn "), "{unit}: ExecStart must name the installed tarn");
        std::fs::write(verify_dir.path().join(unit), text.replace("/usr/local/bin/tarn", tarn_bin())).expect("copy");
    }
    if Path::new("/usr/bin/systemd-analyze").exists() {
        for unit in ["tarn-import.service", "tarn-mount@tank-db.service", "tarn-exporter.service"] {
            if unit.contains("@tank") {
                std::fs::copy(verify_dir.path().join("tarn-mount@.service"), verify_dir.path().join(unit))
                    .expect("instance");
            }
            let (ok, out, err) = run(Command::new("/usr/bin/systemd-analyze")
                .args(["verify", "--man=no", unit])
                .current_dir(verify_dir.path()));
            assert!(ok && !err.contains(unit), "systemd-analyze verify {unit}: {out}{err}");
        }
    }

    let env = Env::with_pool("256M");
    env.ok(&["ds", "create", "tank/logs"]);
    let (db, logs) = (env.path("m/db"), env.path("m/logs"));
    env.ok(&["set", &format!("mountpoint={}", db.display()), "tank/db"]);
    env.ok(&["set", &format!("mountpoint={}", logs.display()), "tank/logs"]);

    // tarn-import.service: boot mounts every dataset with a mountpoint, stop commits.
    for argv in unit_commands("tarn-import.service", "ExecStart", "") {
        run_unit_command(&env, &argv);
    }
    let (db, logs) = (db.canonicalize().expect("db mp"), logs.canonicalize().expect("logs mp"));
    assert!(is_listed(&db) && is_listed(&logs), "both datasets mounted at boot");
    let pid = env.daemon_pid().expect("one daemon");
    std::fs::write(db.join("row"), b"committed at stop").expect("write");
    // A second start (a restart of the unit) leaves a mounted pool alone.
    for argv in unit_commands("tarn-import.service", "ExecStart", "") {
        run_unit_command(&env, &argv);
    }
    assert_eq!(env.daemon_pid(), Some(pid));
    for argv in unit_commands("tarn-import.service", "ExecStop", "") {
        run_unit_command(&env, &argv);
    }
    assert!(wait_gone(pid, Duration::from_secs(5)), "stop returned before the daemon exited");
    assert!(!is_listed(&db) && !is_listed(&logs), "stop unmounts everything");
    assert_eq!(env.ok(&["cat", "tank/db:row"]), "committed at stop");

    // tarn-mount@tank-db.service: one dataset on its mountpoint.
    for argv in unit_commands("tarn-mount@.service", "ExecStart", "tank/db") {
        run_unit_command(&env, &argv);
    }
    assert!(is_listed(&db) && !is_listed(&logs));
    let pid = env.daemon_pid().expect("daemon");
    std::fs::write(db.join("row2"), b"again").expect("write");
    for argv in unit_commands("tarn-mount@.service", "ExecStop", "tank/db") {
        run_unit_command(&env, &argv);
    }
    assert!(wait_gone(pid, Duration::from_secs(5)) && !is_listed(&db));
    assert_eq!(env.ok(&["cat", "tank/db:row2"]), "again");
}

/// A plain HTTP/1.0 GET: (status line, body).
fn http_get(addr: &str, path: &str) -> (String, String) {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").expect("request");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("response");
    let (head, body) = text.split_once("\r\n\r\n").expect("headers end");
    (head.lines().next().unwrap_or_default().to_string(), body.to_string())
}

#[test]
fn the_exporter_serves_every_counter_of_every_pool_over_http() {
    let env = Env::with_pool("256M");
    let img = env.path("other.img");
    env.ok(&["pool", "create", "other", img.to_str().expect("utf8"), "--size", "128M"]);
    let m = env.mount("mnt", &[]);
    let mut f = std::fs::File::create(m.p("redo")).expect("create");
    for i in 0..5u8 {
        f.write_all(&[i; 4096]).expect("write");
        f.sync_data().expect("fsync");
    }
    drop(f);

    let err = env.fails(&["exporter", "--listen", "0.0.0.0:0"]);
    assert!(err.contains("--allow-remote"), "{err}");

    let mut child = Command::new(tarn_bin())
        .args(["exporter", "--listen", "127.0.0.1:0"])
        .env("TARN_CACHE_FILE", env.path("pools.json"))
        .env("TARN_RUN_DIR", env.run_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("exporter");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("first line");
    let addr =
        line.trim().trim_start_matches("tarn exporter: serving http://").trim_end_matches("/metrics").to_string();

    // The mounted pool's daemon publishes once a second: wait for the fsyncs to show.
    let deadline = Instant::now() + Duration::from_secs(15);
    let body = loop {
        let (status, body) = http_get(&addr, "/metrics");
        assert!(status.contains("200"), "{status}");
        let commits = body
            .lines()
            .find_map(|l| l.strip_prefix("tarn_zil_commits{pool=\"tank\"} "))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        if commits >= 5 || Instant::now() > deadline {
            break body;
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    for pool in ["tank", "other"] {
        assert!(body.contains(&format!("tarn_pool_stats_ok{{pool=\"{pool}\"}} 1")), "{pool}: {body}");
        assert!(body.contains(&format!("tarn_arc_max{{pool=\"{pool}\"}} ")), "{pool}: {body}");
    }
    assert!(body.contains("tarn_zil_commits{pool=\"tank\"} "), "{body}");
    assert!(body.contains("# HELP tarn_arc_hits ") && body.contains("# TYPE tarn_arc_hits counter"), "{body}");
    assert!(body.contains("# TYPE tarn_space_datasets_used_bytes gauge"), "{body}");
    // Every counter `tarn stats` shows is there, for the mounted pool.
    let stats: serde_json::Value = serde_json::from_str(&env.ok(&["stats", "all", "tank", "--json"])).expect("json");
    for (group, counters) in stats.as_object().expect("groups") {
        for name in counters.as_object().expect("counters").keys() {
            let family = format!("tarn_{group}_{name}");
            assert!(body.contains(&format!("# TYPE {family} ")), "{family} missing");
            assert!(body.contains(&format!("{family}{{pool=\"tank\"}} ")), "{family} sample missing");
        }
    }
    let (status, _) = http_get(&addr, "/nothing");
    assert!(status.contains("404"), "{status}");
    // SAFETY: stopping the exporter we started, by its pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(wait_exit(&mut child, Duration::from_secs(10)), "exporter did not stop");
    m.umount();
}

#[test]
fn completions_and_man_pages_cover_every_command() {
    let env = Env { dir: tempfile::tempdir().expect("tempdir") };
    let script = env.path("tarn.bash");
    std::fs::write(&script, env.ok(&["completions", "bash"])).expect("script");
    // Ask bash itself what it offers after `tarn ` and `tarn pool `.
    let offered = |words: &str| -> String {
        let all: Vec<&str> = words.split(' ').collect();
        let (cword, prev) = (all.len() - 1, all[all.len() - 2]);
        let program = format!(
            "source {}; COMP_WORDS=({words}); COMP_CWORD={cword}; COMP_LINE='{words}'; COMP_POINT=${{#COMP_LINE}}; _tarn tarn '' {prev}; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            script.display()
        );
        let (ok, out, err) = run(Command::new("bash").args(["-c", &program]));
        assert!(ok, "bash: {err}");
        out
    };
    let top = offered("tarn ''");
    for cmd in ["pool", "ds", "set", "get", "mount", "umount", "stats", "exporter", "completions", "man"] {
        assert!(top.lines().any(|l| l == cmd), "`tarn <TAB>` does not offer {cmd}: {top}");
    }
    let pool = offered("tarn pool ''");
    for cmd in ["create", "import", "export", "status", "list", "scrub", "destroy"] {
        assert!(pool.lines().any(|l| l == cmd), "`tarn pool <TAB>` does not offer {cmd}: {pool}");
    }
    for shell in ["zsh", "fish"] {
        assert!(env.ok(&["completions", shell]).contains("exporter"), "{shell}");
    }

    let man = env.path("man");
    env.ok(&["man", "--dir", man.to_str().expect("utf8")]);
    for page in ["tarn.1", "tarn-pool.1", "tarn-pool-create.1", "tarn-mount.1", "tarn-exporter.1", "tarn-completions.1"]
    {
        let text = std::fs::read_to_string(man.join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(text.starts_with(".ie") || text.contains(".TH"), "{page} is not a man page");
    }
    assert!(env.ok(&["man"]).contains(".TH tarn 1"), "tarn man prints tarn(1)");
}

/// Unmounts a tmpfs the test mounted, even if the test fails.
struct Tmpfs(PathBuf);

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = tarn_daemon::mounts::umount(&self.0, libc::MNT_DETACH);
    }
}

#[test]
fn an_image_larger_than_its_disk_warns_with_both_sizes() {
    let env = Env { dir: tempfile::tempdir().expect("tempdir") };
    let small = env.path("small");
    std::fs::create_dir_all(&small).expect("mkdir");
    let (ok, _, err) =
        run(Command::new("/usr/bin/mount").args(["-t", "tmpfs", "-o", "size=128M", "tmpfs"]).arg(&small));
    assert!(ok, "mount tmpfs (the test needs root): {err}");
    let _guard = Tmpfs(small.clone());

    let img = small.join("d0.img");
    let out = env.tarn(&["pool", "create", "big", img.to_str().expect("utf8"), "--size", "1G"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "a sparse image larger than the disk is allowed: {err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.starts_with("tarn: warning: ") && err.contains("1G") && err.contains("128M free"), "{err}");
    env.ok(&["pool", "destroy", "-f", "big"]);

    let out = env.tarn(&["pool", "create", "fits", small.join("d1.img").to_str().expect("utf8"), "--size", "64M"]);
    assert!(out.status.success() && out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    env.ok(&["pool", "destroy", "-f", "fits"]);
}

/// Writes `mib` MiB of a known pattern to `path` without fsync: the daemon's final
/// commit after an unmount has all of it to write.
fn write_unsynced(path: &Path, mib: usize) {
    let mut f = std::fs::File::create(path).expect("create");
    let chunk: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
    for _ in 0..mib {
        f.write_all(&chunk).expect("write");
    }
}

/// `fusermount3 -u`, again while the kernel still says busy: a file closed a moment ago
/// can still be held by the kernel's asynchronous release on a loaded machine (an
/// administrator retries the same way).
fn fusermount_u(mp: &Path) {
    let mut tries = 0;
    loop {
        let (ok, _, err) = run(Command::new("fusermount3").arg("-u").arg(mp));
        if ok {
            return;
        }
        tries += 1;
        assert!(err.contains("busy") && tries < 25, "fusermount3 -u: {err}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn export_and_destroy_right_after_fusermount_wait_for_the_daemon() {
    let env = Env::with_pool("512M");
    let m = env.mount("mnt", &[]);
    write_unsynced(&m.p("big"), 96);
    fusermount_u(&m.mp);
    // At once: the daemon is still committing the 96 MiB.
    let out = env.tarn(&["pool", "export", "tank"]);
    assert!(out.status.success(), "export after fusermount3 -u: {}", String::from_utf8_lossy(&out.stderr));
    m.gone();
    env.ok(&["pool", "import", "-d", env.dir.path().to_str().expect("utf8"), "tank"]);
    let out = env.tarn(&["cat", "tank/db:big"]);
    assert_eq!(out.stdout.len(), 96 << 20, "everything written before the unmount was committed");
    assert!(out.stdout.chunks(1 << 20).all(|c| c.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8)));

    let m = env.mount("mnt", &[]);
    write_unsynced(&m.p("big2"), 96);
    fusermount_u(&m.mp);
    let out = env.tarn(&["pool", "destroy", "-f", "tank"]);
    assert!(out.status.success(), "destroy after fusermount3 -u: {}", String::from_utf8_lossy(&out.stderr));
    m.gone();
    let out = env.ok(&["pool", "import", "-d", env.dir.path().to_str().expect("utf8")]);
    assert!(out.contains("state: Destroyed"), "the pool was destroyed: {out}");
}

#[test]
fn a_mounted_pool_is_exported_by_its_daemon_at_once() {
    // A live mount is no longer "busy": the daemon that holds the pool unmounts it,
    // exports and exits (crates/cli/tests/control.rs covers the refusals).
    let env = Env::with_pool("256M");
    let m = env.mount("mnt", &[]);
    let started = Instant::now();
    env.ok(&["pool", "export", "tank"]);
    assert!(started.elapsed() < Duration::from_secs(10), "served, not waited out");
    m.gone();
    assert!(!tarn_daemon::mounts::is_listed(&env.path("mnt").canonicalize().expect("mountpoint")));
}

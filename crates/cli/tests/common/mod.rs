//! Test harness for `tarn mount`: a private pool cache and run directory in a temp dir,
//! the `tarn` binary, a guard that unmounts and stops its own daemon (by pid) even
//! when a test fails, the acknowledged-commits client of the database crash tests, and
//! the incompressible pages and bytes the tests write.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub struct Env {
    pub dir: tempfile::TempDir,
}

impl Env {
    /// A fresh environment with pool `tank` (one 512 MiB image) and dataset `tank/db`.
    /// Fails loudly if FUSE is not usable: these tests must not silently skip.
    pub fn with_pool(size: &str) -> Env {
        assert!(
            Path::new("/dev/fuse").exists(),
            "FUSE is unavailable (/dev/fuse missing): the mount tests need it (modprobe fuse; run as root)"
        );
        let env = Env { dir: tempfile::tempdir().expect("tempdir") };
        let img = env.path("d0.img");
        env.ok(&["pool", "create", "tank", img.to_str().expect("utf8"), "--size", size]);
        env.ok(&["ds", "create", "tank/db"]);
        env
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn run_dir(&self) -> PathBuf {
        self.path("run")
    }

    pub fn tarn(&self, args: &[&str]) -> Output {
        self.tarn_with_env(args, &[])
    }

    /// Runs tarn with `vars` set in its environment besides the harness's own. Every
    /// `tarn mount` of a dataset gets `--transport T` when TARN_TEST_TRANSPORT=T, so a
    /// suite runs on either FUSE transport.
    pub fn tarn_with_env(&self, args: &[&str], vars: &[(&str, &str)]) -> Output {
        let mut args = args.to_vec();
        let transport = test_transport();
        if let (Some(t), Some(&"mount")) = (transport.as_deref(), args.first()) {
            if !args.contains(&"-a") && !args.contains(&"--transport") {
                args.extend(["--transport", t]);
            }
        }
        Command::new(env!("CARGO_BIN_EXE_tarn"))
            .args(&args)
            .env("TARN_CACHE_FILE", self.path("pools.json"))
            .env("TARN_RUN_DIR", self.run_dir())
            .envs(vars.iter().copied())
            .output()
            .expect("run tarn")
    }

    /// Runs tarn and asserts success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.tarn(args);
        assert!(out.status.success(), "tarn {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs tarn, asserts failure with exactly one line on stderr; returns that line.
    pub fn fails(&self, args: &[&str]) -> String {
        let out = self.tarn(args);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "tarn {args:?} should fail; stdout: {}", String::from_utf8_lossy(&out.stdout));
        assert_eq!(err.trim_end().lines().count(), 1, "one clear line expected, got: {err}");
        err
    }

    /// Mounts `tank/db` on a fresh (or given, empty) directory `name`.
    pub fn mount(&self, name: &str, extra: &[&str]) -> Mounted<'_> {
        self.mount_with_env(name, extra, &[])
    }

    /// Mounts `tank/db` on `name` with a daemon started with `vars` in its environment.
    pub fn mount_with_env(&self, name: &str, extra: &[&str], vars: &[(&str, &str)]) -> Mounted<'_> {
        let mp = self.path(name);
        std::fs::create_dir_all(&mp).expect("mkdir mountpoint");
        let mut args = vec!["mount", "tank/db", mp.to_str().expect("utf8")];
        args.extend_from_slice(extra);
        let out = self.tarn_with_env(&args, vars);
        assert!(out.status.success(), "tarn mount failed: {}", String::from_utf8_lossy(&out.stderr));
        assert!(out.stdout.is_empty() && out.stderr.is_empty(), "mount must print nothing on success");
        let pid = self.daemon_pid().expect("mount record with the daemon's pid");
        Mounted { env: self, mp: mp.canonicalize().expect("canonical mountpoint"), pid, done: false }
    }

    /// The pid in the pool's mount record.
    pub fn daemon_pid(&self) -> Option<u32> {
        let text = std::fs::read_to_string(self.run_dir().join("tank.mount")).ok()?;
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        v["pid"].as_u64().map(|p| p as u32)
    }
}

/// The FUSE transport the suites run on (TARN_TEST_TRANSPORT: dev or uring; unset:
/// the default, dev). For uring the fuse module's `enable_uring` is turned on here first,
/// so that `tarn mount` has nothing to say on stderr.
pub fn test_transport() -> Option<String> {
    let t = std::env::var("TARN_TEST_TRANSPORT").ok().filter(|t| !t.is_empty())?;
    assert!(t == "dev" || t == "uring", "TARN_TEST_TRANSPORT={t}: dev or uring");
    if t == "uring" {
        enable_uring();
    }
    Some(t)
}

/// Turns on FUSE over io_uring in the kernel (tests run as root); fails loudly where it
/// cannot, so a uring run never silently tests /dev/fuse.
pub fn enable_uring() {
    let knob = "/sys/module/fuse/parameters/enable_uring";
    if std::fs::read_to_string(knob).is_ok_and(|v| v.trim() == "Y") {
        return;
    }
    std::fs::write(knob, b"1").unwrap_or_else(|e| panic!("cannot enable FUSE over io_uring ({knob}): {e}"));
}

pub struct Mounted<'a> {
    pub env: &'a Env,
    pub mp: PathBuf,
    pub pid: u32,
    done: bool,
}

impl<'a> Mounted<'a> {
    /// Guards a mount made some other way (e.g. from the mountpoint property).
    pub fn adopt(env: &'a Env, mp: &Path) -> Mounted<'a> {
        let pid = env.daemon_pid().expect("mount record with the daemon's pid");
        Mounted { env, mp: mp.canonicalize().expect("canonical mountpoint"), pid, done: false }
    }

    /// The daemon is already gone (the test stopped it): nothing to clean.
    pub fn gone(mut self) {
        assert!(wait_gone(self.pid, Duration::from_secs(30)), "daemon {} still running", self.pid);
        self.done = true;
    }

    pub fn p(&self, rel: &str) -> PathBuf {
        self.mp.join(rel)
    }

    /// Clean unmount through `tarn umount`; the daemon must be gone afterwards.
    pub fn umount(mut self) {
        self.env.ok(&["umount", self.mp.to_str().expect("utf8")]);
        assert!(wait_gone(self.pid, Duration::from_secs(30)), "daemon {} still running after umount", self.pid);
        self.done = true;
    }

    /// kill -9 of the daemon (a crash), then clearing the dead mount with `tarn umount`.
    pub fn crash(mut self) {
        // SAFETY: signalling our own daemon by its pid.
        unsafe { libc::kill(self.pid as i32, libc::SIGKILL) };
        assert!(wait_gone(self.pid, Duration::from_secs(10)), "daemon survived SIGKILL");
        self.env.ok(&["umount", self.mp.to_str().expect("utf8")]);
        self.done = true;
    }
}

impl Drop for Mounted<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // A failed test: stop our own daemon by pid and detach its mount.
        // SAFETY: signalling our own daemon.
        unsafe { libc::kill(self.pid as i32, libc::SIGKILL) };
        wait_gone(self.pid, Duration::from_secs(10));
        let _ = tarn_daemon::umount(&self.mp, libc::MNT_DETACH);
    }
}

/// Detaches a second mount of the daemon if a test fails before its clean `tarn umount`
/// (the daemon itself is stopped by the first mount's guard).
pub struct DetachOnDrop(pub PathBuf);

impl Drop for DetachOnDrop {
    fn drop(&mut self) {
        let _ = tarn_daemon::umount(&self.0, libc::MNT_DETACH);
    }
}

/// Runs a client command: its trimmed stdout if it succeeded, else its trimmed stderr
/// (or why it could not run).
pub fn text_of(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// Waits up to `timeout` for our own `child` to exit (reaping it); true if it did.
pub fn wait_exit(child: &mut Child, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while child.try_wait().ok().flatten().is_none() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    true
}

/// Readers of `file` with O_DIRECT (a FUSE request per 16 KiB), killed with SIGKILL
/// mid-read, three times: each must end at once — the kernel aborts or interrupts the
/// request it waits on, whichever transport carries it — and the file must still read
/// back whole afterwards (the mount went on serving).
pub fn killed_readers_end_at_once(file: &Path) {
    let len = std::fs::metadata(file).expect("stat the file to read").len();
    for _ in 0..3 {
        let mut reader = Command::new("dd")
            .args([&format!("if={}", file.display()), "of=/dev/null", "bs=16k", "iflag=direct"])
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn reader");
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            reader.try_wait().expect("poll the reader").is_none(),
            "the reader finished before it could be killed mid-read: the file is too small"
        );
        reader.kill().expect("kill -9 the reader");
        assert!(wait_exit(&mut reader, Duration::from_secs(10)), "a killed reader hung");
    }
    assert_eq!(std::fs::read(file).expect("read after the killed readers").len() as u64, len);
}

/// True once `pid` has exited (or is a zombie nobody reaps).
pub fn wait_gone(pid: u32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return true,
            Ok(s) if s.rsplit_once(')').is_some_and(|(_, t)| t.trim_start().starts_with('Z')) => return true,
            Ok(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    false
}

/// `len` bytes of page `n` as version `v` wrote it: incompressible (a xorshift stream, so
/// lz4 cannot shrink it: each page is a record of its own size on the device, and a file
/// of them cannot sit in less ARC than its size), different per page and per version in
/// every 4 KiB.
pub fn page_v(n: u64, v: u64, len: usize) -> Vec<u8> {
    let mut x = (n.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ v.wrapping_mul(0xD1B5_4A32_D192_ED03)) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// `len` incompressible bytes, distinct per `seed` (the stream of `page_v(seed, 0, len)`).
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    page_v(seed, 0, len)
}

/// A database client committing numbered rows one at a time (1, 2, 3, …) through
/// `insert`, until stopped or until a commit fails (the server died). Every number it saw
/// acknowledged must survive a crash.
pub struct Ledger {
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicU64>,
    writer: JoinHandle<()>,
}

impl Ledger {
    /// Starts the client; `insert(n)` commits row `n` and says whether it was acknowledged.
    pub fn start(insert: impl Fn(u64) -> Result<String, String> + Send + 'static) -> Ledger {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicU64::new(0));
        let (stop_w, acked_w) = (stop.clone(), acked.clone());
        let writer = std::thread::spawn(move || {
            let mut n = 1u64;
            while !stop_w.load(Ordering::Relaxed) && insert(n).is_ok() {
                acked_w.store(n, Ordering::Relaxed);
                n += 1;
            }
        });
        Ledger { stop, acked, writer }
    }

    /// The highest number whose commit the client has seen acknowledged so far.
    pub fn acked(&self) -> u64 {
        self.acked.load(Ordering::Relaxed)
    }

    /// Stops the client after its current commit; returns the highest acknowledged number.
    pub fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.writer.join();
        self.acked.load(Ordering::Relaxed)
    }

    /// Lets the client write for `after`, then runs `crash` (kill -9 of the database and
    /// of the tarn daemon) while it is still writing. Returns the highest number whose
    /// commit was acknowledged; fails if nothing was committed before the crash.
    pub fn crash_after(self, after: Duration, crash: impl FnOnce()) -> u64 {
        std::thread::sleep(after);
        let seen = self.acked.load(Ordering::Relaxed);
        crash();
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.writer.join();
        assert!(seen > 0, "the ledger client committed nothing before the crash");
        self.acked.load(Ordering::Relaxed)
    }
}

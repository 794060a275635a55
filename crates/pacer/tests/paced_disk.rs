//! End-to-end: the real `tarn-pacer` binary under a loop device and ext4.
//!
//! Owns: proof that the pacing holds for O_DIRECT writes, buffered writes + fsync and
//! cold reads, measured both at the pacer (its stats file) and at the loop device
//! (/proc/diskstats), and that an unthrottled disk is clearly faster. Promises: every
//! mount, loop device and pacer process it starts is torn down by its own name or pid,
//! even when an assertion fails (Drop guard). Must never: pass silently when FUSE, loop
//! devices or root are missing — it fails and says what is missing.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use tarn_daemon::mounts::is_listed;

const BIN: &str = env!("CARGO_BIN_EXE_tarn-pacer");

const IOPS: u64 = 200;
const MAX_IO: u64 = 16 << 10;
const BANDWIDTH: u64 = 4 << 20;
const TOLERANCE: f64 = 1.3;
/// Burst allowed by the pacer (1/10 s of each rate) plus one oversized request (1 MiB,
/// the largest the FUSE mount accepts) that may be admitted into debt.
const BURST_UNITS: f64 = IOPS as f64 / 10.0 + ((1u64 << 20) / MAX_IO) as f64;
const BURST_BYTES: f64 = BANDWIDTH as f64 / 10.0 + (1u64 << 20) as f64;

// ---------------------------------------------------------------- small helpers

fn run(cmd: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(cmd).args(args).output().map_err(|e| format!("cannot run {cmd}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(format!(
            "{cmd} {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        ))
    }
}

fn must(cmd: &str, args: &[&str]) -> String {
    run(cmd, args).unwrap_or_else(|e| panic!("{e}"))
}

/// The environment this test needs; missing pieces are failures, not skips.
fn require_environment() {
    // SAFETY: geteuid cannot fail.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test needs root (loop devices, mount)");
    assert!(Path::new("/dev/fuse").exists(), "/dev/fuse is missing: load the fuse module");
    for tool in ["losetup", "mkfs.ext4", "mount", "umount"] {
        assert!(
            run("sh", &["-c", &format!("command -v {tool}")]).is_ok(),
            "{tool} is missing: install util-linux / e2fsprogs"
        );
    }
    assert!(Path::new("/dev/loop-control").exists(), "/dev/loop-control is missing: load the loop module");
}

/// Our pacer daemon is still running as `pid` (not exited, and the pid not reused by
/// another program).
fn process_alive(pid: i32) -> bool {
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    if !String::from_utf8_lossy(&cmdline).contains("tarn-pacer") {
        return false;
    }
    // A zombie has exited; only its parent can reap it.
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'),
        Err(_) => false,
    }
}

/// Counters from the pacer's stats file.
#[derive(Clone, Copy, Debug, Default)]
struct PacerStats {
    reads: u64,
    writes: u64,
    flushes: u64,
    read_bytes: u64,
    write_bytes: u64,
    io_units: u64,
    throttled_ns: u64,
    elapsed_ns: u64,
}

fn json_field(json: &str, key: &str) -> u64 {
    let tag = format!("\"{key}\":");
    let start = json.find(&tag).unwrap_or_else(|| panic!("{key} missing in {json}")) + tag.len();
    let digits: String = json[start..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or_else(|_| panic!("{key} not a number in {json}"))
}

fn parse_stats(json: &str) -> PacerStats {
    PacerStats {
        reads: json_field(json, "reads"),
        writes: json_field(json, "writes"),
        flushes: json_field(json, "flushes"),
        read_bytes: json_field(json, "read_bytes"),
        write_bytes: json_field(json, "write_bytes"),
        io_units: json_field(json, "io_units"),
        throttled_ns: json_field(json, "throttled_ns"),
        elapsed_ns: json_field(json, "elapsed_ns"),
    }
}

/// Loop-device counters from /proc/diskstats.
#[derive(Clone, Copy, Debug, Default)]
struct DiskStats {
    ios: u64,
    bytes: u64,
}

fn diskstats(dev: &str) -> DiskStats {
    let name = dev.trim_start_matches("/dev/");
    let text = fs::read_to_string("/proc/diskstats").expect("read /proc/diskstats");
    let line = text
        .lines()
        .find(|l| l.split_whitespace().nth(2) == Some(name))
        .unwrap_or_else(|| panic!("{name} not in /proc/diskstats"));
    let f: Vec<u64> = line.split_whitespace().skip(3).map(|x| x.parse().unwrap_or(0)).collect();
    // reads completed, reads merged, sectors read, ms, writes completed, merged, sectors written
    DiskStats { ios: f[0] + f[4], bytes: (f[2] + f[6]) * 512 }
}

// ---------------------------------------------------------------- the rig

/// One pacer + loop device + ext4 mount; Drop tears down exactly what it set up.
struct Rig {
    dir: tempfile::TempDir,
    pid: Option<i32>,
    loop_dev: Option<String>,
    fs_mounted: bool,
}

impl Rig {
    fn fuse_dir(&self) -> PathBuf {
        self.dir.path().join("mnt")
    }
    fn fs_dir(&self) -> PathBuf {
        self.dir.path().join("fs")
    }
    fn stats_path(&self) -> PathBuf {
        self.dir.path().join("stats.json")
    }

    /// mkfs on the plain image (fast, unpaced), then serve it paced and mount ext4.
    fn start(limits: &[&str]) -> Rig {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut rig = Rig { dir, pid: None, loop_dev: None, fs_mounted: false };
        fs::create_dir(rig.fuse_dir()).expect("mkdir mnt");
        fs::create_dir(rig.fs_dir()).expect("mkdir fs");
        let image = rig.dir.path().join("backing.img");
        File::create(&image).and_then(|f| f.set_len(256 << 20)).expect("create image");
        let image_s = image.to_string_lossy().into_owned();
        must("mkfs.ext4", &["-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0,nodiscard", &image_s]);

        let mnt = rig.fuse_dir().to_string_lossy().into_owned();
        let stats = rig.stats_path().to_string_lossy().into_owned();
        let mut args = vec!["--backing", &image_s, "--size", "256M", "--mountpoint", &mnt, "--stats", &stats];
        args.extend_from_slice(limits);
        let out = Command::new(BIN).args(&args).output().expect("run tarn-pacer");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "tarn-pacer failed: {}", String::from_utf8_lossy(&out.stderr));
        let pid = stdout
            .lines()
            .last()
            .and_then(|l| l.strip_prefix("pid="))
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("no pid=N line in {stdout:?}"));
        rig.pid = Some(pid);
        assert!(is_listed(&rig.fuse_dir()), "parent exited before the FUSE mount was there");

        let disk = rig.fuse_dir().join("disk");
        let meta = fs::metadata(&disk).expect("stat disk");
        assert_eq!(meta.len(), 256 << 20);
        assert_eq!(std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777, 0o600);

        let dev = must("losetup", &["--find", "--show", &disk.to_string_lossy()]);
        rig.loop_dev = Some(dev.clone());
        must("mount", &["-t", "ext4", &dev, &rig.fs_dir().to_string_lossy()]);
        rig.fs_mounted = true;
        rig
    }

    fn dev(&self) -> &str {
        self.loop_dev.as_deref().expect("loop device")
    }

    /// Wait until the pacer rewrites its stats file, so the snapshot is fresh.
    fn fresh_stats(&self) -> PacerStats {
        let read = || fs::read_to_string(self.stats_path()).map(|j| parse_stats(&j)).ok();
        let first = read().map(|s| s.elapsed_ns);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Some(s) = read() {
                if Some(s.elapsed_ns) != first {
                    return s;
                }
            }
            thread::sleep(Duration::from_millis(5));
        }
        panic!("stats file {} not rewritten within 5 s", self.stats_path().display());
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        if self.fs_mounted {
            let fs_dir = self.fs_dir().to_string_lossy().into_owned();
            if run("umount", &[&fs_dir]).is_err() {
                let _ = run("umount", &["-l", &fs_dir]);
            }
        }
        if let Some(dev) = self.loop_dev.take() {
            let _ = run("losetup", &["-d", &dev]);
        }
        if let Some(pid) = self.pid.take().filter(|pid| process_alive(*pid)) {
            // SAFETY: signalling the pacer this rig started, by its own pid.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(10);
            while process_alive(pid) && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(20));
            }
            if process_alive(pid) {
                // SAFETY: as above.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        let fuse_dir = self.fuse_dir();
        if is_listed(&fuse_dir) {
            let _ = run("umount", &["-l", &fuse_dir.to_string_lossy()]);
        }
    }
}

// ---------------------------------------------------------------- workloads

/// `threads` writers doing O_DIRECT 4 KiB writes at random offsets of `path` for `secs`.
fn direct_random_writes(path: &Path, threads: usize, secs: f64) -> u64 {
    let file_len: u64 = 16 << 20;
    let f = File::create(path).expect("create direct file");
    // SAFETY: fd is valid; preallocate so writes do not allocate blocks.
    let rc = unsafe { libc::posix_fallocate(std::os::fd::AsRawFd::as_raw_fd(&f), 0, file_len as i64) };
    assert_eq!(rc, 0, "posix_fallocate");
    f.sync_all().expect("sync preallocated file");
    drop(f);
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let path = path.to_path_buf();
            thread::spawn(move || {
                let f = OpenOptions::new().write(true).custom_flags(libc::O_DIRECT).open(&path).expect("open O_DIRECT");
                let mut raw = vec![0xa5u8; 8192];
                let skew = raw.as_ptr().align_offset(4096);
                let buf = &mut raw[skew..skew + 4096];
                let mut seed = 0x2545f4914f6cdd1du64 ^ (t as u64 + 1);
                let mut ops = 0u64;
                while Instant::now() < end {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let off = (seed % (file_len / 4096)) * 4096;
                    f.write_all_at(buf, off).expect("O_DIRECT write");
                    ops += 1;
                }
                ops
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().expect("writer thread")).sum()
}

fn buffered_write_and_sync(path: &Path, bytes: usize) {
    let mut f = File::create(path).expect("create buffered file");
    let chunk = vec![0x3cu8; 1 << 20];
    for _ in 0..bytes / chunk.len() {
        f.write_all(&chunk).expect("buffered write");
    }
    f.sync_all().expect("fsync");
}

fn drop_caches() {
    fs::write("/proc/sys/vm/drop_caches", "3").expect("drop caches (needs root)");
}

fn read_all(path: &Path) -> usize {
    let mut buf = Vec::new();
    File::open(path).and_then(|mut f| f.read_to_end(&mut buf)).expect("read back");
    buf.len()
}

// ---------------------------------------------------------------- checks

struct Phase {
    name: &'static str,
    secs: f64,
    pacer: (PacerStats, PacerStats),
    disk: (DiskStats, DiskStats),
}

impl Phase {
    /// Run `work` with counters taken around it.
    fn measure(rig: &Rig, name: &'static str, work: impl FnOnce()) -> Phase {
        let p0 = rig.fresh_stats();
        let d0 = diskstats(rig.dev());
        let t0 = Instant::now();
        work();
        let secs = t0.elapsed().as_secs_f64();
        let d1 = diskstats(rig.dev());
        let p1 = rig.fresh_stats();
        Phase { name, secs, pacer: (p0, p1), disk: (d0, d1) }
    }

    fn pacer_window(&self) -> f64 {
        (self.pacer.1.elapsed_ns - self.pacer.0.elapsed_ns) as f64 / 1e9
    }

    /// Limits hold at the pacer (over the snapshot window) and at the loop device
    /// (over the exact workload window).
    fn assert_limits(&self) {
        let (p0, p1) = self.pacer;
        let win = self.pacer_window();
        let units = (p1.io_units - p0.io_units) as f64;
        let bytes = ((p1.read_bytes + p1.write_bytes) - (p0.read_bytes + p0.write_bytes)) as f64;
        let max_units = IOPS as f64 * win * TOLERANCE + BURST_UNITS;
        let max_bytes = BANDWIDTH as f64 * win * TOLERANCE + BURST_BYTES;
        let dios = (self.disk.1.ios - self.disk.0.ios) as f64;
        let dbytes = (self.disk.1.bytes - self.disk.0.bytes) as f64;
        let max_dios = IOPS as f64 * self.secs * TOLERANCE + BURST_UNITS;
        let max_dbytes = BANDWIDTH as f64 * self.secs * TOLERANCE + BURST_BYTES;
        println!(
            "{:>16}: pacer {:.0} io/s ({:.2} of limit), {:.2} MiB/s ({:.2} of limit) over {:.2}s; \
             loop {:.0} io/s ({:.2}), {:.2} MiB/s ({:.2}) over {:.2}s; reqs r{} w{}",
            self.name,
            units / win,
            units / win / IOPS as f64,
            bytes / win / (1 << 20) as f64,
            bytes / win / BANDWIDTH as f64,
            win,
            dios / self.secs,
            dios / self.secs / IOPS as f64,
            dbytes / self.secs / (1 << 20) as f64,
            dbytes / self.secs / BANDWIDTH as f64,
            self.secs,
            p1.reads - p0.reads,
            p1.writes - p0.writes,
        );
        assert!(units <= max_units, "{}: {units} units > {max_units:.0}", self.name);
        assert!(bytes <= max_bytes, "{}: {bytes} bytes > {max_bytes:.0}", self.name);
        assert!(dios <= max_dios, "{}: loop {dios} I/Os > {max_dios:.0}", self.name);
        assert!(dbytes <= max_dbytes, "{}: loop {dbytes} bytes > {max_dbytes:.0}", self.name);
        // The I/O really went through the pacer, and the pacer really held it back.
        assert!(units > 0.0, "{}: no I/O reached the pacer", self.name);
        assert!(p1.throttled_ns > p0.throttled_ns, "{}: pacer never throttled", self.name);
    }
}

#[test]
fn pacing_holds_under_ext4_for_direct_buffered_and_cold_reads() {
    require_environment();
    let data: usize = 8 << 20;

    let rig = Rig::start(&["--iops", "200", "--max-io", "16K", "--bandwidth", "4M"]);
    let direct = rig.fs_dir().join("direct");
    let mut throttled_ops = 0;
    let a = Phase::measure(&rig, "O_DIRECT 4K rand", || {
        throttled_ops = direct_random_writes(&direct, 4, 2.5);
    });
    a.assert_limits();
    let throttled_iops = throttled_ops as f64 / a.secs;
    assert!(throttled_iops <= IOPS as f64 * TOLERANCE + BURST_UNITS / a.secs);

    let buffered = rig.fs_dir().join("buffered");
    let b = Phase::measure(&rig, "buffered + fsync", || buffered_write_and_sync(&buffered, data));
    b.assert_limits();
    assert!(b.pacer.1.flushes > b.pacer.0.flushes, "fsync never reached the pacer");
    let written = b.pacer.1.write_bytes - b.pacer.0.write_bytes;
    assert!(written >= data as u64, "only {written} of {data} buffered bytes reached the pacer");

    drop_caches();
    let c = Phase::measure(&rig, "cold reads", || assert_eq!(read_all(&buffered), data));
    c.assert_limits();
    let read = c.pacer.1.read_bytes - c.pacer.0.read_bytes;
    assert!(read >= data as u64, "only {read} of {data} bytes read reached the pacer");
    drop(rig);

    let fast = Rig::start(&[]);
    let direct = fast.fs_dir().join("direct");
    let t0 = Instant::now();
    let fast_ops = direct_random_writes(&direct, 4, 1.5);
    let fast_iops = fast_ops as f64 / t0.elapsed().as_secs_f64();
    println!(
        "unthrottled O_DIRECT 4K: {fast_iops:.0} io/s vs throttled {throttled_iops:.0} io/s ({:.1}x)",
        fast_iops / throttled_iops
    );
    assert!(fast_iops > throttled_iops * 3.0, "unthrottled disk is not clearly faster");
}

/// A pacer started with `--foreground` by this test; dropping it stops the pacer (by its
/// pid, while it is still this test's unreaped child) and lazily unmounts what is left.
struct Foreground(std::process::Child, PathBuf);

impl Drop for Foreground {
    fn drop(&mut self) {
        // Only signal while it is still our unreaped child: its pid is then ours.
        if matches!(self.0.try_wait(), Ok(None)) {
            // SAFETY: signalling the child we started.
            unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline && matches!(self.0.try_wait(), Ok(None)) {
                thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
        if is_listed(&self.1) {
            let _ = run("umount", &["-l", &self.1.to_string_lossy()]);
        }
    }
}

/// Starts a 16 MiB pacer in the foreground on `dir/mnt` with `args` and `envs`, and waits
/// for the `pid=N` line that says its mount is there.
fn start_foreground(dir: &Path, args: &[&str], envs: &[(&str, &str)]) -> Foreground {
    let mnt = dir.join("mnt");
    fs::create_dir(&mnt).expect("mkdir");
    let img = dir.join("b.img");
    let mut child = Command::new(BIN)
        .args(["--backing", &img.to_string_lossy(), "--size", "16M"])
        .args(["--mountpoint", &mnt.to_string_lossy(), "--foreground"])
        .args(args)
        .envs(envs.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start tarn-pacer");
    let mut line = String::new();
    let stdout = child.stdout.take().expect("stdout");
    let guard = Foreground(child, mnt.clone());
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).expect("read pid");
    assert_eq!(line.trim(), format!("pid={}", guard.0.id()), "foreground prints its own pid");
    assert!(is_listed(&mnt), "mount not ready when pid was printed");
    guard
}

/// Waits up to 10 s for the foreground pacer to exit, and returns how it did.
fn wait_exit(guard: &mut Foreground, what: &str) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(Some(status)) = guard.0.try_wait() {
            return status;
        }
        assert!(Instant::now() < deadline, "pacer did not exit {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn added_latency_delays_every_io_and_foreground_stays_attached() {
    require_environment();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut guard = start_foreground(dir.path(), &["--latency-us", "20000"], &[]);
    let mnt = guard.1.clone();

    let f = OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(mnt.join("disk")).expect("open disk");
    let mut raw = vec![0u8; 8192];
    let skew = raw.as_ptr().align_offset(4096);
    let t0 = Instant::now();
    for i in 0..10 {
        f.read_exact_at(&mut raw[skew..skew + 4096], i * 4096).expect("read");
    }
    let secs = t0.elapsed().as_secs_f64();
    println!("10 sequential reads with 20 ms added latency: {secs:.3} s");
    assert!(secs >= 0.19, "latency not applied: {secs}");
    drop(f);

    // SIGTERM unmounts cleanly and ends the process with success.
    // SAFETY: signalling the child we started.
    unsafe { libc::kill(guard.0.id() as i32, libc::SIGTERM) };
    let status = wait_exit(&mut guard, "on SIGTERM");
    assert!(status.success(), "exit status {status}");
    assert!(!is_listed(&mnt), "still mounted after SIGTERM");
}

#[test]
fn a_panic_in_the_pacer_ends_it_and_the_disk_fails_instead_of_hanging() {
    require_environment();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut guard = start_foreground(dir.path(), &[], &[("TARN_TEST_PANIC_IN_STATFS", "1")]);
    let mnt = guard.1.clone();
    // statfs on the mount: a FUSE worker of the pacer panics serving it. In a child
    // process, so that a pacer left half-alive (the request never answered) shows as a
    // timeout, not a hung test.
    let mut df = Command::new("stat")
        .arg("-f")
        .arg(&mnt)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run stat -f");
    let deadline = Instant::now() + Duration::from_secs(30);
    let answered = loop {
        match df.try_wait() {
            Ok(Some(_)) => break true,
            _ if Instant::now() >= deadline => break false,
            _ => thread::sleep(Duration::from_millis(20)),
        }
    };
    if !answered {
        let _ = df.kill();
    }
    let df_status = df.wait().expect("reap stat");
    assert!(answered, "statfs hung: the pacer outlived the panic of its FUSE thread");
    assert!(!df_status.success(), "statfs on the panicking pacer's disk failed");
    let status = wait_exit(&mut guard, "after the panic");
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGABRT), "{status}");
    let mut stderr = String::new();
    guard.0.stderr.take().expect("stderr").read_to_string(&mut stderr).expect("read stderr");
    assert!(stderr.contains("panicked at") && stderr.contains("TARN_TEST_PANIC_IN_STATFS"), "{stderr}");
    let err = fs::metadata(mnt.join("disk")).expect_err("the dead disk fails the next call");
    assert_eq!(err.raw_os_error(), Some(libc::ENOTCONN), "the next call on the disk: {err}");
}

// ---------------------------------------------------------------- bad input

fn pacer_fails(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().expect("run tarn-pacer");
    assert!(!out.status.success(), "tarn-pacer {args:?} should fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn bad_input_is_refused_with_a_message_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let img = dir.path().join("b.img").to_string_lossy().into_owned();
    let mnt = dir.path().to_string_lossy().into_owned();

    let err = pacer_fails(&["--backing", &img, "--size", "0", "--mountpoint", &mnt]);
    assert!(err.contains("--size") && err.contains("zero"), "{err}");

    let err = pacer_fails(&["--backing", &img, "--size", "4X", "--mountpoint", &mnt]);
    assert!(err.contains("unknown suffix 'X'"), "{err}");

    let err = pacer_fails(&["--backing", &img, "--size", "1M", "--mountpoint", &mnt, "--max-io", "16Q"]);
    assert!(err.contains("--max-io") && err.contains("unknown suffix"), "{err}");

    let missing = dir.path().join("no-such-dir").to_string_lossy().into_owned();
    let err = pacer_fails(&["--backing", &img, "--size", "1M", "--mountpoint", &missing]);
    assert!(err.contains("does not exist") && err.contains(&missing), "{err}");

    let err = pacer_fails(&["--backing", &img, "--size", "1M"]);
    assert!(err.contains("--mountpoint"), "{err}");

    let err = pacer_fails(&["--backing", &img, "--size", "1M", "--mountpoint", "/proc"]);
    assert!(err.contains("busy"), "{err}");

    File::create(&img).and_then(|f| f.set_len(2 << 20)).expect("image");
    let err = pacer_fails(&["--backing", &img, "--size", "1M", "--mountpoint", &mnt]);
    assert!(err.contains("refusing to shrink"), "{err}");
    assert_eq!(fs::metadata(&img).expect("meta").len(), 2 << 20, "image was changed");
    assert!(!is_listed(dir.path()));
}

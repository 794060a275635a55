//! Dataset properties as a user of the mount sees them: `atime` (on: a read updates the
//! access time, relatime-style; off: never, and the mount says noatime) and `sync`
//! (always: a write is durable when it returns, without fsync; disabled: fsync returns
//! at once and promises nothing, so a crash right after it loses the write).

mod common;

use std::ffi::CString;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use common::Env;

/// 2001-09-09: an atime and mtime far in the past.
const OLD: i64 = 1_000_000_000;

fn set_times(p: &Path, sec: i64) {
    let c = CString::new(p.as_os_str().as_bytes()).expect("no NUL");
    let ts = [libc::timespec { tv_sec: sec, tv_nsec: 0 }, libc::timespec { tv_sec: sec, tv_nsec: 0 }];
    // SAFETY: valid path and two timespecs.
    assert_eq!(unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), ts.as_ptr(), 0) }, 0, "utimensat");
}

fn mount_options(mp: &Path) -> String {
    let text = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let want = mp.to_string_lossy();
    text.lines()
        .find(|l| l.split(' ').nth(4) == Some(&*want))
        .and_then(|l| l.split(' ').nth(5))
        .unwrap_or("")
        .to_string()
}

/// Writes a file with old times, remounts (so the kernel's page cache is cold and the
/// read reaches tarn), reads it; returns the atime seen after the read and after a
/// further remount.
fn atime_after_read(env: &Env) -> (i64, i64, String) {
    let m = env.mount("mnt", &[]);
    fs::write(m.p("f"), b"some bytes to read").expect("write");
    set_times(&m.p("f"), OLD);
    m.umount();
    let m = env.mount("mnt", &[]);
    let opts = mount_options(&m.mp);
    let mut s = String::new();
    File::open(m.p("f")).expect("open").read_to_string(&mut s).expect("read");
    // The kernel caches attributes for up to the TTL (1 s): ask after it.
    std::thread::sleep(Duration::from_millis(1200));
    let seen = fs::metadata(m.p("f")).expect("stat").atime();
    assert_eq!(fs::metadata(m.p("f")).expect("stat").mtime(), OLD, "a read never changes mtime");
    m.umount();
    let m = env.mount("mnt", &[]);
    let kept = fs::metadata(m.p("f")).expect("stat").atime();
    m.umount();
    (seen, kept, opts)
}

fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs() as i64
}

#[test]
fn atime_on_updates_on_read_and_off_never_does() {
    let env = Env::with_pool("256M");
    let start = now();
    let (seen, kept, opts) = atime_after_read(&env);
    assert!(seen >= start - 1, "atime=on: a read must update atime (got {seen}, test began {start})");
    assert_eq!(kept, seen, "the updated atime is committed with the pool");
    assert!(!opts.split(',').any(|o| o == "noatime"), "atime=on must not mount noatime: {opts}");

    env.ok(&["set", "atime=off", "tank/db"]);
    let (seen, kept, opts) = atime_after_read(&env);
    assert_eq!((seen, kept), (OLD, OLD), "atime=off: a read never changes atime");
    assert!(opts.split(',').any(|o| o == "noatime"), "atime=off mounts noatime: {opts}");
}

#[test]
fn sync_always_makes_every_write_durable_without_fsync() {
    let env = Env::with_pool("256M");
    env.ok(&["set", "sync=always", "tank/db"]);
    let m = env.mount("mnt", &[]);
    let data: Vec<u8> = (0..65536u32).map(|i| (i * 31 % 251) as u8).collect();
    let mut f = File::create(m.p("f")).expect("create");
    f.write_all(&data).expect("write");
    // No fsync, and the file stays open: the daemon dies with it.
    m.crash();
    drop(f);
    let m = env.mount("mnt", &[]);
    assert_eq!(fs::read(m.p("f")).expect("read after crash"), data, "sync=always: written bytes survive kill -9");
    m.umount();
}

#[test]
fn sync_disabled_fsync_returns_without_making_anything_durable() {
    let env = Env::with_pool("256M");
    env.ok(&["set", "sync=disabled", "tank/db"]);
    let m = env.mount("mnt", &[]);
    // Well inside the first txg (the timer commits every 5 s): nothing commits it but
    // fsync, and with sync=disabled fsync does not.
    let mut f = File::create(m.p("f")).expect("create");
    f.write_all(&[7u8; 16384]).expect("write");
    let t = std::time::Instant::now();
    f.sync_all().expect("fsync succeeds");
    let took = t.elapsed();
    m.crash();
    drop(f);
    let m = env.mount("mnt", &[]);
    assert!(!m.p("f").exists(), "sync=disabled: fsync made nothing durable, so the file is gone after kill -9");
    m.umount();
    println!("fsync with sync=disabled took {took:?}");
}

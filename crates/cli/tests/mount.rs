//! `tarn mount` end to end: a pool made with the `tarn` binary, a dataset mounted through
//! FUSE, and the POSIX behaviour databases rely on checked through the real mount; then
//! persistence across unmount/remount and across a kill -9 of the daemon after fsync.

mod common;

use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::Env;

const PAGE: usize = 16 << 10;

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add((i * 7 + i / 251) as u8)).collect()
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("no NUL")
}

/// A buffer aligned for O_DIRECT.
struct Aligned {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

impl Aligned {
    fn new(len: usize, fill: u8) -> Aligned {
        let layout = std::alloc::Layout::from_size_align(len, 4096).expect("layout");
        // SAFETY: non-zero size layout; freed in Drop.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null());
        // SAFETY: ptr is valid for len bytes.
        unsafe { std::ptr::write_bytes(ptr, fill, len) };
        Aligned { ptr, layout }
    }
    fn slice(&self) -> &[u8] {
        // SAFETY: valid for layout.size() bytes while self lives.
        unsafe { std::slice::from_raw_parts(self.ptr, self.layout.size()) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

fn fallocate(f: &File, mode: i32, off: i64, len: i64) {
    // SAFETY: plain syscall on an fd we own.
    let rc = unsafe { libc::fallocate(f.as_raw_fd(), mode, off, len) };
    assert_eq!(rc, 0, "fallocate mode {mode}: {}", std::io::Error::last_os_error());
}

fn check_pages(m: &common::Mounted) {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(m.p("pages"))
        .expect("create pages");
    for i in 0..8u8 {
        f.write_at(&pattern(i, PAGE), i as u64 * PAGE as u64).expect("pwrite page");
    }
    // Odd offsets and sizes: a 512-byte log block straddling records, and 3 bytes.
    f.write_at(&pattern(99, 512), 3 * PAGE as u64 - 100).expect("pwrite 512");
    f.write_at(b"xyz", 12345).expect("pwrite 3");
    let mut want = Vec::new();
    for i in 0..8u8 {
        want.extend(pattern(i, PAGE));
    }
    want[3 * PAGE - 100..3 * PAGE + 412].copy_from_slice(&pattern(99, 512));
    want[12345..12348].copy_from_slice(b"xyz");
    let mut got = vec![0u8; want.len()];
    f.read_exact_at(&mut got, 0).expect("pread all");
    assert!(got == want, "pages differ after pwrite");
    let mut one = vec![0u8; PAGE];
    f.read_exact_at(&mut one, 5 * PAGE as u64).expect("pread page 5");
    assert_eq!(one, pattern(5, PAGE));
    f.sync_all().expect("fsync");
    f.sync_data().expect("fdatasync");
}

fn check_direct_and_dsync(m: &common::Mounted) {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .custom_flags(libc::O_DIRECT)
        .open(m.p("direct"))
        .expect("O_DIRECT open");
    let buf = Aligned::new(PAGE, 0xAB);
    f.write_at(buf.slice(), PAGE as u64).expect("O_DIRECT pwrite");
    let rbuf = Aligned::new(PAGE, 0);
    // SAFETY: rbuf is valid for PAGE bytes; read into it through the fd.
    let n = unsafe { libc::pread(f.as_raw_fd(), rbuf.ptr.cast(), PAGE, PAGE as i64) };
    assert_eq!(n, PAGE as isize, "O_DIRECT pread");
    assert!(rbuf.slice().iter().all(|&b| b == 0xAB));
    assert_eq!(f.metadata().expect("stat").len(), 2 * PAGE as u64);
    let d = OpenOptions::new()
        .write(true)
        .create(true)
        .custom_flags(libc::O_DSYNC)
        .open(m.p("dsync"))
        .expect("O_DSYNC open");
    d.write_all_at(b"durable", 0).expect("O_DSYNC write");
}

fn check_truncate_and_sparse(m: &common::Mounted) {
    let f = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(m.p("sparse")).expect("create");
    f.write_at(b"end", 10 << 20).expect("write far");
    let mut hole = vec![1u8; 64 << 10];
    f.read_exact_at(&mut hole, 1 << 20).expect("read hole");
    assert!(hole.iter().all(|&b| b == 0), "a hole reads as zeros");
    f.set_len(100).expect("ftruncate down");
    assert_eq!(f.metadata().expect("stat").len(), 100);
    f.set_len(5000).expect("ftruncate up");
    let mut tail = vec![1u8; 4900];
    f.read_exact_at(&mut tail, 100).expect("read extended");
    assert!(tail.iter().all(|&b| b == 0), "extension reads as zeros");
}

fn check_names(m: &common::Mounted) {
    fs::write(m.p("old"), b"new content").expect("write old");
    fs::write(m.p("target"), b"replaced").expect("write target");
    fs::rename(m.p("old"), m.p("target")).expect("rename over existing");
    assert_eq!(fs::read(m.p("target")).expect("read"), b"new content");
    assert!(!m.p("old").exists());
    fs::hard_link(m.p("target"), m.p("link")).expect("hard link");
    assert_eq!(fs::metadata(m.p("target")).expect("stat").nlink(), 2);
    assert_eq!(fs::read(m.p("link")).expect("read link"), b"new content");
    std::os::unix::fs::symlink("target", m.p("sym")).expect("symlink");
    assert_eq!(fs::read_link(m.p("sym")).expect("readlink").to_str(), Some("target"));
    assert_eq!(fs::read(m.p("sym")).expect("read via symlink"), b"new content");
    fs::create_dir_all(m.p("a/b/c")).expect("mkdir -p");
    fs::rename(m.p("a/b"), m.p("moved")).expect("rename dir");
    assert!(m.p("moved/c").is_dir());
    // RENAME_NOREPLACE refuses an existing target.
    let (s, d) = (cpath(&m.p("link")), cpath(&m.p("target")));
    // SAFETY: valid paths, AT_FDCWD.
    let rc = unsafe { libc::renameat2(libc::AT_FDCWD, s.as_ptr(), libc::AT_FDCWD, d.as_ptr(), libc::RENAME_NOREPLACE) };
    assert_eq!((rc, std::io::Error::last_os_error().raw_os_error()), (-1, Some(libc::EEXIST)));
    assert_eq!(fs::remove_dir(m.p("moved")).map_err(|e| e.raw_os_error()), Err(Some(libc::ENOTEMPTY)));
}

fn check_unlink_while_open(m: &common::Mounted) {
    let data = pattern(7, 3 * PAGE);
    fs::write(m.p("doomed"), &data).expect("write");
    let f = File::open(m.p("doomed")).expect("open");
    fs::remove_file(m.p("doomed")).expect("unlink while open");
    assert!(!m.p("doomed").exists());
    let mut got = vec![0u8; data.len()];
    f.read_exact_at(&mut got, 0).expect("read unlinked-but-open");
    assert!(got == data, "unlinked file's data must live until the last close");
}

fn check_attrs(m: &common::Mounted) {
    fs::write(m.p("attrs"), b"x").expect("write");
    fs::set_permissions(m.p("attrs"), fs::Permissions::from_mode(0o640)).expect("chmod");
    let p = cpath(&m.p("attrs"));
    let times = [libc::timespec { tv_sec: 1_000_000, tv_nsec: 5 }, libc::timespec { tv_sec: 2_000_000, tv_nsec: 7 }];
    // SAFETY: valid path and two timespecs.
    assert_eq!(unsafe { libc::utimensat(libc::AT_FDCWD, p.as_ptr(), times.as_ptr(), 0) }, 0, "utimensat");
    // SAFETY: valid path.
    assert_eq!(unsafe { libc::chown(p.as_ptr(), 1234, 5678) }, 0, "chown");
    let md = fs::metadata(m.p("attrs")).expect("stat");
    assert_eq!(md.mode() & 0o7777, 0o640);
    assert_eq!((md.atime(), md.atime_nsec(), md.mtime(), md.mtime_nsec()), (1_000_000, 5, 2_000_000, 7));
    assert_eq!((md.uid(), md.gid()), (1234, 5678));
}

fn check_statfs(m: &common::Mounted) {
    let p = cpath(&m.mp);
    // SAFETY: statvfs fills the struct we pass.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(p.as_ptr(), &mut st) }, 0);
    let total = st.f_blocks * st.f_frsize;
    let avail = st.f_bavail * st.f_frsize;
    // Like zfs: size = used + available, so the pool's 1/32 reserve is not shown.
    assert!(total > 480 << 20 && total < 512 << 20, "statfs size {total} should be the pool's 512M less its reserve");
    assert!(avail > 0 && avail < total, "available {avail} of {total}");
}

fn check_fallocate(m: &common::Mounted) {
    let f = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(m.p("falloc")).expect("create");
    f.write_all_at(&pattern(3, 4 * PAGE), 0).expect("write");
    fallocate(&f, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, PAGE as i64, PAGE as i64 + 100);
    let mut got = vec![0u8; 4 * PAGE];
    f.read_exact_at(&mut got, 0).expect("read");
    let mut want = pattern(3, 4 * PAGE);
    want[PAGE..2 * PAGE + 100].fill(0);
    assert!(got == want, "PUNCH_HOLE zeroes exactly the range");
    assert_eq!(f.metadata().expect("stat").len(), 4 * PAGE as u64);
    fallocate(&f, libc::FALLOC_FL_KEEP_SIZE, 0, 1 << 20);
    assert_eq!(f.metadata().expect("stat").len(), 4 * PAGE as u64, "KEEP_SIZE keeps the size");
    fallocate(&f, 0, 0, 1 << 20);
    assert_eq!(f.metadata().expect("stat").len(), 1 << 20, "mode 0 extends the size");
}

fn check_big_directory(m: &common::Mounted) {
    fs::create_dir(m.p("big")).expect("mkdir");
    for i in 0..10_000 {
        File::create(m.p(&format!("big/f{i:05}"))).expect("create entry");
    }
    let mut names: Vec<String> = fs::read_dir(m.p("big"))
        .expect("readdir")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf8"))
        .collect();
    names.sort();
    assert_eq!(names.len(), 10_000);
    assert_eq!(names[0], "f00000");
    assert_eq!(names[9999], "f09999");
    assert!(m.p("big/f05000").exists());
}

fn check_shared_mmap(m: &common::Mounted) {
    let f = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(m.p("mapped")).expect("create");
    f.set_len(2 * PAGE as u64).expect("size");
    // SAFETY: mapping a file we hold open, length within its size; unmapped below.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            2 * PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    assert_ne!(ptr, libc::MAP_FAILED, "shared mmap: {}", std::io::Error::last_os_error());
    // SAFETY: the mapping is 2*PAGE bytes long.
    unsafe {
        std::ptr::copy_nonoverlapping(b"mmap!".as_ptr(), ptr.cast::<u8>().add(PAGE + 3), 5);
        assert_eq!(libc::msync(ptr, 2 * PAGE, libc::MS_SYNC), 0, "msync");
        libc::munmap(ptr, 2 * PAGE);
    }
    let mut got = [0u8; 5];
    f.read_exact_at(&mut got, PAGE as u64 + 3).expect("pread after mmap write");
    assert_eq!(&got, b"mmap!");
}

/// Content that must survive unmount and remount.
fn check_persisted(m: &common::Mounted) {
    let got = fs::read(m.p("pages")).expect("read pages");
    assert_eq!(got.len(), 8 * PAGE);
    assert_eq!(&got[5 * PAGE..6 * PAGE], &pattern(5, PAGE)[..]);
    assert_eq!(&got[12345..12348], b"xyz");
    assert_eq!(fs::read(m.p("target")).expect("target"), b"new content");
    assert_eq!(fs::metadata(m.p("link")).expect("link").nlink(), 2);
    assert_eq!(fs::read_link(m.p("sym")).expect("sym").to_str(), Some("target"));
    assert_eq!(fs::read(m.p("dsync")).expect("dsync"), b"durable");
    assert_eq!(fs::read_dir(m.p("big")).expect("big").count(), 10_000);
    let mut mm = [0u8; 5];
    File::open(m.p("mapped")).expect("mapped").read_exact_at(&mut mm, PAGE as u64 + 3).expect("read");
    assert_eq!(&mm, b"mmap!");
    assert_eq!(fs::metadata(m.p("attrs")).expect("attrs").mode() & 0o7777, 0o640);
    assert_eq!(fs::metadata(m.p("falloc")).expect("falloc").len(), 1 << 20);
}

#[test]
fn posix_semantics_through_the_mount_and_after_remount() {
    let env = Env::with_pool("512M");
    let m = env.mount("mnt", &["--threads", "4"]);
    check_pages(&m);
    check_direct_and_dsync(&m);
    check_truncate_and_sparse(&m);
    check_names(&m);
    check_unlink_while_open(&m);
    check_attrs(&m);
    check_statfs(&m);
    check_fallocate(&m);
    check_big_directory(&m);
    check_shared_mmap(&m);
    // Another command on the pool is served by the daemon that holds it.
    let list = env.ok(&["ds", "list"]);
    assert!(list.contains("tank/db"), "{list}");
    m.umount();
    // The pool is free again, and everything is there after a new mount.
    env.ok(&["pool", "status", "tank"]);
    let m = env.mount("mnt", &[]);
    check_persisted(&m);
    m.umount();
}

/// On the suite's transport (/dev/fuse, or io_uring under TARN_TEST_TRANSPORT=uring;
/// mount_uring.rs runs the same on uring).
#[test]
fn a_reader_killed_mid_read_ends_at_once_and_the_mount_serves_on() {
    let env = Env::with_pool("512M");
    let m = env.mount("mnt", &[]);
    let big = m.p("big");
    fs::write(&big, vec![7u8; 256 << 20]).expect("write 256 MiB");
    common::killed_readers_end_at_once(&big);
    m.umount();
}

#[test]
fn fsynced_data_survives_kill_9_of_the_daemon() {
    let env = Env::with_pool("256M");
    let m = env.mount("mnt", &[]);
    let mut f = File::create(m.p("log")).expect("create");
    f.write_all(&pattern(1, 3 * PAGE)).expect("write");
    f.sync_all().expect("fsync");
    fs::create_dir(m.p("dir")).expect("mkdir");
    fs::write(m.p("dir/f"), b"synced").expect("write");
    File::open(m.p("dir/f")).expect("open").sync_all().expect("fsync file");
    File::open(m.p("dir")).expect("open dir").sync_all().expect("fsync dir");
    m.crash();
    let m = env.mount("mnt", &[]);
    assert!(fs::read(m.p("log")).expect("log after crash") == pattern(1, 3 * PAGE));
    assert_eq!(fs::read(m.p("dir/f")).expect("dir/f after crash"), b"synced");
    m.umount();
}

#[test]
fn a_panic_in_the_daemon_ends_it_and_the_mount_fails_instead_of_hanging() {
    let env = Env::with_pool("256M");
    let m = env.mount_with_env("mnt", &[], &[("TARN_TEST_PANIC_IN_STATFS", "1")]);
    let mut f = File::create(m.p("synced")).expect("create");
    f.write_all(&pattern(2, 2 * PAGE)).expect("write");
    f.sync_all().expect("fsync");
    drop(f);
    // df on the mount: a FUSE worker thread of the daemon panics serving it. In a child
    // process, so that a daemon left half-alive (the request never answered) shows as a
    // timeout, not a hung test.
    let mut df = Command::new("stat")
        .arg("-f")
        .arg(&m.mp)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run stat -f");
    let answered = common::wait_exit(&mut df, Duration::from_secs(30));
    if !answered {
        let _ = df.kill();
    }
    let status = df.wait().expect("reap stat");
    assert!(answered, "statfs hung: the daemon outlived the panic of its FUSE thread");
    assert!(!status.success(), "statfs on the panicking daemon's mount failed");
    let pid = m.pid;
    assert!(common::wait_gone(pid, Duration::from_secs(10)), "daemon {pid} still running after its panic");
    let err = fs::metadata(&m.mp).expect_err("the dead mount fails the next call");
    assert_eq!(err.raw_os_error(), Some(libc::ENOTCONN), "the next call on the mount: {err}");
    let log = fs::read_to_string(env.run_dir().join("tank.log")).expect("the daemon's log");
    assert!(log.contains("panicked at") && log.contains("TARN_TEST_PANIC_IN_STATFS"), "the panic is in the log: {log}");
    // The dead mount is cleared like a crashed daemon's, and what was fsynced is there.
    m.gone();
    env.ok(&["umount", env.path("mnt").to_str().expect("utf8")]);
    let m = env.mount("mnt", &[]);
    assert!(fs::read(m.p("synced")).expect("synced file after the panic") == pattern(2, 2 * PAGE));
    m.umount();
}

#[test]
fn sigterm_commits_and_unmounts() {
    let env = Env::with_pool("256M");
    let m = env.mount("mnt", &[]);
    fs::write(m.p("unsynced"), b"committed at exit").expect("write");
    // SAFETY: signalling our own daemon.
    unsafe { libc::kill(m.pid as i32, libc::SIGTERM) };
    let pid = m.pid;
    m.gone();
    assert!(env.daemon_pid().is_none(), "the mount record of pid {pid} is removed");
    let got = env.ok(&["cat", "tank/db:/unsynced"]);
    assert_eq!(got, "committed at exit");
}

#[test]
fn bad_mounts_are_one_clear_error() {
    let env = Env::with_pool("256M");
    let mp = env.path("mp");
    let mps = mp.to_str().expect("utf8");
    let e = env.fails(&["mount", "tank/db", mps]);
    assert!(e.contains("does not exist") && e.contains("mkdir"), "{e}");
    fs::create_dir(&mp).expect("mkdir");
    let e = env.fails(&["mount", "tank/nope", mps]);
    assert!(e.contains("tank/nope") && e.contains("does not exist"), "{e}");
    let e = env.fails(&["mount", "other/db", mps]);
    assert!(e.contains("no such pool 'other'"), "{e}");
    let e = env.fails(&["mount", "tank/db"]);
    assert!(e.contains("mountpoint") && e.contains("tarn set mountpoint="), "{e}");
    fs::write(mp.join("file"), b"x").expect("write");
    let e = env.fails(&["mount", "tank/db", mps]);
    assert!(e.contains("not empty"), "{e}");
    fs::remove_file(mp.join("file")).expect("rm");
    // The property gives the mountpoint.
    env.ok(&["set", &format!("mountpoint={mps}"), "tank/db"]);
    env.ok(&["mount", "tank/db"]);
    let guard = common::Mounted::adopt(&env, &mp);
    fs::create_dir(env.path("mnt2")).expect("mkdir");
    let e = env.fails(&["mount", "tank/db", env.path("mnt2").to_str().expect("utf8")]);
    assert!(e.contains("already mounted on") && e.contains(&format!("pid {}", guard.pid)), "{e}");
    fs::create_dir(env.path("other")).expect("mkdir");
    let e = env.fails(&["umount", env.path("other").to_str().expect("utf8")]);
    assert!(e.contains("no tarn mount"), "{e}");
    env.ok(&["umount", "tank/db"]);
    guard.gone();
}

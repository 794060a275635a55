//! `tarn mount --transport uring`: the requests really travel on the io_uring rings (the
//! daemon's own counters, `tarn stats fuse`), data written and fsynced there survives a
//! remount and a kill -9 of the daemon, a reader killed mid-read does not hang, and a
//! clean unmount ends the daemon. The other mount suites run on uring with
//! TARN_TEST_TRANSPORT=uring.

mod common;

use std::fs::{self, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::process::Command;
use std::time::Duration;

use common::Env;

/// The first mount's entry in `tarn stats fuse tank --json`.
fn fuse_stats(env: &Env) -> serde_json::Value {
    let text = env.ok(&["stats", "fuse", "tank", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&text).expect("stats fuse json");
    v[0].clone()
}

fn uring_mount<'a>(env: &'a Env, name: &str) -> common::Mounted<'a> {
    common::enable_uring();
    env.mount(name, &["--transport", "uring"])
}

#[test]
fn data_requests_travel_on_the_rings_not_dev_fuse() {
    let env = Env::with_pool("512M");
    let m = uring_mount(&env, "mnt");
    let before = fuse_stats(&env);
    assert_eq!(before["transport"], "uring", "{before}");
    let block: Vec<u8> = (0..16384u32).map(|i| (i % 251) as u8).collect();
    {
        // O_DIRECT: each write and read is a FUSE request, not the page cache's.
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_DIRECT)
            .open(m.p("pages"))
            .expect("create");
        let mut buf = AlignedPage::new();
        buf.0.copy_from_slice(&block);
        for i in 0..64u64 {
            f.write_all_at(&buf.0, i * 16384).expect("write");
        }
        f.sync_data().expect("fdatasync");
        for i in 0..64u64 {
            let mut back = AlignedPage::new();
            f.read_exact_at(&mut back.0, i * 16384).expect("read");
            assert!(back.0 == buf.0, "page {i} read back differs");
        }
    }
    let after = fuse_stats(&env);
    let ring = after["ring_requests"].as_u64().expect("ring count");
    let dev = after["dev_requests"].as_u64().expect("dev count");
    assert!(ring >= 129, "64 writes, an fdatasync and 64 reads went by the rings: {after}");
    // FORGET and INTERRUPT are all /dev/fuse still carries.
    assert!(dev <= 8, "data requests must not reach /dev/fuse: {after}");
    m.umount();
    let m = uring_mount(&env, "mnt");
    assert_eq!(fs::read(m.p("pages")).expect("read after remount"), block.repeat(64));
    m.umount();
}

/// A 16 KiB page aligned for O_DIRECT.
#[repr(C, align(4096))]
struct AlignedPage([u8; 16384]);

impl AlignedPage {
    fn new() -> Box<AlignedPage> {
        Box::new(AlignedPage([0; 16384]))
    }
}

#[test]
fn a_killed_reader_does_not_hang_and_unmount_and_kill_9_end_cleanly() {
    let env = Env::with_pool("512M");
    let m = uring_mount(&env, "mnt");
    let big = m.p("big");
    fs::write(&big, vec![7u8; 64 << 20]).expect("write 64 MiB");
    // Readers of the file with O_DIRECT (a request per 16 KiB), killed with SIGKILL
    // mid-read: each must die at once, and the mount must go on serving.
    for _ in 0..3 {
        let mut reader = Command::new("dd")
            .args([&format!("if={}", big.display()), "of=/dev/null", "bs=16k", "iflag=direct"])
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn reader");
        std::thread::sleep(Duration::from_millis(100));
        reader.kill().expect("kill -9 the reader");
        assert!(common::wait_exit(&mut reader, Duration::from_secs(10)), "a killed reader hung");
    }
    assert_eq!(fs::read(&big).expect("read").len(), 64 << 20);
    m.umount();
    // fsynced data survives a kill -9 of a uring daemon, and the dead mount clears.
    let m = uring_mount(&env, "mnt");
    let f = OpenOptions::new().write(true).create(true).truncate(true).open(m.p("synced")).expect("create");
    f.write_all_at(b"fsynced before the kill", 0).expect("write");
    f.sync_all().expect("fsync");
    drop(f);
    m.crash();
    let m = uring_mount(&env, "mnt");
    assert_eq!(fs::read(m.p("synced")).expect("read"), b"fsynced before the kill");
    m.umount();
}

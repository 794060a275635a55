//! A full pool through the mount: the writer gets ENOSPC (errno 28) and the mount stays
//! up; what was written and fsynced before is intact; deleting a file frees its space so
//! a new write succeeds; after umount and remount every file reads back as written.

mod common;

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;

// `noise`: incompressible, so lz4 cannot make the pool look bigger.
use common::{noise, Env};

const CHUNK: usize = 1 << 20;

fn write_synced(path: &Path, data: &[u8]) {
    let mut f = File::create(path).expect("create");
    f.write_all(data).expect("write");
    f.sync_all().expect("fsync");
}

/// Appends 1 MiB chunks until a write fails; returns (chunks written, the error).
fn fill(path: &Path) -> (usize, std::io::Error) {
    let mut f = OpenOptions::new().create(true).truncate(false).write(true).open(path).expect("create filler");
    for i in 0.. {
        if let Err(e) = f.write_all(&noise(1000 + i as u64, CHUNK)) {
            return (i, e);
        }
        assert!(i < 4096, "a 64 MiB pool took 4 GiB without ENOSPC");
    }
    unreachable!()
}

fn assert_file(path: &Path, want: &[u8]) {
    let got = fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    assert!(got == want, "{} changed: {} bytes read, {} written", path.display(), got.len(), want.len());
}

#[test]
fn a_full_pool_gives_enospc_keeps_the_mount_and_loses_nothing() {
    let env = Env::with_pool("64M");
    let m = env.mount("mnt", &[]);
    let keep = noise(1, 4 << 20);
    write_synced(&m.p("keep"), &keep);

    let (chunks, err) = fill(&m.p("filler"));
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "the writer must see ENOSPC, got {err}");
    assert!(chunks >= 16, "only {chunks} MiB fit before ENOSPC in a 64 MiB pool");
    println!("ENOSPC after {chunks} MiB");

    // The mount is still up and serves what was there.
    assert_file(&m.p("keep"), &keep);
    let avail = nix_statvfs_avail(&m.mp);
    assert!(avail < (4 << 20), "statfs says {avail} bytes are free on a full pool");
    let again = OpenOptions::new().append(true).open(m.p("filler")).expect("open filler").write_all(&noise(7, CHUNK));
    assert_eq!(again.err().and_then(|e| e.raw_os_error()), Some(libc::ENOSPC), "still full");

    // Deleting the filler gives its space back: a new file fits and is durable.
    fs::remove_file(m.p("filler")).expect("delete filler");
    let after = noise(2, 8 << 20);
    write_synced(&m.p("after"), &after);
    assert_file(&m.p("after"), &after);

    m.umount();
    let m = env.mount("mnt", &[]);
    assert_file(&m.p("keep"), &keep);
    assert_file(&m.p("after"), &after);
    assert!(!m.p("filler").exists(), "the deleted filler stays deleted");
    m.umount();
    let scrub = env.ok(&["pool", "scrub", "tank"]);
    assert!(scrub.contains("0 bad copies found, 0 unrecoverable"), "scrub after the full-pool run: {scrub}");
    let status = env.ok(&["pool", "status", "tank"]);
    assert!(
        status.contains("ONLINE") && !status.contains("DEGRADED"),
        "pool status after the full-pool run:\n{status}"
    );
}

fn nix_statvfs_avail(p: &Path) -> u64 {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).expect("no NUL");
    // SAFETY: statvfs fills the struct we pass for a valid path.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut s) }, 0, "statfs on the mount");
    s.f_bavail * s.f_frsize
}

/// Issue #13: a pool full because of snapshots says so. A 64 MiB pool holds a file and a
/// snapshot of it; overwriting the file frees nothing (the snapshot keeps the old blocks),
/// so the writer hits ENOSPC. The companion: `pool status` names snapshots as what holds
/// the space and says what frees it, `ds list` charges the dataset with the snapshot's
/// bytes; after `snap destroy` the same overwrite fits.
#[test]
fn a_pool_full_because_of_snapshots_says_so() {
    let env = Env::with_pool("64M");
    let m = env.mount("mnt", &[]);
    let old = noise(3, 32 << 20);
    write_synced(&m.p("table.ibd"), &old);
    env.ok(&["snap", "create", "tank/db@nightly"]);
    let status = env.ok(&["pool", "status", "tank"]);
    assert!(!status.contains("nearly full"), "not full yet:\n{status}");

    // Rewrite the table in place, MiB by MiB, until the pool is full.
    let mut f = OpenOptions::new().write(true).open(m.p("table.ibd")).expect("open");
    let mut full = None;
    for round in 0..3u64 {
        for i in 0..32 {
            if let Err(e) = f.write_all(&noise(100 + round * 64 + i, CHUNK)).and_then(|_| f.sync_data()) {
                full = Some(e);
                break;
            }
        }
        if full.is_some() {
            break;
        }
        std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(0)).expect("seek");
    }
    drop(f);
    let err = full.expect("overwrites under a snapshot must fill a 64 MiB pool");
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "the writer must see ENOSPC, got {err}");

    let status = env.ok(&["pool", "status", "tank"]);
    assert!(status.contains("status: The pool is nearly full"), "{status}");
    assert!(status.contains("Snapshots alone hold"), "status must name the snapshots:\n{status}");
    assert!(status.contains("tarn snap list tank"), "and what frees the space:\n{status}");
    let list = env.ok(&["ds", "list", "-H", "-p"]);
    let used_of = |name: &str| -> u64 {
        let row = list.lines().find(|l| l.split('\t').next() == Some(name)).unwrap_or_else(|| panic!("{list}"));
        row.split('\t').nth(1).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{row}"))
    };
    assert!(used_of("tank/db") > 40 << 20, "USED charges the snapshot's bytes too:\n{list}");
    let refer = env.ok(&["get", "-H", "-p", "referenced", "tank/db"]);
    let refer: u64 = refer.split('\t').nth(2).and_then(|v| v.trim().parse().ok()).expect("referenced");
    assert!(used_of("tank/db") > refer + (16 << 20), "USED {} vs REFER {refer}", used_of("tank/db"));

    env.ok(&["snap", "destroy", "tank/db@nightly"]);
    let status = env.ok(&["pool", "status", "tank"]);
    assert!(!status.contains("Snapshots alone hold"), "{status}");
    let new = noise(4, 32 << 20);
    write_synced(&m.p("table.ibd"), &new);
    assert_file(&m.p("table.ibd"), &new);
    m.umount();
}

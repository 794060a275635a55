//! A full pool through the mount: the writer gets ENOSPC (errno 28) and the mount stays
//! up; what was written and fsynced before is intact; deleting a file frees its space so
//! a new write succeeds; after umount and remount every file reads back as written.

mod common;

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;

use common::Env;

const CHUNK: usize = 1 << 20;

/// Incompressible bytes (a xorshift stream), so lz4 cannot make the pool look bigger.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

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

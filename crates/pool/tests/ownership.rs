//! One owner (issue #10): a second process, or a second open in this one, can never open a
//! held pool's devices for writing — an image file through its lock, a block device
//! through the kernel's exclusive claim, whatever node name reaches it; and the pool's
//! command history, kept in the pool, survives export and import.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use tarn_pool::{CreateOptions, HistoryEntry, ImportOptions, Pool, VdevSpec};

fn create(img: &Path) -> Pool {
    let opts = CreateOptions { size: Some(128 << 20), ..Default::default() };
    Pool::create("tank", &[VdevSpec::Disk(img.to_path_buf())], &opts).expect("create")
}

#[test]
fn a_second_import_of_held_image_files_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("d0.img");
    let pool = create(&img);
    let err =
        Pool::import_paths(std::slice::from_ref(&img), &ImportOptions::default()).err().expect("the devices are held");
    assert!(err.is_busy(), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("d0.img") && msg.contains("in use"), "{msg}");
    // A symlink is the same file, and the same lock.
    let link = dir.path().join("alias.img");
    std::os::unix::fs::symlink(&img, &link).unwrap();
    let err = Pool::import_paths(&[link], &ImportOptions::default()).err().expect("held through the symlink too");
    assert!(err.is_busy(), "{err}");
    pool.export().unwrap();
    Pool::import_paths(&[img], &ImportOptions::default()).expect("free once exported").export().unwrap();
}

/// A loop device, detached when dropped.
struct Loop(String);

impl Loop {
    fn over(img: &Path) -> Loop {
        let out = Command::new("losetup")
            .args(["--find", "--show", img.to_str().unwrap()])
            .output()
            .expect("losetup (util-linux) is installed");
        assert!(
            out.status.success(),
            "losetup failed (needs root and loop devices): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Loop(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.0]).status();
    }
}

#[test]
fn a_held_block_device_cannot_be_opened_again_through_another_device_node() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("loop.img");
    std::fs::write(&img, vec![0u8; 96 << 20]).unwrap();
    let dev = Loop::over(&img);
    let pool = create(Path::new(&dev.0));
    // A second node for the same device (another inode, so another flock): only the
    // kernel's exclusive claim can refuse it.
    let rdev = std::fs::metadata(&dev.0).unwrap().rdev();
    let alias: PathBuf = dir.path().join("same-disk");
    let c = std::ffi::CString::new(alias.to_str().unwrap()).unwrap();
    // SAFETY: mknod with a valid path; the node is ours, in our temp dir.
    let rc = unsafe { libc::mknod(c.as_ptr(), libc::S_IFBLK | 0o600, rdev as libc::dev_t) };
    assert_eq!(rc, 0, "mknod: {}", std::io::Error::last_os_error());
    let err =
        Pool::import_paths(std::slice::from_ref(&alias), &ImportOptions::default()).err().expect("the device is held");
    assert!(err.is_busy(), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("same-disk") && msg.contains("block device is in use"), "{msg}");
    pool.export().unwrap();
    let pool = Pool::import_paths(&[alias], &ImportOptions::default()).expect("free now");
    assert_eq!(pool.name(), "tank");
    pool.export().unwrap();
}

fn entry(command: &str) -> HistoryEntry {
    HistoryEntry {
        time: 1_700_000_000,
        txg: 0,
        user: "root".into(),
        uid: 0,
        host: "here".into(),
        command: command.into(),
    }
}

#[test]
fn the_history_is_kept_in_the_pool_across_export_and_import() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("d0.img");
    let pool = create(&img);
    assert_eq!(pool.history().unwrap(), Vec::new(), "a new pool has none");
    pool.log_history(entry("tarn pool create tank d0.img"));
    pool.create_dataset("tank/db").unwrap();
    pool.log_history(entry("tarn ds create tank/db"));
    pool.close().unwrap();
    let pool = Pool::import_paths(std::slice::from_ref(&img), &ImportOptions::default()).unwrap();
    pool.log_history(entry("tarn pool export tank"));
    pool.export().unwrap();
    let pool = Pool::import_paths(&[img], &ImportOptions::default()).unwrap();
    let got = pool.history().unwrap();
    let commands: Vec<&str> = got.iter().map(|e| e.command.as_str()).collect();
    assert_eq!(commands, ["tarn pool create tank d0.img", "tarn ds create tank/db", "tarn pool export tank"]);
    assert!(got.windows(2).all(|w| w[0].txg <= w[1].txg), "{got:?}");
    assert!(got.iter().all(|e| e.user == "root" && e.host == "here"));
    pool.export().unwrap();
}

//! Checks and preparation done before anything is mounted: the FUSE device, the
//! mountpoint, and the backing image.
//!
//! Owns: the backing file's size policy. Promises: a missing backing file is created
//! sparse at the requested size; a smaller one is extended (sparse); a larger one is
//! refused, never shrunk. The mountpoint must be an existing directory that is not
//! already a mount point. Must never: truncate data, or mount over an existing mount.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::error::PacerError;

/// FUSE cannot work without its character device; say so before forking.
pub fn check_fuse_device() -> Result<(), PacerError> {
    if Path::new("/dev/fuse").exists() {
        Ok(())
    } else {
        Err(PacerError::NoFuseDevice)
    }
}

/// The mountpoint as an absolute path, after checking it exists, is a directory and
/// is not already a mount point.
pub fn check_mountpoint(dir: &Path) -> Result<PathBuf, PacerError> {
    let meta = match fs::metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(PacerError::MountpointMissing(dir.to_path_buf())),
        // ENOTCONN: a dead FUSE mount (daemon killed) is still there.
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
            return Err(PacerError::MountpointBusy(dir.to_path_buf()))
        }
        Err(source) => return Err(PacerError::MountpointIo { path: dir.to_path_buf(), source }),
    };
    if !meta.is_dir() {
        return Err(PacerError::MountpointNotDir(dir.to_path_buf()));
    }
    let abs = dir.canonicalize().map_err(|source| PacerError::MountpointIo { path: dir.to_path_buf(), source })?;
    if is_mount_point(&abs, meta.dev())? {
        return Err(PacerError::MountpointBusy(abs));
    }
    Ok(abs)
}

/// A directory is a mount point when its device differs from its parent's, or when it
/// is listed in /proc/self/mountinfo (a bind mount of the same device).
fn is_mount_point(abs: &Path, dev: u64) -> Result<bool, PacerError> {
    let parent = abs.parent().unwrap_or(abs);
    let parent_dev =
        fs::metadata(parent).map_err(|source| PacerError::MountpointIo { path: parent.to_path_buf(), source })?.dev();
    Ok((parent != abs && parent_dev != dev) || tarn_daemon::mounts::is_listed(abs))
}

/// Open (creating or growing, sparse) the backing image so it is exactly `size` bytes.
pub fn prepare_backing(path: &Path, size: u64) -> Result<File, PacerError> {
    let io_err = |source| PacerError::Backing { path: path.to_path_buf(), source };
    match fs::metadata(path) {
        Ok(meta) if !meta.is_file() => return Err(PacerError::BackingNotFile { path: path.to_path_buf() }),
        Ok(meta) if meta.len() > size => {
            return Err(PacerError::WouldShrink { path: path.to_path_buf(), current: meta.len(), requested: size })
        }
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(e)),
    }
    let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).map_err(io_err)?;
    let current = file.metadata().map_err(io_err)?.len();
    if current < size {
        // set_len only grows here (checked above), leaving a sparse tail.
        file.set_len(size).map_err(io_err)?;
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backing_is_created_sparse_grown_and_never_shrunk() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("disk.img");
        let f = prepare_backing(&path, 1 << 20).expect("create");
        assert_eq!(f.metadata().expect("meta").len(), 1 << 20);
        assert!(f.metadata().expect("meta").blocks() < 64, "not sparse");
        drop(f);
        let f = prepare_backing(&path, 2 << 20).expect("grow");
        assert_eq!(f.metadata().expect("meta").len(), 2 << 20);
        drop(f);
        let err = prepare_backing(&path, 1 << 20).expect_err("shrink refused");
        assert!(err.to_string().contains("refusing to shrink"), "{err}");
        assert_eq!(fs::metadata(&path).expect("meta").len(), 2 << 20);
    }

    #[test]
    fn mountpoint_checks_name_the_problem() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("nope");
        assert!(matches!(check_mountpoint(&missing), Err(PacerError::MountpointMissing(_))));
        let file = dir.path().join("file");
        fs::write(&file, b"x").expect("write");
        assert!(matches!(check_mountpoint(&file), Err(PacerError::MountpointNotDir(_))));
        assert!(check_mountpoint(dir.path()).is_ok());
        assert!(matches!(check_mountpoint(Path::new("/proc")), Err(PacerError::MountpointBusy(_))));
    }
}

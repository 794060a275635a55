//! Leaf devices: the one place tarn touches the operating system's storage.
//!
//! A `BlockDevice` reads and writes at byte offsets and flushes. `FileDevice` serves an
//! image file or a block device with pread/pwrite and fdatasync. Tests wrap the trait to
//! record the write/flush stream or to inject faults.
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::VdevError;

pub trait BlockDevice: Send + Sync {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()>;
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()>;
    /// Makes every completed write durable (a cache flush).
    fn flush(&self) -> std::io::Result<()>;
    fn size(&self) -> u64;
    fn path(&self) -> &Path;
}

pub struct FileDevice {
    file: File,
    path: PathBuf,
    size: u64,
}

impl FileDevice {
    /// Opens an existing image file or block device read-write.
    pub fn open(path: &Path) -> Result<FileDevice, VdevError> {
        let io = |source| VdevError::Io { path: path.to_path_buf(), source };
        let file = OpenOptions::new().read(true).write(true).open(path).map_err(io)?;
        lock_exclusively(&file, path)?;
        let size = device_size(&file).map_err(io)?;
        Ok(FileDevice { file, path: path.to_path_buf(), size })
    }

    /// Opens `path`, creating a sparse image file of `size` bytes if it does not exist.
    pub fn open_or_create(path: &Path, size: Option<u64>) -> Result<FileDevice, VdevError> {
        if !path.exists() {
            let size = size.ok_or_else(|| {
                VdevError::Config(format!(
                    "{}: no such device; give --size to create an image file",
                    path.display()
                ))
            })?;
            let io = |source| VdevError::Io { path: path.to_path_buf(), source };
            let file = OpenOptions::new().read(true).write(true).create_new(true).open(path).map_err(io)?;
            file.set_len(size).map_err(io)?;
        }
        FileDevice::open(path)
    }
}

/// One process owns a device at a time: a second import would corrupt the pool.
///
/// A holder that was just killed keeps its lock until its last thread has exited, which
/// can lag the kill by a moment; so a busy lock is retried briefly before giving up.
fn lock_exclusively(file: &File, path: &Path) -> Result<(), VdevError> {
    use std::os::fd::AsRawFd;
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        // SAFETY: flock on a file descriptor we own; no memory is involved.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            return Err(VdevError::Busy { path: path.to_path_buf() });
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// How long a device held by another process is waited for.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Size of a regular file or a block device (seeking to the end works for both).
fn device_size(file: &File) -> std::io::Result<u64> {
    use std::io::{Seek, SeekFrom};
    let mut f = file;
    f.seek(SeekFrom::End(0))
}

impl BlockDevice for FileDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.file.write_all_at(buf, offset)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.file.sync_data()
    }
    fn size(&self) -> u64 {
        self.size
    }
    fn path(&self) -> &Path {
        &self.path
    }
}

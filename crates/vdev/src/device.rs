//! Leaf devices: the one place tarn touches the operating system's storage.
//!
//! A `BlockDevice` reads and writes at byte offsets and flushes. `FileDevice` serves an
//! image file or a block device with pread/pwrite and fdatasync. A block device is opened
//! with O_DIRECT: the host's page cache must not become a second, unbounded cache beside
//! the ARC (and a benchmark against other filesystems on the same device would be unfair).
//! Tests wrap the trait to record the write/flush stream or to inject faults.
//!
//! Owns: opening (and creating image files), the exclusive lock on each device, O_DIRECT
//! bounce buffers.
//!
//! Promises: one process holds a device at a time (flock, so a second import is refused
//! as `Busy`); `flush` makes every completed write durable.
//!
//! Must never: let two processes hold one device at once, or route a block device's
//! I/O through the host page cache.
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
    /// Lets other openers have the device while this handle lives on (a log device
    /// removed from an open pool: in-flight holders of the handle may still exist).
    fn release(&self) {}
    /// The alignment (offset and length) a read needs: 1 for buffered I/O, the logical
    /// sector size for O_DIRECT. A block is read as the smallest aligned span around it,
    /// so a packed compressed block costs its stored size, not whole pool sectors.
    fn read_align(&self) -> u64 {
        1
    }
}

pub struct FileDevice {
    file: File,
    path: PathBuf,
    size: u64,
    /// Opened with O_DIRECT: I/O goes through an aligned bounce buffer.
    direct: bool,
    /// See `BlockDevice::read_align`.
    read_align: u64,
}

/// Memory alignment O_DIRECT needs (covers 512-byte and 4 KiB logical sectors).
const DIRECT_ALIGN: usize = 4096;

/// A zeroed, `DIRECT_ALIGN`-aligned buffer for O_DIRECT I/O.
struct Aligned {
    ptr: std::ptr::NonNull<u8>,
    layout: std::alloc::Layout,
}

impl Aligned {
    fn new(len: usize) -> Aligned {
        let layout = std::alloc::Layout::from_size_align(len.max(1), DIRECT_ALIGN).expect("valid layout");
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = std::ptr::NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        Aligned { ptr, layout }
    }
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` owns `layout.size()` initialised bytes until drop.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

impl FileDevice {
    /// Opens an existing image file or block device read-write.
    pub fn open(path: &Path) -> Result<FileDevice, VdevError> {
        let io = |source| VdevError::Io { path: path.to_path_buf(), source };
        let is_block = std::fs::metadata(path).map(|m| {
            use std::os::unix::fs::FileTypeExt;
            m.file_type().is_block_device()
        });
        let direct = is_block.map_err(io)?;
        let mut options = OpenOptions::new();
        options.read(true).write(true);
        if direct {
            use std::os::unix::fs::OpenOptionsExt;
            // O_EXCL on a block device is the kernel's own exclusive claim: it holds
            // whatever node name reaches the device (a symlink, another devtmpfs), and a
            // kernel mount of it is refused too. flock below covers image files.
            options.custom_flags(libc::O_DIRECT | libc::O_EXCL);
        }
        let file = open_waiting_if_claimed(&options, path, direct)?;
        lock_exclusively(&file, path)?;
        let size = device_size(&file).map_err(io)?;
        let read_align = if direct { logical_sector_size(&file) } else { 1 };
        Ok(FileDevice { file, path: path.to_path_buf(), size, direct, read_align })
    }

    /// Opens `path`, creating a sparse image file of `size` bytes if it does not exist.
    pub fn open_or_create(path: &Path, size: Option<u64>) -> Result<FileDevice, VdevError> {
        if !path.exists() {
            let size = size.ok_or_else(|| VdevError::NoSuchDevice { path: path.to_path_buf() })?;
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

/// Opens `path`; a block device claimed by another holder (EBUSY under O_EXCL) is
/// retried for as long as a busy lock is (a killed holder releases it as it exits).
fn open_waiting_if_claimed(options: &OpenOptions, path: &Path, block: bool) -> Result<File, VdevError> {
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        match options.open(path) {
            Ok(file) => return Ok(file),
            Err(e) if block && e.raw_os_error() == Some(libc::EBUSY) => {
                if std::time::Instant::now() >= deadline {
                    return Err(VdevError::BlockDeviceBusy { path: path.to_path_buf() });
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(source) => return Err(VdevError::Io { path: path.to_path_buf(), source }),
        }
    }
}

/// How long a device held by another process is waited for.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The logical sector size of a block device (what O_DIRECT aligns to); 4 KiB, which
/// every device accepts, if the kernel does not say.
fn logical_sector_size(file: &File) -> u64 {
    use std::os::fd::AsRawFd;
    let mut size: libc::c_int = 0;
    // SAFETY: BLKSSZGET writes one int through the pointer, which points at `size`.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), libc::BLKSSZGET, &mut size) };
    match u64::try_from(size) {
        Ok(s) if rc == 0 && s.is_power_of_two() && s <= DIRECT_ALIGN as u64 => s,
        _ => DIRECT_ALIGN as u64,
    }
}

/// Size of a regular file or a block device (seeking to the end works for both).
fn device_size(file: &File) -> std::io::Result<u64> {
    use std::io::{Seek, SeekFrom};
    let mut f = file;
    f.seek(SeekFrom::End(0))
}

impl BlockDevice for FileDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        if !self.direct {
            return self.file.read_exact_at(buf, offset);
        }
        let mut bounce = Aligned::new(buf.len());
        self.file.read_exact_at(&mut bounce.as_mut()[..buf.len()], offset)?;
        buf.copy_from_slice(&bounce.as_mut()[..buf.len()]);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        if !self.direct {
            return self.file.write_all_at(buf, offset);
        }
        let mut bounce = Aligned::new(buf.len());
        bounce.as_mut()[..buf.len()].copy_from_slice(buf);
        self.file.write_all_at(&bounce.as_mut()[..buf.len()], offset)
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
    fn read_align(&self) -> u64 {
        self.read_align
    }
    fn release(&self) {
        use std::os::fd::AsRawFd;
        // SAFETY: flock on a file descriptor we own; no memory is involved. A block
        // device's O_EXCL claim lasts until the handle is closed (the pool's close).
        unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// A device opened read-only and without its lock, to look at its labels while another
/// process may hold it (`peek_labels`).
struct Peek {
    file: File,
    path: PathBuf,
    size: u64,
}

impl BlockDevice for Peek {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }
    fn write_at(&self, _: &[u8], _: u64) -> std::io::Result<()> {
        Err(std::io::Error::other("a peek is read-only"))
    }
    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn size(&self) -> u64 {
        self.size
    }
    fn path(&self) -> &Path {
        &self.path
    }
}

/// The labels of the device at `path`, read without taking the device (its holder may be
/// writing them: for a caller that only wants to know whose device it is, such as the
/// cache file after `pool add` or `pool remove`).
pub fn peek_labels(path: &Path) -> Result<crate::DeviceLabels, VdevError> {
    let io = |source| VdevError::Io { path: path.to_path_buf(), source };
    let file = File::open(path).map_err(io)?;
    let size = device_size(&file).map_err(io)?;
    crate::read_device_labels(&Peek { file, path: path.to_path_buf(), size })
}

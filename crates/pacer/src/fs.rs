//! The FUSE filesystem: a root directory holding exactly one regular file, `disk`,
//! whose bytes are the backing image's bytes.
//!
//! Owns: translating FUSE requests into paced `pread`/`pwrite`/`fdatasync` on the
//! backing file. Promises: every read and write is admitted by the shared [`Pacer`]
//! before it touches the backing file and is counted in [`Stats`]; the file is opened
//! with `direct_io` so the kernel page cache of this mount never absorbs an I/O; the
//! file's size is fixed; `fsync` is `fdatasync` of the backing file; every write starts
//! its own write-back to the host's disk at once, so a flush waits for little more than
//! its round trip, as a cloud volume's does, not for seconds of the host's dirty pages.
//! Must never: hold a lock while sleeping, grow or shrink the disk, or answer a read
//! with bytes that did not come from the backing file.

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig,
    LockOwner, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs,
    ReplyWrite, Request, WriteFlags,
};

use crate::pacer::Pacer;
use crate::stats::{Dir, Stats};

pub const DISK_NAME: &str = "disk";
const DISK_INO: INodeNo = INodeNo(2);
/// Attributes never change behind the kernel's back, so it may cache them for long.
const TTL: Duration = Duration::from_secs(3600);
const BLOCK: u32 = 4096;

pub struct PacedDisk {
    backing: File,
    size: u64,
    pacer: Arc<Pacer>,
    stats: Arc<Stats>,
    uid: u32,
    gid: u32,
    born: SystemTime,
    /// A test hook: `statfs` panics, so a test can see what a bug's panic in a FUSE
    /// thread does to the pacer (`TEST_PANIC_IN_STATFS`, read once at start).
    panic_in_statfs: bool,
}

/// The environment variable that makes the pacer's `statfs` panic (tests of its panic
/// handling; read once when the disk is made, never on a request).
pub const TEST_PANIC_IN_STATFS: &str = "TARN_TEST_PANIC_IN_STATFS";

impl PacedDisk {
    pub fn new(backing: File, size: u64, pacer: Arc<Pacer>, stats: Arc<Stats>) -> PacedDisk {
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let panic_in_statfs = std::env::var_os(TEST_PANIC_IN_STATFS).is_some();
        PacedDisk { backing, size, pacer, stats, uid, gid, born: SystemTime::now(), panic_in_statfs }
    }

    fn attr(&self, ino: INodeNo) -> FileAttr {
        let (kind, perm, size, nlink) = if ino == DISK_INO {
            (FileType::RegularFile, 0o600, self.size, 1)
        } else {
            (FileType::Directory, 0o755, 0, 2)
        };
        FileAttr {
            ino,
            size,
            blocks: size.div_ceil(512),
            atime: self.born,
            mtime: self.born,
            ctime: self.born,
            crtime: self.born,
            kind,
            perm,
            nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: BLOCK,
            flags: 0,
        }
    }

    /// Wait for the pacer, then the fixed latency. Returns the units charged.
    fn pace(&self, len: u64) -> u64 {
        let admission = self.pacer.admit(len);
        if !admission.throttle.is_zero() {
            self.stats.record_throttle(admission.throttle);
        }
        let total = admission.throttle + admission.latency;
        if !total.is_zero() {
            thread::sleep(total);
        }
        admission.units
    }

    /// Read as much of `buf` as the backing file holds at `offset` (short only at EOF).
    fn read_full(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            match self.backing.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }

    /// Start writing `len` bytes at `offset` back to the host's disk, without waiting.
    ///
    /// Why: the loop device above runs a flush in line with its other requests, so every
    /// read queued behind a flush waits for it. Left alone, the host's page cache would
    /// gather seconds of this disk's writes and the next `fdatasync` would write them
    /// all, holding the reads for up to a second: a cost of the host, not of the cloud
    /// volume being emulated, and larger for a filesystem that flushes rarely after bulk
    /// writes than for one that flushes often. Streaming the writes out as they come
    /// leaves a flush only the last moments' writes to wait for.
    fn start_writeback(&self, offset: u64, len: u64) {
        let (Ok(off), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
            return;
        };
        // SAFETY: the fd is owned by self.backing and open for the daemon's lifetime.
        // A failure only leaves the pages to the next fdatasync, which reports errors.
        unsafe { libc::sync_file_range(self.backing.as_raw_fd(), off, len, libc::SYNC_FILE_RANGE_WRITE) };
    }

    /// Bytes of a request at `offset` that fall inside the disk.
    fn clamp(&self, offset: u64, len: u64) -> u64 {
        len.min(self.size.saturating_sub(offset))
    }
}

impl Filesystem for PacedDisk {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Bigger requests mean fewer round trips; the size cap still charges each one
        // as ceil(len / max_io) I/Os. Keep whatever the kernel allows if it says no.
        let _ = config.set_max_write(1 << 20);
        let _ = config.set_max_readahead(1 << 20);
        // Let queued background requests (loop's async I/O, writeback) reach our
        // worker threads in parallel instead of 12 at a time.
        let _ = config.set_max_background(64);
        // Async direct I/O: a loop device in --direct-io=on mode can then keep several
        // requests in flight (without it each O_DIRECT request waits for the previous).
        let _ = config.add_capabilities(InitFlags::FUSE_ASYNC_DIO);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent == INodeNo::ROOT && name == DISK_NAME {
            reply.entry(&TTL, &self.attr(DISK_INO), Generation(0));
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if ino == INodeNo::ROOT || ino == DISK_INO {
            reply.attr(&TTL, &self.attr(ino));
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<fuser::TimeOrNow>,
        _mtime: Option<fuser::TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // A disk has a fixed size and fixed ownership; time updates are accepted and
        // ignored (tools like touch should not fail).
        let resizes = ino == DISK_INO && size.is_some_and(|s| s != self.size);
        if resizes || mode.is_some() || uid.is_some() || gid.is_some() {
            reply.error(Errno::EPERM);
        } else {
            reply.attr(&TTL, &self.attr(ino));
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if ino != DISK_INO {
            reply.error(Errno::EISDIR);
            return;
        }
        // direct_io: the kernel sends every read and write to us (no page cache on this
        // mount); parallel direct writes: no inode lock serializing concurrent writers.
        let flags = FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES;
        reply.opened(FileHandle(0), flags);
    }

    #[allow(clippy::too_many_arguments)]
    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        if ino != DISK_INO {
            reply.error(Errno::EISDIR);
            return;
        }
        let len = self.clamp(offset, u64::from(size));
        if len == 0 {
            reply.data(&[]); // at or past the end: EOF, costs nothing
            return;
        }
        let units = self.pace(len);
        let mut buf = vec![0u8; len as usize];
        match self.read_full(&mut buf, offset) {
            Ok(n) => {
                self.stats.record_io(Dir::Read, n as u64, units);
                reply.data(&buf[..n]);
            }
            Err(e) => reply.error(Errno::from(e)),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        if ino != DISK_INO {
            reply.error(Errno::EISDIR);
            return;
        }
        let len = self.clamp(offset, data.len() as u64);
        if len == 0 {
            // Nothing fits: the disk is full at this offset, as a block device would say.
            reply.error(Errno::ENOSPC);
            return;
        }
        let units = self.pace(len);
        match self.backing.write_all_at(&data[..len as usize], offset) {
            Ok(()) => {
                self.start_writeback(offset, len);
                self.stats.record_io(Dir::Write, len, units);
                reply.written(len as u32);
            }
            Err(e) => reply.error(Errno::from(e)),
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        // close() is not a durability point; writes are already in the backing file.
        reply.ok();
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        if ino != DISK_INO {
            reply.ok();
            return;
        }
        // A cache flush costs the disk a round trip but no IOPS or bandwidth tokens.
        let latency = self.pacer.admission_latency();
        if !latency.is_zero() {
            thread::sleep(latency);
        }
        // SAFETY: the fd is owned by self.backing and open for the daemon's lifetime.
        let rc = unsafe { libc::fdatasync(self.backing.as_raw_fd()) };
        if rc == 0 {
            self.stats.record_flush();
            reply.ok();
        } else {
            reply.error(Errno::from(std::io::Error::last_os_error()));
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        // Discard from the loop device arrives as PUNCH_HOLE|KEEP_SIZE: pass it on so
        // the sparse image stays thin. Nothing may change the disk's size.
        let keeps_size = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let inside = offset.checked_add(length).is_some_and(|end| end <= self.size);
        if ino != DISK_INO || !(keeps_size || inside) {
            reply.error(Errno::EOPNOTSUPP);
            return;
        }
        let len = self.clamp(offset, length);
        let (Ok(off), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
            reply.error(Errno::EINVAL);
            return;
        };
        // SAFETY: plain syscall on a descriptor we own.
        let rc = unsafe { libc::fallocate(self.backing.as_raw_fd(), mode, off, len) };
        if rc == 0 {
            reply.ok();
        } else {
            reply.error(Errno::from(std::io::Error::last_os_error()));
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        if ino != INodeNo::ROOT {
            reply.error(Errno::ENOTDIR);
            return;
        }
        let entries = [
            (INodeNo::ROOT, FileType::Directory, "."),
            (INodeNo::ROOT, FileType::Directory, ".."),
            (DISK_INO, FileType::RegularFile, DISK_NAME),
        ];
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(*ino, (i + 1) as u64, *kind, name) {
                break; // buffer full; the kernel asks again from this offset
            }
        }
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        assert!(
            !self.panic_in_statfs,
            "{TEST_PANIC_IN_STATFS} is set: statfs panics (a test of the daemon's panic handling)"
        );
        let blocks = self.size.div_ceil(u64::from(BLOCK));
        reply.statfs(blocks, 0, 0, 2, 0, BLOCK, 255, BLOCK);
    }
}

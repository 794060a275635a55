//! The /dev/fuse transport: `fuser`'s session decodes the kernel's requests and calls
//! [`FuserFront`], which hands the decoded arguments to the core (`ops::TarnFs`) and
//! turns its answers into fuser replies.
//!
//! Owns: the conversion between fuser's types and the core's (attributes, times, file
//! types, flags), INIT's negotiation through fuser's `KernelConfig`, and each worker
//! thread's read buffer.
//! Promises: a reply for every request, exactly what the core answered; a read is
//! copied once, from the reused per-thread buffer into fuser's reply.
//! Must never: decide anything about the filesystem itself (that is the core's), or
//! allocate per page on the read path.

use std::cell::RefCell;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use tarn_dataset::{Attr, FileKind, SetAttr, Timespec};

use crate::ops::{self, Caller, TarnFs, BLOCK, FILE_OPEN_FLAGS, TTL};

/// fuser's face of the core; the core is shared with any other transport of the mount.
pub struct FuserFront {
    core: Arc<TarnFs>,
}

impl FuserFront {
    pub fn new(core: Arc<TarnFs>) -> FuserFront {
        FuserFront { core }
    }
}

thread_local! {
    /// Each worker thread's read buffer, grown to the largest read it has served.
    static READ_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

fn errno(e: ops::Errno) -> Errno {
    Errno::from_i32(e.code())
}

fn caller(req: &Request) -> Caller {
    Caller { uid: req.uid(), gid: req.gid() }
}

fn file_type(kind: FileKind, mode: u32) -> FileType {
    match kind {
        FileKind::File => FileType::RegularFile,
        FileKind::Dir => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Special => match mode & libc::S_IFMT {
            libc::S_IFCHR => FileType::CharDevice,
            libc::S_IFBLK => FileType::BlockDevice,
            libc::S_IFSOCK => FileType::Socket,
            libc::S_IFIFO => FileType::NamedPipe,
            _ => FileType::RegularFile,
        },
    }
}

fn system_time(t: Timespec) -> SystemTime {
    if t.sec >= 0 {
        UNIX_EPOCH + Duration::new(t.sec as u64, t.nsec)
    } else {
        UNIX_EPOCH - Duration::from_secs(t.sec.unsigned_abs()) + Duration::from_nanos(u64::from(t.nsec))
    }
}

fn timespec(t: TimeOrNow) -> Timespec {
    let at = match t {
        TimeOrNow::Now => return Timespec::now(),
        TimeOrNow::SpecificTime(at) => at,
    };
    match at.duration_since(UNIX_EPOCH) {
        Ok(d) => Timespec { sec: d.as_secs() as i64, nsec: d.subsec_nanos() },
        Err(before) => {
            let d = before.duration();
            let (sec, nsec) = if d.subsec_nanos() == 0 {
                (-(d.as_secs() as i64), 0)
            } else {
                (-(d.as_secs() as i64) - 1, 1_000_000_000 - d.subsec_nanos())
            };
            Timespec { sec, nsec }
        }
    }
}

fn fuse_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        // Logical 512-byte blocks: the engine does not track per-file allocation yet.
        blocks: a.size.div_ceil(512),
        atime: system_time(a.atime),
        mtime: system_time(a.mtime),
        ctime: system_time(a.ctime),
        crtime: system_time(a.crtime),
        kind: file_type(a.kind, a.mode),
        perm: (a.mode & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev as u32,
        blksize: a.blksize.max(BLOCK),
        flags: 0,
    }
}

fn entry(reply: ReplyEntry, answer: Result<Attr, ops::Errno>) {
    match answer {
        Ok(a) => reply.entry(&TTL, &fuse_attr(&a), Generation(0)),
        Err(e) => reply.error(errno(e)),
    }
}

fn attr(reply: ReplyAttr, answer: Result<Attr, ops::Errno>) {
    match answer {
        Ok(a) => reply.attr(&TTL, &fuse_attr(&a)),
        Err(e) => reply.error(errno(e)),
    }
}

fn empty(reply: ReplyEmpty, answer: Result<(), ops::Errno>) {
    match answer {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(e)),
    }
}

impl Filesystem for FuserFront {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Each of these is an optimisation the kernel may refuse; keep its choice then.
        let _ = config.set_max_write(ops::MAX_WRITE);
        let _ = config.set_max_readahead(self.core.kernel_readahead());
        let _ = config.set_max_background(ops::MAX_BACKGROUND);
        // Lookups and listings in one directory run in parallel (the dataset serialises
        // namespace changes itself); async direct I/O keeps O_DIRECT requests in flight.
        let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        let _ = config.add_capabilities(InitFlags::FUSE_ASYNC_DIO);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        entry(reply, self.core.lookup(parent.0, name.as_bytes()));
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        attr(reply, self.core.getattr(ino.0));
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let set = SetAttr { mode, uid, gid, size, atime: atime.map(timespec), mtime: mtime.map(timespec) };
        attr(reply, self.core.setattr(ino.0, &set));
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.core.readlink(ino.0) {
            Ok(target) => reply.data(&target),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        entry(reply, self.core.mknod(caller(req), parent.0, name.as_bytes(), mode, umask, rdev));
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        entry(reply, self.core.mkdir(caller(req), parent.0, name.as_bytes(), mode, umask));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.core.unlink(parent.0, name.as_bytes()));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.core.rmdir(parent.0, name.as_bytes()));
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let target = target.as_os_str().as_bytes();
        entry(reply, self.core.symlink(caller(req), parent.0, link_name.as_bytes(), target));
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let answer = self.core.rename(parent.0, name.as_bytes(), newparent.0, newname.as_bytes(), flags.bits());
        empty(reply, answer);
    }

    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        entry(reply, self.core.link(ino.0, newparent.0, newname.as_bytes()));
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.core.open(ino.0) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::from_bits_retain(FILE_OPEN_FLAGS)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        match self.core.create(caller(req), parent.0, name.as_bytes(), mode, umask) {
            Ok((a, fh)) => reply.created(
                &TTL,
                &fuse_attr(&a),
                Generation(0),
                FileHandle(fh),
                FopenFlags::from_bits_retain(FILE_OPEN_FLAGS),
            ),
            Err(e) => reply.error(errno(e)),
        }
    }

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
        READ_BUF.with(|cell| {
            let mut buf = cell.borrow_mut();
            if buf.len() < size as usize {
                buf.resize(size as usize, 0);
            }
            match self.core.read(ino.0, offset, &mut buf[..size as usize]) {
                Ok(n) => {
                    reply.data(&buf[..n]);
                    self.core.after_read(ino.0);
                }
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.core.write(ino.0, offset, data, flags.0) {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn flush(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        empty(reply, self.core.flush(ino.0));
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        empty(reply, self.core.release(ino.0));
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        empty(reply, self.core.fsync(ino.0));
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.core.opendir(ino.0) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let answer = self.core.readdir(ino.0, fh.0, offset, |child, next, kind, name| {
            // The listing does not carry the mode, so a special file is listed as
            // DT_UNKNOWN's closest neighbour; stat gives the exact type.
            reply.add(INodeNo(child), next, file_type(kind, 0), OsStr::from_bytes(name))
        });
        match answer {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.core.releasedir(fh.0);
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        empty(reply, self.core.fsync(ino.0));
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let s = self.core.statfs();
        reply.statfs(s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize);
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        empty(reply, self.core.access(ino.0));
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
        empty(reply, self.core.fallocate(ino.0, offset, length, mode));
    }
}

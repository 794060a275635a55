//! The FUSE filesystem: kernel requests translated into `tarn_dataset::Dataset` calls.
//!
//! Owns: inode numbers (= dataset object ids; the root object is FUSE's root, 1; the
//! `.tarn/snapshot` directory's numbers are `snapdir`'s), open directory listings (one
//! per opendir handle, so a 100k-entry directory is listed in one pass), and the mapping
//! of engine errors to errno values.
//!
//! Promises: every open/create is matched by `Dataset::open` and every release by
//! `Dataset::release`, so an unlinked file lives until its last close; fsync, fdatasync,
//! fsyncdir and every O_SYNC/O_DSYNC write return only once the change is committed
//! (`Dataset::fsync`); statfs reports the pool's real size and what writers can still
//! use; the read path reuses one buffer per worker thread (no allocation per page).
//!
//! Must never: answer with bytes the dataset did not return, report success for an
//! operation it did not perform (unsupported modes are EOPNOTSUPP/EINVAL), or panic on
//! anything a caller or the disk can cause.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;
use tarn_dataset::{Attr, Dataset, FileKind, FsError, NewObject, SetAttr, Timespec};
use tarn_pool::Pool;

use crate::snapdir::{self, tree_of, Node, SnapDir, CTL_DIR, CTL_NAME, SNAP_DIR, SNAP_NAME};

/// How long the kernel may trust attributes and names. Only this mount changes the
/// dataset, and the kernel invalidates what its own operations change, so this only
/// bounds how stale nlink/ctime can look after a rename or link from another name.
const TTL: Duration = Duration::from_secs(1);
/// statfs block size.
const BLOCK: u32 = 4096;
/// Longest file name (the dataset's limit too).
const NAME_MAX: usize = 255;
/// Largest write the kernel may send in one request.
const MAX_WRITE: u32 = 1 << 20;

/// A listing frozen at opendir: (name, ino, kind), "." and ".." first.
type Listing = Arc<Vec<(Vec<u8>, u64, FileKind)>>;

/// The root directory's object id, FUSE's root inode.
const ROOT: u64 = tarn_dataset::ROOT_ID;

/// Whether any of `inos` is outside the mounted dataset: a snapshot's, or `.tarn`'s,
/// where nothing may change.
fn read_only(inos: &[u64]) -> bool {
    inos.iter().any(|&i| tree_of(i) != 0)
}

/// The attributes of a snapshot's object, numbered in its tree.
fn attr_in(tree: u64, a: &Attr) -> FileAttr {
    let mut f = fuse_attr(a);
    f.ino = INodeNo(snapdir::encode(tree, a.ino));
    f
}

pub struct TarnFs {
    ds: Arc<Dataset>,
    pool: Arc<Pool>,
    dirs: Mutex<HashMap<u64, Listing>>,
    next_fh: AtomicU64,
    /// False on a `ro` or `noatime` mount: reads leave atimes alone.
    record_atime: bool,
    /// Open file and directory handles: the daemon names a busy mount by it before
    /// unmounting (export, umount). Counted at open/release, not on the I/O path.
    open: Arc<AtomicU64>,
    /// `.tarn/snapshot` (none for a mount made without the dataset's name).
    snapdir: Option<SnapDir>,
    /// A test hook: `statfs` panics, so a test can see what a bug's panic in a FUSE
    /// thread does to the daemon (`TEST_PANIC_IN_STATFS`). Off unless the daemon was
    /// started with that variable set.
    panic_in_statfs: bool,
}

/// The environment variable that makes a mount's `statfs` panic (tests of the daemon's
/// panic handling; read once per mount, never on a request).
pub const TEST_PANIC_IN_STATFS: &str = "TARN_TEST_PANIC_IN_STATFS";

thread_local! {
    /// Each worker thread's read buffer, grown to the largest read it has served.
    static READ_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl TarnFs {
    pub fn new(pool: Arc<Pool>, ds: Arc<Dataset>) -> TarnFs {
        TarnFs {
            ds,
            pool,
            dirs: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            record_atime: true,
            open: Arc::new(AtomicU64::new(0)),
            snapdir: None,
            panic_in_statfs: false,
        }
    }

    /// Makes `statfs` panic (the test hook `TEST_PANIC_IN_STATFS`).
    pub fn panicking_in_statfs(mut self, on: bool) -> TarnFs {
        self.panic_in_statfs = on;
        self
    }

    /// Serves `MOUNT/.tarn/snapshot/NAME/`: the snapshots of dataset `name` (the one
    /// mounted), read-only.
    pub fn with_snapdir(mut self, name: &str) -> TarnFs {
        self.snapdir = Some(SnapDir::new(self.pool.clone(), name));
        self
    }

    fn snapdir(&self) -> Result<&SnapDir, FsError> {
        self.snapdir.as_ref().ok_or(FsError::NotFound)
    }

    /// What an inode outside the mounted dataset (tree ≠ 0) names.
    fn node(&self, ino: u64) -> Result<Node, FsError> {
        self.snapdir()?.node(ino)
    }

    /// Attributes of an inode outside the mounted dataset.
    fn other_attr(&self, ino: u64) -> Result<FileAttr, FsError> {
        match self.node(ino)? {
            Node::Virtual(v) => Ok(snapdir::virtual_attr(v)),
            Node::Snapshot { tree, ds, object } => Ok(attr_in(tree, &ds.getattr(object)?)),
        }
    }

    /// `name` in directory `parent`, outside the mounted dataset or `.tarn` at its root.
    fn other_lookup(&self, parent: u64, name: &[u8]) -> Result<FileAttr, FsError> {
        if parent == ROOT && name == CTL_NAME {
            self.snapdir()?;
            return Ok(snapdir::virtual_attr(CTL_DIR));
        }
        match self.node(parent)? {
            Node::Virtual(CTL_DIR) if name == SNAP_NAME => Ok(snapdir::virtual_attr(SNAP_DIR)),
            Node::Virtual(SNAP_DIR) => {
                let (tree, ds) = self.snapdir()?.snapshot(name)?;
                Ok(attr_in(tree, &ds.getattr(ROOT)?))
            }
            Node::Virtual(_) => Err(FsError::NotFound),
            Node::Snapshot { tree, ds, object } => Ok(attr_in(tree, &ds.lookup(object, name)?)),
        }
    }

    /// The listing of a directory outside the mounted dataset.
    fn other_listing(&self, ino: u64) -> Result<Listing, FsError> {
        let dir = |names: Vec<(Vec<u8>, u64)>, parent: u64| {
            let mut all = vec![(b".".to_vec(), ino, FileKind::Dir), (b"..".to_vec(), parent, FileKind::Dir)];
            all.extend(names.into_iter().map(|(n, i)| (n, i, FileKind::Dir)));
            Arc::new(all)
        };
        match self.node(ino)? {
            Node::Virtual(CTL_DIR) => Ok(dir(vec![(SNAP_NAME.to_vec(), SNAP_DIR)], ROOT)),
            Node::Virtual(_) => {
                let sd = self.snapdir()?;
                let mut names = Vec::new();
                for name in sd.names() {
                    // Each entry carries its root's inode: its tree, opened now.
                    if let Ok((tree, _)) = sd.snapshot(name.as_bytes()) {
                        names.push((name.into_bytes(), snapdir::encode(tree, ROOT)));
                    }
                }
                Ok(dir(names, CTL_DIR))
            }
            Node::Snapshot { tree, ds, object } => {
                let parent = if object == ROOT { SNAP_DIR } else { snapdir::encode(tree, ds.parent_of(object)?) };
                let mut all = vec![(b".".to_vec(), ino, FileKind::Dir), (b"..".to_vec(), parent, FileKind::Dir)];
                for (name, child, kind) in ds.readdir(object)? {
                    all.push((name, snapdir::encode(tree, child), kind));
                }
                Ok(Arc::new(all))
            }
        }
    }

    /// Reads from an object of a snapshot (nothing else outside the dataset has bytes).
    fn other_read(&self, ino: u64, offset: u64, buf: &mut [u8]) -> Result<usize, FsError> {
        match self.node(ino)? {
            Node::Snapshot { ds, object, .. } => ds.read(object, offset, buf),
            Node::Virtual(_) => Err(FsError::IsDir),
        }
    }

    /// The count of open handles, shared with whoever watches this mount.
    pub fn open_handles(&self) -> Arc<AtomicU64> {
        self.open.clone()
    }

    fn opened(&self) -> FileHandle {
        self.open.fetch_add(1, Ordering::Relaxed);
        self.new_fh()
    }

    fn closed(&self) {
        // Saturating: a release the kernel sends for a handle of an earlier mount of the
        // same dataset (there is none today) must not wrap the count.
        let _ = self.open.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    /// Whether reads update atimes (the dataset's `atime` property still decides when
    /// this is true); false for a `ro` or `noatime` mount.
    pub fn recording_atime(mut self, on: bool) -> TarnFs {
        self.record_atime = on;
        self
    }

    fn new_fh(&self) -> FileHandle {
        FileHandle(self.next_fh.fetch_add(1, Ordering::Relaxed))
    }

    /// Creates `name` in `parent` and replies with its entry.
    fn make(&self, req: &Request, parent: INodeNo, name: &OsStr, what: NewObject, mode: u32, reply: ReplyEntry) {
        if read_only(&[parent.0]) {
            return reply.error(Errno::EROFS);
        }
        match self.ds.create(parent.0, name.as_bytes(), what, mode, req.uid(), req.gid()) {
            Ok(a) => reply.entry(&TTL, &fuse_attr(&a), Generation(0)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    /// "." and ".." then the directory's entries, as one snapshot.
    fn listing(&self, ino: u64) -> Result<Listing, FsError> {
        if tree_of(ino) != 0 {
            return self.other_listing(ino);
        }
        let mut entries = self.ds.readdir(ino)?;
        if ino == ROOT && self.snapdir.as_ref().is_some_and(|sd| sd.visible(&self.ds)) {
            entries.insert(0, (CTL_NAME.to_vec(), CTL_DIR, FileKind::Dir));
        }
        let parent = self.ds.parent_of(ino)?;
        let mut all = Vec::with_capacity(entries.len() + 2);
        all.push((b".".to_vec(), ino, FileKind::Dir));
        all.push((b"..".to_vec(), parent, FileKind::Dir));
        all.extend(entries);
        Ok(Arc::new(all))
    }

    /// fallocate: mode 0 extends the size, KEEP_SIZE alone reserves nothing (copy-on-
    /// write cannot reserve in place), PUNCH_HOLE zeroes, ZERO_RANGE zeroes and may extend.
    fn allocate(&self, ino: u64, off: u64, len: u64, mode: i32) -> Result<(), FsError> {
        let end = off.checked_add(len).ok_or_else(|| FsError::Invalid("range overflows".into()))?;
        let keep = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let punch = mode & libc::FALLOC_FL_PUNCH_HOLE != 0;
        let zero = mode & libc::FALLOC_FL_ZERO_RANGE != 0;
        let known = libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE;
        if mode & !known != 0 || (punch && (!keep || zero)) {
            return Err(FsError::Invalid("unsupported fallocate mode".into()));
        }
        let attr = self.ds.getattr(ino)?;
        if attr.kind != FileKind::File {
            return Err(FsError::Invalid("fallocate needs a regular file".into()));
        }
        if punch || zero {
            self.ds.punch_hole(ino, off, len)?;
        }
        if !keep && end > attr.size {
            self.ds.setattr(ino, &SetAttr { size: Some(end), ..Default::default() })?;
        }
        Ok(())
    }

    /// Writes `data` and, for O_SYNC/O_DSYNC writes, makes it durable before returning.
    fn write_data(&self, ino: u64, off: u64, data: &[u8], flags: i32) -> Result<usize, FsError> {
        let n = self.ds.write(ino, off, data)?;
        if flags & libc::O_DSYNC != 0 {
            self.ds.fsync(ino)?;
        }
        Ok(n)
    }
}

fn errno(e: &FsError) -> Errno {
    Errno::from_i32(e.errno())
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

impl Filesystem for TarnFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Each of these is an optimisation the kernel may refuse; keep its choice then.
        let _ = config.set_max_write(MAX_WRITE);
        let _ = config.set_max_readahead(MAX_WRITE);
        let _ = config.set_max_background(64);
        // Lookups and listings in one directory run in parallel (the dataset serialises
        // namespace changes itself); async direct I/O keeps O_DIRECT requests in flight.
        let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        let _ = config.add_capabilities(InitFlags::FUSE_ASYNC_DIO);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        // The kernel passes names up to 1024 bytes; POSIX wants ENAMETOOLONG past
        // NAME_MAX even when nothing by that name could exist.
        if name.len() > NAME_MAX {
            return reply.error(Errno::ENAMETOOLONG);
        }
        if tree_of(parent.0) != 0 || (parent.0 == ROOT && name.as_bytes() == CTL_NAME && self.snapdir.is_some()) {
            return match self.other_lookup(parent.0, name.as_bytes()) {
                Ok(a) => reply.entry(&TTL, &a, Generation(0)),
                Err(e) => reply.error(errno(&e)),
            };
        }
        match self.ds.lookup(parent.0, name.as_bytes()) {
            Ok(a) => reply.entry(&TTL, &fuse_attr(&a), Generation(0)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if tree_of(ino.0) != 0 {
            return match self.other_attr(ino.0) {
                Ok(a) => reply.attr(&TTL, &a),
                Err(e) => reply.error(errno(&e)),
            };
        }
        match self.ds.getattr(ino.0) {
            Ok(a) => reply.attr(&TTL, &fuse_attr(&a)),
            Err(e) => reply.error(errno(&e)),
        }
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
        if read_only(&[ino.0]) {
            return reply.error(Errno::EROFS);
        }
        let set = SetAttr { mode, uid, gid, size, atime: atime.map(timespec), mtime: mtime.map(timespec) };
        match self.ds.setattr(ino.0, &set) {
            Ok(a) => reply.attr(&TTL, &fuse_attr(&a)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        if tree_of(ino.0) != 0 {
            return match self.node(ino.0) {
                Ok(Node::Snapshot { ds, object, .. }) => match ds.readlink(object) {
                    Ok(target) => reply.data(&target),
                    Err(e) => reply.error(errno(&e)),
                },
                Ok(Node::Virtual(_)) => reply.error(Errno::EINVAL),
                Err(e) => reply.error(errno(&e)),
            };
        }
        match self.ds.readlink(ino.0) {
            Ok(target) => reply.data(&target),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        let mode = mode & !umask;
        let what = match mode & libc::S_IFMT {
            libc::S_IFREG | 0 => NewObject::File,
            libc::S_IFDIR => NewObject::Dir,
            _ => NewObject::Special { rdev: u64::from(rdev) },
        };
        self.make(req, parent, name, what, mode, reply);
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        self.make(req, parent, name, NewObject::Dir, mode & !umask, reply);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if read_only(&[parent.0]) {
            return reply.error(Errno::EROFS);
        }
        match self.ds.unlink(parent.0, name.as_bytes()) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if read_only(&[parent.0]) {
            return reply.error(Errno::EROFS);
        }
        match self.ds.rmdir(parent.0, name.as_bytes()) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let target = target.as_os_str().as_bytes();
        self.make(req, parent, link_name, NewObject::Symlink(target), 0o777, reply);
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
        if read_only(&[parent.0, newparent.0]) {
            return reply.error(Errno::EROFS);
        }
        // RENAME_EXCHANGE and RENAME_WHITEOUT are not implemented: refuse, never fake.
        if !(flags - RenameFlags::RENAME_NOREPLACE).is_empty() {
            reply.error(Errno::EINVAL);
            return;
        }
        let noreplace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        match self.ds.rename(parent.0, name.as_bytes(), newparent.0, newname.as_bytes(), noreplace) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        if read_only(&[ino.0, newparent.0]) {
            return reply.error(Errno::EROFS);
        }
        match self.ds.link(ino.0, newparent.0, newname.as_bytes()) {
            Ok(a) => reply.entry(&TTL, &fuse_attr(&a), Generation(0)),
            // POSIX wants EPERM for a hard link to a directory.
            Err(FsError::Invalid(_)) => reply.error(Errno::EPERM),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // Page-cache mode (no FOPEN_DIRECT_IO) so shared mmap works; the cache stays valid
        // across opens because every change to the file passes through this mount.
        // O_DIRECT opens bypass the cache in the kernel and may write in parallel.
        let flags = FopenFlags::FOPEN_KEEP_CACHE | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES;
        if tree_of(ino.0) != 0 {
            // A snapshot's file: opened for reading (writes are refused by `write`).
            return match self.node(ino.0) {
                Ok(Node::Snapshot { ds, object, .. }) => match ds.open(object) {
                    Ok(()) => reply.opened(self.opened(), flags),
                    Err(e) => reply.error(errno(&e)),
                },
                Ok(Node::Virtual(_)) => reply.error(Errno::EISDIR),
                Err(e) => reply.error(errno(&e)),
            };
        }
        match self.ds.open(ino.0) {
            Ok(()) => reply.opened(self.opened(), flags),
            Err(e) => reply.error(errno(&e)),
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
        if read_only(&[parent.0]) {
            return reply.error(Errno::EROFS);
        }
        let attr = match self.ds.create(parent.0, name.as_bytes(), NewObject::File, mode & !umask, req.uid(), req.gid())
        {
            Ok(a) => a,
            Err(e) => return reply.error(errno(&e)),
        };
        if let Err(e) = self.ds.open(attr.ino) {
            return reply.error(errno(&e));
        }
        let flags = FopenFlags::FOPEN_KEEP_CACHE | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES;
        reply.created(&TTL, &fuse_attr(&attr), Generation(0), self.opened(), flags);
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
            if tree_of(ino.0) != 0 {
                return match self.other_read(ino.0, offset, &mut buf[..size as usize]) {
                    Ok(n) => reply.data(&buf[..n]),
                    Err(e) => reply.error(errno(&e)),
                };
            }
            match self.ds.read(ino.0, offset, &mut buf[..size as usize]) {
                Ok(n) => {
                    reply.data(&buf[..n]);
                    // After the reply, off the reader's latency. A failed atime update
                    // (pool suspended) must not turn a good read into an error.
                    if self.record_atime {
                        let _ = self.ds.accessed(ino.0);
                    }
                }
                Err(e) => reply.error(errno(&e)),
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
        if read_only(&[ino.0]) {
            return reply.error(Errno::EROFS);
        }
        match self.write_data(ino.0, offset, data, flags.0) {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        // close() is not a durability point; writes already reached the dataset.
        reply.ok();
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
        // The kernel's handle is gone whatever the dataset says.
        self.closed();
        if tree_of(ino.0) != 0 {
            if let Ok(Node::Snapshot { ds, object, .. }) = self.node(ino.0) {
                let _ = ds.release(object);
            }
            return reply.ok();
        }
        match self.ds.release(ino.0) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        if tree_of(ino.0) != 0 {
            return reply.ok(); // nothing there ever changes
        }
        match self.ds.fsync(ino.0) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if tree_of(ino.0) != 0 {
            return match self.other_attr(ino.0) {
                Ok(a) if a.kind == FileType::Directory => reply.opened(self.opened(), FopenFlags::empty()),
                Ok(_) => reply.error(Errno::ENOTDIR),
                Err(e) => reply.error(errno(&e)),
            };
        }
        match self.ds.getattr(ino.0) {
            Ok(a) if a.kind == FileKind::Dir => reply.opened(self.opened(), FopenFlags::empty()),
            Ok(_) => reply.error(Errno::ENOTDIR),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        // Offset 0 (the first call, or after rewinddir) takes a fresh snapshot; later
        // calls continue in it, so offsets stay stable while the directory changes.
        let cached = if offset == 0 { None } else { self.dirs.lock().get(&fh.0).cloned() };
        let list = match cached {
            Some(l) => l,
            None => match self.listing(ino.0) {
                Ok(l) => {
                    self.dirs.lock().insert(fh.0, l.clone());
                    l
                }
                Err(e) => return reply.error(errno(&e)),
            },
        };
        for (i, (name, child, kind)) in list.iter().enumerate().skip(offset as usize) {
            // The listing does not carry the mode, so a special file is listed as
            // DT_UNKNOWN's closest neighbour; stat gives the exact type.
            let ft = file_type(*kind, 0);
            if reply.add(INodeNo(*child), (i + 1) as u64, ft, OsStr::from_bytes(name)) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.dirs.lock().remove(&fh.0);
        self.closed();
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        if tree_of(ino.0) != 0 {
            return reply.ok();
        }
        match self.ds.fsync(ino.0) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        assert!(
            !self.panic_in_statfs,
            "{TEST_PANIC_IN_STATFS} is set: statfs panics (a test of the daemon's panic handling)"
        );
        // As zfs does: the size shown is what is used plus what can still be written, so
        // df's "used" is the bytes allocated and the reserve kept for metadata is not
        // counted as either.
        let allocated = self.pool.status().allocated;
        let avail = self.pool.available();
        let bs = u64::from(BLOCK);
        let (blocks, free) = ((allocated + avail) / bs, avail / bs);
        // Every object needs at least one block, so free blocks bound the free inodes.
        reply.statfs(blocks, free, free, blocks, free, BLOCK, 255, BLOCK);
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // The mount uses default_permissions: the kernel checks modes itself, so access
        // only has to say whether the object exists.
        if tree_of(ino.0) != 0 {
            return match self.other_attr(ino.0) {
                Ok(_) => reply.ok(),
                Err(e) => reply.error(errno(&e)),
            };
        }
        match self.ds.getattr(ino.0) {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
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
        if read_only(&[ino.0]) {
            return reply.error(Errno::EROFS);
        }
        match self.allocate(ino.0, offset, length, mode) {
            Ok(()) => reply.ok(),
            Err(FsError::Invalid(_)) => reply.error(Errno::EOPNOTSUPP),
            Err(e) => reply.error(errno(&e)),
        }
    }
}

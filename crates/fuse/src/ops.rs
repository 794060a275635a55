//! The transport-neutral core of the FUSE filesystem: one function per FUSE operation,
//! taking decoded arguments and returning `Result<_, Errno>`, over a
//! `tarn_dataset::Dataset`. A transport (`fuser_front` over /dev/fuse today) decodes the
//! kernel's requests, calls these and encodes the answers; nothing here knows how a
//! request arrived.
//!
//! Owns: inode numbers (= dataset object ids; the root object is FUSE's root, 1; the
//! `.tarn/snapshot` directory's numbers are `snapdir`'s), file and directory handles and
//! the open listings (one per opendir handle, so a 100k-entry directory is listed in one
//! pass), the open flags the kernel is told, and the mapping of engine errors to errno
//! values.
//!
//! Promises: every open/create is matched by `Dataset::open` and every release by
//! `Dataset::release`, so an unlinked file lives until its last close; fsync, fdatasync,
//! fsyncdir and every O_SYNC/O_DSYNC write return only once the change is committed
//! (`Dataset::fsync`); statfs reports the pool's real size and what writers can still
//! use; `read` writes the bytes once, into the caller's buffer (the transport's reply
//! buffer), with no allocation.
//!
//! Must never: answer with bytes the dataset did not return, report success for an
//! operation it did not perform (unsupported modes are EOPNOTSUPP/EINVAL), or panic on
//! anything a caller or the disk can cause.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tarn_dataset::{Attr, Dataset, FileKind, FsError, NewObject, SetAttr};
use tarn_pool::Pool;

use crate::snapdir::{self, tree_of, Node, SnapDir, CTL_DIR, CTL_NAME, SNAP_DIR, SNAP_NAME};

/// How long the kernel may trust attributes and names. Only this mount changes the
/// dataset, and the kernel invalidates what its own operations change, so this only
/// bounds how stale nlink/ctime can look after a rename or link from another name.
pub const TTL: Duration = Duration::from_secs(1);
/// statfs block size, and the smallest block size a file reports.
pub const BLOCK: u32 = 4096;
/// Longest file name (the dataset's limit too).
pub const NAME_MAX: usize = 255;
/// Largest write the kernel may send in one request.
pub const MAX_WRITE: u32 = 1 << 20;
/// The kernel's own read-ahead on a mount of a database's dataset: none past what the
/// reader asked (one byte: the kernel counts read-ahead in whole pages and rounds it down
/// to 0; fuser refuses 0 itself; one page still read half of the next 8 KiB record at
/// each read). A database reading pages through the page cache (PostgreSQL) had the
/// kernel's 1 MiB read-ahead turn 46 page misses per transaction into 71 record reads
/// from the device; its sequential streams are read ahead by tarn itself into the ARC
/// (`objects::zfetch`, which confirms a stream first and backs off when it is wasted), as
/// ZFS does beneath its files.
pub const NO_READAHEAD: u32 = 1;
/// Datasets with records this small or smaller hold a database's pages (the README's
/// advice: recordsize = the page size) and get `NO_READAHEAD`; larger records are files
/// read in long runs, where the kernel's read-ahead (`MAX_WRITE`) saves a request per
/// page (8 KiB sequential reads served from the ARC: 931 MiB/s with it, 137 without).
pub const DATABASE_RECORD_MAX: u32 = 64 << 10;

/// The kernel read-ahead a mount of a dataset with `recordsize` asks for at INIT (a
/// later change of the property takes effect at the next mount).
pub fn kernel_readahead(recordsize: u32) -> u32 {
    if recordsize <= DATABASE_RECORD_MAX {
        NO_READAHEAD
    } else {
        MAX_WRITE
    }
}
/// How many background requests (read-ahead, async direct I/O) the kernel may queue.
pub const MAX_BACKGROUND: u16 = 64;

/// FUSE's `FOPEN_KEEP_CACHE` and `FOPEN_PARALLEL_DIRECT_WRITES` (protocol constants, the
/// same for every transport).
const FOPEN_KEEP_CACHE: u32 = 1 << 1;
const FOPEN_PARALLEL_DIRECT_WRITES: u32 = 1 << 6;
/// The open flags of a file: page-cache mode (no FOPEN_DIRECT_IO) so shared mmap works;
/// the cache stays valid across opens because every change to the file passes through
/// this mount. O_DIRECT opens bypass the cache in the kernel and may write in parallel.
pub const FILE_OPEN_FLAGS: u32 = FOPEN_KEEP_CACHE | FOPEN_PARALLEL_DIRECT_WRITES;
/// `RENAME_NOREPLACE`, the one rename flag served.
const RENAME_NOREPLACE: u32 = 1;

/// A positive errno value, the only kind of failure an operation answers with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(i32);

impl Errno {
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    pub const EIO: Errno = Errno(libc::EIO);
    pub const ENOSYS: Errno = Errno(libc::ENOSYS);
    pub const ENAMETOOLONG: Errno = Errno(libc::ENAMETOOLONG);
    pub const EPROTO: Errno = Errno(libc::EPROTO);
    const EROFS: Errno = Errno(libc::EROFS);
    const EPERM: Errno = Errno(libc::EPERM);
    const EISDIR: Errno = Errno(libc::EISDIR);
    const ENOTDIR: Errno = Errno(libc::ENOTDIR);
    const EOPNOTSUPP: Errno = Errno(libc::EOPNOTSUPP);

    /// The errno value (positive).
    pub fn code(self) -> i32 {
        self.0
    }
}

impl From<FsError> for Errno {
    fn from(e: FsError) -> Errno {
        Errno(e.errno())
    }
}

/// What `statfs` reports, in `BLOCK`-sized blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Statfs {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
    pub frsize: u32,
}

/// Who asks: the caller's ids, owner of what it creates.
#[derive(Clone, Copy, Debug)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
}

/// A listing frozen at opendir: (name, ino, kind), "." and ".." first.
type Listing = Arc<Vec<(Vec<u8>, u64, FileKind)>>;

/// The root directory's object id, FUSE's root inode.
const ROOT: u64 = tarn_dataset::ROOT_ID;

/// Whether any of `inos` is outside the mounted dataset: a snapshot's, or `.tarn`'s,
/// where nothing may change.
fn read_only(inos: &[u64]) -> Result<(), Errno> {
    if inos.iter().any(|&i| tree_of(i) != 0) {
        return Err(Errno::EROFS);
    }
    Ok(())
}

/// The attributes of a snapshot's object, numbered in its tree.
fn attr_in(tree: u64, mut a: Attr) -> Attr {
    a.ino = snapdir::encode(tree, a.ino);
    a
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

impl TarnFs {
    /// The kernel read-ahead this mount asks for (`kernel_readahead`).
    pub fn kernel_readahead(&self) -> u32 {
        kernel_readahead(self.ds.effective().recordsize)
    }

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

    /// Whether reads update atimes (the dataset's `atime` property still decides when
    /// this is true); false for a `ro` or `noatime` mount.
    pub fn recording_atime(mut self, on: bool) -> TarnFs {
        self.record_atime = on;
        self
    }

    /// The count of open handles, shared with whoever watches this mount.
    pub fn open_handles(&self) -> Arc<AtomicU64> {
        self.open.clone()
    }

    // ----- the operations, in the order of the FUSE protocol's opcodes -----

    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<Attr, Errno> {
        // The kernel passes names up to 1024 bytes; POSIX wants ENAMETOOLONG past
        // NAME_MAX even when nothing by that name could exist.
        if name.len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        if tree_of(parent) != 0 || (parent == ROOT && name == CTL_NAME && self.snapdir.is_some()) {
            return Ok(self.other_lookup(parent, name)?);
        }
        Ok(self.ds.lookup(parent, name)?)
    }

    pub fn getattr(&self, ino: u64) -> Result<Attr, Errno> {
        if tree_of(ino) != 0 {
            return Ok(self.other_attr(ino)?);
        }
        Ok(self.ds.getattr(ino)?)
    }

    pub fn setattr(&self, ino: u64, set: &SetAttr) -> Result<Attr, Errno> {
        read_only(&[ino])?;
        Ok(self.ds.setattr(ino, set)?)
    }

    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>, Errno> {
        if tree_of(ino) != 0 {
            return match self.node(ino)? {
                Node::Snapshot { ds, object, .. } => Ok(ds.readlink(object)?),
                Node::Virtual(_) => Err(Errno::EINVAL),
            };
        }
        Ok(self.ds.readlink(ino)?)
    }

    pub fn symlink(&self, who: Caller, parent: u64, name: &[u8], target: &[u8]) -> Result<Attr, Errno> {
        self.make(who, parent, name, NewObject::Symlink(target), 0o777)
    }

    /// `mode` carries the file type bits; `umask` is applied here.
    pub fn mknod(
        &self,
        who: Caller,
        parent: u64,
        name: &[u8],
        mode: u32,
        umask: u32,
        rdev: u32,
    ) -> Result<Attr, Errno> {
        let mode = mode & !umask;
        let what = match mode & libc::S_IFMT {
            libc::S_IFREG | 0 => NewObject::File,
            libc::S_IFDIR => NewObject::Dir,
            _ => NewObject::Special { rdev: u64::from(rdev) },
        };
        self.make(who, parent, name, what, mode)
    }

    pub fn mkdir(&self, who: Caller, parent: u64, name: &[u8], mode: u32, umask: u32) -> Result<Attr, Errno> {
        self.make(who, parent, name, NewObject::Dir, mode & !umask)
    }

    pub fn unlink(&self, parent: u64, name: &[u8]) -> Result<(), Errno> {
        read_only(&[parent])?;
        Ok(self.ds.unlink(parent, name)?)
    }

    pub fn rmdir(&self, parent: u64, name: &[u8]) -> Result<(), Errno> {
        read_only(&[parent])?;
        Ok(self.ds.rmdir(parent, name)?)
    }

    /// `flags`: renameat2's; only RENAME_NOREPLACE is served.
    pub fn rename(&self, parent: u64, name: &[u8], newparent: u64, newname: &[u8], flags: u32) -> Result<(), Errno> {
        read_only(&[parent, newparent])?;
        // RENAME_EXCHANGE and RENAME_WHITEOUT are not implemented: refuse, never fake.
        if flags & !RENAME_NOREPLACE != 0 {
            return Err(Errno::EINVAL);
        }
        let noreplace = flags & RENAME_NOREPLACE != 0;
        Ok(self.ds.rename(parent, name, newparent, newname, noreplace)?)
    }

    pub fn link(&self, ino: u64, newparent: u64, newname: &[u8]) -> Result<Attr, Errno> {
        read_only(&[ino, newparent])?;
        match self.ds.link(ino, newparent, newname) {
            Ok(a) => Ok(a),
            // POSIX wants EPERM for a hard link to a directory.
            Err(FsError::Invalid(_)) => Err(Errno::EPERM),
            Err(e) => Err(e.into()),
        }
    }

    /// Opens a file: its handle (the kernel is told `FILE_OPEN_FLAGS`).
    pub fn open(&self, ino: u64) -> Result<u64, Errno> {
        if tree_of(ino) != 0 {
            // A snapshot's file: opened for reading (writes are refused by `write`).
            return match self.node(ino)? {
                Node::Snapshot { ds, object, .. } => {
                    ds.open(object)?;
                    Ok(self.opened())
                }
                Node::Virtual(_) => Err(Errno::EISDIR),
            };
        }
        self.ds.open(ino)?;
        Ok(self.opened())
    }

    /// Reads into `buf` (all of it is asked for): the count of bytes read. The caller
    /// replies, then calls `after_read` (atime is updated off the reader's latency).
    pub fn read(&self, ino: u64, offset: u64, buf: &mut [u8]) -> Result<usize, Errno> {
        if tree_of(ino) != 0 {
            return match self.node(ino)? {
                Node::Snapshot { ds, object, .. } => Ok(ds.read(object, offset, buf)?),
                Node::Virtual(_) => Err(Errno::EISDIR),
            };
        }
        Ok(self.ds.read(ino, offset, buf)?)
    }

    /// After a successful read has been answered: records the access time.
    pub fn after_read(&self, ino: u64) {
        // A failed atime update (pool suspended) must not turn a good read into an
        // error; a snapshot's atimes never change.
        if self.record_atime && tree_of(ino) == 0 {
            let _ = self.ds.accessed(ino);
        }
    }

    /// Writes `data` and, for O_SYNC/O_DSYNC writes (`open_flags`), makes it durable
    /// before returning.
    pub fn write(&self, ino: u64, offset: u64, data: &[u8], open_flags: i32) -> Result<usize, Errno> {
        read_only(&[ino])?;
        let n = self.ds.write(ino, offset, data)?;
        if open_flags & libc::O_DSYNC != 0 {
            self.ds.fsync(ino)?;
        }
        Ok(n)
    }

    pub fn statfs(&self) -> Statfs {
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
        Statfs {
            blocks,
            bfree: free,
            bavail: free,
            files: blocks,
            ffree: free,
            bsize: BLOCK,
            namelen: NAME_MAX as u32,
            frsize: BLOCK,
        }
    }

    /// The kernel's handle of a file is gone, whatever the dataset says.
    pub fn release(&self, ino: u64) -> Result<(), Errno> {
        self.closed();
        if tree_of(ino) != 0 {
            if let Ok(Node::Snapshot { ds, object, .. }) = self.node(ino) {
                let _ = ds.release(object);
            }
            return Ok(());
        }
        Ok(self.ds.release(ino)?)
    }

    /// fsync, fdatasync and fsyncdir: the change is committed when this returns.
    pub fn fsync(&self, ino: u64) -> Result<(), Errno> {
        if tree_of(ino) != 0 {
            return Ok(()); // nothing there ever changes
        }
        Ok(self.ds.fsync(ino)?)
    }

    /// close() is not a durability point; writes already reached the dataset.
    pub fn flush(&self, _ino: u64) -> Result<(), Errno> {
        Ok(())
    }

    pub fn opendir(&self, ino: u64) -> Result<u64, Errno> {
        if self.getattr(ino)?.kind != FileKind::Dir {
            return Err(Errno::ENOTDIR);
        }
        Ok(self.opened())
    }

    /// Lists directory `ino` from entry `offset` on, calling `add(ino, next_offset,
    /// kind, name)` for each until it answers true (the reply is full).
    pub fn readdir(
        &self,
        ino: u64,
        fh: u64,
        offset: u64,
        mut add: impl FnMut(u64, u64, FileKind, &[u8]) -> bool,
    ) -> Result<(), Errno> {
        // Offset 0 (the first call, or after rewinddir) takes a fresh snapshot; later
        // calls continue in it, so offsets stay stable while the directory changes.
        let cached = if offset == 0 { None } else { self.dirs.lock().get(&fh).cloned() };
        let list = match cached {
            Some(l) => l,
            None => {
                let l = self.listing(ino)?;
                self.dirs.lock().insert(fh, l.clone());
                l
            }
        };
        for (i, (name, child, kind)) in list.iter().enumerate().skip(usize::try_from(offset).unwrap_or(usize::MAX)) {
            if add(*child, (i + 1) as u64, *kind, name) {
                break;
            }
        }
        Ok(())
    }

    pub fn releasedir(&self, fh: u64) {
        self.dirs.lock().remove(&fh);
        self.closed();
    }

    /// The mount uses default_permissions: the kernel checks modes itself, so access
    /// only has to say whether the object exists.
    pub fn access(&self, ino: u64) -> Result<(), Errno> {
        self.getattr(ino).map(|_| ())
    }

    /// Creates and opens a file: its attributes and handle (open flags
    /// `FILE_OPEN_FLAGS`). `umask` is applied here.
    pub fn create(&self, who: Caller, parent: u64, name: &[u8], mode: u32, umask: u32) -> Result<(Attr, u64), Errno> {
        read_only(&[parent])?;
        let attr = self.ds.create(parent, name, NewObject::File, mode & !umask, who.uid, who.gid)?;
        self.ds.open(attr.ino)?;
        Ok((attr, self.opened()))
    }

    /// fallocate: mode 0 extends the size, KEEP_SIZE alone reserves nothing (copy-on-
    /// write cannot reserve in place), PUNCH_HOLE zeroes, ZERO_RANGE zeroes and may extend.
    pub fn fallocate(&self, ino: u64, offset: u64, length: u64, mode: i32) -> Result<(), Errno> {
        read_only(&[ino])?;
        match self.allocate(ino, offset, length, mode) {
            Ok(()) => Ok(()),
            Err(FsError::Invalid(_)) => Err(Errno::EOPNOTSUPP),
            Err(e) => Err(e.into()),
        }
    }

    // ----- helpers -----

    fn snapdir(&self) -> Result<&SnapDir, FsError> {
        self.snapdir.as_ref().ok_or(FsError::NotFound)
    }

    /// What an inode outside the mounted dataset (tree ≠ 0) names.
    fn node(&self, ino: u64) -> Result<Node<'_>, FsError> {
        self.snapdir()?.node(ino)
    }

    /// Attributes of an inode outside the mounted dataset.
    fn other_attr(&self, ino: u64) -> Result<Attr, FsError> {
        match self.node(ino)? {
            Node::Virtual(v) => Ok(snapdir::virtual_attr(v)),
            Node::Snapshot { tree, ds, object, .. } => Ok(attr_in(tree, ds.getattr(object)?)),
        }
    }

    /// `name` in directory `parent`, outside the mounted dataset or `.tarn` at its root.
    fn other_lookup(&self, parent: u64, name: &[u8]) -> Result<Attr, FsError> {
        if parent == ROOT && name == CTL_NAME {
            self.snapdir()?;
            return Ok(snapdir::virtual_attr(CTL_DIR));
        }
        match self.node(parent)? {
            Node::Virtual(CTL_DIR) if name == SNAP_NAME => Ok(snapdir::virtual_attr(SNAP_DIR)),
            Node::Virtual(SNAP_DIR) => {
                let (tree, ds) = self.snapdir()?.snapshot(name)?;
                Ok(attr_in(tree, ds.getattr(ROOT)?))
            }
            Node::Virtual(_) => Err(FsError::NotFound),
            Node::Snapshot { tree, ds, object, .. } => Ok(attr_in(tree, ds.lookup(object, name)?)),
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
            Node::Snapshot { tree, ds, object, .. } => {
                let parent = if object == ROOT { SNAP_DIR } else { snapdir::encode(tree, ds.parent_of(object)?) };
                let mut all = vec![(b".".to_vec(), ino, FileKind::Dir), (b"..".to_vec(), parent, FileKind::Dir)];
                for (name, child, kind) in ds.readdir(object)? {
                    all.push((name, snapdir::encode(tree, child), kind));
                }
                Ok(Arc::new(all))
            }
        }
    }

    fn opened(&self) -> u64 {
        self.open.fetch_add(1, Ordering::Relaxed);
        self.next_fh.fetch_add(1, Ordering::Relaxed)
    }

    fn closed(&self) {
        // Saturating: a release the kernel sends for a handle of an earlier mount of the
        // same dataset (there is none today) must not wrap the count.
        let _ = self.open.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    /// Creates `name` in `parent`: its attributes.
    fn make(&self, who: Caller, parent: u64, name: &[u8], what: NewObject, mode: u32) -> Result<Attr, Errno> {
        read_only(&[parent])?;
        Ok(self.ds.create(parent, name, what, mode, who.uid, who.gid)?)
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
}

//! dataset — a named tree of objects with properties: the POSIX-shaped API that the FUSE
//! layer (and the tests) use — lookup, create, read, write, truncate, fsync, rename…
//!
//! Owns: names within directories, link counts, unlinked-but-open objects, the dataset's
//! effective properties and its space counters.
//!
//! Promises: every change joins one txg through a `TxgHold` (so it commits whole);
//! namespace changes of one dataset are serialised, data changes lock only their object;
//! `fsync` returns only when the object's last change is committed (unless
//! `sync=disabled`); a write that cannot fit gets `NoSpace`, and stores nothing.
//!
//! Must never: hold two object locks at once (deadlock-free by construction), or hand out
//! bytes that failed their checksum.

pub mod props;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use tarn_objects::{DirEntry, Dnode, LogData, ObjError, ObjSet, ObjState, ObjType, Object, SyncPolicy};
use tarn_txg::TxgError;
use tarn_zil::{Op, WriteData, WriteSource, Zil};
use tarn_zio::{BlockType, IoClass, PendingBlock, ZioError};

pub use props::{Effective, SyncMode};
pub use tarn_objects::Timespec;

pub const ROOT_ID: u64 = 1;
const NAME_MAX: usize = 255;
/// Dirty bytes charged for a metadata-only change (a dnode and a directory record).
const META_CHARGE: u64 = 1024;
/// Without a log device, writes at least this large are logged as pointers to their
/// blocks written in place rather than copied into the log (ZFS's zfs_immediate_write_sz):
/// copying them would write the data twice to the same disk.
pub const IMMEDIATE_WRITE_BYTES: usize = 32 << 10;

#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("no such file or directory")]
    NotFound,
    #[error("file exists")]
    Exists,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("directory not empty")]
    NotEmpty,
    #[error("file name too long (limit {NAME_MAX} bytes)")]
    NameTooLong,
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("no space left in pool")]
    NoSpace,
    #[error("I/O error: {0}")]
    Io(String),
    #[error(transparent)]
    Txg(#[from] TxgError),
}

impl FsError {
    pub fn errno(&self) -> i32 {
        match self {
            FsError::NotFound => libc::ENOENT,
            FsError::Exists => libc::EEXIST,
            FsError::NotDir => libc::ENOTDIR,
            FsError::IsDir => libc::EISDIR,
            FsError::NotEmpty => libc::ENOTEMPTY,
            FsError::NameTooLong => libc::ENAMETOOLONG,
            FsError::Invalid(_) => libc::EINVAL,
            FsError::NoSpace => libc::ENOSPC,
            FsError::Io(_) | FsError::Txg(_) => libc::EIO,
        }
    }
}

impl From<ZioError> for FsError {
    fn from(e: ZioError) -> Self {
        match e {
            ZioError::NoSpace(_) => FsError::NoSpace,
            other => FsError::Io(other.to_string()),
        }
    }
}

impl From<ObjError> for FsError {
    fn from(e: ObjError) -> Self {
        match e {
            ObjError::NoObject(_) => FsError::NotFound,
            ObjError::NotDir => FsError::NotDir,
            ObjError::Zio(z) => z.into(),
            ObjError::Corrupt(m) => FsError::Io(m),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    Special,
}

impl FileKind {
    fn obj_type(self) -> ObjType {
        match self {
            FileKind::File => ObjType::File,
            FileKind::Dir => ObjType::Dir,
            FileKind::Symlink => ObjType::Symlink,
            FileKind::Special => ObjType::Special,
        }
    }
    fn of(t: ObjType) -> FileKind {
        match t {
            ObjType::Dir => FileKind::Dir,
            ObjType::Symlink => FileKind::Symlink,
            ObjType::Special => FileKind::Special,
            _ => FileKind::File,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    pub kind: FileKind,
    pub size: u64,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    pub crtime: Timespec,
    pub rdev: u64,
    pub blksize: u32,
}

impl Attr {
    fn of(ino: u64, d: &Dnode) -> Attr {
        Attr {
            ino,
            kind: FileKind::of(d.obj_type),
            size: d.size,
            mode: d.mode,
            uid: d.uid,
            gid: d.gid,
            nlink: d.nlink,
            atime: d.atime,
            mtime: d.mtime,
            ctime: d.ctime,
            crtime: d.crtime,
            rdev: d.rdev,
            blksize: d.blksz,
        }
    }
}

/// What `setattr` changes; `None` leaves a field alone.
#[derive(Clone, Debug, Default)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<Timespec>,
    pub mtime: Option<Timespec>,
}

/// What a new object is.
pub enum NewObject<'a> {
    File,
    Dir,
    Symlink(&'a [u8]),
    Special { rdev: u64 },
}

/// Space the pool can still promise to writers; implemented by the pool.
pub trait SpaceOracle: Send + Sync {
    /// Err(NoSpace) if `bytes` more dirty data cannot be stored.
    fn reserve(&self, bytes: u64) -> Result<(), FsError>;
}

pub struct Dataset {
    pub id: u64,
    pub os: ObjSet,
    eff: RwLock<Effective>,
    ns: Mutex<()>,
    space: Arc<dyn SpaceOracle>,
    /// The pool's intent log: every change is queued there, fsync commits the queue.
    zil: Arc<Zil>,
    pub used_physical: AtomicU64,
    pub used_logical: AtomicU64,
    opens: Mutex<HashMap<u64, u32>>,
    unlinked: Mutex<BTreeSet<u64>>,
    /// The unlinked set as of the last quiesce: what the syncing txg records.
    unlinked_at_quiesce: Mutex<Vec<u64>>,
}

/// The relatime rule, on a dnode's times.
trait AtimeRule {
    fn atime_is_stale(&self, now: Timespec) -> bool;
}

impl AtimeRule for Dnode {
    fn atime_is_stale(&self, now: Timespec) -> bool {
        const DAY: i64 = 24 * 3600;
        let t = |x: Timespec| (x.sec, x.nsec);
        t(self.atime) <= t(self.mtime) || t(self.atime) <= t(self.ctime) || now.sec - self.atime.sec >= DAY
    }
}

fn check_name(name: &[u8]) -> Result<(), FsError> {
    if name.len() > NAME_MAX {
        return Err(FsError::NameTooLong);
    }
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0) {
        return Err(FsError::Invalid(format!("bad file name {:?}", String::from_utf8_lossy(name))));
    }
    Ok(())
}

fn mode_with_type(kind: FileKind, mode: u32) -> u32 {
    let perm = mode & 0o7777;
    match kind {
        FileKind::File => libc::S_IFREG | perm,
        FileKind::Dir => libc::S_IFDIR | perm,
        FileKind::Symlink => libc::S_IFLNK | 0o777,
        FileKind::Special => mode,
    }
}

impl Dataset {
    pub fn new(
        id: u64,
        os: ObjSet,
        eff: Effective,
        space: Arc<dyn SpaceOracle>,
        zil: Arc<Zil>,
        unlinked: Vec<u64>,
    ) -> Dataset {
        Dataset {
            id,
            os,
            eff: RwLock::new(eff),
            ns: Mutex::new(()),
            space,
            zil,
            used_physical: AtomicU64::new(0),
            used_logical: AtomicU64::new(0),
            opens: Mutex::new(HashMap::new()),
            unlinked: Mutex::new(unlinked.into_iter().collect()),
            unlinked_at_quiesce: Mutex::new(Vec::new()),
        }
    }

    /// Creates the root directory of a new dataset (in the txg of `hold_txg`).
    pub fn init_root(&self) -> Result<(), FsError> {
        let hold = self.os.ctx().txg.hold(META_CHARGE)?;
        let mut d = Dnode::new(ObjType::Dir, 512, libc::S_IFDIR | 0o755, hold.txg);
        d.nlink = 2;
        d.parent = ROOT_ID;
        let root = self.os.alloc(d);
        assert_eq!(root.id, ROOT_ID, "root directory must be object 1");
        let mut st = root.lock();
        st.dir = Some(Default::default());
        st.dir_dirty = true;
        st.last_dirty_txg = hold.txg;
        Ok(())
    }

    pub fn effective(&self) -> Effective {
        self.eff.read().clone()
    }

    pub fn set_effective(&self, eff: Effective) {
        *self.eff.write() = eff;
    }

    fn zio(&self) -> &tarn_zio::Zio {
        &self.os.ctx().zio
    }

    fn hold(&self, bytes: u64) -> Result<tarn_txg::TxgHold<'_>, FsError> {
        Ok(self.os.ctx().txg.hold(bytes)?)
    }

    /// Queues a change in the intent log (unless `sync=disabled`, where nothing waits
    /// for it).
    fn log(&self, txg: u64, op: Op) {
        if self.eff.read().sync != SyncMode::Disabled {
            self.zil.log(txg, self.id, op);
        }
    }

    pub fn getattr(&self, ino: u64) -> Result<Attr, FsError> {
        let obj = self.os.get(ino)?;
        let st = obj.lock();
        Ok(Attr::of(ino, &st.dnode))
    }

    pub fn lookup(&self, dir: u64, name: &[u8]) -> Result<Attr, FsError> {
        let entry = self.entry(dir, name)?.ok_or(FsError::NotFound)?;
        self.getattr(entry.obj)
    }

    fn entry(&self, dir: u64, name: &[u8]) -> Result<Option<DirEntry>, FsError> {
        let d = self.os.get(dir)?;
        let mut st = d.lock();
        Ok(st.dir_entries(self.zio())?.get(name).copied())
    }

    /// Entries of a directory, sorted by name (without "." and "..").
    pub fn readdir(&self, dir: u64) -> Result<Vec<(Vec<u8>, u64, FileKind)>, FsError> {
        let d = self.os.get(dir)?;
        let mut st = d.lock();
        let entries = st.dir_entries(self.zio())?;
        Ok(entries.iter().map(|(n, e)| (n.clone(), e.obj, FileKind::of(e.obj_type))).collect())
    }

    pub fn parent_of(&self, dir: u64) -> Result<u64, FsError> {
        Ok(self.os.get(dir)?.lock().dnode.parent)
    }

    /// Creates `name` in `dir`.
    pub fn create(
        &self,
        dir: u64,
        name: &[u8],
        what: NewObject,
        mode: u32,
        uid: u32,
        gid: u32,
    ) -> Result<Attr, FsError> {
        check_name(name)?;
        let hold = self.hold(META_CHARGE)?;
        let _ns = self.ns.lock();
        let parent = self.os.get(dir)?;
        let mut pst = parent.lock();
        if pst.dir_entries(self.zio())?.contains_key(name) {
            return Err(FsError::Exists);
        }
        let kind = match what {
            NewObject::File => FileKind::File,
            NewObject::Dir => FileKind::Dir,
            NewObject::Symlink(_) => FileKind::Symlink,
            NewObject::Special { .. } => FileKind::Special,
        };
        let mut d = Dnode::new(kind.obj_type(), 512, mode_with_type(kind, mode), hold.txg);
        d.uid = uid;
        d.gid = gid;
        d.parent = dir;
        if let NewObject::Special { rdev } = what {
            d.rdev = rdev;
        }
        if kind == FileKind::Dir {
            d.nlink = 2;
        }
        let rdev = d.rdev;
        let full_mode = d.mode;
        let obj = self.os.alloc(d);
        let target = if let NewObject::Symlink(t) = what { t.to_vec() } else { Vec::new() };
        self.log(
            hold.txg,
            Op::Create {
                parent: dir,
                obj: obj.id,
                kind: kind.obj_type() as u8,
                mode: full_mode,
                uid,
                gid,
                rdev,
                name: name.to_vec(),
                target,
            },
        );
        {
            let mut st = obj.lock();
            match what {
                NewObject::Dir => {
                    st.dir = Some(Default::default());
                    st.dir_dirty = true;
                }
                NewObject::Symlink(target) => st.write(self.zio(), hold.txg, 0, target, 4096)?,
                _ => {}
            }
            st.last_dirty_txg = hold.txg;
        }
        pst.dir_entries(self.zio())?.insert(name.to_vec(), DirEntry { obj: obj.id, obj_type: kind.obj_type() });
        if kind == FileKind::Dir {
            pst.dnode.nlink += 1;
        }
        touch_dir(&mut pst, hold.txg);
        drop(pst);
        self.os.mark_dirty(dir);
        self.getattr(obj.id)
    }

    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>, FsError> {
        let obj = self.os.get(ino)?;
        let st = obj.lock();
        if st.dnode.obj_type != ObjType::Symlink {
            return Err(FsError::Invalid("not a symbolic link".into()));
        }
        let mut buf = vec![0u8; st.dnode.size as usize];
        let n = ObjState::read(st, self.zio(), &self.os.ctx().reclaim, 0, &mut buf, self.effective().primarycache)?;
        buf.truncate(n);
        Ok(buf)
    }

    /// Adds a hard link `newname` in `newdir` to `ino`.
    pub fn link(&self, ino: u64, newdir: u64, newname: &[u8]) -> Result<Attr, FsError> {
        check_name(newname)?;
        let hold = self.hold(META_CHARGE)?;
        let _ns = self.ns.lock();
        let obj = self.os.get(ino)?;
        let kind = {
            let st = obj.lock();
            if st.dnode.obj_type == ObjType::Dir {
                return Err(FsError::Invalid("hard links to directories are not allowed".into()));
            }
            st.dnode.obj_type
        };
        let d = self.os.get(newdir)?;
        let mut dst = d.lock();
        let entries = dst.dir_entries(self.zio())?;
        if entries.contains_key(newname) {
            return Err(FsError::Exists);
        }
        entries.insert(newname.to_vec(), DirEntry { obj: ino, obj_type: kind });
        touch_dir(&mut dst, hold.txg);
        self.log(hold.txg, Op::Link { obj: ino, dir: newdir, name: newname.to_vec() });
        drop(dst);
        self.os.mark_dirty(newdir);
        let mut st = obj.lock();
        st.dnode.nlink += 1;
        st.dnode.ctime = Timespec::now();
        st.last_dirty_txg = hold.txg;
        drop(st);
        self.os.mark_dirty(ino);
        self.getattr(ino)
    }

    pub fn unlink(&self, dir: u64, name: &[u8]) -> Result<(), FsError> {
        self.remove(dir, name, false)
    }

    pub fn rmdir(&self, dir: u64, name: &[u8]) -> Result<(), FsError> {
        self.remove(dir, name, true)
    }

    fn remove(&self, dir: u64, name: &[u8], want_dir: bool) -> Result<(), FsError> {
        let hold = self.hold(0)?;
        let _ns = self.ns.lock();
        let entry = self.entry(dir, name)?.ok_or(FsError::NotFound)?;
        let is_dir = entry.obj_type == ObjType::Dir;
        match (want_dir, is_dir) {
            (false, true) => return Err(FsError::IsDir),
            (true, false) => return Err(FsError::NotDir),
            _ => {}
        }
        if is_dir && !self.dir_is_empty(entry.obj)? {
            return Err(FsError::NotEmpty);
        }
        self.log(hold.txg, Op::Remove { parent: dir, name: name.to_vec(), is_dir });
        self.drop_entry(dir, name, is_dir, hold.txg)?;
        self.drop_link(entry.obj, is_dir, hold.txg)
    }

    fn dir_is_empty(&self, dir: u64) -> Result<bool, FsError> {
        let d = self.os.get(dir)?;
        let mut st = d.lock();
        Ok(st.dir_entries(self.zio())?.is_empty())
    }

    fn drop_entry(&self, dir: u64, name: &[u8], was_dir: bool, txg: u64) -> Result<(), FsError> {
        let d = self.os.get(dir)?;
        let mut st = d.lock();
        st.dir_entries(self.zio())?.remove(name);
        if was_dir {
            st.dnode.nlink -= 1;
        }
        touch_dir(&mut st, txg);
        drop(st);
        self.os.mark_dirty(dir);
        Ok(())
    }

    /// One name less for `ino`; frees it when no name and no open handle is left.
    fn drop_link(&self, ino: u64, is_dir: bool, txg: u64) -> Result<(), FsError> {
        let obj = self.os.get(ino)?;
        let mut st = obj.lock();
        st.dnode.nlink = if is_dir { 0 } else { st.dnode.nlink.saturating_sub(1) };
        st.dnode.ctime = Timespec::now();
        st.last_dirty_txg = txg;
        let orphan = st.dnode.nlink == 0;
        drop(st);
        self.os.mark_dirty(ino);
        if orphan {
            if self.opens.lock().get(&ino).copied().unwrap_or(0) > 0 {
                self.unlinked.lock().insert(ino);
            } else {
                self.os.free_object(&obj, txg);
            }
        }
        Ok(())
    }

    /// Renames atomically; an existing target is replaced (unless `noreplace`).
    pub fn rename(&self, sdir: u64, sname: &[u8], ddir: u64, dname: &[u8], noreplace: bool) -> Result<(), FsError> {
        check_name(dname)?;
        let hold = self.hold(META_CHARGE)?;
        let _ns = self.ns.lock();
        let src = self.entry(sdir, sname)?.ok_or(FsError::NotFound)?;
        let src_is_dir = src.obj_type == ObjType::Dir;
        if src_is_dir && sdir != ddir && self.is_ancestor(src.obj, ddir)? {
            return Err(FsError::Invalid("cannot move a directory into itself".into()));
        }
        if let Some(dst) = self.entry(ddir, dname)? {
            if dst.obj == src.obj {
                return Ok(());
            }
            if noreplace {
                return Err(FsError::Exists);
            }
            let dst_is_dir = dst.obj_type == ObjType::Dir;
            match (src_is_dir, dst_is_dir) {
                (true, false) => return Err(FsError::NotDir),
                (false, true) => return Err(FsError::IsDir),
                _ => {}
            }
            if dst_is_dir && !self.dir_is_empty(dst.obj)? {
                return Err(FsError::NotEmpty);
            }
            self.log_rename(hold.txg, sdir, sname, ddir, dname, noreplace);
            self.drop_entry(ddir, dname, dst_is_dir, hold.txg)?;
            self.drop_link(dst.obj, dst_is_dir, hold.txg)?;
        } else {
            self.log_rename(hold.txg, sdir, sname, ddir, dname, noreplace);
        }
        self.drop_entry(sdir, sname, src_is_dir, hold.txg)?;
        let d = self.os.get(ddir)?;
        let mut st = d.lock();
        st.dir_entries(self.zio())?.insert(dname.to_vec(), src);
        if src_is_dir {
            st.dnode.nlink += 1;
        }
        touch_dir(&mut st, hold.txg);
        drop(st);
        self.os.mark_dirty(ddir);
        let moved = self.os.get(src.obj)?;
        let mut mst = moved.lock();
        mst.dnode.parent = ddir;
        mst.dnode.ctime = Timespec::now();
        mst.last_dirty_txg = hold.txg;
        drop(mst);
        self.os.mark_dirty(src.obj);
        Ok(())
    }

    fn log_rename(&self, txg: u64, sdir: u64, sname: &[u8], ddir: u64, dname: &[u8], noreplace: bool) {
        self.log(txg, Op::Rename { sdir, sname: sname.to_vec(), ddir, dname: dname.to_vec(), noreplace });
    }

    /// True if `dir` is `ancestor` or lies below it.
    fn is_ancestor(&self, ancestor: u64, mut dir: u64) -> Result<bool, FsError> {
        loop {
            if dir == ancestor {
                return Ok(true);
            }
            if dir == ROOT_ID {
                return Ok(false);
            }
            dir = self.parent_of(dir)?;
        }
    }

    pub fn setattr(&self, ino: u64, set: &SetAttr) -> Result<Attr, FsError> {
        let hold = self.hold(META_CHARGE)?;
        let obj = self.os.get(ino)?;
        let mut st = obj.lock();
        if let Some(size) = set.size {
            if st.dnode.obj_type != ObjType::File {
                return Err(FsError::Invalid("size can only be set on a regular file".into()));
            }
            if size > st.dnode.size {
                self.space.reserve(0)?;
                let recordsize = self.eff.read().recordsize;
                st.fit_block_size(self.zio(), size, recordsize)?;
            }
            st.truncate(self.zio(), hold.txg, size)?;
            self.log(hold.txg, Op::Truncate { obj: ino, size });
        }
        let ts = |t: Option<Timespec>| t.map(|t| (t.sec, t.nsec));
        self.log(
            hold.txg,
            Op::SetAttr {
                obj: ino,
                mode: set.mode,
                uid: set.uid,
                gid: set.gid,
                atime: ts(set.atime),
                mtime: ts(set.mtime),
            },
        );
        if let Some(mode) = set.mode {
            st.dnode.mode = (st.dnode.mode & libc::S_IFMT) | (mode & 0o7777);
        }
        if let Some(uid) = set.uid {
            st.dnode.uid = uid;
        }
        if let Some(gid) = set.gid {
            st.dnode.gid = gid;
        }
        if let Some(t) = set.atime {
            st.dnode.atime = t;
        }
        if let Some(t) = set.mtime {
            st.dnode.mtime = t;
        }
        st.dnode.ctime = Timespec::now();
        st.last_dirty_txg = hold.txg;
        let attr = Attr::of(ino, &st.dnode);
        drop(st);
        self.os.mark_dirty(ino);
        Ok(attr)
    }

    pub fn read(&self, ino: u64, off: u64, buf: &mut [u8]) -> Result<usize, FsError> {
        let obj = self.os.get(ino)?;
        let st = obj.lock();
        if st.dnode.obj_type == ObjType::Dir {
            return Err(FsError::IsDir);
        }
        let policy = self.eff.read().primarycache;
        Ok(ObjState::read(st, self.zio(), &self.os.ctx().reclaim, off, buf, policy)?)
    }

    /// Records a read of `ino` in its atime, like Linux's relatime: only with `atime=on`,
    /// and only when the old atime is not newer than mtime or ctime or is a day old, so a
    /// file read over and over dirties its dnode at most once per change or day. ctime is
    /// left alone (an access is not a change) and nothing goes to the intent log: atime
    /// is not worth an fsync's cost, it is committed with the next txg (ZFS does the same).
    pub fn accessed(&self, ino: u64) -> Result<(), FsError> {
        if !self.eff.read().atime {
            return Ok(());
        }
        let now = Timespec::now();
        if !self.os.get(ino)?.lock().dnode.atime_is_stale(now) {
            return Ok(());
        }
        let _hold = self.hold(0)?;
        let obj = self.os.get(ino)?;
        let mut st = obj.lock();
        if !st.dnode.atime_is_stale(now) {
            return Ok(()); // another reader updated it meanwhile
        }
        st.dnode.atime = now;
        // last_dirty_txg stays: an fsync after a read has nothing to make durable.
        drop(st);
        self.os.mark_dirty(ino);
        Ok(())
    }

    pub fn write(&self, ino: u64, off: u64, data: &[u8]) -> Result<usize, FsError> {
        if data.is_empty() {
            return Ok(0);
        }
        off.checked_add(data.len() as u64).ok_or_else(|| FsError::Invalid("offset too large".into()))?;
        let eff = self.effective();
        self.reserve_or_wait(data.len() as u64)?;
        let txg = {
            let hold = self.hold(data.len() as u64)?;
            let obj = self.os.get(ino)?;
            let mut st = obj.lock();
            if st.dnode.obj_type != ObjType::File {
                return Err(if st.dnode.obj_type == ObjType::Dir {
                    FsError::IsDir
                } else {
                    FsError::Invalid("not a regular file".into())
                });
            }
            st.write(self.zio(), hold.txg, off, data, eff.recordsize)?;
            let blksz = st.dnode.blksz as u64;
            drop(st);
            if eff.sync != SyncMode::Disabled {
                let in_place = self.logs_in_place(&eff, data.len());
                self.zil.log_write(hold.txg, self.id, ino, off, data.len() as u64, blksz, in_place);
            }
            self.os.mark_dirty(ino);
            hold.txg
        };
        if eff.sync == SyncMode::Always {
            self.commit_log(ino, txg)?;
        }
        Ok(data.len())
    }

    /// Whether a write of `len` bytes reaches the log as a pointer to its block written in
    /// place (at fsync) rather than as a copy: always with `logbias=throughput`, and for
    /// large writes when the log shares the data disks.
    fn logs_in_place(&self, eff: &Effective, len: usize) -> bool {
        eff.throughput || (len >= IMMEDIATE_WRITE_BYTES && !self.zio().has_log_device())
    }

    /// Reserves room for `bytes` of new data. If the pool looks full, waits once for the
    /// open txg to commit and asks again: a deleted file's blocks and the dirty bytes of
    /// data that will never be written (the file is gone) are given back only when the
    /// txg that freed them commits, so without this wait a writer got ENOSPC for up to
    /// a txg timeout after `rm` (ZFS waits for the txg the same way). Called without a
    /// txg hold, so the wait cannot block the commit it waits for.
    fn reserve_or_wait(&self, bytes: u64) -> Result<(), FsError> {
        match self.space.reserve(bytes) {
            Err(FsError::NoSpace) => {
                self.os.ctx().txg.sync_all()?;
                self.space.reserve(bytes)
            }
            r => r,
        }
    }

    /// Zeros a range without changing the size (fallocate PUNCH_HOLE).
    pub fn punch_hole(&self, ino: u64, off: u64, len: u64) -> Result<(), FsError> {
        let hold = self.hold(META_CHARGE)?;
        let obj = self.os.get(ino)?;
        let mut st = obj.lock();
        st.punch_hole(self.zio(), hold.txg, off, len)?;
        drop(st);
        self.log(hold.txg, Op::PunchHole { obj: ino, offset: off, len });
        self.os.mark_dirty(ino);
        Ok(())
    }

    /// Returns once everything written to `ino` so far is durable.
    pub fn fsync(&self, ino: u64) -> Result<(), FsError> {
        if self.effective().sync == SyncMode::Disabled {
            return Ok(());
        }
        let txg = self.os.get(ino)?.lock().last_dirty_txg;
        self.commit_log(ino, txg)
    }

    /// Makes everything changed so far durable: one intent-log write (shared with
    /// concurrent callers); if the log cannot be written, a txg commit instead.
    fn commit_log(&self, ino: u64, txg: u64) -> Result<(), FsError> {
        if self.os.ctx().txg.synced() >= txg {
            return Ok(());
        }
        match self.zil.commit_for(self.id, ino, self) {
            Ok(()) => Ok(()),
            // The failed commit had taken its records off the queue — this file's and the
            // namespace changes of any txg so far — so commit everything they belong to.
            Err(_) => Ok(self.os.ctx().txg.sync_all()?),
        }
    }

    /// An open handle keeps an unlinked file's data alive until its release.
    pub fn open(&self, ino: u64) -> Result<(), FsError> {
        self.os.get(ino)?;
        *self.opens.lock().entry(ino).or_default() += 1;
        Ok(())
    }

    pub fn release(&self, ino: u64) -> Result<(), FsError> {
        let last = {
            let mut opens = self.opens.lock();
            let n = opens.entry(ino).or_default();
            *n = n.saturating_sub(1);
            let last = *n == 0;
            if last {
                opens.remove(&ino);
            }
            last
        };
        if last && self.unlinked.lock().remove(&ino) {
            let hold = self.hold(0)?;
            let obj = self.os.get(ino)?;
            self.os.free_object(&obj, hold.txg);
        }
        Ok(())
    }

    /// Objects unlinked while open, as of the syncing txg; the next import frees them.
    pub fn unlinked_syncing(&self) -> Vec<u64> {
        self.unlinked_at_quiesce.lock().clone()
    }

    /// Frees objects left unlinked by a previous run (called once at import).
    pub fn reclaim_unlinked(&self) -> Result<(), FsError> {
        let ids: Vec<u64> = std::mem::take(&mut *self.unlinked.lock()).into_iter().collect();
        for ino in ids {
            let hold = self.hold(0)?;
            if let Ok(obj) = self.os.get(ino) {
                self.os.free_object(&obj, hold.txg);
            }
        }
        Ok(())
    }

    pub fn quiesce(&self, txg: u64) -> Result<(), ObjError> {
        *self.unlinked_at_quiesce.lock() = self.unlinked.lock().iter().copied().collect();
        self.os.quiesce(txg)
    }

    /// Writes this dataset's part of txg `txg` and updates its space counters.
    pub fn sync(&self, txg: u64) -> Result<(), ObjError> {
        let eff = self.effective();
        let r = self
            .os
            .sync(txg, SyncPolicy { compression: eff.compression, checksum: eff.checksum, cache: eff.primarycache })?;
        self.used_physical.fetch_add(r.allocated_physical, Ordering::Relaxed);
        self.used_logical.fetch_add(r.allocated_logical, Ordering::Relaxed);
        self.used_physical
            .fetch_sub(r.freed_physical.min(self.used_physical.load(Ordering::Relaxed)), Ordering::Relaxed);
        self.used_logical.fetch_sub(r.freed_logical.min(self.used_logical.load(Ordering::Relaxed)), Ordering::Relaxed);
        Ok(())
    }
}

/// The intent log asks, at fsync, for the data of queued writes: a copy as of their txg,
/// or (in_place) their record written in place.
impl WriteSource for Dataset {
    fn write_data(&self, txg: u64, ino: u64, off: u64, len: u64, in_place: bool) -> Result<WriteData, ZioError> {
        let obj = match self.os.get_including_freed(ino) {
            Ok(obj) => obj,
            Err(ObjError::Zio(e)) => return Err(e),
            // Never created in a committed txg and already gone: nothing to replay it on.
            Err(_) => return Ok(WriteData::Committed),
        };
        let ctx = self.os.ctx();
        // Holding `txg` open keeps the record in its changes while its block is written,
        // so the txg can adopt the block. Not waiting: the log is held (see try_hold_open).
        let hold = if in_place { ctx.txg.try_hold_open(txg) } else { None };
        let mut st = obj.lock();
        let (blkid, block_offset, rec) = match st.log_data(&ctx.zio, txg, ctx.txg.synced(), off, len, hold.is_some())? {
            LogData::Committed => return Ok(WriteData::Committed),
            LogData::Bytes(data) => return Ok(WriteData::Copied(data)),
            LogData::Record { blkid, block_offset, rec } => (blkid, block_offset, rec),
        };
        if let Some(bp) = st.early_block(blkid, &rec) {
            return Ok(WriteData::InPlace { block_offset, bp });
        }
        drop(st); // readers and writers of the file go on while the block is written
        let eff = self.effective();
        let block = PendingBlock {
            data: &rec,
            compression: eff.compression,
            checksum: eff.checksum,
            level: 0,
            block_type: BlockType::Data,
            cache: eff.primarycache,
        };
        // The fsync that asked waits for this write: it goes ahead of the txg's writes.
        let bp = ctx.zio.write_blocks_as(&[block], txg, IoClass::SyncWrite)?.pop().expect("one block written");
        obj.lock().set_early_block(blkid, &rec, bp);
        drop(hold);
        Ok(WriteData::InPlace { block_offset, bp })
    }
}

fn touch_dir(st: &mut ObjState, txg: u64) {
    st.dir_dirty = true;
    let now = Timespec::now();
    st.dnode.mtime = now;
    st.dnode.ctime = now;
    st.last_dirty_txg = txg;
}

/// Lets tests and tools reach an object directly.
pub fn object_of(ds: &Dataset, ino: u64) -> Result<Arc<Object>, FsError> {
    Ok(ds.os.get(ino)?)
}

//! What a caller sees of an object and may change: `Attr` (stat), `SetAttr` (setattr),
//! `FileKind`, `NewObject` (what `create` makes), and the relatime rule.
//!
//! Owns: the translation between the dataset's POSIX view and the object's dnode.
//!
//! Promises: `Attr` is a copy taken under the object's lock, consistent in itself.
//!
//! Must never: change an object (the named operations of objects do).
use tarn_objects::{AttrChange, Dnode, ObjType, Timespec};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    Special,
}

impl FileKind {
    pub(crate) fn obj_type(self) -> ObjType {
        match self {
            FileKind::File => ObjType::File,
            FileKind::Dir => ObjType::Dir,
            FileKind::Symlink => ObjType::Symlink,
            FileKind::Special => ObjType::Special,
        }
    }

    pub(crate) fn of(t: ObjType) -> FileKind {
        match t {
            ObjType::Dir => FileKind::Dir,
            ObjType::Symlink => FileKind::Symlink,
            ObjType::Special => FileKind::Special,
            _ => FileKind::File,
        }
    }

    /// The full mode of a new object of this kind from the caller's `mode`.
    pub(crate) fn mode_with_type(self, mode: u32) -> u32 {
        let perm = mode & 0o7777;
        match self {
            FileKind::File => libc::S_IFREG | perm,
            FileKind::Dir => libc::S_IFDIR | perm,
            FileKind::Symlink => libc::S_IFLNK | 0o777,
            FileKind::Special => mode,
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
    pub(crate) fn of(ino: u64, d: &Dnode) -> Attr {
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

impl SetAttr {
    /// The changes other than the size, as objects applies them.
    pub(crate) fn attr_change(&self) -> AttrChange {
        AttrChange { mode: self.mode, uid: self.uid, gid: self.gid, atime: self.atime, mtime: self.mtime }
    }
}

/// What a new object is.
pub enum NewObject<'a> {
    File,
    Dir,
    Symlink(&'a [u8]),
    Special { rdev: u64 },
}

impl NewObject<'_> {
    pub(crate) fn kind(&self) -> FileKind {
        match self {
            NewObject::File => FileKind::File,
            NewObject::Dir => FileKind::Dir,
            NewObject::Symlink(_) => FileKind::Symlink,
            NewObject::Special { .. } => FileKind::Special,
        }
    }
}

/// The relatime rule: a read updates atime only when the old one is not newer than mtime
/// or ctime, or is a day old.
pub(crate) fn atime_is_stale(d: &Dnode, now: Timespec) -> bool {
    const DAY: i64 = 24 * 3600;
    let t = |x: Timespec| (x.sec, x.nsec);
    t(d.atime) <= t(d.mtime) || t(d.atime) <= t(d.ctime) || now.sec - d.atime.sec >= DAY
}

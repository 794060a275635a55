//! Writing a reply: a bounds-checked writer into the caller's `out` buffer and the reply
//! structs built with it (attributes, entries, open handles, directory entries).
//!
//! Owns: the layout of each reply struct.
//!
//! Promises: a reply that does not fit is EINVAL, never a write past `out`; a directory
//! listing stops at the first entry that does not fit.
//!
//! Must never: allocate (replies are written in place).

use tarn_dataset::{Attr, FileKind};

use super::Answer;
use crate::ops::{Errno, BLOCK, TTL};

/// A writer of reply structs into `out`, bounds-checked.
pub(super) struct Out<'a> {
    buf: &'a mut [u8],
    pub(super) len: usize,
}

impl<'a> Out<'a> {
    pub(super) fn new(buf: &'a mut [u8]) -> Out<'a> {
        Out { buf, len: 0 }
    }
    pub(super) fn put(&mut self, bytes: &[u8]) -> Result<(), Errno> {
        let end = self.len.checked_add(bytes.len()).ok_or(Errno::EINVAL)?;
        self.buf.get_mut(self.len..end).ok_or(Errno::EINVAL)?.copy_from_slice(bytes);
        self.len = end;
        Ok(())
    }
    pub(super) fn u16(&mut self, v: u16) -> Result<(), Errno> {
        self.put(&v.to_ne_bytes())
    }
    pub(super) fn u32(&mut self, v: u32) -> Result<(), Errno> {
        self.put(&v.to_ne_bytes())
    }
    pub(super) fn u64(&mut self, v: u64) -> Result<(), Errno> {
        self.put(&v.to_ne_bytes())
    }
    pub(super) fn zeros(&mut self, n: usize) -> Result<(), Errno> {
        let end = self.len.checked_add(n).ok_or(Errno::EINVAL)?;
        self.buf.get_mut(self.len..end).ok_or(Errno::EINVAL)?.fill(0);
        self.len = end;
        Ok(())
    }
    pub(super) fn done(self) -> Result<Answer, Errno> {
        Ok(Answer::Reply(self.len))
    }
}

/// The full `st_mode` of an object: the dataset keeps the type apart from the bits.
pub(super) fn st_mode(a: &Attr) -> u32 {
    let kind = match a.kind {
        FileKind::File => libc::S_IFREG,
        FileKind::Dir => libc::S_IFDIR,
        FileKind::Symlink => libc::S_IFLNK,
        FileKind::Special => match a.mode & libc::S_IFMT {
            0 => libc::S_IFREG,
            t => t,
        },
    };
    kind | (a.mode & 0o7777)
}

/// `struct fuse_attr` (88 bytes).
pub(super) fn put_attr(o: &mut Out, a: &Attr) -> Result<(), Errno> {
    o.u64(a.ino)?;
    o.u64(a.size)?;
    // Logical 512-byte blocks: the engine does not track per-file allocation yet.
    o.u64(a.size.div_ceil(512))?;
    o.u64(a.atime.sec as u64)?;
    o.u64(a.mtime.sec as u64)?;
    o.u64(a.ctime.sec as u64)?;
    o.u32(a.atime.nsec)?;
    o.u32(a.mtime.nsec)?;
    o.u32(a.ctime.nsec)?;
    o.u32(st_mode(a))?;
    o.u32(a.nlink)?;
    o.u32(a.uid)?;
    o.u32(a.gid)?;
    o.u32(a.rdev as u32)?;
    o.u32(a.blksize.max(BLOCK))?;
    o.u32(0) // flags
}

/// `struct fuse_entry_out` (128 bytes).
pub(super) fn put_entry(o: &mut Out, a: &Attr) -> Result<(), Errno> {
    o.u64(a.ino)?;
    o.u64(0)?; // generation
    o.u64(TTL.as_secs())?;
    o.u64(TTL.as_secs())?;
    o.u32(TTL.subsec_nanos())?;
    o.u32(TTL.subsec_nanos())?;
    put_attr(o, a)
}

/// `struct fuse_open_out` (16 bytes).
pub(super) fn put_open(o: &mut Out, fh: u64, flags: u32) -> Result<(), Errno> {
    o.u64(fh)?;
    o.u32(flags)?;
    o.u32(0)
}

pub(super) fn entry(out: &mut [u8], a: Result<Attr, Errno>) -> Result<Answer, Errno> {
    let mut o = Out::new(out);
    put_entry(&mut o, &a?)?;
    o.done()
}

pub(super) fn attr_out(out: &mut [u8], a: Result<Attr, Errno>) -> Result<Answer, Errno> {
    let a = a?;
    let mut o = Out::new(out);
    o.u64(TTL.as_secs())?;
    o.u32(TTL.subsec_nanos())?;
    o.u32(0)?;
    put_attr(&mut o, &a)?;
    o.done()
}

pub(super) fn empty(r: Result<(), Errno>) -> Result<Answer, Errno> {
    r.map(|()| Answer::Reply(0))
}

/// One `struct fuse_dirent` (padded to 8 bytes); false if `out` has no room left.
pub(super) fn put_dirent(o: &mut Out, ino: u64, next: u64, kind: FileKind, name: &[u8]) -> bool {
    let size = (24 + name.len()).next_multiple_of(8);
    if o.buf.len() - o.len < size {
        return false;
    }
    let dt = match kind {
        FileKind::File | FileKind::Special => libc::DT_REG,
        FileKind::Dir => libc::DT_DIR,
        FileKind::Symlink => libc::DT_LNK,
    };
    let pad = size - 24 - name.len();
    // Room was checked above, so these cannot fail.
    let wrote = o.u64(ino).and(o.u64(next)).and(o.u32(name.len() as u32)).and(o.u32(u32::from(dt)));
    wrote.and(o.put(name)).and(o.zeros(pad)).is_ok()
}

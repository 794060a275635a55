//! The FUSE wire protocol (the subset of 7.42 a tarn mount is sent), for the transports
//! tarn runs itself (FUSE over io_uring and its /dev/fuse companion): the layout of the
//! request and reply structs, the bounds-checked decoding of a request, its dispatch to
//! the core (`ops::TarnFs`) and the encoding of the answer.
//!
//! A request arrives as three byte slices: the `fuse_in_header`, the opcode's fixed
//! argument struct (`op`) and what follows it (`tail`: names, write data). On /dev/fuse
//! they are consecutive in one buffer ([`split_dev_request`]); on a ring entry they sit in
//! the entry's header areas and its payload buffer. A reply is the error code and the
//! bytes written at the start of the caller's `out` buffer (the ring entry's payload, or
//! the /dev/fuse write buffer after room for the `fuse_out_header`).
//!
//! Owns: those layouts, the opcode numbers, and the INIT answer of a self-run session.
//! Promises: every field is read through a bounds check, so a short or malformed request
//! is answered EINVAL, never a panic or a read past the buffer; a READ's bytes are
//! written once, straight into `out`; an opcode tarn does not serve is ENOSYS.
//! Must never: allocate on the read or write path, or answer a request with no reply
//! expected (FORGET, BATCH_FORGET, INTERRUPT).
//!
//! Modules: this one (opcodes, the header, `dispatch`), `args` (reading a request's
//! fields), `reply` (writing the reply structs), `init` (the INIT handshake).

use crate::ops::{Caller, Errno, TarnFs, FILE_OPEN_FLAGS};

mod args;
mod init;
mod reply;

use args::{name, setattr_of, two_names, Args};
pub use init::{init_reply, InitIn};
use reply::{attr_out, empty, entry, put_dirent, put_entry, put_open, Out};

/// `sizeof(struct fuse_in_header)`.
pub const IN_HEADER: usize = 40;
/// `sizeof(struct fuse_out_header)`.
pub const OUT_HEADER: usize = 16;

/// The protocol version tarn speaks when it runs the session itself.
const MAJOR: u32 = 7;
const MINOR: u32 = 42;

// Opcodes (include/uapi/linux/fuse.h).
pub const LOOKUP: u32 = 1;
pub const FORGET: u32 = 2;
const GETATTR: u32 = 3;
const SETATTR: u32 = 4;
const READLINK: u32 = 5;
const SYMLINK: u32 = 6;
const MKNOD: u32 = 8;
const MKDIR: u32 = 9;
const UNLINK: u32 = 10;
const RMDIR: u32 = 11;
const RENAME: u32 = 12;
const LINK: u32 = 13;
const OPEN: u32 = 14;
pub const READ: u32 = 15;
pub const WRITE: u32 = 16;
const STATFS: u32 = 17;
const RELEASE: u32 = 18;
const FSYNC: u32 = 20;
const FLUSH: u32 = 25;
pub const INIT: u32 = 26;
const OPENDIR: u32 = 27;
const READDIR: u32 = 28;
const RELEASEDIR: u32 = 29;
const FSYNCDIR: u32 = 30;
const ACCESS: u32 = 34;
const CREATE: u32 = 35;
pub const INTERRUPT: u32 = 36;
pub const DESTROY: u32 = 38;
pub const BATCH_FORGET: u32 = 42;
const FALLOCATE: u32 = 43;
const RENAME2: u32 = 45;

// INIT flags (the low word in `flags`, the high word in `flags2`).
const ASYNC_READ: u64 = 1 << 0;
const BIG_WRITES: u64 = 1 << 5;
const ASYNC_DIO: u64 = 1 << 15;
const PARALLEL_DIROPS: u64 = 1 << 18;
const MAX_PAGES: u64 = 1 << 22;
const INIT_EXT: u64 = 1 << 30;
/// FUSE_OVER_IO_URING: requests go to the server's rings once every queue has one.
pub const OVER_IO_URING: u64 = 1 << 41;

// SETATTR's `valid` bits.
const FATTR_MODE: u32 = 1 << 0;
const FATTR_UID: u32 = 1 << 1;
const FATTR_GID: u32 = 1 << 2;
const FATTR_SIZE: u32 = 1 << 3;
const FATTR_ATIME: u32 = 1 << 4;
const FATTR_MTIME: u32 = 1 << 5;
const FATTR_ATIME_NOW: u32 = 1 << 7;
const FATTR_MTIME_NOW: u32 = 1 << 8;

/// The size of the fixed argument struct an opcode carries (0: none, or only names).
/// On /dev/fuse it precedes the names and data; on a ring entry it is the `op_in` area.
pub fn op_struct_size(opcode: u32) -> usize {
    match opcode {
        GETATTR | FSYNC | FSYNCDIR | MKNOD | CREATE | RENAME2 => 16,
        SETATTR => 88,
        MKDIR | RENAME | LINK | OPEN | OPENDIR | ACCESS | FORGET | INTERRUPT | BATCH_FORGET => 8,
        READ | WRITE | READDIR => 40,
        RELEASE | RELEASEDIR | FLUSH => 24,
        FALLOCATE => 32,
        INIT => 64,
        _ => 0,
    }
}

/// The decoded `fuse_in_header`.
#[derive(Clone, Copy, Debug)]
pub struct InHeader {
    pub len: u32,
    pub opcode: u32,
    pub unique: u64,
    pub nodeid: u64,
    pub uid: u32,
    pub gid: u32,
}

impl InHeader {
    pub fn decode(b: &[u8]) -> Result<InHeader, Errno> {
        let a = Args(b);
        Ok(InHeader {
            len: a.u32(0)?,
            opcode: a.u32(4)?,
            unique: a.u64(8)?,
            nodeid: a.u64(16)?,
            uid: a.u32(24)?,
            gid: a.u32(28)?,
        })
    }
}

/// Where the parts of a request read from /dev/fuse (`read` bytes) lie: its header, and
/// the offsets of its tail and of the tail's end (the fixed struct is between the header
/// and the tail).
pub fn split_dev_request(buf: &[u8], read: usize) -> Result<(InHeader, usize, usize), Errno> {
    let h = InHeader::decode(buf)?;
    let end = (h.len as usize).min(read).min(buf.len());
    if end < IN_HEADER {
        return Err(Errno::EINVAL);
    }
    let tail = (IN_HEADER + op_struct_size(h.opcode)).min(end);
    Ok((h, tail, end))
}

/// The `fuse_out_header` of a reply of `len` bytes in all.
pub fn out_header(unique: u64, error: Option<Errno>, len: u32) -> [u8; OUT_HEADER] {
    let mut h = [0u8; OUT_HEADER];
    h[0..4].copy_from_slice(&len.to_ne_bytes());
    h[4..8].copy_from_slice(&error.map_or(0, |e| -e.code()).to_ne_bytes());
    h[8..16].copy_from_slice(&unique.to_ne_bytes());
    h
}

/// What answers a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// `n` bytes of reply at the start of `out`.
    Reply(usize),
    Error(Errno),
    /// FORGET, BATCH_FORGET, INTERRUPT: the kernel waits for no answer.
    NoReply,
}

/// Serves one request (any but INIT) through `fs`. `io` holds the request's tail (names,
/// write data) in its first `tail_len` bytes and receives the reply, which may overwrite
/// the tail once it has been used; its length is the largest reply the transport can
/// carry. Sharing one buffer keeps both transports free of copies: a ring entry's payload
/// is one buffer, and on /dev/fuse the reply goes where the request's arguments were.
pub fn dispatch(fs: &TarnFs, h: &InHeader, op: &[u8], io: &mut [u8], tail_len: usize) -> Answer {
    match serve(fs, h, op, io, tail_len) {
        Ok(a) => a,
        Err(e) => Answer::Error(e),
    }
}

fn serve(fs: &TarnFs, h: &InHeader, op: &[u8], io: &mut [u8], tail_len: usize) -> Result<Answer, Errno> {
    let ino = h.nodeid;
    let who = Caller { uid: h.uid, gid: h.gid };
    let a = Args(op);
    let tail = io.get(..tail_len).ok_or(Errno::EINVAL)?;
    match h.opcode {
        READ => {
            let (offset, size) = (a.u64(8)?, a.u32(16)? as usize);
            let buf = io.get_mut(..size).ok_or(Errno::EINVAL)?;
            let n = fs.read(ino, offset, buf)?;
            // The transport replies right after; the atime update is cheap next to
            // the read and off the engine's critical section.
            fs.after_read(ino);
            Ok(Answer::Reply(n))
        }
        WRITE => {
            let (offset, size, flags) = (a.u64(8)?, a.u32(16)? as usize, a.u32(32)?);
            let data = tail.get(..size).ok_or(Errno::EINVAL)?;
            let n = fs.write(ino, offset, data, flags as i32)?;
            let mut o = Out::new(io);
            o.u32(n as u32)?;
            o.u32(0)?;
            o.done()
        }
        LOOKUP => {
            let found = fs.lookup(ino, name(tail)?.0);
            entry(io, found)
        }
        GETATTR => attr_out(io, fs.getattr(ino)),
        SETATTR => attr_out(io, fs.setattr(ino, &setattr_of(&a)?)),
        READLINK => {
            let target = fs.readlink(ino)?;
            let mut o = Out::new(io);
            o.put(&target)?;
            o.done()
        }
        SYMLINK => {
            let (link, target) = two_names(tail)?;
            let made = fs.symlink(who, ino, link, target);
            entry(io, made)
        }
        MKNOD => {
            let made = fs.mknod(who, ino, name(tail)?.0, a.u32(0)?, a.u32(8)?, a.u32(4)?);
            entry(io, made)
        }
        MKDIR => {
            let made = fs.mkdir(who, ino, name(tail)?.0, a.u32(0)?, a.u32(4)?);
            entry(io, made)
        }
        UNLINK => empty(fs.unlink(ino, name(tail)?.0)),
        RMDIR => empty(fs.rmdir(ino, name(tail)?.0)),
        RENAME => {
            let (from, to) = two_names(tail)?;
            empty(fs.rename(ino, from, a.u64(0)?, to, 0))
        }
        RENAME2 => {
            let (from, to) = two_names(tail)?;
            empty(fs.rename(ino, from, a.u64(0)?, to, a.u32(8)?))
        }
        LINK => {
            let made = fs.link(a.u64(0)?, ino, name(tail)?.0);
            entry(io, made)
        }
        OPEN => {
            let fh = fs.open(ino)?;
            let mut o = Out::new(io);
            put_open(&mut o, fh, FILE_OPEN_FLAGS)?;
            o.done()
        }
        CREATE => {
            let (attr, fh) = fs.create(who, ino, name(tail)?.0, a.u32(4)?, a.u32(8)?)?;
            let mut o = Out::new(io);
            put_entry(&mut o, &attr)?;
            put_open(&mut o, fh, FILE_OPEN_FLAGS)?;
            o.done()
        }
        STATFS => {
            let s = fs.statfs();
            let mut o = Out::new(io);
            for v in [s.blocks, s.bfree, s.bavail, s.files, s.ffree] {
                o.u64(v)?;
            }
            for v in [s.bsize, s.namelen, s.frsize, 0] {
                o.u32(v)?;
            }
            o.zeros(24)?;
            o.done()
        }
        RELEASE => empty(fs.release(ino)),
        FSYNC | FSYNCDIR => empty(fs.fsync(ino)),
        FLUSH => empty(fs.flush(ino)),
        OPENDIR => {
            let fh = fs.opendir(ino)?;
            let mut o = Out::new(io);
            put_open(&mut o, fh, 0)?;
            o.done()
        }
        READDIR => {
            let (fh, offset, size) = (a.u64(0)?, a.u64(8)?, a.u32(16)? as usize);
            let room = io.get_mut(..size).ok_or(Errno::EINVAL)?;
            let mut o = Out::new(room);
            fs.readdir(ino, fh, offset, |child, next, kind, name| !put_dirent(&mut o, child, next, kind, name))?;
            o.done()
        }
        RELEASEDIR => {
            fs.releasedir(a.u64(0)?);
            Ok(Answer::Reply(0))
        }
        ACCESS => empty(fs.access(ino)),
        FALLOCATE => empty(fs.fallocate(ino, a.u64(8)?, a.u64(16)?, a.u32(24)? as i32)),
        // Nothing to forget (inode numbers are object ids, no lookup counts kept), and
        // every request runs to its end (an interrupted one still answers).
        FORGET | BATCH_FORGET | INTERRUPT => Ok(Answer::NoReply),
        DESTROY => Ok(Answer::Reply(0)),
        _ => Err(Errno::ENOSYS),
    }
}

#[cfg(test)]
mod tests;

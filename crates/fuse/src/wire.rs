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

use tarn_dataset::{Attr, FileKind, SetAttr, Timespec};

use crate::ops::{Caller, Errno, TarnFs, BLOCK, FILE_OPEN_FLAGS, MAX_BACKGROUND, MAX_WRITE, TTL};

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

/// A bounds-checked little reader over one argument area.
struct Args<'a>(&'a [u8]);

impl Args<'_> {
    fn bytes<const N: usize>(&self, at: usize) -> Result<[u8; N], Errno> {
        let end = at.checked_add(N).ok_or(Errno::EINVAL)?;
        let s = self.0.get(at..end).ok_or(Errno::EINVAL)?;
        s.try_into().map_err(|_| Errno::EINVAL)
    }
    fn u32(&self, at: usize) -> Result<u32, Errno> {
        Ok(u32::from_ne_bytes(self.bytes(at)?))
    }
    fn u64(&self, at: usize) -> Result<u64, Errno> {
        Ok(u64::from_ne_bytes(self.bytes(at)?))
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

/// A writer of reply structs into `out`, bounds-checked.
struct Out<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl<'a> Out<'a> {
    fn new(buf: &'a mut [u8]) -> Out<'a> {
        Out { buf, len: 0 }
    }
    fn put(&mut self, bytes: &[u8]) -> Result<(), Errno> {
        let end = self.len.checked_add(bytes.len()).ok_or(Errno::EINVAL)?;
        self.buf.get_mut(self.len..end).ok_or(Errno::EINVAL)?.copy_from_slice(bytes);
        self.len = end;
        Ok(())
    }
    fn u16(&mut self, v: u16) -> Result<(), Errno> {
        self.put(&v.to_ne_bytes())
    }
    fn u32(&mut self, v: u32) -> Result<(), Errno> {
        self.put(&v.to_ne_bytes())
    }
    fn u64(&mut self, v: u64) -> Result<(), Errno> {
        self.put(&v.to_ne_bytes())
    }
    fn zeros(&mut self, n: usize) -> Result<(), Errno> {
        let end = self.len.checked_add(n).ok_or(Errno::EINVAL)?;
        self.buf.get_mut(self.len..end).ok_or(Errno::EINVAL)?.fill(0);
        self.len = end;
        Ok(())
    }
    fn done(self) -> Result<Answer, Errno> {
        Ok(Answer::Reply(self.len))
    }
}

/// The full `st_mode` of an object: the dataset keeps the type apart from the bits.
fn st_mode(a: &Attr) -> u32 {
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
fn put_attr(o: &mut Out, a: &Attr) -> Result<(), Errno> {
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
fn put_entry(o: &mut Out, a: &Attr) -> Result<(), Errno> {
    o.u64(a.ino)?;
    o.u64(0)?; // generation
    o.u64(TTL.as_secs())?;
    o.u64(TTL.as_secs())?;
    o.u32(TTL.subsec_nanos())?;
    o.u32(TTL.subsec_nanos())?;
    put_attr(o, a)
}

/// `struct fuse_open_out` (16 bytes).
fn put_open(o: &mut Out, fh: u64, flags: u32) -> Result<(), Errno> {
    o.u64(fh)?;
    o.u32(flags)?;
    o.u32(0)
}

fn entry(out: &mut [u8], a: Result<Attr, Errno>) -> Result<Answer, Errno> {
    let mut o = Out::new(out);
    put_entry(&mut o, &a?)?;
    o.done()
}

fn attr_out(out: &mut [u8], a: Result<Attr, Errno>) -> Result<Answer, Errno> {
    let a = a?;
    let mut o = Out::new(out);
    o.u64(TTL.as_secs())?;
    o.u32(TTL.subsec_nanos())?;
    o.u32(0)?;
    put_attr(&mut o, &a)?;
    o.done()
}

fn empty(r: Result<(), Errno>) -> Result<Answer, Errno> {
    r.map(|()| Answer::Reply(0))
}

/// The NUL-terminated name at the start of `tail`, and what follows it.
fn name(tail: &[u8]) -> Result<(&[u8], &[u8]), Errno> {
    let end = tail.iter().position(|&b| b == 0).ok_or(Errno::EINVAL)?;
    Ok((&tail[..end], &tail[end + 1..]))
}

fn two_names(tail: &[u8]) -> Result<(&[u8], &[u8]), Errno> {
    let (a, rest) = name(tail)?;
    let (b, _) = name(rest)?;
    Ok((a, b))
}

fn time(sec: u64, nsec: u32, now: bool) -> Timespec {
    if now {
        Timespec::now()
    } else {
        Timespec { sec: sec as i64, nsec }
    }
}

fn setattr_of(op: &Args) -> Result<SetAttr, Errno> {
    let valid = op.u32(0)?;
    let has = |bit: u32| valid & bit != 0;
    let when = |bit: u32| has(bit);
    Ok(SetAttr {
        mode: when(FATTR_MODE).then(|| op.u32(68)).transpose()?,
        uid: when(FATTR_UID).then(|| op.u32(76)).transpose()?,
        gid: when(FATTR_GID).then(|| op.u32(80)).transpose()?,
        size: when(FATTR_SIZE).then(|| op.u64(16)).transpose()?,
        atime: if has(FATTR_ATIME) { Some(time(op.u64(32)?, op.u32(56)?, has(FATTR_ATIME_NOW))) } else { None },
        mtime: if has(FATTR_MTIME) { Some(time(op.u64(40)?, op.u32(60)?, has(FATTR_MTIME_NOW))) } else { None },
    })
}

/// One `struct fuse_dirent` (padded to 8 bytes); false if `out` has no room left.
fn put_dirent(o: &mut Out, ino: u64, next: u64, kind: FileKind, name: &[u8]) -> bool {
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

/// The kernel's INIT request, as far as the answer needs it.
#[derive(Clone, Copy, Debug)]
pub struct InitIn {
    pub major: u32,
    pub minor: u32,
    pub max_readahead: u32,
    /// `flags | flags2 << 32`.
    pub flags: u64,
}

impl InitIn {
    pub fn decode(op: &[u8]) -> Result<InitIn, Errno> {
        let a = Args(op);
        let (major, minor) = (a.u32(0)?, a.u32(4)?);
        let low = u64::from(a.u32(12)?);
        let flags = if low & INIT_EXT != 0 { low | u64::from(a.u32(16)?) << 32 } else { low };
        Ok(InitIn { major, minor, max_readahead: a.u32(8)?, flags })
    }
}

/// The INIT answer of a session tarn runs itself: the same choices fuser's front end
/// makes (`FuserFront::init`), plus FUSE_OVER_IO_URING when `uring`. Returns the reply
/// length and the flags granted.
pub fn init_reply(init: &InitIn, uring: bool, out: &mut [u8]) -> Result<(usize, u64), Errno> {
    if init.major != MAJOR || init.minor < 36 {
        // FUSE_INIT_EXT (flags2) and everything after it need 7.36.
        return Err(Errno::EPROTO);
    }
    let wanted = ASYNC_READ | BIG_WRITES | MAX_PAGES | PARALLEL_DIROPS | ASYNC_DIO | INIT_EXT;
    let wanted = if uring { wanted | OVER_IO_URING } else { wanted };
    let flags = wanted & init.flags;
    let mut o = Out::new(out);
    o.u32(MAJOR)?;
    o.u32(MINOR)?;
    o.u32(init.max_readahead.min(MAX_WRITE))?;
    o.u32(flags as u32)?;
    o.u16(MAX_BACKGROUND)?;
    o.u16(MAX_BACKGROUND * 3 / 4)?; // congestion threshold, the kernel's default ratio
    o.u32(MAX_WRITE)?;
    o.u32(1)?; // time granularity: nanoseconds
    o.u16((MAX_WRITE / 4096) as u16)?; // max_pages
    o.u16(0)?; // map_alignment
    o.u32((flags >> 32) as u32)?;
    o.u32(0)?; // max_stack_depth
    o.u16(0)?; // request_timeout
    o.zeros(22)?;
    Ok((o.len, flags))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_or_garbled_request_is_einval_not_a_panic() {
        assert_eq!(InHeader::decode(&[0u8; 12]).err(), Some(Errno::EINVAL));
        // A READ whose struct is cut short.
        let a = Args(&[0u8; 10]);
        assert_eq!(a.u64(8).err(), Some(Errno::EINVAL));
        assert_eq!(a.u32(usize::MAX - 1).err(), Some(Errno::EINVAL));
        // A name without its NUL.
        assert_eq!(name(b"abc").err(), Some(Errno::EINVAL));
        assert_eq!(two_names(b"a\0b").err(), Some(Errno::EINVAL));
        assert_eq!(two_names(b"a\0b\0").ok(), Some((&b"a"[..], &b"b"[..])));
    }

    #[test]
    fn dev_request_splits_at_the_opcode_struct() {
        let mut buf = vec![0u8; 4096];
        buf[0..4].copy_from_slice(&((IN_HEADER + 45) as u32).to_ne_bytes());
        buf[4..8].copy_from_slice(&WRITE.to_ne_bytes());
        let (h, tail, end) = split_dev_request(&buf, IN_HEADER + 45).expect("split");
        assert_eq!((h.opcode, tail, end), (WRITE, IN_HEADER + 40, IN_HEADER + 45));
        // A header claiming more than was read is cut to what was read.
        buf[0..4].copy_from_slice(&1000u32.to_ne_bytes());
        let (_, tail, end) = split_dev_request(&buf, IN_HEADER + 45).expect("split");
        assert_eq!((tail, end), (IN_HEADER + 40, IN_HEADER + 45));
        // A struct cut short leaves no tail; a request shorter than its header is refused.
        assert_eq!(split_dev_request(&buf, IN_HEADER + 10).expect("split").1, IN_HEADER + 10);
        assert!(split_dev_request(&buf, 20).is_err());
    }

    #[test]
    fn dirents_stop_when_the_reply_is_full() {
        let mut room = [0u8; 40];
        let mut o = Out::new(&mut room);
        assert!(put_dirent(&mut o, 5, 1, FileKind::File, b"name"));
        assert_eq!(o.len, 32);
        assert!(!put_dirent(&mut o, 6, 2, FileKind::Dir, b"x"));
    }

    #[test]
    fn init_asks_for_io_uring_only_when_told_and_offered() {
        let mut op = [0u8; 64];
        op[0..4].copy_from_slice(&7u32.to_ne_bytes());
        op[4..8].copy_from_slice(&44u32.to_ne_bytes());
        op[12..16].copy_from_slice(&((INIT_EXT | ASYNC_READ) as u32).to_ne_bytes());
        op[16..20].copy_from_slice(&((OVER_IO_URING >> 32) as u32).to_ne_bytes());
        let init = InitIn::decode(&op).expect("decode");
        let mut out = [0u8; 64];
        let (len, flags) = init_reply(&init, true, &mut out).expect("reply");
        assert_eq!(len, 64);
        assert!(flags & OVER_IO_URING != 0);
        let (_, flags) = init_reply(&init, false, &mut out).expect("reply");
        assert!(flags & OVER_IO_URING == 0);
        assert!(init_reply(&init, true, &mut [0u8; 10]).is_err());
    }
}

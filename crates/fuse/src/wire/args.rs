//! Reading a request's arguments: a bounds-checked reader over the opcode's fixed struct,
//! the names in its tail, and the SETATTR fields.
//!
//! Owns: how each field is reached (offset and width) and the checks on the way.
//!
//! Promises: every read is bounds-checked: a short or malformed area is EINVAL, never a
//! panic or a read past the buffer.
//!
//! Must never: allocate (names are slices of the request).

use tarn_dataset::{SetAttr, Timespec};

use super::*;
use crate::ops::Errno;

/// A bounds-checked little reader over one argument area.
pub(super) struct Args<'a>(pub(super) &'a [u8]);

impl Args<'_> {
    pub(super) fn bytes<const N: usize>(&self, at: usize) -> Result<[u8; N], Errno> {
        let end = at.checked_add(N).ok_or(Errno::EINVAL)?;
        let s = self.0.get(at..end).ok_or(Errno::EINVAL)?;
        s.try_into().map_err(|_| Errno::EINVAL)
    }
    pub(super) fn u32(&self, at: usize) -> Result<u32, Errno> {
        Ok(u32::from_ne_bytes(self.bytes(at)?))
    }
    pub(super) fn u64(&self, at: usize) -> Result<u64, Errno> {
        Ok(u64::from_ne_bytes(self.bytes(at)?))
    }
}

/// The NUL-terminated name at the start of `tail`, and what follows it.
pub(super) fn name(tail: &[u8]) -> Result<(&[u8], &[u8]), Errno> {
    let end = tail.iter().position(|&b| b == 0).ok_or(Errno::EINVAL)?;
    Ok((&tail[..end], &tail[end + 1..]))
}

pub(super) fn two_names(tail: &[u8]) -> Result<(&[u8], &[u8]), Errno> {
    let (a, rest) = name(tail)?;
    let (b, _) = name(rest)?;
    Ok((a, b))
}

pub(super) fn time(sec: u64, nsec: u32, now: bool) -> Timespec {
    if now {
        Timespec::now()
    } else {
        Timespec { sec: sec as i64, nsec }
    }
}

pub(super) fn setattr_of(op: &Args) -> Result<SetAttr, Errno> {
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

//! The INIT handshake of a session tarn runs itself: the kernel's request decoded, and
//! the answer with the same choices fuser's front end makes, plus FUSE_OVER_IO_URING when
//! asked and offered.
//!
//! Owns: the protocol version tarn speaks (7.42, at least 7.36 from the kernel) and the
//! capabilities it asks for.
//!
//! Promises: a kernel older than 7.36 is EPROTO; only capabilities the kernel offered
//! are granted.
//!
//! Must never: grant a capability tarn does not serve.

use super::args::Args;
use super::reply::Out;
use super::*;
use crate::ops::{Errno, MAX_BACKGROUND, MAX_WRITE};

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
pub fn init_reply(init: &InitIn, uring: bool, readahead: u32, out: &mut [u8]) -> Result<(usize, u64), Errno> {
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
    o.u32(init.max_readahead.min(readahead))?;
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

//! The pipeline's typed errors.
//!
//! Owns: every way a block read, write, claim or extent operation can fail.
//!
//! Promises: each variant carries what a caller needs to decide (a full pool is
//! `NoSpace`, which the dataset turns into ENOSPC; a bad checksum names the block) and a
//! message that names the block or device.
//!
//! Must never: carry a decision in text: a caller matches the variant, never the message.
use tarn_vdev::VdevError;

use crate::{BlkPtrError, DecompressError};

#[derive(Debug, thiserror::Error)]
pub enum ZioError {
    #[error("checksum mismatch in {what} block at vdev {vdev} offset {offset}")]
    Checksum { what: &'static str, vdev: u16, offset: u64 },
    #[error(transparent)]
    Vdev(#[from] VdevError),
    #[error("corrupt block pointer: vdev {vdev} does not exist")]
    NoSuchVdev { vdev: u16 },
    #[error("corrupt block pointer: block at vdev {vdev} offset {offset} size {psize} lies outside the device")]
    OutOfBounds { vdev: u16, offset: u64, psize: u32 },
    #[error("corrupt block pointer: extent at vdev {vdev} offset {offset} length {len} is not valid")]
    BadExtent { vdev: u16, offset: u64, len: u64 },
    /// A pointer inside a verified block does not decode.
    #[error("corrupt block pointer: {0}")]
    BlockPtr(#[from] BlkPtrError),
    /// A verified block whose logical bytes are not what its kind must be (an indirect
    /// block of the wrong size).
    #[error("{what} block of {len} bytes, expected {expected}")]
    BadLength { what: &'static str, len: usize, expected: usize },
    #[error("{what} block at vdev {vdev} offset {offset} does not decompress: {source}")]
    Decompress {
        what: &'static str,
        vdev: u16,
        offset: u64,
        #[source]
        source: DecompressError,
    },
    /// Two pointers to the same bytes: claiming both would let one be overwritten.
    #[error("corrupt block tree: block at vdev {vdev} offset {offset} size {len} overlaps bytes another block holds")]
    Overlap { vdev: u16, offset: u64, len: u64 },
    #[error("out of space: no free run of {0} bytes on any vdev")]
    NoSpace(u64),
}

//! The send stream, format v1 (docs/FORMAT.md §17): a preamble (magic, version), then
//! records — BEGIN, then per object an OBJECT and its WRITE and FREE records, FREEOBJECTS
//! for freed ids, and END. Each record carries its sequence number and a checksum of its
//! own bytes; END carries a checksum chained over every record before it.
//!
//! Owns: the stream's byte layout, its version, and the checks a reader makes on every
//! record (checksum, sequence, size, the order of record types).
//!
//! Promises: a reader hands out only records whose checksum matched, in sequence; every
//! defect — bad magic, a newer version, a cut, a flipped bit, a record out of order — is
//! a `StreamError` naming it and where; no input makes it allocate past
//! `MAX_PAYLOAD` or panic.
//!
//! Must never: accept a stream of a version it does not know, or hand out a record
//! before its checksum is checked.
//!
//! Modules: this one (the records, the constants, the errors, the chained checksum),
//! `codec` (a record's payload bytes, both ways), `writer` and `reader` (a whole stream,
//! framed and checked).
use std::io;

use tarn_objects::Dnode;
use tarn_zio::{ChecksumKind, Compression};

/// The first 8 bytes of every stream.
pub const STREAM_MAGIC: [u8; 8] = *b"TARNSEND";
/// The stream format this build writes and reads.
pub const STREAM_VERSION: u32 = 1;
/// Bytes before the first record: magic, version, reserved.
pub const PREAMBLE_LEN: usize = 16;
/// A record's head: type, payload length, sequence number.
const HEAD_LEN: usize = 16;
/// The checksum after each record's payload (xxh3-128, as the pool's `checksum=on`).
const SUM_LEN: usize = 32;
const SUM: ChecksumKind = ChecksumKind::Xxh3;
/// The largest payload a reader accepts: a WRITE of the largest record plus its head.
/// A length past it is a damaged stream, not an allocation to try.
pub const MAX_PAYLOAD: u32 = (16 << 20) + 64;

/// BEGIN's flag for an incremental stream.
pub const FLAG_INCREMENTAL: u64 = 1;
/// BEGIN's flag for a stream that resumes an interrupted receive (`tarn send -t`): it
/// starts at `resume_object`, `resume_offset`.
pub const FLAG_RESUME: u64 = 2;

/// Why bytes are not a stream this build can receive.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error("not a tarn send stream (bad magic at its start)")]
    BadMagic,
    #[error(
        "send stream version {found} is newer than this tarn reads ({supported}); upgrade tarn on the receiving side"
    )]
    NewerVersion { found: u32, supported: u32 },
    #[error("the stream is truncated: it ends inside record {seq} (byte {at}); resend it")]
    Truncated { seq: u64, at: u64 },
    #[error("the stream ends before its END record (after record {seq}); resend it")]
    NoEnd { seq: u64 },
    #[error("record {seq} (byte {at}) fails its checksum: the stream is damaged")]
    Checksum { seq: u64, at: u64 },
    #[error("record {seq} is out of order: {why}")]
    OutOfOrder { seq: u64, why: String },
    #[error("record {seq} is malformed: {why}")]
    Malformed { seq: u64, why: String },
    #[error("record {seq} claims {len} bytes, more than any record holds: the stream is damaged")]
    TooLarge { seq: u64, len: u32 },
    #[error("the stream's END checksum does not match its records: the stream is damaged")]
    EndChecksum,
    #[error("reading the stream: {0}")]
    Io(#[source] io::Error),
    #[error("no stream on the input (it is empty)")]
    Empty,
}

/// What BEGIN says about the stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Begin {
    pub flags: u64,
    /// The snapshot the stream brings the receiver to.
    pub to_guid: u64,
    pub to_txg: u64,
    pub creation: u64,
    /// The base of an incremental stream (0 for a full one).
    pub from_guid: u64,
    pub from_txg: u64,
    pub pool_guid: u64,
    pub dataset_id: u64,
    pub next_obj: u64,
    /// Where a resuming stream starts: records of lower objects, and of this object
    /// below this byte, are the receiver's already.
    pub resume_object: u64,
    pub resume_offset: u64,
    /// The sender's dataset and snapshot names.
    pub dataset: String,
    pub snapshot: String,
    /// Objects unlinked but still open when the snapshot was taken.
    pub unlinked: Vec<u64>,
}

impl StreamError {
    /// The stream stopped short (cut, or its reader failed) rather than being damaged:
    /// what was received stays, to be resumed.
    pub fn is_interruption(&self) -> bool {
        matches!(self, StreamError::Truncated { .. } | StreamError::NoEnd { .. } | StreamError::Io(_))
    }
}

impl Begin {
    pub fn is_incremental(&self) -> bool {
        self.flags & FLAG_INCREMENTAL != 0
    }

    pub fn is_resume(&self) -> bool {
        self.flags & FLAG_RESUME != 0
    }
}

/// One record of a stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    Begin(Begin),
    /// An object and its attributes (a dnode as the objects layer stores it, no tree).
    Object {
        id: u64,
        dnode: Box<Dnode>,
    },
    /// Ids `first..first + count` are free.
    FreeObjects {
        first: u64,
        count: u64,
    },
    /// One block of `object` at byte `offset`, as stored: compressed with `compression`,
    /// `lsize` bytes once decompressed.
    Write {
        object: u64,
        offset: u64,
        birth: u64,
        compression: Compression,
        lsize: u32,
        data: Vec<u8>,
    },
    /// Bytes `offset..offset + length` of `object` are a hole.
    Free {
        object: u64,
        offset: u64,
        length: u64,
    },
    /// The end: the snapshot reached, and the chained checksum of every record before.
    End {
        to_guid: u64,
        chain: [u8; 32],
    },
}

/// The chained checksum: each record's checksum folded into the previous value.
fn chain_next(chain: &[u8; 32], sum: &[u8; 32]) -> [u8; 32] {
    let mut both = [0u8; 64];
    both[..32].copy_from_slice(chain);
    both[32..].copy_from_slice(sum);
    SUM.digest(&both)
}

fn preamble() -> [u8; PREAMBLE_LEN] {
    let mut p = [0u8; PREAMBLE_LEN];
    p[..8].copy_from_slice(&STREAM_MAGIC);
    p[8..12].copy_from_slice(&STREAM_VERSION.to_le_bytes());
    p
}

mod codec;
mod reader;
mod writer;

pub use reader::StreamReader;
pub use writer::StreamWriter;

#[cfg(test)]
mod tests;

//! zio — the io pipeline: a logical block becomes a compressed, checksummed, allocated,
//! written physical block, and back.
//!
//! Owns: the block pointer format, the codecs and checksums, packing a txg's blocks into
//! sector runs without padding, verified reads through the ARC, read-ahead, intent-log
//! extents, the space maps of every top-level vdev, and the pipeline counters.
//!
//! Every device I/O names its class (`IoClass`, the devices' priority queues): a demand
//! read is `SyncRead`, read-ahead `AsyncRead`, scrub reads `Scrub`, a txg's blocks
//! `AsyncWrite`, intent-log blocks and blocks an fsync writes in place `SyncWrite`.
//!
//! Promises: a block that does not shrink by 1/8 is stored raw; a read returns the
//! logical bytes only if the physical bytes match the pointer's checksum (else a
//! checksum error, after the mirror had its chance to heal); a block is never written
//! where a live byte is; an uberblock is written only after a full flush covered every
//! block written before it (`write_uberblock` asserts it).
//!
//! Must never: free space by itself (the txg that frees decides when), or hand a caller
//! bytes it did not verify.
//!
//! Rooms: `pipeline` (the handle, space, flush order), `write` (packing), `read`
//! (verified reads), `prefetch`, `trace` (the event trace, read kinds), `extent` (log
//! blocks), `blkptr` and `codec` (formats), `error`.

mod blkptr;
mod codec;
mod error;
mod extent;
mod pipeline;
mod prefetch;
mod read;
mod trace;
mod write;

pub use blkptr::{BlkPtrError, BlockPtr, BlockType, BLKPTR_SIZE};
pub use codec::{ChecksumKind, Compression, DecompressError};
pub use error::ZioError;
pub use extent::Extent;
pub use pipeline::{WriteMark, Zio, ZioStats, HOT_SHARE};
pub use read::{CopiesRead, HotCopy, FAILED_READS_MAX};
pub use tarn_arc::{Access, PageId, ReadKind, Residency};
pub use tarn_vdev::IoClass;
pub use write::{CachePolicy, PendingBlock, StoredAs};

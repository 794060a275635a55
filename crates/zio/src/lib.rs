//! zio — the io pipeline: a logical block becomes a compressed, checksummed, allocated,
//! written physical block, and back.
//!
//! Owns: the block pointer format, the codecs and checksums, packing a txg's blocks into
//! sector runs without padding, and the pipeline counters.
//!
//! Promises: a block that does not shrink by 1/8 is stored raw; a read returns the
//! logical bytes only if the physical bytes match the pointer's checksum (else a
//! checksum error, after the mirror had its chance to heal); a block is never written
//! where a live byte is.
//!
//! Must never: free space by itself (the txg that frees decides when), or hand a caller
//! bytes it did not verify.

mod blkptr;
mod codec;
mod pipeline;

pub use blkptr::{BlockPtr, BlockType, BLKPTR_SIZE};
pub use codec::{ChecksumKind, Compression};
pub use pipeline::{CachePolicy, Extent, PendingBlock, Zio, ZioError, ZioStats, HOT_SHARE};

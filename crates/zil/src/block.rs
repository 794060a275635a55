//! The log block format (docs/FORMAT.md): a 96-byte header — magic, version, payload
//! length, pool guid, sequence number, the extent of the next block, an xxh3-128 checksum
//! — then the encoded records.
//!
//! Owns: encoding and verifying one log block.
//!
//! Promises: `decode` accepts exactly the blocks `encode` wrote for this pool and this
//! sequence number, whatever their version (the caller decides which versions it reads);
//! anything else — a torn write, a block of an older chain or another pool — is a typed
//! `BlockError`, never a panic.
//!
//! Must never: read outside the bytes it is given.
use tarn_zio::Extent;
use xxhash_rust::xxh3::xxh3_128;

use crate::ZIL_VERSION;

const MAGIC: u64 = u64::from_le_bytes(*b"TARNZIL1");
/// Bytes of a log block header; records follow.
pub const BLOCK_HEADER: usize = 96;
const CHECKSUM: std::ops::Range<usize> = 64..80;

/// Why bytes read from a log extent are not the block the chain expects there.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BlockError {
    #[error("not a log block")]
    NotALogBlock,
    #[error("log block is truncated")]
    Truncated,
    #[error("log block checksum mismatch")]
    ChecksumMismatch,
    #[error("log block of another pool or an older chain")]
    OtherChain,
}

/// A log block that verified.
pub(crate) struct Block<'a> {
    pub(crate) version: u32,
    pub(crate) next: Extent,
    pub(crate) payload: &'a [u8],
}

/// Block `seq` of this pool's chain, naming `next` as the next block's place. The buffer
/// has room for the caller to pad it to a whole sector without copying.
pub(crate) fn encode(pool_guid: u64, seq: u64, next: &Extent, payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(BLOCK_HEADER + payload.len() + 4096);
    b.resize(BLOCK_HEADER, 0);
    b[0..8].copy_from_slice(&MAGIC.to_le_bytes());
    b[8..12].copy_from_slice(&ZIL_VERSION.to_le_bytes());
    b[12..16].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    b[16..24].copy_from_slice(&pool_guid.to_le_bytes());
    b[24..32].copy_from_slice(&seq.to_le_bytes());
    b[32..34].copy_from_slice(&next.vdev.to_le_bytes());
    b[40..48].copy_from_slice(&next.offset.to_le_bytes());
    b[48..56].copy_from_slice(&next.len.to_le_bytes());
    b.extend_from_slice(payload);
    let sum = xxh3_128(&b);
    b[CHECKSUM].copy_from_slice(&sum.to_le_bytes());
    b
}

/// Checks a log block's identity and checksum (any version).
pub(crate) fn decode(b: &[u8], pool_guid: u64, seq: u64) -> Result<Block<'_>, BlockError> {
    let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
    let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
    if b.len() < BLOCK_HEADER || u64_at(0) != MAGIC {
        return Err(BlockError::NotALogBlock);
    }
    let version = u32_at(8);
    let len = u32_at(12) as usize;
    let end = BLOCK_HEADER.checked_add(len).filter(|&e| e <= b.len()).ok_or(BlockError::Truncated)?;
    let mut copy = b[..end].to_vec();
    let stored = u128::from_le_bytes(copy[CHECKSUM].try_into().expect("16 bytes"));
    copy[CHECKSUM].fill(0);
    if xxh3_128(&copy) != stored {
        return Err(BlockError::ChecksumMismatch);
    }
    if u64_at(16) != pool_guid || u64_at(24) != seq {
        return Err(BlockError::OtherChain);
    }
    let next = Extent { vdev: u16::from_le_bytes([b[32], b[33]]), offset: u64_at(40), len: u64_at(48) };
    Ok(Block { version, next, payload: &b[BLOCK_HEADER..end] })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_verifies_only_for_its_pool_and_place_in_the_chain() {
        let next = Extent { vdev: 1, offset: 1 << 20, len: 8192 };
        let b = encode(42, 7, &next, b"records");
        let block = decode(&b, 42, 7).unwrap();
        assert_eq!((block.version, block.next, block.payload), (ZIL_VERSION, next, &b"records"[..]));
        assert_eq!(decode(&b, 43, 7).err(), Some(BlockError::OtherChain));
        assert_eq!(decode(&b, 42, 8).err(), Some(BlockError::OtherChain));
        assert_eq!(decode(&b[..BLOCK_HEADER + 3], 42, 7).err(), Some(BlockError::Truncated));
        assert_eq!(decode(&b[..10], 42, 7).err(), Some(BlockError::NotALogBlock));
        let mut torn = b.clone();
        torn[BLOCK_HEADER] ^= 1;
        assert_eq!(decode(&torn, 42, 7).err(), Some(BlockError::ChecksumMismatch));
    }
}

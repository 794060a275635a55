//! The 64-byte block pointer: where a block is, how big, how it was encoded, when it
//! was born, and the checksum of its physical bytes. Byte table: docs/FORMAT.md.
//!
//! Owns: the pointer's byte layout and the codes of its enums (compression, checksum,
//! block type).
//!
//! Promises: `decode(encode(bp)) == bp` (zstd's level aside, a write-time choice); an
//! all-zero pointer is a hole; a code this build does not know is a typed error naming
//! the field, never a guess.
//!
//! Must never: check that the pointer lies inside a device (the pipeline does, on use),
//! or panic on any 64 bytes.
use crate::codec::{ChecksumKind, Compression};

pub const BLKPTR_SIZE: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum BlockType {
    Data = 1,
    Indirect = 2,
    Dnodes = 3,
    Directory = 4,
    Mos = 5,
}

impl BlockType {
    pub const ALL: [BlockType; 5] =
        [BlockType::Data, BlockType::Indirect, BlockType::Dnodes, BlockType::Directory, BlockType::Mos];

    /// The type's name in counters (`written_bytes_<name>`).
    pub fn name(self) -> &'static str {
        match self {
            BlockType::Data => "data",
            BlockType::Indirect => "indirect",
            BlockType::Dnodes => "dnodes",
            BlockType::Directory => "directory",
            BlockType::Mos => "mos",
        }
    }

    fn from_u8(v: u8) -> Option<BlockType> {
        Some(match v {
            1 => BlockType::Data,
            2 => BlockType::Indirect,
            3 => BlockType::Dnodes,
            4 => BlockType::Directory,
            5 => BlockType::Mos,
            _ => return None,
        })
    }
}

/// Why 64 bytes are not a block pointer. Callers reach `decode` only with bytes that
/// passed their own block's checksum, so each of these means a bug or a format written by
/// a newer tarn (a codec or block type this build does not know).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BlkPtrError {
    #[error("unknown compression code {0}")]
    UnknownCompression(u8),
    #[error("unknown checksum code {0}")]
    UnknownChecksum(u8),
    #[error("unknown block type {0}")]
    UnknownBlockType(u8),
    #[error("block pointer of {0} bytes (a pointer has {BLKPTR_SIZE})")]
    Short(usize),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockPtr {
    pub vdev: u16,
    pub compression: Compression,
    pub checksum_kind: ChecksumKind,
    pub level: u8,
    pub block_type: BlockType,
    /// Byte offset in the vdev's data area.
    pub offset: u64,
    pub psize: u32,
    pub lsize: u32,
    pub birth: u64,
    pub checksum: [u8; 32],
}

impl BlockPtr {
    pub fn encode(&self, out: &mut [u8]) {
        out[..BLKPTR_SIZE].fill(0);
        out[0..2].copy_from_slice(&self.vdev.to_le_bytes());
        out[2] = self.compression.code();
        out[3] = self.checksum_kind.code();
        out[4] = self.level;
        out[5] = self.block_type as u8;
        out[8..16].copy_from_slice(&self.offset.to_le_bytes());
        out[16..20].copy_from_slice(&self.psize.to_le_bytes());
        out[20..24].copy_from_slice(&self.lsize.to_le_bytes());
        out[24..32].copy_from_slice(&self.birth.to_le_bytes());
        out[32..64].copy_from_slice(&self.checksum);
    }

    pub fn to_bytes(&self) -> [u8; BLKPTR_SIZE] {
        let mut b = [0u8; BLKPTR_SIZE];
        self.encode(&mut b);
        b
    }

    /// `Ok(None)` for a hole (all zeros); `Err` names the field that is malformed.
    pub fn decode(b: &[u8]) -> Result<Option<BlockPtr>, BlkPtrError> {
        let b = b.get(..BLKPTR_SIZE).ok_or(BlkPtrError::Short(b.len()))?;
        if b.iter().all(|&x| x == 0) {
            return Ok(None);
        }
        let compression = Compression::from_code(b[2]).ok_or(BlkPtrError::UnknownCompression(b[2]))?;
        let checksum_kind = ChecksumKind::from_code(b[3]).ok_or(BlkPtrError::UnknownChecksum(b[3]))?;
        let block_type = BlockType::from_u8(b[5]).ok_or(BlkPtrError::UnknownBlockType(b[5]))?;
        let mut checksum = [0u8; 32];
        checksum.copy_from_slice(&b[32..64]);
        Ok(Some(BlockPtr {
            vdev: u16::from_le_bytes([b[0], b[1]]),
            compression,
            checksum_kind,
            level: b[4],
            block_type,
            offset: u64::from_le_bytes(b[8..16].try_into().expect("8")),
            psize: u32::from_le_bytes(b[16..20].try_into().expect("4")),
            lsize: u32::from_le_bytes(b[20..24].try_into().expect("4")),
            birth: u64::from_le_bytes(b[24..32].try_into().expect("8")),
            checksum,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_pointer_round_trips() {
        let bp = BlockPtr {
            vdev: 3,
            compression: Compression::Zstd(3),
            checksum_kind: ChecksumKind::Blake3,
            level: 1,
            block_type: BlockType::Indirect,
            offset: 123456789,
            psize: 5000,
            lsize: 16384,
            birth: 42,
            checksum: [9; 32],
        };
        let back = BlockPtr::decode(&bp.to_bytes()).unwrap().unwrap();
        // zstd's level is a write-time choice; the pointer keeps only the codec.
        assert_eq!(back.compression, Compression::Zstd(0));
        assert_eq!(BlockPtr { compression: Compression::Zstd(0), ..bp }, back);
        assert_eq!(BlockPtr::decode(&[0u8; 64]), Ok(None));
    }

    #[test]
    fn unknown_codes_and_short_input_are_typed_errors() {
        let mut b = [0u8; BLKPTR_SIZE];
        b[2] = 9;
        assert_eq!(BlockPtr::decode(&b), Err(BlkPtrError::UnknownCompression(9)));
        b[2] = 1;
        b[3] = 7;
        assert_eq!(BlockPtr::decode(&b), Err(BlkPtrError::UnknownChecksum(7)));
        b[3] = 1;
        b[5] = 42;
        assert_eq!(BlockPtr::decode(&b), Err(BlkPtrError::UnknownBlockType(42)));
        assert_eq!(BlockPtr::decode(&b[..10]), Err(BlkPtrError::Short(10)));
    }
}

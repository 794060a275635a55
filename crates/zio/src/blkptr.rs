//! The 64-byte block pointer: where a block is, how big, how it was encoded, when it
//! was born, and the checksum of its physical bytes. Byte table: docs/FORMAT.md.
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

    /// `Ok(None)` for a hole (all zeros); `Err` names what is malformed. Callers reach
    /// this only with bytes that passed their own block's checksum, so a malformed
    /// pointer means a bug or a foreign format, reported as corruption.
    pub fn decode(b: &[u8]) -> Result<Option<BlockPtr>, String> {
        let b = &b[..BLKPTR_SIZE];
        if b.iter().all(|&x| x == 0) {
            return Ok(None);
        }
        let compression = Compression::from_code(b[2]).ok_or(format!("unknown compression code {}", b[2]))?;
        let checksum_kind = ChecksumKind::from_code(b[3]).ok_or(format!("unknown checksum code {}", b[3]))?;
        let block_type = BlockType::from_u8(b[5]).ok_or(format!("unknown block type {}", b[5]))?;
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
}

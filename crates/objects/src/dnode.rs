//! The dnode: the fixed 256-byte on-disk description of one object (type, size, block
//! size, attributes, and the root of its block tree). Byte table: docs/FORMAT.md.
//!
//! Owns: the dnode's byte layout, its format version, and the object types.
//!
//! Promises: `decode(encode(d)) == d`; an all-free slot decodes as `None`; a dnode of a
//! version this build does not know is `DnodeError::UnsupportedVersion`, its own variant,
//! so import can refuse a pool whose objects it would misread (and so free their blocks).
//!
//! Must never: guess at a newer version's fields, or panic on any bytes.
use tarn_zio::{BlkPtrError, BlockPtr, BLKPTR_SIZE};

pub const DNODE_SIZE: usize = 256;
pub const DNODE_VERSION: u8 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ObjType {
    Free = 0,
    File = 1,
    Dir = 2,
    Symlink = 3,
    /// fifo, socket, device node: attributes only.
    Special = 4,
    /// The dnode table itself.
    Meta = 5,
}

impl ObjType {
    fn from_u8(v: u8) -> Option<ObjType> {
        Some(match v {
            0 => ObjType::Free,
            1 => ObjType::File,
            2 => ObjType::Dir,
            3 => ObjType::Symlink,
            4 => ObjType::Special,
            5 => ObjType::Meta,
            _ => return None,
        })
    }
}

/// Why 256 bytes are not a dnode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DnodeError {
    /// Written by a newer tarn: its blocks cannot be known, so they must not be freed.
    #[error("dnode format version {found} is not supported (this tarn reads {supported})")]
    UnsupportedVersion { found: u8, supported: u8 },
    #[error("unknown object type {0}")]
    UnknownType(u8),
    #[error("dnode of {0} bytes (a dnode has {DNODE_SIZE})")]
    Short(usize),
    #[error("dnode's block pointer: {0}")]
    BlockPtr(#[from] BlkPtrError),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Timespec {
    pub sec: i64,
    pub nsec: u32,
}

impl Timespec {
    pub fn now() -> Timespec {
        let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Timespec { sec: d.as_secs() as i64, nsec: d.subsec_nanos() }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dnode {
    pub obj_type: ObjType,
    pub nlevels: u8,
    /// log2 of the indirect block size.
    pub ind_shift: u8,
    pub blksz: u32,
    pub size: u64,
    pub gen: u64,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub parent: u64,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    pub crtime: Timespec,
    pub rdev: u64,
    pub root: Option<BlockPtr>,
}

impl Dnode {
    pub fn new(obj_type: ObjType, blksz: u32, mode: u32, gen: u64) -> Dnode {
        let now = Timespec::now();
        Dnode {
            obj_type,
            nlevels: 0,
            ind_shift: crate::tree::IND_SHIFT,
            blksz,
            size: 0,
            gen,
            mode,
            uid: 0,
            gid: 0,
            nlink: 1,
            parent: 0,
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            rdev: 0,
            root: None,
        }
    }

    pub fn encode(&self, out: &mut [u8]) {
        let out = &mut out[..DNODE_SIZE];
        out.fill(0);
        out[0] = self.obj_type as u8;
        out[1] = self.nlevels;
        out[2] = DNODE_VERSION;
        out[3] = self.ind_shift;
        out[4..8].copy_from_slice(&self.blksz.to_le_bytes());
        out[8..16].copy_from_slice(&self.size.to_le_bytes());
        out[16..24].copy_from_slice(&self.gen.to_le_bytes());
        out[24..28].copy_from_slice(&self.mode.to_le_bytes());
        out[28..32].copy_from_slice(&self.uid.to_le_bytes());
        out[32..36].copy_from_slice(&self.gid.to_le_bytes());
        out[36..40].copy_from_slice(&self.nlink.to_le_bytes());
        out[40..48].copy_from_slice(&self.parent.to_le_bytes());
        for (i, t) in [self.atime, self.mtime, self.ctime, self.crtime].iter().enumerate() {
            let at = 48 + i * 12;
            out[at..at + 8].copy_from_slice(&t.sec.to_le_bytes());
            out[at + 8..at + 12].copy_from_slice(&t.nsec.to_le_bytes());
        }
        out[96..104].copy_from_slice(&self.rdev.to_le_bytes());
        if let Some(bp) = &self.root {
            bp.encode(&mut out[128..128 + BLKPTR_SIZE]);
        }
    }

    /// `Ok(None)` for a free slot.
    pub fn decode(b: &[u8]) -> Result<Option<Dnode>, DnodeError> {
        let b = b.get(..DNODE_SIZE).ok_or(DnodeError::Short(b.len()))?;
        let obj_type = ObjType::from_u8(b[0]).ok_or(DnodeError::UnknownType(b[0]))?;
        if obj_type == ObjType::Free {
            return Ok(None);
        }
        if b[2] != DNODE_VERSION {
            return Err(DnodeError::UnsupportedVersion { found: b[2], supported: DNODE_VERSION });
        }
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4"));
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8"));
        let ts = |at: usize| Timespec { sec: u64_at(at) as i64, nsec: u32_at(at + 8) };
        Ok(Some(Dnode {
            obj_type,
            nlevels: b[1],
            ind_shift: b[3],
            blksz: u32_at(4),
            size: u64_at(8),
            gen: u64_at(16),
            mode: u32_at(24),
            uid: u32_at(28),
            gid: u32_at(32),
            nlink: u32_at(36),
            parent: u64_at(40),
            atime: ts(48),
            mtime: ts(60),
            ctime: ts(72),
            crtime: ts(84),
            rdev: u64_at(96),
            root: BlockPtr::decode(&b[128..128 + BLKPTR_SIZE])?,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dnode_round_trips_and_a_free_slot_is_none() {
        let mut d = Dnode::new(ObjType::File, 16384, 0o644, 7);
        d.size = 12345;
        d.nlink = 2;
        let mut raw = [0u8; DNODE_SIZE];
        d.encode(&mut raw);
        assert_eq!(Dnode::decode(&raw), Ok(Some(d)));
        assert_eq!(Dnode::decode(&[0u8; DNODE_SIZE]), Ok(None));
    }

    #[test]
    fn bad_dnodes_are_typed_errors() {
        let mut raw = [0u8; DNODE_SIZE];
        Dnode::new(ObjType::Dir, 16384, 0o755, 1).encode(&mut raw);
        raw[2] = DNODE_VERSION + 1;
        assert_eq!(
            Dnode::decode(&raw),
            Err(DnodeError::UnsupportedVersion { found: DNODE_VERSION + 1, supported: DNODE_VERSION })
        );
        raw[2] = DNODE_VERSION;
        raw[0] = 99;
        assert_eq!(Dnode::decode(&raw), Err(DnodeError::UnknownType(99)));
        raw[0] = ObjType::File as u8;
        raw[128 + 3] = 1; // the root pointer's checksum: xxh3
        raw[128 + 5] = 200; // the root pointer's block type: unknown
        assert_eq!(Dnode::decode(&raw), Err(DnodeError::BlockPtr(BlkPtrError::UnknownBlockType(200))));
        assert_eq!(Dnode::decode(&raw[..100]), Err(DnodeError::Short(100)));
    }
}

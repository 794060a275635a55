//! Directory contents: name → (object id, type), kept sorted in memory and stored as the
//! directory object's bytes. Byte table: docs/FORMAT.md.
//!
//! Owns: the directory encoding and its version.
//!
//! Promises: `decode(encode(e)) == e`; malformed bytes and an unknown version are typed
//! errors (`DirError`), the version its own variant.
//!
//! Must never: panic on any bytes, or know about anything beyond one directory's
//! entries (link counts and parents are the dataset's).
use std::collections::BTreeMap;

use crate::dnode::ObjType;

const DIR_MAGIC: u32 = u32::from_le_bytes(*b"TDIR");
pub const DIR_VERSION: u8 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub obj: u64,
    pub obj_type: ObjType,
}

pub type Entries = BTreeMap<Vec<u8>, DirEntry>;

pub fn encode(entries: &Entries) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + entries.len() * 32);
    out.extend_from_slice(&DIR_MAGIC.to_le_bytes());
    out.push(DIR_VERSION);
    out.extend_from_slice(&[0u8; 3]);
    out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for (name, e) in entries {
        out.extend_from_slice(&e.obj.to_le_bytes());
        out.push(e.obj_type as u8);
        out.extend_from_slice(&(name.len() as u16).to_le_bytes());
        out.extend_from_slice(name);
    }
    out
}

/// Why a directory object's bytes are not a directory.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DirError {
    /// Written by a newer tarn.
    #[error("directory format version {found} is not supported (this tarn reads {supported})")]
    UnsupportedVersion { found: u8, supported: u8 },
    #[error("directory block is malformed: no directory header")]
    NoHeader,
    #[error("directory block is malformed: truncated entry")]
    TruncatedEntry,
    #[error("directory block is malformed: entry type {0}")]
    UnknownEntryType(u8),
    #[error("directory block is malformed: truncated name")]
    TruncatedName,
}

pub fn decode(bytes: &[u8]) -> Result<Entries, DirError> {
    let mut entries = Entries::new();
    if bytes.is_empty() {
        return Ok(entries);
    }
    if bytes.len() < 16 || u32::from_le_bytes(bytes[0..4].try_into().expect("4")) != DIR_MAGIC {
        return Err(DirError::NoHeader);
    }
    if bytes[4] != DIR_VERSION {
        return Err(DirError::UnsupportedVersion { found: bytes[4], supported: DIR_VERSION });
    }
    let count = u64::from_le_bytes(bytes[8..16].try_into().expect("8"));
    let mut at = 16;
    for _ in 0..count {
        if at + 11 > bytes.len() {
            return Err(DirError::TruncatedEntry);
        }
        let obj = u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8"));
        let obj_type = match bytes[at + 8] {
            1 => ObjType::File,
            2 => ObjType::Dir,
            3 => ObjType::Symlink,
            4 => ObjType::Special,
            t => return Err(DirError::UnknownEntryType(t)),
        };
        let len = u16::from_le_bytes([bytes[at + 9], bytes[at + 10]]) as usize;
        at += 11;
        if at + len > bytes.len() {
            return Err(DirError::TruncatedName);
        }
        entries.insert(bytes[at..at + len].to_vec(), DirEntry { obj, obj_type });
        at += len;
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Entries {
        let mut e = Entries::new();
        e.insert(b"a".to_vec(), DirEntry { obj: 2, obj_type: ObjType::File });
        e.insert(b"sub".to_vec(), DirEntry { obj: 3, obj_type: ObjType::Dir });
        e
    }

    #[test]
    fn entries_round_trip_and_empty_bytes_are_an_empty_directory() {
        assert_eq!(decode(&encode(&sample())), Ok(sample()));
        assert_eq!(decode(&[]), Ok(Entries::new()));
    }

    #[test]
    fn bad_directories_are_typed_errors() {
        let good = encode(&sample());
        let mut newer = good.clone();
        newer[4] = DIR_VERSION + 1;
        assert_eq!(
            decode(&newer),
            Err(DirError::UnsupportedVersion { found: DIR_VERSION + 1, supported: DIR_VERSION })
        );
        assert_eq!(decode(b"not a directory!"), Err(DirError::NoHeader));
        assert_eq!(decode(&good[..20]), Err(DirError::TruncatedEntry));
        assert_eq!(decode(&good[..good.len() - 1]), Err(DirError::TruncatedName));
        let mut bad_type = good.clone();
        bad_type[16 + 8] = 9;
        assert_eq!(decode(&bad_type), Err(DirError::UnknownEntryType(9)));
    }
}

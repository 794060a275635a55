//! Directory contents: name → (object id, type), kept sorted in memory and stored as the
//! directory object's bytes. Byte table: docs/FORMAT.md.
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

pub fn decode(bytes: &[u8]) -> Result<Entries, String> {
    let mut entries = Entries::new();
    if bytes.is_empty() {
        return Ok(entries);
    }
    let bad = |what: &str| format!("directory block is malformed: {what}");
    if bytes.len() < 16 || u32::from_le_bytes(bytes[0..4].try_into().expect("4")) != DIR_MAGIC {
        return Err(bad("no directory header"));
    }
    if bytes[4] != DIR_VERSION {
        return Err(format!("directory format version {} is not supported (this tarn reads {DIR_VERSION})", bytes[4]));
    }
    let count = u64::from_le_bytes(bytes[8..16].try_into().expect("8"));
    let mut at = 16;
    for _ in 0..count {
        if at + 11 > bytes.len() {
            return Err(bad("truncated entry"));
        }
        let obj = u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8"));
        let obj_type = match bytes[at + 8] {
            1 => ObjType::File,
            2 => ObjType::Dir,
            3 => ObjType::Symlink,
            4 => ObjType::Special,
            t => return Err(bad(&format!("entry type {t}"))),
        };
        let len = u16::from_le_bytes([bytes[at + 9], bytes[at + 10]]) as usize;
        at += 11;
        if at + len > bytes.len() {
            return Err(bad("truncated name"));
        }
        entries.insert(bytes[at..at + len].to_vec(), DirEntry { obj, obj_type });
        at += len;
    }
    Ok(entries)
}

//! The MOS (meta object set, after ZFS's name): the pool's root block, written every txg
//! and pointed to by the uberblock. It holds the dataset directory — names, local
//! properties, each dataset's dnode-table root — and the per-device error counters.
//! Stored as versioned JSON inside a checksummed block (docs/FORMAT.md).
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tarn_objects::{Dnode, DNODE_SIZE};

/// Version 2 added `zil` (the intent log's head). Version 1 roots are read as having
/// an empty log.
pub const MOS_VERSION: u32 = 2;
const OLDEST_READABLE: u32 = 1;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Mos {
    pub version: u32,
    pub pool_name: String,
    pub pool_guid: u64,
    pub next_dataset_id: u64,
    pub datasets: Vec<DatasetRecord>,
    /// Leaf guid → [read, write, checksum] error counts since the last `pool clear`.
    pub errors: BTreeMap<String, [u64; 3]>,
    /// Where intent-log replay starts (version 2 on).
    #[serde(default)]
    pub zil: Option<tarn_zil::LogHead>,
    /// The command history (`crate::history`, FORMAT.md §12.1), with its own version.
    /// Optional, so it needs no MOS version: a reader that does not know it ignores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<Box<serde_json::value::RawValue>>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DatasetRecord {
    pub id: u64,
    pub name: String,
    pub props: BTreeMap<String, String>,
    /// The dnode of the dataset's dnode table, as hex.
    pub meta_dnode: String,
    pub next_obj: u64,
    pub unlinked: Vec<u64>,
    pub creation: u64,
}

impl DatasetRecord {
    pub fn meta(&self) -> Result<Option<Dnode>, String> {
        let raw = from_hex(&self.meta_dnode)?;
        if raw.len() != DNODE_SIZE {
            return Err(format!("dataset {}: dnode table root has {} bytes", self.name, raw.len()));
        }
        Dnode::decode(&raw)
    }
}

pub fn dnode_hex(d: &Dnode) -> String {
    let mut raw = [0u8; DNODE_SIZE];
    d.encode(&mut raw);
    raw.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(s: &str) -> Result<Vec<u8>, String> {
    if s.len() % 2 != 0 {
        return Err("odd-length hex".into());
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|e| e.to_string()))
        .collect()
}

impl Mos {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("MOS serialises")
    }

    pub fn decode(bytes: &[u8]) -> Result<Mos, String> {
        #[derive(Deserialize)]
        struct VersionOnly {
            version: u32,
        }
        let v: VersionOnly = serde_json::from_slice(bytes).map_err(|e| format!("pool root block is malformed: {e}"))?;
        if !(OLDEST_READABLE..=MOS_VERSION).contains(&v.version) {
            return Err(format!(
                "pool root format version {} is not supported (this tarn reads {MOS_VERSION}); upgrade tarn",
                v.version
            ));
        }
        serde_json::from_slice(bytes).map_err(|e| format!("pool root block is malformed: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(version: u32) -> Mos {
        Mos {
            version,
            pool_name: "tank".into(),
            pool_guid: 1,
            next_dataset_id: 1,
            datasets: Vec::new(),
            errors: BTreeMap::new(),
            zil: None,
            history: None,
        }
    }

    #[test]
    fn a_version_1_root_without_a_log_head_is_read() {
        let mut v1 = serde_json::to_value(sample(1)).unwrap();
        v1.as_object_mut().unwrap().remove("zil");
        let mos = Mos::decode(&serde_json::to_vec(&v1).unwrap()).unwrap();
        assert_eq!(mos.version, 1);
        assert!(mos.zil.is_none());
    }

    #[test]
    fn an_unknown_version_is_refused_with_the_fix() {
        let err = Mos::decode(&sample(MOS_VERSION + 1).encode()).unwrap_err();
        assert!(err.contains("not supported") && err.contains("upgrade tarn"), "{err}");
    }
}

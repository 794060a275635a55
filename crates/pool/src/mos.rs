//! The MOS (meta object set, after ZFS's name): the pool's root block, written every txg
//! and pointed to by the uberblock. It holds the dataset directory — names, local
//! properties, each dataset's dnode-table root — and the per-device error counters.
//! Stored as versioned JSON inside a checksummed block (docs/FORMAT.md).
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tarn_objects::{Dnode, DNODE_SIZE};

pub const MOS_VERSION: u32 = 1;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Mos {
    pub version: u32,
    pub pool_name: String,
    pub pool_guid: u64,
    pub next_dataset_id: u64,
    pub datasets: Vec<DatasetRecord>,
    /// Leaf guid → [read, write, checksum] error counts since the last `pool clear`.
    pub errors: BTreeMap<String, [u64; 3]>,
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
        if v.version != MOS_VERSION {
            return Err(format!(
                "pool root format version {} is not supported (this tarn reads {MOS_VERSION}); upgrade tarn",
                v.version
            ));
        }
        serde_json::from_slice(bytes).map_err(|e| format!("pool root block is malformed: {e}"))
    }
}

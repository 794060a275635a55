//! The MOS (meta object set, after ZFS's name): the pool's root block, written every txg
//! and pointed to by the uberblock. It holds the dataset directory — names, local
//! properties, each dataset's dnode-table root — the per-device error counters, the
//! last or current scan (scrub or resilver), the error log, the txgs each mirror
//! side missed, each dataset's snapshots and origin (a clone's), and how far an
//! intent-log replay under way got.
//! Stored as versioned JSON inside a checksummed block (docs/FORMAT.md).
//!
//! Owns: the MOS's fields, its encoding and its version.
//!
//! Promises: a root of a version this build does not know is
//! `MosError::UnsupportedVersion` (import refuses it rather than guess or fall back);
//! every malformed field is a typed error, never a panic.
//!
//! Must never: be decoded as the current version when it says another.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tarn_objects::dnode::DnodeError;
use tarn_objects::{Dnode, DNODE_SIZE};
use tarn_zio::{BlockPtr, BLKPTR_SIZE};

use crate::errlog::ErrKey;
use crate::scrub::ScanRecord;

/// Version 2 added `zil` (the intent log's head). Version 3 added `scan`, `errlog`,
/// `errlog_last` and `missed_txgs`. Version 4 added each dataset's `snapshots` and
/// `origin`: a tarn that did not know them would free blocks only a snapshot still
/// references, so it must refuse such a root. Version 5 added `zil_replay`: while it is
/// set, `zil` names a chain being replayed, whose records are those newer than its
/// `claim_txg`, not the root's txg — a tarn that did not know it would skip records and
/// apply others twice. Version 6 added dead lists (`deadlist` of a dataset and of a
/// snapshot, FORMAT.md §12.2): a tarn that did not know them would count their chunks
/// free and overwrite them. Older roots are read as having an empty log, no scan, an
/// empty error log, no side missing txgs, no snapshots, no replay under way and dead
/// lists not known (destroys that need one walk).
pub const MOS_VERSION: u32 = 6;
/// The first version with dead lists.
pub const DEADLIST_VERSION: u32 = 6;
const OLDEST_READABLE: u32 = 1;

/// Why a block is not a pool root this build can read.
#[derive(Debug, thiserror::Error)]
pub enum MosError {
    /// Written by a newer tarn.
    #[error("pool root format version {found} is not supported (this tarn reads {supported}); upgrade tarn")]
    UnsupportedVersion { found: u32, supported: u32 },
    #[error("pool root block is malformed: {0}")]
    Malformed(#[source] serde_json::Error),
}

/// Why a dataset's record in the MOS does not give its dnode-table root.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("dnode table root is not hex: {0}")]
    Hex(#[from] HexError),
    #[error("dead-list chunk pointer: {0}")]
    Chunk(String),
    #[error("dnode table root has {0} bytes")]
    Size(usize),
    #[error("dnode table root: {0}")]
    Dnode(#[from] DnodeError),
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum HexError {
    #[error("odd-length hex")]
    OddLength,
    #[error("not a hex digit at {0}")]
    BadDigit(usize),
}

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
    /// Set while import replays the chain `zil` names: how far this root's txg got
    /// (version 5 on). Absent: no replay under way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zil_replay: Option<tarn_zil::ReplayProgress>,
    /// The last scan, or the one in progress with where it resumes (version 3 on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scan: Option<ScanRecord>,
    /// Blocks no copy of which verified: found since the scrub in progress started, or
    /// since the last scrub finished (version 3 on).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errlog: Vec<ErrKey>,
    /// While a scrub is in progress: the errors known before it started, dropped when it
    /// finishes (version 3 on).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errlog_last: Vec<ErrKey>,
    /// Leaf guid → [first, last] txgs whose writes that mirror side missed, until a
    /// resilver copies them (version 3 on).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub missed_txgs: BTreeMap<String, [u64; 2]>,
    /// The command history (`crate::history`, FORMAT.md §12.1), with its own version.
    /// Optional, so it needs no MOS version: a reader that does not know it ignores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<Box<serde_json::value::RawValue>>,
    /// Pool properties set away from their default (`tarn pool set`). Optional, so it
    /// needs no MOS version: a reader that does not know it runs with the defaults, which
    /// is what every tarn did before it (`crate::pool_props`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pool_props: BTreeMap<String, String>,
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
    /// The dataset's snapshots, oldest first (version 4 on).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub snapshots: Vec<SnapRecord>,
    /// The snapshot a clone was made from (version 4 on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<OriginRecord>,
    /// The head's dead list (version 6 on; absent: not known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadlist: Option<DeadListRecord>,
}

/// A dead list: its chunks, oldest first (FORMAT.md §12.2).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct DeadListRecord {
    pub chunks: Vec<ChunkRecord>,
}

/// One chunk of a dead list: its block pointer (hex), how many entries it holds and
/// their oldest and newest birth txg.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ChunkRecord {
    pub bp: String,
    pub entries: u32,
    pub min_birth: u64,
    pub max_birth: u64,
    /// Physical bytes of its entries.
    pub bytes: u64,
}

/// One snapshot: the dataset's dnode-table root as txg `txg` committed it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SnapRecord {
    /// The part after `@`.
    pub name: String,
    pub txg: u64,
    /// The dnode of the snapshot's dnode table, as hex.
    pub meta_dnode: String,
    pub next_obj: u64,
    pub unlinked: Vec<u64>,
    pub creation: u64,
    /// Physical and logical bytes its tree holds (`referenced`, `logicalreferenced`).
    pub referenced: u64,
    pub logicalreferenced: u64,
    /// The snapshot's guid (send streams name their base by it; a received snapshot
    /// keeps the sender's). Optional, so it needs no MOS version: absent reads as 0 and
    /// import gives such a snapshot a new one.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub guid: u64,
    /// Its dead list (version 6 on; absent: not known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadlist: Option<DeadListRecord>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl SnapRecord {
    /// The dnode of the snapshot's dnode table (`None`: taken of an empty dataset).
    pub fn meta(&self) -> Result<Option<Dnode>, RecordError> {
        meta_from_hex(&self.meta_dnode)
    }
}

/// The snapshot a clone was made from: dataset id, snapshot name and its txg.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct OriginRecord {
    pub dataset: u64,
    pub snapshot: String,
    pub txg: u64,
}

fn meta_from_hex(hex: &str) -> Result<Option<Dnode>, RecordError> {
    let raw = from_hex(hex)?;
    if raw.len() != DNODE_SIZE {
        return Err(RecordError::Size(raw.len()));
    }
    Ok(Dnode::decode(&raw)?)
}

impl DatasetRecord {
    /// The dnode of the dataset's dnode table (`None`: an empty dataset).
    pub fn meta(&self) -> Result<Option<Dnode>, RecordError> {
        meta_from_hex(&self.meta_dnode)
    }
}

pub fn dnode_hex(d: &Dnode) -> String {
    let mut raw = [0u8; DNODE_SIZE];
    d.encode(&mut raw);
    hex(&raw)
}

fn hex(raw: &[u8]) -> String {
    raw.iter().map(|b| format!("{b:02x}")).collect()
}

impl ChunkRecord {
    pub fn new(bp: &BlockPtr, entries: u32, min_birth: u64, max_birth: u64, bytes: u64) -> ChunkRecord {
        ChunkRecord { bp: hex(&bp.to_bytes()), entries, min_birth, max_birth, bytes }
    }

    /// The chunk's block pointer, or why the record does not give one.
    pub fn block(&self) -> Result<BlockPtr, RecordError> {
        let raw = from_hex(&self.bp)?;
        match BlockPtr::decode(&raw) {
            Ok(Some(bp)) if raw.len() == BLKPTR_SIZE => Ok(bp),
            Ok(_) => Err(RecordError::Chunk(format!("{} bytes, not a block pointer", raw.len()))),
            Err(e) => Err(RecordError::Chunk(e.to_string())),
        }
    }
}

/// Bytes of a hex string; works on bytes, so no input can split a character.
fn from_hex(s: &str) -> Result<Vec<u8>, HexError> {
    let digits = s.as_bytes();
    if !digits.len().is_multiple_of(2) {
        return Err(HexError::OddLength);
    }
    let nibble = |i: usize| match digits[i] {
        c @ b'0'..=b'9' => Ok(c - b'0'),
        c @ b'a'..=b'f' => Ok(c - b'a' + 10),
        c @ b'A'..=b'F' => Ok(c - b'A' + 10),
        _ => Err(HexError::BadDigit(i)),
    };
    (0..digits.len()).step_by(2).map(|i| Ok(nibble(i)? << 4 | nibble(i + 1)?)).collect()
}

impl Mos {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("MOS serialises")
    }

    pub fn decode(bytes: &[u8]) -> Result<Mos, MosError> {
        #[derive(Deserialize)]
        struct VersionOnly {
            version: u32,
        }
        let v: VersionOnly = serde_json::from_slice(bytes).map_err(MosError::Malformed)?;
        if !(OLDEST_READABLE..=MOS_VERSION).contains(&v.version) {
            return Err(MosError::UnsupportedVersion { found: v.version, supported: MOS_VERSION });
        }
        serde_json::from_slice(bytes).map_err(MosError::Malformed)
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
            zil_replay: None,
            scan: None,
            errlog: Vec::new(),
            errlog_last: Vec::new(),
            missed_txgs: BTreeMap::new(),
            history: None,
            pool_props: BTreeMap::new(),
        }
    }

    #[test]
    fn pool_properties_are_kept_and_a_root_without_them_has_the_defaults() {
        let mut mos = sample(MOS_VERSION);
        let without = Mos::decode(&mos.encode()).unwrap();
        assert!(without.pool_props.is_empty());
        assert!(!String::from_utf8(mos.encode()).unwrap().contains("pool_props"), "left out when empty");
        mos.pool_props.insert("cacheautoreplace".into(), "off".into());
        let with = Mos::decode(&mos.encode()).unwrap();
        assert_eq!(with.pool_props.get("cacheautoreplace").map(String::as_str), Some("off"));
    }

    #[test]
    fn a_version_2_root_has_no_scan_error_log_or_missed_txgs() {
        let mut v2 = serde_json::to_value(sample(2)).unwrap();
        let obj = v2.as_object_mut().unwrap();
        for key in ["scan", "errlog", "errlog_last", "missed_txgs"] {
            obj.remove(key);
        }
        let mos = Mos::decode(&serde_json::to_vec(&v2).unwrap()).unwrap();
        assert!(mos.scan.is_none() && mos.errlog.is_empty() && mos.missed_txgs.is_empty());
    }

    #[test]
    fn a_version_3_root_has_no_snapshots_or_origins() {
        let mut v3 = serde_json::to_value(sample(3)).unwrap();
        let record = serde_json::json!({"id": 1, "name": "tank", "props": {}, "meta_dnode": "", "next_obj": 2,
            "unlinked": [], "creation": 0});
        v3.as_object_mut().unwrap().insert("datasets".into(), serde_json::json!([record]));
        let mos = Mos::decode(&serde_json::to_vec(&v3).unwrap()).unwrap();
        assert!(mos.datasets[0].snapshots.is_empty() && mos.datasets[0].origin.is_none());
    }

    #[test]
    fn a_version_4_root_has_no_replay_under_way_and_a_version_5_one_keeps_its_progress() {
        let mut v4 = serde_json::to_value(sample(4)).unwrap();
        v4.as_object_mut().unwrap().remove("zil_replay");
        let mos = Mos::decode(&serde_json::to_vec(&v4).unwrap()).unwrap();
        assert!(mos.zil_replay.is_none());
        let mut v5 = sample(5);
        assert!(!String::from_utf8(v5.encode()).unwrap().contains("zil_replay"), "left out when none");
        let progress = tarn_zil::ReplayProgress {
            claim_txg: 7,
            replayed: 12,
            ids: vec![[1, 40, 41]],
            skipped: 1,
            first_skipped: Some("txg 8 rename: not found".into()),
        };
        v5.zil_replay = Some(progress.clone());
        assert_eq!(Mos::decode(&v5.encode()).unwrap().zil_replay, Some(progress));
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
        assert!(
            matches!(err, MosError::UnsupportedVersion { found, supported: MOS_VERSION } if found == MOS_VERSION + 1),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(msg.contains("not supported") && msg.contains("upgrade tarn"), "{msg}");
        assert!(matches!(Mos::decode(b"{\"version\":2,"), Err(MosError::Malformed(_))));
    }

    #[test]
    fn hex_round_trips_and_bad_hex_is_a_typed_error() {
        assert_eq!(from_hex("00ff7A"), Ok(vec![0, 255, 0x7a]));
        assert_eq!(from_hex("abc"), Err(HexError::OddLength));
        assert_eq!(from_hex("0g"), Err(HexError::BadDigit(1)));
        assert_eq!(from_hex("0é0"), Err(HexError::BadDigit(1)), "a multi-byte character is an error, not a panic");
    }

    #[test]
    fn a_dataset_record_gives_its_dnode_table_root_or_says_why_not() {
        let d = Dnode::new(tarn_objects::ObjType::Meta, 16384, 0, 0);
        let mut rec = DatasetRecord {
            id: 1,
            name: "tank".into(),
            props: BTreeMap::new(),
            meta_dnode: dnode_hex(&d),
            next_obj: 1,
            unlinked: Vec::new(),
            creation: 0,
            snapshots: Vec::new(),
            origin: None,
            deadlist: None,
        };
        assert_eq!(rec.meta().unwrap(), Some(d));
        rec.meta_dnode.truncate(10);
        assert!(matches!(rec.meta(), Err(RecordError::Size(5))));
        rec.meta_dnode.push('x');
        assert!(matches!(rec.meta(), Err(RecordError::Hex(HexError::OddLength))));
    }
}

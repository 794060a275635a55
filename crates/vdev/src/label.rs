//! Labels and uberblocks: how a device says which pool it belongs to, and where the
//! pool's newest committed state is.
//!
//! Each device carries two labels of `LABEL_SIZE` bytes, one at each end. A label is a
//! 64 KiB config area (binary header + JSON config, checksummed) followed by the
//! uberblock ring (slots of one sector, at least 1 KiB). Byte tables: docs/FORMAT.md.
//!
//! Owns: the byte layout and versions of the label config area and of the uberblock.
//!
//! Promises: a flipped bit or a torn write makes a label `Invalid` or an uberblock slot
//! empty, never a wrong config; a checksummed label or uberblock of a version this build
//! does not know is reported as such (`LabelDecode::Version`, `Err(version)`), so the
//! caller refuses the device instead of guessing.
//!
//! Must never: read a newer version's fields as if they were this version's.
use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_128;

pub const LABEL_SIZE: u64 = 256 * 1024;
pub const CONFIG_AREA: usize = 64 * 1024;
/// Version 2 added separate log devices (`tree.logs`); version 1 labels are read as
/// having none. A version-1 tarn refuses a version-2 label instead of importing a pool
/// whose intent log it would not see. Version 3 added holes (`TopConfig::Hole`, where a
/// removed log device was): only a config with a hole is written as version 3, so a pool
/// that never removed a device stays readable by a version-2 tarn.
pub const LABEL_VERSION: u32 = 3;
/// The version of a config without holes.
const LABEL_VERSION_WITHOUT_HOLES: u32 = 2;
const OLDEST_LABEL: u32 = 1;
pub const UBERBLOCK_VERSION: u32 = 1;
const LABEL_MAGIC: u64 = u64::from_le_bytes(*b"TARNLABL");
const UBER_MAGIC: u64 = u64::from_le_bytes(*b"TARNUBER");
const LABEL_HEADER: usize = 32;
pub const UBERBLOCK_BYTES: usize = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LabelState {
    Active,
    Exported,
    Destroyed,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum TopConfig {
    Disk {
        guid: u64,
        path: String,
    },
    Mirror {
        guid: u64,
        children: Vec<(u64, String)>,
    },
    /// Where a removed log device was: it keeps the vdev numbers after it (an intent-log
    /// block names its vdev by number), as ZFS's hole vdev does.
    Hole,
}

impl TopConfig {
    pub fn guid(&self) -> u64 {
        match self {
            TopConfig::Disk { guid, .. } | TopConfig::Mirror { guid, .. } => *guid,
            TopConfig::Hole => 0,
        }
    }
    /// (guid, path) of every leaf under this top-level vdev.
    pub fn leaves(&self) -> Vec<(u64, String)> {
        match self {
            TopConfig::Disk { guid, path } => vec![(*guid, path.clone())],
            TopConfig::Mirror { children, .. } => children.clone(),
            TopConfig::Hole => Vec::new(),
        }
    }

    pub fn is_hole(&self) -> bool {
        matches!(self, TopConfig::Hole)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeConfig {
    pub tops: Vec<TopConfig>,
    /// Separate intent-log devices (SLOG), after the data vdevs in vdev numbering.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub logs: Vec<TopConfig>,
}

impl TreeConfig {
    pub fn guid_sum(&self) -> u64 {
        self.tops.iter().chain(&self.logs).flat_map(|t| t.leaves()).fold(0u64, |s, (g, _)| s.wrapping_add(g))
    }

    /// Drops the holes at the end of the log list: no vdev number after them needs
    /// keeping. True if there were any.
    pub fn trim_trailing_holes(&mut self) -> bool {
        let before = self.logs.len();
        while self.logs.last().is_some_and(TopConfig::is_hole) {
            self.logs.pop();
        }
        self.logs.len() != before
    }
}

/// The config a device's label holds: what pool, which device this is, the whole tree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Label {
    pub pool_name: String,
    pub pool_guid: u64,
    pub vdev_guid: u64,
    pub top_index: u32,
    pub ashift: u32,
    pub state: LabelState,
    pub hostname: String,
    pub create_txg: u64,
    /// Bytes of the device usable for data: the same for every device of a top-level vdev.
    pub asize: u64,
    pub tree: TreeConfig,
}

/// A label field that makes no sense: the label is damaged (with a valid checksum) or
/// was not written by tarn. Import refuses it by name rather than fail later on a value
/// it would misread (an `ashift` of 99 once read as a truncated device).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("label field `{field}` is {value}: {rule}")]
pub struct BadField {
    pub field: &'static str,
    pub value: String,
    pub rule: &'static str,
}

/// Smallest and largest `ashift` a pool may have (512-byte to 64 KiB sectors).
pub const ASHIFT_RANGE: std::ops::RangeInclusive<u32> = 9..=16;

impl Label {
    /// Checks every field a reader relies on: `ashift` in range, a pool name that names
    /// a pool (not empty, no `/`, no `..`), a top-level index inside the tree, this
    /// device's guid at that index, and a tree with at least one data vdev.
    pub fn validate(&self) -> Result<(), BadField> {
        let bad = |field, value: String, rule| Err(BadField { field, value, rule });
        if !ASHIFT_RANGE.contains(&self.ashift) {
            return bad("ashift", self.ashift.to_string(), "must be 9 to 16");
        }
        let name = &self.pool_name;
        if name.is_empty() || name.contains('/') || name.contains("..") || name.len() > 255 {
            return bad("pool_name", format!("{name:?}"), "a pool name is 1 to 255 characters, without '/' or '..'");
        }
        if self.tree.tops.is_empty() {
            return bad("tree", "without data vdevs".into(), "a pool has at least one");
        }
        if self.tree.tops.iter().any(TopConfig::is_hole) {
            return bad("tree", "with a hole among the data vdevs".into(), "only a removed log device leaves a hole");
        }
        let tops: Vec<&TopConfig> = self.tree.tops.iter().chain(&self.tree.logs).collect();
        let Some(top) = tops.get(self.top_index as usize) else {
            return bad("top_index", self.top_index.to_string(), "must name one of the tree's vdevs");
        };
        if !top.leaves().iter().any(|(g, _)| *g == self.vdev_guid) {
            return bad("vdev_guid", self.vdev_guid.to_string(), "must be a device of the vdev top_index names");
        }
        Ok(())
    }
}

pub enum LabelDecode {
    Ok(Label),
    /// A tarn label with a version this build does not know.
    Version(u32),
    Invalid,
}

impl Label {
    /// The config area: magic, version, JSON length, checksum, JSON.
    pub fn encode(&self) -> Vec<u8> {
        let json = serde_json::to_vec(self).expect("label config serialises");
        assert!(json.len() <= CONFIG_AREA - LABEL_HEADER, "label config too large");
        let mut area = vec![0u8; CONFIG_AREA];
        area[0..8].copy_from_slice(&LABEL_MAGIC.to_le_bytes());
        let version =
            if self.tree.logs.iter().any(TopConfig::is_hole) { LABEL_VERSION } else { LABEL_VERSION_WITHOUT_HOLES };
        area[8..12].copy_from_slice(&version.to_le_bytes());
        area[12..16].copy_from_slice(&(json.len() as u32).to_le_bytes());
        area[LABEL_HEADER..LABEL_HEADER + json.len()].copy_from_slice(&json);
        let sum = xxh3_128(&area);
        area[16..32].copy_from_slice(&sum.to_le_bytes());
        area
    }

    pub fn decode(area: &[u8]) -> LabelDecode {
        if area.len() < CONFIG_AREA || u64_at(area, 0) != LABEL_MAGIC {
            return LabelDecode::Invalid;
        }
        let version = u32_at(area, 8);
        let json_len = u32_at(area, 12) as usize;
        let mut copy = area[..CONFIG_AREA].to_vec();
        let stored = u128::from_le_bytes(copy[16..32].try_into().expect("16 bytes"));
        copy[16..32].fill(0);
        if xxh3_128(&copy) != stored {
            return LabelDecode::Invalid;
        }
        if !(OLDEST_LABEL..=LABEL_VERSION).contains(&version) {
            return LabelDecode::Version(version);
        }
        if json_len > CONFIG_AREA - LABEL_HEADER {
            return LabelDecode::Invalid;
        }
        match serde_json::from_slice(&area[LABEL_HEADER..LABEL_HEADER + json_len]) {
            Ok(label) => LabelDecode::Ok(label),
            Err(_) => LabelDecode::Invalid,
        }
    }
}

/// The root of one committed transaction group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Uberblock {
    pub txg: u64,
    pub pool_guid: u64,
    pub guid_sum: u64,
    pub timestamp: u64,
    /// The block pointer of the pool's root (MOS) block, opaque to this layer.
    pub root: [u8; 64],
}

impl Uberblock {
    pub fn encode(&self) -> [u8; UBERBLOCK_BYTES] {
        let mut b = [0u8; UBERBLOCK_BYTES];
        b[0..8].copy_from_slice(&UBER_MAGIC.to_le_bytes());
        b[8..12].copy_from_slice(&UBERBLOCK_VERSION.to_le_bytes());
        b[16..24].copy_from_slice(&self.txg.to_le_bytes());
        b[24..32].copy_from_slice(&self.pool_guid.to_le_bytes());
        b[32..40].copy_from_slice(&self.timestamp.to_le_bytes());
        b[40..104].copy_from_slice(&self.root);
        b[104..112].copy_from_slice(&self.guid_sum.to_le_bytes());
        let sum = xxh3_128(&b[..240]);
        b[240..256].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// `Err(version)` for a valid uberblock of an unknown version; `Ok(None)` for an empty
    /// or torn slot.
    pub fn decode(b: &[u8]) -> Result<Option<Uberblock>, u32> {
        if b.len() < UBERBLOCK_BYTES || u64_at(b, 0) != UBER_MAGIC {
            return Ok(None);
        }
        let stored = u128::from_le_bytes(b[240..256].try_into().expect("16 bytes"));
        if xxh3_128(&b[..240]) != stored {
            return Ok(None);
        }
        let version = u32_at(b, 8);
        if version != UBERBLOCK_VERSION {
            return Err(version);
        }
        let mut root = [0u8; 64];
        root.copy_from_slice(&b[40..104]);
        Ok(Some(Uberblock {
            txg: u64_at(b, 16),
            pool_guid: u64_at(b, 24),
            timestamp: u64_at(b, 32),
            root,
            guid_sum: u64_at(b, 104),
        }))
    }
}

/// Size of one uberblock slot: a whole sector, so a slot is written without touching its
/// neighbours.
pub fn slot_size(ashift: u32) -> usize {
    (1usize << ashift).max(1024)
}

pub fn slot_count(ashift: u32) -> usize {
    (LABEL_SIZE as usize - CONFIG_AREA) / slot_size(ashift)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Label {
        Label {
            pool_name: "tank".into(),
            pool_guid: 7,
            vdev_guid: 9,
            top_index: 0,
            ashift: 12,
            state: LabelState::Active,
            hostname: "h".into(),
            create_txg: 1,
            asize: 1 << 30,
            tree: TreeConfig { tops: vec![TopConfig::Disk { guid: 9, path: "/x".into() }], logs: Vec::new() },
        }
    }

    #[test]
    fn label_round_trips_and_detects_a_flipped_bit() {
        let mut area = sample().encode();
        assert!(matches!(Label::decode(&area), LabelDecode::Ok(l) if l == sample()));
        area[40] ^= 1;
        assert!(matches!(Label::decode(&area), LabelDecode::Invalid));
    }

    #[test]
    fn a_version_1_label_without_log_devices_is_read() {
        let mut area = sample().encode();
        area[8..12].copy_from_slice(&1u32.to_le_bytes());
        area[16..32].fill(0);
        let sum = xxh3_128(&area);
        area[16..32].copy_from_slice(&sum.to_le_bytes());
        assert!(matches!(Label::decode(&area), LabelDecode::Ok(l) if l.tree.logs.is_empty()));
    }

    #[test]
    fn label_of_unknown_version_is_reported_as_such() {
        let mut area = sample().encode();
        area[8..12].copy_from_slice(&(LABEL_VERSION + 1).to_le_bytes());
        area[16..32].fill(0);
        let sum = xxh3_128(&area);
        area[16..32].copy_from_slice(&sum.to_le_bytes());
        assert!(matches!(Label::decode(&area), LabelDecode::Version(v) if v == LABEL_VERSION + 1));
    }

    #[test]
    fn only_a_config_with_a_hole_is_written_as_version_3() {
        let version = |l: &Label| u32_at(&l.encode(), 8);
        let mut label = sample();
        label.tree.logs = vec![TopConfig::Disk { guid: 5, path: "/log".into() }];
        assert_eq!(version(&label), 2, "a version-2 tarn still reads a pool with a log");
        label.tree.logs.insert(0, TopConfig::Hole);
        assert_eq!(version(&label), 3);
        assert!(matches!(Label::decode(&label.encode()), LabelDecode::Ok(l) if l == label), "a hole round-trips");
        assert!(!label.tree.trim_trailing_holes(), "a hole before a log stays");
        label.tree.logs.pop();
        assert!(label.tree.trim_trailing_holes());
        assert!(label.tree.logs.is_empty());
    }

    #[test]
    fn label_fields_that_make_no_sense_are_named() {
        assert_eq!(sample().validate(), Ok(()));
        type Change = Box<dyn Fn(&mut Label)>;
        let cases: Vec<(&str, Change)> = vec![
            ("ashift", Box::new(|l| l.ashift = 0)),
            ("ashift", Box::new(|l| l.ashift = 99)),
            ("pool_name", Box::new(|l| l.pool_name.clear())),
            ("pool_name", Box::new(|l| l.pool_name = "a/b".into())),
            ("pool_name", Box::new(|l| l.pool_name = "..".into())),
            ("top_index", Box::new(|l| l.top_index = 1)),
            ("vdev_guid", Box::new(|l| l.vdev_guid = 8)),
            ("tree", Box::new(|l| l.tree.tops.clear())),
        ];
        for (field, change) in cases {
            let mut l = sample();
            change(&mut l);
            let err = l.validate().expect_err(field);
            assert_eq!(err.field, field, "{err}");
        }
    }

    #[test]
    fn uberblock_round_trips_and_torn_slot_is_empty() {
        let ub = Uberblock { txg: 5, pool_guid: 1, guid_sum: 2, timestamp: 3, root: [7; 64] };
        let mut b = ub.encode();
        assert_eq!(Uberblock::decode(&b), Ok(Some(ub)));
        b[100] ^= 0xff;
        assert_eq!(Uberblock::decode(&b), Ok(None));
    }
}

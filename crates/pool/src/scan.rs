//! Finding pools on devices: read every candidate's labels and group them by pool.
//!
//! Owns: which paths are candidates (regular files and block devices), the grouping, and
//! which devices are reported as unusable.
//!
//! Promises: only reads (a device is opened, its labels read, and closed); a file that
//! is not a tarn device, or cannot be opened (in use, no permission), is skipped; a tarn
//! device this build cannot use (a newer format version, a label field that makes no
//! sense) is reported with the reason, never silently left out.
//!
//! Must never: write, or open a character device (opening one may block or act).
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tarn_vdev::{read_device_labels, FileDevice, Label, LabelState, VdevError};

/// A pool found on one or more devices.
#[derive(Debug, Clone)]
pub struct Discovered {
    pub name: String,
    pub guid: u64,
    pub state: LabelState,
    pub label: Label,
    pub devices: Vec<PathBuf>,
    /// Newest txg seen in any uberblock.
    pub txg: u64,
}

/// A tarn device that cannot be imported by this build, and why.
#[derive(Debug, Clone)]
pub struct Unusable {
    pub path: PathBuf,
    pub reason: String,
}

/// What a search of devices found.
#[derive(Debug, Clone, Default)]
pub struct Discovery {
    pub pools: Vec<Discovered>,
    pub unusable: Vec<Unusable>,
}

/// Reads the labels of every file or block device under `dirs` (or the given paths) and
/// groups them by pool guid. Unreadable and non-tarn files are skipped; tarn devices of
/// a format this build does not know, or with a nonsensical label, are `unusable`.
pub fn discover(paths: &[PathBuf]) -> Discovery {
    let mut found: BTreeMap<u64, Discovered> = BTreeMap::new();
    let mut unusable = Vec::new();
    for path in candidates(paths) {
        let labels = match probe(&path) {
            Ok(labels) => labels,
            Err(
                e @ (VdevError::UnsupportedVersion { .. }
                | VdevError::UnsupportedUberblockVersion { .. }
                | VdevError::BadLabel { .. }),
            ) => {
                unusable.push(Unusable { path, reason: e.to_string() });
                continue;
            }
            Err(_) => continue,
        };
        let txg = labels.uberblocks.iter().map(|u| u.txg).max().unwrap_or(0);
        let label = labels.label;
        let entry = found.entry(label.pool_guid).or_insert_with(|| Discovered {
            name: label.pool_name.clone(),
            guid: label.pool_guid,
            state: label.state,
            label: label.clone(),
            devices: Vec::new(),
            txg,
        });
        entry.devices.push(path);
        if txg > entry.txg {
            entry.txg = txg;
            entry.label = label;
        }
    }
    Discovery { pools: found.into_values().collect(), unusable }
}

fn probe(path: &Path) -> Result<tarn_vdev::DeviceLabels, VdevError> {
    let dev = FileDevice::open(path)?;
    read_device_labels(&dev)
}

fn candidates(paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            if let Ok(rd) = std::fs::read_dir(p) {
                let mut v: Vec<PathBuf> = rd.flatten().map(|e| e.path()).filter(|p| is_device_candidate(p)).collect();
                v.sort();
                out.extend(v);
            }
        } else {
            out.push(p.clone());
        }
    }
    out
}

/// Regular files (images) and block devices; never character devices, which may block
/// or have side effects when opened.
fn is_device_candidate(p: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::metadata(p) {
        Ok(m) => m.is_file() || m.file_type().is_block_device(),
        Err(_) => false,
    }
}

/// The guid of the pool the device at `path` belongs to by its labels, read without
/// taking the device (its holder may be using it); `None` for a device of no pool.
pub fn member_of(path: &std::path::Path) -> Option<u64> {
    let labels = tarn_vdev::peek_labels(path).ok()?;
    (labels.label.state != tarn_vdev::LabelState::Destroyed).then_some(labels.label.pool_guid)
}

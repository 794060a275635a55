//! Importing a pool (the theory of operation is in the module header of `lifecycle`):
//! read every label, choose the config, build the vdev tree, find the newest root that
//! verifies, note the txgs each mirror side missed, claim the tree, replay the log.
//!
//! Owns: the choice of config and root, and what a missing log device means for the
//! import (reported, not fatal).
//!
//! Promises: a refused import writes nothing; a device that shrank, one of another pool,
//! a destroyed pool, or a root of a newer format is refused by name.
//!
//! Must never: import a device whose label it cannot read, or fall back past a root of
//! a newer format to an older one.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tarn_vdev::{
    read_device_labels, BlockDevice, DeviceLabels, FileDevice, Label, LabelState, Leaf, LeafHealth, TopConfig, TopVdev,
    Uberblock, VdevTree,
};
use tarn_zio::{Access, BlockPtr, ReadKind, Zio};

use super::ImportOptions;
use crate::errlog::ErrLog;
use crate::error::{ImportError, PoolError, RootError};
use crate::mos::{Mos, MosError};
use crate::pool::{hostname, Pool};

impl Pool {
    /// Opens the pool on `devices` (one handle per device found), at its newest
    /// uberblock whose root verifies.
    pub fn import(devices: Vec<Arc<dyn BlockDevice>>, opts: &ImportOptions) -> Result<Pool, PoolError> {
        let mut labels = read_all_labels(&devices)?;
        let mut label = choose_label(&labels)?;
        let trimmed = label.tree.trim_trailing_holes();
        open_logs_not_given(&label, &mut labels);
        let refuse =
            |reason: ImportError| PoolError::CannotImport { pool: label.pool_name.clone(), reason: Box::new(reason) };
        let by_guid: BTreeMap<u64, Arc<dyn BlockDevice>> =
            labels.iter().map(|(d, l)| (l.label.vdev_guid, d.clone())).collect();
        let opened_label = with_opened_paths(&label, &by_guid);
        let (vdevs, missing_logs) = build_tree(&label, &by_guid).map_err(refuse)?;
        let was_exported = label.state == LabelState::Exported;
        let mut ubs: Vec<Uberblock> = labels.iter().flat_map(|(_, l)| l.uberblocks.clone()).collect();
        ubs.sort_by_key(|u| std::cmp::Reverse(u.txg));
        ubs.dedup_by_key(|u| u.txg);
        let zio = Arc::new(Zio::new(vdevs));
        let (ub, mos, mos_bp) = newest_loadable(&zio, &ubs).map_err(|e| refuse(e.into()))?;
        // A replay an earlier import began goes on with the records it began with: those
        // newer than the txg it started from (the txgs since hold replayed changes).
        let claim_txg = mos.zil_replay.as_ref().map_or(ub.txg, |p| p.claim_txg);
        let chained = match &mos.zil {
            Some(head) => {
                Some(tarn_zil::read_chain(&zio, label.pool_guid, head, claim_txg).map_err(|e| refuse(e.into()))?)
            }
            None => None,
        };
        let zil_seq = chained.as_ref().map_or(1, |c| c.end_seq + 1);
        note_missed_txgs(&zio.vdevs, &labels, ub.txg, &mos);
        let rewrite_labels = label.state != LabelState::Active || opened_label.tree != label.tree || trimmed;
        let pool = Pool::assemble(opened_label, zio.clone(), ub.txg, opts.txg.clone(), mos.next_dataset_id, zil_seq);
        *pool.inner.mos_bp.lock() = Some(mos_bp);
        pool.inner.history.restore(mos.history.as_deref());
        *pool.inner.pool_props.lock() = crate::pool_props::restore(&mos.pool_props);
        restore_error_counters(&zio.vdevs, &mos);
        pool.inner.scan.restore(mos.scan.clone());
        *pool.inner.errlog.lock() = ErrLog::restore(&mos.errlog, &mos.errlog_last);
        pool.claim_all(&mos, mos_bp, chained.as_ref())?;
        zio.finish_load();
        if rewrite_labels {
            let mut active = pool.inner.label.lock().clone();
            active.state = LabelState::Active;
            active.hostname = hostname();
            zio.vdevs.write_labels(&active)?;
        }
        pool.start();
        // After the import walk (which reads past the caches) and before replay, so
        // replayed reads can already hit.
        pool.attach_caches(Some(ub.txg));
        pool.replay_log(chained, mos.zil_replay.clone(), ub.txg)?;
        if !missing_logs.is_empty() {
            pool.note_missing_logs(&missing_logs, was_exported, ub.txg);
        }
        for (_, ds) in pool.inner.datasets.read().values() {
            ds.reclaim_unlinked()?;
        }
        pool.resilver_if_needed();
        Ok(pool)
    }

    /// Opens the image files or block devices at `paths` and imports the pool on them.
    pub fn import_paths(paths: &[PathBuf], opts: &ImportOptions) -> Result<Pool, PoolError> {
        let mut devs: Vec<Arc<dyn BlockDevice>> = Vec::new();
        for p in paths {
            devs.push(Arc::new(FileDevice::open(p)?));
        }
        Pool::import(devs, opts)
    }

    /// Says plainly what a missing log device means for this import.
    fn note_missing_logs(&self, missing: &[String], was_exported: bool, txg: u64) {
        let devices = missing.join(", ");
        let msg = if was_exported {
            format!("log device {devices} is missing; the pool was exported cleanly, so nothing acknowledged was lost; fsync now logs to the data devices")
        } else {
            format!("log device {devices} is missing: changes acknowledged by fsync after txg {txg} (the last committed) may be lost; fsync now logs to the data devices")
        };
        if !was_exported {
            *self.inner.replay_trouble.lock() = Some(msg.clone());
        }
        let mut report = self.inner.replay_report.lock();
        *report = Some(match report.take() {
            Some(r) => format!("{r}; {msg}"),
            None => msg,
        });
    }
}

/// A device and what its labels say.
type Labelled = (Arc<dyn BlockDevice>, DeviceLabels);

/// Opens the log devices the config names that were not given, at the path the config
/// records, if their labels say they are those devices. A log device added a moment
/// before a crash may not be in the caller's list yet (the cache file is written after
/// the add), and the intent log may already hold acknowledged records there. (Data
/// devices are not looked for: a side left out on purpose stays out.)
fn open_logs_not_given(label: &Label, labels: &mut Vec<Labelled>) {
    let given: std::collections::BTreeSet<u64> = labels.iter().map(|(_, l)| l.label.vdev_guid).collect();
    let wanted = label.tree.logs.iter().flat_map(|t| t.leaves()).filter(|(guid, _)| !given.contains(guid));
    for (guid, path) in wanted.collect::<Vec<_>>() {
        let Ok(dev) = FileDevice::open(Path::new(&path)) else { continue };
        match read_device_labels(&dev) {
            Ok(l) if l.label.pool_guid == label.pool_guid && l.label.vdev_guid == guid => {
                let asize = TopVdev::asize_of(dev.size(), l.label.ashift);
                if asize >= l.label.asize {
                    labels.push((Arc::new(dev), l));
                }
            }
            _ => {}
        }
    }
}

/// Both labels of every device, refusing one that shrank since it joined the pool (the
/// blocks past its new end would be silently lost).
fn read_all_labels(devices: &[Arc<dyn BlockDevice>]) -> Result<Vec<Labelled>, PoolError> {
    let mut labels = Vec::new();
    for dev in devices {
        let l = read_device_labels(dev.as_ref())?;
        let asize = TopVdev::asize_of(dev.size(), l.label.ashift);
        if asize < l.label.asize {
            let reason = ImportError::Truncated { path: dev.path().into(), asize, needed: l.label.asize };
            return Err(PoolError::CannotImport { pool: l.label.pool_name.clone(), reason: Box::new(reason) });
        }
        labels.push((dev.clone(), l));
    }
    Ok(labels)
}

/// The config to import with: every device must be of one pool; the label beside the
/// newest uberblock wins; a destroyed pool is refused.
fn choose_label(labels: &[Labelled]) -> Result<Label, PoolError> {
    let Some((_, first)) = labels.first() else {
        return Err(PoolError::NoDevices);
    };
    let pool = first.label.pool_name.clone();
    if let Some((dev, other)) = labels.iter().find(|(_, l)| l.label.pool_guid != first.label.pool_guid) {
        let reason = ImportError::ForeignDevice { path: dev.path().into(), other: other.label.pool_name.clone() };
        return Err(PoolError::CannotImport { pool, reason: Box::new(reason) });
    }
    let newest = labels.iter().max_by_key(|(_, l)| l.uberblocks.iter().map(|u| u.txg).max());
    let label = newest.map(|(_, l)| l.label.clone()).unwrap_or_else(|| first.label.clone());
    if label.state == LabelState::Destroyed {
        return Err(PoolError::CannotImport { pool, reason: Box::new(ImportError::Destroyed) });
    }
    Ok(label)
}

/// Assembles the vdev tree from the label's config and the devices found. A data vdev
/// with no device is fatal; a missing log device is not (ZFS would refuse without -m):
/// the pool imports and says what the missing log may have held.
fn build_tree(
    label: &Label,
    by_guid: &BTreeMap<u64, Arc<dyn BlockDevice>>,
) -> Result<(VdevTree, Vec<String>), ImportError> {
    let mut tops = Vec::new();
    let mut missing_logs = Vec::new();
    let configs = label.tree.tops.iter().map(|t| (t, false)).chain(label.tree.logs.iter().map(|t| (t, true)));
    for (index, (top, is_log)) in configs.enumerate() {
        if top.is_hole() {
            tops.push(TopVdev::hole(index, label.ashift));
            continue;
        }
        let mut leaves = Vec::new();
        let mut asize = u64::MAX;
        for (guid, path) in top.leaves() {
            let dev = by_guid.get(&guid).cloned();
            if let Some(d) = &dev {
                asize = asize.min(TopVdev::asize_of(d.size(), label.ashift));
            }
            // Known by the path it was opened from, not the one recorded at create.
            let path = dev.as_ref().map_or(path, |d| d.path().display().to_string());
            leaves.push(Leaf::new(guid, path, dev));
        }
        if leaves.iter().all(|l| l.health() == LeafHealth::Unavail) {
            let missing: Vec<String> = leaves.iter().map(|l| l.path.clone()).collect();
            if !is_log {
                return Err(ImportError::MissingVdev { index, missing: missing.join(", ") });
            }
            missing_logs.extend(missing);
            asize = 0;
        }
        let vdev = TopVdev::new(index, top.guid(), label.ashift, asize, leaves);
        tops.push(if is_log { vdev.as_log() } else { vdev });
    }
    Ok((VdevTree::new(tops, label.ashift), missing_logs))
}

/// The newest uberblock whose MOS block reads and verifies. A root of a newer format
/// stops the search: an older root would silently drop what the newer tarn committed.
fn newest_loadable(zio: &Zio, ubs: &[Uberblock]) -> Result<(Uberblock, Mos, BlockPtr), RootError> {
    let mut last_err = RootError::NoUberblock;
    for ub in ubs {
        let Ok(Some(bp)) = BlockPtr::decode(&ub.root) else {
            continue;
        };
        let bytes = match zio.read(&bp, Access::of(ReadKind::Import)) {
            Ok(b) => b,
            Err(source) => {
                last_err = RootError::Unreadable { txg: ub.txg, source };
                continue;
            }
        };
        match Mos::decode(&bytes) {
            Ok(mos) => return Ok((ub.clone(), mos, bp)),
            Err(e @ MosError::UnsupportedVersion { .. }) => return Err(RootError::Newer(e)),
            Err(source) => last_err = RootError::Malformed { txg: ub.txg, source },
        }
    }
    Err(last_err)
}

/// The label with each device's path replaced by the one it was opened from (devices
/// move: `/dev/sdb` becomes `/dev/sdc`, an image is copied elsewhere).
fn with_opened_paths(label: &Label, by_guid: &BTreeMap<u64, Arc<dyn BlockDevice>>) -> Label {
    let opened = |(guid, path): &(u64, String)| {
        let path = by_guid.get(guid).map_or_else(|| path.clone(), |d| d.path().display().to_string());
        (*guid, path)
    };
    let retarget = |top: &TopConfig| match top {
        TopConfig::Disk { guid, path } => {
            let (guid, path) = opened(&(*guid, path.clone()));
            TopConfig::Disk { guid, path }
        }
        TopConfig::Mirror { guid, children } => {
            TopConfig::Mirror { guid: *guid, children: children.iter().map(opened).collect() }
        }
        TopConfig::Hole => TopConfig::Hole,
    };
    let mut out = label.clone();
    out.tree.tops = label.tree.tops.iter().map(retarget).collect();
    out.tree.logs = label.tree.logs.iter().map(retarget).collect();
    out
}

/// Records the txgs each mirror side missed: those after its newest uberblock up to the
/// root imported (only where a side of the same vdev has them all, to copy from), and
/// those the MOS says a resilver has not copied yet.
fn note_missed_txgs(vdevs: &VdevTree, labels: &[Labelled], txg: u64, mos: &Mos) {
    let newest: BTreeMap<u64, u64> = labels
        .iter()
        .map(|(_, l)| {
            let t = l.uberblocks.iter().map(|u| u.txg).max().unwrap_or(0);
            (l.label.vdev_guid, t)
        })
        .collect();
    for top in vdevs.tops.iter() {
        let current = |l: &Leaf| newest.get(&l.guid).is_some_and(|t| *t >= txg);
        if !top.leaves.iter().any(current) {
            continue;
        }
        for leaf in &top.leaves {
            match newest.get(&leaf.guid) {
                Some(&t) if t < txg => leaf.add_missed_txgs(t + 1, txg),
                _ => {}
            }
        }
    }
    for leaf in vdevs.leaves() {
        if let Some([first, last]) = mos.missed_txgs.get(&leaf.guid.to_string()) {
            if first <= last {
                leaf.add_missed_txgs(*first, *last);
            }
        }
    }
}

fn restore_error_counters(vdevs: &VdevTree, mos: &Mos) {
    for leaf in vdevs.leaves() {
        if let Some([r, w, c]) = mos.errors.get(&leaf.guid.to_string()) {
            leaf.restore_counters(*r, *w, *c);
        }
    }
}

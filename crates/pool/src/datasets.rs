//! Datasets of a pool: names, create, destroy, list, and the space each subtree uses.
//!
//! Owns: the name rules, the dataset directory in memory (`Inner::datasets`), new
//! dataset ids.
//!
//! Promises: a dataset, its root directory and its properties are created in one txg
//! (a crash never leaves a dataset without a root), and only after every property given
//! was checked; a destroyed dataset's space returns once the txg that drops it commits;
//! a dataset with children is not destroyed, nor the pool's root dataset; names are
//! checked before anything changes, by ZFS's rules except that `:` is refused (it
//! separates a dataset from a path in `tarn put`, `ls` and `cat`).
//!
//! Must never: take the `datasets` lock before a txg hold (see `pool`), or free a
//! destroyed dataset's blocks itself (the commit does, in the txg that drops it).
use std::collections::BTreeMap;
use std::sync::Arc;

use tarn_dataset::props::Effective;
use tarn_dataset::{Dataset, FsError};
use tarn_objects::{Dnode, ObjSet};

use crate::error::PoolError;
use crate::pool::{now_secs, Datasets, Destroyed, DsMeta, Pool};
use crate::props::normalized_all;
use crate::snapshots::{Origin, Snap};
use crate::space::PoolSpace;

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct DatasetInfo {
    pub name: String,
    pub used: u64,
    pub logicalused: u64,
    pub available: u64,
    pub mountpoint: String,
}

/// Longest pool or dataset name, as ZFS (255 bytes).
pub const MAX_NAME: usize = 255;

/// Pool names ZFS reserves (vdev words), and the prefixes it reserves with them.
const RESERVED: [&str; 6] = ["mirror", "raidz", "draid", "spare", "log", "cache"];
const RESERVED_PREFIXES: [&str; 4] = ["mirror", "raidz", "draid", "spare"];

/// Checks a pool or dataset name by ZFS's rules: components of letters, digits and
/// `_ - .` separated by `/`, none empty, `.` or `..`; the pool's starts with a letter
/// and is not a vdev word (`mirror`, `log`…), a dataset's with a letter or a digit; at
/// most 255 bytes. Unlike ZFS, `:` is refused: it separates a dataset from a path.
pub fn check_name(name: &str) -> Result<(), PoolError> {
    let bad = |why: &str| Err(PoolError::BadName(name.to_string(), why.to_string()));
    if name.is_empty() || name.len() > MAX_NAME {
        return bad("names are 1 to 255 characters");
    }
    if name.contains(':') {
        return bad("':' is not allowed: it separates a dataset from a path (POOL/DS:PATH)");
    }
    for (i, part) in name.split('/').enumerate() {
        if part.is_empty() {
            return bad("a name has no empty component (no leading, trailing or double '/')");
        }
        if part == "." || part == ".." {
            return bad("'.' and '..' are not names");
        }
        let first = part.chars().next().unwrap_or('-');
        let starts_well = first.is_ascii_alphabetic() || (i > 0 && first.is_ascii_digit());
        if !starts_well {
            return bad(if i == 0 {
                "a pool name starts with a letter"
            } else {
                "each dataset name starts with a letter or a digit"
            });
        }
        if !part.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)) {
            return bad("use letters, digits and _ . -");
        }
    }
    let pool = name.split('/').next().unwrap_or("");
    if RESERVED.contains(&pool) || RESERVED_PREFIXES.iter().any(|p| pool.starts_with(p)) {
        return bad("a pool name may not be or begin with a vdev word (mirror, raidz, draid, spare, log, cache)");
    }
    Ok(())
}

/// (physical, logical) bytes used by `ds` and every dataset under it, as of the last
/// commit.
/// Whether dataset `name` is `ds` or below it.
pub(crate) fn in_subtree(name: &str, ds: &str) -> bool {
    name == ds || name.strip_prefix(ds).is_some_and(|rest| rest.starts_with('/'))
}

/// ZFS's USED of `ds`: what it and every dataset below it are charged.
pub(crate) fn subtree_charged(charged: &BTreeMap<String, u64>, ds: &str) -> u64 {
    charged.iter().filter(|(k, _)| in_subtree(k, ds)).map(|(_, v)| v).sum()
}

pub(crate) fn subtree_space(sets: &Datasets, ds: &str) -> (u64, u64) {
    sets.iter().filter(|(k, _)| in_subtree(k, ds)).fold((0, 0), |(p, l), (_, (_, d))| {
        let used = d.used();
        (p + used.physical, l + used.logical)
    })
}

impl Pool {
    pub fn dataset(&self, name: &str) -> Result<Arc<Dataset>, PoolError> {
        self.inner
            .datasets
            .read()
            .get(name)
            .map(|(_, d)| d.clone())
            .ok_or_else(|| PoolError::NoSuchDataset(name.into()))
    }

    pub fn dataset_names(&self) -> Vec<String> {
        self.inner.datasets.read().keys().cloned().collect()
    }

    pub fn create_dataset(&self, name: &str) -> Result<Arc<Dataset>, PoolError> {
        self.create_dataset_with(name, &[])
    }

    /// Creates dataset `name` with local properties `props` (`zfs create -o`): every
    /// name and value is checked first, and a refused one creates nothing.
    pub fn create_dataset_with(&self, name: &str, props: &[(&str, &str)]) -> Result<Arc<Dataset>, PoolError> {
        check_name(name)?;
        let local = normalized_all(props)?;
        let Some((parent, _)) = name.rsplit_once('/') else {
            return Err(PoolError::BadName(name.into(), "a dataset name is POOL/NAME".into()));
        };
        if !name.starts_with(&format!("{}/", self.inner.name)) {
            return Err(PoolError::BadName(name.into(), format!("it is not in pool '{}'", self.inner.name)));
        }
        if self.inner.datasets.read().contains_key(name) {
            return Err(PoolError::DatasetExists(name.into()));
        }
        self.dataset(parent)?;
        let id = self.new_dataset_id();
        // One txg holds both the new dataset and its root directory: a crash never
        // leaves a dataset without a root.
        let hold = self.inner.ctx.txg.hold(1024).map_err(FsError::from)?;
        let ds = self.add_dataset(name, id, local, None, 1, Vec::new(), now_secs(), None)?;
        ds.init_root()?;
        drop(hold);
        Ok(ds)
    }

    /// True if the pool holds anything a user made: a dataset besides the root, or an
    /// entry in the root dataset's top directory (`pool destroy` asks for `-f` then).
    pub fn holds_data(&self) -> Result<bool, PoolError> {
        let sets = self.inner.datasets.read();
        if sets.len() > 1 {
            return Ok(true);
        }
        for (_, ds) in sets.values() {
            if !ds.readdir(tarn_dataset::ROOT_ID)?.is_empty() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Destroys a dataset with no children and no snapshots; its space (what it does not
    /// share with a clone's origin) returns once the txg commits.
    pub fn destroy_dataset(&self, name: &str) -> Result<(), PoolError> {
        if name == self.inner.name {
            return Err(PoolError::RootDataset(name.into()));
        }
        // No snapshot is taken of it, nor cloned from it, while it goes.
        let _serial = self.inner.snap_lock.lock();
        self.dataset(name)?;
        let prefix = format!("{name}/");
        if self.inner.datasets.read().keys().any(|k| k.starts_with(&prefix)) {
            return Err(PoolError::HasChildren(name.into()));
        }
        let snapshots = self.snapshot_names(name)?;
        if !snapshots.is_empty() {
            let names: Vec<String> = snapshots.iter().map(|s| format!("{name}@{s}")).collect();
            return Err(PoolError::HasSnapshots { dataset: name.into(), snapshots: names.join(", ") });
        }
        self.sync()?;
        let hold = self.inner.ctx.txg.hold(1024).map_err(FsError::from)?;
        let removed = self.inner.datasets.write().remove(name);
        let (meta, ds) = removed.ok_or_else(|| PoolError::NoSuchDataset(name.into()))?;
        let floor = meta.origin.as_ref().map_or(0, |o| o.txg);
        self.inner.destroy_queue.lock().push(Destroyed { meta: ds.meta_dnode(), floor });
        self.inner.head_resets.lock().push((meta.id, crate::snapshots::HeadReset::Gone));
        drop(hold);
        self.sync()
    }

    /// `tarn ds list`: USED as ZFS's — what each dataset, its snapshots and its children
    /// hold (a clone is not charged what it shares with its origin); a receive's
    /// hidden dataset (`DS%recv`, see `replication.rs`) is left out.
    pub fn datasets_info(&self) -> Vec<DatasetInfo> {
        let charged = self.charged_by_dataset(None);
        let sets = self.inner.datasets.read();
        let avail = self.available();
        sets.keys()
            .filter(|name| !name.contains('%'))
            .map(|name| {
                let (_, logicalused) = subtree_space(&sets, name);
                let used = subtree_charged(&charged, name);
                let mountpoint = Self::resolve(&sets, name, "mountpoint").0;
                DatasetInfo { name: name.clone(), used, logicalused, available: avail, mountpoint }
            })
            .collect()
    }

    /// `charged_space` of every dataset (or of `under` and the datasets below it), by
    /// name. The walks run outside the `datasets` lock.
    pub(crate) fn charged_by_dataset(&self, under: Option<&str>) -> BTreeMap<String, u64> {
        // Opened before the heads are listed: a head destroyed meanwhile keeps its blocks
        // until the walks are done.
        let _reading = self.inner.ctx.reclaim.reading();
        let heads: Vec<(String, DsMeta, Arc<Dataset>)> = {
            let sets = self.inner.datasets.read();
            sets.iter()
                .filter(|(k, _)| under.is_none_or(|u| in_subtree(k, u)))
                .map(|(k, (m, d))| (k.clone(), m.clone(), d.clone()))
                .collect()
        };
        heads.into_iter().map(|(name, meta, head)| (name, self.charged_space(&meta, &head))).collect()
    }

    /// A new dataset's id: one more than any given before (ids are never reused).
    pub(crate) fn new_dataset_id(&self) -> u64 {
        let mut next = self.inner.next_dataset_id.lock();
        *next += 1;
        *next
    }

    /// Opens dataset `name` with its head at snapshot `snap`'s tree (a clone, a rollback,
    /// a receive onto a base), charged the bytes the snapshot references.
    pub(crate) fn add_dataset_at_snapshot(
        &self,
        name: &str,
        id: u64,
        props: BTreeMap<String, String>,
        snap: &Snap,
        creation: u64,
        origin: Option<Origin>,
    ) -> Result<Arc<Dataset>, PoolError> {
        let ds = self.add_dataset(
            name,
            id,
            props,
            Some(snap.meta.clone()),
            snap.next_obj,
            snap.unlinked.clone(),
            creation,
            origin,
        )?;
        ds.set_used(snap.referenced);
        Ok(ds)
    }

    /// Opens dataset `name` over its dnode table (`meta`; `None` for a new dataset) and
    /// enters it in the directory.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn add_dataset(
        &self,
        name: &str,
        id: u64,
        props: BTreeMap<String, String>,
        meta: Option<Dnode>,
        next_obj: u64,
        unlinked: Vec<u64>,
        creation: u64,
        origin: Option<Origin>,
    ) -> Result<Arc<Dataset>, PoolError> {
        let ctx = &self.inner.ctx;
        let os = ObjSet::open(ctx.clone(), id, meta, next_obj);
        let space = Arc::new(PoolSpace { zio: ctx.zio.clone(), txg: ctx.txg.clone() });
        let meta = DsMeta { id, props, creation, origin };
        let eff = Effective::from_values(|_| String::new());
        let ds = Arc::new(Dataset::new(id, os, eff, space, self.inner.zil.clone(), unlinked));
        self.inner.datasets.write().insert(name.to_string(), (meta, ds.clone()));
        self.refresh_effective();
        Ok(ds)
    }
}

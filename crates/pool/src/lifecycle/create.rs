//! Creating a pool: the devices of each vdev opened (image files made for paths that do
//! not exist) and checked, labels written, the root dataset and the first txg committed;
//! and the device checks and constructors `pool add` shares (`devices.rs`).
//!
//! Owns: what a device must be to join a pool (large enough, not another pool's unless
//! `-f`, not of a newer format, not named twice) and the image files a create made.
//!
//! Promises: a refused or failed create writes no label and leaves no image file it
//! made (`NewImages`).
//!
//! Must never: reuse a device of a newer format, or another pool's, unasked.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tarn_vdev::{
    read_device_labels, BlockDevice, FileDevice, Label, LabelState, Leaf, TopConfig, TopVdev, TreeConfig, VdevError,
    VdevTree,
};
use tarn_zio::Zio;

use super::{CreateOptions, VdevSpec, MIN_DEVICE};
use crate::error::PoolError;
use crate::pool::{hostname, now_secs, random_guid, Pool};

impl Pool {
    /// Creates a new pool on `specs` and commits its first txg.
    pub fn create(name: &str, specs: &[VdevSpec], opts: &CreateOptions) -> Result<Pool, PoolError> {
        crate::datasets::check_name(name)?;
        if name.contains('/') {
            return Err(PoolError::BadName(name.into(), "a pool name has no '/'".into()));
        }
        if specs.is_empty() {
            return Err(PoolError::NoDevices);
        }
        if !tarn_vdev::ASHIFT_RANGE.contains(&opts.ashift) {
            return Err(PoolError::BadAshift(opts.ashift));
        }
        let cache_specs: Vec<VdevSpec> = opts.caches.iter().cloned().map(VdevSpec::Disk).collect();
        check_distinct(specs.iter().chain(&opts.logs).chain(&cache_specs), &[])?;
        let mut images = NewImages::default();
        let mut tops = Vec::new();
        let mut tree_cfg = TreeConfig { tops: Vec::new(), logs: Vec::new(), caches: Vec::new() };
        let pool_guid = random_guid();
        for path in &opts.caches {
            let (guid, path, _closed_until_attached) = new_cache(path, pool_guid, opts, &mut images)?;
            tree_cfg.caches.push((guid, path));
        }
        for spec in specs {
            let (top, cfg) = new_top(tops.len(), spec, opts, &mut images)?;
            tops.push(top);
            tree_cfg.tops.push(cfg);
        }
        for spec in &opts.logs {
            let (top, cfg) = new_top(tops.len(), spec, opts, &mut images)?;
            tops.push(top.as_log());
            tree_cfg.logs.push(cfg);
        }
        let label = Label {
            pool_name: name.to_string(),
            pool_guid,
            vdev_guid: 0,
            top_index: 0,
            ashift: opts.ashift,
            state: LabelState::Active,
            hostname: hostname(),
            create_txg: 1,
            asize: 0,
            tree: tree_cfg,
        };
        let vdevs = VdevTree::new(tops, opts.ashift);
        vdevs.write_labels(&label)?;
        let zio = Arc::new(Zio::new(vdevs));
        zio.finish_load();
        let pool = Pool::assemble(label, zio, 0, opts.txg.clone(), 1, 1);
        pool.add_dataset(name, 1, BTreeMap::new(), None, 1, Vec::new(), now_secs(), None)?.init_root()?;
        pool.start();
        pool.sync()?;
        pool.attach_caches(None);
        images.keep();
        Ok(pool)
    }
}

/// Image files a create (or an add) made: removed again unless it succeeds (`keep`), so
/// a failed create leaves nothing a retry would trip over.
#[derive(Default)]
pub(crate) struct NewImages(Vec<PathBuf>);

impl NewImages {
    pub(crate) fn keep(mut self) {
        self.0.clear();
    }
}

impl Drop for NewImages {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The paths of a vdev spec.
fn spec_paths(spec: &VdevSpec) -> &[PathBuf] {
    match spec {
        VdevSpec::Disk(p) => std::slice::from_ref(p),
        VdevSpec::Mirror(ps) => ps,
    }
}

/// Refuses a device named twice (in the new specs, or already in the pool): opening it
/// a second time would find it locked by this very process.
pub(crate) fn check_distinct<'a>(
    specs: impl Iterator<Item = &'a VdevSpec>,
    in_pool: &[PathBuf],
) -> Result<(), PoolError> {
    let key = |p: &Path| device_key(p);
    let mut seen: std::collections::BTreeSet<PathBuf> = in_pool.iter().map(|p| key(p)).collect();
    for path in specs.flat_map(spec_paths) {
        if !seen.insert(key(path)) {
            return Err(PoolError::DuplicateDevice(path.clone()));
        }
    }
    Ok(())
}

/// What identifies a device path: the path with links and `.` resolved, also for an
/// image file not created yet (its directory resolved, then its name).
pub(crate) fn device_key(p: &Path) -> PathBuf {
    if let Ok(resolved) = std::fs::canonicalize(p) {
        return resolved;
    }
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    match (std::fs::canonicalize(dir), p.file_name()) {
        (Ok(dir), Some(name)) => dir.join(name),
        _ => p.to_path_buf(),
    }
}

/// Opens (or creates) a cache device for a new pool (or `pool add … cache`) and writes
/// its header; returns its (guid, path) for the config, and the open device. The cache
/// device of another pool is refused unless `force` (it is that pool's, even exported).
pub(crate) fn new_cache(
    path: &Path,
    pool_guid: u64,
    opts: &CreateOptions,
    images: &mut NewImages,
) -> Result<(u64, String, Arc<dyn BlockDevice>), PoolError> {
    let dev = open_for_create(path, opts, images)?;
    let guid = init_cache(dev.as_ref(), pool_guid, opts.force)?;
    Ok((guid, path.display().to_string(), dev))
}

/// Writes a fresh cache header of pool `pool_guid` on `dev` (checked already as
/// `check_reusable` does); returns the device's new guid. The cache device of another
/// pool is refused unless `force`.
pub(crate) fn init_cache(dev: &dyn BlockDevice, pool_guid: u64, force: bool) -> Result<u64, PoolError> {
    let path = dev.path().to_path_buf();
    if !force {
        if let Some(other) = tarn_l2arc::cache_owner(dev).filter(|g| *g != pool_guid) {
            return Err(PoolError::CacheOfOtherPool { path, guid: other });
        }
    }
    let guid = random_guid();
    tarn_l2arc::initialise_device(dev, pool_guid, guid).map_err(|source| VdevError::Io { path, source })?;
    Ok(guid)
}

/// Opens (or creates) the devices of one top-level vdev for a new pool or log.
pub(crate) fn new_top(
    index: usize,
    spec: &VdevSpec,
    opts: &CreateOptions,
    images: &mut NewImages,
) -> Result<(TopVdev, TopConfig), PoolError> {
    let paths = match spec {
        VdevSpec::Disk(p) => vec![p.clone()],
        VdevSpec::Mirror(ps) => ps.clone(),
    };
    let mut leaves = Vec::new();
    let mut asize = u64::MAX;
    for path in &paths {
        let dev = open_for_create(path, opts, images)?;
        asize = asize.min(TopVdev::asize_of(dev.size(), opts.ashift));
        leaves.push(Leaf::new(random_guid(), path.display().to_string(), Some(dev)));
    }
    let guid = random_guid();
    let cfg = match spec {
        VdevSpec::Disk(_) => TopConfig::Disk { guid: leaves[0].guid, path: leaves[0].path.clone() },
        VdevSpec::Mirror(_) => {
            TopConfig::Mirror { guid, children: leaves.iter().map(|l| (l.guid, l.path.clone())).collect() }
        }
    };
    Ok((TopVdev::new(index, cfg.guid(), opts.ashift, asize, leaves), cfg))
}

fn open_for_create(
    path: &Path,
    opts: &CreateOptions,
    images: &mut NewImages,
) -> Result<Arc<dyn BlockDevice>, PoolError> {
    let existed = path.exists();
    let dev = FileDevice::open_or_create(path, opts.size);
    if !existed && path.exists() {
        images.0.push(path.to_path_buf());
    }
    let dev: Arc<dyn BlockDevice> = Arc::new(dev?);
    check_reusable(dev.as_ref(), opts.force)?;
    Ok(dev)
}

/// Refuses a device too small for tarn, or (unless `force`) one of a pool or of a newer
/// tarn's format.
pub(crate) fn check_reusable(dev: &dyn BlockDevice, force: bool) -> Result<(), PoolError> {
    let path = dev.path();
    if dev.size() < MIN_DEVICE {
        return Err(PoolError::TooSmall { path: path.into(), size: dev.size(), min: MIN_DEVICE });
    }
    if !force {
        match read_device_labels(dev) {
            Ok(labels) if labels.label.state != LabelState::Destroyed => {
                let state = format!("{:?}", labels.label.state).to_lowercase();
                return Err(PoolError::InUse { path: path.into(), pool: labels.label.pool_name, state });
            }
            // A newer tarn's device is someone's pool too: never overwrite it unasked.
            Err(e @ (VdevError::UnsupportedVersion { .. } | VdevError::UnsupportedUberblockVersion { .. })) => {
                return Err(PoolError::NewerFormat { source: e });
            }
            _ => {}
        }
    }
    Ok(())
}

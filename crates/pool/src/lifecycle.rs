//! A pool's life: create, import, close, export, destroy — opening the devices,
//! assembling the vdev tree from the labels, and choosing the root to open (devices
//! added to and removed from an open pool: `devices`).
//!
//! Theory of operation (import). Read both labels of every device given; refuse a
//! device that shrank, one of another pool, a destroyed pool, or a data vdev with no
//! device left. Take the config from the label with the newest uberblock and build the
//! vdev tree from it (a missing log device is allowed and reported; each device is
//! known by the path it was opened from). Try the uberblocks newest first until one's
//! root block (the MOS) reads and verifies — unless it is of a newer format, which stops
//! the import. A mirror side whose newest uberblock is older than that root missed the
//! txgs between (it was away): they are its missed range (DTL), as are the ranges the
//! MOS still records (holes left by removed log devices at the end of the config are
//! dropped: no vdev number after them needs keeping). Read the intent log chain the root
//! names. Then rebuild the free
//! space from the tree (`claim`): the MOS, the log blocks, every block of every dataset;
//! everything else is free. Mark the labels active (with the paths the devices were
//! opened from), start the sync thread, replay the log and commit it, reclaim objects
//! that were unlinked but open when the pool went down, and start the resilver of the
//! sides that missed txgs.
//!
//! Owns: `CreateOptions`, `ImportOptions`, `VdevSpec`; the labels' state (active,
//! exported, destroyed) and config.
//!
//! Promises: a refused import or create writes nothing, and a failed create leaves no
//! image file it made; the devices of another pool, of a newer format, in use, or given
//! twice are refused by name (`-f` overrides only a pool that is not imported); close,
//! export and destroy stop the scan at a bookmark and commit everything first.
//!
//! Must never: import a device whose label it cannot read, reuse a device of a newer
//! format unasked, or mark labels exported before the last commit is durable.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tarn_l2arc::{CacheSpec, L2Arc};
use tarn_txg::TxgConfig;
use tarn_vdev::{
    read_device_labels, BlockDevice, DeviceLabels, FileDevice, Label, LabelState, Leaf, LeafHealth, TopConfig, TopVdev,
    TreeConfig, Uberblock, VdevError, VdevTree,
};
use tarn_zio::{Access, BlockPtr, ReadKind, Zio};

use crate::errlog::ErrLog;
use crate::error::{ImportError, PoolError, RootError};
use crate::mos::{Mos, MosError};
use crate::pool::{hostname, now_secs, random_guid, Pool};

/// Smallest device tarn accepts, as ZFS does.
pub const MIN_DEVICE: u64 = 64 << 20;

#[derive(Clone, Debug)]
pub enum VdevSpec {
    Disk(PathBuf),
    Mirror(Vec<PathBuf>),
}

#[derive(Clone, Debug)]
pub struct CreateOptions {
    pub ashift: u32,
    /// Size of image files created for paths that do not exist.
    pub size: Option<u64>,
    pub force: bool,
    pub txg: TxgConfig,
    /// Separate intent-log devices (SLOG): fsync writes go there.
    pub logs: Vec<VdevSpec>,
    /// Cache devices (L2ARC): blocks leaving the ARC are kept there.
    pub caches: Vec<PathBuf>,
}

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions {
            ashift: 12,
            size: None,
            force: false,
            txg: TxgConfig::default(),
            logs: Vec::new(),
            caches: Vec::new(),
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct ImportOptions {
    pub txg: TxgConfig,
}

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
        let chained = match &mos.zil {
            Some(head) => {
                Some(tarn_zil::read_chain(&zio, label.pool_guid, head, ub.txg).map_err(|e| refuse(e.into()))?)
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
        pool.replay_log(chained.unwrap_or_else(tarn_zil::Chained::empty), ub.txg)?;
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

    /// Paths of every device in the pool's config.
    pub fn device_paths(&self) -> Vec<PathBuf> {
        let label = self.inner.label.lock();
        let tree = &label.tree;
        tree.tops.iter().chain(&tree.logs).flat_map(|t| t.leaves()).map(|(_, p)| PathBuf::from(p)).collect()
    }

    /// Puts the configured cache devices behind the ARC. `imported_at`: they kept their
    /// index (an import at that committed txg), rebuilt without the blocks the pool no
    /// longer holds. A device missing or unusable is shown in status, never an error:
    /// the cache is a cache.
    fn attach_caches(&self, imported_at: Option<u64>) {
        let caches = self.inner.label.lock().tree.caches.clone();
        if caches.is_empty() {
            return;
        }
        let specs: Vec<CacheSpec> =
            caches.iter().map(|(guid, path)| CacheSpec { guid: *guid, path: PathBuf::from(path) }).collect();
        let l2 = Arc::new(L2Arc::open_with(self.inner.guid, &specs, self.cache_autoreplace()));
        if let Some(txg) = imported_at {
            let zio = Arc::downgrade(&self.inner.ctx.zio);
            l2.set_pool_blocks(Arc::new(crate::cache_blocks::CachedBlocks { zio, imported_at: txg }));
        }
        self.inner.ctx.zio.attach_l2arc(l2, imported_at.is_some());
        self.refresh_secondarycache();
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

    /// Commits, stops the sync thread, and (if `export`) marks the labels exported.
    pub(crate) fn shutdown(&self, export: bool) -> Result<(), PoolError> {
        // The scan stops at a bookmark first, and a commit records where (with nothing
        // else dirty, `sync` alone would not write the MOS).
        let synced = if self.pause_scan() { self.force_txg() } else { self.sync() };
        self.inner.ctx.txg.close();
        if let Some(t) = self.sync_thread.lock().take() {
            let _ = t.join();
        }
        if let Some(l2) = self.inner.ctx.zio.l2arc() {
            l2.stop();
        }
        synced?;
        if export {
            let mut label = self.inner.label.lock().clone();
            label.state = LabelState::Exported;
            self.inner.ctx.zio.vdevs.write_labels(&label)?;
        }
        Ok(())
    }

    /// Commits everything and closes the pool, leaving it imported.
    pub fn close(self) -> Result<(), PoolError> {
        self.shutdown(false)
    }

    /// Commits everything, marks the pool exported and closes it.
    pub fn export(self) -> Result<(), PoolError> {
        self.shutdown(true)
    }

    /// Marks the pool destroyed on every device and closes it.
    pub fn destroy(self) -> Result<(), PoolError> {
        self.shutdown(false)?;
        let mut label = self.inner.label.lock().clone();
        label.state = LabelState::Destroyed;
        self.inner.ctx.zio.vdevs.write_labels(&label)?;
        Ok(())
    }

    /// Stops without committing: what a crash would leave (tests only).
    pub fn abandon(self) {
        let _ = self.pause_scan();
        let ctx = &self.inner.ctx;
        ctx.txg.close();
        // The sync thread may commit the open txg on close; a crash would not. Tests that
        // need a hard stop kill the process instead.
        if let Some(t) = self.sync_thread.lock().take() {
            let _ = t.join();
        }
        if let Some(l2) = ctx.zio.l2arc() {
            l2.stop();
        }
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

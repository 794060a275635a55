//! The pool itself: create, import, export, datasets and properties, status, scrub, and
//! the txg sync (`SyncTarget`).

mod replay;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use tarn_dataset::props::{self, format_size, Effective, READONLY};
use tarn_dataset::{Dataset, FsError, SpaceOracle};
use tarn_objects::tree::decode_indirect;
use tarn_objects::{Ctx, Dnode, ObjError, ObjSet, ObjType, DNODE_SIZE};
use tarn_txg::{SyncTarget, TxgConfig, TxgEngine};
use tarn_vdev::{
    read_device_labels, BlockDevice, FileDevice, Label, LabelState, Leaf, LeafHealth, LeafStatus, TopConfig,
    TopVdev, TreeConfig, Uberblock, VdevError, VdevTree,
};
use tarn_zio::{BlockPtr, BlockType, ChecksumKind, Compression, PendingBlock, Zio, ZioError};
use tarn_zil::Zil;

use crate::history::{History, HistoryEntry, HistoryError};
use crate::mos::{dnode_hex, DatasetRecord, Mos, MOS_VERSION};

/// Smallest device tarn accepts, as ZFS does.
pub const MIN_DEVICE: u64 = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error(transparent)]
    Vdev(#[from] VdevError),
    #[error(transparent)]
    Zio(#[from] ZioError),
    #[error(transparent)]
    Fs(#[from] FsError),
    #[error("{path}: device is part of pool '{pool}' ({state}); use -f to reuse it, which destroys that pool")]
    InUse { path: PathBuf, pool: String, state: String },
    #[error("invalid pool or dataset name '{0}': {1}")]
    BadName(String, String),
    #[error("dataset '{0}' does not exist")]
    NoSuchDataset(String),
    #[error("dataset '{0}' already exists")]
    DatasetExists(String),
    #[error("dataset '{0}' has children; destroy them first")]
    HasChildren(String),
    #[error("{path}: device is too small ({size} bytes); a tarn device needs at least {min} bytes (use --size)")]
    TooSmall { path: PathBuf, size: u64, min: u64 },
    #[error("pool '{pool}' cannot be imported: {detail}")]
    CannotImport { pool: String, detail: String },
    #[error("{0}")]
    Property(String),
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    History(#[from] HistoryError),
}

impl PoolError {
    /// A device is held by another process (its lock or its exclusive claim): the pool
    /// is open elsewhere, or is being opened or closed there.
    pub fn is_busy(&self) -> bool {
        matches!(self, PoolError::Vdev(VdevError::Busy { .. } | VdevError::BlockDeviceBusy { .. }))
    }
}

impl From<ObjError> for PoolError {
    fn from(e: ObjError) -> Self {
        PoolError::Fs(e.into())
    }
}

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
}

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions { ashift: 12, size: None, force: false, txg: TxgConfig::default(), logs: Vec::new() }
    }
}

#[derive(Clone, Debug, Default)]
pub struct ImportOptions {
    pub txg: TxgConfig,
}

/// Local state of one dataset kept in the MOS.
#[derive(Clone, Debug)]
struct DsMeta {
    id: u64,
    props: BTreeMap<String, String>,
    creation: u64,
}

/// What the syncing txg will write into the MOS, frozen at quiesce.
struct Frozen {
    datasets: Vec<(String, DsMeta, Arc<Dataset>)>,
    destroyed: Vec<Dnode>,
    next_dataset_id: u64,
}

struct Inner {
    name: String,
    guid: u64,
    label: Label,
    ctx: Arc<Ctx>,
    datasets: RwLock<BTreeMap<String, (DsMeta, Arc<Dataset>)>>,
    next_dataset_id: Mutex<u64>,
    destroy_queue: Mutex<Vec<Dnode>>,
    frozen: Mutex<Option<Frozen>>,
    quiesce_error: Mutex<Option<String>>,
    mos_bp: Mutex<Option<BlockPtr>>,
    zil: Arc<Zil>,
    /// The committed txg the pool was opened at (0 for a new pool).
    opened_at_txg: u64,
    /// What import found in the intent log, for the user.
    replay_report: Mutex<Option<String>>,
    /// The command history, written into every root (`crate::history`).
    history: History,
}

pub struct Pool {
    inner: Arc<Inner>,
    sync_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct TopStatus {
    pub name: String,
    /// A separate intent-log device.
    pub log: bool,
    pub health: String,
    pub leaves: Vec<LeafStatus>,
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct PoolStatus {
    pub name: String,
    pub guid: u64,
    pub state: String,
    pub txg: u64,
    pub size: u64,
    pub allocated: u64,
    pub free: u64,
    pub ashift: u32,
    pub vdevs: Vec<TopStatus>,
    pub suspended: Option<String>,
}

#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct ScrubResult {
    pub blocks: u64,
    pub bytes: u64,
    /// Blocks no copy of which verified.
    pub errors: u64,
    /// Blocks with at least one bad copy (repaired from a good one where possible).
    pub checksum_errors_seen: u64,
    pub seconds: f64,
}

/// Engine counters of one pool (what `tarn stats` shows).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct PoolStats {
    pub pool: String,
    pub time: u64,
    pub arc: tarn_arc::ArcSnapshot,
    pub zil: BTreeMap<String, u64>,
    pub txg: BTreeMap<String, u64>,
    pub io: BTreeMap<String, u64>,
    /// Live bytes against the bytes of the sectors holding them (packing efficiency).
    #[serde(default)]
    pub space: BTreeMap<String, u64>,
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct PropRow {
    pub property: String,
    pub value: String,
    pub source: String,
    /// The exact number behind a size or ratio, for `-p` and scripts.
    pub raw: Option<String>,
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct DatasetInfo {
    pub name: String,
    pub used: u64,
    pub logicalused: u64,
    pub available: u64,
    pub mountpoint: String,
}

/// `TARN_ARC_MAX=SIZE` sets the ARC budget, as the zfs_arc_max module parameter does for
/// ZFS (default: a quarter of the machine's memory).
fn arc_max_from_env() -> Option<u64> {
    std::env::var("TARN_ARC_MAX").ok().and_then(|v| props::parse_size(&v))
}

fn random_guid() -> u64 {
    rand::random::<u64>() | 1
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_default()
}

fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Pool and dataset name components: a letter first, then letters, digits, `_.-:`.
pub fn check_name(name: &str) -> Result<(), PoolError> {
    let bad = |why: &str| Err(PoolError::BadName(name.to_string(), why.to_string()));
    if name.is_empty() || name.len() > 200 {
        return bad("names are 1 to 200 characters");
    }
    for part in name.split('/') {
        let mut chars = part.chars();
        match chars.next() {
            Some(c) if c.is_ascii_alphabetic() || (c.is_ascii_digit() && name.contains('/')) => {}
            _ => return bad("each component starts with a letter"),
        }
        if !chars.all(|c| c.is_ascii_alphanumeric() || "_.-:".contains(c)) {
            return bad("use letters, digits and _ . - :");
        }
    }
    if ["mirror", "log", "cache", "spare"].contains(&name.split('/').next().unwrap_or("")) {
        return bad("this word is reserved");
    }
    Ok(())
}

struct PoolSpace {
    zio: Arc<Zio>,
    txg: Arc<TxgEngine>,
}

impl PoolSpace {
    fn slop(total: u64) -> u64 {
        (total / 32).max(4 << 20).min(total / 2)
    }
}

impl SpaceOracle for PoolSpace {
    fn reserve(&self, bytes: u64) -> Result<(), FsError> {
        let (total, _, free) = self.zio.space();
        let t = self.txg.stats();
        let needed = bytes + t.dirty_open + t.dirty_syncing + Self::slop(total);
        if free < needed {
            return Err(FsError::NoSpace);
        }
        Ok(())
    }
}

impl Pool {
    /// Creates a new pool on `specs` and commits its first txg.
    pub fn create(name: &str, specs: &[VdevSpec], opts: &CreateOptions) -> Result<Pool, PoolError> {
        check_name(name)?;
        if name.contains('/') {
            return Err(PoolError::BadName(name.into(), "a pool name has no '/'".into()));
        }
        if specs.is_empty() {
            return Err(PoolError::Config("a pool needs at least one device".into()));
        }
        if !(9..=16).contains(&opts.ashift) {
            return Err(PoolError::Config(format!("ashift={} is out of range; use 9 to 16 (12 for 4K sectors)", opts.ashift)));
        }
        let mut tops = Vec::new();
        let mut tree_cfg = TreeConfig { tops: Vec::new(), logs: Vec::new() };
        for spec in specs {
            let (top, cfg) = new_top(tops.len(), spec, opts)?;
            tops.push(top);
            tree_cfg.tops.push(cfg);
        }
        for spec in &opts.logs {
            let (top, cfg) = new_top(tops.len(), spec, opts)?;
            tops.push(top.as_log());
            tree_cfg.logs.push(cfg);
        }
        let label = Label {
            pool_name: name.to_string(),
            pool_guid: random_guid(),
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
        pool.add_dataset(name, 1, BTreeMap::new(), None, 1, Vec::new(), now_secs())?.init_root()?;
        pool.start();
        pool.sync()?;
        Ok(pool)
    }

    fn assemble(label: Label, zio: Arc<Zio>, last_txg: u64, txg_cfg: TxgConfig, next_ds: u64, zil_seq: u64) -> Pool {
        if let Some(max) = arc_max_from_env() {
            zio.arc.set_max(max);
            zio.hot.set_max(max / tarn_zio::HOT_SHARE);
        }
        let txg = Arc::new(TxgEngine::new(last_txg, txg_cfg));
        let zil = Arc::new(Zil::new(zio.clone(), label.pool_guid, zil_seq));
        zio.start_prefetch();
        let ctx = Arc::new(Ctx { zio, txg, reclaim: RwLock::new(()) });
        Pool {
            inner: Arc::new(Inner {
                name: label.pool_name.clone(),
                guid: label.pool_guid,
                label,
                ctx,
                datasets: RwLock::new(BTreeMap::new()),
                next_dataset_id: Mutex::new(next_ds),
                destroy_queue: Mutex::new(Vec::new()),
                frozen: Mutex::new(None),
                quiesce_error: Mutex::new(None),
                mos_bp: Mutex::new(None),
                zil,
                opened_at_txg: last_txg,
                replay_report: Mutex::new(None),
                history: History::default(),
            }),
            sync_thread: Mutex::new(None),
        }
    }

    fn start(&self) {
        let target: Arc<dyn SyncTarget> = self.inner.clone();
        *self.sync_thread.lock() = Some(self.inner.ctx.txg.start(target));
    }

    #[allow(clippy::too_many_arguments)]
    fn add_dataset(
        &self,
        name: &str,
        id: u64,
        props: BTreeMap<String, String>,
        meta: Option<Dnode>,
        next_obj: u64,
        unlinked: Vec<u64>,
        creation: u64,
    ) -> Result<Arc<Dataset>, PoolError> {
        let os = ObjSet::open(self.inner.ctx.clone(), meta, next_obj);
        let space = Arc::new(PoolSpace { zio: self.inner.ctx.zio.clone(), txg: self.inner.ctx.txg.clone() });
        let meta = DsMeta { id, props, creation };
        let eff = Effective::from_values(|_| String::new());
        let ds = Arc::new(Dataset::new(id, os, eff, space, self.inner.zil.clone(), unlinked));
        self.inner.datasets.write().insert(name.to_string(), (meta, ds.clone()));
        self.refresh_effective();
        Ok(ds)
    }

    /// Opens the pool on `devices` (one handle per device found), at its newest
    /// uberblock whose root verifies.
    pub fn import(devices: Vec<Arc<dyn BlockDevice>>, opts: &ImportOptions) -> Result<Pool, PoolError> {
        let mut labels = Vec::new();
        for dev in &devices {
            let l = read_device_labels(dev.as_ref())?;
            // A device that shrank (a truncated image) would silently lose the blocks
            // past its new end; refuse it by name instead.
            let asize = TopVdev::asize_of(dev.size(), l.label.ashift);
            if asize < l.label.asize {
                return Err(PoolError::CannotImport {
                    pool: l.label.pool_name.clone(),
                    detail: format!(
                        "{} is smaller than when it was added to the pool ({} bytes of data area, the pool needs {}); was it truncated?",
                        dev.path().display(),
                        asize,
                        l.label.asize
                    ),
                });
            }
            labels.push((dev.clone(), l));
        }
        let Some((_, first)) = labels.first() else {
            return Err(PoolError::Config("no devices given".into()));
        };
        let pool_guid = first.label.pool_guid;
        let pool_name = first.label.pool_name.clone();
        if let Some((dev, other)) = labels.iter().find(|(_, l)| l.label.pool_guid != pool_guid) {
            return Err(PoolError::CannotImport {
                pool: pool_name,
                detail: format!("{} belongs to another pool ('{}')", dev.path().display(), other.label.pool_name),
            });
        }
        let label = labels.iter().max_by_key(|(_, l)| l.uberblocks.iter().map(|u| u.txg).max()).map(|(_, l)| l.label.clone()).expect("one label");
        if label.state == LabelState::Destroyed {
            return Err(PoolError::CannotImport { pool: pool_name, detail: "the pool was destroyed".into() });
        }
        let by_guid: BTreeMap<u64, Arc<dyn BlockDevice>> =
            labels.iter().map(|(d, l)| (l.label.vdev_guid, d.clone())).collect();
        let (vdevs, missing_logs) = build_tree(&label, &by_guid)?;
        let was_exported = label.state == LabelState::Exported;
        let mut ubs: Vec<Uberblock> = labels.iter().flat_map(|(_, l)| l.uberblocks.clone()).collect();
        ubs.sort_by(|a, b| b.txg.cmp(&a.txg));
        ubs.dedup_by_key(|u| u.txg);
        let zio = Arc::new(Zio::new(vdevs));
        let (ub, mos, mos_bp) = newest_loadable(&zio, &ubs).map_err(|detail| PoolError::CannotImport { pool: pool_name.clone(), detail })?;
        let chained = match mos.zil {
            Some(head) => Some(
                tarn_zil::read_chain(&zio, label.pool_guid, &head, ub.txg)
                    .map_err(|e| PoolError::CannotImport { pool: pool_name.clone(), detail: e.to_string() })?,
            ),
            None => None,
        };
        let zil_seq = chained.as_ref().map_or(1, |c| c.end_seq + 1);
        let pool = Pool::assemble(label, zio.clone(), ub.txg, opts.txg.clone(), mos.next_dataset_id, zil_seq);
        pool.inner.history.restore(mos.history.as_deref());
        *pool.inner.mos_bp.lock() = Some(mos_bp);
        restore_error_counters(&zio.vdevs, &mos);
        zio.claim(&mos_bp)?;
        for e in chained.iter().flat_map(|c| &c.blocks) {
            zio.claim_extent(e)?;
        }
        for bp in chained.iter().flat_map(|c| &c.indirect) {
            zio.claim(bp)?;
        }
        for rec in &mos.datasets {
            let meta = rec.meta().map_err(|e| PoolError::CannotImport { pool: pool_name.clone(), detail: e })?;
            let ds = pool.add_dataset(&rec.name, rec.id, rec.props.clone(), meta.clone(), rec.next_obj, rec.unlinked.clone(), rec.creation)?;
            let (p, l) = claim_dataset(&zio, meta.as_ref())?;
            ds.used_physical.store(p, std::sync::atomic::Ordering::Relaxed);
            ds.used_logical.store(l, std::sync::atomic::Ordering::Relaxed);
        }
        zio.finish_load();
        if pool.inner.label.state != LabelState::Active {
            let mut active = pool.inner.label.clone();
            active.state = LabelState::Active;
            active.hostname = hostname();
            zio.vdevs.write_labels(&active)?;
        }
        pool.start();
        let chained = chained.unwrap_or_else(tarn_zil::Chained::empty);
        pool.replay_log(chained, ub.txg)?;
        if !missing_logs.is_empty() {
            pool.note_missing_logs(&missing_logs, was_exported, ub.txg);
        }
        for (_, ds) in pool.inner.datasets.read().values() {
            ds.reclaim_unlinked()?;
        }
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

    pub fn name(&self) -> &str {
        &self.inner.name
    }

    pub fn guid(&self) -> u64 {
        self.inner.guid
    }

    /// Paths of every device in the pool's config.
    pub fn device_paths(&self) -> Vec<PathBuf> {
        let tree = &self.inner.label.tree;
        tree.tops.iter().chain(&tree.logs).flat_map(|t| t.leaves()).map(|(_, p)| PathBuf::from(p)).collect()
    }

    /// Says plainly what a missing log device means for this import.
    fn note_missing_logs(&self, missing: &[String], was_exported: bool, txg: u64) {
        let devices = missing.join(", ");
        let msg = if was_exported {
            format!("log device {devices} is missing; the pool was exported cleanly, so nothing acknowledged was lost; fsync now logs to the data devices")
        } else {
            format!("log device {devices} is missing: changes acknowledged by fsync after txg {txg} (the last committed) may be lost; fsync now logs to the data devices")
        };
        let mut report = self.inner.replay_report.lock();
        *report = Some(match report.take() {
            Some(r) => format!("{r}; {msg}"),
            None => msg,
        });
    }

    /// The committed txg import chose (the newest whose root verified); later commits
    /// (log replay, new changes) come after it.
    pub fn opened_at_txg(&self) -> u64 {
        self.inner.opened_at_txg
    }

    /// Every engine counter, for `tarn stats` and Prometheus.
    pub fn stats(&self) -> PoolStats {
        let zio = &self.inner.ctx.zio;
        let z = &self.inner.zil.stats;
        let s = &zio.stats;
        let get = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        let t = self.inner.ctx.txg.stats();
        PoolStats {
            pool: self.inner.name.clone(),
            time: now_secs(),
            arc: {
                let mut a = zio.arc.snapshot();
                a.hot_copy_hits = get(&zio.hot.hits);
                a.hot_copies_size = zio.hot.size();
                a
            },
            zil: BTreeMap::from([
                ("commits".to_string(), get(&z.commits)),
                ("blocks_written".to_string(), get(&z.blocks_written)),
                ("bytes_written".to_string(), get(&z.bytes_written)),
                ("records_written".to_string(), get(&z.records_written)),
                ("indirect_records".to_string(), get(&z.indirect_records)),
            ]),
            txg: BTreeMap::from([
                ("open".to_string(), t.open),
                ("synced".to_string(), t.synced),
                ("dirty_open_bytes".to_string(), t.dirty_open),
                ("dirty_syncing_bytes".to_string(), t.dirty_syncing),
            ]),
            space: {
                let (sectors, live) = zio.occupancy();
                // What the datasets' blocks take as of the last commit (zfs `used`): without
                // the live intent log, frees not yet released, or dirty data.
                let (used, logical) = subtree_space(&self.inner.datasets.read(), &self.inner.name);
                BTreeMap::from([
                    ("allocated_sector_bytes".to_string(), sectors),
                    ("live_bytes".to_string(), live),
                    ("datasets_used_bytes".to_string(), used),
                    ("datasets_logical_bytes".to_string(), logical),
                ])
            },
            io: BTreeMap::from([
                ("blocks_written".to_string(), get(&s.blocks_written)),
                ("logical_bytes_written".to_string(), get(&s.logical_bytes_written)),
                ("physical_bytes_written".to_string(), get(&s.physical_bytes_written)),
                ("runs_written".to_string(), get(&s.runs_written)),
                ("blocks_read".to_string(), get(&s.blocks_read)),
                ("physical_bytes_read".to_string(), get(&s.physical_bytes_read)),
                ("checksum_errors".to_string(), get(&s.checksum_errors)),
            ]),
        }
    }

    /// ARC counters and sizes (arcstats).
    pub fn arc_stats(&self) -> tarn_arc::ArcSnapshot {
        self.inner.ctx.zio.arc.snapshot()
    }

    /// Changes the ARC budget at run time.
    pub fn set_arc_max(&self, bytes: u64) {
        self.inner.ctx.zio.arc.set_max(bytes);
        self.inner.ctx.zio.hot.set_max(bytes / tarn_zio::HOT_SHARE);
    }

    pub fn txg(&self) -> &Arc<TxgEngine> {
        &self.inner.ctx.txg
    }

    /// Commits everything changed so far.
    pub fn sync(&self) -> Result<(), PoolError> {
        self.inner.ctx.txg.sync_all().map_err(FsError::from)?;
        Ok(())
    }

    /// Commits, stops the sync thread, and (if `export`) marks the labels exported.
    fn shutdown(&self, export: bool) -> Result<(), PoolError> {
        let synced = self.sync();
        self.inner.ctx.txg.close();
        if let Some(t) = self.sync_thread.lock().take() {
            let _ = t.join();
        }
        synced?;
        if export {
            let mut label = self.inner.label.clone();
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

    /// Adds separate log devices (`zpool add POOL log DEV`): commits, closes the pool and
    /// writes the new configuration to every label; the next import uses the log.
    pub fn add_logs(self, specs: &[VdevSpec], force: bool, size: Option<u64>) -> Result<(), PoolError> {
        if specs.is_empty() {
            return Err(PoolError::Config("give at least one log device".into()));
        }
        let zio = &self.inner.ctx.zio;
        let opts = CreateOptions { ashift: zio.vdevs.ashift, force, size, ..Default::default() };
        let mut label = self.inner.label.clone();
        let mut added = Vec::new();
        // Open (or create) every new device before touching the pool, so a bad one
        // changes nothing.
        for spec in specs {
            let (top, cfg) = new_top(zio.vdevs.tops.len() + added.len(), spec, &opts)?;
            label.tree.logs.push(cfg);
            added.push(top.as_log());
        }
        self.shutdown(false)?;
        // Every device, old and new, gets the new config (label 0 everywhere, then 1).
        zio.vdevs.write_labels(&label)?;
        VdevTree::new(added, zio.vdevs.ashift).write_labels(&label)?;
        Ok(())
    }

    /// Marks the pool destroyed on every device and closes it.
    pub fn destroy(self) -> Result<(), PoolError> {
        self.shutdown(false)?;
        let mut label = self.inner.label.clone();
        label.state = LabelState::Destroyed;
        self.inner.ctx.zio.vdevs.write_labels(&label)?;
        Ok(())
    }

    /// Stops without committing: what a crash would leave (tests only).
    pub fn abandon(self) {
        let ctx = &self.inner.ctx;
        ctx.txg.close();
        // The sync thread may commit the open txg on close; a crash would not. Tests that
        // need a hard stop kill the process instead.
        if let Some(t) = self.sync_thread.lock().take() {
            let _ = t.join();
        }
    }

    pub fn dataset(&self, name: &str) -> Result<Arc<Dataset>, PoolError> {
        self.inner.datasets.read().get(name).map(|(_, d)| d.clone()).ok_or_else(|| PoolError::NoSuchDataset(name.into()))
    }

    pub fn dataset_names(&self) -> Vec<String> {
        self.inner.datasets.read().keys().cloned().collect()
    }

    pub fn create_dataset(&self, name: &str) -> Result<Arc<Dataset>, PoolError> {
        check_name(name)?;
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
        let id = {
            let mut next = self.inner.next_dataset_id.lock();
            *next += 1;
            *next
        };
        // One txg holds both the new dataset and its root directory: a crash never
        // leaves a dataset without a root.
        let hold = self.inner.ctx.txg.hold(1024).map_err(FsError::from)?;
        let ds = self.add_dataset(name, id, BTreeMap::new(), None, 1, Vec::new(), now_secs())?;
        ds.init_root()?;
        drop(hold);
        Ok(ds)
    }

    /// Destroys a dataset with no children; its space returns once the txg commits.
    pub fn destroy_dataset(&self, name: &str) -> Result<(), PoolError> {
        if name == self.inner.name {
            return Err(PoolError::Config(format!("'{name}' is the pool's root dataset; use `tarn pool destroy`")));
        }
        self.dataset(name)?;
        let prefix = format!("{name}/");
        if self.inner.datasets.read().keys().any(|k| k.starts_with(&prefix)) {
            return Err(PoolError::HasChildren(name.into()));
        }
        self.sync()?;
        let hold = self.inner.ctx.txg.hold(1024).map_err(FsError::from)?;
        let (_, ds) = self.inner.datasets.write().remove(name).expect("checked above");
        self.inner.destroy_queue.lock().push(ds.os.meta_dnode());
        drop(hold);
        self.sync()
    }

    /// Sets a property locally on `ds`; refuses unknown names, read-only properties and
    /// invalid values, naming what is allowed.
    pub fn set_property(&self, ds: &str, name: &str, value: &str) -> Result<(), PoolError> {
        if READONLY.contains(&name) {
            return Err(PoolError::Property(format!("property '{name}' is read-only")));
        }
        let def = props::find(name).ok_or_else(|| {
            let names: Vec<&str> = props::PROPS.iter().map(|p| p.name).collect();
            PoolError::Property(format!("unknown property '{name}'; settable properties: {}", names.join(", ")))
        })?;
        let norm = (def.validate)(value).ok_or_else(|| {
            PoolError::Property(format!("invalid value '{value}' for property '{name}': use {}", def.help))
        })?;
        let hold = self.inner.ctx.txg.hold(1024).map_err(FsError::from)?;
        {
            let mut sets = self.inner.datasets.write();
            let (meta, _) = sets.get_mut(ds).ok_or_else(|| PoolError::NoSuchDataset(ds.into()))?;
            meta.props.insert(name.to_string(), norm);
        }
        drop(hold);
        self.refresh_effective();
        Ok(())
    }

    /// Removes a local setting, so the value is inherited again (`zfs inherit`).
    pub fn inherit_property(&self, ds: &str, name: &str) -> Result<(), PoolError> {
        props::find(name).ok_or_else(|| PoolError::Property(format!("unknown property '{name}'")))?;
        let hold = self.inner.ctx.txg.hold(1024).map_err(FsError::from)?;
        {
            let mut sets = self.inner.datasets.write();
            let (meta, _) = sets.get_mut(ds).ok_or_else(|| PoolError::NoSuchDataset(ds.into()))?;
            meta.props.remove(name);
        }
        drop(hold);
        self.refresh_effective();
        Ok(())
    }

    /// Value and source of a settable property, walking up the dataset tree.
    fn resolve(sets: &BTreeMap<String, (DsMeta, Arc<Dataset>)>, ds: &str, name: &str) -> (String, String) {
        let mut cur = ds.to_string();
        loop {
            if let Some((meta, _)) = sets.get(&cur) {
                if let Some(v) = meta.props.get(name) {
                    let source = if cur == ds { "local".to_string() } else { format!("inherited from {cur}") };
                    return (v.clone(), source);
                }
            }
            match cur.rsplit_once('/') {
                Some((parent, _)) => cur = parent.to_string(),
                None => break,
            }
        }
        let def = props::find(name).expect("known property");
        (def.default.to_string(), "default".to_string())
    }

    fn refresh_effective(&self) {
        let sets = self.inner.datasets.read();
        for (name, (_, ds)) in sets.iter() {
            ds.set_effective(Effective::from_values(|p| Self::resolve(&sets, name, p).0));
        }
    }

    /// `tarn get`: every property (or one) with its value and source.
    pub fn get_properties(&self, ds: &str, which: Option<&str>) -> Result<Vec<PropRow>, PoolError> {
        let sets = self.inner.datasets.read();
        if !sets.contains_key(ds) {
            return Err(PoolError::NoSuchDataset(ds.into()));
        }
        let (used, logical) = subtree_space(&sets, ds);
        let ratio = if used == 0 { 1.0 } else { logical as f64 / used as f64 };
        let creation = sets[ds].0.creation;
        let row = |property: &str, value: String, raw: Option<String>| PropRow {
            property: property.into(),
            value,
            source: "-".into(),
            raw,
        };
        let available = self.available();
        let mut rows = vec![
            row("type", "filesystem".into(), None),
            row("creation", creation.to_string(), None),
            row("used", format_size(used), Some(used.to_string())),
            row("available", format_size(available), Some(available.to_string())),
            row("logicalused", format_size(logical), Some(logical.to_string())),
            row("compressratio", format!("{ratio:.2}x"), Some(format!("{ratio:.4}"))),
        ];
        for def in props::PROPS {
            let (value, source) = Self::resolve(&sets, ds, def.name);
            rows.push(PropRow { property: def.name.into(), value, source, raw: None });
        }
        if let Some(w) = which {
            if props::find(w).is_none() && !READONLY.contains(&w) {
                return Err(PoolError::Property(format!("unknown property '{w}'")));
            }
            rows.retain(|r| r.property == w);
        }
        Ok(rows)
    }

    /// Bytes a writer can still use: free space less the reserve kept for metadata and
    /// less the data already accepted into the open and syncing txgs but not yet placed.
    /// This is the sum `PoolSpace::reserve` refuses writes by, so statfs (df) agrees with
    /// the ENOSPC a writer gets; without the dirty bytes a full pool looked half empty.
    pub fn available(&self) -> u64 {
        let (total, _, free) = self.inner.ctx.zio.space();
        let t = self.inner.ctx.txg.stats();
        free.saturating_sub(PoolSpace::slop(total) + t.dirty_open + t.dirty_syncing)
    }

    pub fn datasets_info(&self) -> Vec<DatasetInfo> {
        let sets = self.inner.datasets.read();
        let avail = self.available();
        sets.keys()
            .map(|name| {
                let (used, logicalused) = subtree_space(&sets, name);
                DatasetInfo { name: name.clone(), used, logicalused, available: avail, mountpoint: Self::resolve(&sets, name, "mountpoint").0 }
            })
            .collect()
    }

    pub fn status(&self) -> PoolStatus {
        let zio = &self.inner.ctx.zio;
        let (size, allocated, free) = zio.space();
        // Not `hold(0)`: joining the open txg would make it commit an empty txg.
        let suspended = self.inner.ctx.txg.suspended();
        let mut degraded = false;
        let vdevs: Vec<TopStatus> = zio
            .vdevs
            .tops
            .iter()
            .map(|top| {
                let leaves: Vec<LeafStatus> = top.leaves.iter().map(|l| l.status()).collect();
                let online = leaves.iter().filter(|l| l.health == LeafHealth::Online).count();
                let health = if online == leaves.len() { "ONLINE" } else if online > 0 { "DEGRADED" } else { "UNAVAIL" };
                degraded |= online < leaves.len();
                let name = if top.is_mirror() { format!("mirror-{}", top.index) } else { leaves[0].path.clone() };
                TopStatus { name, log: top.is_log, health: health.into(), leaves }
            })
            .collect();
        let state = if suspended.is_some() { "SUSPENDED" } else if degraded { "DEGRADED" } else { "ONLINE" };
        PoolStatus {
            name: self.inner.name.clone(),
            guid: self.inner.guid,
            state: state.into(),
            txg: self.inner.ctx.txg.synced(),
            size,
            allocated,
            free,
            ashift: zio.vdevs.ashift,
            vdevs,
            suspended,
        }
    }

    /// Resets every device's error counters (`zpool clear`).
    pub fn clear_errors(&self) -> Result<(), PoolError> {
        for leaf in self.inner.ctx.zio.vdevs.leaves() {
            leaf.clear_counters();
        }
        self.force_txg()
    }

    /// Commits a txg even if nothing else changed (to persist counters).
    fn force_txg(&self) -> Result<(), PoolError> {
        let txg = self.inner.ctx.txg.hold(0).map_err(FsError::from)?.txg;
        self.inner.ctx.txg.wait_synced(txg).map_err(FsError::from)?;
        Ok(())
    }

    /// Records a command that changed the pool in its history (`tarn pool history`); it is
    /// committed with the txg it joins. A suspended pool (no txg to join) records nothing.
    pub fn log_history(&self, entry: HistoryEntry) {
        if let Ok(hold) = self.inner.ctx.txg.hold(0) {
            self.inner.history.log(entry, hold.txg);
        }
    }

    /// The pool's command history, oldest first.
    pub fn history(&self) -> Result<Vec<HistoryEntry>, PoolError> {
        Ok(self.inner.history.entries()?)
    }

    /// Reads and verifies every block of the pool (repairing mirrors), then persists the
    /// error counters.
    pub fn scrub(&self) -> Result<ScrubResult, PoolError> {
        self.sync()?;
        let start = std::time::Instant::now();
        let zio = &self.inner.ctx.zio;
        let mut result = ScrubResult::default();
        let before = zio.stats.checksum_errors.load(std::sync::atomic::Ordering::Relaxed);
        let cksum_before: u64 = zio.vdevs.leaves().map(|l| l.status().checksum_errors).sum();
        let datasets: Vec<Arc<Dataset>> = self.inner.datasets.read().values().map(|(_, d)| d.clone()).collect();
        let _reclaim = self.inner.ctx.reclaim.read();
        if let Some(bp) = *self.inner.mos_bp.lock() {
            scrub_block(zio, &bp, &mut result);
        }
        for ds in datasets {
            let meta = ds.os.meta_dnode();
            walk_objset(zio, Some(&meta), true, true, &mut |bp, res| {
                result.blocks += 1;
                result.bytes += bp.psize as u64;
                if res.is_err() {
                    result.errors += 1;
                }
            });
        }
        drop(_reclaim);
        let _ = before;
        let cksum_after: u64 = zio.vdevs.leaves().map(|l| l.status().checksum_errors).sum();
        result.checksum_errors_seen = cksum_after - cksum_before;
        result.seconds = start.elapsed().as_secs_f64();
        self.force_txg()?;
        Ok(result)
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        if self.sync_thread.lock().is_some() {
            let _ = self.shutdown(false);
        }
    }
}

fn scrub_block(zio: &Zio, bp: &BlockPtr, result: &mut ScrubResult) {
    result.blocks += 1;
    result.bytes += bp.psize as u64;
    if zio.read_all_copies(bp).is_err() {
        result.errors += 1;
    }
}

fn subtree_space(sets: &BTreeMap<String, (DsMeta, Arc<Dataset>)>, ds: &str) -> (u64, u64) {
    let prefix = format!("{ds}/");
    sets.iter()
        .filter(|(k, _)| k.as_str() == ds || k.starts_with(&prefix))
        .fold((0, 0), |(p, l), (_, (_, d))| {
            (
                p + d.used_physical.load(std::sync::atomic::Ordering::Relaxed),
                l + d.used_logical.load(std::sync::atomic::Ordering::Relaxed),
            )
        })
}

/// Opens (or creates) the devices of one top-level vdev for a new pool or log.
fn new_top(index: usize, spec: &VdevSpec, opts: &CreateOptions) -> Result<(TopVdev, TopConfig), PoolError> {
    let paths = match spec {
        VdevSpec::Disk(p) => vec![p.clone()],
        VdevSpec::Mirror(ps) => ps.clone(),
    };
    let mut leaves = Vec::new();
    let mut asize = u64::MAX;
    for path in &paths {
        let dev = open_for_create(path, opts)?;
        asize = asize.min(TopVdev::asize_of(dev.size(), opts.ashift));
        leaves.push(Leaf::new(random_guid(), path.display().to_string(), Some(dev)));
    }
    let guid = random_guid();
    let cfg = match spec {
        VdevSpec::Disk(_) => TopConfig::Disk { guid: leaves[0].guid, path: leaves[0].path.clone() },
        VdevSpec::Mirror(_) => TopConfig::Mirror { guid, children: leaves.iter().map(|l| (l.guid, l.path.clone())).collect() },
    };
    Ok((TopVdev::new(index, cfg.guid(), opts.ashift, asize, leaves), cfg))
}

fn open_for_create(path: &Path, opts: &CreateOptions) -> Result<Arc<dyn BlockDevice>, PoolError> {
    let dev = FileDevice::open_or_create(path, opts.size)?;
    if dev.size() < MIN_DEVICE {
        return Err(PoolError::TooSmall { path: path.into(), size: dev.size(), min: MIN_DEVICE });
    }
    if !opts.force {
        match read_device_labels(&dev) {
            Ok(labels) if labels.label.state != LabelState::Destroyed => {
                let state = format!("{:?}", labels.label.state).to_lowercase();
                return Err(PoolError::InUse { path: path.into(), pool: labels.label.pool_name, state });
            }
            // A newer tarn's device is someone's pool too: never overwrite it unasked.
            Err(e @ (VdevError::UnsupportedVersion { .. } | VdevError::UnsupportedUberblockVersion { .. })) => {
                return Err(PoolError::Config(format!("{e}; or use -f to reuse the device, which destroys what it holds")));
            }
            _ => {}
        }
    }
    Ok(Arc::new(dev))
}

/// Assembles the vdev tree from the label's config and the devices found. A data vdev
/// with no device is fatal; a missing log device is not (ZFS would refuse without -m):
/// the pool imports and says what the missing log may have held.
fn build_tree(label: &Label, by_guid: &BTreeMap<u64, Arc<dyn BlockDevice>>) -> Result<(VdevTree, Vec<String>), PoolError> {
    let mut tops = Vec::new();
    let mut missing_logs = Vec::new();
    let configs = label.tree.tops.iter().map(|t| (t, false)).chain(label.tree.logs.iter().map(|t| (t, true)));
    for (index, (top, is_log)) in configs.enumerate() {
        let mut leaves = Vec::new();
        let mut asize = u64::MAX;
        for (guid, path) in top.leaves() {
            let dev = by_guid.get(&guid).cloned();
            if let Some(d) = &dev {
                asize = asize.min(TopVdev::asize_of(d.size(), label.ashift));
            }
            leaves.push(Leaf::new(guid, path, dev));
        }
        if leaves.iter().all(|l| l.health() == LeafHealth::Unavail) {
            let missing: Vec<String> = leaves.iter().map(|l| l.path.clone()).collect();
            if !is_log {
                return Err(PoolError::CannotImport {
                    pool: label.pool_name.clone(),
                    detail: format!("vdev {index} has no available device (missing: {}); give its path to import", missing.join(", ")),
                });
            }
            missing_logs.extend(missing);
            asize = 0;
        }
        let vdev = TopVdev::new(index, top.guid(), label.ashift, asize, leaves);
        tops.push(if is_log { vdev.as_log() } else { vdev });
    }
    Ok((VdevTree::new(tops, label.ashift), missing_logs))
}

/// The newest uberblock whose MOS block reads and verifies.
fn newest_loadable(zio: &Zio, ubs: &[Uberblock]) -> Result<(Uberblock, Mos, BlockPtr), String> {
    let mut last_err = "no uberblock found on any device".to_string();
    for ub in ubs {
        let bp = match BlockPtr::decode(&ub.root) {
            Ok(Some(bp)) => bp,
            _ => continue,
        };
        match zio.read(&bp).map_err(|e| e.to_string()).and_then(|b| Mos::decode(&b)) {
            Ok(mos) => return Ok((ub.clone(), mos, bp)),
            Err(e) => {
                if e.contains("not supported") {
                    return Err(e);
                }
                last_err = format!("txg {}: {e}", ub.txg);
            }
        }
    }
    Err(last_err)
}

fn restore_error_counters(vdevs: &VdevTree, mos: &Mos) {
    for leaf in vdevs.leaves() {
        if let Some([r, w, c]) = mos.errors.get(&leaf.guid.to_string()) {
            leaf.restore_counters(*r, *w, *c);
        }
    }
}

/// Marks every block of a dataset live; returns its (physical, logical) bytes.
fn claim_dataset(zio: &Zio, meta: Option<&Dnode>) -> Result<(u64, u64), PoolError> {
    let mut first_error = None;
    let mut totals = (0u64, 0u64);
    walk_objset(zio, meta, false, false, &mut |bp, res| {
        // A metadata block no copy of which verifies is still referenced, so its own
        // space stays claimed; its children cannot be known. The pool imports anyway
        // (reads through it fail with EIO and `status` counts the checksum error) rather
        // than one damaged block making every other file unreachable.
        if let Err(ZioError::Unsupported(e)) = res {
            first_error.get_or_insert(e);
            return;
        }
        if zio.claim(bp).is_err() {
            first_error.get_or_insert(format!("block pointer outside the device at vdev {} offset {}", bp.vdev, bp.offset));
        }
        totals.0 += bp.psize as u64;
        totals.1 += bp.lsize as u64;
    });
    match first_error {
        Some(e) => Err(PoolError::CannotImport { pool: String::new(), detail: format!("metadata cannot be used: {e}") }),
        None => Ok(totals),
    }
}

/// Walks every block of an object set: the dnode table's tree, then each object's tree.
/// `f` gets each pointer and the result of reading it (data blocks are read only if
/// `read_data`; indirect and dnode blocks always are, to find their children).
/// `all_copies` (scrub) verifies every side of a mirror, not just the first good one.
fn walk_objset(
    zio: &Zio,
    meta: Option<&Dnode>,
    read_data: bool,
    all_copies: bool,
    f: &mut dyn FnMut(&BlockPtr, Result<(), ZioError>),
) {
    let Some(meta) = meta else { return };
    let mut dnode_blocks = Vec::new();
    walk_tree(zio, meta.root, meta.nlevels, true, all_copies, f, &mut |bp, bytes| {
        if bp.block_type == BlockType::Dnodes {
            dnode_blocks.push((*bp, bytes.to_vec()));
        }
    });
    for (bp, block) in dnode_blocks {
        for raw in block.chunks_exact(DNODE_SIZE) {
            match Dnode::decode(raw) {
                Ok(Some(d)) if d.obj_type != ObjType::Free => {
                    walk_tree(zio, d.root, d.nlevels, read_data, all_copies, f, &mut |_, _| {});
                }
                Ok(_) => {}
                // A dnode of a format this build does not know (a newer tarn wrote it):
                // its blocks would be counted free and overwritten, so import refuses.
                Err(e) if e.contains("not supported") => f(&bp, Err(ZioError::Unsupported(e))),
                // Garbage in a verified block is a bug; the object is unreachable either way.
                Err(_) => {}
            }
        }
    }
}

fn walk_tree(
    zio: &Zio,
    root: Option<BlockPtr>,
    nlevels: u8,
    read_leaves: bool,
    all_copies: bool,
    f: &mut dyn FnMut(&BlockPtr, Result<(), ZioError>),
    leaf: &mut dyn FnMut(&BlockPtr, &[u8]),
) {
    let Some(root) = root else { return };
    let mut stack = vec![(root, nlevels.saturating_sub(1))];
    while let Some((bp, level)) = stack.pop() {
        if level == 0 && !read_leaves {
            f(&bp, Ok(()));
            continue;
        }
        // Past the ARC: the walk checks what the devices hold.
        let read = if all_copies { zio.read_all_copies(&bp) } else { zio.read_from_devices(&bp) };
        let bytes = match read {
            Ok(b) => b,
            Err(e) => {
                f(&bp, Err(e));
                continue;
            }
        };
        if level == 0 {
            leaf(&bp, &bytes);
            f(&bp, Ok(()));
            continue;
        }
        match decode_indirect(&bytes, &bp) {
            Ok(children) => {
                f(&bp, Ok(()));
                stack.extend(children.into_iter().flatten().map(|c| (c, level - 1)));
            }
            Err(e) => f(&bp, Err(e)),
        }
    }
}

impl SyncTarget for Inner {
    fn quiesce(&self, txg: u64) {
        let sets = self.datasets.read();
        let mut datasets = Vec::new();
        for (name, (meta, ds)) in sets.iter() {
            if let Err(e) = ds.quiesce(txg) {
                self.quiesce_error.lock().get_or_insert(format!("dataset {name}: {e}"));
            }
            datasets.push((name.clone(), meta.clone(), ds.clone()));
        }
        let destroyed = std::mem::take(&mut *self.destroy_queue.lock());
        *self.frozen.lock() = Some(Frozen { datasets, destroyed, next_dataset_id: *self.next_dataset_id.lock() });
    }

    fn sync(&self, txg: u64) -> Result<(), String> {
        if let Some(e) = self.quiesce_error.lock().take() {
            return Err(e);
        }
        let frozen = self.frozen.lock().take().expect("quiesce ran before sync");
        self.write_txg(txg, &frozen).map_err(|e| format!("txg {txg}: {e}"))
    }
}

impl Inner {
    fn write_txg(&self, txg: u64, frozen: &Frozen) -> Result<(), PoolError> {
        let zio = &self.ctx.zio;
        for (name, _, ds) in &frozen.datasets {
            ds.sync(txg).map_err(|e| PoolError::Config(format!("dataset {name}: {e}")))?;
        }
        for meta in &frozen.destroyed {
            walk_objset(zio, Some(meta), false, false, &mut |bp, _| zio.free(bp));
        }
        let (head, obsolete) = self.zil.head_for_txg(txg).map_err(|e| PoolError::Config(format!("intent log: {e}")))?;
        for e in &obsolete {
            zio.free_extent(e);
        }
        let mut mos = self.build_mos(frozen);
        mos.zil = Some(head);
        mos.history = self.history.for_root(txg);
        let mos = mos.encode();
        let block = PendingBlock {
            data: &mos,
            compression: Compression::Lz4,
            checksum: ChecksumKind::Xxh3,
            level: 0,
            block_type: BlockType::Mos,
            cache: tarn_zio::CachePolicy::None,
        };
        let bp = zio.write_blocks(std::slice::from_ref(&block), txg)?[0];
        if let Some(old) = self.mos_bp.lock().replace(bp) {
            zio.free(&old);
        }
        zio.flush()?;
        let ub = Uberblock {
            txg,
            pool_guid: self.guid,
            guid_sum: self.label.tree.guid_sum(),
            timestamp: now_secs(),
            root: bp.to_bytes(),
        };
        zio.vdevs.write_uberblock(&ub)?;
        {
            let _exclusive = self.ctx.reclaim.write();
            zio.release_deferred();
        }
        // Not under the reclaim lock: an fsync holding the intent log may wait for an
        // object lock whose holder waits for the reclaim lock.
        self.zil.txg_committed(txg);
        Ok(())
    }

    fn build_mos(&self, frozen: &Frozen) -> Mos {
        let datasets = frozen
            .datasets
            .iter()
            .map(|(name, meta, ds)| DatasetRecord {
                id: meta.id,
                name: name.clone(),
                props: meta.props.clone(),
                meta_dnode: dnode_hex(&ds.os.meta_dnode()),
                next_obj: ds.os.next_obj(),
                unlinked: ds.unlinked_syncing(),
                creation: meta.creation,
            })
            .collect();
        let errors = self
            .ctx
            .zio
            .vdevs
            .leaves()
            .map(|l| {
                let s = l.status();
                (l.guid.to_string(), [s.read_errors, s.write_errors, s.checksum_errors])
            })
            .collect();
        Mos {
            version: MOS_VERSION,
            pool_name: self.name.clone(),
            pool_guid: self.guid,
            next_dataset_id: frozen.next_dataset_id,
            datasets,
            errors,
            zil: None,
            history: None,
        }
    }
}

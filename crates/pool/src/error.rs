//! The pool's typed errors.
//!
//! Owns: every way a pool operation can fail, grouped by what the caller is doing
//! (`ImportError` why an import was refused, `PropError` why a property change was,
//! `CommitError` why a txg did not commit).
//!
//! Promises: the message names the pool, dataset, device or property concerned, and the
//! fix where there is one; an unknown format version has its own variant (matched by
//! type, never by text).
//!
//! Must never: carry a decision in a string: when a caller or a test must tell two
//! cases apart, they are two variants.
use std::path::PathBuf;

use tarn_dataset::props::PROPS;
use tarn_dataset::FsError;
use tarn_objects::dnode::DnodeError;
use tarn_objects::ObjError;
use tarn_vdev::VdevError;
use tarn_zil::ZilError;
use tarn_zio::ZioError;

use crate::mos::{MosError, RecordError};

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
    /// The device was written by a newer tarn: it is someone's pool, never overwritten
    /// unasked.
    #[error("{source}; or use -f to reuse the device, which destroys what it holds")]
    NewerFormat {
        #[source]
        source: VdevError,
    },
    #[error("invalid pool or dataset name '{0}': {1}")]
    BadName(String, String),
    #[error("dataset '{0}' does not exist")]
    NoSuchDataset(String),
    #[error("dataset '{0}' already exists")]
    DatasetExists(String),
    #[error("dataset '{0}' has children; destroy them first")]
    HasChildren(String),
    #[error("dataset '{dataset}' has snapshots ({snapshots}); destroy them first (tarn snap destroy)")]
    HasSnapshots { dataset: String, snapshots: String },
    #[error("snapshot '{0}' does not exist")]
    NoSuchSnapshot(String),
    #[error("snapshot '{0}' already exists")]
    SnapshotExists(String),
    #[error("snapshot '{snapshot}' has clones ({clones}); destroy them first")]
    SnapshotHasClones { snapshot: String, clones: String },
    #[error("cannot promote '{0}': it is not a clone (its `origin` is -); only a clone can be promoted")]
    NotAClone(String),
    #[error("cannot promote '{clone}': it already has snapshot(s) named {names}, which it would take from '{origin}'; rename them by destroying or re-taking them first")]
    PromoteNameConflict { clone: String, origin: String, names: String },
    #[error("'{snapshot}' is not the newest snapshot (newer: {newer}); destroy the newer ones first")]
    SnapshotNotNewest { snapshot: String, newer: String },
    #[error("'{0}' is the pool's root dataset; use `tarn pool destroy`")]
    RootDataset(String),
    #[error("{path}: device is too small ({size} bytes); a tarn device needs at least {min} bytes (use --size)")]
    TooSmall { path: PathBuf, size: u64, min: u64 },
    #[error("no devices given: a pool needs at least one device")]
    NoDevices,
    #[error("give at least one log device")]
    NoLogDevices,
    #[error("give at least one cache device")]
    NoCacheDevicesGiven,
    #[error("{0}: cache devices are plain devices (a cache is never mirrored: losing it costs only speed)")]
    MirroredCache(PathBuf),
    #[error("{path}: device is a cache device of another pool (guid {guid:016x}); use -f to reuse it (that pool then only loses its cache)")]
    CacheOfOtherPool { path: PathBuf, guid: u64 },
    #[error(transparent)]
    CacheAdd(#[from] tarn_l2arc::AddError),
    #[error("ashift={0} is out of range; use 9 to 16 (12 for 4K sectors)")]
    BadAshift(u32),
    /// `reason` is boxed: it is the largest error, and every `Result` carries its size.
    #[error("pool '{pool}' cannot be imported: {reason}")]
    CannotImport {
        pool: String,
        #[source]
        reason: Box<ImportError>,
    },
    #[error(transparent)]
    Property(#[from] PropError),
    #[error("pool '{pool}': a {kind} is in progress; see `tarn pool status {pool}`")]
    ScanInProgress { pool: String, kind: String },
    #[error("pool '{0}': no scrub in progress")]
    NoScrub(String),
    #[error("{0} is given twice; each device can be used once")]
    DuplicateDevice(PathBuf),
    #[error("cannot remove {name}: removing data vdevs is not supported (it holds data of pool '{pool}'); only log and cache devices can be removed")]
    DataVdevRemoval { name: String, pool: String },
    #[error("cannot remove {name}: no such device in pool '{pool}' (see `tarn pool status {pool}`)")]
    NotInPool { name: String, pool: String },
    #[error("cannot remove {name}: it is one side of {mirror} of pool '{pool}'; remove the whole log mirror (`tarn pool remove {pool} {mirror}`)")]
    MirrorSide { name: String, mirror: String, pool: String },
    #[error(
        "pool '{pool}': the intent log still uses the device after {txgs} txgs; it was left in the pool, try again"
    )]
    LogStillInUse { pool: String, txgs: usize },
    #[error(transparent)]
    History(#[from] crate::history::HistoryError),
    #[error("pool '{0}' has no cache devices; add one (`tarn pool add {0} cache DEV`) to tune the L2ARC")]
    NoCacheDevices(String),
    #[error(transparent)]
    L2Tune(#[from] tarn_l2arc::TuneError),
    #[error(transparent)]
    Log(#[from] ZilError),
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

/// Why the devices given cannot be imported as a pool.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error(
        "{path} is smaller than when it was added to the pool ({asize} bytes of data area, the pool needs {needed}); was it truncated?"
    )]
    Truncated { path: PathBuf, asize: u64, needed: u64 },
    #[error("{path} belongs to another pool ('{other}')")]
    ForeignDevice { path: PathBuf, other: String },
    #[error("the pool was destroyed")]
    Destroyed,
    #[error("vdev {index} has no available device (missing: {missing}); give its path to import")]
    MissingVdev { index: usize, missing: String },
    /// No committed root could be loaded (or the newest is of a newer format).
    #[error(transparent)]
    Root(#[from] RootError),
    #[error(transparent)]
    Log(#[from] ZilError),
    #[error("dataset {dataset}: {source}")]
    Record {
        dataset: String,
        #[source]
        source: RecordError,
    },
    #[error("metadata of dataset {dataset} cannot be used: {source}")]
    Metadata {
        dataset: String,
        #[source]
        source: ClaimError,
    },
}

/// Why no uberblock's root could be loaded.
#[derive(Debug, thiserror::Error)]
pub enum RootError {
    #[error("no uberblock found on any device")]
    NoUberblock,
    /// The newest root is of a format this build does not know. Import stops here rather
    /// than fall back to an older txg, which would lose what the newer tarn committed.
    #[error(transparent)]
    Newer(MosError),
    /// The oldest root tried could not be read (and none newer could).
    #[error("txg {txg}: {source}")]
    Unreadable {
        txg: u64,
        #[source]
        source: ZioError,
    },
    /// The oldest root tried is not a pool root block (and none newer loaded).
    #[error("txg {txg}: {source}")]
    Malformed {
        txg: u64,
        #[source]
        source: MosError,
    },
}

/// Why the import walk could not account for a dataset's blocks.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// A dnode of a format this build does not know: its blocks would be counted free
    /// and overwritten.
    #[error("object {object}: {source}; upgrade tarn")]
    NewerDnode {
        object: u64,
        #[source]
        source: DnodeError,
    },
    /// A pointer outside its device, or to bytes another block already holds.
    #[error("bad block pointer at vdev {vdev} offset {offset}")]
    BadPointer {
        vdev: u16,
        offset: u64,
        #[source]
        source: ZioError,
    },
}

/// Why a property change or query was refused.
#[derive(Debug, thiserror::Error)]
pub enum PropError {
    #[error("property '{0}' is read-only")]
    ReadOnly(String),
    #[error("unknown property '{0}'; settable properties: {settable}", settable = settable_names())]
    Unknown(String),
    #[error("unknown pool property '{0}'; pool properties: {names}", names = crate::pool_props::pool_prop_names())]
    UnknownPool(String),
    #[error("invalid value '{value}' for property '{name}': use {help}")]
    InvalidValue { name: String, value: String, help: &'static str },
}

fn settable_names() -> String {
    PROPS.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
}

/// Why a txg did not commit (the pool is then suspended by the txg engine, which keeps
/// this as the source of its `SyncFailure`).
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error("dataset {dataset}: {source}")]
    Dataset {
        dataset: String,
        #[source]
        source: ObjError,
    },
    #[error("intent log: {0}")]
    Log(#[from] ZilError),
    #[error(transparent)]
    Zio(#[from] ZioError),
}

//! The `Pool` handle and the state its rooms share.
//!
//! Owns: `Inner` — the pool's identity and label, the object context (pipeline, txg
//! engine, reclaim sections), the datasets and their MOS records, what the next commit must
//! write (destroyed datasets, the frozen view of the syncing txg), the intent log, the
//! scan, the error log and the snapshots — and the sync thread's handle. The operations
//! live in rooms of their own: `lifecycle` (create, import, export, destroy), `commit`
//! (the txg sync), `datasets`, `snapshots`, `props`, `status`, `iostat`, `scrub` and `scanwalk`, `errlog`, `space`,
//! `replay`.
//!
//! Promises: one `Inner` per open pool, shared by the handle and the sync thread; the
//! sync thread is stopped (after a last commit) when the handle is closed or dropped.
//!
//! Must never: wait for a txg hold while holding `datasets` (the quiesce takes it with
//! the txg barrier held exclusively): a change takes its hold first, then the lock.
use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use tarn_dataset::{props, Dataset};
use tarn_objects::{Ctx, Dnode, Reclaim};
use tarn_txg::{TxgConfig, TxgEngine};
use tarn_vdev::Label;
use tarn_zil::Zil;
use tarn_zio::{BlockPtr, Zio};

use crate::errlog::ErrLog;
use crate::error::CommitError;
use crate::history::History;
use crate::scrub::ScanCtl;
use crate::snapshots::{HeadDead, HeadReset, Origin, SnapOp, Snaps};

/// Local state of one dataset kept in the MOS.
#[derive(Clone, Debug)]
pub(crate) struct DsMeta {
    pub(crate) id: u64,
    pub(crate) props: BTreeMap<String, String>,
    pub(crate) creation: u64,
    /// The snapshot a clone was made from.
    pub(crate) origin: Option<Origin>,
}

/// The datasets by name.
pub(crate) type Datasets = BTreeMap<String, (DsMeta, Arc<Dataset>)>;

/// What the syncing txg will write into the MOS, frozen at quiesce.
pub(crate) struct Frozen {
    pub(crate) datasets: Vec<(String, DsMeta, Arc<Dataset>)>,
    pub(crate) destroyed: Vec<Destroyed>,
    pub(crate) next_dataset_id: u64,
    /// Snapshots to take and destroy in the syncing txg, in the order asked.
    pub(crate) snap_ops: Vec<SnapOp>,
    /// Heads whose dead list the syncing txg resets (before its snapshot changes).
    pub(crate) head_resets: Vec<(u64, HeadReset)>,
}

/// A dnode-table root whose blocks the commit frees: those born after `floor` (the
/// blocks born at or before it are a snapshot's: a clone's origin, or the snapshot a
/// dataset was rolled back to).
pub(crate) struct Destroyed {
    pub(crate) meta: Dnode,
    pub(crate) floor: u64,
}

pub(crate) struct Inner {
    pub(crate) name: String,
    pub(crate) guid: u64,
    /// The config the labels hold, in step with the vdev tree.
    pub(crate) label: Mutex<Label>,
    /// Held by a config change (`devices`) from start to end; `label` only briefly, as
    /// the txg commit reads it.
    pub(crate) config_change: Mutex<()>,
    pub(crate) ctx: Arc<Ctx>,
    pub(crate) datasets: RwLock<Datasets>,
    pub(crate) next_dataset_id: Mutex<u64>,
    /// Dnode-table roots of datasets destroyed in the open txg: their blocks are freed
    /// by the commit of that txg.
    pub(crate) destroy_queue: Mutex<Vec<Destroyed>>,
    /// Every dataset's snapshots (by dataset id, oldest first). Changed only by the sync
    /// thread (`commit`), so a txg's frees and its root see one list.
    pub(crate) snaps: RwLock<Snaps>,
    /// Snapshots to take or destroy in the open txg (frozen at quiesce).
    pub(crate) snap_ops: Mutex<Vec<SnapOp>>,
    /// Each head's dead list (`snapshots::deadlist`), by dataset id. Changed only by the
    /// sync thread.
    pub(crate) head_dead: Mutex<HeadDead>,
    /// Heads whose dead list the open txg resets: a head replaced by a rollback, a
    /// receive or a destroy (frozen at quiesce).
    pub(crate) head_resets: Mutex<Vec<(u64, HeadReset)>>,
    /// The MOS version the commit writes: `MOS_VERSION`, or an older one a test asks for
    /// to make a pool as an older tarn left it.
    pub(crate) root_version: std::sync::atomic::AtomicU32,
    /// Serialises the checks and queueing of snapshot, clone and rollback commands, so
    /// two of them never both pass a check the other would fail.
    pub(crate) snap_lock: Mutex<()>,
    /// Snapshots opened for reading (`Pool::snapshot_dataset`), by full name.
    pub(crate) snap_open: Mutex<BTreeMap<String, Arc<Dataset>>>,
    pub(crate) frozen: Mutex<Option<Frozen>>,
    /// A dataset that failed to quiesce: the next sync fails with it.
    pub(crate) quiesce_error: Mutex<Option<CommitError>>,
    /// The MOS block the last commit wrote (freed when the next one is written).
    pub(crate) mos_bp: Mutex<Option<BlockPtr>>,
    pub(crate) zil: Arc<Zil>,
    /// The committed txg the pool was opened at (0 for a new pool).
    pub(crate) opened_at_txg: u64,
    /// What import found in the intent log, for the user.
    pub(crate) replay_report: Mutex<Option<String>>,
    /// Set when import's replay may have missed acknowledged changes (records that could
    /// not be applied, a log that ended inside a block, a missing log device): `status`
    /// says so for as long as the pool is open.
    pub(crate) replay_trouble: Mutex<Option<String>>,
    /// The scan (scrub or resilver): its record and its thread.
    pub(crate) scan: ScanCtl,
    pub(crate) errlog: Mutex<ErrLog>,
    /// When the pool was opened (`tarn_vdev::iostat::now_ns`): iostat's first report
    /// covers the time since.
    pub(crate) opened_ns: u64,
    /// The command history, written into every root (`crate::history`).
    pub(crate) history: History,
    /// Pool properties set away from their default (`crate::pool_props`).
    pub(crate) pool_props: Mutex<BTreeMap<String, String>>,
}

pub struct Pool {
    pub(crate) inner: Arc<Inner>,
    pub(crate) sync_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// `TARN_ARC_MAX=SIZE` sets the ARC budget, as the zfs_arc_max module parameter does for
/// ZFS (default: a quarter of the machine's memory).
fn arc_max_from_env() -> Option<u64> {
    size_from_env("TARN_ARC_MAX")
}

/// `TARN_VDEV_MAX_IO=SIZE` sets the largest piece a device write is cut into (default
/// `tarn_vdev::DEFAULT_MAX_IO`, 128 KiB): on a disk that charges per 16 KiB, as the lab's
/// paced disk does, 16K keeps a sync I/O from queueing behind 128 KiB pieces.
fn vdev_max_io_from_env() -> Option<u64> {
    size_from_env("TARN_VDEV_MAX_IO")
}

fn size_from_env(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| props::parse_size(&v))
}

/// Dirty data may take at most this fraction of the ARC's budget by default. Dirty data
/// lives inside `arc_max` (`ArcCache::set_dirty`), so a larger share would empty the cache
/// during bulk writes, a much smaller one would make txgs too small for long sequential
/// runs (ZFS's defaults — dirty data 10 % of memory, the ARC up to half of it on Linux —
/// give it about a fifth; tarn's default `dirty_max`, 256 MiB, is a half of a 512 MiB ARC).
pub(crate) const DIRTY_SHARE_OF_ARC: u64 = 2;

/// `dirty_max` is never capped below this, however small the ARC. ZFS sizes dirty data by
/// physical memory, not by the ARC: under `primarycache=metadata` with a 16 MiB ARC, half
/// of it (8 MiB) throttled a database's writers for 36 s of a 120 s run (issue #17), where
/// 32 MiB (the half of a 64 MiB ARC) had them wait at `dirty_max` not once.
pub(crate) const DIRTY_FLOOR: u64 = 32 << 20;

/// `config` with `dirty_max` at most `arc_max / DIRTY_SHARE_OF_ARC`, or `DIRTY_FLOOR` if
/// that is more (`dirty_sync` kept at its ratio). `tarn tune dirty_max=` may set it
/// higher afterwards.
pub(crate) fn dirty_within_budget(mut config: TxgConfig, arc_max: u64) -> TxgConfig {
    let cap = (arc_max / DIRTY_SHARE_OF_ARC).max(DIRTY_FLOOR);
    if config.dirty_max > cap {
        config.dirty_sync = (config.dirty_sync as u128 * cap as u128 / config.dirty_max as u128).max(1) as u64;
        config.dirty_max = cap;
    }
    config
}

/// The part of `dirty` bytes of dirty data charged to an ARC of `arc_max`: all of it but
/// what the floor adds beyond the ARC's share. So a small ARC still keeps half its budget
/// for cached blocks (its metadata) while dirty data reaches the floor, and the memory
/// bound becomes `arc_max` + (`DIRTY_FLOOR` − `arc_max` / 2, if positive) + the fixed
/// overhead — unchanged from 64 MiB of ARC up.
pub(crate) fn dirty_charged_to_arc(dirty: u64, arc_max: u64) -> u64 {
    dirty.saturating_sub(DIRTY_FLOOR.saturating_sub(arc_max / DIRTY_SHARE_OF_ARC))
}

pub(crate) fn random_guid() -> u64 {
    rand::random::<u64>() | 1
}

pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_default()
}

pub(crate) fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

impl Pool {
    /// A pool handle over an assembled pipeline whose last committed txg is `last_txg`
    /// (0 for a new pool). Nothing is written and the sync thread is not started.
    pub(crate) fn assemble(
        label: Label,
        zio: Arc<Zio>,
        last_txg: u64,
        txg_cfg: TxgConfig,
        next_ds: u64,
        zil_seq: u64,
    ) -> Pool {
        if let Some(max) = arc_max_from_env() {
            zio.set_cache_budget(max);
        }
        if let Some(bytes) = vdev_max_io_from_env() {
            zio.vdevs.set_max_io(bytes);
        }
        // Every uberblock from now on must be newer than the one the pool was opened at.
        zio.vdevs.set_committed_txg(last_txg);
        let txg_cfg = dirty_within_budget(txg_cfg, zio.arc.max());
        let txg = Arc::new(TxgEngine::new(last_txg, txg_cfg));
        // More txg writes may be in flight on each device as dirty data grows (ZFS's
        // async-write ramp), and the ARC makes room for dirty data inside its budget.
        // Weak: the devices are closed when the pool is, whoever still holds the engine;
        // the engine owns the observer, which must not keep the engine alive.
        let devices = Arc::downgrade(&zio);
        let engine = Arc::downgrade(&txg);
        txg.set_dirty_observer(Box::new(move |percent| {
            if let Some(zio) = devices.upgrade() {
                zio.vdevs.set_dirty_percent(percent);
                if let Some(txg) = engine.upgrade() {
                    zio.arc.set_dirty(dirty_charged_to_arc(txg.dirty_bytes(), zio.arc.max()));
                }
            }
        }));
        let zil = Arc::new(Zil::new(zio.clone(), label.pool_guid, zil_seq));
        zio.start_prefetch();
        let ctx = Arc::new(Ctx { zio, txg, reclaim: Reclaim::new() });
        Pool {
            inner: Arc::new(Inner {
                name: label.pool_name.clone(),
                guid: label.pool_guid,
                label: Mutex::new(label),
                config_change: Mutex::new(()),
                ctx,
                datasets: RwLock::new(BTreeMap::new()),
                next_dataset_id: Mutex::new(next_ds),
                destroy_queue: Mutex::new(Vec::new()),
                snaps: RwLock::new(BTreeMap::new()),
                snap_ops: Mutex::new(Vec::new()),
                head_dead: Mutex::new(BTreeMap::new()),
                head_resets: Mutex::new(Vec::new()),
                root_version: std::sync::atomic::AtomicU32::new(crate::mos::MOS_VERSION),
                snap_lock: Mutex::new(()),
                snap_open: Mutex::new(BTreeMap::new()),
                frozen: Mutex::new(None),
                quiesce_error: Mutex::new(None),
                mos_bp: Mutex::new(None),
                zil,
                opened_at_txg: last_txg,
                replay_report: Mutex::new(None),
                replay_trouble: Mutex::new(None),
                scan: ScanCtl::default(),
                errlog: Mutex::new(ErrLog::default()),
                opened_ns: tarn_vdev::iostat::now_ns(),
                history: History::default(),
                pool_props: Mutex::new(BTreeMap::new()),
            }),
            sync_thread: Mutex::new(None),
        }
    }

    /// Starts the sync thread: from now on txgs commit.
    pub(crate) fn start(&self) {
        let target: Arc<Inner> = self.inner.clone();
        *self.sync_thread.lock() = Some(self.inner.ctx.txg.start(target));
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }

    pub fn guid(&self) -> u64 {
        self.inner.guid
    }

    pub fn txg(&self) -> &Arc<TxgEngine> {
        &self.inner.ctx.txg
    }

    /// The committed txg import chose (the newest whose root verified); later commits
    /// (log replay, new changes) come after it.
    pub fn opened_at_txg(&self) -> u64 {
        self.inner.opened_at_txg
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        if self.sync_thread.lock().is_some() {
            let _ = self.shutdown(false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn dirty_max_is_half_the_arc_down_to_its_floor() {
        let default = TxgConfig::default();
        let sync_share = default.dirty_sync as f64 / default.dirty_max as f64;
        for (arc_max, dirty_max) in [(1024 * MIB, 256 * MIB), (256 * MIB, 128 * MIB), (64 * MIB, 32 * MIB)] {
            let c = dirty_within_budget(default.clone(), arc_max);
            assert_eq!(c.dirty_max, dirty_max, "arc_max {} MiB", arc_max / MIB);
        }
        // primarycache=metadata with a 16 MiB ARC: not throttled at 8 MiB.
        for arc_max in [16 * MIB, 8 * MIB, 0] {
            let c = dirty_within_budget(default.clone(), arc_max);
            assert_eq!(c.dirty_max, DIRTY_FLOOR, "arc_max {} MiB", arc_max / MIB);
            assert!((c.dirty_sync as f64 / c.dirty_max as f64 - sync_share).abs() < 0.01, "{c:?}");
        }
    }

    #[test]
    fn a_small_arc_is_charged_only_its_share_of_dirty_data() {
        // From 64 MiB of ARC up, all dirty data is inside the budget, as before the floor.
        for arc_max in [64 * MIB, 256 * MIB] {
            for dirty in [0, MIB, 32 * MIB, 100 * MIB] {
                assert_eq!(dirty_charged_to_arc(dirty, arc_max), dirty);
            }
        }
        // A 16 MiB ARC is charged at most its half (8 MiB) of the floor's 32 MiB: it keeps
        // the other half for cached metadata.
        let arc_max = 16 * MIB;
        assert_eq!(dirty_charged_to_arc(DIRTY_FLOOR, arc_max), arc_max / 2);
        assert_eq!(dirty_charged_to_arc(10 * MIB, arc_max), 0);
        // Beyond the floor (`tarn tune dirty_max=`), the excess is the budget's again.
        assert_eq!(dirty_charged_to_arc(DIRTY_FLOOR + MIB, arc_max), arc_max / 2 + MIB);
    }
}

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
//! opened from), start the sync thread, replay the log (resuming where the root says an
//! interrupted replay got) and commit it, reclaim objects
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
//!
//! Modules: this one (the options, the device list, the caches' attach, and close,
//! export, destroy: commit everything, then mark the labels), `create` (a new pool and
//! the device checks `pool add` shares), `import` (labels to vdev tree to root to a
//! running pool).
use std::path::PathBuf;
use std::sync::Arc;

use tarn_l2arc::{CacheSpec, L2Arc};
use tarn_txg::TxgConfig;
use tarn_vdev::LabelState;

use crate::error::PoolError;
use crate::pool::Pool;

mod create;
mod import;

pub(crate) use create::{check_distinct, check_reusable, device_key, init_cache, new_cache, new_top, NewImages};

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

//! Adding and removing devices of an open pool (`zpool add POOL log DEV`, `zpool remove
//! POOL DEV`), while it serves: the same code whether a mount daemon holds the pool or a
//! command opened it.
//!
//! Theory of operation. The vdev numbers are the config's order (data vdevs, then log
//! devices) and never change: an intent-log block names its vdev by number. So a new
//! device is numbered after the others, and a removed one leaves a hole.
//!
//! Add: open (or create) every new device and check it (size, not another pool's, not
//! given twice) before anything is written; append it to the tree as `Adding` (nothing is
//! allocated on it, no uberblock goes to it); write the new config into the labels of
//! every device, old and new (label 0 everywhere, then label 1); only then make it
//! `Active`. The intent log's next block is already placed (on the old log device or the
//! data vdevs), and names its successor on the new device: the chain simply crosses over,
//! and every record acknowledged before stays where it is, reachable from the committed
//! root. A crash before the labels are written leaves the old config (the new device was
//! never used); after, the new one (the device holds nothing yet, or the chain's tail).
//!
//! Remove: the device is `Draining` (nothing new is allocated on it); if the chain's next
//! block is placed there, an empty block is written there naming a place elsewhere
//! (`Zil::move_off`); txgs commit until no block on it holds a record not yet committed
//! (`Zil::uses_vdev`), then one more, so the committed root no longer points into it.
//! Only then is it `Removed`: a hole is written into the config on every other device,
//! and its own labels are zeroed. A crash before the hole is written leaves the device in
//! the pool (nothing on it is needed, and import uses it again); after, the pool without it.
//!
//! Cache devices (L2ARC) are not vdevs: they have no number, no label, nothing of the
//! pool's state. Add: each is opened (or created) and checked as a log device is, its
//! cache header written; the config naming it is written into every label; only then
//! does the running cache take it (`L2Arc::add_device`). Remove: the config without it
//! is written first, then the cache lets it go (`L2Arc::remove_device`: no new reads or
//! feed, those under way finish, header zeroed). A crash between leaves a device the
//! config does not name (never opened again) or, on add, one it names whose ring is
//! empty: either way nothing of the pool's.
//!
//! Owns: `DeviceClass` (what a device is for: `log` or `cache`), the add and remove of
//! log and cache devices, and the config kept in step with the tree (`Inner::label`,
//! whose lock serialises config changes).
//!
//! Promises: a refused add or remove changes nothing (a device it created is removed
//! again); the label config always lists exactly the tree's vdevs, in number order
//! (asserted); a record acknowledged before or during an add or remove is never lost.
//!
//! Must never: write a log block to a device before its labels name it, give up a
//! device the committed root or the chain still points into, or remove a data vdev.
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tarn_l2arc::{CacheSpec, L2Arc};
use tarn_vdev::{BlockDevice, Label, TopConfig, TopState, TopVdev, VdevTree, MAX_TOPS};

use crate::error::PoolError;
use crate::iostat::vdev_name;
use crate::lifecycle::{
    check_distinct, check_reusable, device_key, init_cache, new_cache, new_top, CreateOptions, NewImages, VdevSpec,
};
use crate::pool::Pool;

/// What a device beside the data vdevs is for (`pool add POOL CLASS DEV…`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceClass {
    /// A separate intent-log device (SLOG).
    Log,
    /// A cache device (L2ARC): blocks leaving the ARC are kept there.
    Cache,
}

impl DeviceClass {
    /// The word the command line and `status` use.
    pub fn keyword(self) -> &'static str {
        match self {
            DeviceClass::Log => "log",
            DeviceClass::Cache => "cache",
        }
    }
}

/// What `remove_device` took out of the pool.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Removed {
    pub class: DeviceClass,
    /// The devices it was made of (the cache file forgets them).
    pub paths: Vec<PathBuf>,
}

/// How many txgs a removal waits for the intent log to leave a device: it needs one or
/// two (the blocks on it are obsolete once the txg of their records commits).
const DRAIN_TXGS: usize = 8;

impl Pool {
    /// Adds devices of `class` to the open pool (see the module); returns their paths.
    pub fn add_devices(
        &self,
        class: DeviceClass,
        specs: &[VdevSpec],
        force: bool,
        size: Option<u64>,
    ) -> Result<Vec<PathBuf>, PoolError> {
        match class {
            DeviceClass::Log => self.add_logs(specs, force, size),
            DeviceClass::Cache => self.add_caches(specs, force, size),
        }
    }

    /// Removes device `name` — a path, or a vdev name as `status` shows it
    /// (`mirror-3`) — from the open pool (see the module).
    pub fn remove_device(&self, name: &str) -> Result<Removed, PoolError> {
        let zio = &self.inner.ctx.zio;
        let _one_change_at_a_time = self.inner.config_change.lock();
        let cache = find_cache(&self.inner.label.lock(), name);
        if let Some((guid, path)) = cache {
            return self.remove_cache(guid, path);
        }
        let index = find_top(&zio.vdevs, self.name(), name)?;
        let top = &zio.vdevs.tops[index];
        if !top.is_log {
            return Err(PoolError::DataVdevRemoval { name: name.to_string(), pool: self.name().to_string() });
        }
        let paths = top.leaves.iter().map(|l| PathBuf::from(&l.path)).collect();
        self.remove_log(index)?;
        Ok(Removed { class: DeviceClass::Log, paths })
    }

    fn add_logs(&self, specs: &[VdevSpec], force: bool, size: Option<u64>) -> Result<Vec<PathBuf>, PoolError> {
        if specs.is_empty() {
            return Err(PoolError::NoLogDevices);
        }
        let zio = &self.inner.ctx.zio;
        let _one_change_at_a_time = self.inner.config_change.lock();
        let label = self.inner.label.lock().clone();
        check_distinct(specs.iter(), &config_paths(&label))?;
        let first = zio.vdevs.tops.len();
        assert_in_step(&label, first);
        if first + specs.len() > MAX_TOPS {
            return Err(tarn_vdev::VdevError::TooManyVdevs { max: MAX_TOPS }.into());
        }
        let opts = CreateOptions { ashift: zio.vdevs.ashift, force, size, ..Default::default() };
        let mut images = NewImages::default();
        let mut grown = label.clone();
        let mut added = Vec::new();
        // Every new device is opened (or created) and checked before anything is written.
        for spec in specs {
            let (top, cfg) = new_top(first + added.len(), spec, &opts, &mut images)?;
            grown.tree.logs.push(cfg);
            added.push(top.as_log().adding());
        }
        let paths: Vec<PathBuf> = added.iter().flat_map(|t| t.leaves.iter().map(|l| PathBuf::from(&l.path))).collect();
        for top in added {
            zio.add_top(top)?;
        }
        if let Err(e) = zio.vdevs.write_labels(&grown) {
            // The new vdevs hold nothing: they become holes, so the config stays in step
            // with the tree, and the devices are let go.
            let mut holed = label.clone();
            for index in first..zio.vdevs.tops.len() {
                zio.vdevs.tops[index].set_state(TopState::Removed);
                holed.tree.logs.push(TopConfig::Hole);
            }
            let _ = zio.vdevs.write_labels(&holed);
            *self.inner.label.lock() = holed;
            return Err(e.into());
        }
        for index in first..zio.vdevs.tops.len() {
            zio.vdevs.tops[index].set_state(TopState::Active);
        }
        *self.inner.label.lock() = grown;
        images.keep();
        Ok(paths)
    }

    /// Adds cache devices (see the module): each a plain device, checked before any is
    /// written, named by the config before the cache takes it.
    fn add_caches(&self, specs: &[VdevSpec], force: bool, size: Option<u64>) -> Result<Vec<PathBuf>, PoolError> {
        let mut paths = Vec::new();
        for spec in specs {
            match spec {
                VdevSpec::Disk(p) => paths.push(p.clone()),
                VdevSpec::Mirror(ps) => return Err(PoolError::MirroredCache(ps.first().cloned().unwrap_or_default())),
            }
        }
        if paths.is_empty() {
            return Err(PoolError::NoCacheDevicesGiven);
        }
        let _one_change_at_a_time = self.inner.config_change.lock();
        let label = self.inner.label.lock().clone();
        check_distinct(specs.iter(), &config_paths(&label))?;
        let opts = CreateOptions { ashift: self.inner.ctx.zio.vdevs.ashift, force, size, ..Default::default() };
        let mut images = NewImages::default();
        let mut opened = Vec::new();
        for path in &paths {
            let (guid, _, dev) = new_cache(path, self.inner.guid, &opts, &mut images)?;
            opened.push((CacheSpec { guid, path: path.clone() }, dev));
        }
        self.name_and_attach_caches(label, opened, images)
    }

    /// Adds cache devices already open (known by `BlockDevice::path`): a caller that
    /// wraps them (a test injecting faults) or opened them itself. Checked as
    /// `pool add … cache` checks a path.
    pub fn add_cache_devices(
        &self,
        devices: Vec<Arc<dyn BlockDevice>>,
        force: bool,
    ) -> Result<Vec<PathBuf>, PoolError> {
        if devices.is_empty() {
            return Err(PoolError::NoCacheDevicesGiven);
        }
        let _one_change_at_a_time = self.inner.config_change.lock();
        let label = self.inner.label.lock().clone();
        let specs: Vec<VdevSpec> = devices.iter().map(|d| VdevSpec::Disk(d.path().to_path_buf())).collect();
        check_distinct(specs.iter(), &config_paths(&label))?;
        let mut opened = Vec::new();
        for dev in devices {
            check_reusable(dev.as_ref(), force)?;
            let guid = init_cache(dev.as_ref(), self.inner.guid, force)?;
            opened.push((CacheSpec { guid, path: dev.path().to_path_buf() }, dev));
        }
        self.name_and_attach_caches(label, opened, NewImages::default())
    }

    /// The end of a cache add (under `config_change`, `label` the config before it): the
    /// config naming the new devices goes into every label, then the cache takes them.
    fn name_and_attach_caches(
        &self,
        label: Label,
        opened: Vec<(CacheSpec, Arc<dyn BlockDevice>)>,
        images: NewImages,
    ) -> Result<Vec<PathBuf>, PoolError> {
        let l2 = self.cache_for_adding();
        if !l2.has_room() {
            return Err(tarn_l2arc::AddError::Full.into());
        }
        let mut grown = label;
        grown.tree.caches.extend(opened.iter().map(|(s, _)| (s.guid, s.path.display().to_string())));
        // The devices hold only a fresh cache header so far: a failed write leaves them
        // unnamed, and the images this call made are removed.
        self.inner.ctx.zio.vdevs.write_labels(&grown)?;
        *self.inner.label.lock() = grown;
        images.keep();
        let paths = opened.iter().map(|(s, _)| s.path.clone()).collect();
        for (spec, dev) in opened {
            l2.add_device(&spec, dev)?;
        }
        Ok(paths)
    }

    /// The running cache, attached now (with no device) if the pool had none.
    fn cache_for_adding(&self) -> Arc<L2Arc> {
        let zio = &self.inner.ctx.zio;
        if zio.l2arc().is_none() {
            // Under `config_change`: nothing else attaches one meanwhile.
            let l2 = Arc::new(L2Arc::open(self.inner.guid, &[]));
            l2.set_pool_blocks(crate::cache_blocks::CachedBlocks::without_rebuild(zio));
            zio.attach_l2arc(l2, false);
            self.refresh_secondarycache();
        }
        zio.l2arc().expect("a cache was just attached").clone()
    }

    /// Takes cache device `guid` out: the config first, then the running cache.
    fn remove_cache(&self, guid: u64, path: PathBuf) -> Result<Removed, PoolError> {
        let zio = &self.inner.ctx.zio;
        let mut shrunk = self.inner.label.lock().clone();
        shrunk.tree.caches.retain(|(g, _)| *g != guid);
        zio.vdevs.write_labels(&shrunk)?;
        *self.inner.label.lock() = shrunk;
        if let Some(l2) = zio.l2arc() {
            // A header left unzeroed (the device is failing, or gone) is harmless: no
            // config names the device, an import never opens it, an add initialises it.
            let _ = l2.remove_device(guid);
        }
        Ok(Removed { class: DeviceClass::Cache, paths: vec![path] })
    }

    /// Takes log device `index` out of the pool once the intent log no longer needs it.
    fn remove_log(&self, index: usize) -> Result<(), PoolError> {
        let zio = &self.inner.ctx.zio;
        let zil = &self.inner.zil;
        let top = &zio.vdevs.tops[index];
        let vdev = u16::try_from(index).expect("vdev numbers fit the log's u16");
        // Not held across the drain: the commits it waits for read the label.
        let label = self.inner.label.lock().clone();
        assert_in_step(&label, zio.vdevs.tops.len());
        top.set_state(TopState::Draining);
        if let Err(e) = self.drain_log(vdev) {
            top.set_state(TopState::Active);
            return Err(e);
        }
        top.set_state(TopState::Removed);
        let mut holed = label.clone();
        holed.tree.logs[index - holed.tree.tops.len()] = TopConfig::Hole;
        zio.vdevs.write_labels(&holed)?;
        *self.inner.label.lock() = holed;
        debug_assert!(!zil.uses_vdev(vdev));
        Ok(top.wipe_and_release()?)
    }

    /// Commits txgs until neither the chain nor the committed root points into `vdev`.
    fn drain_log(&self, vdev: u16) -> Result<(), PoolError> {
        let zil = &self.inner.zil;
        zil.move_off(vdev)?;
        for _ in 0..DRAIN_TXGS {
            self.force_txg()?;
            if !zil.uses_vdev(vdev) {
                // The root of this txg was made before the check held: one more, made
                // after, points elsewhere.
                return self.force_txg();
            }
        }
        Err(PoolError::LogStillInUse { pool: self.name().to_string(), txgs: DRAIN_TXGS })
    }
}

/// The label config lists exactly the tree's `tops` vdevs, in number order.
fn assert_in_step(label: &Label, tops: usize) {
    assert_eq!(
        label.tree.tops.len() + label.tree.logs.len(),
        tops,
        "invariant broken: the label config and the vdev tree list different vdevs"
    );
}

/// Paths of every device the config names, cache devices too.
fn config_paths(label: &Label) -> Vec<PathBuf> {
    let tree = &label.tree;
    let vdevs = tree.tops.iter().chain(&tree.logs).flat_map(|t| t.leaves()).map(|(_, p)| PathBuf::from(p));
    vdevs.chain(tree.caches.iter().map(|(_, p)| PathBuf::from(p))).collect()
}

/// The cache device `name` designates (its path, as `status` shows it, or another path
/// to the same device): its guid and configured path.
fn find_cache(label: &Label, name: &str) -> Option<(u64, PathBuf)> {
    let wanted = device_key(Path::new(name));
    let is_it = |p: &str| p == name || device_key(Path::new(p)) == wanted;
    label.tree.caches.iter().find(|(_, p)| is_it(p)).map(|(g, p)| (*g, PathBuf::from(p)))
}

/// The top-level vdev `name` designates: its status name, or the path of its only device.
fn find_top(vdevs: &VdevTree, pool: &str, name: &str) -> Result<usize, PoolError> {
    let present = || vdevs.tops.iter().filter(|t| !t.is_removed());
    if let Some(top) = present().find(|t| vdev_name(t) == name) {
        return Ok(top.index);
    }
    let wanted = device_key(Path::new(name));
    let holds = |t: &&TopVdev| t.leaves.iter().any(|l| l.path == name || device_key(Path::new(&l.path)) == wanted);
    match present().find(holds) {
        Some(top) if top.is_mirror() => {
            Err(PoolError::MirrorSide { name: name.to_string(), mirror: vdev_name(top), pool: pool.to_string() })
        }
        Some(top) => Ok(top.index),
        None => Err(PoolError::NotInPool { name: name.to_string(), pool: pool.to_string() }),
    }
}

//! The snapshot commands that change the pool: create (`-r` in one txg), destroy,
//! clone, promote and rollback. Each checks first, then queues its change in the open
//! txg (or, for clone and rollback, swaps the dataset under a hold) and waits for that
//! txg to commit.
//!
//! Owns: the checks of these commands and what each queues.
//!
//! Promises: a refused command changes nothing; an accepted one is committed in one
//! txg before it returns; one command at a time (`snap_lock`).
//!
//! Must never: free a block itself (the commit does, in the sync thread), or take a
//! txg hold while holding `datasets` or `snaps`.

use tarn_dataset::FsError;

use super::{for_each_unique, split_snapshot_name, FoundFrees, HeadReset, Origin, Snap, SnapOp};
use crate::datasets::check_name;
use crate::error::PoolError;
use crate::pool::{now_secs, DsMeta, Pool};
use crate::props::normalized_all;

impl Pool {
    /// `tarn snap create [-r]`: takes `DS@NAME` of each name (and of every dataset below
    /// each with `recursive`), all in one txg; returns the snapshots' full names once
    /// that txg committed. A bad or taken name refuses the whole command.
    pub fn create_snapshots(&self, names: &[String], recursive: bool) -> Result<Vec<String>, PoolError> {
        let _serial = self.inner.snap_lock.lock();
        let wanted = self.snapshots_to_take(names, recursive)?;
        let creation = now_secs();
        let hold = self.inner.ctx.txg.hold(0).map_err(FsError::from)?;
        let txg = hold.txg;
        {
            let mut ops = self.inner.snap_ops.lock();
            for (dataset, _, name) in &wanted {
                let guid = crate::pool::random_guid();
                ops.push(SnapOp::Take { dataset: *dataset, name: name.clone(), creation, guid });
            }
        }
        drop(hold);
        self.inner.ctx.txg.wait_synced(txg).map_err(FsError::from)?;
        Ok(wanted.into_iter().map(|(_, ds, name)| format!("{ds}@{name}")).collect())
    }

    /// (dataset id, dataset name, snapshot name) of each snapshot a create names, checked.
    fn snapshots_to_take(&self, names: &[String], recursive: bool) -> Result<Vec<(u64, String, String)>, PoolError> {
        let sets = self.inner.datasets.read();
        let snaps = self.inner.snaps.read();
        let mut wanted: Vec<(u64, String, String)> = Vec::new();
        for full in names {
            let (ds, snap) = split_snapshot_name(full)?;
            self.check_in_pool(full, ds)?;
            if !sets.contains_key(ds) {
                return Err(PoolError::NoSuchDataset(ds.into()));
            }
            let prefix = format!("{ds}/");
            for (name, (meta, _)) in sets.iter().filter(|(k, _)| *k == ds || (recursive && k.starts_with(&prefix))) {
                let taken = snaps.get(&meta.id).is_some_and(|v| v.iter().any(|s| s.name == snap));
                if taken || wanted.iter().any(|(id, _, s)| *id == meta.id && s == snap) {
                    return Err(PoolError::SnapshotExists(format!("{name}@{snap}")));
                }
                wanted.push((meta.id, name.clone(), snap.to_string()));
            }
        }
        Ok(wanted)
    }

    /// `tarn snap destroy DS@NAME`: frees what only it held, in one txg; refused while a
    /// clone was made from it.
    pub fn destroy_snapshot(&self, full: &str) -> Result<(), PoolError> {
        let _serial = self.inner.snap_lock.lock();
        let (_, meta, snap) = self.find_snapshot(full)?;
        let clones = self.clones_of(meta.id, &snap.name);
        if !clones.is_empty() {
            return Err(PoolError::SnapshotHasClones { snapshot: full.into(), clones: clones.join(", ") });
        }
        self.inner.snap_open.lock().remove(full);
        let found = self.find_frees(&meta, &snap);
        let hold = self.inner.ctx.txg.hold(0).map_err(FsError::from)?;
        let txg = hold.txg;
        self.inner.snap_ops.lock().push(SnapOp::Destroy { dataset: meta.id, name: snap.name, found });
        drop(hold);
        self.inner.ctx.txg.wait_synced(txg).map_err(FsError::from)?;
        Ok(())
    }

    /// What destroying `snap` frees, when the next tree is a snapshot: found here, on the
    /// command's thread, so the txg that destroys it does not wait for the walk (it reads
    /// the indirect blocks changed since the previous snapshot: seconds on a busy disk,
    /// during which no txg committed). The caller holds `snap_lock`, so neither tree can
    /// go while it is walked (every snapshot change takes it, and a dataset with
    /// snapshots is not destroyed), and no head frees a block a snapshot holds. When the
    /// snapshot is the newest, the next tree is the head, which changes until the txg
    /// quiesces: the sync walks then, as before.
    fn find_frees(&self, meta: &DsMeta, snap: &Snap) -> Option<FoundFrees> {
        let (prev, next) = {
            let snaps = self.inner.snaps.read();
            let list = snaps.get(&meta.id)?;
            let i = list.iter().position(|s| s.name == snap.name)?;
            let prev = if i > 0 { list[i - 1].txg } else { meta.origin.as_ref().map_or(0, |o| o.txg) };
            let next = list.get(i + 1)?;
            if next.dead.is_some() {
                // The sync reads the next snapshot's dead list instead: nothing to walk.
                return None;
            }
            (prev, next.clone())
        };
        let mut blocks = Vec::new();
        for_each_unique(&self.inner.ctx.zio, &snap.meta, prev, snap.txg, &next.meta, |bp| blocks.push(*bp));
        Some(FoundFrees { prev, snap: snap.txg, next: next.txg, blocks })
    }

    /// `tarn clone DS@SNAP POOL/NEW`: a writable dataset sharing the snapshot's blocks,
    /// with local properties `props` (each checked first).
    pub fn clone_snapshot(&self, full: &str, target: &str, props: &[(&str, &str)]) -> Result<(), PoolError> {
        let _serial = self.inner.snap_lock.lock();
        let (_, src, snap) = self.find_snapshot(full)?;
        check_name(target)?;
        let local = normalized_all(props)?;
        let Some((parent, _)) = target.rsplit_once('/') else {
            return Err(PoolError::BadName(target.into(), "a dataset name is POOL/NAME".into()));
        };
        self.check_in_pool(target, target)?;
        if self.inner.datasets.read().contains_key(target) {
            return Err(PoolError::DatasetExists(target.into()));
        }
        self.dataset(parent)?;
        let id = self.new_dataset_id();
        let origin = Origin { dataset: src.id, snapshot: snap.name.clone(), txg: snap.txg };
        let hold = self.inner.ctx.txg.hold(1024).map_err(FsError::from)?;
        let txg = hold.txg;
        let opened = self.add_dataset_at_snapshot(target, id, local, &snap, now_secs(), Some(origin));
        drop(hold);
        opened?;
        self.inner.ctx.txg.wait_synced(txg).map_err(FsError::from)?;
        Ok(())
    }

    /// `tarn promote POOL/CLONE` (ZFS's): the clone takes over its origin dataset's
    /// snapshots up to and including its origin snapshot, and that dataset becomes a
    /// clone of the clone — so the original can then be destroyed and the clone lives on.
    /// No block moves and no floor changes (see `Inner::promote`); committed in one txg.
    pub fn promote(&self, clone: &str) -> Result<(), PoolError> {
        let _serial = self.inner.snap_lock.lock();
        let meta = {
            let sets = self.inner.datasets.read();
            sets.get(clone).map(|(m, _)| m.clone()).ok_or_else(|| PoolError::NoSuchDataset(clone.into()))?
        };
        let origin = meta.origin.clone().ok_or_else(|| PoolError::NotAClone(clone.into()))?;
        let taken: Vec<String> = self
            .inner
            .snaps
            .read()
            .get(&origin.dataset)
            .map(|v| v.iter().filter(|s| s.txg <= origin.txg).map(|s| s.name.clone()).collect())
            .unwrap_or_default();
        let own = self.snapshot_names(clone)?;
        let clash: Vec<String> = taken.iter().filter(|n| own.contains(n)).map(|n| format!("{clone}@{n}")).collect();
        if !clash.is_empty() {
            let origin_name = self.origin_name(Some(&origin));
            return Err(PoolError::PromoteNameConflict {
                clone: clone.into(),
                origin: origin_name,
                names: clash.join(", "),
            });
        }
        let hold = self.inner.ctx.txg.hold(0).map_err(FsError::from)?;
        let txg = hold.txg;
        self.inner.snap_ops.lock().push(SnapOp::Promote { clone: meta.id });
        drop(hold);
        self.inner.ctx.txg.wait_synced(txg).map_err(FsError::from)?;
        Ok(())
    }

    /// `tarn rollback DS@SNAP`: the dataset's head becomes the snapshot again. Only to the
    /// newest snapshot; the caller makes sure nothing has the dataset open (unmounted).
    pub fn rollback(&self, full: &str) -> Result<(), PoolError> {
        let _serial = self.inner.snap_lock.lock();
        let (ds, meta, snap) = self.find_snapshot(full)?;
        let newer: Vec<String> = self.inner.snaps.read()[&meta.id]
            .iter()
            .filter(|s| s.txg > snap.txg)
            .map(|s| format!("{ds}@{}", s.name))
            .collect();
        if !newer.is_empty() {
            return Err(PoolError::SnapshotNotNewest { snapshot: full.into(), newer: newer.join(", ") });
        }
        self.sync()?;
        let hold = self.inner.ctx.txg.hold(1024).map_err(FsError::from)?;
        let txg = hold.txg;
        let removed = self.inner.datasets.write().remove(&ds);
        let Some((meta, head)) = removed else {
            return Err(PoolError::NoSuchDataset(ds));
        };
        self.inner.destroy_queue.lock().push(crate::pool::Destroyed { meta: head.meta_dnode(), floor: snap.txg });
        // The head is the snapshot again: nothing the snapshot holds is dead.
        self.inner.head_resets.lock().push((meta.id, HeadReset::Empty));
        let opened = self.add_dataset_at_snapshot(&ds, meta.id, meta.props, &snap, meta.creation, meta.origin);
        drop(hold);
        opened?;
        self.inner.ctx.txg.wait_synced(txg).map_err(FsError::from)?;
        Ok(())
    }
}

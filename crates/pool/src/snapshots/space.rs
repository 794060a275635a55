//! Snapshot listing and space: `tarn snap list` with each snapshot's `used` and
//! `written`, and a dataset's `usedbysnapshots`, `written`, `usedbydataset` and the
//! USED it is charged, counted on demand: `used` and `usedbysnapshots` from the dead
//! lists when they are known (each chunk's record gives its bytes; only a chunk with
//! entries on both sides of the txg counted from is read), else, and the others always,
//! by the walks of `walks.rs`.
//!
//! Owns: the space figures snapshots and origins change.
//!
//! Promises: every walk runs inside a reclaim section (no block walked is reused
//! meanwhile); a dataset with no snapshot and no origin is not walked for USED.
//!
//! Must never: change the pool, or cache a figure (each is counted when asked).
use std::sync::Arc;

use tarn_dataset::Dataset;

use super::walks::{for_each_born_after, for_each_unique, psize_sum};
use super::{split_snapshot_name, DeadList, Snap, SnapSpace, SnapshotInfo};
use crate::error::PoolError;
use crate::pool::{DsMeta, Pool};

impl Pool {
    /// `tarn snap list [POOL|DS|DS@NAME]`: snapshots with their space, by dataset then age.
    pub fn snapshots(&self, filter: Option<&str>) -> Result<Vec<SnapshotInfo>, PoolError> {
        let (filter_ds, filter_snap) = match filter {
            Some(f) if f.contains('@') => {
                let (ds, snap) = split_snapshot_name(f)?;
                (Some(ds), Some(snap))
            }
            Some(f) if f == self.inner.name => (None, None),
            Some(f) => (Some(f), None),
            None => (None, None),
        };
        if let Some(ds) = filter_ds {
            self.dataset(ds)?;
        }
        // Shared, and opened before the heads are listed: no block walked here is released
        // for reuse meanwhile, not even a head's destroyed after the list was taken.
        let _reading = self.inner.ctx.reclaim.reading();
        let heads: Vec<(String, DsMeta, Arc<Dataset>)> = {
            let sets = self.inner.datasets.read();
            sets.iter()
                .filter(|(k, _)| filter_ds.is_none_or(|f| f == k.as_str()))
                .map(|(k, (m, d))| (k.clone(), m.clone(), d.clone()))
                .collect()
        };
        let mut out = Vec::new();
        let zio = &self.inner.ctx.zio;
        for (name, meta, head) in heads {
            let (list, head_dead) = self.lists_of(meta.id);
            let head_meta = head.meta_dnode();
            let mut prev = meta.origin.as_ref().map_or(0, |o| o.txg);
            for (i, s) in list.iter().enumerate() {
                let (next, next_dead) = list.get(i + 1).map_or((&head_meta, &head_dead), |n| (&n.meta, &n.dead));
                if filter_snap.is_none_or(|f| f == s.name) {
                    // What only S holds is the next tree's dead list born after P.
                    let listed = next_dead.as_ref().and_then(|d| d.bytes_born_after(zio, prev).ok());
                    let used =
                        listed.unwrap_or_else(|| psize_sum(|f| for_each_unique(zio, &s.meta, prev, s.txg, next, f)));
                    let written = psize_sum(|f| for_each_born_after(zio, &s.meta, prev, f));
                    out.push(SnapshotInfo {
                        name: format!("{name}@{}", s.name),
                        used,
                        referenced: s.referenced.physical,
                        written,
                        creation: s.creation,
                        txg: s.txg,
                        clones: self.clones_of(meta.id, &s.name),
                    });
                }
                prev = s.txg;
            }
        }
        if let (Some(ds), Some(snap)) = (filter_ds, filter_snap) {
            if out.is_empty() {
                return Err(PoolError::NoSuchSnapshot(format!("{ds}@{snap}")));
            }
        }
        Ok(out)
    }

    /// The space a dataset's snapshots and origin account for (walks; see the module).
    pub(crate) fn snap_space(&self, meta: &DsMeta, head: &Dataset) -> SnapSpace {
        self.walk_space(meta, head, true)
    }

    /// What a dataset itself is charged, children apart (ZFS's `usedbydataset +
    /// usedbysnapshots`): its head, less what a clone shares with its origin, plus what
    /// only its snapshots hold. Walks only for a clone or a dataset with snapshots, and
    /// then only the blocks born after its origin.
    pub(crate) fn charged_space(&self, meta: &DsMeta, head: &Dataset) -> u64 {
        let has_snaps = self.inner.snaps.read().get(&meta.id).is_some_and(|v| !v.is_empty());
        if !has_snaps && meta.origin.is_none() {
            return head.used().physical;
        }
        let space = self.walk_space(meta, head, false);
        space.usedbysnapshots + space.usedbydataset
    }

    /// A dataset's snapshots and its head's dead list, read at one instant (the sync
    /// thread changes both under `snaps`).
    fn lists_of(&self, id: u64) -> (Vec<Snap>, Option<DeadList>) {
        let snaps = self.inner.snaps.read();
        let list = snaps.get(&id).cloned().unwrap_or_default();
        let head = self.inner.head_dead.lock().get(&id).cloned().unwrap_or_else(|| Some(DeadList::default()));
        (list, head)
    }

    /// Bytes only a dataset's snapshots hold, from the dead lists when every one is
    /// known: each such block is on exactly one list (the one of the tree after the last
    /// snapshot holding it), and entries born at or before the origin are the origin's.
    pub(crate) fn usedbysnapshots_listed(
        &self,
        list: &[Snap],
        head: Option<&DeadList>,
        origin_txg: u64,
    ) -> Option<u64> {
        let zio = &self.inner.ctx.zio;
        let mut sum = head?.bytes_born_after(zio, origin_txg).ok()?;
        for s in list {
            sum += s.dead.as_ref()?.bytes_born_after(zio, origin_txg).ok()?;
        }
        Some(sum)
    }

    /// Bytes only a dataset's snapshots hold, by the walks: each snapshot's blocks born
    /// after the one before it that the head does not hold.
    pub(crate) fn usedbysnapshots_walked(
        &self,
        list: &[Snap],
        head_meta: &tarn_objects::Dnode,
        origin_txg: u64,
    ) -> u64 {
        let zio = &self.inner.ctx.zio;
        let mut prev = origin_txg;
        let mut sum = 0;
        for s in list {
            sum += psize_sum(|f| for_each_unique(zio, &s.meta, prev, s.txg, head_meta, f));
            prev = s.txg;
        }
        sum
    }

    /// `snap_space`, with `written` left at 0 unless `count_written` (its walk is the
    /// head's changes since the newest snapshot, which USED does not need).
    fn walk_space(&self, meta: &DsMeta, head: &Dataset, count_written: bool) -> SnapSpace {
        let zio = &self.inner.ctx.zio;
        let _reading = self.inner.ctx.reclaim.reading();
        let (list, head_dead) = self.lists_of(meta.id);
        let head_meta = head.meta_dnode();
        let origin_txg = meta.origin.as_ref().map_or(0, |o| o.txg);
        let usedbysnapshots = self
            .usedbysnapshots_listed(&list, head_dead.as_ref(), origin_txg)
            .unwrap_or_else(|| self.usedbysnapshots_walked(&list, &head_meta, origin_txg));
        let prev = list.last().map_or(origin_txg, |s| s.txg);
        let written = if count_written { psize_sum(|f| for_each_born_after(zio, &head_meta, prev, f)) } else { 0 };
        let usedbydataset = if meta.origin.is_some() {
            psize_sum(|f| for_each_born_after(zio, &head_meta, origin_txg, f))
        } else {
            head.used().physical
        };
        SnapSpace { usedbysnapshots, written, usedbydataset }
    }

    /// Bytes only snapshots hold, summed over the pool's datasets (what destroying every
    /// snapshot would give back, at most).
    pub fn snapshot_space(&self) -> u64 {
        // Before the heads are listed (see `snapshots`); `walk_space` opens its own inside.
        let _reading = self.inner.ctx.reclaim.reading();
        let heads: Vec<(DsMeta, Arc<Dataset>)> =
            self.inner.datasets.read().values().map(|(m, d)| (m.clone(), d.clone())).collect();
        heads
            .iter()
            .filter(|(m, _)| self.inner.snaps.read().get(&m.id).is_some_and(|v| !v.is_empty()))
            .map(|(m, d)| self.walk_space(m, d, false).usedbysnapshots)
            .sum()
    }
}

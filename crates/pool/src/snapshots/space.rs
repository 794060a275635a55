//! Snapshot listing and space: `tarn snap list` with each snapshot's `used` and
//! `written`, and a dataset's `usedbysnapshots`, `written`, `usedbydataset` and the
//! USED it is charged, counted on demand by the walks of `walks.rs`.
//!
//! Owns: the space figures snapshots and origins change.
//!
//! Promises: every walk runs under the reclaim lock held shared (no block walked is
//! reused meanwhile); a dataset with no snapshot and no origin is not walked for USED.
//!
//! Must never: change the pool, or cache a figure (each is counted when asked).
use std::sync::Arc;

use tarn_dataset::Dataset;

use super::walks::{for_each_born_after, for_each_unique, psize_sum};
use super::{split_snapshot_name, SnapSpace, SnapshotInfo};
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
        let heads: Vec<(String, DsMeta, Arc<Dataset>)> = {
            let sets = self.inner.datasets.read();
            sets.iter()
                .filter(|(k, _)| filter_ds.is_none_or(|f| f == k.as_str()))
                .map(|(k, (m, d))| (k.clone(), m.clone(), d.clone()))
                .collect()
        };
        let mut out = Vec::new();
        let zio = &self.inner.ctx.zio;
        // Shared: no block walked here is released for reuse meanwhile.
        let _reading = self.inner.ctx.reclaim.read();
        for (name, meta, head) in heads {
            let list = self.inner.snaps.read().get(&meta.id).cloned().unwrap_or_default();
            let head_meta = head.meta_dnode();
            let mut prev = meta.origin.as_ref().map_or(0, |o| o.txg);
            for (i, s) in list.iter().enumerate() {
                let next = list.get(i + 1).map_or(&head_meta, |n| &n.meta);
                if filter_snap.is_none_or(|f| f == s.name) {
                    let used = psize_sum(|f| for_each_unique(zio, &s.meta, prev, s.txg, next, f));
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

    /// `snap_space`, with `written` left at 0 unless `count_written` (its walk is the
    /// head's changes since the newest snapshot, which USED does not need).
    fn walk_space(&self, meta: &DsMeta, head: &Dataset, count_written: bool) -> SnapSpace {
        let zio = &self.inner.ctx.zio;
        let _reading = self.inner.ctx.reclaim.read();
        let list = self.inner.snaps.read().get(&meta.id).cloned().unwrap_or_default();
        let head_meta = head.meta_dnode();
        let origin_txg = meta.origin.as_ref().map_or(0, |o| o.txg);
        let mut prev = origin_txg;
        let mut usedbysnapshots = 0;
        for s in &list {
            usedbysnapshots += psize_sum(|f| for_each_unique(zio, &s.meta, prev, s.txg, &head_meta, f));
            prev = s.txg;
        }
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
        let heads: Vec<(DsMeta, Arc<Dataset>)> =
            self.inner.datasets.read().values().map(|(m, d)| (m.clone(), d.clone())).collect();
        heads
            .iter()
            .filter(|(m, _)| self.inner.snaps.read().get(&m.id).is_some_and(|v| !v.is_empty()))
            .map(|(m, d)| self.walk_space(m, d, false).usedbysnapshots)
            .sum()
    }
}

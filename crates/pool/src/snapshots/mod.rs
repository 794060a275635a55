//! Snapshots and clones (ZFS's dsl_dataset snapshots): a snapshot is a dataset's
//! dnode-table root as one txg committed it, kept in the MOS with that txg; a clone is a
//! new dataset whose head starts as a snapshot's root.
//!
//! Theory of operation. Every block pointer carries its birth txg, and a block is never
//! changed in place, so a block born at or before a snapshot's txg that is still in the
//! head is also in the snapshot (a block's life is one interval of txgs). Hence ZFS's
//! rules, applied by the commit (`commit.rs`):
//!
//! * **Freeing from a head**: a block the head no longer needs is freed only if it was
//!   born after the head's *floor* — its newest snapshot's txg, or a clone's origin txg.
//!   Otherwise a snapshot still holds it: it stays allocated, on the head's dead list
//!   (`deadlist`). One comparison per freed block, in the sync thread.
//! * **Taking a snapshot** is queued in the open txg (all of `-r` under one hold, so in
//!   one txg) and done by that txg's commit, after the dataset's blocks are written:
//!   the snapshot records the root as the txg left it, and takes the head's dead list.
//!   Constant time: nothing is copied.
//! * **Destroying snapshot S** (previous snapshot P, or the clone's origin, else txg 0;
//!   next N: the next snapshot or the head) frees exactly the blocks of S born after P
//!   that N does not hold — ZFS's dead-list rule: the entries of N's dead list born after
//!   P, in the sync thread, no tree read (`deadlist::destroy_through`). When N's list is
//!   not known (a pool from before dead lists), they are found by walking N's blocks born
//!   after P (a block born at or before S's txg is recorded and not descended: the whole
//!   subtree is S's too), then S's blocks born after P, passing over what N holds. When N
//!   is a snapshot, the command walks before it queues the destroy and the sync only
//!   frees what it found (`FoundFrees`); when N is the head, the sync walks.
//! * **A clone**'s head is the snapshot's root; its floor is the origin's txg, so it
//!   never frees a block the origin holds. A snapshot with clones is not destroyed.
//! * **Rollback** to the newest snapshot drops the head: its blocks born after the
//!   snapshot are freed, and the dataset reopens on the snapshot's root.
//!
//! At import (`claim.rs`) each block is claimed once: a dataset's snapshots oldest
//! first, each walk passing over subtrees born at or before the previous snapshot (or
//! the origin), then the head's blocks born after its floor.
//!
//! Space (`used`, `referenced`, `usedbysnapshots`, `written`) is counted by the same
//! walks, on demand, inside a reclaim section (no block walked is reused).
//!
//! Owns: snapshot names, the snapshot list of each dataset (changed only by the sync
//! thread), the checks of snapshot, clone and rollback commands, and their space.
//!
//! Promises: a snapshot's blocks are never freed while it exists; destroying one frees
//! exactly what no other snapshot, clone or head references; create, destroy, clone and
//! rollback are each committed in one txg before they return; a refused command changes
//! nothing.
//!
//! Must never: free a block itself outside the sync thread, take a txg hold while
//! holding `datasets` or `snaps`, or write into a snapshot (its dataset is read-only).
//!
//! Modules: this one (the records, names and lookups), `commands` (create, destroy,
//! clone, promote, rollback: each queued in a txg and committed before it returns),
//! `deadlist` (the stored dead lists), `space` (listing and the space properties),
//! `walks` (the born-after and only-this-snapshot walks the commit and the space counts
//! share), `verify` (the dead lists checked against the walks, for tests).
use std::collections::BTreeMap;
use std::sync::Arc;

use tarn_dataset::{Dataset, SpaceUsed};
use tarn_objects::{Dnode, ObjSet, Reading};
use tarn_zio::BlockPtr;

use crate::datasets::check_name;
use crate::error::PoolError;
use crate::pool::{DsMeta, Pool};
use crate::space::PoolSpace;

mod commands;
pub(crate) mod deadlist;
mod space;
mod verify;
mod walks;

pub(crate) use deadlist::DeadList;
pub(crate) use walks::{for_each_born_after, for_each_unique};

/// Each head's dead list by dataset id: an id not in it has an empty list; `None`: not
/// known (see `deadlist`).
pub(crate) type HeadDead = BTreeMap<u64, Option<DeadList>>;

/// What becomes of a head's dead list when its head is replaced or goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HeadReset {
    /// The dataset is gone: its list's chunks are freed.
    Gone,
    /// The head is its newest snapshot again (rollback): nothing it holds is dead.
    Empty,
    /// The head was replaced by the tree of dataset `from` (an incremental receive's
    /// hidden clone of the base, whose floor was the base's txg like this head's): that
    /// dataset's list — the base's blocks the received tree stopped using — becomes
    /// this head's, for the snapshot the receive takes next.
    TakeFrom(u64),
}

/// One snapshot of a dataset.
#[derive(Clone, Debug)]
pub(crate) struct Snap {
    /// The part after `@`.
    pub(crate) name: String,
    /// The txg whose committed root it is.
    pub(crate) txg: u64,
    pub(crate) meta: Dnode,
    pub(crate) next_obj: u64,
    pub(crate) unlinked: Vec<u64>,
    pub(crate) creation: u64,
    pub(crate) referenced: SpaceUsed,
    /// Names this snapshot's contents across pools: a received snapshot keeps the
    /// sender's, so an incremental stream finds its base by it.
    pub(crate) guid: u64,
    /// The blocks of the snapshot before it that it does not hold (`None`: not known).
    pub(crate) dead: Option<DeadList>,
}

/// Snapshots by dataset id, oldest first.
pub(crate) type Snaps = BTreeMap<u64, Vec<Snap>>;

/// The snapshot a clone was made from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Origin {
    pub(crate) dataset: u64,
    pub(crate) snapshot: String,
    pub(crate) txg: u64,
}

/// A snapshot change queued in the open txg, done by its commit.
#[derive(Clone, Debug)]
pub(crate) enum SnapOp {
    /// `guid`: a new snapshot's own, or the sender's for a received one.
    Take { dataset: u64, name: String, creation: u64, guid: u64 },
    Destroy {
        dataset: u64,
        name: String,
        /// What destroying it frees, found by the command before it queued the destroy
        /// (when the next tree is a snapshot, so nothing it walked can change), so the
        /// sync thread does not walk while the txg waits. `None`: the sync walks.
        found: Option<FoundFrees>,
    },
    /// `tarn promote`: the clone `clone` takes its origin dataset's snapshots up to and
    /// including the origin snapshot, and the origin dataset becomes a clone of it.
    Promote { clone: u64 },
}

/// The blocks only one snapshot holds, found outside the sync thread, and the neighbours
/// they were found against: the sync frees them only if the snapshot still sits between
/// the same two trees (else it walks, as without them).
#[derive(Clone, Debug)]
pub(crate) struct FoundFrees {
    /// Txgs of the previous tree (previous snapshot or origin, else 0), the snapshot, and
    /// the next snapshot.
    pub(crate) prev: u64,
    pub(crate) snap: u64,
    pub(crate) next: u64,
    pub(crate) blocks: Vec<BlockPtr>,
}

/// A snapshot as `tarn snap list` shows it.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct SnapshotInfo {
    /// `POOL/DS@NAME`.
    pub name: String,
    /// Bytes only this snapshot holds: what destroying it frees.
    pub used: u64,
    /// Bytes of its whole tree.
    pub referenced: u64,
    /// Bytes born since the previous snapshot.
    pub written: u64,
    pub creation: u64,
    pub txg: u64,
    /// Datasets cloned from it.
    pub clones: Vec<String>,
}

/// The space properties of a dataset that snapshots change.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SnapSpace {
    /// Bytes its snapshots hold that its head does not.
    pub(crate) usedbysnapshots: u64,
    /// Bytes of its head born after its newest snapshot (or origin).
    pub(crate) written: u64,
    /// Bytes its head holds that its origin does not (all of them for a non-clone).
    pub(crate) usedbydataset: u64,
}

/// Longest snapshot name after the `@`, and of the whole `POOL/DS@NAME`.
const MAX_FULL_NAME: usize = 255;

/// Splits `POOL/DS@NAME` into the dataset and the snapshot name, checking both.
pub fn split_snapshot_name(full: &str) -> Result<(&str, &str), PoolError> {
    let bad = |why: &str| PoolError::BadName(full.to_string(), why.to_string());
    let Some((ds, snap)) = full.split_once('@') else {
        return Err(bad("a snapshot is named DATASET@NAME"));
    };
    if full.len() > MAX_FULL_NAME {
        return Err(bad("names are 1 to 255 characters"));
    }
    check_name(ds)?;
    if snap.is_empty() {
        return Err(bad("the snapshot name after '@' is empty"));
    }
    if !snap.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)) {
        return Err(bad("a snapshot name uses letters, digits and _ . - (one '@', no '/')"));
    }
    Ok((ds, snap))
}

/// The txg at or before which a head's blocks are a snapshot's too: its newest
/// snapshot's, or its origin's.
pub(crate) fn floor(snaps: &Snaps, meta: &DsMeta) -> u64 {
    let newest = snaps.get(&meta.id).and_then(|v| v.last()).map_or(0, |s| s.txg);
    newest.max(meta.origin.as_ref().map_or(0, |o| o.txg))
}

impl Pool {
    /// `full` (a dataset or snapshot name) names something in this pool, or `BadName`.
    pub fn check_in_pool(&self, full: &str, ds: &str) -> Result<(), PoolError> {
        let pool = ds.split('/').next().unwrap_or(ds);
        if pool != self.inner.name {
            return Err(PoolError::BadName(full.into(), format!("it is not in pool '{}'", self.inner.name)));
        }
        Ok(())
    }

    /// The dataset's record and the snapshot `full` names, or why there is none.
    pub(crate) fn find_snapshot(&self, full: &str) -> Result<(String, DsMeta, Snap), PoolError> {
        let (ds, snap) = split_snapshot_name(full)?;
        let meta = {
            let sets = self.inner.datasets.read();
            sets.get(ds).map(|(m, _)| m.clone()).ok_or_else(|| PoolError::NoSuchDataset(ds.into()))?
        };
        let found = self.inner.snaps.read().get(&meta.id).and_then(|v| v.iter().find(|s| s.name == snap).cloned());
        let snap = found.ok_or_else(|| PoolError::NoSuchSnapshot(full.into()))?;
        Ok((ds.to_string(), meta, snap))
    }

    /// Datasets cloned from snapshot `name` of dataset `id`.
    fn clones_of(&self, id: u64, name: &str) -> Vec<String> {
        let sets = self.inner.datasets.read();
        sets.iter()
            .filter(|(_, (m, _))| m.origin.as_ref().is_some_and(|o| o.dataset == id && o.snapshot == name))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// The snapshot's contents as a read-only dataset (opened once, kept until the
    /// snapshot is destroyed).
    pub fn snapshot_dataset(&self, full: &str) -> Result<Arc<Dataset>, PoolError> {
        if let Some(ds) = self.inner.snap_open.lock().get(full) {
            return Ok(ds.clone());
        }
        let (ds_name, meta, snap) = self.find_snapshot(full)?;
        let head = self.dataset(&ds_name)?;
        let ctx = &self.inner.ctx;
        // Its own identity in the cache's page history: a snapshot's pages are not the
        // head's (whose writes would otherwise take their place there).
        let identity = 1 << 63 | meta.id << 32 | (snap.txg & 0xffff_ffff);
        let os = ObjSet::open(ctx.clone(), identity, Some(snap.meta), snap.next_obj);
        let space = Arc::new(PoolSpace { zio: ctx.zio.clone(), txg: ctx.txg.clone() });
        let ds =
            Dataset::new(meta.id, os, head.effective(), space, self.inner.zil.clone(), Vec::new()).into_read_only();
        ds.set_used(snap.referenced);
        let ds = Arc::new(ds);
        self.inner.snap_open.lock().entry(full.to_string()).or_insert(ds.clone());
        Ok(ds)
    }

    /// Whether `ds` is still the contents of snapshot `full` (false once it was
    /// destroyed: its blocks may be reused, so a mount stops reading through it). Ask
    /// inside a reclaim section (`reading`) and read in the same one: a destroy drops the
    /// snapshot from this map before its txg frees a block, and that txg's release waits
    /// for every section opened before, so a read that saw "current" cannot meet a block
    /// reused since.
    pub fn snapshot_is_current(&self, full: &str, ds: &Arc<Dataset>) -> bool {
        self.inner.snap_open.lock().get(full).is_some_and(|open| Arc::ptr_eq(open, ds))
    }

    /// A reclaim section: no block freed by a txg that commits after this call is
    /// released for reuse until the section ends.
    pub fn reading(&self) -> Reading<'_> {
        self.inner.ctx.reclaim.reading()
    }

    /// Names (after the `@`) of a dataset's snapshots, oldest first.
    pub fn snapshot_names(&self, dataset: &str) -> Result<Vec<String>, PoolError> {
        let id = self.inner.datasets.read().get(dataset).map(|(m, _)| m.id);
        let id = id.ok_or_else(|| PoolError::NoSuchDataset(dataset.into()))?;
        Ok(self.inner.snaps.read().get(&id).map(|v| v.iter().map(|s| s.name.clone()).collect()).unwrap_or_default())
    }

    /// The origin of a clone as `POOL/DS@NAME` ("-" for none).
    pub(crate) fn origin_name(&self, origin: Option<&Origin>) -> String {
        let Some(o) = origin else { return "-".into() };
        let sets = self.inner.datasets.read();
        let ds = sets.iter().find(|(_, (m, _))| m.id == o.dataset).map(|(k, _)| k.as_str());
        format!("{}@{}", ds.unwrap_or("?"), o.snapshot)
    }
}

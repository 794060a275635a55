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
//!   Otherwise a snapshot still holds it: it is left allocated (ZFS puts it on the
//!   dead list). One comparison per freed block, in the sync thread.
//! * **Taking a snapshot** is queued in the open txg (all of `-r` under one hold, so in
//!   one txg) and done by that txg's commit, after the dataset's blocks are written:
//!   the snapshot records the root as the txg left it. Constant time: nothing is copied.
//! * **Destroying snapshot S** (previous snapshot P, or the clone's origin, else txg 0;
//!   next N: the next snapshot or the head) frees exactly the blocks of S born after P
//!   that N does not hold — ZFS's dead-list rule. The dead list is not stored: it is
//!   found by walking N's blocks born after P (a block born at or before S's txg is
//!   recorded and not descended: the whole subtree is S's too), then S's blocks born
//!   after P, passing over what N holds. The walk costs the blocks changed since P.
//!   When N is a snapshot (S is not the newest), the command walks before it queues the
//!   destroy and the sync only frees what it found (`FoundFrees`): the txg does not wait
//!   for seconds of reads on a busy disk. When N is the head, the sync walks.
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
//! walks, on demand, under the reclaim lock held shared (no block walked is reused).
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
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use tarn_dataset::{Dataset, FsError, SpaceUsed};
use tarn_objects::traverse::{self, Entering, Flow, Options, Start, Visit, Visitor};
use tarn_objects::{Dnode, ObjSet};
use tarn_zio::{BlockPtr, Zio};

use crate::datasets::check_name;
use crate::error::PoolError;
use crate::pool::{now_secs, DsMeta, Pool};
use crate::props::normalized;
use crate::space::PoolSpace;

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

/// The key of a block: where it is and when it was born (no two live blocks share it).
type BlockKey = (u16, u64, u64);

fn key(bp: &BlockPtr) -> BlockKey {
    (bp.vdev, bp.offset, bp.birth)
}

/// Walks `tree`'s blocks born after `floor`, passing over subtrees rooted at a block in
/// `skip`; `f` is called for each block visited.
struct Born<'a, F: FnMut(&BlockPtr)> {
    floor: u64,
    skip: &'a HashSet<BlockKey>,
    f: F,
}

impl<F: FnMut(&BlockPtr)> Visitor for Born<'_, F> {
    fn enter(&mut self, b: &Entering<'_>) -> Flow {
        if b.bp.birth <= self.floor || self.skip.contains(&key(b.bp)) {
            return Flow::Skip;
        }
        Flow::Continue
    }

    fn block(&mut self, v: &Visit<'_>) -> Flow {
        (self.f)(v.bp);
        Flow::Continue
    }
}

/// The blocks of `other` born in (`floor`, `upto`]: those of a snapshot taken at `upto`
/// that `other`, a later tree of the same dataset, still holds.
struct Shared {
    floor: u64,
    upto: u64,
    found: HashSet<BlockKey>,
}

impl Visitor for Shared {
    fn enter(&mut self, b: &Entering<'_>) -> Flow {
        if b.bp.birth <= self.floor {
            return Flow::Skip;
        }
        if b.bp.birth <= self.upto {
            // Born by `upto`: the snapshot holds it and everything under it.
            self.found.insert(key(b.bp));
            return Flow::Skip;
        }
        Flow::Continue
    }

    fn block(&mut self, _: &Visit<'_>) -> Flow {
        Flow::Continue
    }
}

/// Calls `f` for every block of snapshot `tree` (taken at `upto`) born after `floor`
/// that `next` does not hold: what only this snapshot references.
pub(crate) fn for_each_unique(zio: &Zio, tree: &Dnode, floor: u64, upto: u64, next: &Dnode, f: impl FnMut(&BlockPtr)) {
    let mut shared = Shared { floor, upto, found: HashSet::new() };
    traverse::walk(zio, Start::ObjSet(next), Options::default(), &mut shared);
    let mut born = Born { floor, skip: &shared.found, f };
    traverse::walk(zio, Start::ObjSet(tree), Options::default(), &mut born);
}

/// Calls `f` for every block of `tree` born after `floor`.
pub(crate) fn for_each_born_after(zio: &Zio, tree: &Dnode, floor: u64, f: impl FnMut(&BlockPtr)) {
    let none = HashSet::new();
    let mut born = Born { floor, skip: &none, f };
    traverse::walk(zio, Start::ObjSet(tree), Options::default(), &mut born);
}

fn psize_sum(mut total: impl FnMut(&mut dyn FnMut(&BlockPtr))) -> u64 {
    let mut sum = 0u64;
    total(&mut |bp: &BlockPtr| sum += u64::from(bp.psize));
    sum
}

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
            (prev, list.get(i + 1)?.clone())
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
        let mut local = BTreeMap::new();
        for (prop, value) in props {
            local.insert(prop.to_string(), normalized(prop, value)?);
        }
        let Some((parent, _)) = target.rsplit_once('/') else {
            return Err(PoolError::BadName(target.into(), "a dataset name is POOL/NAME".into()));
        };
        self.check_in_pool(target, target)?;
        if self.inner.datasets.read().contains_key(target) {
            return Err(PoolError::DatasetExists(target.into()));
        }
        self.dataset(parent)?;
        let id = {
            let mut next = self.inner.next_dataset_id.lock();
            *next += 1;
            *next
        };
        let origin = Origin { dataset: src.id, snapshot: snap.name.clone(), txg: snap.txg };
        let hold = self.inner.ctx.txg.hold(1024).map_err(FsError::from)?;
        let txg = hold.txg;
        let opened = self.add_dataset(
            target,
            id,
            local,
            Some(snap.meta.clone()),
            snap.next_obj,
            snap.unlinked.clone(),
            now_secs(),
            Some(origin),
        );
        drop(hold);
        opened?.set_used(snap.referenced);
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
        let opened = self.add_dataset(
            &ds,
            meta.id,
            meta.props,
            Some(snap.meta.clone()),
            snap.next_obj,
            snap.unlinked.clone(),
            meta.creation,
            meta.origin,
        );
        drop(hold);
        opened?.set_used(snap.referenced);
        self.inner.ctx.txg.wait_synced(txg).map_err(FsError::from)?;
        Ok(())
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
    /// destroyed: its blocks may be reused, so a mount stops reading through it).
    pub fn snapshot_is_current(&self, full: &str, ds: &Arc<Dataset>) -> bool {
        self.inner.snap_open.lock().get(full).is_some_and(|open| Arc::ptr_eq(open, ds))
    }

    /// Names (after the `@`) of a dataset's snapshots, oldest first.
    pub fn snapshot_names(&self, dataset: &str) -> Result<Vec<String>, PoolError> {
        let id = self.inner.datasets.read().get(dataset).map(|(m, _)| m.id);
        let id = id.ok_or_else(|| PoolError::NoSuchDataset(dataset.into()))?;
        Ok(self.inner.snaps.read().get(&id).map(|v| v.iter().map(|s| s.name.clone()).collect()).unwrap_or_default())
    }

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

    /// The origin of a clone as `POOL/DS@NAME` ("-" for none).
    pub(crate) fn origin_name(&self, origin: Option<&Origin>) -> String {
        let Some(o) = origin else { return "-".into() };
        let sets = self.inner.datasets.read();
        let ds = sets.iter().find(|(_, (m, _))| m.id == o.dataset).map(|(k, _)| k.as_str());
        format!("{}@{}", ds.unwrap_or("?"), o.snapshot)
    }
}

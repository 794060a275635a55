//! The narrow API the send stream (crate `tarn-send`, a layer above) uses: a snapshot as
//! a read-only view (its identity and root), and the three steps of a receive that only
//! the pool can take — making the hidden dataset, recording where it stands, and the
//! switch at the stream's END.
//!
//! Owns: the hidden dataset's name (`TARGET%recv`) and its token property, and the
//! switch of a received tree into its target.
//!
//! Promises: the switch is one txg — the target's head becomes the received tree and the
//! snapshot is taken with the sender's guid, or nothing of the target changes; a hidden
//! dataset is made and synced before its first record is applied.
//!
//! Must never: hand out a dataset's record or the snapshot list for writing, or change a
//! target before `finish_receive`.
use std::collections::BTreeMap;
use std::sync::Arc;

use tarn_dataset::{Dataset, FsError};
use tarn_objects::Dnode;
use tarn_zio::Zio;

use crate::error::PoolError;
use crate::pool::{now_secs, Destroyed, Pool};
use crate::snapshots::{HeadReset, Origin, Snap, SnapOp};

/// The hidden dataset a receive into `TARGET` writes: `TARGET%recv`.
pub const RECV_SUFFIX: &str = "%recv";
/// The property of the hidden dataset holding where an interrupted receive stands.
pub const TOKEN_PROP: &str = "receive_resume_token";

/// A snapshot as a send or a receive sees it: what names it and the root to walk.
#[derive(Clone, Debug)]
pub struct SnapshotRef {
    /// `POOL/DS` and its id.
    pub dataset: String,
    pub dataset_id: u64,
    /// The part after `@`.
    pub name: String,
    /// Names its contents across pools (a received snapshot keeps the sender's).
    pub guid: u64,
    /// The txg whose committed root it is.
    pub txg: u64,
    pub creation: u64,
    /// The dnode-table root, and what the dataset held beside it.
    pub meta: Dnode,
    pub next_obj: u64,
    pub unlinked: Vec<u64>,
}

impl SnapshotRef {
    fn of(dataset: &str, dataset_id: u64, s: &Snap) -> SnapshotRef {
        SnapshotRef {
            dataset: dataset.to_string(),
            dataset_id,
            name: s.name.clone(),
            guid: s.guid,
            txg: s.txg,
            creation: s.creation,
            meta: s.meta.clone(),
            next_obj: s.next_obj,
            unlinked: s.unlinked.clone(),
        }
    }
}

/// The snapshot a received stream ends in, as its BEGIN named it.
#[derive(Clone, Debug)]
pub struct Received {
    pub name: String,
    pub creation: u64,
    pub guid: u64,
    pub unlinked: Vec<u64>,
}

impl Pool {
    /// The io pipeline, for a walk of a snapshot's tree and verified reads of its blocks
    /// as stored (a send).
    pub fn zio(&self) -> &Zio {
        &self.inner.ctx.zio
    }

    /// The snapshot `full` (`POOL/DS@NAME`), or why there is none.
    pub fn snapshot_ref(&self, full: &str) -> Result<SnapshotRef, PoolError> {
        let (ds, meta, snap) = self.find_snapshot(full)?;
        Ok(SnapshotRef::of(&ds, meta.id, &snap))
    }

    /// A dataset's snapshots, oldest first.
    pub fn snapshot_refs(&self, dataset: &str) -> Result<Vec<SnapshotRef>, PoolError> {
        let id = self.inner.datasets.read().get(dataset).map(|(m, _)| m.id);
        let id = id.ok_or_else(|| PoolError::NoSuchDataset(dataset.into()))?;
        let snaps = self.inner.snaps.read();
        Ok(snaps.get(&id).map(|v| v.iter().map(|s| SnapshotRef::of(dataset, id, s)).collect()).unwrap_or_default())
    }

    /// Whether a dataset (hidden ones included) has this name.
    pub fn dataset_exists(&self, name: &str) -> bool {
        self.inner.datasets.read().contains_key(name)
    }

    /// A property set on the dataset itself (not inherited), if it is.
    pub fn local_property(&self, dataset: &str, name: &str) -> Option<String> {
        self.inner.datasets.read().get(dataset).and_then(|(m, _)| m.props.get(name).cloned())
    }

    /// Whether the dataset's head is still exactly `snap` (nothing written since), once
    /// what is dirty has committed.
    pub fn head_is(&self, dataset: &str, snap: &SnapshotRef) -> Result<bool, PoolError> {
        self.sync()?;
        let head = self.dataset(dataset)?;
        Ok(head.meta_dnode() == snap.meta)
    }

    /// Makes the hidden dataset `hidden` a receive writes — empty, or (an incremental
    /// stream) a clone of `base` — with its first resume token, and waits until it is
    /// committed.
    pub fn create_receiving(
        &self,
        hidden: &str,
        token: String,
        base: Option<&SnapshotRef>,
    ) -> Result<Arc<Dataset>, PoolError> {
        let base = base.map(|b| self.snap_of(b)).transpose()?;
        let id = self.new_dataset_id();
        let props = BTreeMap::from([(TOKEN_PROP.to_string(), token)]);
        let hold = self.inner.ctx.txg.hold(1024).map_err(FsError::from)?;
        let txg = hold.txg;
        let opened = match base {
            None => self.add_dataset(hidden, id, props, None, 1, Vec::new(), now_secs(), None),
            Some((dataset, snap)) => {
                let origin = Origin { dataset, snapshot: snap.name.clone(), txg: snap.txg };
                self.add_dataset_at_snapshot(hidden, id, props, &snap, now_secs(), Some(origin))
            }
        };
        drop(hold);
        let ds = opened?;
        self.inner.ctx.txg.wait_synced(txg).map_err(FsError::from)?;
        Ok(ds)
    }

    /// Records where the receive into `hidden` stands, in the open txg: whenever the
    /// token is committed, so are the records applied before this call.
    pub fn set_receive_token(&self, hidden: &str, token: String) -> Result<(), PoolError> {
        let _hold = self.inner.ctx.txg.hold(0).map_err(FsError::from)?;
        let mut sets = self.inner.datasets.write();
        let (meta, _) = sets.get_mut(hidden).ok_or_else(|| PoolError::NoSuchDataset(hidden.into()))?;
        meta.props.insert(TOKEN_PROP.to_string(), token);
        Ok(())
    }

    /// The stream's END verified: in one txg, the tree of `hidden` becomes `target`'s
    /// head (created by a full stream; an incremental's old head, past `base`, is freed
    /// as a rollback frees it) and the snapshot is taken with the sender's guid.
    /// `DatasetExists` if a full stream's target was made meanwhile: the hidden dataset
    /// then stays, to be resumed into or aborted.
    pub fn finish_receive(
        &self,
        hidden: &str,
        target: &str,
        base: Option<&SnapshotRef>,
        snap: &Received,
    ) -> Result<(), PoolError> {
        self.sync()?;
        let _serial = self.inner.snap_lock.lock();
        let hold = self.inner.ctx.txg.hold(1024).map_err(FsError::from)?;
        let txg = hold.txg;
        let (recv_meta, recv_ds) = {
            let mut sets = self.inner.datasets.write();
            sets.remove(hidden).ok_or_else(|| PoolError::NoSuchDataset(hidden.into()))?
        };
        let (id, props, creation, origin) = match base {
            None => {
                if self.inner.datasets.read().contains_key(target) {
                    self.inner.datasets.write().insert(hidden.to_string(), (recv_meta, recv_ds));
                    return Err(PoolError::DatasetExists(target.into()));
                }
                (recv_meta.id, BTreeMap::new(), now_secs(), None)
            }
            Some(base) => {
                let old = self.inner.datasets.write().remove(target);
                let (meta, old) = old.ok_or_else(|| PoolError::NoSuchDataset(target.into()))?;
                self.inner.destroy_queue.lock().push(Destroyed { meta: old.meta_dnode(), floor: base.txg });
                // The received tree takes the target's place, and with it the hidden
                // clone's dead list: the base's blocks the stream freed or overwrote
                // (born at or before the base, the clone's floor), as a local write
                // would have listed them. The snapshot taken below takes the list.
                self.inner.head_resets.lock().push((meta.id, HeadReset::TakeFrom(recv_meta.id)));
                (meta.id, meta.props, meta.creation, meta.origin)
            }
        };
        let opened = self.add_dataset(
            target,
            id,
            props,
            Some(recv_ds.meta_dnode()),
            recv_ds.next_obj(),
            snap.unlinked.clone(),
            creation,
            origin,
        );
        let used = recv_ds.used();
        drop(recv_ds);
        opened?.set_used(used);
        let take = SnapOp::Take { dataset: id, name: snap.name.clone(), creation: snap.creation, guid: snap.guid };
        self.inner.snap_ops.lock().push(take);
        drop(hold);
        self.inner.ctx.txg.wait_synced(txg).map_err(FsError::from)?;
        Ok(())
    }

    /// The pool's own record of a snapshot a caller names by reference (same dataset,
    /// same guid), with its dataset's id.
    fn snap_of(&self, r: &SnapshotRef) -> Result<(u64, Snap), PoolError> {
        let snaps = self.inner.snaps.read();
        let found = snaps.get(&r.dataset_id).and_then(|v| v.iter().find(|s| s.guid == r.guid).cloned());
        let full = format!("{}@{}", r.dataset, r.name);
        found.map(|s| (r.dataset_id, s)).ok_or(PoolError::NoSuchSnapshot(full))
    }
}

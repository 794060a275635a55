//! The txg commit: how the changes of one transaction group reach the disks and become
//! the pool's state (the pool's side of `SyncTarget`, as OpenZFS's spa_sync).
//!
//! Theory of operation. Txg N lives in three phases (the engine is `tarn_txg`):
//!
//! * **Open.** Every change joins N through a `TxgHold` (the txg barrier, shared) and
//!   takes the dataset's namespace lock and one object lock at a time. Changes go to the
//!   objects' open-txg state and to the intent log.
//! * **Quiesce** (`quiesce`, sync thread, barrier held exclusively, so no change is half
//!   made): each dataset moves its open changes to "syncing" under each object's lock;
//!   the pool freezes what N's root will say (`Frozen`: the datasets and their
//!   properties, the datasets destroyed in N, the next dataset id). N+1 opens as soon as
//!   the barrier is released, and writers go on while N syncs.
//! * **Sync** (`write_txg`, sync thread, no barrier), in this order:
//!   1. each dataset writes N's records (compressed, checksummed, packed into runs), then
//!      its dirty indirect blocks bottom-up, then its dnode table; every block replaced
//!      is freed (deferred) unless a snapshot still holds it (born at or before the
//!      dataset's newest snapshot or origin: see `snapshots`): then it goes on the
//!      head's dead list;
//!   2. every block of each dataset destroyed in N (born after its origin) is freed
//!      (deferred), found by a walk of its tree (`tarn_objects::traverse`); then the
//!      snapshots queued in N are taken (each records its dataset's root as N leaves
//!      it) and destroyed (freeing what only they held: read from the next tree's dead
//!      list, or when that is not known found by the command when the next tree is a
//!      snapshot, else walked here); each head's dead list writes its new entries;
//!   3. the intent log gives the head its chain continues from, and the log blocks no
//!      longer needed after N commits are freed (deferred); while import replays, the
//!      head is the replayed chain's and the root records how far replay got in N, and
//!      the txg that ends replay frees the replayed chain (`tarn_zil::ReplayProgress`);
//!   4. the MOS (the pool's root: datasets, their dnode-table roots and dead lists, device error
//!      counters, the log head, the scan's record, the error log, the txgs mirror sides
//!      missed) is written, and the previous MOS freed (deferred);
//!   5. one flush of every device: every block N wrote is durable;
//!   6. the uberblock of N is written to both labels of every device, each flushed. This
//!      is the commit point;
//!   7. the deferred frees are released for reuse, once every read that began before
//!      (and so may still use a freed block) has ended (`tarn_objects::reclaim`; reads
//!      that begin meanwhile never wait);
//!   8. the intent log learns that N committed.
//!
//! What a crash leaves. Before step 6 completes on some device, import finds N-1's
//! uberblock (the newest whose root verifies): N's blocks were all written into space
//! that was free in N-1 (frees are deferred until step 7), so N-1's tree is whole, and
//! the fsyncs acknowledged during N are replayed from the log N-1's root names. A torn
//! uberblock fails its checksum and is passed over. After step 6, N is committed; frees
//! not yet released are not lost, as import rebuilds free space from the tree. A failure
//! at any step (an I/O error, no space) returns an error instead: no uberblock is
//! written, the engine suspends the pool, and an export and import resume from N-1 plus
//! the log.
//!
//! Locks: the barrier only during quiesce; `datasets` shared during quiesce; object
//! locks one at a time inside each dataset's sync; space-map mutexes briefly per claim
//! or free; no lock in step 7, which waits only for the reads begun before it.
//!
//! Owns: the order of a commit and the MOS content.
//!
//! Promises: the uberblock is written only after every block it reaches is flushed
//! (`Zio::write_uberblock` asserts it against a write mark taken after step 4); a freed
//! block is reused only after the txg that freed it committed; a failed step commits
//! nothing.
//!
//! Must never: write an uberblock before the blocks it points to are flushed, release a
//! free before its txg's uberblock is durable, or take the txg barrier.
use std::sync::Arc;

use tarn_dataset::{Dataset, FsError};
use tarn_txg::SyncTarget;
use tarn_vdev::Uberblock;
use tarn_zil::LogRoot;
use tarn_zio::{BlockPtr, PendingBlock};

use crate::error::{CommitError, PoolError};
use crate::mos::{
    dnode_hex, ChunkRecord, DatasetRecord, DeadListRecord, Mos, OriginRecord, SnapRecord, DEADLIST_VERSION,
};
use crate::pool::{now_secs, Destroyed, DsMeta, Frozen, Inner, Pool};
use crate::snapshots::{self, deadlist, DeadList, FoundFrees, HeadReset, Origin, Snap, SnapOp};

impl SyncTarget for Inner {
    type Error = CommitError;

    fn quiesce(&self, txg: u64) {
        let sets = self.datasets.read();
        let mut datasets = Vec::new();
        for (name, (meta, ds)) in sets.iter() {
            if let Err(source) = ds.quiesce(txg) {
                self.quiesce_error.lock().get_or_insert(CommitError::Dataset { dataset: name.clone(), source });
            }
            datasets.push((name.clone(), meta.clone(), ds.clone()));
        }
        let destroyed = std::mem::take(&mut *self.destroy_queue.lock());
        let snap_ops = std::mem::take(&mut *self.snap_ops.lock());
        let head_resets = std::mem::take(&mut *self.head_resets.lock());
        *self.frozen.lock() =
            Some(Frozen { datasets, destroyed, next_dataset_id: *self.next_dataset_id.lock(), snap_ops, head_resets });
    }

    fn sync(&self, txg: u64) -> Result<(), CommitError> {
        if let Some(e) = self.quiesce_error.lock().take() {
            return Err(e);
        }
        let mut frozen = self.frozen.lock().take().expect("quiesce ran before sync");
        self.write_txg(txg, &mut frozen)?;
        // The txg's records were freed as it wrote them: past a few MiB of them, the
        // allocator gives the pages back now rather than at the end of their decay, so
        // what it holds does not grow with the write rate (docs/design/memory.md).
        tarn_arc::release_free_pages_over(tarn_arc::FREE_PAGES_KEPT);
        Ok(())
    }
}

impl Inner {
    /// Steps 1 to 8 of the module header.
    fn write_txg(&self, txg: u64, frozen: &mut Frozen) -> Result<(), CommitError> {
        let zio = &self.ctx.zio;
        for (name, meta, ds) in &frozen.datasets {
            let floor = snapshots::floor(&self.snaps.read(), meta);
            let synced = ds.sync(txg).map_err(|source| CommitError::Dataset { dataset: name.clone(), source })?;
            // The txg's free list: zio's deferred frees, released only once this txg
            // has committed (step 7). A block born at or before the floor is still a
            // snapshot's: it stays allocated, on the head's dead list. An orphan (written
            // for the intent log, never in a tree) is no snapshot's, whatever its birth: a
            // block written late for a txg's record may be freed a txg or two later.
            let mut heads = self.head_dead.lock();
            let mut dead = heads.entry(meta.id).or_insert_with(|| Some(DeadList::default())).as_mut();
            for bp in &synced.freed {
                if bp.birth > floor {
                    zio.free(bp);
                } else if let Some(list) = dead.as_mut() {
                    list.push(zio, *bp, txg)?;
                }
            }
            for bp in &synced.orphans {
                zio.free(bp);
            }
        }
        for gone in &frozen.destroyed {
            self.free_destroyed(gone);
        }
        self.reset_heads(&frozen.head_resets);
        self.apply_snap_ops(txg, frozen)?;
        for list in self.head_dead.lock().values_mut().flatten() {
            list.flush(zio, txg)?;
        }
        let log = self.retire_log(txg)?;
        let mos_bp = self.write_mos(txg, frozen, log)?;
        let covers = zio.write_mark();
        zio.flush()?;
        let ub = Uberblock {
            txg,
            pool_guid: self.guid,
            guid_sum: self.label.lock().tree.guid_sum(),
            timestamp: now_secs(),
            root: mos_bp.to_bytes(),
        };
        zio.write_uberblock(&ub, covers)?;
        // A read that may still use a block this txg freed opened its reclaim section
        // before this point (it found the pointer in a tree this txg changed since, and
        // opened the section first): once those sections end, the space is free to reuse.
        self.ctx.reclaim.wait_for_readers();
        zio.release_deferred();
        self.zil.txg_committed(txg);
        Ok(())
    }

    /// Frees every block of a destroyed dataset. A block that cannot be read is freed
    /// all the same; what it pointed to cannot be known and stays allocated until the
    /// next import rebuilds the space maps.
    /// Only blocks born after its floor are its own: the rest are a snapshot's (a
    /// clone's origin, or the snapshot a rollback returns to).
    fn free_destroyed(&self, gone: &Destroyed) {
        let zio = &self.ctx.zio;
        snapshots::for_each_born_after(zio, &gone.meta, gone.floor, |bp| zio.free(bp));
    }

    /// Resets the dead lists of heads replaced or gone in this txg (see `HeadReset`).
    fn reset_heads(&self, resets: &[(u64, HeadReset)]) {
        let mut heads = self.head_dead.lock();
        for (id, reset) in resets {
            if let Some(Some(old)) = heads.remove(id) {
                old.free_chunks(&self.ctx.zio);
            }
            match reset {
                HeadReset::Gone | HeadReset::Empty => {}
                HeadReset::TakeFrom(from) => {
                    // A dataset with no entry has a known, empty list.
                    let taken = heads.remove(from).unwrap_or_else(|| Some(DeadList::default()));
                    heads.insert(*id, taken);
                }
            }
        }
    }

    /// Takes and destroys the snapshots queued in txg `txg`, after every dataset wrote
    /// its part of it: a snapshot taken now is the root `txg` commits, and gets the
    /// head's dead list (the head starts an empty one).
    fn apply_snap_ops(&self, txg: u64, frozen: &mut Frozen) -> Result<(), CommitError> {
        let ops = std::mem::take(&mut frozen.snap_ops);
        for op in &ops {
            let head_of = |id: u64| frozen.datasets.iter().find(|(_, m, _)| m.id == id);
            match op {
                SnapOp::Take { dataset, name, creation, guid } => {
                    // A dataset destroyed in the same txg has no snapshot to take.
                    let Some((_, _, ds)) = head_of(*dataset) else { continue };
                    if let Some(Some(list)) = self.head_dead.lock().get_mut(dataset) {
                        list.seal(&self.ctx.zio, txg)?;
                    }
                    let mut snaps = self.snaps.write();
                    // Under `snaps` (then `head_dead`): a space count sees the list on
                    // the head or on the new snapshot, never on neither.
                    let old = self.head_dead.lock().insert(*dataset, Some(DeadList::default()));
                    let dead = old.unwrap_or_else(|| Some(DeadList::default()));
                    let snap = Snap {
                        name: name.clone(),
                        txg,
                        meta: ds.meta_dnode(),
                        next_obj: ds.next_obj(),
                        unlinked: ds.unlinked_syncing(),
                        creation: *creation,
                        referenced: ds.used(),
                        guid: *guid,
                        dead,
                    };
                    snaps.entry(*dataset).or_default().push(snap);
                }
                SnapOp::Destroy { dataset, name, found } => {
                    self.destroy_snap(txg, *dataset, name, found.as_ref(), head_of(*dataset))?
                }
                SnapOp::Promote { clone } => self.promote(*clone, &mut frozen.datasets),
            }
        }
        Ok(())
    }

    /// `tarn promote` of dataset `clone_id` (origin O@S at txg t): O's snapshots up to S
    /// move to the clone's list (before its own, all newer than t), the clone takes O's
    /// origin, O becomes a clone of the clone's S, and clones of the moved snapshots
    /// follow them. Every floor stays what it was — the clone's is still t (now its
    /// newest-by-t snapshot S), O's is still its newest snapshot or t — so the frees this
    /// txg already decided and the import's claim walk agree with the new lists.
    /// `datasets` is the frozen list this txg's MOS is written from; the live map is
    /// changed the same way.
    fn promote(&self, clone_id: u64, datasets: &mut [(String, DsMeta, Arc<Dataset>)]) {
        let Some(origin) = datasets.iter().find(|(_, m, _)| m.id == clone_id).and_then(|(_, m, _)| m.origin.clone())
        else {
            return;
        };
        let moved: Vec<String> = {
            let mut snaps = self.snaps.write();
            let from = snaps.entry(origin.dataset).or_default();
            let split = from.partition_point(|s| s.txg <= origin.txg);
            let mut taken: Vec<Snap> = from.drain(..split).collect();
            let names = taken.iter().map(|s| s.name.clone()).collect();
            let to = snaps.entry(clone_id).or_default();
            assert!(to.iter().all(|s| s.txg > origin.txg), "a clone's own snapshots are newer than its origin");
            taken.append(to);
            *to = taken;
            names
        };
        let old_origin_name = datasets.iter().find(|(_, m, _)| m.id == origin.dataset).map(|(n, _, _)| n.clone());
        let old_origin_of_o =
            datasets.iter().find(|(_, m, _)| m.id == origin.dataset).and_then(|(_, m, _)| m.origin.clone());
        let repoint = |id: u64, o: &mut Option<Origin>| {
            if id == clone_id {
                *o = old_origin_of_o.clone();
            } else if id == origin.dataset {
                *o = Some(Origin { dataset: clone_id, snapshot: origin.snapshot.clone(), txg: origin.txg });
            } else if let Some(x) = o.as_mut().filter(|x| x.dataset == origin.dataset && moved.contains(&x.snapshot)) {
                x.dataset = clone_id;
            }
        };
        for (_, meta, _) in datasets.iter_mut() {
            repoint(meta.id, &mut meta.origin);
        }
        for (meta, _) in self.datasets.write().values_mut() {
            repoint(meta.id, &mut meta.origin);
        }
        if let Some(o) = old_origin_name {
            let mut open = self.snap_open.lock();
            for name in &moved {
                open.remove(&format!("{o}@{name}"));
            }
        }
    }

    /// Frees the blocks only snapshot `name` of dataset `id` holds, and drops it. Through
    /// the next tree's dead list when it is known (no walk: `deadlist::destroy_through`);
    /// else those the command found (`found`) if the snapshot still lies between the same
    /// trees, else found now by walking — and the next tree's list stays not known.
    fn destroy_snap(
        &self,
        txg: u64,
        id: u64,
        name: &str,
        found: Option<&FoundFrees>,
        head: Option<&(String, DsMeta, Arc<Dataset>)>,
    ) -> Result<(), CommitError> {
        let Some((_, meta, ds)) = head else { return Ok(()) };
        let list = self.snaps.read().get(&id).cloned().unwrap_or_default();
        let Some(i) = list.iter().position(|s| s.name == name) else { return Ok(()) };
        let prev = if i > 0 { list[i - 1].txg } else { meta.origin.as_ref().map_or(0, |o| o.txg) };
        let zio = &self.ctx.zio;
        let snap = &list[i];
        let next_snap = list.get(i + 1);
        let next_dead = match next_snap {
            Some(n) => n.dead.clone(),
            None => self.head_dead.lock().get(&id).cloned().unwrap_or_else(|| Some(DeadList::default())),
        };
        let new_next_dead = match next_dead {
            Some(next) => deadlist::destroy_through(zio, next, prev, snap.dead.clone(), txg)?,
            None => {
                let next_txg = next_snap.map(|n| n.txg);
                match found.filter(|f| (f.prev, f.snap, Some(f.next)) == (prev, snap.txg, next_txg)) {
                    Some(f) => f.blocks.iter().for_each(|bp| zio.free(bp)),
                    None => {
                        let head_meta = ds.meta_dnode();
                        let next = next_snap.map_or(&head_meta, |n| &n.meta);
                        snapshots::for_each_unique(zio, &snap.meta, prev, snap.txg, next, |bp| zio.free(bp));
                    }
                }
                snap.dead.iter().for_each(|d| d.free_chunks(zio));
                None
            }
        };
        // One change under `snaps` (then `head_dead`): a space count never sees the
        // snapshot beside the list it was merged into.
        let mut snaps = self.snaps.write();
        match next_snap {
            Some(n) => {
                if let Some(s) = snaps.get_mut(&id).and_then(|v| v.iter_mut().find(|s| s.name == n.name)) {
                    s.dead = new_next_dead;
                }
            }
            None => {
                self.head_dead.lock().insert(id, new_next_dead);
            }
        }
        if let Some(v) = snaps.get_mut(&id) {
            v.retain(|s| s.name != name);
        }
        Ok(())
    }

    /// What this txg's root says of the log; the log blocks it no longer needs (and the
    /// blocks written in place only they pointed at) are freed.
    fn retire_log(&self, txg: u64) -> Result<LogRoot, CommitError> {
        let root = self.zil.head_for_txg(txg)?;
        for e in &root.obsolete {
            self.ctx.zio.free_extent(e);
        }
        for bp in &root.obsolete_indirect {
            self.ctx.zio.free(bp);
        }
        Ok(root)
    }

    /// Writes txg `txg`'s MOS and frees the previous one; returns its pointer.
    fn write_mos(&self, txg: u64, frozen: &Frozen, log: LogRoot) -> Result<BlockPtr, CommitError> {
        let zio = &self.ctx.zio;
        let mut mos = self.build_mos(frozen);
        mos.zil = Some(log.head);
        mos.zil_replay = log.replay;
        mos.history = self.history.for_root(txg);
        let mos = mos.encode();
        let block = PendingBlock::pool_metadata(&mos);
        let bp = zio.write_blocks(std::slice::from_ref(&block), txg)?[0];
        if let Some(old) = self.mos_bp.lock().replace(bp) {
            zio.free(&old);
        }
        Ok(bp)
    }

    fn build_mos(&self, frozen: &Frozen) -> Mos {
        let snaps = self.snaps.read();
        let version = self.root_version.load(std::sync::atomic::Ordering::Relaxed);
        let with_dead = version >= DEADLIST_VERSION;
        let heads = self.head_dead.lock();
        let head_dead = |id: u64| match heads.get(&id) {
            Some(list) => list.as_ref().map(dead_record),
            None => Some(DeadListRecord::default()),
        };
        let datasets = frozen
            .datasets
            .iter()
            .map(|(name, meta, ds)| DatasetRecord {
                id: meta.id,
                name: name.clone(),
                props: meta.props.clone(),
                meta_dnode: dnode_hex(&ds.meta_dnode()),
                next_obj: ds.next_obj(),
                unlinked: ds.unlinked_syncing(),
                creation: meta.creation,
                snapshots: snaps
                    .get(&meta.id)
                    .map(|v| v.iter().map(|s| snap_record(s, with_dead)).collect())
                    .unwrap_or_default(),
                origin: meta.origin.as_ref().map(|o| OriginRecord {
                    dataset: o.dataset,
                    snapshot: o.snapshot.clone(),
                    txg: o.txg,
                }),
                deadlist: head_dead(meta.id).filter(|_| with_dead),
            })
            .collect();
        drop(heads);
        drop(snaps);
        let errors = self
            .ctx
            .zio
            .vdevs
            .leaves()
            .map(|l| {
                let s = l.status();
                (l.guid.to_string(), [s.read_errors, s.write_errors, s.checksum_errors])
            })
            .collect();
        let missed_txgs = self
            .ctx
            .zio
            .vdevs
            .leaves()
            .filter_map(|l| l.missed_txgs().map(|(a, b)| (l.guid.to_string(), [a, b])))
            .collect();
        self.absorb_failed_reads();
        let (errlog, errlog_last) = {
            let log = self.errlog.lock();
            (log.current.iter().copied().collect(), log.last.iter().copied().collect())
        };
        Mos {
            version,
            pool_name: self.name.clone(),
            pool_guid: self.guid,
            next_dataset_id: frozen.next_dataset_id,
            datasets,
            errors,
            zil: None,
            zil_replay: None,
            scan: self.scan.record(),
            errlog,
            errlog_last,
            missed_txgs,
            history: None,
            pool_props: self.pool_props.lock().clone(),
        }
    }
}

/// The MOS record of a dead list whose every entry is in a chunk.
fn dead_record(list: &DeadList) -> DeadListRecord {
    assert!(list.is_flushed(), "a dead list the MOS names has every entry in a chunk");
    let chunks =
        list.chunks.iter().map(|c| ChunkRecord::new(&c.bp, c.entries, c.min_birth, c.max_birth, c.bytes)).collect();
    DeadListRecord { chunks }
}

/// `with_dead`: the root's version records dead lists.
fn snap_record(s: &Snap, with_dead: bool) -> SnapRecord {
    SnapRecord {
        name: s.name.clone(),
        txg: s.txg,
        meta_dnode: dnode_hex(&s.meta),
        next_obj: s.next_obj,
        unlinked: s.unlinked.clone(),
        creation: s.creation,
        referenced: s.referenced.physical,
        logicalreferenced: s.referenced.logical,
        guid: s.guid,
        deadlist: s.dead.as_ref().filter(|_| with_dead).map(dead_record),
    }
}

impl Pool {
    /// Commits everything changed so far.
    pub fn sync(&self) -> Result<(), PoolError> {
        self.inner.ctx.txg.sync_all().map_err(FsError::from)?;
        Ok(())
    }

    /// Commits a txg even if nothing else changed (to persist counters, or to point the
    /// root at a new log chain).
    pub(crate) fn force_txg(&self) -> Result<(), PoolError> {
        let txg = self.inner.ctx.txg.hold(0).map_err(FsError::from)?.txg;
        self.inner.ctx.txg.wait_synced(txg).map_err(FsError::from)?;
        Ok(())
    }
}

//! An object set: the dnode table (object 0, itself an object whose records are arrays
//! of dnodes) and the objects it describes, loaded on demand and cached.
//!
//! Owns: the object cache (ZFS's dnode cache: a CLOCK whose objects are charged to the
//! ARC's budget and evicted when clean, see `trim`), object ids, the set of objects dirty
//! in the open txg and of those syncing, the blocks written late for the intent log until
//! a sync returns them, and the sync of the whole set (data records, then indirect
//! blocks, then the dnode table).
//!
//! Promises: a sync writes only new blocks and reports every block it no longer needs —
//! blocks it replaced, blocks cut off by truncates and frees, early-written blocks no
//! record adopted, and late blocks of its txg or an older one — in its `SyncResult`, for
//! the caller to free in the same txg; an
//! object freed in a txg leaves the cache only after that txg's sync; an object leaves
//! the cache on its own only when a reload from disk gives it back exactly: nobody holds
//! it (an open handle or a lock holder does), it has no change in the open or syncing
//! txg and its last change is committed.
//!
//! Must never: free a block itself (the pool frees what a sync returns: zio's deferred
//! frees are the txg's free list, released only after the txg commits), or commit.
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use hashlink::LinkedHashMap;
use parking_lot::{Mutex, MutexGuard, RwLock};
use tarn_zio::{BlockPtr, BlockType, ChecksumKind, Compression, PageId, PendingBlock};

use crate::dnode::{Dnode, ObjType, DNODE_SIZE};
use crate::early::adoptable;
use crate::object::{FreshObject, ObjState, Object, Record, StoredRecord, OBJECT_BYTES};
use crate::{Ctx, ObjError};

/// Records of the dnode table: 64 dnodes each.
pub const META_BLKSZ: u32 = 16384;

/// How the dataset wants this txg's blocks encoded.
#[derive(Clone, Copy, Debug)]
pub struct SyncPolicy {
    pub compression: Compression,
    pub checksum: ChecksumKind,
    /// `primarycache`: which written blocks stay in the ARC.
    pub cache: tarn_zio::CachePolicy,
}

/// What a sync did: its space accounting, and the blocks the caller must free in the
/// txg being synced.
#[derive(Default, Debug, Clone)]
pub struct SyncResult {
    pub allocated_physical: u64,
    pub allocated_logical: u64,
    pub freed_physical: u64,
    pub freed_logical: u64,
    /// Blocks no tree points at any more: replaced by this sync, cut off by a truncate,
    /// or of a freed object. Counted in `freed_*`.
    pub freed: Vec<BlockPtr>,
    /// Blocks written early for the intent log that no record adopted. Never counted as
    /// allocated; the log may point at them until this txg commits.
    pub orphans: Vec<BlockPtr>,
}

impl SyncResult {
    /// Every block to free with this txg.
    pub fn blocks_to_free(&self) -> impl Iterator<Item = &BlockPtr> {
        self.freed.iter().chain(&self.orphans)
    }

    fn count_freed(&mut self) {
        for bp in &self.freed {
            self.freed_physical += bp.psize as u64;
            self.freed_logical += bp.lsize as u64;
        }
    }

    fn count_allocated(&mut self, psize: u64, lsize: u64) {
        self.allocated_physical += psize;
        self.allocated_logical += lsize;
    }
}

pub struct ObjSet {
    ctx: Arc<Ctx>,
    /// The dataset's id: the `objset` of its pages' logical identity.
    id: u64,
    meta: Object,
    /// Read-mostly: every file operation looks its object up here. In CLOCK order (the
    /// front is where the hand is).
    cache: RwLock<LinkedHashMap<u64, Arc<Object>>>,
    next_obj: AtomicU64,
    /// Counts objects leaving the cache (trimmed or freed), under its write lock: a load
    /// that raced a departure reads its dnode again (`get`).
    departures: AtomicU64,
    dirty: Mutex<BTreeSet<u64>>,
    syncing: Mutex<Vec<u64>>,
    /// Blocks written late for the intent log (`early.rs`), each with the txg of the
    /// record it holds: the first sync of that txg or a later one returns it as an orphan.
    late_orphans: Mutex<Vec<(u64, BlockPtr)>>,
}

impl ObjSet {
    /// Opens object set `id` (its dataset's id) from its meta dnode (`None` for a new,
    /// empty set).
    pub fn open(ctx: Arc<Ctx>, id: u64, meta: Option<Dnode>, next_obj: u64) -> ObjSet {
        let meta = meta.unwrap_or_else(|| Dnode::new(ObjType::Meta, META_BLKSZ, 0, 0));
        ObjSet {
            ctx,
            id,
            meta: Object::new(id, 0, meta),
            cache: RwLock::new(LinkedHashMap::new()),
            next_obj: AtomicU64::new(next_obj.max(1)),
            departures: AtomicU64::new(0),
            dirty: Mutex::new(BTreeSet::new()),
            syncing: Mutex::new(Vec::new()),
            late_orphans: Mutex::new(Vec::new()),
        }
    }

    pub fn ctx(&self) -> &Arc<Ctx> {
        &self.ctx
    }

    pub fn next_obj(&self) -> u64 {
        self.next_obj.load(Ordering::Relaxed)
    }

    pub fn meta_dnode(&self) -> Dnode {
        self.meta.dnode()
    }

    /// The object `id`, loading its dnode if needed.
    pub fn get(&self, id: u64) -> Result<Arc<Object>, ObjError> {
        let cached = self.cache.read().get(&id).cloned();
        if let Some(o) = cached {
            o.touch();
            if o.lock().gone {
                return Err(ObjError::NoObject(id));
            }
            return Ok(o);
        }
        if id == 0 || id >= self.next_obj() {
            return Err(ObjError::NoObject(id));
        }
        let obj = loop {
            let departures = self.departures.load(Ordering::Acquire);
            let mut raw = [0u8; DNODE_SIZE];
            let n = self.meta.lock().read(&self.ctx, id * DNODE_SIZE as u64, &mut raw, tarn_zio::CachePolicy::All)?;
            if n < DNODE_SIZE {
                return Err(ObjError::NoObject(id));
            }
            let dnode = Dnode::decode(&raw)?.ok_or(ObjError::NoObject(id))?;
            let mut cache = self.cache.write();
            if let Some(o) = cache.get(&id) {
                break o.clone(); // loaded by another thread meanwhile
            }
            if self.departures.load(Ordering::Acquire) != departures {
                // An object left the cache while this dnode was read: if it was this one,
                // changed, synced and evicted meanwhile, the bytes read may be older than
                // its last change. Read again.
                continue;
            }
            let o = Arc::new(Object::new(self.id, id, dnode));
            cache.insert(id, o.clone());
            self.ctx.zio.arc.charge(tarn_arc::Outside::Objects, OBJECT_BYTES);
            break o;
        };
        self.trim();
        Ok(obj)
    }

    /// Evicts clean objects (CLOCK: one looked up since the hand last passed goes round
    /// once more) while decoded objects are over their share of the ARC's budget. Never
    /// waits for an object's lock.
    pub fn trim(&self) {
        let arc = &self.ctx.zio.arc;
        if !arc.objects_over_share() {
            return;
        }
        let synced = self.ctx.txg.synced();
        let mut evicted = Vec::new();
        {
            let mut cache = self.cache.write();
            // Lock order: the cache, then the dirty set (see `quiesce`).
            let dirty = self.dirty.lock();
            // Each object is looked at at most twice (once to clear its bit).
            let mut steps = 2 * cache.len();
            while steps > 0 && arc.objects_over_share() {
                steps -= 1;
                let Some((&id, obj)) = cache.front() else { break };
                let charged = if obj.touched.swap(false, Ordering::Relaxed) || dirty.contains(&id) {
                    None
                } else {
                    obj.evictable(synced)
                };
                match charged {
                    Some(bytes) => {
                        evicted.extend(cache.remove(&id));
                        self.departures.fetch_add(1, Ordering::Release);
                        arc.discharge(tarn_arc::Outside::Objects, bytes);
                    }
                    None => {
                        cache.to_back(&id);
                    }
                }
            }
            // Objects that left (now or since the table was biggest) leave no room behind
            // in it (issue #11).
            tarn_arc::compact::compact(&mut *cache);
        }
        drop(evicted); // freed outside the locks
    }

    /// The object `id` even if it was freed in a txg that has not synced yet (the intent
    /// log may still need bytes written to it before that).
    pub(crate) fn get_including_freed(&self, id: u64) -> Result<Arc<Object>, ObjError> {
        let cached = self.cache.read().get(&id).cloned();
        match cached {
            Some(o) => Ok(o),
            None => self.get(id),
        }
    }

    /// The dataset's id (the object set's).
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Whether object `id` is in the cache, even freed and not yet synced.
    pub(crate) fn cache_holds(&self, id: u64) -> bool {
        self.cache.read().contains_key(&id)
    }

    /// Whether object `id` was freed in a txg that has not synced yet (its slot is not
    /// free until then).
    pub fn holds_freed(&self, id: u64) -> bool {
        let cached = self.cache.read().get(&id).cloned();
        cached.is_some_and(|o| o.lock().gone)
    }

    pub(crate) fn cache_insert(&self, id: u64, obj: Arc<Object>) {
        self.cache.write().insert(id, obj);
    }

    /// Ids below `next` are taken from now on (a receive claims the sender's ids).
    pub fn raise_next_obj(&self, next: u64) {
        self.next_obj.fetch_max(next, Ordering::Relaxed);
    }

    /// A new object in the open txg, reachable by no name yet (see `FreshObject`).
    pub fn alloc(&self, dnode: Dnode) -> FreshObject {
        let id = self.next_obj.fetch_add(1, Ordering::Relaxed);
        let obj = Arc::new(Object::new(self.id, id, dnode));
        self.cache.write().insert(id, obj.clone());
        self.ctx.zio.arc.charge(tarn_arc::Outside::Objects, OBJECT_BYTES);
        self.dirty.lock().insert(id);
        self.trim();
        FreshObject(obj)
    }

    /// Records that object `id` changed in the open txg.
    pub fn mark_dirty(&self, id: u64) {
        self.dirty.lock().insert(id);
    }

    /// Frees object `obj` in the open txg `txg`: all its blocks and its dnode slot.
    pub fn free_object(&self, obj: &Object, txg: u64) {
        obj.lock().free(txg);
        self.mark_dirty(obj.id());
    }

    /// Freezes the open txg's changes (called with the txg barrier held).
    pub fn quiesce(&self, txg: u64) -> Result<(), ObjError> {
        // The cache's lock before the dirty set's, held until every object is quiesced:
        // `trim` (under the write lock) must never see an object that has left the dirty
        // set but does not have its syncing changes yet (a change to its dnode alone
        // leaves no record to tell it is dirty).
        let cache = self.cache.read();
        let ids: Vec<u64> = std::mem::take(&mut *self.dirty.lock()).into_iter().collect();
        for &id in &ids {
            let obj = cache.get(&id).expect("invariant broken: a dirty object left the object cache");
            obj.lock().quiesce(&self.ctx.zio, txg)?;
        }
        *self.syncing.lock() = ids;
        Ok(())
    }

    pub fn has_changes(&self) -> bool {
        !self.dirty.lock().is_empty()
    }

    /// Writes the syncing txg's changes: records, indirect blocks, then the dnode table.
    /// Returns the accounting and the blocks to free; the new meta dnode is
    /// `meta_dnode()` afterwards.
    pub fn sync(&self, txg: u64, policy: SyncPolicy) -> Result<SyncResult, ObjError> {
        let ids = std::mem::take(&mut *self.syncing.lock());
        let objects: Vec<Arc<Object>> = {
            let cache = self.cache.read();
            ids.iter().map(|id| cache[id].clone()).collect()
        };
        let mut result = SyncResult::default();
        self.take_late_orphans(txg, &mut result.orphans);
        let refs: Vec<&Object> = objects.iter().map(|o| o.as_ref()).collect();
        let dnodes = self.sync_objects(&refs, txg, policy, &mut result)?;

        // Every synced object's dnode goes into the dnode table, in this same txg.
        {
            let mut meta = self.meta.lock_for_sync();
            for (obj, raw) in objects.iter().zip(&dnodes) {
                meta_write_syncing(&mut meta, &self.ctx, obj.id(), raw)?;
            }
        }
        // The dnode table's own dnode goes into the pool's root, not into a table.
        self.sync_objects(&[&self.meta], txg, SyncPolicy { compression: Compression::Lz4, ..policy }, &mut result)?;
        result.count_freed();
        self.evict_freed(&objects, txg);
        drop(objects);
        // The objects this txg wrote are clean once it commits; a lookup that hits the
        // cache never trims, so the sync does.
        self.trim();
        Ok(result)
    }

    /// Notes `bp`, written late for a record of txg `txg`, for the first sync of `txg` or
    /// a later txg to return as an orphan: freed with a txg no older than its record's, it
    /// stays allocated for as long as a replay may need it.
    pub(crate) fn add_late_orphan(&self, txg: u64, bp: BlockPtr) {
        self.late_orphans.lock().push((txg, bp));
    }

    /// Moves the late blocks of txgs up to `txg` to `orphans`.
    fn take_late_orphans(&self, txg: u64, orphans: &mut Vec<BlockPtr>) {
        self.late_orphans.lock().retain(|&(of, bp)| {
            let due = of <= txg;
            if due {
                orphans.push(bp);
            }
            !due
        });
    }

    /// Drops from the cache the objects freed in txg `txg`.
    fn evict_freed(&self, objects: &[Arc<Object>], txg: u64) {
        // Decide with each object's lock alone, then take the cache lock: writers hold an
        // object's lock while they add to the cache (create), so holding the cache lock
        // while waiting for an object lock would deadlock against them.
        let evict: Vec<(u64, u64)> = objects
            .iter()
            .filter_map(|obj| {
                let st = obj.lock();
                // Only an object freed in *this* txg may leave the cache. `gone` is
                // open-txg state: an object written in txg N and unlinked in N+1 while N
                // syncs is gone already, but N+1 still has to quiesce and free it (it is in
                // `dirty`), so it must stay cached until N+1's sync.
                let leaves = st.gone
                    && st.last_dirty_txg <= txg
                    && st.open.records.is_empty()
                    && st.open.stored.is_empty()
                    && !self.dirty.lock().contains(&obj.id());
                leaves.then_some((obj.id(), st.charged))
            })
            .collect();
        if !evict.is_empty() {
            let mut cache = self.cache.write();
            for (id, charged) in evict {
                if cache.remove(&id).is_some() {
                    self.departures.fetch_add(1, Ordering::Release);
                    self.ctx.zio.arc.discharge(tarn_arc::Outside::Objects, charged);
                }
            }
        }
    }

    /// Writes the data records of `objects` in one batch, then their indirect blocks.
    /// Returns each object's dnode as this txg leaves it, for the dnode table.
    fn sync_objects(
        &self,
        objects: &[&Object],
        txg: u64,
        policy: SyncPolicy,
        result: &mut SyncResult,
    ) -> Result<Vec<[u8; DNODE_SIZE]>, ObjError> {
        let zio = &self.ctx.zio;
        let mut work: Vec<(usize, u64, Work)> = Vec::new();
        for (i, obj) in objects.iter().enumerate() {
            let mut st = obj.lock_for_sync();
            plan_object(&mut st, zio, txg, i, &mut work, result)?;
        }
        let block_type = |st: &ObjState| match st.dnode.obj_type {
            ObjType::Meta => BlockType::Dnodes,
            ObjType::Dir => BlockType::Directory,
            _ => BlockType::Data,
        };
        let types: Vec<BlockType> = objects.iter().map(|o| block_type(&o.lock_for_sync())).collect();
        let ptrs = {
            let pending: Vec<PendingBlock> = work
                .iter()
                .filter_map(|(i, blkid, item)| match item {
                    Work::Stored(s) => Some(PendingBlock {
                        data: s.data.as_slice(),
                        compression: s.how.compression,
                        checksum: policy.checksum,
                        level: 0,
                        block_type: types[*i],
                        cache: policy.cache,
                        page: Some(PageId { objset: self.id, object: objects[*i].id(), blkid: *blkid }),
                        objset: Some(self.id),
                        stored: Some(s.how),
                    }),
                    Work::Write(r) => Some(PendingBlock {
                        data: r.as_slice(),
                        compression: policy.compression,
                        checksum: policy.checksum,
                        level: 0,
                        block_type: types[*i],
                        cache: policy.cache,
                        page: Some(PageId { objset: self.id, object: objects[*i].id(), blkid: *blkid }),
                        objset: Some(self.id),
                        stored: None,
                    }),
                    _ => None,
                })
                .collect();
            zio.write_blocks(&pending, txg)?
        };
        let mut written = ptrs.into_iter();
        for (i, blkid, item) in work {
            let bp = match item {
                Work::Write(_) | Work::Stored(_) => Some(written.next().expect("one pointer per written record")),
                Work::Adopt(bp) => Some(bp),
                Work::Hole => None,
            };
            if let Some(bp) = &bp {
                result.count_allocated(bp.psize as u64, bp.lsize as u64);
            }
            let mut st = objects[i].lock_for_sync();
            if let Some(old) = st.tree.set(zio, blkid, bp)? {
                result.freed.push(old);
            }
        }
        let mut dnodes = Vec::with_capacity(objects.len());
        for obj in objects {
            let mut st = obj.lock_for_sync();
            let (psize, lsize) = st.tree.sync(zio, txg, policy.checksum, policy.cache, &mut result.freed)?;
            dnodes.push(st.synced_dnode_bytes());
            st.finish_sync();
            if obj.id() != 0 {
                st.recharge(zio);
            }
            result.count_allocated(psize, lsize);
        }
        Ok(dnodes)
    }
}

/// Plans the sync of one object (the `i`-th): frees what its truncates and frees cut off,
/// then decides for each record of the syncing txg whether to write it, adopt the block
/// written early for it, or leave a hole.
fn plan_object(
    st: &mut MutexGuard<'_, ObjState>,
    zio: &tarn_zio::Zio,
    txg: u64,
    i: usize,
    work: &mut Vec<(usize, u64, Work)>,
    result: &mut SyncResult,
) -> Result<(), ObjError> {
    // A truncate frees the cut-off blocks before this txg's records land, so a record
    // written after the truncate in the same txg survives it.
    let cut = if st.syncing.free_object { Some(0) } else { st.syncing.truncate_blocks };
    if let Some(first) = cut {
        st.tree.free_from(zio, first, &mut result.freed)?;
    }
    let mut early = std::mem::take(&mut st.syncing.early);
    result.orphans.append(&mut st.syncing.orphans);
    for (&blkid, rec) in &st.syncing.records {
        let hole = rec.is_empty() || rec.iter().all(|&b| b == 0);
        let written_early = early.remove(&blkid);
        let item = if hole {
            result.orphans.extend(written_early.map(|(_, bp)| bp));
            Work::Hole
        } else {
            match adoptable(written_early, rec, txg, &mut result.orphans) {
                // Written in place by an fsync and unchanged since: adopt that block.
                Some(bp) => Work::Adopt(bp),
                None => Work::Write(rec.clone()),
            }
        };
        work.push((i, blkid, item));
    }
    // Records received as stored, unless a record of `records` replaced them since.
    for (&blkid, s) in &st.syncing.stored {
        if !st.syncing.records.contains_key(&blkid) {
            result.orphans.extend(early.remove(&blkid).map(|(_, bp)| bp));
            work.push((i, blkid, Work::Stored(s.clone())));
        }
    }
    // Early blocks whose record left this txg's changes (a truncate or free).
    result.orphans.extend(early.into_values().map(|(_, bp)| bp));
    Ok(())
}

/// What the sync does with one record of the syncing txg.
enum Work {
    Write(Record),
    /// A block received as its sender stored it, written as it is.
    Stored(StoredRecord),
    /// The block an fsync already wrote in place for this very record.
    Adopt(BlockPtr),
    Hole,
}

/// Writes dnode bytes for object `id` into the dnode table's syncing records.
fn meta_write_syncing(meta: &mut ObjState, ctx: &Ctx, id: u64, raw: &[u8; DNODE_SIZE]) -> Result<(), ObjError> {
    let off = id * DNODE_SIZE as u64;
    let blkid = off / META_BLKSZ as u64;
    let in_rec = (off % META_BLKSZ as u64) as usize;
    let rec = meta.syncing_record_mut(&ctx.zio, blkid)?;
    rec[in_rec..in_rec + DNODE_SIZE].copy_from_slice(raw);
    let end = off + DNODE_SIZE as u64;
    if end > meta.dnode.size {
        meta.dnode.size = end;
    }
    Ok(())
}

impl Drop for ObjSet {
    /// The cached objects give their charge back to the ARC's budget (a closed or
    /// destroyed dataset's objects).
    fn drop(&mut self) {
        let charged: u64 = self.cache.get_mut().values().map(|o| o.lock_for_sync().charged).sum();
        self.ctx.zio.arc.discharge(tarn_arc::Outside::Objects, charged);
    }
}

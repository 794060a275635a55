//! Receiving a send stream into an object set (ZFS's dmu_recv): objects are made at the
//! ids the stream names, with the dnode the sender's snapshot held, and their records
//! are set whole, so the received set is the sender's object for object.
//!
//! Owns: the object-level steps of a receive — claim an id, set a dnode's attributes,
//! set or free whole records.
//!
//! Promises: each step lands in the open txg `txg` its caller holds, like any change;
//! attributes are taken as sent (no time is "now"); a record set is exactly the block
//! given, stored as its sender stored it (same codec, same bytes: never compressed
//! again), and a freed one reads as zeros.
//!
//! Must never: be used on a set anyone else reads or writes (the pool receives into a
//! hidden dataset of its own), or touch the syncing txg's changes.
use std::sync::Arc;

use tarn_zio::StoredAs;

use crate::dnode::Dnode;
use crate::object::{ObjState, Object, StoredRecord, OBJECT_BYTES};
use crate::objset::ObjSet;
use crate::ObjError;

impl ObjSet {
    /// Makes object `id` with `dnode` (its tree empty) in the open txg `txg`. The id must
    /// be free: a receive frees an object the stream reuses, and lets that txg commit,
    /// before it claims the id again.
    pub fn claim(&self, id: u64, dnode: Dnode, txg: u64) -> Result<Arc<Object>, ObjError> {
        if id == 0 {
            return Err(ObjError::NoObject(0));
        }
        if self.get(id).is_ok() || self.cache_holds(id) {
            return Err(ObjError::InUse(id));
        }
        let mut dnode = dnode;
        dnode.root = None;
        dnode.nlevels = 0;
        let obj = Arc::new(Object::new(self.id(), id, dnode));
        self.cache_insert(id, obj.clone());
        self.ctx().zio.arc.charge(tarn_arc::Outside::Objects, OBJECT_BYTES);
        self.raise_next_obj(id + 1);
        obj.lock().created_in(txg);
        self.mark_dirty(id);
        Ok(obj)
    }
}

impl ObjState {
    /// Takes every attribute of `d` as sent — type, block size, size, times, mode,
    /// owner, links, parent — keeping this object's tree. A size below the current one
    /// drops the records past it. Loaded directory entries are dropped: the stream sets
    /// the directory's records themselves.
    pub fn receive_attrs(&mut self, zio: &tarn_zio::Zio, txg: u64, d: &Dnode) -> Result<(), ObjError> {
        if d.size < self.dnode.size {
            self.truncate(zio, txg, d.size)?;
        }
        let (root, nlevels) = (self.dnode.root, self.dnode.nlevels);
        self.dnode = d.clone();
        self.dnode.root = root;
        self.dnode.nlevels = nlevels;
        self.dir = None;
        self.dir_bytes = 0;
        self.dir_dirty = false;
        self.changed_in(txg);
        Ok(())
    }

    /// Sets record `blkid` to a block as its sender stored it: `data` compressed as `how`
    /// says, a whole record of this object's block size once decompressed. The caller
    /// has checked that `data` decompresses to `how.lsize` bytes, not all zeros (a stream
    /// sends a hole as FREE): the sync writes `data` as it is, never compressed again.
    pub fn receive_stored(&mut self, txg: u64, blkid: u64, data: Vec<u8>, how: StoredAs) -> Result<(), ObjError> {
        if u64::from(how.lsize) != self.blksz() {
            return Err(ObjError::RecordSize { len: how.lsize as usize, blksz: self.blksz() });
        }
        // A stored record replaces whatever this txg set at that index before.
        self.open.records.remove(&blkid);
        self.open.stored.insert(blkid, StoredRecord { data: Arc::new(data), how });
        self.changed_in(txg);
        Ok(())
    }

    /// Frees records `first..first + count` (they read as zeros, no block), stopping at
    /// the object's size: a hole past the end is no record.
    pub fn receive_free(&mut self, txg: u64, first: u64, count: u64) {
        let records = self.dnode.size.div_ceil(self.blksz().max(1));
        let end = first.saturating_add(count).min(records);
        for blkid in first..end {
            self.open.records.insert(blkid, Arc::new(Vec::new()));
        }
        self.open.stored.retain(|&b, _| b < first || b >= end);
        self.changed_in(txg);
    }
}

//! The dataset's side of a receive: a send stream's records applied to its object set,
//! each in the open txg like any change, bypassing names (the stream carries the
//! directories' records themselves) and the intent log (a receive is made durable by
//! the commit that ends it, never by fsync).
//!
//! Owns: the order of a record's steps on one object (hold, lock, change, mark dirty).
//!
//! Promises: a record either lands whole in one txg or fails with nothing changed for it;
//! space is reserved like a write's (`NoSpace` before anything is stored).
//!
//! Must never: be called on a dataset anyone reads or writes: the pool receives into a
//! hidden dataset and swaps it in at the stream's end.
use tarn_objects::Dnode;
use tarn_zio::StoredAs;

use crate::{Dataset, FsError, META_CHARGE};

impl Dataset {
    /// Object `id` takes dnode `d`'s attributes; it is created (at that id) if absent,
    /// and made again if the stream's object is another one (other type, generation or
    /// block size: the sender freed the id and reused it). True if it was made new (it
    /// has no records yet).
    pub fn recv_object(&self, id: u64, d: &Dnode) -> Result<bool, FsError> {
        if let Ok(obj) = self.os.get(id) {
            let same = {
                let st = obj.lock();
                let cur = st.dnode();
                cur.obj_type == d.obj_type && cur.gen == d.gen && cur.blksz == d.blksz
            };
            if same {
                let hold = self.hold(META_CHARGE)?;
                obj.lock().receive_attrs(self.zio(), hold.txg, d)?;
                self.os.mark_dirty(id);
                return Ok(false);
            }
            self.recv_free_objects(id, 1)?;
        }
        if self.os.get(id).is_err() && self.os_holds_freed(id) {
            // Freed in a txg not yet synced: its slot is free only once that commits.
            self.os.ctx().txg.sync_all()?;
        }
        let hold = self.hold(META_CHARGE)?;
        self.os.claim(id, d.clone(), hold.txg)?;
        Ok(true)
    }

    /// Sets record `blkid` of object `id` to a block as its sender stored it (`data`,
    /// compressed as `how` says; the caller checked it decompresses to a whole record).
    /// The block is written as it is: this dataset's compression does not apply.
    pub fn recv_stored(&self, id: u64, blkid: u64, data: Vec<u8>, how: StoredAs) -> Result<(), FsError> {
        // The stored size is what the sync writes and what the txg holds in memory.
        let len = data.len() as u64;
        self.space.reserve(len)?;
        let hold = self.hold(len)?;
        let obj = self.os.get(id)?;
        obj.lock().receive_stored(hold.txg, blkid, data, how)?;
        self.os.mark_dirty(id);
        Ok(())
    }

    /// Frees records `first..first + count` of object `id`.
    pub fn recv_free(&self, id: u64, first: u64, count: u64) -> Result<(), FsError> {
        let hold = self.hold(META_CHARGE)?;
        let obj = self.os.get(id)?;
        obj.lock().receive_free(hold.txg, first, count);
        self.os.mark_dirty(id);
        Ok(())
    }

    /// Frees objects `first..first + count` that exist (a free slot stays free).
    pub fn recv_free_objects(&self, first: u64, count: u64) -> Result<(), FsError> {
        let end = first.saturating_add(count).min(self.os.next_obj());
        for id in first.max(1)..end {
            let Ok(obj) = self.os.get(id) else { continue };
            let hold = self.hold(META_CHARGE)?;
            self.os.free_object(&obj, hold.txg);
        }
        Ok(())
    }

    /// Sets the objects unlinked but still open in the sender's snapshot: they are freed
    /// when this dataset is next imported, as the sender's would be.
    pub fn recv_unlinked(&self, ids: &[u64]) {
        self.unlinked.lock().extend(ids.iter().copied());
    }

    /// Ids below `next` are taken, as in the sender's snapshot.
    pub fn recv_next_obj(&self, next: u64) {
        self.os.raise_next_obj(next);
    }

    fn os_holds_freed(&self, id: u64) -> bool {
        self.os.holds_freed(id)
    }
}

//! One object's changes in one txg, and their way from open to syncing to synced.
//!
//! Owns: the records, truncation point, early-written blocks, orphans and free mark of a
//! txg (`Changes`), and the object's steps through a txg: quiesce (open → syncing, a
//! dirty directory encoded into its records first), the dnode as of the syncing txg, and
//! `finish_sync` (the tree's new root becomes the dnode's).
//!
//! Promises: a quiesce moves the open changes whole (the txg barrier is held, so no
//! change is half made); an object is never quiesced twice before its sync finishes
//! (asserted).
//!
//! Must never: write blocks (the object set's sync does), or free one.
use std::collections::BTreeMap;
use std::sync::Arc;

use tarn_zio::{Access, BlockPtr, ReadKind, Zio, ZioError};

use crate::dir;
use crate::dnode::{Dnode, DNODE_SIZE};
use crate::object::{ObjState, Record, StoredRecord};

/// Directory contents are written in records of this size.
const DIR_RECORDSIZE: u32 = 16384;

#[derive(Default)]
pub(crate) struct Changes {
    /// The txg these changes belong to (0 while there are none).
    pub(crate) txg: u64,
    pub(crate) records: BTreeMap<u64, Record>,
    /// Records received as their sender stored them (compressed), written as they are
    /// (`receive.rs`). A record of `records` at the same index is newer and wins: setting
    /// a stored record drops the same index from `records`, and nothing else adds here.
    pub(crate) stored: BTreeMap<u64, StoredRecord>,
    /// Records an fsync already wrote in place for the intent log (early writes): if the
    /// record is still that very buffer when its txg syncs, the txg adopts the block
    /// instead of writing it again.
    pub(crate) early: BTreeMap<u64, (Record, BlockPtr)>,
    /// Blocks written early that the txg will not adopt (the record changed again). The
    /// log may point at them until this txg commits, so they are freed with it.
    pub(crate) orphans: Vec<BlockPtr>,
    /// Records at or beyond this index were cut off by a truncate in this txg.
    pub(crate) truncate_blocks: Option<u64>,
    /// The dnode as of the quiesce (syncing side only).
    pub(crate) dnode: Option<Dnode>,
    pub(crate) free_object: bool,
}

impl Changes {
    pub(crate) fn is_empty(&self) -> bool {
        self.records.is_empty()
            && self.stored.is_empty()
            && self.early.is_empty()
            && self.orphans.is_empty()
            && self.truncate_blocks.is_none()
            && !self.free_object
    }
}

impl ObjState {
    /// Moves the open txg's changes to the syncing side (the txg barrier is held).
    pub(crate) fn quiesce(&mut self, zio: &Zio, txg: u64) -> Result<(), ZioError> {
        assert!(
            self.syncing.is_empty() && self.syncing.dnode.is_none(),
            "invariant broken: an object is quiesced once per sync (object of generation {} quiesced twice)",
            self.dnode.gen
        );
        if self.dir_dirty && !self.gone {
            let bytes = dir::encode(self.dir.as_ref().expect("dirty directory is loaded"));
            self.write(zio, txg, 0, &bytes, DIR_RECORDSIZE)?;
            self.truncate(zio, txg, bytes.len() as u64)?;
            self.dir_dirty = false;
        }
        self.syncing = std::mem::take(&mut self.open);
        self.syncing.dnode = Some(self.dnode.clone());
        Ok(())
    }

    /// The dnode the syncing txg leaves, pointing at the tree just written; zeros if the
    /// txg frees the object. Taken before `finish_sync`, from the syncing changes: the
    /// open dnode and `gone` may already be the next txg's (a file grown, or unlinked,
    /// while this txg syncs), and the committed txg must not see them.
    pub(crate) fn synced_dnode_bytes(&self) -> [u8; DNODE_SIZE] {
        let mut raw = [0u8; DNODE_SIZE];
        if self.syncing.free_object {
            return raw;
        }
        let mut d = self.syncing.dnode.clone().unwrap_or_else(|| self.dnode.clone());
        d.root = self.tree.root();
        d.nlevels = self.tree.nlevels();
        d.encode(&mut raw);
        raw
    }

    /// The syncing txg is written: drop its changes, keep the tree's new root.
    pub(crate) fn finish_sync(&mut self) {
        self.syncing = Changes::default();
        self.dnode.root = self.tree.root();
        self.dnode.nlevels = self.tree.nlevels();
    }

    /// A record of the syncing txg to change during the sync itself (the dnode table is
    /// written this way: its records change only while a txg syncs).
    pub(crate) fn syncing_record_mut(&mut self, zio: &Zio, blkid: u64) -> Result<&mut Vec<u8>, ZioError> {
        if !self.syncing.records.contains_key(&blkid) {
            let blksz = self.blksz() as usize;
            let mut rec = match self.tree.get(zio, blkid)? {
                // A dnode-table record: counted as a dnode read by its block type.
                Some(bp) => zio.read(&bp, Access::page(ReadKind::Rmw, self.page(blkid)))?,
                None => vec![0u8; blksz],
            };
            rec.resize(blksz, 0);
            self.syncing.records.insert(blkid, Arc::new(rec));
        }
        Ok(Arc::make_mut(self.syncing.records.get_mut(&blkid).expect("inserted")))
    }
}

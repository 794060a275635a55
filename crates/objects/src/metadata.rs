//! Changing what an object says about itself — link count, parent, mode, owner, times —
//! and a directory's entries: the named operations the dataset uses, so that the rules
//! live here.
//!
//! Owns: the rules of metadata changes — any change dirties the object in the open txg
//! and bumps ctime (an access alone bumps only atime and dirties nothing an fsync needs);
//! a directory's entry change marks its entries dirty and bumps mtime and ctime; a
//! subdirectory's entry counts toward its parent's link count (its ".."); a directory's
//! last name drops its link count to 0; a mode change keeps the file type.
//!
//! Promises: a read-only view of the dnode (`dnode()`); entries loaded from disk on first
//! use, then kept in memory until the object leaves the cache, their bytes charged to the
//! ARC's budget.
//!
//! Must never: check names or permissions (the dataset does), or mark the object set
//! dirty (the caller does, after dropping the lock: `ObjSet::mark_dirty`).
use tarn_zio::{ReadKind, Zio};

use crate::dir::{self, DirEntry, Entries};
use crate::dnode::{Dnode, ObjType, Timespec};
use crate::object::{ObjState, DIR_ENTRY_BYTES};
use crate::ObjError;

/// The file-type bits of a mode, which a mode change keeps.
const S_IFMT: u32 = 0o170_000;

/// Attributes a `setattr` changes; `None` leaves one alone.
#[derive(Clone, Copy, Debug, Default)]
pub struct AttrChange {
    /// Permission bits; the file type bits are kept.
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub atime: Option<Timespec>,
    pub mtime: Option<Timespec>,
}

impl ObjState {
    /// The dnode as the open txg sees it.
    pub fn dnode(&self) -> &Dnode {
        &self.dnode
    }

    /// The last txg that changed this object in a way an fsync must make durable.
    pub fn last_dirty_txg(&self) -> u64 {
        self.last_dirty_txg
    }

    /// Metadata changed in the open txg `txg`: ctime is now.
    pub fn mark_changed(&mut self, txg: u64) {
        self.dnode.ctime = Timespec::now();
        self.last_dirty_txg = txg;
    }

    /// One more name for this object.
    pub fn add_link(&mut self, txg: u64) {
        self.dnode.nlink += 1;
        self.mark_changed(txg);
    }

    /// One name less; a directory has only one, so it drops to 0. Returns the names left.
    pub fn drop_link(&mut self, txg: u64) -> u32 {
        self.dnode.nlink = if self.dnode.obj_type == ObjType::Dir { 0 } else { self.dnode.nlink.saturating_sub(1) };
        self.mark_changed(txg);
        self.dnode.nlink
    }

    /// The object now lives in directory `dir` (a rename).
    pub fn set_parent(&mut self, dir: u64, txg: u64) {
        self.dnode.parent = dir;
        self.mark_changed(txg);
    }

    /// Applies a `setattr`'s changes.
    pub fn set_attrs(&mut self, txg: u64, change: &AttrChange) {
        if let Some(mode) = change.mode {
            self.dnode.mode = (self.dnode.mode & S_IFMT) | (mode & 0o7777);
        }
        if let Some(uid) = change.uid {
            self.dnode.uid = uid;
        }
        if let Some(gid) = change.gid {
            self.dnode.gid = gid;
        }
        if let Some(t) = change.atime {
            self.dnode.atime = t;
        }
        if let Some(t) = change.mtime {
            self.dnode.mtime = t;
        }
        self.mark_changed(txg);
    }

    /// A read at `now` (relatime's decision is the caller's): only atime changes, and the
    /// object's last dirty txg stays — an fsync after a read has nothing to make durable.
    pub fn note_access(&mut self, now: Timespec) {
        self.dnode.atime = now;
    }

    /// A new directory's entries: empty, to be written with txg `txg`.
    pub fn init_dir(&mut self, txg: u64) {
        self.dir = Some(Entries::new());
        self.dir_bytes = 0;
        self.dir_dirty = true;
        self.last_dirty_txg = txg;
    }

    /// Notes that a new object is complete in txg `txg` (its creation is what an fsync
    /// makes durable).
    pub fn created_in(&mut self, txg: u64) {
        self.last_dirty_txg = txg;
    }

    /// A directory's entries, loaded on first use.
    pub fn entries(&mut self, zio: &Zio) -> Result<&Entries, ObjError> {
        Ok(self.entries_mut(zio)?)
    }

    /// The entry `name` of this directory.
    pub fn lookup(&mut self, zio: &Zio, name: &[u8]) -> Result<Option<DirEntry>, ObjError> {
        Ok(self.entries_mut(zio)?.get(name).copied())
    }

    /// Adds entry `name` to this directory in txg `txg` (the caller checked it is free).
    pub fn add_entry(&mut self, zio: &Zio, txg: u64, name: &[u8], entry: DirEntry) -> Result<(), ObjError> {
        if self.entries_mut(zio)?.insert(name.to_vec(), entry).is_none() {
            self.dir_bytes += entry_bytes(name);
            self.recharge(zio);
        }
        if entry.obj_type == ObjType::Dir {
            self.dnode.nlink += 1; // the subdirectory's ".."
        }
        self.touch_dir(txg);
        Ok(())
    }

    /// Removes entry `name` from this directory in txg `txg`; returns what it named.
    pub fn remove_entry(&mut self, zio: &Zio, txg: u64, name: &[u8]) -> Result<Option<DirEntry>, ObjError> {
        let removed = self.entries_mut(zio)?.remove(name);
        if removed.is_some() {
            self.dir_bytes -= entry_bytes(name);
            self.recharge(zio);
        }
        if removed.is_some_and(|e| e.obj_type == ObjType::Dir) {
            self.dnode.nlink = self.dnode.nlink.saturating_sub(1);
        }
        self.touch_dir(txg);
        Ok(removed)
    }

    /// The directory's entries changed in txg `txg`.
    fn touch_dir(&mut self, txg: u64) {
        self.dir_dirty = true;
        let now = Timespec::now();
        self.dnode.mtime = now;
        self.dnode.ctime = now;
        self.last_dirty_txg = txg;
    }

    /// Loads a directory's entries on first use.
    fn entries_mut(&mut self, zio: &Zio) -> Result<&mut Entries, ObjError> {
        if self.dnode.obj_type != ObjType::Dir {
            return Err(ObjError::NotDir);
        }
        if self.dir.is_none() {
            let mut bytes = vec![0u8; self.dnode.size as usize];
            let size = self.dnode.size;
            let blksz = self.blksz();
            let mut at = 0u64;
            while at < size {
                let rec = self.load_record(zio, at / blksz, ReadKind::Directory)?;
                let n = (blksz.min(size - at)) as usize;
                bytes[at as usize..at as usize + n].copy_from_slice(&rec[..n]);
                at += n as u64;
            }
            let entries = dir::decode(&bytes)?;
            self.dir_bytes = entries.keys().map(|name| entry_bytes(name)).sum();
            self.dir = Some(entries);
            self.recharge(zio);
        }
        Ok(self.dir.as_mut().expect("loaded"))
    }

    /// The object is freed in the open txg `txg`: all its blocks and its dnode slot.
    pub(crate) fn free(&mut self, txg: u64) {
        self.open.records.clear();
        self.open.stored.clear();
        self.open.free_object = true;
        self.gone = true;
        self.dir = None;
        self.dir_bytes = 0;
        self.dir_dirty = false;
        self.last_dirty_txg = txg;
        self.open.txg = txg;
    }
}

/// What the entry `name` costs in memory.
fn entry_bytes(name: &[u8]) -> u64 {
    name.len() as u64 + DIR_ENTRY_BYTES
}

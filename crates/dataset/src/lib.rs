//! dataset — a named tree of objects with properties: the POSIX-shaped API that the FUSE
//! layer (and the tests) use — lookup, create, read, write, truncate, fsync, rename…
//!
//! Owns: names within directories, link counts, unlinked-but-open objects, the dataset's
//! effective properties and its space counters.
//!
//! Promises: every change joins one txg through a `TxgHold` (so it commits whole);
//! namespace changes of one dataset are serialised, data changes lock only their object;
//! `fsync` returns only when the object's last change is committed (unless
//! `sync=disabled`); a write that cannot fit gets `NoSpace`, and stores nothing.
//!
//! Must never: hold two object locks at once (deadlock-free by construction, asserted by
//! `Object::lock`; `create`'s new object is the one exception, `FreshObject`), or hand
//! out bytes that failed their checksum.
//!
//! # Theory of operation
//!
//! **A change** takes a txg hold (the write throttle may wait here), then — for names —
//! the namespace lock, then one object's lock at a time. It is queued in the intent log
//! (`Zil::log`, or `Zil::log_write` for a write: a note of the range, with the dataset's
//! `logbias` and the write's size for the log policy), applied to the object through its
//! named operations, and the object is marked dirty in the object set. Dropping the hold
//! lets the txg quiesce.
//!
//! **An fsync** (`sync.rs`) finds the last txg that changed the object; if it is
//! committed there is nothing to do. Otherwise it commits the log for that object: the
//! log takes the object's queued changes and every namespace change (queue), orders its
//! append after the commits it depends on (tickets), asks this dataset for each queued
//! write's data (resolve: `WriteSource`, answered by `ObjSet::write_early` — a copy as of
//! the write's txg, or the record written in place and noted for adoption), appends log
//! blocks and flushes. If the log cannot be written, the fsync commits a txg instead.
//!
//! **A txg** quiesces (`quiesce`: each dirty object's open changes become its syncing
//! ones, under the txg barrier) and syncs (`sync`: objects writes records, adopting the
//! blocks written early for unchanged records, then indirect blocks, then the dnode
//! table); the blocks no longer needed come back in the `SyncResult` for the pool to free
//! in that txg.
//!
//! **Replay** (in the pool) re-applies logged changes through this same API, with the log
//! told not to queue them again.

mod attr;
mod error;
mod file;
mod handles;
mod namespace;
pub mod props;
mod receive;
mod sync;
#[cfg(test)]
mod tests;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use tarn_objects::{Dnode, ObjSet, ObjType, Object};
use tarn_zil::{Op, Zil};

pub use attr::{Attr, FileKind, NewObject, SetAttr};
pub use error::FsError;
pub use props::{Effective, SyncMode};
/// Times as the dataset's attributes carry them.
pub use tarn_objects::Timespec;
/// The log policy's immediate-write size (see `tarn_zil::policy`).
pub use tarn_zil::policy::IMMEDIATE_WRITE_BYTES;

pub const ROOT_ID: u64 = 1;
const NAME_MAX: usize = 255;
/// Dirty bytes charged for a metadata-only change (a dnode and a directory record).
const META_CHARGE: u64 = 1024;

/// Space the pool can still promise to writers; implemented by the pool.
pub trait SpaceOracle: Send + Sync {
    /// Err(NoSpace) if `bytes` more dirty data cannot be stored.
    fn reserve(&self, bytes: u64) -> Result<(), FsError>;
}

/// Bytes a dataset's blocks take, as of the last sync.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpaceUsed {
    /// As stored (compressed), what `used` shows.
    pub physical: u64,
    /// Before compression, what `logicalused` shows.
    pub logical: u64,
}

pub struct Dataset {
    pub id: u64,
    os: ObjSet,
    eff: RwLock<Effective>,
    ns: Mutex<()>,
    space: Arc<dyn SpaceOracle>,
    /// The pool's intent log: every change is queued there, fsync commits the queue.
    zil: Arc<Zil>,
    used_physical: AtomicU64,
    used_logical: AtomicU64,
    /// Open handles per object, and the object itself: holding it keeps it in the object
    /// cache (an open file's object is never evicted).
    opens: Mutex<HashMap<u64, (u32, Arc<Object>)>>,
    unlinked: Mutex<BTreeSet<u64>>,
    /// The unlinked set as of the last quiesce: what the syncing txg records.
    unlinked_at_quiesce: Mutex<Vec<u64>>,
    /// A snapshot's contents: every change is refused (`FsError::ReadOnly`).
    read_only: bool,
}

impl Dataset {
    pub fn new(
        id: u64,
        os: ObjSet,
        eff: Effective,
        space: Arc<dyn SpaceOracle>,
        zil: Arc<Zil>,
        unlinked: Vec<u64>,
    ) -> Dataset {
        Dataset {
            id,
            os,
            eff: RwLock::new(eff),
            ns: Mutex::new(()),
            space,
            zil,
            used_physical: AtomicU64::new(0),
            used_logical: AtomicU64::new(0),
            opens: Mutex::new(HashMap::new()),
            unlinked: Mutex::new(unlinked.into_iter().collect()),
            unlinked_at_quiesce: Mutex::new(Vec::new()),
            read_only: false,
        }
    }

    /// The same dataset refusing every change: a snapshot's contents. Every change takes
    /// a txg hold first (`hold`), which is where it is refused; reads leave atime alone.
    pub fn into_read_only(self) -> Dataset {
        Dataset { read_only: true, ..self }
    }

    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Creates the root directory of a new dataset (in the txg of `hold_txg`).
    pub fn init_root(&self) -> Result<(), FsError> {
        let hold = self.os.ctx().txg.hold(META_CHARGE)?;
        let mut d = Dnode::new(ObjType::Dir, 512, libc::S_IFDIR | 0o755, hold.txg);
        d.nlink = 2;
        d.parent = ROOT_ID;
        let root = self.os.alloc(d);
        assert_eq!(root.id(), ROOT_ID, "root directory must be object 1");
        root.lock().init_dir(hold.txg);
        Ok(())
    }

    pub fn effective(&self) -> Effective {
        self.eff.read().clone()
    }

    pub fn set_effective(&self, eff: Effective) {
        *self.eff.write() = eff;
    }

    /// The dnode of the object set's dnode table, as of the last sync: what the pool
    /// records in its root.
    pub fn meta_dnode(&self) -> Dnode {
        self.os.meta_dnode()
    }

    /// Evicts clean objects while decoded objects are over their share of the ARC's budget
    /// (after the budget shrank).
    pub fn trim_cache(&self) {
        self.os.trim();
    }

    /// The next object id the set will hand out, recorded with the meta dnode.
    pub fn next_obj(&self) -> u64 {
        self.os.next_obj()
    }

    pub fn used(&self) -> SpaceUsed {
        SpaceUsed {
            physical: self.used_physical.load(Ordering::Relaxed),
            logical: self.used_logical.load(Ordering::Relaxed),
        }
    }

    /// Sets the space counters (at import, from walking the dataset's tree).
    pub fn set_used(&self, used: SpaceUsed) {
        self.used_physical.store(used.physical, Ordering::Relaxed);
        self.used_logical.store(used.logical, Ordering::Relaxed);
    }

    fn zio(&self) -> &tarn_zio::Zio {
        &self.os.ctx().zio
    }

    fn hold(&self, bytes: u64) -> Result<tarn_txg::TxgHold<'_>, FsError> {
        if self.read_only {
            return Err(FsError::ReadOnly);
        }
        Ok(self.os.ctx().txg.hold(bytes)?)
    }

    /// Queues a change in the intent log (unless `sync=disabled`, where nothing waits
    /// for it).
    fn log(&self, txg: u64, op: Op) {
        if self.logs(self.eff.read().sync) {
            self.zil.log(txg, self.id, op);
        }
    }

    /// Whether changes go to the intent log: unless `sync=disabled` — but always while
    /// import replays, which notes there the txg each replayed change joined (however the
    /// dataset is set, a crash must not apply a committed record twice).
    fn logs(&self, sync: SyncMode) -> bool {
        sync != SyncMode::Disabled || self.zil.is_replaying()
    }
}

/// Lets tests and tools reach an object directly.
pub fn object_of(ds: &Dataset, ino: u64) -> Result<Arc<Object>, FsError> {
    Ok(ds.os.get(ino)?)
}

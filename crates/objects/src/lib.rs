//! objects — files and directories as objects, each a copy-on-write tree of records.
//!
//! Owns: dnodes and the dnode table, block trees, per-txg object changes, directory
//! contents, and the sync of an object set (data, then indirect blocks, then dnodes).
//!
//! Promises: what a read returns is what the last write left (in memory or on disk); a
//! sync writes only new blocks and reports every block it no longer needs (replaced,
//! cut off, or written early and not adopted), so the caller frees them in the same txg;
//! a file smaller than one record is one block of its own size; an object's state
//! changes only through named operations, which keep its rules (`data.rs`,
//! `metadata.rs`); a thread holds one object lock at a time (asserted).
//!
//! Must never: free a block itself, commit anything (the pool writes the uberblock), or
//! know about names beyond one directory's entries.
//!
//! Early writes (`ObjSet::write_early`, ZFS's dmu_sync) are this crate's too: at fsync the
//! intent log asks for a logged write's data; the record is written in place with the
//! dataset's encoding, and the txg's sync adopts that block if the record is unchanged,
//! or returns it as an orphan to free (`early.rs`).

mod changes;
mod data;
pub mod dir;
pub mod dnode;
mod early;
mod metadata;
mod object;
mod objset;
mod receive;
pub mod reclaim;
#[cfg(test)]
mod tests;
pub mod traverse;
pub mod tree;
mod zfetch;

pub use dir::{DirEntry, Entries};
pub use dnode::{Dnode, ObjType, Timespec, DNODE_SIZE};
pub use early::{EarlyData, EarlyWant};
pub use metadata::AttrChange;
pub use object::{FreshObject, ObjGuard, ObjState, Object};
pub use objset::{ObjSet, SyncPolicy, SyncResult};
pub use reclaim::{Reading, Reclaim};

use std::sync::Arc;

/// What every object operation needs from the pool below.
pub struct Ctx {
    pub zio: Arc<tarn_zio::Zio>,
    pub txg: Arc<tarn_txg::TxgEngine>,
    /// Readers open a section while reading blocks a tree pointed to; the pool waits for
    /// the sections open before it releases the blocks a committed txg freed.
    pub reclaim: Reclaim,
}

#[derive(Debug, thiserror::Error)]
pub enum ObjError {
    #[error(transparent)]
    Zio(#[from] tarn_zio::ZioError),
    #[error("corrupt dnode: {0}")]
    Dnode(#[from] dnode::DnodeError),
    #[error("corrupt directory: {0}")]
    Dir(#[from] dir::DirError),
    #[error("no such object {0}")]
    NoObject(u64),
    #[error("not a directory")]
    NotDir,
    #[error("object {0} is in use: a receive claims only free ids")]
    InUse(u64),
    #[error("a received record of {len} bytes does not fill a block of {blksz}")]
    RecordSize { len: usize, blksz: u64 },
}

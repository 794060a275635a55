//! objects — files and directories as objects, each a copy-on-write tree of records.
//!
//! Owns: dnodes and the dnode table, block trees, per-txg object changes, directory
//! contents, and the sync of an object set (data, then indirect blocks, then dnodes).
//!
//! Promises: what a read returns is what the last write left (in memory or on disk); a
//! sync writes only new blocks and reports every block it replaced, so the caller frees
//! them in the same txg; a file smaller than one record is one block of its own size.
//!
//! Must never: free a block itself, commit anything (the pool writes the uberblock), or
//! know about names beyond one directory's entries.

pub mod dir;
pub mod dnode;
mod object;
mod objset;
pub mod traverse;
pub mod tree;

pub use dir::{DirEntry, Entries};
pub use dnode::{Dnode, ObjType, Timespec, DNODE_SIZE};
pub use object::{LogData, ObjState, Object};
pub use objset::{ObjSet, SyncPolicy, SyncResult};

use std::sync::Arc;

/// What every object operation needs from the pool below.
pub struct Ctx {
    pub zio: Arc<tarn_zio::Zio>,
    pub txg: Arc<tarn_txg::TxgEngine>,
    /// Readers hold it shared while reading blocks a tree pointed to; the pool takes it
    /// exclusively to release the blocks a committed txg freed.
    pub reclaim: parking_lot::RwLock<()>,
}

#[derive(Debug, thiserror::Error)]
pub enum ObjError {
    #[error(transparent)]
    Zio(#[from] tarn_zio::ZioError),
    #[error("corrupt object: {0}")]
    Corrupt(String),
    #[error("no such object {0}")]
    NoObject(u64),
    #[error("not a directory")]
    NotDir,
}

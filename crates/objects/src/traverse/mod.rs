//! The one walk over committed blocks, as ZFS's dmu_traverse: an object set (the dnode
//! table's tree, then the tree of every live object it describes) or a single block tree.
//!
//! Theory of operation. The walk is depth first from the root. Every block pointer is
//! handed to the `Visitor` exactly once, after the block was read (when it is read): an
//! indirect block is read to find its children, and so is every block of the dnode
//! table, whose dnodes name the objects to walk next; a data block is read only if
//! `Options::read_data`. Reads go past the ARC to the devices (the walk checks what the
//! disks hold), verifying the first good copy, or every copy with `Options::all_copies`
//! (each bad mirror side is counted and rewritten from a good one, and the visit says
//! how many there were). A block that cannot be read, or whose bytes do not decode, is
//! still visited (its pointer is as real as any), with the error; what it points to
//! cannot be known and is not walked. A dnode that does not decode goes to the visitor's
//! `bad_dnode`. The visitor steers with `Flow`: from `enter` (before a block is read),
//! `Skip` leaves out the block and its subtree; from `block` or `object`, `Skip` leaves
//! out what a block (or an object) points to; `Stop` ends the walk.
//!
//! Users: import (claim every live block, rebuilding the space maps), the background
//! scrub and resilver (resumed from a bookmark, pruned by birth txg through `enter`),
//! the free of a destroyed dataset; later send and the L2ARC rebuild.
//!
//! Owns: the order of the walk and what is read on the way.
//!
//! Promises: each block reachable from the root through blocks that verify, and not
//! skipped by `enter`, is visited exactly once, with its level, its index at that level (`blkid`: the record number at
//! level 0) and, inside an object set, its object (0 for the dnode table); no bytes that
//! failed their checksum reach the visitor.
//!
//! Must never: change, cache, claim or free anything (the visitor decides what a block
//! means to it), or stop early on its own: errors are the visitor's to weigh. The caller
//! keeps the walked blocks from being freed and reused under the walk (import: nothing
//! else runs; scrub: a reclaim section; a destroyed dataset: the sync thread, which alone
//! releases frees).
//!
//! Modules: this one (the visitor's API and `walk`), `walker` (the depth-first walk
//! itself), `tests`.

use std::ops::ControlFlow;

use tarn_zio::{BlockPtr, BlockType, Zio, ZioError};

use crate::dnode::{Dnode, DnodeError, DNODE_SIZE};

mod walker;

use walker::{top_level, Records, Walker};

/// What the walk reads.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// Read (and verify) level-0 data blocks; otherwise they are visited from their
    /// pointers alone. Indirect and dnode blocks are always read.
    pub read_data: bool,
    /// Verify every copy of each block read (every side of a mirror), rewriting bad ones
    /// from a good one (scrub); otherwise the first copy that verifies is enough.
    pub all_copies: bool,
}

/// Where a walk starts.
#[derive(Clone, Copy, Debug)]
pub enum Start<'a> {
    /// An object set, from the dnode of its dnode table.
    ObjSet(&'a Dnode),
    /// One block tree: `nlevels` levels under `root` (the pool's root block is a tree of
    /// one level), of `object` if it is one.
    Tree { root: BlockPtr, nlevels: u8, object: Option<u64> },
}

/// How the walk goes on after a visit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Walk what this block (or object) points to, then go on.
    Continue,
    /// Leave out what this block (or object) points to, and go on.
    Skip,
    /// End the walk now.
    Stop,
}

/// How a walk ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Walked {
    Completed,
    /// A visitor returned `Flow::Stop`.
    Stopped,
}

/// What reading a visited block gave.
#[derive(Debug)]
pub enum Outcome<'a> {
    /// Not read: a data block, and `read_data` is off.
    NotRead,
    /// Read and verified; `bad_copies` sides did not verify and were rewritten (counted
    /// only with `all_copies`; a first-good read may stop before it meets one).
    Verified { data: &'a [u8], bad_copies: u32 },
    /// No copy could be read and verified, or the verified bytes are not what the block
    /// must hold (an indirect block that does not decode). Children are not walked.
    Failed(&'a ZioError),
}

/// One visited block.
#[derive(Debug)]
pub struct Visit<'a> {
    pub bp: &'a BlockPtr,
    /// The object the block belongs to (0: the dnode table); `None` for a lone tree that
    /// is no object's.
    pub object: Option<u64>,
    /// 0 for records (data, dnodes), 1 and up for indirect blocks.
    pub level: u8,
    /// Index of the block at its level; at level 0 the record number.
    pub blkid: u64,
    pub outcome: Outcome<'a>,
}

impl Visit<'_> {
    pub fn block_type(&self) -> BlockType {
        self.bp.block_type
    }
}

/// A block the walk is about to read (or visit unread).
#[derive(Debug)]
pub struct Entering<'a> {
    pub bp: &'a BlockPtr,
    /// As `Visit::object`.
    pub object: Option<u64>,
    pub level: u8,
    pub blkid: u64,
}

/// What a walk calls. A closure `FnMut(&Visit) -> Flow` is a visitor that walks every
/// object and passes over dnodes that do not decode.
pub trait Visitor {
    /// Before a block is read: `Skip` leaves it and everything under it out of the walk
    /// (not read, not visited), `Stop` ends the walk. A scrub resumes at a bookmark and
    /// paces its reads here; a resilver passes over subtrees born before the txgs it
    /// copies (a block is never born before a block under it).
    fn enter(&mut self, _block: &Entering<'_>) -> Flow {
        Flow::Continue
    }

    /// Every block, once, after it was read (if it was).
    fn block(&mut self, visit: &Visit<'_>) -> Flow;

    /// A live object of the set, before its tree is walked (`Skip` leaves it out).
    fn object(&mut self, _id: u64, _dnode: &Dnode) -> Flow {
        Flow::Continue
    }

    /// A dnode slot of a verified dnode block that does not decode (a newer format, or a
    /// bug): its object's blocks cannot be known.
    fn bad_dnode(&mut self, _id: u64, _error: &DnodeError) -> Flow {
        Flow::Continue
    }
}

impl<F: FnMut(&Visit<'_>) -> Flow> Visitor for F {
    fn block(&mut self, visit: &Visit<'_>) -> Flow {
        self(visit)
    }
}

/// Walks every block under `start`, calling `visitor` for each (see the module header).
pub fn walk(zio: &Zio, start: Start<'_>, opts: Options, visitor: &mut dyn Visitor) -> Walked {
    let mut walker = Walker { zio, opts, visitor };
    let flow = match start {
        Start::ObjSet(meta) => {
            let per_block = (u64::from(meta.blksz) / DNODE_SIZE as u64).max(1);
            match meta.root {
                Some(root) => walker.block(&root, Some(0), top_level(meta.nlevels), 0, Records::Dnodes { per_block }),
                None => ControlFlow::Continue(()),
            }
        }
        Start::Tree { root, nlevels, object } => walker.block(&root, object, top_level(nlevels), 0, Records::Data),
    };
    match flow {
        ControlFlow::Continue(()) => Walked::Completed,
        ControlFlow::Break(()) => Walked::Stopped,
    }
}

#[cfg(test)]
mod tests;

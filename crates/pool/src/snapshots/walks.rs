//! The walks over a snapshot's blocks that destroy, rollback and the space counts share:
//! the blocks of a tree born after a txg, and the blocks only one snapshot holds (found by
//! first collecting what the next tree still shares with it — ZFS's dead list, derived).
//!
//! Owns: which blocks each walk reaches (pruned by birth txg before a read).
//!
//! Promises: each block named once; a subtree born at or before the floor, or held by
//! the next tree, is passed over unread.
//!
//! Must never: free, claim or change a block (the caller's closure decides what a
//! block means), or run without the caller keeping the walked blocks from reuse.
use std::collections::HashSet;

use tarn_objects::traverse::{self, Entering, Flow, Options, Start, Visit, Visitor};
use tarn_objects::Dnode;
use tarn_zio::{BlockPtr, Zio};

/// The key of a block: where it is and when it was born (no two live blocks share it).
type BlockKey = (u16, u64, u64);

fn key(bp: &BlockPtr) -> BlockKey {
    (bp.vdev, bp.offset, bp.birth)
}

/// Walks `tree`'s blocks born after `floor`, passing over subtrees rooted at a block in
/// `skip`; `f` is called for each block visited.
struct Born<'a, F: FnMut(&BlockPtr)> {
    floor: u64,
    skip: &'a HashSet<BlockKey>,
    f: F,
}

impl<F: FnMut(&BlockPtr)> Visitor for Born<'_, F> {
    fn enter(&mut self, b: &Entering<'_>) -> Flow {
        if b.bp.birth <= self.floor || self.skip.contains(&key(b.bp)) {
            return Flow::Skip;
        }
        Flow::Continue
    }

    fn block(&mut self, v: &Visit<'_>) -> Flow {
        (self.f)(v.bp);
        Flow::Continue
    }
}

/// The blocks of `other` born in (`floor`, `upto`]: those of a snapshot taken at `upto`
/// that `other`, a later tree of the same dataset, still holds.
struct Shared {
    floor: u64,
    upto: u64,
    found: HashSet<BlockKey>,
}

impl Visitor for Shared {
    fn enter(&mut self, b: &Entering<'_>) -> Flow {
        if b.bp.birth <= self.floor {
            return Flow::Skip;
        }
        if b.bp.birth <= self.upto {
            // Born by `upto`: the snapshot holds it and everything under it.
            self.found.insert(key(b.bp));
            return Flow::Skip;
        }
        Flow::Continue
    }

    fn block(&mut self, _: &Visit<'_>) -> Flow {
        Flow::Continue
    }
}

/// Calls `f` for every block of snapshot `tree` (taken at `upto`) born after `floor`
/// that `next` does not hold: what only this snapshot references.
pub(crate) fn for_each_unique(zio: &Zio, tree: &Dnode, floor: u64, upto: u64, next: &Dnode, f: impl FnMut(&BlockPtr)) {
    let mut shared = Shared { floor, upto, found: HashSet::new() };
    traverse::walk(zio, Start::ObjSet(next), Options::default(), &mut shared);
    let mut born = Born { floor, skip: &shared.found, f };
    traverse::walk(zio, Start::ObjSet(tree), Options::default(), &mut born);
}

/// Calls `f` for every block of `tree` born after `floor`.
pub(crate) fn for_each_born_after(zio: &Zio, tree: &Dnode, floor: u64, f: impl FnMut(&BlockPtr)) {
    let none = HashSet::new();
    let mut born = Born { floor, skip: &none, f };
    traverse::walk(zio, Start::ObjSet(tree), Options::default(), &mut born);
}

pub(super) fn psize_sum(mut total: impl FnMut(&mut dyn FnMut(&BlockPtr))) -> u64 {
    let mut sum = 0u64;
    total(&mut |bp: &BlockPtr| sum += u64::from(bp.psize));
    sum
}

//! The depth-first walk behind `traverse::walk`: reads each block it must, hands it to
//! the visitor, then descends into an indirect block's children or a dnode block's
//! objects.
//!
//! Owns: the order of the walk and which blocks are read (an indirect or dnode block
//! always, a data block only with `read_data`).
//!
//! Promises: what the module header of `traverse` promises — each reachable block not
//! skipped by `enter` visited once, no unverified bytes handed on.
//!
//! Must never: change, cache, claim or free a block, or stop on an error by itself.

use std::ops::ControlFlow;

use tarn_zio::{BlockPtr, BlockType, Zio, ZioError};

use super::{Entering, Flow, Options, Outcome, Visit, Visitor};
use crate::dnode::{Dnode, ObjType, DNODE_SIZE};
use crate::tree::{decode_indirect, FANOUT};

/// The level of a tree's top block.
pub(super) fn top_level(nlevels: u8) -> u8 {
    nlevels.saturating_sub(1)
}

/// What the level-0 blocks of the tree being walked hold.
#[derive(Clone, Copy)]
pub(super) enum Records {
    /// An object's records: read only with `read_data`.
    Data,
    /// The dnode table's: always read, each holds `per_block` dnodes.
    Dnodes { per_block: u64 },
}

pub(super) struct Walker<'a> {
    pub(super) zio: &'a Zio,
    pub(super) opts: Options,
    pub(super) visitor: &'a mut dyn Visitor,
}

/// `Break` ends the walk; `Skip` is a `Continue` that walked nothing below.
type Step = ControlFlow<()>;

fn go_on(flow: Flow) -> Step {
    match flow {
        Flow::Stop => ControlFlow::Break(()),
        Flow::Continue | Flow::Skip => ControlFlow::Continue(()),
    }
}

impl Walker<'_> {
    /// Visits block `bp` (at `level`, index `blkid`, of `object`), then what it points to.
    pub(super) fn block(
        &mut self,
        bp: &BlockPtr,
        object: Option<u64>,
        level: u8,
        blkid: u64,
        records: Records,
    ) -> Step {
        let entering = Entering { bp, object, level, blkid };
        match self.visitor.enter(&entering) {
            Flow::Continue => {}
            Flow::Skip => return ControlFlow::Continue(()),
            Flow::Stop => return ControlFlow::Break(()),
        }
        let visit = |outcome| Visit { bp, object, level, blkid, outcome };
        let must_read = level > 0 || matches!(records, Records::Dnodes { .. }) || self.opts.read_data;
        if !must_read {
            return go_on(self.visitor.block(&visit(Outcome::NotRead)));
        }
        let (data, bad_copies) = match self.read(bp) {
            Ok(read) => read,
            Err(e) => return go_on(self.visitor.block(&visit(Outcome::Failed(&e)))),
        };
        if level == 0 {
            let flow = self.visitor.block(&visit(Outcome::Verified { data: &data, bad_copies }));
            return match (flow, records) {
                (Flow::Continue, Records::Dnodes { per_block }) if bp.block_type == BlockType::Dnodes => {
                    self.dnodes(&data, blkid, per_block)
                }
                _ => go_on(flow),
            };
        }
        let children = match decode_indirect(&data) {
            Ok(children) => children,
            Err(e) => return go_on(self.visitor.block(&visit(Outcome::Failed(&e)))),
        };
        let flow = self.visitor.block(&visit(Outcome::Verified { data: &data, bad_copies }));
        if flow != Flow::Continue {
            return go_on(flow);
        }
        drop(data);
        for (slot, child) in children.iter().enumerate() {
            if let Some(child) = child {
                let child_blkid = blkid.wrapping_mul(FANOUT).wrapping_add(slot as u64);
                self.block(child, object, level - 1, child_blkid, records)?;
            }
        }
        ControlFlow::Continue(())
    }

    /// Walks the objects of dnode block `blkid` of the dnode table.
    fn dnodes(&mut self, block: &[u8], blkid: u64, per_block: u64) -> Step {
        for (i, raw) in block.chunks_exact(DNODE_SIZE).enumerate() {
            let id = blkid.wrapping_mul(per_block).wrapping_add(i as u64);
            match Dnode::decode(raw) {
                Ok(Some(d)) if d.obj_type != ObjType::Free => self.object(id, &d)?,
                Ok(_) => {}
                Err(e) => go_on(self.visitor.bad_dnode(id, &e))?,
            }
        }
        ControlFlow::Continue(())
    }

    fn object(&mut self, id: u64, dnode: &Dnode) -> Step {
        let flow = self.visitor.object(id, dnode);
        match (flow, dnode.root) {
            (Flow::Continue, Some(root)) => self.block(&root, Some(id), top_level(dnode.nlevels), 0, Records::Data),
            _ => go_on(flow),
        }
    }

    /// The block's verified bytes and how many copies were bad.
    fn read(&self, bp: &BlockPtr) -> Result<(Vec<u8>, u32), ZioError> {
        if self.opts.all_copies {
            let read = self.zio.read_all_copies(bp)?;
            Ok((read.data, read.bad_copies))
        } else {
            Ok((self.zio.read_from_devices(bp)?, 0))
        }
    }
}

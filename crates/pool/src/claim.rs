//! The import walk: rebuilding free space from the block tree.
//!
//! Theory of operation. There is no space map on disk. At import the maps start all
//! free; the root block (MOS), the intent log's blocks and the blocks its indirect
//! writes point at are claimed, then every block of every dataset, found by walking its
//! dnode table and each live object's tree (`tarn_objects::traverse`, data blocks not
//! read). Every sector no claimed byte touches is then free. Free space is derived from
//! the tree, so the two cannot disagree: a crash cannot leak space or allocate it twice.
//!
//! Owns: what the walk claims and what it refuses.
//!
//! Promises: every block reachable from the chosen root is claimed before anything is
//! allocated; a metadata block no copy of which verifies is still claimed (it is
//! referenced) and the pool imports (reads through it fail with EIO, `status` counts the
//! error) rather than one damaged block making every other file unreachable; a dnode of
//! a newer format, or a pointer outside its device, refuses the import.
//!
//! Must never: write, or let a block it could not account for be counted free (its
//! sectors would be handed out while a newer tarn's object still uses them).

use tarn_dataset::SpaceUsed;
use tarn_objects::dnode::DnodeError;
use tarn_objects::traverse::{self, Flow, Options, Start, Visit, Visitor};
use tarn_objects::Dnode;
use tarn_zil::Chained;
use tarn_zio::{BlockPtr, Zio};

use crate::error::{ClaimError, ImportError, PoolError};
use crate::mos::Mos;
use crate::pool::Pool;

impl Pool {
    /// Claims the root block, the log's blocks and every dataset's blocks, opening each
    /// dataset on the way (with its space counters).
    pub(crate) fn claim_all(&self, mos: &Mos, mos_bp: BlockPtr, chained: Option<&Chained>) -> Result<(), PoolError> {
        let zio = &self.inner.ctx.zio;
        zio.claim(&mos_bp)?;
        for e in chained.iter().flat_map(|c| &c.blocks) {
            zio.claim_extent(e)?;
        }
        for bp in chained.iter().flat_map(|c| &c.indirect) {
            zio.claim(bp)?;
        }
        let refuse = |reason| PoolError::CannotImport { pool: self.inner.name.clone(), reason: Box::new(reason) };
        for rec in &mos.datasets {
            let dataset = rec.name.clone();
            let meta = rec.meta().map_err(|source| refuse(ImportError::Record { dataset: dataset.clone(), source }))?;
            let ds = self.add_dataset(
                &rec.name,
                rec.id,
                rec.props.clone(),
                meta.clone(),
                rec.next_obj,
                rec.unlinked.clone(),
                rec.creation,
            )?;
            let (physical, logical) = claim_dataset(zio, meta.as_ref())
                .map_err(|source| refuse(ImportError::Metadata { dataset, source }))?;
            ds.set_used(SpaceUsed { physical, logical });
        }
        Ok(())
    }
}

/// Marks every block of a dataset live; returns its (physical, logical) bytes.
fn claim_dataset(zio: &Zio, meta: Option<&Dnode>) -> Result<(u64, u64), ClaimError> {
    let Some(meta) = meta else { return Ok((0, 0)) };
    let mut claimer = Claimer { zio, physical: 0, logical: 0, first_error: None };
    traverse::walk(zio, Start::ObjSet(meta), Options::default(), &mut claimer);
    match claimer.first_error {
        Some(e) => Err(e),
        None => Ok((claimer.physical, claimer.logical)),
    }
}

struct Claimer<'a> {
    zio: &'a Zio,
    physical: u64,
    logical: u64,
    first_error: Option<ClaimError>,
}

impl Visitor for Claimer<'_> {
    fn block(&mut self, v: &Visit<'_>) -> Flow {
        // Whether or not it read: a block no copy of which verifies is still referenced.
        if let Err(source) = self.zio.claim(v.bp) {
            self.first_error.get_or_insert(ClaimError::OutsideDevice { vdev: v.bp.vdev, offset: v.bp.offset, source });
        }
        self.physical += v.bp.psize as u64;
        self.logical += v.bp.lsize as u64;
        Flow::Continue
    }

    fn bad_dnode(&mut self, object: u64, error: &DnodeError) -> Flow {
        // A newer tarn's object: its blocks would be counted free and overwritten. Other
        // garbage in a verified block is a bug; the object is unreachable either way.
        if let DnodeError::UnsupportedVersion { .. } = error {
            self.first_error.get_or_insert(ClaimError::NewerDnode { object, source: error.clone() });
        }
        Flow::Continue
    }
}

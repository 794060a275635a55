//! The import walk: rebuilding free space from the block tree.
//!
//! Theory of operation. There is no space map on disk. At import the maps start all
//! free; the root block (MOS), the intent log's blocks and the blocks its indirect
//! writes point at are claimed, then every block of every dataset, found by walking its
//! dnode table and each live object's tree (`tarn_objects::traverse`, data blocks not
//! read), and of every snapshot (each block once: see `snapshots`), and the chunks of
//! every dead list (their entries are snapshots' blocks, claimed by those walks). Every sector no
//! claimed byte touches is then free. Free space is derived from
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
use tarn_objects::traverse::{self, Entering, Flow, Options, Start, Visit, Visitor};
use tarn_objects::Dnode;
use tarn_zil::Chained;
use tarn_zio::{BlockPtr, Zio};

use crate::error::{ClaimError, ImportError, PoolError};
use crate::mos::{DeadListRecord, Mos, RecordError};
use crate::pool::Pool;
use crate::snapshots::deadlist::Chunk;
use crate::snapshots::{DeadList, Origin, Snap};

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
            let bad_record = |source| refuse(ImportError::Record { dataset: dataset.clone(), source });
            let meta = rec.meta().map_err(bad_record)?;
            let origin =
                rec.origin.as_ref().map(|o| Origin { dataset: o.dataset, snapshot: o.snapshot.clone(), txg: o.txg });
            // Each block once: a snapshot claims what was born since the one before it
            // (or since the origin, whose own dataset claims the rest), the head what
            // was born since its newest snapshot.
            let mut floor = origin.as_ref().map_or(0, |o| o.txg);
            let mut snaps = Vec::new();
            for s in &rec.snapshots {
                let snap_meta = s.meta().map_err(bad_record)?.unwrap_or_else(empty_meta);
                let snap_name = format!("{dataset}@{}", s.name);
                claim_tree(zio, &snap_meta, floor, false)
                    .map_err(|source| refuse(ImportError::Metadata { dataset: snap_name.clone(), source }))?;
                let dead = claim_dead_list(zio, s.deadlist.as_ref()).map_err(|e| match e {
                    DeadClaim::Record(source) => refuse(ImportError::Record { dataset: snap_name.clone(), source }),
                    DeadClaim::Claim(source) => refuse(ImportError::Metadata { dataset: snap_name.clone(), source }),
                })?;
                floor = s.txg;
                snaps.push(Snap {
                    name: s.name.clone(),
                    txg: s.txg,
                    meta: snap_meta,
                    next_obj: s.next_obj,
                    unlinked: s.unlinked.clone(),
                    creation: s.creation,
                    referenced: SpaceUsed { physical: s.referenced, logical: s.logicalreferenced },
                    // A snapshot from before guids were kept gets one now (written with
                    // the next txg's root).
                    guid: if s.guid == 0 { crate::pool::random_guid() } else { s.guid },
                    dead,
                });
            }
            if !snaps.is_empty() {
                self.inner.snaps.write().insert(rec.id, snaps);
            }
            let head_dead = claim_dead_list(zio, rec.deadlist.as_ref()).map_err(|e| match e {
                DeadClaim::Record(source) => refuse(ImportError::Record { dataset: dataset.clone(), source }),
                DeadClaim::Claim(source) => refuse(ImportError::Metadata { dataset: dataset.clone(), source }),
            })?;
            self.inner.head_dead.lock().insert(rec.id, head_dead);
            let ds = self.add_dataset(
                &rec.name,
                rec.id,
                rec.props.clone(),
                meta.clone(),
                rec.next_obj,
                rec.unlinked.clone(),
                rec.creation,
                origin,
            )?;
            let (physical, logical) = match meta.as_ref() {
                Some(meta) => claim_tree(zio, meta, floor, true),
                None => Ok((0, 0)),
            }
            .map_err(|source| refuse(ImportError::Metadata { dataset, source }))?;
            ds.set_used(SpaceUsed { physical, logical });
        }
        Ok(())
    }
}

enum DeadClaim {
    Record(RecordError),
    Claim(ClaimError),
}

/// Claims the chunks of a dead list the MOS records and returns the list (`None`: the
/// root does not give it, as every root before dead lists: not known). The entries are
/// not claimed here: each is a block a snapshot holds, claimed by its walk.
fn claim_dead_list(zio: &Zio, rec: Option<&DeadListRecord>) -> Result<Option<DeadList>, DeadClaim> {
    let Some(rec) = rec else { return Ok(None) };
    let mut chunks = Vec::with_capacity(rec.chunks.len());
    for c in &rec.chunks {
        let bp = c.block().map_err(DeadClaim::Record)?;
        zio.claim(&bp)
            .map_err(|source| DeadClaim::Claim(ClaimError::BadPointer { vdev: bp.vdev, offset: bp.offset, source }))?;
        chunks.push(Chunk { bp, entries: c.entries, min_birth: c.min_birth, max_birth: c.max_birth, bytes: c.bytes });
    }
    Ok(Some(DeadList::stored(chunks)))
}

/// The dnode table of a dataset with nothing in it.
fn empty_meta() -> Dnode {
    Dnode::new(tarn_objects::ObjType::Meta, 16384, 0, 0)
}

/// Marks live the blocks of a tree born after `floor`; returns the (physical, logical)
/// bytes of the blocks walked. With `whole`, every block is walked (and counted: a
/// head's `referenced`), else subtrees born at or before `floor` are passed over.
fn claim_tree(zio: &Zio, meta: &Dnode, floor: u64, whole: bool) -> Result<(u64, u64), ClaimError> {
    let mut claimer = Claimer { zio, floor, whole, physical: 0, logical: 0, first_error: None };
    traverse::walk(zio, Start::ObjSet(meta), Options::default(), &mut claimer);
    match claimer.first_error {
        Some(e) => Err(e),
        None => Ok((claimer.physical, claimer.logical)),
    }
}

struct Claimer<'a> {
    zio: &'a Zio,
    /// Blocks born at or before it are claimed by an older tree.
    floor: u64,
    whole: bool,
    physical: u64,
    logical: u64,
    first_error: Option<ClaimError>,
}

impl Visitor for Claimer<'_> {
    fn enter(&mut self, b: &Entering<'_>) -> Flow {
        if !self.whole && b.bp.birth <= self.floor {
            return Flow::Skip;
        }
        Flow::Continue
    }

    fn block(&mut self, v: &Visit<'_>) -> Flow {
        // Whether or not it read: a block no copy of which verifies is still referenced.
        if v.bp.birth > self.floor {
            if let Err(source) = self.zio.claim(v.bp) {
                self.first_error.get_or_insert(ClaimError::BadPointer { vdev: v.bp.vdev, offset: v.bp.offset, source });
            }
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

//! Scrub: read and verify every copy of every block of the pool, repairing mirror sides
//! from a good copy, then persist the device error counters.
//!
//! Theory of operation. Scrub commits first, so it checks everything acknowledged so
//! far. Holding the reclaim lock shared (no block it reaches can be freed and reused
//! under it), it reads the root block (MOS) and walks every dataset's object set with
//! `tarn_objects::traverse`, data blocks included, every copy verified. A side that does
//! not verify is counted in its device's checksum errors and rewritten from a good copy
//! by the vdev layer; a block no copy of which verifies is an error. A last commit writes
//! the counters into the MOS.
//!
//! Owns: `ScrubResult` and what it counts.
//!
//! Promises: every block reachable from the committed root is read once, every copy
//! checked; `errors` counts blocks with no good copy, `checksum_errors_seen` every bad
//! copy found.
//!
//! Must never: change a block's contents other than rewriting a bad copy from a
//! verified one, or run without the reclaim lock held.
use std::sync::Arc;

use tarn_dataset::Dataset;
use tarn_objects::traverse::{self, Flow, Options, Outcome, Start, Visit};

use crate::error::PoolError;
use crate::pool::Pool;

#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct ScrubResult {
    pub blocks: u64,
    pub bytes: u64,
    /// Blocks no copy of which verified.
    pub errors: u64,
    /// Bad copies found (mirror sides that did not verify), each rewritten from a good
    /// copy where the block had one.
    pub checksum_errors_seen: u64,
    pub seconds: f64,
}

impl ScrubResult {
    fn count(&mut self, v: &Visit<'_>) -> Flow {
        self.blocks += 1;
        self.bytes += v.bp.psize as u64;
        if let Outcome::Failed(_) = v.outcome {
            self.errors += 1;
        }
        Flow::Continue
    }
}

const SCRUB: Options = Options {
    read_data: true,
    all_copies: true,
};

impl Pool {
    /// Reads and verifies every block of the pool (repairing mirrors), then persists the
    /// error counters.
    pub fn scrub(&self) -> Result<ScrubResult, PoolError> {
        self.sync()?;
        let start = std::time::Instant::now();
        let zio = &self.inner.ctx.zio;
        let mut result = ScrubResult::default();
        let cksum_before: u64 = zio.vdevs.leaves().map(|l| l.status().checksum_errors).sum();
        let datasets: Vec<Arc<Dataset>> = self
            .inner
            .datasets
            .read()
            .values()
            .map(|(_, d)| d.clone())
            .collect();
        {
            let _reclaim = self.inner.ctx.reclaim.read();
            let mos = *self.inner.mos_bp.lock();
            if let Some(root) = mos {
                let start = Start::Tree {
                    root,
                    nlevels: 1,
                    object: None,
                };
                traverse::walk(zio, start, SCRUB, &mut |v: &Visit| result.count(v));
            }
            for ds in datasets {
                let meta = ds.os.meta_dnode();
                traverse::walk(
                    zio,
                    Start::ObjSet(&meta),
                    SCRUB,
                    &mut ScrubVisitor(&mut result),
                );
            }
        }
        let cksum_after: u64 = zio.vdevs.leaves().map(|l| l.status().checksum_errors).sum();
        result.checksum_errors_seen = cksum_after.saturating_sub(cksum_before);
        result.seconds = start.elapsed().as_secs_f64();
        self.force_txg()?;
        Ok(result)
    }
}

/// Counts every block, and a dnode of a newer format as an error (its object's blocks
/// cannot be checked).
struct ScrubVisitor<'a>(&'a mut ScrubResult);

impl traverse::Visitor for ScrubVisitor<'_> {
    fn block(&mut self, v: &Visit<'_>) -> Flow {
        self.0.count(v)
    }

    fn bad_dnode(&mut self, _object: u64, error: &tarn_objects::dnode::DnodeError) -> Flow {
        if let tarn_objects::dnode::DnodeError::UnsupportedVersion { .. } = error {
            self.0.errors += 1;
        }
        Flow::Continue
    }
}

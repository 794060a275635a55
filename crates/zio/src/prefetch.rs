//! Read-ahead: blocks asked for ahead of demand are read into the ARC by two worker
//! threads.
//!
//! Owns: the bounded request queue and the workers.
//!
//! Promises: asking never blocks (a full queue drops the request: prefetch is a hint);
//! a prefetched block enters the ARC only verified; the workers end when the pipeline is
//! dropped.
//!
//! Must never: report an error (a block freed and reused since it was asked for simply
//! fails to verify and is skipped), or count a failed read-ahead as a device error.
use std::sync::Arc;

use tarn_vdev::ReadMode;

use crate::read::{arc_key, class_of};
use crate::{BlockPtr, Zio};

/// Blocks waiting for read-ahead at most; more are dropped (prefetch is a hint).
const PREFETCH_QUEUE: usize = 256;
const PREFETCH_WORKERS: usize = 2;

impl Zio {
    /// Starts the read-ahead workers. They hold only a weak reference, so they end when
    /// the pipeline is dropped.
    pub fn start_prefetch(self: &Arc<Self>) {
        let (tx, rx) = crossbeam_channel::bounded::<BlockPtr>(PREFETCH_QUEUE);
        for i in 0..PREFETCH_WORKERS {
            let rx = rx.clone();
            let zio = Arc::downgrade(self);
            let spawned = std::thread::Builder::new().name(format!("prefetch{i}")).spawn(move || {
                while let Ok(bp) = rx.recv() {
                    let Some(zio) = zio.upgrade() else { return };
                    zio.prefetch_one(&bp);
                }
            });
            if spawned.is_err() {
                return; // no read-ahead: only speed is lost
            }
        }
        *self.prefetch.lock() = Some(tx);
    }

    /// Asks for `bps` to be read into the ARC ahead of demand; never blocks.
    pub fn prefetch(&self, bps: &[BlockPtr]) {
        let guard = self.prefetch.lock();
        let Some(tx) = guard.as_ref() else { return };
        for bp in bps {
            if !self.arc.contains(&arc_key(bp)) && tx.try_send(*bp).is_err() {
                break;
            }
        }
    }

    /// Reads one block into the ARC, quietly: the block may have been freed and its
    /// space reused since it was asked for, which is not an error.
    fn prefetch_one(&self, bp: &BlockPtr) {
        if self.arc.contains(&arc_key(bp)) || self.check_bounds(bp).is_err() {
            return;
        }
        let top = &self.vdevs.tops[bp.vdev as usize];
        let verify = |d: &[u8]| bp.checksum_kind.digest(d) == bp.checksum;
        let mut span = Vec::new();
        let len = bp.psize as usize;
        let read = top.read_block(bp.offset, len, bp.birth, &verify, &mut span, ReadMode::Quiet);
        if let Ok(range) = read.map(|r| r.range) {
            self.arc.insert_prefetched(arc_key(bp), Arc::from(&span[range]), bp.lsize, class_of(bp.block_type));
        }
    }
}

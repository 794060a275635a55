//! Read-ahead: blocks asked for ahead of demand are read into the ARC by two worker
//! threads, as `IoClass::AsyncRead` (behind demand reads and fsyncs on every device).
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

use tarn_arc::{Access, PageId, ReadKind, Residency};
use tarn_vdev::{IoClass, ReadMode};

use crate::read::{arc_key, class_of};
use crate::trace::Event;
use crate::{BlockPtr, Zio};

/// A block to read ahead, and the record it holds.
pub(crate) type PrefetchRequest = (BlockPtr, PageId);

/// Blocks waiting for read-ahead at most; more are dropped (prefetch is a hint).
const PREFETCH_QUEUE: usize = 256;
const PREFETCH_WORKERS: usize = 2;

impl Zio {
    /// Starts the read-ahead workers. They hold only a weak reference, so they end when
    /// the pipeline is dropped.
    pub fn start_prefetch(self: &Arc<Self>) {
        let (tx, rx) = crossbeam_channel::bounded::<PrefetchRequest>(PREFETCH_QUEUE);
        for i in 0..PREFETCH_WORKERS {
            let rx = rx.clone();
            let zio = Arc::downgrade(self);
            let spawned = std::thread::Builder::new().name(format!("prefetch{i}")).spawn(move || {
                while let Ok((bp, page)) = rx.recv() {
                    let Some(zio) = zio.upgrade() else { return };
                    zio.prefetch_one(&bp, Access::page(ReadKind::Prefetch, page));
                }
            });
            if spawned.is_err() {
                return; // no read-ahead: only speed is lost
            }
        }
        *self.prefetch.lock() = Some(tx);
    }

    /// Asks for `blocks` (each with the record it holds) to be read into the ARC ahead of
    /// demand; never blocks. Blocks already cached are counted as prefetch hits.
    pub fn prefetch(&self, blocks: &[(BlockPtr, PageId)]) {
        let guard = self.prefetch.lock();
        let Some(tx) = guard.as_ref() else { return };
        for &(bp, page) in blocks {
            if self.arc.contains(&arc_key(&bp)) {
                self.arc.counters.kind_hits.add(ReadKind::Prefetch, 1);
            } else if tx.try_send((bp, page)).is_err() {
                break;
            }
        }
    }

    /// What became of a block read ahead (cached, evicted unread, or not known), for the
    /// read-ahead's own judgement of its distance.
    pub fn residency(&self, bp: &BlockPtr) -> Residency {
        self.arc.residency(&arc_key(bp))
    }

    /// Reads one block into the ARC, quietly: the block may have been freed and its
    /// space reused since it was asked for, which is not an error.
    fn prefetch_one(&self, bp: &BlockPtr, access: Access) {
        if self.arc.contains(&arc_key(bp)) || self.check_bounds(bp).is_err() {
            return;
        }
        let top = &self.vdevs.tops[bp.vdev as usize];
        let verify = |d: &[u8]| bp.checksum_kind.digest(d) == bp.checksum;
        let mut span = Vec::new();
        self.arc.note_bypass(access.kind);
        self.trace_event(Event::Prefetch, bp, access);
        let len = bp.psize as usize;
        let read = top.read_block(bp.offset, len, bp.birth, &verify, &mut span, ReadMode::Quiet, IoClass::AsyncRead);
        if let Ok(range) = read.map(|r| r.range) {
            self.count_device_read(access.kind, range.len() as u64, span.len() as u64);
            self.arc.insert_prefetched(
                arc_key(bp),
                Arc::from(&span[range]),
                bp.lsize,
                class_of(bp.block_type),
                access.page,
            );
        }
    }
}

//! The block event trace (`TARN_READ_TRACE=FILE`): every block read, written, freed and
//! read ahead, one line each, for replaying a real workload through cache policies
//! (`crates/arc/benches/trace.rs`) — and the per-kind read counters.
//!
//! Line format (space separated; `-` where a field does not apply):
//!
//! ```text
//! EV OUT KIND VDEV OFFSET BIRTH PSIZE LSIZE OBJSET OBJECT BLKID
//! ```
//!
//! * `EV`: `R` a read asked for, `W` a block written, `F` a block freed, `P` a block read
//!   ahead from the device by prefetch;
//! * `OUT` (reads): `h` served by a decompressed copy, `a` by the ARC, `d` by the device;
//! * `KIND`: the read kind (`demand`, `rmw`, `prefetch`…) for `R` and `P`; the block's
//!   type (`data`, `indirect`, `dnode`, `directory`, `pool`) for `W` and `F`;
//! * `VDEV OFFSET BIRTH`: the block's physical identity (the ARC's key); `PSIZE LSIZE`:
//!   stored and logical bytes;
//! * `OBJSET OBJECT BLKID`: the record's logical identity when the caller knows it (a
//!   page keeps it across copy-on-write rewrites).
//!
//! Owns: the trace file and its format; `refine`, which turns what a caller reads for into
//! the kind a read is counted under.
//!
//! Promises: with no trace file, an event costs one branch; a trace write never fails a
//! read or a write (a full disk loses trace lines, not data).
//!
//! Must never: allocate or lock on the read path when tracing is off.
use std::io::Write;
use std::sync::atomic::Ordering;

use parking_lot::Mutex;
use tarn_arc::{Access, ReadKind};

use crate::{BlockPtr, BlockType, Zio};

pub(crate) type TraceFile = Mutex<std::io::BufWriter<std::fs::File>>;

/// Opens the trace file named by `TARN_READ_TRACE` (appending), if any.
pub(crate) fn open_trace() -> Option<TraceFile> {
    let path = std::env::var_os("TARN_READ_TRACE")?;
    let file = std::fs::OpenOptions::new().create(true).append(true).open(path).ok()?;
    Some(Mutex::new(std::io::BufWriter::new(file)))
}

/// Where a read was served from.
#[derive(Clone, Copy)]
pub(crate) enum Outcome {
    HotCopy,
    Arc,
    Device,
}

/// One line of the trace.
#[derive(Clone, Copy)]
pub(crate) enum Event {
    Read(Outcome),
    Write,
    Free,
    Prefetch,
}

/// The kind a read is counted under: metadata is named by its block type whatever the
/// caller read it for, except past the cache (scrub, import), which keeps its own kind.
pub(crate) fn refine(access: Access, block_type: BlockType) -> Access {
    if matches!(access.kind, ReadKind::Scrub | ReadKind::Import) {
        return access;
    }
    match block_type {
        BlockType::Data => access,
        BlockType::Indirect => access.as_kind(ReadKind::Indirect),
        BlockType::Dnodes => access.as_kind(ReadKind::Dnode),
        BlockType::Directory => access.as_kind(ReadKind::Directory),
        BlockType::Mos => access.as_kind(ReadKind::Pool),
    }
}

/// The block type's name in `W` and `F` lines.
fn type_name(t: BlockType) -> &'static str {
    match t {
        BlockType::Data => "data",
        BlockType::Indirect => "indirect",
        BlockType::Dnodes => "dnode",
        BlockType::Directory => "directory",
        BlockType::Mos => "pool",
    }
}

impl Zio {
    /// Appends one event to the trace, if one is being recorded.
    pub(crate) fn trace_event(&self, event: Event, bp: &BlockPtr, access: Access) {
        let Some(trace) = &self.trace else { return };
        let (ev, out, kind) = match event {
            Event::Read(Outcome::HotCopy) => ('R', 'h', access.kind.name()),
            Event::Read(Outcome::Arc) => ('R', 'a', access.kind.name()),
            Event::Read(Outcome::Device) => ('R', 'd', access.kind.name()),
            Event::Prefetch => ('P', '-', access.kind.name()),
            Event::Write => ('W', '-', type_name(bp.block_type)),
            Event::Free => ('F', '-', type_name(bp.block_type)),
        };
        let mut t = trace.lock();
        let _ = write!(t, "{ev} {out} {kind} {} {} {} {} {}", bp.vdev, bp.offset, bp.birth, bp.psize, bp.lsize);
        let _ = match access.page {
            Some(p) => writeln!(t, " {} {} {}", p.objset, p.object, p.blkid),
            None => writeln!(t, " - - -"),
        };
    }

    /// Counts one device read of `kind`: `stored` bytes of block, `span` bytes the device
    /// transferred (the block's sectors).
    pub(crate) fn count_device_read(&self, kind: ReadKind, stored: u64, span: u64) {
        self.stats.blocks_read.fetch_add(1, Ordering::Relaxed);
        self.stats.physical_bytes_read.fetch_add(stored, Ordering::Relaxed);
        self.stats.device_bytes_read.fetch_add(span, Ordering::Relaxed);
        self.stats.kind_reads.add(kind, 1);
        self.stats.kind_read_bytes.add(kind, span);
    }

    /// Flushes the trace (at export, so a replay sees every event).
    pub fn flush_trace(&self) {
        if let Some(t) = &self.trace {
            let _ = t.lock().flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_counted_by_its_type_except_past_the_cache() {
        let page = tarn_arc::PageId { objset: 1, object: 2, blkid: 3 };
        for kind in [ReadKind::Demand, ReadKind::Rmw, ReadKind::LogFetch, ReadKind::Prefetch] {
            let a = Access::page(kind, page);
            assert_eq!(refine(a, BlockType::Data), a, "data keeps what it was read for");
            assert_eq!(refine(a, BlockType::Indirect).kind, ReadKind::Indirect);
            assert_eq!(refine(a, BlockType::Dnodes).kind, ReadKind::Dnode);
            assert_eq!(refine(a, BlockType::Directory).kind, ReadKind::Directory);
            assert_eq!(refine(a, BlockType::Mos).kind, ReadKind::Pool);
            assert_eq!(refine(a, BlockType::Indirect).page, Some(page));
        }
        for kind in [ReadKind::Scrub, ReadKind::Import] {
            for t in [BlockType::Data, BlockType::Indirect, BlockType::Dnodes, BlockType::Mos] {
                assert_eq!(refine(Access::of(kind), t).kind, kind);
            }
        }
    }
}

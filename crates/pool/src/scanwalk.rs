//! One slice of a scan: the walk from a bookmark, what each block costs and counts, and
//! the pacing of the scan's I/O (see `scrub` for the theory of operation).
//!
//! Walk order and bookmarks. The pool's root block comes first, then each dataset by id:
//! its head, then its snapshots oldest first, each block once — the head passes over
//! what is born by its newest snapshot that existed when the scan started (or its
//! origin), each snapshot over what is born by the one before it (or the origin): a
//! snapshot's blocks no head holds any more are scanned (and resilvered) too, and a
//! snapshot taken during the scan is walked after the head. Each tree's dead-list
//! chunks (pool blocks like any other, FORMAT.md §12.2) are scanned just before the tree
//! itself; a slice may pause among them (bookmark object 0, `blkid` = the chunks done:
//! the list's order is stable but for a destroy of the snapshot before it, after which
//! the resumed scan may pass over or reread a few chunks). Inside a tree, the dnode
//! table and the objects it describes are walked depth first
//! (a table block, then the objects in it, in order), and each object's blocks in record
//! order. A slice stops only before a block of an object (not of the table), and its
//! bookmark is (dataset, object, first record under that block). Resuming, the walk
//! skips — before reading them — table blocks whose objects all come before the
//! bookmark's, objects before it, and blocks of its object whose records all come
//! before it; the table and indirect blocks on the path to the bookmark are read again
//! but not counted again.
//!
//! Owns: `scan_slice`, the per-block work (verify, copy, count, log an error), `Pacer`.
//!
//! Promises: a reclaim section is open for the whole slice and only for it; a
//! block is counted once per scan however often the path to it is read again.
//!
//! Must never: sleep without bound inside its reclaim section: every wait is capped
//! (`DEMAND_WAIT`, `SCAN_DELAY`, the rate's own step), and the slice ends at its deadline.
use std::sync::Arc;
use std::time::{Duration, Instant};

use tarn_dataset::Dataset;
use tarn_objects::dnode::DnodeError;
use tarn_objects::traverse::{self, Entering, Flow, Options, Outcome, Start, Visit, Walked};
use tarn_objects::tree::span;
use tarn_objects::{Dnode, DNODE_SIZE};
use tarn_vdev::iostat::now_ns;
use tarn_vdev::TopVdev;
use tarn_zio::BlockPtr;

use crate::errlog::ErrKey;
use crate::pool::Inner;
use crate::scrub::{Bookmark, ScanKind, ScanPace, ScanRecord};
use crate::snapshots::deadlist::Chunk;

/// How long a slice keeps its reclaim section open (and so may hold up a commit's last step).
pub(crate) const SLICE: Duration = Duration::from_millis(100);
/// Longest wait for demand I/O in flight before one scan I/O goes anyway (a scan under
/// a saturating load still progresses).
const DEMAND_WAIT: Duration = Duration::from_millis(10);
/// Demand I/O this recent makes the scan space its own I/Os out by `SCAN_DELAY`.
const SCAN_IDLE_NS: u64 = 50_000_000;
const SCAN_DELAY: Duration = Duration::from_millis(4);

/// How a slice ended.
pub(crate) enum SliceEnd {
    /// Every block was walked.
    Done,
    /// The slice's time is up, or a stop was asked: the walk resumes here.
    Paused(Bookmark),
}

/// Paces the scan's I/O (see `ScanPace`).
pub(crate) struct Pacer {
    pace: ScanPace,
    /// Bytes issued since `since` (the rate is kept per slice: no burst after a pause).
    bytes: u64,
    since: Instant,
}

impl Pacer {
    pub(crate) fn new(pace: ScanPace) -> Pacer {
        Pacer { pace, bytes: 0, since: Instant::now() }
    }

    fn new_slice(&mut self) {
        self.bytes = 0;
        self.since = Instant::now();
    }

    /// Waits as the pace says before a scan I/O of `bytes` to `top`.
    fn before_io(&mut self, top: &TopVdev, bytes: u64) {
        if self.pace.yield_to_demand {
            let until = Instant::now() + DEMAND_WAIT;
            while demand_in_flight(top) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(1));
            }
            if now_ns().saturating_sub(last_demand(top)) < SCAN_IDLE_NS {
                std::thread::sleep(SCAN_DELAY);
            }
        }
        if self.pace.bytes_per_sec > 0 {
            self.bytes += bytes;
            let due = Duration::from_secs_f64(self.bytes as f64 / self.pace.bytes_per_sec as f64);
            let elapsed = self.since.elapsed();
            if due > elapsed {
                std::thread::sleep(due - elapsed);
            }
        }
    }
}

fn demand_in_flight(top: &TopVdev) -> bool {
    top.leaves.iter().any(|l| l.demand_activity().0 > 0)
}

fn last_demand(top: &TopVdev) -> u64 {
    top.leaves.iter().map(|l| l.demand_activity().1).max().unwrap_or(0)
}

/// Walks from the record's bookmark for about `SLICE`, inside one reclaim section.
pub(crate) fn scan_slice(inner: &Inner, record: &mut ScanRecord, pacer: &mut Pacer) -> SliceEnd {
    // Before the datasets are listed: a dataset destroyed (and its blocks released) after
    // the list was taken would be walked over freed blocks.
    let _reclaim = inner.ctx.reclaim.reading();
    let mut sets: Vec<(u64, Arc<Dataset>, u64)> = inner
        .datasets
        .read()
        .values()
        .map(|(meta, ds)| (meta.id, ds.clone(), meta.origin.as_ref().map_or(0, |o| o.txg)))
        .collect();
    sets.sort_by_key(|(id, _, _)| *id);
    pacer.new_slice();
    let from = record.bookmark;
    let opts = Options {
        // A resilver reads data blocks only to copy them (`resilver_block`).
        read_data: record.kind == ScanKind::Scrub,
        // Every read is scan I/O: through `scrub_read`, all sides verified.
        all_copies: true,
    };
    let mut v = ScanVisitor {
        inner,
        record,
        pacer,
        deadline: Instant::now() + SLICE,
        dataset: 0,
        snapshot: 0,
        floor: 0,
        from: None,
        per_block: 1,
        top_level: 0,
        paused: None,
    };
    if from.is_none() {
        if let Some(root) = *inner.mos_bp.lock() {
            let start = Start::Tree { root, nlevels: 1, object: None };
            traverse::walk(&inner.ctx.zio, start, opts, &mut v);
        }
    }
    for (id, ds, origin_txg) in sets {
        if from.is_some_and(|b| id < b.dataset) {
            continue;
        }
        v.dataset = id;
        for Tree { key, meta, floor, chunks } in trees(inner, id, &ds, origin_txg, v.record.max_txg) {
            if from.is_some_and(|b| (id, key) < (b.dataset, b.snapshot)) {
                continue;
            }
            v.snapshot = key;
            v.floor = floor;
            let resume = from.filter(|b| (b.dataset, b.snapshot) == (id, key));
            // Resuming among the tree's objects: its list was scanned; at object 0, in
            // its list after `blkid` chunks; else from the start.
            v.from = resume.filter(|b| b.object != 0).map(|b| (b.object, b.blkid));
            v.per_block = (u64::from(meta.blksz) / DNODE_SIZE as u64).max(1);
            if v.from.is_none() {
                let done = resume.map_or(0, |b| b.blkid);
                if let Some(at) = v.dead_list(&chunks, done) {
                    return SliceEnd::Paused(at);
                }
            }
            let walked = traverse::walk(&inner.ctx.zio, Start::ObjSet(&meta), opts, &mut v);
            if walked == Walked::Stopped {
                let at = v.paused.expect("the scan stops a walk only to pause it");
                return SliceEnd::Paused(at);
            }
        }
    }
    SliceEnd::Done
}

/// One tree of a dataset as the scan walks it.
struct Tree {
    /// Bookmark key: 0 for the head, else the snapshot's txg.
    key: u64,
    /// Its dnode-table root.
    meta: Dnode,
    /// Blocks born at or before it are another tree's.
    floor: u64,
    /// The chunks of its dead list (empty when it has none or it is not known).
    chunks: Vec<Chunk>,
}

/// The trees of dataset `id` in walk order. The head's floor counts only snapshots
/// taken by `scan_txg` (the scan's `max_txg`), so it stays the same from slice to slice;
/// a destroy only lowers a floor, which walks more, never less. The lists are read under
/// `snaps` (then `head_dead`), as the sync thread changes them: the chunks named are on
/// disk, and the caller's reclaim section keeps them there for the slice.
fn trees(inner: &Inner, id: u64, head: &Dataset, origin_txg: u64, scan_txg: u64) -> Vec<Tree> {
    let snaps_guard = inner.snaps.read();
    let snaps = snaps_guard.get(&id).map(Vec::as_slice).unwrap_or_default();
    let head_chunks = match inner.head_dead.lock().get(&id) {
        Some(Some(list)) => list.chunks.clone(),
        _ => Vec::new(),
    };
    let head_floor = snaps.iter().filter(|s| s.txg <= scan_txg).map(|s| s.txg).max().unwrap_or(0).max(origin_txg);
    let mut out = vec![Tree { key: 0, meta: head.meta_dnode(), floor: head_floor, chunks: head_chunks }];
    let mut prev = origin_txg;
    for s in snaps {
        let chunks = s.dead.as_ref().map(|d| d.chunks.clone()).unwrap_or_default();
        out.push(Tree { key: s.txg, meta: s.meta.clone(), floor: prev, chunks });
        prev = s.txg;
    }
    out
}

/// Where a block sits in the walk order.
#[derive(Clone, Copy)]
enum Place {
    /// The pool's root block.
    Root,
    /// A block of the dnode table, describing objects `first..end`.
    Table { first: u64, end: u64 },
    /// A block of object `object` holding records `first..end`.
    Object { object: u64, first: u64, end: u64 },
}

struct ScanVisitor<'a> {
    inner: &'a Inner,
    record: &'a mut ScanRecord,
    pacer: &'a mut Pacer,
    deadline: Instant,
    /// The dataset being walked (0: the pool's root block).
    dataset: u64,
    /// Its tree: 0 for the head, else a snapshot's txg.
    snapshot: u64,
    /// Blocks born at or before it are another tree's, walked there.
    floor: u64,
    /// Resuming inside this dataset: (object, record) of the bookmark.
    from: Option<(u64, u64)>,
    /// Dnodes per dnode-table block.
    per_block: u64,
    /// The level of the root block of the object being walked.
    top_level: u8,
    paused: Option<Bookmark>,
}

impl ScanVisitor<'_> {
    fn place(&self, object: Option<u64>, level: u8, blkid: u64) -> Place {
        let records = span(level);
        let first = blkid.saturating_mul(records);
        let end = blkid.saturating_add(1).saturating_mul(records);
        match object {
            None => Place::Root,
            Some(0) => {
                Place::Table { first: first.saturating_mul(self.per_block), end: end.saturating_mul(self.per_block) }
            }
            Some(object) => Place::Object { object, first, end },
        }
    }

    /// True if the block lies wholly before the bookmark (examined by an earlier slice).
    fn before_bookmark(&self, place: Place) -> bool {
        let Some((object, blkid)) = self.from else {
            return false;
        };
        match place {
            Place::Root => false,
            Place::Table { end, .. } => end <= object,
            Place::Object { object: o, end, .. } => o < object || (o == object && end <= blkid),
        }
    }

    /// True if the block is examined for the first time (not a path block read again
    /// to reach the bookmark).
    fn first_time(&self, place: Place) -> bool {
        let Some((object, blkid)) = self.from else {
            return true;
        };
        match place {
            Place::Root => true,
            Place::Table { first, .. } => first > object,
            Place::Object { object: o, first, .. } => o > object || (o == object && first >= blkid),
        }
    }

    fn should_pause(&self) -> bool {
        Instant::now() >= self.deadline || self.inner.scan.stop_requested()
    }

    /// True if walking the block costs a device read.
    fn reads(&self, b: &Entering<'_>) -> bool {
        match self.record.kind {
            ScanKind::Scrub => true,
            ScanKind::Resilver => {
                let data = matches!(b.object, Some(o) if o != 0) && b.level == 0;
                !data || self.record.in_missed_range(b.bp.birth)
            }
        }
    }

    /// Scans the chunks of the current tree's dead list after the first `done`: each
    /// copy verified and a bad one rewritten (scrub), copied to the sides that missed
    /// its birth (resilver). Returns where it paused, if the slice ended among them (at
    /// least one chunk read first, so every slice makes progress).
    fn dead_list(&mut self, chunks: &[Chunk], done: u64) -> Option<Bookmark> {
        let start = usize::try_from(done).unwrap_or(usize::MAX);
        for (i, chunk) in chunks.iter().enumerate().skip(start) {
            if i > start && self.should_pause() {
                let at = Bookmark { dataset: self.dataset, snapshot: self.snapshot, object: 0, blkid: i as u64 };
                return Some(at);
            }
            self.dead_list_chunk(&chunk.bp);
        }
        None
    }

    fn dead_list_chunk(&mut self, bp: &BlockPtr) {
        let psize = u64::from(bp.psize);
        self.record.examined += psize;
        self.record.blocks += 1;
        let zio = &self.inner.ctx.zio;
        let top = &zio.vdevs.tops[usize::from(bp.vdev)];
        match self.record.kind {
            ScanKind::Scrub => {
                self.pacer.before_io(top, psize);
                match zio.read_all_copies(bp) {
                    Ok(read) => {
                        self.record.bad_copies += u64::from(read.bad_copies);
                        self.record.repaired += u64::from(read.bad_copies) * psize;
                    }
                    Err(_) => self.dead_list_failed(bp),
                }
            }
            ScanKind::Resilver if self.record.in_missed_range(bp.birth) => {
                self.pacer.before_io(top, psize);
                match zio.resilver_block(bp) {
                    Ok(sides) => self.record.repaired += u64::from(sides) * psize,
                    Err(_) => self.dead_list_failed(bp),
                }
            }
            // Born before any side left: every side has it.
            ScanKind::Resilver => {}
        }
    }

    /// A chunk with no good copy: logged as the current tree's dead list.
    fn dead_list_failed(&mut self, bp: &BlockPtr) {
        self.inner.log_error(ErrKey::dead_list(self.dataset, self.snapshot), bp);
        self.record.errors += 1;
    }

    /// A block with no good copy: into the error log, and counted once.
    fn failed(&mut self, v: &Visit<'_>, first: bool) {
        let key =
            ErrKey::Block { dataset: self.dataset, object: v.object.unwrap_or(0), level: v.level, blkid: v.blkid };
        self.inner.log_error(key, v.bp);
        if first {
            self.record.errors += 1;
        }
    }
}

impl traverse::Visitor for ScanVisitor<'_> {
    fn enter(&mut self, b: &Entering<'_>) -> Flow {
        let place = self.place(b.object, b.level, b.blkid);
        // Another tree's block (and its subtree): scanned there. The pool's root block
        // is born in the last txg, after any floor.
        if b.bp.birth <= self.floor || self.before_bookmark(place) {
            return Flow::Skip;
        }
        if let Place::Object { object, first, .. } = place {
            // Never before the first child of an indirect block: the bookmark would be
            // the parent's first record too, and the resumed walk would count the
            // parent (examined before the pause) again.
            let first_child = b.level < self.top_level && first % span(b.level + 1) == 0;
            if !first_child && self.should_pause() {
                self.paused = Some(Bookmark { dataset: self.dataset, snapshot: self.snapshot, object, blkid: first });
                return Flow::Stop;
            }
        }
        let data = matches!(place, Place::Object { .. }) && b.level == 0;
        let passed_over = match self.record.kind {
            // Written since the scrub started: checked on its way in.
            ScanKind::Scrub => data && b.bp.birth > self.record.max_txg,
            // Born before any side left, and so is everything under it.
            ScanKind::Resilver => b.bp.birth < self.record.min_txg,
        };
        if passed_over {
            if self.first_time(place) {
                self.record.examined += u64::from(b.bp.psize);
            }
            return Flow::Skip;
        }
        if self.reads(b) {
            let top = &self.inner.ctx.zio.vdevs.tops[usize::from(b.bp.vdev)];
            self.pacer.before_io(top, u64::from(b.bp.psize));
        }
        Flow::Continue
    }

    fn block(&mut self, v: &Visit<'_>) -> Flow {
        let place = self.place(v.object, v.level, v.blkid);
        let first = self.first_time(place);
        let psize = u64::from(v.bp.psize);
        match v.outcome {
            Outcome::Failed(_) => self.failed(v, first),
            Outcome::Verified { bad_copies, .. } if first => {
                self.record.bad_copies += u64::from(bad_copies);
                self.record.repaired += u64::from(bad_copies) * psize;
            }
            _ => {}
        }
        let copy = self.record.kind == ScanKind::Resilver
            && first
            && self.record.in_missed_range(v.bp.birth)
            && !matches!(v.outcome, Outcome::Failed(_));
        if copy {
            match self.inner.ctx.zio.resilver_block(v.bp) {
                Ok(sides) => self.record.repaired += u64::from(sides) * psize,
                Err(_) => self.failed(v, true),
            }
        }
        if first {
            self.record.examined += psize;
            self.record.blocks += 1;
        }
        Flow::Continue
    }

    fn object(&mut self, _id: u64, dnode: &Dnode) -> Flow {
        self.top_level = dnode.nlevels.saturating_sub(1);
        Flow::Continue
    }

    fn bad_dnode(&mut self, object: u64, error: &DnodeError) -> Flow {
        // A newer tarn's object: its blocks cannot be checked.
        if let DnodeError::UnsupportedVersion { .. } = error {
            let place = self.place(Some(object), 0, 0);
            if self.first_time(place) {
                self.record.errors += 1;
            }
        }
        Flow::Continue
    }
}

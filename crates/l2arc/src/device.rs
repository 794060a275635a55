//! One cache device: its header, its ring of chunks, its index, its state.
//!
//! Theory of operation. The ring's history is one absolute position (`abs`: bytes
//! written since the device was initialised, laps included); a chunk at `abs` sits at
//! `ring_start + abs % ring_size` and never wraps (a chunk that would is placed at the
//! next lap's start). A writer reserves its chunk's span under the ring lock (advancing
//! `reserved_end` first, which makes everything the span will overwrite invalid at once:
//! a block is served only if it lies at or past `reserved_end - ring_size`), then writes
//! with no lock held, then indexes the chunk's blocks. A read checks that floor before
//! and after its device read, so a block overwritten meanwhile is a miss.
//!
//! Rebuild (at import, on a thread while reads are served): walk forward from the ring's
//! start along chunks whose log blocks verify and chain (`abs` and `prev` consistent):
//! that is the current lap, whose end is where writing resumes; then follow `prev`
//! backwards from the lap's first chunk through the previous lap's chunks not yet
//! overwritten. A torn or foreign chunk ends a walk; nothing found means a fresh start.
//!
//! Leaving (`pool remove`, while the pool serves): the device is marked leaving, so no
//! new read, chunk write or rebuild step starts on it; the I/O already under way is
//! counted (`InFlight`) and finishes; then the index is emptied, the header zeroed and
//! the device let go. A reader that finds it leaving takes the miss and reads the pool.
//!
//! Owns: the device handle, its header, the ring position, the index, the per-device
//! counters and state, and the count of its I/O under way.
//!
//! Promises: a block is served only from a chunk whose log block verified (at write or
//! rebuild) and that the ring has not overwritten; a device that fails (a write, or
//! repeated reads) is dropped — state `Faulted`, index cleared — and costs only hits;
//! once `leave` returns no I/O of the cache is under way on the device or starts again.
//!
//! Must never: block a reader on a writer's device I/O, serve bytes from a span a
//! writer has reserved, or take a lock to count a read under way (two atomics).
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use tarn_arc::BlockKey;
use tarn_vdev::BlockDevice;

use crate::index::{Index, POS_LIMIT};
use crate::layout::{DevHeader, HeaderRefused, LogEntry, LogHeader, BLOCK_ALIGN, CHUNK_ALIGN, HEADER_SIZE, NO_PREV};
use crate::PoolBlocks;

/// Read errors after which a device is dropped (a few may be transient; many mean it is
/// going).
const READ_ERRORS_TO_FAULT: u64 = 16;
/// The index is swept of overwritten entries each time the ring advances by this
/// fraction of its size.
const SWEEP_FRACTION: u64 = 8;

/// Where a cache device stands.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DevState {
    /// Serving and being fed.
    Online,
    /// Its index is being rebuilt from its log blocks (reads are served meanwhile).
    Rebuilding,
    /// Not found or not openable at import: the pool runs without it.
    Unavail,
    /// Failed while in use and dropped.
    Faulted,
    /// Taken out of the pool (`pool remove`): never used again, not shown.
    Removed,
}

impl DevState {
    pub fn name(&self) -> &'static str {
        match self {
            DevState::Online => "ONLINE",
            DevState::Rebuilding => "REBUILDING",
            DevState::Unavail => "UNAVAIL",
            DevState::Faulted => "FAULTED",
            DevState::Removed => "REMOVED",
        }
    }
}

/// A chunk still in the ring: its span and what it holds (for the size counters).
#[derive(Clone, Copy, Debug)]
struct ChunkSum {
    abs: u64,
    psize: u64,
    lsize: u64,
}

#[derive(Default)]
struct Ring {
    next_abs: u64,
    last_chunk: Option<u64>,
    chunks: VecDeque<ChunkSum>,
    psize: u64,
    lsize: u64,
}

impl Ring {
    fn push(&mut self, c: ChunkSum, floor: u64) {
        self.psize += c.psize;
        self.lsize += c.lsize;
        self.chunks.push_back(c);
        self.drop_before(floor);
    }

    fn push_front(&mut self, c: ChunkSum) {
        self.psize += c.psize;
        self.lsize += c.lsize;
        self.chunks.push_front(c);
    }

    fn drop_before(&mut self, floor: u64) {
        while let Some(c) = self.chunks.front().copied() {
            if c.abs >= floor {
                break;
            }
            self.chunks.pop_front();
            self.psize -= c.psize;
            self.lsize -= c.lsize;
        }
    }
}

/// Counters of one device (also summed into the cache's).
#[derive(Default)]
pub struct DevCounters {
    pub read_bytes: AtomicU64,
    pub write_bytes: AtomicU64,
    pub io_errors: AtomicU64,
    pub rebuilt_blocks: AtomicU64,
    /// Entries the rebuild found in the log blocks but left out: the pool says their
    /// block is gone (freed, or born in a txg that never committed).
    pub rebuild_stale: AtomicU64,
    pub rebuild_ms: AtomicU64,
}

/// What a device read found.
pub enum DevRead {
    /// The block's stored bytes are `scratch[range]`.
    Hit(std::ops::Range<usize>),
    Miss,
    IoError,
}

/// One block queued for a chunk.
pub struct Pending {
    pub key: BlockKey,
    pub bytes: Arc<[u8]>,
    pub lsize: u32,
    pub class: tarn_arc::Class,
    /// The dataset whose page it is, if the ARC knew (`secondarycache` is asked then).
    pub objset: Option<u64>,
}

/// The device's I/O under way, and whether it is leaving the pool. A reader counts
/// itself in, then looks at `leaving`; `leave` sets `leaving`, then waits for the count
/// to reach zero. Both sides use `SeqCst`, so one of them sees the other: either the
/// reader backs out, or `leave` waits for it.
#[derive(Default)]
struct InFlight {
    count: AtomicU64,
    leaving: AtomicBool,
}

/// One I/O of the cache on a device, counted until dropped (`CacheDev::begin_io`).
struct IoGuard<'a>(&'a AtomicU64);

impl Drop for IoGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[derive(Clone, Copy, Debug)]
struct Geometry {
    start: u64,
    end: u64,
}

impl Geometry {
    fn size(&self) -> u64 {
        self.end - self.start
    }
}

pub struct CacheDev {
    pub guid: u64,
    pub path: PathBuf,
    dev: Option<Arc<dyn BlockDevice>>,
    /// The ring's place on the device (fixed for the device's life in the pool).
    geometry: Option<Geometry>,
    /// The header's generation: log blocks of another are not this ring's.
    generation: AtomicU64,
    pool_guid: u64,
    state: Mutex<DevState>,
    /// What happened to it at import, for status ("initialised: blank device").
    note: Mutex<Option<String>>,
    pub(crate) index: Index,
    ring: Mutex<Ring>,
    /// End of the last reserved chunk: everything before `reserved_end - ring_size` is
    /// (being) overwritten.
    reserved_end: AtomicU64,
    /// Set once the rebuild found where writing resumes: the feed waits for it.
    feed_ready: AtomicBool,
    /// Filled the ring once (the feed's boost ends).
    warm: AtomicBool,
    /// Rebuild progress: bytes of ring examined, of `ring_size`.
    pub(crate) rebuild_scanned: AtomicU64,
    pub counters: DevCounters,
    last_sweep: AtomicU64,
    in_flight: InFlight,
}

impl CacheDev {
    /// A configured device that could not be opened: shown, never used.
    pub fn unavailable(guid: u64, path: PathBuf, why: String) -> CacheDev {
        CacheDev::unavailable_noting(guid, path, format!("{why}; initialised at the next import that finds it"))
    }

    /// A configured device the cache does not use, and `note` saying why (status).
    pub fn unavailable_noting(guid: u64, path: PathBuf, note: String) -> CacheDev {
        let d = CacheDev::blank(guid, path, None, None, 0);
        *d.state.lock() = DevState::Unavail;
        *d.note.lock() = Some(note);
        d
    }

    /// Why `dev`'s header is not this pool's cache device `guid` (blank, another pool's,
    /// damaged…), or `Ok` if it is.
    pub fn check_header(guid: u64, pool_guid: u64, dev: &dyn BlockDevice) -> Result<DevHeader, HeaderRefused> {
        let mut buf = vec![0u8; HEADER_SIZE as usize];
        match dev.read_at(&mut buf, 0) {
            Ok(()) => DevHeader::decode(&buf, pool_guid, guid, dev.size()),
            Err(_) => Err(HeaderRefused::Damaged),
        }
    }

    fn blank(
        guid: u64,
        path: PathBuf,
        dev: Option<Arc<dyn BlockDevice>>,
        header: Option<DevHeader>,
        pool_guid: u64,
    ) -> CacheDev {
        CacheDev {
            guid,
            path,
            dev,
            geometry: header.map(|h| Geometry { start: h.ring_start, end: h.ring_end }),
            generation: AtomicU64::new(header.map_or(0, |h| h.generation)),
            pool_guid,
            state: Mutex::new(DevState::Online),
            note: Mutex::new(None),
            index: Index::default(),
            ring: Mutex::new(Ring::default()),
            reserved_end: AtomicU64::new(0),
            feed_ready: AtomicBool::new(false),
            warm: AtomicBool::new(false),
            rebuild_scanned: AtomicU64::new(0),
            counters: DevCounters::default(),
            last_sweep: AtomicU64::new(0),
            in_flight: InFlight::default(),
        }
    }

    /// Opens a cache device of pool `pool_guid`: keeps its ring if its header is this
    /// pool's and this device's (`needs_rebuild`), else initialises it afresh and says
    /// why in its note. Fails only if the device cannot be written.
    pub fn attach(guid: u64, pool_guid: u64, dev: Arc<dyn BlockDevice>) -> Result<(CacheDev, bool), std::io::Error> {
        let found = CacheDev::check_header(guid, pool_guid, dev.as_ref());
        let path = dev.path().to_path_buf();
        match found {
            Ok(h) => Ok((CacheDev::blank(guid, path, Some(dev), Some(h), pool_guid), true)),
            Err(why) => {
                let h = initialise(dev.as_ref(), pool_guid, guid)?;
                let d = CacheDev::blank(guid, path, Some(dev), Some(h), pool_guid);
                *d.note.lock() = Some(format!("initialised: {why}"));
                d.feed_ready.store(true, Ordering::Release);
                Ok((d, false))
            }
        }
    }

    pub fn state(&self) -> DevState {
        self.state.lock().clone()
    }

    pub fn note(&self) -> Option<String> {
        self.note.lock().clone()
    }

    pub fn usable(&self) -> bool {
        matches!(*self.state.lock(), DevState::Online | DevState::Rebuilding)
    }

    pub fn feed_ready(&self) -> bool {
        self.feed_ready.load(Ordering::Acquire) && self.usable()
    }

    pub fn is_warm(&self) -> bool {
        self.warm.load(Ordering::Relaxed)
    }

    pub fn ring_size(&self) -> u64 {
        self.geometry.map_or(0, |g| g.size())
    }

    /// Bytes of the device (0 if unavailable).
    pub fn device_size(&self) -> u64 {
        self.dev.as_ref().map_or(0, |d| d.size())
    }

    /// (allocated, logical) bytes of the blocks in the ring and not yet overwritten.
    pub fn sizes(&self) -> (u64, u64) {
        let r = self.ring.lock();
        (r.psize, r.lsize)
    }

    /// RAM this device's bookkeeping takes: the index, and a summary per chunk in the
    /// ring (for the size counters).
    pub fn header_bytes(&self) -> u64 {
        let chunks = self.ring.lock().chunks.capacity() * std::mem::size_of::<ChunkSum>();
        self.index.header_bytes() + chunks as u64
    }

    /// Counts one I/O of the cache on this device, unless it is leaving the pool.
    fn begin_io(&self) -> Option<IoGuard<'_>> {
        let f = &self.in_flight;
        f.count.fetch_add(1, Ordering::SeqCst);
        if f.leaving.load(Ordering::SeqCst) {
            f.count.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(IoGuard(&f.count))
    }

    /// True once `leave` began: the feed stops for good.
    pub fn is_leaving(&self) -> bool {
        self.in_flight.leaving.load(Ordering::SeqCst)
    }

    /// Takes the device out of the pool (see the module comment): no new I/O, the I/O
    /// under way finishes, the index empties, the header is zeroed (the device no longer
    /// says it is this pool's cache) and the device is let go. The zeroing may fail (a
    /// device already failing): the device is out of the cache all the same.
    pub fn leave(&self) -> Result<(), std::io::Error> {
        self.in_flight.leaving.store(true, Ordering::SeqCst);
        *self.state.lock() = DevState::Removed;
        while self.in_flight.count.load(Ordering::SeqCst) > 0 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        self.index.clear();
        {
            let mut r = self.ring.lock();
            *r = Ring { next_abs: r.next_abs, last_chunk: r.last_chunk, ..Ring::default() };
        }
        let Some(dev) = &self.dev else { return Ok(()) };
        let cleared = dev.write_at(&[0u8; HEADER_SIZE as usize], 0).and_then(|()| dev.flush());
        dev.release();
        cleared
    }

    /// Lowest absolute position still intact.
    fn floor(&self) -> u64 {
        self.reserved_end.load(Ordering::Acquire).saturating_sub(self.ring_size())
    }

    /// Drops the device after a failure: nothing more is read from or written to it.
    pub fn fault(&self, why: String) {
        {
            let mut state = self.state.lock();
            if *state == DevState::Removed {
                return; // left the pool already: nothing to report
            }
            *state = DevState::Faulted;
        }
        *self.note.lock() = Some(why);
        self.index.clear();
        let mut r = self.ring.lock();
        *r = Ring { next_abs: r.next_abs, last_chunk: r.last_chunk, ..Ring::default() };
    }

    /// Reads `key`'s stored bytes (`psize` of them) into `scratch`, if this device holds
    /// them. The caller verifies them against the block pointer.
    pub fn read(&self, key: &BlockKey, psize: u32, scratch: &mut Vec<u8>) -> DevRead {
        let (Some(dev), Some(g)) = (&self.dev, &self.geometry) else { return DevRead::Miss };
        if self.in_flight.leaving.load(Ordering::Relaxed) {
            return DevRead::Miss; // removed: not even its (empty) index is locked
        }
        let Some(pos) = self.index.get(key) else { return DevRead::Miss };
        let Some(_io) = self.begin_io() else { return DevRead::Miss };
        let abs = pos * BLOCK_ALIGN;
        if abs < self.floor() || !self.usable() {
            self.index.remove(key); // overwritten: its chunk left the ring's sums already
            return DevRead::Miss;
        }
        let at = g.start + abs % g.size();
        let align = dev.read_align().max(1);
        let start = at / align * align;
        let end = (at + psize as u64).div_ceil(align) * align;
        if end > g.end {
            return DevRead::Miss;
        }
        scratch.resize((end - start) as usize, 0);
        if dev.read_at(scratch, start).is_err() {
            let errors = self.counters.io_errors.fetch_add(1, Ordering::Relaxed) + 1;
            if errors >= READ_ERRORS_TO_FAULT {
                self.fault(format!("dropped after {errors} read errors"));
            }
            return DevRead::IoError;
        }
        if abs < self.floor() {
            return DevRead::Miss; // overwritten while we read it
        }
        self.counters.read_bytes.fetch_add(psize as u64, Ordering::Relaxed);
        let from = (at - start) as usize;
        DevRead::Hit(from..from + psize as usize)
    }

    /// Bytes a chunk of `blocks` takes: the log block, each block at a `BLOCK_ALIGN`
    /// multiple, the whole rounded to `CHUNK_ALIGN`.
    pub fn chunk_len(count: usize, data: u64) -> u64 {
        let table = (LogHeader::table_len(count) as u64).next_multiple_of(BLOCK_ALIGN);
        (table + data).next_multiple_of(CHUNK_ALIGN)
    }

    /// Writes `blocks` as one chunk (the caller keeps them under `CHUNK_MAX` with
    /// `chunk_len`) and indexes them. `buf` is reused between calls. Returns the bytes
    /// written; an I/O error drops the device.
    pub fn write_chunk(&self, blocks: &[Pending], buf: &mut Vec<u8>) -> Result<u64, std::io::Error> {
        let (Some(dev), Some(g)) = (&self.dev, &self.geometry) else { return Ok(0) };
        // Held until the blocks are indexed: `leave` empties the index after it.
        let Some(_io) = self.begin_io() else { return Ok(0) };
        let table = (LogHeader::table_len(blocks.len()) as u64).next_multiple_of(BLOCK_ALIGN);
        let mut entries = Vec::with_capacity(blocks.len());
        let mut at = table;
        let (mut psize, mut lsize) = (0u64, 0u64);
        for b in blocks {
            entries.push(LogEntry {
                key: b.key,
                psize: b.bytes.len() as u32,
                lsize: b.lsize,
                class: b.class,
                at: at as u32,
            });
            at = (at + b.bytes.len() as u64).next_multiple_of(BLOCK_ALIGN);
            psize += b.bytes.len() as u64;
            lsize += b.lsize as u64;
        }
        let len = at.next_multiple_of(CHUNK_ALIGN);
        assert!(len <= g.size(), "a chunk larger than the ring");
        buf.clear();
        buf.resize(len as usize, 0);
        for (b, e) in blocks.iter().zip(&entries) {
            buf[e.at as usize..e.at as usize + b.bytes.len()].copy_from_slice(&b.bytes);
        }
        let (abs, prev) = self.reserve(len, psize, lsize);
        let head = LogHeader {
            generation: self.generation.load(Ordering::Acquire),
            pool_guid: self.pool_guid,
            abs,
            prev: prev.unwrap_or(NO_PREV),
            len: len as u32,
            count: blocks.len() as u32,
        };
        head.encode(&entries, buf);
        if let Err(e) = dev.write_at(buf, g.start + abs % g.size()) {
            self.counters.io_errors.fetch_add(1, Ordering::Relaxed);
            self.fault(format!("dropped after a write error: {e}"));
            return Err(e);
        }
        self.counters.write_bytes.fetch_add(len, Ordering::Relaxed);
        for e in &entries {
            self.index.insert(&e.key, (abs + e.at as u64) / BLOCK_ALIGN);
        }
        self.sweep_if_due();
        Ok(len)
    }

    /// Takes the ring's next span of `len` bytes; returns its absolute position and the
    /// previous chunk's.
    fn reserve(&self, len: u64, psize: u64, lsize: u64) -> (u64, Option<u64>) {
        let cap = self.ring_size();
        let mut r = self.ring.lock();
        let mut abs = r.next_abs;
        if abs % cap + len > cap {
            abs = abs - abs % cap + cap; // the chunk would wrap: next lap
        }
        if (abs + len) / BLOCK_ALIGN >= POS_LIMIT {
            // 512 TiB written: start the positions over (the index is emptied, the
            // old log blocks then name positions the next walk will not chain to).
            self.index.clear();
            *r = Ring::default();
            abs = 0;
        }
        let prev = r.last_chunk;
        r.next_abs = abs + len;
        r.last_chunk = Some(abs);
        self.reserved_end.store(abs + len, Ordering::Release);
        if abs + len >= cap {
            self.warm.store(true, Ordering::Relaxed);
        }
        r.push(ChunkSum { abs, psize, lsize }, (abs + len).saturating_sub(cap));
        (abs, prev)
    }

    /// Drops the index entries the ring overwrote, every `1/SWEEP_FRACTION` of a lap.
    fn sweep_if_due(&self) {
        let step = (self.ring_size() / SWEEP_FRACTION).max(1);
        let end = self.reserved_end.load(Ordering::Acquire);
        let last = self.last_sweep.load(Ordering::Relaxed);
        if end / step > last / step
            && self.last_sweep.compare_exchange(last, end, Ordering::AcqRel, Ordering::Relaxed).is_ok()
        {
            self.index.retain_from(self.floor().div_ceil(BLOCK_ALIGN));
        }
    }

    /// Forgets `key` (freed in the pool, or found bad), and takes its sizes off its
    /// chunk's. True if it was indexed.
    pub fn forget(&self, key: &BlockKey, psize: u32, lsize: u32) -> bool {
        let Some(pos) = self.index.remove(key) else { return false };
        let abs = pos * BLOCK_ALIGN;
        let mut r = self.ring.lock();
        let at = r.chunks.partition_point(|c| c.abs <= abs);
        if at > 0 {
            let c = &mut r.chunks[at - 1];
            let (p, l) = (c.psize.min(psize as u64), c.lsize.min(lsize as u64));
            c.psize -= p;
            c.lsize -= l;
            r.psize -= p;
            r.lsize -= l;
        }
        true
    }

    /// Rebuilds the index from the log blocks (see the module comment), opening the
    /// device to the feed as soon as it knows where writing resumes. Runs on its own
    /// thread; reads are served meanwhile from what it has indexed.
    pub fn rebuild(&self, pool: Option<&dyn PoolBlocks>) {
        let started = Instant::now();
        {
            let mut state = self.state.lock();
            if *state != DevState::Online {
                return; // faulted or removed before the rebuild began
            }
            *state = DevState::Rebuilding;
        }
        let found = self.walk_forward(pool);
        match found {
            Some((first, head, last)) => {
                {
                    let mut r = self.ring.lock();
                    r.next_abs = head;
                    r.last_chunk = Some(last);
                }
                self.reserved_end.store(head, Ordering::Release);
                if head >= self.ring_size() {
                    self.warm.store(true, Ordering::Relaxed);
                }
                self.feed_ready.store(true, Ordering::Release);
                self.walk_backward(first, pool);
            }
            None => self.start_over(),
        }
        let ms = started.elapsed().as_millis() as u64;
        self.counters.rebuild_ms.store(ms.max(1), Ordering::Relaxed);
        let blocks = self.counters.rebuilt_blocks.load(Ordering::Relaxed);
        if blocks > 0 {
            *self.note.lock() = Some(format!("index rebuilt: {blocks} blocks in {ms} ms"));
        }
        self.rebuild_scanned.store(self.ring_size(), Ordering::Relaxed);
        let mut state = self.state.lock();
        if *state == DevState::Rebuilding {
            *state = DevState::Online;
        }
    }

    /// Nothing valid in the ring: a fresh initialisation (a new generation, so the old
    /// log blocks never count again), positions from 0.
    pub(crate) fn start_over(&self) {
        let Some(dev) = &self.dev else { return };
        let Some(_io) = self.begin_io() else { return };
        match initialise(dev.as_ref(), self.pool_guid, self.guid) {
            Ok(h) => {
                self.index.clear();
                *self.ring.lock() = Ring::default();
                self.reserved_end.store(0, Ordering::Release);
                self.generation.store(h.generation, Ordering::Release);
                self.feed_ready.store(true, Ordering::Release);
            }
            Err(e) => self.fault(format!("cannot write its header: {e}")),
        }
    }

    /// Reads and verifies the log block of the chunk at `abs` (its place in the ring from
    /// `abs`); `None` unless it verifies, is this ring's and says it is at `abs`.
    fn read_log(&self, abs: u64) -> Option<(LogHeader, Vec<LogEntry>)> {
        let (dev, g) = (self.dev.as_ref()?, self.geometry?);
        let _io = self.begin_io()?;
        let at = g.start + abs % g.size();
        let mut head = vec![0u8; CHUNK_ALIGN as usize];
        if at + CHUNK_ALIGN > g.end || dev.read_at(&mut head, at).is_err() {
            return None;
        }
        let h = LogHeader::decode_head(&head)?;
        let sane = h.generation == self.generation.load(Ordering::Acquire)
            && h.pool_guid == self.pool_guid
            && h.abs == abs
            && (h.len as u64).is_multiple_of(CHUNK_ALIGN)
            && h.len > 0
            && abs % g.size() + h.len as u64 <= g.size();
        if !sane {
            return None;
        }
        let table = LogHeader::table_len(h.count as usize) as u64;
        if table > h.len as u64 {
            return None;
        }
        let mut buf = head;
        if table > CHUNK_ALIGN {
            buf = vec![0u8; table.next_multiple_of(CHUNK_ALIGN) as usize];
            dev.read_at(&mut buf, at).ok()?;
        }
        let entries = h.decode_entries(&buf)?;
        Some((h, entries))
    }

    /// Indexes a chunk's blocks; `older`: an address already indexed keeps its entry
    /// (the backward walk meets older chunks after newer ones). A block the pool says is
    /// gone is left out and counted (`rebuild_stale`): it could never be served (its
    /// identity is no live block's), and would only take RAM and inflate `size`.
    fn index_chunk(&self, h: &LogHeader, entries: &[LogEntry], older: bool, pool: Option<&dyn PoolBlocks>) -> ChunkSum {
        let (mut psize, mut lsize) = (0, 0);
        for e in entries {
            let pos = (h.abs + e.at as u64) / BLOCK_ALIGN;
            if older && self.index.get(&e.key).is_some() {
                continue;
            }
            if pool.is_some_and(|p| !p.may_be_live(&e.key, e.psize)) {
                self.counters.rebuild_stale.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            self.index.insert(&e.key, pos);
            psize += e.psize as u64;
            lsize += e.lsize as u64;
        }
        self.counters.rebuilt_blocks.fetch_add(entries.len() as u64, Ordering::Relaxed);
        ChunkSum { abs: h.abs, psize, lsize }
    }

    /// The current lap: from the ring's start along chained chunks. Returns (the lap's
    /// first chunk's header, where writing resumes, the last chunk's position).
    fn walk_forward(&self, pool: Option<&dyn PoolBlocks>) -> Option<(LogHeader, u64, u64)> {
        let cap = self.ring_size();
        let (first, entries) = self.read_log_at_start()?;
        let sum = self.index_chunk(&first, &entries, false, pool);
        let mut ring = Vec::from([sum]);
        let mut cur = first;
        loop {
            let next_abs = cur.abs + cur.len as u64;
            self.rebuild_scanned.store(next_abs % cap.max(1), Ordering::Relaxed);
            if next_abs.is_multiple_of(cap) {
                break; // the lap ended exactly at the ring's end
            }
            match self.read_log(next_abs) {
                Some((h, entries)) if h.prev == cur.abs => {
                    ring.push(self.index_chunk(&h, &entries, false, pool));
                    cur = h;
                }
                _ => break,
            }
        }
        let head = cur.abs + cur.len as u64;
        let mut r = self.ring.lock();
        for c in ring {
            r.push(c, head.saturating_sub(cap));
        }
        Some((first, head, cur.abs))
    }

    /// The first chunk of the current lap: the log block at the ring's start, whatever
    /// lap it names (its `abs` says).
    fn read_log_at_start(&self) -> Option<(LogHeader, Vec<LogEntry>)> {
        let (dev, g) = (self.dev.as_ref()?, self.geometry?);
        let _io = self.begin_io()?;
        let mut head = vec![0u8; CHUNK_ALIGN as usize];
        dev.read_at(&mut head, g.start).ok()?;
        let h = LogHeader::decode_head(&head)?;
        if h.abs % g.size() != 0 {
            return None;
        }
        self.read_log(h.abs)
    }

    /// The previous lap's chunks the current one has not overwritten, newest first,
    /// along `prev` from the current lap's first chunk.
    fn walk_backward(&self, first: LogHeader, pool: Option<&dyn PoolBlocks>) {
        let mut prev = first.prev;
        while prev != NO_PREV && prev >= self.floor() && prev < first.abs {
            let Some((h, entries)) = self.read_log(prev) else { break };
            if h.prev != NO_PREV && h.prev >= h.abs {
                break; // a chain must go back in time
            }
            // Read before indexing: the feed may have overwritten it meanwhile.
            if h.abs < self.floor() {
                break;
            }
            let Some(_io) = self.begin_io() else { break }; // leaving: index nothing more
            let sum = self.index_chunk(&h, &entries, true, pool);
            self.ring.lock().push_front(sum);
            prev = h.prev;
        }
    }
}

/// Writes a fresh header (a new generation) on `dev`.
pub(crate) fn initialise(dev: &dyn BlockDevice, pool_guid: u64, dev_guid: u64) -> Result<DevHeader, std::io::Error> {
    let size = dev.size() / CHUNK_ALIGN * CHUNK_ALIGN;
    if size < HEADER_SIZE + 2 * CHUNK_ALIGN {
        return Err(std::io::Error::other("device too small for a cache"));
    }
    let h = DevHeader {
        pool_guid,
        dev_guid,
        generation: rand::random::<u64>() | 1,
        ring_start: HEADER_SIZE,
        ring_end: size,
    };
    dev.write_at(&h.encode(), 0)?;
    dev.flush()?;
    Ok(h)
}

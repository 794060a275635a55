//! One cache device: its state, its membership of the cache, and the pieces below.
//!
//! Theory of operation. The ring's history is one absolute position (`abs`: bytes
//! written since the device was initialised, laps included); a chunk at `abs` sits at
//! `ring_start + abs % ring_size` and never wraps (`ring`). Reads check the ring's floor
//! before and after their device read (`reads`). At import the index is rebuilt from the
//! log blocks on a thread while reads are served (`rebuild`).
//!
//! Leaving (`pool remove`, while the pool serves): the device is marked leaving, so no
//! new read, chunk write or rebuild step starts on it; the I/O already under way is
//! counted (`InFlight`) and finishes; then the index is emptied, the header zeroed and
//! the device let go. A reader that finds it leaving takes the miss and reads the pool.
//!
//! Owns: the device handle and its geometry, its state and note, the per-device
//! counters, and the count of its I/O under way. Submodules: `ring` (header, ring
//! positions, chunk writes, forgetting), `reads` (serving a block, read faults),
//! `rebuild` (the index from the log blocks).
//!
//! Promises: a device that fails (a write, repeated read errors, or bytes that do not
//! verify too often: `reads`) is dropped — state
//! `Faulted`, index cleared — and costs only hits; once `leave` returns no I/O of the
//! cache is under way on the device or starts again.
//!
//! Must never: take a lock to count an I/O under way (two atomics), or let a faulted or
//! removed device be read or written again.
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use tarn_vdev::BlockDevice;

use crate::index::Index;
use crate::layout::{DevHeader, HeaderRefused, HEADER_SIZE};

mod reads;
mod rebuild;
mod ring;

pub use reads::DevRead;
pub(crate) use ring::initialise;
pub use ring::Pending;
use ring::{ChunkSum, Ring};

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

/// Counters of one device (also summed into the cache's).
#[derive(Default)]
pub struct DevCounters {
    pub read_bytes: AtomicU64,
    pub write_bytes: AtomicU64,
    pub io_errors: AtomicU64,
    /// Reads whose bytes did not match the block pointer (bit flips, not I/O errors).
    pub cksum_errors: AtomicU64,
    pub rebuilt_blocks: AtomicU64,
    /// Entries the rebuild found in the log blocks but left out: the pool says their
    /// block is gone (freed, or born in a txg that never committed).
    pub rebuild_stale: AtomicU64,
    pub rebuild_ms: AtomicU64,
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
    /// Where this session's writing began (the rebuild's head; 0 for a fresh ring):
    /// entries before it were restored by a rebuild, after a crash perhaps from a chunk
    /// whose log block reached the device and whose blocks did not.
    session_start: AtomicU64,
    /// Set once the rebuild found where writing resumes: the feed waits for it.
    feed_ready: AtomicBool,
    /// Filled the ring once (the feed's boost ends).
    warm: AtomicBool,
    /// Rebuild progress: bytes of ring examined, of `ring_size`.
    pub(crate) rebuild_scanned: AtomicU64,
    pub counters: DevCounters,
    last_sweep: AtomicU64,
    in_flight: InFlight,
    /// When the recent checksum failures happened (at most `CKSUM_ERRORS_TO_FAULT`).
    cksum_recent: Mutex<VecDeque<Instant>>,
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
            session_start: AtomicU64::new(0),
            feed_ready: AtomicBool::new(false),
            warm: AtomicBool::new(false),
            rebuild_scanned: AtomicU64::new(0),
            counters: DevCounters::default(),
            last_sweep: AtomicU64::new(0),
            in_flight: InFlight::default(),
            cksum_recent: Mutex::new(VecDeque::new()),
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
}

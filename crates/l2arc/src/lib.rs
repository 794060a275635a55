//! l2arc — the second-level cache: blocks leaving the ARC are kept, in their stored
//! (compressed) form, on fast local devices (the cloud VM's ephemeral NVMe), indexed in
//! RAM and in log blocks on the devices, so a restart finds the cache warm.
//!
//! Owns: the cache devices (`device`: state and membership; its `ring`, `reads` and
//! `rebuild`), their byte format (`layout`, docs/FORMAT.md), the in-RAM index
//! (`index`), the feed from the ARC's eviction side and its tunables (`feed`), the L2ARC
//! counters (`stats`), and the set of devices: fixed at open, then grown (`add_device`) and shrunk
//! (`remove_device`) while the pool serves (`membership`). A removed device keeps its slot (readers hold plain references into the
//! list, `tarn_vdev::Slots`), in state `Removed`, until the cache is dropped.
//!
//! Promises: a cache device that is missing, blank, of another pool, of another format
//! or smaller than before costs only its contents — never an error to the pool; it is
//! initialised afresh and status says why. Bytes it returns are only a candidate: the
//! caller (zio) verifies them against the block pointer's checksum and treats a mismatch
//! as a miss (`note_bad`). The index's RAM is counted apart from the ARC's budget
//! (`header_bytes`), so a small `arc_max` never stops the cache filling.
//!
//! Must never: be needed for correctness, do device I/O under the ARC's lock or its own
//! index locks, add work to a read when no cache device is configured (the pipeline
//! holds no `L2Arc` then), or take a lock or allocate to find a device on a read.
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use parking_lot::Mutex;
use tarn_arc::BlockKey;
use tarn_vdev::{BlockDevice, FileDevice, Slots};

mod device;
mod feed;
mod index;
mod layout;
mod membership;
mod stats;

pub use device::{CacheDev, DevRead, DevState};
pub use feed::{SecondaryCache, Tunables, TuneError, CHUNK_MAX, ROUNDS_PER_SEC};
pub use layout::{DevHeader, HeaderRefused, L2_VERSION};
pub use membership::AddError;
pub use stats::{CacheDevStatus, Counters, L2Snapshot};

/// What the pool knows of its blocks, asked by a rebuild for every entry its log blocks
/// name, so that blocks freed (or born in a txg that never committed) since they were
/// cached are not indexed again. The pool provides it (`L2Arc::set_pool_blocks`): the
/// cache must not depend on the pool.
pub trait PoolBlocks: Send + Sync {
    /// False if `key`'s block (`psize` stored bytes) is surely not in the pool now; true
    /// if it may be (a cache read is verified against the block pointer all the same).
    fn may_be_live(&self, key: &BlockKey, psize: u32) -> bool;

    /// False if `key`'s block's bytes are surely no longer allocated in the pool (freed
    /// since); asked by the feed of blocks freed while they waited in its queue. Unlike
    /// `may_be_live` it says nothing of the block's birth (the feed's blocks are newer
    /// than the import).
    fn still_allocated(&self, key: &BlockKey, psize: u32) -> bool {
        let _ = (key, psize);
        true
    }
}

/// A block the pool freed: its identity and sizes (`L2Arc::forget_batch`).
#[derive(Clone, Copy, Debug)]
pub struct FreedBlock {
    pub key: BlockKey,
    pub psize: u32,
    pub lsize: u32,
}

/// What the devices and the workers share.
pub(crate) struct Shared {
    pool_guid: u64,
    /// Every device the cache had since it was opened, removed ones too (`Removed`).
    /// `paces[i]` is `devs[i]`'s: both grow together, under `membership`.
    pub(crate) devs: Slots<Arc<CacheDev>>,
    pub(crate) paces: Slots<feed::Pace>,
    /// Serialises `add_device` and `remove_device`.
    membership: Mutex<()>,
    /// Set by `start`: a device added after gets its worker at once.
    started: AtomicBool,
    pub(crate) queue: feed::Queue,
    pub(crate) secondary: feed::Secondary,
    pub(crate) tunables: Tunables,
    pub(crate) counters: Counters,
    pub(crate) stopping: AtomicBool,
    pub(crate) threads: Mutex<Vec<JoinHandle<()>>>,
    /// Asked by rebuilds whether a block is still the pool's (set before `start`), and
    /// by the feed whether a block freed while queued is still allocated.
    pub(crate) pool_blocks: OnceLock<Arc<dyn PoolBlocks>>,
    /// Counts the batches of frees applied (`forget_batch`): a queued block that saw it
    /// move may have been freed before its chunk was indexed (`feed`).
    pub(crate) free_epoch: AtomicU64,
}

/// A configured cache device: its guid (in the pool's config) and path.
#[derive(Clone, Debug)]
pub struct CacheSpec {
    pub guid: u64,
    pub path: PathBuf,
}

pub struct L2Arc {
    shared: Arc<Shared>,
}

impl L2Arc {
    /// Opens the cache devices of pool `pool_guid`. A device that cannot be opened is
    /// kept as `Unavail`; one whose header is not this pool's is initialised afresh.
    /// Nothing runs until `start`.
    pub fn open(pool_guid: u64, specs: &[CacheSpec]) -> L2Arc {
        L2Arc::open_with(pool_guid, specs, true)
    }

    /// As `open`; with `autoreplace` off (the pool's `cacheautoreplace=off`) a device whose
    /// header is not this pool's is left untouched and shown `Unavail` with the reason.
    pub fn open_with(pool_guid: u64, specs: &[CacheSpec], autoreplace: bool) -> L2Arc {
        let off_note = "not initialised: cacheautoreplace=off (tarn pool remove, then add, to use it)";
        let devs = specs
            .iter()
            .map(|s| match FileDevice::open(&s.path) {
                Ok(f) if !autoreplace => match CacheDev::check_header(s.guid, pool_guid, &f) {
                    Ok(_) => L2Arc::attach_device(pool_guid, s, Arc::new(f)),
                    Err(why) => CacheDev::unavailable_noting(s.guid, s.path.clone(), format!("{why}; {off_note}")),
                },
                Ok(f) => L2Arc::attach_device(pool_guid, s, Arc::new(f)),
                Err(e) if !autoreplace => {
                    CacheDev::unavailable_noting(s.guid, s.path.clone(), format!("cannot open: {e}; {off_note}"))
                }
                Err(e) => CacheDev::unavailable(s.guid, s.path.clone(), format!("cannot open: {e}")),
            })
            .map(Arc::new)
            .collect();
        L2Arc::with_devices(pool_guid, devs)
    }

    /// Opens the cache on devices already open (tests wrap them to inject faults).
    pub fn open_devices(pool_guid: u64, devices: Vec<(CacheSpec, Arc<dyn BlockDevice>)>) -> L2Arc {
        let devs = devices.into_iter().map(|(s, d)| Arc::new(L2Arc::attach_device(pool_guid, &s, d))).collect();
        L2Arc::with_devices(pool_guid, devs)
    }

    fn attach_device(pool_guid: u64, spec: &CacheSpec, dev: Arc<dyn BlockDevice>) -> CacheDev {
        match CacheDev::attach(spec.guid, pool_guid, dev) {
            Ok((d, _)) => d,
            Err(e) => CacheDev::unavailable(spec.guid, spec.path.clone(), format!("cannot initialise: {e}")),
        }
    }

    fn with_devices(pool_guid: u64, devs: Vec<Arc<CacheDev>>) -> L2Arc {
        let paces = Slots::new(devs.iter().map(|_| feed::Pace::default()).collect());
        L2Arc {
            shared: Arc::new(Shared {
                pool_guid,
                devs: Slots::new(devs),
                paces,
                membership: Mutex::new(()),
                started: AtomicBool::new(false),
                queue: feed::Queue::default(),
                secondary: feed::Secondary::default(),
                tunables: Tunables::default(),
                counters: Counters::default(),
                stopping: AtomicBool::new(false),
                threads: Mutex::new(Vec::new()),
                pool_blocks: OnceLock::new(),
                free_epoch: AtomicU64::new(0),
            }),
        }
    }

    /// Gives the rebuilds the pool's view of its blocks (see `PoolBlocks`); call before
    /// `start`. Without it a rebuild indexes every entry its log blocks name. Set once:
    /// false if it was set already.
    pub fn set_pool_blocks(&self, pool: Arc<dyn PoolBlocks>) -> bool {
        self.shared.pool_blocks.set(pool).is_ok()
    }

    /// Starts the rebuild of every device that kept its ring (in the background) and a
    /// feed worker per device; returns the sink to give the ARC.
    pub fn start(&self, rebuild: bool) -> Arc<dyn tarn_arc::EvictSink> {
        let _no_member_added_meanwhile = self.shared.membership.lock();
        for (i, d) in self.shared.devs.iter().enumerate() {
            if !d.usable() {
                continue;
            }
            if !d.feed_ready() {
                if rebuild {
                    let (d, pool) = (d.clone(), self.shared.pool_blocks.get().cloned());
                    let spawned = std::thread::Builder::new()
                        .name("tarn-l2rebuild".into())
                        .spawn(move || d.rebuild(pool.as_deref()));
                    if let Ok(h) = spawned {
                        self.shared.threads.lock().push(h);
                    }
                } else {
                    d.start_over();
                }
            }
            self.spawn_worker(i);
        }
        self.shared.started.store(true, Ordering::Release);
        Arc::new(feed::FeedSink(self.shared.clone()))
    }

    /// Starts the feed worker of device `index` (it ends when the device leaves).
    fn spawn_worker(&self, index: usize) {
        let s = self.shared.clone();
        let spawned =
            std::thread::Builder::new().name("tarn-l2feed".into()).spawn(move || feed::run_worker(s, index, false));
        if let Ok(h) = spawned {
            self.shared.threads.lock().push(h);
        }
    }

    /// Stops the workers and the rebuild, waiting for them (their device writes finish).
    pub fn stop(&self) {
        self.shared.stopping.store(true, Ordering::Relaxed);
        loop {
            let Some(h) = self.shared.threads.lock().pop() else { break };
            let _ = h.join();
        }
        while self.shared.queue.rx.try_recv().is_ok() {}
        self.shared.queue.backlog.store(0, Ordering::Relaxed);
    }

    /// Reads `key`'s stored bytes (`psize`) into `scratch` from the device holding them.
    /// The caller must verify them and call `note_bad` if they do not match.
    pub fn read(&self, key: &BlockKey, psize: u32, scratch: &mut Vec<u8>) -> Option<(usize, std::ops::Range<usize>)> {
        let c = &self.shared.counters;
        for (i, d) in self.shared.devs.iter().enumerate() {
            match d.read(key, psize, scratch) {
                DevRead::Hit(range) => return Some((i, range)),
                DevRead::IoError => {
                    c.io_errors.fetch_add(1, Ordering::Relaxed);
                    d.forget(key, psize, 0);
                }
                DevRead::Miss => {}
            }
        }
        c.misses.fetch_add(1, Ordering::Relaxed);
        None
    }

    /// A read that verified: counts the hit.
    pub fn note_hit(&self, psize: u32) {
        let c = &self.shared.counters;
        c.hits.fetch_add(1, Ordering::Relaxed);
        c.read_bytes.fetch_add(psize as u64, Ordering::Relaxed);
    }

    /// Bytes from device `dev` did not match the block pointer: forget the entry, count
    /// a miss (the caller reads the pool's devices) and a checksum error against the
    /// device, which is dropped if it returns wrong bytes too often (`device::reads`).
    pub fn note_bad(&self, dev: usize, key: &BlockKey, psize: u32, lsize: u32) {
        let c = &self.shared.counters;
        c.cksum_bad.fetch_add(1, Ordering::Relaxed);
        c.misses.fetch_add(1, Ordering::Relaxed);
        if let Some(d) = self.shared.devs.get(dev) {
            d.note_bad_bytes(key, psize, lsize);
        }
    }

    /// The pool freed `key`'s block (`psize` stored, `lsize` logical bytes): no device
    /// may serve it again.
    pub fn forget(&self, key: &BlockKey, psize: u32, lsize: u32) {
        for d in self.shared.devs.iter() {
            if d.forget(key, psize, lsize) {
                self.shared.counters.freed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The pool freed these blocks (a txg's frees, gathered by the caller): no device may
    /// serve them again, and their index entries' RAM is given back. Each index shard's
    /// lock is taken once per device. `freed` is reordered.
    pub fn forget_batch(&self, freed: &mut [FreedBlock]) {
        if freed.is_empty() {
            return;
        }
        // Before any entry goes: a feed worker that indexes a queued block after this
        // batch's removals sees the epoch moved and asks the pool about its block.
        self.shared.free_epoch.fetch_add(1, Ordering::SeqCst);
        for d in self.shared.devs.iter() {
            let n = d.forget_batch(freed);
            self.shared.counters.freed.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// The datasets' `secondarycache` (object set id, value), all of them: replaces what
    /// was given before. Blocks taken off the queue from now on follow it.
    pub fn set_secondarycache(&self, policies: impl IntoIterator<Item = (u64, SecondaryCache)>) {
        self.shared.secondary.replace(policies);
    }

    pub fn tunables(&self) -> &Tunables {
        &self.shared.tunables
    }

    /// True while some device is still rebuilding its index.
    pub fn rebuilding(&self) -> bool {
        self.shared.devs.iter().any(|d| d.state() == DevState::Rebuilding || (d.usable() && !d.feed_ready()))
    }
}

impl Drop for L2Arc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The pool a device's valid cache header names, if it has one (a cache device of some
/// pool, in use or not).
pub fn cache_owner(dev: &dyn BlockDevice) -> Option<u64> {
    let mut buf = vec![0u8; layout::HEADER_SIZE as usize];
    dev.read_at(&mut buf, 0).ok()?;
    match DevHeader::decode(&buf, 0, 0, dev.size()) {
        Err(HeaderRefused::OtherPool(guid)) => Some(guid),
        _ => None,
    }
}

/// Writes a fresh cache header on `dev` for pool `pool_guid` (at pool create).
pub fn initialise_device(dev: &dyn BlockDevice, pool_guid: u64, guid: u64) -> Result<(), std::io::Error> {
    device::initialise(dev, pool_guid, guid).map(|_| ())
}

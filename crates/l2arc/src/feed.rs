//! The feed: blocks leaving the ARC are queued here (under the ARC's lock: a reference
//! to their bytes, no copy, no wait) and written to the cache devices in chunks by feed
//! workers — one per device, and helpers while the queue is more than half full.
//!
//! Tunables (`tarn tune POOL NAME=VALUE`), as ZFS's l2arc_* and why these defaults:
//! - `l2arc_write_max` (128 MiB/s per device): a modern NVMe writes several GiB/s; an
//!   eighth of a slow one's bandwidth leaves the rest to the reads the cache is for,
//!   and the ARC cannot evict faster than the pool's disks feed it (a cloud volume:
//!   125–250 MiB/s). ZFS's 8 MiB/s was set for 2008's SSDs.
//! - `l2arc_write_boost` (128 MiB/s more, until the ring has filled once): a cold cache
//!   warms in minutes (a 375 GiB local NVMe in about 25), not hours.
//! - `l2arc_headroom` (2): how many feed rounds (1/8 s each) of evicted blocks may wait in
//!   the queue; past it a block leaves without being cached (`feed_behind`). Bounds the
//!   memory the queue pins beyond `arc_max`: 2 × 32 MiB / 8 = 8 MiB per device by default.
//! - `l2arc_noprefetch` (1): blocks read ahead and never asked for are not cached (a
//!   sequential scan would otherwise flush the device), as in ZFS.
//!
//! `secondarycache` (per dataset: `all`, `metadata`, `none`) is applied by the workers as
//! they take blocks off the queue, not by the sink: the ARC's lock and the read path pay
//! nothing for it, and a change applies to every block written after it. A block's
//! dataset comes with it from the ARC: a record's page, and the dataset of indirect,
//! dnode and directory blocks (kept with their ARC entries). The pool's own metadata (the
//! MOS: no dataset) is always cached: it is small, every dataset's reads go through it,
//! and no dataset's property can speak for it.
//!
//! Owns: the queue, the workers, the tunables, the rate each device is fed at, and the
//! datasets' `secondarycache` as the pool last gave it.
//!
//! Promises: the sink never blocks (a full queue drops and counts); a worker writes a
//! block only if no device already holds that version of it, and does not keep the
//! entry of one the pool freed while it was queued; workers stop when the cache
//! is dropped, and a device's workers when it leaves the pool.
//!
//! Must never: copy or write under the ARC's lock, or let the queue pin more than its
//! bound.
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use parking_lot::Mutex;
use tarn_arc::{Departing, EvictSink};

use crate::device::{CacheDev, Pending};
use crate::Shared;

/// Feed rounds per second: a worker's write budget is counted per round.
pub const ROUNDS_PER_SEC: u64 = 8;
const ROUND: Duration = Duration::from_millis(1000 / ROUNDS_PER_SEC);
/// Largest chunk (one device write): large enough for sequential throughput, small
/// enough that a crash loses little.
pub const CHUNK_MAX: u64 = 1 << 20;
/// Data a worker waits for (up to one round from its chunk's first block) before it
/// writes a chunk. A trickle of evictions would otherwise make a chunk of a few blocks
/// each — many small device writes, and a ring summary (24 bytes of header RAM) per few
/// blocks. Waiting costs nothing when the feed is behind: the queue is not dry then.
pub const CHUNK_MIN: u64 = 256 << 10;
/// Helpers a device's worker may start while the queue is over half full.
const HELPERS_MAX: usize = 3;
/// Blocks the queue holds at most, whatever their size.
const QUEUE_BLOCKS: usize = 1 << 16;

/// The run-time tunables (see the module comment).
pub struct Tunables {
    pub write_max: AtomicU64,
    pub write_boost: AtomicU64,
    pub headroom: AtomicU64,
    pub noprefetch: AtomicBool,
}

impl Default for Tunables {
    fn default() -> Self {
        Tunables {
            write_max: AtomicU64::new(128 << 20),
            write_boost: AtomicU64::new(128 << 20),
            headroom: AtomicU64::new(2),
            noprefetch: AtomicBool::new(true),
        }
    }
}

/// Why a tunable was not set.
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    #[error("unknown L2ARC tunable `{0}` (l2arc_write_max, l2arc_write_boost, l2arc_headroom, l2arc_noprefetch)")]
    Unknown(String),
    #[error("{name} must be {rule}")]
    Range { name: &'static str, rule: &'static str },
}

impl Tunables {
    /// Sets one tunable by its ZFS-like name.
    pub fn set(&self, name: &str, value: u64) -> Result<(), TuneError> {
        match name {
            "l2arc_write_max" => {
                if value < CHUNK_MAX {
                    return Err(TuneError::Range { name: "l2arc_write_max", rule: "at least 1M (one chunk)" });
                }
                self.write_max.store(value, Ordering::Relaxed);
            }
            "l2arc_write_boost" => self.write_boost.store(value, Ordering::Relaxed),
            "l2arc_headroom" => {
                if value == 0 || value > 64 {
                    return Err(TuneError::Range { name: "l2arc_headroom", rule: "1 to 64 feed rounds" });
                }
                self.headroom.store(value, Ordering::Relaxed);
            }
            "l2arc_noprefetch" => {
                if value > 1 {
                    return Err(TuneError::Range { name: "l2arc_noprefetch", rule: "0 or 1" });
                }
                self.noprefetch.store(value == 1, Ordering::Relaxed);
            }
            other => return Err(TuneError::Unknown(other.to_string())),
        }
        Ok(())
    }

    /// (name, value) of every tunable, for `tarn tune` and status.
    pub fn list(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("l2arc_write_max", self.write_max.load(Ordering::Relaxed)),
            ("l2arc_write_boost", self.write_boost.load(Ordering::Relaxed)),
            ("l2arc_headroom", self.headroom.load(Ordering::Relaxed)),
            ("l2arc_noprefetch", self.noprefetch.load(Ordering::Relaxed) as u64),
        ]
    }

    /// Bytes a device may be written per round.
    fn round_budget(&self, warm: bool) -> u64 {
        let boost = if warm { 0 } else { self.write_boost.load(Ordering::Relaxed) };
        (self.write_max.load(Ordering::Relaxed) + boost) / ROUNDS_PER_SEC
    }
}

/// The queue between the ARC and the workers.
pub struct Queue {
    pub(crate) tx: Sender<Pending>,
    pub(crate) rx: Receiver<Pending>,
    /// Bytes queued now.
    pub backlog: AtomicU64,
}

impl Default for Queue {
    fn default() -> Self {
        let (tx, rx) = crossbeam_channel::bounded(QUEUE_BLOCKS);
        Queue { tx, rx, backlog: AtomicU64::new(0) }
    }
}

impl Queue {
    /// The most bytes the queue may hold: `headroom` rounds of every usable device's
    /// budget.
    fn bound(&self, shared: &Shared) -> u64 {
        let devs = shared.devs.iter().filter(|d| d.usable()).count() as u64;
        let warm = shared.devs.iter().filter(|d| d.usable()).all(|d| d.is_warm());
        shared.tunables.round_budget(warm) * shared.tunables.headroom.load(Ordering::Relaxed) * devs
    }
}

/// The ARC's sink: queues evicted blocks for the workers.
pub struct FeedSink(pub(crate) Arc<Shared>);

impl EvictSink for FeedSink {
    fn evicted(&self, b: Departing<'_>) {
        let s = &self.0;
        if s.stopping.load(Ordering::Relaxed) || !s.devs.iter().any(|d| d.feed_ready()) {
            return;
        }
        if b.unread_prefetch && s.tunables.noprefetch.load(Ordering::Relaxed) {
            s.counters.feed_skipped_prefetch.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let len = b.bytes.len() as u64;
        if CacheDev::chunk_len(1, len) > CHUNK_MAX || crate::index::addr_of(&b.key).is_none() {
            return;
        }
        let q = &s.queue;
        if q.backlog.load(Ordering::Relaxed) + len > q.bound(s) {
            s.counters.feed_behind.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let item = Pending {
            key: b.key,
            bytes: b.bytes.clone(),
            lsize: b.lsize,
            class: b.class,
            objset: b.objset,
            epoch: s.free_epoch.load(Ordering::SeqCst),
        };
        q.backlog.fetch_add(len, Ordering::Relaxed);
        if q.tx.try_send(item).is_err() {
            q.backlog.fetch_sub(len, Ordering::Relaxed);
            s.counters.feed_behind.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// What a dataset lets the cache keep (its `secondarycache` property).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecondaryCache {
    All,
    Metadata,
    None,
}

/// The datasets whose `secondarycache` is not `all`, by object set id (datasets not
/// listed, and blocks of no known dataset, are cached).
#[derive(Default)]
pub(crate) struct Secondary(parking_lot::RwLock<std::collections::HashMap<u64, SecondaryCache>>);

impl Secondary {
    /// Whether the block may go to a cache device.
    fn admits(&self, p: &Pending) -> bool {
        let Some(objset) = p.objset else { return true };
        match self.0.read().get(&objset) {
            None | Some(SecondaryCache::All) => true,
            Some(SecondaryCache::Metadata) => p.class != tarn_arc::Class::Data,
            Some(SecondaryCache::None) => false,
        }
    }

    pub(crate) fn replace(&self, policies: impl IntoIterator<Item = (u64, SecondaryCache)>) {
        let restricted = policies.into_iter().filter(|(_, p)| *p != SecondaryCache::All).collect();
        *self.0.write() = restricted;
    }
}

/// One device's write budget for the current round, shared by its worker and helpers.
#[derive(Default)]
pub(crate) struct Pace {
    round: Mutex<Option<(Instant, u64)>>,
    pub(crate) helpers: AtomicUsize,
}

impl Pace {
    /// Takes `bytes` of this round's budget; returns how long to wait first when the
    /// round's budget is spent.
    fn take(&self, bytes: u64, budget: u64) -> Option<Duration> {
        let mut r = self.round.lock();
        let now = Instant::now();
        let (start, used) = match *r {
            Some((start, used)) if now.duration_since(start) < ROUND => (start, used),
            _ => (now, 0),
        };
        if used >= budget {
            return Some(ROUND.saturating_sub(now.duration_since(start)));
        }
        *r = Some((start, used + bytes));
        None
    }
}

/// A worker's loop for device `dev`: gathers queued blocks into a chunk, writes it at
/// the device's pace, until the cache stops (`helper`: until the queue runs dry).
pub(crate) fn run_worker(shared: Arc<Shared>, dev: usize, helper: bool) {
    let mut batch: Vec<Pending> = Vec::new();
    let mut buf = Vec::new();
    let d = shared.devs[dev].clone();
    let pace = &shared.paces[dev];
    while !shared.stopping.load(Ordering::Relaxed) && !d.is_leaving() {
        if !d.feed_ready() {
            if !d.usable() && helper {
                break;
            }
            std::thread::sleep(ROUND);
            continue;
        }
        let first = match shared.queue.rx.recv_timeout(ROUND) {
            Ok(p) => p,
            Err(RecvTimeoutError::Timeout) if helper => break,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        gather(&shared, first, &mut batch);
        maybe_start_helper(&shared, dev);
        if batch.is_empty() {
            continue;
        }
        let data: u64 = batch.iter().map(|p| p.bytes.len() as u64).sum();
        let len = CacheDev::chunk_len(batch.len(), data);
        while let Some(wait) = pace.take(len, shared.tunables.round_budget(d.is_warm())) {
            if shared.stopping.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(wait.max(Duration::from_millis(1)));
        }
        match d.write_chunk(&batch, &mut buf) {
            Ok(Some(n)) => {
                shared.counters.write_bytes.fetch_add(n, Ordering::Relaxed);
                shared.counters.writes.fetch_add(1, Ordering::Relaxed);
                shared.counters.written_blocks.fetch_add(batch.len() as u64, Ordering::Relaxed);
                count_kinds(&shared.counters, &batch);
                drop_freed(&shared, &d, &batch);
            }
            // The device failed, was dropped or left while the chunk was gathered (its
            // worker may sit in the queue's wait as that happens): the blocks go back to
            // the queue for a device that takes writes.
            Ok(None) | Err(_) => batch.drain(..).for_each(|p| requeue(&shared, p)),
        }
        batch.clear();
    }
    if helper {
        pace.helpers.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Forgets the blocks of a chunk just indexed that the pool freed while they waited in
/// the queue: their free found nothing to forget, and their entries would only hold RAM
/// and ring space. A block is asked about only if a batch of frees was applied since it
/// was queued (the epoch moved); a batch applied after the chunk was indexed removes
/// its entries itself. (A block evicted from the ARC was queued before its free: the
/// free takes it out of the ARC first.)
fn drop_freed(shared: &Shared, d: &CacheDev, batch: &[Pending]) {
    let Some(pool) = shared.pool_blocks.get() else { return };
    let now = shared.free_epoch.load(Ordering::SeqCst);
    for p in batch.iter().filter(|p| p.epoch != now) {
        let psize = p.bytes.len() as u32;
        if !pool.still_allocated(&p.key, psize) && d.forget(&p.key, psize, p.lsize) {
            shared.counters.freed.fetch_add(1, Ordering::Relaxed);
            shared.counters.freed_while_queued.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Counts a written chunk's blocks by kind (data, a dataset's metadata, the pool's).
fn count_kinds(c: &crate::Counters, batch: &[Pending]) {
    let (mut data, mut meta, mut pool) = (0, 0, 0);
    for p in batch {
        match (p.class, p.objset) {
            (tarn_arc::Class::Data, _) => data += 1,
            (tarn_arc::Class::Metadata, Some(_)) => meta += 1,
            (tarn_arc::Class::Metadata, None) => pool += 1,
        }
    }
    c.written_data.fetch_add(data, Ordering::Relaxed);
    c.written_metadata.fetch_add(meta, Ordering::Relaxed);
    c.written_pool_metadata.fetch_add(pool, Ordering::Relaxed);
}

/// Fills `batch` from the queue, starting with `first`, up to one chunk; leaves out
/// blocks some device already holds (in this version). While the chunk is under
/// `CHUNK_MIN` and the queue is dry, waits for more blocks, up to one round from `first`
/// (not once the cache is stopping).
fn gather(shared: &Shared, first: Pending, batch: &mut Vec<Pending>) {
    let deadline = Instant::now() + ROUND;
    let mut data = 0u64;
    let mut next = Some(first);
    while let Some(p) = next.take() {
        let len = p.bytes.len() as u64;
        shared.queue.backlog.fetch_sub(len, Ordering::Relaxed);
        if !shared.secondary.admits(&p) {
            shared.counters.feed_skipped_policy.fetch_add(1, Ordering::Relaxed);
        } else if !shared.devs.iter().any(|d| d.index.get(&p.key).is_some()) {
            if CacheDev::chunk_len(batch.len() + 1, data + len) > CHUNK_MAX {
                // Does not fit this chunk: back to the queue for the next one.
                requeue(shared, p);
                return;
            }
            data += len;
            batch.push(p);
        }
        next = shared.queue.rx.try_recv().ok().or_else(|| wait_for_more(shared, data, deadline));
    }
}

/// Puts a block taken from the queue back at its end. It is left out, as by a feed that
/// is behind, when the queue is full or no device takes writes (it would only hold RAM).
fn requeue(shared: &Shared, p: Pending) {
    if !shared.devs.iter().any(|d| d.feed_ready()) {
        shared.counters.feed_behind.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let len = p.bytes.len() as u64;
    shared.queue.backlog.fetch_add(len, Ordering::Relaxed);
    if shared.queue.tx.try_send(p).is_err() {
        shared.queue.backlog.fetch_sub(len, Ordering::Relaxed);
        shared.counters.feed_behind.fetch_add(1, Ordering::Relaxed);
    }
}

/// The next queued block, waited for until `deadline` while a chunk of `data` bytes is
/// under `CHUNK_MIN`; `None` when the chunk should be written now.
fn wait_for_more(shared: &Shared, data: u64, deadline: Instant) -> Option<Pending> {
    if data >= CHUNK_MIN || shared.stopping.load(Ordering::Relaxed) {
        return None;
    }
    let left = deadline.checked_duration_since(Instant::now())?;
    shared.queue.rx.recv_timeout(left).ok()
}

/// Starts a helper for `dev` while the queue is more than half full.
fn maybe_start_helper(shared: &Arc<Shared>, dev: usize) {
    let backlog = shared.queue.backlog.load(Ordering::Relaxed);
    if backlog * 2 <= shared.queue.bound(shared) {
        return;
    }
    let helpers = &shared.paces[dev].helpers;
    if helpers.fetch_add(1, Ordering::Relaxed) >= HELPERS_MAX {
        helpers.fetch_sub(1, Ordering::Relaxed);
        return;
    }
    shared.counters.feed_helpers_started.fetch_add(1, Ordering::Relaxed);
    let s = shared.clone();
    match std::thread::Builder::new().name("tarn-l2feed+".into()).spawn(move || run_worker(s, dev, true)) {
        Ok(handle) => shared.threads.lock().push(handle),
        Err(_) => {
            helpers.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

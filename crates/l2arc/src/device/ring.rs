//! A cache device's ring: where chunks go, how they are written and indexed, and what
//! the ring still holds.
//!
//! A writer reserves its chunk's span under the ring lock (advancing `reserved_end`
//! first, which makes everything the span will overwrite invalid at once: a block is
//! served only if it lies at or past `reserved_end - ring_size`, the floor), then writes
//! with no lock held, then indexes the chunk's blocks. A chunk that would cross the
//! ring's end is placed at the next lap's start.
//!
//! Owns: the ring's positions and per-chunk sums (the size counters), the chunk write,
//! the header written at initialisation, and forgetting blocks (one, or a txg's frees).
//!
//! Promises: a block is indexed only after its chunk (log block included) is on the
//! device; the index is swept of what the ring overwrote every 1/8 of a lap.
//!
//! Must never: hold the ring lock across device I/O, or write a chunk larger than the
//! ring.
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tarn_arc::BlockKey;
use tarn_vdev::BlockDevice;

use super::CacheDev;
use crate::index::POS_LIMIT;
use crate::layout::{DevHeader, LogEntry, LogHeader, BLOCK_ALIGN, CHUNK_ALIGN, HEADER_SIZE, NO_PREV};
use crate::FreedBlock;

/// The index is swept of overwritten entries each time the ring advances by this
/// fraction of its size.
const SWEEP_FRACTION: u64 = 8;

/// A chunk still in the ring: its span and what it holds (for the size counters).
#[derive(Clone, Copy, Debug)]
pub(super) struct ChunkSum {
    pub(super) abs: u64,
    pub(super) psize: u64,
    pub(super) lsize: u64,
}

#[derive(Default)]
pub(super) struct Ring {
    pub(super) next_abs: u64,
    pub(super) last_chunk: Option<u64>,
    pub(super) chunks: VecDeque<ChunkSum>,
    pub(super) psize: u64,
    pub(super) lsize: u64,
}

impl Ring {
    pub(super) fn push(&mut self, c: ChunkSum, floor: u64) {
        self.psize += c.psize;
        self.lsize += c.lsize;
        self.chunks.push_back(c);
        self.drop_before(floor);
    }

    pub(super) fn push_front(&mut self, c: ChunkSum) {
        self.psize += c.psize;
        self.lsize += c.lsize;
        self.chunks.push_front(c);
    }

    /// Takes a forgotten block's sizes off the chunk that held it at `abs`.
    fn take_sizes(&mut self, abs: u64, psize: u32, lsize: u32) {
        let at = self.chunks.partition_point(|c| c.abs <= abs);
        if at > 0 {
            let c = &mut self.chunks[at - 1];
            let (p, l) = (c.psize.min(psize as u64), c.lsize.min(lsize as u64));
            c.psize -= p;
            c.lsize -= l;
            self.psize -= p;
            self.lsize -= l;
        }
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

/// One block queued for a chunk.
pub struct Pending {
    pub key: BlockKey,
    pub bytes: Arc<[u8]>,
    pub lsize: u32,
    pub class: tarn_arc::Class,
    /// The dataset whose page it is, if the ARC knew (`secondarycache` is asked then).
    pub objset: Option<u64>,
    /// The cache's free epoch when the block was queued (see `feed::drop_freed`).
    pub epoch: u64,
}

impl CacheDev {
    /// Lowest absolute position still intact.
    pub(super) fn floor(&self) -> u64 {
        self.reserved_end.load(Ordering::Acquire).saturating_sub(self.ring_size())
    }
    /// Bytes a chunk of `blocks` takes: the log block, each block at a `BLOCK_ALIGN`
    /// multiple, the whole rounded to `CHUNK_ALIGN`.
    pub fn chunk_len(count: usize, data: u64) -> u64 {
        let table = (LogHeader::table_len(count) as u64).next_multiple_of(BLOCK_ALIGN);
        (table + data).next_multiple_of(CHUNK_ALIGN)
    }

    /// Writes `blocks` as one chunk (the caller keeps them under `CHUNK_MAX` with
    /// `chunk_len`) and indexes them. `buf` is reused between calls. Returns the bytes
    /// written, or `None` when the device takes no writes any more (faulted, unavailable
    /// or leaving): the blocks are still the caller's to place. An I/O error drops the
    /// device.
    pub fn write_chunk(&self, blocks: &[Pending], buf: &mut Vec<u8>) -> Result<Option<u64>, std::io::Error> {
        let (Some(dev), Some(g)) = (&self.dev, &self.geometry) else { return Ok(None) };
        // Held until the blocks are indexed: `leave` empties the index after it.
        let Some(_io) = self.begin_io() else { return Ok(None) };
        if !self.usable() {
            return Ok(None);
        }
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
        if let Err(e) = write_data_then_log_block(dev.as_ref(), buf, table, g.start + abs % g.size()) {
            self.counters.io_errors.fetch_add(1, Ordering::Relaxed);
            self.fault(format!("dropped after a write error: {e}"));
            return Err(e);
        }
        self.counters.write_bytes.fetch_add(len, Ordering::Relaxed);
        for e in &entries {
            self.index.insert(&e.key, (abs + e.at as u64) / BLOCK_ALIGN);
        }
        self.sweep_if_due();
        Ok(Some(len))
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
        self.forget_at(key, psize, lsize).is_some()
    }

    /// `forget`, returning where in the ring (absolute position) the entry was.
    pub(super) fn forget_at(&self, key: &BlockKey, psize: u32, lsize: u32) -> Option<u64> {
        let pos = self.index.remove(key)?;
        let abs = pos * BLOCK_ALIGN;
        self.ring.lock().take_sizes(abs, psize, lsize);
        Some(abs)
    }

    /// Forgets every block of `freed` (the pool's frees of a txg): each index shard's
    /// lock and the ring's are taken once. Returns how many were indexed.
    pub fn forget_batch(&self, freed: &mut [FreedBlock]) -> u64 {
        let mut gone: Vec<(u64, u32, u32)> = Vec::new();
        self.index.remove_batch(freed, |f| f.key, |f, pos| gone.push((pos * BLOCK_ALIGN, f.psize, f.lsize)));
        let mut r = self.ring.lock();
        for &(abs, psize, lsize) in &gone {
            r.take_sizes(abs, psize, lsize);
        }
        gone.len() as u64
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
                self.session_start.store(0, Ordering::Release);
                self.generation.store(h.generation, Ordering::Release);
                self.feed_ready.store(true, Ordering::Release);
            }
            Err(e) => self.fault(format!("cannot write its header: {e}")),
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

/// Writes a chunk laid out in `buf` at `at`: its blocks first, then the 4 KiB that hold
/// its log block (`table` bytes of header and entries), as ZFS commits a log block after
/// its buffers. A write cut short (the process killed mid-way: Linux ends a buffered
/// write between pages once a fatal signal is pending) then leaves an earlier lap's log
/// block there, which the rebuild's walk refuses, instead of a log block naming bytes
/// that never reached the device.
fn write_data_then_log_block(dev: &dyn BlockDevice, buf: &[u8], table: u64, at: u64) -> std::io::Result<()> {
    let head = (table.next_multiple_of(CHUNK_ALIGN) as usize).min(buf.len());
    if head < buf.len() {
        dev.write_at(&buf[head..], at + head as u64)?;
    }
    dev.write_at(&buf[..head], at)
}

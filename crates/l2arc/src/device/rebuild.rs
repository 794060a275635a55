//! Rebuilding a cache device's index from its log blocks (at import, on a thread while
//! reads are served).
//!
//! Walk forward from the ring's start along chunks whose log blocks verify and chain
//! (`abs` and `prev` consistent): that is the current lap, whose end is where writing
//! resumes; then follow `prev` backwards from the lap's first chunk through the previous
//! lap's chunks not yet overwritten. A torn or foreign chunk ends a walk; nothing found
//! means a fresh start. Each entry is asked of the pool (`PoolBlocks`): a block it no
//! longer holds is left out (`rebuild_stale`).
//!
//! Owns: reading and checking log blocks, the walks, and the rebuild's counters.
//!
//! Promises: only log blocks of this device's generation and pool, at the position they
//! name, are indexed; the feed may resume as soon as the forward walk ends.
//!
//! Must never: index a chunk the feed has overwritten meanwhile, or go on once the
//! device is leaving.
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::ring::ChunkSum;
use super::{CacheDev, DevState};
use crate::layout::{LogEntry, LogHeader, BLOCK_ALIGN, CHUNK_ALIGN, NO_PREV};
use crate::PoolBlocks;

impl CacheDev {
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
                self.session_start.store(head, Ordering::Release);
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
            // Any version at the address, not only this one: a newer chunk's block there
            // is the newer block (its space was freed and reused), and must stay.
            if older && self.index.holds_addr(&e.key) {
                continue;
            }
            if pool.is_some_and(|p| !p.may_be_live(&e.key, e.psize)) {
                self.counters.rebuild_stale.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if older {
                if !self.index.insert_if_vacant(&e.key, pos) {
                    continue;
                }
            } else {
                self.index.insert(&e.key, pos);
            }
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

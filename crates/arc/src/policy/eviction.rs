//! Where the data policy keeps a block and which blocks leave: the window (LRU), the
//! main area (one LRU per read count), admission from the window to main (TinyLFU's rule:
//! only a page read more often than main's victim), eviction, and the ghosts an evicted
//! page leaves (offered to the L2ARC's sink on the way out).
//!
//! Owns: the lists, the byte counts per area, the ghosts and the unread read-ahead list.
//!
//! Promises: after `balance` the resident bytes and their bookkeeping are within the
//! budget (asserted in debug builds); ghosts' bookkeeping stays under `GHOST_HEADER_SHARE` of the budget.
//!
//! Must never: do I/O (the sink only queues), or keep a block whose key it forgot.

use super::{DataCache, Entry, Evicted, Ident, Region, GHOST_HEADER_SHARE, REMEMBERED_BYTES, UNREAD_REMEMBERED};
use crate::{BlockKey, Class, LinkedMap};

impl DataCache {
    /// A demand hit on a page now read `count` times: to the window's MRU end, or to the
    /// main list of its count.
    pub(super) fn touch(&mut self, key: &BlockKey, count: u8) {
        let e = self.entries.get_mut(key).expect("touched entries exist");
        match e.region {
            Region::Window => {
                self.window.to_back(key);
            }
            Region::Main(old) => {
                let new = count;
                e.region = Region::Main(new);
                if new == old {
                    self.main[old as usize].to_back(key);
                } else {
                    self.main[old as usize].remove(key);
                    self.main[new as usize].insert(*key, ());
                }
            }
        }
    }

    pub(super) fn place(&mut self, key: BlockKey, e: Entry) {
        let size = e.charge;
        match e.region {
            Region::Window => {
                self.window.insert(key, ());
                self.window_bytes += size;
            }
            Region::Main(f) => {
                self.main[f as usize].insert(key, ());
                self.main_bytes += size;
            }
        }
        if let Ident::Page(p) = e.ident {
            self.pages.insert(p, key);
        }
        self.logical_bytes += e.lsize as u64;
        self.entries.insert(key, e);
    }

    /// Removes a block from wherever it is.
    pub(super) fn take(&mut self, key: &BlockKey) -> Option<Entry> {
        let e = self.entries.remove(key)?;
        self.left_since_compact += 1;
        let size = e.charge;
        match e.region {
            Region::Window => {
                self.window.remove(key);
                self.window_bytes -= size;
            }
            Region::Main(f) => {
                self.main[f as usize].remove(key);
                self.main_bytes -= size;
            }
        }
        if let Ident::Page(p) = e.ident {
            if self.pages.get(&p) == Some(key) {
                self.pages.remove(&p);
            }
        }
        self.logical_bytes -= e.lsize as u64;
        Some(e)
    }

    /// The block main would evict next: the least read page, least recently read first.
    pub(super) fn main_victim(&self) -> Option<BlockKey> {
        self.main.iter().find_map(|l| l.front().map(|(k, _)| *k))
    }

    /// Moves blocks out of the window (admitting or dropping them) until it is within its
    /// share, then evicts from main until it is within the rest.
    pub(super) fn balance(&mut self) -> Evicted {
        let mut ev = Evicted::default();
        while self.window_bytes > self.window_target {
            let Some((&candidate, _)) = self.window.front() else { break };
            ev += self.admit_or_drop(candidate);
        }
        // Main gives up what a grown window now claims.
        let main_room = self.budget.saturating_sub(self.window_target);
        while self.main_bytes > main_room {
            let Some(victim) = self.main_victim() else { break };
            let v = self.take(&victim).expect("victim exists");
            ev += self.drop_block(victim, v, true);
        }
        while self.bytes() > self.budget {
            ev += self.evict_one();
        }
        debug_assert!(self.bytes() <= self.budget, "data over its budget");
        ev
    }

    /// The window's oldest block goes to main if its page is read more often than what
    /// main would evict for it; else it leaves the cache.
    pub(super) fn admit_or_drop(&mut self, candidate: BlockKey) -> Evicted {
        let mut ev = Evicted::default();
        let e = self.take(&candidate).expect("window blocks exist");
        let size = e.charge;
        let freq = self.freq(e.ident);
        let main_room = self.budget.saturating_sub(self.window_target);
        while self.main_bytes + size > main_room {
            let Some(victim) = self.main_victim() else { break };
            let victim_freq = match self.entries[&victim].region {
                Region::Main(f) => f,
                Region::Window => unreachable!("main lists hold main blocks"),
            };
            // Ties keep the incumbent: a scan of pages read once cannot flush pages read
            // once before them.
            if freq <= victim_freq {
                ev += self.drop_block(candidate, e, false);
                return ev;
            }
            let v = self.take(&victim).expect("victim exists");
            ev += self.drop_block(victim, v, true);
        }
        if self.main_bytes + size > main_room {
            ev += self.drop_block(candidate, e, false);
            return ev;
        }
        self.place(candidate, Entry { region: Region::Main(freq), ..e });
        ev
    }

    /// Evicts one block: from main first, the window when main is empty.
    pub(super) fn evict_one(&mut self) -> Evicted {
        if let Some(victim) = self.main_victim() {
            let v = self.take(&victim).expect("victim exists");
            return self.drop_block(victim, v, true);
        }
        match self.window.front().map(|(k, _)| *k) {
            Some(oldest) => {
                let e = self.take(&oldest).expect("window blocks exist");
                self.drop_block(oldest, e, false)
            }
            None => Evicted::default(),
        }
    }

    /// A block leaves the cache; its page is remembered as a ghost of where it was.
    pub(super) fn drop_block(&mut self, key: BlockKey, e: Entry, from_main: bool) -> Evicted {
        let size = e.charge;
        let objset = match e.ident {
            Ident::Page(page) => Some(page.objset),
            Ident::Block(_) => None,
        };
        self.sink.offer(key, &e.bytes, e.lsize, Class::Data, e.prefetched, objset);
        // A page never read has no evidence to leave (see the module's comment).
        if self.freq(e.ident) > 0 {
            let (ghosts, bytes) = if from_main {
                (&mut self.main_ghosts, &mut self.main_ghost_bytes)
            } else {
                (&mut self.window_ghosts, &mut self.window_ghost_bytes)
            };
            if let Some(old) = ghosts.insert(e.ident, size) {
                *bytes -= old;
            }
            *bytes += size;
            trim_ghosts(ghosts, bytes, self.budget);
        }
        if e.prefetched {
            self.unread_evicted.insert(key, ());
            while self.unread_evicted.len() > UNREAD_REMEMBERED {
                self.unread_evicted.pop_front();
            }
        }
        Evicted { blocks: 1, unread_prefetch: e.prefetched as u64 }
    }
}

/// Forgets the oldest ghosts until they describe at most `budget` bytes and their
/// bookkeeping takes at most 1/`GHOST_HEADER_SHARE` of it.
pub(super) fn trim_ghosts(ghosts: &mut LinkedMap<Ident, u64>, bytes: &mut u64, budget: u64) {
    let ghost_max = budget / GHOST_HEADER_SHARE;
    while *bytes > budget || ghosts.len() as u64 * REMEMBERED_BYTES > ghost_max {
        let Some((_, s)) = ghosts.pop_front() else { break };
        *bytes -= s;
    }
}

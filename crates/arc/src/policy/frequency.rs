//! The data policy's evidence: how often each page was read (kept by logical identity
//! across rewrites, saturating at `MAX_FREQ`, halved as it ages) and the ghost hits that
//! grow or shrink the window's share, ARC-style.
//!
//! Owns: the page history and the window's target share.
//!
//! Promises: the history is bounded by the cached blocks (`HISTORY_PER_ENTRY`, at least
//! `HISTORY_MIN`); the window's target stays within its minimum and maximum share.
//!
//! Must never: move bytes in or out of the cache (only aging re-files main's lists).

use super::{
    DataCache, Ident, Region, AGE_READS_PER_ENTRY, HISTORY_MIN, HISTORY_PER_ENTRY, MAX_FREQ, RECENCY_READS_MAX,
};
use crate::BlockKey;

impl DataCache {
    /// A page's read count.
    pub(super) fn freq(&self, ident: Ident) -> u8 {
        self.history.get(&ident).copied().unwrap_or(0)
    }

    pub(super) fn count_read(&mut self, ident: Ident) {
        // Counted and moved to the back in one lookup; a new page is inserted.
        match self.history.entry(ident) {
            hashlink::linked_hash_map::Entry::Occupied(mut seen) => {
                let f = seen.get_mut();
                *f = (*f + 1).min(MAX_FREQ);
                seen.to_back();
            }
            hashlink::linked_hash_map::Entry::Vacant(new) => {
                new.insert(1);
            }
        }
        self.trim_history();
        self.reads_since_aging += 1;
        if self.reads_since_aging >= AGE_READS_PER_ENTRY * (self.entries.len().max(HISTORY_MIN) as u64) {
            self.age();
        }
    }

    /// Forgets the least recently read pages beyond the history's bound (it follows the
    /// cached blocks down: a shrink leaves no history of blocks that are gone).
    pub(super) fn trim_history(&mut self) {
        let limit = (self.entries.len() * HISTORY_PER_ENTRY).max(HISTORY_MIN);
        while self.history.len() > limit {
            self.history.pop_front();
        }
    }

    /// Halves every read count (the main area's lists follow).
    pub(super) fn age(&mut self) {
        self.reads_since_aging = 0;
        for f in self.history.values_mut() {
            *f /= 2;
        }
        let keys: Vec<BlockKey> = self.main.iter().flat_map(|l| l.keys().copied()).collect();
        for key in keys {
            let Some(e) = self.entries.get(&key) else { continue };
            let (ident, Region::Main(old)) = (e.ident, e.region) else { continue };
            let new = self.freq(ident);
            if new != old {
                self.main[old as usize].remove(&key);
                self.main[new as usize].insert(key, ());
                self.entries.get_mut(&key).expect("just seen").region = Region::Main(new);
            }
        }
    }

    /// A demand miss on a page the window let go says the window is too small (if the
    /// page is recency's: read at most `RECENCY_READS_MAX` times); on a page main evicted,
    /// that main is.
    pub(super) fn steer_window(&mut self, ident: Ident) {
        if let Some(size) = self.window_ghosts.remove(&ident) {
            self.window_ghost_bytes -= size;
            if self.freq(ident) <= RECENCY_READS_MAX {
                let step = size * (self.main_ghost_bytes / self.window_ghost_bytes.max(1)).max(1);
                self.window_target = (self.window_target + step).min(self.window_max().max(self.window_min()));
            }
            self.ghost_hits.window += 1;
        } else if let Some(size) = self.main_ghosts.remove(&ident) {
            self.main_ghost_bytes -= size;
            let step = size * (self.window_ghost_bytes / self.main_ghost_bytes.max(1)).max(1);
            self.window_target = self.window_target.saturating_sub(step).max(self.window_min());
            self.ghost_hits.main += 1;
        }
    }
}

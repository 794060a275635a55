//! The data policy's evidence: how often each page was read (kept by logical identity
//! across rewrites in the sketch, saturating at `MAX_FREQ`, halved as it ages) and the
//! ghost hits that grow or shrink the window's share, ARC-style.
//!
//! Owns: when counts are taken and halved, and the window's target share.
//!
//! Promises: the window's target stays within its minimum and maximum share.
//!
//! Must never: move bytes in or out of the cache (only aging re-files main's lists).

use super::{DataCache, Ident, Region, AGE_MIN_ENTRIES, AGE_READS_PER_ENTRY, RECENCY_READS_MAX};
use crate::BlockKey;

impl DataCache {
    /// A page's read count.
    pub(super) fn freq(&self, ident: Ident) -> u8 {
        self.sketch.estimate(&ident)
    }

    /// Counts a demand read of the page; returns its read count after it.
    pub(super) fn count_read(&mut self, ident: Ident) -> u8 {
        let count = self.sketch.increment(&ident);
        self.reads_since_aging += 1;
        if self.reads_since_aging >= AGE_READS_PER_ENTRY * (self.entries.len().max(AGE_MIN_ENTRIES) as u64) {
            self.age();
            return self.freq(ident);
        }
        count
    }

    /// Halves every read count (the main area's lists follow).
    pub(super) fn age(&mut self) {
        self.reads_since_aging = 0;
        self.sketch.halve();
        self.refile_main();
    }

    /// Files every main block under its page's read count as the sketch has it now
    /// (after a halving, or a new sketch).
    pub(super) fn refile_main(&mut self) {
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

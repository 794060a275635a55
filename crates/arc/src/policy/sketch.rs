//! How often each page was read, for pages cached or long gone: a count-min sketch of
//! 4-bit counters (TinyLFU's frequency sketch, Einziger et al.), sized by the data's budget.
//!
//! Why a sketch. Under a buffer pool a page comes back to tarn only after the pool let it
//! go, thousands of reads later (median ~5,000 demand reads on the TPC-C-like fixtures),
//! so the evidence that decides admission is about pages the cache no longer holds. A
//! table of exact counts bounded to 4 pages per cached block forgot most of them before
//! they came back, and cost ~310 bytes of bookkeeping per cached block; the sketch
//! remembers `COUNTERS_PER_BLOCK` counters' worth per block the budget can hold, in
//! half a byte each. A collision can only overstate a count (each page's estimate is the
//! least of its four counters), never hide a hot page.
//!
//! Owns: the counters and their halving.
//!
//! Promises: `estimate` never understates a page's reads since the last halving (up to
//! `MAX_FREQ`); the counters take `bytes()` of memory, fixed at `with_budget`.
//!
//! Must never: allocate after it is built (a count is on every demand read).
use std::hash::{BuildHasher, Hash};

use super::MAX_FREQ;

/// Counters per block the budget holds (at 8 KiB a block): enough that the pages read
/// since the last halving rarely share all four.
const COUNTERS_PER_BLOCK: u64 = 16;
/// Budget bytes per block the sketch is sized for (smaller blocks share counters more).
const SIZING_BLOCK_BYTES: u64 = 8 << 10;
/// At least this many counters (32 KiB)…
const MIN_COUNTERS: u64 = 1 << 16;
/// …unless that is more than 1/`MAX_SHARE` of the budget (a tiny cache keeps its room for
/// blocks), and never more than `MAX_COUNTERS` (1 GiB, for an `arc_max` of 512 GiB).
const MAX_SHARE: u64 = 64;
const MAX_COUNTERS: u64 = 1 << 31;
/// Each page has a counter in this many rows.
const DEPTH: u32 = 4;
const COUNTERS_PER_WORD: u64 = 16;
/// Words per block: a page's counters all lie in one 64-byte block (`slots`).
const BLOCK_WORDS: usize = 8;
/// Keeps the low three bits of each 4-bit counter after a shift: halves all sixteen.
const HALVE_MASK: u64 = 0x7777_7777_7777_7777;
/// The hash's fixed seed: estimates are reproducible run to run (the keys are block
/// addresses and page ids, not text an attacker picks).
const SEED: u64 = 0x7a72_6e5f_736b_6574;

pub(crate) struct FrequencySketch {
    words: Vec<u64>,
    hasher: foldhash::fast::FixedState,
}

impl Default for FrequencySketch {
    /// No counters: every estimate is 0 (a data policy with no budget, `DataPolicy::Arc`).
    fn default() -> Self {
        FrequencySketch { words: Vec::new(), hasher: foldhash::fast::FixedState::with_seed(SEED) }
    }
}

impl FrequencySketch {
    /// A sketch for a data budget of `budget` bytes, every count zero.
    pub(crate) fn with_budget(budget: u64) -> FrequencySketch {
        FrequencySketch {
            words: vec![0; FrequencySketch::with_budget_len(budget)],
            hasher: foldhash::fast::FixedState::with_seed(SEED),
        }
    }

    /// Whether this sketch has the size a sketch for `budget` would have.
    pub(crate) fn sized_for(&self, budget: u64) -> bool {
        self.words.len() == FrequencySketch::with_budget_len(budget)
    }

    /// Words of a sketch for `budget`: a power of two, at least one block.
    fn with_budget_len(budget: u64) -> usize {
        let wanted = (budget / SIZING_BLOCK_BYTES * COUNTERS_PER_BLOCK).max(MIN_COUNTERS);
        // Two 4-bit counters a byte: the share's bytes hold twice as many counters.
        let cap = (budget / MAX_SHARE * 2).min(MAX_COUNTERS);
        let mut counters = wanted.min(MAX_COUNTERS).next_power_of_two();
        while counters > cap && counters > BLOCK_WORDS as u64 * COUNTERS_PER_WORD {
            counters /= 2;
        }
        ((counters / COUNTERS_PER_WORD) as usize).max(BLOCK_WORDS)
    }

    /// Memory the counters take.
    pub(crate) fn bytes(&self) -> u64 {
        (self.words.len() * size_of::<u64>()) as u64
    }

    /// The word and the counter's shift within it, for each of the key's `DEPTH` counters.
    /// All four lie in one block of `BLOCK_WORDS` words (a 64-byte cache line), two words
    /// per row: a count costs one cache miss, not four, on the read path (Caffeine's
    /// layout); the rows still pick their counters by independent bits of the hash.
    fn slots<K: Hash>(&self, key: &K) -> [(usize, u32); DEPTH as usize] {
        let hash = self.hasher.hash_one(key);
        let blocks = self.words.len() / BLOCK_WORDS;
        let block = (hash as usize & (blocks - 1)) * BLOCK_WORDS;
        // The block took the low bits; the counters take a remix of the whole hash.
        let counters = (hash ^ (hash >> 29)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mut slots = [(0, 0); DEPTH as usize];
        for (row, slot) in slots.iter_mut().enumerate() {
            let h = (counters >> (row * 8 + 32)) as usize;
            *slot = (block + 2 * row + (h & 1), ((h >> 1) & 0xf) as u32 * 4);
        }
        slots
    }

    fn counter(word: u64, shift: u32) -> u8 {
        ((word >> shift) & 0xf) as u8
    }

    /// The page's read count (an estimate that never understates it).
    pub(crate) fn estimate<K: Hash>(&self, key: &K) -> u8 {
        if self.words.is_empty() {
            return 0;
        }
        self.slots(key).iter().map(|&(w, s)| Self::counter(self.words[w], s)).min().unwrap_or(0)
    }

    /// Counts one read of the page: its smallest counters go up (conservative update,
    /// which overstates less than raising all four), saturating at `MAX_FREQ`. Returns
    /// the page's estimate after it.
    pub(crate) fn increment<K: Hash>(&mut self, key: &K) -> u8 {
        if self.words.is_empty() {
            return 0;
        }
        let slots = self.slots(key);
        let least = slots.iter().map(|&(w, s)| Self::counter(self.words[w], s)).min().unwrap_or(0);
        if least >= MAX_FREQ {
            return MAX_FREQ;
        }
        for (w, s) in slots {
            if Self::counter(self.words[w], s) == least {
                self.words[w] += 1 << s;
            }
        }
        least + 1
    }

    /// Halves every count, so yesterday's hot pages fade.
    pub(crate) fn halve(&mut self) {
        for w in &mut self.words {
            *w = (*w >> 1) & HALVE_MASK;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn counts_saturate_and_halve() {
        let mut s = FrequencySketch::with_budget(16 * MIB);
        for n in 1..=20u8 {
            assert_eq!(s.increment(&42u64), n.min(MAX_FREQ), "the count after read {n}");
        }
        assert_eq!(s.estimate(&42u64), MAX_FREQ);
        s.halve();
        assert_eq!(s.estimate(&42u64), MAX_FREQ / 2);
        assert_eq!(s.estimate(&43u64), 0, "a page never read");
        let mut none = FrequencySketch::default();
        none.increment(&42u64);
        assert_eq!((none.estimate(&42u64), none.bytes()), (0, 0), "no budget, no counters");
    }

    /// Reads of `pages` pages (1 to 5 each) into `s`: how many estimates are exact; every
    /// one is at least the page's reads.
    fn exact_estimates(mut s: FrequencySketch, pages: u64) -> u64 {
        let reads = |p: u64| (p % 5) as u8 + 1;
        for p in 0..pages {
            for _ in 0..reads(p) {
                s.increment(&p);
            }
        }
        let mut exact = 0;
        for p in 0..pages {
            let e = s.estimate(&p);
            assert!(e >= reads(p), "page {p}: estimate {e} below its {} reads", reads(p));
            exact += (e == reads(p)) as u64;
        }
        exact
    }

    #[test]
    fn a_count_is_never_understated_and_mostly_exact() {
        // Collisions may raise an estimate, never lower it, even far past the load the
        // sketch is sized for (and in the smallest one); at that load (a page per 16
        // counters) nearly all are exact.
        exact_estimates(FrequencySketch::with_budget(16 * MIB), 50_000);
        exact_estimates(FrequencySketch::with_budget(0), 5_000);
        let s = FrequencySketch::with_budget(16 * MIB);
        let pages = s.bytes() * 2 / COUNTERS_PER_BLOCK;
        let exact = exact_estimates(s, pages);
        assert!(exact * 100 >= pages * 95, "{exact} of {pages} estimates exact");
    }

    #[test]
    fn its_size_follows_the_budget_within_its_share() {
        let counters = |budget: u64| FrequencySketch::with_budget(budget).bytes() * 2;
        assert_eq!(counters(16 * MIB), MIN_COUNTERS, "the minimum for a small cache");
        assert_eq!(counters(1 << 30), (1u64 << 30) / SIZING_BLOCK_BYTES * COUNTERS_PER_BLOCK);
        for budget in [0, 64 << 10, 160 << 10, MIB, 4 * MIB] {
            let bytes = FrequencySketch::with_budget(budget).bytes();
            assert!(bytes <= (budget / MAX_SHARE).max(64), "{bytes} bytes of counts for a budget of {budget}");
            assert!(bytes >= 64 && bytes.is_power_of_two(), "at least one block: {bytes}");
        }
        assert_eq!(counters(1 << 50), MAX_COUNTERS, "an absurd budget gets the largest sketch, no more");
    }
}

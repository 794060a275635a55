//! Tests of the data policy: every count stays right under random reads, writes, frees
//! and budget changes; a written page takes its older version's place; counts age.

use super::*;

fn key(n: u64, v: u64) -> BlockKey {
    BlockKey { vdev: 0, offset: n << 20 | v, birth: v }
}

fn page(n: u64) -> PageId {
    PageId { objset: 1, object: 2, blkid: n }
}

fn bytes(size: usize) -> Arc<[u8]> {
    Arc::from(vec![0u8; size])
}

impl DataCache {
    /// Every count agrees with the blocks themselves.
    fn check(&self) {
        let window: u64 = self.window.keys().map(|k| self.entries[k].charge).sum();
        let main: u64 = self.main.iter().flat_map(|l| l.keys()).map(|k| self.entries[k].charge).sum();
        assert_eq!((window, main), (self.window_bytes, self.main_bytes));
        let listed = self.window.len() + self.main.iter().map(|l| l.len()).sum::<usize>();
        assert_eq!(listed, self.entries.len(), "every block is in exactly one list");
        for (k, e) in &self.entries {
            match e.region {
                Region::Window => assert!(self.window.contains_key(k)),
                Region::Main(f) => assert!(self.main[f as usize].contains_key(k)),
            }
        }
        for (p, k) in &self.pages {
            assert_eq!(self.entries[k].ident, Ident::Page(*p), "the page index points at the page's block");
        }
        assert!(self.bytes() <= self.budget, "{} over the budget {}", self.bytes(), self.budget);
        assert!(self.window_ghost_bytes <= self.budget && self.main_ghost_bytes <= self.budget);
    }
}

#[test]
fn random_reads_writes_frees_and_budget_changes_keep_every_count_right() {
    let mut d = DataCache::new(200 * 4096, SinkSlot::default());
    let mut version = [0u64; 600];
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for step in 0..60_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let n = if x.is_multiple_of(3) { (x >> 8) % 40 } else { (x >> 8) % 600 };
        let size = 1000 + ((x >> 20) % 7000) as usize;
        let v = version[n as usize];
        match (x >> 40) % 10 {
            0..=5 => {
                if let Found::Miss = d.get(&key(n, v), Some(page(n)), true) {
                    d.insert(key(n, v), bytes(size), 16384, Some(page(n)), false);
                }
            }
            6 | 7 => {
                // Rewritten: the new version is cached, the old one freed.
                version[n as usize] += 1;
                d.insert(key(n, v + 1), bytes(size), 16384, Some(page(n)), false);
                d.remove(&key(n, v));
                assert!(!d.contains(&key(n, v)));
            }
            8 => {
                d.insert(key(n, v), bytes(size), 16384, Some(page(n)), true);
            }
            _ => {
                if step % 1000 == 0 {
                    d.set_budget(100 * 4096 + (x >> 30) % (300 * 4096));
                }
            }
        }
        d.check();
    }
}

#[test]
fn a_written_page_takes_its_older_versions_place_and_rank() {
    let mut d = DataCache::new(100 * 4096, SinkSlot::default());
    for _ in 0..5 {
        for n in 0..10 {
            if let Found::Miss = d.get(&key(n, 0), Some(page(n)), true) {
                d.insert(key(n, 0), bytes(4096), 16384, Some(page(n)), false);
            }
        }
    }
    // Push the first pages out of the window into main with enough traffic.
    for n in 100..200 {
        if let Found::Miss = d.get(&key(n, 0), Some(page(n)), true) {
            d.insert(key(n, 0), bytes(4096), 16384, Some(page(n)), false);
        }
    }
    let before = d.entries[&key(3, 0)].region;
    assert!(matches!(before, Region::Main(f) if f >= 5), "{before:?}");
    d.insert(key(3, 1), bytes(4096), 16384, Some(page(3)), false);
    assert!(!d.contains(&key(3, 0)), "the old version is replaced");
    assert_eq!(d.entries[&key(3, 1)].region, before);
    d.check();
}

#[test]
fn counts_halve_with_age_so_an_old_hot_set_can_be_replaced() {
    let mut d = DataCache::new(50 * 4096, SinkSlot::default());
    let read = |d: &mut DataCache, n: u64| {
        if let Found::Miss = d.get(&key(n, 0), Some(page(n)), true) {
            d.insert(key(n, 0), bytes(4096), 16384, Some(page(n)), false);
            false
        } else {
            true
        }
    };
    for _ in 0..MAX_FREQ as u64 {
        for n in 0..40 {
            read(&mut d, n);
        }
    }
    // A new hot set, read over and over: once counts have aged it takes over.
    let mut hits = 0;
    for round in 0..20_000u64 {
        hits += read(&mut d, 1000 + round % 40) as u64;
    }
    assert!(hits > 15_000, "the new hot set is cached: {hits}");
    assert!((0..40).filter(|&n| d.contains(&key(n, 0))).count() < 10);
    d.check();
}

#[test]
fn a_new_sketch_files_main_by_its_counts() {
    // Hot pages in main at high counts; a new size for the read counts forgets them, and
    // main must be filed by what the sketch says now, or a victim's old count would keep
    // every candidate out of main until the next halving.
    let mut d = DataCache::new(64 << 20, SinkSlot::default());
    for _ in 0..8 {
        for n in 0..2000 {
            if let Found::Miss = d.get(&key(n, 0), Some(page(n)), true) {
                d.insert(key(n, 0), bytes(4096), 16384, Some(page(n)), false);
            }
        }
    }
    let in_main = |d: &DataCache| d.main.iter().map(|l| l.len()).sum::<usize>();
    assert!(in_main(&d) > 1000 && d.main[0].is_empty(), "hot pages sit in main above count 0");
    d.size_sketch(1 << 30);
    assert_eq!(d.main[0].len(), in_main(&d), "every main block filed at the new sketch's count");
    d.check();
}

//! alloc — free space of one top-level vdev.
//!
//! Owns: which sectors of a vdev's data area hold live bytes. Blocks are packed without
//! sector padding, so several blocks may share a sector; the map keeps a live-byte count
//! per sector (`counts`, in memory that grows with the partly live sectors, not with the
//! vdev), and a sector is free only when its count is zero.
//!
//! Promises: a sector freed in txg N is handed out again only after `release_deferred`,
//! which the pool calls once txg N's uberblock is durable; allocation never returns a
//! sector that holds a live byte; running out of space is `None`, never a panic.
//!
//! Must never: persist anything. The map is rebuilt at import by walking the block tree
//! (`claim`), so it can never disagree with the tree; a claim that would put more live
//! bytes in a sector than it has is refused (`Overlap`: a corrupt tree pointing two
//! blocks at the same bytes), not counted.
//! Never free a byte twice: a free
//! that would take a sector's live count below zero, or that overlaps bytes already freed
//! since the last release (the deferred list of the syncing txg), is a bug that would
//! hand another block's sectors out while it is live; both stop with a panic.
mod counts;

use std::collections::BTreeMap;

use counts::SectorCounts;

pub struct SpaceMap {
    shift: u32,
    live: SectorCounts,
    /// Free extents: first sector -> length in sectors.
    free: BTreeMap<u64, u64>,
    free_sectors: u64,
    /// Sectors that reached zero live bytes in the syncing txg; free after it commits.
    deferred: Vec<u64>,
    /// Byte ranges freed since the last release (start -> end), to catch a double free
    /// inside one txg even where sector sharing hides it from the live counts.
    freed: BTreeMap<u64, u64>,
    rotor: u64,
}

/// A run of whole sectors handed to the packer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    pub first: u64,
    pub sectors: u64,
}

impl SpaceMap {
    /// A map of `bytes` (rounded down to whole sectors) with nothing live. Call `claim`
    /// for every live block, then `rebuild_free`.
    pub fn new(bytes: u64, shift: u32) -> SpaceMap {
        let sectors = bytes >> shift;
        SpaceMap {
            shift,
            live: SectorCounts::new(sectors, 1 << shift),
            free: BTreeMap::new(),
            free_sectors: 0,
            deferred: Vec::new(),
            freed: BTreeMap::new(),
            rotor: 0,
        }
    }

    pub fn sector_size(&self) -> u64 {
        1 << self.shift
    }

    pub fn total_bytes(&self) -> u64 {
        self.live.len() << self.shift
    }

    /// Heap bytes the map's per-sector counts hold (for `tarn stats arc`).
    pub fn heap_bytes(&self) -> u64 {
        self.live.heap_bytes()
    }

    /// Bytes not free for allocation now (live, partly live, or freed but not yet
    /// released).
    pub fn allocated_bytes(&self) -> u64 {
        self.total_bytes() - (self.free_sectors << self.shift)
    }

    pub fn free_bytes(&self) -> u64 {
        self.free_sectors << self.shift
    }

    /// Bytes that become free once the syncing txg commits.
    pub fn deferred_bytes(&self) -> u64 {
        (self.deferred.len() as u64) << self.shift
    }

    /// (sectors holding any live byte, live bytes): their ratio says how full the
    /// allocated sectors are (1.0 = no space lost to partly freed sectors).
    pub fn occupancy(&self) -> (u64, u64) {
        self.live.occupancy()
    }

    /// Records `len` live bytes at byte `offset` (import walk, or a block just written).
    /// `Err(Overlap)`, with nothing recorded, if a sector would hold more live bytes than
    /// it has: the bytes are already claimed.
    pub fn claim(&mut self, offset: u64, len: u64) -> Result<(), Overlap> {
        let size = self.sector_size();
        let mut at = offset;
        let end = offset + len;
        assert!(end <= self.total_bytes(), "block [{offset}, {end}) beyond the vdev");
        while at < end {
            let sector = at >> self.shift;
            let share = end.min((sector + 1) * size) - at;
            if self.live.get(sector) as u64 + share > size {
                return Err(Overlap { offset, len });
            }
            at += share;
        }
        self.for_each_sector_share_indexed(offset, len, |_, count, share| count + share);
        Ok(())
    }

    /// After the import walk: every sector with no live byte is free.
    pub fn rebuild_free(&mut self) {
        self.free.clear();
        self.free_sectors = 0;
        let mut runs = Vec::new();
        self.live.for_each_empty_run(|first, len| runs.push((first, len)));
        for (first, len) in runs {
            self.insert_free(first, len);
        }
    }

    /// A run of at least `min` and at most `want` free sectors, next-fit from the
    /// rotor so consecutive txgs write forward, like a log.
    pub fn alloc_run(&mut self, min: u64, want: u64) -> Option<Run> {
        assert!(min >= 1 && min <= want, "bad run request {min}..{want}");
        let fits = |len: u64| len >= want;
        let found = self
            .free
            .range(self.rotor..)
            .chain(self.free.range(..self.rotor))
            .find(|(_, &len)| fits(len))
            .or_else(|| self.free.iter().filter(|(_, &len)| len >= min).max_by_key(|(_, &len)| len))
            .map(|(&s, &l)| (s, l))?;
        let (start, len) = found;
        let take = len.min(want);
        self.free.remove(&start);
        if len > take {
            self.free.insert(start + take, len - take);
        }
        self.free_sectors -= take;
        self.rotor = start + take;
        Some(Run { first: start, sectors: take })
    }

    /// Gives back the tail of a run the packer did not use (sectors with no live byte).
    pub fn return_unused(&mut self, first: u64, sectors: u64) {
        for s in first..first + sectors {
            assert_eq!(self.live.get(s), 0, "returning a sector that holds live bytes");
        }
        if sectors > 0 {
            self.insert_free(first, sectors);
        }
    }

    /// False if [offset, offset+len) cannot be one live block: some sector it touches
    /// holds fewer live bytes than the block's share of it (a freed block's sectors are
    /// empty, or shared only with other blocks' smaller shares). True says only "may be":
    /// another block may fill the same sectors. Out of the vdev's range is not live.
    pub fn may_hold(&self, offset: u64, len: u64) -> bool {
        let Some(end) = offset.checked_add(len) else { return false };
        if len == 0 || end > self.total_bytes() {
            return false;
        }
        let size = self.sector_size();
        let mut at = offset;
        while at < end {
            let sector = at >> self.shift;
            let share = end.min((sector + 1) * size) - at;
            if (self.live.get(sector) as u64) < share {
                return false;
            }
            at += share;
        }
        true
    }

    /// Drops `len` live bytes at `offset`; sectors left empty wait in the deferred list.
    ///
    /// Panics on a double free (see the module's "must never").
    pub fn free(&mut self, offset: u64, len: u64) {
        self.note_freed(offset, len);
        let mut emptied = Vec::new();
        self.for_each_sector_share_indexed(offset, len, |sector, count, share| {
            let Some(left) = count.checked_sub(share) else {
                panic!("space freed twice: freeing {share} bytes from sector {sector}, which holds {count} live bytes")
            };
            if left == 0 {
                emptied.push(sector);
            }
            left
        });
        self.deferred.extend(emptied);
    }

    /// Records [offset, offset+len) as freed in this txg; panics if any of it already is.
    fn note_freed(&mut self, offset: u64, len: u64) {
        let end = offset + len;
        let before = self.freed.range(..=offset).next_back().filter(|(_, &e)| e > offset);
        let after = self.freed.range(offset..end).next();
        if let Some((&s, &e)) = before.or(after) {
            panic!("space freed twice: bytes [{offset}, {end}) overlap [{s}, {e}), already freed in this txg");
        }
        if len > 0 {
            self.freed.insert(offset, end);
        }
    }

    /// Called once the txg that freed the deferred sectors is committed.
    pub fn release_deferred(&mut self) {
        self.freed.clear();
        let mut sectors = std::mem::take(&mut self.deferred);
        sectors.sort_unstable();
        let mut i = 0;
        while i < sectors.len() {
            let start = sectors[i];
            let mut end = start + 1;
            i += 1;
            while i < sectors.len() && sectors[i] == end {
                end += 1;
                i += 1;
            }
            self.insert_free(start, end - start);
        }
    }

    /// Adds a free extent, merging with its neighbours.
    fn insert_free(&mut self, mut start: u64, mut len: u64) {
        self.free_sectors += len;
        if let Some((&ps, &pl)) = self.free.range(..start).next_back() {
            assert!(ps + pl <= start, "free extents overlap at sector {start}");
            if ps + pl == start {
                self.free.remove(&ps);
                start = ps;
                len += pl;
            }
        }
        if let Some(&nl) = self.free.get(&(start + len)) {
            self.free.remove(&(start + len));
            len += nl;
        }
        if let Some((&ns, _)) = self.free.range(start..).next() {
            assert!(ns >= start + len, "free extents overlap at sector {ns}");
        }
        self.free.insert(start, len);
    }

    /// Splits [offset, offset+len) into per-sector byte shares and stores, for each
    /// sector, `f(sector, its count, the share)`.
    fn for_each_sector_share_indexed(&mut self, offset: u64, len: u64, mut f: impl FnMut(u64, u32, u32) -> u32) {
        let size = self.sector_size();
        let end = offset + len;
        assert!(end <= self.total_bytes(), "block [{offset}, {end}) beyond the vdev");
        let mut at = offset;
        while at < end {
            let sector = at >> self.shift;
            let sector_end = (sector + 1) * size;
            let share = (end.min(sector_end) - at) as u32;
            let count = f(sector, self.live.get(sector), share);
            self.live.set(sector, count).expect("a count within the sector, checked by the caller");
            at += share as u64;
        }
    }
}

/// A claim of bytes some sector has no room for: they are claimed already.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("bytes [{offset}, +{len}) are already claimed by another block")]
pub struct Overlap {
    pub offset: u64,
    pub len: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty(sectors: u64) -> SpaceMap {
        let mut m = SpaceMap::new(sectors * 512, 9);
        m.rebuild_free();
        m
    }

    #[test]
    fn may_hold_says_no_for_freed_bytes_and_maybe_for_shared_sectors() {
        let mut m = empty(8);
        m.claim(0, 100).unwrap();
        m.claim(100, 800).unwrap();
        assert!(m.may_hold(0, 100));
        assert!(m.may_hold(100, 800));
        m.free(100, 800);
        assert!(!m.may_hold(100, 800), "its second sector is empty");
        assert!(m.may_hold(0, 100));
        assert!(!m.may_hold(512, 100), "nothing live there");
        assert!(!m.may_hold(8 * 512 - 10, 100), "past the vdev's end");
        assert!(!m.may_hold(u64::MAX - 5, 100), "overflow is not live");
    }

    #[test]
    fn shared_sector_is_free_only_when_both_blocks_are_freed() {
        let mut m = empty(8);
        let run = m.alloc_run(1, 1).unwrap();
        assert_eq!(run, Run { first: 0, sectors: 1 });
        m.claim(0, 100).unwrap();
        m.claim(100, 200).unwrap();
        m.free(0, 100);
        m.release_deferred();
        assert_eq!(m.free_bytes(), 7 * 512);
        m.free(100, 200);
        assert_eq!(m.free_bytes(), 7 * 512, "freed sector waits for the txg to commit");
        m.release_deferred();
        assert_eq!(m.free_bytes(), 8 * 512);
    }

    #[test]
    fn full_map_returns_none_and_freed_space_is_reused_after_release() {
        let mut m = empty(4);
        let r = m.alloc_run(4, 4).unwrap();
        m.claim(0, 4 * 512).unwrap();
        assert!(m.alloc_run(1, 1).is_none());
        m.free(512, 512);
        assert!(m.alloc_run(1, 1).is_none(), "deferred sectors are not handed out");
        m.release_deferred();
        assert_eq!(m.alloc_run(1, 4), Some(Run { first: 1, sectors: 1 }));
        let _ = r;
    }

    #[test]
    #[should_panic(expected = "space freed twice")]
    fn freeing_bytes_that_are_not_live_stops() {
        let mut m = empty(8);
        m.claim(0, 100).unwrap();
        m.free(512, 100);
    }

    #[test]
    #[should_panic(expected = "space freed twice")]
    fn freeing_a_block_twice_in_one_txg_stops_even_in_a_shared_sector() {
        let mut m = empty(8);
        m.claim(0, 100).unwrap();
        m.claim(100, 200).unwrap();
        m.free(0, 100);
        // The sector still counts 200 live bytes, so the counts alone would not notice;
        // the block at 100 would lose its space to this second free.
        m.free(0, 100);
    }

    #[test]
    #[should_panic(expected = "space freed twice")]
    fn freeing_part_of_a_range_freed_in_this_txg_stops() {
        let mut m = empty(8);
        m.claim(0, 2048).unwrap();
        m.free(0, 1024);
        m.free(512, 1024);
    }

    #[test]
    fn after_release_the_same_bytes_may_be_claimed_and_freed_again() {
        let mut m = empty(8);
        let run = m.alloc_run(1, 1).unwrap();
        m.claim(run.first * 512, 100).unwrap();
        m.free(run.first * 512, 100);
        m.release_deferred();
        let run = m.alloc_run(1, 1).unwrap();
        assert_eq!(run.first, 0, "the freed sector is handed out again");
        m.claim(run.first * 512, 100).unwrap();
        m.free(run.first * 512, 100);
        m.release_deferred();
        assert_eq!(m.free_bytes(), 8 * 512);
    }

    #[test]
    fn a_claim_of_bytes_already_claimed_is_refused_and_changes_nothing() {
        let mut m = empty(8);
        m.claim(0, 1000).unwrap();
        // Sector 1 holds 488 bytes: 300 more cannot fit (24 could: the counts see only
        // what overflows a sector).
        assert_eq!(m.claim(900, 300), Err(Overlap { offset: 900, len: 300 }));
        assert_eq!(m.occupancy(), (2, 1000), "the refused claim left no bytes behind");
        m.claim(1000, 300).unwrap();
        assert_eq!(m.occupancy(), (3, 1300));
    }

    proptest::proptest! {
        #[test]
        fn allocation_never_overlaps_live_bytes(ops in proptest::collection::vec((1u64..6, 0usize..3), 1..60)) {
            let mut m = empty(64);
            let mut blocks: Vec<(u64, u64)> = Vec::new();
            for (want, action) in ops {
                if action == 0 && !blocks.is_empty() {
                    let (off, len) = blocks.remove(0);
                    m.free(off, len);
                    m.release_deferred();
                } else if let Some(run) = m.alloc_run(1, want) {
                    let off = run.first * 512;
                    let len = run.sectors * 512 - 7;
                    for &(o, l) in &blocks {
                        proptest::prop_assert!(off + len <= o || o + l <= off);
                    }
                    m.claim(off, len).unwrap();
                    blocks.push((off, len));
                }
            }
            let live: u64 = blocks.iter().map(|b| b.1).sum();
            proptest::prop_assert!(m.allocated_bytes() >= live);
        }
    }
}

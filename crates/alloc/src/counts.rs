//! counts — the live-byte count of every sector, in memory that follows the layout, not
//! the vdev's size.
//!
//! Owns: one count per sector (0 ..= the sector size), stored by chunks of `CHUNK`
//! sectors. Blocks are packed back to back, so nearly every sector is either empty or
//! full; only the edges of runs and of freed blocks are partly live. A chunk that is all
//! empty or all full costs nothing beyond its slot; a mixed chunk keeps a bitmap of its
//! full sectors and a sorted list of its partly live ones, and turns into a dense array
//! once that list would outgrow it. A flat array of `u32` cost 1 MiB per GiB of pool
//! (4 KiB sectors) whatever was stored; this costs 1 KiB per GiB for the slots plus ~0.5
//! KiB per mixed chunk (16 MiB of 4 KiB sectors), and never more than 8.5 KiB per chunk.
//!
//! Promises: `get` returns what the last `set` stored, for every sector.
//!
//! Must never: hold a count above the sector size (`set` refuses it: the caller's
//! overlap); the caller decides what an overlap means.

/// Sectors per chunk: 16 MiB of 4 KiB sectors.
const CHUNK: u64 = 4096;
const WORDS: usize = (CHUNK / 64) as usize;
/// Above this many partly live sectors a chunk's list becomes a dense array (the list
/// costs 4 bytes a sector, the array 2 bytes for each of `CHUNK`); back under a quarter
/// of it, a list again.
const DENSE_AT: usize = (CHUNK / 2) as usize;
const SPARSE_AT: usize = DENSE_AT / 4;

pub(crate) struct SectorCounts {
    sector_size: u32,
    sectors: u64,
    chunks: Vec<Chunk>,
}

enum Chunk {
    Empty,
    Full,
    Mixed(Box<Mixed>),
}

struct Mixed {
    /// Bit set: the sector holds `sector_size` live bytes.
    full: [u64; WORDS],
    /// Bits set in `full`.
    n_full: u64,
    partial: Partial,
}

/// Counts of the sectors that are neither empty nor full (strictly between).
enum Partial {
    /// (sector within the chunk, count), sorted by sector.
    List(Vec<(u16, u16)>),
    /// Count per sector (0 where empty or full); `n` of them are partly live.
    Dense { counts: Box<[u16; CHUNK as usize]>, n: usize },
}

impl SectorCounts {
    pub(crate) fn new(sectors: u64, sector_size: u32) -> SectorCounts {
        // A partial count is below the sector size, so 64 KiB sectors still fit a u16.
        assert!(sector_size.is_power_of_two() && sector_size <= 1 << 16, "sector size {sector_size}");
        let chunks = (0..sectors.div_ceil(CHUNK)).map(|_| Chunk::Empty).collect();
        SectorCounts { sector_size, sectors, chunks }
    }

    pub(crate) fn len(&self) -> u64 {
        self.sectors
    }

    pub(crate) fn get(&self, sector: u64) -> u32 {
        let (c, i) = split(sector);
        match &self.chunks[c] {
            Chunk::Empty => 0,
            Chunk::Full => self.sector_size,
            Chunk::Mixed(m) if m.is_full(i) => self.sector_size,
            Chunk::Mixed(m) => m.partial.get(i) as u32,
        }
    }

    /// Stores `count` for `sector`; `Err` (nothing changed) if it exceeds the sector size.
    pub(crate) fn set(&mut self, sector: u64, count: u32) -> Result<(), Overfull> {
        if count > self.sector_size {
            return Err(Overfull);
        }
        assert!(sector < self.sectors, "sector {sector} beyond the map's {}", self.sectors);
        let (c, i) = split(sector);
        let size = self.sector_size;
        let chunk = &mut self.chunks[c];
        let uniform = match chunk {
            Chunk::Empty if count == 0 => return Ok(()),
            Chunk::Full if count == size => return Ok(()),
            Chunk::Empty => Some(Mixed::all(false, chunk_len(self.sectors, c))),
            Chunk::Full => Some(Mixed::all(true, chunk_len(self.sectors, c))),
            Chunk::Mixed(_) => None,
        };
        if let Some(m) = uniform {
            *chunk = Chunk::Mixed(Box::new(m));
        }
        let Chunk::Mixed(m) = chunk else { unreachable!("made mixed above") };
        m.set(i, count, size);
        if let Some(whole) = m.uniform(chunk_len(self.sectors, c)) {
            *chunk = whole;
        }
        Ok(())
    }

    /// Calls `f(first, len)` for every maximal run of empty sectors, in order.
    pub(crate) fn for_each_empty_run(&self, mut f: impl FnMut(u64, u64)) {
        let mut open: Option<u64> = None;
        let mut close = |open: &mut Option<u64>, at: u64| {
            if let Some(start) = open.take() {
                f(start, at - start);
            }
        };
        for (c, chunk) in self.chunks.iter().enumerate() {
            let base = c as u64 * CHUNK;
            let len = chunk_len(self.sectors, c);
            match chunk {
                Chunk::Empty => {
                    open.get_or_insert(base);
                }
                Chunk::Full => close(&mut open, base),
                Chunk::Mixed(m) => {
                    for i in 0..len {
                        let empty = !m.is_full(i as usize) && m.partial.get(i as usize) == 0;
                        if empty {
                            open.get_or_insert(base + i);
                        } else {
                            close(&mut open, base + i);
                        }
                    }
                }
            }
        }
        close(&mut open, self.sectors);
    }

    /// (sectors holding any live byte, live bytes).
    pub(crate) fn occupancy(&self) -> (u64, u64) {
        let size = self.sector_size as u64;
        let mut sectors = 0;
        let mut bytes = 0;
        for (c, chunk) in self.chunks.iter().enumerate() {
            match chunk {
                Chunk::Empty => {}
                Chunk::Full => {
                    sectors += chunk_len(self.sectors, c);
                    bytes += chunk_len(self.sectors, c) * size;
                }
                Chunk::Mixed(m) => {
                    let (n, b) = m.partial.totals();
                    sectors += m.n_full + n;
                    bytes += m.n_full * size + b;
                }
            }
        }
        (sectors, bytes)
    }

    /// Heap bytes this map holds (its slots and its mixed chunks).
    pub(crate) fn heap_bytes(&self) -> u64 {
        let slots = self.chunks.capacity() * std::mem::size_of::<Chunk>();
        let mixed: usize = self
            .chunks
            .iter()
            .map(|c| match c {
                Chunk::Mixed(m) => std::mem::size_of::<Mixed>() + m.partial.heap_bytes(),
                _ => 0,
            })
            .sum();
        (slots + mixed) as u64
    }
}

/// A count above the sector size: two blocks claim the same bytes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Overfull;

fn split(sector: u64) -> (usize, usize) {
    ((sector / CHUNK) as usize, (sector % CHUNK) as usize)
}

/// Sectors in chunk `c` (the last one may be short).
fn chunk_len(sectors: u64, c: usize) -> u64 {
    (sectors - c as u64 * CHUNK).min(CHUNK)
}

impl Mixed {
    /// A chunk's sectors all empty or all full, as a mixed chunk about to change.
    fn all(full: bool, len: u64) -> Mixed {
        let mut m = Mixed { full: [0; WORDS], n_full: 0, partial: Partial::List(Vec::new()) };
        if full {
            for i in 0..len as usize {
                m.full[i / 64] |= 1 << (i % 64);
            }
            m.n_full = len;
        }
        m
    }

    fn is_full(&self, i: usize) -> bool {
        self.full[i / 64] & (1 << (i % 64)) != 0
    }

    fn set(&mut self, i: usize, count: u32, size: u32) {
        let bit = 1u64 << (i % 64);
        let was_full = self.is_full(i);
        if count == size {
            self.full[i / 64] |= bit;
            self.n_full += u64::from(!was_full);
            self.partial.set(i, 0);
        } else {
            self.full[i / 64] &= !bit;
            self.n_full -= u64::from(was_full);
            self.partial.set(i, count as u16);
        }
    }

    /// `Empty` or `Full` if every one of the chunk's `len` sectors is.
    fn uniform(&self, len: u64) -> Option<Chunk> {
        if self.partial.count() != 0 {
            return None;
        }
        match self.n_full {
            0 => Some(Chunk::Empty),
            n if n == len => Some(Chunk::Full),
            _ => None,
        }
    }
}

impl Partial {
    fn get(&self, i: usize) -> u16 {
        match self {
            Partial::List(list) => match list.binary_search_by_key(&(i as u16), |e| e.0) {
                Ok(at) => list[at].1,
                Err(_) => 0,
            },
            Partial::Dense { counts, .. } => counts[i],
        }
    }

    /// Stores a partial count (0: the sector is empty or full, not partial).
    fn set(&mut self, i: usize, count: u16) {
        match self {
            Partial::List(list) => {
                match (list.binary_search_by_key(&(i as u16), |e| e.0), count) {
                    (Ok(at), 0) => {
                        list.remove(at);
                    }
                    (Ok(at), c) => list[at].1 = c,
                    (Err(_), 0) => {}
                    (Err(at), c) => list.insert(at, (i as u16, c)),
                }
                if list.len() > DENSE_AT {
                    *self = Partial::dense_from(list);
                }
            }
            Partial::Dense { counts, n } => {
                match (counts[i] != 0, count != 0) {
                    (false, true) => *n += 1,
                    (true, false) => *n -= 1,
                    _ => {}
                }
                counts[i] = count;
                if *n < SPARSE_AT {
                    *self = Partial::list_from(counts);
                }
            }
        }
    }

    fn dense_from(list: &[(u16, u16)]) -> Partial {
        let mut counts = Box::new([0u16; CHUNK as usize]);
        for &(i, c) in list {
            counts[i as usize] = c;
        }
        Partial::Dense { counts, n: list.len() }
    }

    fn list_from(counts: &[u16; CHUNK as usize]) -> Partial {
        let list = counts.iter().enumerate().filter(|(_, &c)| c != 0).map(|(i, &c)| (i as u16, c)).collect();
        Partial::List(list)
    }

    /// Partly live sectors.
    fn count(&self) -> usize {
        match self {
            Partial::List(list) => list.len(),
            Partial::Dense { n, .. } => *n,
        }
    }

    /// (partly live sectors, their live bytes).
    fn totals(&self) -> (u64, u64) {
        let sum = |it: &mut dyn Iterator<Item = u16>| it.fold((0, 0), |(n, b), c| (n + 1, b + c as u64));
        match self {
            Partial::List(list) => sum(&mut list.iter().map(|e| e.1)),
            Partial::Dense { counts, .. } => sum(&mut counts.iter().copied().filter(|&c| c != 0)),
        }
    }

    fn heap_bytes(&self) -> usize {
        match self {
            Partial::List(list) => list.capacity() * std::mem::size_of::<(u16, u16)>(),
            Partial::Dense { .. } => std::mem::size_of::<[u16; CHUNK as usize]>(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model: one plain count per sector.
    fn check(counts: &SectorCounts, model: &[u32]) {
        for (s, &want) in model.iter().enumerate() {
            assert_eq!(counts.get(s as u64), want, "sector {s}");
        }
        let mut empty = Vec::new();
        counts.for_each_empty_run(|first, len| empty.extend(first..first + len));
        let want: Vec<u64> = (0..model.len() as u64).filter(|&s| model[s as usize] == 0).collect();
        assert_eq!(empty, want, "empty runs");
        let live = model.iter().filter(|&&c| c > 0).count() as u64;
        let bytes = model.iter().map(|&c| c as u64).sum();
        assert_eq!(counts.occupancy(), (live, bytes));
    }

    #[test]
    fn a_packed_area_costs_nothing_beyond_its_slots() {
        // 64 GiB of 4 KiB sectors, filled by blocks of 10,000 bytes packed back to back.
        let sectors = 16 << 20;
        let mut c = SectorCounts::new(sectors, 4096);
        let total = sectors * 4096;
        let mut at = 0;
        while at + 10_000 <= total {
            let mut pos = at;
            while pos < at + 10_000 {
                let s = pos / 4096;
                let share = ((s + 1) * 4096).min(at + 10_000) - pos;
                let now = c.get(s);
                c.set(s, now + share as u32).unwrap();
                pos += share;
            }
            at += 10_000;
        }
        assert!(c.heap_bytes() < 100 << 10, "{} bytes for 64 GiB", c.heap_bytes());
        assert_eq!(c.occupancy().1, at);
    }

    #[test]
    fn the_worst_layout_costs_at_most_a_dense_array_per_chunk() {
        let sectors = 4 * CHUNK + 100;
        let mut c = SectorCounts::new(sectors, 4096);
        let mut model = vec![0u32; sectors as usize];
        for s in (0..sectors).step_by(2) {
            c.set(s, 100).unwrap();
            model[s as usize] = 100;
        }
        check(&c, &model);
        let dense = std::mem::size_of::<Mixed>() + 2 * CHUNK as usize;
        assert!(c.heap_bytes() as usize <= 5 * (dense + 64), "{}", c.heap_bytes());
        for s in (0..sectors).step_by(2) {
            c.set(s, 0).unwrap();
            model[s as usize] = 0;
        }
        check(&c, &model);
        assert!(c.heap_bytes() < 1024, "an emptied map gives its chunks back: {}", c.heap_bytes());
    }

    #[test]
    fn a_count_over_the_sector_size_is_refused_and_changes_nothing() {
        let mut c = SectorCounts::new(10, 512);
        c.set(3, 500).unwrap();
        assert_eq!(c.set(3, 513), Err(Overfull));
        assert_eq!(c.get(3), 500);
    }

    #[test]
    fn sixty_four_kib_sectors_hold_partial_counts() {
        let mut c = SectorCounts::new(3, 1 << 16);
        c.set(1, 65_535).unwrap();
        c.set(2, 1 << 16).unwrap();
        check(&c, &[0, 65_535, 1 << 16]);
    }

    proptest::proptest! {
        #[test]
        fn counts_match_a_plain_array(
            sectors in 1u64..3 * CHUNK,
            ops in proptest::collection::vec((0u64..3 * CHUNK, 0u32..4, 0u64..3000), 1..400),
        ) {
            let size = 512;
            let mut c = SectorCounts::new(sectors, size);
            let mut model = vec![0u32; sectors as usize];
            for (at, kind, span) in ops {
                let first = at % sectors;
                // Runs of sectors set alike, so chunks go full, empty, dense and back.
                let value = match kind { 0 => 0, 1 => size, 2 => 1 + (at as u32 % (size - 1)), _ => size / 2 };
                for s in first..(first + span).min(sectors) {
                    c.set(s, value).unwrap();
                    model[s as usize] = value;
                }
            }
            check(&c, &model);
        }
    }
}

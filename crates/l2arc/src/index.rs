//! The in-RAM index of one cache device: which pool block is where in the ring.
//!
//! Owns: a table from block address (vdev, offset) to a packed word — the low bits of
//! the block's birth txg and the block's ring position in 512-byte units — in shards,
//! each under its own lock. Each shard is an open-addressing table of 16-byte slots
//! (Robin Hood linear probing, backward-shift deletion: no tombstones, no control bytes)
//! whose capacity steps through the allocator's size classes (4, 5, 6, 7 × 2^k slots), so
//! it grows by 1/7 to 1/4 at a time, is never less than 7/10 full after growing and is
//! shrunk when under 3/8 full: the RAM per entry stays between 18 and 43 bytes whatever
//! the fill or the frees (measured by `tests/hdr_ram.rs` from jemalloc's own figures).
//!
//! Promises: `header_bytes` is what the tables hold (a slot array's size is a jemalloc
//! size class, so no hidden slack); a lookup names a block only if address and birth
//! (its low 24 bits) match. A false match of the low bits is possible in principle and
//! harmless: every cache read is verified against the pool's block pointer before use.
//!
//! Must never: hold a shard's lock across device I/O, allocate on a lookup, or grow
//! without the ring's bound (`retain_from` drops what the ring has overwritten).
use parking_lot::Mutex;
use tarn_arc::BlockKey;

/// Many shards keep each one small: a shard's resize (a rehash under its lock) then
/// stalls only the lookups of 1/1024 of the blocks, for about a millisecond even with
/// 10^8 blocks indexed. An empty shard holds no table (32 bytes).
const SHARDS: usize = 1024;
const BIRTH_BITS: u32 = 24;
const POS_BITS: u32 = 40;
/// The largest ring position (in 512-byte units) an entry can name: 512 TiB written since
/// the device was initialised; the ring starts afresh before it.
pub const POS_LIMIT: u64 = 1 << POS_BITS;
/// Offsets at or past this cannot be packed with their vdev; such blocks are not cached.
pub const OFFSET_LIMIT: u64 = 1 << 48;
/// The address an empty slot holds (vdev 0xffff, offset 2^48 - 1: never a block's).
const EMPTY: u64 = u64::MAX;
/// A table grows before an insert would fill it past 7/8, and shrinks when a removal
/// leaves it under 3/8 full, to a size about 3/4 full.
const GROW_AT: (usize, usize) = (7, 8);
const SHRINK_UNDER: (usize, usize) = (3, 8);
const SHRINK_TO: (usize, usize) = (3, 4);
/// The smallest table.
const MIN_SLOTS: usize = 4;

/// One entry: a block address and its packed (birth, position) word.
#[derive(Clone, Copy)]
struct Slot {
    addr: u64,
    word: u64,
}

const VACANT: Slot = Slot { addr: EMPTY, word: 0 };

/// The block's address as one word (vdev in the top 16 bits); `None` past `OFFSET_LIMIT`.
pub fn addr_of(key: &BlockKey) -> Option<u64> {
    let addr = (key.vdev as u64) << 48 | key.offset;
    (key.offset < OFFSET_LIMIT && addr != EMPTY).then_some(addr)
}

fn pack(birth: u64, pos: u64) -> u64 {
    debug_assert!(pos < POS_LIMIT);
    (birth & ((1 << BIRTH_BITS) - 1)) << POS_BITS | pos
}

fn pos_of(word: u64) -> u64 {
    word & (POS_LIMIT - 1)
}

fn birth_matches(word: u64, birth: u64) -> bool {
    word >> POS_BITS == birth & ((1 << BIRTH_BITS) - 1)
}

/// splitmix64's finaliser: its low bits choose the shard, its high bits the slot.
fn hash(addr: u64) -> u64 {
    let mut z = addr;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The smallest capacity of the form {4, 5, 6, 7} × 2^k at least `n`: 16 bytes times it
/// is one of jemalloc's size classes, so the allocator adds nothing to the table.
fn slots_for(n: usize) -> usize {
    let n = n.max(MIN_SLOTS);
    let quarter = (n.next_power_of_two() / 2 / 4).max(1);
    (4..=8).map(|m| m * quarter).find(|&c| c >= n).expect("8 quarters of the next power of two cover n")
}

/// One shard: an open-addressing table with Robin Hood probing.
#[derive(Default)]
struct Table {
    slots: Box<[Slot]>,
    len: usize,
}

impl Table {
    /// The slot a hash starts probing at (the high bits of the hash, scaled).
    fn home(&self, h: u64) -> usize {
        ((h as u128 * self.slots.len() as u128) >> 64) as usize
    }

    fn next(&self, i: usize) -> usize {
        if i + 1 == self.slots.len() {
            0
        } else {
            i + 1
        }
    }

    /// How far the entry in slot `i` sits from its home.
    fn distance(&self, i: usize) -> usize {
        let home = self.home(hash(self.slots[i].addr));
        (i + self.slots.len() - home) % self.slots.len()
    }

    /// The slot holding `addr`, if any. Stops at the first entry nearer its home than
    /// `addr` would be (Robin Hood: `addr` would have displaced it).
    fn find(&self, addr: u64) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let mut i = self.home(hash(addr));
        for dist in 0..self.slots.len() {
            let s = self.slots[i];
            if s.addr == addr {
                return Some(i);
            }
            if s.addr == EMPTY || self.distance(i) < dist {
                return None;
            }
            i = self.next(i);
        }
        None
    }

    /// Places an entry known not to be in the table (room is made by the caller).
    fn place(&mut self, mut cur: Slot) {
        let mut i = self.home(hash(cur.addr));
        let mut dist = 0;
        loop {
            if self.slots[i].addr == EMPTY {
                self.slots[i] = cur;
                self.len += 1;
                return;
            }
            let theirs = self.distance(i);
            if theirs < dist {
                std::mem::swap(&mut self.slots[i], &mut cur);
                dist = theirs;
            }
            i = self.next(i);
            dist += 1;
        }
    }

    fn insert(&mut self, addr: u64, word: u64) {
        if let Some(i) = self.find(addr) {
            self.slots[i].word = word;
            return;
        }
        if (self.len + 1) * GROW_AT.1 > self.slots.len() * GROW_AT.0 {
            self.resize(slots_for(self.slots.len() + 1));
        }
        self.place(Slot { addr, word });
    }

    /// Empties slot `i`, shifting the entries after it back towards their homes.
    fn take(&mut self, mut i: usize) -> Slot {
        let taken = self.slots[i];
        loop {
            let j = self.next(i);
            if self.slots[j].addr == EMPTY || self.distance(j) == 0 {
                self.slots[i] = VACANT;
                break;
            }
            self.slots[i] = self.slots[j];
            i = j;
        }
        self.len -= 1;
        taken
    }

    /// Shrinks the table if removals left it under `SHRINK_UNDER` full: header RAM is
    /// given back as entries go, not only when the cache is emptied.
    fn shrink_if_sparse(&mut self) {
        let cap = self.slots.len();
        if cap > 0 && self.len == 0 {
            *self = Table::default();
        } else if cap > MIN_SLOTS && self.len * SHRINK_UNDER.1 < cap * SHRINK_UNDER.0 {
            self.resize(slots_for(self.len * SHRINK_TO.1 / SHRINK_TO.0 + 1));
        }
    }

    fn resize(&mut self, slots: usize) {
        assert!(slots * GROW_AT.0 >= self.len * GROW_AT.1, "a table resized below its entries");
        let old = std::mem::replace(&mut self.slots, vec![VACANT; slots].into_boxed_slice());
        self.len = 0;
        for s in old.iter().filter(|s| s.addr != EMPTY) {
            self.place(*s);
        }
    }

    /// Keeps only the entries `keep` accepts. A removal shifts later entries back one
    /// slot, so slot `i` is looked at again before moving on; an entry is never moved
    /// past the scan unseen (it moves back only into the slot being looked at, or into
    /// slots the scan reaches later).
    fn retain(&mut self, keep: impl Fn(u64) -> bool) {
        let mut i = 0;
        while i < self.slots.len() {
            let s = self.slots[i];
            if s.addr != EMPTY && !keep(s.word) {
                self.take(i);
            } else {
                i += 1;
            }
        }
        self.shrink_if_sparse();
    }

    fn bytes(&self) -> u64 {
        (self.slots.len() * std::mem::size_of::<Slot>()) as u64
    }
}

pub struct Index {
    shards: Box<[Mutex<Table>]>,
}

impl Default for Index {
    fn default() -> Self {
        Index { shards: (0..SHARDS).map(|_| Mutex::new(Table::default())).collect() }
    }
}

impl Index {
    fn shard(&self, addr: u64) -> &Mutex<Table> {
        &self.shards[hash(addr) as usize % SHARDS]
    }

    /// Records that `key`'s block is at ring position `pos` (512-byte units), replacing
    /// any older version at that address.
    pub fn insert(&self, key: &BlockKey, pos: u64) {
        let Some(addr) = addr_of(key) else { return };
        if pos >= POS_LIMIT {
            return;
        }
        self.shard(addr).lock().insert(addr, pack(key.birth, pos));
    }

    /// As `insert`, unless some version of a block at `key`'s address is indexed already
    /// (a rebuild walking back meets older chunks after newer ones).
    pub fn insert_if_vacant(&self, key: &BlockKey, pos: u64) -> bool {
        let Some(addr) = addr_of(key) else { return false };
        if pos >= POS_LIMIT {
            return false;
        }
        let mut shard = self.shard(addr).lock();
        if shard.find(addr).is_some() {
            return false;
        }
        shard.insert(addr, pack(key.birth, pos));
        true
    }

    /// True if some version of a block at `key`'s address is indexed.
    pub fn holds_addr(&self, key: &BlockKey) -> bool {
        addr_of(key).is_some_and(|addr| self.shard(addr).lock().find(addr).is_some())
    }

    /// The ring position (512-byte units) of `key`'s block, if indexed.
    pub fn get(&self, key: &BlockKey) -> Option<u64> {
        let addr = addr_of(key)?;
        let shard = self.shard(addr).lock();
        let word = shard.slots[shard.find(addr)?].word;
        birth_matches(word, key.birth).then_some(pos_of(word))
    }

    /// Forgets `key`'s block (freed in the pool, or found bad); returns where it was.
    pub fn remove(&self, key: &BlockKey) -> Option<u64> {
        let addr = addr_of(key)?;
        let mut shard = self.shard(addr).lock();
        let i = shard.find(addr)?;
        if !birth_matches(shard.slots[i].word, key.birth) {
            return None;
        }
        let word = shard.take(i).word;
        shard.shrink_if_sparse();
        Some(pos_of(word))
    }

    /// Forgets the block of every item (the pool's frees of one txg), taking each
    /// shard's lock once; calls `gone` with each item whose block was indexed and the ring
    /// position it had. `items` is reordered (by shard).
    pub fn remove_batch<T>(&self, items: &mut [T], key_of: impl Fn(&T) -> BlockKey, mut gone: impl FnMut(&T, u64)) {
        // Blocks the index cannot name sort last, as shard `SHARDS`, and are passed over.
        let shard_of = |t: &T| addr_of(&key_of(t)).map_or(SHARDS, |a| hash(a) as usize % SHARDS);
        items.sort_unstable_by_key(shard_of);
        for group in items.chunk_by(|a, b| shard_of(a) == shard_of(b)) {
            let Some(shard) = self.shards.get(shard_of(&group[0])) else { continue };
            let mut shard = shard.lock();
            for item in group {
                let key = key_of(item);
                let Some(i) = addr_of(&key).and_then(|a| shard.find(a)) else { continue };
                if birth_matches(shard.slots[i].word, key.birth) {
                    gone(item, pos_of(shard.take(i).word));
                }
            }
            shard.shrink_if_sparse();
        }
    }

    /// Drops every entry positioned before `floor` (512-byte units): the ring has
    /// overwritten them. One shard at a time, so lookups wait at most one shard's sweep.
    pub fn retain_from(&self, floor: u64) {
        for shard in self.shards.iter() {
            shard.lock().retain(|w| pos_of(w) >= floor);
        }
    }

    pub fn clear(&self) {
        for shard in self.shards.iter() {
            *shard.lock() = Table::default();
        }
    }

    /// Entries indexed (some may name blocks the ring has overwritten since the last
    /// sweep).
    pub fn entries(&self) -> u64 {
        self.shards.iter().map(|s| s.lock().len as u64).sum()
    }

    /// RAM the index holds: every shard's slot array (a jemalloc size class: see
    /// `slots_for`) and the shards themselves.
    pub fn header_bytes(&self) -> u64 {
        let tables: u64 = self.shards.iter().map(|s| s.lock().bytes()).sum();
        tables + (SHARDS * std::mem::size_of::<Mutex<Table>>()) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn key(n: u64) -> BlockKey {
        BlockKey { vdev: (n % 3) as u16, offset: n * 4096, birth: 7 + n % 100 }
    }

    #[test]
    fn capacities_are_size_classes_and_cover_what_is_asked() {
        let classes: Vec<usize> = (0..40).map(slots_for).collect();
        for n in 0..5000 {
            let c = slots_for(n);
            assert!(c >= n.max(MIN_SLOTS), "{n} -> {c}");
            let top = c >> (usize::BITS - 1 - c.leading_zeros()).saturating_sub(2);
            assert!((4..=7).contains(&top), "{c} is not 4..7 × 2^k");
        }
        assert_eq!(&classes[..10], &[4, 4, 4, 4, 4, 5, 6, 7, 8, 10]);
    }

    #[test]
    fn a_table_agrees_with_a_map_through_inserts_removals_sweeps_and_shrinks() {
        let mut t = Table::default();
        let mut model: HashMap<u64, u64> = HashMap::new();
        let mut rng = 0x1234_5678_u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for step in 0..200_000u64 {
            let addr = next() % 3000;
            match next() % 10 {
                0..=5 => {
                    t.insert(addr, step);
                    model.insert(addr, step);
                }
                6..=8 => {
                    let got = t.find(addr).map(|i| t.take(i).word);
                    t.shrink_if_sparse();
                    assert_eq!(got, model.remove(&addr), "remove {addr} at {step}");
                }
                _ if step % 5000 == 9 => {
                    let floor = step.saturating_sub(4000);
                    t.retain(|w| w >= floor);
                    model.retain(|_, w| *w >= floor);
                }
                _ => {}
            }
            assert_eq!(t.len, model.len());
            if step % 997 == 0 {
                for a in 0..3000 {
                    assert_eq!(t.find(a).map(|i| t.slots[i].word), model.get(&a).copied(), "{a} at {step}");
                }
                let cap = t.slots.len();
                assert!(cap <= MIN_SLOTS || t.len * 8 >= cap * 3, "{} in {cap} slots", t.len);
            }
        }
    }

    #[test]
    fn an_index_names_a_block_only_with_its_birth_and_gives_its_tables_back() {
        let ix = Index::default();
        let keys: Vec<BlockKey> = (0..100_000).map(key).collect();
        for (n, k) in keys.iter().enumerate() {
            ix.insert(k, n as u64);
        }
        assert_eq!(ix.entries(), 100_000);
        let full = ix.header_bytes();
        assert!(full < 100_000 * 24, "{full} bytes for 100000 entries");
        assert_eq!(ix.get(&keys[5]), Some(5));
        assert_eq!(ix.get(&BlockKey { birth: keys[5].birth + 1, ..keys[5] }), None);
        assert!(ix.holds_addr(&BlockKey { birth: keys[5].birth + 1, ..keys[5] }));
        assert!(!ix.insert_if_vacant(&keys[5], 1));
        let mut batch: Vec<BlockKey> = keys[..90_000].to_vec();
        let mut forgotten = 0;
        ix.remove_batch(&mut batch, |k| *k, |_, _| forgotten += 1);
        assert_eq!((forgotten, ix.entries()), (90_000, 10_000));
        assert!(ix.header_bytes() < full / 4, "{} bytes after 9 in 10 were freed", ix.header_bytes());
        for (n, k) in keys.iter().enumerate() {
            assert_eq!(ix.get(k), (n >= 90_000).then_some(n as u64), "{n}");
        }
        ix.retain_from(95_000);
        assert_eq!(ix.entries(), 5_000);
        ix.clear();
        assert_eq!(ix.header_bytes(), (SHARDS * std::mem::size_of::<Mutex<Table>>()) as u64);
    }
}

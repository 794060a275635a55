//! The in-RAM index of one cache device: which pool block is where in the ring.
//!
//! Owns: a table from block address (vdev, offset) to a packed word — the low bits of
//! the block's birth txg and the block's ring position in 512-byte units — in shards,
//! each under its own lock.
//!
//! Promises: 16 bytes per entry plus the table's slack (the figure `header_bytes`
//! reports, measured by the `headers_per_block` test: at most 48 bytes per block); a
//! lookup names a block only if address and birth (its low 24 bits) match. A false match
//! of the low bits is possible in principle and harmless: every cache read is verified
//! against the pool's block pointer before use.
//!
//! Must never: hold a shard's lock across device I/O, or grow without the ring's bound
//! (`retain_from` drops what the ring has overwritten).
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use parking_lot::Mutex;
use tarn_arc::BlockKey;

const SHARDS: usize = 64;
const BIRTH_BITS: u32 = 24;
const POS_BITS: u32 = 40;
/// The largest ring position (in 512-byte units) an entry can name: 512 TiB written since
/// the device was initialised; the ring starts afresh before it.
pub const POS_LIMIT: u64 = 1 << POS_BITS;
/// Offsets at or past this cannot be packed with their vdev; such blocks are not cached.
pub const OFFSET_LIMIT: u64 = 1 << 48;

/// A multiply-shift hash: block addresses are already spread; SipHash would cost more
/// than the lookup.
#[derive(Default)]
pub struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (v ^ (v >> 29)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        self.0 ^= self.0 >> 32;
    }
}

type Table = HashMap<u64, u64, BuildHasherDefault<AddrHasher>>;

pub struct Index {
    shards: Vec<Mutex<Table>>,
}

/// The block's address as one word (vdev in the top 16 bits); `None` past `OFFSET_LIMIT`.
pub fn addr_of(key: &BlockKey) -> Option<u64> {
    (key.offset < OFFSET_LIMIT).then_some((key.vdev as u64) << 48 | key.offset)
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

impl Default for Index {
    fn default() -> Self {
        Index { shards: (0..SHARDS).map(|_| Mutex::new(Table::default())).collect() }
    }
}

impl Index {
    fn shard(&self, addr: u64) -> &Mutex<Table> {
        let h = (addr ^ (addr >> 17)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58;
        &self.shards[h as usize % SHARDS]
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

    /// The ring position (512-byte units) of `key`'s block, if indexed.
    pub fn get(&self, key: &BlockKey) -> Option<u64> {
        let addr = addr_of(key)?;
        let word = *self.shard(addr).lock().get(&addr)?;
        birth_matches(word, key.birth).then_some(pos_of(word))
    }

    /// Forgets `key`'s block (freed in the pool, or found bad); returns where it was.
    pub fn remove(&self, key: &BlockKey) -> Option<u64> {
        let addr = addr_of(key)?;
        let mut shard = self.shard(addr).lock();
        match shard.get(&addr) {
            Some(&w) if birth_matches(w, key.birth) => shard.remove(&addr).map(pos_of),
            _ => None,
        }
    }

    /// Drops every entry positioned before `floor` (512-byte units): the ring has
    /// overwritten them. One shard at a time, so lookups wait at most one shard's sweep.
    pub fn retain_from(&self, floor: u64) {
        for shard in &self.shards {
            shard.lock().retain(|_, w| pos_of(*w) >= floor);
        }
    }

    pub fn clear(&self) {
        for shard in &self.shards {
            *shard.lock() = Table::default();
        }
    }

    /// Entries indexed (some may name blocks the ring has overwritten since the last
    /// sweep).
    pub fn entries(&self) -> u64 {
        self.shards.iter().map(|s| s.lock().len() as u64).sum()
    }

    /// RAM the index holds: each shard's table as hashbrown allocates it (a power of two
    /// of buckets for its capacity, 16 bytes and one control byte each, a group of
    /// control bytes more), plus the shards themselves.
    pub fn header_bytes(&self) -> u64 {
        let table = |cap: usize| -> u64 {
            if cap == 0 {
                return 0;
            }
            let buckets = if cap < 8 { (cap + 1).next_power_of_two() } else { (cap * 8 / 7).next_power_of_two() };
            (buckets * 17 + 16) as u64
        };
        let shards: u64 = self.shards.iter().map(|s| table(s.lock().capacity())).sum();
        shards + (SHARDS * std::mem::size_of::<Mutex<Table>>()) as u64
    }
}

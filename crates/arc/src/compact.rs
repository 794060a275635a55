//! Giving back the room of tables that have emptied (issue #11).
//!
//! A Rust hash table, deque or vector never shrinks as entries leave, and a
//! `hashlink::LinkedHashMap` keeps every removed node on a free list for reuse: a table
//! that once held 200,000 files' entries holds their memory until it is dropped, outside
//! any budget, after the entries themselves were evicted. Every table whose length follows
//! the cache (or the files in flight) is compacted here once it is mostly empty.
//!
//! Owns: the rules of when a table is compacted ([`oversized`] as entries leave; any room
//! beyond `KEPT_ROOM` after a shrink of the budget, [`compact_tight`]) and compaction
//! itself.
//!
//! Promises: a compacted table keeps every entry and its order; as entries leave
//! ([`compact`]) a table is compacted only once its room is more than `SPARSE_FACTOR`
//! times its length (and more than `KEPT_ROOM` entries), so a table that shrinks and grows
//! by a little is never reallocated back and forth: the rehash costs O(len) and comes only
//! after at least 3 × len removals, amortized O(1) each. After a shrink of the budget
//! ([`compact_tight`], rare and asked for) any room beyond `KEPT_ROOM` is given back.
//!
//! Must never: be called on the 16 KiB read hit path or in an fsync's wait (its caller
//! picks a point where entries were just evicted or committed).
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hash};

use hashlink::LinkedHashMap;

/// A table is compacted once its room exceeds this many times its length…
const SPARSE_FACTOR: usize = 4;
/// …and this many entries (below it the room is not worth a rehash).
const KEPT_ROOM: usize = 1024;

/// Whether a table of `len` entries with room for `capacity` should give its room back.
pub fn oversized(len: usize, capacity: usize) -> bool {
    capacity > len.saturating_mul(SPARSE_FACTOR).saturating_add(KEPT_ROOM)
}

/// A table whose room can be given back.
pub trait Compact {
    fn len_and_room(&self) -> (usize, usize);
    /// Frees the room beyond the entries (and, for a linked map, its free nodes).
    fn shrink(&mut self);
}

/// Which rule a caller compacts its tables by ([`compact`] or [`compact_tight`]).
pub type Rule = fn(&mut dyn Compact) -> bool;

/// Gives back `table`'s room beyond its entries if that is more than `KEPT_ROOM`: after a
/// shrink of the budget (rare, never on an I/O path), where the amortized rule would leave
/// a table that lost two thirds of its entries at its old size, outside the new budget
/// (issue #17: 200,000 tiny files' blocks shrunk to 66,000 left 26 MiB of table room).
pub fn compact_tight<T: Compact + ?Sized>(table: &mut T) -> bool {
    let (len, room) = table.len_and_room();
    if room <= len.saturating_add(KEPT_ROOM) {
        return false;
    }
    table.shrink();
    true
}

/// Gives back `table`'s room if it is [`oversized`]; true if it did.
pub fn compact<T: Compact + ?Sized>(table: &mut T) -> bool {
    let (len, room) = table.len_and_room();
    if !oversized(len, room) {
        return false;
    }
    table.shrink();
    true
}

impl<K: Hash + Eq, V, S: BuildHasher> Compact for HashMap<K, V, S> {
    fn len_and_room(&self) -> (usize, usize) {
        (self.len(), self.capacity())
    }
    fn shrink(&mut self) {
        self.shrink_to_fit();
    }
}

/// Its room is its table's: the free list holds at most the nodes of entries that left
/// since the table was last this big, fewer than the table's room.
impl<K: Hash + Eq, V, S: BuildHasher> Compact for LinkedHashMap<K, V, S> {
    fn len_and_room(&self) -> (usize, usize) {
        (self.len(), self.capacity())
    }
    fn shrink(&mut self) {
        self.shrink_to_fit();
    }
}

impl<T> Compact for VecDeque<T> {
    fn len_and_room(&self) -> (usize, usize) {
        (self.len(), self.capacity())
    }
    fn shrink(&mut self) {
        self.shrink_to_fit();
    }
}

impl<T> Compact for Vec<T> {
    fn len_and_room(&self) -> (usize, usize) {
        (self.len(), self.capacity())
    }
    fn shrink(&mut self) {
        self.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_emptied_linked_map_gives_back_its_nodes_and_table() {
        let mut m: LinkedHashMap<u64, [u8; 64]> = LinkedHashMap::new();
        for i in 0..100_000 {
            m.insert(i, [0; 64]);
        }
        for i in 0..99_000 {
            m.remove(&i);
        }
        assert!(compact(&mut m));
        assert!(m.capacity() < 4096, "room {} after compaction", m.capacity());
        // Order and entries are kept.
        assert_eq!(m.keys().copied().collect::<Vec<_>>(), (99_000..100_000).collect::<Vec<_>>());
    }

    #[test]
    fn a_table_near_its_length_is_left_alone() {
        let mut m: HashMap<u64, u64> = (0..10_000).map(|i| (i, i)).collect();
        for i in 0..5_000 {
            m.remove(&i);
        }
        let room = m.capacity();
        assert!(!compact(&mut m));
        assert_eq!(m.capacity(), room);
        let mut small: VecDeque<u64> = VecDeque::with_capacity(1000);
        assert!(!compact(&mut small), "a small table is never worth a rehash");
    }
}

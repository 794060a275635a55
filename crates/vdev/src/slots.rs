//! An append-only list that grows while it is read: the pool's top-level vdevs (and the
//! pipeline's per-vdev space maps), which a live `pool add` extends.
//!
//! Owns: a fixed number of slots, each set once, and how many are set.
//! Promises: an element, once pushed, stays at its index, unmoved and readable through
//! `&self`, for the life of the list; a reader never takes a lock or allocates (an index
//! is two atomic loads); pushes are serialised.
//! Must never: move or drop an element before the list is dropped (readers hold plain
//! references into it).
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use parking_lot::Mutex;

/// Most top-level vdevs a pool can have (data, log and the holes removed logs leave).
pub const MAX_TOPS: usize = 256;

pub struct Slots<T> {
    slots: Box<[OnceLock<T>]>,
    len: AtomicUsize,
    push: Mutex<()>,
}

impl<T> Slots<T> {
    /// A list of `items` with room for `MAX_TOPS` in all.
    pub fn new(items: Vec<T>) -> Slots<T> {
        assert!(items.len() <= MAX_TOPS, "a pool has at most {MAX_TOPS} top-level vdevs");
        let slots: Box<[OnceLock<T>]> = (0..MAX_TOPS).map(|_| OnceLock::new()).collect();
        let len = items.len();
        for (slot, item) in slots.iter().zip(items) {
            assert!(slot.set(item).is_ok(), "a fresh slot is empty");
        }
        Slots { slots, len: AtomicUsize::new(len), push: Mutex::new(()) }
    }

    pub fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, index: usize) -> Option<&T> {
        if index < self.len() {
            self.slots[index].get()
        } else {
            None
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.slots[..self.len()].iter().filter_map(OnceLock::get)
    }

    /// Appends `item`; its index, or the item back when the list is full.
    pub fn push(&self, item: T) -> Result<usize, T> {
        let _one_at_a_time = self.push.lock();
        let index = self.len.load(Ordering::Acquire);
        if index == self.slots.len() {
            return Err(item);
        }
        self.slots[index].set(item)?;
        // Published only once set: a reader that sees the length finds the element.
        self.len.store(index + 1, Ordering::Release);
        Ok(index)
    }
}

impl<T> std::ops::Index<usize> for Slots<T> {
    type Output = T;
    fn index(&self, index: usize) -> &T {
        match self.get(index) {
            Some(item) => item,
            None => panic!("index {index} past the {} top-level vdevs", self.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pushed_items_keep_their_index_and_the_list_refuses_past_its_room() {
        let s = Slots::new(vec![10, 11]);
        let first = &s[0];
        assert_eq!(s.push(12), Ok(2));
        assert_eq!(*first, 10, "earlier elements do not move");
        assert_eq!(s.iter().copied().collect::<Vec<_>>(), vec![10, 11, 12]);
        assert_eq!(s.get(3), None);
        while s.len() < MAX_TOPS {
            s.push(0).expect("room left");
        }
        assert_eq!(s.push(99), Err(99));
    }
}

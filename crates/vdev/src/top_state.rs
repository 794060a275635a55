//! The life of a top-level vdev while the pool is open: `pool add` brings one in
//! (`Adding`, then `Active`), `pool remove` takes it out (`Draining`, then `Removed`),
//! and the tree grows through its `Slots` without moving a vdev already in it.
//!
//! Owns: `TopState`, the moves between states (`TopVdev::set_state`), what each state
//! allows (written and flushed, given uberblocks, allocated on), appending a vdev to the
//! open tree (`VdevTree::add_top`) and releasing a removed vdev's devices.
//! Promises: a vdev's number never changes and a removed one stays as a hole (an
//! intent-log block names its vdev by number); a removed vdev never returns to service
//! (asserted); a vdev being added gets labels and no uberblock until it is `Active`.
//! Must never: wipe the labels of a vdev that is not `Removed` (asserted), or take a lock
//! on the read path (a state is one atomic load).
use std::sync::atomic::Ordering;

use crate::top::TopVdev;
use crate::tree::VdevTree;
use crate::VdevError;

/// Where a top-level vdev is in its life: a live `pool add` brings a log device in, a
/// `pool remove` takes it out. Its number never changes (an intent-log block names its
/// vdev by number), so a removed one stays in the tree as a hole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum TopState {
    /// Being added: its labels are written, nothing else is, nothing is allocated on it.
    Adding = 0,
    /// In service.
    Active = 1,
    /// Being removed: written and flushed as before, but no new block is allocated on it.
    Draining = 2,
    /// Gone (or a hole at import): never read, written or flushed again.
    Removed = 3,
}

impl TopState {
    pub(crate) fn from_u8(v: u8) -> TopState {
        match v {
            0 => TopState::Adding,
            1 => TopState::Active,
            2 => TopState::Draining,
            _ => TopState::Removed,
        }
    }
}

impl TopVdev {
    pub fn state(&self) -> TopState {
        TopState::from_u8(self.state.load(Ordering::Acquire))
    }

    /// Moves this vdev to `state`. Panics on a move a vdev never makes: out of
    /// `Removed` (a removed vdev never returns), or back to `Adding`. A draining vdev goes
    /// back in service when its removal fails.
    pub fn set_state(&self, state: TopState) {
        let was = TopState::from_u8(self.state.swap(state as u8, Ordering::AcqRel));
        let allowed = was == state || (was != TopState::Removed && state != TopState::Adding);
        assert!(allowed, "vdev {} moved from {was:?} to {state:?}", self.index);
    }

    /// Written, flushed and given uberblocks (in service or draining).
    pub fn in_service(&self) -> bool {
        matches!(self.state(), TopState::Active | TopState::Draining)
    }

    pub fn is_removed(&self) -> bool {
        self.state() == TopState::Removed
    }

    /// True while intent-log blocks may be allocated on this separate log device.
    pub fn takes_log_blocks(&self) -> bool {
        self.is_log && self.state() == TopState::Active && self.usable() && self.asize > 0
    }

    /// A new top-level vdev starts as `Adding` (see `VdevTree::add_top`).
    pub fn adding(self) -> TopVdev {
        self.state.store(TopState::Adding as u8, Ordering::Release);
        self
    }

    /// Takes a removed vdev's devices out of the pool: their labels are zeroed (so the
    /// device can be used again without `-f`) and this process lets them go.
    pub fn wipe_and_release(&self) -> Result<(), VdevError> {
        assert!(self.is_removed(), "only a removed vdev's labels are wiped");
        for leaf in &self.leaves {
            leaf.wipe_labels_and_release()?;
        }
        Ok(())
    }
}

impl VdevTree {
    /// Appends `top` (numbered `tops.len()`, in state `Adding`) to the open tree.
    pub fn add_top(&self, top: TopVdev) -> Result<usize, VdevError> {
        assert_eq!(top.index, self.tops.len(), "a new vdev is numbered after the others");
        assert_eq!(top.state(), TopState::Adding, "a new vdev comes in as Adding");
        self.tops.push(top).map_err(|_| VdevError::TooManyVdevs { max: crate::slots::MAX_TOPS })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::label::Label;
    use crate::leaf::Leaf;
    use crate::read_device_labels;
    use crate::test_devices::{mirror, ub, MemDevice};
    use crate::BlockDevice;

    #[test]
    fn a_vdev_being_added_gets_labels_and_no_uberblock_and_a_removed_one_neither() {
        let (tree, _) = mirror();
        let dev = MemDevice::new("log");
        let leaf = Leaf::new(5, "log".into(), Some(dev.clone() as Arc<dyn BlockDevice>));
        let added = TopVdev::new(1, 6, 12, TopVdev::asize_of(4 << 20, 12), vec![leaf]).as_log().adding();
        assert_eq!(tree.add_top(added).unwrap(), 1);
        let label = Label {
            pool_name: "tank".into(),
            pool_guid: 1,
            vdev_guid: 0,
            top_index: 0,
            ashift: 12,
            state: crate::LabelState::Active,
            hostname: String::new(),
            create_txg: 1,
            asize: 0,
            tree: crate::TreeConfig {
                tops: vec![crate::TopConfig::Mirror { guid: 9, children: vec![(1, "a".into()), (2, "b".into())] }],
                logs: vec![crate::TopConfig::Disk { guid: 5, path: "log".into() }],
                caches: Vec::new(),
            },
        };
        tree.write_labels(&label).unwrap();
        tree.write_uberblock(&ub(3)).unwrap();
        let read = read_device_labels(dev.as_ref()).expect("labelled while being added");
        assert_eq!((read.label.vdev_guid, read.uberblocks.len()), (5, 0), "no uberblock while being added");
        assert!(!tree.tops[1].takes_log_blocks(), "nothing is allocated on it yet");
        tree.tops[1].set_state(TopState::Active);
        assert!(tree.tops[1].takes_log_blocks());
        tree.write_uberblock(&ub(4)).unwrap();
        let txgs: Vec<u64> = read_device_labels(dev.as_ref()).unwrap().uberblocks.iter().map(|u| u.txg).collect();
        assert!(txgs.contains(&4) && !txgs.contains(&3), "uberblocks from when it is in service: {txgs:?}");
        tree.tops[1].set_state(TopState::Draining);
        assert!(!tree.tops[1].takes_log_blocks() && tree.tops[1].in_service());
        tree.tops[1].set_state(TopState::Removed);
        tree.tops[1].wipe_and_release().unwrap();
        tree.write_uberblock(&ub(5)).unwrap();
        assert!(read_device_labels(dev.as_ref()).is_err(), "wiped, and no uberblock after");
        assert!(!tree.tops[1].usable() && tree.leaves().count() == 2);
    }

    #[test]
    fn an_fsync_holding_the_devices_while_a_log_is_added_and_activated_ends_on_the_same_devices() {
        let (tree, _) = mirror();
        let hold = tree.hold_sync();
        let leaf = Leaf::new(5, "log".into(), Some(MemDevice::new("log") as Arc<dyn BlockDevice>));
        let added = TopVdev::new(1, 6, 12, TopVdev::asize_of(4 << 20, 12), vec![leaf]).as_log().adding();
        tree.add_top(added).unwrap();
        tree.tops[1].set_state(TopState::Active);
        drop(hold); // ended twice on the new log's queue before the fix: a panic in fsync
        let syncs: Vec<u64> = tree.leaves().map(|l| l.queue.syncs_under_way()).collect();
        assert_eq!(syncs, [0, 0, 0], "every begin ended once, nothing ended that did not begin");
        let hold = tree.hold_sync();
        tree.tops[1].set_state(TopState::Draining);
        tree.tops[1].set_state(TopState::Removed);
        drop(hold);
        assert!(tree.tops.iter().flat_map(|t| t.leaves.iter()).all(|l| l.queue.syncs_under_way() == 0));
    }

    #[test]
    #[should_panic(expected = "moved from Removed")]
    fn a_removed_vdev_never_comes_back() {
        let (tree, _) = mirror();
        tree.tops[0].set_state(TopState::Removed);
        tree.tops[0].set_state(TopState::Active);
    }
}

//! The engine's state: which txg is open, which committed, the dirty bytes of the open
//! and syncing txgs, who waits, and why the engine stopped, if it did.
//!
//! Owns: the transitions of the txg numbers (quiesced, committed) and their invariants.
//!
//! Promises: txg numbers only grow — the open txg, the committed one, each strictly after
//! the last (asserted: a violation stops loudly instead of committing out of order).
//!
//! Must never: be changed outside the engine's state lock (it is only ever reached
//! through `TxgEngine::state`).
use std::time::{Duration, Instant};

use crate::rate::WriteRate;
use crate::throttle::ThrottleCounters;
use crate::SyncFailure;

pub(crate) struct State {
    pub(crate) open: u64,
    pub(crate) synced: u64,
    pub(crate) dirty_open: u64,
    pub(crate) dirty_syncing: u64,
    pub(crate) holds_in_open: u64,
    /// The sync thread is quiescing the open txg: new holds wait until it is done.
    pub(crate) quiescing: bool,
    /// Highest txg someone is waiting to see committed.
    pub(crate) wanted: u64,
    pub(crate) error: Option<SyncFailure>,
    pub(crate) closing: bool,
    pub(crate) last_sync: Instant,
    /// When the last delayed writer was let go: the next one goes a delay after it.
    pub(crate) last_wakeup: Instant,
    pub(crate) throttle: ThrottleCounters,
    /// How fast syncs retire dirty data: sets the dirty limit (`rate`).
    pub(crate) rate: WriteRate,
    pub(crate) syncs: SyncCounters,
}

/// What the syncs took: how many, how long in all and at most, and the last one.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SyncCounters {
    pub(crate) count: u64,
    pub(crate) time: Duration,
    pub(crate) max: Duration,
    pub(crate) last: Duration,
    pub(crate) last_bytes: u64,
    /// Quiesces: the time from deciding to sync until every hold on the txg was
    /// released and its changes frozen, in all and at most.
    pub(crate) quiesce_time: Duration,
    pub(crate) quiesce_max: Duration,
}

impl SyncCounters {
    pub(crate) fn record(&mut self, bytes: u64, took: Duration) {
        self.count += 1;
        self.time += took;
        self.max = self.max.max(took);
        self.last = took;
        self.last_bytes = bytes;
    }

    pub(crate) fn record_quiesce(&mut self, took: Duration) {
        self.quiesce_time += took;
        self.quiesce_max = self.quiesce_max.max(took);
    }
}

impl State {
    pub(crate) fn new(last_committed: u64) -> State {
        State {
            open: last_committed + 1,
            synced: last_committed,
            dirty_open: 0,
            dirty_syncing: 0,
            holds_in_open: 0,
            quiescing: false,
            wanted: 0,
            error: None,
            closing: false,
            last_sync: Instant::now(),
            last_wakeup: Instant::now(),
            throttle: ThrottleCounters::default(),
            rate: WriteRate::default(),
            syncs: SyncCounters::default(),
        }
    }

    pub(crate) fn dirty(&self) -> u64 {
        self.dirty_open + self.dirty_syncing
    }

    /// Txg `txg` was quiesced: it becomes the syncing txg and `txg + 1` opens.
    pub(crate) fn quiesced(&mut self, txg: u64) {
        assert_eq!(txg, self.open, "txg numbers only grow: quiesced txg {txg} is not the open txg {}", self.open);
        assert!(
            txg > self.synced,
            "txg numbers only grow: quiesced txg {txg} is not after committed txg {}",
            self.synced
        );
        self.open = txg + 1;
        self.dirty_syncing = self.dirty_open;
        self.dirty_open = 0;
        self.holds_in_open = 0;
    }

    /// Txg `txg` is committed (its uberblock is durable).
    pub(crate) fn committed(&mut self, txg: u64) {
        assert!(txg > self.synced, "txg numbers only grow: txg {txg} committed after txg {}", self.synced);
        assert!(txg < self.open, "txg {txg} committed while it is still open (open: {})", self.open);
        self.synced = txg;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "txg numbers only grow")]
    fn committing_a_txg_twice_stops() {
        let mut s = State::new(4);
        s.quiesced(5);
        s.committed(5);
        s.quiesced(6);
        s.committed(5);
    }

    #[test]
    #[should_panic(expected = "txg numbers only grow")]
    fn quiescing_a_txg_that_is_not_open_stops() {
        let mut s = State::new(4);
        s.quiesced(5);
        s.quiesced(5);
    }

    #[test]
    #[should_panic(expected = "still open")]
    fn committing_the_open_txg_stops() {
        let mut s = State::new(4);
        s.committed(5);
    }
}

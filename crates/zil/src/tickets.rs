//! Tickets: the commits in flight and the order their log blocks must take.
//!
//! Owns: one ticket per commit, from taking its records off the queue (in that order: a
//! ticket is opened under the queue lock) to appending its log blocks or failing.
//!
//! Promises: a commit appends only after every earlier commit it must follow has appended
//! or failed — namespace changes replay in order and later changes may depend on them (a
//! write to a file the log creates), and one object's changes replay in order — and waits
//! for nobody else, so a redo-log fsync never waits behind a data file's bulk commit.
//!
//! Must never: let a commit append ahead of one it must follow (asserted when it closes).
use parking_lot::{Condvar, Mutex};

/// A commit in flight, from taking its records to appending its log blocks.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ticket {
    id: u64,
    key: (u64, u64),
    /// It took namespace changes.
    namespace: bool,
}

impl Ticket {
    /// Whether this (earlier) commit's blocks must come before `later`'s in the log:
    /// namespace changes replay in order and later changes may depend on them (a write
    /// to a file the log creates), and one object's changes replay in order.
    fn precedes(&self, later: &Ticket) -> bool {
        self.id < later.id && (self.namespace || later.namespace || self.key == later.key)
    }
}

#[derive(Default)]
struct TicketList {
    next_id: u64,
    /// Commits that took records and have not yet appended their log blocks.
    unwritten: Vec<Ticket>,
}

impl TicketList {
    fn any_precedes(&self, me: &Ticket) -> bool {
        self.unwritten.iter().any(|t| t.precedes(me))
    }
}

/// The commits in flight and the order their log blocks must take.
#[derive(Default)]
pub(crate) struct Tickets {
    list: Mutex<TicketList>,
    closed: Condvar,
}

impl Tickets {
    /// Called under the queue lock, so ticket order is the order records were taken.
    pub(crate) fn open(&self, key: (u64, u64), namespace: bool) -> Ticket {
        let mut l = self.list.lock();
        l.next_id += 1;
        let t = Ticket { id: l.next_id, key, namespace };
        l.unwritten.push(t);
        t
    }

    /// The commit appended its blocks (or failed). It waited for every earlier commit it
    /// must follow, and ticket ids only grow: none of those may still be open — checked
    /// here, under the lock closing takes anyway, so the fsync path pays no extra lock.
    pub(crate) fn close(&self, t: &Ticket) {
        let mut l = self.list.lock();
        assert!(
            !l.any_precedes(t),
            "invariant broken: a commit appends its log blocks only after every earlier commit it must follow has \
             appended (ticket {} closed before {:?})",
            t.id,
            l.unwritten.iter().find(|u| u.precedes(t)).map(|u| u.id)
        );
        l.unwritten.retain(|u| u.id != t.id);
        drop(l);
        self.closed.notify_all();
    }

    /// Waits until every earlier commit that must precede `me` in the log has closed.
    pub(crate) fn wait_for_earlier(&self, me: &Ticket) {
        let mut l = self.list.lock();
        while l.any_precedes(me) {
            self.closed.wait(&mut l);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    /// A commit waits, before appending, for earlier commits it depends on: namespace
    /// changes, or the same object. A data file's slow bulk commit holds up nobody else.
    #[test]
    fn commits_append_in_the_order_replay_needs_and_no_more() {
        let tickets = Arc::new(Tickets::default());
        let bulk = tickets.open((1, 10), false); // a data file, resolving slowly
        let redo = tickets.open((1, 20), false); // another file: need not wait
        tickets.wait_for_earlier(&redo); // returns at once
        tickets.close(&redo);
        let same = tickets.open((1, 10), false); // the same data file: waits for `bulk`
        let rename = tickets.open((1, 30), true); // a namespace change: waits for everyone
        let done = Arc::new(AtomicU32::new(0));
        let waiters: Vec<_> = [same, rename]
            .into_iter()
            .map(|t| {
                let (tickets, done) = (tickets.clone(), done.clone());
                std::thread::spawn(move || {
                    tickets.wait_for_earlier(&t);
                    done.fetch_add(1, Ordering::SeqCst);
                    tickets.close(&t);
                })
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(done.load(Ordering::SeqCst), 0, "both wait for the bulk commit");
        tickets.close(&bulk);
        for w in waiters {
            w.join().unwrap();
        }
        assert_eq!(done.load(Ordering::SeqCst), 2);
    }

    #[test]
    #[should_panic(expected = "invariant broken: a commit appends its log blocks only after")]
    fn appending_ahead_of_an_earlier_commit_of_the_same_object_stops_loudly() {
        let tickets = Tickets::default();
        let _first = tickets.open((1, 10), false);
        let second = tickets.open((1, 10), false);
        tickets.close(&second); // without waiting for the first
    }
}

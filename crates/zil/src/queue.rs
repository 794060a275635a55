//! The queue of changes not yet committed by a txg (ZFS's itxs), kept per object so that
//! an fsync takes its file's changes without walking every other file's (a database's
//! redo-log fsync must not cost more as data-file pages pile up).
//!
//! Owns: the queued changes, their sequence numbers (the order they were made in), and
//! which of them belong to whom (the namespace, or one object of one dataset).
//!
//! Promises: every list is in sequence order, and so in txg order (all of a txg's changes
//! are queued under its hold, before the next txg opens); `take_for` returns the namespace
//! changes and one object's changes merged back into sequence order.
//!
//! Must never: drop a change before its txg is committed (`drop_committed` is told so by
//! the pool), or reorder the changes of one list.
use std::collections::{HashMap, VecDeque};

use tarn_arc::compact::compact;

use crate::policy::{CommitCopies, Placement};
use crate::record::Record;

/// A queued change: a record ready to encode, or a write whose data is fetched only if a
/// commit needs it (ZFS's WR_NEED_COPY and WR_INDIRECT): copied then, or — placed
/// `InPlace` — logged as a pointer to its record written in place. A write no fsync asks
/// for before its txg commits is never copied at all.
pub(crate) enum Queued {
    Ready(Record),
    /// `whole`: the write covers its whole record (the page-batch rule of `policy`).
    Write {
        txg: u64,
        dataset: u64,
        obj: u64,
        offset: u64,
        len: u64,
        whole: bool,
        placement: Placement,
    },
}

impl Queued {
    pub(crate) fn txg(&self) -> u64 {
        match self {
            Queued::Ready(r) => r.txg,
            Queued::Write { txg, .. } => *txg,
        }
    }

    /// (dataset, object) for a change of one object; `None` for a namespace change.
    pub(crate) fn object(&self) -> Option<(u64, u64)> {
        match self {
            Queued::Ready(r) => r.object().map(|o| (r.dataset, o)),
            Queued::Write { dataset, obj, .. } => Some((*dataset, *obj)),
        }
    }

    /// Bytes of file data this change would copy into the log as queued.
    pub(crate) fn copied_bytes(&self) -> u64 {
        match self {
            Queued::Write { len, placement: Placement::Copy, .. } => *len,
            _ => 0,
        }
    }

    /// What a commit of `items` would copy into the log as queued.
    pub(crate) fn copies<'a>(items: impl Iterator<Item = &'a Queued>) -> CommitCopies {
        let mut copies = CommitCopies::default();
        for q in items {
            if let Queued::Write { len, whole, placement: Placement::Copy, .. } = q {
                copies.all += len;
                copies.whole_records += if *whole { *len } else { 0 };
            }
        }
        copies
    }
}

/// One object's queued changes at a glance (`Queue::outlook`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Outlook {
    pub(crate) copied: u64,
    pub(crate) oldest_txg: u64,
    pub(crate) newest_txg: u64,
}

/// Changes with their sequence numbers.
pub(crate) type Taken = Vec<(u64, Queued)>;

pub(crate) struct Queue {
    next_seq: u64,
    /// Namespace changes: every fsync needs all of them.
    namespace: VecDeque<(u64, Queued)>,
    /// Everything else, per (dataset, object).
    objects: HashMap<(u64, u64), VecDeque<(u64, Queued)>>,
}

impl Queue {
    pub(crate) fn new() -> Queue {
        Queue { next_seq: 1, namespace: VecDeque::new(), objects: HashMap::new() }
    }

    /// The sequence number of the newest change queued so far (0 for none).
    pub(crate) fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }

    pub(crate) fn push(&mut self, item: Queued) {
        let seq = self.next_seq;
        self.next_seq += 1;
        match item.object() {
            Some(key) => self.objects.entry(key).or_default().push_back((seq, item)),
            None => self.namespace.push_back((seq, item)),
        }
    }

    /// The namespace changes and `key`'s changes up to `target`, merged in sequence order.
    pub(crate) fn take_for(&mut self, key: (u64, u64), target: u64) -> Taken {
        let ns = take_upto(&mut self.namespace, target);
        let own = match self.objects.get_mut(&key) {
            Some(list) => {
                let own = take_upto(list, target);
                if list.is_empty() {
                    self.objects.remove(&key);
                }
                own
            }
            None => VecDeque::new(),
        };
        merge_by_seq(ns, own)
    }

    /// What a commit for `key` would find of its object's own changes now: the file
    /// data it would copy as queued, and the oldest and newest txg among them (None
    /// when the object has nothing queued).
    pub(crate) fn outlook(&self, key: (u64, u64)) -> Option<Outlook> {
        let list = self.objects.get(&key)?;
        let (first, last) = (list.front()?, list.back()?);
        Some(Outlook {
            copied: list.iter().map(|(_, q)| q.copied_bytes()).sum(),
            oldest_txg: first.1.txg(),
            newest_txg: last.1.txg(),
        })
    }

    /// Drops every change of txgs up to `txg` (they are committed). A list is in txg order:
    /// all of a txg's changes are queued before the next txg opens.
    pub(crate) fn drop_committed(&mut self, txg: u64) {
        drop_upto_txg(&mut self.namespace, txg);
        self.objects.retain(|_, list| {
            drop_upto_txg(list, txg);
            !list.is_empty()
        });
        // A txg that created 200,000 files queued as many changes: once committed they
        // leave no room behind (issue #11). Amortized: only a mostly empty table is rebuilt.
        compact(&mut self.namespace);
        compact(&mut self.objects);
    }
}

fn take_upto(list: &mut VecDeque<(u64, Queued)>, target: u64) -> VecDeque<(u64, Queued)> {
    let n = list.iter().take_while(|(s, _)| *s <= target).count();
    list.drain(..n).collect()
}

fn drop_upto_txg(list: &mut VecDeque<(u64, Queued)>, txg: u64) {
    while list.front().is_some_and(|(_, q)| q.txg() <= txg) {
        list.pop_front();
    }
}

fn merge_by_seq(mut a: VecDeque<(u64, Queued)>, mut b: VecDeque<(u64, Queued)>) -> Taken {
    let mut out = Vec::with_capacity(a.len() + b.len());
    loop {
        let from_a = match (a.front(), b.front()) {
            (Some((sa, _)), Some((sb, _))) => sa < sb,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => return out,
        };
        out.push(if from_a { a.pop_front() } else { b.pop_front() }.expect("checked non-empty"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Op;

    fn write(txg: u64, obj: u64) -> Queued {
        Queued::Ready(Record { txg, dataset: 1, op: Op::Write { obj, offset: 0, data: vec![1] } })
    }

    fn create(txg: u64, obj: u64) -> Queued {
        let op = Op::Create {
            parent: 1,
            obj,
            kind: 1,
            mode: 0o644,
            uid: 0,
            gid: 0,
            rdev: 0,
            name: b"f".to_vec(),
            target: vec![],
        };
        Queued::Ready(Record { txg, dataset: 1, op })
    }

    fn seqs(items: &[(u64, Queued)]) -> Vec<u64> {
        items.iter().map(|(s, _)| *s).collect()
    }

    #[test]
    fn an_fsync_takes_its_object_and_the_namespace_in_order_and_nothing_else() {
        let mut q = Queue::new();
        q.push(create(5, 7)); // 1
        q.push(write(5, 7)); // 2
        q.push(write(5, 8)); // 3: another file
        q.push(create(6, 9)); // 4
        q.push(Queued::Write {
            txg: 6,
            dataset: 1,
            obj: 7,
            offset: 0,
            len: 10,
            whole: false,
            placement: Placement::InPlace,
        }); // 5
        q.push(write(6, 7)); // 6: after the fsync started
        assert_eq!(seqs(&q.take_for((1, 7), 5)), vec![1, 2, 4, 5]);
        assert_eq!(seqs(&q.take_for((1, 7), 6)), vec![6]);
        assert_eq!(seqs(&q.take_for((2, 8), 6)), Vec::<u64>::new(), "object 8 of dataset 2 is another file");
        q.drop_committed(5);
        assert!(q.objects.is_empty(), "txg 5 committed object 8's write");
        q.push(write(7, 8));
        assert_eq!(seqs(&q.take_for((1, 8), 7)), vec![7]);
    }

    #[test]
    fn only_copied_writes_count_toward_the_bulk_rule() {
        let copy =
            Queued::Write { txg: 1, dataset: 1, obj: 2, offset: 0, len: 100, whole: false, placement: Placement::Copy };
        let in_place = Queued::Write {
            txg: 1,
            dataset: 1,
            obj: 2,
            offset: 0,
            len: 100,
            whole: false,
            placement: Placement::InPlace,
        };
        assert_eq!(copy.copied_bytes(), 100);
        assert_eq!(in_place.copied_bytes(), 0);
        assert_eq!(write(1, 2).copied_bytes(), 0, "a ready record is already encoded");
    }
}

//! Replay under way: the chain being replayed stays the committed root's log until every
//! record is applied, and each root says how far replay got in that very txg (ZFS keeps
//! the replayed chain in the ZIL header and records `zh_replay_seq` the same way).
//!
//! Owns: the replay's state between import and the txg that retires the replayed chain —
//! the chain's head and blocks, the record being applied, the last record each txg holds,
//! the objects replay created (their id in the log → the id they got), the records that
//! could not be applied — and what a root says of it (`ReplayProgress`).
//!
//! Promises: the progress a root of txg `t` records counts exactly the records whose
//! changes joined txgs ≤ `t` (replay notes a record from inside the change's own txg
//! hold, through `Zil::log`/`log_write`, so no quiesce can split the change from its
//! note); the ids it records are those of the creates it counts; the replayed chain is
//! named by every root until the first txg at or after the one `finish_replay` names,
//! and that txg frees its blocks.
//!
//! Must never: count a record whose txg a root does not hold (a crash would then skip an
//! acknowledged change), or leave out one it holds (it would be applied twice).
use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use tarn_zio::{BlockPtr, Extent};

use crate::record::Op;
use crate::{LogHead, Zil};

/// What a root written during replay says of it (MOS `zil_replay`): the chain its log
/// head names is being replayed, and how far this root's txg got.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayProgress {
    /// The records to replay are those of txgs after this one: the committed txg when
    /// replay first began. (Later roots are newer, but their own txgs hold replayed
    /// changes, not the log's.)
    pub claim_txg: u64,
    /// How many of those records, in chain order, this root holds: applied, or found
    /// not to apply (`skipped`). A resumed replay starts after them.
    pub replayed: u64,
    /// Objects replay created: `[dataset, id in the log, id replay gave it]`. Later
    /// records name an object by its id in the log.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ids: Vec<[u64; 3]>,
    /// How many of the `replayed` records could not be applied, and the first one's
    /// report (so an import that resumes still says what was lost).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_skipped: Option<String>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl ReplayProgress {
    /// A replay about to start on a root of txg `committed_txg`.
    pub fn starting(committed_txg: u64) -> ReplayProgress {
        ReplayProgress { claim_txg: committed_txg, ..Default::default() }
    }
}

/// The chain replay is about to apply, with where a committed root says it got.
pub struct ReplaySource {
    /// The head the committed root names (every root keeps naming it until the end).
    pub head: LogHead,
    /// Its blocks, and the blocks its indirect writes point at: freed with the txg that
    /// stops naming it.
    pub blocks: Vec<Extent>,
    pub indirect: Vec<BlockPtr>,
    /// Where the committed root says replay got (`ReplayProgress::starting` when it had
    /// not begun).
    pub progress: ReplayProgress,
}

/// What a txg's root says of the log, and what becomes free once that txg commits.
pub struct LogRoot {
    pub head: LogHead,
    /// Set while replay is under way: `head` is the chain being replayed.
    pub replay: Option<ReplayProgress>,
    /// Log blocks no root needs after this txg.
    pub obsolete: Vec<Extent>,
    /// Blocks written in place that only those log blocks pointed at.
    pub obsolete_indirect: Vec<BlockPtr>,
}

pub(crate) struct Replaying {
    source: ReplaySource,
    /// The record being applied (index in chain order), and the object it creates as
    /// (dataset, id in the log), if it is a create.
    current: Option<u64>,
    current_create: Option<(u64, u64)>,
    /// Records before this one were started (records go in order).
    next_index: u64,
    /// (txg, records applied through): the last record each txg holds, txgs ascending.
    applied: Vec<(u64, u64)>,
    /// (dataset, id in the log) → (id replay gave it, txg of the create; 0 if a committed
    /// root already had it).
    ids: HashMap<(u64, u64), (u64, u64)>,
    /// Records of this import that could not be applied: (index, report).
    skipped: Vec<(u64, String)>,
    /// The first txg whose root names the new chain instead (set by `finish_replay`).
    switch_at: Option<u64>,
}

impl Replaying {
    fn new(source: ReplaySource) -> Replaying {
        let ids = source.progress.ids.iter().map(|&[ds, logged, given]| ((ds, logged), (given, 0))).collect();
        Replaying {
            current: None,
            current_create: None,
            next_index: source.progress.replayed,
            source,
            applied: Vec::new(),
            ids,
            skipped: Vec::new(),
            switch_at: None,
        }
    }

    /// A change of the record being applied joined txg `txg` (`op`: the change, when it
    /// names one).
    fn note(&mut self, txg: u64, dataset: u64, op: Option<&Op>) {
        let Some(current) = self.current else {
            return; // not a record's change (none is made during replay today)
        };
        let through = current + 1;
        match self.applied.last_mut() {
            Some((t, n)) if *t == txg => *n = (*n).max(through),
            last => {
                let before = last.map(|(t, _)| *t);
                assert!(
                    before.is_none_or(|t| t < txg),
                    "invariant broken: replayed changes join txgs in record order (txg {txg} after txg {before:?})"
                );
                self.applied.push((txg, through));
            }
        }
        if let (Some(Op::Create { obj, .. }), Some((ds, logged))) = (op, self.current_create) {
            if ds == dataset {
                self.ids.insert((ds, logged), (*obj, txg));
                self.current_create = None;
            }
        }
    }

    /// What the root of txg `txg` records.
    fn progress_at(&self, txg: u64) -> ReplayProgress {
        let base = &self.source.progress;
        let replayed = self.applied.iter().rev().find(|(t, _)| *t <= txg).map_or(base.replayed, |&(_, n)| n);
        let mut ids: Vec<[u64; 3]> = self
            .ids
            .iter()
            .filter(|(_, (_, t))| *t <= txg)
            .map(|(&(ds, logged), &(given, _))| [ds, logged, given])
            .collect();
        ids.sort_unstable();
        let mut skipped_here = self.skipped.iter().filter(|(i, _)| *i < replayed);
        let first_here = skipped_here.clone().next().map(|(_, m)| m.clone());
        ReplayProgress {
            claim_txg: base.claim_txg,
            replayed,
            ids,
            skipped: base.skipped + skipped_here.by_ref().count() as u64,
            first_skipped: base.first_skipped.clone().or(first_here),
        }
    }
}

impl Zil {
    /// Replay of `source` begins: changes are no longer logged but noted as the record's
    /// (`replay_next` says which), and every root names `source`'s chain with the
    /// progress its own txg holds, until `finish_replay`.
    pub fn begin_replay(&self, source: ReplaySource) {
        *self.replay.lock() = Some(Replaying::new(source));
        self.set_replaying(true);
    }

    /// Record `index` (in chain order) is applied next; `creates`: the object it creates,
    /// as (dataset, id in the log).
    pub fn replay_next(&self, index: u64, creates: Option<(u64, u64)>) {
        let mut replay = self.replay.lock();
        let r = replay.as_mut().expect("replay_next is called between begin_replay and finish_replay");
        assert!(
            index >= r.next_index,
            "invariant broken: records are replayed in order, each once ({index} after {})",
            r.next_index
        );
        r.current = Some(index);
        r.current_create = creates;
        r.next_index = index + 1;
    }

    /// Record `index` could not be applied (`report` says why).
    pub fn replay_skipped(&self, index: u64, report: String) {
        if let Some(r) = self.replay.lock().as_mut() {
            r.skipped.push((index, report));
        }
    }

    /// The id object `obj` of `dataset` (as the log names it) has after replay created it
    /// again; `obj` itself if replay did not create it.
    pub fn replayed_id(&self, dataset: u64, obj: u64) -> u64 {
        let replay = self.replay.lock();
        replay.as_ref().and_then(|r| r.ids.get(&(dataset, obj))).map_or(obj, |&(given, _)| given)
    }

    /// Every record is applied, each in a txg before `switch_txg` or in it (the caller
    /// holds `switch_txg` open): that txg's root names the new chain and frees the
    /// replayed one. Changes are logged again from here on.
    pub fn finish_replay(&self, switch_txg: u64) {
        if let Some(r) = self.replay.lock().as_mut() {
            r.switch_at = Some(switch_txg);
        }
        self.set_replaying(false);
    }

    /// Called from `log`/`log_write` while replaying, under the change's txg hold.
    pub(crate) fn note_replayed(&self, txg: u64, dataset: u64, op: Option<&Op>) {
        if let Some(r) = self.replay.lock().as_mut() {
            r.note(txg, dataset, op);
        }
    }

    /// What the root of txg `txg` says of replay, if one is under way.
    pub(crate) fn replay_root(&self, txg: u64) -> ReplayRoot {
        let mut replay = self.replay.lock();
        match replay.as_ref() {
            None => ReplayRoot::NoReplay,
            Some(r) if r.switch_at.is_none_or(|s| txg < s) => ReplayRoot::Replaying(r.source.head, r.progress_at(txg)),
            Some(_) => ReplayRoot::Retire(replay.take().expect("matched").source),
        }
    }
}

/// What a txg's root says of replay.
pub(crate) enum ReplayRoot {
    NoReplay,
    /// Replay is under way: the root names the replayed chain, with this progress.
    Replaying(LogHead, ReplayProgress),
    /// This txg ends replay: its root names the new chain, and the replayed chain's
    /// blocks are freed with it.
    Retire(ReplaySource),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(progress: ReplayProgress) -> ReplaySource {
        let head = LogHead { extent: Extent { vdev: 0, offset: 0, len: 4096 }, seq: 1 };
        ReplaySource { head, blocks: Vec::new(), indirect: Vec::new(), progress }
    }

    fn create(obj: u64) -> Op {
        Op::Create {
            parent: 1,
            obj,
            kind: 1,
            mode: 0o644,
            uid: 0,
            gid: 0,
            rdev: 0,
            name: b"f".to_vec(),
            target: Vec::new(),
        }
    }

    #[test]
    fn a_root_counts_the_records_and_creates_its_txg_holds() {
        let mut r = Replaying::new(source(ReplayProgress::starting(10)));
        r.current = Some(0);
        r.note(11, 1, None);
        r.current = Some(1);
        r.current_create = Some((1, 50));
        r.note(11, 1, Some(&create(7)));
        r.current = Some(2);
        r.note(12, 1, None);
        r.skipped.push((3, "record 3: no such file".into()));
        r.current = Some(4);
        r.note(13, 1, None);
        assert_eq!(r.progress_at(10), ReplayProgress::starting(10), "before any replayed txg");
        let at11 = r.progress_at(11);
        assert_eq!((at11.replayed, at11.ids.clone(), at11.skipped), (2, vec![[1, 50, 7]], 0));
        assert_eq!(r.progress_at(12).replayed, 3);
        let at13 = r.progress_at(13);
        assert_eq!((at13.replayed, at13.skipped), (5, 1), "the skipped record is counted once a later one is");
        assert_eq!(at13.first_skipped.as_deref(), Some("record 3: no such file"));
    }

    #[test]
    fn a_resumed_replay_starts_from_what_the_root_recorded() {
        let committed = ReplayProgress {
            claim_txg: 10,
            replayed: 40,
            ids: vec![[1, 50, 7]],
            skipped: 2,
            first_skipped: Some("earlier".into()),
        };
        let mut r = Replaying::new(source(committed.clone()));
        assert_eq!(r.progress_at(99), committed, "nothing applied yet: the committed progress");
        r.current = Some(41);
        r.skipped.push((40, "now".into()));
        r.note(20, 1, None);
        let p = r.progress_at(20);
        assert_eq!((p.replayed, p.skipped, p.first_skipped.as_deref()), (42, 3, Some("earlier")));
        assert_eq!(p.ids, vec![[1, 50, 7]]);
    }

    #[test]
    #[should_panic(expected = "replayed changes join txgs in record order")]
    fn a_change_joining_an_older_txg_stops() {
        let mut r = Replaying::new(source(ReplayProgress::starting(10)));
        r.current = Some(0);
        r.note(12, 1, None);
        r.current = Some(1);
        r.note(11, 1, None);
    }
}

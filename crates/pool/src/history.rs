//! The pool's command history (`tarn pool history`, after `zpool history`): every command
//! that changed the pool, with its time, user and host, kept in the pool itself.
//!
//! Owns: the history object stored in the MOS under `history` (docs/FORMAT.md §12.1): its
//! entries, its format version and its size bound.
//! Promises: the stored history stays under `HISTORY_MAX_BYTES`, dropping the oldest
//! entries first but keeping the very first one (the pool's creation), as ZFS does; a
//! txg's root holds only entries logged in that txg or before, so the history never
//! names a change the root does not have yet; a history of a version this build does
//! not know is carried into every later root byte for byte, and reading it is refused
//! with the version and the fix.
//! Must never: fail a command or a commit because of the history, or rewrite (and so
//! lose) a history it cannot read.
use std::collections::VecDeque;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::error::PoolError;
use crate::pool::Pool;

/// Version of the history object (FORMAT.md §12.1).
pub const HISTORY_VERSION: u32 = 1;
/// The most bytes the encoded history may take in the MOS (ZFS's smallest history).
pub const HISTORY_MAX_BYTES: usize = 128 << 10;
/// A command line longer than this is cut (and marked so): one runaway command must not
/// push the whole history out.
const COMMAND_MAX: usize = 4096;

/// One command that changed the pool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// Unix seconds when the command changed the pool.
    pub time: u64,
    /// The txg the entry was logged in (set by [`History::log`]).
    #[serde(default)]
    pub txg: u64,
    /// Who ran it (name, and the numeric id the name came from).
    pub user: String,
    pub uid: u32,
    pub host: String,
    /// The command line, e.g. `tarn ds create -o recordsize=16K tank/db`.
    pub command: String,
}

/// Why the history cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("the pool's history has format version {found}, which this tarn does not read (it reads {supported}); upgrade tarn to see it (the history is kept as it is, and new commands are not added to it)")]
    UnsupportedVersion { found: u32, supported: u32 },
    #[error("the pool's history is malformed ({0}); it is kept as it is, and new commands are not added to it")]
    Malformed(String),
}

/// The history as stored.
#[derive(Serialize, Deserialize)]
struct Stored {
    version: u32,
    entries: Vec<HistoryEntry>,
}

/// The live history of an open pool.
#[derive(Default)]
pub struct History {
    state: Mutex<State>,
}

enum State {
    Known(Log),
    /// Written by a newer tarn (or unreadable): kept byte for byte, never appended to.
    Foreign {
        raw: Box<RawValue>,
        why: String,
    },
}

impl Default for State {
    fn default() -> State {
        State::Known(Log::default())
    }
}

#[derive(Default)]
struct Log {
    entries: VecDeque<HistoryEntry>,
    /// Encoded bytes of each entry, in the same order (for the bound).
    sizes: VecDeque<usize>,
    total: usize,
}

impl Log {
    fn push(&mut self, entry: HistoryEntry) {
        let size = serde_json::to_vec(&entry).map_or(COMMAND_MAX, |v| v.len() + 1);
        self.entries.push_back(entry);
        self.sizes.push_back(size);
        self.total += size;
        // Keep the first entry (the creation); drop the oldest after it.
        while self.total + ENVELOPE > HISTORY_MAX_BYTES && self.entries.len() > 2 {
            self.entries.remove(1);
            let dropped = self.sizes.remove(1).expect("sizes mirror entries");
            self.total -= dropped;
        }
        debug_assert_eq!(self.entries.len(), self.sizes.len());
    }
}

/// Room for `{"version":1,"entries":[]}` around the entries.
const ENVELOPE: usize = 64;

impl History {
    /// The history found in a pool's root (`None`: a pool from before the history).
    #[cfg(test)]
    pub fn from_root(raw: Option<&RawValue>) -> History {
        let h = History::default();
        h.restore(raw);
        h
    }

    /// Replaces what this history holds with the one found in a pool's root.
    pub fn restore(&self, raw: Option<&RawValue>) {
        *self.state.lock() = match raw {
            None => State::default(),
            Some(raw) => decode(raw),
        };
    }

    /// Adds `entry` as logged in txg `txg` (its command line cut to a sane length). A
    /// history this build cannot read is left as it is, and the entry is dropped.
    pub fn log(&self, mut entry: HistoryEntry, txg: u64) {
        entry.txg = txg;
        if entry.command.len() > COMMAND_MAX {
            let mut cut = COMMAND_MAX;
            while !entry.command.is_char_boundary(cut) {
                cut -= 1;
            }
            entry.command.truncate(cut);
            entry.command.push_str(" …");
        }
        if let State::Known(log) = &mut *self.state.lock() {
            log.push(entry);
        }
    }

    /// Every entry, oldest first (including those not committed yet).
    pub fn entries(&self) -> Result<Vec<HistoryEntry>, HistoryError> {
        match &*self.state.lock() {
            State::Known(log) => Ok(log.entries.iter().cloned().collect()),
            State::Foreign { why, raw } => Err(refusal(why, raw)),
        }
    }

    /// What the root of txg `txg` stores: the entries logged in `txg` or before, or the
    /// foreign history as it was found. `None` while nothing was ever logged.
    pub fn for_root(&self, txg: u64) -> Option<Box<RawValue>> {
        match &*self.state.lock() {
            State::Foreign { raw, .. } => Some(raw.clone()),
            State::Known(log) if log.entries.is_empty() => None,
            State::Known(log) => {
                let upto: Vec<HistoryEntry> = log.entries.iter().filter(|e| e.txg <= txg).cloned().collect();
                let stored = Stored { version: HISTORY_VERSION, entries: upto };
                serde_json::value::to_raw_value(&stored).ok()
            }
        }
    }
}

impl Pool {
    /// Records a command that changed the pool in its history (`tarn pool history`); it is
    /// committed with the txg it joins. A suspended pool (no txg to join) records nothing.
    pub fn log_history(&self, entry: HistoryEntry) {
        if let Ok(hold) = self.inner.ctx.txg.hold(0) {
            self.inner.history.log(entry, hold.txg);
        }
    }

    /// The pool's command history, oldest first.
    pub fn history(&self) -> Result<Vec<HistoryEntry>, PoolError> {
        Ok(self.inner.history.entries()?)
    }
}

fn decode(raw: &RawValue) -> State {
    #[derive(Deserialize)]
    struct VersionOnly {
        version: u32,
    }
    let foreign = |why: String| State::Foreign { raw: raw.to_owned(), why };
    let version = match serde_json::from_str::<VersionOnly>(raw.get()) {
        Ok(v) => v.version,
        Err(e) => return foreign(e.to_string()),
    };
    if version != HISTORY_VERSION {
        return foreign(format!("version {version}"));
    }
    match serde_json::from_str::<Stored>(raw.get()) {
        Ok(stored) => {
            let mut log = Log::default();
            stored.entries.into_iter().for_each(|e| log.push(e));
            State::Known(log)
        }
        Err(e) => foreign(e.to_string()),
    }
}

fn refusal(why: &str, raw: &RawValue) -> HistoryError {
    #[derive(Deserialize)]
    struct VersionOnly {
        version: u32,
    }
    match serde_json::from_str::<VersionOnly>(raw.get()) {
        Ok(v) if v.version != HISTORY_VERSION => {
            HistoryError::UnsupportedVersion { found: v.version, supported: HISTORY_VERSION }
        }
        _ => HistoryError::Malformed(why.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(command: &str) -> HistoryEntry {
        HistoryEntry {
            time: 1_700_000_000,
            txg: 0,
            user: "root".into(),
            uid: 0,
            host: "h".into(),
            command: command.into(),
        }
    }

    #[test]
    fn a_root_holds_the_entries_of_its_txg_and_before_and_reads_back() {
        let h = History::default();
        assert!(h.for_root(1).is_none(), "no history yet: nothing stored");
        h.log(entry("tarn pool create tank /d"), 1);
        h.log(entry("tarn ds create tank/db"), 3);
        let at2 = History::from_root(h.for_root(2).as_deref());
        assert_eq!(at2.entries().unwrap(), vec![HistoryEntry { txg: 1, ..entry("tarn pool create tank /d") }]);
        let at3 = History::from_root(h.for_root(3).as_deref());
        assert_eq!(at3.entries().unwrap(), h.entries().unwrap());
        assert_eq!(at3.entries().unwrap().len(), 2);
    }

    #[test]
    fn the_bound_drops_the_oldest_but_keeps_the_creation() {
        let h = History::default();
        h.log(entry("tarn pool create tank /d"), 1);
        for i in 0..5000 {
            h.log(entry(&format!("tarn set recordsize=16K tank/db{i}")), 2);
        }
        let raw = h.for_root(2).unwrap();
        assert!(raw.get().len() <= HISTORY_MAX_BYTES, "{} bytes", raw.get().len());
        let all = History::from_root(Some(&raw)).entries().unwrap();
        assert_eq!(all[0].command, "tarn pool create tank /d");
        assert_eq!(all.last().unwrap().command, "tarn set recordsize=16K tank/db4999");
        assert!(all.len() < 5000 && all.len() > 100, "{} kept", all.len());
        assert!(!all.iter().any(|e| e.command == "tarn set recordsize=16K tank/db0"));
    }

    #[test]
    fn a_long_command_is_cut() {
        let h = History::default();
        h.log(entry(&"x".repeat(10_000)), 1);
        let e = &h.entries().unwrap()[0];
        assert!(e.command.len() < COMMAND_MAX + 8 && e.command.ends_with('…'));
    }

    #[test]
    fn an_unknown_version_is_refused_clearly_and_kept_as_it_is() {
        let newer = r#"{"version":2,"entries":[{"anything":"new"}],"more":true}"#;
        let raw = RawValue::from_string(newer.to_string()).unwrap();
        let h = History::from_root(Some(&raw));
        let err = h.entries().unwrap_err().to_string();
        assert!(err.contains("version 2") && err.contains("upgrade tarn"), "{err}");
        h.log(entry("tarn ds create tank/x"), 5);
        assert_eq!(h.for_root(5).unwrap().get(), newer, "carried byte for byte");
    }

    #[test]
    fn a_malformed_history_is_refused_and_kept() {
        let bad = r#"{"version":1,"entries":7}"#;
        let raw = RawValue::from_string(bad.to_string()).unwrap();
        let h = History::from_root(Some(&raw));
        let err = h.entries().unwrap_err().to_string();
        assert!(err.contains("malformed"), "{err}");
        assert_eq!(h.for_root(9).unwrap().get(), bad);
    }
}

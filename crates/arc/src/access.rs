//! Who reads a block and why: the kind every read is counted under (`tarn stats io` and
//! `tarn stats arc` split device reads, hits and misses by it), and the logical page a
//! block holds, so the cache policy and the read trace can follow a page across
//! copy-on-write rewrites (each rewrite gives the page a new physical key).
//!
//! Owns: `ReadKind` and its names, `PageId`, `Access`, and `PerKind` (one relaxed atomic
//! per kind: the counters of the hot path).
//!
//! Promises: counting a read is one relaxed atomic add into a fixed array — no lock, no
//! allocation; every kind has a stable name (the counter names derive from it).
//!
//! Must never: decide anything about caching by itself (the policy reads `Access`).
use std::sync::atomic::{AtomicU64, Ordering};

/// Why a block is read. The caller says what it reads for (demand, read-modify-write,
/// intent-log fetch, prefetch, scrub, import); the pipeline refines a read of metadata by
/// the block's type (`Indirect`, `Dnode`, `Directory`, `Pool`), so "indirect blocks cost
/// reads" is visible whoever asked for the record under them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ReadKind {
    /// A file's data asked for by a reader (a database page read).
    Demand = 0,
    /// An indirect block (block-tree level ≥ 1).
    Indirect,
    /// A block of a dnode table (objects' dnodes).
    Dnode,
    /// A directory's entries.
    Directory,
    /// The pool's own metadata (the MOS).
    Pool,
    /// Read ahead of demand by sequential prefetch.
    Prefetch,
    /// The old record under a partial write (read-modify-write).
    Rmw,
    /// A logged write's data fetched at fsync (intent-log fetch).
    LogFetch,
    /// Scrub: every copy verified, past the cache.
    Scrub,
    /// The import walk and intent-log replay, past the cache.
    Import,
}

/// How many kinds there are (the length of a `PerKind`).
pub const READ_KINDS: usize = 10;

impl ReadKind {
    pub const ALL: [ReadKind; READ_KINDS] = [
        ReadKind::Demand,
        ReadKind::Indirect,
        ReadKind::Dnode,
        ReadKind::Directory,
        ReadKind::Pool,
        ReadKind::Prefetch,
        ReadKind::Rmw,
        ReadKind::LogFetch,
        ReadKind::Scrub,
        ReadKind::Import,
    ];

    /// The kind's name in counter names and the read trace.
    pub const fn name(self) -> &'static str {
        match self {
            ReadKind::Demand => "demand",
            ReadKind::Indirect => "indirect",
            ReadKind::Dnode => "dnode",
            ReadKind::Directory => "directory",
            ReadKind::Pool => "pool",
            ReadKind::Prefetch => "prefetch",
            ReadKind::Rmw => "rmw",
            ReadKind::LogFetch => "logfetch",
            ReadKind::Scrub => "scrub",
            ReadKind::Import => "import",
        }
    }

    pub fn from_name(name: &str) -> Option<ReadKind> {
        ReadKind::ALL.into_iter().find(|k| k.name() == name)
    }

    pub const fn index(self) -> usize {
        self as usize
    }

    /// Whether the block is file data read for a user's request (what the data policy
    /// is about), as against metadata or the pool's own housekeeping.
    pub const fn is_data(self) -> bool {
        matches!(self, ReadKind::Demand | ReadKind::Prefetch | ReadKind::Rmw | ReadKind::LogFetch)
    }
}

/// The logical identity of a record: which object set (dataset), which object, which
/// record. It survives copy-on-write: every version of a page has the same `PageId`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct PageId {
    pub objset: u64,
    pub object: u64,
    pub blkid: u64,
}

/// A read or a write as the cache sees it: what kind, which page, and which object set
/// (dataset) the block belongs to, as far as the caller knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    pub kind: ReadKind,
    pub page: Option<PageId>,
    /// The dataset of the block: a page's, or that of an indirect, dnode or directory
    /// block (the L2ARC's `secondarycache` asks it when the block leaves the ARC).
    /// `None`: the pool's own blocks, or not known.
    pub objset: Option<u64>,
}

impl Access {
    /// An access of `kind` with no page identity (metadata, housekeeping).
    pub const fn of(kind: ReadKind) -> Access {
        Access { kind, page: None, objset: None }
    }

    /// An access of `kind` to a block of dataset `objset` that is not a page (an
    /// indirect block).
    pub const fn in_objset(kind: ReadKind, objset: u64) -> Access {
        Access { kind, page: None, objset: Some(objset) }
    }

    /// An access of `kind` to record `page`.
    pub const fn page(kind: ReadKind, page: PageId) -> Access {
        Access { kind, page: Some(page), objset: Some(page.objset) }
    }

    /// The same access counted under another kind.
    pub const fn as_kind(self, kind: ReadKind) -> Access {
        Access { kind, ..self }
    }
}

/// One counter per read kind.
#[derive(Default)]
pub struct PerKind([AtomicU64; READ_KINDS]);

impl PerKind {
    pub fn add(&self, kind: ReadKind, n: u64) {
        self.0[kind.index()].fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self, kind: ReadKind) -> u64 {
        self.0[kind.index()].load(Ordering::Relaxed)
    }

    /// The values, indexed by `ReadKind::index`.
    pub fn values(&self) -> [u64; READ_KINDS] {
        std::array::from_fn(|i| self.0[i].load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_own_index_and_name() {
        for (i, k) in ReadKind::ALL.into_iter().enumerate() {
            assert_eq!(k.index(), i);
            assert_eq!(ReadKind::from_name(k.name()), Some(k));
        }
    }
}

//! The error log: blocks of the pool no copy of which verified (permanent errors), found
//! by a scrub or by a failed read, and the names of the files they belong to
//! (`tarn pool status -v`, as `zpool status -v`).
//!
//! Theory of operation. A scrub knows where each block it visits lives (dataset, object,
//! level, block id) and logs it so. A failed read knows only the block pointer: the
//! pipeline remembers it (`Zio::take_failed_reads`) and the log keeps it `Unresolved`
//! until someone asks for names, when one walk of the metadata finds which dataset and
//! object point to it (a block no longer pointed to is no longer an error, and leaves
//! the log). As in ZFS, the log is two sets: what was found since the scrub in progress
//! started (or since the last scrub ended), and what was known before it; a scrub that
//! finishes drops the second, so an error repaired or freed since goes away and one
//! still there is found again. `pool clear` empties both. Both sets are kept in the MOS.
//!
//! Owns: `ErrKey`, the two sets, resolving block pointers and objects to names.
//!
//! Promises: an object is named by its path (`tank/db:/dir/file`, found by following
//! its parent links and looking its name up in each directory), or by its number when
//! it has no path any more (`tank/db:<0x1f>`, unlinked); the pool's own root block is
//! `<metadata>:<0x0>`; a dead list's chunk is named by its tree (`tank/db@s1:<dead
//! list>`, `tank/db:<dead list>` for the head's); listing never changes the pool.
//!
//! Must never: hold the log's lock while reading a block, or walk outside a reclaim
//! section (a block it looks at could be freed and reused under it).
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tarn_dataset::{Dataset, ROOT_ID};
use tarn_objects::traverse::{self, Flow, Options, Start, Visit};
use tarn_zio::BlockPtr;

use crate::pool::{Inner, Pool};

/// One block of the error log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ErrKey {
    /// A block of object `object` of dataset `dataset` (dataset 0: the pool's root
    /// block; object 0: the dataset's dnode table).
    Block { dataset: u64, object: u64, level: u8, blkid: u64 },
    /// A block a read failed on, not yet found in the tree.
    Unresolved { vdev: u16, offset: u64, birth: u64 },
}

/// The object number an error-log entry gives a dead-list chunk (no object has it: object
/// numbers stay far below), so the log keeps its one entry shape (FORMAT.md §12).
pub(crate) const DEAD_LIST_OBJECT: u64 = u64::MAX;

impl ErrKey {
    /// A chunk of the dead list of dataset `dataset`'s tree `tree` (0: the head, else the
    /// snapshot's txg), in `blkid`.
    pub(crate) fn dead_list(dataset: u64, tree: u64) -> ErrKey {
        ErrKey::Block { dataset, object: DEAD_LIST_OBJECT, level: 0, blkid: tree }
    }

    fn of_pointer(bp: &BlockPtr) -> ErrKey {
        ErrKey::Unresolved { vdev: bp.vdev, offset: bp.offset, birth: bp.birth }
    }
}

/// The two sets of the log (see the module header).
#[derive(Default)]
pub(crate) struct ErrLog {
    /// Found since the scrub in progress started, or since the last scrub finished.
    pub(crate) current: BTreeSet<ErrKey>,
    /// Known before the scrub in progress started; dropped when it finishes.
    pub(crate) last: BTreeSet<ErrKey>,
}

impl ErrLog {
    pub(crate) fn restore(current: &[ErrKey], last: &[ErrKey]) -> ErrLog {
        ErrLog { current: current.iter().copied().collect(), last: last.iter().copied().collect() }
    }

    /// Every block in the log, once.
    pub(crate) fn all(&self) -> BTreeSet<ErrKey> {
        self.current.union(&self.last).copied().collect()
    }

    /// A scrub starts from the beginning: what is known so far becomes `last`.
    pub(crate) fn scrub_started(&mut self) {
        let current = std::mem::take(&mut self.current);
        self.last.extend(current);
    }

    /// A scrub finished: errors it did not find again are gone.
    pub(crate) fn scrub_finished(&mut self) {
        self.last.clear();
    }

    pub(crate) fn clear(&mut self) {
        self.current.clear();
        self.last.clear();
    }

    /// Replaces `Unresolved` keys by what they resolved to (`None`: the block is no
    /// longer in the tree, so no longer an error).
    fn resolve(&mut self, found: &BTreeMap<ErrKey, Option<ErrKey>>) {
        for set in [&mut self.current, &mut self.last] {
            let stale: Vec<ErrKey> = set.iter().filter(|k| found.contains_key(k)).copied().collect();
            for k in stale {
                set.remove(&k);
                if let Some(Some(resolved)) = found.get(&k) {
                    set.insert(*resolved);
                }
            }
        }
    }
}

impl Inner {
    /// Moves the blocks the pipeline failed to read into the log (as unresolved).
    pub(crate) fn absorb_failed_reads(&self) {
        let failed = self.ctx.zio.take_failed_reads();
        if failed.is_empty() {
            return;
        }
        let mut log = self.errlog.lock();
        log.current.extend(failed.iter().map(ErrKey::of_pointer));
    }

    /// Logs block `bp`, found by a scan with no good copy at `key`; a failed read of
    /// it logged before is now known by its place.
    pub(crate) fn log_error(&self, key: ErrKey, bp: &BlockPtr) {
        let mut log = self.errlog.lock();
        let unresolved = ErrKey::of_pointer(bp);
        log.current.remove(&unresolved);
        log.last.remove(&unresolved);
        log.current.insert(key);
    }
}

/// Finds the dataset, object and place of every unresolved block, in one walk.
struct Resolver {
    dataset: u64,
    wanted: BTreeMap<(u16, u64, u64), ErrKey>,
    found: BTreeMap<ErrKey, Option<ErrKey>>,
}

impl Resolver {
    /// Places the unresolved blocks that are chunks of dataset `id`'s dead lists (a
    /// destroy's read of a chunk fails outside any walk).
    fn dead_lists(&mut self, inner: &Inner, id: u64) {
        let snaps = inner.snaps.read();
        let heads = inner.head_dead.lock();
        let head = heads.get(&id).and_then(Option::as_ref).map(|l| (0, l));
        let lists = snaps.get(&id).into_iter().flatten().filter_map(|s| s.dead.as_ref().map(|l| (s.txg, l)));
        for (tree, list) in head.into_iter().chain(lists) {
            for c in &list.chunks {
                if let Some(key) = self.wanted.remove(&(c.bp.vdev, c.bp.offset, c.bp.birth)) {
                    self.found.insert(key, Some(ErrKey::dead_list(id, tree)));
                }
            }
        }
    }
}

impl traverse::Visitor for Resolver {
    fn block(&mut self, v: &Visit<'_>) -> Flow {
        if let Some(key) = self.wanted.remove(&(v.bp.vdev, v.bp.offset, v.bp.birth)) {
            let place =
                ErrKey::Block { dataset: self.dataset, object: v.object.unwrap_or(0), level: v.level, blkid: v.blkid };
            self.found.insert(key, Some(place));
        }
        if self.wanted.is_empty() {
            Flow::Stop
        } else {
            Flow::Continue
        }
    }
}

impl Pool {
    /// How many blocks the error log holds (`errors: N data errors`).
    pub fn data_errors(&self) -> u64 {
        self.inner.absorb_failed_reads();
        self.inner.errlog.lock().all().len() as u64
    }

    /// The files with permanent errors, by name, each once (`zpool status -v`):
    /// `DATASET:/PATH`, `DATASET:<0xOBJECT>` for an object with no path, `<metadata>:<0x0>`
    /// for the pool's root block.
    pub fn error_files(&self) -> Vec<String> {
        self.inner.absorb_failed_reads();
        self.resolve_failed_reads();
        let keys = self.inner.errlog.lock().all();
        let sets: BTreeMap<u64, (String, Arc<Dataset>)> =
            self.inner.datasets.read().iter().map(|(name, (meta, ds))| (meta.id, (name.clone(), ds.clone()))).collect();
        let snap_names: BTreeMap<(u64, u64), String> = self
            .inner
            .snaps
            .read()
            .iter()
            .flat_map(|(id, list)| list.iter().map(move |s| ((*id, s.txg), s.name.clone())))
            .collect();
        let names: BTreeSet<String> = keys
            .iter()
            .filter_map(|k| match *k {
                ErrKey::Block { dataset, object: DEAD_LIST_OBJECT, blkid: tree, .. } => {
                    Some(describe_dead_list(&sets, &snap_names, dataset, tree))
                }
                ErrKey::Block { dataset, object, .. } => Some(describe(&sets, dataset, object)),
                ErrKey::Unresolved { .. } => None,
            })
            .collect();
        names.into_iter().collect()
    }

    /// Walks the metadata once to place every unresolved block of the log.
    fn resolve_failed_reads(&self) {
        let wanted: BTreeMap<(u16, u64, u64), ErrKey> = {
            let log = self.inner.errlog.lock();
            log.all()
                .into_iter()
                .filter_map(|k| match k {
                    ErrKey::Unresolved { vdev, offset, birth } => Some(((vdev, offset, birth), k)),
                    ErrKey::Block { .. } => None,
                })
                .collect()
        };
        if wanted.is_empty() {
            return;
        }
        let mut r = Resolver { dataset: 0, wanted, found: BTreeMap::new() };
        let zio = &self.inner.ctx.zio;
        {
            // Before the datasets are listed (a destroyed one's blocks are released once
            // the sections open at its commit end).
            let _reclaim = self.inner.ctx.reclaim.reading();
            let datasets: Vec<(u64, Arc<Dataset>)> =
                self.inner.datasets.read().values().map(|(meta, ds)| (meta.id, ds.clone())).collect();
            if let Some(root) = *self.inner.mos_bp.lock() {
                let start = Start::Tree { root, nlevels: 1, object: None };
                traverse::walk(zio, start, Options::default(), &mut r);
            }
            for (id, ds) in datasets {
                if r.wanted.is_empty() {
                    break;
                }
                r.dataset = id;
                let meta = ds.meta_dnode();
                traverse::walk(zio, Start::ObjSet(&meta), Options::default(), &mut r);
                r.dead_lists(&self.inner, id);
            }
        }
        // What the walk did not find is no longer pointed to.
        for key in r.wanted.into_values() {
            r.found.insert(key, None);
        }
        self.inner.errlog.lock().resolve(&r.found);
    }
}

/// The name `status -v` shows for a chunk of the dead list of tree `tree` (0: the head,
/// else a snapshot's txg) of dataset `dataset`.
fn describe_dead_list(
    sets: &BTreeMap<u64, (String, Arc<Dataset>)>,
    snap_names: &BTreeMap<(u64, u64), String>,
    dataset: u64,
    tree: u64,
) -> String {
    let name = sets.get(&dataset).map_or_else(|| format!("<{dataset:#x}>"), |(name, _)| name.clone());
    match (tree, snap_names.get(&(dataset, tree))) {
        (0, _) => format!("{name}:<dead list>"),
        (_, Some(snap)) => format!("{name}@{snap}:<dead list>"),
        (_, None) => format!("{name}@<txg {tree}>:<dead list>"),
    }
}

/// The name `status -v` shows for object `object` of dataset `dataset`.
fn describe(sets: &BTreeMap<u64, (String, Arc<Dataset>)>, dataset: u64, object: u64) -> String {
    if dataset == 0 {
        return format!("<metadata>:<{object:#x}>");
    }
    let Some((name, ds)) = sets.get(&dataset) else {
        return format!("<{dataset:#x}>:<{object:#x}>");
    };
    match path_of(ds, object) {
        Some(path) => format!("{name}:{path}"),
        None => format!("{name}:<{object:#x}>"),
    }
}

/// Longest chain of parents followed (a loop in damaged metadata must end).
const MAX_DEPTH: usize = 4096;

/// The path of `object` from the dataset's root, following parent links and finding
/// the name in each parent; `None` if it has none (unlinked, or a directory on the way
/// cannot be read).
fn path_of(ds: &Dataset, object: u64) -> Option<String> {
    if object == 0 {
        return None;
    }
    let mut names: Vec<String> = Vec::new();
    let mut cur = object;
    while cur != ROOT_ID {
        if names.len() >= MAX_DEPTH {
            return None;
        }
        let parent = ds.parent_of(cur).ok()?;
        let entries = ds.readdir(parent).ok()?;
        let (name, _, _) = entries.into_iter().find(|(_, ino, _)| *ino == cur)?;
        names.push(String::from_utf8_lossy(&name).into_owned());
        cur = parent;
    }
    names.reverse();
    Some(format!("/{}", names.join("/")))
}

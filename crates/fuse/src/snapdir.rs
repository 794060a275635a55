//! The `.tarn/snapshot` directory of a mount (ZFS's `.zfs/snapshot`): every snapshot of
//! the mounted dataset as a read-only directory, `MOUNT/.tarn/snapshot/NAME/`, for
//! file-level restores. `.tarn` is left out of the root's listing unless the dataset
//! says `snapdir=visible`, and can be looked up either way.
//!
//! Inode numbers: the mounted dataset's objects keep their ids (tree 0, so the page read
//! path only tests the top bits); `.tarn` and `.tarn/snapshot` are tree 1; the objects of
//! the n-th snapshot opened through this mount are tree n + 2 (`tree << 48 | object`).
//! A snapshot keeps its tree for the life of the mount.
//!
//! Owns: that numbering and the snapshots opened through the mount.
//! Promises: nothing under `.tarn` can be changed (EROFS); a name that is not a snapshot
//! of the dataset is ENOENT, and so is every inode of a snapshot once it is destroyed.
//! Must never: take a lock on the head's read path, or hand a snapshot's object id to the
//! kernel without its tree.
use std::sync::Arc;

use parking_lot::RwLock;
use tarn_dataset::{Attr, Dataset, FileKind, FsError, Timespec};
use tarn_pool::{Pool, Reading};

/// Bits of an inode number that hold the object id.
const TREE_SHIFT: u32 = 48;
/// Tree 1: the directories this module makes up.
const VIRTUAL: u64 = 1;
/// `.tarn`.
pub(crate) const CTL_DIR: u64 = VIRTUAL << TREE_SHIFT | 1;
/// `.tarn/snapshot`.
pub(crate) const SNAP_DIR: u64 = VIRTUAL << TREE_SHIFT | 2;
pub(crate) const CTL_NAME: &[u8] = b".tarn";
pub(crate) const SNAP_NAME: &[u8] = b"snapshot";
/// The first tree of a snapshot.
const FIRST_SNAP_TREE: u64 = 2;

/// The tree an inode number belongs to (0: the mounted dataset itself).
pub(crate) fn tree_of(ino: u64) -> u64 {
    ino >> TREE_SHIFT
}

/// The inode number of `object` in `tree`.
pub(crate) fn encode(tree: u64, object: u64) -> u64 {
    debug_assert!(object >> TREE_SHIFT == 0, "object id {object} does not fit the inode's object bits");
    tree << TREE_SHIFT | object
}

/// What an inode number outside the mounted dataset names.
pub(crate) enum Node<'a> {
    /// `.tarn` or `.tarn/snapshot`.
    Virtual(u64),
    /// Object `object` of a snapshot, reached through tree `tree`. `_section` is the
    /// reclaim section the snapshot was found current in: use the node inside it, so a
    /// destroy that frees the snapshot's blocks meanwhile cannot release them under it.
    Snapshot { tree: u64, ds: Arc<Dataset>, object: u64, _section: Reading<'a> },
}

pub(crate) struct SnapDir {
    pool: Arc<Pool>,
    dataset: String,
    /// Snapshots opened through this mount: (`DS@NAME`, contents); index + 2 is the tree.
    opened: RwLock<Vec<(String, Arc<Dataset>)>>,
}

impl SnapDir {
    pub(crate) fn new(pool: Arc<Pool>, dataset: &str) -> SnapDir {
        SnapDir { pool, dataset: dataset.to_string(), opened: RwLock::new(Vec::new()) }
    }

    /// What `ino` (of a tree other than 0) names.
    pub(crate) fn node(&self, ino: u64) -> Result<Node<'_>, FsError> {
        let tree = tree_of(ino);
        let object = ino & ((1 << TREE_SHIFT) - 1);
        if tree == VIRTUAL {
            return match ino {
                CTL_DIR | SNAP_DIR => Ok(Node::Virtual(ino)),
                _ => Err(FsError::NotFound),
            };
        }
        let slot = tree.checked_sub(FIRST_SNAP_TREE).ok_or(FsError::NotFound)? as usize;
        let opened = self.opened.read();
        let (full, ds) = opened.get(slot).ok_or(FsError::NotFound)?;
        // A destroyed snapshot's blocks may be in use again: never read through it. The
        // section opens before the check, so "current" holds for as long as the node lives.
        let section = self.pool.reading();
        if !self.pool.snapshot_is_current(full, ds) {
            return Err(FsError::NotFound);
        }
        Ok(Node::Snapshot { tree, ds: ds.clone(), object, _section: section })
    }

    /// The snapshot `name` of the mounted dataset: its tree and contents.
    pub(crate) fn snapshot(&self, name: &[u8]) -> Result<(u64, Arc<Dataset>), FsError> {
        let name = std::str::from_utf8(name).map_err(|_| FsError::NotFound)?;
        let full = format!("{}@{name}", self.dataset);
        let ds = self.pool.snapshot_dataset(&full).map_err(|_| FsError::NotFound)?;
        if let Some(i) = self.opened.read().iter().position(|(n, d)| *n == full && Arc::ptr_eq(d, &ds)) {
            return Ok((i as u64 + FIRST_SNAP_TREE, ds));
        }
        let mut opened = self.opened.write();
        opened.push((full, ds.clone()));
        Ok((opened.len() as u64 - 1 + FIRST_SNAP_TREE, ds))
    }

    /// Names of the dataset's snapshots, oldest first.
    pub(crate) fn names(&self) -> Vec<String> {
        self.pool.snapshot_names(&self.dataset).unwrap_or_default()
    }

    /// Whether the root's listing shows `.tarn` (`snapdir=visible`).
    pub(crate) fn visible(&self, head: &Dataset) -> bool {
        head.effective().snapdir_visible
    }
}

/// The attributes of `.tarn` or `.tarn/snapshot`: a read-only directory.
pub(crate) fn virtual_attr(ino: u64) -> Attr {
    let epoch = Timespec { sec: 0, nsec: 0 };
    Attr {
        ino,
        kind: FileKind::Dir,
        size: 0,
        mode: libc::S_IFDIR | 0o555,
        uid: 0,
        gid: 0,
        nlink: 2,
        atime: epoch,
        mtime: epoch,
        ctime: epoch,
        crtime: epoch,
        rdev: 0,
        blksize: 4096,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use tarn_dataset::{NewObject, ROOT_ID};
    use tarn_pool::{CreateOptions, VdevSpec};

    use super::*;

    /// A node found current keeps the snapshot's blocks: a destroy that frees them cannot
    /// finish (its txg cannot release them for reuse) until the node is dropped, so a read
    /// through it never meets a block written since. Before the node held its section, the
    /// destroy finished at once and the read went to freed blocks.
    #[test]
    fn a_destroy_waits_for_a_node_found_current() {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = CreateOptions { size: Some(256 << 20), ..Default::default() };
        let pool = Pool::create("tank", &[VdevSpec::Disk(dir.path().join("d0.img"))], &opts).expect("create pool");
        pool.create_dataset("tank/db").expect("create dataset");
        let head = pool.dataset("tank/db").expect("open dataset");
        let file = head.create(ROOT_ID, b"f", NewObject::File, 0o644, 0, 0).expect("create file").ino;
        head.write(file, 0, &[7u8; 64 << 10]).expect("write");
        pool.create_snapshots(&["tank/db@s".into()], false).expect("snapshot");
        // Overwritten in the head: the snapshot alone holds the old blocks, the destroy frees them.
        head.write(file, 0, &[9u8; 64 << 10]).expect("overwrite");
        let pool = Arc::new(pool);
        let snapdir = SnapDir::new(pool.clone(), "tank/db");
        let (tree, _) = snapdir.snapshot(b"s").expect("open snapshot");

        let node = snapdir.node(encode(tree, file)).expect("the snapshot is current");
        let (done_tx, done) = mpsc::channel();
        let destroyer = {
            let pool = pool.clone();
            std::thread::spawn(move || {
                let result = pool.destroy_snapshot("tank/db@s");
                let _ = done_tx.send(());
                result
            })
        };
        assert_eq!(
            done.recv_timeout(Duration::from_secs(2)),
            Err(mpsc::RecvTimeoutError::Timeout),
            "the destroy finished while a node found current was still in use"
        );
        let Node::Snapshot { ds, object, .. } = &node else { panic!("not a snapshot node") };
        let mut buf = vec![0u8; 64 << 10];
        let n = ds.read(*object, 0, &mut buf).expect("read through the held node");
        assert!(n == buf.len() && buf.iter().all(|&b| b == 7), "the held node read other bytes");
        drop(node);
        done.recv_timeout(Duration::from_secs(60)).expect("the destroy finishes once the node is dropped");
        destroyer.join().expect("destroy thread").expect("destroy");
        assert!(matches!(snapdir.node(encode(tree, file)), Err(FsError::NotFound)));
    }
}

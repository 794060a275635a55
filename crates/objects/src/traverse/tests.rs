//! Tests of the walk: every block once, skips and stops, bad dnodes, bad mirror sides,
//! blocks with no good copy.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

use tarn_vdev::{BlockDevice, FileDevice, Leaf, TopVdev, VdevTree, DATA_START};
use tarn_zio::{CachePolicy, ChecksumKind, Compression, PendingBlock};

use super::*;
use crate::dnode::{ObjType, DNODE_VERSION};
use crate::tree::{BlockTree, FANOUT};

const DNODE_BLOCK: usize = 16384;

/// A pipeline over one image file, or a mirror of two.
fn zio(dir: &tempfile::TempDir, sides: usize) -> (Zio, Vec<PathBuf>) {
    let paths: Vec<PathBuf> = (0..sides).map(|i| dir.path().join(format!("d{i}.img"))).collect();
    let leaves: Vec<Leaf> = paths
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let dev = FileDevice::open_or_create(p, Some(16 << 20)).unwrap();
            Leaf::new(i as u64 + 1, p.display().to_string(), Some(Arc::new(dev) as Arc<dyn BlockDevice>))
        })
        .collect();
    let asize = TopVdev::asize_of(16 << 20, 12);
    let zio = Zio::new(VdevTree::new(vec![TopVdev::new(0, 9, 12, asize, leaves)], 12));
    zio.finish_load();
    (zio, paths)
}

fn write(zio: &Zio, data: &[u8], block_type: BlockType) -> BlockPtr {
    let block = PendingBlock {
        data,
        compression: Compression::Off,
        checksum: ChecksumKind::Xxh3,
        level: 0,
        block_type,
        cache: CachePolicy::None,
        page: None,
        objset: None,
        stored: None,
    };
    zio.write_blocks(&[block], 1).unwrap()[0]
}

/// A tree over `records` (blkid -> pointer); returns (root, nlevels).
fn tree(zio: &Zio, records: &[(u64, BlockPtr)]) -> (Option<BlockPtr>, u8) {
    let mut t = BlockTree::new(None, 0, None);
    for &(blkid, bp) in records {
        t.set(zio, blkid, Some(bp)).unwrap();
    }
    t.sync(zio, 1, ChecksumKind::Xxh3, CachePolicy::None, &mut Vec::new()).unwrap();
    (t.root(), t.nlevels())
}

/// A small object set: object 1 a file of three records across two indirect levels
/// (blkids 0, 1 and 600), object 2 a file of one record, object 3 a free slot, object 4
/// an empty directory, object 70 a file of one record (in the dnode table's second
/// block, so the table has an indirect block too). Returns the table's dnode and every
/// data record written, as (object, blkid) -> pointer.
struct Set {
    meta: Dnode,
    records: BTreeMap<(u64, u64), BlockPtr>,
}

fn object_set(zio: &Zio) -> Set {
    let mut records = BTreeMap::new();
    let mut dnodes: Vec<(u64, Dnode)> = Vec::new();
    for (obj, blkids) in [(1u64, vec![0u64, 1, 600]), (2, vec![0]), (70, vec![0])] {
        let recs: Vec<(u64, BlockPtr)> =
            blkids.iter().map(|&b| (b, write(zio, &vec![(obj * 7 + b) as u8; 4096], BlockType::Data))).collect();
        records.extend(recs.iter().map(|&(b, bp)| ((obj, b), bp)));
        let (root, nlevels) = tree(zio, &recs);
        let mut d = Dnode::new(ObjType::File, 4096, 0o644, 1);
        (d.root, d.nlevels) = (root, nlevels);
        dnodes.push((obj, d));
    }
    dnodes.push((4, Dnode::new(ObjType::Dir, 4096, 0o755, 1)));
    let mut blocks = vec![vec![0u8; DNODE_BLOCK]; 2];
    for (id, d) in &dnodes {
        let at = (*id as usize * DNODE_SIZE) % DNODE_BLOCK;
        d.encode(&mut blocks[*id as usize * DNODE_SIZE / DNODE_BLOCK][at..]);
    }
    let table: Vec<(u64, BlockPtr)> =
        blocks.iter().enumerate().map(|(i, b)| (i as u64, write(zio, b, BlockType::Dnodes))).collect();
    let (root, nlevels) = tree(zio, &table);
    let mut meta = Dnode::new(ObjType::Meta, DNODE_BLOCK as u32, 0, 0);
    (meta.root, meta.nlevels) = (root, nlevels);
    Set { meta, records }
}

/// One visit, as the tests look at it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Seen {
    object: Option<u64>,
    level: u8,
    blkid: u64,
    offset: u64,
    read: bool,
    bad_copies: u32,
    failed: bool,
}

fn walk_all(zio: &Zio, start: Start, opts: Options) -> Vec<Seen> {
    let mut seen = Vec::new();
    let walked = walk(zio, start, opts, &mut |v: &Visit| {
        let (read, bad_copies, failed) = match v.outcome {
            Outcome::NotRead => (false, 0, false),
            Outcome::Verified { bad_copies, .. } => (true, bad_copies, false),
            Outcome::Failed(_) => (false, 0, true),
        };
        assert_eq!(v.level, v.bp.level, "the walk's level is the block's own");
        seen.push(Seen {
            object: v.object,
            level: v.level,
            blkid: v.blkid,
            offset: v.bp.offset,
            read,
            bad_copies,
            failed,
        });
        Flow::Continue
    });
    assert_eq!(walked, Walked::Completed);
    seen
}

#[test]
fn every_block_of_a_small_object_set_is_visited_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let (zio, _) = zio(&dir, 1);
    let set = object_set(&zio);
    let seen = walk_all(&zio, Start::ObjSet(&set.meta), Options::default());
    let offsets: BTreeSet<u64> = seen.iter().map(|s| s.offset).collect();
    assert_eq!(offsets.len(), seen.len(), "no block is visited twice: {seen:#?}");
    // The table: one indirect block and two dnode blocks. Object 1: a level-2 top,
    // two level-1 blocks, three records. Objects 2 and 70: one record each.
    let shape: BTreeSet<(Option<u64>, u8, u64)> = seen.iter().map(|s| (s.object, s.level, s.blkid)).collect();
    let want: BTreeSet<(Option<u64>, u8, u64)> = [
        (Some(0), 1, 0),
        (Some(0), 0, 0),
        (Some(0), 0, 1),
        (Some(1), 2, 0),
        (Some(1), 1, 0),
        (Some(1), 1, 1),
        (Some(1), 0, 0),
        (Some(1), 0, 1),
        (Some(1), 0, 600),
        (Some(2), 0, 0),
        (Some(70), 0, 0),
    ]
    .into();
    assert_eq!((shape, seen.len()), (want, 11));
    for ((obj, blkid), bp) in &set.records {
        let s = seen.iter().find(|s| s.offset == bp.offset).expect("every record is visited");
        assert_eq!((s.object, s.level, s.blkid), (Some(*obj), 0, *blkid));
    }
    assert!(seen.iter().all(|s| s.read == (s.level > 0 || s.object == Some(0))), "data is not read unless asked");
    let read_all = walk_all(&zio, Start::ObjSet(&set.meta), Options { read_data: true, all_copies: false });
    assert!(read_all.iter().all(|s| s.read && !s.failed));
}

#[test]
fn objects_can_be_skipped_and_the_walk_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let (zio, _) = zio(&dir, 1);
    let set = object_set(&zio);

    struct SkipOne(Vec<u64>, Vec<Option<u64>>);
    impl Visitor for SkipOne {
        fn block(&mut self, v: &Visit<'_>) -> Flow {
            self.1.push(v.object);
            Flow::Continue
        }
        fn object(&mut self, id: u64, _: &Dnode) -> Flow {
            self.0.push(id);
            if id == 1 {
                Flow::Skip
            } else {
                Flow::Continue
            }
        }
    }
    let mut v = SkipOne(Vec::new(), Vec::new());
    assert_eq!(walk(&zio, Start::ObjSet(&set.meta), Options::default(), &mut v), Walked::Completed);
    assert_eq!(v.0, vec![1, 2, 4, 70], "every live object is offered, the free slot is not");
    assert!(!v.1.contains(&Some(1)), "a skipped object's blocks are not visited");
    assert_eq!(v.1.len(), 5);

    let mut visits = 0;
    let walked = walk(&zio, Start::ObjSet(&set.meta), Options::default(), &mut |v: &Visit| {
        visits += 1;
        if v.object == Some(1) {
            Flow::Stop
        } else {
            Flow::Continue
        }
    });
    assert_eq!((walked, visits), (Walked::Stopped, 3), "the walk ends at the first block of object 1");
}

#[test]
fn enter_skips_a_block_and_its_subtree_before_reading_it() {
    let dir = tempfile::tempdir().unwrap();
    let (zio, _) = zio(&dir, 1);
    let set = object_set(&zio);

    /// Skips object 1's level-1 block 0 (records 0 and 1), stops at object 70.
    struct Pruner(Vec<(Option<u64>, u8, u64)>);
    impl Visitor for Pruner {
        fn enter(&mut self, b: &Entering<'_>) -> Flow {
            match (b.object, b.level, b.blkid) {
                (Some(1), 1, 0) => Flow::Skip,
                (Some(70), _, _) => Flow::Stop,
                _ => Flow::Continue,
            }
        }
        fn block(&mut self, v: &Visit<'_>) -> Flow {
            self.0.push((v.object, v.level, v.blkid));
            Flow::Continue
        }
    }
    let mut p = Pruner(Vec::new());
    let walked = walk(&zio, Start::ObjSet(&set.meta), Options::default(), &mut p);
    assert_eq!(walked, Walked::Stopped);
    assert!(p.0.contains(&(Some(1), 0, 600)));
    assert!(
        !p.0.iter().any(|&(o, l, b)| o == Some(1) && l <= 1 && b <= 1 && (l, b) != (1, 1)),
        "nothing under the skipped block is visited: {:?}",
        p.0
    );
    assert!(!p.0.iter().any(|&(o, _, _)| o == Some(70)));
    assert_eq!(crate::tree::span(1), FANOUT);
}

#[test]
fn a_dnode_of_a_newer_format_goes_to_bad_dnode() {
    let dir = tempfile::tempdir().unwrap();
    let (zio, _) = zio(&dir, 1);
    let mut block = vec![0u8; DNODE_BLOCK];
    Dnode::new(ObjType::File, 4096, 0o644, 1).encode(&mut block[DNODE_SIZE..]);
    block[DNODE_SIZE + 2] = DNODE_VERSION + 1;
    let (root, nlevels) = tree(&zio, &[(0, write(&zio, &block, BlockType::Dnodes))]);
    let mut meta = Dnode::new(ObjType::Meta, DNODE_BLOCK as u32, 0, 0);
    (meta.root, meta.nlevels) = (root, nlevels);

    struct Bad(Vec<(u64, DnodeError)>);
    impl Visitor for Bad {
        fn block(&mut self, _: &Visit<'_>) -> Flow {
            Flow::Continue
        }
        fn bad_dnode(&mut self, id: u64, error: &DnodeError) -> Flow {
            self.0.push((id, error.clone()));
            Flow::Continue
        }
    }
    let mut v = Bad(Vec::new());
    walk(&zio, Start::ObjSet(&meta), Options::default(), &mut v);
    assert_eq!(v.0, vec![(1, DnodeError::UnsupportedVersion { found: DNODE_VERSION + 1, supported: DNODE_VERSION })]);
}

#[test]
fn verifying_all_copies_reports_a_corrupted_mirror_side_and_repairs_it() {
    let dir = tempfile::tempdir().unwrap();
    let (zio, sides) = zio(&dir, 2);
    let set = object_set(&zio);
    let damaged = set.records[&(1, 600)];
    let side1 = std::fs::OpenOptions::new().write(true).open(&sides[1]).unwrap();
    side1.write_all_at(&[0xee; 64], DATA_START + damaged.offset + 10).unwrap();

    let opts = Options { read_data: true, all_copies: true };
    let seen = walk_all(&zio, Start::ObjSet(&set.meta), opts);
    let bad: Vec<&Seen> = seen.iter().filter(|s| s.bad_copies > 0).collect();
    assert_eq!(bad.len(), 1, "exactly the damaged block has a bad copy: {seen:#?}");
    assert_eq!((bad[0].offset, bad[0].bad_copies, bad[0].failed), (damaged.offset, 1, false));
    assert_eq!(zio.vdevs.tops[0].leaves[1].status().checksum_errors, 1, "the bad side is counted");
    let again = walk_all(&zio, Start::ObjSet(&set.meta), opts);
    assert!(again.iter().all(|s| s.bad_copies == 0), "the bad side was rewritten from the good one");
}

#[test]
fn a_block_with_no_good_copy_is_visited_as_failed_and_its_children_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let (zio, sides) = zio(&dir, 1);
    let set = object_set(&zio);
    let record = set.records[&(2, 0)];
    let lone = walk_all(
        &zio,
        Start::Tree { root: record, nlevels: 1, object: None },
        Options { read_data: true, all_copies: false },
    );
    assert_eq!(lone.len(), 1);
    assert_eq!((lone[0].object, lone[0].read), (None, true));

    // Damage the dnode table's second block: object 70 cannot be found any more.
    let seen = walk_all(&zio, Start::ObjSet(&set.meta), Options::default());
    let table_block = seen.iter().find(|s| s.object == Some(0) && s.level == 0 && s.blkid == 1).unwrap().offset;
    let dev = std::fs::OpenOptions::new().write(true).open(&sides[0]).unwrap();
    dev.write_all_at(&[0xee; 64], DATA_START + table_block).unwrap();
    let seen = walk_all(&zio, Start::ObjSet(&set.meta), Options::default());
    let failed: Vec<&Seen> = seen.iter().filter(|s| s.failed).collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].offset, table_block);
    assert!(!seen.iter().any(|s| s.object == Some(70)), "what a failed block points to is unknown");
    assert_eq!(seen.len(), 10);
}

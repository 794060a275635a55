//! Unit tests of one object set on a temporary image: the data path against a model, early
//! writes and their adoption, what a sync reports to free, and the lock-order assert.
//!
//! The txg engine here never syncs on its own: the tests quiesce and sync the object set
//! themselves, as the pool's sync thread would (without writing an uberblock).
use std::path::Path;
use std::sync::Arc;

use crate::Reclaim;
use proptest::prelude::*;
use tarn_txg::{TxgConfig, TxgEngine};
use tarn_vdev::{BlockDevice, FileDevice, Leaf, TopVdev, VdevTree};
use tarn_zio::{BlockPtr, CachePolicy, ChecksumKind, Compression, Zio};

use crate::{Ctx, Dnode, EarlyData, ObjSet, ObjType, Object, SyncPolicy, SyncResult};

const ASHIFT: u32 = 12;

/// A context over one 64 MiB image file in `dir`.
fn ctx(dir: &Path) -> Arc<Ctx> {
    let path = dir.join("objects.img");
    let dev = FileDevice::open_or_create(&path, Some(64 << 20)).expect("image file");
    let asize = TopVdev::asize_of(dev.size(), ASHIFT);
    let leaf = Leaf::new(1, path.display().to_string(), Some(Arc::new(dev)));
    let zio = Arc::new(Zio::new(VdevTree::new(vec![TopVdev::new(0, 2, ASHIFT, asize, vec![leaf])], ASHIFT)));
    zio.finish_load();
    Arc::new(Ctx { zio, txg: Arc::new(TxgEngine::new(0, TxgConfig::default())), reclaim: Reclaim::new() })
}

fn policy() -> SyncPolicy {
    SyncPolicy { compression: Compression::Lz4, checksum: ChecksumKind::Xxh3, cache: CachePolicy::All }
}

/// Quiesces and syncs txg `txg`, then frees what the sync returned, as the pool does.
fn sync(os: &ObjSet, txg: u64) -> SyncResult {
    os.quiesce(txg).expect("quiesce");
    let r = os.sync(txg, policy()).expect("sync");
    for bp in r.blocks_to_free() {
        os.ctx().zio.free(bp);
    }
    os.ctx().zio.release_deferred();
    r
}

fn new_file(os: &ObjSet, txg: u64) -> Arc<Object> {
    os.alloc(Dnode::new(ObjType::File, 512, 0o100644, txg)).into_object()
}

fn read_all(os: &ObjSet, obj: &Object, len: usize) -> Vec<u8> {
    let mut buf = vec![0xEE; len + 100];
    let n = obj.lock().read(os.ctx(), 0, &mut buf, CachePolicy::All).expect("read");
    buf.truncate(n);
    buf
}

fn bytes(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add((i * 7 % 251) as u8)).collect()
}

/// The pointer of record `blkid` in the object's tree, as of its last sync.
fn tree_block(os: &ObjSet, obj: &Object, blkid: u64) -> Option<BlockPtr> {
    obj.lock().tree.get(&os.ctx().zio, blkid).expect("tree read")
}

#[derive(Clone, Debug)]
enum Op {
    Write { off: u64, len: usize, seed: u8 },
    Truncate { size: u64 },
    Punch { off: u64, len: u64 },
    Sync,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..40_000, 1usize..12_000, any::<u8>()).prop_map(|(off, len, seed)| Op::Write { off, len, seed }),
        1 => (0u64..45_000).prop_map(|size| Op::Truncate { size }),
        1 => (0u64..40_000, 1u64..20_000).prop_map(|(off, len)| Op::Punch { off, len }),
        1 => Just(Op::Sync),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Writes, truncates and holes on one file (4 KiB records), with syncs in between:
    /// every read returns what a plain byte vector says the file holds.
    #[test]
    fn one_object_reads_back_what_a_byte_vector_model_holds(ops in proptest::collection::vec(op(), 1..30)) {
        let dir = tempfile::tempdir().unwrap();
        let os = ObjSet::open(ctx(dir.path()), 1, None, 1);
        let mut txg = 1;
        let obj = new_file(&os, txg);
        let mut model: Vec<u8> = Vec::new();
        for op in &ops {
            match *op {
                Op::Write { off, len, seed } => {
                    let data = bytes(seed, len);
                    obj.lock().write(&os.ctx().zio, txg, off, &data, 4096).unwrap();
                    let end = off as usize + len;
                    if model.len() < end {
                        model.resize(end, 0);
                    }
                    model[off as usize..end].copy_from_slice(&data);
                }
                Op::Truncate { size } => {
                    let mut st = obj.lock();
                    st.fit_block_size(&os.ctx().zio, size, 4096).unwrap();
                    st.truncate(&os.ctx().zio, txg, size).unwrap();
                    model.resize(size as usize, 0);
                }
                Op::Punch { off, len } => {
                    obj.lock().punch_hole(&os.ctx().zio, txg, off, len).unwrap();
                    let end = (off + len).min(model.len() as u64) as usize;
                    if (off as usize) < end {
                        model[off as usize..end].fill(0);
                    }
                }
                Op::Sync => {
                    sync(&os, txg);
                    txg += 1;
                }
            }
            os.mark_dirty(obj.id());
            prop_assert_eq!(obj.lock().dnode().size, model.len() as u64, "size after {:?}", op);
            prop_assert!(read_all(&os, &obj, model.len()) == model, "contents after {:?}", op);
        }
        sync(&os, txg);
        prop_assert!(read_all(&os, &obj, model.len()) == model, "contents after the last sync");
    }
}

/// An early write of an unchanged record is adopted by the sync: the tree points at that
/// very block, nothing is written twice, nothing is orphaned.
#[test]
fn an_unchanged_record_written_early_is_adopted_by_the_sync() {
    let dir = tempfile::tempdir().unwrap();
    let os = ObjSet::open(ctx(dir.path()), 1, None, 1);
    let obj = new_file(&os, 1);
    let data = bytes(3, 16384);
    obj.lock().write(&os.ctx().zio, 1, 0, &data, 16384).unwrap();
    let early = os.write_early(obj.id(), 1, 100, 200, true, policy()).unwrap();
    let EarlyData::InPlace { block_offset: 0, bp } = early else { panic!("expected an early write, got {early:?}") };
    assert_eq!(bp.birth, 1);
    assert_eq!(
        os.write_early(obj.id(), 1, 4000, 10, true, policy()).unwrap(),
        EarlyData::InPlace { block_offset: 0, bp },
        "a second fsync of the unchanged record reuses the block"
    );
    let r = sync(&os, 1);
    assert!(r.orphans.is_empty(), "nothing to orphan: {:?}", r.orphans);
    assert_eq!(tree_block(&os, &obj, 0), Some(bp), "the tree adopted the early block");
    assert!(!r.freed.contains(&bp));
    assert_eq!(read_all(&os, &obj, data.len()), data);
}

/// A record changed after its early write is written again by the sync; the early block
/// is returned as an orphan for the caller to free, and never freed by objects itself.
#[test]
fn a_record_changed_after_its_early_write_leaves_an_orphan_to_free() {
    let dir = tempfile::tempdir().unwrap();
    let os = ObjSet::open(ctx(dir.path()), 1, None, 1);
    let obj = new_file(&os, 1);
    obj.lock().write(&os.ctx().zio, 1, 0, &bytes(4, 16384), 16384).unwrap();
    let EarlyData::InPlace { bp, .. } = os.write_early(obj.id(), 1, 0, 16384, true, policy()).unwrap() else {
        panic!("expected an early write")
    };
    obj.lock().write(&os.ctx().zio, 1, 5, b"changed", 16384).unwrap();
    os.quiesce(1).unwrap();
    let r = os.sync(1, policy()).unwrap();
    assert_eq!(r.orphans, vec![bp], "the early block is an orphan");
    assert_ne!(tree_block(&os, &obj, 0), Some(bp), "the sync wrote the changed record");
    assert!(r.blocks_to_free().any(|b| *b == bp));
    assert_eq!(os.ctx().zio.deferred_bytes(), 0, "objects freed nothing itself");
    let mut want = bytes(4, 16384);
    want[5..12].copy_from_slice(b"changed");
    assert_eq!(read_all(&os, &obj, want.len()), want);
}

/// Asked without an early write, the log gets a copy of the bytes as of their txg.
#[test]
fn without_an_early_write_the_log_gets_the_bytes_as_of_their_txg() {
    let dir = tempfile::tempdir().unwrap();
    let os = ObjSet::open(ctx(dir.path()), 1, None, 1);
    let obj = new_file(&os, 1);
    let data = bytes(5, 16384);
    obj.lock().write(&os.ctx().zio, 1, 0, &data, 16384).unwrap();
    let copied = os.write_early(obj.id(), 1, 10, 20, false, policy()).unwrap();
    assert_eq!(copied, EarlyData::Copied(data[10..30].to_vec()));
    os.quiesce(1).unwrap();
    obj.lock().write(&os.ctx().zio, 2, 10, b"txg two", 16384).unwrap(); // a newer txg's change
    let syncing = os.write_early(obj.id(), 1, 10, 20, false, policy()).unwrap();
    assert_eq!(syncing, EarlyData::Copied(data[10..30].to_vec()), "txg 1 is syncing: its bytes, copied");
    assert_eq!(os.write_early(9999, 1, 0, 1, true, policy()).unwrap(), EarlyData::Committed, "no such object");
}

/// A record whose txg is syncing is written anew for the log (ZFS's late arrival), as
/// that txg sees it, never copied into memory; no tree adopts the block, and the sync of
/// that txg returns it as an orphan (the log needs it only until the txg commits).
#[test]
fn a_record_of_a_syncing_txg_is_written_late_and_orphaned_by_its_sync() {
    let dir = tempfile::tempdir().unwrap();
    let os = ObjSet::open(ctx(dir.path()), 1, None, 1);
    let obj = new_file(&os, 1);
    let data = bytes(6, 16384);
    obj.lock().write(&os.ctx().zio, 1, 0, &data, 16384).unwrap();
    os.quiesce(1).unwrap();
    obj.lock().write(&os.ctx().zio, 2, 10, b"txg two", 16384).unwrap(); // a newer txg's change
    let late = os.write_early(obj.id(), 1, 100, 200, true, policy()).unwrap();
    let EarlyData::InPlace { block_offset: 0, bp } = late else { panic!("expected a late block, got {late:?}") };
    assert!(os.ctx().zio.read_from_devices(&bp).unwrap() == data, "the block holds txg 1's record");
    let r = os.sync(1, policy()).unwrap();
    assert_eq!(r.orphans, vec![bp], "the late block is an orphan of its txg's sync");
    assert_ne!(tree_block(&os, &obj, 0), Some(bp), "no tree adopts a late block");
}

/// Once the txg's own sync has written the record (the txg is not yet committed), the log
/// points at that block: nothing is written or copied again.
#[test]
fn a_record_its_txg_already_wrote_is_logged_as_that_block() {
    let dir = tempfile::tempdir().unwrap();
    let os = ObjSet::open(ctx(dir.path()), 1, None, 1);
    let obj = new_file(&os, 1);
    obj.lock().write(&os.ctx().zio, 1, 0, &bytes(7, 16384), 16384).unwrap();
    os.quiesce(1).unwrap();
    let r = os.sync(1, policy()).unwrap(); // written, not committed: the engine says 0
    let synced = tree_block(&os, &obj, 0).expect("txg 1 wrote the record");
    let early = os.write_early(obj.id(), 1, 0, 16384, true, policy()).unwrap();
    assert_eq!(early, EarlyData::InPlace { block_offset: 0, bp: synced });
    assert!(r.orphans.is_empty());
    assert!(os.sync(2, policy()).unwrap().orphans.is_empty(), "no block was written for the log");
}

/// A sync reports every block it no longer needs: the records it replaced, the records
/// and indirect blocks a truncate cut off, and everything of a freed object.
#[test]
fn a_sync_reports_every_block_it_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let os = ObjSet::open(ctx(dir.path()), 1, None, 1);
    let obj = new_file(&os, 1);
    obj.lock().write(&os.ctx().zio, 1, 0, &bytes(6, 3 * 4096), 4096).unwrap();
    sync(&os, 1);
    let before: Vec<BlockPtr> = (0..3).map(|b| tree_block(&os, &obj, b).expect("a record")).collect();
    let root_before = obj.lock().dnode().root.expect("a root");

    obj.lock().write(&os.ctx().zio, 2, 4096, &bytes(7, 4096), 4096).unwrap(); // record 1 rewritten
    obj.lock().truncate(&os.ctx().zio, 2, 4096).unwrap(); // records 1 and 2 cut off
    os.mark_dirty(obj.id());
    let r = sync(&os, 2);
    for (blkid, bp) in before.iter().enumerate().skip(1) {
        assert!(r.freed.contains(bp), "record {blkid}'s old block is reported: {:?}", r.freed);
    }
    assert!(r.freed.contains(&root_before), "the replaced indirect block is reported");
    assert!(!r.freed.contains(&before[0]), "record 0 is still in the tree");
    assert_eq!(tree_block(&os, &obj, 0), Some(before[0]));
    let psize: u64 = r.freed.iter().map(|b| b.psize as u64).sum();
    assert_eq!(r.freed_physical, psize, "the accounting counts what is reported");

    os.free_object(&obj, 3);
    let r = sync(&os, 3);
    assert!(r.freed.contains(&before[0]), "a freed object's blocks are reported");
    assert!(os.get(obj.id()).is_err(), "the freed object is gone");
}

#[test]
#[should_panic(expected = "invariant broken: a thread holds one object lock at a time")]
fn taking_a_second_object_lock_stops_loudly() {
    let dir = tempfile::tempdir().unwrap();
    let os = ObjSet::open(ctx(dir.path()), 1, None, 1);
    let a = new_file(&os, 1);
    let b = new_file(&os, 1);
    let _a = a.lock();
    let _b = b.lock();
}

/// `create`'s exception: a new object, reachable by no name, may be locked under another.
#[test]
fn a_fresh_object_may_be_locked_under_its_parent() {
    let dir = tempfile::tempdir().unwrap();
    let os = ObjSet::open(ctx(dir.path()), 1, None, 1);
    let parent = new_file(&os, 1);
    let _p = parent.lock();
    let fresh = os.alloc(Dnode::new(ObjType::File, 512, 0o100644, 1));
    fresh.lock().created_in(1);
}

/// A txg's dnode table holds each object as that txg leaves it, even when the next txg
/// (open while it syncs) already changed or freed the object: an object unlinked in txg
/// N+1 must still be whole in txg N, or a crash after N finds a name pointing at nothing.
#[test]
fn a_sync_writes_each_dnode_as_its_own_txg_leaves_it() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = ctx(dir.path());
    let os = ObjSet::open(ctx.clone(), 1, None, 1);
    let grown = new_file(&os, 1);
    let freed = new_file(&os, 1);
    grown.lock().write(&ctx.zio, 1, 0, &bytes(8, 1000), 16384).unwrap();
    freed.lock().write(&ctx.zio, 1, 0, &bytes(9, 700), 16384).unwrap();
    os.quiesce(1).unwrap();
    // Txg 2 is open while txg 1 syncs.
    grown.lock().write(&ctx.zio, 2, 1000, &bytes(10, 5000), 16384).unwrap();
    os.mark_dirty(grown.id());
    os.free_object(&freed, 2);
    let r = os.sync(1, policy()).unwrap();
    assert!(r.freed.is_empty(), "txg 1 frees nothing");

    // What an import at txg 1 would find.
    let committed = ObjSet::open(ctx.clone(), 1, Some(os.meta_dnode()), os.next_obj());
    let at_txg1 = committed.get(freed.id()).expect("the object freed in txg 2 is whole in txg 1");
    assert_eq!(at_txg1.dnode().size, 700);
    assert_eq!(read_all(&committed, &at_txg1, 700), bytes(9, 700));
    assert_eq!(committed.get(grown.id()).unwrap().dnode().size, 1000, "txg 2's growth is not in txg 1");

    os.quiesce(2).unwrap();
    os.sync(2, policy()).unwrap();
    let committed = ObjSet::open(ctx, 1, Some(os.meta_dnode()), os.next_obj());
    assert!(committed.get(freed.id()).is_err(), "freed in txg 2");
    assert_eq!(committed.get(grown.id()).unwrap().dnode().size, 6000);
}

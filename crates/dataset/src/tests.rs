//! Unit tests of a dataset over a small pool context built from vdev, zio, txg and zil on
//! temporary image files (the pool crate sits above this one): names, data, handles, and
//! fsync under each case of the log policy.
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tarn_objects::{Ctx, ObjSet, Reclaim};
use tarn_txg::{SyncTarget, TxgConfig, TxgEngine};
use tarn_vdev::{BlockDevice, FileDevice, Leaf, TopVdev, VdevTree};
use tarn_zil::{Zil, BULK_IN_PLACE};
use tarn_zio::Zio;

use crate::props::{self, Effective};
use crate::{Dataset, FileKind, FsError, NewObject, SetAttr, SpaceOracle, IMMEDIATE_WRITE_BYTES, ROOT_ID};

const ASHIFT: u32 = 12;

struct Roomy;

impl SpaceOracle for Roomy {
    fn reserve(&self, _bytes: u64) -> Result<(), FsError> {
        Ok(())
    }
}

/// What the pool does at a txg, minus the uberblock: sync the dataset, free what the sync
/// returned and the obsolete log blocks, flush, release the frees, retire the log.
struct Committer {
    ctx: Arc<Ctx>,
    zil: Arc<Zil>,
    ds: Arc<Dataset>,
}

/// Why the test committer failed (the test pool has no typed commit errors of its own).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct CommitFailed(String);

impl SyncTarget for Committer {
    type Error = CommitFailed;

    fn quiesce(&self, txg: u64) {
        self.ds.quiesce(txg).expect("quiesce");
    }

    fn sync(&self, txg: u64) -> Result<(), CommitFailed> {
        let failed = |e: &dyn std::fmt::Display| CommitFailed(e.to_string());
        let zio = &self.ctx.zio;
        let r = self.ds.sync(txg).map_err(|e| failed(&e))?;
        for bp in r.blocks_to_free() {
            zio.free(bp);
        }
        let root = self.zil.head_for_txg(txg).map_err(|e| failed(&e))?;
        for e in &root.obsolete {
            zio.free_extent(e);
        }
        zio.flush().map_err(|e| failed(&e))?;
        self.ctx.reclaim.wait_for_readers();
        zio.release_deferred();
        self.zil.txg_committed(txg);
        Ok(())
    }
}

/// A dataset on a 128 MiB image (and a 64 MiB log device if asked), with properties
/// `props` over the defaults. Txgs commit only when asked (`sync_all`) or on close.
struct TestPool {
    ctx: Arc<Ctx>,
    zil: Arc<Zil>,
    ds: Arc<Dataset>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    _dir: tempfile::TempDir,
}

fn top(dir: &Path, index: usize, name: &str, size: u64) -> TopVdev {
    let path = dir.join(name);
    let dev = FileDevice::open_or_create(&path, Some(size)).expect("image file");
    let asize = TopVdev::asize_of(dev.size(), ASHIFT);
    let leaf = Leaf::new(10 + index as u64, path.display().to_string(), Some(Arc::new(dev)));
    TopVdev::new(index, 20 + index as u64, ASHIFT, asize, vec![leaf])
}

impl TestPool {
    fn new(log_device: bool, set: &[(&str, &str)]) -> TestPool {
        let dir = tempfile::tempdir().unwrap();
        let mut tops = vec![top(dir.path(), 0, "data.img", 128 << 20)];
        if log_device {
            tops.push(top(dir.path(), 1, "log.img", 64 << 20).as_log());
        }
        let zio = Arc::new(Zio::new(VdevTree::new(tops, ASHIFT)));
        zio.finish_load();
        let never = TxgConfig { timeout: Duration::from_secs(3600), ..Default::default() };
        let ctx = Arc::new(Ctx { zio: zio.clone(), txg: Arc::new(TxgEngine::new(0, never)), reclaim: Reclaim::new() });
        let zil = Arc::new(Zil::new(zio, 7, 1));
        let eff = Effective::from_values(|name| {
            let local = set.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string());
            local.unwrap_or_else(|| props::find(name).map_or(String::new(), |p| p.default.to_string()))
        });
        let os = ObjSet::open(ctx.clone(), 1, None, 1);
        let ds = Arc::new(Dataset::new(1, os, eff, Arc::new(Roomy), zil.clone(), Vec::new()));
        ds.init_root().unwrap();
        let committer = Arc::new(Committer { ctx: ctx.clone(), zil: zil.clone(), ds: ds.clone() });
        let thread = ctx.txg.start(committer);
        let pool = TestPool { ctx, zil, ds, thread: Mutex::new(Some(thread)), _dir: dir };
        pool.sync_all();
        pool
    }

    fn sync_all(&self) {
        self.ctx.txg.sync_all().expect("txg commit");
    }

    fn synced(&self) -> u64 {
        self.ctx.txg.synced()
    }

    fn zil(&self, counter: fn(&tarn_zil::ZilStats) -> &std::sync::atomic::AtomicU64) -> u64 {
        counter(&self.zil.stats).load(Ordering::Relaxed)
    }

    fn file(&self, name: &str) -> u64 {
        self.ds.create(ROOT_ID, name.as_bytes(), NewObject::File, 0o644, 0, 0).unwrap().ino
    }

    fn read(&self, ino: u64, len: usize) -> Vec<u8> {
        let mut buf = vec![0u8; len];
        let n = self.ds.read(ino, 0, &mut buf).unwrap();
        buf.truncate(n);
        buf
    }
}

impl Drop for TestPool {
    fn drop(&mut self) {
        self.ctx.txg.close();
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
    }
}

fn names(ds: &Dataset, dir: u64) -> Vec<String> {
    ds.readdir(dir).unwrap().into_iter().map(|(n, _, _)| String::from_utf8(n).unwrap()).collect()
}

fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn create_link_unlink_and_lookup_keep_names_and_link_counts() {
    let p = TestPool::new(false, &[]);
    let ds = &p.ds;
    let f = p.file("f");
    let d = ds.create(ROOT_ID, b"d", NewObject::Dir, 0o755, 0, 0).unwrap();
    assert_eq!(d.kind, FileKind::Dir);
    assert_eq!(ds.getattr(ROOT_ID).unwrap().nlink, 3, "a subdirectory links to its parent");
    assert!(matches!(ds.create(ROOT_ID, b"f", NewObject::File, 0o644, 0, 0), Err(FsError::Exists)));
    assert!(matches!(ds.create(ROOT_ID, b"a/b", NewObject::File, 0o644, 0, 0), Err(FsError::Invalid(_))));
    assert!(matches!(ds.create(ROOT_ID, &[b'x'; 256], NewObject::File, 0o644, 0, 0), Err(FsError::NameTooLong)));

    assert_eq!(ds.link(f, d.ino, b"g").unwrap().nlink, 2);
    assert!(matches!(ds.link(d.ino, ROOT_ID, b"d2"), Err(FsError::Invalid(_))), "no hard link to a directory");
    assert_eq!(ds.lookup(d.ino, b"g").unwrap().ino, f);
    assert_eq!(names(ds, ROOT_ID), ["d", "f"]);
    ds.unlink(ROOT_ID, b"f").unwrap();
    assert_eq!(ds.getattr(f).unwrap().nlink, 1, "one name left");
    assert!(matches!(ds.lookup(ROOT_ID, b"f"), Err(FsError::NotFound)));
    assert!(matches!(ds.unlink(ROOT_ID, b"d"), Err(FsError::IsDir)));
    assert!(matches!(ds.rmdir(d.ino, b"g"), Err(FsError::NotDir)));

    let sym = ds.create(ROOT_ID, b"s", NewObject::Symlink(b"d/g"), 0, 0, 0).unwrap();
    assert_eq!(ds.readlink(sym.ino).unwrap(), b"d/g");
    p.sync_all();
    assert_eq!(ds.lookup(d.ino, b"g").unwrap().ino, f, "names survive a txg");
    assert_eq!(names(ds, ROOT_ID), ["d", "s"]);
}

#[test]
fn rmdir_refuses_a_directory_that_is_not_empty() {
    let p = TestPool::new(false, &[]);
    let ds = &p.ds;
    let d = ds.create(ROOT_ID, b"d", NewObject::Dir, 0o755, 0, 0).unwrap();
    ds.create(d.ino, b"inner", NewObject::File, 0o644, 0, 0).unwrap();
    assert!(matches!(ds.rmdir(ROOT_ID, b"d"), Err(FsError::NotEmpty)));
    ds.unlink(d.ino, b"inner").unwrap();
    ds.rmdir(ROOT_ID, b"d").unwrap();
    assert_eq!(ds.getattr(ROOT_ID).unwrap().nlink, 2);
    assert!(matches!(ds.getattr(d.ino), Err(FsError::NotFound)), "the directory is freed");
}

#[test]
fn rename_moves_replaces_and_refuses_as_posix_says() {
    let p = TestPool::new(false, &[]);
    let ds = &p.ds;
    let a = p.file("a");
    let b = p.file("b");
    ds.write(b, 0, b"old b").unwrap();
    assert!(matches!(ds.rename(ROOT_ID, b"a", ROOT_ID, b"b", true), Err(FsError::Exists)), "noreplace");
    ds.rename(ROOT_ID, b"a", ROOT_ID, b"b", false).unwrap();
    assert_eq!(ds.lookup(ROOT_ID, b"b").unwrap().ino, a, "the target is replaced");
    assert!(matches!(ds.lookup(ROOT_ID, b"a"), Err(FsError::NotFound)));
    assert!(matches!(ds.getattr(b), Err(FsError::NotFound)), "the replaced file had no other name: freed");

    let d = ds.create(ROOT_ID, b"d", NewObject::Dir, 0o755, 0, 0).unwrap();
    let e = ds.create(d.ino, b"e", NewObject::Dir, 0o755, 0, 0).unwrap();
    assert!(matches!(ds.rename(ROOT_ID, b"d", e.ino, b"x", false), Err(FsError::Invalid(_))), "not into itself");
    assert!(matches!(ds.rename(ROOT_ID, b"b", d.ino, b"e", false), Err(FsError::IsDir)));
    ds.rename(ROOT_ID, b"b", d.ino, b"moved", false).unwrap();
    assert_eq!(ds.parent_of(d.ino).unwrap(), ROOT_ID);
    assert_eq!(names(ds, d.ino), ["e", "moved"]);
    ds.rename(d.ino, b"e", ROOT_ID, b"e", false).unwrap();
    assert_eq!(ds.parent_of(e.ino).unwrap(), ROOT_ID, "a moved directory knows its new parent");
    assert_eq!(ds.getattr(d.ino).unwrap().nlink, 2, "d lost its subdirectory");
    assert_eq!(ds.getattr(ROOT_ID).unwrap().nlink, 4, "the root has d and e");
}

#[test]
fn an_unlinked_file_lives_until_its_last_handle_is_released() {
    let p = TestPool::new(false, &[]);
    let ds = &p.ds;
    let f = p.file("tmp");
    ds.write(f, 0, b"still here").unwrap();
    ds.open(f).unwrap();
    ds.unlink(ROOT_ID, b"tmp").unwrap();
    p.sync_all();
    assert_eq!(ds.unlinked_syncing(), vec![f], "the txg records the open, unlinked file");
    assert_eq!(p.read(f, 100), b"still here");
    ds.release(f).unwrap();
    assert!(matches!(ds.getattr(f), Err(FsError::NotFound)));
    p.sync_all();
    assert!(ds.unlinked_syncing().is_empty());
}

#[test]
fn write_read_truncate_and_holes() {
    let p = TestPool::new(false, &[("recordsize", "16K")]);
    let ds = &p.ds;
    let f = p.file("data");
    let mut model = noise(1, 100_000);
    ds.write(f, 0, &model).unwrap();
    assert_eq!(p.read(f, 200_000), model);
    p.sync_all();
    ds.write(f, 50_000, b"in the middle").unwrap();
    model[50_000..50_013].copy_from_slice(b"in the middle");
    ds.punch_hole(f, 16384, 20000).unwrap();
    model[16384..36384].fill(0);
    assert_eq!(p.read(f, 200_000), model);
    ds.setattr(f, &SetAttr { size: Some(40_000), ..Default::default() }).unwrap();
    model.truncate(40_000);
    ds.setattr(f, &SetAttr { size: Some(60_000), ..Default::default() }).unwrap();
    model.resize(60_000, 0);
    assert_eq!(p.read(f, 200_000), model);
    p.sync_all();
    assert_eq!(p.read(f, 200_000), model, "the same after a txg");
    assert_eq!(ds.getattr(f).unwrap().size, 60_000);
    assert!(p.ds.used().physical > 0, "space counters follow the sync");

    assert!(matches!(ds.write(ROOT_ID, 0, b"x"), Err(FsError::IsDir)));
    assert!(matches!(ds.setattr(ROOT_ID, &SetAttr { size: Some(1), ..Default::default() }), Err(FsError::Invalid(_))));
    assert!(matches!(ds.write(f, u64::MAX - 1, b"xy"), Err(FsError::Invalid(_))));
}

/// Dirty data is charged once per record per txg, as ZFS charges a dbuf: a database's log
/// page rewritten at every commit (here 200 times) counts one record, not 200 writes, so
/// it neither starts syncs early nor throttles writers; a small write into a larger record
/// counts the whole record the sync will write (and the ARC holds).
#[test]
fn dirty_data_counts_each_record_once_per_txg() {
    let p = TestPool::new(false, &[("recordsize", "8K")]);
    let f = p.file("wal");
    p.sync_all();
    let dirty = || p.ctx.txg.stats().dirty_open;
    let before = dirty();
    for i in 0..200u64 {
        p.ds.write(f, (i % 8) * 1000, &noise(i, 1000)).unwrap();
    }
    assert_eq!(dirty() - before, 8192, "200 writes into one 8 KiB record: one record dirty");
    p.ds.write(f, 8192, &noise(7, 8192)).unwrap();
    assert_eq!(dirty() - before, 2 * 8192, "a second record: charged once more");
    p.sync_all();

    let p = TestPool::new(false, &[("recordsize", "128K")]);
    let f = p.file("big");
    p.ds.write(f, 0, &noise(1, 256 << 10)).unwrap();
    p.sync_all();
    let before = dirty_of(&p);
    p.ds.write(f, 4096, &noise(2, 4096)).unwrap();
    assert_eq!(dirty_of(&p) - before, 128 << 10, "a 4 KiB write dirties (and holds) its whole 128 KiB record");
}

fn dirty_of(p: &TestPool) -> u64 {
    p.ctx.txg.stats().dirty_open
}

/// One fsync of `data` written as `writes` equal pieces (one file), without any txg:
/// returns (writes logged as pointers, log bytes written) and checks the data is read back.
fn fsync_case(log_device: bool, logbias: &str, writes: usize, len: usize) -> (u64, u64) {
    let p = TestPool::new(log_device, &[("logbias", logbias), ("recordsize", "16K")]);
    let f = p.file("f");
    p.sync_all();
    let synced = p.synced();
    let (ind0, bytes0) = (p.zil(|s| &s.indirect_records), p.zil(|s| &s.bytes_written));
    let data = noise(writes as u64 + len as u64, writes * len);
    for (i, piece) in data.chunks(len).enumerate() {
        p.ds.write(f, (i * len) as u64, piece).unwrap();
    }
    p.ds.fsync(f).unwrap();
    assert_eq!(p.synced(), synced, "the fsync committed the log, not a txg");
    assert_eq!(p.read(f, data.len() + 10), data);
    (p.zil(|s| &s.indirect_records) - ind0, p.zil(|s| &s.bytes_written) - bytes0)
}

#[test]
fn fsync_copies_small_writes_into_the_log() {
    let (indirect, log_bytes) = fsync_case(false, "latency", 1, 700);
    assert_eq!(indirect, 0);
    assert!(log_bytes >= 700);
}

#[test]
fn fsync_writes_large_writes_in_place_without_a_log_device() {
    let (indirect, log_bytes) = fsync_case(false, "latency", 1, IMMEDIATE_WRITE_BYTES);
    assert_eq!(indirect, 2, "two 16K records, one pointer each");
    assert!(log_bytes < 8192, "only pointers went to the log: {log_bytes}");
}

#[test]
fn fsync_copies_large_writes_to_a_log_device() {
    let (indirect, log_bytes) = fsync_case(true, "latency", 1, IMMEDIATE_WRITE_BYTES);
    assert_eq!(indirect, 0);
    assert!(log_bytes >= IMMEDIATE_WRITE_BYTES as u64);
}

#[test]
fn fsync_with_logbias_throughput_writes_in_place_even_with_a_log_device() {
    for log_device in [false, true] {
        let (indirect, _) = fsync_case(log_device, "throughput", 3, 700);
        assert_eq!(indirect, 3, "log device {log_device}: one pointer per write");
    }
}

/// The page-batch rule: whole records fsynced together (a page flush) go in place once
/// they reach the immediate-write size; one page alone, or parts of records, are copied.
#[test]
fn a_page_batch_goes_in_place_and_a_single_page_or_partial_writes_are_copied() {
    let (indirect, log_bytes) = fsync_case(false, "latency", 1, 16384);
    assert_eq!(indirect, 0, "one page alone is copied");
    assert!(log_bytes >= 16384);
    let (indirect, log_bytes) = fsync_case(false, "latency", 2, 16384);
    assert_eq!(indirect, 2, "two whole pages: one pointer each");
    assert!(log_bytes < 8192, "only pointers went to the log: {log_bytes}");
    let (indirect, log_bytes) = fsync_case(false, "latency", 8, 8192);
    assert_eq!(indirect, 0, "half records are copied, however many");
    assert!(log_bytes >= 65536);
    let (indirect, _) = fsync_case(true, "latency", 2, 16384);
    assert_eq!(indirect, 0, "a log device takes the copies");
}

#[test]
fn a_bulk_fsync_goes_in_place_without_a_log_device_only() {
    let pages = (BULK_IN_PLACE / 16384) as usize + 2;
    let (indirect, log_bytes) = fsync_case(false, "latency", pages, 16384);
    assert_eq!(indirect, pages as u64, "every page in place");
    assert!(log_bytes < 16384);
    let (indirect, _) = fsync_case(true, "latency", pages, 16384);
    assert_eq!(indirect, 0, "a log device takes the copies");
}

#[test]
fn fsync_with_sync_disabled_writes_nothing() {
    let p = TestPool::new(false, &[("sync", "disabled")]);
    let f = p.file("f");
    p.ds.write(f, 0, b"not durable until the txg").unwrap();
    let commits = p.zil(|s| &s.commits);
    p.ds.fsync(f).unwrap();
    assert_eq!(p.zil(|s| &s.commits), commits);
    assert_eq!(p.zil(|s| &s.bytes_written), 0);
}

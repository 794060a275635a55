//! Concurrency: writers and readers proceed while a txg syncs; a writer waits only when
//! dirty data passes `dirty_max`. A gated device holds every flush until the test opens
//! the gate, so "the sync is still running" is a fact, not a timing guess.
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tarn_dataset::{NewObject, ROOT_ID};
use tarn_pool::{CreateOptions, ImportOptions, Pool, VdevSpec};
use tarn_txg::TxgConfig;
use tarn_vdev::{BlockDevice, FileDevice};

#[path = "../../l2arc/tests/common/mod.rs"]
mod hooked;

/// A device whose flushes block while the gate is closed.
struct GatedDevice {
    inner: FileDevice,
    closed: Mutex<bool>,
    opened: Condvar,
    waiting_flushes: AtomicUsize,
    /// Also hold writes (not only flushes) while the gate is closed.
    gate_writes: AtomicBool,
    waiting_writes: AtomicUsize,
    /// Also hold reads while the gate is closed.
    gate_reads: AtomicBool,
    waiting_reads: AtomicUsize,
}

impl GatedDevice {
    fn set_closed(&self, closed: bool) {
        *self.closed.lock().unwrap() = closed;
        self.opened.notify_all();
    }

    fn new(img: &Path) -> GatedDevice {
        GatedDevice {
            inner: FileDevice::open(img).unwrap(),
            closed: Mutex::new(false),
            opened: Condvar::new(),
            waiting_flushes: AtomicUsize::new(0),
            gate_writes: AtomicBool::new(false),
            waiting_writes: AtomicUsize::new(0),
            gate_reads: AtomicBool::new(false),
            waiting_reads: AtomicUsize::new(0),
        }
    }

    /// Waits while the gate is closed, counted in `waiting`.
    fn pass(&self, waiting: &AtomicUsize) {
        waiting.fetch_add(1, Ordering::SeqCst);
        let mut closed = self.closed.lock().unwrap();
        while *closed {
            closed = self.opened.wait(closed).unwrap();
        }
        waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

impl BlockDevice for GatedDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        if self.gate_reads.load(Ordering::SeqCst) {
            self.pass(&self.waiting_reads);
        }
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        if self.gate_writes.load(Ordering::SeqCst) {
            self.pass(&self.waiting_writes);
        }
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.pass(&self.waiting_flushes);
        self.inner.flush()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn path(&self) -> &Path {
        self.inner.path()
    }
}

fn gated_pool(dir: &Path, txg: TxgConfig) -> (Pool, Arc<GatedDevice>, PathBuf) {
    let img = dir.join("d0.img");
    let opts = CreateOptions { size: Some(256 << 20), ..Default::default() };
    Pool::create("tank", &[VdevSpec::Disk(img.clone())], &opts).unwrap().export().unwrap();
    let dev = Arc::new(GatedDevice::new(&img));
    let pool = Pool::import(vec![dev.clone() as Arc<dyn BlockDevice>], &ImportOptions { txg }).unwrap();
    (pool, dev, img)
}

fn wait_until(what: &str, cond: impl Fn() -> bool) {
    for _ in 0..2000 {
        if cond() {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("timed out waiting until {what}");
}

#[test]
fn writes_and_reads_proceed_while_a_txg_is_stuck_in_sync() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, dev, _) = gated_pool(dir.path(), TxgConfig { timeout: Duration::from_secs(3600), ..Default::default() });
    let ds = pool.dataset("tank").unwrap();
    let a = ds.create(ROOT_ID, b"a", NewObject::File, 0o644, 0, 0).unwrap();
    ds.write(a.ino, 0, &[1u8; 65536]).unwrap();

    dev.set_closed(true);
    let pool = Arc::new(pool);
    let syncer = {
        let pool = pool.clone();
        std::thread::spawn(move || pool.sync().unwrap())
    };
    wait_until("the sync reaches its flush", || dev.waiting_flushes.load(Ordering::SeqCst) > 0);

    // The txg is syncing and cannot finish; new work goes to the next txg meanwhile.
    ds.write(a.ino, 4096, &[2u8; 16384]).unwrap();
    let b = ds.create(ROOT_ID, b"b", NewObject::File, 0o644, 0, 0).unwrap();
    ds.write(b.ino, 0, b"written during the sync").unwrap();
    let mut buf = vec![0u8; 65536];
    ds.read(a.ino, 0, &mut buf).unwrap();
    assert!(buf[..4096].iter().all(|&x| x == 1) && buf[4096..20480].iter().all(|&x| x == 2));
    assert!(!syncer.is_finished(), "the sync was held at its flush the whole time");

    dev.set_closed(false);
    syncer.join().unwrap();
    pool.sync().unwrap();
    drop(ds);
    let pool = Arc::try_unwrap(pool).ok().expect("sole owner");
    pool.export().unwrap();
    drop(dev); // releases the device lock
    let pool = Pool::import_paths(&[dir.path().join("d0.img")], &ImportOptions::default()).unwrap();
    let ds = pool.dataset("tank").unwrap();
    let b = ds.lookup(ROOT_ID, b"b").unwrap();
    let mut buf = vec![0u8; 23];
    ds.read(b.ino, 0, &mut buf).unwrap();
    assert_eq!(&buf, b"written during the sync");
}

#[test]
fn a_writer_waits_only_once_dirty_data_passes_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let cfg =
        TxgConfig { timeout: Duration::from_secs(3600), dirty_max: 4 << 20, dirty_sync: 1 << 20, ..Default::default() };
    let (pool, dev, _) = gated_pool(dir.path(), cfg);
    let ds = pool.dataset("tank").unwrap();
    let f = ds.create(ROOT_ID, b"f", NewObject::File, 0o644, 0, 0).unwrap();
    dev.set_closed(true);
    let (tx, rx) = mpsc::channel();
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let ds = ds.clone();
        let done = done.clone();
        std::thread::spawn(move || {
            let chunk = vec![7u8; 256 << 10];
            for i in 0..64u64 {
                ds.write(f.ino, i * chunk.len() as u64, &chunk).unwrap();
                tx.send(i).unwrap();
            }
            done.store(true, Ordering::SeqCst);
        })
    };
    // Below the limit the writer runs freely, although the sync it started cannot end.
    let first: Vec<u64> = (0..8).map(|_| rx.recv_timeout(Duration::from_secs(30)).unwrap()).collect();
    assert_eq!(first, (0..8).collect::<Vec<_>>());
    wait_until("a sync is stuck at its flush", || dev.waiting_flushes.load(Ordering::SeqCst) > 0);
    // Past 4 MiB of dirty data it must stop: 16 MiB cannot be written while the gate holds.
    std::thread::sleep(Duration::from_millis(300));
    let written = 8 + rx.try_iter().count();
    assert!(written < 64 && !done.load(Ordering::SeqCst), "writer should be throttled, wrote {written} chunks");
    assert!(written * (256 << 10) <= (4 << 20) + (256 << 10) * 2, "dirty data stayed near the limit: {written} chunks");
    dev.set_closed(false);
    writer.join().unwrap();
    pool.sync().unwrap();
    let mut buf = vec![0u8; 16 << 20];
    assert_eq!(ds.read(f.ino, 0, &mut buf).unwrap(), 16 << 20);
    assert!(buf.iter().all(|&x| x == 7));
}

/// A file of 600 4 KiB records — two level-1 blocks (512 pointers each) under a top one —
/// imported cold (the import walk leaves no indirect block cached) on a device whose reads
/// can be held at a gate. Record `r` holds the byte `r as u8`.
struct ColdFile {
    _dir: tempfile::TempDir,
    _pool: Pool,
    dev: Arc<GatedDevice>,
    ds: Arc<tarn_dataset::Dataset>,
    ino: u64,
}

const COLD_REC: u64 = 4096;

/// The exported image of a `ColdFile`: its directory, path and the file's inode.
fn cold_file_image() -> (tempfile::TempDir, PathBuf, u64) {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("d0.img");
    let opts = CreateOptions { size: Some(64 << 20), ..Default::default() };
    let pool = Pool::create("tank", &[VdevSpec::Disk(img.clone())], &opts).unwrap();
    pool.set_property("tank", "recordsize", "4K").unwrap();
    let ds = pool.dataset("tank").unwrap();
    let ino = ds.create(ROOT_ID, b"f", NewObject::File, 0o644, 0, 0).unwrap().ino;
    for r in 0..600u64 {
        ds.write(ino, r * COLD_REC, &[r as u8; COLD_REC as usize]).unwrap();
    }
    drop(ds);
    pool.export().unwrap();
    (dir, img, ino)
}

impl ColdFile {
    fn new() -> ColdFile {
        let (dir, img, ino) = cold_file_image();
        let dev = Arc::new(GatedDevice::new(&img));
        let pool = Pool::import(vec![dev.clone() as Arc<dyn BlockDevice>], &ImportOptions::default()).unwrap();
        let ds = pool.dataset("tank").unwrap();
        ColdFile { _dir: dir, _pool: pool, dev, ds, ino }
    }

    /// A reader of record `r` that checks its bytes.
    fn reader(&self) -> impl Fn(u64) + Send + Clone + 'static {
        let (ds, ino) = (self.ds.clone(), self.ino);
        move |r| {
            let mut buf = vec![0u8; COLD_REC as usize];
            ds.read(ino, r * COLD_REC, &mut buf).unwrap();
            assert!(buf.iter().all(|&b| b == r as u8), "record {r}");
        }
    }

    /// With the device's reads gated, runs `held` until it waits on the device, then
    /// reads record 0 (cached) on another thread: that read must be served while `held`
    /// is still waiting.
    fn record_0_is_served_while(&self, held: impl FnOnce() + Send + 'static, what: &str) {
        self.dev.gate_reads.store(true, Ordering::SeqCst);
        self.dev.set_closed(true);
        let held = std::thread::spawn(held);
        wait_until(&format!("{what} waits on the device"), || self.dev.waiting_reads.load(Ordering::SeqCst) > 0);
        let (done, served) = mpsc::channel();
        let read = self.reader();
        std::thread::spawn(move || {
            read(0);
            done.send(()).unwrap();
        });
        let other = served.recv_timeout(Duration::from_secs(10));
        let held_was_waiting = !held.is_finished();
        self.dev.set_closed(false);
        assert!(other.is_ok(), "the reader of record 0 waited for the device read of {what}");
        assert!(held_was_waiting, "{what} was held at the device meanwhile");
        held.join().unwrap();
        served.recv_timeout(Duration::from_secs(10)).ok();
    }
}

/// An indirect block read from the device is read with the file unlocked: another reader
/// of the same file, whose blocks are in memory, is served meanwhile (a big table's
/// readers are not queued behind one cold lookup).
#[test]
fn a_reader_is_served_while_another_reads_an_indirect_block_of_the_same_file() {
    let file = ColdFile::new();
    let read = file.reader();
    // Record 0, the top block and the first level-1 block are now in memory; record 599
    // needs the second level-1 block.
    read(0);
    file.record_0_is_served_while(move || read(599), "the reader of record 599");
}

/// A sequential reader whose read-ahead needs an indirect block from the device reads it
/// with the file unlocked too: another reader of the same file is served meanwhile.
#[test]
fn a_reader_is_served_while_a_stream_reads_ahead_into_a_cold_indirect_block() {
    let file = ColdFile::new();
    let read = file.reader();
    // Records 0 and 480..512 cached, read backwards (no stream); the second level-1
    // block stays on the device.
    read(0);
    (480..512u64).rev().for_each(&read);
    // In order from the cache: read-ahead starts and reaches past record 511.
    file.record_0_is_served_while(move || (480..512u64).for_each(read), "the stream's read-ahead");
}

/// Holds each device read of the thread named "victim" until the test lets it go, and
/// counts them; every other read and write passes.
#[derive(Default)]
struct VictimReads {
    /// (reads held so far, reads let go so far)
    counts: Mutex<(usize, usize)>,
    changed: Condvar,
}

impl VictimReads {
    fn hook(self: &Arc<Self>) -> impl Fn(hooked::Io) -> hooked::Then + Send + Sync + 'static {
        let me = self.clone();
        move |io| {
            if matches!(io, hooked::Io::Read { .. }) && std::thread::current().name() == Some("victim") {
                let mut c = me.counts.lock().unwrap();
                let n = c.0;
                c.0 += 1;
                me.changed.notify_all();
                while c.1 <= n {
                    c = me.changed.wait(c).unwrap();
                }
            }
            hooked::Then::Pass
        }
    }

    /// Waits until the victim's read number `n` (from 0) is held.
    fn wait_held(&self, n: usize) {
        let c = self.counts.lock().unwrap();
        let (c, timeout) = self.changed.wait_timeout_while(c, Duration::from_secs(30), |c| c.0 <= n).unwrap();
        assert!(!timeout.timed_out(), "the victim never reached its device read #{n} ({} held)", c.0);
    }

    fn let_one_go(&self) {
        self.counts.lock().unwrap().1 += 1;
        self.changed.notify_all();
    }

    fn let_all_go(&self) {
        self.counts.lock().unwrap().1 = usize::MAX;
        self.changed.notify_all();
    }
}

/// A read of two records finds the first one's pointer, then unlocks the file to read the
/// cold indirect block of the second. Meanwhile a writer replaces the first record and a
/// txg commits, freeing its old block: that block must not be released for reuse until
/// the read that found it has read it (a reused block would read as a checksum error, or
/// as another file's bytes).
#[test]
fn a_txg_never_releases_a_block_a_pending_read_found_before_it_unlocked() {
    let (_dir, img, ino) = cold_file_image();
    let gate = Arc::new(VictimReads::default());
    let dev = Arc::new(hooked::Hooked::new(FileDevice::open(&img).unwrap(), gate.hook()));
    let pool = Arc::new(Pool::import(vec![dev as Arc<dyn BlockDevice>], &ImportOptions::default()).unwrap());
    let ds = pool.dataset("tank").unwrap();
    let mut buf = vec![0u8; COLD_REC as usize];
    ds.read(ino, 0, &mut buf).unwrap(); // the top block and the first level-1 block now in memory
    let victim = {
        let ds = ds.clone();
        std::thread::Builder::new()
            .name("victim".into())
            .spawn(move || {
                // Record 511 (first level-1 block) and 512 (the second, on the device).
                let mut b = vec![0u8; 2 * COLD_REC as usize];
                ds.read(ino, 511 * COLD_REC, &mut b).unwrap();
                b
            })
            .unwrap()
    };
    gate.wait_held(0); // the second level-1 block, with record 511's pointer already found
    ds.write(ino, 511 * COLD_REC, &[0xAB; COLD_REC as usize]).unwrap();
    let (synced_tx, synced) = mpsc::channel();
    let syncer = {
        let pool = pool.clone();
        std::thread::spawn(move || {
            pool.sync().unwrap();
            synced_tx.send(()).unwrap();
        })
    };
    // Time for the commit to reach its wait for the readers (the victim's indirect read
    // keeps it there). A commit slower than this only makes the test miss the race; it
    // never makes it fail.
    std::thread::sleep(Duration::from_secs(1));
    gate.let_one_go();
    gate.wait_held(1); // now the victim reads record 511's old block
    let released_under_the_read = synced.recv_timeout(Duration::from_secs(2)).is_ok();
    gate.let_all_go();
    syncer.join().unwrap();
    let got = victim.join().unwrap();
    assert!(
        !released_under_the_read,
        "the txg that freed record 511's old block committed and released it while the read that found it was \
         still reading it"
    );
    let (r511, r512) = got.split_at(COLD_REC as usize);
    assert!(r511.iter().all(|&b| b == 511u64 as u8) || r511.iter().all(|&b| b == 0xAB), "record 511 torn");
    assert!(r512.iter().all(|&b| b == 512u64 as u8), "record 512");
}

/// Readers of one file under a writer rewriting it across frequent txgs, with an ARC so
/// small that indirect blocks are dropped and read again all the time (with the file
/// unlocked, while its tree changes): every record read is one whole version of that
/// record, never older than the last one acknowledged before the read began.
#[test]
fn readers_see_whole_current_records_while_the_tree_changes_under_their_indirect_reads() {
    use std::sync::atomic::AtomicU64;
    const REC: usize = 4096;
    const RECORDS: u64 = 2000;
    fn record(r: u64, version: u64) -> Vec<u8> {
        let mut b = vec![(r + version) as u8; REC];
        b[..8].copy_from_slice(&r.to_le_bytes());
        b[8..16].copy_from_slice(&version.to_le_bytes());
        b
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = TxgConfig { timeout: Duration::from_millis(20), ..Default::default() };
    let opts = CreateOptions { size: Some(128 << 20), txg: cfg, ..Default::default() };
    let pool = Pool::create("tank", &[VdevSpec::Disk(dir.path().join("d0.img"))], &opts).unwrap();
    pool.set_property("tank", "recordsize", "4K").unwrap();
    let ds = pool.dataset("tank").unwrap();
    let f = ds.create(ROOT_ID, b"f", NewObject::File, 0o644, 0, 0).unwrap().ino;
    for r in 0..RECORDS {
        ds.write(f, r * REC as u64, &record(r, 0)).unwrap();
    }
    pool.sync().unwrap();
    pool.set_arc_max(1 << 20);
    let pool = Arc::new(pool);
    let acked: Arc<Vec<AtomicU64>> = Arc::new((0..RECORDS).map(|_| AtomicU64::new(0)).collect());
    let writing = Arc::new(AtomicBool::new(true));
    let readers: Vec<_> = (0..3u64)
        .map(|t| {
            let (ds, acked, writing) = (ds.clone(), acked.clone(), writing.clone());
            std::thread::spawn(move || {
                let (mut x, mut reads) = (t + 7, 0u64);
                let mut buf = vec![0u8; REC];
                while writing.load(Ordering::SeqCst) || reads < 200 {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let r = (x >> 33) % RECORDS;
                    let floor = acked[r as usize].load(Ordering::SeqCst);
                    ds.read(f, r * REC as u64, &mut buf).unwrap();
                    let version = u64::from_le_bytes(buf[8..16].try_into().unwrap());
                    assert_eq!(buf, record(r, version), "record {r} read whole and as itself");
                    assert!(version >= floor, "record {r}: version {version} read after {floor} was acknowledged");
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    let mut x = 99u64;
    for version in 1..=3000u64 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let r = (x >> 33) % RECORDS;
        ds.write(f, r * REC as u64, &record(r, version)).unwrap();
        acked[r as usize].fetch_max(version, Ordering::SeqCst);
        if version % 50 == 0 {
            pool.sync().unwrap(); // the tree is rewritten: new indirect blocks, old ones freed
        }
    }
    writing.store(false, Ordering::SeqCst);
    let reads: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    let arc = pool.stats().arc.fields();
    let looked_up = |name: &str| arc.iter().find(|(k, _)| *k == name).map_or(0, |&(_, v)| v);
    let indirect = looked_up("hits_indirect") + looked_up("misses_indirect");
    assert!(indirect > 100, "the readers read indirect blocks again and again: {indirect} in {reads} reads");
}

#[test]
fn many_threads_write_and_read_their_own_files_across_syncs() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("d0.img");
    let cfg =
        TxgConfig { timeout: Duration::from_millis(50), dirty_max: 8 << 20, dirty_sync: 2 << 20, ..Default::default() };
    let opts = CreateOptions { size: Some(512 << 20), txg: cfg, ..Default::default() };
    let pool = Pool::create("tank", &[VdevSpec::Disk(img.clone())], &opts).unwrap();
    pool.set_property("tank", "recordsize", "16K").unwrap();
    let ds = pool.dataset("tank").unwrap();
    let threads: Vec<_> = (0..8u8)
        .map(|t| {
            let ds = ds.clone();
            std::thread::spawn(move || {
                let name = format!("t{t}");
                let f = ds.create(ROOT_ID, name.as_bytes(), NewObject::File, 0o644, 0, 0).unwrap();
                let mut model = vec![0u8; 1 << 20];
                let mut x = t as u64 + 1;
                for round in 0..300u64 {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let off = (x >> 33) % (model.len() as u64 - 20000);
                    let len = 1 + (x >> 20) as usize % 20000;
                    let byte = (round as u8).wrapping_add(t);
                    model[off as usize..off as usize + len].fill(byte);
                    ds.write(f.ino, off, &vec![byte; len]).unwrap();
                    if round % 50 == 0 {
                        ds.fsync(f.ino).unwrap();
                    }
                    let mut back = vec![0u8; len];
                    ds.read(f.ino, off, &mut back).unwrap();
                    assert!(back.iter().all(|&b| b == byte), "thread {t} read back its own write");
                }
                (f.ino, model)
            })
        })
        .collect();
    let results: Vec<(u64, Vec<u8>)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    drop(ds);
    pool.export().unwrap();
    let pool = Pool::import_paths(&[img], &ImportOptions::default()).unwrap();
    let ds = pool.dataset("tank").unwrap();
    for (ino, model) in results {
        let mut back = vec![0u8; model.len()];
        let n = ds.read(ino, 0, &mut back).unwrap();
        back.truncate(n);
        let end = model.iter().rposition(|&b| b != 0).map_or(0, |p| p + 1);
        assert_eq!(&back[..end], &model[..end], "file {ino} after import");
    }
}

/// A file written in txg N and unlinked in N+1 while N is still syncing: N's sync must
/// not drop the object from the cache (N+1 still has to free it). This once panicked the
/// sync thread ("a dirty object is cached") under PostgreSQL, hanging every later sync.
#[test]
fn a_file_unlinked_while_its_last_write_syncs_is_freed_by_the_next_txg() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, dev, _) = gated_pool(dir.path(), TxgConfig { timeout: Duration::from_secs(3600), ..Default::default() });
    let ds = pool.dataset("tank").unwrap();
    let a = ds.create(ROOT_ID, b"a", NewObject::File, 0o644, 0, 0).unwrap();
    ds.write(a.ino, 0, &[1u8; 16384]).unwrap();

    // Hold txg N at its first data write: before it decides which objects leave the cache.
    dev.gate_writes.store(true, Ordering::SeqCst);
    dev.set_closed(true);
    let pool = Arc::new(pool);
    let syncer = {
        let pool = pool.clone();
        std::thread::spawn(move || pool.sync().unwrap())
    };
    wait_until("the sync reaches its first write", || dev.waiting_writes.load(Ordering::SeqCst) > 0);
    ds.unlink(ROOT_ID, b"a").unwrap();
    dev.set_closed(false);
    syncer.join().unwrap();

    // The next txg frees the file; the sync thread must survive it (a dead sync thread
    // shows as a sync that never returns).
    let next = {
        let pool = pool.clone();
        std::thread::spawn(move || pool.sync().unwrap())
    };
    wait_until("the next txg commits", || next.is_finished());
    next.join().unwrap();
    assert!(ds.lookup(ROOT_ID, b"a").is_err());
    let b = ds.create(ROOT_ID, b"b", NewObject::File, 0o644, 0, 0).unwrap();
    ds.write(b.ino, 0, b"after").unwrap();
    pool.sync().unwrap();
}

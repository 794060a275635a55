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

/// A device whose flushes block while the gate is closed.
struct GatedDevice {
    inner: FileDevice,
    closed: Mutex<bool>,
    opened: Condvar,
    waiting_flushes: AtomicUsize,
    /// Also hold writes (not only flushes) while the gate is closed.
    gate_writes: AtomicBool,
    waiting_writes: AtomicUsize,
}

impl GatedDevice {
    fn set_closed(&self, closed: bool) {
        *self.closed.lock().unwrap() = closed;
        self.opened.notify_all();
    }
}

impl BlockDevice for GatedDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        if self.gate_writes.load(Ordering::SeqCst) {
            self.waiting_writes.fetch_add(1, Ordering::SeqCst);
            let mut closed = self.closed.lock().unwrap();
            while *closed {
                closed = self.opened.wait(closed).unwrap();
            }
            self.waiting_writes.fetch_sub(1, Ordering::SeqCst);
        }
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.waiting_flushes.fetch_add(1, Ordering::SeqCst);
        let mut closed = self.closed.lock().unwrap();
        while *closed {
            closed = self.opened.wait(closed).unwrap();
        }
        self.waiting_flushes.fetch_sub(1, Ordering::SeqCst);
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
    let dev = Arc::new(GatedDevice {
        inner: FileDevice::open(&img).unwrap(),
        closed: Mutex::new(false),
        opened: Condvar::new(),
        waiting_flushes: AtomicUsize::new(0),
        gate_writes: AtomicBool::new(false),
        waiting_writes: AtomicUsize::new(0),
    });
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

//! The intent log: what fsync acknowledged survives a crash that loses everything not yet
//! committed by a txg — shown by cutting the device's write stream at many points
//! (at flushes, between them, with a torn write, and with writes since the last flush
//! landing in any subset), importing each image and checking every acknowledged byte.
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tarn_dataset::{NewObject, ROOT_ID};
use tarn_pool::{CreateOptions, ImportOptions, Pool, VdevSpec};
use tarn_txg::TxgConfig;
use tarn_vdev::BlockDevice;

#[derive(Clone)]
enum Event {
    Write(u64, Vec<u8>),
    Flush,
}

/// An in-memory device that records every write and flush, and can play dead (writes
/// vanish, as at power loss).
struct MemDevice {
    data: Mutex<Vec<u8>>,
    events: Mutex<Vec<Event>>,
    dead: std::sync::atomic::AtomicBool,
    path: PathBuf,
}

impl MemDevice {
    fn new(image: Vec<u8>) -> Arc<MemDevice> {
        Arc::new(MemDevice {
            data: Mutex::new(image),
            events: Mutex::new(Vec::new()),
            dead: Default::default(),
            path: PathBuf::from("mem0"),
        })
    }
    fn events_len(&self) -> usize {
        self.events.lock().unwrap().len()
    }
}

impl BlockDevice for MemDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        let d = self.data.lock().unwrap();
        buf.copy_from_slice(&d[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        if self.dead.load(std::sync::atomic::Ordering::SeqCst) {
            return Ok(());
        }
        let mut events = self.events.lock().unwrap();
        self.data.lock().unwrap()[offset as usize..offset as usize + buf.len()].copy_from_slice(buf);
        events.push(Event::Write(offset, buf.to_vec()));
        Ok(())
    }
    fn flush(&self) -> std::io::Result<()> {
        if !self.dead.load(std::sync::atomic::Ordering::SeqCst) {
            self.events.lock().unwrap().push(Event::Flush);
        }
        Ok(())
    }
    fn size(&self) -> u64 {
        self.data.lock().unwrap().len() as u64
    }
    fn path(&self) -> &Path {
        &self.path
    }
}

const SIZE: u64 = 80 << 20;

/// A freshly created pool's image, exported, as bytes.
fn fresh_image(dir: &Path) -> Vec<u8> {
    let img = dir.join("d0.img");
    let opts = CreateOptions { size: Some(SIZE), ..Default::default() };
    let pool = Pool::create("tank", &[VdevSpec::Disk(img.clone())], &opts).unwrap();
    pool.set_property("tank", "recordsize", "16K").unwrap();
    pool.export().unwrap();
    std::fs::read(img).unwrap()
}

fn import(dev: Arc<MemDevice>) -> Pool {
    Pool::import(vec![dev as Arc<dyn BlockDevice>], &ImportOptions::default()).expect("image imports")
}

fn read_file(pool: &Pool, name: &[u8]) -> Option<Vec<u8>> {
    let ds = pool.dataset("tank").unwrap();
    let a = ds.lookup(ROOT_ID, name).ok()?;
    let mut buf = vec![0u8; a.size as usize];
    let n = ds.read(a.ino, 0, &mut buf).expect("acknowledged data reads back");
    buf.truncate(n);
    Some(buf)
}

#[test]
fn fsynced_writes_survive_power_loss_before_any_txg_commit() {
    let dir = tempfile::tempdir().unwrap();
    let dev = MemDevice::new(fresh_image(dir.path()));
    let never = TxgConfig { timeout: Duration::from_secs(3600), ..Default::default() };
    let pool = Pool::import(vec![dev.clone() as Arc<dyn BlockDevice>], &ImportOptions { txg: never }).unwrap();
    let ds = pool.dataset("tank").unwrap();
    let synced_txg = pool.txg().synced();
    let f = ds.create(ROOT_ID, b"redo", NewObject::File, 0o644, 0, 0).unwrap();
    let payload: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
    ds.write(f.ino, 0, &payload).unwrap();
    ds.fsync(f.ino).unwrap();
    let d = ds.create(ROOT_ID, b"tmp", NewObject::File, 0o644, 0, 0).unwrap();
    ds.write(d.ino, 0, b"renamed into place").unwrap();
    // The careful pattern: fsync the new file, rename it over, fsync the directory.
    ds.fsync(d.ino).unwrap();
    ds.rename(ROOT_ID, b"tmp", ROOT_ID, b"final", false).unwrap();
    ds.fsync(ROOT_ID).unwrap();
    assert_eq!(pool.txg().synced(), synced_txg, "fsync did not need a txg commit");
    // Power loss: nothing more reaches the device.
    dev.dead.store(true, std::sync::atomic::Ordering::SeqCst);
    drop(ds);
    drop(pool);
    dev.dead.store(false, std::sync::atomic::Ordering::SeqCst);
    let pool = import(dev);
    assert!(read_file(&pool, b"redo").as_deref() == Some(&payload[..]), "fsynced file is back, whole");
    assert_eq!(read_file(&pool, b"final").as_deref(), Some(&b"renamed into place"[..]));
    assert_eq!(read_file(&pool, b"tmp"), None);
    let report = pool.replay_report().expect("import says what it replayed");
    assert!(report.contains("replayed") && report.contains("intent-log records"), "{report}");
}

/// What was acknowledged, and when (the length of the device's event stream then).
struct Ack {
    at: usize,
    log_len: usize,
    pages: Vec<(u64, u8)>,
}

#[test]
fn every_acknowledged_byte_survives_any_cut_of_the_write_stream() {
    let dir = tempfile::tempdir().unwrap();
    let initial = fresh_image(dir.path());
    let dev = MemDevice::new(initial.clone());
    let cfg = TxgConfig { timeout: Duration::from_millis(40), dirty_max: 64 << 20, dirty_sync: 8 << 20 };
    let pool = Pool::import(vec![dev.clone() as Arc<dyn BlockDevice>], &ImportOptions { txg: cfg }).unwrap();
    let start = dev.events_len();
    let ds = pool.dataset("tank").unwrap();
    let log = ds.create(ROOT_ID, b"log", NewObject::File, 0o644, 0, 0).unwrap();
    let data = ds.create(ROOT_ID, b"data", NewObject::File, 0o644, 0, 0).unwrap();
    let mut acks = Vec::new();
    let mut log_model = Vec::new();
    let mut pages = Vec::new();
    for round in 0..60u64 {
        // A redo-log style append of 700 bytes, and one 16 KiB page written once.
        let rec: Vec<u8> = (0..700).map(|i| (round * 7 + i) as u8).collect();
        ds.write(log.ino, log_model.len() as u64, &rec).unwrap();
        log_model.extend_from_slice(&rec);
        let page = (round * 37) % 200;
        ds.write(data.ino, page * 16384, &vec![round as u8 + 1; 16384]).unwrap();
        pages.push((page, round as u8 + 1));
        if round % 3 == 2 {
            // fsync is per file (as in POSIX and ZFS): both files are made durable.
            ds.fsync(data.ino).unwrap();
            ds.fsync(log.ino).unwrap();
            acks.push(Ack { at: dev.events_len(), log_len: log_model.len(), pages: pages.clone() });
        }
        if round % 20 == 7 {
            std::thread::sleep(Duration::from_millis(50)); // let a txg commit land mid-run
        }
    }
    drop(ds);
    pool.export().unwrap();
    let events = dev.events.lock().unwrap().clone();
    assert!(acks.len() >= 20);

    // Cut points: every flush, a point between flushes, and the end.
    let mut cuts: Vec<usize> = (start..=events.len()).filter(|&i| i == events.len() || matches!(events[i], Event::Flush)).collect();
    cuts.extend((start..events.len()).step_by(7));
    cuts.sort_unstable();
    cuts.dedup();
    let mut rng = 0x2545F4914F6CDD1Du64;
    let mut checked = 0;
    for (n, &cut) in cuts.iter().enumerate() {
        // Variants: in order; last write torn; unflushed writes in a random subset.
        for variant in 0..3 {
            let mut image = initial.clone();
            let last_flush = events[..cut].iter().rposition(|e| matches!(e, Event::Flush)).map_or(0, |p| p + 1);
            for (i, e) in events[..cut].iter().enumerate() {
                let Event::Write(off, bytes) = e else { continue };
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let unflushed = i >= last_flush;
                let keep = match variant {
                    2 if unflushed => rng % 2 == 0,
                    _ => true,
                };
                let len = if variant == 1 && i + 1 == cut { bytes.len() / 2 } else { bytes.len() };
                if keep {
                    image[*off as usize..*off as usize + len].copy_from_slice(&bytes[..len]);
                }
            }
            let pool = import(MemDevice::new(image));
            let scrub = pool.scrub().unwrap();
            assert_eq!(scrub.errors, 0, "cut {cut} variant {variant}: the pool verifies");
            // Every fsync that returned before the crash instant must be honoured, whatever
            // happened to the writes not yet flushed.
            let acked: Vec<&Ack> = acks.iter().filter(|a| a.at <= cut).collect();
            if let Some(a) = acked.last() {
                let got = read_file(&pool, b"log").expect("acknowledged file exists");
                assert!(got.len() >= a.log_len, "cut {cut} v{variant}: log has {} of {} acked bytes", got.len(), a.log_len);
                assert_eq!(&got[..a.log_len], &log_model[..a.log_len], "cut {cut} v{variant}: acked log bytes");
                let d = read_file(&pool, b"data").expect("data file exists");
                for &(page, byte) in &a.pages {
                    let p = &d[page as usize * 16384..(page as usize + 1) * 16384];
                    assert!(p.iter().all(|&b| b == byte), "cut {cut} v{variant}: acked page {page}");
                }
            }
            checked += 1;
            drop(pool);
        }
        if n > 400 {
            break;
        }
    }
    assert!(checked > 60, "checked {checked} images");
}

/// logbias=latency copies written data into the log and fsync costs one log write;
/// logbias=throughput writes the data once, in place: fsync commits a txg, the log
/// carries none of it.
#[test]
fn logbias_chooses_between_a_log_write_and_an_in_place_commit() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("d0.img");
    let never = TxgConfig { timeout: Duration::from_secs(3600), ..Default::default() };
    let opts = CreateOptions { size: Some(SIZE), txg: never, ..Default::default() };
    let pool = Pool::create("tank", &[VdevSpec::Disk(img)], &opts).unwrap();
    pool.create_dataset("tank/lat").unwrap();
    pool.create_dataset("tank/thr").unwrap();
    pool.set_property("tank/thr", "logbias", "throughput").unwrap();
    pool.sync().unwrap();
    let log_bytes = |p: &Pool| p.stats().zil["bytes_written"];
    let page = vec![3u8; 65536];
    let ds = pool.dataset("tank/lat").unwrap();
    let f = ds.create(ROOT_ID, b"f", NewObject::File, 0o644, 0, 0).unwrap();
    let (txg0, log0) = (pool.txg().synced(), log_bytes(&pool));
    ds.write(f.ino, 0, &page).unwrap();
    ds.fsync(f.ino).unwrap();
    assert_eq!(pool.txg().synced(), txg0, "latency: no txg commit");
    assert!(log_bytes(&pool) - log0 >= page.len() as u64, "latency: the data went to the log");
    let ds = pool.dataset("tank/thr").unwrap();
    let f = ds.create(ROOT_ID, b"f", NewObject::File, 0o644, 0, 0).unwrap();
    let (txg0, log0) = (pool.txg().synced(), log_bytes(&pool));
    ds.write(f.ino, 0, &page).unwrap();
    ds.fsync(f.ino).unwrap();
    assert!(pool.txg().synced() > txg0, "throughput: fsync committed the data in place");
    assert!(log_bytes(&pool) - log0 < 4096, "throughput: the data did not go through the log");
}

/// fsync is per file: fsyncing a redo log does not drag other files' unsynced data
/// through the intent log (a database's data files are written in the background).
#[test]
fn fsync_of_one_file_logs_only_that_file_and_the_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("d0.img");
    let never = TxgConfig { timeout: Duration::from_secs(3600), ..Default::default() };
    let opts = CreateOptions { size: Some(SIZE), txg: never, ..Default::default() };
    let pool = Pool::create("tank", &[VdevSpec::Disk(img)], &opts).unwrap();
    let ds = pool.dataset("tank").unwrap();
    let data = ds.create(ROOT_ID, b"table.ibd", NewObject::File, 0o644, 0, 0).unwrap();
    let redo = ds.create(ROOT_ID, b"redo", NewObject::File, 0o644, 0, 0).unwrap();
    ds.write(data.ino, 0, &vec![9u8; 1 << 20]).unwrap();
    let before = pool.stats().zil["bytes_written"];
    ds.write(redo.ino, 0, &[1u8; 700]).unwrap();
    ds.fsync(redo.ino).unwrap();
    let logged = pool.stats().zil["bytes_written"] - before;
    assert!(logged < 64 << 10, "the redo fsync logged {logged} bytes; the 1 MiB of table data is not its business");
    ds.fsync(data.ino).unwrap();
    assert!(pool.stats().zil["bytes_written"] - before >= 1 << 20, "fsync of the table logs its data");
}

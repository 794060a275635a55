//! The intent log: what fsync acknowledged survives a crash that loses everything not yet
//! committed by a txg — shown by cutting the device's write stream at many points
//! (at flushes, between them, with a torn write, and with writes since the last flush
//! landing in any subset), importing each image and checking every acknowledged byte.
mod common;

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

/// An in-memory device that records every write and flush, can play dead (writes
/// vanish, as at power loss), and can hold one flush (`hold_next_flush`) until released.
struct MemDevice {
    data: Mutex<Vec<u8>>,
    events: Mutex<Vec<Event>>,
    dead: std::sync::atomic::AtomicBool,
    path: PathBuf,
    held_flush: (Mutex<FlushHold>, std::sync::Condvar),
}

/// Where the one held flush is.
#[derive(Default, PartialEq)]
enum FlushHold {
    #[default]
    Off,
    /// The next flush stops here.
    Armed,
    /// A flush is stopped (others pass).
    Holding,
    Released,
}

impl MemDevice {
    fn new(image: Vec<u8>) -> Arc<MemDevice> {
        Arc::new(MemDevice {
            data: Mutex::new(image),
            events: Mutex::new(Vec::new()),
            dead: Default::default(),
            path: PathBuf::from("mem0"),
            held_flush: Default::default(),
        })
    }

    /// The next flush waits until `release_flush` (every later one passes).
    fn hold_next_flush(&self) {
        *self.held_flush.0.lock().unwrap() = FlushHold::Armed;
    }

    /// Returns once a flush is held.
    fn wait_flush_held(&self) {
        let (lock, cv) = &self.held_flush;
        let mut h = lock.lock().unwrap();
        while *h != FlushHold::Holding {
            h = cv.wait(h).unwrap();
        }
    }

    fn release_flush(&self) {
        let (lock, cv) = &self.held_flush;
        *lock.lock().unwrap() = FlushHold::Released;
        cv.notify_all();
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
        {
            let (lock, cv) = &self.held_flush;
            let mut h = lock.lock().unwrap();
            if *h == FlushHold::Armed {
                *h = FlushHold::Holding;
                cv.notify_all();
                while *h == FlushHold::Holding {
                    h = cv.wait(h).unwrap();
                }
            }
        }
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

/// One page per fsync: copied into the log.
#[test]
fn every_acknowledged_byte_survives_any_cut_of_the_write_stream() {
    acknowledged_bytes_survive_cuts("latency", 16384, 1, 40);
}

/// Three whole pages per fsync, a page batch: written in place, logged as pointers.
#[test]
fn every_acknowledged_byte_survives_any_cut_with_page_batches() {
    acknowledged_bytes_survive_cuts("latency", 16384, 3, 40);
}

/// Small writes, but fsynced in batches of more than the bulk size: the batch goes in
/// place (a database's data-file fsync after a page flush).
#[test]
fn every_acknowledged_byte_survives_any_cut_with_bulk_fsyncs() {
    acknowledged_bytes_survive_cuts("latency", 16384, 20, 300);
}

/// The same with the data written in place at fsync and only pointers logged: the log
/// must never survive a cut that its data blocks did not.
#[test]
fn every_acknowledged_byte_survives_any_cut_with_data_written_in_place() {
    acknowledged_bytes_survive_cuts("throughput", 16384, 3, 40);
}

/// Large writes (64 KiB, above the immediate-write size) go in place even with
/// logbias=latency when there is no log device.
#[test]
fn every_acknowledged_large_write_survives_any_cut() {
    acknowledged_bytes_survive_cuts("latency", 65536, 3, 40);
}

/// A database's page flush: pages scattered over a file, then one fsync of more than the
/// bulk size. Its pages go in place together, in chunks of 1 MiB — as few device
/// writes as the vdev's max_io allows, and the log blocks — not one per page; each is
/// logged as a pointer. 96 pages (1.5 MiB) are written in two chunks.
#[test]
fn a_bulk_fsync_writes_its_pages_in_place_together_not_one_device_write_each() {
    for pages in [32, 96] {
        bulk_fsync_of_scattered_pages(pages);
    }
}

fn bulk_fsync_of_scattered_pages(pages: u64) {
    let dir = tempfile::tempdir().unwrap();
    let dev = MemDevice::new(fresh_image(dir.path()));
    // No txg closes during the test, so every page is still in the open txg at fsync.
    let cfg = TxgConfig {
        timeout: Duration::from_secs(600),
        dirty_max: 64 << 20,
        dirty_sync: 32 << 20,
        ..Default::default()
    };
    let pool = Pool::import(vec![dev.clone() as Arc<dyn BlockDevice>], &ImportOptions { txg: cfg }).unwrap();
    let ds = pool.dataset("tank").unwrap();
    let data = ds.create(ROOT_ID, b"data", NewObject::File, 0o644, 0, 0).unwrap();
    for p in 0..pages {
        ds.write(data.ino, p * 5 * 16384, &common::noise(p, 16384)).unwrap();
    }
    let (events_before, indirect_before) = (dev.events_len(), pool.stats().zil["indirect_records"]);
    ds.fsync(data.ino).unwrap();
    let device_writes =
        dev.events.lock().unwrap()[events_before..].iter().filter(|e| matches!(e, Event::Write(..))).count();
    assert_eq!(pool.stats().zil["indirect_records"] - indirect_before, pages, "every page logged as a pointer");
    // One write per page was the old way: 33 writes for 32 pages; now 5.
    assert!(device_writes as u64 <= pages / 4, "{device_writes} device writes for one bulk fsync of {pages} pages");
    drop(ds);
    pool.export().unwrap();
    let pool = import(dev);
    let ds = pool.dataset("tank").unwrap();
    for p in 0..pages {
        let mut page = vec![0u8; 16384];
        ds.read(data.ino, p * 5 * 16384, &mut page).unwrap();
        assert!(page == common::noise(p, 16384), "page {p} reads back after export and import");
    }
}

fn acknowledged_bytes_survive_cuts(logbias: &str, page_len: usize, fsync_every: u64, txg_ms: u64) {
    let dir = tempfile::tempdir().unwrap();
    let initial = fresh_image(dir.path());
    let dev = MemDevice::new(initial.clone());
    let cfg = TxgConfig {
        timeout: Duration::from_millis(txg_ms),
        dirty_max: 64 << 20,
        dirty_sync: 8 << 20,
        ..Default::default()
    };
    let pool = Pool::import(vec![dev.clone() as Arc<dyn BlockDevice>], &ImportOptions { txg: cfg }).unwrap();
    pool.set_property("tank", "logbias", logbias).unwrap();
    let start = dev.events_len();
    let ds = pool.dataset("tank").unwrap();
    let log = ds.create(ROOT_ID, b"log", NewObject::File, 0o644, 0, 0).unwrap();
    let data = ds.create(ROOT_ID, b"data", NewObject::File, 0o644, 0, 0).unwrap();
    let mut acks = Vec::new();
    let mut log_model = Vec::new();
    let mut pages = Vec::new();
    let rounds = (fsync_every * 8).max(60);
    for round in 0..rounds {
        // A redo-log style append of 700 bytes, and one page written (pages are
        // rewritten: some records change again after an fsync wrote them in place).
        let rec: Vec<u8> = (0..700).map(|i| (round * 7 + i) as u8).collect();
        ds.write(log.ino, log_model.len() as u64, &rec).unwrap();
        log_model.extend_from_slice(&rec);
        let page = (round * 37) % (200 * 16384 / page_len as u64);
        ds.write(data.ino, page * page_len as u64, &vec![round as u8 + 1; page_len]).unwrap();
        pages.push((page, round as u8 + 1));
        if round % fsync_every == fsync_every - 1 {
            // fsync is per file (as in POSIX and ZFS): both files are made durable.
            ds.fsync(data.ino).unwrap();
            ds.fsync(log.ino).unwrap();
            acks.push(Ack { at: dev.events_len(), log_len: log_model.len(), pages: pages.clone() });
        }
        if round % 20 == 7 {
            std::thread::sleep(Duration::from_millis(50)); // let a txg commit land mid-run
        }
    }
    let bulk = fsync_every * page_len as u64 > tarn_zil::BULK_IN_PLACE;
    // The dataset's records are 16 KiB: a 16 KiB page is a whole record.
    let page_batch = page_len == 16384 && fsync_every * page_len as u64 >= tarn_dataset::IMMEDIATE_WRITE_BYTES as u64;
    if logbias == "throughput" || page_len >= tarn_dataset::IMMEDIATE_WRITE_BYTES || bulk || page_batch {
        assert!(
            pool.stats().zil["indirect_records"] > 0,
            "the writes were logged as pointers to blocks written in place"
        );
    } else {
        assert_eq!(pool.stats().zil["indirect_records"], 0, "the writes were copied into the log");
    }
    drop(ds);
    pool.export().unwrap();
    let events = dev.events.lock().unwrap().clone();
    assert!(acks.len() as u64 >= rounds / fsync_every);

    // Cut points: every flush, a point between flushes, and the end.
    let mut cuts: Vec<usize> =
        (start..=events.len()).filter(|&i| i == events.len() || matches!(events[i], Event::Flush)).collect();
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
                let Event::Write(off, bytes) = e else {
                    continue;
                };
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let unflushed = i >= last_flush;
                let keep = match variant {
                    2 if unflushed => rng.is_multiple_of(2),
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
                assert!(
                    got.len() >= a.log_len,
                    "cut {cut} v{variant}: log has {} of {} acked bytes",
                    got.len(),
                    a.log_len
                );
                assert_eq!(&got[..a.log_len], &log_model[..a.log_len], "cut {cut} v{variant}: acked log bytes");
                let d = read_file(&pool, b"data").expect("data file exists");
                // Each acked page holds its last acked value, or a value written to it
                // later (an unacknowledged write may survive, in whole records).
                let mut last_acked = std::collections::BTreeMap::new();
                for &(page, byte) in &a.pages {
                    last_acked.insert(page, byte);
                }
                for (&page, &byte) in &last_acked {
                    let later: Vec<u8> =
                        pages[a.pages.len()..].iter().filter(|(p, _)| *p == page).map(|(_, b)| *b).collect();
                    for chunk in d[page as usize * page_len..(page as usize + 1) * page_len].chunks(16384) {
                        let ok =
                            chunk.iter().all(|&b| b == chunk[0]) && (chunk[0] == byte || later.contains(&chunk[0]));
                        assert!(ok, "cut {cut} v{variant}: acked page {page} holds {} instead of {byte}", chunk[0]);
                    }
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

/// Bytes that do not compress, so sizes on disk are predictable.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    common::noise(seed, len)
}

fn never_commit_pool(dir: &Path) -> Pool {
    let never = TxgConfig { timeout: Duration::from_secs(3600), ..Default::default() };
    let opts = CreateOptions { size: Some(SIZE), txg: never, ..Default::default() };
    Pool::create("tank", &[VdevSpec::Disk(dir.join("d0.img"))], &opts).unwrap()
}

/// logbias=latency copies small writes into the log; logbias=throughput writes the
/// touched records in place at fsync and logs only pointers to them. Neither commits a
/// txg, and the txg then adopts the blocks written in place instead of writing the data
/// a second time.
#[test]
fn logbias_chooses_between_copying_into_the_log_and_writing_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let pool = never_commit_pool(dir.path());
    pool.create_dataset("tank/lat").unwrap();
    pool.create_dataset("tank/thr").unwrap();
    pool.set_property("tank/thr", "logbias", "throughput").unwrap();
    pool.sync().unwrap();
    let zil = |p: &Pool, k: &str| p.stats().zil[k];
    let io = |p: &Pool, k: &str| p.stats().io[k];

    let ds = pool.dataset("tank/lat").unwrap();
    let f = ds.create(ROOT_ID, b"f", NewObject::File, 0o644, 0, 0).unwrap();
    let (txg0, log0, ind0) = (pool.txg().synced(), zil(&pool, "bytes_written"), zil(&pool, "indirect_records"));
    for i in 0..4u64 {
        ds.write(f.ino, i * 8192, &noise(8192, i)).unwrap(); // small: below the immediate-write size
    }
    ds.fsync(f.ino).unwrap();
    assert_eq!(pool.txg().synced(), txg0, "latency: no txg commit");
    assert!(zil(&pool, "bytes_written") - log0 >= 32768, "latency: the data went to the log");
    assert_eq!(zil(&pool, "indirect_records"), ind0, "latency: no pointers logged");
    pool.sync().unwrap(); // what follows measures the next txg alone
    drop(ds);

    let ds = pool.dataset("tank/thr").unwrap();
    let f = ds.create(ROOT_ID, b"f", NewObject::File, 0o644, 0, 0).unwrap();
    let data = noise(65536, 99);
    let (txg0, log0, ind0) = (pool.txg().synced(), zil(&pool, "bytes_written"), zil(&pool, "indirect_records"));
    let phys0 = io(&pool, "physical_bytes_written");
    for i in 0..8 {
        ds.write(f.ino, i * 8192, &data[i as usize * 8192..(i as usize + 1) * 8192]).unwrap();
    }
    ds.fsync(f.ino).unwrap();
    assert_eq!(pool.txg().synced(), txg0, "throughput: fsync did not wait for a txg");
    assert!(
        zil(&pool, "bytes_written") - log0 <= 4096,
        "throughput: the data did not go through the log (one 4 KiB log block)"
    );
    assert_eq!(zil(&pool, "indirect_records") - ind0, 8, "throughput: one pointer per write");
    assert!(io(&pool, "physical_bytes_written") - phys0 >= 65536, "throughput: the four records were written in place");
    let phys1 = io(&pool, "physical_bytes_written");
    pool.sync().unwrap();
    let synced_bytes = io(&pool, "physical_bytes_written") - phys1;
    assert!(synced_bytes < 32768, "the txg adopted the blocks written in place; it wrote {synced_bytes} bytes");
    drop((ds, f));
    pool.export().unwrap();
    let pool = Pool::import_paths(&[dir.path().join("d0.img")], &ImportOptions::default()).unwrap();
    let ds = pool.dataset("tank/thr").unwrap();
    let a = ds.lookup(ROOT_ID, b"f").unwrap();
    let mut back = vec![0u8; 65536];
    assert_eq!(ds.read(a.ino, 0, &mut back).unwrap(), 65536);
    assert!(back == data, "the adopted blocks read back as written");
    assert_eq!(pool.scrub().unwrap().errors, 0);
}

/// Without a log device, an fsync that would copy more than the bulk size of small writes
/// into the log writes them in place instead (once, not twice); a small one copies. A
/// page batch — whole records, at least the immediate-write size of them — goes in place
/// too, and `copied_bytes` counts what the log did copy.
#[test]
fn a_bulk_fsync_of_small_writes_goes_in_place_without_a_log_device() {
    let dir = tempfile::tempdir().unwrap();
    let pool = never_commit_pool(dir.path());
    pool.set_property("tank", "recordsize", "16K").unwrap();
    let ds = pool.dataset("tank").unwrap();
    let f = ds.create(ROOT_ID, b"t.ibd", NewObject::File, 0o644, 0, 0).unwrap();
    let zil = |k: &str| pool.stats().zil[k];
    let (log0, ind0, copied0) = (zil("bytes_written"), zil("indirect_records"), zil("copied_bytes"));
    for page in 0..8u64 {
        ds.write(f.ino, page * 16384 + 4096, &noise(8192, page)).unwrap();
    }
    ds.fsync(f.ino).unwrap();
    assert_eq!(zil("indirect_records"), ind0, "64 KiB in parts of records: copied into the log");
    assert!(zil("bytes_written") - log0 >= 65536);
    assert_eq!(zil("copied_bytes") - copied0, 65536, "copied_bytes counts the file data copied");
    let (log0, ind0) = (zil("bytes_written"), zil("indirect_records"));
    for page in 0..4u64 {
        ds.write(f.ino, page * 16384, &noise(16384, page + 50)).unwrap();
    }
    ds.fsync(f.ino).unwrap();
    assert_eq!(zil("indirect_records") - ind0, 4, "a batch of 4 whole pages: every page in place");
    assert!(zil("bytes_written") - log0 < 16384, "only pointers went to the log");
    let (log0, ind0) = (zil("bytes_written"), zil("indirect_records"));
    let pages = tarn_zil::BULK_IN_PLACE / 8192 + 8;
    for page in 0..pages {
        ds.write(f.ino, page * 16384, &noise(8192, page + 100)).unwrap();
    }
    ds.fsync(f.ino).unwrap();
    assert_eq!(zil("indirect_records") - ind0, pages, "a bulk fsync: every touched record in place");
    assert!(zil("bytes_written") - log0 < 16384, "only pointers went to the log");
}

/// A record fsynced (written in place), changed again, and fsynced again leaves a block
/// no txg adopts: it is freed with that txg, so nothing leaks, and the file holds the
/// last version.
#[test]
fn blocks_written_in_place_and_superseded_are_freed() {
    let dir = tempfile::tempdir().unwrap();
    let pool = never_commit_pool(dir.path());
    pool.set_property("tank", "logbias", "throughput").unwrap();
    let ds = pool.dataset("tank").unwrap();
    pool.sync().unwrap();
    let allocated = |p: &Pool| p.stats().space["allocated_sector_bytes"];
    let base = allocated(&pool);
    let f = ds.create(ROOT_ID, b"page", NewObject::File, 0o644, 0, 0).unwrap();
    for round in 0..20u64 {
        ds.write(f.ino, 0, &noise(16384, round + 1)).unwrap();
        ds.fsync(f.ino).unwrap();
    }
    // Changed after its last fsync: the txg must write this version, not adopt the old.
    let last = noise(16384, 777);
    ds.write(f.ino, 0, &last).unwrap();
    pool.sync().unwrap();
    pool.sync().unwrap(); // frees of the first sync are released after the second
    let used = allocated(&pool) - base;
    assert!(used < 3 * 16384, "20 versions of one 16 KiB page written in place, {used} bytes still allocated");
    let mut back = vec![0u8; 16384];
    ds.read(f.ino, 0, &mut back).unwrap();
    assert!(back == last, "the file holds the last version");
    ds.unlink(ROOT_ID, b"page").unwrap();
    pool.sync().unwrap();
    pool.sync().unwrap();
    assert!(allocated(&pool) <= base + 8192, "after unlink the pool is back to its base allocation");
}

/// Power loss after a throughput-mode fsync, before any txg: replay reads the data from
/// the blocks written in place and the file is whole.
#[test]
fn data_written_in_place_is_replayed_after_power_loss() {
    let dir = tempfile::tempdir().unwrap();
    let dev = MemDevice::new(fresh_image(dir.path()));
    let never = TxgConfig { timeout: Duration::from_secs(3600), ..Default::default() };
    let pool = Pool::import(vec![dev.clone() as Arc<dyn BlockDevice>], &ImportOptions { txg: never }).unwrap();
    pool.set_property("tank", "logbias", "throughput").unwrap();
    pool.sync().unwrap();
    let ds = pool.dataset("tank").unwrap();
    let synced_txg = pool.txg().synced();
    let f = ds.create(ROOT_ID, b"table.ibd", NewObject::File, 0o644, 0, 0).unwrap();
    let mut model = vec![0u8; 10 * 16384];
    for (i, page) in [3usize, 0, 7, 3, 9].iter().enumerate() {
        let bytes = noise(16384, i as u64 + 10);
        ds.write(f.ino, (page * 16384) as u64, &bytes).unwrap();
        model[page * 16384..(page + 1) * 16384].copy_from_slice(&bytes);
        ds.fsync(f.ino).unwrap();
    }
    ds.write(f.ino, 100, b"a small change inside page 0").unwrap();
    model[100..128].copy_from_slice(b"a small change inside page 0");
    ds.fsync(f.ino).unwrap();
    assert_eq!(pool.txg().synced(), synced_txg, "no txg committed");
    dev.dead.store(true, std::sync::atomic::Ordering::SeqCst);
    drop(ds);
    drop(pool);
    dev.dead.store(false, std::sync::atomic::Ordering::SeqCst);
    let pool = import(dev);
    assert!(read_file(&pool, b"table.ibd").as_deref() == Some(&model[..]), "every fsynced page is back");
    assert_eq!(pool.scrub().unwrap().errors, 0);
}

/// Writes of whole 128 KiB records are queued to go in place; when their txg is already
/// syncing at the fsync, they are copied into the log instead, in records a log block
/// can hold. (Copied as one record each, they fit no block: the commit wrote empty log
/// blocks until the pool was full, and replay after a crash then found no room for the
/// records and dropped them — PostgreSQL lost every acknowledged commit.)
#[test]
fn whole_records_copied_because_their_txg_is_syncing_survive_power_loss() {
    let dir = tempfile::tempdir().unwrap();
    let dev = MemDevice::new(fresh_image(dir.path()));
    let never = TxgConfig { timeout: Duration::from_secs(3600), ..Default::default() };
    let pool = Pool::import(vec![dev.clone() as Arc<dyn BlockDevice>], &ImportOptions { txg: never }).unwrap();
    pool.set_property("tank", "recordsize", "128K").unwrap();
    let ds = pool.dataset("tank").unwrap();
    let f = ds.create(ROOT_ID, b"000000010000000000000002", NewObject::File, 0o600, 0, 0).unwrap();
    pool.sync().unwrap();
    let data = noise(4 << 17, 7);
    ds.write(f.ino, 0, &data).unwrap();
    let free_before = pool.available();
    std::thread::scope(|s| {
        // The txg holding the writes syncs, and stops at its flush: not open, not committed.
        dev.hold_next_flush();
        let syncer = s.spawn(|| pool.sync());
        dev.wait_flush_held();
        ds.fsync(f.ino).expect("the fsync of writes whose txg is syncing");
        let log_bytes = free_before.saturating_sub(pool.available());
        assert!(log_bytes < 4 << 20, "the commit took {log_bytes} bytes of log space for 512 KiB of data");
        // Power is lost before the txg's uberblock is written.
        dev.dead.store(true, std::sync::atomic::Ordering::SeqCst);
        dev.release_flush();
        let _ = syncer.join();
    });
    drop(ds);
    drop(pool);
    dev.dead.store(false, std::sync::atomic::Ordering::SeqCst);
    let pool = import(dev);
    assert_eq!(pool.status().replay_trouble, None, "every record applies");
    assert!(
        read_file(&pool, b"000000010000000000000002").as_deref() == Some(&data[..]),
        "the fsynced records are back"
    );
    assert_eq!(pool.scrub().unwrap().errors, 0);
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
    let ind = pool.stats().zil["indirect_records"];
    ds.fsync(data.ino).unwrap();
    // 1 MiB in one write is above the immediate-write size: logged as pointers to its 8
    // records (the default 128 KiB recordsize) written in place.
    assert_eq!(pool.stats().zil["indirect_records"] - ind, 8, "fsync of the table logs its data");
}

/// Rewrites the version field of every intent-log block in `image` (re-sealing its
/// checksum), as an older or newer tarn would have written it.
fn set_log_version(image: &mut [u8], version: u32) -> usize {
    let mut patched = 0;
    for at in (0..image.len() - 96).step_by(4096) {
        if &image[at..at + 8] != b"TARNZIL1" {
            continue;
        }
        let len = u32::from_le_bytes(image[at + 12..at + 16].try_into().unwrap()) as usize;
        let end = at + 96 + len;
        let block = &mut image[at..end];
        block[8..12].copy_from_slice(&version.to_le_bytes());
        block[64..80].fill(0);
        let sum = xxhash_rust::xxh3::xxh3_128(block);
        block[64..80].copy_from_slice(&sum.to_le_bytes());
        patched += 1;
    }
    patched
}

/// An image whose last fsync is only in the intent log (power lost before any txg).
fn image_with_logged_write(payload: &[u8]) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let dev = MemDevice::new(fresh_image(dir.path()));
    let never = TxgConfig { timeout: Duration::from_secs(3600), ..Default::default() };
    let pool = Pool::import(vec![dev.clone() as Arc<dyn BlockDevice>], &ImportOptions { txg: never }).unwrap();
    let ds = pool.dataset("tank").unwrap();
    let f = ds.create(ROOT_ID, b"redo", NewObject::File, 0o644, 0, 0).unwrap();
    ds.write(f.ino, 0, payload).unwrap();
    ds.fsync(f.ino).unwrap();
    dev.dead.store(true, std::sync::atomic::Ordering::SeqCst);
    drop(ds);
    drop(pool);
    let image = dev.data.lock().unwrap().clone();
    image
}

/// Log version 1 (before indirect records) is still replayed; a log from a newer tarn is
/// refused with a clear error instead of being dropped (its records may be acknowledged
/// writes), and the refusal leaves the image untouched.
#[test]
fn an_older_log_version_is_replayed_and_a_newer_one_refused() {
    let payload = b"committed by fsync, in a version-1 log".to_vec();
    let mut v1 = image_with_logged_write(&payload);
    assert!(set_log_version(&mut v1, 1) > 0, "the image has log blocks");
    let pool = import(MemDevice::new(v1));
    assert_eq!(read_file(&pool, b"redo"), Some(payload.clone()), "a version-1 log is replayed");
    drop(pool);

    let mut v3 = image_with_logged_write(&payload);
    set_log_version(&mut v3, tarn_zil::ZIL_VERSION + 1);
    let before = v3.clone();
    let dev = MemDevice::new(v3);
    let err = match Pool::import(vec![dev.clone() as Arc<dyn BlockDevice>], &ImportOptions::default()) {
        Ok(_) => panic!("a newer log version must be refused"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("intent log block") && err.contains("version 3"), "{err}");
    assert!(err.contains("import the pool with the tarn that wrote it"), "{err}");
    assert!(*dev.data.lock().unwrap() == before, "a refused import writes nothing");
}

/// Concurrent fsyncs — a redo log, data files fsynced in bulk (written in place), and
/// renames into place — then power loss at a random moment: everything each thread saw
/// acknowledged is there. Bulk commits resolve without holding the log, so this checks
/// that the log keeps the order replay needs.
#[test]
fn concurrent_fsyncs_keep_every_acknowledged_change_across_power_loss() {
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    for seed in 0..4u64 {
        let dir = tempfile::tempdir().unwrap();
        let dev = MemDevice::new(fresh_image(dir.path()));
        let cfg = TxgConfig { timeout: Duration::from_millis(150), ..Default::default() };
        let pool = Pool::import(vec![dev.clone() as Arc<dyn BlockDevice>], &ImportOptions { txg: cfg }).unwrap();
        let ds = pool.dataset("tank").unwrap();
        let stop = AtomicBool::new(false);
        let snapshot: Mutex<Vec<(String, Vec<u8>, u64)>> = Mutex::new(Vec::new());
        // Per thread: the file it owns and the content last acknowledged.
        let acked: Vec<Mutex<(String, Vec<u8>, u64)>> =
            (0..4).map(|_| Mutex::new((String::new(), Vec::new(), 0))).collect();
        std::thread::scope(|s| {
            for t in 0..4usize {
                let (ds, stop, acked) = (&ds, &stop, &acked);
                s.spawn(move || {
                    let mut round = 0u64;
                    while !stop.load(SeqCst) {
                        round += 1;
                        let name = match t {
                            // 0, 1: redo logs, 700-byte appends.
                            0 | 1 => format!("redo{t}"),
                            // 2: a data file rewritten in bulk (24 pages), fsynced.
                            2 => "data".to_string(),
                            // 3: write a new file, fsync it, rename it into place, fsync the directory.
                            _ => format!("conf.{round}"),
                        };
                        let ino = match ds.lookup(ROOT_ID, name.as_bytes()) {
                            Ok(a) => a.ino,
                            Err(_) => ds.create(ROOT_ID, name.as_bytes(), NewObject::File, 0o644, 0, 0).unwrap().ino,
                        };
                        let mut content = acked[t].lock().unwrap().1.clone();
                        match t {
                            0 | 1 => {
                                let rec = noise(700, seed * 1000 + round + t as u64 * 7);
                                ds.write(ino, content.len() as u64, &rec).unwrap();
                                content.extend_from_slice(&rec);
                            }
                            2 => {
                                content = noise(24 * 16384, seed * 1000 + round);
                                for p in 0..24 {
                                    ds.write(ino, p * 16384, &content[p as usize * 16384..(p as usize + 1) * 16384])
                                        .unwrap();
                                }
                            }
                            _ => {
                                content = noise(3000, seed * 1000 + round);
                                ds.write(ino, 0, &content).unwrap();
                            }
                        }
                        ds.fsync(ino).unwrap();
                        let final_name = if t == 3 {
                            ds.rename(ROOT_ID, name.as_bytes(), ROOT_ID, b"conf", false).unwrap();
                            ds.fsync(ROOT_ID).unwrap();
                            "conf".to_string()
                        } else {
                            name
                        };
                        *acked[t].lock().unwrap() = (final_name, content, round);
                    }
                });
            }
            std::thread::sleep(Duration::from_millis(200 + seed * 70));
            // What was acknowledged before the power loss; then nothing reaches the device
            // (fsyncs that return after this point are not durable and not checked).
            let at_loss: Vec<(String, Vec<u8>, u64)> = acked.iter().map(|m| m.lock().unwrap().clone()).collect();
            dev.dead.store(true, SeqCst);
            stop.store(true, SeqCst);
            *snapshot.lock().unwrap() = at_loss;
        });
        let at_loss = snapshot.into_inner().unwrap();
        drop(ds);
        drop(pool);
        dev.dead.store(false, SeqCst);
        let pool = import(dev);
        for (t, (name, content, round)) in at_loss.iter().enumerate() {
            if name.is_empty() {
                continue;
            }
            let got = read_file(&pool, name.as_bytes())
                .unwrap_or_else(|| panic!("seed {seed} thread {t}: {name} is missing"));
            match t {
                0 | 1 => assert!(
                    got.len() >= content.len() && got[..content.len()] == content[..],
                    "seed {seed}: {name} lost acknowledged appends"
                ),
                // The acknowledged version, or (in whole pages) one written after it.
                2 => {
                    let later: Vec<Vec<u8>> = (1..40).map(|k| noise(24 * 16384, seed * 1000 + round + k)).collect();
                    for (p, page) in got.chunks(16384).enumerate() {
                        let r = p * 16384..(p + 1) * 16384;
                        let ok = page == &content[r.clone()] || later.iter().any(|v| page == &v[r.clone()]);
                        assert!(ok, "seed {seed}: data page {p} is older than acknowledged");
                    }
                    assert_eq!(got.len(), content.len());
                }
                _ => {
                    let ok = got == *content || (1..40).any(|k| got == noise(3000, seed * 1000 + round + k));
                    assert!(ok, "seed {seed}: conf is older than acknowledged");
                }
            }
        }
        assert_eq!(pool.scrub().unwrap().errors, 0);
    }
}

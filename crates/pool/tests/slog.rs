//! A separate log device (SLOG): fsync writes go to it and nowhere else, replay finds
//! them there after a crash, and a missing log device does not block import — it says
//! plainly whether anything acknowledged could have been lost.
mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Ev, MemDevice, RecDevice};
use parking_lot::Mutex;
use tarn_dataset::{NewObject, ROOT_ID};
use tarn_pool::{CreateOptions, ImportOptions, Pool, VdevSpec};
use tarn_txg::TxgConfig;
use tarn_vdev::BlockDevice;

/// Images of a fresh pool with one data device and one log device, exported.
fn fresh() -> (Vec<u8>, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let (data, slog) = (dir.path().join("d.img"), dir.path().join("slog.img"));
    std::fs::write(&slog, vec![0u8; 64 << 20]).unwrap();
    let opts = CreateOptions { size: Some(128 << 20), logs: vec![VdevSpec::Disk(slog.clone())], ..Default::default() };
    Pool::create("tank", &[VdevSpec::Disk(data.clone())], &opts).unwrap().export().unwrap();
    (std::fs::read(data).unwrap(), std::fs::read(slog).unwrap())
}

fn never_commit() -> ImportOptions {
    ImportOptions { txg: TxgConfig { timeout: Duration::from_secs(3600), ..Default::default() } }
}

fn import(devs: Vec<Vec<u8>>) -> Pool {
    let devs: Vec<Arc<dyn BlockDevice>> = devs
        .into_iter()
        .enumerate()
        .map(|(i, img)| MemDevice::new(img, &format!("dev{i}")) as Arc<dyn BlockDevice>)
        .collect();
    Pool::import(devs, &ImportOptions::default()).expect("imports")
}

fn read(pool: &Pool, name: &[u8]) -> Option<Vec<u8>> {
    let ds = pool.dataset("tank").unwrap();
    let a = ds.lookup(ROOT_ID, name).ok()?;
    common::read_file(&ds, a.ino).ok()
}

/// Opens the pool on recording devices, fsyncs a few writes, and returns the device
/// images as they are at that instant (a crash right after the last fsync) with the
/// writes each device saw during the fsyncs.
fn fsync_then_crash(data: Vec<u8>, slog: Vec<u8>, payload: &[u8]) -> (Vec<u8>, Vec<u8>, usize, usize) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let d = RecDevice::shared(data, "data", 0, log.clone());
    let l = RecDevice::shared(slog, "slog", 1, log.clone());
    let pool =
        Pool::import(vec![d.clone() as Arc<dyn BlockDevice>, l.clone() as Arc<dyn BlockDevice>], &never_commit())
            .unwrap();
    let ds = pool.dataset("tank").unwrap();
    let mark = log.lock().len();
    let f = ds.create(ROOT_ID, b"redo", NewObject::File, 0o644, 0, 0).unwrap();
    for (i, chunk) in payload.chunks(700).enumerate() {
        ds.write(f.ino, (i * 700) as u64, chunk).unwrap();
        ds.fsync(f.ino).unwrap();
    }
    let writes =
        |id: usize| log.lock()[mark..].iter().filter(|(dev, e)| *dev == id && matches!(e, Ev::Write { .. })).count();
    let (on_data, on_log) = (writes(0), writes(1));
    let images = (d.inner.image.lock().clone(), l.inner.image.lock().clone());
    std::mem::forget(pool); // the crash: nothing more reaches the devices
    (images.0, images.1, on_data, on_log)
}

#[test]
fn fsync_writes_go_to_the_log_device_and_are_replayed_from_it() {
    let (data, slog) = fresh();
    let payload = common::noise(5, 7000);
    let (data, slog, on_data, on_log) = fsync_then_crash(data, slog, &payload);
    assert_eq!(on_data, 0, "no fsync wrote to the data device");
    assert!(on_log >= 10, "each of the 10 fsyncs wrote the log device: {on_log}");
    let pool = import(vec![data, slog]);
    assert_eq!(read(&pool, b"redo").as_deref(), Some(&payload[..]), "replayed from the log device");
    assert!(pool.replay_report().unwrap().contains("replayed"));
}

#[test]
fn a_missing_log_device_does_not_block_import_and_says_what_may_be_lost() {
    let (data, slog) = fresh();
    let payload = common::noise(6, 2100);
    let (data, _slog, _, _) = fsync_then_crash(data, slog, &payload);
    let pool = import(vec![data]);
    let report = pool.replay_report().expect("import reports the missing log");
    assert!(report.contains("log device") && report.contains("missing") && report.contains("may be lost"), "{report}");
    assert_eq!(read(&pool, b"redo"), None, "what only the lost log held is gone, and nothing else");
    assert_eq!(pool.status().state, "DEGRADED");
    let trouble = pool.status().replay_trouble.expect("status says the log was not replayed whole");
    assert!(trouble.contains("may be lost"), "{trouble}");
    // The pool works on: fsync now logs to the data device.
    let ds = pool.dataset("tank").unwrap();
    let f = ds.create(ROOT_ID, b"after", NewObject::File, 0o644, 0, 0).unwrap();
    ds.write(f.ino, 0, b"still durable").unwrap();
    ds.fsync(f.ino).unwrap();
}

#[test]
fn a_cleanly_exported_pool_loses_nothing_without_its_log_device() {
    let (data, slog) = fresh();
    let d = MemDevice::new(data, "data");
    let l = MemDevice::new(slog, "slog");
    let pool =
        Pool::import(vec![d.clone() as Arc<dyn BlockDevice>, l as Arc<dyn BlockDevice>], &ImportOptions::default())
            .unwrap();
    let ds = pool.dataset("tank").unwrap();
    let f = ds.create(ROOT_ID, b"kept", NewObject::File, 0o644, 0, 0).unwrap();
    ds.write(f.ino, 0, b"exported cleanly").unwrap();
    ds.fsync(f.ino).unwrap();
    drop(ds);
    pool.export().unwrap();
    let image = d.image.lock().clone();
    let pool = import(vec![image]);
    let report = pool.replay_report().unwrap();
    assert!(report.contains("exported cleanly") && report.contains("nothing acknowledged was lost"), "{report}");
    assert_eq!(pool.status().replay_trouble, None, "nothing for status to warn about");
    assert_eq!(read(&pool, b"kept").as_deref(), Some(&b"exported cleanly"[..]));
}

/// The crash harness with a log device: the write and flush streams of both devices are
/// recorded in one order; for many cut points (and with unflushed writes dropped at
/// random) every fsync acknowledged before the cut is found after import.
#[test]
fn acknowledged_writes_survive_any_cut_of_both_devices_streams() {
    cut_both_streams("latency");
}

/// The same with logbias=throughput: the data goes in place on the data device, the
/// log device gets only pointers, and a cut must never leave a pointer without its block.
#[test]
fn acknowledged_in_place_writes_survive_any_cut_of_both_devices_streams() {
    cut_both_streams("throughput");
}

fn cut_both_streams(logbias: &str) {
    let (data, slog) = fresh();
    let log = Arc::new(Mutex::new(Vec::new()));
    let d = RecDevice::shared(data.clone(), "data", 0, log.clone());
    let l = RecDevice::shared(slog.clone(), "slog", 1, log.clone());
    let opts = ImportOptions { txg: TxgConfig { timeout: Duration::from_millis(30), ..Default::default() } };
    let pool = Pool::import(vec![d as Arc<dyn BlockDevice>, l as Arc<dyn BlockDevice>], &opts).unwrap();
    pool.set_property("tank", "logbias", logbias).unwrap();
    let start = log.lock().len();
    let ds = pool.dataset("tank").unwrap();
    let f = ds.create(ROOT_ID, b"redo", NewObject::File, 0o644, 0, 0).unwrap();
    let mut model = Vec::new();
    let mut acks = Vec::new();
    for round in 0..40u64 {
        let rec = common::noise(round, 900);
        ds.write(f.ino, model.len() as u64, &rec).unwrap();
        model.extend_from_slice(&rec);
        ds.fsync(f.ino).unwrap();
        acks.push((log.lock().len(), model.len()));
        if round % 10 == 5 {
            std::thread::sleep(Duration::from_millis(40)); // a txg commit lands mid-run
        }
    }
    let indirect = pool.stats().zil["indirect_records"];
    assert_eq!(indirect > 0, logbias == "throughput", "{indirect} writes logged as pointers");
    drop(ds);
    pool.export().unwrap();
    let events = log.lock().clone();
    let mut rng = 0x9E3779B97F4A7C15u64;
    let mut checked = 0;
    for cut in (start..=events.len()).step_by(5) {
        for drop_unflushed in [false, true] {
            let mut images = [data.clone(), slog.clone()];
            // Writes since each device's last flush before the cut may be lost.
            let last_flush = |dev: usize| {
                events[..cut].iter().rposition(|(d, e)| *d == dev && matches!(e, Ev::Flush)).map_or(0, |p| p + 1)
            };
            let flushed = [last_flush(0), last_flush(1)];
            for (i, (dev, e)) in events[..cut].iter().enumerate() {
                let Ev::Write { off, data } = e else { continue };
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                if drop_unflushed && i >= flushed[*dev] && rng.is_multiple_of(2) {
                    continue;
                }
                images[*dev][*off as usize..*off as usize + data.len()].copy_from_slice(data);
            }
            let pool = import(images.to_vec());
            if let Some(&(_, len)) = acks.iter().rev().find(|(at, _)| *at <= cut) {
                let got = read(&pool, b"redo").expect("acknowledged file exists");
                assert!(
                    got.len() >= len && got[..len] == model[..len],
                    "cut {cut}: {} of {len} acknowledged bytes",
                    got.len()
                );
            }
            assert_eq!(pool.scrub().unwrap().errors, 0);
            checked += 1;
        }
    }
    assert!(checked > 40, "checked {checked} images");
}

//! A crash during intent-log replay. Import replays the log with the sync thread running,
//! so a log holding more than the sync threshold is committed over several txgs. Power
//! is cut at every flush of such an import (and with the writes since the last flush
//! kept in a random subset, or the whole import cut twice), and the pool imported again:
//! every change fsync acknowledged before the first crash must be there, and each logged
//! change applied exactly once — an append, a create, a rename, a link or a remove
//! replayed a second time would show (a record that no longer applies is reported, and
//! names or bytes differ from the model).
mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::{Ev, MemDevice, RecDevice};
use tarn_dataset::{Dataset, NewObject, ROOT_ID};
use tarn_pool::{CreateOptions, ImportOptions, Pool, VdevSpec};
use tarn_txg::TxgConfig;
use tarn_vdev::{BlockDevice, TopVdev, DATA_START, LABEL_SIZE};
use tarn_zio::{BlockPtr, Compression};

const SIZE: u64 = 96 << 20;
const PAGE: usize = 16384;

/// Every change of the workload is fsynced, and no txg commits while it runs: the
/// crashed image holds all of it in the intent log only.
fn never_commit() -> TxgConfig {
    TxgConfig { timeout: Duration::from_secs(3600), pace_to_write_rate: false, ..Default::default() }
}

/// The import that replays: a small sync threshold, so the sync thread commits many txgs
/// while replay runs.
fn small_txgs() -> TxgConfig {
    TxgConfig {
        timeout: Duration::from_secs(3600),
        dirty_max: 1 << 20,
        dirty_sync: 64 << 10,
        pace_to_write_rate: false,
    }
}

/// A fresh pool's image (recordsize 16K), exported.
fn fresh_image() -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("d0.img");
    let opts = CreateOptions { size: Some(SIZE), ..Default::default() };
    let pool = Pool::create("tank", &[VdevSpec::Disk(img.clone())], &opts).unwrap();
    pool.set_property("tank", "recordsize", "16K").unwrap();
    pool.export().unwrap();
    std::fs::read(img).unwrap()
}

/// What the user saw acknowledged: names (hard links share an inode) and contents.
#[derive(Default)]
struct Model {
    names: BTreeMap<String, usize>,
    inodes: Vec<Vec<u8>>,
}

impl Model {
    fn tree(&self) -> BTreeMap<String, Vec<u8>> {
        self.names.iter().map(|(n, &i)| (n.clone(), self.inodes[i].clone())).collect()
    }
}

/// Applies the workload to `ds` and the model: a write-ahead log appended and fsynced,
/// files created in a directory, appended to later (objects the log itself created),
/// renamed, hard-linked and removed, and a table written in bulk (its pages go in place,
/// the log holds pointers). Every step is fsynced.
fn workload(ds: &Dataset, m: &mut Model) {
    let dir = ds.create(ROOT_ID, b"dir", NewObject::Dir, 0o755, 0, 0).unwrap().ino;
    let wal = ds.create(ROOT_ID, b"wal", NewObject::File, 0o644, 0, 0).unwrap().ino;
    let table = ds.create(ROOT_ID, b"table", NewObject::File, 0o644, 0, 0).unwrap().ino;
    m.names.insert("wal".into(), 0);
    m.names.insert("table".into(), 1);
    m.inodes.extend([Vec::new(), Vec::new()]);
    // Files of `dir`: (name, inode in the model, object id).
    let mut files: Vec<(String, usize, u64)> = Vec::new();
    let mut seed = 1u64;
    let mut next = || {
        seed += 1;
        seed
    };
    for round in 0..240usize {
        let rec = common::noise(next(), 3000 + round % 7 * 300);
        let at = m.inodes[0].len() as u64;
        ds.write(wal, at, &rec).unwrap();
        m.inodes[0].extend_from_slice(&rec);
        ds.fsync(wal).unwrap();
        if round % 4 == 0 {
            let name = format!("f{round}");
            let a = ds.create(dir, name.as_bytes(), NewObject::File, 0o644, 0, 0).unwrap();
            let data = common::noise(next(), 2000);
            ds.write(a.ino, 0, &data).unwrap();
            ds.fsync(a.ino).unwrap();
            m.inodes.push(data);
            m.names.insert(format!("dir/{name}"), m.inodes.len() - 1);
            files.push((name, m.inodes.len() - 1, a.ino));
        }
        if round % 6 == 3 && !files.is_empty() {
            let (_, inode, ino) = &files[round * 7 % files.len()];
            let more = common::noise(next(), 1000);
            let at = m.inodes[*inode].len() as u64;
            ds.write(*ino, at, &more).unwrap();
            m.inodes[*inode].extend_from_slice(&more);
            ds.fsync(*ino).unwrap();
        }
        if round % 9 == 5 && files.len() > 2 {
            let i = round * 5 % files.len();
            let (old, inode, _) = files[i].clone();
            let new = format!("r{round}");
            ds.rename(dir, old.as_bytes(), dir, new.as_bytes(), false).unwrap();
            ds.fsync(dir).unwrap();
            m.names.remove(&format!("dir/{old}"));
            m.names.insert(format!("dir/{new}"), inode);
            files[i].0 = new;
        }
        if round % 13 == 7 && !files.is_empty() {
            let (_, inode, ino) = files[round * 3 % files.len()].clone();
            let name = format!("l{round}");
            ds.link(ino, ROOT_ID, name.as_bytes()).unwrap();
            ds.fsync(ROOT_ID).unwrap();
            m.names.insert(name, inode);
        }
        if round % 17 == 11 && files.len() > 3 {
            let (name, _, _) = files.remove(round % files.len());
            ds.unlink(dir, name.as_bytes()).unwrap();
            ds.fsync(dir).unwrap();
            m.names.remove(&format!("dir/{name}"));
        }
        if round % 30 == 29 {
            // 20 pages in one fsync: more than the bulk size, so written in place.
            for p in 0..20usize {
                let page = (round / 30 * 7 + p * 3) % 64;
                let bytes = common::noise(next(), PAGE);
                ds.write(table, (page * PAGE) as u64, &bytes).unwrap();
                let t = &mut m.inodes[1];
                if t.len() < (page + 1) * PAGE {
                    t.resize((page + 1) * PAGE, 0);
                }
                t[page * PAGE..(page + 1) * PAGE].copy_from_slice(&bytes);
            }
            ds.fsync(table).unwrap();
        }
    }
}

/// The image as power loss leaves it once the workload's last fsync returned: every
/// change in the intent log, none in a committed txg.
fn crashed_image(m: &mut Model) -> Vec<u8> {
    let dev = MemDevice::new(fresh_image(), "d0");
    let pool = Pool::import(vec![dev.clone() as Arc<dyn BlockDevice>], &ImportOptions { txg: never_commit() }).unwrap();
    let ds = pool.dataset("tank").unwrap();
    let committed = pool.txg().synced();
    workload(&ds, m);
    assert_eq!(pool.txg().synced(), committed, "the workload lives in the intent log only");
    assert!(pool.stats().zil["indirect_records"] > 0, "the table's pages were written in place");
    let image = dev.image.lock().clone();
    drop(ds);
    pool.abandon();
    image
}

/// `base` with the first `cut` events of `events` applied; `keep_unflushed` picks which
/// writes after the last flush reach the image (a power cut may lose any of them).
fn image_at(base: &[u8], events: &[(usize, Ev)], cut: usize, keep_unflushed: &mut dyn FnMut() -> bool) -> Vec<u8> {
    let mut image = base.to_vec();
    let last_flush = events[..cut].iter().rposition(|(_, e)| matches!(e, Ev::Flush)).map_or(0, |p| p + 1);
    for (i, (_, e)) in events[..cut].iter().enumerate() {
        if let Ev::Write { off, data } = e {
            if i < last_flush || keep_unflushed() {
                image[*off as usize..*off as usize + data.len()].copy_from_slice(data);
            }
        }
    }
    image
}

/// Imports `image` with small txgs, recording its writes; checks the pool against the
/// model. `skipped`: what the report of the one record that cannot be applied names (any
/// other trouble fails). Returns the pool (still open) and its device.
fn import_and_check(image: Vec<u8>, m: &Model, what: &str, skipped: Option<&str>) -> (Pool, Arc<RecDevice>) {
    let dev = RecDevice::new(image, "d0");
    let pool = Pool::import(vec![dev.clone() as Arc<dyn BlockDevice>], &ImportOptions { txg: small_txgs() })
        .unwrap_or_else(|e| panic!("{what}: import failed: {e}"));
    if let Some(trouble) = pool.replay_trouble() {
        let expected = skipped.is_some_and(|s| trouble.contains(s) && trouble.contains("1 could not be applied"));
        assert!(expected, "{what}: every logged record applies, once: {trouble}");
    }
    let ds = pool.dataset("tank").unwrap();
    let got = common::read_tree(&ds).unwrap();
    let want = m.tree();
    assert!(
        got == want,
        "{what}: the files are not what fsync acknowledged\n got: {}\nwant: {}",
        common::describe(&got),
        common::describe(&want)
    );
    (pool, dev)
}

/// Flush indexes of a write stream, as cut points (the flush included).
fn flush_points(events: &[(usize, Ev)]) -> Vec<usize> {
    (0..events.len()).filter(|&i| matches!(events[i].1, Ev::Flush)).map(|i| i + 1).collect()
}

/// What the cuts saw: imports that resumed a replay, and those whose report carried a
/// skipped record over from the interrupted import.
#[derive(Default)]
struct Seen {
    resumed: usize,
    skip_carried: usize,
}

/// Records a whole replay of `crashed`, then cuts it at every flush and checks every
/// image against the model. `thorough`: also cut before each flush, with the unflushed
/// writes in a random subset, and cut some resumed replays again in their middle.
fn cut_replays(crashed: &[u8], m: &Model, skipped: Option<&str>, thorough: bool) -> Seen {
    // The whole replay, recorded: it spans several txgs.
    let (pool, dev) = import_and_check(crashed.to_vec(), m, "first import", skipped);
    let report = pool.replay_report().expect("import replayed the log");
    assert!(report.contains("replayed"), "{report}");
    assert_eq!(pool.replay_trouble().is_some(), skipped.is_some(), "{report}");
    pool.abandon();
    let events = dev.log.lock().clone();
    let flushes = flush_points(&events);
    assert!(flushes.len() >= 9, "replay committed several txgs ({} flushes)", flushes.len());

    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut coin = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng.is_multiple_of(2)
    };
    let mut seen = Seen::default();
    for (n, &cut) in flushes.iter().enumerate() {
        // At the flush, and just before it with the unflushed writes in a random subset.
        let variants: &[(u32, usize)] = if thorough { &[(0, cut), (1, cut - 1)] } else { &[(0, cut)] };
        for &(variant, at) in variants {
            let what = format!("cut at event {cut} (flush {n}) variant {variant}");
            let image = image_at(crashed, &events, at, &mut coin);
            let (pool, dev) = import_and_check(image.clone(), m, &what, skipped);
            let report = pool.replay_report().unwrap_or_default();
            seen.resumed += usize::from(report.contains("resumed"));
            seen.skip_carried += usize::from(report.contains("before the interruption"));
            assert_eq!(pool.scrub().unwrap().errors, 0, "{what}: the pool verifies");
            pool.abandon();
            if thorough && n % 5 == 2 && variant == 0 {
                // A second crash in the middle of the resumed replay.
                let again = dev.log.lock().clone();
                let mids = flush_points(&again);
                if let Some(&mid) = mids.get(mids.len() / 2) {
                    let twice = image_at(&image, &again, mid, &mut coin);
                    let (pool, _) = import_and_check(twice, m, &format!("{what}, then cut again at {mid}"), skipped);
                    pool.abandon();
                }
            }
        }
    }
    assert!(seen.resumed >= 2, "cuts in the middle of replay resumed it ({})", seen.resumed);
    seen
}

#[test]
fn a_crash_during_replay_loses_nothing_and_replays_nothing_twice() {
    let mut m = Model::default();
    let crashed = crashed_image(&mut m);
    cut_replays(&crashed, &m, None, true);
}

/// A record that cannot be applied is skipped with a report, as before; a crash after
/// replay committed past it does not lose the report, and one before does not turn an
/// applied record into a skipped one (the model holds every other change).
#[test]
fn a_record_that_cannot_be_applied_is_reported_across_a_crash_during_replay() {
    let mut m = Model::default();
    let mut crashed = crashed_image(&mut m);
    // The hard link made at round 137 now names dataset 77, which does not exist.
    set_record_dataset(&mut crashed, b"l137", 77);
    m.names.remove("l137");
    let seen = cut_replays(&crashed, &m, Some("dataset 77 no longer exists"), false);
    assert!(seen.skip_carried > 0, "a resumed import still reports the record skipped before");
}

/// A pool whose root is of the previous version (4, before replay kept its progress in
/// the root) and whose log holds acknowledged changes imports and replays them all.
#[test]
fn a_version_4_root_with_a_log_to_replay_is_imported() {
    let mut m = Model::default();
    let mut crashed = crashed_image(&mut m);
    set_root_version(&mut crashed, 4);
    let (pool, _) = import_and_check(crashed, &m, "version-4 root", None);
    assert!(pool.replay_report().is_some_and(|r| r.contains("replayed")));
    assert_eq!(pool.scrub().unwrap().errors, 0);
    pool.abandon();
}

/// Gives the one log record whose body holds `name` the dataset id `dataset`, and
/// reseals its log block's checksum (FORMAT.md §14).
fn set_record_dataset(image: &mut [u8], name: &[u8], dataset: u64) {
    let hits = common::find_all(image, name);
    assert_eq!(hits.len(), 1, "the name occurs once, in its log record");
    // A link record's body: object, directory, then the name as u32 length + bytes; the
    // record's header ends with txg and dataset.
    let dataset_at = hits[0] - 4 - 16 - 8;
    image[dataset_at..dataset_at + 8].copy_from_slice(&dataset.to_le_bytes());
    let block = (0..=hits[0] / 4096).rev().map(|s| s * 4096).find(|&b| &image[b..b + 8] == b"TARNZIL1").unwrap();
    let len = u32::from_le_bytes(image[block + 12..block + 16].try_into().unwrap()) as usize;
    let bytes = &mut image[block..block + 96 + len];
    bytes[64..80].fill(0);
    let sum = xxhash_rust::xxh3::xxh3_128(bytes);
    bytes[64..80].copy_from_slice(&sum.to_le_bytes());
}

/// Rewrites the newest root's `version` (stored raw at the end of the data area, as
/// the bad-input tests do) and points a resealed uberblock at it.
fn set_root_version(image: &mut [u8], version: u32) {
    const CONFIG_AREA: u64 = 64 * 1024;
    const SECTOR: u64 = 4096;
    let dev = MemDevice::new(image.to_vec(), "probe");
    let labels = tarn_vdev::read_device_labels(dev.as_ref() as &dyn BlockDevice).unwrap();
    let ub = labels.uberblocks.into_iter().max_by_key(|u| u.txg).unwrap();
    let bp = BlockPtr::decode(&ub.root).unwrap().unwrap();
    let at = (DATA_START + bp.offset) as usize;
    let mut json = vec![0u8; bp.lsize as usize];
    bp.compression.decompress(&image[at..at + bp.psize as usize], &mut json).unwrap();
    let text = String::from_utf8(json).unwrap();
    let current = format!("{{\"version\":{},", tarn_pool::MOS_VERSION);
    assert!(text.starts_with(&current), "{}", &text[..40]);
    assert!(text.contains("\"zil\":{"), "the root names a log to replay");
    let patched = text.replacen(&current, &format!("{{\"version\":{version},"), 1).into_bytes();
    let size = image.len() as u64;
    let off = (TopVdev::asize_of(size, 12) - patched.len() as u64) & !(SECTOR - 1);
    let start = (DATA_START + off) as usize;
    image[start..start + patched.len()].copy_from_slice(&patched);
    let new_bp = BlockPtr {
        compression: Compression::Off,
        offset: off,
        psize: patched.len() as u32,
        lsize: patched.len() as u32,
        checksum: bp.checksum_kind.digest(&patched),
        ..bp
    };
    let sealed = tarn_vdev::Uberblock { root: new_bp.to_bytes(), ..ub.clone() }.encode();
    let slot = ub.txg % tarn_vdev::slot_count(12) as u64;
    let label1 = (size / LABEL_SIZE) * LABEL_SIZE - LABEL_SIZE;
    for label in [0, label1] {
        let at = (label + CONFIG_AREA + slot * SECTOR) as usize;
        image[at..at + sealed.len()].copy_from_slice(&sealed);
    }
}

//! `tarn tune POOL arc_max=` to a smaller budget gives the memory back at once (issue
//! #11): after a mount has written and read file data and created and read many small
//! files, the ARC holds data under the default data policy and metadata (blocks, decoded
//! indirect blocks, decoded objects) beside it. A shrink to a budget smaller than that
//! metadata's old share must still evict down to the new budget — the data too.
mod common;

use std::sync::Arc;

use tarn_dataset::{Dataset, NewObject, ROOT_ID};
use tarn_pool::{CreateOptions, Pool, VdevSpec};

const PAGE: usize = 16384;
/// Pages of the data file (40 MiB, half compressible: about 20 MiB cached compressed).
const PAGES: u64 = 2560;
const FILES: u64 = 6000;
const ARC_MAX: u64 = 64 << 20;
const SHRUNK: u64 = 4 << 20;

/// Half noise, half zeros: lz4 keeps it compressed at about half a page.
fn page(p: u64) -> Vec<u8> {
    let mut bytes = common::noise(p, PAGE / 2);
    bytes.resize(PAGE, 0);
    bytes
}

/// A pool named `name` of `size` bytes with 16 KiB records and `arc_max`, whose
/// `table.ibd` holds `pages` pages (`page`); the temporary directory keeps its image.
fn pool_with_table(name: &str, size: u64, arc_max: u64, pages: u64) -> (tempfile::TempDir, Pool, Arc<Dataset>, u64) {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let opts = CreateOptions { size: Some(size), ..Default::default() };
    let pool = Pool::create(name, &[VdevSpec::Disk(dir.path().join("d0.img"))], &opts).unwrap();
    pool.set_property(name, "recordsize", "16K").unwrap();
    pool.set_arc_max(arc_max);
    let ds = pool.dataset(name).unwrap();
    let data = ds.create(ROOT_ID, b"table.ibd", NewObject::File, 0o644, 0, 0).unwrap().ino;
    for p in 0..pages {
        ds.write(data, p * PAGE as u64, &page(p)).unwrap();
    }
    (dir, pool, ds, data)
}

fn create_and_read_files(ds: &Dataset) {
    let mut inos = Vec::new();
    for d in 0..FILES / 1000 {
        let dir = ds.create(ROOT_ID, format!("d{d}").as_bytes(), NewObject::Dir, 0o755, 0, 0).unwrap().ino;
        for f in 0..1000 {
            let ino = ds.create(dir, format!("f{f}").as_bytes(), NewObject::File, 0o644, 0, 0).unwrap().ino;
            ds.write(ino, 0, format!("file {ino}").as_bytes()).unwrap();
            inos.push(ino);
        }
    }
    let mut buf = vec![0u8; 64];
    for ino in inos {
        let n = ds.read(ino, 0, &mut buf).unwrap();
        assert_eq!(&buf[..n], format!("file {ino}").as_bytes());
    }
}

#[test]
fn a_smaller_arc_max_evicts_cached_data_and_metadata_down_to_the_new_budget() {
    let (_dir, pool, ds, data) = pool_with_table("shrink", 1 << 30, ARC_MAX, PAGES);
    create_and_read_files(&ds);
    pool.sync().unwrap();
    // Every page read twice, so the data policy admits them to its main area.
    let mut buf = vec![0u8; PAGE];
    for _ in 0..2 {
        for p in 0..PAGES {
            ds.read(data, p * PAGE as u64, &mut buf).unwrap();
            assert!(buf == page(p), "page {p}");
        }
    }
    let full = pool.stats().arc;
    assert!(full.data_size > 4 * SHRUNK, "the data is cached before the shrink: {full:?}");
    assert!(full.accounted_size <= ARC_MAX, "{full:?}");

    pool.set_arc_max(SHRUNK);
    let a = pool.stats().arc;
    assert_eq!(a.max, SHRUNK);
    assert!(a.size <= SHRUNK, "cached blocks over the new budget after the shrink: {a:?}");
    assert!(a.accounted_size <= SHRUNK, "accounted bytes over the new budget after the shrink: {a:?}");
    // The cache still works under the new budget, and holds to it.
    for p in (0..PAGES).step_by(7) {
        ds.read(data, p * PAGE as u64, &mut buf).unwrap();
        assert!(buf == page(p), "page {p} after the shrink");
    }
    let a = pool.stats().arc;
    assert!(a.accounted_size <= SHRUNK, "accounted bytes over the new budget after more reads: {a:?}");
}

/// A reader of whole records (a database's buffer pool over O_DIRECT, the kernel's page
/// cache over FUSE) holds each page it read: the ARC keeps no decompressed copy of it,
/// and the budget a fixed share for such copies used to hold (1/16) goes to compressed
/// records (issue #17). Reading in parts still makes copies, charged as they grow, and
/// the budget holds.
#[test]
fn whole_record_readers_leave_the_whole_budget_to_compressed_records() {
    const BUDGET: u64 = 4 << 20;
    const RECORDS: u64 = 1024; // about 8.5 MiB compressed: twice the budget
    let (_dir, pool, ds, data) = pool_with_table("whole", 256 << 20, BUDGET, RECORDS);
    pool.sync().unwrap();
    let mut buf = vec![0u8; PAGE];
    for _ in 0..2 {
        for p in 0..RECORDS {
            ds.read(data, p * PAGE as u64, &mut buf).unwrap();
            assert!(buf == page(p), "page {p}");
        }
    }
    let a = pool.stats().arc;
    assert_eq!((a.hot_copies_size, a.hot_copy_hits), (0, 0), "no copy of a whole record: {a:?}");
    assert!(a.frequency_size + a.recency_size > 0 && a.hits > 0, "{a:?}");
    // Everything but the copies: blocks, headers, decoded metadata, dirty data.
    let held = a.accounted_size - a.hot_copies_size;
    assert!(held >= BUDGET - BUDGET / 32, "the budget is left unused ({held} of {BUDGET}): {a:?}");
    assert!(a.accounted_size <= BUDGET, "{a:?}");

    // In parts: the later parts of a record come from its copy, inside the budget.
    let mut part = vec![0u8; PAGE / 4];
    for p in (0..RECORDS).step_by(3) {
        for q in 0..4 {
            let at = p * PAGE as u64 + (q * PAGE / 4) as u64;
            ds.read(data, at, &mut part).unwrap();
            assert!(part[..] == page(p)[q * PAGE / 4..(q + 1) * PAGE / 4], "page {p} part {q}");
        }
    }
    let a = pool.stats().arc;
    assert!(a.hot_copy_hits > 0 && a.hot_copies_size > 0, "{a:?}");
    assert!(a.hot_copies_size <= BUDGET / 16, "{a:?}");
    assert!(a.accounted_size <= BUDGET, "accounted bytes over the budget with copies: {a:?}");
}

//! Memory given back after `arc_max` shrinks (issue #11): a pool with a 256 MiB ARC
//! writes 4× that, reads it back and creates and reads many small files (cached data,
//! metadata, decoded objects), then `arc_max` drops to 64 MiB — `tarn tune POOL
//! arc_max=64M`. RSS must fall within the new budget + the fixed overhead of
//! docs/design/memory.md. Alone in its test binary, so no other test's memory is counted;
//! with the allocator, its settings and its hooks (size, statistics, purge) as the `tarn`
//! binary sets them (crates/cli/src/allocator.rs), so it measures what the engine holds
//! in the mount daemon (the FUSE layer's own buffers aside).
mod common;

use std::time::Duration;

use tarn_dataset::{NewObject, ROOT_ID};
use tarn_pool::{CreateOptions, Pool, VdevSpec};

tarn_arc::jemalloc_global_allocator!();

const MIB: u64 = 1 << 20;
const ARC_MAX: u64 = 256 * MIB;
const SHRUNK: u64 = 64 * MIB;
const FIXED_OVERHEAD: u64 = 64 * MIB;
const WRITE: usize = 1 << 20;
const FILES: u64 = 20_000;

/// 1 MiB of 16 KiB records that compress to about half: noise, then zeros.
fn fill(buf: &mut [u8], seed: u64) {
    for (i, record) in buf.chunks_mut(16384).enumerate() {
        let half = record.len() / 2;
        record[..half].copy_from_slice(&common::noise(seed + i as u64, half));
        record[half..].fill(0);
    }
}

#[test]
fn rss_falls_within_the_new_budget_after_arc_max_shrinks() {
    tarn_arc::jemalloc::install();
    tarn_arc::jemalloc::start_background_threads();
    let dir = tempfile::tempdir_in(std::env::var("TARN_BENCH_DIR").unwrap_or_else(|_| "/var/tmp".into())).unwrap();
    let opts = CreateOptions { size: Some(4 << 30), ..Default::default() };
    let pool = Pool::create("tank", &[VdevSpec::Disk(dir.path().join("d0.img"))], &opts).unwrap();
    pool.set_property("tank", "recordsize", "16K").unwrap();
    pool.set_property("tank", "compression", "lz4").unwrap();
    pool.set_arc_max(ARC_MAX);
    let ds = pool.dataset("tank").unwrap();

    let ino = ds.create(ROOT_ID, b"data", NewObject::File, 0o644, 0, 0).unwrap().ino;
    let mut buf = vec![0u8; WRITE];
    let total = 4 * ARC_MAX;
    for off in (0..total).step_by(WRITE) {
        fill(&mut buf, off);
        ds.write(ino, off, &buf).unwrap();
    }
    ds.fsync(ino).unwrap();
    pool.sync().unwrap();
    for off in (total - ARC_MAX..total).step_by(WRITE) {
        assert_eq!(ds.read(ino, off, &mut buf).unwrap(), WRITE);
    }
    let mut files = Vec::new();
    for d in 0..FILES / 1000 {
        let dir = ds.create(ROOT_ID, format!("d{d}").as_bytes(), NewObject::Dir, 0o755, 0, 0).unwrap().ino;
        for f in 0..1000 {
            let ino = ds.create(dir, format!("f{f}").as_bytes(), NewObject::File, 0o644, 0, 0).unwrap().ino;
            ds.write(ino, 0, format!("file {ino}").as_bytes()).unwrap();
            files.push(ino);
        }
    }
    pool.sync().unwrap();
    let mut small = [0u8; 64];
    for &f in &files {
        ds.read(f, 0, &mut small).unwrap();
    }
    let before = common::memory_split(&pool);

    pool.set_arc_max(SHRUNK);
    // jemalloc's background threads return what its 200 ms decay frees meanwhile.
    std::thread::sleep(Duration::from_millis(1500));
    let after = common::memory_split(&pool);
    eprintln!("before the shrink: {before}\nafter the shrink to {} MiB: {after}", SHRUNK / MIB);
    let a = pool.stats().arc;
    assert!(a.accounted_size <= SHRUNK, "accounted over the new budget: {after}");
    assert!(
        a.rss <= SHRUNK + FIXED_OVERHEAD,
        "RSS {} MiB over the bound of {} MiB after the shrink: {after}",
        a.rss / MIB,
        (SHRUNK + FIXED_OVERHEAD) / MIB
    );
}

//! A small L2ARC benchmark: random 16 KiB page reads of a file four times `arc_max`,
//! twice (the first pass warms the caches, the second is timed), from a pool whose data
//! device is paced (every read waits DELAY first, a throttled cloud disk), once with its
//! cache device missing and once with it (an image on the fast local disk), same run.
//! Prints the pages per second of each second pass and their ratio.
//!
//! `cargo run --release -p tarn-pool --example l2arc_bench -- DIR [FILE_MIB] [DELAY_US]`
//! (DIR is emptied of the bench's own images; 128 MiB and 1000 µs by default).
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tarn_dataset::{NewObject, ROOT_ID};
use tarn_pool::{CreateOptions, ImportOptions, Pool, VdevSpec};
use tarn_vdev::{BlockDevice, FileDevice};

const PAGE: u64 = 16384;

/// A device whose reads each wait `delay` first (one at a time per caller, as a paced
/// disk serves a single reader).
struct Paced {
    inner: FileDevice,
    delay: Duration,
}

impl BlockDevice for Paced {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        std::thread::sleep(self.delay);
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn read_align(&self) -> u64 {
        self.inner.read_align()
    }
}

/// xorshift: the same page sequence for both configurations.
fn pages(n: usize, of: u64, seed: u64) -> Vec<u64> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % of
        })
        .collect()
}

/// Imports the pool on a paced data device, reads `order` twice; returns the second
/// pass's pages per second and the L2ARC hits of that pass.
fn run(img: &Path, delay: Duration, arc_max: u64, order: &[u64]) -> (f64, u64) {
    let dev = Paced { inner: FileDevice::open(img).expect("open the data image"), delay };
    let pool = Pool::import(vec![Arc::new(dev)], &ImportOptions::default()).expect("import");
    pool.set_arc_max(arc_max);
    let deadline = Instant::now() + Duration::from_secs(30);
    while pool.stats().l2arc.get("rebuilding").copied().unwrap_or(0) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let ds = pool.dataset("b/db").expect("dataset");
    let ino = ds.lookup(ROOT_ID, b"table").expect("file").ino;
    let mut buf = vec![0u8; PAGE as usize];
    for &p in order {
        ds.read(ino, p * PAGE, &mut buf).expect("read");
    }
    // Let the feed write what the first pass evicted.
    let deadline = Instant::now() + Duration::from_secs(30);
    while pool.stats().l2arc.get("feed_backlog").copied().unwrap_or(0) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(500));
    let hits_before = pool.stats().l2arc.get("hits").copied().unwrap_or(0);
    let started = Instant::now();
    for &p in order {
        ds.read(ino, p * PAGE, &mut buf).expect("read");
    }
    let rate = order.len() as f64 / started.elapsed().as_secs_f64();
    let hits = pool.stats().l2arc.get("hits").copied().unwrap_or(0) - hits_before;
    drop(ds);
    pool.export().expect("export");
    (rate, hits)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(dir) = args.next().map(PathBuf::from) else {
        eprintln!("usage: l2arc_bench DIR [FILE_MIB] [DELAY_US]");
        std::process::exit(2);
    };
    let mib: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(128);
    let delay = Duration::from_micros(args.next().and_then(|a| a.parse().ok()).unwrap_or(1000));
    let (img, cache) = (dir.join("bench-d0.img"), dir.join("bench-cache.img"));
    let _ = std::fs::remove_file(&img);
    let _ = std::fs::remove_file(&cache);
    let opts =
        CreateOptions { size: Some((mib * 3).max(256) << 20), caches: vec![cache.clone()], ..Default::default() };
    let pool = Pool::create("b", &[VdevSpec::Disk(img.clone())], &opts).expect("create");
    let ds = pool.create_dataset("b/db").expect("dataset");
    pool.set_property("b/db", "recordsize", "16K").expect("recordsize");
    pool.set_property("b/db", "compression", "lz4").expect("compression");
    let ino = ds.create(ROOT_ID, b"table", NewObject::File, 0o644, 0, 0).expect("file").ino;
    let n_pages = (mib << 20) / PAGE;
    for p in 0..n_pages {
        // Half compressible, like a database page: a pattern then noise.
        let mut page: Vec<u8> = format!("page {p:012} ").bytes().cycle().take(PAGE as usize / 2).collect();
        let mut x = p.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        while page.len() < PAGE as usize {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            page.extend_from_slice(&x.to_le_bytes());
        }
        ds.write(ino, p * PAGE, &page).expect("write");
    }
    drop(ds);
    pool.export().expect("export");
    let arc_max = (mib << 20) / 4;
    let order = pages(n_pages as usize, n_pages, 0x5EED);
    // Without: the cache device is gone (the pool imports with it UNAVAIL).
    std::fs::rename(&cache, dir.join("bench-cache.away")).expect("move the cache away");
    let (without, _) = run(&img, delay, arc_max, &order);
    std::fs::rename(dir.join("bench-cache.away"), &cache).expect("move the cache back");
    let (with, hits) = run(&img, delay, arc_max, &order);
    println!(
        "{mib} MiB file, arc_max {} MiB, {} random page reads per pass, data reads paced at {delay:?}: \
         without cache {without:.0} pages/s, with cache {with:.0} pages/s ({hits} L2ARC hits in the timed pass): {:.1}x",
        arc_max >> 20,
        order.len(),
        with / without
    );
    let _ = std::fs::remove_file(&img);
    let _ = std::fs::remove_file(&cache);
}

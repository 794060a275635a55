//! The hot paths, measured against raw file I/O in the same run: random 16 KiB page
//! writes with a commit every `PAGES_PER_COMMIT` pages (pwrite + fdatasync for the
//! baseline, write + txg commit for tarn), and random 16 KiB page reads (pread against
//! tarn's read: locate, read, verify checksum, decompress). Pages look like sysbench
//! rows (numbers and digit groups) so compression does real work.
//!
//! Run: cargo bench -p tarn-pool --bench page_io [-- PAGES]
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::time::Instant;

use tarn_dataset::{NewObject, ROOT_ID};
use tarn_pool::{CreateOptions, Pool, VdevSpec};

const PAGE: usize = 16384;
const PAGES_PER_COMMIT: usize = 1000;

/// xorshift: deterministic, fast, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A page of sysbench-like rows: id, k, c (11-digit groups), pad.
fn page(rng: &mut Rng, id: u64) -> Vec<u8> {
    let mut p = Vec::with_capacity(PAGE);
    let mut row = id * 70;
    while p.len() < PAGE {
        row += 1;
        p.extend_from_slice(format!("{row:010}{:08}", rng.below(100_000_000)).as_bytes());
        for _ in 0..10 {
            p.extend_from_slice(format!("{:011}-", rng.below(100_000_000_000)).as_bytes());
        }
        for _ in 0..5 {
            p.extend_from_slice(format!("{:011}-", rng.below(100_000_000_000)).as_bytes());
        }
    }
    p.truncate(PAGE);
    p
}

fn main() {
    let pages: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(20_000);
    let file_pages = (pages * 2) as u64;
    let dir =
        tempfile::tempdir_in(std::env::var("TARN_BENCH_DIR").unwrap_or_else(|_| "/var/tmp".into())).expect("temp dir");
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let data: Vec<Vec<u8>> = (0..256).map(|i| page(&mut rng, i)).collect();
    let order: Vec<u64> = (0..pages).map(|_| rng.below(file_pages)).collect();

    // Baseline: the same image-file kind, raw.
    let raw_path = dir.path().join("raw.img");
    let raw = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&raw_path).expect("raw image");
    raw.set_len(file_pages * PAGE as u64 + (64 << 20)).expect("size raw image");
    let t = Instant::now();
    for (i, &p) in order.iter().enumerate() {
        raw.write_all_at(&data[i % data.len()], p * PAGE as u64).expect("pwrite");
        if (i + 1) % PAGES_PER_COMMIT == 0 {
            raw.sync_data().expect("fdatasync");
        }
    }
    raw.sync_data().expect("fdatasync");
    let raw_write = pages as f64 / t.elapsed().as_secs_f64();
    let mut buf = vec![0u8; PAGE];
    let t = Instant::now();
    for &p in &order {
        raw.read_exact_at(&mut buf, p * PAGE as u64).expect("pread");
    }
    let raw_read = pages as f64 / t.elapsed().as_secs_f64();

    // tarn: one pool on an image file, recordsize=16K, compression=lz4.
    let img = dir.path().join("pool.img");
    let opts = CreateOptions { size: Some(file_pages * PAGE as u64 * 2 + (256 << 20)), ..Default::default() };
    let pool = Pool::create("bench", &[VdevSpec::Disk(img)], &opts).expect("create pool");
    pool.set_property("bench", "recordsize", "16K").expect("recordsize");
    pool.set_property("bench", "compression", "lz4").expect("compression");
    let ds = pool.dataset("bench").expect("dataset");
    let f = ds.create(ROOT_ID, b"t.ibd", NewObject::File, 0o644, 0, 0).expect("create file");
    ds.write(f.ino, (file_pages - 1) * PAGE as u64, &data[0]).expect("size file");
    pool.sync().expect("sync");
    let t = Instant::now();
    for (i, &p) in order.iter().enumerate() {
        ds.write(f.ino, p * PAGE as u64, &data[i % data.len()]).expect("write");
        if (i + 1) % PAGES_PER_COMMIT == 0 {
            pool.sync().expect("commit");
        }
    }
    pool.sync().expect("commit");
    let tarn_write = pages as f64 / t.elapsed().as_secs_f64();
    let t = Instant::now();
    for &p in &order {
        ds.read(f.ino, p * PAGE as u64, &mut buf).expect("read");
    }
    let tarn_read = pages as f64 / t.elapsed().as_secs_f64();
    let rows = pool.get_properties("bench", Some("compressratio")).expect("props");

    // fsync: a redo-log style 700-byte append made durable, one at a time.
    const APPENDS: usize = 2000;
    let rec = vec![b'r'; 700];
    let t = Instant::now();
    for i in 0..APPENDS {
        raw.write_all_at(&rec, (i * rec.len()) as u64).expect("pwrite");
        raw.sync_data().expect("fdatasync");
    }
    let raw_fsync = t.elapsed().as_secs_f64() / APPENDS as f64;
    let log = ds.create(ROOT_ID, b"redo", NewObject::File, 0o644, 0, 0).expect("create log");
    let t = Instant::now();
    for i in 0..APPENDS {
        ds.write(log.ino, (i * rec.len()) as u64, &rec).expect("append");
        ds.fsync(log.ino).expect("fsync");
    }
    let tarn_fsync = t.elapsed().as_secs_f64() / APPENDS as f64;

    // The same while a data file's pages pile up unsynced (a database flushing its buffer
    // pool between commits): the redo fsync must not pay for them.
    let t = Instant::now();
    for i in 0..APPENDS {
        raw.write_all_at(&data[i % data.len()], order[i % order.len()] * PAGE as u64).expect("pwrite page");
        raw.write_all_at(&rec, (i * rec.len()) as u64).expect("pwrite");
        raw.sync_data().expect("fdatasync");
    }
    let raw_busy_fsync = t.elapsed().as_secs_f64() / APPENDS as f64;
    let log2 = ds.create(ROOT_ID, b"redo2", NewObject::File, 0o644, 0, 0).expect("create log");
    let t = Instant::now();
    for i in 0..APPENDS {
        ds.write(f.ino, order[i % order.len()] * PAGE as u64, &data[i % data.len()]).expect("write page");
        ds.write(log2.ino, (i * rec.len()) as u64, &rec).expect("append");
        ds.fsync(log2.ino).expect("fsync");
    }
    let tarn_busy_fsync = t.elapsed().as_secs_f64() / APPENDS as f64;

    println!(
        "16 KiB pages: {pages} random over {} MiB, commit every {PAGES_PER_COMMIT}",
        (file_pages * PAGE as u64) >> 20
    );
    println!("{:<28} {:>12} {:>12} {:>8}", "", "raw pages/s", "tarn pages/s", "tarn/raw");
    println!(
        "{:<28} {:>12.0} {:>12.0} {:>8.2}",
        "random write + commit",
        raw_write,
        tarn_write,
        tarn_write / raw_write
    );
    println!(
        "{:<28} {:>12.0} {:>12.0} {:>8.2}",
        "random read (cached image)",
        raw_read,
        tarn_read,
        tarn_read / raw_read
    );
    println!(
        "{:<28} {:>12.1} {:>12.1} {:>8.2}",
        "append 700 B + fsync (us)",
        raw_fsync * 1e6,
        tarn_fsync * 1e6,
        tarn_fsync / raw_fsync
    );
    println!(
        "{:<28} {:>12.1} {:>12.1} {:>8.2}",
        "page + append + fsync (us)",
        raw_busy_fsync * 1e6,
        tarn_busy_fsync * 1e6,
        tarn_busy_fsync / raw_busy_fsync
    );
    println!("compressratio {}", rows[0].value);
    drop(ds);
    pool.close().expect("close");
}

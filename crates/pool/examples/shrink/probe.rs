//! The workload of the `arc_shrink*` examples: fill a 512 MiB ARC from 4 threads (write
//! 4 files of 160 MiB of half-random 16 KiB pages, read them back at random), then shrink
//! the budget to 64 MiB and report the process's RSS — at once, after `release` (the
//! allocator's way of giving memory back, if any), and 2 s and 10 s later.
use std::sync::Arc;
use std::time::Duration;

use tarn_dataset::{NewObject, ROOT_ID};
use tarn_pool::{CreateOptions, Pool, VdevSpec};

const PAGE: usize = 16384;
const PAGES: u64 = 160 << 20 >> 14;

fn mib(b: u64) -> u64 {
    b >> 20
}

fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

pub fn run(allocator: &str, release: impl Fn()) {
    let dir = tempfile::tempdir_in("/var/tmp").expect("temp dir");
    let opts = CreateOptions { size: Some(4 << 30), ..Default::default() };
    let pool = Arc::new(Pool::create("probe", &[VdevSpec::Disk(dir.path().join("d.img"))], &opts).expect("pool"));
    pool.set_property("probe", "recordsize", "16K").expect("recordsize");
    pool.set_arc_max(512 << 20);
    let ds = pool.dataset("probe").expect("dataset");
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let ds = ds.clone();
            std::thread::spawn(move || {
                let ino = ds.create(ROOT_ID, format!("f{t}").as_bytes(), NewObject::File, 0o644, 0, 0).unwrap().ino;
                let mut x = t + 1;
                let mut page = vec![0u8; PAGE];
                for p in 0..PAGES {
                    for b in page[..PAGE / 2].iter_mut() {
                        *b = next(&mut x) as u8;
                    }
                    ds.write(ino, p * PAGE as u64, &page).unwrap();
                }
                for _ in 0..2 * PAGES {
                    let p = next(&mut x) % PAGES;
                    ds.read(ino, p * PAGE as u64, &mut page).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    pool.sync().unwrap();
    let full = pool.stats().arc;
    let before = tarn_arc::resident_bytes();
    pool.set_arc_max(64 << 20);
    let at_once = tarn_arc::resident_bytes();
    release();
    let released = tarn_arc::resident_bytes();
    std::thread::sleep(Duration::from_secs(2));
    let after_2s = tarn_arc::resident_bytes();
    std::thread::sleep(Duration::from_secs(8));
    let after_10s = tarn_arc::resident_bytes();
    let small = pool.stats().arc;
    println!(
        "{allocator}: arc accounted {} MiB -> {} MiB; RSS full {} MiB, shrunk {} MiB, released {} MiB, +2s {} MiB, +10s {} MiB",
        mib(full.accounted_size),
        mib(small.accounted_size),
        mib(before),
        mib(at_once),
        mib(released),
        mib(after_2s),
        mib(after_10s)
    );
}

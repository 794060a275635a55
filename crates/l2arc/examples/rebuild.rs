//! Measures the L2ARC's index rebuild per GiB of cache: fills a cache image of SIZE
//! (default 1G) with 8 KiB blocks through the feed, reopens it and times the rebuild.
//! `cargo run --release -p tarn-l2arc --example rebuild -- /path/cache.img [SIZE_MIB]`
//! The image is read through the page cache when it is a file: the figure is the
//! rebuild's own cost (one 4 KiB read per 1 MiB chunk, decoding, indexing).
use std::sync::Arc;
use std::time::{Duration, Instant};

use tarn_arc::{BlockKey, Class, Departing};
use tarn_l2arc::{CacheSpec, L2Arc};

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next().map(std::path::PathBuf::from) else {
        eprintln!("usage: rebuild CACHE_IMAGE [SIZE_MIB]");
        std::process::exit(2);
    };
    let mib: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1024);
    let size = mib << 20;
    let f = std::fs::File::create(&path).expect("create the image");
    f.set_len(size).expect("size the image");
    let spec = vec![CacheSpec { guid: 7, path: path.clone() }];
    let block: Arc<[u8]> = (0..8192u32).map(|i| (i % 251) as u8).collect::<Vec<_>>().into();
    let l2 = L2Arc::open(1, &spec);
    l2.tunables().set("l2arc_write_max", 4 << 30).expect("tunable");
    let sink = l2.start(false);
    let started = Instant::now();
    let mut n = 0u64;
    while l2.snapshot().asize < size - (size >> 4) {
        let key = BlockKey { vdev: 0, offset: n * 8192, birth: 1 + n / 1000 };
        sink.evicted(Departing {
            key,
            bytes: &block,
            lsize: 16384,
            class: Class::Data,
            unread_prefetch: false,
            objset: None,
        });
        n += 1;
        if l2.snapshot().feed_backlog > 8 << 20 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let fill = started.elapsed();
    std::thread::sleep(Duration::from_millis(300));
    let before = l2.snapshot();
    drop((sink, l2));
    let l2 = L2Arc::open(1, &spec);
    let started = Instant::now();
    let _sink = l2.start(true);
    while l2.rebuilding() {
        std::thread::sleep(Duration::from_micros(200));
    }
    let took = started.elapsed();
    let after = l2.snapshot();
    let gib = after.asize as f64 / (1u64 << 30) as f64;
    println!(
        "filled {} MiB ({} blocks) in {fill:?}; rebuilt {} blocks ({:.2} GiB) in {took:?}: {:.0} ms per GiB; index {} bytes ({:.1} per block)",
        before.asize >> 20,
        before.blocks,
        after.blocks,
        gib,
        took.as_secs_f64() * 1000.0 / gib,
        after.hdr_size,
        after.hdr_size as f64 / after.blocks.max(1) as f64
    );
}

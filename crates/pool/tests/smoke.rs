use std::path::PathBuf;
use tarn_dataset::{NewObject, ROOT_ID};
use tarn_pool::{CreateOptions, ImportOptions, Pool, VdevSpec};

#[test]
fn write_export_import_read() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("d0.img");
    let opts = CreateOptions { size: Some(256 << 20), ..Default::default() };
    let pool = Pool::create("tank", &[VdevSpec::Disk(img.clone())], &opts).unwrap();
    let ds = pool.dataset("tank").unwrap();
    let f = ds.create(ROOT_ID, b"hello", NewObject::File, 0o644, 0, 0).unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    ds.write(f.ino, 0, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    assert_eq!(ds.read(f.ino, 0, &mut back).unwrap(), data.len());
    assert_eq!(back, data);
    pool.sync().unwrap();
    let mut back = vec![0u8; data.len()];
    ds.read(f.ino, 0, &mut back).unwrap();
    assert_eq!(back, data);
    drop(ds);
    pool.export().unwrap();
    let pool = Pool::import_paths(&[PathBuf::from(&img)], &ImportOptions::default()).unwrap();
    let ds = pool.dataset("tank").unwrap();
    let a = ds.lookup(ROOT_ID, b"hello").unwrap();
    assert_eq!(a.size, data.len() as u64);
    let mut back = vec![0u8; data.len()];
    ds.read(a.ino, 0, &mut back).unwrap();
    assert_eq!(back, data);
    println!("{:?}", pool.get_properties("tank", None).unwrap());
    pool.export().unwrap();
}

/// A file extended before its first write (ftruncate/fallocate, as InnoDB does) still gets
/// recordsize blocks; with 512-byte blocks every 16 KiB page would be 32 tiny blocks.
#[test]
fn a_file_extended_before_writing_gets_recordsize_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("d0.img");
    let opts = CreateOptions { size: Some(256 << 20), ..Default::default() };
    let pool = Pool::create("tank", &[VdevSpec::Disk(img)], &opts).unwrap();
    pool.set_property("tank", "recordsize", "16K").unwrap();
    let ds = pool.dataset("tank").unwrap();
    let f = ds.create(ROOT_ID, b"t.ibd", NewObject::File, 0o644, 0, 0).unwrap();
    ds.setattr(f.ino, &tarn_dataset::SetAttr { size: Some(4 << 20), ..Default::default() }).unwrap();
    ds.write(f.ino, 64 << 10, &[7u8; 16384]).unwrap();
    assert_eq!(ds.getattr(f.ino).unwrap().blksize, 16384);
    pool.sync().unwrap();
    let mut page = vec![0u8; 16384];
    ds.read(f.ino, 64 << 10, &mut page).unwrap();
    assert!(page.iter().all(|&b| b == 7));
}

/// Random page updates keep the pool's allocated sectors close to its live bytes: freed
/// space is found again, not stranded in partly used sectors.
#[test]
fn random_page_updates_do_not_strand_space() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("d0.img");
    let opts = CreateOptions { size: Some(512 << 20), ..Default::default() };
    let pool = Pool::create("tank", &[VdevSpec::Disk(img)], &opts).unwrap();
    pool.set_property("tank", "recordsize", "16K").unwrap();
    let ds = pool.dataset("tank").unwrap();
    let f = ds.create(ROOT_ID, b"t.ibd", NewObject::File, 0o644, 0, 0).unwrap();
    ds.setattr(f.ino, &tarn_dataset::SetAttr { size: Some(3000 * 16384), ..Default::default() }).unwrap();
    let mut x = 7u64;
    let mut page = vec![0u8; 16384];
    let next = |x: &mut u64| {
        *x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        *x >> 33
    };
    for round in 0..8 {
        for i in 0..3000u64 {
            // Half random, half a pattern: compresses to about half, like a table page.
            for b in page[..8192].iter_mut() {
                *b = next(&mut x) as u8;
            }
            let p = if round == 0 { i } else { next(&mut x) % 3000 };
            ds.write(f.ino, p * 16384, &page).unwrap();
        }
        pool.sync().unwrap();
    }
    let s = pool.stats();
    let (sectors, live) = (s.space["allocated_sector_bytes"], s.space["live_bytes"]);
    assert!(live as f64 / sectors as f64 > 0.75, "live {live} of {sectors} allocated sector bytes");
}

/// Reading a file in order makes tarn read ahead: later reads find their records already
/// in the ARC, and the stats count those apart from ordinary hits. Random reads do not
/// trigger it.
#[test]
fn sequential_reads_are_prefetched_and_counted_apart() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("d0.img");
    let opts = CreateOptions { size: Some(256 << 20), ..Default::default() };
    let pool = Pool::create("tank", &[VdevSpec::Disk(img.clone())], &opts).unwrap();
    pool.set_property("tank", "recordsize", "16K").unwrap();
    let ds = pool.dataset("tank").unwrap();
    let f = ds.create(ROOT_ID, b"scan", NewObject::File, 0o644, 0, 0).unwrap();
    let page: Vec<u8> = (0..16384u32).map(|i| (i % 13) as u8).collect();
    for p in 0..512u64 {
        ds.write(f.ino, p * 16384, &page).unwrap();
    }
    drop(ds);
    pool.export().unwrap();
    let pool = Pool::import_paths(&[img], &ImportOptions::default()).unwrap();
    let ds = pool.dataset("tank").unwrap();
    let ino = ds.lookup(ROOT_ID, b"scan").unwrap().ino;
    let mut buf = vec![0u8; 16384];
    for p in (0..64u64).map(|i| (i * 7919) % 512) {
        ds.read(ino, p * 16384, &mut buf).unwrap();
    }
    assert_eq!(pool.arc_stats().prefetch_reads, 0, "random reads do not read ahead");
    for p in 0..512u64 {
        ds.read(ino, p * 16384, &mut buf).unwrap();
        assert_eq!(buf, page);
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    let s = pool.arc_stats();
    assert!(s.prefetch_reads > 100, "a sequential scan read ahead: {s:?}");
    assert!(s.prefetch_hits > 100, "and the scan found those blocks in the ARC: {s:?}");
    assert!(s.prefetch_streams >= 1 && s.prefetch_off_switches == 0, "one stream, never switched off: {s:?}");
}

/// A database's page reads under its buffer pool (issue #17): random 16 KiB pages from
/// four threads at once, a B-tree's neighbour pairs among them, read cold from the device.
/// None of it is read ahead: no stream is confirmed, no prefetch read reaches the device.
/// Each thread reads its own quarter of the table, with a gap between quarters, and never
/// reads just past where it read last: neighbour pairs that happen to be adjacent and come
/// back to back *are* a run in record order, which read-ahead rightly follows.
#[test]
fn random_page_reads_from_several_threads_never_read_ahead() {
    const RECORDS: u64 = 8192;
    const QUARTER: u64 = RECORDS / 4;
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("d0.img");
    let opts = CreateOptions { size: Some(512 << 20), ..Default::default() };
    let pool = Pool::create("tank", &[VdevSpec::Disk(img.clone())], &opts).unwrap();
    pool.set_property("tank", "recordsize", "16K").unwrap();
    pool.set_property("tank", "compression", "lz4").unwrap();
    let ds = pool.dataset("tank").unwrap();
    let f = ds.create(ROOT_ID, b"table.ibd", NewObject::File, 0o644, 0, 0).unwrap();
    let page_of = |p: u64| -> Vec<u8> { (0..16384u64).map(|i| ((i / 64) ^ p) as u8).collect() };
    for p in 0..RECORDS {
        ds.write(f.ino, p * 16384, &page_of(p)).unwrap();
    }
    drop(ds);
    pool.export().unwrap();
    let pool = Pool::import_paths(&[img], &ImportOptions::default()).unwrap();
    let ds = std::sync::Arc::new(pool.dataset("tank").unwrap());
    let ino = ds.lookup(ROOT_ID, b"table.ibd").unwrap().ino;
    let demand_before = pool.stats().io["reads_demand"];
    let readers: Vec<_> = (0..4u64)
        .map(|t| {
            let ds = ds.clone();
            std::thread::spawn(move || {
                let mut x = 0x9e37_79b9_7f4a_7c15 ^ t;
                let mut buf = vec![0u8; 16384];
                let mut last = u64::MAX - 8;
                for _ in 0..1500 {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let mut p = t * QUARTER + (x >> 24) % (QUARTER - 3);
                    if (last..last + 4).contains(&p) {
                        p = t * QUARTER + (p - t * QUARTER + 64) % (QUARTER - 3);
                    }
                    last = p;
                    // One read in four goes on to the next leaf, as a short range scan does.
                    let pages = if (x >> 8) % 4 == 0 { p..p + 2 } else { p..p + 1 };
                    for p in pages {
                        ds.read(ino, p * 16384, &mut buf).unwrap();
                        assert_eq!(buf, page_of(p), "page {p}");
                    }
                }
            })
        })
        .collect();
    for r in readers {
        r.join().unwrap();
    }
    let s = pool.stats();
    assert!(s.io["reads_demand"] - demand_before > 4000, "the pages were read from the device: {:?}", s.io);
    assert_eq!(s.io["reads_prefetch"], 0, "no read-ahead reached the device: {:?}", s.io);
    assert_eq!((s.arc.prefetch_reads, s.arc.prefetch_streams), (0, 0), "{:?}", s.arc);
}

/// A record read again in parts while in the ARC is kept decompressed as well: the later
/// parts of a hot page cost a copy, and the stats say so. A reader of whole records (a
/// database's buffer pool) holds them itself: reading them again makes no second copy.
#[test]
fn hot_records_are_served_from_decompressed_copies() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("d0.img");
    let opts = CreateOptions { size: Some(128 << 20), ..Default::default() };
    let pool = Pool::create("tank", &[VdevSpec::Disk(img.clone())], &opts).unwrap();
    pool.set_property("tank", "recordsize", "16K").unwrap();
    let ds = pool.dataset("tank").unwrap();
    let f = ds.create(ROOT_ID, b"hot", NewObject::File, 0o644, 0, 0).unwrap();
    let page: Vec<u8> = (0..16384u32).map(|i| (i % 29) as u8).collect();
    ds.write(f.ino, 0, &page).unwrap();
    ds.write(f.ino, 16384, &page).unwrap();
    drop(ds);
    pool.export().unwrap();
    let pool = Pool::import_paths(&[img], &ImportOptions::default()).unwrap();
    let ds = pool.dataset("tank").unwrap();
    let ino = ds.lookup(ROOT_ID, b"hot").unwrap().ino;
    let mut buf = vec![0u8; 16384];
    // (The lookup may have copied a dnode-table block read again: metadata.)
    let copied = pool.stats().arc.hot_copies_size;
    for _ in 0..5 {
        ds.read(ino, 16384, &mut buf).unwrap();
        assert_eq!(buf, page);
    }
    let s = pool.stats().arc;
    assert_eq!((s.hot_copy_hits, s.hot_copies_size), (0, copied), "whole records are not copied: {s:?}");
    let mut part = vec![0u8; 4096];
    for _ in 0..2 {
        for at in (0..16384).step_by(4096) {
            ds.read(ino, 16384 + at as u64, &mut part).unwrap();
            assert_eq!(part[..], page[at..at + 4096]);
        }
    }
    let s = pool.stats().arc;
    assert!(s.hot_copy_hits >= 6, "parts 2..8 were copies: {s:?}");
    assert!(s.hot_copies_size >= copied + 16384);
}

/// A directory of 100,000 entries: created, committed, listed and looked up after import.
#[test]
fn a_directory_with_100k_entries() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("d0.img");
    let opts = CreateOptions { size: Some(512 << 20), ..Default::default() };
    let pool = Pool::create("tank", &[VdevSpec::Disk(img.clone())], &opts).unwrap();
    let ds = pool.dataset("tank").unwrap();
    let d = ds.create(ROOT_ID, b"big", NewObject::Dir, 0o755, 0, 0).unwrap();
    for i in 0..100_000u32 {
        ds.create(d.ino, format!("f{i:06}").as_bytes(), NewObject::File, 0o644, 0, 0).unwrap();
    }
    drop(ds);
    pool.export().unwrap();
    let pool = Pool::import_paths(&[img], &ImportOptions::default()).unwrap();
    let ds = pool.dataset("tank").unwrap();
    let d = ds.lookup(ROOT_ID, b"big").unwrap();
    assert_eq!(ds.readdir(d.ino).unwrap().len(), 100_000);
    assert!(ds.lookup(d.ino, b"f054321").is_ok());
    ds.unlink(d.ino, b"f054321").unwrap();
    assert!(ds.lookup(d.ino, b"f054321").is_err());
}

/// What a txg writes stays in the ARC, as in ZFS: data just loaded is read back without
/// an I/O — unless `primarycache` says data is not to be cached.
#[test]
fn written_blocks_are_read_back_from_the_arc_as_primarycache_allows() {
    let dir = tempfile::tempdir().unwrap();
    let opts = CreateOptions { size: Some(256 << 20), ..Default::default() };
    let pool = Pool::create("tank", &[VdevSpec::Disk(dir.path().join("d0.img"))], &opts).unwrap();
    pool.create_dataset("tank/all").unwrap();
    pool.create_dataset("tank/meta").unwrap();
    pool.set_property("tank/meta", "primarycache", "metadata").unwrap();
    let data: Vec<u8> = (0..40 * 16384u32).map(|i| (i % 251) as u8 ^ (i / 4096) as u8).collect();
    let mut reads = Vec::new();
    for name in ["tank/all", "tank/meta"] {
        pool.set_property(name, "recordsize", "16K").unwrap();
        let ds = pool.dataset(name).unwrap();
        let f = ds.create(ROOT_ID, b"t.ibd", NewObject::File, 0o644, 0, 0).unwrap();
        ds.write(f.ino, 0, &data).unwrap();
        pool.sync().unwrap();
        let before = pool.stats().io["blocks_read"];
        let mut back = vec![0u8; data.len()];
        ds.read(f.ino, 0, &mut back).unwrap();
        assert!(back == data);
        reads.push(pool.stats().io["blocks_read"] - before);
    }
    assert_eq!(reads[0], 0, "primarycache=all: the 40 records just written come from the ARC");
    assert!(reads[1] >= 40, "primarycache=metadata: data is read from disk ({} block reads)", reads[1]);
    assert!(pool.arc_stats().written_blocks >= 40);
}

/// Metadata never costs a data read (issue #17): with a budget far smaller than the data
/// but large enough for the metadata, a warm random page read of a file whose pages each
/// sit under their own indirect block reads at most one block from the devices — its
/// data. The decoded indirect blocks do not all fit their share, so most lookups decode
/// one again, from the ARC, which keeps metadata while data comes and goes.
#[test]
fn a_warm_random_page_read_reads_at_most_its_data_block() {
    let dir = tempfile::tempdir().unwrap();
    let opts = CreateOptions { size: Some(512 << 20), ..Default::default() };
    let pool = Pool::create("tank", &[VdevSpec::Disk(dir.path().join("d0.img"))], &opts).unwrap();
    pool.set_property("tank", "recordsize", "16K").unwrap();
    pool.set_arc_max(16 << 20);
    let ds = pool.dataset("tank").unwrap();
    let f = ds.create(ROOT_ID, b"t.ibd", NewObject::File, 0o644, 0, 0).unwrap();
    // 2,000 incompressible pages (31 MiB, twice the budget), 512 records apart: one
    // level-1 indirect block each (62 MiB decoded, 32 times their share).
    const PAGES: u64 = 2000;
    let at = |p: u64| p * 512 * 16384;
    let page = |p: u64| {
        let mut x = p.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..16384 / 8)
            .flat_map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x.to_le_bytes()
            })
            .collect::<Vec<u8>>()
    };
    for p in 0..PAGES {
        ds.write(f.ino, at(p), &page(p)).unwrap();
    }
    pool.sync().unwrap();
    let mut x = 12345u64;
    let mut next = || {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (x >> 33) % PAGES
    };
    let mut buf = vec![0u8; 16384];
    for _ in 0..PAGES {
        ds.read(f.ino, at(next()), &mut buf).unwrap(); // warm-up
    }
    let warm = pool.stats();
    let before = warm.io["blocks_read"];
    let reads = 4 * PAGES;
    for _ in 0..reads {
        let p = next();
        ds.read(f.ino, at(p), &mut buf).unwrap();
        assert_eq!(buf, page(p));
    }
    let stats = pool.stats();
    let device_reads = stats.io["blocks_read"] - before;
    assert!(device_reads <= reads, "{device_reads} device reads for {reads} page reads: metadata was read too");
    assert!(device_reads > reads / 4, "the data does not fit the budget, so pages are read: {device_reads}");
    assert!(stats.arc.evictions > warm.arc.evictions, "data came and went: {:?}", stats.arc);
    assert_eq!(
        stats.arc.metadata_size, warm.arc.metadata_size,
        "no metadata left the ARC while data did: {:?}",
        stats.arc
    );
    assert!(stats.arc.metadata_size > 0 && stats.arc.decoded_indirect_size <= 2 << 20, "{:?}", stats.arc);
}

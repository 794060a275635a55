//! No wrong data under the cache's churn: a database-like mix of page reads (a hot set
//! read again and again, cold pages, sequential runs that start read-ahead), page
//! rewrites (each a new block: copy-on-write), partial writes (read-modify-write),
//! truncates and punched holes (frees), with commits in between, against an ARC so small
//! that every policy decision — admission, eviction, a written page taking its old
//! version's place, ghosts, the budget shrinking and growing — happens thousands of
//! times. Every read must equal a plain `Vec<u8>` model, and so must every file after an
//! export and import.
mod common;

use common::db::{create_db_pool, fast_txg, Rng};
use tarn_dataset::{Dataset, NewObject, SetAttr, ROOT_ID};
use tarn_pool::{ImportOptions, Pool};

const PAGE: u64 = 16384;
/// Pages per file (a 1 MiB table).
const PAGES: u64 = 64;
const FILES: usize = 3;
/// The ARC's budget: a handful of compressed records.
const TINY_ARC: u64 = 96 << 10;

/// A page number: half the reads go to a hot set of 6 pages per file (what a cache
/// under a buffer pool keeps being asked for), the rest anywhere (a few past the end).
fn some_page(rng: &mut Rng) -> u64 {
    if rng.below(2) == 0 {
        rng.below(6) * 7
    } else {
        rng.below(PAGES + 4)
    }
}

fn check_read(ds: &Dataset, ino: u64, model: &[u8], off: u64, len: usize, step: usize) {
    let mut buf = vec![0xA5u8; len];
    let n = ds.read(ino, off, &mut buf).unwrap_or_else(|e| panic!("step {step}: read: {e}"));
    let want: &[u8] = model.get(off as usize..model.len().min(off as usize + len)).unwrap_or(&[]);
    assert_eq!(n, want.len(), "step {step}: read length at {off}+{len}");
    if buf[..n] != *want {
        let at = buf.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
        panic!("step {step}: wrong bytes at {} of a read at {off}+{len}", off as usize + at);
    }
}

fn write_model(model: &mut Vec<u8>, off: u64, data: &[u8]) {
    let end = off as usize + data.len();
    if model.len() < end {
        model.resize(end, 0);
    }
    model[off as usize..end].copy_from_slice(data);
}

fn verify_all(ds: &Dataset, inos: &[u64], models: &[Vec<u8>], when: &str) {
    for (f, (&ino, model)) in inos.iter().zip(models).enumerate() {
        assert_eq!(ds.getattr(ino).unwrap().size, model.len() as u64, "{when}: size of file {f}");
        let mut buf = vec![0u8; model.len()];
        let n = ds.read(ino, 0, &mut buf).unwrap();
        assert_eq!(n, model.len(), "{when}: file {f} read short");
        assert!(buf == *model, "{when}: file {f} differs from the model");
    }
}

#[test]
fn no_wrong_data_under_churn_with_a_tiny_arc() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("d0.img");
    let (pool, ds) = create_db_pool(&img, 256 << 20, Vec::new());
    pool.set_arc_max(TINY_ARC);

    let mut inos = Vec::new();
    let mut models = vec![Vec::new(); FILES];
    for (f, model) in models.iter_mut().enumerate() {
        let ino = ds.create(ROOT_ID, format!("t{f}").as_bytes(), NewObject::File, 0o644, 0, 0).unwrap().ino;
        for p in 0..PAGES {
            let data = common::pattern(f as u64 * 1000 + p, PAGE as usize);
            ds.write(ino, p * PAGE, &data).unwrap();
            write_model(model, p * PAGE, &data);
        }
        inos.push(ino);
    }
    pool.sync().unwrap();

    let mut rng = Rng(0x5EED_CAFE_F00D_0017);
    for step in 0..6000 {
        let f = rng.below(FILES as u64) as usize;
        let (ino, model) = (inos[f], &mut models[f]);
        match rng.below(100) {
            // Page reads: the buffer pool's misses.
            0..=49 => check_read(&ds, ino, model, some_page(&mut rng) * PAGE, PAGE as usize, step),
            // A sequential run (a range scan): read-ahead starts, then the run stops.
            50..=53 => {
                let first = rng.below(PAGES);
                for p in first..(first + 12).min(PAGES + 1) {
                    check_read(&ds, ino, model, p * PAGE, PAGE as usize, step);
                }
            }
            // An unaligned read across records.
            54..=58 => {
                let off = rng.below(PAGES * PAGE);
                check_read(&ds, ino, model, off, 1 + rng.below(3 * PAGE) as usize, step);
            }
            // A page flushed by the buffer pool: a whole record rewritten.
            59..=78 => {
                let p = some_page(&mut rng).min(PAGES - 1);
                let seed = rng.next();
                let data = if seed.is_multiple_of(3) {
                    common::noise(seed, PAGE as usize)
                } else {
                    common::pattern(seed, PAGE as usize)
                };
                ds.write(ino, p * PAGE, &data).unwrap();
                write_model(model, p * PAGE, &data);
            }
            // A partial write: the old record is read and rewritten.
            79..=88 => {
                let off = rng.below(PAGES * PAGE);
                let data = common::pattern(rng.next(), 1 + rng.below(PAGE) as usize);
                ds.write(ino, off, &data).unwrap();
                write_model(model, off, &data);
            }
            // Frees: a hole punched, or the file cut (later writes regrow it).
            89..=91 => {
                let off = rng.below(PAGES * PAGE);
                let len = 1 + rng.below(4 * PAGE);
                ds.punch_hole(ino, off, len).unwrap();
                let end = ((off + len) as usize).min(model.len());
                if (off as usize) < end {
                    model[off as usize..end].fill(0);
                }
            }
            92 => {
                let size = rng.below(PAGES * PAGE);
                ds.setattr(ino, &SetAttr { size: Some(size), ..Default::default() }).unwrap();
                model.resize(size as usize, 0);
            }
            // A commit: the rewritten pages get their new blocks, the old ones are freed.
            93..=97 => pool.sync().unwrap(),
            // The budget shrinks and grows at run time.
            _ => pool.set_arc_max(TINY_ARC / 2 + rng.below(TINY_ARC)),
        }
        let arc = pool.arc_stats();
        assert!(arc.size <= arc.max, "step {step}: the cache is over its budget: {arc:?}");
    }
    let arc = pool.arc_stats();
    println!("{arc:?}");
    assert!(arc.evictions > 1000, "the churn reached the cache: {arc:?}");
    assert!(arc.written_blocks > 100 && arc.hits > 100, "writes and hits went through the cache: {arc:?}");
    verify_all(&ds, &inos, &models, "before export");

    drop(ds);
    pool.export().unwrap();
    let pool = Pool::import_paths(&[img], &ImportOptions { txg: fast_txg() }).unwrap();
    pool.set_arc_max(TINY_ARC);
    let ds = pool.dataset("tank/db").unwrap();
    verify_all(&ds, &inos, &models, "after import");
    drop(ds);
    pool.export().unwrap();
}

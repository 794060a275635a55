//! What the block trees cost a txg under a database's scattered page writes (issues #11,
//! #14, #17: bytes written per transaction): a 16 KiB-record file of 12,800 pages, then
//! 20 txgs of `PAGES` random page rewrites each (default 700, about what one txg holds in
//! the lab's TPC-C-like run); prints the indirect-block bytes each txg wrote, in all and
//! per page written.
//!
//!   cargo run --release -p tarn-pool --example indirect_bytes
//!   TARN_PAGES=/path/to/table.ibd   take the pages from a file (InnoDB pages compress
//!                                   as real ones do; default: half-compressible noise)
//!   PAGES=2000                      page rewrites per txg
use std::time::Duration;

use tarn_dataset::{NewObject, ROOT_ID};
use tarn_pool::{CreateOptions, Pool, VdevSpec};
use tarn_txg::TxgConfig;

const PAGE: usize = 16384;
const FILE_PAGES: usize = 12_800;
const TXGS: u64 = 20;

/// `FILE_PAGES` pages: from `TARN_PAGES` (repeated if short), or 8 KiB of noise and 8 KiB
/// of zeros each.
fn page_source() -> Vec<u8> {
    if let Some(path) = std::env::var_os("TARN_PAGES") {
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.to_string_lossy()));
        assert!(bytes.len() >= PAGE, "{} holds less than one page", path.to_string_lossy());
        return bytes.iter().copied().cycle().take(FILE_PAGES * PAGE).collect();
    }
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut out = vec![0u8; FILE_PAGES * PAGE];
    for page in out.chunks_mut(PAGE) {
        for b in &mut page[..PAGE / 2] {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
    }
    out
}

fn main() {
    let pages = page_source();
    let per_txg: usize = std::env::var("PAGES").ok().and_then(|v| v.parse().ok()).unwrap_or(700);
    let dir = tempfile::tempdir().expect("a temporary directory");
    // Txgs commit only when asked: each round below is one txg.
    let manual =
        TxgConfig { timeout: Duration::from_secs(3600), dirty_max: 1 << 30, dirty_sync: 1 << 30, ..Default::default() };
    let opts = CreateOptions { size: Some(2 << 30), txg: manual, ..Default::default() };
    let pool = Pool::create("tank", &[VdevSpec::Disk(dir.path().join("d0.img"))], &opts).expect("pool");
    pool.set_property("tank", "recordsize", "16K").expect("recordsize");
    let ds = pool.dataset("tank").expect("dataset");
    let f = ds.create(ROOT_ID, b"t.ibd", NewObject::File, 0o644, 0, 0).expect("file");
    for (p, page) in pages.chunks(PAGE).enumerate() {
        ds.write(f.ino, (p * PAGE) as u64, page).expect("write");
    }
    pool.txg().sync_all().expect("sync");
    let indirect = |p: &Pool| p.stats().io["written_bytes_indirect"];
    let before = indirect(&pool);
    let mut x: u64 = 12345;
    for _ in 0..TXGS {
        for _ in 0..per_txg {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let at = (x % FILE_PAGES as u64) as usize;
            let from = ((x >> 20) % FILE_PAGES as u64) as usize;
            ds.write(f.ino, (at * PAGE) as u64, &pages[from * PAGE..(from + 1) * PAGE]).expect("rewrite");
        }
        pool.txg().sync_all().expect("sync");
    }
    let per = (indirect(&pool) - before) / TXGS;
    println!(
        "{FILE_PAGES} pages, {per_txg} rewritten per txg: {per} bytes of indirect blocks per txg, {} per page",
        per / per_txg as u64
    );
}

//! The database-like pool the cache tests churn: one image, a `tank/db` dataset of 16 KiB
//! records (InnoDB's page) compressed with lz4, commits every 50 ms, and the
//! deterministic generator that drives their workloads.
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tarn_dataset::Dataset;
use tarn_pool::{CreateOptions, Pool, VdevSpec};
use tarn_txg::TxgConfig;

/// A small deterministic generator (xorshift64*): the same workload every run.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Commits every 50 ms, so a test's churn spans many txgs.
pub fn fast_txg() -> TxgConfig {
    TxgConfig { timeout: Duration::from_millis(50), ..Default::default() }
}

/// Waits until no cache device's ring is still being rebuilt (an import reads it in the
/// background: until then the device is REBUILDING and serves nothing).
pub fn wait_rebuilt(pool: &Pool) {
    let rebuilding = || pool.stats().l2arc.get("rebuilding").copied().unwrap_or(0);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while rebuilding() > 0 {
        assert!(std::time::Instant::now() < deadline, "a cache device was still being rebuilt after 60 s");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Pool `tank` of `size` bytes on the image `img`, with `caches` as its cache devices,
/// and its dataset `tank/db`: 16 KiB records, lz4.
pub fn create_db_pool(img: &Path, size: u64, caches: Vec<PathBuf>) -> (Pool, Arc<Dataset>) {
    let opts = CreateOptions { size: Some(size), txg: fast_txg(), caches, ..Default::default() };
    let pool = Pool::create("tank", &[VdevSpec::Disk(img.to_path_buf())], &opts).unwrap();
    let ds = pool.create_dataset("tank/db").unwrap();
    pool.set_property("tank/db", "recordsize", "16K").unwrap();
    pool.set_property("tank/db", "compression", "lz4").unwrap();
    (pool, ds)
}

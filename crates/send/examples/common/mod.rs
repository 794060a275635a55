//! What the send and receive benchmarks share: database-like pages and MiB.
use rand::Rng;

pub const PAGE: usize = 16384;

/// A page like a database's: a header that varies, rows that repeat with small changes.
pub fn page(rng: &mut impl Rng) -> Vec<u8> {
    let mut p = vec![0u8; PAGE];
    rng.fill(&mut p[..64]);
    let row: Vec<u8> = (0..100).map(|_| rng.gen_range(b'a'..=b'z')).collect();
    for (i, chunk) in p[64..].chunks_mut(100).enumerate() {
        let n = chunk.len();
        chunk.copy_from_slice(&row[..n]);
        chunk[0] = i as u8;
    }
    p
}

pub fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

//! Bytes of a device image file, read and damaged behind the pool's back (the corruption
//! and scan tests).
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Flips bits of the byte at `at` of the image.
pub fn flip(path: &Path, at: u64) {
    let f = std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).unwrap();
    b[0] ^= 0x5a;
    f.write_all_at(&b, at).unwrap();
}

/// `len` bytes of the image at `at`.
pub fn image_bytes(path: &Path, at: u64, len: usize) -> Vec<u8> {
    let f = std::fs::File::open(path).unwrap();
    let mut b = vec![0u8; len];
    f.read_exact_at(&mut b, at).unwrap();
    b
}

/// The image offset of the one place `needle` occurs.
pub fn locate(path: &Path, needle: &[u8]) -> u64 {
    let img = std::fs::read(path).unwrap();
    let hits = super::find_all(&img, needle);
    assert_eq!(hits.len(), 1, "the bytes occur exactly once in {}", path.display());
    hits[0] as u64
}

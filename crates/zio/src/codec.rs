//! Compression codecs and checksums, by well-kept crates (lz4_flex, zstd, xxhash, sha2,
//! blake3).
//!
//! Owns: the codec and checksum choices and their on-disk codes.
//!
//! Promises: `compress` keeps a result only if it saves at least 1/8 (else the block is
//! stored raw); `decompress` fills exactly the logical size or returns a typed error.
//!
//! Must never: decide when a codec is used (the engine does), or panic on bad input.

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Compression {
    Off,
    Lz4,
    /// zstd at a level (1..=19); 0 stands for "whatever level, decoding only".
    Zstd(i32),
}

impl Compression {
    pub fn code(self) -> u8 {
        match self {
            Compression::Off => 0,
            Compression::Lz4 => 1,
            Compression::Zstd(_) => 2,
        }
    }
    pub fn from_code(code: u8) -> Option<Compression> {
        Some(match code {
            0 => Compression::Off,
            1 => Compression::Lz4,
            2 => Compression::Zstd(0),
            _ => return None,
        })
    }

    /// Compresses `data`; `None` when the result would not save at least 1/8 (then the
    /// block is stored raw, as the format promises).
    pub fn compress(self, data: &[u8]) -> Option<Vec<u8>> {
        if self != Compression::Off && looks_incompressible(data) {
            return None;
        }
        let limit = data.len() - data.len() / 8;
        let out = match self {
            Compression::Off => return None,
            Compression::Lz4 => lz4_flex::block::compress(data),
            Compression::Zstd(level) => zstd::bulk::compress(data, level).ok()?,
        };
        (out.len() <= limit && !out.is_empty()).then_some(out)
    }

    /// Decompresses into `out`, which has exactly the logical size.
    pub fn decompress(self, src: &[u8], out: &mut [u8]) -> Result<(), DecompressError> {
        let n = match self {
            Compression::Off => {
                if src.len() != out.len() {
                    return Err(DecompressError::RawSize { len: src.len(), expected: out.len() });
                }
                out.copy_from_slice(src);
                return Ok(());
            }
            Compression::Lz4 => lz4_flex::block::decompress_into(src, out)?,
            Compression::Zstd(_) => zstd::bulk::decompress_to_buffer(src, out).map_err(DecompressError::Zstd)?,
        };
        if n != out.len() {
            return Err(DecompressError::Size { len: n, expected: out.len() });
        }
        Ok(())
    }
}

/// Why stored bytes did not decompress to the logical size. The bytes passed their
/// checksum, so this means a bug or a codec this build reads differently.
#[derive(Debug, thiserror::Error)]
pub enum DecompressError {
    #[error("raw block of {len} bytes, expected {expected}")]
    RawSize { len: usize, expected: usize },
    #[error("block decompressed to {len} bytes, expected {expected}")]
    Size { len: usize, expected: usize },
    #[error("lz4: {0}")]
    Lz4(#[from] lz4_flex::block::DecompressError),
    #[error("zstd: {0}")]
    Zstd(#[source] std::io::Error),
}

/// Early abort: a record whose first and last 2 KiB do not shrink at all under lz4 is
/// almost surely random (encrypted, already compressed); compressing all of it only
/// burns CPU on the sync path before storing it raw anyway. A block that is random at
/// both ends but compressible in the middle is stored raw too: space, never correctness.
fn looks_incompressible(data: &[u8]) -> bool {
    const SAMPLE: usize = 2048;
    if data.len() < 4 * SAMPLE {
        return false;
    }
    let grows = |s: &[u8]| lz4_flex::block::compress(s).len() >= s.len();
    grows(&data[..SAMPLE]) && grows(&data[data.len() - SAMPLE..])
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChecksumKind {
    /// xxh3-128: fast, the default (`checksum=on`), like ZFS's fletcher4.
    Xxh3,
    Sha256,
    Blake3,
}

impl ChecksumKind {
    pub fn code(self) -> u8 {
        match self {
            ChecksumKind::Xxh3 => 1,
            ChecksumKind::Sha256 => 2,
            ChecksumKind::Blake3 => 3,
        }
    }
    pub fn from_code(code: u8) -> Option<ChecksumKind> {
        Some(match code {
            1 => ChecksumKind::Xxh3,
            2 => ChecksumKind::Sha256,
            3 => ChecksumKind::Blake3,
            _ => return None,
        })
    }

    pub fn digest(self, data: &[u8]) -> [u8; 32] {
        let mut out = [0u8; 32];
        match self {
            ChecksumKind::Xxh3 => {
                out[..16].copy_from_slice(&xxhash_rust::xxh3::xxh3_128(data).to_le_bytes());
            }
            ChecksumKind::Sha256 => {
                use sha2::Digest;
                out.copy_from_slice(&sha2::Sha256::digest(data));
            }
            ChecksumKind::Blake3 => out.copy_from_slice(blake3::hash(data).as_bytes()),
        }
        out
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `len` bytes no codec can shrink (xorshift64), for tests that need a block to fill its
    /// sectors or stay raw.
    pub(crate) fn incompressible(len: usize) -> Vec<u8> {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 32) as u8
            })
            .collect()
    }

    #[test]
    fn compressible_data_shrinks_and_round_trips() {
        let data: Vec<u8> = (0..16384u32).map(|i| (i % 7) as u8).collect();
        for c in [Compression::Lz4, Compression::Zstd(3)] {
            let packed = c.compress(&data).expect("compresses");
            let mut out = vec![0u8; data.len()];
            c.decompress(&packed, &mut out).unwrap();
            assert_eq!(out, data);
        }
    }

    #[test]
    fn bad_input_is_a_typed_error() {
        let mut out = vec![0u8; 100];
        assert!(matches!(
            Compression::Off.decompress(&[1, 2, 3], &mut out),
            Err(DecompressError::RawSize { len: 3, expected: 100 })
        ));
        assert!(matches!(Compression::Lz4.decompress(&[0xff; 7], &mut out), Err(DecompressError::Lz4(_))));
        assert!(matches!(Compression::Zstd(0).decompress(&[0xff; 7], &mut out), Err(DecompressError::Zstd(_))));
        let short = Compression::Lz4.compress(&[5u8; 64]).expect("compresses");
        assert!(matches!(
            Compression::Lz4.decompress(&short, &mut out),
            Err(DecompressError::Size { len: 64, expected: 100 })
        ));
    }

    /// The lz4 decoder is built without `safe-decode` (faster) but keeps its bounds checks:
    /// every truncation and every flipped byte of a real block is an error or a block of
    /// the right size, never a panic or a write past the buffer.
    #[test]
    fn damaged_lz4_blocks_are_errors_not_panics() {
        let data: Vec<u8> = (0..16384u32).map(|i| ((i * 31) % 251) as u8 ^ (i / 97) as u8).collect();
        let block = Compression::Lz4.compress(&data).expect("compresses");
        let mut out = vec![0u8; data.len()];
        for cut in 0..block.len() {
            let _ = Compression::Lz4.decompress(&block[..cut], &mut out);
        }
        for at in 0..block.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut bad = block.clone();
                bad[at] ^= flip;
                let _ = Compression::Lz4.decompress(&bad, &mut out);
            }
        }
        Compression::Lz4.decompress(&block, &mut out).expect("the intact block");
        assert_eq!(out, data);
    }

    #[test]
    fn incompressible_data_is_left_raw() {
        let data = incompressible(16384);
        assert!(Compression::Lz4.compress(&data).is_none());
        assert!(Compression::Zstd(3).compress(&data).is_none());
    }

    #[test]
    fn checksums_differ_on_one_flipped_bit() {
        for k in [ChecksumKind::Xxh3, ChecksumKind::Sha256, ChecksumKind::Blake3] {
            let mut d = vec![5u8; 4096];
            let a = k.digest(&d);
            d[100] ^= 4;
            assert_ne!(a, k.digest(&d));
        }
    }
}

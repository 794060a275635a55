//! The cache device's bytes: a header naming the pool, then a ring of chunks, each a log
//! block (an index of the blocks it carries) followed by those blocks. Byte tables:
//! docs/FORMAT.md §"Cache devices".
//!
//! Owns: the byte layout and version of the device header and of the log block.
//!
//! Promises: a header or log block that is torn, flipped, of another pool, of another
//! initialisation (`generation`) or of an unknown version decodes as `None` (with the
//! reason for the header), never as a wrong index; `decode(encode(x)) == x`.
//!
//! Must never: panic on any bytes read from a device.
use xxhash_rust::xxh3::xxh3_64;

use tarn_arc::{BlockKey, Class};

/// Version of the header and of the log blocks (one format, versioned together).
pub const L2_VERSION: u32 = 1;
const HEADER_MAGIC: u64 = u64::from_le_bytes(*b"TARNL2DV");
const LOG_MAGIC: u64 = u64::from_le_bytes(*b"TARNL2LB");
/// The header's place at the start of the device; the ring starts after it.
pub const HEADER_SIZE: u64 = 4096;
/// Chunks are written and placed in units of this (O_DIRECT on 4 KiB-sector devices).
pub const CHUNK_ALIGN: u64 = 4096;
/// Blocks inside a chunk start at multiples of this, so the index can name them in
/// 512-byte units.
pub const BLOCK_ALIGN: u64 = 512;
/// The log block's fixed part; its entries follow.
pub const LOG_HEADER: usize = 64;
/// One entry of a log block.
pub const ENTRY_SIZE: usize = 32;

/// What the device header says: which pool and which initialisation the ring belongs to,
/// and where the ring is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DevHeader {
    pub pool_guid: u64,
    pub dev_guid: u64,
    /// Random at each initialisation: log blocks of an earlier one never count.
    pub generation: u64,
    pub ring_start: u64,
    pub ring_end: u64,
}

/// Why a device's header was not taken (the device is then initialised afresh).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeaderRefused {
    Blank,
    NotACacheDevice,
    Damaged,
    Version(u32),
    OtherPool(u64),
    OtherDevice(u64),
    /// The ring it describes does not fit the device (it shrank).
    Shrunk,
}

impl std::fmt::Display for HeaderRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderRefused::Blank => write!(f, "blank device"),
            HeaderRefused::NotACacheDevice => write!(f, "not a tarn cache device"),
            HeaderRefused::Damaged => write!(f, "header damaged"),
            HeaderRefused::Version(v) => write!(f, "cache format version {v} (this tarn writes {L2_VERSION})"),
            HeaderRefused::OtherPool(g) => write!(f, "cache of another pool (guid {g:016x})"),
            HeaderRefused::OtherDevice(g) => write!(f, "another cache device (guid {g:016x})"),
            HeaderRefused::Shrunk => write!(f, "device smaller than its cache"),
        }
    }
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

impl DevHeader {
    /// The header's bytes (`HEADER_SIZE`, zero past the fields).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; HEADER_SIZE as usize];
        b[0..8].copy_from_slice(&HEADER_MAGIC.to_le_bytes());
        b[8..12].copy_from_slice(&L2_VERSION.to_le_bytes());
        b[16..24].copy_from_slice(&self.pool_guid.to_le_bytes());
        b[24..32].copy_from_slice(&self.dev_guid.to_le_bytes());
        b[32..40].copy_from_slice(&self.generation.to_le_bytes());
        b[40..48].copy_from_slice(&self.ring_start.to_le_bytes());
        b[48..56].copy_from_slice(&self.ring_end.to_le_bytes());
        let sum = xxh3_64(&b[..56]);
        b[56..64].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// Reads a header for pool `pool_guid`, device `dev_guid` of `device_size` bytes.
    pub fn decode(b: &[u8], pool_guid: u64, dev_guid: u64, device_size: u64) -> Result<DevHeader, HeaderRefused> {
        if b.len() < 64 {
            return Err(HeaderRefused::Damaged);
        }
        if b.iter().all(|&x| x == 0) {
            return Err(HeaderRefused::Blank);
        }
        if u64_at(b, 0) != HEADER_MAGIC {
            return Err(HeaderRefused::NotACacheDevice);
        }
        if xxh3_64(&b[..56]) != u64_at(b, 56) {
            return Err(HeaderRefused::Damaged);
        }
        let version = u32_at(b, 8);
        if version != L2_VERSION {
            return Err(HeaderRefused::Version(version));
        }
        let h = DevHeader {
            pool_guid: u64_at(b, 16),
            dev_guid: u64_at(b, 24),
            generation: u64_at(b, 32),
            ring_start: u64_at(b, 40),
            ring_end: u64_at(b, 48),
        };
        if h.pool_guid != pool_guid {
            return Err(HeaderRefused::OtherPool(h.pool_guid));
        }
        if h.dev_guid != dev_guid {
            return Err(HeaderRefused::OtherDevice(h.dev_guid));
        }
        if h.ring_end > device_size || h.ring_start != HEADER_SIZE || h.ring_end < h.ring_start + CHUNK_ALIGN {
            return Err(HeaderRefused::Shrunk);
        }
        Ok(h)
    }

    pub fn ring_size(&self) -> u64 {
        self.ring_end - self.ring_start
    }
}

/// One block a log block indexes: its identity in the pool, its sizes and class, and
/// where in the chunk its stored bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogEntry {
    pub key: BlockKey,
    pub psize: u32,
    pub lsize: u32,
    pub class: Class,
    /// Byte offset of the block from the chunk's start (a multiple of `BLOCK_ALIGN`).
    pub at: u32,
}

/// A log block's fixed part: where its chunk sits in the ring's history and how long it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogHeader {
    pub generation: u64,
    pub pool_guid: u64,
    /// The chunk's absolute ring position (bytes written since initialisation, laps
    /// included); its place on the device is `ring_start + abs % ring_size`.
    pub abs: u64,
    /// The previous chunk's `abs` (`NO_PREV` for the first).
    pub prev: u64,
    /// The chunk's length in bytes (a multiple of `CHUNK_ALIGN`).
    pub len: u32,
    pub count: u32,
}

pub const NO_PREV: u64 = u64::MAX;

impl LogHeader {
    /// Bytes the log block takes at the chunk's start (header and entries), before the
    /// first block.
    pub fn table_len(count: usize) -> usize {
        LOG_HEADER + count * ENTRY_SIZE
    }

    /// Writes the log block (header, entries, checksum) at the start of `chunk`.
    pub fn encode(&self, entries: &[LogEntry], chunk: &mut [u8]) {
        let table = Self::table_len(entries.len());
        let b = &mut chunk[..table];
        b[0..8].copy_from_slice(&LOG_MAGIC.to_le_bytes());
        b[8..12].copy_from_slice(&L2_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.count.to_le_bytes());
        b[16..24].copy_from_slice(&self.generation.to_le_bytes());
        b[24..32].copy_from_slice(&self.pool_guid.to_le_bytes());
        b[32..40].copy_from_slice(&self.abs.to_le_bytes());
        b[40..48].copy_from_slice(&self.prev.to_le_bytes());
        b[48..52].copy_from_slice(&self.len.to_le_bytes());
        b[52..56].fill(0);
        for (i, e) in entries.iter().enumerate() {
            let at = LOG_HEADER + i * ENTRY_SIZE;
            let w = &mut b[at..at + ENTRY_SIZE];
            w[0..2].copy_from_slice(&e.key.vdev.to_le_bytes());
            w[2] = match e.class {
                Class::Data => 1,
                Class::Metadata => 2,
            };
            w[3] = 0;
            w[4..8].copy_from_slice(&e.psize.to_le_bytes());
            w[8..16].copy_from_slice(&e.key.offset.to_le_bytes());
            w[16..24].copy_from_slice(&e.key.birth.to_le_bytes());
            w[24..28].copy_from_slice(&e.lsize.to_le_bytes());
            w[28..32].copy_from_slice(&e.at.to_le_bytes());
        }
        b[56..64].fill(0);
        let sum = xxh3_64(b);
        b[56..64].copy_from_slice(&sum.to_le_bytes());
    }

    /// Reads the fixed part of a log block; `None` unless it is one (magic, version).
    /// The count it gives says how many bytes `decode_entries` needs.
    pub fn decode_head(b: &[u8]) -> Option<LogHeader> {
        if b.len() < LOG_HEADER || u64_at(b, 0) != LOG_MAGIC || u32_at(b, 8) != L2_VERSION {
            return None;
        }
        Some(LogHeader {
            count: u32_at(b, 12),
            generation: u64_at(b, 16),
            pool_guid: u64_at(b, 24),
            abs: u64_at(b, 32),
            prev: u64_at(b, 40),
            len: u32_at(b, 48),
        })
    }

    /// Checks the whole log block's checksum and returns its entries; `None` if it does
    /// not verify or an entry points outside the chunk.
    pub fn decode_entries(&self, b: &[u8]) -> Option<Vec<LogEntry>> {
        let table = Self::table_len(self.count as usize);
        if b.len() < table || table > self.len as usize {
            return None;
        }
        let mut copy = b[..table].to_vec();
        copy[56..64].fill(0);
        if xxh3_64(&copy) != u64_at(b, 56) {
            return None;
        }
        let mut out = Vec::with_capacity(self.count as usize);
        for i in 0..self.count as usize {
            let w = &b[LOG_HEADER + i * ENTRY_SIZE..LOG_HEADER + (i + 1) * ENTRY_SIZE];
            let class = match w[2] {
                1 => Class::Data,
                2 => Class::Metadata,
                _ => return None,
            };
            let e = LogEntry {
                key: BlockKey { vdev: u16::from_le_bytes([w[0], w[1]]), offset: u64_at(w, 8), birth: u64_at(w, 16) },
                psize: u32_at(w, 4),
                lsize: u32_at(w, 24),
                class,
                at: u32_at(w, 28),
            };
            let end = e.at as u64 + e.psize as u64;
            if (e.at as usize) < table || end > self.len as u64 || !(e.at as u64).is_multiple_of(BLOCK_ALIGN) {
                return None;
            }
            out.push(e);
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_refuses_by_reason() {
        let h = DevHeader { pool_guid: 7, dev_guid: 9, generation: 11, ring_start: HEADER_SIZE, ring_end: 1 << 20 };
        let b = h.encode();
        assert_eq!(DevHeader::decode(&b, 7, 9, 1 << 20), Ok(h));
        assert_eq!(DevHeader::decode(&b, 8, 9, 1 << 20), Err(HeaderRefused::OtherPool(7)));
        assert_eq!(DevHeader::decode(&b, 7, 10, 1 << 20), Err(HeaderRefused::OtherDevice(9)));
        assert_eq!(DevHeader::decode(&b, 7, 9, 1 << 19), Err(HeaderRefused::Shrunk));
        assert_eq!(DevHeader::decode(&[0u8; 4096], 7, 9, 1 << 20), Err(HeaderRefused::Blank));
        let mut flipped = b.clone();
        flipped[20] ^= 1;
        assert_eq!(DevHeader::decode(&flipped, 7, 9, 1 << 20), Err(HeaderRefused::Damaged));
        let mut newer = b;
        newer[8] = 2;
        let sum = xxh3_64(&newer[..56]);
        newer[56..64].copy_from_slice(&sum.to_le_bytes());
        assert_eq!(DevHeader::decode(&newer, 7, 9, 1 << 20), Err(HeaderRefused::Version(2)));
    }

    #[test]
    fn log_block_round_trips_and_a_flipped_bit_is_refused() {
        let entries = vec![
            LogEntry {
                key: BlockKey { vdev: 1, offset: 4096, birth: 5 },
                psize: 1000,
                lsize: 16384,
                class: Class::Data,
                at: 512,
            },
            LogEntry {
                key: BlockKey { vdev: 0, offset: 8192, birth: 6 },
                psize: 300,
                lsize: 4096,
                class: Class::Metadata,
                at: 1536,
            },
        ];
        let h = LogHeader { generation: 3, pool_guid: 4, abs: 8192, prev: 0, len: 4096, count: 2 };
        let mut chunk = vec![0u8; 4096];
        h.encode(&entries, &mut chunk);
        let back = LogHeader::decode_head(&chunk).unwrap();
        assert_eq!(back, h);
        assert_eq!(back.decode_entries(&chunk).unwrap(), entries);
        chunk[LOG_HEADER + 9] ^= 0x10;
        assert_eq!(back.decode_entries(&chunk), None);
    }
}

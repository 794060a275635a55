//! A record's payload, both ways: `Record::payload` lays out the fields of each record
//! type (docs/FORMAT.md §17), `decode` reads them back, naming the record and the field
//! in every error.
//!
//! Owns: the field layout of each record type and its type number.
//!
//! Promises: `decode` reads only the payload it is given (a count is checked against
//! the bytes left before anything is allocated for it), and refuses trailing bytes.
//!
//! Must never: check checksums or sequence (the reader does, before `decode`), or panic
//! on any payload.

use tarn_objects::{Dnode, DNODE_SIZE};
use tarn_zio::Compression;

use super::{Begin, Record, StreamError};

impl Record {
    pub(super) fn kind(&self) -> u32 {
        match self {
            Record::Begin(_) => 1,
            Record::Object { .. } => 2,
            Record::FreeObjects { .. } => 3,
            Record::Write { .. } => 4,
            Record::Free { .. } => 5,
            Record::End { .. } => 6,
        }
    }

    pub(super) fn payload(&self) -> Vec<u8> {
        let mut p = Vec::new();
        let put = |p: &mut Vec<u8>, v: u64| p.extend_from_slice(&v.to_le_bytes());
        match self {
            Record::Begin(b) => {
                for v in [b.flags, b.to_guid, b.to_txg, b.creation, b.from_guid, b.from_txg, b.pool_guid] {
                    put(&mut p, v);
                }
                for v in [b.dataset_id, b.next_obj, b.resume_object, b.resume_offset] {
                    put(&mut p, v);
                }
                for s in [&b.dataset, &b.snapshot] {
                    p.extend_from_slice(&(s.len() as u16).to_le_bytes());
                    p.extend_from_slice(s.as_bytes());
                }
                p.extend_from_slice(&(b.unlinked.len() as u32).to_le_bytes());
                for &id in &b.unlinked {
                    put(&mut p, id);
                }
            }
            Record::Object { id, dnode } => {
                put(&mut p, *id);
                let mut raw = [0u8; DNODE_SIZE];
                let mut d = (**dnode).clone();
                d.root = None;
                d.nlevels = 0;
                d.encode(&mut raw);
                p.extend_from_slice(&raw);
            }
            Record::FreeObjects { first, count } => {
                put(&mut p, *first);
                put(&mut p, *count);
            }
            Record::Write { object, offset, birth, compression, lsize, data } => {
                put(&mut p, *object);
                put(&mut p, *offset);
                put(&mut p, *birth);
                p.extend_from_slice(&[compression.code(), 0, 0, 0]);
                p.extend_from_slice(&lsize.to_le_bytes());
                p.extend_from_slice(&(data.len() as u32).to_le_bytes());
                p.extend_from_slice(data);
            }
            Record::Free { object, offset, length } => {
                for v in [*object, *offset, *length] {
                    put(&mut p, v);
                }
            }
            Record::End { to_guid, chain } => {
                put(&mut p, *to_guid);
                p.extend_from_slice(chain);
            }
        }
        p
    }
}

/// Reads the payload of one record, field by field, naming the record in every error.
struct Fields<'a> {
    seq: u64,
    bytes: &'a [u8],
}

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], StreamError> {
        if self.bytes.len() < n {
            return Err(StreamError::Malformed { seq: self.seq, why: format!("it ends inside {what}") });
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn u64(&mut self, what: &str) -> Result<u64, StreamError> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().expect("8 bytes")))
    }

    fn u32(&mut self, what: &str) -> Result<u32, StreamError> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().expect("4 bytes")))
    }

    fn string(&mut self, what: &str) -> Result<String, StreamError> {
        let len = u16::from_le_bytes(self.take(2, what)?.try_into().expect("2 bytes")) as usize;
        let raw = self.take(len, what)?;
        String::from_utf8(raw.to_vec())
            .map_err(|_| StreamError::Malformed { seq: self.seq, why: format!("{what} is not UTF-8") })
    }

    fn done(&self) -> Result<(), StreamError> {
        if !self.bytes.is_empty() {
            return Err(StreamError::Malformed {
                seq: self.seq,
                why: format!("{} bytes past its end", self.bytes.len()),
            });
        }
        Ok(())
    }
}

pub(super) fn decode(kind: u32, seq: u64, payload: &[u8]) -> Result<Record, StreamError> {
    let mut f = Fields { seq, bytes: payload };
    let malformed = |why: String| StreamError::Malformed { seq, why };
    let rec = match kind {
        1 => {
            let mut v = [0u64; 11];
            for (i, x) in v.iter_mut().enumerate() {
                *x = f.u64(&format!("BEGIN field {i}"))?;
            }
            let dataset = f.string("the dataset name")?;
            let snapshot = f.string("the snapshot name")?;
            let n = f.u32("the unlinked count")? as usize;
            if n > f.bytes.len() / 8 {
                return Err(malformed(format!("{n} unlinked objects do not fit in the record")));
            }
            let unlinked = (0..n).map(|_| f.u64("an unlinked object")).collect::<Result<_, _>>()?;
            Record::Begin(Begin {
                flags: v[0],
                to_guid: v[1],
                to_txg: v[2],
                creation: v[3],
                from_guid: v[4],
                from_txg: v[5],
                pool_guid: v[6],
                dataset_id: v[7],
                next_obj: v[8],
                resume_object: v[9],
                resume_offset: v[10],
                dataset,
                snapshot,
                unlinked,
            })
        }
        2 => {
            let id = f.u64("the object id")?;
            let raw = f.take(DNODE_SIZE, "the dnode")?;
            let dnode = Dnode::decode(raw)
                .map_err(|e| malformed(format!("object {id}: {e}")))?
                .ok_or_else(|| malformed(format!("object {id} has a free dnode")))?;
            Record::Object { id, dnode: Box::new(dnode) }
        }
        3 => Record::FreeObjects { first: f.u64("the first id")?, count: f.u64("the count")? },
        4 => {
            let object = f.u64("the object")?;
            let offset = f.u64("the offset")?;
            let birth = f.u64("the birth txg")?;
            let codes = f.take(4, "the compression")?;
            let compression = Compression::from_code(codes[0])
                .ok_or_else(|| malformed(format!("unknown compression {}", codes[0])))?;
            let lsize = f.u32("the logical size")?;
            let psize = f.u32("the stored size")? as usize;
            let data = f.take(psize, "the block's bytes")?.to_vec();
            Record::Write { object, offset, birth, compression, lsize, data }
        }
        5 => Record::Free { object: f.u64("the object")?, offset: f.u64("the offset")?, length: f.u64("the length")? },
        6 => {
            let to_guid = f.u64("the snapshot guid")?;
            let chain = f.take(32, "the stream checksum")?.try_into().expect("32 bytes");
            Record::End { to_guid, chain }
        }
        other => return Err(malformed(format!("unknown record type {other}"))),
    };
    f.done()?;
    Ok(rec)
}

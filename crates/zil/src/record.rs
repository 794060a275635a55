//! Intent-log records: one change each, tagged with the txg it belongs to and the dataset
//! it touches, encoded as bytes (docs/FORMAT.md). Object ids are the ids the change used;
//! replay maps ids of objects it re-creates.
//!
//! Owns: the record types and their byte encoding.
//!
//! Promises: `decode(encode(r)) == r` for every record; a malformed record is a typed
//! `RecordError` naming what is wrong, never a panic (the bytes come from disk).
//!
//! Must never: read past the bytes it is given, or accept an indirect write whose range
//! lies outside its block.
use tarn_zio::{BlockPtr, BLKPTR_SIZE};

/// Why a record could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("record header is truncated")]
    HeaderTruncated,
    #[error("record body is truncated")]
    BodyTruncated,
    #[error("record is truncated")]
    FieldTruncated,
    #[error("unknown log record type {0}")]
    UnknownType(u8),
    #[error("indirect write record without a block")]
    IndirectWithoutBlock,
    /// zio reports a malformed block pointer as text (`BlockPtr::decode`).
    #[error("indirect write record: {0}")]
    BadBlockPointer(String),
    #[error("indirect write record: bytes {offset}+{len} are outside its block at {block_offset}")]
    IndirectOutsideBlock { offset: u64, len: u64, block_offset: u64 },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Write {
        obj: u64,
        offset: u64,
        data: Vec<u8>,
    },
    Truncate {
        obj: u64,
        size: u64,
    },
    Create {
        parent: u64,
        obj: u64,
        kind: u8,
        mode: u32,
        uid: u32,
        gid: u32,
        rdev: u64,
        name: Vec<u8>,
        target: Vec<u8>,
    },
    Remove {
        parent: u64,
        name: Vec<u8>,
        is_dir: bool,
    },
    Rename {
        sdir: u64,
        sname: Vec<u8>,
        ddir: u64,
        dname: Vec<u8>,
        noreplace: bool,
    },
    Link {
        obj: u64,
        dir: u64,
        name: Vec<u8>,
    },
    SetAttr {
        obj: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        atime: Option<(i64, u32)>,
        mtime: Option<(i64, u32)>,
    },
    PunchHole {
        obj: u64,
        offset: u64,
        len: u64,
    },
    /// A write whose data is not in the log: bytes [offset, offset + len) are in the
    /// record-sized block `bp`, which starts at file offset `block_offset` (written in
    /// place before the log block, and adopted by the txg — ZFS's WR_INDIRECT). Log
    /// version 2 on.
    WriteIndirect {
        obj: u64,
        offset: u64,
        len: u64,
        block_offset: u64,
        bp: BlockPtr,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub txg: u64,
    pub dataset: u64,
    pub op: Op,
}

/// Bytes of a record header: type, pad, body length, txg, dataset.
pub const RECORD_HEADER: usize = 24;

struct Writer<'a>(&'a mut Vec<u8>);

impl Writer<'_> {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
    }
    fn opt_u32(&mut self, v: Option<u32>) {
        self.u8(v.is_some() as u8);
        self.u32(v.unwrap_or(0));
    }
    fn opt_time(&mut self, v: Option<(i64, u32)>) {
        self.u8(v.is_some() as u8);
        let (s, n) = v.unwrap_or((0, 0));
        self.u64(s as u64);
        self.u32(n);
    }
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], RecordError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len()).ok_or(RecordError::FieldTruncated)?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, RecordError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, RecordError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    fn u64(&mut self) -> Result<u64, RecordError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    fn bytes(&mut self) -> Result<Vec<u8>, RecordError> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
    fn opt_u32(&mut self) -> Result<Option<u32>, RecordError> {
        let some = self.u8()? != 0;
        let v = self.u32()?;
        Ok(some.then_some(v))
    }
    fn opt_time(&mut self) -> Result<Option<(i64, u32)>, RecordError> {
        let some = self.u8()? != 0;
        let s = self.u64()? as i64;
        let n = self.u32()?;
        Ok(some.then_some((s, n)))
    }
}

impl Record {
    /// The object whose own changes this record holds; `None` for a namespace change
    /// (create, remove, rename, link), which every fsync must make durable (replay
    /// applies them in order).
    pub fn object(&self) -> Option<u64> {
        match &self.op {
            Op::Write { obj, .. }
            | Op::WriteIndirect { obj, .. }
            | Op::Truncate { obj, .. }
            | Op::SetAttr { obj, .. }
            | Op::PunchHole { obj, .. } => Some(*obj),
            Op::Create { .. } | Op::Remove { .. } | Op::Rename { .. } | Op::Link { .. } => None,
        }
    }

    /// Appends the record to `out` (the body is written in place, then its length).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&[0u8; RECORD_HEADER]);
        let mut w = Writer(out);
        let kind = match &self.op {
            Op::Write { obj, offset, data } => {
                w.u64(*obj);
                w.u64(*offset);
                w.bytes(data);
                1
            }
            Op::Truncate { obj, size } => {
                w.u64(*obj);
                w.u64(*size);
                2
            }
            Op::Create { parent, obj, kind, mode, uid, gid, rdev, name, target } => {
                w.u64(*parent);
                w.u64(*obj);
                w.u8(*kind);
                w.u32(*mode);
                w.u32(*uid);
                w.u32(*gid);
                w.u64(*rdev);
                w.bytes(name);
                w.bytes(target);
                3
            }
            Op::Remove { parent, name, is_dir } => {
                w.u64(*parent);
                w.bytes(name);
                w.u8(*is_dir as u8);
                4
            }
            Op::Rename { sdir, sname, ddir, dname, noreplace } => {
                w.u64(*sdir);
                w.bytes(sname);
                w.u64(*ddir);
                w.bytes(dname);
                w.u8(*noreplace as u8);
                5
            }
            Op::Link { obj, dir, name } => {
                w.u64(*obj);
                w.u64(*dir);
                w.bytes(name);
                6
            }
            Op::SetAttr { obj, mode, uid, gid, atime, mtime } => {
                w.u64(*obj);
                w.opt_u32(*mode);
                w.opt_u32(*uid);
                w.opt_u32(*gid);
                w.opt_time(*atime);
                w.opt_time(*mtime);
                7
            }
            Op::PunchHole { obj, offset, len } => {
                w.u64(*obj);
                w.u64(*offset);
                w.u64(*len);
                8
            }
            Op::WriteIndirect { obj, offset, len, block_offset, bp } => {
                w.u64(*obj);
                w.u64(*offset);
                w.u64(*len);
                w.u64(*block_offset);
                w.0.extend_from_slice(&bp.to_bytes());
                9
            }
        };
        let body = (out.len() - start - RECORD_HEADER) as u32;
        let header = &mut out[start..start + RECORD_HEADER];
        header[0] = kind;
        header[4..8].copy_from_slice(&body.to_le_bytes());
        header[8..16].copy_from_slice(&self.txg.to_le_bytes());
        header[16..24].copy_from_slice(&self.dataset.to_le_bytes());
    }

    pub fn encoded_len(&self) -> usize {
        let mut v = Vec::new();
        self.encode(&mut v);
        v.len()
    }

    /// Decodes one record at the start of `b`; returns it and the bytes it used.
    pub fn decode(b: &[u8]) -> Result<(Record, usize), RecordError> {
        if b.len() < RECORD_HEADER {
            return Err(RecordError::HeaderTruncated);
        }
        let kind = b[0];
        let len = u32::from_le_bytes(b[4..8].try_into().expect("4")) as usize;
        let txg = u64::from_le_bytes(b[8..16].try_into().expect("8"));
        let dataset = u64::from_le_bytes(b[16..24].try_into().expect("8"));
        let body = b.get(RECORD_HEADER..RECORD_HEADER + len).ok_or(RecordError::BodyTruncated)?;
        let mut r = Reader { b: body, at: 0 };
        let op = match kind {
            1 => Op::Write { obj: r.u64()?, offset: r.u64()?, data: r.bytes()? },
            2 => Op::Truncate { obj: r.u64()?, size: r.u64()? },
            3 => Op::Create {
                parent: r.u64()?,
                obj: r.u64()?,
                kind: r.u8()?,
                mode: r.u32()?,
                uid: r.u32()?,
                gid: r.u32()?,
                rdev: r.u64()?,
                name: r.bytes()?,
                target: r.bytes()?,
            },
            4 => Op::Remove { parent: r.u64()?, name: r.bytes()?, is_dir: r.u8()? != 0 },
            5 => Op::Rename {
                sdir: r.u64()?,
                sname: r.bytes()?,
                ddir: r.u64()?,
                dname: r.bytes()?,
                noreplace: r.u8()? != 0,
            },
            6 => Op::Link { obj: r.u64()?, dir: r.u64()?, name: r.bytes()? },
            7 => Op::SetAttr {
                obj: r.u64()?,
                mode: r.opt_u32()?,
                uid: r.opt_u32()?,
                gid: r.opt_u32()?,
                atime: r.opt_time()?,
                mtime: r.opt_time()?,
            },
            8 => Op::PunchHole { obj: r.u64()?, offset: r.u64()?, len: r.u64()? },
            9 => {
                let (obj, offset, len, block_offset) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
                let bp = BlockPtr::decode(r.take(BLKPTR_SIZE)?)
                    .map_err(|e| RecordError::BadBlockPointer(e.to_string()))?
                    .ok_or(RecordError::IndirectWithoutBlock)?;
                let inside = offset >= block_offset
                    && offset.checked_add(len).is_some_and(|end| end <= block_offset.saturating_add(bp.lsize as u64));
                if !inside {
                    return Err(RecordError::IndirectOutsideBlock { offset, len, block_offset });
                }
                Op::WriteIndirect { obj, offset, len, block_offset, bp }
            }
            k => return Err(RecordError::UnknownType(k)),
        };
        Ok((Record { txg, dataset, op }, RECORD_HEADER + len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_bp() -> BlockPtr {
        use tarn_zio::{BlockType, ChecksumKind, Compression};
        BlockPtr {
            vdev: 0,
            compression: Compression::Lz4,
            checksum_kind: ChecksumKind::Blake3,
            level: 0,
            block_type: BlockType::Data,
            offset: 1 << 20,
            psize: 3000,
            lsize: 16384,
            birth: 7,
            checksum: [5; 32],
        }
    }

    #[test]
    fn an_indirect_record_pointing_outside_its_block_is_refused() {
        let r = Record {
            txg: 3,
            dataset: 1,
            op: Op::WriteIndirect { obj: 2, offset: 30000, len: 8000, block_offset: 16384, bp: sample_bp() },
        };
        let mut bytes = Vec::new();
        r.encode(&mut bytes);
        let err = Record::decode(&bytes).unwrap_err();
        assert_eq!(err, RecordError::IndirectOutsideBlock { offset: 30000, len: 8000, block_offset: 16384 });
    }

    #[test]
    fn a_cut_or_unknown_record_is_a_typed_error() {
        let r = Record {
            txg: 3,
            dataset: 1,
            op: Op::Create {
                parent: 1,
                obj: 9,
                kind: 1,
                mode: 0o644,
                uid: 3,
                gid: 4,
                rdev: 0,
                name: b"f".to_vec(),
                target: vec![],
            },
        };
        let mut bytes = Vec::new();
        r.encode(&mut bytes);
        for cut in 0..bytes.len() {
            assert!(Record::decode(&bytes[..cut]).is_err(), "a record cut at {cut} bytes is refused");
        }
        assert_eq!(Record::decode(&bytes[..RECORD_HEADER - 1]).unwrap_err(), RecordError::HeaderTruncated);
        assert_eq!(Record::decode(&bytes[..RECORD_HEADER + 3]).unwrap_err(), RecordError::BodyTruncated);
        let mut lying = bytes.clone();
        lying[4..8].copy_from_slice(&10u32.to_le_bytes()); // a body too short for its fields
        assert_eq!(Record::decode(&lying).unwrap_err(), RecordError::FieldTruncated);
        bytes[0] = 77;
        assert_eq!(Record::decode(&bytes).unwrap_err(), RecordError::UnknownType(77));
    }

    #[test]
    fn every_record_type_round_trips() {
        let ops = vec![
            Op::Write { obj: 5, offset: 4096, data: vec![1, 2, 3] },
            Op::Truncate { obj: 5, size: 10 },
            Op::Create {
                parent: 1,
                obj: 9,
                kind: 1,
                mode: 0o644,
                uid: 3,
                gid: 4,
                rdev: 0,
                name: b"f".to_vec(),
                target: vec![],
            },
            Op::Remove { parent: 1, name: b"g".to_vec(), is_dir: true },
            Op::Rename { sdir: 1, sname: b"a".to_vec(), ddir: 2, dname: b"b".to_vec(), noreplace: false },
            Op::Link { obj: 9, dir: 1, name: b"h".to_vec() },
            Op::SetAttr { obj: 9, mode: Some(0o600), uid: None, gid: Some(7), atime: Some((-5, 9)), mtime: None },
            Op::PunchHole { obj: 9, offset: 0, len: 100 },
            Op::WriteIndirect { obj: 9, offset: 20000, len: 700, block_offset: 16384, bp: sample_bp() },
        ];
        let mut bytes = Vec::new();
        let recs: Vec<Record> =
            ops.into_iter().enumerate().map(|(i, op)| Record { txg: i as u64, dataset: 2, op }).collect();
        for r in &recs {
            r.encode(&mut bytes);
        }
        let mut at = 0;
        for r in &recs {
            let (back, used) = Record::decode(&bytes[at..]).unwrap();
            assert_eq!(&back, r);
            at += used;
        }
        assert_eq!(at, bytes.len());
    }
}

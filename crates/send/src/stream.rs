//! The send stream, format v1 (docs/FORMAT.md §17): a preamble (magic, version), then
//! records — BEGIN, then per object an OBJECT and its WRITE and FREE records, FREEOBJECTS
//! for freed ids, and END. Each record carries its sequence number and a checksum of its
//! own bytes; END carries a checksum chained over every record before it.
//!
//! Owns: the stream's byte layout, its version, and the checks a reader makes on every
//! record (checksum, sequence, size, the order of record types).
//!
//! Promises: a reader hands out only records whose checksum matched, in sequence; every
//! defect — bad magic, a newer version, a cut, a flipped bit, a record out of order — is
//! a `StreamError` naming it and where; no input makes it allocate past
//! `MAX_PAYLOAD` or panic.
//!
//! Must never: accept a stream of a version it does not know, or hand out a record
//! before its checksum is checked.
use std::io::{self, Read, Write};

use tarn_objects::{Dnode, DNODE_SIZE};
use tarn_zio::{ChecksumKind, Compression};

/// The first 8 bytes of every stream.
pub const STREAM_MAGIC: [u8; 8] = *b"TARNSEND";
/// The stream format this build writes and reads.
pub const STREAM_VERSION: u32 = 1;
/// Bytes before the first record: magic, version, reserved.
pub const PREAMBLE_LEN: usize = 16;
/// A record's head: type, payload length, sequence number.
const HEAD_LEN: usize = 16;
/// The checksum after each record's payload (xxh3-128, as the pool's `checksum=on`).
const SUM_LEN: usize = 32;
const SUM: ChecksumKind = ChecksumKind::Xxh3;
/// The largest payload a reader accepts: a WRITE of the largest record plus its head.
/// A length past it is a damaged stream, not an allocation to try.
pub const MAX_PAYLOAD: u32 = (16 << 20) + 64;

/// BEGIN's flag for an incremental stream.
pub const FLAG_INCREMENTAL: u64 = 1;
/// BEGIN's flag for a stream that resumes an interrupted receive (`tarn send -t`): it
/// starts at `resume_object`, `resume_offset`.
pub const FLAG_RESUME: u64 = 2;

/// Why bytes are not a stream this build can receive.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error("not a tarn send stream (bad magic at its start)")]
    BadMagic,
    #[error(
        "send stream version {found} is newer than this tarn reads ({supported}); upgrade tarn on the receiving side"
    )]
    NewerVersion { found: u32, supported: u32 },
    #[error("the stream is truncated: it ends inside record {seq} (byte {at}); resend it")]
    Truncated { seq: u64, at: u64 },
    #[error("the stream ends before its END record (after record {seq}); resend it")]
    NoEnd { seq: u64 },
    #[error("record {seq} (byte {at}) fails its checksum: the stream is damaged")]
    Checksum { seq: u64, at: u64 },
    #[error("record {seq} is out of order: {why}")]
    OutOfOrder { seq: u64, why: String },
    #[error("record {seq} is malformed: {why}")]
    Malformed { seq: u64, why: String },
    #[error("record {seq} claims {len} bytes, more than any record holds: the stream is damaged")]
    TooLarge { seq: u64, len: u32 },
    #[error("the stream's END checksum does not match its records: the stream is damaged")]
    EndChecksum,
    #[error("reading the stream: {0}")]
    Io(#[source] io::Error),
    #[error("no stream on the input (it is empty)")]
    Empty,
}

/// What BEGIN says about the stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Begin {
    pub flags: u64,
    /// The snapshot the stream brings the receiver to.
    pub to_guid: u64,
    pub to_txg: u64,
    pub creation: u64,
    /// The base of an incremental stream (0 for a full one).
    pub from_guid: u64,
    pub from_txg: u64,
    pub pool_guid: u64,
    pub dataset_id: u64,
    pub next_obj: u64,
    /// Where a resuming stream starts: records of lower objects, and of this object
    /// below this byte, are the receiver's already.
    pub resume_object: u64,
    pub resume_offset: u64,
    /// The sender's dataset and snapshot names.
    pub dataset: String,
    pub snapshot: String,
    /// Objects unlinked but still open when the snapshot was taken.
    pub unlinked: Vec<u64>,
}

impl StreamError {
    /// The stream stopped short (cut, or its reader failed) rather than being damaged:
    /// what was received stays, to be resumed.
    pub fn is_interruption(&self) -> bool {
        matches!(self, StreamError::Truncated { .. } | StreamError::NoEnd { .. } | StreamError::Io(_))
    }
}

impl Begin {
    pub fn is_incremental(&self) -> bool {
        self.flags & FLAG_INCREMENTAL != 0
    }

    pub fn is_resume(&self) -> bool {
        self.flags & FLAG_RESUME != 0
    }
}

/// One record of a stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    Begin(Begin),
    /// An object and its attributes (a dnode as the objects layer stores it, no tree).
    Object {
        id: u64,
        dnode: Box<Dnode>,
    },
    /// Ids `first..first + count` are free.
    FreeObjects {
        first: u64,
        count: u64,
    },
    /// One block of `object` at byte `offset`, as stored: compressed with `compression`,
    /// `lsize` bytes once decompressed.
    Write {
        object: u64,
        offset: u64,
        birth: u64,
        compression: Compression,
        lsize: u32,
        data: Vec<u8>,
    },
    /// Bytes `offset..offset + length` of `object` are a hole.
    Free {
        object: u64,
        offset: u64,
        length: u64,
    },
    /// The end: the snapshot reached, and the chained checksum of every record before.
    End {
        to_guid: u64,
        chain: [u8; 32],
    },
}

impl Record {
    fn kind(&self) -> u32 {
        match self {
            Record::Begin(_) => 1,
            Record::Object { .. } => 2,
            Record::FreeObjects { .. } => 3,
            Record::Write { .. } => 4,
            Record::Free { .. } => 5,
            Record::End { .. } => 6,
        }
    }

    fn payload(&self) -> Vec<u8> {
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

fn decode(kind: u32, seq: u64, payload: &[u8]) -> Result<Record, StreamError> {
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

/// The chained checksum: each record's checksum folded into the previous value.
fn chain_next(chain: &[u8; 32], sum: &[u8; 32]) -> [u8; 32] {
    let mut both = [0u8; 64];
    both[..32].copy_from_slice(chain);
    both[32..].copy_from_slice(sum);
    SUM.digest(&both)
}

fn preamble() -> [u8; PREAMBLE_LEN] {
    let mut p = [0u8; PREAMBLE_LEN];
    p[..8].copy_from_slice(&STREAM_MAGIC);
    p[8..12].copy_from_slice(&STREAM_VERSION.to_le_bytes());
    p
}

/// Writes one stream: the preamble at once, then each record with its checksum; `end`
/// adds END with the chain.
pub struct StreamWriter<'a> {
    out: &'a mut dyn Write,
    seq: u64,
    chain: [u8; 32],
    /// Bytes written so far.
    pub bytes: u64,
}

impl<'a> StreamWriter<'a> {
    pub fn new(out: &'a mut dyn Write) -> io::Result<StreamWriter<'a>> {
        let pre = preamble();
        out.write_all(&pre)?;
        Ok(StreamWriter { out, seq: 0, chain: SUM.digest(&pre), bytes: PREAMBLE_LEN as u64 })
    }

    pub fn put(&mut self, rec: &Record) -> io::Result<()> {
        let payload = rec.payload();
        let mut bytes = Vec::with_capacity(HEAD_LEN + payload.len() + SUM_LEN);
        bytes.extend_from_slice(&rec.kind().to_le_bytes());
        bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&self.seq.to_le_bytes());
        bytes.extend_from_slice(&payload);
        let sum = SUM.digest(&bytes);
        bytes.extend_from_slice(&sum);
        self.out.write_all(&bytes)?;
        self.chain = chain_next(&self.chain, &sum);
        self.seq += 1;
        self.bytes += bytes.len() as u64;
        Ok(())
    }

    /// Writes END (its chain covers every record before it) and flushes.
    pub fn end(mut self, to_guid: u64) -> io::Result<u64> {
        let chain = self.chain;
        self.put(&Record::End { to_guid, chain })?;
        self.out.flush()?;
        Ok(self.bytes)
    }
}

/// Reads one stream's records, checking each (see the module).
pub struct StreamReader<'a> {
    input: &'a mut dyn Read,
    seq: u64,
    chain: [u8; 32],
    /// Bytes read so far.
    pub at: u64,
    ended: bool,
}

/// Reads exactly `buf.len()` bytes; `Ok(n)` short of that only at the end of the input.
fn read_full(input: &mut dyn Read, buf: &mut [u8]) -> Result<usize, StreamError> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(StreamError::Io(e)),
        }
    }
    Ok(got)
}

impl<'a> StreamReader<'a> {
    /// Reads the preamble. `Ok(None)`: the input is at its end (no further stream).
    pub fn open(input: &'a mut dyn Read) -> Result<Option<StreamReader<'a>>, StreamError> {
        let mut pre = [0u8; PREAMBLE_LEN];
        let got = read_full(input, &mut pre)?;
        if got == 0 {
            return Ok(None);
        }
        if got < 8 || pre[..8] != STREAM_MAGIC {
            return Err(StreamError::BadMagic);
        }
        if got < PREAMBLE_LEN {
            return Err(StreamError::Truncated { seq: 0, at: got as u64 });
        }
        let version = u32::from_le_bytes(pre[8..12].try_into().expect("4 bytes"));
        if version != STREAM_VERSION {
            return Err(StreamError::NewerVersion { found: version, supported: STREAM_VERSION });
        }
        Ok(Some(StreamReader { input, seq: 0, chain: SUM.digest(&pre), at: PREAMBLE_LEN as u64, ended: false }))
    }

    /// How many records were read.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The next record, checked; `END` is checked against the chain and is the last.
    pub fn next(&mut self) -> Result<Record, StreamError> {
        let (seq, at) = (self.seq, self.at);
        if self.ended {
            return Err(StreamError::OutOfOrder { seq, why: "nothing follows END".into() });
        }
        let mut head = [0u8; HEAD_LEN];
        let got = read_full(self.input, &mut head)?;
        if got == 0 {
            return Err(StreamError::NoEnd { seq: seq.saturating_sub(1) });
        }
        if got < HEAD_LEN {
            return Err(StreamError::Truncated { seq, at });
        }
        let kind = u32::from_le_bytes(head[0..4].try_into().expect("4 bytes"));
        let len = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes"));
        let their_seq = u64::from_le_bytes(head[8..16].try_into().expect("8 bytes"));
        if len > MAX_PAYLOAD {
            return Err(StreamError::TooLarge { seq, len });
        }
        let mut rest = vec![0u8; len as usize + SUM_LEN];
        if read_full(self.input, &mut rest)? < rest.len() {
            return Err(StreamError::Truncated { seq, at });
        }
        let (payload, sum) = rest.split_at(len as usize);
        let mut whole = Vec::with_capacity(HEAD_LEN + payload.len());
        whole.extend_from_slice(&head);
        whole.extend_from_slice(payload);
        let mine = SUM.digest(&whole);
        if mine[..] != sum[..] {
            return Err(StreamError::Checksum { seq, at });
        }
        if their_seq != seq {
            return Err(StreamError::OutOfOrder { seq, why: format!("it says it is record {their_seq}") });
        }
        let rec = decode(kind, seq, payload)?;
        if let Record::End { chain, .. } = &rec {
            if *chain != self.chain {
                return Err(StreamError::EndChecksum);
            }
            self.ended = true;
        }
        self.chain = chain_next(&self.chain, &mine);
        self.seq += 1;
        self.at += (HEAD_LEN + rest.len()) as u64;
        Ok(rec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_objects::ObjType;

    fn sample() -> Vec<Record> {
        vec![
            Record::Begin(Begin {
                flags: 0,
                to_guid: 7,
                to_txg: 9,
                creation: 1,
                from_guid: 0,
                from_txg: 0,
                pool_guid: 3,
                dataset_id: 2,
                next_obj: 4,
                resume_object: 0,
                resume_offset: 0,
                dataset: "tank/a".into(),
                snapshot: "s".into(),
                unlinked: vec![3],
            }),
            Record::Object { id: 2, dnode: Box::new(Dnode::new(ObjType::File, 4096, 0o100644, 5)) },
            Record::Write {
                object: 2,
                offset: 0,
                birth: 8,
                compression: Compression::Lz4,
                lsize: 4096,
                data: vec![1, 2, 3],
            },
            Record::Free { object: 2, offset: 4096, length: 8192 },
            Record::FreeObjects { first: 3, count: 2 },
        ]
    }

    fn encode(recs: &[Record]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut w = StreamWriter::new(&mut out).unwrap();
        for r in recs {
            w.put(r).unwrap();
        }
        w.end(7).unwrap();
        out
    }

    fn read_all(bytes: &[u8]) -> Result<Vec<Record>, StreamError> {
        let mut input = bytes;
        let mut r = StreamReader::open(&mut input)?.expect("a stream");
        let mut out = Vec::new();
        loop {
            let rec = r.next()?;
            let end = matches!(rec, Record::End { .. });
            out.push(rec);
            if end {
                return Ok(out);
            }
        }
    }

    #[test]
    fn records_round_trip() {
        let recs = sample();
        let got = read_all(&encode(&recs)).unwrap();
        assert_eq!(&got[..recs.len()], &recs[..]);
        assert!(matches!(got.last(), Some(Record::End { to_guid: 7, .. })));
    }

    #[test]
    fn every_defect_is_named() {
        let good = encode(&sample());
        let mut bad = good.clone();
        bad[0] = b'X';
        assert!(matches!(read_all(&bad), Err(StreamError::BadMagic)));
        let mut newer = good.clone();
        newer[8] = 2;
        assert!(matches!(read_all(&newer), Err(StreamError::NewerVersion { found: 2, supported: 1 })));
        for cut in [PREAMBLE_LEN + 3, good.len() - 5, good.len() / 2] {
            let err = read_all(&good[..cut]).unwrap_err();
            assert!(matches!(err, StreamError::Truncated { .. } | StreamError::NoEnd { .. }), "cut {cut}: {err}");
        }
        for at in (PREAMBLE_LEN..good.len()).step_by(7) {
            let mut flipped = good.clone();
            flipped[at] ^= 0x10;
            let err = read_all(&flipped).unwrap_err();
            assert!(
                matches!(
                    err,
                    StreamError::Checksum { .. } | StreamError::TooLarge { .. } | StreamError::Truncated { .. }
                ),
                "flip at {at}: {err}"
            );
        }
    }

    #[test]
    fn records_out_of_order_are_refused() {
        // Two streams' records spliced: the sequence numbers say so.
        let a = encode(&sample());
        let mut spliced = a[..PREAMBLE_LEN].to_vec();
        let mut w_out = Vec::new();
        StreamWriter::new(&mut w_out).unwrap().put(&sample()[1]).unwrap();
        let mut w2_out = Vec::new();
        {
            let mut w2 = StreamWriter::new(&mut w2_out).unwrap();
            w2.put(&sample()[0]).unwrap();
            w2.put(&sample()[1]).unwrap();
        }
        // Record 1 of the second stream placed first: seq 1 where 0 is due.
        let first_len = w2_out.len() - w_out.len();
        spliced.extend_from_slice(&w2_out[first_len + PREAMBLE_LEN..]);
        let err = read_all(&spliced).unwrap_err();
        assert!(matches!(err, StreamError::OutOfOrder { seq: 0, .. }), "{err}");
    }
}

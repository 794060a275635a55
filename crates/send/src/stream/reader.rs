//! Reading one stream: the preamble (magic, version), then each record checked —
//! length bound, checksum, sequence — before it is decoded, and END against the chain.
//!
//! Owns: the checks a reader makes on every record, and where in the input it stands.
//!
//! Promises: only records whose checksum matched are handed out, in sequence; every
//! defect is a `StreamError` naming the record and the byte offset; nothing is
//! allocated past `MAX_PAYLOAD` for a record.
//!
//! Must never: hand out a record before its checksum is checked, or one after END.

use std::io::{self, Read};

use super::codec::decode;
use super::{
    chain_next, Record, StreamError, HEAD_LEN, MAX_PAYLOAD, PREAMBLE_LEN, STREAM_MAGIC, STREAM_VERSION, SUM, SUM_LEN,
};

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

//! Writing one stream: the preamble, then each record framed (type, length, sequence)
//! and checksummed, and END carrying the chain over every record before it.
//!
//! Owns: the framing of records on the way out and the running chain.
//!
//! Promises: records are numbered from 0 in the order `put` is called; `end` flushes.
//!
//! Must never: write a record after END.

use std::io::{self, Write};

use super::{chain_next, preamble, Record, HEAD_LEN, PREAMBLE_LEN, SUM, SUM_LEN};

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

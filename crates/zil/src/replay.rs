//! Reading the chain back at import, for replay.
//!
//! Owns: following the chain from the head the committed root names, and turning its
//! records into the changes replay applies (an indirect write comes back as a plain write
//! carrying the bytes read and verified from its block).
//!
//! Promises: the records returned are exactly those newer than the txg given (the
//! committed txg, or the one an interrupted replay began on: `ReplayProgress`), in
//! chain order; the chain ends at the first block that does not verify, or at the first
//! record that does not decode or indirect write whose block does not verify — that block
//! was written just before its log block and flushed with it, so if it is bad the fsync
//! that logged it never returned, nor did any after it. A verified block of a newer log
//! version is refused (`ZilError::UnsupportedVersion`): its records could not be applied,
//! and dropping them would lose acknowledged writes.
//!
//! Must never: write anything (the pool claims and later frees what this found), or
//! guess at a record it cannot decode.
use tarn_zio::{BlockPtr, Extent, Zio, ZioError};

use crate::block;
use crate::record::{Op, Record, RecordError};
use crate::{LogHead, ZilError, OLDEST_READABLE, ZIL_VERSION};

/// Why the chain ended where it did.
#[derive(Debug, thiserror::Error)]
pub enum ChainEnd {
    /// No chain was read (the root named none).
    #[error("no intent log")]
    NoChain,
    /// The normal end: the next block was never written (or was torn).
    #[error("block {seq} at vdev {vdev} offset {offset}: {source}")]
    Unreadable { seq: u64, vdev: u16, offset: u64, source: ZioError },
    #[error("block {seq}: {source}")]
    BadRecord { seq: u64, source: RecordError },
    #[error("block {seq}: the data of an indirect write (txg {txg}, object {obj}) does not verify: {source}")]
    IndirectDataBad { seq: u64, txg: u64, obj: u64, source: ZioError },
    #[error("block {seq}: the block of an indirect write (txg {txg}, object {obj}) is shorter than its record says")]
    IndirectDataShort { seq: u64, txg: u64, obj: u64 },
}

/// What replay found on disk.
pub struct Chained {
    /// The head it was read from (None: the root named no chain).
    pub head: Option<LogHead>,
    /// Records newer than the txg given, in order; indirect writes come back as plain
    /// writes carrying the bytes read (and verified) from their blocks.
    pub records: Vec<Record>,
    /// Every block of the chain that verified, to claim at import and free after replay.
    pub blocks: Vec<Extent>,
    /// The blocks indirect writes point at: claimed at import like the log blocks (a
    /// crash during replay must find them again), freed after replay.
    pub indirect: Vec<BlockPtr>,
    /// The sequence number after the last valid block.
    pub end_seq: u64,
    /// Why the chain ended (normally: the next block was never written).
    pub end: ChainEnd,
    /// Set when the chain ended inside a verified block: a record that could not be
    /// decoded, or an indirect write whose data block does not verify.
    pub stopped_early: bool,
}

impl Chained {
    pub fn empty() -> Chained {
        Chained {
            head: None,
            records: Vec::new(),
            blocks: Vec::new(),
            indirect: Vec::new(),
            end_seq: 1,
            end: ChainEnd::NoChain,
            stopped_early: false,
        }
    }
}

/// Follows the chain from `head`, collecting records newer than `committed_txg` (the
/// committed txg, or the one an interrupted replay began on; see the module's promises
/// for where it ends).
pub fn read_chain(zio: &Zio, pool_guid: u64, head: &LogHead, committed_txg: u64) -> Result<Chained, ZilError> {
    let mut out = Chained { head: Some(*head), end_seq: head.seq, ..Chained::empty() };
    let mut at = head.extent;
    let mut seq = head.seq;
    loop {
        let valid = |b: &[u8]| block::decode(b, pool_guid, seq).is_ok();
        let bytes = match zio.read_extent(&at, at.len, &valid) {
            Ok(b) => b,
            Err(source) => {
                out.end = ChainEnd::Unreadable { seq, vdev: at.vdev, offset: at.offset, source };
                break;
            }
        };
        let block = block::decode(&bytes, pool_guid, seq).expect("verified by the read");
        if !(OLDEST_READABLE..=ZIL_VERSION).contains(&block.version) {
            return Err(ZilError::UnsupportedVersion { seq, version: block.version });
        }
        out.blocks.push(at);
        if let Err(end) = collect_records(zio, block.payload, seq, committed_txg, &mut out) {
            out.end = end;
            out.stopped_early = true;
            return Ok(out);
        }
        seq += 1;
        out.end_seq = seq;
        at = block.next;
    }
    Ok(out)
}

/// Decodes the records of block `seq` into `out`; `Err` says why the chain ends here.
fn collect_records(zio: &Zio, payload: &[u8], seq: u64, committed_txg: u64, out: &mut Chained) -> Result<(), ChainEnd> {
    let mut pos = 0;
    while pos < payload.len() {
        let (r, used) = Record::decode(&payload[pos..]).map_err(|source| ChainEnd::BadRecord { seq, source })?;
        pos += used;
        if r.txg <= committed_txg {
            continue;
        }
        let r = match r.op {
            Op::WriteIndirect { obj, offset, len, block_offset, bp } => {
                let txg = r.txg;
                let block =
                    zio.read_from_devices(&bp).map_err(|source| ChainEnd::IndirectDataBad { seq, txg, obj, source })?;
                if !out.indirect.contains(&bp) {
                    out.indirect.push(bp);
                }
                // The record's range lies inside its block (checked by `Record::decode`).
                let from = (offset - block_offset) as usize;
                let data =
                    block.get(from..from + len as usize).ok_or(ChainEnd::IndirectDataShort { seq, txg, obj })?.to_vec();
                Record { op: Op::Write { obj, offset, data }, ..r }
            }
            _ => r,
        };
        out.records.push(r);
    }
    Ok(())
}

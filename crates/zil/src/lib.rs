//! zil — the intent log: what makes fsync cost one small log write instead of a txg.
//!
//! Owns: the in-memory queue of changes not yet committed by a txg (itxs), the chain of
//! log blocks on disk (each names the pre-allocated place of the next), group commit, and
//! reading the chain back for replay at import.
//!
//! Promises: when `commit` returns, every change logged before the call is durable (its
//! log block is written and the devices flushed); concurrent commits share log writes;
//! the head of the chain is recorded in every txg's root, and replay applies exactly the
//! records newer than the committed txg, in order, stopping at the first block that does
//! not verify (a torn or never-written block ends the chain, it never corrupts it).
//!
//! Must never: drop a queued change before the txg that contains it is committed, or
//! free a log block the committed root still points into.

mod record;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tarn_zio::{BlockPtr, Extent, Zio, ZioError};
use xxhash_rust::xxh3::xxh3_128;

pub use record::{Op, Record, RECORD_HEADER};

/// Version 2 added indirect-write records (type 9); version-1 blocks are still read.
pub const ZIL_VERSION: u32 = 2;
const OLDEST_READABLE: u32 = 1;
const MAGIC: u64 = u64::from_le_bytes(*b"TARNZIL1");
/// Bytes of a log block header; records follow.
pub const BLOCK_HEADER: usize = 96;
/// Largest log block; a commit with more to say chains several.
pub const MAX_BLOCK: u64 = 128 << 10;
const MIN_BLOCK: u64 = 4 << 10;
/// Largest data carried by one write record; bigger writes are split.
pub const MAX_WRITE_RECORD: usize = 64 << 10;

/// Where the chain starts: kept in the pool root (MOS) of every txg.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogHead {
    pub extent: Extent,
    pub seq: u64,
}

#[derive(Default)]
pub struct ZilStats {
    pub commits: AtomicU64,
    pub blocks_written: AtomicU64,
    pub bytes_written: AtomicU64,
    pub records_written: AtomicU64,
    /// Writes logged as a pointer to a block written in place (their data not copied).
    pub indirect_records: AtomicU64,
}

struct Queue {
    items: VecDeque<(u64, Queued)>,
    next_seq: u64,
}

/// A queued change: a record ready to encode, or a write whose data is fetched only when
/// a commit needs it (then either logged as a pointer to a block written in place, or
/// copied in if that is not possible).
enum Queued {
    Ready(Record),
    Indirect { txg: u64, dataset: u64, obj: u64, offset: u64, len: u64 },
}

impl Queued {
    fn txg(&self) -> u64 {
        match self {
            Queued::Ready(r) => r.txg,
            Queued::Indirect { txg, .. } => *txg,
        }
    }

    fn needed_by(&self, dataset: u64, obj: u64) -> bool {
        match self {
            Queued::Ready(r) => r.needed_by(dataset, obj),
            Queued::Indirect { dataset: d, obj: o, .. } => *d == dataset && *o == obj,
        }
    }
}

/// Where the data of a write logged by `log_indirect` is, as the layer above says at
/// commit time.
pub enum WriteData {
    /// Written in place (not yet flushed) as the record-sized block `bp` starting at file
    /// offset `block_offset`; the txg adopts that block instead of writing it again.
    InPlace { block_offset: u64, bp: BlockPtr },
    /// The bytes themselves, as of the write's txg (the block could not be written early,
    /// e.g. its txg is already syncing).
    Copied(Vec<u8>),
    /// The write's txg is committed: nothing to log.
    Committed,
}

/// The layer above, asked at commit time for the data of an indirect write (ZFS's
/// `zl_get_data`). It must return the bytes as of the write's txg, or newer.
pub trait WriteSource {
    fn write_data(&self, txg: u64, obj: u64, offset: u64, len: u64) -> Result<WriteData, ZioError>;
}

struct Chain {
    /// Pre-allocated extent the next log block goes to (allocated on first need, once
    /// the pool's free space is known), and its sequence number.
    next: Option<Extent>,
    next_seq: u64,
    /// Blocks written and not yet obsolete: (extent, seq, highest txg of its records).
    blocks: VecDeque<(Extent, u64, u64)>,
    /// Bytes the last commit needed: sizes the next pre-allocation.
    last_commit_bytes: u64,
}

pub struct Zil {
    zio: Arc<Zio>,
    pool_guid: u64,
    queue: Mutex<Queue>,
    /// Also the commit lock: one committer writes at a time, others wait and often find
    /// their records already written (group commit).
    chain: Mutex<Chain>,
    replaying: AtomicBool,
    pub stats: ZilStats,
}

#[derive(Debug, thiserror::Error)]
pub enum ZilError {
    #[error(transparent)]
    Zio(#[from] ZioError),
    #[error("{0}")]
    Unsupported(String),
}

impl Zil {
    /// A fresh, empty chain (pool create, or after replay at import). `first_seq` must be
    /// above every sequence number an older chain used.
    pub fn new(zio: Arc<Zio>, pool_guid: u64, first_seq: u64) -> Zil {
        Zil {
            zio,
            pool_guid,
            queue: Mutex::new(Queue { items: VecDeque::new(), next_seq: 1 }),
            chain: Mutex::new(Chain { next: None, next_seq: first_seq, blocks: VecDeque::new(), last_commit_bytes: 0 }),
            replaying: AtomicBool::new(false),
            stats: ZilStats::default(),
        }
    }

    fn next_extent(&self, chain: &mut Chain) -> Result<Extent, ZilError> {
        if chain.next.is_none() {
            chain.next = Some(self.zio.alloc_extent(MIN_BLOCK)?);
        }
        Ok(chain.next.expect("just allocated"))
    }

    /// While replaying, changes are not logged again.
    pub fn set_replaying(&self, on: bool) {
        self.replaying.store(on, Ordering::SeqCst);
    }

    /// Queues a change made in txg `txg` (called under the change's txg hold, so the
    /// queue is in txg order).
    pub fn log(&self, txg: u64, dataset: u64, op: Op) {
        if self.replaying.load(Ordering::Relaxed) {
            return;
        }
        self.enqueue(Queued::Ready(Record { txg, dataset, op }));
    }

    fn enqueue(&self, item: Queued) {
        let mut q = self.queue.lock();
        let seq = q.next_seq;
        q.next_seq += 1;
        q.items.push_back((seq, item));
    }

    /// Queues a write whose data stays out of the log: at commit, the layer above writes
    /// each touched record in place and the log carries a pointer (`logbias=throughput`,
    /// and large writes without a log device, as ZFS's WR_INDIRECT). One entry per
    /// record of `blksz` bytes, so each resolves to one block.
    pub fn log_indirect(&self, txg: u64, dataset: u64, obj: u64, offset: u64, len: u64, blksz: u64) {
        if self.replaying.load(Ordering::Relaxed) {
            return;
        }
        assert!(blksz > 0, "record size of object {obj} is zero");
        let end = offset + len;
        let mut at = offset;
        while at < end {
            let piece = (blksz - at % blksz).min(end - at);
            self.enqueue(Queued::Indirect { txg, dataset, obj, offset: at, len: piece });
            at += piece;
        }
    }

    /// Queues a write, split into records of at most `MAX_WRITE_RECORD` bytes.
    pub fn log_write(&self, txg: u64, dataset: u64, obj: u64, offset: u64, data: &[u8]) {
        if self.replaying.load(Ordering::Relaxed) {
            return;
        }
        for (i, chunk) in data.chunks(MAX_WRITE_RECORD).enumerate() {
            let at = offset + (i * MAX_WRITE_RECORD) as u64;
            self.log(txg, dataset, Op::Write { obj, offset: at, data: chunk.to_vec() });
        }
    }

    /// Makes durable what an fsync of object `obj` of `dataset` needs: that object's own
    /// queued changes and every namespace change queued so far (creates, renames… must
    /// replay in order), as ZFS's per-object zil_commit does. Other files' data stays
    /// queued — a database's WAL fsync does not drag its data files' pages through the
    /// log. Concurrent callers share the chain lock: whoever takes a record writes and
    /// flushes it before the lock is released, so finding nothing left means durable.
    ///
    /// Indirect writes are resolved through `source` (the dataset): their blocks are
    /// written in place before the log block, and one flush covers both, so a log block
    /// that survives a crash never points at a block that did not.
    pub fn commit_for(&self, dataset: u64, obj: u64, source: &dyn WriteSource) -> Result<(), ZilError> {
        let target = self.queue.lock().next_seq - 1;
        let mut chain = self.chain.lock();
        let taken: Vec<(u64, Queued)> = {
            let mut q = self.queue.lock();
            let (taken, kept): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut q.items)
                .into_iter()
                .partition(|(s, r)| *s <= target && r.needed_by(dataset, obj));
            q.items = kept;
            taken.into()
        };
        let records = self.resolve(taken, source)?;
        if !records.is_empty() {
            self.write_blocks(&mut chain, &records)?;
            self.zio.flush()?;
        }
        self.stats.commits.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Turns queued changes into records: indirect writes become a pointer to their block
    /// written in place, or a copy of their bytes; writes of committed txgs are dropped.
    fn resolve(&self, taken: Vec<(u64, Queued)>, source: &dyn WriteSource) -> Result<Vec<(u64, Record)>, ZilError> {
        let mut out = Vec::with_capacity(taken.len());
        for (seq, item) in taken {
            let record = match item {
                Queued::Ready(r) => r,
                Queued::Indirect { txg, dataset, obj, offset, len } => {
                    let op = match source.write_data(txg, obj, offset, len)? {
                        WriteData::InPlace { block_offset, bp } => {
                            self.stats.indirect_records.fetch_add(1, Ordering::Relaxed);
                            Op::WriteIndirect { obj, offset, len, block_offset, bp }
                        }
                        WriteData::Copied(data) => Op::Write { obj, offset, data },
                        WriteData::Committed => continue,
                    };
                    Record { txg, dataset, op }
                }
            };
            out.push((seq, record));
        }
        Ok(out)
    }

    /// Packs records into log blocks along the chain and writes them (not flushed).
    fn write_blocks(&self, chain: &mut Chain, records: &[(u64, Record)]) -> Result<(), ZilError> {
        let mut encoded: Vec<(u64, Vec<u8>)> = records
            .iter()
            .map(|(_, r)| {
                let mut b = Vec::new();
                r.encode(&mut b);
                (r.txg, b)
            })
            .collect();
        let total: u64 = encoded.iter().map(|(_, b)| b.len() as u64).sum();
        chain.last_commit_bytes = total;
        let mut i = 0;
        while i < encoded.len() {
            let here = self.next_extent(chain)?;
            let room = here.len as usize - BLOCK_HEADER;
            let mut payload = Vec::new();
            let mut max_txg = 0;
            while i < encoded.len() && payload.len() + encoded[i].1.len() <= room {
                max_txg = max_txg.max(encoded[i].0);
                payload.append(&mut encoded[i].1);
                i += 1;
            }
            let remaining: u64 = encoded[i..].iter().map(|(_, b)| b.len() as u64).sum();
            let next_len = if remaining > 0 {
                (remaining + BLOCK_HEADER as u64).clamp(MIN_BLOCK, MAX_BLOCK)
            } else {
                (chain.last_commit_bytes + BLOCK_HEADER as u64).clamp(MIN_BLOCK, MAX_BLOCK)
            };
            let next = self.zio.alloc_extent(next_len)?;
            let block = self.encode_block(chain.next_seq, &next, &payload);
            self.zio.write_extent(&here, &block)?;
            self.stats.blocks_written.fetch_add(1, Ordering::Relaxed);
            self.stats.bytes_written.fetch_add(block.len() as u64, Ordering::Relaxed);
            chain.blocks.push_back((here, chain.next_seq, max_txg));
            chain.next = Some(next);
            chain.next_seq += 1;
        }
        self.stats.records_written.fetch_add(records.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    fn encode_block(&self, seq: u64, next: &Extent, payload: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; BLOCK_HEADER];
        b[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        b[8..12].copy_from_slice(&ZIL_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        b[16..24].copy_from_slice(&self.pool_guid.to_le_bytes());
        b[24..32].copy_from_slice(&seq.to_le_bytes());
        b[32..34].copy_from_slice(&next.vdev.to_le_bytes());
        b[40..48].copy_from_slice(&next.offset.to_le_bytes());
        b[48..56].copy_from_slice(&next.len.to_le_bytes());
        b.extend_from_slice(payload);
        let sum = xxh3_128(&b);
        b[64..80].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// For the root of syncing txg `txg`: where replay must start (the first block with a
    /// record newer than `txg`), and the blocks that become obsolete once `txg` commits.
    pub fn head_for_txg(&self, txg: u64) -> Result<(LogHead, Vec<Extent>), ZilError> {
        let mut chain = self.chain.lock();
        let next = self.next_extent(&mut chain)?;
        let mut obsolete = Vec::new();
        while chain.blocks.front().is_some_and(|&(_, _, max_txg)| max_txg <= txg) {
            let (e, _, _) = chain.blocks.pop_front().expect("checked");
            obsolete.push(e);
        }
        let head = match chain.blocks.front() {
            Some(&(extent, seq, _)) => LogHead { extent, seq },
            None => LogHead { extent: next, seq: chain.next_seq },
        };
        Ok((head, obsolete))
    }

    /// Txg `txg` is committed: its queued changes no longer need the log.
    pub fn txg_committed(&self, txg: u64) {
        let mut q = self.queue.lock();
        while q.items.front().is_some_and(|(_, r)| r.txg() <= txg) {
            q.items.pop_front();
        }
    }

    /// The highest sequence number this chain has used or reserved.
    pub fn next_seq(&self) -> u64 {
        self.chain.lock().next_seq
    }
}

/// What replay found on disk.
pub struct Chained {
    /// Records newer than the committed txg, in order; indirect writes come back as plain
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
    pub end: String,
    /// Set when the chain ended inside a verified block: a record that could not be
    /// decoded, or an indirect write whose data block does not verify.
    pub stopped_early: bool,
}

impl Chained {
    pub fn empty() -> Chained {
        Chained { records: Vec::new(), blocks: Vec::new(), indirect: Vec::new(), end_seq: 1, end: String::new(), stopped_early: false }
    }
}

/// Follows the chain from `head`, collecting records newer than `committed_txg`.
///
/// The chain ends at the first block that does not verify, or at the first indirect
/// write whose block does not: that block was written just before its log block and
/// flushed with it, so if it is bad the fsync that logged it never returned, nor did any
/// after it. A verified block of a newer log version is refused (`Unsupported`): its
/// records could not be applied, and dropping them would lose acknowledged writes.
pub fn read_chain(zio: &Zio, pool_guid: u64, head: &LogHead, committed_txg: u64) -> Result<Chained, ZilError> {
    let mut out = Chained { end_seq: head.seq, ..Chained::empty() };
    let mut at = head.extent;
    let mut seq = head.seq;
    loop {
        let valid = |b: &[u8]| decode_block(b, pool_guid, seq).is_ok();
        let bytes = match zio.read_extent(&at, at.len, &valid) {
            Ok(b) => b,
            Err(e) => {
                out.end = format!("block {seq} at vdev {} offset {}: {e}", at.vdev, at.offset);
                break;
            }
        };
        let block = decode_block(&bytes, pool_guid, seq).expect("verified by the read");
        if !(OLDEST_READABLE..=ZIL_VERSION).contains(&block.version) {
            return Err(ZilError::Unsupported(format!(
                "intent log block {seq} has version {} (this tarn reads {OLDEST_READABLE} to {ZIL_VERSION}); import the pool with the tarn that wrote it",
                block.version
            )));
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

/// Decodes the records of one block into `out`; `Err` says why the chain ends here.
fn collect_records(zio: &Zio, payload: &[u8], seq: u64, committed_txg: u64, out: &mut Chained) -> Result<(), String> {
    let mut pos = 0;
    while pos < payload.len() {
        let (r, used) = Record::decode(&payload[pos..]).map_err(|e| format!("block {seq}: {e}"))?;
        pos += used;
        if r.txg <= committed_txg {
            continue;
        }
        let r = match r.op {
            Op::WriteIndirect { obj, offset, len, block_offset, bp } => {
                let block = zio.read_from_devices(&bp).map_err(|e| {
                    format!("block {seq}: the data of an indirect write (txg {}, object {obj}) does not verify: {e}", r.txg)
                })?;
                if !out.indirect.contains(&bp) {
                    out.indirect.push(bp);
                }
                let from = (offset - block_offset) as usize;
                let data = block[from..from + len as usize].to_vec();
                Record { op: Op::Write { obj, offset, data }, ..r }
            }
            _ => r,
        };
        out.records.push(r);
    }
    Ok(())
}

/// A log block that verified.
struct Block<'a> {
    version: u32,
    next: Extent,
    payload: &'a [u8],
}

/// Checks a log block's identity and checksum (any version).
fn decode_block(b: &[u8], pool_guid: u64, seq: u64) -> Result<Block<'_>, String> {
    let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8"));
    if b.len() < BLOCK_HEADER || u64_at(0) != MAGIC {
        return Err("not a log block".into());
    }
    let version = u32::from_le_bytes(b[8..12].try_into().expect("4"));
    let len = u32::from_le_bytes(b[12..16].try_into().expect("4")) as usize;
    if BLOCK_HEADER + len > b.len() {
        return Err("log block is truncated".into());
    }
    let mut copy = b[..BLOCK_HEADER + len].to_vec();
    let stored = u128::from_le_bytes(copy[64..80].try_into().expect("16"));
    copy[64..80].fill(0);
    if xxh3_128(&copy) != stored {
        return Err("log block checksum mismatch".into());
    }
    if u64_at(16) != pool_guid || u64_at(24) != seq {
        return Err("log block of another pool or an older chain".into());
    }
    let next = Extent { vdev: u16::from_le_bytes([b[32], b[33]]), offset: u64_at(40), len: u64_at(48) };
    Ok(Block { version, next, payload: &b[BLOCK_HEADER..BLOCK_HEADER + len] })
}

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
use tarn_zio::{Extent, Zio, ZioError};
use xxhash_rust::xxh3::xxh3_128;

pub use record::{Op, Record, RECORD_HEADER};

pub const ZIL_VERSION: u32 = 1;
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
}

struct Queue {
    items: VecDeque<(u64, Record)>,
    next_seq: u64,
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
    committed_seq: AtomicU64,
    replaying: AtomicBool,
    pub stats: ZilStats,
}

#[derive(Debug, thiserror::Error)]
pub enum ZilError {
    #[error(transparent)]
    Zio(#[from] ZioError),
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
            committed_seq: AtomicU64::new(0),
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
        let mut q = self.queue.lock();
        let seq = q.next_seq;
        q.next_seq += 1;
        q.items.push_back((seq, Record { txg, dataset, op }));
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

    /// Makes every change queued so far durable in the log.
    pub fn commit(&self) -> Result<(), ZilError> {
        let target = self.queue.lock().next_seq - 1;
        let mut chain = self.chain.lock();
        if self.committed_seq.load(Ordering::SeqCst) >= target {
            return Ok(()); // another committer wrote our records
        }
        let records: Vec<(u64, Record)> = {
            let mut q = self.queue.lock();
            let n = q.items.iter().take_while(|(s, _)| *s <= target).count();
            q.items.drain(..n).collect()
        };
        if !records.is_empty() {
            self.write_blocks(&mut chain, &records)?;
            self.zio.flush()?;
        }
        self.committed_seq.fetch_max(target, Ordering::SeqCst);
        self.stats.commits.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Makes durable what an fsync of object `obj` of `dataset` needs: that object's own
    /// queued changes and every namespace change queued so far (creates, renames… must
    /// replay in order), as ZFS's per-object zil_commit does. Other files' data stays
    /// queued — a database's WAL fsync does not drag its data files' pages through the
    /// log. Concurrent callers share the chain lock: whoever takes a record writes and
    /// flushes it before the lock is released, so finding nothing left means durable.
    pub fn commit_for(&self, dataset: u64, obj: u64) -> Result<(), ZilError> {
        let target = self.queue.lock().next_seq - 1;
        let mut chain = self.chain.lock();
        let records: Vec<(u64, Record)> = {
            let mut q = self.queue.lock();
            let (taken, kept): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut q.items)
                .into_iter()
                .partition(|(s, r)| *s <= target && r.needed_by(dataset, obj));
            q.items = kept;
            taken.into()
        };
        if !records.is_empty() {
            self.write_blocks(&mut chain, &records)?;
            self.zio.flush()?;
        }
        self.stats.commits.fetch_add(1, Ordering::Relaxed);
        Ok(())
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
        while q.items.front().is_some_and(|(_, r)| r.txg <= txg) {
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
    pub records: Vec<Record>,
    /// Every block of the chain that verified, to claim at import and free after replay.
    pub blocks: Vec<Extent>,
    /// The sequence number after the last valid block.
    pub end_seq: u64,
    /// Why the chain ended (normally: the next block was never written).
    pub end: String,
}

/// Follows the chain from `head`, collecting records newer than `committed_txg`.
pub fn read_chain(zio: &Zio, pool_guid: u64, head: &LogHead, committed_txg: u64) -> Chained {
    let mut out = Chained { records: Vec::new(), blocks: Vec::new(), end_seq: head.seq, end: String::new() };
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
        let (next, payload) = decode_block(&bytes, pool_guid, seq).expect("verified by the read");
        let mut pos = 0;
        while pos < payload.len() {
            match Record::decode(&payload[pos..]) {
                Ok((r, used)) => {
                    if r.txg > committed_txg {
                        out.records.push(r);
                    }
                    pos += used;
                }
                Err(e) => {
                    out.end = format!("block {seq}: {e}");
                    return out;
                }
            }
        }
        out.blocks.push(at);
        seq += 1;
        out.end_seq = seq;
        at = next;
    }
    out
}

/// Checks a log block; returns the next extent and the record bytes.
fn decode_block(b: &[u8], pool_guid: u64, seq: u64) -> Result<(Extent, &[u8]), String> {
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
    if version != ZIL_VERSION {
        return Err(format!("log block version {version} is not supported (this tarn reads {ZIL_VERSION})"));
    }
    if u64_at(16) != pool_guid || u64_at(24) != seq {
        return Err("log block of another pool or an older chain".into());
    }
    let next = Extent { vdev: u16::from_le_bytes([b[32], b[33]]), offset: u64_at(40), len: u64_at(48) };
    Ok((next, &b[BLOCK_HEADER..BLOCK_HEADER + len]))
}

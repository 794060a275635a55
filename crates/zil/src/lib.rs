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

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};
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
/// Without a log device, a commit with more file data than this to copy writes it in
/// place instead (see `Zil::is_bulk`).
pub const BULK_IN_PLACE: u64 = 256 << 10;

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

/// Changes not yet committed by a txg, in sequence order within each list. Kept per
/// object so that an fsync takes its file's changes without walking every other file's
/// (a database's redo-log fsync must not cost more as data-file pages pile up).
struct Queue {
    next_seq: u64,
    /// Namespace changes: every fsync needs all of them.
    namespace: VecDeque<(u64, Queued)>,
    /// Everything else, per (dataset, object).
    objects: HashMap<(u64, u64), VecDeque<(u64, Queued)>>,
}

impl Queue {
    fn push(&mut self, item: Queued) {
        let seq = self.next_seq;
        self.next_seq += 1;
        match item.object() {
            Some(key) => self.objects.entry(key).or_default().push_back((seq, item)),
            None => self.namespace.push_back((seq, item)),
        }
    }

    /// The namespace changes and `key`'s changes up to `target`, merged in sequence order.
    fn take_for(&mut self, key: (u64, u64), target: u64) -> Vec<(u64, Queued)> {
        let ns = take_upto(&mut self.namespace, target);
        let own = match self.objects.get_mut(&key) {
            Some(list) => {
                let own = take_upto(list, target);
                if list.is_empty() {
                    self.objects.remove(&key);
                }
                own
            }
            None => VecDeque::new(),
        };
        merge_by_seq(ns, own)
    }

    /// Drops every change of txgs up to `txg` (they are committed). A list is in txg order:
    /// all of a txg's changes are queued before the next txg opens.
    fn drop_committed(&mut self, txg: u64) {
        drop_upto_txg(&mut self.namespace, txg);
        self.objects.retain(|_, list| {
            drop_upto_txg(list, txg);
            !list.is_empty()
        });
    }
}

fn take_upto(list: &mut VecDeque<(u64, Queued)>, target: u64) -> VecDeque<(u64, Queued)> {
    let n = list.iter().take_while(|(s, _)| *s <= target).count();
    list.drain(..n).collect()
}

fn drop_upto_txg(list: &mut VecDeque<(u64, Queued)>, txg: u64) {
    while list.front().is_some_and(|(_, q)| q.txg() <= txg) {
        list.pop_front();
    }
}

fn merge_by_seq(mut a: VecDeque<(u64, Queued)>, mut b: VecDeque<(u64, Queued)>) -> Vec<(u64, Queued)> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    loop {
        let from_a = match (a.front(), b.front()) {
            (Some((sa, _)), Some((sb, _))) => sa < sb,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => return out,
        };
        out.push(if from_a { a.pop_front() } else { b.pop_front() }.expect("checked non-empty"));
    }
}

/// A queued change: a record ready to encode, or a write whose data is fetched only if a
/// commit needs it (ZFS's WR_NEED_COPY and WR_INDIRECT): copied then, or — `in_place` —
/// logged as a pointer to its record written in place. A write no fsync asks for before
/// its txg commits is never copied at all.
enum Queued {
    Ready(Record),
    Write { txg: u64, dataset: u64, obj: u64, offset: u64, len: u64, in_place: bool },
}

impl Queued {
    fn txg(&self) -> u64 {
        match self {
            Queued::Ready(r) => r.txg,
            Queued::Write { txg, .. } => *txg,
        }
    }

    /// (dataset, object) for a change of one object; `None` for a namespace change.
    fn object(&self) -> Option<(u64, u64)> {
        match self {
            Queued::Ready(r) => r.object().map(|o| (r.dataset, o)),
            Queued::Write { dataset, obj, .. } => Some((*dataset, *obj)),
        }
    }
}

/// Where the data of a write queued by `log_write` is, as the layer above says at commit
/// time.
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
    /// `in_place` asks for the record to be written in place if it can be.
    fn write_data(&self, txg: u64, obj: u64, offset: u64, len: u64, in_place: bool) -> Result<WriteData, ZioError>;
}

/// A commit in flight, from taking its records to appending its log blocks.
#[derive(Clone, Copy, Debug)]
struct Ticket {
    id: u64,
    key: (u64, u64),
    /// It took namespace changes.
    namespace: bool,
}

impl Ticket {
    /// Whether this (earlier) commit's blocks must come before `later`'s in the log:
    /// namespace changes replay in order and later changes may depend on them (a write
    /// to a file the log creates), and one object's changes replay in order.
    fn precedes(&self, later: &Ticket) -> bool {
        self.namespace || later.namespace || self.key == later.key
    }
}

#[derive(Default)]
struct TicketList {
    next_id: u64,
    /// Commits that took records and have not yet appended their log blocks.
    unwritten: Vec<Ticket>,
}

/// The commits in flight and the order their log blocks must take.
#[derive(Default)]
struct Tickets {
    list: Mutex<TicketList>,
    closed: Condvar,
}

impl Tickets {
    /// Called under the queue lock, so ticket order is the order records were taken.
    fn open(&self, key: (u64, u64), namespace: bool) -> Ticket {
        let mut l = self.list.lock();
        l.next_id += 1;
        let t = Ticket { id: l.next_id, key, namespace };
        l.unwritten.push(t);
        t
    }

    /// The commit appended its blocks (or failed).
    fn close(&self, t: &Ticket) {
        self.list.lock().unwritten.retain(|u| u.id != t.id);
        self.closed.notify_all();
    }

    /// Waits until every earlier commit that must precede `me` in the log has closed.
    fn wait_for_earlier(&self, me: &Ticket) {
        let mut l = self.list.lock();
        while l.unwritten.iter().any(|t| t.id < me.id && t.precedes(me)) {
            self.closed.wait(&mut l);
        }
    }
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
    /// Top-level vdevs written since their last flush (log blocks, blocks written in
    /// place). A commit flushes these and only these: with a log device, an fsync never
    /// waits for the data disks unless it wrote data there.
    unflushed: Vec<u16>,
    /// Set when a commit failed after taking records off the queue: the newest txg among
    /// them. Until that txg commits, every commit fails so that its caller commits a txg
    /// (the records it needs may have been among the lost ones).
    failed_txg: u64,
}

impl Chain {
    fn wrote_to(&mut self, vdev: u16) {
        if !self.unflushed.contains(&vdev) {
            self.unflushed.push(vdev);
        }
    }
}

pub struct Zil {
    zio: Arc<Zio>,
    pool_guid: u64,
    queue: Mutex<Queue>,
    /// One committer appends log blocks at a time; others wait and often find their
    /// records already written (group commit).
    chain: Mutex<Chain>,
    tickets: Tickets,
    replaying: AtomicBool,
    pub stats: ZilStats,
}

#[derive(Debug, thiserror::Error)]
pub enum ZilError {
    #[error(transparent)]
    Zio(#[from] ZioError),
    #[error("{0}")]
    Unsupported(String),
    #[error("an earlier intent-log commit failed; changes up to txg {0} need a txg commit")]
    Unsettled(u64),
}

impl Zil {
    /// A fresh, empty chain (pool create, or after replay at import). `first_seq` must be
    /// above every sequence number an older chain used.
    pub fn new(zio: Arc<Zio>, pool_guid: u64, first_seq: u64) -> Zil {
        Zil {
            zio,
            pool_guid,
            queue: Mutex::new(Queue { next_seq: 1, namespace: VecDeque::new(), objects: HashMap::new() }),
            chain: Mutex::new(Chain {
                next: None,
                next_seq: first_seq,
                blocks: VecDeque::new(),
                last_commit_bytes: 0,
                unflushed: Vec::new(),
                failed_txg: 0,
            }),
            tickets: Tickets::default(),
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
        self.queue.lock().push(item);
    }

    /// Queues a write of [offset, offset + len) to `obj`, whose record size is `blksz`;
    /// its data is fetched from the object at commit. With `in_place` (`logbias=
    /// throughput`, and large writes without a log device, as ZFS's WR_INDIRECT) the
    /// commit writes each touched record in place and logs a pointer: one entry per
    /// record, so each resolves to one block. Otherwise the bytes are copied into the log
    /// at commit, in entries of at most `MAX_WRITE_RECORD` bytes.
    pub fn log_write(&self, txg: u64, dataset: u64, obj: u64, offset: u64, len: u64, blksz: u64, in_place: bool) {
        if self.replaying.load(Ordering::Relaxed) {
            return;
        }
        assert!(blksz > 0, "record size of object {obj} is zero");
        let end = offset + len;
        let mut at = offset;
        while at < end {
            let mut piece = (blksz - at % blksz).min(end - at);
            if !in_place {
                piece = piece.min(MAX_WRITE_RECORD as u64);
            }
            self.enqueue(Queued::Write { txg, dataset, obj, offset: at, len: piece, in_place });
            at += piece;
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
    ///
    /// The slow part — fetching data and writing blocks in place — runs without the
    /// chain lock, so a redo-log fsync does not wait behind a data file's bulk commit.
    /// Tickets keep the log in the order replay needs (see `Ticket::precedes`), and a
    /// commit returns only after every earlier commit it depends on is durable too.
    pub fn commit_for(&self, dataset: u64, obj: u64, source: &dyn WriteSource) -> Result<(), ZilError> {
        let key = (dataset, obj);
        let (taken, ticket) = {
            let mut q = self.queue.lock();
            let target = q.next_seq - 1;
            let taken = q.take_for(key, target);
            let namespace = taken.iter().any(|(_, item)| item.object().is_none());
            (taken, self.tickets.open(key, namespace))
        };
        let result = self.commit_ticket(&ticket, taken, source);
        self.tickets.close(&ticket);
        result?;
        self.stats.commits.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn commit_ticket(
        &self,
        ticket: &Ticket,
        taken: Vec<(u64, Queued)>,
        source: &dyn WriteSource,
    ) -> Result<(), ZilError> {
        // From the first write in place to the flush, this is sync I/O on every device:
        // the txg's writes stay out of the devices' queues ahead of it.
        let _sync = self.zio.hold_sync();
        let newest_txg = taken.iter().map(|(_, q)| q.txg()).max().unwrap_or(0);
        let resolved = self.resolve(taken, source);
        self.tickets.wait_for_earlier(ticket);
        let mut chain = self.chain.lock();
        let written = resolved.and_then(|(records, in_place_vdevs)| {
            if chain.failed_txg != 0 {
                // An earlier commit failed after taking records off the queue (ones this
                // fsync needs, perhaps): only a txg commit makes them durable now.
                return Err(ZilError::Unsettled(chain.failed_txg));
            }
            for vdev in in_place_vdevs {
                chain.wrote_to(vdev);
            }
            if !records.is_empty() {
                self.write_blocks(&mut chain, &records)?;
            }
            // Also flushes what earlier commits appended and left unflushed.
            self.flush_written(&mut chain)
        });
        if written.is_err() {
            chain.failed_txg = chain.failed_txg.max(newest_txg).max(1);
        }
        written
    }

    /// Flushes the vdevs written since their last flush (a failed commit's writes too, so
    /// a chain block it left unflushed is durable before any block after it counts).
    fn flush_written(&self, chain: &mut Chain) -> Result<(), ZilError> {
        if !chain.unflushed.is_empty() {
            self.zio.flush_tops(&chain.unflushed)?;
            chain.unflushed.clear();
        }
        Ok(())
    }

    /// Turns queued changes into records: writes become a copy of their bytes or a
    /// pointer to their record written in place; writes of committed txgs are dropped.
    /// Also returns the vdevs written in place (to flush with the log blocks).
    fn resolve(
        &self,
        taken: Vec<(u64, Queued)>,
        source: &dyn WriteSource,
    ) -> Result<(Vec<(u64, Record)>, Vec<u16>), ZilError> {
        let bulk = self.is_bulk(&taken);
        let mut vdevs: Vec<u16> = Vec::new();
        let mut out = Vec::with_capacity(taken.len());
        for (seq, item) in taken {
            let record = match item {
                Queued::Ready(r) => r,
                Queued::Write { txg, dataset, obj, offset, len, in_place } => {
                    let in_place = in_place || bulk;
                    let op = match source.write_data(txg, obj, offset, len, in_place)? {
                        WriteData::InPlace { block_offset, bp } => {
                            if !vdevs.contains(&bp.vdev) {
                                vdevs.push(bp.vdev);
                            }
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
        Ok((out, vdevs))
    }

    /// True when this commit would copy more than `BULK_IN_PLACE` bytes of file data into
    /// a log that shares the data disks: those bytes then go in place instead, written
    /// once rather than twice (into the log, then again by the txg). A database's
    /// data-file fsync after a page flush is the case; a redo-log fsync never is.
    fn is_bulk(&self, taken: &[(u64, Queued)]) -> bool {
        let copied: u64 = taken
            .iter()
            .map(|(_, q)| match q {
                Queued::Write { len, in_place: false, .. } => *len,
                _ => 0,
            })
            .sum();
        copied > BULK_IN_PLACE && !self.zio.has_log_device()
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
            let mut block = self.encode_block(chain.next_seq, &next, &payload);
            // Padded here, where the buffer has room, so the write needs no copy.
            block.resize(block.len().next_multiple_of(self.zio.sector_size(here.vdev) as usize), 0);
            self.zio.write_extent(&here, &block)?;
            self.stats.blocks_written.fetch_add(1, Ordering::Relaxed);
            self.stats.bytes_written.fetch_add(block.len() as u64, Ordering::Relaxed);
            chain.wrote_to(here.vdev);
            chain.blocks.push_back((here, chain.next_seq, max_txg));
            chain.next = Some(next);
            chain.next_seq += 1;
        }
        self.stats.records_written.fetch_add(records.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    fn encode_block(&self, seq: u64, next: &Extent, payload: &[u8]) -> Vec<u8> {
        let mut b = Vec::with_capacity(BLOCK_HEADER + payload.len() + 4096);
        b.resize(BLOCK_HEADER, 0);
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
        {
            let mut chain = self.chain.lock();
            if chain.failed_txg != 0 && chain.failed_txg <= txg {
                chain.failed_txg = 0;
            }
        }
        self.queue.lock().drop_committed(txg);
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
        Chained {
            records: Vec::new(),
            blocks: Vec::new(),
            indirect: Vec::new(),
            end_seq: 1,
            end: String::new(),
            stopped_early: false,
        }
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
                    format!(
                        "block {seq}: the data of an indirect write (txg {}, object {obj}) does not verify: {e}",
                        r.txg
                    )
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

#[cfg(test)]
mod tests {
    use super::*;

    fn write(txg: u64, obj: u64) -> Queued {
        Queued::Ready(Record { txg, dataset: 1, op: Op::Write { obj, offset: 0, data: vec![1] } })
    }

    fn create(txg: u64, obj: u64) -> Queued {
        let op = Op::Create {
            parent: 1,
            obj,
            kind: 1,
            mode: 0o644,
            uid: 0,
            gid: 0,
            rdev: 0,
            name: b"f".to_vec(),
            target: vec![],
        };
        Queued::Ready(Record { txg, dataset: 1, op })
    }

    fn seqs(items: &[(u64, Queued)]) -> Vec<u64> {
        items.iter().map(|(s, _)| *s).collect()
    }

    #[test]
    fn an_fsync_takes_its_object_and_the_namespace_in_order_and_nothing_else() {
        let mut q = Queue { next_seq: 1, namespace: VecDeque::new(), objects: HashMap::new() };
        q.push(create(5, 7)); // 1
        q.push(write(5, 7)); // 2
        q.push(write(5, 8)); // 3: another file
        q.push(create(6, 9)); // 4
        q.push(Queued::Write { txg: 6, dataset: 1, obj: 7, offset: 0, len: 10, in_place: true }); // 5
        q.push(write(6, 7)); // 6: after the fsync started
        assert_eq!(seqs(&q.take_for((1, 7), 5)), vec![1, 2, 4, 5]);
        assert_eq!(seqs(&q.take_for((1, 7), 6)), vec![6]);
        assert_eq!(seqs(&q.take_for((2, 8), 6)), Vec::<u64>::new(), "object 8 of dataset 2 is another file");
        q.drop_committed(5);
        assert!(q.objects.is_empty(), "txg 5 committed object 8's write");
        q.push(write(7, 8));
        assert_eq!(seqs(&q.take_for((1, 8), 7)), vec![7]);
    }

    /// A commit waits, before appending, for earlier commits it depends on: namespace
    /// changes, or the same object. A data file's slow bulk commit holds up nobody else.
    #[test]
    fn commits_append_in_the_order_replay_needs_and_no_more() {
        let tickets = std::sync::Arc::new(Tickets::default());
        let bulk = tickets.open((1, 10), false); // a data file, resolving slowly
        let redo = tickets.open((1, 20), false); // another file: need not wait
        tickets.wait_for_earlier(&redo); // returns at once
        tickets.close(&redo);
        let same = tickets.open((1, 10), false); // the same data file: waits for `bulk`
        let rename = tickets.open((1, 30), true); // a namespace change: waits for everyone
        let done = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let waiters: Vec<_> = [same, rename]
            .into_iter()
            .map(|t| {
                let (tickets, done) = (tickets.clone(), done.clone());
                std::thread::spawn(move || {
                    tickets.wait_for_earlier(&t);
                    done.fetch_add(1, Ordering::SeqCst);
                    tickets.close(&t);
                })
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(done.load(Ordering::SeqCst), 0, "both wait for the bulk commit");
        tickets.close(&bulk);
        for w in waiters {
            w.join().unwrap();
        }
        assert_eq!(done.load(Ordering::SeqCst), 2);
    }
}

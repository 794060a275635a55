//! Writing the chain: log blocks on disk, each naming the pre-allocated place of the
//! next, and which of them the committed root must still point into.
//!
//! Owns: the chain's in-memory state (the next block's extent and sequence number, the
//! blocks not yet obsolete, the vdevs written since their last flush, a failed commit's
//! mark) and packing records into blocks.
//!
//! Promises: sequence numbers strictly increase along the chain (asserted); a record
//! appended is newer than the last txg the log was told is committed (asserted — older
//! ones are dropped before, their txg holds them); `head_for_txg` names the first block
//! replay needs after that txg commits, and the blocks that then become obsolete.
//!
//! Must never: flush (the commit does, once, for all it wrote), or free a block the
//! committed root still points into (obsolete blocks go to the caller, which frees them
//! in the txg that stops pointing at them).
use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use tarn_zio::Extent;

use crate::block::{self, BLOCK_HEADER};
use crate::progress::{LogRoot, ReplayRoot};
use crate::record::Record;
use crate::{LogHead, Zil, ZilError, MAX_BLOCK};

/// Smallest log block.
const MIN_BLOCK: u64 = 4 << 10;

/// A log block written and not yet obsolete.
struct Written {
    extent: Extent,
    seq: u64,
    /// The highest txg of its records: the block is obsolete once that txg commits.
    max_txg: u64,
}

pub(crate) struct Chain {
    /// Pre-allocated extent the next log block goes to (allocated on first need, once
    /// the pool's free space is known), and its sequence number.
    next: Option<Extent>,
    next_seq: u64,
    blocks: VecDeque<Written>,
    /// Bytes the last commit needed: sizes the next pre-allocation.
    last_commit_bytes: u64,
    /// Top-level vdevs written since their last flush (log blocks, blocks written in
    /// place). A commit flushes these and only these: with a log device, an fsync never
    /// waits for the data disks unless it wrote data there.
    pub(crate) unflushed: Vec<u16>,
    /// Set when a commit failed after taking records off the queue: the newest txg among
    /// them. Until that txg commits, every commit fails so that its caller commits a txg
    /// (the records it needs may have been among the lost ones).
    pub(crate) failed_txg: u64,
    /// The last txg the pool said is committed.
    committed_txg: u64,
}

impl Chain {
    pub(crate) fn new(first_seq: u64) -> Chain {
        Chain {
            next: None,
            next_seq: first_seq,
            blocks: VecDeque::new(),
            last_commit_bytes: 0,
            unflushed: Vec::new(),
            failed_txg: 0,
            committed_txg: 0,
        }
    }

    pub(crate) fn wrote_to(&mut self, vdev: u16) {
        if !self.unflushed.contains(&vdev) {
            self.unflushed.push(vdev);
        }
    }

    pub(crate) fn next_seq(&self) -> u64 {
        self.next_seq
    }

    pub(crate) fn committed_txg(&self) -> u64 {
        self.committed_txg
    }

    /// Txg `txg` is committed: a failed commit's mark is settled once its txg is.
    pub(crate) fn txg_committed(&mut self, txg: u64) {
        self.committed_txg = self.committed_txg.max(txg);
        if self.failed_txg != 0 && self.failed_txg <= txg {
            self.failed_txg = 0;
        }
    }
}

impl Zil {
    fn next_extent(&self, chain: &mut Chain) -> Result<Extent, ZilError> {
        if chain.next.is_none() {
            chain.next = Some(self.zio.alloc_extent(MIN_BLOCK)?);
        }
        Ok(chain.next.expect("just allocated"))
    }

    /// Packs records into log blocks along the chain and writes them (not flushed).
    pub(crate) fn write_blocks(&self, chain: &mut Chain, records: &[(u64, Record)]) -> Result<(), ZilError> {
        let mut encoded: Vec<(u64, Vec<u8>)> = records
            .iter()
            .map(|(_, r)| {
                assert!(
                    r.txg > chain.committed_txg,
                    "invariant broken: a log record is newer than the committed txg when appended (record of txg {}, \
                     txg {} committed)",
                    r.txg,
                    chain.committed_txg
                );
                let mut b = Vec::new();
                r.encode(&mut b);
                // Else no block could take it: the loop below would write empty blocks
                // until the pool is full (a record is never split across blocks).
                assert!(
                    b.len() <= MAX_BLOCK as usize - BLOCK_HEADER,
                    "invariant broken: a log record fits in one log block ({} bytes, at most {})",
                    b.len(),
                    MAX_BLOCK as usize - BLOCK_HEADER
                );
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
            let wanted = if remaining > 0 { remaining } else { chain.last_commit_bytes };
            let next = self.zio.alloc_extent((wanted + BLOCK_HEADER as u64).clamp(MIN_BLOCK, MAX_BLOCK))?;
            self.append(chain, here, next, &payload, max_txg)?;
        }
        self.stats.records_written.fetch_add(records.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Writes one block at `here`, naming `next` as the next block's place.
    fn append(
        &self,
        chain: &mut Chain,
        here: Extent,
        next: Extent,
        payload: &[u8],
        max_txg: u64,
    ) -> Result<(), ZilError> {
        let seq = chain.next_seq;
        if let Some(last) = chain.blocks.back() {
            assert!(
                last.seq < seq,
                "invariant broken: log block sequence numbers strictly increase along the chain ({} after {})",
                seq,
                last.seq
            );
        }
        let mut bytes = block::encode(self.pool_guid, seq, &next, payload);
        // Padded here, where the buffer has room, so the write needs no copy.
        bytes.resize(bytes.len().next_multiple_of(self.zio.sector_size(here.vdev) as usize), 0);
        self.zio.write_extent(&here, &bytes)?;
        self.stats.blocks_written.fetch_add(1, Ordering::Relaxed);
        self.stats.bytes_written.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        chain.wrote_to(here.vdev);
        chain.blocks.push_back(Written { extent: here, seq, max_txg });
        chain.next = Some(next);
        chain.next_seq += 1;
        Ok(())
    }

    /// Moves the chain off vdev `vdev` (a log device being removed, on which nothing is
    /// allocated any more). If the next block's pre-allocated place is there, an empty
    /// block is written there, naming a place elsewhere: the chain then leaves the device,
    /// and once every block on it is obsolete (`uses_vdev`), neither the chain nor a root
    /// committed after that points into it. The empty block is flushed by the next commit
    /// or txg, before anything written after it can be acknowledged.
    pub fn move_off(&self, vdev: u16) -> Result<(), ZilError> {
        let mut chain = self.chain.lock();
        let Some(here) = chain.next.filter(|e| e.vdev == vdev) else {
            return Ok(());
        };
        let elsewhere = self.zio.alloc_extent(MIN_BLOCK)?;
        assert_ne!(elsewhere.vdev, vdev, "an extent was allocated on a vdev being removed");
        // No record: obsolete at the next txg (its max txg, 0, is always committed).
        self.append(&mut chain, here, elsewhere, &[], 0)
    }

    /// Whether the chain still needs vdev `vdev`: a block not yet obsolete is there, or
    /// the next block's place.
    pub fn uses_vdev(&self, vdev: u16) -> bool {
        let chain = self.chain.lock();
        chain.next.is_some_and(|e| e.vdev == vdev) || chain.blocks.iter().any(|b| b.extent.vdev == vdev)
    }

    /// For the root of syncing txg `txg`: where replay must start (the first block with a
    /// record newer than `txg`), and the blocks that become obsolete once `txg` commits.
    /// While import replays, that is the replayed chain with how far `txg` got; the txg
    /// that ends replay names this chain and retires the replayed one (`progress`).
    pub fn head_for_txg(&self, txg: u64) -> Result<LogRoot, ZilError> {
        let retired = match self.replay_root(txg) {
            ReplayRoot::Replaying(head, progress) => {
                assert!(
                    self.chain.lock().blocks.is_empty(),
                    "invariant broken: nothing is logged until replay is committed (a root of txg {txg} names the \
                     replayed chain)"
                );
                let root =
                    LogRoot { head, replay: Some(progress), obsolete: Vec::new(), obsolete_indirect: Vec::new() };
                return Ok(root);
            }
            ReplayRoot::Retire(source) => Some(source),
            ReplayRoot::NoReplay => None,
        };
        let mut chain = self.chain.lock();
        let next = self.next_extent(&mut chain)?;
        let mut obsolete = Vec::new();
        while chain.blocks.front().is_some_and(|b| b.max_txg <= txg) {
            let b = chain.blocks.pop_front().expect("checked");
            obsolete.push(b.extent);
        }
        let head = match chain.blocks.front() {
            Some(b) => LogHead { extent: b.extent, seq: b.seq },
            None => LogHead { extent: next, seq: chain.next_seq },
        };
        let mut obsolete_indirect = Vec::new();
        if let Some(source) = retired {
            obsolete.extend(source.blocks);
            obsolete_indirect = source.indirect;
        }
        Ok(LogRoot { head, replay: None, obsolete, obsolete_indirect })
    }
}

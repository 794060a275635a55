//! Dead lists (ZFS's dsl_deadlist): the blocks a dataset's head freed while a snapshot
//! still held them, stored so that destroying a snapshot needs no walk of any tree.
//!
//! Theory of operation. The head of a dataset and each of its snapshots carry a dead
//! list. The head's holds every block it freed that was born at or before its floor
//! (newest snapshot or origin): blocks the newest snapshot holds and the head no longer
//! does. Taking a snapshot hands the head's list to it and starts the head on an empty
//! one, so snapshot S's list is exactly "the blocks of the snapshot before S that S no
//! longer holds". Destroying S (previous tree P at txg p, next tree N) reads N's list:
//! an entry born after p was S's alone and is freed; the others are P's too and stay, and
//! N's list becomes S's list plus those (the blocks of P that N does not hold). Chunks
//! whose entries are all born at or before p are handed on unread.
//!
//! A list is a sequence of chunks, each a block of at most `CHUNK_ENTRIES` block
//! pointers written in the txg that filled it (FORMAT.md §12.2); the MOS records each
//! chunk's pointer, count and birth range. Memory: at most one partly filled chunk per
//! head between commits, and one chunk at a time while a destroy reads; never a whole
//! list. A list can be *not known* (`None`): a pool written before dead lists existed,
//! or a chunk that did not read; a destroy whose next tree's list is not known
//! walks as before (`walks::for_each_unique`), and its result is not known either —
//! each new snapshot starts its head on a known list again.
//!
//! Owns: the chunks' encoding, the head's appends, the destroy's split of a list.
//!
//! Promises: every entry is a block some snapshot holds; a chunk's blocks are freed
//! (deferred) only when the list stops naming it; a chunk that cannot be read is never
//! guessed at — its entries stay allocated until the next import rebuilds free space,
//! and the list it belonged to becomes not known.
//!
//! Must never: run outside the sync thread (it writes and frees blocks of the syncing
//! txg), or hold a list's entries in memory beyond one chunk.
use tarn_zio::{Access, BlockPtr, CachePolicy, HotCopy, PendingBlock, ReadKind, Zio, ZioError, BLKPTR_SIZE};

/// Entries in one chunk: 8 bytes of header and 2040 pointers fill 128 KiB.
pub(crate) const CHUNK_ENTRIES: usize = 2040;
/// The version of a chunk's encoding (its first four bytes).
pub(crate) const CHUNK_VERSION: u32 = 1;
const HEADER: usize = 8;

/// One stored chunk of a dead list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Chunk {
    pub(crate) bp: BlockPtr,
    pub(crate) entries: u32,
    /// Oldest and newest birth txg of its entries: a destroy hands on unread a chunk
    /// whose newest is at or before the previous snapshot.
    pub(crate) min_birth: u64,
    pub(crate) max_birth: u64,
    /// Physical bytes of its entries: space counts read no chunk wholly born after (or
    /// at or before) the txg they count from.
    pub(crate) bytes: u64,
}

/// A dead list: stored chunks and, for a head, the entries of its last, partly filled
/// chunk kept in memory, so each commit rewrites that one chunk (the newest entries with
/// those of the txg) instead of adding a small chunk per txg.
#[derive(Clone, Debug, Default)]
pub(crate) struct DeadList {
    pub(crate) chunks: Vec<Chunk>,
    /// Entries of the partly filled chunk, newest last.
    pending: Vec<BlockPtr>,
    /// The last of `chunks` holds exactly `pending` (written by an earlier flush).
    tail_written: bool,
    /// `pending` has entries no chunk holds yet.
    dirty: bool,
}

impl DeadList {
    /// A list of stored chunks (as the MOS records them).
    pub(crate) fn stored(chunks: Vec<Chunk>) -> DeadList {
        DeadList { chunks, ..DeadList::default() }
    }

    /// Appends `bp`, writing a chunk in txg `txg` when one is full.
    pub(crate) fn push(&mut self, zio: &Zio, bp: BlockPtr, txg: u64) -> Result<(), ZioError> {
        self.pending.push(bp);
        self.dirty = true;
        if self.pending.len() >= CHUNK_ENTRIES {
            self.flush(zio, txg)?;
        }
        Ok(())
    }

    /// Writes the entries no chunk holds yet, in txg `txg` (before the MOS names the
    /// list): the partly filled chunk is rewritten with them, its old block freed.
    pub(crate) fn flush(&mut self, zio: &Zio, txg: u64) -> Result<(), ZioError> {
        if !self.dirty {
            return Ok(());
        }
        let chunk = write_chunk(zio, &self.pending, txg)?;
        if self.tail_written {
            let old = self.chunks.pop().expect("a written tail is the last chunk");
            zio.free(&old.bp);
        }
        self.chunks.push(chunk);
        self.dirty = false;
        self.tail_written = self.pending.len() < CHUNK_ENTRIES;
        if !self.tail_written {
            self.pending.clear();
        }
        Ok(())
    }

    /// Every entry is in a chunk, and nothing is kept in memory: the list as it is handed
    /// to a snapshot.
    pub(crate) fn seal(&mut self, zio: &Zio, txg: u64) -> Result<(), ZioError> {
        self.flush(zio, txg)?;
        self.pending.clear();
        self.tail_written = false;
        Ok(())
    }

    /// Whether every entry is in a chunk the MOS can name.
    pub(crate) fn is_flushed(&self) -> bool {
        !self.dirty
    }

    /// The chunks to read and the entries held in memory instead (the written copy of
    /// the partly filled chunk is freed: its entries are in memory).
    fn detach(mut self, zio: &Zio) -> (Vec<Chunk>, Vec<BlockPtr>) {
        if self.tail_written {
            let tail = self.chunks.pop().expect("a written tail is the last chunk");
            zio.free(&tail.bp);
        }
        (self.chunks, self.pending)
    }

    /// Frees the chunks' own blocks (deferred); the entries are not touched.
    pub(crate) fn free_chunks(&self, zio: &Zio) {
        for c in &self.chunks {
            zio.free(&c.bp);
        }
    }

    /// Physical bytes of the entries born after `txg`: chunks wholly on one side are
    /// counted from their record, the others read (one at a time).
    pub(crate) fn bytes_born_after(&self, zio: &Zio, txg: u64) -> Result<u64, ChunkError> {
        let stored = self.chunks.len() - usize::from(self.tail_written);
        let after = |bp: &BlockPtr| if bp.birth > txg { u64::from(bp.psize) } else { 0 };
        let mut sum: u64 = self.pending.iter().map(after).sum();
        for c in &self.chunks[..stored] {
            sum += if c.max_birth <= txg {
                0
            } else if c.min_birth > txg {
                c.bytes
            } else {
                read_chunk(zio, c)?.iter().map(after).sum()
            };
        }
        Ok(sum)
    }

    /// Every entry (checks and tests: the whole list in memory).
    pub(crate) fn read_all(&self, zio: &Zio) -> Result<Vec<BlockPtr>, ChunkError> {
        let stored = self.chunks.len() - usize::from(self.tail_written);
        let mut all = Vec::new();
        for c in &self.chunks[..stored] {
            all.extend(read_chunk(zio, c)?);
        }
        all.extend_from_slice(&self.pending);
        Ok(all)
    }
}

/// Why a chunk's bytes are not a chunk.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ChunkError {
    #[error("dead-list chunk does not read: {0}")]
    Read(#[from] ZioError),
    #[error("dead-list chunk version {0} is not supported")]
    Version(u32),
    #[error("dead-list chunk is malformed: {0}")]
    Malformed(String),
}

fn write_chunk(zio: &Zio, entries: &[BlockPtr], txg: u64) -> Result<Chunk, ZioError> {
    assert!(!entries.is_empty() && entries.len() <= CHUNK_ENTRIES, "a chunk holds 1 to {CHUNK_ENTRIES} entries");
    let mut data = Vec::with_capacity(HEADER + entries.len() * BLKPTR_SIZE);
    data.extend_from_slice(&CHUNK_VERSION.to_le_bytes());
    data.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for bp in entries {
        data.extend_from_slice(&bp.to_bytes());
    }
    let block = PendingBlock::pool_metadata(&data);
    let bp = zio.write_blocks(std::slice::from_ref(&block), txg)?[0];
    let births = entries.iter().map(|e| e.birth);
    Ok(Chunk {
        bp,
        entries: entries.len() as u32,
        min_birth: births.clone().min().unwrap_or(0),
        max_birth: births.max().unwrap_or(0),
        bytes: entries.iter().map(|e| u64::from(e.psize)).sum(),
    })
}

/// The entries of `chunk`, checked against its record.
pub(crate) fn read_chunk(zio: &Zio, chunk: &Chunk) -> Result<Vec<BlockPtr>, ChunkError> {
    let mut data = vec![0u8; chunk.bp.lsize as usize];
    zio.read_cached(&chunk.bp, &mut data, CachePolicy::None, HotCopy::Keep, Access::of(ReadKind::Pool))?;
    decode_chunk(&data, chunk.entries)
}

fn decode_chunk(data: &[u8], want: u32) -> Result<Vec<BlockPtr>, ChunkError> {
    let word = |at: usize| data.get(at..at + 4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")));
    let version = word(0).ok_or_else(|| ChunkError::Malformed("no header".into()))?;
    if version != CHUNK_VERSION {
        return Err(ChunkError::Version(version));
    }
    let count = word(4).ok_or_else(|| ChunkError::Malformed("no count".into()))?;
    if count != want || data.len() != HEADER + count as usize * BLKPTR_SIZE {
        return Err(ChunkError::Malformed(format!("{count} entries in {} bytes, {want} expected", data.len())));
    }
    data[HEADER..]
        .chunks_exact(BLKPTR_SIZE)
        .map(|raw| match BlockPtr::decode(raw) {
            Ok(Some(bp)) => Ok(bp),
            Ok(None) => Err(ChunkError::Malformed("a hole among the entries".into())),
            Err(e) => Err(ChunkError::Malformed(e.to_string())),
        })
        .collect()
}

/// Destroys a snapshot through its next tree's list `next` (known): frees the entries
/// born after `prev` (the snapshot's alone), keeps the rest, and returns the next tree's
/// new list — the snapshot's own list `snap` plus what was kept — or not known when
/// `snap` is not known or a chunk did not read. Chunks named by neither result are
/// freed; everything is done in txg `txg`.
pub(crate) fn destroy_through(
    zio: &Zio,
    next: DeadList,
    prev: u64,
    snap: Option<DeadList>,
    txg: u64,
) -> Result<Option<DeadList>, ZioError> {
    let mut kept = DeadList::default();
    let mut handed_on = Vec::new();
    let mut known = snap.is_some();
    let sort = |bp: BlockPtr, kept: &mut DeadList| -> Result<(), ZioError> {
        if bp.birth > prev {
            zio.free(&bp);
            Ok(())
        } else {
            kept.push(zio, bp, txg)
        }
    };
    let (chunks, pending) = next.detach(zio);
    for chunk in chunks {
        if chunk.max_birth <= prev {
            handed_on.push(chunk);
            continue;
        }
        match read_chunk(zio, &chunk) {
            Ok(entries) => {
                for bp in entries {
                    sort(bp, &mut kept)?;
                }
            }
            Err(_) => {
                // Its blocks stay allocated until the next import (the device's error
                // counters and the error log say what failed); the list no longer names
                // every block, so it is not known from now on.
                known = false;
            }
        }
        zio.free(&chunk.bp);
    }
    for bp in pending {
        sort(bp, &mut kept)?;
    }
    let mut merged = match snap {
        Some(s) if known => s,
        unknown => {
            // Not known from now on: nothing names these chunks any more.
            kept.seal(zio, txg)?;
            kept.free_chunks(zio);
            handed_on.iter().for_each(|c| zio.free(&c.bp));
            unknown.iter().for_each(|s| s.free_chunks(zio));
            return Ok(None);
        }
    };
    kept.seal(zio, txg)?;
    merged.seal(zio, txg)?;
    merged.chunks.extend(handed_on);
    merged.chunks.extend(kept.chunks);
    Ok(Some(merged))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_of_a_newer_version_or_the_wrong_count_is_refused() {
        let mut data = vec![0u8; HEADER];
        data[..4].copy_from_slice(&2u32.to_le_bytes());
        assert!(matches!(decode_chunk(&data, 0), Err(ChunkError::Version(2))));
        data[..4].copy_from_slice(&CHUNK_VERSION.to_le_bytes());
        data[4..8].copy_from_slice(&1u32.to_le_bytes());
        assert!(matches!(decode_chunk(&data, 1), Err(ChunkError::Malformed(_))), "1 entry in 8 bytes");
        assert!(matches!(decode_chunk(&data[..3], 1), Err(ChunkError::Malformed(_))));
        data.extend_from_slice(&[0u8; BLKPTR_SIZE]);
        assert!(matches!(decode_chunk(&data, 1), Err(ChunkError::Malformed(_))), "a hole");
        assert!(matches!(decode_chunk(&data, 2), Err(ChunkError::Malformed(_))), "count differs from the record");
    }
}

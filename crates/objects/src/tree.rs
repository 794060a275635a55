//! The block tree of one object: a radix tree of indirect blocks over the object's
//! records, as ZFS builds it. Level 0 holds records; an indirect block holds 512 block
//! pointers (32 KiB logical); the dnode points at the top.
//!
//! Indirect blocks are loaded on demand. A clean one (as on disk) is decoded once and
//! kept in the ARC's decoded cache (`ArcCache::keep_decoded`, ZFS's dbuf cache), which
//! holds the only lasting reference and drops it when decoded metadata goes over its
//! share of the budget; the tree keeps a weak reference and reads the block again
//! (through the ARC, where its compressed bytes are kept as metadata) once it is gone. A
//! changed block is dirty: the pointers it had on disk (its base, read again when needed)
//! and the slots changed since, so a dirty block costs its changes, not 32 KiB. `sync`
//! rewrites the dirty ones bottom-up (copy-on-write), returning the pointers it replaced
//! so the caller can free them. Walking a committed tree without loading it (import,
//! scrub, a destroyed dataset's free) is `traverse`'s.
//!
//! Owns: the radix-tree shape (levels, fan-out, which slot covers which record), the
//! indirect block encoding, and the dirty indirect blocks of one object.
//!
//! Promises: `get` after `set` returns the new pointer; `sync` writes every dirty
//! indirect block (children before parents) and reports each pointer it replaced; an
//! indirect block whose bytes are not a whole block of pointers is a typed error; a
//! lookup in a cached block takes no lock and allocates nothing.
//!
//! Must never: free a block itself (the replaced pointers go back to the caller), write
//! a parent before its children, or let the decoded cache drop a change (dirty blocks are
//! the tree's own).
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Weak};

use tarn_arc::Decoded;
use tarn_zio::{
    Access, BlockPtr, BlockType, CachePolicy, ChecksumKind, Compression, PendingBlock, ReadKind, Zio, ZioError,
    BLKPTR_SIZE,
};

pub const IND_SHIFT: u8 = 15;
const PTR_SHIFT: u32 = IND_SHIFT as u32 - 6;
/// Pointers per indirect block.
pub(crate) const FANOUT: u64 = 1 << PTR_SHIFT;
/// Bytes a decoded indirect block takes (its pointers and the allocation around them).
const DECODED_BYTES: u64 = FANOUT * std::mem::size_of::<Option<BlockPtr>>() as u64 + 128;
/// Dirty indirect blocks are encoded and written this many at a time, so a txg that
/// dirtied thousands does not hold all their encodings at once.
const WRITE_BATCH: usize = 128;

/// The codec of indirect blocks: zstd at level 1. Block pointers hold birth txgs, sizes and
/// codes that repeat from slot to slot beside offsets and checksums that do not; zstd's
/// entropy stage takes what lz4 leaves. A txg under a database's scattered page writes
/// rewrites most of a table's level-1 blocks, each for a few changed slots: replayed on
/// 200 MiB of InnoDB pages with 700 random page writes per txg
/// (`cargo run --release -p tarn-pool --example indirect_bytes`), lz4 stored 427 KB of
/// indirect blocks per txg, zstd-1 295 KB (0.69x), zstd-3 288 KB. A level-1 block is
/// decoded once and kept decoded (`ArcCache::keep_decoded`), so its slower decompression
/// is paid only on a cold read. Any tarn reads either codec: the pointer names it (§6 of
/// docs/FORMAT.md), and pools written with lz4 indirect blocks are read as they are.
const INDIRECT_COMPRESSION: Compression = Compression::Zstd(1);

/// An indirect block as on disk, decoded.
pub(crate) struct IndBlock {
    ptrs: Box<[Option<BlockPtr>]>,
    /// Where it is on disk.
    disk: BlockPtr,
}

type Shared = Arc<Decoded<IndBlock>>;

/// A changed indirect block: the pointers it had on disk and the slots changed since.
struct DirtyInd {
    /// The block as last written (`None`: a new block, all holes but `changes`).
    base: Option<BlockPtr>,
    /// The decoded base while the cache keeps it.
    base_cache: Weak<Decoded<IndBlock>>,
    changes: BTreeMap<u16, Option<BlockPtr>>,
    /// The tree's dataset (`BlockTree::objset`), for reading the base again.
    objset: Option<u64>,
}

enum Node {
    /// As on disk; decoded in the ARC's cache while it keeps it.
    Clean(Weak<Decoded<IndBlock>>),
    Dirty(Box<DirtyInd>),
}

pub struct BlockTree {
    /// The dataset whose object this tree is (`None` in tests and tools): the ARC keeps
    /// it with the tree's indirect blocks, for the L2ARC's `secondarycache`.
    objset: Option<u64>,
    nlevels: u8,
    /// Pointer to the top: the record itself when `nlevels == 1`, else the top indirect
    /// block as last written (stale while the top is dirty).
    root: Option<BlockPtr>,
    ind: HashMap<(u8, u64), Node>,
    /// Entries in `ind` after its last sweep of clean blocks the cache dropped: the map is
    /// swept again when it has doubled, so it stays the size of what is cached or dirty.
    swept_len: usize,
}

/// Blocks covered by one pointer at `level` (level 0: one record): the records under
/// an indirect block of that level. Saturates for a level no real tree has (a level count
/// read from a damaged or foreign dnode must not overflow the shift).
pub fn span(level: u8) -> u64 {
    1u64.checked_shl(PTR_SHIFT * level as u32).unwrap_or(u64::MAX)
}

fn slot_of(idx: u64) -> usize {
    (idx & (FANOUT - 1)) as usize
}

/// Where record `blkid`'s pointer is, as far as memory knows (`BlockTree::lookup_in_memory`).
pub(crate) enum InMemory {
    /// The pointer (`None`: a hole).
    Found(Option<BlockPtr>),
    /// Indirect block (`level`, `idx`) above it must be read first; it is at `bp`.
    Unloaded { level: u8, idx: u64, bp: BlockPtr },
}

/// Reads and decodes the indirect block at `bp` (of dataset `objset`) and hands it to the
/// ARC's decoded cache.
pub(crate) fn read_block(zio: &Zio, bp: BlockPtr, objset: Option<u64>) -> Result<Shared, ZioError> {
    let access = objset.map_or(Access::of(ReadKind::Indirect), |o| Access::in_objset(ReadKind::Indirect, o));
    let bytes = zio.read(&bp, access)?;
    let ptrs = decode_indirect(&bytes)?.into_boxed_slice();
    Ok(zio.arc.keep_decoded(IndBlock { ptrs, disk: bp }, DECODED_BYTES))
}

impl DirtyInd {
    fn new(base: Option<&Shared>, objset: Option<u64>) -> DirtyInd {
        DirtyInd {
            base: base.map(|b| b.get().disk),
            base_cache: base.map_or_else(Weak::new, Arc::downgrade),
            changes: BTreeMap::new(),
            objset,
        }
    }

    /// The decoded base block, read again if the cache dropped it.
    fn base_block(&mut self, zio: &Zio) -> Result<Option<Shared>, ZioError> {
        let Some(bp) = self.base else { return Ok(None) };
        if let Some(b) = self.base_cache.upgrade() {
            return Ok(Some(b));
        }
        let b = read_block(zio, bp, self.objset)?;
        self.base_cache = Arc::downgrade(&b);
        Ok(Some(b))
    }

    fn ptr(&mut self, zio: &Zio, slot: usize) -> Result<Option<BlockPtr>, ZioError> {
        if let Some(p) = self.changes.get(&(slot as u16)) {
            return Ok(*p);
        }
        Ok(self.base_block(zio)?.and_then(|b| b.get().ptrs[slot]))
    }

    /// The pointer in `slot` if it is known without I/O (changed, or the base still kept
    /// decoded); `None` for a hole or an unknown pointer.
    fn peek(&self, slot: usize) -> Option<BlockPtr> {
        match self.changes.get(&(slot as u16)) {
            Some(p) => *p,
            None => self.base_cache.upgrade()?.get().ptrs[slot],
        }
    }

    fn set(&mut self, zio: &Zio, slot: usize, bp: Option<BlockPtr>) -> Result<Option<BlockPtr>, ZioError> {
        let old = self.ptr(zio, slot)?;
        self.changes.insert(slot as u16, bp);
        Ok(old)
    }

    /// Every pointer, base and changes together.
    fn ptrs(&mut self, zio: &Zio) -> Result<Vec<Option<BlockPtr>>, ZioError> {
        let mut ptrs = match self.base_block(zio)? {
            Some(b) => b.get().ptrs.to_vec(),
            None => vec![None; FANOUT as usize],
        };
        for (&slot, &bp) in &self.changes {
            ptrs[slot as usize] = bp;
        }
        Ok(ptrs)
    }
}

impl BlockTree {
    /// The tree under `root` of `nlevels` levels, of an object of dataset `objset`.
    pub fn new(root: Option<BlockPtr>, nlevels: u8, objset: Option<u64>) -> BlockTree {
        BlockTree { objset, nlevels, root, ind: HashMap::new(), swept_len: 0 }
    }

    pub fn nlevels(&self) -> u8 {
        self.nlevels
    }

    pub fn root(&self) -> Option<BlockPtr> {
        self.root
    }

    /// Indirect blocks this tree knows of (for memory accounting: each costs a map entry).
    pub(crate) fn known_blocks(&self) -> usize {
        self.ind.len()
    }

    fn capacity(&self) -> u64 {
        match self.nlevels {
            0 => 0,
            n => span(n - 1),
        }
    }

    /// The pointer of record `blkid`, or `None` for a hole.
    pub fn get(&mut self, zio: &Zio, blkid: u64) -> Result<Option<BlockPtr>, ZioError> {
        if blkid >= self.capacity() {
            return Ok(None);
        }
        if self.nlevels == 1 {
            return Ok(self.root);
        }
        self.child(zio, 1, blkid >> PTR_SHIFT, slot_of(blkid))
    }

    /// The pointer of record `blkid` if the indirect block above it is in memory already
    /// (dirty, or clean and still kept by the decoded cache): no I/O; `None` for a hole or
    /// a block not in memory.
    pub fn peek(&self, blkid: u64) -> Option<BlockPtr> {
        if blkid >= self.capacity() {
            return None;
        }
        if self.nlevels == 1 {
            return self.root;
        }
        let slot = slot_of(blkid);
        match self.ind.get(&(1, blkid >> PTR_SHIFT))? {
            Node::Clean(w) => w.upgrade()?.get().ptrs[slot],
            Node::Dirty(d) => d.peek(slot),
        }
    }

    /// The pointer of record `blkid` if every indirect block above it is in memory; else
    /// where the highest one that is not lies on disk. No I/O: a reader reads that block
    /// with its object unlocked and gives it to `adopt`. Walks as `child` does, top down,
    /// after a first look at the level-1 block (a warm read needs no more).
    pub(crate) fn lookup_in_memory(&self, blkid: u64) -> InMemory {
        if blkid >= self.capacity() {
            return InMemory::Found(None);
        }
        if self.nlevels == 1 {
            return InMemory::Found(self.root);
        }
        if let Some(p) = self.known(1, blkid >> PTR_SHIFT, slot_of(blkid)) {
            return InMemory::Found(p);
        }
        // The pointer to the block at `level` on the way down.
        let mut ptr = self.root;
        for level in (1..self.nlevels).rev() {
            let idx = blkid >> (PTR_SHIFT * level as u32);
            match self.known(level, idx, slot_of(blkid >> (PTR_SHIFT * (level as u32 - 1)))) {
                Some(p) => ptr = p,
                None => {
                    // A dirty block whose base the cache dropped is read from its base.
                    let at = match self.ind.get(&(level, idx)) {
                        Some(Node::Dirty(d)) => d.base,
                        _ => ptr,
                    };
                    return at.map_or(InMemory::Found(None), |bp| InMemory::Unloaded { level, idx, bp });
                }
            }
            if ptr.is_none() {
                return InMemory::Found(None);
            }
        }
        InMemory::Found(ptr)
    }

    /// The pointer in `slot` of indirect block (level, idx) if that block is in memory
    /// (`Some(None)`: a hole); `None` when it would have to be read.
    fn known(&self, level: u8, idx: u64, slot: usize) -> Option<Option<BlockPtr>> {
        match self.ind.get(&(level, idx))? {
            Node::Clean(w) => Some(w.upgrade()?.get().ptrs[slot]),
            Node::Dirty(d) => match (d.changes.get(&(slot as u16)), d.base) {
                (Some(p), _) => Some(*p),
                (None, None) => Some(None), // a new block: a hole where nothing was set
                (None, Some(_)) => Some(d.base_cache.upgrade()?.get().ptrs[slot]),
            },
        }
    }

    /// Takes in `block`, read without the object's lock after `lookup_in_memory` of
    /// `blkid` named it, if the tree still wants that very block there (a write or a sync
    /// meanwhile may have changed the path: then it is left to the cache).
    pub(crate) fn adopt(&mut self, blkid: u64, block: &Shared) {
        let InMemory::Unloaded { level, idx, bp } = self.lookup_in_memory(blkid) else { return };
        if bp != block.get().disk {
            return;
        }
        match self.ind.get_mut(&(level, idx)) {
            // The lookup named a dirty block's base: the pointers it had on disk.
            Some(Node::Dirty(d)) => d.base_cache = Arc::downgrade(block),
            _ => {
                self.ind.insert((level, idx), Node::Clean(Arc::downgrade(block)));
                self.sweep_if_grown();
            }
        }
    }

    /// The dataset whose object this tree is.
    pub(crate) fn objset(&self) -> Option<u64> {
        self.objset
    }

    /// The pointer in slot `slot` of indirect block (level, idx); `None` for a hole (or
    /// if the block itself is one).
    fn child(&mut self, zio: &Zio, level: u8, idx: u64, slot: usize) -> Result<Option<BlockPtr>, ZioError> {
        match self.ind.get_mut(&(level, idx)) {
            Some(Node::Dirty(d)) => return d.ptr(zio, slot),
            Some(Node::Clean(w)) => {
                if let Some(b) = w.upgrade() {
                    return Ok(b.get().ptrs[slot]);
                }
            }
            None => {}
        }
        Ok(self.load_clean(zio, level, idx)?.and_then(|b| b.get().ptrs[slot]))
    }

    /// Where indirect block (level, idx) is on disk, from its parent (or the root).
    fn disk_ptr(&mut self, zio: &Zio, level: u8, idx: u64) -> Result<Option<BlockPtr>, ZioError> {
        if level == self.nlevels - 1 {
            Ok(self.root)
        } else {
            self.child(zio, level + 1, idx >> PTR_SHIFT, slot_of(idx))
        }
    }

    /// Reads clean indirect block (level, idx) from disk (through the ARC); `None` for a
    /// hole.
    fn load_clean(&mut self, zio: &Zio, level: u8, idx: u64) -> Result<Option<Shared>, ZioError> {
        let Some(bp) = self.disk_ptr(zio, level, idx)? else {
            self.ind.remove(&(level, idx));
            return Ok(None);
        };
        let b = read_block(zio, bp, self.objset)?;
        self.ind.insert((level, idx), Node::Clean(Arc::downgrade(&b)));
        self.sweep_if_grown();
        Ok(Some(b))
    }

    /// Forgets clean blocks the decoded cache dropped, once the map has doubled since the
    /// last sweep (amortised: a sweep costs what the entries it follows did).
    fn sweep_if_grown(&mut self) {
        if self.ind.len() > 2 * self.swept_len + 64 {
            self.ind.retain(|_, n| match n {
                Node::Clean(w) => w.strong_count() > 0,
                Node::Dirty(_) => true,
            });
            self.swept_len = self.ind.len();
        }
    }

    /// Makes indirect block (level, idx) dirty if it exists (on disk or dirty already);
    /// false for a hole.
    fn dirty_if_present(&mut self, zio: &Zio, level: u8, idx: u64) -> Result<bool, ZioError> {
        let clean = match self.ind.get(&(level, idx)) {
            Some(Node::Dirty(_)) => return Ok(true),
            Some(Node::Clean(w)) => w.upgrade(),
            None => None,
        };
        let clean = match clean {
            Some(b) => b,
            None => match self.load_clean(zio, level, idx)? {
                Some(b) => b,
                None => return Ok(false),
            },
        };
        self.ind.insert((level, idx), Node::Dirty(Box::new(DirtyInd::new(Some(&clean), self.objset))));
        Ok(true)
    }

    /// Makes indirect block (level, idx) present and dirty (its parents are already).
    fn ensure_dirty(&mut self, zio: &Zio, level: u8, idx: u64) -> Result<(), ZioError> {
        if !self.dirty_if_present(zio, level, idx)? {
            self.ind.insert((level, idx), Node::Dirty(Box::new(DirtyInd::new(None, self.objset))));
        }
        Ok(())
    }

    fn dirty_mut(&mut self, level: u8, idx: u64) -> &mut DirtyInd {
        match self.ind.get_mut(&(level, idx)) {
            Some(Node::Dirty(d)) => d,
            _ => panic!("invariant broken: indirect block ({level}, {idx}) was made dirty before this change"),
        }
    }

    /// Adds a level on top: the old top becomes child 0 of a new indirect block.
    fn grow(&mut self) {
        let mut top = DirtyInd::new(None, self.objset);
        top.changes.insert(0, self.root.take());
        self.ind.insert((self.nlevels, 0), Node::Dirty(Box::new(top)));
        self.nlevels += 1;
    }

    /// Points record `blkid` at `bp` (or makes it a hole); returns the pointer it replaced.
    pub fn set(&mut self, zio: &Zio, blkid: u64, bp: Option<BlockPtr>) -> Result<Option<BlockPtr>, ZioError> {
        if self.nlevels == 0 {
            if bp.is_none() {
                return Ok(None);
            }
            self.nlevels = 1;
        }
        while blkid >= self.capacity() {
            if bp.is_none() {
                return Ok(None);
            }
            self.grow();
        }
        if self.nlevels == 1 {
            return Ok(std::mem::replace(&mut self.root, bp));
        }
        for level in (1..self.nlevels).rev() {
            self.ensure_dirty(zio, level, blkid >> (PTR_SHIFT * level as u32))?;
        }
        self.dirty_mut(1, blkid >> PTR_SHIFT).set(zio, slot_of(blkid), bp)
    }

    /// Frees every record from `first` on (and indirect blocks left empty); the replaced
    /// pointers go to `freed`.
    pub fn free_from(&mut self, zio: &Zio, first: u64, freed: &mut Vec<BlockPtr>) -> Result<(), ZioError> {
        if self.nlevels == 0 || first >= self.capacity() {
            return Ok(());
        }
        if first == 0 {
            return self.free_all(zio, freed);
        }
        if self.nlevels == 1 {
            return Ok(());
        }
        self.free_range(zio, self.nlevels - 1, 0, first, freed)?;
        Ok(())
    }

    /// Makes an indirect block that is about to be changed by a free dirty. An unreadable
    /// one (damaged on every copy) is treated as empty: its children are leaked until the
    /// next import rebuilds the space maps, rather than failing the txg and suspending
    /// the pool because a damaged file was removed or truncated.
    fn dirty_for_free(&mut self, zio: &Zio, level: u8, idx: u64) -> bool {
        self.dirty_if_present(zio, level, idx).unwrap_or(false)
    }

    fn free_all(&mut self, zio: &Zio, freed: &mut Vec<BlockPtr>) -> Result<(), ZioError> {
        if self.nlevels >= 2 {
            self.free_subtree(zio, self.nlevels - 1, 0, freed)?;
        } else if let Some(bp) = self.root {
            freed.push(bp);
        }
        self.ind.clear();
        self.root = None;
        self.nlevels = 0;
        Ok(())
    }

    /// Frees records >= `first` under indirect block (level, idx), which covers
    /// [idx * span(level), (idx + 1) * span(level)) and starts below `first`.
    fn free_range(
        &mut self,
        zio: &Zio,
        level: u8,
        idx: u64,
        first: u64,
        freed: &mut Vec<BlockPtr>,
    ) -> Result<(), ZioError> {
        if !self.dirty_for_free(zio, level, idx) {
            return Ok(());
        }
        let ptrs = self.dirty_mut(level, idx).ptrs(zio).unwrap_or_else(|_| vec![None; FANOUT as usize]);
        let child_span = span(level - 1);
        let base = idx * span(level);
        for slot in 0..FANOUT {
            let child_first = base + slot * child_span;
            if child_first + child_span <= first {
                continue;
            }
            let child = ptrs[slot as usize];
            let child_idx = idx * FANOUT + slot;
            if child.is_none() && !self.ind.contains_key(&(level - 1, child_idx)) {
                continue;
            }
            if level == 1 {
                freed.extend(child);
            } else if child_first >= first {
                self.free_subtree(zio, level - 1, child_idx, freed)?;
            } else {
                self.free_range(zio, level - 1, child_idx, first, freed)?;
                continue;
            }
            self.dirty_mut(level, idx).changes.insert(slot as u16, None);
        }
        Ok(())
    }

    /// Frees a whole subtree rooted at indirect block (level, idx), including itself.
    fn free_subtree(&mut self, zio: &Zio, level: u8, idx: u64, freed: &mut Vec<BlockPtr>) -> Result<(), ZioError> {
        if !self.dirty_for_free(zio, level, idx) {
            self.ind.remove(&(level, idx));
            return Ok(());
        }
        let ptrs = self.dirty_mut(level, idx).ptrs(zio).unwrap_or_else(|_| vec![None; FANOUT as usize]);
        let Some(Node::Dirty(ind)) = self.ind.remove(&(level, idx)) else { unreachable!("made dirty above") };
        for (slot, bp) in ptrs.iter().enumerate() {
            if level == 1 {
                freed.extend(bp);
            } else {
                let child = idx * FANOUT + slot as u64;
                if bp.is_some() || self.ind.contains_key(&(level - 1, child)) {
                    self.free_subtree(zio, level - 1, child, freed)?;
                }
            }
        }
        freed.extend(ind.base);
        Ok(())
    }

    /// Writes every dirty indirect block, bottom-up; replaced pointers go to `freed`.
    /// Written blocks stay in the ARC as `cache` admits them, and decoded in its cache.
    pub fn sync(
        &mut self,
        zio: &Zio,
        birth: u64,
        checksum: ChecksumKind,
        cache: CachePolicy,
        freed: &mut Vec<BlockPtr>,
    ) -> Result<(u64, u64), ZioError> {
        let mut written = (0u64, 0u64);
        for level in 1..self.nlevels {
            let mut dirty: Vec<u64> = self
                .ind
                .iter()
                .filter(|((l, _), n)| *l == level && matches!(n, Node::Dirty(_)))
                .map(|((_, idx), _)| *idx)
                .collect();
            dirty.sort_unstable();
            for batch in dirty.chunks(WRITE_BATCH) {
                let (psize, lsize) = self.write_batch(zio, level, batch, birth, checksum, cache, freed)?;
                written.0 += psize;
                written.1 += lsize;
            }
        }
        Ok(written)
    }

    /// Writes dirty indirect blocks `batch` of `level`: an empty one is dropped (its
    /// parent's slot becomes a hole), the others become clean blocks in the decoded cache.
    #[allow(clippy::too_many_arguments)]
    fn write_batch(
        &mut self,
        zio: &Zio,
        level: u8,
        batch: &[u64],
        birth: u64,
        checksum: ChecksumKind,
        cache: CachePolicy,
        freed: &mut Vec<BlockPtr>,
    ) -> Result<(u64, u64), ZioError> {
        let mut all_ptrs = Vec::with_capacity(batch.len());
        for &idx in batch {
            all_ptrs.push(self.dirty_mut(level, idx).ptrs(zio)?);
        }
        let (encoded, written_idx): (Vec<Vec<u8>>, Vec<usize>) = all_ptrs
            .iter()
            .enumerate()
            .filter(|(_, p)| p.iter().any(Option::is_some))
            .map(|(i, p)| (encode_indirect(p), i))
            .unzip();
        let pending: Vec<PendingBlock> = encoded
            .iter()
            .map(|data| PendingBlock {
                data,
                compression: INDIRECT_COMPRESSION,
                checksum,
                level,
                block_type: BlockType::Indirect,
                cache,
                page: None,
                objset: self.objset,
                stored: None,
            })
            .collect();
        let ptrs = zio.write_blocks(&pending, birth)?;
        drop(pending);
        drop(encoded);
        let mut written = (0u64, 0u64);
        let mut new_ptr: Vec<Option<BlockPtr>> = vec![None; batch.len()];
        for (i, bp) in written_idx.into_iter().zip(ptrs) {
            written.0 += bp.psize as u64;
            written.1 += bp.lsize as u64;
            new_ptr[i] = Some(bp);
        }
        for ((&idx, bp), block_ptrs) in batch.iter().zip(new_ptr).zip(all_ptrs) {
            let Some(Node::Dirty(ind)) = self.ind.remove(&(level, idx)) else { unreachable!("dirty indirect present") };
            freed.extend(ind.base);
            if let Some(bp) = bp {
                let block =
                    zio.arc.keep_decoded(IndBlock { ptrs: block_ptrs.into_boxed_slice(), disk: bp }, DECODED_BYTES);
                self.ind.insert((level, idx), Node::Clean(Arc::downgrade(&block)));
            }
            self.set_parent_slot(level, idx, bp);
        }
        Ok(written)
    }

    fn set_parent_slot(&mut self, level: u8, idx: u64, bp: Option<BlockPtr>) {
        if level == self.nlevels - 1 {
            self.root = bp;
            return;
        }
        match self.ind.get_mut(&(level + 1, idx >> PTR_SHIFT)) {
            Some(Node::Dirty(parent)) => {
                parent.changes.insert(slot_of(idx) as u16, bp);
            }
            _ => panic!("invariant broken: the parent of a dirty indirect block must be dirty"),
        }
    }
}

/// The bytes of an indirect block holding `ptrs`.
fn encode_indirect(ptrs: &[Option<BlockPtr>]) -> Vec<u8> {
    let mut out = vec![0u8; FANOUT as usize * BLKPTR_SIZE];
    for (slot, bp) in ptrs.iter().enumerate() {
        if let Some(bp) = bp {
            bp.encode(&mut out[slot * BLKPTR_SIZE..]);
        }
    }
    out
}

/// The child pointers stored in an indirect block's bytes (holes as `None`).
pub fn decode_indirect(bytes: &[u8]) -> Result<Vec<Option<BlockPtr>>, ZioError> {
    let expected = (FANOUT as usize) * BLKPTR_SIZE;
    if bytes.len() != expected {
        return Err(ZioError::BadLength { what: "indirect", len: bytes.len(), expected });
    }
    Ok(bytes.chunks_exact(BLKPTR_SIZE).map(BlockPtr::decode).collect::<Result<Vec<_>, _>>()?)
}

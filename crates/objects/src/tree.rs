//! The block tree of one object: a radix tree of indirect blocks over the object's
//! records, as ZFS builds it. Level 0 holds records; an indirect block holds 512 block
//! pointers (32 KiB logical); the dnode points at the top.
//!
//! Indirect blocks are loaded on demand and kept in memory; a changed one is marked dirty
//! together with its path to the top, and `sync` rewrites the dirty ones bottom-up
//! (copy-on-write), returning the pointers it replaced so the caller can free them.
//! Walking a committed tree without loading it (import, scrub, a destroyed dataset's
//! free) is `traverse`'s.
//!
//! Owns: the radix-tree shape (levels, fan-out, which slot covers which record), the
//! indirect block encoding, and the loaded indirect blocks of one object.
//!
//! Promises: `get` after `set` returns the new pointer; `sync` writes every dirty
//! indirect block (children before parents) and reports each pointer it replaced; an
//! indirect block whose bytes are not a whole block of pointers is a typed error.
//!
//! Must never: free a block itself (the replaced pointers go back to the caller), or
//! write a parent before its children.
use std::collections::HashMap;

use tarn_zio::{BlockPtr, BlockType, CachePolicy, ChecksumKind, Compression, PendingBlock, Zio, ZioError, BLKPTR_SIZE};

pub const IND_SHIFT: u8 = 15;
const PTR_SHIFT: u32 = IND_SHIFT as u32 - 6;
/// Pointers per indirect block.
pub(crate) const FANOUT: u64 = 1 << PTR_SHIFT;

struct Ind {
    ptrs: Vec<Option<BlockPtr>>,
    dirty: bool,
    disk: Option<BlockPtr>,
}

impl Ind {
    fn empty() -> Ind {
        Ind { ptrs: vec![None; FANOUT as usize], dirty: true, disk: None }
    }

    fn decode(bytes: &[u8], disk: BlockPtr) -> Result<Ind, ZioError> {
        Ok(Ind { ptrs: decode_indirect(bytes)?, dirty: false, disk: Some(disk) })
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = vec![0u8; FANOUT as usize * BLKPTR_SIZE];
        for (slot, bp) in self.ptrs.iter().enumerate() {
            if let Some(bp) = bp {
                bp.encode(&mut out[slot * BLKPTR_SIZE..]);
            }
        }
        out
    }

    fn is_empty(&self) -> bool {
        self.ptrs.iter().all(Option::is_none)
    }
}

pub struct BlockTree {
    nlevels: u8,
    /// Pointer to the top: the record itself when `nlevels == 1`, else the top indirect
    /// block as last written (stale while the top is dirty).
    root: Option<BlockPtr>,
    ind: HashMap<(u8, u64), Ind>,
}

/// Blocks covered by one pointer at `level` (level 0: one record): the records under
/// an indirect block of that level. Saturates for a level no real tree has (a level count
/// read from a damaged or foreign dnode must not overflow the shift).
pub fn span(level: u8) -> u64 {
    1u64.checked_shl(PTR_SHIFT * level as u32).unwrap_or(u64::MAX)
}

impl BlockTree {
    pub fn new(root: Option<BlockPtr>, nlevels: u8) -> BlockTree {
        BlockTree { nlevels, root, ind: HashMap::new() }
    }

    pub fn nlevels(&self) -> u8 {
        self.nlevels
    }

    pub fn root(&self) -> Option<BlockPtr> {
        self.root
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
        let l1 = blkid >> PTR_SHIFT;
        if !self.load(zio, 1, l1)? {
            return Ok(None);
        }
        Ok(self.ind[&(1, l1)].ptrs[(blkid & (FANOUT - 1)) as usize])
    }

    /// Loads indirect block (level, idx) if it exists on disk; false for a hole.
    fn load(&mut self, zio: &Zio, level: u8, idx: u64) -> Result<bool, ZioError> {
        if self.ind.contains_key(&(level, idx)) {
            return Ok(true);
        }
        let bp = if level == self.nlevels - 1 {
            self.root
        } else {
            if !self.load(zio, level + 1, idx >> PTR_SHIFT)? {
                return Ok(false);
            }
            self.ind[&(level + 1, idx >> PTR_SHIFT)].ptrs[(idx & (FANOUT - 1)) as usize]
        };
        let Some(bp) = bp else { return Ok(false) };
        let bytes = zio.read(&bp)?;
        self.ind.insert((level, idx), Ind::decode(&bytes, bp)?);
        Ok(true)
    }

    /// Makes indirect block (level, idx) present and dirty (its parents are already).
    fn ensure_dirty(&mut self, zio: &Zio, level: u8, idx: u64) -> Result<&mut Ind, ZioError> {
        if !self.load(zio, level, idx)? {
            self.ind.insert((level, idx), Ind::empty());
        }
        let ind = self.ind.get_mut(&(level, idx)).expect("just ensured");
        ind.dirty = true;
        Ok(ind)
    }

    /// Adds a level on top: the old top becomes child 0 of a new indirect block.
    fn grow(&mut self) {
        let mut top = Ind::empty();
        top.ptrs[0] = self.root.take();
        self.ind.insert((self.nlevels, 0), top);
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
        let l1 = self.ind.get_mut(&(1, blkid >> PTR_SHIFT)).expect("path ensured");
        Ok(std::mem::replace(&mut l1.ptrs[(blkid & (FANOUT - 1)) as usize], bp))
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

    /// Loads an indirect block that is about to be freed. An unreadable one (damaged on
    /// every copy) is treated as empty: its children are leaked until the next import
    /// rebuilds the space maps, rather than failing the txg and suspending the pool
    /// because a damaged file was removed or truncated.
    fn load_for_free(&mut self, zio: &Zio, level: u8, idx: u64) -> bool {
        self.load(zio, level, idx).unwrap_or(false)
    }

    fn free_all(&mut self, zio: &Zio, freed: &mut Vec<BlockPtr>) -> Result<(), ZioError> {
        if self.nlevels >= 2 {
            let top = self.nlevels - 1;
            if self.load_for_free(zio, top, 0) {
                self.free_subtree(zio, top, 0, freed)?;
            }
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
        if !self.load_for_free(zio, level, idx) {
            return Ok(());
        }
        let child_span = span(level - 1);
        let base = idx * span(level);
        for slot in 0..FANOUT {
            let child_first = base + slot * child_span;
            if child_first + child_span <= first {
                continue;
            }
            let child = self.ind[&(level, idx)].ptrs[slot as usize];
            if child.is_none() && !self.ind.contains_key(&(level - 1, idx * FANOUT + slot)) {
                continue;
            }
            if level == 1 {
                if let Some(bp) = child {
                    freed.push(bp);
                }
            } else if child_first >= first {
                self.free_subtree(zio, level - 1, idx * FANOUT + slot, freed)?;
            } else {
                self.free_range(zio, level - 1, idx * FANOUT + slot, first, freed)?;
                continue;
            }
            let ind = self.ind.get_mut(&(level, idx)).expect("loaded");
            ind.ptrs[slot as usize] = None;
            ind.dirty = true;
        }
        self.ind.get_mut(&(level, idx)).expect("loaded").dirty = true;
        Ok(())
    }

    /// Frees a whole subtree rooted at indirect block (level, idx), including itself.
    fn free_subtree(&mut self, zio: &Zio, level: u8, idx: u64, freed: &mut Vec<BlockPtr>) -> Result<(), ZioError> {
        if !self.load_for_free(zio, level, idx) {
            return Ok(());
        }
        let ind = self.ind.remove(&(level, idx)).expect("loaded");
        for (slot, bp) in ind.ptrs.iter().enumerate() {
            if level == 1 {
                freed.extend(bp);
            } else {
                let child = idx * FANOUT + slot as u64;
                if bp.is_some() || self.ind.contains_key(&(level - 1, child)) {
                    self.free_subtree(zio, level - 1, child, freed)?;
                }
            }
        }
        freed.extend(ind.disk);
        Ok(())
    }

    /// Writes every dirty indirect block, bottom-up; replaced pointers go to `freed`.
    pub fn sync(
        &mut self,
        zio: &Zio,
        birth: u64,
        checksum: ChecksumKind,
        freed: &mut Vec<BlockPtr>,
    ) -> Result<(u64, u64), ZioError> {
        let mut written = (0u64, 0u64);
        for level in 1..self.nlevels {
            let mut dirty: Vec<u64> =
                self.ind.iter().filter(|((l, _), i)| *l == level && i.dirty).map(|((_, idx), _)| *idx).collect();
            dirty.sort_unstable();
            let mut encoded = Vec::new();
            let mut written_idx = Vec::new();
            for &idx in &dirty {
                let ind = &self.ind[&(level, idx)];
                if !ind.is_empty() {
                    encoded.push(ind.encode());
                    written_idx.push(idx);
                }
            }
            let pending: Vec<PendingBlock> = encoded
                .iter()
                .map(|data| PendingBlock {
                    data,
                    compression: Compression::Lz4,
                    checksum,
                    level,
                    block_type: BlockType::Indirect,
                    // The tree keeps its indirect blocks decoded in memory already.
                    cache: CachePolicy::None,
                })
                .collect();
            let ptrs = zio.write_blocks(&pending, birth)?;
            for bp in &ptrs {
                written.0 += bp.psize as u64;
                written.1 += bp.lsize as u64;
            }
            let mut new_ptr: HashMap<u64, BlockPtr> = written_idx.into_iter().zip(ptrs).collect();
            for idx in dirty {
                let bp = new_ptr.remove(&idx);
                let ind = self.ind.get_mut(&(level, idx)).expect("dirty indirect present");
                freed.extend(ind.disk.take());
                ind.disk = bp;
                ind.dirty = false;
                if bp.is_none() {
                    self.ind.remove(&(level, idx));
                }
                self.set_parent_slot(level, idx, bp);
            }
        }
        Ok(written)
    }

    fn set_parent_slot(&mut self, level: u8, idx: u64, bp: Option<BlockPtr>) {
        if level == self.nlevels - 1 {
            self.root = bp;
            return;
        }
        let parent = self
            .ind
            .get_mut(&(level + 1, idx >> PTR_SHIFT))
            .expect("a dirty indirect block's parent is loaded and dirty");
        assert!(parent.dirty, "parent of a dirty indirect block must be dirty");
        parent.ptrs[(idx & (FANOUT - 1)) as usize] = bp;
    }
}

/// The child pointers stored in an indirect block's bytes (holes as `None`).
pub(crate) fn decode_indirect(bytes: &[u8]) -> Result<Vec<Option<BlockPtr>>, ZioError> {
    let expected = (FANOUT as usize) * BLKPTR_SIZE;
    if bytes.len() != expected {
        return Err(ZioError::BadLength { what: "indirect", len: bytes.len(), expected });
    }
    Ok(bytes.chunks_exact(BLKPTR_SIZE).map(BlockPtr::decode).collect::<Result<Vec<_>, _>>()?)
}

//! Reading a top-level vdev: verified reads, mirror sides, self-healing, and the scrub
//! and resilver I/O entry points.
//!
//! Owns: the read of a span of the data area on one side or every side, the choice of
//! side (a rotor over the sides; a side whose DTL covers the block's birth last), and the
//! rewrite of bad sides from the good copy.
//! Promises: a read hands back only bytes the caller's verifier accepted, and rewrites
//! each bad side it found from the good copy; a side that missed a block's txg (its DTL
//! covers the block's birth) is read only when no other side verifies, and its bad copy
//! is then not counted as an error. Scrub and resilver I/O enter through `scrub_read` and
//! `resilver`, and only there: both go as `IoClass::Scrub`.
//! Must never: interpret the bytes it reads (the verifier does), or return a copy the
//! verifier refused.
use std::sync::atomic::Ordering;

use crate::dtl::UNKNOWN_BIRTH;
use crate::leaf::Leaf;
use crate::queue::IoClass;
use crate::top::{TopVdev, DATA_START};
use crate::VdevError;
/// How a read treats the sides of a mirror.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadMode {
    /// Stop at the first side that verifies; count and repair the bad ones before it.
    FirstGood,
    /// Verify every side (scrub); count and repair every bad one.
    AllSides,
    /// Stop at the first side that verifies; a side that does not is not an error (an
    /// intent-log block that was never written ends the log).
    Quiet,
}

/// A verified read: where the bytes are in the caller's buffer, and how many sides did
/// not verify (and were rewritten).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SidesRead {
    pub range: std::ops::Range<usize>,
    pub bad_sides: u32,
}

impl TopVdev {
    /// Reads `len` bytes at `offset` of the data area as I/O of `class`; the caller's
    /// `verify` decides whether a copy is good, and `mode` what a bad side means (see
    /// `ReadMode`).
    ///
    /// `span` is the caller's scratch buffer (reused across reads, so the hot path does
    /// not allocate); the verified bytes are `span[returned range]`.
    pub fn read(
        &self,
        offset: u64,
        len: usize,
        verify: &dyn Fn(&[u8]) -> bool,
        span: &mut Vec<u8>,
        mode: ReadMode,
        class: IoClass,
    ) -> Result<std::ops::Range<usize>, VdevError> {
        self.read_sides(offset, len, verify, span, mode, class).map(|r| r.range)
    }

    /// Like `read`, and says how many sides returned bad bytes (each counted in its
    /// leaf's checksum errors and rewritten from the good copy). The block's birth is
    /// not known (an intent-log extent): a side that missed txgs is read last.
    pub fn read_sides(
        &self,
        offset: u64,
        len: usize,
        verify: &dyn Fn(&[u8]) -> bool,
        out: &mut Vec<u8>,
        mode: ReadMode,
        class: IoClass,
    ) -> Result<SidesRead, VdevError> {
        self.read_copies(offset, len, UNKNOWN_BIRTH, verify, out, mode, class)
    }

    /// The read of a block born in txg `birth` (see `read_sides`): a side that missed
    /// that txg is read only if no other side verifies.
    // The block's place, its birth, the verifier, the caller's buffer, and how and as
    // what to read: each is the caller's to choose (as `read_copies`).
    #[allow(clippy::too_many_arguments)]
    pub fn read_block(
        &self,
        offset: u64,
        len: usize,
        birth: u64,
        verify: &dyn Fn(&[u8]) -> bool,
        out: &mut Vec<u8>,
        mode: ReadMode,
        class: IoClass,
    ) -> Result<SidesRead, VdevError> {
        self.read_copies(offset, len, birth, verify, out, mode, class)
    }

    /// Scrub I/O: verifies every side holding the block born in txg `birth`, rewriting
    /// bad ones from a good one (as `ReadMode::AllSides`). The scrub's entry point: an
    /// I/O scheduler gives these reads the scrub class here.
    pub fn scrub_read(
        &self,
        offset: u64,
        len: usize,
        birth: u64,
        verify: &dyn Fn(&[u8]) -> bool,
        out: &mut Vec<u8>,
    ) -> Result<SidesRead, VdevError> {
        let mode = ReadMode::AllSides;
        self.read_copies(offset, len, birth, verify, out, mode, IoClass::Scrub)
    }

    /// Resilver I/O: if a side missed txg `birth`, reads the block from a side that
    /// verifies and writes it to every side that missed it. Returns how many sides were
    /// written (0: none needed it, and nothing was read). The resilver's entry point: an
    /// I/O scheduler gives these reads and writes the resilver class here.
    pub fn resilver(
        &self,
        offset: u64,
        len: usize,
        birth: u64,
        verify: &dyn Fn(&[u8]) -> bool,
        scratch: &mut Vec<u8>,
    ) -> Result<u32, VdevError> {
        let needs = |l: &Leaf| l.usable().is_some() && l.dtl.covers(birth);
        if !self.leaves.iter().any(needs) {
            return Ok(0);
        }
        let mode = ReadMode::FirstGood;
        self.read_copies(offset, len, birth, verify, scratch, mode, IoClass::Scrub)?;
        let (start, end, _) = self.read_span(offset, len, IoClass::Scrub);
        let span = &scratch[..(end - start) as usize];
        let mut written = 0;
        for leaf in self.leaves.iter().filter(|l| needs(l)) {
            let Some(dev) = leaf.usable() else { continue };
            match leaf.write_dev(&**dev, span, DATA_START + start, IoClass::Scrub) {
                Ok(()) => written += 1,
                Err(_) => leaf.fault(),
            }
        }
        Ok(written)
    }

    /// The `align`-aligned span `[start, end)` holding `len` bytes at `offset`, and where
    /// those bytes begin in it.
    fn span_of(offset: u64, len: usize, align: u64) -> (u64, u64, usize) {
        let start = offset & !(align - 1);
        let end = (offset + len as u64).next_multiple_of(align);
        (start, end, (offset - start) as usize)
    }

    /// The span a read of `len` bytes at `offset` reads: for the pool's own work the
    /// smallest the devices can read (not whole pool sectors: a packed compressed block
    /// costs the disk its stored size); for a scan whole sectors, which a resilver writes
    /// back as they are.
    fn read_span(&self, offset: u64, len: usize, class: IoClass) -> (u64, u64, usize) {
        let align = match class {
            IoClass::Scrub => self.sector(),
            _ => self.read_align(),
        };
        Self::span_of(offset, len, align)
    }

    /// Reads the copies of a block: first the sides that hold its txg (in rotation),
    /// then, only if none verified, the sides that missed it (their bad bytes are
    /// expected there, so not counted). See `ReadMode` for what each mode verifies.
    #[allow(clippy::too_many_arguments)]
    fn read_copies(
        &self,
        offset: u64,
        len: usize,
        birth: u64,
        verify: &dyn Fn(&[u8]) -> bool,
        out: &mut Vec<u8>,
        mode: ReadMode,
        class: IoClass,
    ) -> Result<SidesRead, VdevError> {
        let all = mode == ReadMode::AllSides;
        assert!(offset + len as u64 <= self.asize, "read past the end of vdev {}", self.index);
        let (start, end, skip) = self.read_span(offset, len, class);
        out.resize((end - start) as usize, 0);
        let first = self.rotor.fetch_add(1, Ordering::Relaxed);
        let n = self.leaves.len();
        let mut bad_sides = Vec::new();
        let mut detail = String::new();
        let mut saw_checksum_error = false;
        let mut good: Option<Vec<u8>> = None;
        for missed_pass in [false, true] {
            for k in 0..n {
                let i = (first + k) % n;
                let leaf = &self.leaves[i];
                if leaf.dtl.covers(birth) != missed_pass {
                    continue;
                }
                let Some(dev) = leaf.usable() else { continue };
                let span = &mut out[..(end - start) as usize];
                if let Err(e) = leaf.read_dev(&**dev, span, DATA_START + start, class) {
                    leaf.read_errors.fetch_add(1, Ordering::Relaxed);
                    detail = format!("{}: {e}", leaf.path);
                    continue;
                }
                if !verify(&span[skip..skip + len]) {
                    saw_checksum_error = true;
                    if mode != ReadMode::Quiet && !missed_pass {
                        leaf.checksum_errors.fetch_add(1, Ordering::Relaxed);
                        bad_sides.push(i);
                    }
                    continue;
                }
                if all {
                    good.get_or_insert_with(|| span.to_vec());
                    continue;
                }
                self.repair(&bad_sides, span, start, class.repair());
                return Ok(SidesRead { range: skip..skip + len, bad_sides: bad_sides.len() as u32 });
            }
            if let Some(good) = good.take() {
                self.repair(&bad_sides, &good, start, class.repair());
                out[..good.len()].copy_from_slice(&good);
                return Ok(SidesRead { range: skip..skip + len, bad_sides: bad_sides.len() as u32 });
            }
        }
        if saw_checksum_error {
            Err(VdevError::Checksum { top: self.index, offset })
        } else {
            Err(VdevError::NoCopy { top: self.index, offset, detail })
        }
    }

    /// Self-healing: rewrite the sectors of the sides that returned bad data.
    fn repair(&self, bad_sides: &[usize], good_span: &[u8], start: u64, class: IoClass) {
        for &i in bad_sides {
            let leaf = &self.leaves[i];
            if let Some(dev) = leaf.usable() {
                if leaf.write_dev(&**dev, good_span, DATA_START + start, class).is_err() {
                    leaf.write_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_devices::mirror;
    use crate::BlockDevice;

    #[test]
    fn an_all_sides_read_counts_and_repairs_the_bad_side() {
        let (tree, devs) = mirror();
        let top = &tree.tops[0];
        top.write(0, &[7u8; 4096], IoClass::AsyncWrite).unwrap();
        devs[1].write_at(&[9u8; 16], DATA_START + 100).unwrap();
        let verify = |d: &[u8]| d.iter().all(|&b| b == 7);
        let mut span = Vec::new();
        let read = top.read_sides(0, 4096, &verify, &mut span, ReadMode::AllSides, IoClass::SyncRead).unwrap();
        assert_eq!((read.range, read.bad_sides), (0..4096, 1));
        assert_eq!(top.leaves[1].status().checksum_errors, 1);
        let again = top.read_sides(0, 4096, &verify, &mut span, ReadMode::AllSides, IoClass::SyncRead).unwrap();
        assert_eq!(again.bad_sides, 0, "the bad side was rewritten from the good one");
    }

    #[test]
    fn a_side_that_missed_txgs_is_not_trusted_for_them_until_resilvered() {
        let (tree, devs) = mirror();
        let top = &tree.tops[0];
        // Side 1 was away for txgs 5..=9: it holds older bytes where the block is.
        top.write(0, &[7u8; 4096], IoClass::AsyncWrite).unwrap();
        devs[1].write_at(&[1u8; 4096], DATA_START).unwrap();
        top.leaves[1].add_missed_txgs(5, 9);
        let verify = |d: &[u8]| d.iter().all(|&b| b == 7);
        let mut span = Vec::new();
        for _ in 0..4 {
            // Every rotation: the stale side is never tried while the other verifies.
            let read = top.read_block(0, 4096, 7, &verify, &mut span, ReadMode::FirstGood, IoClass::SyncRead).unwrap();
            assert_eq!(read.bad_sides, 0);
        }
        let scrub = top.scrub_read(0, 4096, 7, &verify, &mut span).unwrap();
        assert_eq!(scrub.bad_sides, 0, "a scrub leaves the missed copy to the resilver");
        assert_eq!(top.leaves[1].status().checksum_errors, 0, "a stale copy is not a device error");
        assert_eq!(top.leaves[1].status().missed_txgs, Some((5, 9)));
        // A block born before the side left is read from it as from any side.
        assert_eq!(top.resilver(0, 4096, 3, &verify, &mut span).unwrap(), 0);
        assert_eq!(top.resilver(0, 4096, 7, &verify, &mut span).unwrap(), 1);
        let mut side1 = vec![0u8; 4096];
        devs[1].read_at(&mut side1, DATA_START).unwrap();
        assert_eq!(side1, vec![7u8; 4096], "the resilver copied the block");
        top.leaves[1].clear_missed_txgs();
        assert_eq!(top.leaves[1].status().missed_txgs, None);
    }

    #[test]
    fn with_only_a_stale_side_left_its_good_copy_is_still_read() {
        let (tree, devs) = mirror();
        let top = &tree.tops[0];
        top.write(0, &[7u8; 4096], IoClass::AsyncWrite).unwrap();
        devs[0].write_at(&[2u8; 4096], DATA_START).unwrap();
        top.leaves[1].add_missed_txgs(5, 9);
        let verify = |d: &[u8]| d.iter().all(|&b| b == 7);
        let mut span = Vec::new();
        let read = top.read_block(0, 4096, 7, &verify, &mut span, ReadMode::FirstGood, IoClass::SyncRead).unwrap();
        assert_eq!(&span[read.range], &[7u8; 4096][..]);
        assert_eq!(read.bad_sides, 1, "the side that should have had it is bad");
    }

    #[test]
    fn scrub_and_resilver_io_goes_as_the_scrub_class() {
        let (tree, devs) = mirror();
        let top = &tree.tops[0];
        top.write(0, &[7u8; 4096], IoClass::AsyncWrite).unwrap();
        devs[1].write_at(&[1u8; 4096], DATA_START).unwrap();
        top.leaves[1].add_missed_txgs(5, 9);
        let verify = |d: &[u8]| d.iter().all(|&b| b == 7);
        let mut span = Vec::new();
        top.scrub_read(0, 4096, 7, &verify, &mut span).unwrap();
        assert_eq!(top.resilver(0, 4096, 7, &verify, &mut span).unwrap(), 1);
        let scrub = |leaf: &Leaf| leaf.queue().stats()[IoClass::Scrub.index()];
        // The scrub read side 0 (side 1 missed the block's txg); the resilver read side 0
        // and wrote side 1.
        assert_eq!((scrub(&top.leaves[0]).issued, scrub(&top.leaves[1]).issued), (2, 1));
        let demand_reads = |leaf: &Leaf| leaf.queue().stats()[IoClass::SyncRead.index()].issued;
        assert_eq!(demand_reads(&top.leaves[0]) + demand_reads(&top.leaves[1]), 0);
    }
}

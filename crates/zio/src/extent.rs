//! Extents: runs of whole sectors outside any block tree, for intent-log blocks.
//!
//! Owns: allocating, claiming, writing, reading and freeing extents, and the choice of
//! device (a usable separate log device first, the data vdevs otherwise).
//!
//! Log blocks are written as `IoClass::SyncWrite` (an fsync waits for them) and read as
//! `IoClass::SyncRead` (replay).
//!
//! Promises: an extent is live from `alloc_extent` (or `claim_extent` at import) until
//! `free_extent`, and like any free its sectors are reused only after the txg commits;
//! an extent named by bytes from disk is bounds-checked before use.
//!
//! Must never: verify content (the intent log checks its own blocks), or flush: the
//! caller flushes the vdevs it wrote (`flush_tops`).
use tarn_vdev::{IoClass, ReadMode};

use crate::{Zio, ZioError};

/// A run of whole sectors outside any block tree (an intent-log block).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Extent {
    pub vdev: u16,
    pub offset: u64,
    pub len: u64,
}

impl Zio {
    /// True while a separate log device can take intent-log blocks (one being added or
    /// removed cannot).
    pub fn has_log_device(&self) -> bool {
        self.vdevs.tops.iter().any(|t| t.takes_log_blocks())
    }

    /// Allocates `bytes` (rounded up to whole sectors) outside any block tree, for an
    /// intent-log block. The extent is live until `free_extent`.
    /// A separate log device is used when one is usable; the data vdevs otherwise.
    pub fn alloc_extent(&self, bytes: u64) -> Result<Extent, ZioError> {
        let n = self.vdevs.tops.len();
        let start = self.next_top.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let has_log = self.has_log_device();
        for k in 0..n {
            let top = (start + k) % n;
            let t = &self.vdevs.tops[top];
            let takes = if has_log { t.takes_log_blocks() } else { !t.is_log && t.usable() };
            if !takes {
                continue;
            }
            let sector = self.sector(top);
            let sectors = bytes.div_ceil(sector);
            let got = self.with_map(top, |m| {
                let run = m.alloc_run(sectors, sectors)?;
                m.claim(run.first * sector, sectors * sector).expect("a run just allocated holds no live byte");
                Some(run)
            });
            if let Some(run) = got {
                return Ok(Extent { vdev: top as u16, offset: run.first * sector, len: sectors * sector });
            }
        }
        Err(ZioError::NoSpace(bytes))
    }

    /// Marks an extent found at import (a log block) live.
    pub fn claim_extent(&self, e: &Extent) -> Result<(), ZioError> {
        self.check_extent(e)?;
        self.with_map(e.vdev as usize, |m| m.claim(e.offset, e.len)).map_err(|o| ZioError::Overlap {
            vdev: e.vdev,
            offset: o.offset,
            len: o.len,
        })
    }

    /// Frees an extent; like any free, it is reused only after the txg commits.
    pub fn free_extent(&self, e: &Extent) {
        self.with_map(e.vdev as usize, |m| m.free(e.offset, e.len));
    }

    fn check_extent(&self, e: &Extent) -> Result<(), ZioError> {
        let top = self.vdevs.tops.get(e.vdev as usize).ok_or(ZioError::NoSuchVdev { vdev: e.vdev })?;
        if e.len == 0
            || !e.offset.is_multiple_of(top.sector())
            || !e.len.is_multiple_of(top.sector())
            || e.offset + e.len > top.asize
        {
            return Err(ZioError::BadExtent { vdev: e.vdev, offset: e.offset, len: e.len });
        }
        Ok(())
    }

    /// Writes `data` at the start of extent `e` (padded to whole sectors, on every side
    /// of a mirror; data already a whole number of sectors is written without a copy).
    /// Not flushed.
    pub fn write_extent(&self, e: &Extent, data: &[u8]) -> Result<(), ZioError> {
        self.check_extent(e)?;
        let top = &self.vdevs.tops[e.vdev as usize];
        let len = (data.len() as u64).next_multiple_of(top.sector());
        assert!(len <= e.len, "log block larger than its extent");
        if len == data.len() as u64 {
            top.write(e.offset, data, IoClass::SyncWrite)?;
        } else {
            let mut buf = data.to_vec();
            buf.resize(len as usize, 0);
            top.write(e.offset, &buf, IoClass::SyncWrite)?;
        }
        self.note_write();
        Ok(())
    }

    /// The sector size of vdev `vdev`.
    pub fn sector_size(&self, vdev: u16) -> u64 {
        self.vdevs.tops[vdev as usize].sector()
    }

    /// Reads `len` bytes at the start of extent `e`, from a side whose bytes `verify`
    /// accepts (a mirror tries every side). The caller checks the content.
    pub fn read_extent(&self, e: &Extent, len: u64, verify: &dyn Fn(&[u8]) -> bool) -> Result<Vec<u8>, ZioError> {
        self.check_extent(e)?;
        let mut scratch = Vec::new();
        let range = self.vdevs.tops[e.vdev as usize].read(
            e.offset,
            len.min(e.len) as usize,
            verify,
            &mut scratch,
            ReadMode::Quiet,
            IoClass::SyncRead,
        )?;
        Ok(scratch[range].to_vec())
    }
}

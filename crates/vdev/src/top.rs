//! One top-level vdev: a single disk or a mirror, and its writes.
//!
//! Offsets given to a `TopVdev` are offsets into its data area (after label 0, before
//! label 1); the same offset is used on every side of a mirror.
//!
//! Every write of a leaf passes its admission gate (`IoQueue`) under the caller's I/O
//! class. A write longer than the vdev's `max_io` is cut into pieces of at most `max_io`,
//! each admitted on its own, so a sync I/O waits behind a piece in the device's queue,
//! never behind a whole 1 MiB run (a cloud volume, the loop device and the lab's pacer
//! all serve in arrival order).
//!
//! Owns: a top-level vdev's leaves, geometry (sector, alignment, data area), `max_io`,
//! and writes and flushes on every side (its reads are `reads.rs`'s; its life through add
//! and remove is `top_state.rs`'s).
//! Promises: a write succeeds if one side took it (a side that failed is faulted and no
//! longer written); no leaf I/O bypasses the leaf's queue.
//! Must never: write past the data area, write to a removed vdev, or start a thread for a
//! write of one piece (every hot-path write).
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};

use crate::leaf::{Leaf, LeafHealth};
use crate::queue::IoClass;
use crate::top_state::TopState;
use crate::{BlockDevice, VdevError, LABEL_SIZE};

/// First byte of the data area on every device: label 0 plus a reserve for later use.
pub const DATA_START: u64 = 2 * LABEL_SIZE;

/// The largest piece a write is cut into by default: ZFS's aggregation limit for
/// non-rotating devices (zfs_vdev_aggregation_limit_non_rotating). A 1 MiB run is then
/// eight I/Os, and a sync I/O behind one waits for 128 KiB, not 1 MiB (on the lab's
/// paced disk, 16 ms instead of 128 ms). `TopVdev::set_max_io` changes it (the pool
/// reads `TARN_VDEV_MAX_IO`).
pub const DEFAULT_MAX_IO: u64 = 128 << 10;

pub struct TopVdev {
    pub index: usize,
    pub guid: u64,
    pub ashift: u32,
    /// Bytes of data area, the same on every side.
    pub asize: u64,
    pub leaves: Vec<Leaf>,
    /// A separate intent-log device: only log blocks are allocated on it.
    pub is_log: bool,
    /// A `TopState` (see `top_state.rs`).
    pub(crate) state: AtomicU8,
    pub(crate) rotor: AtomicUsize,
    /// Writes are cut into pieces of at most this many bytes (a multiple of the sector).
    max_io: AtomicU64,
}

impl TopVdev {
    pub fn new(index: usize, guid: u64, ashift: u32, asize: u64, leaves: Vec<Leaf>) -> TopVdev {
        assert!(!leaves.is_empty(), "a top-level vdev has at least one device");
        let max_io = AtomicU64::new(Self::round_max_io(DEFAULT_MAX_IO, ashift));
        TopVdev {
            index,
            guid,
            ashift,
            asize,
            leaves,
            is_log: false,
            state: AtomicU8::new(TopState::Active as u8),
            rotor: AtomicUsize::new(0),
            max_io,
        }
    }

    /// The place of a removed log device (`TopConfig::Hole`): no device, no space.
    pub fn hole(index: usize, ashift: u32) -> TopVdev {
        let max_io = AtomicU64::new(Self::round_max_io(DEFAULT_MAX_IO, ashift));
        TopVdev {
            index,
            guid: 0,
            ashift,
            asize: 0,
            leaves: Vec::new(),
            is_log: true,
            state: AtomicU8::new(TopState::Removed as u8),
            rotor: AtomicUsize::new(0),
            max_io,
        }
    }

    /// The largest piece a write to this vdev is cut into.
    pub fn max_io(&self) -> u64 {
        self.max_io.load(Ordering::Relaxed)
    }

    /// Sets the largest piece a write is cut into (rounded down to whole sectors, at
    /// least one sector).
    pub fn set_max_io(&self, bytes: u64) {
        self.max_io.store(Self::round_max_io(bytes, self.ashift), Ordering::Relaxed);
    }

    fn round_max_io(bytes: u64, ashift: u32) -> u64 {
        let sector = 1u64 << ashift;
        (bytes & !(sector - 1)).max(sector)
    }

    /// Marks this top-level vdev as a separate log device.
    pub fn as_log(mut self) -> TopVdev {
        self.is_log = true;
        self
    }

    /// True if at least one side can be read and written (never for a removed vdev).
    pub fn usable(&self) -> bool {
        !self.is_removed() && self.leaves.iter().any(|l| l.health() == LeafHealth::Online)
    }

    /// Data-area size a device of `size` bytes offers, aligned to the sector size.
    pub fn asize_of(size: u64, ashift: u32) -> u64 {
        if size < 2 * LABEL_SIZE + DATA_START {
            return 0;
        }
        let end = Leaf::label1_offset(size);
        let raw = end.saturating_sub(DATA_START);
        raw & !((1u64 << ashift) - 1)
    }

    pub fn is_mirror(&self) -> bool {
        self.leaves.len() > 1
    }

    pub fn sector(&self) -> u64 {
        1 << self.ashift
    }

    /// The alignment a read of this vdev needs: the largest any usable side needs, at
    /// most a pool sector.
    pub fn read_align(&self) -> u64 {
        let align = self.leaves.iter().filter_map(|l| l.usable()).map(|d| d.read_align()).max().unwrap_or(1);
        assert!(align.is_power_of_two(), "a device's read alignment is a power of two, not {align}");
        align.min(self.sector())
    }
    /// Writes sector-aligned `data` at `offset` on every side as I/O of `class`, in
    /// pieces of at most `max_io`; succeeds if one side took every piece.
    pub fn write(&self, offset: u64, data: &[u8], class: IoClass) -> Result<(), VdevError> {
        let sector = self.sector();
        assert!(offset.is_multiple_of(sector) && (data.len() as u64).is_multiple_of(sector), "unaligned vdev write");
        assert!(offset + data.len() as u64 <= self.asize, "write past the end of vdev {}", self.index);
        assert!(!self.is_removed(), "write to removed vdev {}", self.index);
        let max_io = self.max_io() as usize;
        self.on_every_side(|leaf, dev| leaf.write_pieces(dev, class, data, DATA_START + offset, max_io))
    }

    pub fn flush(&self) -> Result<(), VdevError> {
        if self.is_removed() {
            return Ok(()); // holds nothing of the pool's any more
        }
        self.on_every_side(|leaf, dev| leaf.flush_dev(dev))
    }

    fn on_every_side(&self, op: impl Fn(&Leaf, &dyn BlockDevice) -> std::io::Result<()>) -> Result<(), VdevError> {
        let mut ok = false;
        let mut detail = String::new();
        for leaf in &self.leaves {
            let Some(dev) = leaf.usable() else { continue };
            match op(leaf, &**dev) {
                Ok(()) => ok = true,
                Err(e) => {
                    leaf.fault();
                    detail = format!("{}: {e}", leaf.path);
                }
            }
        }
        if ok {
            Ok(())
        } else {
            Err(VdevError::WriteFailed { top: self.index, detail })
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use parking_lot::Mutex;

    use super::*;
    use crate::reads::ReadMode;
    use crate::test_devices::{mirror, MemDevice};

    /// Records the (offset, length) of every write it takes.
    struct Recording {
        inner: Arc<MemDevice>,
        writes: Mutex<Vec<(u64, usize)>>,
    }

    impl BlockDevice for Recording {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
            self.inner.read_at(buf, offset)
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
            self.writes.lock().push((offset, buf.len()));
            self.inner.write_at(buf, offset)
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
        fn size(&self) -> u64 {
            self.inner.size()
        }
        fn path(&self) -> &Path {
            self.inner.path()
        }
    }

    #[test]
    fn a_long_write_is_cut_into_pieces_of_at_most_max_io() {
        let rec = Arc::new(Recording { inner: MemDevice::new("r"), writes: Mutex::new(Vec::new()) });
        let leaf = Leaf::new(1, "r".into(), Some(rec.clone() as Arc<dyn BlockDevice>));
        let top = TopVdev::new(0, 9, 12, TopVdev::asize_of(4 << 20, 12), vec![leaf]);
        top.set_max_io(16 << 10);
        let data: Vec<u8> = (0..100 << 10).map(|i| (i % 251) as u8).collect();
        top.write(8192, &data, IoClass::AsyncWrite).unwrap();
        let mut writes = rec.writes.lock().clone();
        writes.sort_unstable();
        let expected: Vec<(u64, usize)> =
            (0..7u64).map(|k| (DATA_START + 8192 + k * (16 << 10), if k < 6 { 16 << 10 } else { 4 << 10 })).collect();
        assert_eq!(writes, expected);
        let mut span = Vec::new();
        let range = top.read(8192, data.len(), &|_| true, &mut span, ReadMode::FirstGood, IoClass::SyncRead).unwrap();
        assert_eq!(&span[range], &data[..], "every piece landed where it belongs");
        let stats = top.leaves[0].queue().stats()[IoClass::AsyncWrite.index()];
        assert_eq!((stats.issued, stats.bytes), (7, 100 << 10));
    }

    #[test]
    fn max_io_is_whole_sectors() {
        let (tree, _) = mirror();
        tree.set_max_io(5000);
        assert_eq!(tree.tops[0].max_io(), 4096);
        tree.set_max_io(0);
        assert_eq!(tree.tops[0].max_io(), 4096);
        let fresh = TopVdev::new(0, 1, 9, 1 << 20, vec![Leaf::new(1, "/x".into(), None)]);
        assert_eq!(fresh.max_io(), DEFAULT_MAX_IO);
    }
}

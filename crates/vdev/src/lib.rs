//! vdev — the devices of a pool and their geometry.
//!
//! Owns: leaf devices (image files or block devices), top-level vdevs (a single disk or a
//! mirror), the pool's stripe across them, labels at both ends of every device, the
//! uberblock ring inside each label, per-device read/write/checksum error counters, I/O
//! counters (`iostat`), the txgs a mirror side missed (`dtl`), and each device's I/O
//! queue: admission by priority class (`IoClass`), as ZFS's vdev_queue.
//!
//! Promises: every write is sector-aligned (`ashift`); a mirror read returns only bytes
//! the caller's verifier accepts, and rewrites a bad side from a good one; a side that
//! missed a block's txg is not trusted for it; labels and uberblocks are checksummed and
//! versioned, an unknown version is refused, and so is a label field out of range.
//!
//! Must never: interpret block contents (that is the io pipeline's job), or overwrite a
//! label's uberblock slot that holds the newest committed txg (an uberblock's txg must
//! be above every one written before it: asserted).

mod device;
mod dtl;
mod error;
pub mod iostat;
mod label;
mod leaf;
mod queue;
mod reads;
mod slots;
#[cfg(test)]
mod test_devices;
mod top;
mod top_state;
mod tree;

pub use device::{peek_labels, BlockDevice, FileDevice};
pub use dtl::UNKNOWN_BIRTH;
pub use error::VdevError;
pub use iostat::IoSnapshot;
pub use label::{
    slot_count, BadField, Label, LabelDecode, LabelState, TopConfig, TreeConfig, Uberblock, ASHIFT_RANGE, LABEL_SIZE,
    LABEL_VERSION, UBERBLOCK_VERSION,
};
pub use leaf::{Leaf, LeafHealth, LeafStatus};
pub use queue::{async_write_limit, ClassLimits, ClassStats, IoClass, IoPermit, IoQueue, QueueConfig, MAX_ACTIVE};
pub use reads::{ReadMode, SidesRead};
pub use slots::{Slots, MAX_TOPS};
pub use top::{TopVdev, DATA_START, DEFAULT_MAX_IO};
pub use top_state::TopState;
pub use tree::{read_device_labels, DeviceLabels, SyncHold, VdevTree};

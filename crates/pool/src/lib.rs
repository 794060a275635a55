//! pool — the storage pool (ZFS's spa): creates, imports and exports pools, owns the
//! vdev tree, the io pipeline, the txg engine and the datasets, and commits each txg.
//!
//! Promises: a txg commits by writing all its blocks, flushing, then the uberblock and
//! flushing again, so a crash at any instant leaves the last committed txg intact; import
//! picks the newest uberblock whose whole root verifies; freed space returns only after
//! the freeing txg is durable; devices of another pool, unknown versions, and missing
//! devices are refused with a message that names them.
//!
//! Must never: write an uberblock before the blocks it points to are flushed, or import
//! a device whose label it cannot read.

mod history;
mod mos;
mod pool;
mod scan;

pub use history::{HistoryEntry, HistoryError, HISTORY_MAX_BYTES, HISTORY_VERSION};
pub use mos::{Mos, MOS_VERSION};
pub use pool::{
    CreateOptions, DatasetInfo, ImportOptions, Pool, PoolError, PoolStats, PoolStatus, PropRow, ScrubResult, TopStatus,
    VdevSpec,
};
pub use scan::{discover, Discovered};

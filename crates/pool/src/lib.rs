//! pool — the storage pool (ZFS's spa): creates, imports and exports pools, owns the
//! vdev tree, the io pipeline, the txg engine and the datasets, and commits each txg.
//!
//! Owns: the pool's lifecycle and labels, the MOS (the pool's root block), the txg
//! commit, the dataset directory and properties, free space at import (rebuilt from the
//! tree), status, scrub, and intent-log replay.
//!
//! Promises: a txg commits by writing all its blocks, flushing, then the uberblock and
//! flushing again, so a crash at any instant leaves the last committed txg intact; import
//! picks the newest uberblock whose whole root verifies; freed space returns only after
//! the freeing txg is durable; devices of another pool, unknown versions, and missing
//! devices are refused with a message that names them.
//!
//! Must never: write an uberblock before the blocks it points to are flushed, or import
//! a device whose label it cannot read.
//!
//! Rooms: `pool` (the handle and the state the rooms share), `lifecycle` (create, import,
//! export, destroy), `devices` (log devices added and removed while the pool is open), `claim` (the import walk), `commit` (the txg sync; its header is the
//! theory of operation of a commit), `mos`, `datasets`, `props`, `space`, `status`,
//! `iostat`, `snapshots` (snapshots and clones; its header is their theory of operation),
//! `replication` (the narrow API of the send stream, crate `tarn-send`: snapshots as
//! views, the hidden receiving dataset and the switch at a stream's END), `scrub` (scrub and resilver in the background; its header is the theory of
//! operation of a scan) and `scanwalk` (one slice of it), `errlog` (permanent errors and
//! the files they hit), `replay`, `scan` (finding pools on devices), `history` (the
//! command history kept in the MOS), `error`.

mod cache_blocks;
mod claim;
mod commit;
mod datasets;
mod devices;
mod errlog;
mod error;
mod history;
mod iostat;
mod lifecycle;
mod mos;
mod pool;
mod pool_props;
mod props;
mod replay;
mod replication;
mod scan;
mod scanwalk;
mod scrub;
mod snapshots;
mod space;
mod status;

pub use datasets::{check_name, DatasetInfo};
pub use devices::{DeviceClass, Removed};
pub use errlog::ErrKey;
pub use error::{ClaimError, CommitError, ImportError, PoolError, PropError, RootError};
pub use history::{HistoryEntry, HistoryError, HISTORY_MAX_BYTES, HISTORY_VERSION};
pub use iostat::{LeafIostat, PoolIostat, VdevIostat};
pub use lifecycle::{CreateOptions, ImportOptions, VdevSpec};
pub use mos::{HexError, Mos, MosError, OriginRecord, RecordError, SnapRecord, MOS_VERSION};
pub use pool::Pool;
pub use pool_props::PoolPropRow;
pub use props::PropRow;
pub use replication::{Received, SnapshotRef, RECV_SUFFIX, TOKEN_PROP};
pub use scan::{discover, member_of, Discovered, Discovery, Unusable};
pub use scrub::{Bookmark, ScanKind, ScanPace, ScanRecord, ScanState, ScanStatus, ScrubResult, DEFAULT_SCAN_RATE};
pub use snapshots::{split_snapshot_name, SnapshotInfo};
pub use status::{PoolStats, PoolStatus, TopStatus};
/// The binary's allocator tells the engine how to give free memory back to the OS.
pub use tarn_arc::{add_untouched, set_alloc_size, set_allocated_bytes, set_memory_release, sub_untouched_bytes};
/// A reclaim section (`Pool::reading`): what a read through a snapshot holds.
pub use tarn_objects::Reading;
pub use tarn_vdev::{IoSnapshot, LeafHealth, VdevError};

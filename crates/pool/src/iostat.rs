//! What `tarn pool iostat` reads: capacity and the I/O counters of every device, per
//! top-level vdev and per leaf, at one moment (the command shows differences between
//! two of them, as `zpool iostat` does).
//!
//! Owns: `PoolIostat`, `VdevIostat`, `LeafIostat` — plain data, serialisable, so the
//! process holding the pool can hand them to another over the control socket.
//!
//! Promises: taking a snapshot reads counters only (no lock the I/O path takes, no
//! device I/O); a vdev's counters are the sum of its leaves'; `elapsed_ns` counts from
//! the pool's open in the process that holds it, so two snapshots of one process give
//! an interval.
//!
//! Must never: reset a counter (`pool clear` resets error counts, not these).
use tarn_vdev::iostat::now_ns;
use tarn_vdev::{IoSnapshot, TopVdev};

use crate::pool::Pool;

/// One device.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct LeafIostat {
    pub path: String,
    pub io: IoSnapshot,
}

/// One top-level vdev (a disk, or a mirror and its sides).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct VdevIostat {
    /// `mirror-N`, or the disk's path.
    pub name: String,
    /// A separate intent-log device.
    pub log: bool,
    pub alloc: u64,
    pub free: u64,
    /// The sum of its leaves.
    pub io: IoSnapshot,
    pub leaves: Vec<LeafIostat>,
}

/// The whole pool at one moment.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct PoolIostat {
    pub pool: String,
    /// Nanoseconds since the pool was opened by the process that holds it.
    pub elapsed_ns: u64,
    /// Data vdevs only, as `zpool iostat` (log devices are listed apart).
    pub alloc: u64,
    pub free: u64,
    /// The sum of the data vdevs.
    pub io: IoSnapshot,
    pub vdevs: Vec<VdevIostat>,
}

impl Pool {
    /// Capacity and I/O counters of the pool and of each of its devices.
    pub fn iostat(&self) -> PoolIostat {
        let zio = &self.inner.ctx.zio;
        let vdevs: Vec<VdevIostat> = zio
            .vdevs
            .tops
            .iter()
            .filter(|top| !top.is_removed())
            .map(|top| {
                let (total, free) = zio.top_space(top.index);
                let leaves: Vec<LeafIostat> =
                    top.leaves.iter().map(|l| LeafIostat { path: l.path.clone(), io: l.iostat() }).collect();
                VdevIostat {
                    name: vdev_name(top),
                    log: top.is_log,
                    alloc: total.saturating_sub(free),
                    free,
                    io: leaves.iter().fold(IoSnapshot::default(), |sum, l| sum.add(&l.io)),
                    leaves,
                }
            })
            .collect();
        let (_, alloc, free) = zio.space();
        let io = vdevs.iter().filter(|v| !v.log).fold(IoSnapshot::default(), |sum, v| sum.add(&v.io));
        PoolIostat {
            pool: self.inner.name.clone(),
            elapsed_ns: now_ns().saturating_sub(self.inner.opened_ns),
            alloc,
            free,
            io,
            vdevs,
        }
    }
}

/// The name `status` and `iostat` give a top-level vdev.
pub(crate) fn vdev_name(top: &TopVdev) -> String {
    if top.is_mirror() {
        format!("mirror-{}", top.index)
    } else {
        top.leaves[0].path.clone()
    }
}

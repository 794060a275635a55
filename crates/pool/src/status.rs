//! What the pool says about itself: status (health of every device, space, the last
//! committed txg, why it is suspended, the scan, the data errors and with `-v` the files
//! they hit), the engine counters (`tarn stats`, with the throttle's and each I/O
//! class's), the run-time tunables (ARC budget, `dirty_max`), and clearing the error
//! counters and the error log.
//!
//! Owns: `PoolStatus`, `TopStatus`, `PoolStats` — the shapes the CLI and the stats
//! publisher serialise.
//!
//! Promises: asking never changes the pool (status does not join the open txg, so it
//! does not make an empty txg commit); the state is DEGRADED when a device is faulted or
//! unavailable, SUSPENDED when a commit failed; `clear_errors` persists the cleared
//! counters and the emptied error log with a commit.
//!
//! Must never: take a lock the sync thread holds for long (status is called while the
//! pool is busy), or report a device healthy that is not.
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use tarn_vdev::{IoClass, LeafHealth, LeafStatus, TopVdev, VdevTree};

use crate::datasets::subtree_space;
use crate::error::PoolError;
use crate::iostat::vdev_name;
use crate::pool::{now_secs, Pool};
use crate::scrub::ScanStatus;

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct TopStatus {
    pub name: String,
    /// A separate intent-log device.
    pub log: bool,
    pub health: String,
    pub leaves: Vec<LeafStatus>,
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct PoolStatus {
    pub name: String,
    pub guid: u64,
    pub state: String,
    pub txg: u64,
    pub size: u64,
    pub allocated: u64,
    pub free: u64,
    pub ashift: u32,
    pub vdevs: Vec<TopStatus>,
    pub suspended: Option<String>,
    /// The last scan, or the one under way.
    #[serde(default)]
    pub scan: Option<ScanStatus>,
    /// Blocks no copy of which verified (the error log).
    #[serde(default)]
    pub data_errors: u64,
    /// The files those blocks belong to (`status_verbose` only).
    #[serde(default)]
    pub error_files: Vec<String>,
    /// Cache devices (L2ARC): state, what happened at import, counters.
    #[serde(default)]
    pub caches: Vec<tarn_l2arc::CacheDevStatus>,
    /// Set only when the pool is nearly full (`nearly_full`): the bytes only snapshots hold, so
    /// `status` can say a write's ENOSPC comes from history kept, and what frees it.
    #[serde(default)]
    pub snapshot_space: Option<u64>,
    /// What import's intent-log replay may have missed (records it could not apply, a
    /// log that ended early, a missing log device); None when replay was whole.
    #[serde(default)]
    pub replay_trouble: Option<String>,
}

/// Under 5% of the pool left for datasets (free space less the reserve and dirty data):
/// the point where `status` explains what holds the space (a write can fail with ENOSPC
/// soon after, and the reason must be one command away).
fn nearly_full(size: u64, available: u64) -> bool {
    available.saturating_mul(20) < size
}

/// Engine counters of one pool (what `tarn stats` shows).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct PoolStats {
    pub pool: String,
    pub time: u64,
    pub arc: tarn_arc::ArcSnapshot,
    pub zil: BTreeMap<String, u64>,
    pub txg: BTreeMap<String, u64>,
    pub io: BTreeMap<String, u64>,
    /// Live bytes against the bytes of the sectors holding them (packing efficiency).
    #[serde(default)]
    pub space: BTreeMap<String, u64>,
    /// The L2ARC's counters (`L2Snapshot::fields`); empty without cache devices.
    #[serde(default)]
    pub l2arc: BTreeMap<String, u64>,
}

/// Splits `other_size` (resident bytes the budget does not account for) by what the
/// allocator has handed out (`allocated`, when the binary gives it): the live part is
/// `heap_other_size`, the rest `allocator_slack_size`; the two always sum to `other_size`.
/// Allocated bytes not yet touched are not resident (a zeroed buffer is demand-paged), so
/// the live part is an upper bound, clamped to `other_size`, and the slack a lower one;
/// `untouched`, allocations known never to be written (FUSE workers' buffers sized for
/// requests that never come: 19 MiB of each one's 20 MiB slot), are left out.
fn split_other(a: &mut tarn_arc::ArcSnapshot, allocated: Option<u64>, untouched: u64) {
    let Some(allocated) = allocated else { return };
    let live = allocated.saturating_sub(untouched);
    a.heap_other_size = live.saturating_sub(a.accounted_size).min(a.other_size);
    a.allocator_slack_size = a.other_size - a.heap_other_size;
}

fn get(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

/// Per I/O class, summed over every device: I/Os issued, bytes, how many waited for
/// admission, and the mean wait and time in the device (`sync_read_issued` …).
fn io_class_counters(vdevs: &VdevTree) -> impl Iterator<Item = (String, u64)> {
    let stats = vdevs.queue_stats();
    IoClass::ALL.into_iter().flat_map(move |class| {
        let c = stats[class.index()];
        let name = class.name();
        [
            (format!("{name}_issued"), c.issued),
            (format!("{name}_bytes"), c.bytes),
            (format!("{name}_waited"), c.waited),
            (format!("{name}_wait_us"), c.wait_us),
            (format!("{name}_avg_wait_us"), c.avg_wait_us()),
            (format!("{name}_avg_device_us"), c.avg_device_us()),
        ]
    })
}

fn top_status(top: &TopVdev) -> TopStatus {
    let leaves: Vec<LeafStatus> = top.leaves.iter().map(|l| l.status()).collect();
    let online = leaves.iter().filter(|l| l.health == LeafHealth::Online).count();
    let health = if online == leaves.len() {
        "ONLINE"
    } else if online > 0 {
        "DEGRADED"
    } else {
        "UNAVAIL"
    };
    TopStatus { name: vdev_name(top), log: top.is_log, health: health.into(), leaves }
}

/// Device reads and bytes by read kind: `reads_<kind>`, `read_bytes_<kind>`.
fn per_kind_reads(s: &tarn_zio::ZioStats) -> Vec<(String, u64)> {
    tarn_zio::ReadKind::ALL
        .into_iter()
        .flat_map(|k| {
            [
                (format!("reads_{}", k.name()), s.kind_reads.get(k)),
                (format!("read_bytes_{}", k.name()), s.kind_read_bytes.get(k)),
            ]
        })
        .collect()
}

impl Pool {
    pub fn status(&self) -> PoolStatus {
        let zio = &self.inner.ctx.zio;
        let (size, allocated, free) = zio.space();
        // Not `hold(0)`: joining the open txg would make it commit an empty txg.
        let suspended = self.inner.ctx.txg.suspended().map(|e| e.to_string());
        let vdevs: Vec<TopStatus> = zio.vdevs.tops.iter().filter(|t| !t.is_removed()).map(top_status).collect();
        let degraded = vdevs.iter().any(|t| t.health != "ONLINE");
        let state = if suspended.is_some() {
            "SUSPENDED"
        } else if degraded {
            "DEGRADED"
        } else {
            "ONLINE"
        };
        PoolStatus {
            name: self.inner.name.clone(),
            guid: self.inner.guid,
            state: state.into(),
            txg: self.inner.ctx.txg.synced(),
            size,
            allocated,
            free,
            ashift: zio.vdevs.ashift,
            vdevs,
            suspended,
            scan: self.scan(),
            data_errors: self.data_errors(),
            error_files: Vec::new(),
            caches: self.cache_status(),
            snapshot_space: nearly_full(size, self.available()).then(|| self.snapshot_space()),
            replay_trouble: self.replay_trouble(),
        }
    }

    /// The cache devices as status shows them; a dropped one's note says what to do.
    fn cache_status(&self) -> Vec<tarn_l2arc::CacheDevStatus> {
        let Some(l2) = self.inner.ctx.zio.l2arc() else { return Vec::new() };
        let name = &self.inner.name;
        let mut caches = l2.devices();
        for c in caches.iter_mut().filter(|c| c.state == tarn_l2arc::DevState::Faulted) {
            let why = c.note.take().unwrap_or_default();
            c.note = Some(format!(
                "{why}; `tarn pool clear {name}` tries it again, `tarn pool remove {name} {}` takes it out",
                c.path
            ));
        }
        caches
    }

    /// `status` with the files that have permanent errors, by name (`zpool status -v`).
    pub fn status_verbose(&self) -> PoolStatus {
        let mut status = self.status();
        status.error_files = self.error_files();
        status.data_errors = self.data_errors();
        status
    }

    /// Every engine counter, for `tarn stats` and Prometheus.
    pub fn stats(&self) -> PoolStats {
        let zio = &self.inner.ctx.zio;
        let z = &self.inner.zil.stats;
        let s = &zio.stats;
        let t = self.inner.ctx.txg.stats();
        PoolStats {
            pool: self.inner.name.clone(),
            time: now_secs(),
            arc: {
                let mut a = zio.arc.snapshot();
                a.hot_copy_hits = get(&zio.hot.hits);
                a.hot_copies_size = zio.hot.size();
                a.accounted_size += a.hot_copies_size;
                // Where the rest of the process's memory goes is not the budget's.
                a.rss = tarn_arc::resident_bytes();
                a.other_size = a.rss.saturating_sub(a.accounted_size);
                split_other(&mut a, tarn_arc::allocated_bytes(), tarn_arc::untouched_bytes());
                a
            },
            zil: BTreeMap::from([
                ("commits".to_string(), get(&z.commits)),
                ("blocks_written".to_string(), get(&z.blocks_written)),
                ("bytes_written".to_string(), get(&z.bytes_written)),
                ("records_written".to_string(), get(&z.records_written)),
                ("indirect_records".to_string(), get(&z.indirect_records)),
                ("copied_bytes".to_string(), get(&z.copied_bytes)),
                ("commit_us".to_string(), get(&z.commit_us)),
                ("max_commit_us".to_string(), get(&z.max_commit_us)),
                ("fallback_syncs".to_string(), get(&z.fallback_syncs)),
                ("settle_waits".to_string(), get(&z.settle_waits)),
            ]),
            txg: BTreeMap::from([
                ("open".to_string(), t.open),
                ("synced".to_string(), t.synced),
                ("dirty_open_bytes".to_string(), t.dirty_open),
                ("dirty_syncing_bytes".to_string(), t.dirty_syncing),
                ("dirty_max_bytes".to_string(), t.dirty_max),
                ("dirty_sync_bytes".to_string(), t.dirty_sync),
                ("delayed_writes".to_string(), t.delayed_writes),
                ("delay_us".to_string(), t.delay_us),
                ("dirty_max_waits".to_string(), t.dirty_max_waits),
                ("dirty_max_wait_us".to_string(), t.dirty_max_wait_us),
                ("dirty_limit_bytes".to_string(), t.dirty_limit),
                ("write_rate_bytes_per_sec".to_string(), t.write_rate),
                ("syncs".to_string(), t.syncs),
                ("sync_us".to_string(), t.sync_us),
                ("max_sync_us".to_string(), t.max_sync_us),
                ("last_sync_us".to_string(), t.last_sync_us),
                ("last_sync_bytes".to_string(), t.last_sync_bytes),
                ("quiesce_us".to_string(), t.quiesce_us),
                ("max_quiesce_us".to_string(), t.max_quiesce_us),
            ]),
            l2arc: zio
                .l2arc()
                .map(|l2| l2.snapshot().fields().into_iter().map(|(k, v)| (k.to_string(), v)).collect())
                .unwrap_or_default(),
            space: {
                let (sectors, live) = zio.occupancy();
                // What the datasets' blocks take as of the last commit (zfs `used`): without
                // the live intent log, frees not yet released, or dirty data.
                let (used, logical) = subtree_space(&self.inner.datasets.read(), &self.inner.name);
                BTreeMap::from([
                    ("allocated_sector_bytes".to_string(), sectors),
                    ("live_bytes".to_string(), live),
                    ("datasets_used_bytes".to_string(), used),
                    ("datasets_logical_bytes".to_string(), logical),
                    ("map_memory_bytes".to_string(), zio.space_map_bytes()),
                ])
            },
            io: io_class_counters(&zio.vdevs)
                .chain([
                    ("blocks_written".to_string(), get(&s.blocks_written)),
                    ("logical_bytes_written".to_string(), get(&s.logical_bytes_written)),
                    ("physical_bytes_written".to_string(), get(&s.physical_bytes_written)),
                    ("runs_written".to_string(), get(&s.runs_written)),
                    ("blocks_read".to_string(), get(&s.blocks_read)),
                    ("physical_bytes_read".to_string(), get(&s.physical_bytes_read)),
                    ("device_bytes_read".to_string(), get(&s.device_bytes_read)),
                    ("checksum_errors".to_string(), get(&s.checksum_errors)),
                ])
                .chain(tarn_zio::BlockType::ALL.map(|t| (format!("written_bytes_{}", t.name()), s.written_bytes(t))))
                .chain(per_kind_reads(s))
                .collect(),
        }
    }

    /// ARC counters and sizes (arcstats).
    pub fn arc_stats(&self) -> tarn_arc::ArcSnapshot {
        self.inner.ctx.zio.arc.snapshot()
    }

    /// Changes the write throttle's `dirty_max` at run time (`tarn tune dirty_max=`);
    /// the early-sync threshold follows it.
    pub fn set_dirty_max(&self, bytes: u64) {
        self.inner.ctx.txg.set_dirty_max(bytes);
    }

    /// Sets an L2ARC tunable (`l2arc_write_max`…) at run time (`tarn tune`).
    pub fn set_l2arc_tunable(&self, name: &str, value: u64) -> Result<(), PoolError> {
        let l2 = self.inner.ctx.zio.l2arc().ok_or_else(|| PoolError::NoCacheDevices(self.inner.name.clone()))?;
        Ok(l2.tunables().set(name, value)?)
    }

    /// The L2ARC tunables and their values (empty without cache devices).
    pub fn l2arc_tunables(&self) -> Vec<(&'static str, u64)> {
        self.inner.ctx.zio.l2arc().map(|l2| l2.tunables().list()).unwrap_or_default()
    }

    /// Changes the ARC budget at run time. A smaller one is given back at once: blocks and
    /// decoded metadata are evicted, `dirty_max` is lowered to its share of the budget
    /// (`DIRTY_SHARE_OF_ARC`), and then the allocator is asked to return its free memory
    /// to the OS (`tarn_arc::set_memory_release`).
    pub fn set_arc_max(&self, bytes: u64) {
        // Dirty data lives inside the budget: a smaller budget lowers `dirty_max` to its
        // share of it, as at open (a larger one leaves `dirty_max` as it is).
        let txg = &self.inner.ctx.txg;
        let config = txg.config();
        let within = crate::pool::dirty_within_budget(config.clone(), bytes);
        if within.dirty_max < config.dirty_max {
            txg.set_dirty_max(within.dirty_max);
        }
        self.inner.ctx.zio.set_cache_budget(bytes);
        for (_, ds) in self.inner.datasets.read().values() {
            ds.trim_cache();
        }
        tarn_arc::release_memory();
    }

    /// Resets every device's error counters and empties the error log (`zpool clear`);
    /// blocks still damaged are found again by the next scrub or read. Cache devices
    /// dropped (`FAULTED`, or `UNAVAIL` with `cacheautoreplace=on`) are opened again,
    /// their rings started afresh (`L2Arc::reattach`).
    pub fn clear_errors(&self) -> Result<(), PoolError> {
        for leaf in self.inner.ctx.zio.vdevs.leaves() {
            leaf.clear_counters();
        }
        self.inner.ctx.zio.take_failed_reads();
        self.inner.errlog.lock().clear();
        // As `zpool clear` brings faulted devices back: dropped cache devices try again.
        if let Some(l2) = self.inner.ctx.zio.l2arc() {
            l2.reattach(self.cache_autoreplace());
        }
        self.force_txg()
    }
}

#[cfg(test)]
mod tests {
    use super::split_other;

    fn snapshot(rss: u64, accounted: u64) -> tarn_arc::ArcSnapshot {
        tarn_arc::ArcSnapshot {
            rss,
            accounted_size: accounted,
            other_size: rss.saturating_sub(accounted),
            ..Default::default()
        }
    }

    #[test]
    fn the_unaccounted_memory_splits_into_live_allocations_and_the_allocators_slack() {
        let mut a = snapshot(300, 200);
        split_other(&mut a, Some(260), 0);
        assert_eq!((a.heap_other_size, a.allocator_slack_size), (60, 40));

        // The budget counts more than is allocated (dirty data is told in steps): all slack.
        let mut a = snapshot(300, 200);
        split_other(&mut a, Some(150), 0);
        assert_eq!((a.heap_other_size, a.allocator_slack_size), (0, 100));

        // Allocated beyond resident (pages not touched yet): never more than other_size.
        let mut a = snapshot(300, 200);
        split_other(&mut a, Some(400), 0);
        assert_eq!((a.heap_other_size, a.allocator_slack_size), (100, 0));

        // 128 MiB of FUSE buffers, of which the kernel touches 1 MiB each: not live. Left
        // in, they would make every unaccounted byte look live and the slack always 0.
        let mut a = snapshot(300, 200);
        split_other(&mut a, Some(380), 120);
        assert_eq!((a.heap_other_size, a.allocator_slack_size), (60, 40));

        // No allocator statistics: nothing split.
        let mut a = snapshot(300, 200);
        split_other(&mut a, None, 0);
        assert_eq!((a.heap_other_size, a.allocator_slack_size), (0, 0));
    }
}

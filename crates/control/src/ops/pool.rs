//! Commands on the pool as a whole: `pool status|scrub|clear|export|destroy|add|remove|
//! history|iostat`, `stats`, `tune`.
//!
//! Owns: what each does to the pool, and the checks before a pool is given up (`destroy`
//! of a pool holding data needs `-f`).
//! Promises: export and destroy change nothing themselves: they ask for a [`Finish`],
//! carried out by whoever holds the pool once its datasets are unmounted.
//! Must never: tune a pool that has no running cache, or consume the pool.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tarn_dataset::props::format_size;
use tarn_pool::{
    DeviceClass, HistoryEntry, PoolIostat, PoolPropRow, PoolStats, PoolStatus, Removed, ScanStatus, VdevSpec,
};

use crate::error::OpError;
use crate::op::{Finish, Held, Op};

/// `tarn pool status [-v]` and `pool list`.
#[derive(Serialize, Deserialize)]
pub struct Status {
    /// `-v`: name the files the data errors hit (walks the error log's blocks).
    #[serde(default)]
    pub verbose: bool,
}

impl Op for Status {
    const NAME: &'static str = "pool.status";
    type Output = PoolStatus;
    fn run(self, on: &Held<'_>) -> Result<PoolStatus, OpError> {
        Ok(if self.verbose { on.pool.status_verbose() } else { on.pool.status() })
    }
}

/// `tarn pool scrub` on a held pool: starts a scrub in the background of the process
/// that holds it (yielding to the database's I/O; `Pool::scrub_start`). A scrub cut short
/// resumes; a resilver under way is refused (it must come first: wait for it).
#[derive(Serialize, Deserialize)]
pub struct ScrubStart {}

impl Op for ScrubStart {
    const NAME: &'static str = "pool.scrub_start";
    const CHANGES_POOL: bool = true;
    type Output = ();
    fn run(self, on: &Held<'_>) -> Result<(), OpError> {
        // A scan runs on a thread of the holder: a pool this command opened itself would
        // close (and cut the scan short) as soon as the command ends.
        on.daemon("a scrub in the background needs a process that holds it: `tarn pool scrub` (in the foreground) or `tarn pool scrub -d`")?;
        Ok(on.pool.scrub_start()?)
    }
}

/// `tarn pool scrub -s`: stops the scrub under way (recorded as canceled).
#[derive(Serialize, Deserialize)]
pub struct ScrubStop {}

impl Op for ScrubStop {
    const NAME: &'static str = "pool.scrub_stop";
    const CHANGES_POOL: bool = true;
    type Output = ();
    fn run(self, on: &Held<'_>) -> Result<(), OpError> {
        Ok(on.pool.scrub_stop()?)
    }
}

/// What `tarn pool scrub` follows: the scan record and whether a thread runs it.
#[derive(Serialize, Deserialize)]
pub struct Scan {}

impl Op for Scan {
    const NAME: &'static str = "pool.scan";
    type Output = Option<ScanStatus>;
    fn run(self, on: &Held<'_>) -> Result<Option<ScanStatus>, OpError> {
        Ok(on.pool.scan())
    }
}

/// `tarn pool iostat`: the pool's I/O counters since it was opened.
#[derive(Serialize, Deserialize)]
pub struct Iostat {}

impl Op for Iostat {
    const NAME: &'static str = "pool.iostat";
    type Output = PoolIostat;
    fn run(self, on: &Held<'_>) -> Result<PoolIostat, OpError> {
        Ok(on.pool.iostat())
    }
}

/// `tarn pool clear`: resets the device error counters.
#[derive(Serialize, Deserialize)]
pub struct Clear {}

impl Op for Clear {
    const NAME: &'static str = "pool.clear";
    const CHANGES_POOL: bool = true;
    type Output = ();
    fn run(self, on: &Held<'_>) -> Result<(), OpError> {
        Ok(on.pool.clear_errors()?)
    }
}

/// `tarn pool export [-f]`: the mounts are unmounted (`-f`: even with files open, whose
/// I/O then fails), then the pool is committed, marked exported and closed.
#[derive(Serialize, Deserialize)]
pub struct Export {
    pub force: bool,
}

impl Op for Export {
    const NAME: &'static str = "pool.export";
    const CHANGES_POOL: bool = true;
    const RELEASES_POOL: bool = true;
    type Output = ();
    fn run(self, on: &Held<'_>) -> Result<(), OpError> {
        on.finish_with(Finish::Export { force: self.force });
        Ok(())
    }
}

/// `tarn pool destroy [-f]`: a pool holding data needs `-f` (which also unmounts busy
/// datasets).
#[derive(Serialize, Deserialize)]
pub struct Destroy {
    pub force: bool,
}

impl Op for Destroy {
    const NAME: &'static str = "pool.destroy";
    const CHANGES_POOL: bool = true;
    const RELEASES_POOL: bool = true;
    type Output = ();
    fn run(self, on: &Held<'_>) -> Result<(), OpError> {
        let name = on.pool.name();
        if !self.force && on.pool.holds_data()? {
            let datasets = on.pool.dataset_names().len();
            let used: u64 = on.pool.datasets_info().iter().filter(|d| d.name == name).map(|d| d.used).sum();
            return Err(OpError::Refused(format!(
                "pool '{name}' holds data ({datasets} datasets, {} used); use -f to destroy it",
                format_size(used)
            )));
        }
        on.finish_with(Finish::Destroy { force: self.force });
        Ok(())
    }
}

/// A vdev as the command line gave it (the wire form of `VdevSpec`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Vdev {
    Disk(PathBuf),
    Mirror(Vec<PathBuf>),
}

impl From<&Vdev> for VdevSpec {
    fn from(v: &Vdev) -> VdevSpec {
        match v {
            Vdev::Disk(p) => VdevSpec::Disk(p.clone()),
            Vdev::Mirror(ps) => VdevSpec::Mirror(ps.clone()),
        }
    }
}

/// `tarn pool add POOL CLASS DEV…`: devices beside the data vdevs (log or cache
/// devices), added to the open pool wherever it is held (`Pool::add_devices`).
/// Returns the paths of the devices added.
#[derive(Serialize, Deserialize)]
pub struct Add {
    pub class: DeviceClass,
    pub vdevs: Vec<Vdev>,
    pub force: bool,
    pub size: Option<u64>,
}

impl Op for Add {
    const NAME: &'static str = "pool.add";
    const CHANGES_POOL: bool = true;
    const DURABLE_HISTORY: bool = true;
    type Output = Vec<PathBuf>;
    fn run(self, on: &Held<'_>) -> Result<Vec<PathBuf>, OpError> {
        let specs: Vec<VdevSpec> = self.vdevs.iter().map(VdevSpec::from).collect();
        Ok(on.pool.add_devices(self.class, &specs, self.force, self.size)?)
    }
}

/// `tarn pool remove POOL DEV`: a log device leaves the open pool once the intent log no
/// longer needs it, a cache device once its reads under way finish
/// (`Pool::remove_device`); a data vdev is refused.
#[derive(Serialize, Deserialize)]
pub struct Remove {
    /// A device path, or a vdev name as `status` shows it (`mirror-2`).
    pub device: String,
}

impl Op for Remove {
    const NAME: &'static str = "pool.remove";
    const CHANGES_POOL: bool = true;
    const DURABLE_HISTORY: bool = true;
    type Output = Removed;
    fn run(self, on: &Held<'_>) -> Result<Removed, OpError> {
        Ok(on.pool.remove_device(&self.device)?)
    }
}

/// `tarn pool set PROP=VALUE… POOL`: pool properties (`cacheautoreplace`), applied in
/// order; the first refused stops it.
#[derive(Serialize, Deserialize)]
pub struct PoolSet {
    pub assignments: Vec<(String, String)>,
}

impl Op for PoolSet {
    const NAME: &'static str = "pool.set";
    const CHANGES_POOL: bool = true;
    type Output = ();
    fn run(self, on: &Held<'_>) -> Result<(), OpError> {
        for (k, v) in &self.assignments {
            on.pool.set_pool_property(k, v)?;
        }
        Ok(())
    }
}

/// `tarn pool get PROP[,PROP]|all POOL` (`props: None` is `all`).
#[derive(Serialize, Deserialize)]
pub struct PoolGet {
    pub props: Option<Vec<String>>,
}

impl Op for PoolGet {
    const NAME: &'static str = "pool.get";
    type Output = Vec<PoolPropRow>;
    fn run(self, on: &Held<'_>) -> Result<Vec<PoolPropRow>, OpError> {
        let Some(props) = self.props else { return Ok(on.pool.get_pool_properties(None)?) };
        let mut rows = Vec::new();
        for p in &props {
            rows.extend(on.pool.get_pool_properties(Some(p))?);
        }
        Ok(rows)
    }
}

/// `tarn pool history`.
#[derive(Serialize, Deserialize)]
pub struct History {}

impl Op for History {
    const NAME: &'static str = "pool.history";
    type Output = Vec<HistoryEntry>;
    fn run(self, on: &Held<'_>) -> Result<Vec<HistoryEntry>, OpError> {
        Ok(on.pool.history()?)
    }
}

/// `tarn stats`: every engine counter.
#[derive(Serialize, Deserialize)]
pub struct Stats {}

impl Op for Stats {
    const NAME: &'static str = "pool.stats";
    type Output = PoolStats;
    fn run(self, on: &Held<'_>) -> Result<PoolStats, OpError> {
        Ok(on.pool.stats())
    }
}

/// `tarn tune POOL arc_max=SIZE` or `dirty_max=SIZE`: the ARC budget or the write
/// throttle's dirty_max of a running pool (each in bytes; `None` leaves it as it is).
#[derive(Serialize, Deserialize)]
pub struct Tune {
    #[serde(default)]
    pub arc_max: Option<u64>,
    #[serde(default)]
    pub dirty_max: Option<u64>,
    /// An L2ARC tunable (`l2arc_write_max`, `l2arc_write_boost`, `l2arc_headroom`,
    /// `l2arc_noprefetch`) and its value.
    #[serde(default)]
    pub l2arc: Option<(String, u64)>,
}

impl Op for Tune {
    const NAME: &'static str = "pool.tune";
    type Output = ();
    fn run(self, on: &Held<'_>) -> Result<(), OpError> {
        on.daemon(
            "nothing is running to tune; set TARN_ARC_MAX for the process that mounts it (dirty_max starts at its default with every import)",
        )?;
        if let Some(bytes) = self.arc_max {
            on.pool.set_arc_max(bytes);
        }
        if let Some(bytes) = self.dirty_max {
            on.pool.set_dirty_max(bytes);
        }
        if let Some((name, value)) = self.l2arc {
            on.pool.set_l2arc_tunable(&name, value)?;
        }
        Ok(())
    }
}

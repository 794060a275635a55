//! Commands on snapshots and clones: `snap create|list|destroy`, `rollback`, `clone`.
//!
//! Owns: what a mount changes about them — a rollback of a mounted dataset is refused
//! with the reason (the mount's open files would point into the head it drops), a
//! snapshot being read through a mount is not.
//! Promises: the engine checks every name and its error is passed on as it is; each
//! command returns once its txg committed.
//! Must never: decide what a snapshot holds (that is `tarn_pool::snapshots`'s).

use serde::{Deserialize, Serialize};
use tarn_pool::SnapshotInfo;

use crate::error::OpError;
use crate::op::{Held, Op};

/// `tarn snap create [-r] DS@NAME…`: all in one txg.
#[derive(Serialize, Deserialize)]
pub struct SnapCreate {
    pub names: Vec<String>,
    pub recursive: bool,
}

impl Op for SnapCreate {
    const NAME: &'static str = "snap.create";
    const CHANGES_POOL: bool = true;
    type Output = Vec<String>;
    fn run(self, on: &Held<'_>) -> Result<Vec<String>, OpError> {
        Ok(on.pool.create_snapshots(&self.names, self.recursive)?)
    }
}

/// `tarn snap list [POOL|DS|DS@NAME]`.
#[derive(Serialize, Deserialize)]
pub struct SnapList {
    pub filter: Option<String>,
}

impl Op for SnapList {
    const NAME: &'static str = "snap.list";
    type Output = Vec<SnapshotInfo>;
    fn run(self, on: &Held<'_>) -> Result<Vec<SnapshotInfo>, OpError> {
        Ok(on.pool.snapshots(self.filter.as_deref())?)
    }
}

/// `tarn snap destroy DS@NAME`.
#[derive(Serialize, Deserialize)]
pub struct SnapDestroy {
    pub name: String,
}

impl Op for SnapDestroy {
    const NAME: &'static str = "snap.destroy";
    const CHANGES_POOL: bool = true;
    type Output = ();
    fn run(self, on: &Held<'_>) -> Result<(), OpError> {
        Ok(on.pool.destroy_snapshot(&self.name)?)
    }
}

/// `tarn rollback DS@NAME`: refused while the dataset is mounted.
#[derive(Serialize, Deserialize)]
pub struct Rollback {
    pub snapshot: String,
}

impl Op for Rollback {
    const NAME: &'static str = "rollback";
    const CHANGES_POOL: bool = true;
    type Output = ();
    fn run(self, on: &Held<'_>) -> Result<(), OpError> {
        let (dataset, _) = tarn_pool::split_snapshot_name(&self.snapshot)?;
        if let Some(at) = on.daemon.and_then(|d| d.mounted(dataset)) {
            return Err(OpError::Refused(format!(
                "cannot roll back '{dataset}': it is mounted at {} and its open files would change under their \
                 users; unmount it first (tarn umount {dataset}), then roll back and mount it again",
                at.display()
            )));
        }
        Ok(on.pool.rollback(&self.snapshot)?)
    }
}

/// `tarn clone [-o PROP=VALUE]… DS@NAME POOL/NEW`.
#[derive(Serialize, Deserialize)]
pub struct Clone {
    pub snapshot: String,
    pub target: String,
    pub props: Vec<(String, String)>,
}

impl Op for Clone {
    const NAME: &'static str = "clone";
    const CHANGES_POOL: bool = true;
    type Output = ();
    fn run(self, on: &Held<'_>) -> Result<(), OpError> {
        let props: Vec<(&str, &str)> = self.props.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        Ok(on.pool.clone_snapshot(&self.snapshot, &self.target, &props)?)
    }
}

/// `tarn promote POOL/CLONE`: the clone takes its origin's snapshots up to the origin
/// snapshot; the origin dataset becomes its clone. Works on mounted datasets (no head
/// changes, only which dataset owns which snapshots).
#[derive(Serialize, Deserialize)]
pub struct Promote {
    pub dataset: String,
}

impl Op for Promote {
    const NAME: &'static str = "promote";
    const CHANGES_POOL: bool = true;
    type Output = ();
    fn run(self, on: &Held<'_>) -> Result<(), OpError> {
        Ok(on.pool.promote(&self.dataset)?)
    }
}

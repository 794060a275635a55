//! The commands a held pool serves, and the table the daemon dispatches them by.
//!
//! Rooms: `pool` (status, scrub start/stop and its scan, iostat, clear, export, destroy,
//! add, remove, set, get, history, stats, tune),
//! `dataset` (ds create/destroy/list, set, get, inherit), `snapshot` (snap
//! create/list/destroy, rollback, clone, promote), `stream` (send, recv), `files` (put, ls, cat) and
//! `mounts` (mount, umount, the list of mounts: the daemon's own).
//!
//! Owns: [`dispatch`], the one place a command's wire name meets its type.
//! Promises: an unknown name or malformed arguments are a clear error, never a guess.
//! Must never: run a command whose arguments did not parse whole.

pub mod dataset;
pub mod files;
pub mod mounts;
pub mod pool;
pub mod snapshot;
pub mod stream;

use serde_json::Value;

use crate::error::{ControlError, OpError};
use crate::op::{execute, Held, Op};

/// Generates [`dispatch`] and [`NAMES`] from the list of command types.
macro_rules! registry {
    ($($op:ty),* $(,)?) => {
        /// Runs the command named `name` with its JSON `args` on the pool `on` holds.
        pub fn dispatch(name: &str, args: Value, on: &Held<'_>) -> Result<Value, OpError> {
            $(
                if name == <$op as Op>::NAME {
                    return run_wire::<$op>(args, on);
                }
            )*
            Err(ControlError::UnknownCommand(name.to_string()).into())
        }

        /// Every command's wire name.
        pub const NAMES: &[&str] = &[$(<$op as Op>::NAME),*];
    };
}

registry![
    pool::Status,
    pool::ScrubStart,
    pool::ScrubStop,
    pool::Scan,
    pool::Iostat,
    pool::Clear,
    pool::Export,
    pool::Destroy,
    pool::Add,
    pool::Remove,
    pool::PoolSet,
    pool::PoolGet,
    pool::History,
    pool::Stats,
    pool::Tune,
    dataset::List,
    dataset::Create,
    dataset::Destroy,
    dataset::Set,
    dataset::Get,
    dataset::Inherit,
    snapshot::SnapCreate,
    snapshot::SnapList,
    snapshot::SnapDestroy,
    snapshot::Rollback,
    snapshot::Clone,
    stream::Send,
    stream::SendSize,
    stream::Recv,
    snapshot::Promote,
    files::Put,
    files::List,
    files::Read,
    mounts::Mount,
    mounts::Umount,
    mounts::Mounts,
];

fn run_wire<O: Op>(args: Value, on: &Held<'_>) -> Result<Value, OpError> {
    let op: O = serde_json::from_value(args)
        .map_err(|e| ControlError::Malformed(format!("arguments of '{}': {e}", O::NAME)))?;
    let out = execute(op, on)?;
    serde_json::to_value(out).map_err(|e| ControlError::Malformed(format!("output of '{}': {e}", O::NAME)).into())
}

#[cfg(test)]
mod tests {
    use super::NAMES;

    #[test]
    fn every_command_has_its_own_name() {
        let mut names = NAMES.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), NAMES.len(), "{NAMES:?}");
    }
}

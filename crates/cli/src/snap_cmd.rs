//! `tarn snap create|list|destroy`, `tarn rollback` and `tarn clone`, in the words of zfs.
//!
//! Owns: the zfs-style listing of snapshots (`zfs list -t snapshot`: NAME USED REFER)
//! and grouping the names of one command by pool. The changes themselves are the
//! `tarn_control::ops::snapshot` commands, run here or by the daemon holding the pool.
//! Promises: `snap create` of several names takes them in one txg, so they must be of
//! one pool (a command naming two pools is refused, exit 2, before either is reached).
//! Must never: decide what a snapshot name may be (the engine checks it).

use tarn_control::ops::snapshot as ops;
use tarn_pool::SnapshotInfo;

use crate::access::{self, pool_of, run_on_pool_of};
use crate::args::{Output, SnapCmd};
use crate::ds_cmd::owned_assignments;
use crate::error::CliError;
use crate::output::print_json;
use crate::table::Table;

pub fn run(cmd: SnapCmd) -> Result<(), CliError> {
    match cmd {
        SnapCmd::Create { recursive, names } => create(names, recursive),
        SnapCmd::List { target, out } => list(target.as_deref(), out),
        SnapCmd::Destroy { name } => run_on_pool_of(&name.clone(), ops::SnapDestroy { name }),
    }
}

/// `snap create [-r] NAME…`: one pool, one txg.
fn create(names: Vec<String>, recursive: bool) -> Result<(), CliError> {
    let pool = pool_of(&names[0]).to_string();
    if let Some(other) = names.iter().find(|n| pool_of(n) != pool) {
        return Err(CliError::Usage(format!(
            "'{other}' is not in pool '{pool}': the snapshots of one command are taken together, in one pool"
        )));
    }
    access::run(&pool, ops::SnapCreate { names, recursive })?;
    Ok(())
}

/// The snapshots of one pool, dataset or snapshot, or of every pool.
fn list(target: Option<&str>, out: Output) -> Result<(), CliError> {
    let mut rows: Vec<SnapshotInfo> = Vec::new();
    let pools = match target {
        Some(t) => vec![pool_of(t).to_string()],
        None => access::pool_names(None)?,
    };
    for name in pools {
        match access::run(&name, ops::SnapList { filter: target.map(String::from) }) {
            Ok(found) => rows.extend(found),
            Err(e) if target.is_none() && crate::pool_cmd::unavailable(&e) => {
                eprintln!("tarn: pool '{name}' is unavailable: {}", e.one_line());
            }
            Err(e) => return Err(e),
        }
    }
    if out.json {
        return print_json(&rows);
    }
    let mut t = Table::new(&["NAME", "USED", "REFER", "WRITTEN", "CLONES"]);
    for s in rows {
        let clones = if s.clones.is_empty() { "-".to_string() } else { s.clones.join(",") };
        t.row(vec![s.name, out.size(s.used), out.size(s.referenced), out.size(s.written), clones]);
    }
    t.print(out.scripted);
    Ok(())
}

/// `tarn rollback DS@NAME`.
pub fn rollback(snapshot: String) -> Result<(), CliError> {
    run_on_pool_of(&snapshot.clone(), ops::Rollback { snapshot })
}

/// `tarn clone [-o PROP=VALUE]… DS@NAME POOL/NEW`.
pub fn clone(options: &[String], snapshot: String, target: String) -> Result<(), CliError> {
    let props = owned_assignments(options)?;
    if pool_of(&snapshot) != pool_of(&target) {
        return Err(CliError::Usage(format!(
            "'{target}' is not in the pool of '{snapshot}': a clone shares its origin's blocks, in one pool"
        )));
    }
    run_on_pool_of(&snapshot.clone(), ops::Clone { snapshot, target, props })
}

/// `tarn promote POOL/CLONE`.
pub fn promote(dataset: String) -> Result<(), CliError> {
    run_on_pool_of(&dataset.clone(), ops::Promote { dataset })
}

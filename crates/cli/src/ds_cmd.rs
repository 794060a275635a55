//! `tarn ds …` (create, destroy, list) and the properties of datasets (`tarn set`,
//! `tarn get`, `tarn inherit`), in the words of zfs.
//!
//! Owns: reading `PROP=VALUE` assignments off the command line and the zfs-style
//! listing of datasets and properties; the changes themselves are the
//! `tarn_control::ops::dataset` commands, run here or by the daemon holding the pool.
//! Promises: a malformed assignment is refused (exit 2) before the pool is reached; the
//! engine validates every value and its error is shown as it is; `get -p` shows raw
//! numbers where a property has one.
//! Must never: decide what a property means or which values are valid (that is
//! `tarn_dataset::props`'s), or leave a changed pool uncommitted.

use tarn_control::ops::dataset as ops;
use tarn_pool::DatasetInfo;

use crate::access::{self, run_on_pool_of};
use crate::args::{DsCmd, Output};
use crate::error::CliError;
use crate::output::print_json;
use crate::table::Table;

pub fn run(cmd: DsCmd) -> Result<(), CliError> {
    match cmd {
        DsCmd::Create { options, name } => create(&options, &name),
        DsCmd::Destroy { force, name } => run_on_pool_of(&name.clone(), ops::Destroy { name, force }),
        DsCmd::List { pool, out } => list(pool.as_deref(), out),
    }
}

/// `ds create [-o PROP=VALUE]… NAME`: every property is checked before the dataset
/// exists, so a refused one creates nothing.
fn create(options: &[String], name: &str) -> Result<(), CliError> {
    let props = owned_assignments(options)?;
    run_on_pool_of(name, ops::Create { name: name.to_string(), props })
}

/// The datasets of one pool or of every pool; a pool whose devices are gone is said to
/// be unavailable (on stderr) and the others are listed.
fn list(pool: Option<&str>, out: Output) -> Result<(), CliError> {
    let mut rows: Vec<DatasetInfo> = Vec::new();
    for name in access::pool_names(pool)? {
        match access::run(&name, ops::List {}) {
            Ok(sets) => rows.extend(sets),
            Err(e) if pool.is_none() && crate::pool_cmd::unavailable(&e) => {
                eprintln!("tarn: pool '{name}' is unavailable: {}", e.one_line());
            }
            Err(e) => return Err(e),
        }
    }
    if out.json {
        return print_json(&rows);
    }
    let mut t = Table::new(&["NAME", "USED", "AVAIL", "LUSED", "RATIO", "MOUNTPOINT"]);
    for d in rows {
        let ratio = if d.used == 0 { 1.0 } else { d.logicalused as f64 / d.used as f64 };
        t.row(vec![
            d.name,
            out.size(d.used),
            out.size(d.available),
            out.size(d.logicalused),
            format!("{ratio:.2}x"),
            d.mountpoint,
        ]);
    }
    t.print(out.scripted);
    Ok(())
}

/// "PROP=VALUE" → ("PROP", "VALUE").
pub fn split_assignment(a: &str) -> Result<(&str, &str), CliError> {
    a.split_once('=').ok_or_else(|| CliError::Usage(format!("'{a}' is not PROP=VALUE")))
}

/// Every "PROP=VALUE" of `words`, as owned pairs (all checked before any is used).
pub fn owned_assignments(words: &[String]) -> Result<Vec<(String, String)>, CliError> {
    words.iter().map(|w| split_assignment(w).map(|(k, v)| (k.to_string(), v.to_string()))).collect()
}

/// `tarn set PROP=VALUE... DATASET`: the assignments are applied in order; the first
/// one the engine refuses stops the command.
pub fn set(mut args: Vec<String>) -> Result<(), CliError> {
    if args.len() < 2 {
        return Err(CliError::Usage("usage: tarn set PROP=VALUE... DATASET".into()));
    }
    let ds = args.pop().unwrap_or_default();
    if ds.contains('=') {
        return Err(CliError::Usage(format!("the last argument must be a dataset, not '{ds}'")));
    }
    let assignments = owned_assignments(&args)?;
    run_on_pool_of(&ds.clone(), ops::Set { dataset: ds, assignments })
}

/// `tarn get PROP[,PROP]|all DATASET`.
pub fn get(props: &str, dataset: &str, out: Output) -> Result<(), CliError> {
    let wanted = (props != "all").then(|| props.split(',').map(String::from).collect());
    let rows = run_on_pool_of(dataset, ops::Get { dataset: dataset.to_string(), props: wanted })?;
    if out.json {
        return print_json(&rows);
    }
    let mut t = Table::new(&["NAME", "PROPERTY", "VALUE", "SOURCE"]);
    for r in rows {
        let value = if out.parsable { r.raw.unwrap_or(r.value) } else { r.value };
        t.row(vec![dataset.to_string(), r.property, value, r.source]);
    }
    t.print(out.scripted);
    Ok(())
}

/// `tarn inherit PROP DATASET`.
pub fn inherit(prop: &str, dataset: &str) -> Result<(), CliError> {
    run_on_pool_of(dataset, ops::Inherit { dataset: dataset.to_string(), prop: prop.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_assignment_without_equals_is_a_usage_error() {
        assert_eq!(split_assignment("recordsize=16K").expect("well formed"), ("recordsize", "16K"));
        assert_eq!(split_assignment("recordsize").expect_err("no =").exit_code(), 2);
    }

    #[test]
    fn set_without_a_dataset_is_a_usage_error() {
        let err = set(vec!["recordsize=16K".into()]).expect_err("no dataset");
        assert_eq!(err.exit_code(), 2, "{err}");
        let err = set(vec!["recordsize=16K".into(), "atime=off".into()]).expect_err("last is an assignment");
        assert_eq!(err.exit_code(), 2, "{err}");
    }
}

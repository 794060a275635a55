//! `tarn stats` (the engine's counters: arcstats, intent log, txg, io, space) and
//! `tarn tune` (the run-time tunables of a mounted pool).
//!
//! Owns: the shapes of the counters (aligned text, `--json`; the Prometheus text is
//! `metrics.rs`'s) and the checks on a tunable before it is handed to the daemon.
//! Promises: a mounted pool's counters are its daemon's, as of the moment asked (through
//! the control socket); an unmounted pool is opened and closed here, so its caches show
//! as empty; a tunable is validated before anything is sent, and applied when the
//! command returns. Must never: open the devices of a pool a daemon holds, or tune a
//! pool that is not running (there is no cache to tune).

use std::collections::BTreeMap;

use tarn_control::ops::pool as ops;
use tarn_dataset::props::parse_size;
use tarn_pool::PoolStats;

use crate::access;
use crate::ds_cmd::split_assignment;
use crate::error::CliError;
use crate::metrics;
use crate::output::print_json;

/// The smallest ARC budget `tarn tune` accepts.
const ARC_MAX_MIN: u64 = 16 << 20;

/// The counters of `pool`: its mount daemon's if one holds it, else the pool is opened
/// (and closed) here. `tarn exporter` reads them the same way.
pub fn pool_stats(pool: &str) -> Result<PoolStats, CliError> {
    access::run(pool, ops::Stats {})
}

/// `tarn stats WHICH POOL [--json|--prometheus]`.
pub fn stats(which: &str, pool: &str, json: bool, prometheus: bool) -> Result<(), CliError> {
    let stats = pool_stats(pool)?;
    let only = (which != "all").then_some(which);
    if prometheus {
        print!("{}", metrics::render(&[(pool.to_string(), stats)], only));
        return Ok(());
    }
    let groups: Vec<(&str, BTreeMap<String, u64>)> =
        metrics::groups(&stats).into_iter().filter(|(name, _)| only.is_none_or(|o| o == *name)).collect();
    if json {
        let by_group: BTreeMap<&str, BTreeMap<String, u64>> = groups.into_iter().collect();
        return print_json(&by_group);
    }
    for (group, map) in groups {
        for (name, value) in map {
            println!("{group:<4} {name:<28} {value}");
        }
    }
    Ok(())
}

/// `tarn tune POOL arc_max=SIZE`: the new budget of a mounted pool is handed to its
/// daemon; an unmounted pool has no cache to tune: the budget is set per process by
/// TARN_ARC_MAX.
pub fn tune(pool: &str, setting: &str) -> Result<(), CliError> {
    let (name, value) = split_assignment(setting)?;
    if name != "arc_max" {
        return Err(CliError::Usage(format!("unknown tunable '{name}'; tunable: arc_max")));
    }
    let bytes = parse_size(value).filter(|&b| b >= ARC_MAX_MIN).ok_or_else(|| {
        CliError::Usage(format!("invalid arc_max '{value}': use a size of at least 16M, like 512M or 4G"))
    })?;
    // Name the pool's absence first if it is not even imported.
    access::pool_names(Some(pool))?;
    let Some(mut daemon) = access::held(pool)? else {
        return Err(CliError::Refused(format!(
            "pool '{pool}' is not mounted, so it has no running cache; set TARN_ARC_MAX={value} for the process that mounts it"
        )));
    };
    Ok(daemon.call(&ops::Tune { arc_max: bytes })?)
}

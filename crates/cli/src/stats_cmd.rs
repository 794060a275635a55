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

use tarn_control::ops::mounts::{MountInfo, Mounts};
use tarn_control::ops::pool as ops;
use tarn_dataset::props::parse_size;
use tarn_pool::PoolStats;

use crate::access;
use crate::ds_cmd::split_assignment;
use crate::error::CliError;
use crate::metrics;
use crate::output::print_json;

/// The smallest value `tarn tune` accepts for either tunable (an ARC budget, or a
/// dirty_max that still lets a txg gather a useful batch).
const TUNABLE_MIN: u64 = 16 << 20;

/// What `tarn tune` can set on a mounted pool: the ARC budget and the write throttle's
/// dirty_max, both in bytes, and the L2ARC's feed (`L2ARC_TUNABLES`).
const TUNABLES: [&str; 2] = ["arc_max", "dirty_max"];
/// The L2ARC's tunables: two rates (sizes per second), a count of feed rounds, a flag.
const L2ARC_TUNABLES: [&str; 4] = ["l2arc_write_max", "l2arc_write_boost", "l2arc_headroom", "l2arc_noprefetch"];

/// The counters of `pool`: its mount daemon's if one holds it, else the pool is opened
/// (and closed) here. `tarn exporter` reads them the same way.
pub fn pool_stats(pool: &str) -> Result<PoolStats, CliError> {
    access::run(pool, ops::Stats {})
}

/// `tarn stats WHICH POOL [--json|--prometheus]`.
pub fn stats(which: &str, pool: &str, json: bool, prometheus: bool) -> Result<(), CliError> {
    if which == "fuse" {
        return fuse_stats(pool, json, prometheus);
    }
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
    if which == "all" {
        print_fuse(&access::run(pool, Mounts {})?);
    }
    Ok(())
}

/// `tarn stats fuse POOL`: each mount's FUSE transport and the requests each path
/// served (counted for `--transport uring` mounts; a /dev/fuse mount run by fuser shows
/// `-`). Nothing for a pool no daemon holds.
fn fuse_stats(pool: &str, json: bool, prometheus: bool) -> Result<(), CliError> {
    if prometheus {
        return Err(CliError::Usage("tarn stats fuse has no Prometheus form yet; use the text or --json".into()));
    }
    let mounts = access::run(pool, Mounts {})?;
    if json {
        return print_json(&mounts);
    }
    print_fuse(&mounts);
    Ok(())
}

fn print_fuse(mounts: &[MountInfo]) {
    let count = |c: Option<u64>| c.map_or("-".to_string(), |n| n.to_string());
    for m in mounts {
        let mp = m.mountpoint.display();
        println!("fuse {mp} transport {}", m.transport);
        println!("fuse {mp} ring_requests {}", count(m.ring_requests));
        println!("fuse {mp} dev_requests {}", count(m.dev_requests));
        if let Some(why) = &m.fallback {
            println!("fuse {mp} uring_refused {why}");
        }
    }
}

/// `tarn tune POOL arc_max=SIZE` or `dirty_max=SIZE`: the new value is handed to the
/// mounted pool's daemon (applied within a second). An unmounted pool has nothing
/// running to tune: the ARC budget is set per process by TARN_ARC_MAX, and dirty_max
/// starts at its default with every import.
pub fn tune(pool: &str, setting: &str) -> Result<(), CliError> {
    let (name, value) = split_assignment(setting)?;
    if L2ARC_TUNABLES.contains(&name) {
        return tune_l2arc(pool, name, value);
    }
    let Some(&tunable) = TUNABLES.iter().find(|&&t| t == name) else {
        let all: Vec<&str> = TUNABLES.iter().chain(&L2ARC_TUNABLES).copied().collect();
        return Err(CliError::Usage(format!("unknown tunable '{name}'; tunables: {}", all.join(", "))));
    };
    let bytes = parse_size(value).filter(|&b| b >= TUNABLE_MIN).ok_or_else(|| {
        CliError::Usage(format!("invalid {tunable} '{value}': use a size of at least 16M, like 512M or 4G"))
    })?;
    // Name the pool's absence first if it is not even imported.
    access::pool_names(Some(pool))?;
    let Some(mut daemon) = access::held(pool)? else {
        let hint = if tunable == "arc_max" {
            format!("set TARN_ARC_MAX={value} for the process that mounts it")
        } else {
            "mount it first".to_string()
        };
        return Err(CliError::Refused(format!("pool '{pool}' is not mounted, so nothing is running to tune; {hint}")));
    };
    let op = match tunable {
        "arc_max" => ops::Tune { arc_max: Some(bytes), dirty_max: None, l2arc: None },
        _ => ops::Tune { arc_max: None, dirty_max: Some(bytes), l2arc: None },
    };
    Ok(daemon.call(&op)?)
}

/// `tarn tune POOL l2arc_…=VALUE`: the rates are sizes per second (`256M`), headroom a
/// count of feed rounds, noprefetch 0 or 1. The engine checks the ranges.
fn tune_l2arc(pool: &str, name: &str, value: &str) -> Result<(), CliError> {
    let parsed = match name {
        "l2arc_write_max" | "l2arc_write_boost" => parse_size(value),
        _ => value.parse::<u64>().ok(),
    };
    let value = parsed.ok_or_else(|| {
        let what = if name.starts_with("l2arc_write") { "a size per second, like 256M" } else { "a number" };
        CliError::Usage(format!("invalid {name} '{value}': use {what}"))
    })?;
    access::pool_names(Some(pool))?;
    let Some(mut daemon) = access::held(pool)? else {
        return Err(CliError::Refused(format!(
            "pool '{pool}' is not mounted, so nothing is running to tune; mount it first"
        )));
    };
    Ok(daemon.call(&ops::Tune { arc_max: None, dirty_max: None, l2arc: Some((name.to_string(), value)) })?)
}

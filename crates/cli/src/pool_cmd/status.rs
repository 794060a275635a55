//! `tarn pool status` and `tarn pool list`: the zpool-style views of every remembered pool.
//!
//! Owns: the status layout (state, scan line, config tree with error counters, the
//! `status:`/`action:` lines that say what needs attention and the fix, data errors and,
//! with `-v`, the files they hit) and the one-line-per-pool list.
//! Promises: a pool that cannot be opened for want of its devices is listed as UNAVAIL
//! with the reason and does not stop the listing of the others.
//! Must never: change a pool.

use tarn_control::ops::pool as ops;
use tarn_dataset::props::format_size;
use tarn_pool::{LeafHealth, PoolStatus, ScanKind, ScanState, ScanStatus, TopStatus};

use super::unavailable;
use crate::access;
use crate::args::Output;
use crate::error::CliError;
use crate::output::{format_duration, format_time, print_json};
use crate::scrub_cmd::{eta, percent_done};
use crate::table::Table;

/// A remembered pool as a listing shows it.
#[derive(serde::Serialize)]
#[serde(untagged)]
enum Listed {
    Open(Box<PoolStatus>),
    /// Its devices are gone or hold another pool.
    Unavail {
        name: String,
        state: &'static str,
        reason: String,
    },
}

/// The status of each pool listed (one, or every imported pool); a pool that cannot be
/// opened for want of its devices is UNAVAIL, and the others are still shown.
fn statuses(pool: Option<&str>, verbose: bool) -> Result<Vec<Listed>, CliError> {
    let mut out = Vec::new();
    for name in access::pool_names(pool)? {
        let got = access::run(&name, ops::Status { verbose });
        out.push(match got {
            Ok(s) => Listed::Open(Box::new(s)),
            Err(e) if unavailable(&e) => Listed::Unavail { name, state: "UNAVAIL", reason: e.one_line() },
            Err(e) => return Err(e),
        });
    }
    Ok(out)
}

pub(super) fn status(pool: Option<&str>, verbose: bool, out: Output) -> Result<(), CliError> {
    let all = statuses(pool, verbose)?;
    if all.is_empty() {
        println!("no pools imported");
        return Ok(());
    }
    if out.json {
        return print_json(&all);
    }
    for listed in &all {
        match listed {
            Listed::Open(s) => print_status(s, verbose),
            Listed::Unavail { name, reason, .. } => {
                println!(
                    "  pool: {name}
 state: UNAVAIL
status: {reason}
action: reattach the devices and run `tarn pool import -d DIR {name}`, or `tarn pool export {name}` to forget it
"
                );
            }
        }
    }
    Ok(())
}

/// READ, WRITE and CKSUM error counts of a top-level vdev (its leaves summed).
fn top_errors(top: &TopStatus) -> [u64; 3] {
    top.leaves.iter().fold([0; 3], |a, l| [a[0] + l.read_errors, a[1] + l.write_errors, a[2] + l.checksum_errors])
}

/// READ, WRITE and CKSUM error counts of the whole pool.
fn pool_errors(s: &PoolStatus) -> [u64; 3] {
    s.vdevs.iter().map(top_errors).fold([0; 3], |a, e| [a[0] + e[0], a[1] + e[1], a[2] + e[2]])
}

/// The `status:` and `action:` lines zpool shows for a pool that needs attention.
fn attention(s: &PoolStatus) -> Option<(String, String)> {
    let leaves = || s.vdevs.iter().flat_map(|t| &t.leaves);
    let name = &s.name;
    if let Some(reason) = &s.suspended {
        return Some((
            format!("suspended: {reason}"),
            format!("export and import the pool (`tarn pool export {name}`) once the cause is fixed"),
        ));
    }
    if let Some(trouble) = &s.replay_trouble {
        return Some((
            format!("The intent log was not replayed whole at import: {trouble}. Changes acknowledged by fsync just before the crash may be missing."),
            "check the files written just before the crash (a database runs its own recovery and says what it lacks), restore what is missing from a backup or replica, and report it".into(),
        ));
    }
    if leaves().any(|l| l.health != LeafHealth::Online) {
        return Some((
            "One or more devices could not be opened or were faulted. The pool continues on the copies left, with less redundancy.".into(),
            format!("reattach the device, then export and import the pool (`tarn pool import -d DIR {name}`); it is resilvered"),
        ));
    }
    if s.data_errors > 0 {
        return Some((
            "One or more devices has experienced an error resulting in data corruption. Applications may be affected."
                .into(),
            "Restore the file in question if possible. Otherwise restore the entire pool from backup.".into(),
        ));
    }
    if leaves().any(|l| l.missed_txgs.is_some()) {
        return Some((
            "One or more devices is being resilvered: it missed writes while it was away.".into(),
            "Wait for the resilver to complete.".into(),
        ));
    }
    if let Some(c) = s.caches.iter().find(|c| c.state.name() == "FAULTED") {
        return Some((
            "A cache device was dropped (FAULTED): its reads go to the pool's devices; nothing is lost.".into(),
            format!(
                "fix or replace it, then `tarn pool clear {name}` to use it again; `tarn pool remove {name} {}` takes it out",
                c.path
            ),
        ));
    }
    if let Some(held) = s.snapshot_space {
        return Some(full_pool_attention(s, held));
    }
    None
}

/// The pool is nearly full: writes will fail with ENOSPC. Says how much of it only
/// snapshots hold (overwriting snapshotted data frees nothing) and what gives space back.
fn full_pool_attention(s: &PoolStatus, held: u64) -> (String, String) {
    let name = &s.name;
    let mut status = format!(
        "The pool is nearly full ({} allocated of {}): writes may fail with \"No space left on device\".",
        format_size(s.allocated),
        format_size(s.size)
    );
    if held > 0 {
        status.push_str(&format!(
            " Snapshots alone hold {}: overwriting or deleting files they hold frees nothing.",
            format_size(held)
        ));
        let action =
            format!("destroy snapshots you no longer need (`tarn snap list {name}`: USED is what each destroy frees)");
        return (status, action);
    }
    (
        status,
        "delete data you no longer need (`tarn ds list` shows where it is), or move datasets to a bigger pool".into(),
    )
}

/// The `scan:` line (and the progress line under it while a scan is under way).
fn scan_lines(name: &str, scan: &ScanStatus) -> String {
    let r = &scan.record;
    let took = format_duration(r.active_secs);
    let ended = format_time(r.ended);
    match (r.kind, r.state) {
        (ScanKind::Scrub, ScanState::Finished) => {
            format!("scrub repaired {} in {took} with {} errors on {ended}", format_size(r.repaired), r.errors)
        }
        (ScanKind::Resilver, ScanState::Finished) => {
            format!("resilvered {} in {took} with {} errors on {ended}", format_size(r.repaired), r.errors)
        }
        (kind, ScanState::Canceled) => format!("{kind} canceled on {ended}"),
        (kind, ScanState::Scanning) => {
            let rate = if r.active_secs > 0.0 { (r.examined as f64 / r.active_secs) as u64 } else { 0 };
            let done = match kind {
                ScanKind::Scrub => "repaired",
                ScanKind::Resilver => "resilvered",
            };
            let left = match (scan.running, eta(r)) {
                (true, Some(secs)) => format!("{} to go", format_duration(secs)),
                (true, None) => "estimating the time left".into(),
                (false, _) if kind == ScanKind::Resilver => {
                    "cut short by a close; it resumes at the next import".into()
                }
                (false, _) => format!("cut short by a close; `tarn pool scrub {name}` resumes it"),
            };
            format!(
                "{kind} in progress since {}\n        {} examined of {} at {}/s, {} {done}, {:.2}% done, {left}",
                format_time(r.started),
                format_size(r.examined),
                format_size(r.to_examine),
                format_size(rate),
                format_size(r.repaired),
                percent_done(r)
            )
        }
    }
}

fn print_status(s: &PoolStatus, verbose: bool) {
    println!("  pool: {}", s.name);
    println!(" state: {}", s.state);
    if let Some((status, action)) = attention(s) {
        println!("status: {status}");
        println!("action: {action}");
    }
    if let Some(scan) = &s.scan {
        println!("  scan: {}", scan_lines(&s.name, scan));
    }
    println!("   txg: {}", s.txg);
    println!("config:\n");
    let mut t = Table::new(&["NAME", "STATE", "READ", "WRITE", "CKSUM", ""]);
    let counts = |e: [u64; 3]| e.map(|n| n.to_string());
    let [r, w, c] = counts(pool_errors(s));
    t.row(vec![s.name.clone(), s.state.clone(), r, w, c, String::new()]);
    let mut logs_header = false;
    for top in &s.vdevs {
        if top.log && !logs_header {
            let mut row = vec!["logs".to_string()];
            row.extend(std::iter::repeat_n(String::new(), 5));
            t.row(row);
            logs_header = true;
        }
        let mirror = top.leaves.len() > 1;
        if mirror {
            let [r, w, c] = counts(top_errors(top));
            let name = format!("  {}", top.name);
            t.row(vec![name, top.health.clone(), r, w, c, String::new()]);
        }
        for l in &top.leaves {
            let indent = if mirror { "    " } else { "  " };
            // The health word as the JSON output spells it (ONLINE, DEGRADED…).
            let health =
                serde_json::to_value(l.health).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
            let [r, w, c] = counts([l.read_errors, l.write_errors, l.checksum_errors]);
            let note = match l.missed_txgs {
                Some((first, last)) => format!("(resilvering: missed txgs {first}-{last})"),
                None => String::new(),
            };
            t.row(vec![format!("{indent}{}", l.path), health, r, w, c, note]);
        }
    }
    if !s.caches.is_empty() {
        let mut row = vec!["cache".to_string()];
        row.extend(std::iter::repeat_n(String::new(), 5));
        t.row(row);
        for c in &s.caches {
            let used = format!("{} of {} used, {} blocks", format_size(c.asize), format_size(c.size), c.blocks);
            let note = match (&c.note, c.state.name()) {
                (_, "REBUILDING") => format!("(rebuilding index: {}%) {used}", c.rebuild_percent),
                (Some(n), "ONLINE") => format!("({n}) {used}"),
                (Some(n), _) => format!("({n})"),
                (None, _) => used,
            };
            let (io, cksum) = (c.io_errors.to_string(), c.cksum_errors.to_string());
            t.row(vec![format!("  {}", c.path), c.state.name().to_string(), io, "0".into(), cksum, note]);
        }
    }
    t.print(false);
    println!();
    print_errors(s, verbose);
    println!();
}

/// The `errors:` line, and with `-v` the files with permanent errors.
fn print_errors(s: &PoolStatus, verbose: bool) {
    match (s.data_errors, verbose) {
        (0, _) => println!("errors: No known data errors"),
        (_, true) if !s.error_files.is_empty() => {
            println!("errors: Permanent errors have been detected in the following files:\n");
            for f in &s.error_files {
                println!("        {f}");
            }
        }
        (_, true) => {
            println!("errors: No known data errors (the blocks that failed are no longer in use)")
        }
        (n, false) => println!("errors: {n} data errors, use '-v' for a list"),
    }
}

pub(super) fn list(out: Output) -> Result<(), CliError> {
    let statuses = statuses(None, false)?;
    if out.json {
        return print_json(&statuses);
    }
    if statuses.is_empty() && !out.scripted {
        println!("no pools imported");
        return Ok(());
    }
    let mut t = Table::new(&["NAME", "SIZE", "ALLOC", "FREE", "CAP", "HEALTH"]);
    for listed in &statuses {
        match listed {
            Listed::Open(s) => {
                let cap = (s.allocated * 100).checked_div(s.size).unwrap_or(0);
                t.row(vec![
                    s.name.clone(),
                    out.size(s.size),
                    out.size(s.allocated),
                    out.size(s.free),
                    format!("{cap}%"),
                    s.state.clone(),
                ]);
            }
            Listed::Unavail { name, state, reason } => {
                let dash = || "-".to_string();
                t.row(vec![name.clone(), dash(), dash(), dash(), dash(), state.to_string()]);
                if !out.scripted {
                    eprintln!("tarn: pool '{name}' is unavailable: {reason}");
                }
            }
        }
    }
    t.print(out.scripted);
    Ok(())
}

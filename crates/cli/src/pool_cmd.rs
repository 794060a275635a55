//! `tarn pool …`: create, add, import, export, destroy, status, list, scrub, clear.
//!
//! Owns: turning the device words of a command line (`mirror A B log C`) into vdev
//! specs, the pool lifecycle as the user sees it (the cache entry follows the pool:
//! remembered at create and import, forgotten at export and destroy), the mounts an
//! import starts, and the zpool-style status, list and history output. What a command
//! does to the pool is its `tarn_control::ops::pool` command's, run here or by the
//! daemon that holds the pool (`access::run`).
//! Promises: a malformed device list is refused before any device is touched; a pool is
//! in the cache only once it exists on disk, and leaves it only once it is exported or
//! destroyed (for a mounted pool: once its daemon has unmounted, exported and exited);
//! a scrub that finds blocks no copy can repair fails the command (exit 1) after
//! printing what it found; create and import are recorded in the pool's history.
//! Must never: import a pool whose name is already imported here, or leave the cache
//! naming devices the pool does not have.

use std::path::PathBuf;

use tarn_control::ops::pool as ops;
use tarn_dataset::props::{format_size, parse_size};
use tarn_pool::{CreateOptions, HistoryEntry, ImportOptions, Pool, PoolStatus, TopStatus, VdevSpec};

use crate::access;
use crate::args::{Output, PoolCmd};
use crate::cache::absolute;
use crate::error::CliError;
use crate::output::print_json;
use crate::space_check;
use crate::table::Table;

pub fn run(cmd: PoolCmd) -> Result<(), CliError> {
    match cmd {
        PoolCmd::Create { force, options, size, pool, vdevs } => {
            create(force, &options, size.as_deref(), &pool, &vdevs)
        }
        PoolCmd::Add { force, size, pool, vdevs } => add_logs(force, size.as_deref(), &pool, &vdevs),
        PoolCmd::Import { dirs, pool, json } => import(&dirs, pool.as_deref(), json),
        PoolCmd::Export { force, pool } => {
            access::run(&pool, ops::Export { force })?;
            access::forget(&pool)
        }
        PoolCmd::Destroy { force, pool } => {
            access::run(&pool, ops::Destroy { force })?;
            access::forget(&pool)
        }
        PoolCmd::Status { pool, out } => status(pool.as_deref(), out),
        PoolCmd::List { out } => list(out),
        PoolCmd::Scrub { pool, json } => scrub(&pool, json),
        PoolCmd::Clear { pool } => access::run(&pool, ops::Clear {}),
        PoolCmd::History { pool, json } => history(pool.as_deref(), json),
    }
}

fn create(force: bool, options: &[String], size: Option<&str>, name: &str, vdevs: &[String]) -> Result<(), CliError> {
    let mut opts = CreateOptions { force, size: size.map(parse_size_flag).transpose()?, ..Default::default() };
    for o in options {
        match o.split_once('=') {
            Some(("ashift", v)) => {
                opts.ashift = v
                    .parse()
                    .map_err(|_| CliError::Usage(format!("invalid ashift '{v}': use a number from 9 to 16")))?;
            }
            _ => return Err(CliError::Usage(format!("unknown pool option '{o}'; supported: ashift=N"))),
        }
    }
    let (specs, logs) = split_logs(vdevs)?;
    if specs.is_empty() {
        return Err(CliError::Usage("a pool needs at least one data device before `log`".into()));
    }
    if access::is_imported(name)? {
        return Err(CliError::Refused(format!("pool '{name}' is already imported on this machine")));
    }
    opts.logs = logs;
    space_check::warn_if_images_outgrow_free_space(specs.iter().chain(&opts.logs), opts.size);
    let pool = Pool::create(name, &specs, &opts)?;
    access::log_here(&pool);
    access::remember(&pool, pool.device_paths())?;
    Ok(pool.close()?)
}

/// `pool add POOL log DEV…`: only log devices can be added.
fn add_logs(force: bool, size: Option<&str>, pool: &str, vdevs: &[String]) -> Result<(), CliError> {
    let size = size.map(parse_size_flag).transpose()?;
    let (data, logs) = split_logs(vdevs)?;
    if !data.is_empty() || logs.is_empty() {
        return Err(CliError::Usage("only log devices can be added: tarn pool add POOL log DEV...".into()));
    }
    space_check::warn_if_images_outgrow_free_space(&logs, size);
    let wire = logs.iter().map(wire_vdev).collect();
    access::run(pool, ops::AddLogs { logs: wire, force, size })?;
    access::remember_devices(pool, logs.iter().flat_map(spec_paths))
}

fn wire_vdev(spec: &VdevSpec) -> ops::Vdev {
    match spec {
        VdevSpec::Disk(p) => ops::Vdev::Disk(p.clone()),
        VdevSpec::Mirror(ps) => ops::Vdev::Mirror(ps.clone()),
    }
}

fn scrub(name: &str, json: bool) -> Result<(), CliError> {
    let r = access::run(name, ops::Scrub {})?;
    if json {
        print_json(&r)?;
    } else {
        println!(
            "scrub of '{name}': {} blocks ({}) in {:.1}s; {} bad copies found, {} unrecoverable",
            r.blocks,
            format_size(r.bytes),
            r.seconds,
            r.checksum_errors_seen,
            r.errors
        );
    }
    if r.errors > 0 {
        return Err(CliError::Refused(format!(
            "{} blocks could not be read from any copy; see `tarn pool status {name}`",
            r.errors
        )));
    }
    Ok(())
}

fn parse_size_flag(s: &str) -> Result<u64, CliError> {
    parse_size(s).ok_or_else(|| CliError::Usage(format!("invalid --size '{s}': use a size like 512M, 4G")))
}

/// Parses "DEV... mirror DEV DEV..." into vdev specs (paths made absolute).
fn parse_vdevs(words: &[String]) -> Result<Vec<VdevSpec>, CliError> {
    let mut specs = Vec::new();
    let mut i = 0;
    while i < words.len() {
        if words[i] == "mirror" {
            let mut children = Vec::new();
            i += 1;
            while i < words.len() && words[i] != "mirror" {
                children.push(absolute(words[i].as_ref()));
                i += 1;
            }
            if children.len() < 2 {
                return Err(CliError::Usage("a mirror needs at least two devices: mirror DEV DEV".into()));
            }
            specs.push(VdevSpec::Mirror(children));
        } else {
            specs.push(VdevSpec::Disk(absolute(words[i].as_ref())));
            i += 1;
        }
    }
    Ok(specs)
}

/// Splits "DEV... log DEV..." into data and log vdev specs.
fn split_logs(words: &[String]) -> Result<(Vec<VdevSpec>, Vec<VdevSpec>), CliError> {
    match words.iter().position(|w| w == "log") {
        Some(at) if at + 1 == words.len() => Err(CliError::Usage("`log` needs at least one device after it".into())),
        Some(at) => Ok((parse_vdevs(&words[..at])?, parse_vdevs(&words[at + 1..])?)),
        None => Ok((parse_vdevs(words)?, Vec::new())),
    }
}

fn spec_paths(spec: &VdevSpec) -> Vec<PathBuf> {
    match spec {
        VdevSpec::Disk(p) => vec![p.clone()],
        VdevSpec::Mirror(ps) => ps.clone(),
    }
}

/// Without POOL: lists the pools found on the devices. With POOL (a name or an id):
/// imports it, remembers it, and mounts its datasets that have a mountpoint.
fn import(dirs: &[PathBuf], pool: Option<&str>, json: bool) -> Result<(), CliError> {
    let dirs: Vec<PathBuf> =
        if dirs.is_empty() { vec![PathBuf::from("/dev")] } else { dirs.iter().map(|d| absolute(d)).collect() };
    let found = tarn_pool::discover(&dirs);
    let Some(want) = pool else {
        return list_importable(&found, json);
    };
    let matching: Vec<_> = found.iter().filter(|d| d.name == want || d.guid.to_string() == want).collect();
    let d = match matching.as_slice() {
        [] => return Err(CliError::Refused(format!("no pool '{want}' found on devices in {}", join_paths(&dirs)))),
        [one] => *one,
        _ => {
            return Err(CliError::Refused(format!(
                "several pools are named '{want}'; import by id (see `tarn pool import -d DIR`)"
            )))
        }
    };
    if access::is_imported(&d.name)? {
        return Err(CliError::Refused(format!("a pool named '{}' is already imported on this machine", d.name)));
    }
    let p = Pool::import_paths(&d.devices, &ImportOptions::default())?;
    access::log_here(&p);
    access::remember(&p, d.devices.clone())?;
    let to_mount = datasets_with_mountpoints(&p);
    let name = p.name().to_string();
    p.close()?;
    mount_at_import(&name, to_mount)
}

fn list_importable(found: &[tarn_pool::Discovered], json: bool) -> Result<(), CliError> {
    if json {
        let list: Vec<serde_json::Value> = found
            .iter()
            .map(|d| {
                serde_json::json!({
                    "name": d.name,
                    "guid": d.guid,
                    "state": format!("{:?}", d.label.state).to_lowercase(),
                    "txg": d.txg,
                    "devices": d.devices,
                })
            })
            .collect();
        return print_json(&list);
    }
    if found.is_empty() {
        println!("no pools available to import");
    }
    for d in found {
        println!(
            "   pool: {}\n     id: {}\n  state: {:?}\n    txg: {}\n devices:",
            d.name, d.guid, d.label.state, d.txg
        );
        for dev in &d.devices {
            println!("         {}", dev.display());
        }
    }
    Ok(())
}

/// Datasets whose `mountpoint` property is a path, with that path.
pub(crate) fn datasets_with_mountpoints(p: &Pool) -> Vec<(String, PathBuf)> {
    p.datasets_info()
        .into_iter()
        .filter(|d| d.mountpoint.starts_with('/'))
        .map(|d| (d.name, PathBuf::from(d.mountpoint)))
        .collect()
}

/// Mounts every dataset that has a mountpoint, all served by one daemon (the daemon
/// holds the pool). Creates missing mountpoint directories, as zfs does. The pool stays
/// imported if a mount fails; the error says which.
pub(crate) fn mount_at_import(pool: &str, mut to_mount: Vec<(String, PathBuf)>) -> Result<(), CliError> {
    if to_mount.is_empty() {
        return Ok(());
    }
    for (ds, mp) in &to_mount {
        std::fs::create_dir_all(mp)
            .map_err(|e| CliError::host(format!("cannot create mountpoint {} of {ds}", mp.display()), e))?;
    }
    let (first, _) = to_mount.remove(0);
    // A fresh `tarn mount` process: this one has threads now (the import used the
    // pool), and the mount daemon must fork before any thread exists.
    let exe = std::env::current_exe().map_err(|e| CliError::host("cannot find the tarn binary", e))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["mount", first.as_str()]);
    for (ds, _) in &to_mount {
        cmd.args(["--also", ds.as_str()]);
    }
    let out = cmd.output().map_err(|e| CliError::host("cannot run tarn mount", e))?;
    if out.status.success() {
        return Ok(());
    }
    let msg = String::from_utf8_lossy(&out.stderr);
    let msg = msg.trim().trim_start_matches("tarn: ");
    Err(CliError::Refused(format!("pool '{pool}' is imported, but mounting its datasets failed: {msg}")))
}

fn join_paths(p: &[PathBuf]) -> String {
    p.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
}

/// The status of each pool listed (one, or every imported pool).
fn statuses(pool: Option<&str>) -> Result<Vec<PoolStatus>, CliError> {
    access::pool_names(pool)?.iter().map(|name| access::run(name, ops::Status {})).collect()
}

fn status(pool: Option<&str>, out: Output) -> Result<(), CliError> {
    let all = statuses(pool)?;
    if all.is_empty() {
        println!("no pools imported");
        return Ok(());
    }
    if out.json {
        return print_json(&all);
    }
    all.iter().for_each(print_status);
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

fn print_status(s: &PoolStatus) {
    println!("  pool: {}", s.name);
    println!(" state: {}", s.state);
    if let Some(reason) = &s.suspended {
        println!("status: suspended: {reason}");
    }
    println!("   txg: {}", s.txg);
    println!("config:\n");
    let mut t = Table::new(&["NAME", "STATE", "READ", "WRITE", "CKSUM"]);
    let counts = |e: [u64; 3]| e.map(|n| n.to_string());
    let [r, w, c] = counts(pool_errors(s));
    t.row(vec![s.name.clone(), s.state.clone(), r, w, c]);
    let mut logs_header = false;
    for top in &s.vdevs {
        if top.log && !logs_header {
            t.row(vec!["logs".into(), String::new(), String::new(), String::new(), String::new()]);
            logs_header = true;
        }
        let mirror = top.leaves.len() > 1;
        if mirror {
            let [r, w, c] = counts(top_errors(top));
            t.row(vec![format!("  {}", top.name), top.health.clone(), r, w, c]);
        }
        for l in &top.leaves {
            let indent = if mirror { "    " } else { "  " };
            // The health word as the JSON output spells it (ONLINE, DEGRADED…).
            let health =
                serde_json::to_value(l.health).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
            let [r, w, c] = counts([l.read_errors, l.write_errors, l.checksum_errors]);
            t.row(vec![format!("{indent}{}", l.path), health, r, w, c]);
        }
    }
    t.print(false);
    let [_, _, cksum] = pool_errors(s);
    if cksum == 0 {
        println!("\nerrors: No known data errors");
    } else {
        println!(
            "\nerrors: {cksum} checksum errors since the last clear; run `tarn pool scrub {}` to find damaged files",
            s.name
        );
    }
    println!();
}

fn list(out: Output) -> Result<(), CliError> {
    let statuses = statuses(None)?;
    if out.json {
        return print_json(&statuses);
    }
    if statuses.is_empty() && !out.scripted {
        println!("no pools imported");
        return Ok(());
    }
    let mut t = Table::new(&["NAME", "SIZE", "ALLOC", "FREE", "CAP", "HEALTH"]);
    for s in &statuses {
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
    t.print(out.scripted);
    Ok(())
}

/// `tarn pool history [POOL]`: the commands that changed each pool, oldest first, as
/// `zpool history -l` shows them.
fn history(pool: Option<&str>, json: bool) -> Result<(), CliError> {
    let mut all: Vec<(String, Vec<HistoryEntry>)> = Vec::new();
    for name in access::pool_names(pool)? {
        let entries = access::run(&name, ops::History {})?;
        all.push((name, entries));
    }
    if json {
        let by_pool: std::collections::BTreeMap<&str, &Vec<HistoryEntry>> =
            all.iter().map(|(n, e)| (n.as_str(), e)).collect();
        return print_json(&by_pool);
    }
    if all.is_empty() {
        println!("no pools imported");
    }
    for (name, entries) in &all {
        println!("History for '{name}':");
        for e in entries {
            println!("{} {} [user {} ({}) on {}]", local_time(e.time), e.command, e.uid, e.user, e.host);
        }
        println!();
    }
    Ok(())
}

/// Unix seconds as local time, the way `zpool history` shows it: `2024-05-01.10:00:00`.
fn local_time(secs: u64) -> String {
    let t = secs as libc::time_t;
    // SAFETY: tm is plain data; localtime_r fills it from `t` and returns null on error.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to a time_t and a tm.
    if unsafe { libc::localtime_r(&t, &mut tm) }.is_null() {
        return secs.to_string();
    }
    format!(
        "{:04}-{:02}-{:02}.{:02}:{:02}:{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn device_words_become_data_and_log_vdevs() {
        let (data, logs) = split_logs(&words("/a mirror /b /c log mirror /d /e")).expect("well formed");
        assert!(matches!(data.as_slice(), [VdevSpec::Disk(_), VdevSpec::Mirror(m)] if m.len() == 2));
        assert!(matches!(logs.as_slice(), [VdevSpec::Mirror(m)] if m.len() == 2));
        assert_eq!(spec_paths(&data[1]), vec![PathBuf::from("/b"), PathBuf::from("/c")]);
    }

    #[test]
    fn malformed_device_words_are_usage_errors() {
        for bad in ["/a mirror /b", "/a log", "mirror"] {
            let err = split_logs(&words(bad)).expect_err(bad);
            assert_eq!(err.exit_code(), 2, "{bad}: {err}");
        }
    }
}

//! `tarn pool …`: create, add, import, export, destroy, status, list, clear (scrub is
//! `scrub_cmd`'s, iostat `iostat_cmd`'s).
//!
//! Owns: turning the device words of a command line (`mirror A B log C`) into vdev
//! specs, the pool lifecycle as the user sees it (the cache entry follows the pool:
//! remembered at create and import, forgotten at export and destroy), the mounts an
//! import starts, and the zpool-style status, list and history output (the scan line,
//! data errors and, with `-v`, the files they hit). What a command does to the pool is
//! its `tarn_control::ops::pool` command's, run here or by the daemon that holds the pool
//! (`access::run`).
//! Promises: a malformed device list is refused before any device is touched; a pool is
//! in the cache only once it exists on disk, and leaves it only once it is exported or
//! destroyed (for a mounted pool: once its daemon has unmounted, exported and exited) —
//! or, when its devices are gone or hold another pool, once the user exports (or
//! `destroy -f`s) it; such a pool is listed as UNAVAIL with the reason and does not stop
//! the listing of the others; `destroy` of a pool holding data needs `-f`; the import
//! listing leaves out pools imported here and names the devices it cannot use, and why;
//! create and import are recorded in the pool's history.
//! Must never: import a pool whose name is already imported here, or leave the cache
//! naming devices the pool does not have.

use std::path::{Path, PathBuf};

use tarn_control::ops::pool as ops;
use tarn_dataset::props::{format_size, parse_size};
use tarn_pool::{
    CreateOptions, DeviceClass, HistoryEntry, ImportOptions, LeafHealth, Pool, PoolStatus, ScanKind, ScanState,
    ScanStatus, TopStatus, VdevSpec,
};

use crate::access;
use crate::args::{Output, PoolCmd};
use crate::cache::absolute;
use crate::error::CliError;
use crate::iostat_cmd;
use crate::output::{format_duration, format_time, print_json};
use crate::scrub_cmd::{eta, percent_done};
use crate::space_check;
use crate::table::Table;

pub fn run(cmd: PoolCmd) -> Result<(), CliError> {
    match cmd {
        PoolCmd::Create { force, options, size, pool, vdevs } => {
            create(force, &options, size.as_deref(), &pool, &vdevs)
        }
        PoolCmd::Add { force, size, pool, vdevs } => add(force, size.as_deref(), &pool, &vdevs),
        PoolCmd::Remove { pool, device } => remove(&pool, &device),
        PoolCmd::Set { assignments_then_pool } => set(assignments_then_pool),
        PoolCmd::Get { props, pool, out } => get(&props, &pool, out),
        PoolCmd::Import { dirs, pool, json } => import(&dirs, pool.as_deref(), json),
        PoolCmd::Export { force, pool } => export(force, &pool),
        PoolCmd::Destroy { force, pool } => destroy(force, &pool),
        PoolCmd::Status { verbose, pool, out } => status(pool.as_deref(), verbose, out),
        PoolCmd::List { out } => list(out),
        PoolCmd::Iostat { verbose, latency, scripted, parsable, words } => {
            iostat_cmd::run(iostat_cmd::Request { verbose, latency, scripted, parsable, words })
        }
        PoolCmd::Scrub { stop, detach, pool, json } => crate::scrub_cmd::run(&pool, stop, detach, json),
        PoolCmd::Clear { pool } => access::run(&pool, ops::Clear {}),
        PoolCmd::History { pool, json } => history(pool.as_deref(), json),
    }
}

/// True if reaching a remembered pool failed because its devices are gone, unreadable,
/// or now hold another pool: the pool is UNAVAIL, and only forgetting it helps. (A pool
/// held by another process is busy, not unavailable.)
pub(crate) fn unavailable(e: &CliError) -> bool {
    match e {
        CliError::Pool(p) if p.is_busy() => false,
        CliError::Pool(p) => matches!(**p, tarn_pool::PoolError::Vdev(_) | tarn_pool::PoolError::CannotImport { .. }),
        // `access` refuses devices that now hold another pool this way.
        CliError::Refused(_) => true,
        _ => false,
    }
}

/// `pool export [-f]`: a mounted pool's datasets are unmounted, then the pool is
/// committed and released; an unavailable one is forgotten.
fn export(force: bool, name: &str) -> Result<(), CliError> {
    match access::run(name, ops::Export { force }) {
        Ok(()) => {}
        Err(e) if unavailable(&e) => {
            eprintln!("tarn: pool '{name}' is unavailable ({}); forgetting it", e.one_line());
        }
        Err(e) => return Err(e),
    }
    access::forget(name)
}

/// `pool destroy [-f]`: a pool holding files or datasets needs `-f`; an unavailable pool
/// cannot be marked destroyed on its devices, and `-f` forgets it.
fn destroy(force: bool, name: &str) -> Result<(), CliError> {
    match access::run(name, ops::Destroy { force }) {
        Ok(()) => {}
        Err(e) if unavailable(&e) && force => {
            eprintln!(
                "tarn: pool '{name}' is unavailable ({}); forgetting it, its devices are not written",
                e.one_line()
            );
        }
        Err(e) if unavailable(&e) => {
            return Err(CliError::Refused(format!(
                "pool '{name}' is unavailable ({}); `tarn pool destroy -f {name}` forgets it",
                e.one_line()
            )))
        }
        Err(e) => return Err(e),
    }
    access::forget(name)
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
    let (vdevs, caches) = split_caches(vdevs)?;
    let (specs, logs) = split_logs(&vdevs)?;
    if specs.is_empty() {
        return Err(CliError::Usage("a pool needs at least one data device before `log` or `cache`".into()));
    }
    opts.caches = caches;
    if access::is_imported(name)? {
        return Err(CliError::Refused(format!("pool '{name}' is already imported on this machine")));
    }
    opts.logs = logs;
    let cache_specs: Vec<VdevSpec> = opts.caches.iter().cloned().map(VdevSpec::Disk).collect();
    space_check::warn_if_images_outgrow_free_space(specs.iter().chain(&opts.logs).chain(&cache_specs), opts.size);
    let pool = Pool::create(name, &specs, &opts)?;
    access::log_here(&pool);
    access::remember(&pool, pool.device_paths())?;
    Ok(pool.close()?)
}

/// `pool add POOL CLASS DEV…`, on the pool wherever it is held (a mounted pool goes on
/// serving). Afterwards, whatever happened (a daemon killed halfway may have written the
/// labels), the cache file lists the new devices exactly if their labels say they joined.
fn add(force: bool, size: Option<&str>, pool: &str, vdevs: &[String]) -> Result<(), CliError> {
    let size = size.map(parse_size_flag).transpose()?;
    let (class, specs) = parse_add(vdevs)?;
    space_check::warn_if_images_outgrow_free_space(&specs, size);
    let wire = specs.iter().map(wire_vdev).collect();
    let added = access::run(pool, ops::Add { class, vdevs: wire, force, size });
    access::sync_cached_devices(pool, specs.iter().flat_map(spec_paths))?;
    added.map(|_| ())
}

/// `pool add`'s device words: a class keyword (`log` or `cache`), then its vdevs (a
/// cache device is a plain device, never a mirror).
fn parse_add(words: &[String]) -> Result<(DeviceClass, Vec<VdevSpec>), CliError> {
    let class = match words.first().map(String::as_str) {
        Some("log") => DeviceClass::Log,
        Some("cache") => DeviceClass::Cache,
        _ => {
            return Err(CliError::Usage(
                "adding data vdevs is not supported; only log and cache devices can be added: tarn pool add POOL log|cache DEV..."
                    .into(),
            ))
        }
    };
    let specs = parse_vdevs(&words[1..])?;
    if specs.is_empty() {
        return Err(CliError::Usage(format!("`{}` needs at least one device after it", class.keyword())));
    }
    if class == DeviceClass::Cache && specs.iter().any(|s| matches!(s, VdevSpec::Mirror(_))) {
        return Err(CliError::Usage(
            "cache devices are plain devices: `cache DEV...` (a cache is never mirrored)".into(),
        ));
    }
    Ok((class, specs))
}

/// `pool remove POOL DEV`: a log or cache device leaves the pool wherever it is held;
/// the cache file then lists the pool's devices whose labels still say they belong to it
/// (cache devices are never in it: the labels' config names them).
fn remove(pool: &str, device: &str) -> Result<(), CliError> {
    // A path is made absolute as at add; a vdev name (`mirror-2`) is passed as is.
    let device = if device.contains('/') || Path::new(device).exists() {
        absolute(device.as_ref()).display().to_string()
    } else {
        device.to_string()
    };
    let removed = access::run(pool, ops::Remove { device });
    access::sync_cached_devices(pool, Vec::new())?;
    removed.map(|_| ())
}

/// `pool set PROP=VALUE... POOL`: applied in order; the first refused stops it.
fn set(mut words: Vec<String>) -> Result<(), CliError> {
    let pool = words.pop().unwrap_or_default();
    if pool.contains('=') || words.is_empty() {
        return Err(CliError::Usage("usage: tarn pool set PROP=VALUE... POOL".into()));
    }
    let assignments = crate::ds_cmd::owned_assignments(&words)?;
    access::run(&pool, ops::PoolSet { assignments })
}

/// `pool get PROP[,PROP]|all POOL`.
fn get(props: &str, pool: &str, out: Output) -> Result<(), CliError> {
    let wanted = (props != "all").then(|| props.split(',').map(String::from).collect());
    let rows = access::run(pool, ops::PoolGet { props: wanted })?;
    if out.json {
        return print_json(&rows);
    }
    let mut t = Table::new(&["NAME", "PROPERTY", "VALUE", "SOURCE"]);
    for r in rows {
        t.row(vec![pool.to_string(), r.name, r.value, r.source]);
    }
    t.print(out.scripted);
    Ok(())
}

fn wire_vdev(spec: &VdevSpec) -> ops::Vdev {
    match spec {
        VdevSpec::Disk(p) => ops::Vdev::Disk(p.clone()),
        VdevSpec::Mirror(ps) => ops::Vdev::Mirror(ps.clone()),
    }
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

/// Takes "cache DEV..." out of a device list (up to `log` or the end): the cache
/// devices, each a plain device (a cache is not mirrored: losing it costs only speed).
fn split_caches(words: &[String]) -> Result<(Vec<String>, Vec<PathBuf>), CliError> {
    let Some(at) = words.iter().position(|w| w == "cache") else { return Ok((words.to_vec(), Vec::new())) };
    let end = words[at + 1..].iter().position(|w| w == "log").map_or(words.len(), |n| at + 1 + n);
    let caches: Vec<PathBuf> = words[at + 1..end].iter().map(|w| absolute(w.as_ref())).collect();
    if caches.is_empty() {
        return Err(CliError::Usage("`cache` needs at least one device after it".into()));
    }
    if words[at + 1..end].iter().any(|w| w == "mirror" || w == "cache") {
        return Err(CliError::Usage(
            "cache devices are plain devices: `cache DEV...` (a cache is never mirrored)".into(),
        ));
    }
    let rest = words[..at].iter().chain(&words[end..]).cloned().collect();
    Ok((rest, caches))
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
        let cache = crate::cache::Cache::load()?;
        let imported: Vec<u64> = cache.pools.values().map(|c| c.guid).collect();
        let importable: Vec<tarn_pool::Discovered> =
            found.pools.iter().filter(|d| !imported.contains(&d.guid)).cloned().collect();
        return list_importable(&importable, &found.unusable, json);
    };
    let matching: Vec<_> = found.pools.iter().filter(|d| d.name == want || d.guid.to_string() == want).collect();
    let d = match matching.as_slice() {
        [] => {
            return Err(CliError::Refused(format!(
                "no pool '{want}' found on devices in {}{}",
                join_paths(&dirs),
                unusable_note(&found.unusable)
            )))
        }
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

/// `; PATH: reason` for each device a search could not use (none: empty).
fn unusable_note(unusable: &[tarn_pool::Unusable]) -> String {
    unusable.iter().map(|u| format!("; {}", u.reason)).collect()
}

/// Lists the pools that can be imported (not those imported here), and says which
/// devices could not be used and why; only such devices and no pool is a failure.
fn list_importable(
    found: &[tarn_pool::Discovered],
    unusable: &[tarn_pool::Unusable],
    json: bool,
) -> Result<(), CliError> {
    if found.is_empty() && !unusable.is_empty() {
        return Err(CliError::Refused(format!("no pools available to import{}", unusable_note(unusable))));
    }
    for u in unusable {
        eprintln!("tarn: cannot use {}", u.reason);
    }
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

fn status(pool: Option<&str>, verbose: bool, out: Output) -> Result<(), CliError> {
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
            let io = c.io_errors.to_string();
            t.row(vec![format!("  {}", c.path), c.state.name().to_string(), io, "0".into(), "0".into(), note]);
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

fn list(out: Output) -> Result<(), CliError> {
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
        let (rest, caches) = split_caches(&words("/a cache /f /g log mirror /d /e")).expect("well formed");
        assert_eq!(rest, words("/a log mirror /d /e"));
        assert_eq!(caches, vec![PathBuf::from("/f"), PathBuf::from("/g")]);
        for bad in ["/a cache", "/a cache log /d", "/a cache mirror /f /g"] {
            assert!(matches!(split_caches(&words(bad)), Err(CliError::Usage(_))), "{bad}");
        }
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

//! `tarn pool import`: the listing of importable pools and the import itself, with the
//! mounts an import starts.
//!
//! Owns: searching device directories, the import listing (pools already imported here
//! left out, unusable devices named with the reason), remembering an imported pool in
//! the cache, and mounting its datasets that have a mountpoint.
//! Promises: an import is recorded in the pool's history; a pool whose name is already
//! imported here is refused.
//! Must never: leave the cache naming devices the pool does not have.

use std::path::PathBuf;

use tarn_pool::{ImportOptions, Pool};

use crate::access;
use crate::cache::absolute;
use crate::error::CliError;
use crate::output::print_json;

/// Without POOL: lists the pools found on the devices. With POOL (a name or an id):
/// imports it, remembers it, and mounts its datasets that have a mountpoint.
pub(super) fn import(dirs: &[PathBuf], pool: Option<&str>, json: bool) -> Result<(), CliError> {
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
    if let Some(trouble) = p.replay_trouble() {
        eprintln!("tarn pool import: warning: {trouble}");
    }
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

//! `tarn pool …`: create, add, remove, set/get, import, export, destroy, status, list,
//! clear, history (scrub is `scrub_cmd`'s, iostat `iostat_cmd`'s).
//!
//! Owns: the pool lifecycle as the user sees it (the cache entry follows the pool:
//! remembered at create and import, forgotten at export and destroy) and the history
//! output; its rooms are `vdev_words` (device words into vdev specs), `import` (the
//! import listing and the mounts an import starts) and `status` (zpool-style status and
//! list). What a command does to the pool is its `tarn_control::ops::pool` command's, run
//! here or by the daemon that holds the pool (`access::run`).
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

use std::path::Path;

use tarn_control::ops::pool as ops;
use tarn_pool::{CreateOptions, HistoryEntry, Pool, VdevSpec};

use crate::access;
use crate::args::{Output, PoolCmd};
use crate::cache::absolute;
use crate::error::CliError;
use crate::iostat_cmd;
use crate::output::print_json;
use crate::space_check;
use crate::table::Table;

mod import;
mod status;
mod vdev_words;

use import::import;
pub(crate) use import::{datasets_with_mountpoints, mount_at_import};
use status::{list, status};
use vdev_words::{parse_add, parse_size_flag, spec_paths, split_caches, split_logs, wire_vdev};

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

//! cli — `tarn`, in the spirit of zpool/zfs: human output by default, `-H`/`-p` and
//! `--json` for scripts, and one clear line per error with a non-zero exit.
//!
//! Owns: argument parsing, the pool cache (which pools this machine imported), output
//! formatting, and copying files between the host and a dataset.
//!
//! Must never: print a Rust panic or debug dump for something the user or the disk
//! caused; every engine error becomes one line naming the object and, where there is
//! one, the fix.

mod cache;
mod copy;
mod table;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use tarn_dataset::props::{format_size, parse_size};
use tarn_pool::{CreateOptions, ImportOptions, Pool, VdevSpec};

use cache::{absolute, Cache, CachedPool};
use table::Table;

#[derive(Parser)]
#[command(name = "tarn", version, about = "tarn: a copy-on-write storage pool for databases")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Pools: create, import, export, status, list, scrub, clear, destroy.
    #[command(subcommand)]
    Pool(PoolCmd),
    /// Datasets: create, destroy, list.
    #[command(subcommand)]
    Ds(DsCmd),
    /// Set properties: tarn set PROP=VALUE... DATASET
    Set {
        #[arg(required = true, num_args = 1..)]
        assignments_then_dataset: Vec<String>,
    },
    /// Show properties: tarn get PROP[,PROP]|all DATASET
    Get {
        props: String,
        dataset: String,
        #[command(flatten)]
        out: Output,
    },
    /// Clear a local property so it is inherited again.
    Inherit { prop: String, dataset: String },
    /// Copy host files or directories into a dataset: tarn put SRC... POOL/DS[:DIR]
    Put {
        #[arg(required = true, num_args = 2..)]
        paths: Vec<PathBuf>,
    },
    /// Print a file stored in a dataset: tarn cat POOL/DS:PATH
    Cat { target: String },
    /// List a directory of a dataset: tarn ls POOL/DS[:PATH]
    Ls { target: String },
    /// Change a tunable of an imported pool at run time: tarn tune POOL arc_max=SIZE
    Tune { pool: String, setting: String },
    /// Engine counters (arcstats, intent log, txg, io, space) of a pool: tarn stats [arc|zil|txg|io|space|all] POOL
    Stats {
        /// Which counters: arc, zil, txg, io, space or all.
        #[arg(value_parser = ["arc", "zil", "txg", "io", "space", "all"])]
        which: String,
        pool: String,
        #[arg(long)]
        json: bool,
        /// Prometheus text exposition format.
        #[arg(long, conflicts_with = "json")]
        prometheus: bool,
    },
    /// Mount a dataset with FUSE: tarn mount POOL/DS [MOUNTPOINT] [-f] [--threads N]
    Mount {
        dataset: String,
        /// Default: the dataset's mountpoint property.
        mountpoint: Option<PathBuf>,
        /// Stay in the foreground instead of running as a daemon.
        #[arg(short = 'f')]
        foreground: bool,
        /// Threads serving FUSE requests.
        #[arg(long, default_value_t = 8)]
        threads: usize,
        /// Also mount this dataset of the same pool, on its mountpoint property, in the
        /// same daemon (repeatable; `tarn pool import` uses it).
        #[arg(long, value_name = "POOL/DS")]
        also: Vec<String>,
    },
    /// Unmount a dataset, committing everything: tarn umount MOUNTPOINT|POOL/DS
    Umount { target: String },
}

#[derive(Args, Clone, Copy)]
struct Output {
    /// Scripted mode: no header, tab-separated.
    #[arg(short = 'H')]
    scripted: bool,
    /// Exact numbers (bytes) instead of human sizes.
    #[arg(short = 'p')]
    parsable: bool,
    /// JSON output.
    #[arg(long)]
    json: bool,
}

impl Output {
    fn size(&self, bytes: u64) -> String {
        if self.parsable {
            bytes.to_string()
        } else {
            format_size(bytes)
        }
    }
}

#[derive(Subcommand)]
enum PoolCmd {
    /// Create a pool: tarn pool create POOL [mirror] DEV... [mirror DEV...] [log [mirror] DEV...]
    Create {
        /// Reuse devices that belong to another pool (destroys it).
        #[arg(short = 'f')]
        force: bool,
        /// Pool options, e.g. -o ashift=12.
        #[arg(short = 'o', value_name = "PROP=VALUE")]
        options: Vec<String>,
        /// Size of image files created for device paths that do not exist, e.g. 4G.
        #[arg(long)]
        size: Option<String>,
        pool: String,
        #[arg(required = true, num_args = 1..)]
        vdevs: Vec<String>,
    },
    /// Add separate intent-log devices: tarn pool add POOL log [mirror] DEV...
    Add {
        /// Reuse devices that belong to another pool (destroys it).
        #[arg(short = 'f')]
        force: bool,
        /// Size of image files created for device paths that do not exist, e.g. 1G.
        #[arg(long)]
        size: Option<String>,
        pool: String,
        #[arg(required = true, num_args = 2..)]
        vdevs: Vec<String>,
    },
    /// Import a pool found on devices (lists importable pools without POOL), then mount
    /// every dataset whose mountpoint property is a path (one daemon for the pool).
    Import {
        /// Where to look for devices (directories or device paths); repeatable.
        #[arg(short = 'd', value_name = "DIR")]
        dirs: Vec<PathBuf>,
        pool: Option<String>,
        /// JSON output (for the list of importable pools).
        #[arg(long)]
        json: bool,
    },
    /// Commit everything and release the pool's devices.
    Export { pool: String },
    /// Show health, capacity and per-device error counts.
    Status {
        pool: Option<String>,
        #[command(flatten)]
        out: Output,
    },
    /// One line per imported pool.
    List {
        #[command(flatten)]
        out: Output,
    },
    /// Read and verify every block; repair mirrors from a good copy.
    Scrub {
        pool: String,
        #[arg(long)]
        json: bool,
    },
    /// Reset the device error counters.
    Clear { pool: String },
    /// Destroy a pool: its devices no longer import.
    Destroy {
        #[arg(short = 'f')]
        force: bool,
        pool: String,
    },
}

#[derive(Subcommand)]
enum DsCmd {
    /// Create a dataset: tarn ds create [-o PROP=VALUE]... POOL/NAME
    Create {
        #[arg(short = 'o', value_name = "PROP=VALUE")]
        options: Vec<String>,
        name: String,
    },
    /// Destroy a dataset with no children.
    Destroy { name: String },
    /// List datasets with space used.
    List {
        pool: Option<String>,
        #[command(flatten)]
        out: Output,
    },
}

fn main() -> ExitCode {
    // `tarn ls … | head` should end quietly like other Unix tools, not panic on EPIPE.
    // SAFETY: setting a signal disposition before any thread starts.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = Cli::parse();
    match run(cli.cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("tarn: {msg}");
            ExitCode::FAILURE
        }
    }
}

type Res = Result<(), String>;

fn run(cmd: Cmd) -> Res {
    match cmd {
        Cmd::Pool(p) => run_pool(p),
        Cmd::Ds(d) => run_ds(d),
        Cmd::Set { assignments_then_dataset } => cmd_set(assignments_then_dataset),
        Cmd::Get { props, dataset, out } => cmd_get(&props, &dataset, out),
        Cmd::Inherit { prop, dataset } => with_pool_of(&dataset, |pool| pool.inherit_property(&dataset, &prop).map_err(err)),
        Cmd::Put { mut paths } => {
            let target = paths.pop().expect("clap requires two paths").display().to_string();
            let (ds, dir) = split_target(&target);
            with_pool_of(ds, |pool| copy::put(pool, ds, dir, &paths))
        }
        Cmd::Cat { target } => {
            let (ds, path) = split_target(&target);
            with_pool_of(ds, |pool| copy::cat(pool, ds, path))
        }
        Cmd::Stats { which, pool, json, prometheus } => cmd_stats(&which, &pool, json, prometheus),
        Cmd::Tune { pool, setting } => cmd_tune(&pool, &setting),
        Cmd::Ls { target } => {
            let (ds, path) = split_target(&target);
            with_pool_of(ds, |pool| copy::ls(pool, ds, path))
        }
        Cmd::Mount { dataset, mountpoint, foreground, threads, also } => {
            let pool_name = dataset.split('/').next().unwrap_or(&dataset).to_string();
            if let Some(other) = also.iter().find(|d| d.split('/').next() != Some(&pool_name)) {
                return Err(format!("--also {other}: not a dataset of pool '{pool_name}' (one daemon serves one pool)"));
            }
            let req = tarn_fuse::MountRequest { dataset, mountpoint, foreground, threads, more: also };
            tarn_fuse::mount(req, || open_pool(&pool_name)).map_err(err)
        }
        Cmd::Umount { target } => tarn_fuse::umount(&target).map_err(err),
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// "POOL/DS:PATH" → ("POOL/DS", "PATH").
fn split_target(t: &str) -> (&str, &str) {
    t.split_once(':').unwrap_or((t, "/"))
}

/// Opens an imported pool by name from the cache.
fn open_pool(name: &str) -> Result<Pool, String> {
    let cache = Cache::load()?;
    // A `tarn mount` daemon holds the devices: say which one and how to release it.
    tarn_fuse::state::refuse_if_mounted(name).map_err(err)?;
    let entry = cache.get(name)?;
    let pool = Pool::import_paths(&entry.devices, &ImportOptions::default()).map_err(err)?;
    if pool.guid() != entry.guid {
        return Err(format!("the devices of pool '{name}' now hold another pool; run `tarn pool import -d DIR`"));
    }
    Ok(pool)
}

/// Runs `f` on the pool that holds dataset `ds`, then commits and closes the pool.
fn with_pool_of(ds: &str, f: impl FnOnce(&Pool) -> Res) -> Res {
    let pool_name = ds.split('/').next().unwrap_or(ds);
    let pool = open_pool(pool_name)?;
    let result = f(&pool);
    let closed = pool.close().map_err(err);
    result.and(closed)
}

fn parse_vdevs(words: &[String]) -> Result<Vec<VdevSpec>, String> {
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
                return Err("a mirror needs at least two devices: mirror DEV DEV".into());
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
fn split_logs(words: &[String]) -> Result<(Vec<VdevSpec>, Vec<VdevSpec>), String> {
    match words.iter().position(|w| w == "log") {
        Some(at) => {
            if at + 1 == words.len() {
                return Err("`log` needs at least one device after it".into());
            }
            Ok((parse_vdevs(&words[..at])?, parse_vdevs(&words[at + 1..])?))
        }
        None => Ok((parse_vdevs(words)?, Vec::new())),
    }
}

fn spec_paths(spec: &VdevSpec) -> Vec<PathBuf> {
    match spec {
        VdevSpec::Disk(p) => vec![p.clone()],
        VdevSpec::Mirror(ps) => ps.clone(),
    }
}

fn run_pool(cmd: PoolCmd) -> Res {
    match cmd {
        PoolCmd::Create { force, options, size, pool, vdevs } => pool_create(force, &options, size, &pool, &vdevs),
        PoolCmd::Import { dirs, pool, json } => pool_import(&dirs, pool.as_deref(), json),
        PoolCmd::Add { force, size, pool, vdevs } => {
            let size = size.map(|s| parse_size(&s).ok_or_else(|| format!("invalid --size '{s}': use a size like 512M, 4G"))).transpose()?;
            let (data, logs) = split_logs(&vdevs)?;
            if !data.is_empty() || logs.is_empty() {
                return Err("only log devices can be added: tarn pool add POOL log DEV...".into());
            }
            let p = open_pool(&pool)?;
            p.add_logs(&logs, force, size).map_err(err)?;
            let mut cache = Cache::load()?;
            if let Some(entry) = cache.pools.get_mut(&pool) {
                entry.devices.extend(logs.iter().flat_map(spec_paths));
            }
            cache.save()
        }
        PoolCmd::Export { pool } => {
            let p = open_pool(&pool)?;
            p.export().map_err(err)?;
            forget(&pool)
        }
        PoolCmd::Destroy { force, pool } => {
            let p = open_pool(&pool)?;
            let used: u64 = p.datasets_info().iter().filter(|d| d.name == pool).map(|d| d.logicalused).sum();
            if used > 0 && !force {
                let _ = p.close();
                return Err(format!("pool '{pool}' holds {} of data; use -f to destroy it", format_size(used)));
            }
            p.destroy().map_err(err)?;
            forget(&pool)
        }
        PoolCmd::Status { pool, out } => pool_status(pool.as_deref(), out),
        PoolCmd::List { out } => pool_list(out),
        PoolCmd::Scrub { pool, json } => {
            let p = open_pool(&pool)?;
            let r = p.scrub().map_err(err)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r).expect("json"));
            } else {
                println!(
                    "scrub of '{pool}': {} blocks ({}) in {:.1}s; {} bad copies found, {} unrecoverable",
                    r.blocks,
                    format_size(r.bytes),
                    r.seconds,
                    r.checksum_errors_seen,
                    r.errors
                );
            }
            p.close().map_err(err)?;
            if r.errors > 0 {
                return Err(format!("{} blocks could not be read from any copy; see `tarn pool status {pool}`", r.errors));
            }
            Ok(())
        }
        PoolCmd::Clear { pool } => {
            let p = open_pool(&pool)?;
            p.clear_errors().map_err(err)?;
            p.close().map_err(err)
        }
    }
}

fn pool_create(force: bool, options: &[String], size: Option<String>, name: &str, vdevs: &[String]) -> Res {
    let mut opts = CreateOptions { force, ..Default::default() };
    if let Some(s) = size {
        opts.size = Some(parse_size(&s).ok_or_else(|| format!("invalid --size '{s}': use a size like 512M, 4G"))?);
    }
    for o in options {
        match o.split_once('=') {
            Some(("ashift", v)) => {
                opts.ashift = v.parse().map_err(|_| format!("invalid ashift '{v}': use a number from 9 to 16"))?;
            }
            _ => return Err(format!("unknown pool option '{o}'; supported: ashift=N")),
        }
    }
    if Cache::load()?.pools.contains_key(name) {
        return Err(format!("pool '{name}' is already imported on this machine"));
    }
    let (specs, logs) = split_logs(vdevs)?;
    if specs.is_empty() {
        return Err("a pool needs at least one data device before `log`".into());
    }
    opts.logs = logs;
    let pool = Pool::create(name, &specs, &opts).map_err(err)?;
    remember(&pool)?;
    pool.close().map_err(err)
}

fn remember(pool: &Pool) -> Res {
    let mut cache = Cache::load()?;
    cache.pools.insert(pool.name().to_string(), CachedPool { guid: pool.guid(), devices: pool.device_paths() });
    cache.save()
}

fn forget(name: &str) -> Res {
    let mut cache = Cache::load()?;
    cache.pools.remove(name);
    cache.save()
}

fn pool_import(dirs: &[PathBuf], pool: Option<&str>, json: bool) -> Res {
    let dirs: Vec<PathBuf> = if dirs.is_empty() { vec![PathBuf::from("/dev")] } else { dirs.iter().map(|d| absolute(d)).collect() };
    let found = tarn_pool::discover(&dirs);
    let Some(want) = pool else {
        if json {
            let list: Vec<serde_json::Value> = found
                .iter()
                .map(|d| serde_json::json!({"name": d.name, "guid": d.guid, "state": format!("{:?}", d.label.state).to_lowercase(), "txg": d.txg, "devices": d.devices}))
                .collect();
            println!("{}", serde_json::to_string_pretty(&list).expect("json"));
            return Ok(());
        }
        if found.is_empty() {
            println!("no pools available to import");
        }
        for d in &found {
            println!("   pool: {}\n     id: {}\n  state: {:?}\n    txg: {}\n devices:", d.name, d.guid, d.label.state, d.txg);
            for dev in &d.devices {
                println!("         {}", dev.display());
            }
        }
        return Ok(());
    };
    let matching: Vec<_> = found.iter().filter(|d| d.name == want || d.guid.to_string() == want).collect();
    let d = match matching.as_slice() {
        [] => return Err(format!("no pool '{want}' found on devices in {}", join_paths(&dirs))),
        [one] => *one,
        _ => return Err(format!("several pools are named '{want}'; import by id (see `tarn pool import -d DIR`)")),
    };
    if Cache::load()?.pools.contains_key(&d.name) {
        return Err(format!("a pool named '{}' is already imported on this machine", d.name));
    }
    let p = Pool::import_paths(&d.devices, &ImportOptions::default()).map_err(err)?;
    let mut cache = Cache::load()?;
    cache.pools.insert(p.name().to_string(), CachedPool { guid: p.guid(), devices: d.devices.clone() });
    cache.save()?;
    let to_mount = datasets_with_mountpoints(&p);
    let name = p.name().to_string();
    p.close().map_err(err)?;
    mount_at_import(&name, to_mount)
}

/// Datasets whose `mountpoint` property is a path, with that path.
fn datasets_with_mountpoints(p: &Pool) -> Vec<(String, PathBuf)> {
    p.datasets_info().into_iter().filter(|d| d.mountpoint.starts_with('/')).map(|d| (d.name, PathBuf::from(d.mountpoint))).collect()
}

/// Mounts every dataset that has a mountpoint, all served by one daemon (the daemon
/// holds the pool). Creates missing mountpoint directories, as zfs does. The pool stays
/// imported if a mount fails; the error says which.
fn mount_at_import(pool: &str, mut to_mount: Vec<(String, PathBuf)>) -> Res {
    if to_mount.is_empty() {
        return Ok(());
    }
    for (ds, mp) in &to_mount {
        std::fs::create_dir_all(mp).map_err(|e| format!("cannot create mountpoint {} of {ds}: {e}", mp.display()))?;
    }
    let (first, _) = to_mount.remove(0);
    // A fresh `tarn mount` process: this one has threads now (the import used the
    // pool), and the mount daemon must fork before any thread exists.
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the tarn binary: {e}"))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["mount", first.as_str()]);
    for (ds, _) in &to_mount {
        cmd.args(["--also", ds.as_str()]);
    }
    let out = cmd.output().map_err(|e| format!("cannot run tarn mount: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let msg = String::from_utf8_lossy(&out.stderr);
    let msg = msg.trim().trim_start_matches("tarn: ");
    Err(format!("pool '{pool}' is imported, but mounting its datasets failed: {msg}"))
}

fn join_paths(p: &[PathBuf]) -> String {
    p.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
}

fn cached_pool_names(pool: Option<&str>) -> Result<Vec<String>, String> {
    let cache = Cache::load()?;
    match pool {
        Some(p) => cache.get(p).map(|_| vec![p.to_string()]),
        None => Ok(cache.pools.keys().cloned().collect()),
    }
}

fn pool_status(pool: Option<&str>, out: Output) -> Res {
    let names = cached_pool_names(pool)?;
    if names.is_empty() {
        println!("no pools imported");
        return Ok(());
    }
    let mut all = Vec::new();
    for name in names {
        let p = open_pool(&name)?;
        all.push(p.status());
        p.close().map_err(err)?;
    }
    if out.json {
        println!("{}", serde_json::to_string_pretty(&all).expect("json"));
        return Ok(());
    }
    for s in all {
        print_status(&s);
    }
    Ok(())
}

fn print_status(s: &tarn_pool::PoolStatus) {
    println!("  pool: {}", s.name);
    println!(" state: {}", s.state);
    if let Some(reason) = &s.suspended {
        println!("status: suspended: {reason}");
    }
    println!("   txg: {}", s.txg);
    println!("config:\n");
    let mut t = Table::new(&["NAME", "STATE", "READ", "WRITE", "CKSUM"]);
    let totals = s.vdevs.iter().flat_map(|v| &v.leaves).fold((0, 0, 0), |a, l| {
        (a.0 + l.read_errors, a.1 + l.write_errors, a.2 + l.checksum_errors)
    });
    t.row(vec![s.name.clone(), s.state.clone(), totals.0.to_string(), totals.1.to_string(), totals.2.to_string()]);
    let mut logs_header = false;
    for top in &s.vdevs {
        if top.log && !logs_header {
            t.row(vec!["logs".into(), String::new(), String::new(), String::new(), String::new()]);
            logs_header = true;
        }
        let mirror = top.leaves.len() > 1;
        if mirror {
            let e = top.leaves.iter().fold((0, 0, 0), |a, l| (a.0 + l.read_errors, a.1 + l.write_errors, a.2 + l.checksum_errors));
            t.row(vec![format!("  {}", top.name), top.health.clone(), e.0.to_string(), e.1.to_string(), e.2.to_string()]);
        }
        for l in &top.leaves {
            let indent = if mirror { "    " } else { "  " };
            let health = serde_json::to_value(l.health).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
            t.row(vec![
                format!("{indent}{}", l.path),
                health,
                l.read_errors.to_string(),
                l.write_errors.to_string(),
                l.checksum_errors.to_string(),
            ]);
        }
    }
    t.print(false);
    let cksum: u64 = s.vdevs.iter().flat_map(|v| &v.leaves).map(|l| l.checksum_errors).sum();
    if cksum == 0 {
        println!("\nerrors: No known data errors");
    } else {
        println!("\nerrors: {cksum} checksum errors since the last clear; run `tarn pool scrub {}` to find damaged files", s.name);
    }
    println!();
}

fn pool_list(out: Output) -> Res {
    let names = cached_pool_names(None)?;
    let mut statuses = Vec::new();
    for name in names {
        let p = open_pool(&name)?;
        statuses.push(p.status());
        p.close().map_err(err)?;
    }
    if out.json {
        println!("{}", serde_json::to_string_pretty(&statuses).expect("json"));
        return Ok(());
    }
    let mut t = Table::new(&["NAME", "SIZE", "ALLOC", "FREE", "CAP", "HEALTH"]);
    for s in &statuses {
        let cap = if s.size == 0 { 0 } else { s.allocated * 100 / s.size };
        t.row(vec![s.name.clone(), out.size(s.size), out.size(s.allocated), out.size(s.free), format!("{cap}%"), s.state.clone()]);
    }
    if statuses.is_empty() && !out.scripted {
        println!("no pools imported");
        return Ok(());
    }
    t.print(out.scripted);
    Ok(())
}

fn run_ds(cmd: DsCmd) -> Res {
    match cmd {
        DsCmd::Create { options, name } => {
            let assignments = options.iter().map(|o| split_assignment(o)).collect::<Result<Vec<_>, _>>()?;
            with_pool_of(&name, |pool| {
                pool.create_dataset(&name).map_err(err)?;
                for (k, v) in assignments {
                    pool.set_property(&name, k, v).map_err(err)?;
                }
                Ok(())
            })
        }
        DsCmd::Destroy { name } => with_pool_of(&name, |pool| pool.destroy_dataset(&name).map_err(err)),
        DsCmd::List { pool, out } => {
            let mut rows = Vec::new();
            for name in cached_pool_names(pool.as_deref())? {
                let p = open_pool(&name)?;
                rows.extend(p.datasets_info());
                p.close().map_err(err)?;
            }
            if out.json {
                println!("{}", serde_json::to_string_pretty(&rows).expect("json"));
                return Ok(());
            }
            let mut t = Table::new(&["NAME", "USED", "AVAIL", "LUSED", "RATIO", "MOUNTPOINT"]);
            for d in rows {
                let ratio = if d.used == 0 { 1.0 } else { d.logicalused as f64 / d.used as f64 };
                t.row(vec![d.name, out.size(d.used), out.size(d.available), out.size(d.logicalused), format!("{ratio:.2}x"), d.mountpoint]);
            }
            t.print(out.scripted);
            Ok(())
        }
    }
}

fn split_assignment(a: &str) -> Result<(&str, &str), String> {
    a.split_once('=').ok_or_else(|| format!("'{a}' is not PROP=VALUE"))
}

fn cmd_set(mut args: Vec<String>) -> Res {
    if args.len() < 2 {
        return Err("usage: tarn set PROP=VALUE... DATASET".into());
    }
    let ds = args.pop().expect("checked length");
    if ds.contains('=') {
        return Err(format!("the last argument must be a dataset, not '{ds}'"));
    }
    let assignments = args.iter().map(|a| split_assignment(a)).collect::<Result<Vec<_>, _>>()?;
    with_pool_of(&ds, |pool| {
        for (k, v) in assignments {
            pool.set_property(&ds, k, v).map_err(err)?;
        }
        Ok(())
    })
}

fn cmd_get(props: &str, dataset: &str, out: Output) -> Res {
    with_pool_of(dataset, |pool| {
        let mut rows = Vec::new();
        if props == "all" {
            rows = pool.get_properties(dataset, None).map_err(err)?;
        } else {
            for p in props.split(',') {
                rows.extend(pool.get_properties(dataset, Some(p)).map_err(err)?);
            }
        }
        if out.json {
            println!("{}", serde_json::to_string_pretty(&rows).expect("json"));
            return Ok(());
        }
        let mut t = Table::new(&["NAME", "PROPERTY", "VALUE", "SOURCE"]);
        for r in rows {
            let value = if out.parsable { r.raw.unwrap_or(r.value) } else { r.value };
            t.row(vec![dataset.to_string(), r.property, value, r.source]);
        }
        t.print(out.scripted);
        Ok(())
    })
}

/// Counters of a mounted pool come from its daemon (published each second); an
/// unmounted pool is opened here, so its caches start empty.
fn cmd_stats(which: &str, pool: &str, json: bool, prometheus: bool) -> Res {
    let stats = match tarn_fuse::stats::read_published(pool) {
        Some(s) => s,
        None => {
            let p = open_pool(pool)?;
            let s = p.stats();
            p.close().map_err(err)?;
            s
        }
    };
    let arc: std::collections::BTreeMap<String, u64> =
        stats.arc.fields().into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    let groups: Vec<(&str, &std::collections::BTreeMap<String, u64>)> =
        [("arc", &arc), ("zil", &stats.zil), ("txg", &stats.txg), ("io", &stats.io), ("space", &stats.space)]
            .into_iter()
            .filter(|(name, _)| which == "all" || which == *name)
            .collect();
    if json {
        let v: serde_json::Map<String, serde_json::Value> =
            groups.iter().map(|(n, m)| (n.to_string(), serde_json::to_value(m).expect("json"))).collect();
        println!("{}", serde_json::to_string_pretty(&v).expect("json"));
        return Ok(());
    }
    for (group, map) in groups {
        for (name, value) in map {
            if prometheus {
                println!("tarn_{group}_{name}{{pool=\"{pool}\"}} {value}");
            } else {
                println!("{group:<4} {name:<28} {value}");
            }
        }
    }
    Ok(())
}

/// `arc_max` of a mounted pool is handed to its daemon (applied within a second); an
/// unmounted pool has no cache to tune: the budget is set per process by TARN_ARC_MAX.
fn cmd_tune(pool: &str, setting: &str) -> Res {
    let (name, value) = split_assignment(setting)?;
    if name != "arc_max" {
        return Err(format!("unknown tunable '{name}'; tunable: arc_max"));
    }
    let bytes = parse_size(value).filter(|&b| b >= 16 << 20).ok_or_else(|| format!("invalid arc_max '{value}': use a size of at least 16M, like 512M or 4G"))?;
    if tarn_fuse::stats::read_published(pool).is_none() {
        Cache::load()?.get(pool)?;
        return Err(format!("pool '{pool}' is not mounted, so it has no running cache; set TARN_ARC_MAX={value} for the process that mounts it"));
    }
    let path = tarn_fuse::stats::arc_max_request_path(pool);
    std::fs::write(&path, bytes.to_string()).map_err(|e| format!("{}: {e}", path.display()))
}

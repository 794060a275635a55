//! How a command reaches a pool by its name: through the control socket of the daemon
//! that holds it, or, when none does, by opening its devices (the cache says which) for
//! the length of one command. The user never sees the difference: the same command
//! (`tarn_control::Op`) runs on either side, and its output is shown here.
//!
//! Owns: choosing the side ([`session`]), running commands there ([`run`]), the
//! open–work–commit bracket of a command on a pool this process opened, and the cache
//! entries of created, imported, exported and destroyed pools.
//! Promises: a pool held by a live daemon is never opened a second time (the devices'
//! locks make sure of it; a command that finds them busy while a daemon starts or
//! finishes waits for it, bounded); every change a command makes is committed before
//! the command reports success, and a pool this process opened is closed even when the
//! work failed; a daemon that is closing the pool (its last unmount, an export) is
//! waited for and the command then runs here.
//! Must never: open a pool the cache does not name, or keep one open past its command.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tarn_control::{execute, finish_local, Caller, Client, Finish, Held, Op};
use tarn_pool::{HistoryEntry, ImportOptions, Pool};

use crate::cache::{Cache, CachedPool};
use crate::error::CliError;

/// How long a command waits for a daemon that is starting (holding the devices, its
/// socket not yet up) or ending (releasing them) before it gives up.
const HELD_WAIT: Duration = Duration::from_secs(30);
/// How long a command waits for a daemon that let the pool go to exit.
const EXIT_WAIT: Duration = Duration::from_secs(60);
/// How long a command waits for a daemon that hung up on it to be gone (a killed one is
/// gone in moments; one still running after this is not dying, and its error stands).
const HANGUP_WAIT: Duration = Duration::from_secs(5);

/// After `e` from the daemon: whether the command may run again without it, i.e. the
/// daemon was closing the pool or hung up, and has now exited.
pub fn daemon_went_away(client: &Client, e: &tarn_control::OpError) -> bool {
    let wait = if e.is_closing() {
        EXIT_WAIT
    } else if e.is_hangup() {
        HANGUP_WAIT
    } else {
        return false;
    };
    client.wait_daemon_gone(wait)
}

/// The pool part of a dataset or snapshot name: "tank/db/x" and "tank@s" → "tank".
pub fn pool_of(dataset: &str) -> &str {
    dataset.split(['/', '@']).next().unwrap_or(dataset)
}

/// A pool reached by one command.
pub enum Session {
    /// Opened by this process; how it is left is decided by the commands run on it.
    Local { pool: Pool, finish: Finish, history: Option<HistoryEntry> },
    /// Held by a daemon, reached through its control socket.
    Remote(Client),
}

/// Reaches the imported pool `name`: its daemon if one holds it, else its devices.
pub fn session(name: &str) -> Result<Session, CliError> {
    // A scrub process (`pool scrub -d` of an unmounted pool) holds the devices and has no
    // socket: waiting for it would only time out.
    crate::scrub_cmd::refuse_if_scrubbing(name)?;
    let cache = Cache::load()?;
    let entry = cache.get(name)?.clone();
    let deadline = Instant::now() + HELD_WAIT;
    loop {
        if let Some(client) = Client::connect(name).map_err(tarn_control::OpError::from)? {
            return Ok(Session::Remote(client));
        }
        match open_cached(name, &entry) {
            Ok(pool) => return Ok(Session::Local { pool, finish: Finish::Stay, history: None }),
            // A daemon holds the devices but does not answer yet (starting) or any
            // more (releasing them): ask again.
            Err(CliError::Pool(e)) if e.is_busy() && Instant::now() < deadline => {}
            Err(CliError::Pool(e)) if e.is_busy() => return Err(unanswered(name).unwrap_or(CliError::Pool(e))),
            Err(e) => return Err(e),
        }
    }
}

/// Why a held pool could not be reached, if a live daemon's record names its holder.
fn unanswered(name: &str) -> Option<CliError> {
    let r = tarn_fuse::state::load(name).ok().flatten()?;
    r.is_alive().then(|| {
        CliError::Busy(format!(
            "pool '{name}' is held by tarn mount (pid {}), which does not answer on its control socket {}; see its log {}",
            r.pid,
            tarn_control::protocol::socket_path(name).display(),
            tarn_fuse::state::log_path(name).display()
        ))
    })
}

impl Session {
    /// Runs `op` on the pool, wherever it is held.
    pub fn run<O: Op>(&mut self, op: O) -> Result<O::Output, CliError> {
        match self {
            Session::Remote(client) => Ok(client.call(&op)?),
            Session::Local { pool, finish, history } => {
                let caller = Caller::this_process();
                let held = Held::new(pool, None, &caller);
                let out = execute(op, &held);
                let (how, entry) = held.take_finish();
                if !how.is_stay() {
                    *finish = how;
                    *history = entry;
                }
                Ok(out?)
            }
        }
    }

    /// Ends the command's hold: a pool this process opened is committed and closed (or
    /// exported, destroyed… as a command asked).
    pub fn end(self) -> Result<(), CliError> {
        match self {
            Session::Remote(_) => Ok(()),
            Session::Local { pool, finish, history } => Ok(finish_local(pool, finish, history)?),
        }
    }
}

/// Runs `op` on pool `name` and ends the session. The work's error comes first; a failed
/// commit after successful work is the error then. A daemon found closing the pool is
/// waited for, and the command runs again here.
pub fn run<O: Op>(name: &str, op: O) -> Result<O::Output, CliError> {
    let mut waited = false;
    loop {
        let mut s = session(name)?;
        if let Session::Remote(client) = &mut s {
            match client.call(&op) {
                Err(e) if !waited && daemon_went_away(client, &e) => {
                    waited = true;
                    continue;
                }
                Ok(v) if O::RELEASES_POOL => {
                    // The daemon replied once the pool was let go; its devices are free
                    // when it has exited.
                    client.wait_daemon_gone(EXIT_WAIT);
                    return Ok(v);
                }
                result => return Ok(result?),
            }
        }
        let result = s.run(op);
        let ended = s.end();
        let value = result?;
        ended?;
        return Ok(value);
    }
}

/// Runs `op` on the pool that holds dataset `ds` (see [`run`]).
pub fn run_on_pool_of<O: Op>(ds: &str, op: O) -> Result<O::Output, CliError> {
    run(pool_of(ds), op)
}

/// Opens the imported pool `name` in this process (a mount daemon, after its fork).
pub fn open_local(name: &str) -> Result<Pool, CliError> {
    let cache = Cache::load()?;
    let entry = cache.get(name)?.clone();
    let pool = open_cached(name, &entry)?;
    note_replay(name, &pool);
    Ok(pool)
}

/// Appends what import's intent-log replay did to the pool's daemon log: after a crash,
/// that log is where a DBA looks. (The daemon's stderr still belongs to `tarn mount`
/// here, which must print nothing on success.)
fn note_replay(name: &str, pool: &Pool) {
    use std::io::Write;
    let Some(report) = pool.replay_report() else {
        return;
    };
    let path = tarn_fuse::state::log_path(name);
    if let Ok(mut log) = std::fs::File::options().create(true).append(true).open(path) {
        let _ = writeln!(log, "tarn: pool '{name}': {report}");
    }
}

fn open_cached(name: &str, entry: &CachedPool) -> Result<Pool, CliError> {
    let pool = Pool::import_paths(&entry.devices, &ImportOptions::default())?;
    if pool.guid() != entry.guid {
        return Err(CliError::Refused(format!(
            "the devices of pool '{name}' now hold another pool; run `tarn pool import -d DIR`"
        )));
    }
    // We hold the devices: whatever a killed daemon left (its socket, its record, its
    // dead mounts) is stale now.
    tarn_fuse::state::clear_stale(name);
    Ok(pool)
}

/// Whether a live daemon holds pool `name` (answers on its control socket).
pub fn held(name: &str) -> Result<Option<Client>, CliError> {
    Ok(Client::connect(name).map_err(tarn_control::OpError::from)?)
}

/// The names of the imported pools a listing covers: `pool` alone (which must be
/// imported), or every pool in the cache.
pub fn pool_names(pool: Option<&str>) -> Result<Vec<String>, CliError> {
    let cache = Cache::load()?;
    match pool {
        Some(p) => {
            cache.get(p)?;
            Ok(vec![p.to_string()])
        }
        None => Ok(cache.pools.keys().cloned().collect()),
    }
}

/// True if a pool named `name` is in the cache.
pub fn is_imported(name: &str) -> Result<bool, CliError> {
    Ok(Cache::load()?.pools.contains_key(name))
}

/// Records `pool` in the cache under its name, on `devices`.
pub fn remember(pool: &Pool, devices: Vec<PathBuf>) -> Result<(), CliError> {
    let mut cache = Cache::load()?;
    cache.pools.insert(pool.name().to_string(), CachedPool { guid: pool.guid(), devices });
    Ok(cache.save()?)
}

/// After a device was added or removed (or the command failed halfway): the cache
/// entry of pool `name` lists `new` devices and keeps its own exactly when their labels
/// say they belong to the pool — an import from a device that left would fail, and a
/// log device missing from the list would lose what it holds.
pub fn sync_cached_devices(name: &str, new: impl IntoIterator<Item = PathBuf>) -> Result<(), CliError> {
    let mut cache = Cache::load()?;
    let Some(entry) = cache.pools.get_mut(name) else { return Ok(()) };
    let member = |p: &PathBuf| tarn_pool::member_of(p) == Some(entry.guid);
    // A device that is not there any more stays listed: the pool is then UNAVAIL and says
    // why, rather than forgetting it.
    let mut devices: Vec<PathBuf> = entry.devices.iter().filter(|p| !p.exists() || member(p)).cloned().collect();
    for path in new {
        if member(&path) && !devices.contains(&path) {
            devices.push(path);
        }
    }
    if devices.is_empty() {
        return Ok(()); // unreadable now (gone?): not this command's to decide
    }
    entry.devices = devices;
    Ok(cache.save()?)
}

/// Removes pool `name` from the cache.
pub fn forget(name: &str) -> Result<(), CliError> {
    let mut cache = Cache::load()?;
    cache.pools.remove(name);
    Ok(cache.save()?)
}

/// Records this command in the history of `pool`, opened by this process (create,
/// import: commands that make a pool reachable in the first place).
pub fn log_here(pool: &Pool) {
    pool.log_history(Caller::this_process().history_entry());
}

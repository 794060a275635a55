//! How a command reaches a pool by its name: the cache says which devices, this module
//! opens them for the length of one command, and remembers or forgets pools.
//!
//! Owns: opening an imported pool (`open`), the open–work–commit bracket of a command
//! (`with_pool`, `with_pool_of`), and the cache entries of created, imported, exported
//! and destroyed pools. This is where issue #10's control socket plugs in: a pool held
//! by a daemon will be reached through it instead of being refused.
//! Promises: a pool held by a `tarn mount` daemon is never opened a second time (the
//! command is refused, naming the daemon and how to release it); devices that now hold
//! another pool are refused; every change a command makes is committed (`Pool::close`)
//! before the command reports success, and the pool is closed even when the work failed.
//! Must never: open a pool the cache does not name, or keep one open past its command.

use tarn_pool::{ImportOptions, Pool};

use crate::cache::{Cache, CachedPool};
use crate::error::CliError;

/// The pool part of a dataset name: "tank/db/x" → "tank".
pub fn pool_of(dataset: &str) -> &str {
    dataset.split('/').next().unwrap_or(dataset)
}

/// Opens the imported pool `name` from the cache.
pub fn open(name: &str) -> Result<Pool, CliError> {
    let cache = Cache::load()?;
    // A `tarn mount` daemon holds the devices: say which one and how to release it.
    tarn_fuse::state::refuse_if_mounted(name)?;
    let entry = cache.get(name)?;
    let pool = Pool::import_paths(&entry.devices, &ImportOptions::default())?;
    if pool.guid() != entry.guid {
        return Err(CliError::Refused(format!(
            "the devices of pool '{name}' now hold another pool; run `tarn pool import -d DIR`"
        )));
    }
    Ok(pool)
}

/// Runs `work` on the imported pool `name`, then commits and closes it. The work's error
/// comes first; a failed commit after successful work is the error then.
pub fn with_pool<T>(name: &str, work: impl FnOnce(&Pool) -> Result<T, CliError>) -> Result<T, CliError> {
    let pool = open(name)?;
    let result = work(&pool);
    let closed = pool.close();
    let value = result?;
    closed?;
    Ok(value)
}

/// Runs `work` on the pool that holds dataset `ds` (see [`with_pool`]).
pub fn with_pool_of<T>(ds: &str, work: impl FnOnce(&Pool) -> Result<T, CliError>) -> Result<T, CliError> {
    with_pool(pool_of(ds), work)
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
pub fn remember(pool: &Pool, devices: Vec<std::path::PathBuf>) -> Result<(), CliError> {
    let mut cache = Cache::load()?;
    cache.pools.insert(pool.name().to_string(), CachedPool { guid: pool.guid(), devices });
    Ok(cache.save()?)
}

/// Adds `devices` to the cache entry of pool `name` (log devices just added).
pub fn remember_devices(name: &str, devices: impl IntoIterator<Item = std::path::PathBuf>) -> Result<(), CliError> {
    let mut cache = Cache::load()?;
    if let Some(entry) = cache.pools.get_mut(name) {
        entry.devices.extend(devices);
    }
    Ok(cache.save()?)
}

/// Removes pool `name` from the cache.
pub fn forget(name: &str) -> Result<(), CliError> {
    let mut cache = Cache::load()?;
    cache.pools.remove(name);
    Ok(cache.save()?)
}

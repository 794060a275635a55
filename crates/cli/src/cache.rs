//! The pool cache: which pools this machine has imported and on which devices (like
//! ZFS's zpool.cache), in `/var/lib/tarn/pools.json` or `$TARN_CACHE_FILE`. Commands find
//! a pool's devices here by its name.
//!
//! Owns: the cache file and its JSON shape. Promises: the file is replaced atomically
//! (written beside, then renamed), so a crash leaves the old or the new list, never half
//! of one; a missing file is an empty cache; a damaged one is reported with the fix.
//! Must never: open a device or decide anything about a pool: it only remembers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("{path}: pool cache is damaged ({source}); remove it and run `tarn pool import -d DIR`")]
    Damaged { path: String, source: serde_json::Error },
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("cannot encode the pool cache: {0}")]
    Encode(#[source] serde_json::Error),
    #[error(
        "no such pool '{0}' (not imported on this machine); see `tarn pool list`, or `tarn pool import -d DIR {0}`"
    )]
    NoSuchPool(String),
}

#[derive(Default, Serialize, Deserialize)]
pub struct Cache {
    pub pools: BTreeMap<String, CachedPool>,
}

#[derive(Clone, Serialize, Deserialize)]
pub struct CachedPool {
    pub guid: u64,
    pub devices: Vec<PathBuf>,
}

pub fn path() -> PathBuf {
    std::env::var_os("TARN_CACHE_FILE").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/var/lib/tarn/pools.json"))
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> CacheError + '_ {
    move |source| CacheError::Io { path: path.display().to_string(), source }
}

impl Cache {
    pub fn load() -> Result<Cache, CacheError> {
        let p = path();
        match std::fs::read(&p) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|source| CacheError::Damaged { path: p.display().to_string(), source }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Cache::default()),
            Err(e) => Err(io_error(&p)(e)),
        }
    }

    pub fn save(&self) -> Result<(), CacheError> {
        let p = path();
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir).map_err(io_error(dir))?;
        }
        let tmp = p.with_extension("tmp");
        let bytes = serde_json::to_vec_pretty(self).map_err(CacheError::Encode)?;
        std::fs::write(&tmp, bytes).map_err(io_error(&tmp))?;
        std::fs::rename(&tmp, &p).map_err(io_error(&p))
    }

    pub fn get(&self, pool: &str) -> Result<&CachedPool, CacheError> {
        self.pools.get(pool).ok_or_else(|| CacheError::NoSuchPool(pool.to_string()))
    }
}

/// `p` made absolute against the current directory (as given if that fails): the cache
/// and the labels keep absolute paths, so a later command works from any directory.
pub fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

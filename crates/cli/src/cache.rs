//! The pool cache: which pools this machine has imported and on which devices (like
//! ZFS's zpool.cache). Commands find a pool's devices here by its name.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

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

impl Cache {
    pub fn load() -> Result<Cache, String> {
        let p = path();
        match std::fs::read(&p) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| format!("{}: pool cache is damaged ({e}); remove it and run `tarn pool import -d DIR`", p.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Cache::default()),
            Err(e) => Err(format!("{}: {e}", p.display())),
        }
    }

    pub fn save(&self) -> Result<(), String> {
        let p = path();
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let tmp = p.with_extension("tmp");
        let bytes = serde_json::to_vec_pretty(self).expect("cache serialises");
        std::fs::write(&tmp, bytes).map_err(|e| format!("{}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, &p).map_err(|e| format!("{}: {e}", p.display()))
    }

    pub fn get(&self, pool: &str) -> Result<&CachedPool, String> {
        self.pools.get(pool).ok_or_else(|| {
            format!("no such pool '{pool}' (not imported on this machine); see `tarn pool list`, or `tarn pool import -d DIR {pool}`")
        })
    }
}

pub fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

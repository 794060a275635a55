//! `tarn mount` and `tarn umount`: the command-line side of the FUSE daemon, whose life
//! is `tarn_fuse::mount`'s.
//!
//! Owns: checking that one daemon is asked to serve datasets of one pool only, and
//! handing the daemon the way to open that pool (`access::open`, run after the fork;
//! the daemon holds the pool from then on, so a scrub a close cut short resumes in it).
//! Promises: the mount prints nothing when it worked, one line when it did not.
//! Must never: open the pool before the daemon forks (the daemon, not this process,
//! must hold the devices, and it may not fork once a thread exists).

use std::path::PathBuf;

use crate::access::{self, pool_of};
use crate::error::CliError;

/// `tarn mount POOL/DS [MOUNTPOINT] [-o OPTIONS] [-f] [--threads N] [--also POOL/DS2…]`.
pub fn mount(
    dataset: String,
    mountpoint: Option<PathBuf>,
    foreground: bool,
    threads: usize,
    also: Vec<String>,
    options: tarn_fuse::MountOptions,
) -> Result<(), CliError> {
    let pool = pool_of(&dataset).to_string();
    if let Some(other) = also.iter().find(|d| pool_of(d) != pool) {
        return Err(CliError::Usage(format!(
            "--also {other}: not a dataset of pool '{pool}' (one daemon serves one pool)"
        )));
    }
    let req = tarn_fuse::MountRequest { dataset, mountpoint, foreground, threads, more: also, options };
    let open = || {
        let p = access::open(&pool)?;
        // In the background, behind the database's I/O; a failure to resume is no
        // reason to refuse the mount (`pool status` shows the scrub as cut short).
        let _ = p.resume_scan();
        Ok::<_, CliError>(p)
    };
    Ok(tarn_fuse::mount(req, open)?)
}

/// `tarn umount MOUNTPOINT|POOL/DS`: returns once the daemon has committed.
pub fn umount(target: &str) -> Result<(), CliError> {
    Ok(tarn_fuse::umount(target)?)
}

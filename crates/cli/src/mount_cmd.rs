//! `tarn mount` and `tarn umount`: the command-line side of the FUSE daemon, whose life
//! is `tarn_fuse::mount`'s.
//!
//! Owns: checking that one daemon is asked to serve datasets of one pool only; asking
//! the daemon that already holds the pool to mount the datasets (one daemon per pool),
//! or else starting one and handing it the way to open the pool (`access::open_local`,
//! run after the fork; the daemon holds the pool from then on, so a scrub a close cut
//! short resumes in it).
//! Promises: the mount prints nothing when it worked, one line when it did not.
//! Must never: open the pool before the daemon forks (the daemon, not this process,
//! must hold the devices, and it may not fork once a thread exists).

use std::path::PathBuf;

use tarn_control::ops::mounts::{Mount, Mounts};

use crate::access::{self, pool_of};
use crate::error::CliError;

/// `tarn mount POOL/DS [MOUNTPOINT] [-o OPTIONS] [-f] [--threads N] [--also POOL/DS2…]`.
pub fn mount(
    dataset: String,
    mountpoint: Option<PathBuf>,
    foreground: bool,
    threads: usize,
    also: Vec<String>,
    options_text: &str,
) -> Result<(), CliError> {
    let options = tarn_fuse::MountOptions::parse(options_text).map_err(|e| CliError::Usage(e.to_string()))?;
    let pool = pool_of(&dataset).to_string();
    if let Some(other) = also.iter().find(|d| pool_of(d) != pool) {
        return Err(CliError::Usage(format!(
            "--also {other}: not a dataset of pool '{pool}' (one daemon serves one pool)"
        )));
    }
    // The pool must be imported here, whoever mounts it.
    access::pool_names(Some(&pool))?;
    let mountpoint = mountpoint.map(|p| crate::cache::absolute(&p));
    if let Some(mut daemon) = access::held(&pool)? {
        if foreground {
            return Err(CliError::Refused(format!(
                "pool '{pool}' is held by tarn mount (pid {}), which serves its mounts; mount without -f to have it mount {dataset}",
                daemon.daemon_pid()
            )));
        }
        let first = daemon.call(&Mount {
            dataset: dataset.clone(),
            mountpoint: mountpoint.clone(),
            threads,
            options: options_text.to_string(),
        });
        match first {
            // Its last mount just went (it is closing), or it was killed: once it has
            // exited, start a daemon of our own.
            Err(e) if access::daemon_went_away(&daemon, &e) => {}
            other => {
                other?;
                let mut mounted = vec![dataset];
                for ds in also {
                    daemon.call(&Mount {
                        dataset: ds.clone(),
                        mountpoint: None,
                        threads,
                        options: options_text.to_string(),
                    })?;
                    mounted.push(ds);
                }
                if options.transport == tarn_fuse::uring::Transport::Uring {
                    // The daemon logged why the kernel refused io_uring; the user hears it
                    // here, one line per mount, as from a daemon of their own.
                    for m in daemon.call(&Mounts {})?.iter().filter(|m| mounted.contains(&m.dataset)) {
                        if let Some(why) = &m.fallback {
                            eprintln!("{}", tarn_fuse::uring::fallback_line(&m.dataset, &m.mountpoint, why));
                        }
                    }
                }
                return Ok(());
            }
        }
    }
    let req = tarn_fuse::MountRequest { dataset, mountpoint, foreground, threads, more: also, options };
    let open = || {
        // After the fork: the daemon may start threads now.
        crate::allocator::start_background_threads();
        let p = access::open_local(&pool)?;
        // In the background, behind the database's I/O; a failure to resume is no
        // reason to refuse the mount (`pool status` shows the scrub as cut short).
        let _ = p.resume_scan();
        Ok::<_, CliError>(p)
    };
    Ok(tarn_fuse::mount(req, open)?)
}

/// `tarn umount [-f] MOUNTPOINT|POOL/DS`: returns once the daemon has let the mount go
/// (and committed, if it was its last).
pub fn umount(target: &str, force: bool) -> Result<(), CliError> {
    Ok(tarn_fuse::umount(target, force)?)
}

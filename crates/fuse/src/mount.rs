//! `tarn mount` and `tarn umount`: what the CLI calls.
//!
//! Owns: the order of a mount's life — fork, import the pool, resolve and check the
//! mountpoint, record the mount, mount, report ready, serve, and at the end commit and
//! close the pool and remove the record. Promises: every failure before "ready" is one
//! clear error (relayed to the waiting parent in daemon mode) and leaves no mount and no
//! record behind; in daemon mode the caller's `tarn mount` exits 0 silently once the
//! mount is usable, and the daemon's stderr goes to a log in the state directory; after
//! an unmount or a termination signal the pool is closed (all changes committed) before
//! the process exits. Must never: report success before the kernel has our INIT reply,
//! or close the pool while a request can still reach it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fuser::{MountOption, SessionACL};
use tarn_pool::Pool;

use tarn_daemon::{Asked, Termination, Verdict};

use crate::fs::TarnFs;
use crate::options::MountOptions;
use crate::state::{self, MountRecord};
use crate::MountError;

/// What `tarn mount` was asked to do.
pub struct MountRequest {
    /// POOL/DS (or POOL for the root dataset).
    pub dataset: String,
    /// None: use the dataset's `mountpoint` property.
    pub mountpoint: Option<PathBuf>,
    pub foreground: bool,
    /// FUSE worker threads (per mount).
    pub threads: usize,
    /// Further datasets of the same pool, each mounted on its `mountpoint` property by
    /// this same daemon (the daemon holds the pool, so it serves all its mounts).
    pub more: Vec<String>,
    /// `-o` options (ro, noatime…), applied to every mount of this request.
    pub options: MountOptions,
}

/// How long `umount` waits for the daemon to commit and exit.
const UMOUNT_WAIT: Duration = Duration::from_secs(300);

/// Mounts `req.dataset`; `open_pool` imports its pool (called after the fork, so the
/// daemon, not the caller, holds the devices) and its error, whatever the caller's type,
/// is kept as the source of [`MountError::OpenPool`]. Returns when the mount ends
/// (foreground) or, in daemon mode, never returns in the parent (it exits 0 once the
/// mount is ready).
pub fn mount<E>(req: MountRequest, open_pool: impl FnOnce() -> Result<Pool, E>) -> Result<(), MountError>
where
    E: std::error::Error + Send + Sync + 'static,
{
    if !Path::new("/dev/fuse").exists() {
        return Err(MountError::NoFuseDevice);
    }
    // The daemon chdirs to /: resolve a relative mountpoint now.
    let given = req.mountpoint.as_deref().map(|p| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()));
    let readiness = tarn_daemon::start(req.foreground, report)?;
    // From here on threads may exist (the pool's sync thread): no more forking.
    let started = match start(&req, given, open_pool) {
        Ok(s) => s,
        Err(e) => {
            readiness.fail(&e);
            return Err(e);
        }
    };
    readiness.ready(Some(&state::log_path(&started.record.pool)));
    started.serve()
}

/// What the caller of `tarn mount` sees of the daemon's start: nothing when it worked
/// (the mount is the answer), one line on stderr when it did not.
fn report(verdict: &Verdict) {
    match verdict {
        Verdict::Ready { .. } => {}
        Verdict::Failed(msg) => eprintln!("tarn: {msg}"),
        Verdict::Died { pid } => {
            eprintln!("tarn: the mount daemon (pid {pid}) exited before the mount was ready")
        }
    }
}

/// The mounted datasets being served.
struct Started {
    sessions: Vec<(String, PathBuf, fuser::BackgroundSession)>,
    pool: Arc<Pool>,
    record: MountRecord,
}

fn start<E>(
    req: &MountRequest,
    given: Option<PathBuf>,
    open_pool: impl FnOnce() -> Result<Pool, E>,
) -> Result<Started, MountError>
where
    E: std::error::Error + Send + Sync + 'static,
{
    let pool = Arc::new(open_pool().map_err(|e| MountError::OpenPool(Box::new(e)))?);
    let mut wanted = vec![(req.dataset.clone(), given)];
    wanted.extend(req.more.iter().map(|d| (d.clone(), None)));
    let mut record = MountRecord {
        pid: std::process::id(),
        pool: pool.name().to_string(),
        dataset: req.dataset.clone(),
        mountpoint: PathBuf::new(),
        mounts: Vec::new(),
    };
    let mut sessions = Vec::new();
    for (dataset, given) in wanted {
        match mount_one(&pool, &dataset, given, req, &mut record) {
            Ok(session) => sessions.push(session),
            Err(e) => {
                // All or nothing: undo the mounts made so far, then report this one.
                for (_, mp, s) in sessions {
                    tarn_daemon::unmount_or_detach(&mp);
                    drop(s);
                }
                record.remove();
                let _ = close_pool(pool); // the mount error is the one to report
                return Err(e);
            }
        }
    }
    Ok(Started { sessions, pool, record })
}

/// Mounts one dataset of the open pool and adds it to the (saved) record.
fn mount_one(
    pool: &Arc<Pool>,
    dataset: &str,
    given: Option<PathBuf>,
    req: &MountRequest,
    record: &mut MountRecord,
) -> Result<(String, PathBuf, fuser::BackgroundSession), MountError> {
    let ds = pool.dataset(dataset)?;
    let mountpoint = match given {
        Some(p) => p,
        None => mountpoint_property(pool, dataset)?,
    };
    let mountpoint = check_mountpoint(&mountpoint)?;
    if record.mounts.is_empty() {
        record.mountpoint = mountpoint.clone();
    }
    record.mounts.push((dataset.to_string(), mountpoint.clone()));
    record.save()?;
    let atime = ds.effective().atime && req.options.records_atime();
    let fs = TarnFs::new(pool.clone(), ds).recording_atime(atime);
    match session(fs, &mountpoint, req, dataset, atime) {
        Ok(s) => Ok((dataset.to_string(), mountpoint, s)),
        Err(e) => {
            record.mounts.pop();
            Err(e)
        }
    }
}

/// Mounts and starts the worker threads; once this returns the kernel has our INIT
/// reply, so the mount is usable.
fn session(
    fs: TarnFs,
    mountpoint: &Path,
    req: &MountRequest,
    dataset: &str,
    atime: bool,
) -> Result<fuser::BackgroundSession, MountError> {
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        MountOption::FSName(dataset.to_string()),
        MountOption::Subtype("tarn".to_string()),
        MountOption::DefaultPermissions,
    ];
    let o = &req.options;
    config.mount_options.push(if o.no_dev { MountOption::NoDev } else { MountOption::Dev });
    config.mount_options.push(if o.no_suid { MountOption::NoSuid } else { MountOption::Suid });
    if o.no_exec {
        config.mount_options.push(MountOption::NoExec);
    }
    // ro: the kernel refuses every change before it reaches us (EROFS).
    if o.read_only {
        config.mount_options.push(MountOption::RO);
    }
    // atime=off: tell the kernel too (it then never invalidates cached atimes after a
    // read); atime=on: the dataset applies relatime itself on each read that reaches us.
    if !atime {
        config.mount_options.push(MountOption::NoAtime);
    }
    // allow_other: databases run as their own users.
    config.acl = SessionACL::All;
    config.n_threads = Some(req.threads.max(1));
    config.clone_fd = true;
    let err = |source| MountError::Mount { path: mountpoint.display().to_string(), source };
    let s = fuser::Session::new(fs, mountpoint, &config).map_err(err)?;
    s.spawn().map_err(err)
}

impl Started {
    /// Serves until every mount goes away (unmounted from outside) or a signal asks us to
    /// unmount them all; then commits and closes the pool and removes the record. A mount
    /// that ends while others go on leaves the record.
    fn serve(self) -> Result<(), MountError> {
        let Started { mut sessions, pool, mut record } = self;
        let mut termination = Termination::new();
        let mut published = std::time::Instant::now() - Duration::from_secs(1);
        while !sessions.is_empty() {
            if published.elapsed() >= Duration::from_secs(1) {
                crate::stats::apply_tuning(&pool);
                crate::stats::publish(&pool);
                published = std::time::Instant::now();
            }
            match termination.wait(Duration::from_millis(50)) {
                Asked::Nothing => {}
                Asked::Unmount => sessions.iter().for_each(|(_, mp, _)| tarn_daemon::unmount_or_detach(mp)),
                Asked::StopNow => break, // still committing what we have
            }
            let (ended, live): (Vec<_>, Vec<_>) = sessions.into_iter().partition(|(_, _, s)| s.guard.is_finished());
            sessions = live;
            for (_, mp, session) in ended {
                if let Err(e) = session.join() {
                    eprintln!("tarn mount: session on {} ended with: {e}", mp.display());
                }
                record.mounts.retain(|(_, m)| *m != mp);
                if !sessions.is_empty() {
                    let _ = record.save();
                }
            }
        }
        // Sessions left here: the kernel still has users; commit what reached us.
        for (_, _, s) in sessions {
            std::mem::forget(s);
        }
        let result = close_pool(pool);
        crate::stats::remove(&record.pool);
        record.remove();
        result
    }
}

/// Commits everything and closes the pool (or, if a request thread still holds it
/// because we were told to stop twice, commits what reached us).
fn close_pool(pool: Arc<Pool>) -> Result<(), MountError> {
    let closed = match Arc::try_unwrap(pool) {
        Ok(pool) => pool.close(),
        Err(shared) => shared.sync(),
    };
    closed.map_err(|e| {
        eprintln!("tarn mount: final commit failed: {e}");
        MountError::FinalCommit(e)
    })
}

fn mountpoint_property(pool: &Pool, dataset: &str) -> Result<PathBuf, MountError> {
    let rows = pool.get_properties(dataset, Some("mountpoint"))?;
    match rows.first().map(|r| r.value.as_str()) {
        Some(v) if v.starts_with('/') => Ok(PathBuf::from(v)),
        _ => Err(MountError::NoMountpoint(dataset.to_string())),
    }
}

/// The mountpoint, canonical, after checking it exists, is an empty directory and is
/// not already a mount point.
pub fn check_mountpoint(dir: &Path) -> Result<PathBuf, MountError> {
    let shown = dir.display().to_string();
    let meta = match std::fs::metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(MountError::MountpointMissing(shown)),
        // ENOTCONN: a dead FUSE mount (its daemon was killed) is still there.
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => return Err(MountError::MountpointBusy(shown)),
        Err(e) => return Err(MountError::Startup(format!("{shown}: {e}"))),
    };
    if !meta.is_dir() {
        return Err(MountError::MountpointNotDir(shown));
    }
    let abs = dir.canonicalize().map_err(|e| MountError::Startup(format!("{shown}: {e}")))?;
    if tarn_daemon::mounts::is_listed(&abs) {
        return Err(MountError::MountpointBusy(abs.display().to_string()));
    }
    let mut entries = std::fs::read_dir(&abs).map_err(|e| MountError::Startup(format!("{shown}: {e}")))?;
    if entries.next().is_some() {
        return Err(MountError::MountpointNotEmpty(abs.display().to_string()));
    }
    Ok(abs)
}

/// `tarn umount MOUNTPOINT|POOL/DS`: unmounts and waits until the daemon has committed
/// and released the pool. A mount whose daemon died (kill -9) is detached and its
/// record removed.
pub fn umount(target: &str) -> Result<(), MountError> {
    let records = state::all();
    let p = Path::new(target);
    let abs = p.canonicalize().unwrap_or_else(|_| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()));
    let found = records.iter().find_map(|r| {
        r.served().into_iter().find(|(ds, mp)| ds == target || *mp == abs).map(|(_, mp)| (r.clone(), mp))
    });
    match found {
        Some((r, mp)) if r.is_alive() => umount_live(&r, &mp),
        Some((r, mp)) => {
            detach_dead(&mp);
            r.remove();
            Ok(())
        }
        None => umount_unrecorded(&abs, target),
    }
}

/// Unmounts `mp`, one of the mounts `r`'s daemon serves, and waits until the daemon has
/// let it go (and, if it was the last, committed and exited).
fn umount_live(r: &MountRecord, mp: &Path) -> Result<(), MountError> {
    let path = mp.display().to_string();
    if let Err(e) = tarn_daemon::umount(mp, 0) {
        let detail = match e.raw_os_error() {
            Some(libc::EBUSY) => "it is busy: a process has a file open or its cwd there (see `fuser -vm`)".to_string(),
            _ => e.to_string(),
        };
        return Err(MountError::Umount { path, detail });
    }
    let deadline = Instant::now() + UMOUNT_WAIT;
    let still_served = || {
        state::load(&r.pool)
            .ok()
            .flatten()
            .is_some_and(|now| now.pid == r.pid && now.served().iter().any(|(_, m)| m == mp))
    };
    while still_served() && r.is_alive() {
        if Instant::now() > deadline {
            return Err(MountError::Umount {
                path,
                detail: format!("daemon pid {} did not finish its final commit in time", r.pid),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// A dead FUSE mount (daemon gone): detach it, ignoring "not mounted".
fn detach_dead(mountpoint: &Path) {
    if tarn_daemon::umount(mountpoint, 0).is_err() {
        let _ = tarn_daemon::umount(mountpoint, libc::MNT_DETACH);
    }
}

/// No record names `target`: unmount it only if it is a tarn FUSE mount. fuser's
/// pure-Rust mount drops the subtype, so a tarn mount shows as type `fuse` with a
/// dataset name (POOL/DS, no leading '/') as its source.
fn umount_unrecorded(abs: &Path, target: &str) -> Result<(), MountError> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let wanted = abs.to_string_lossy();
    let is_tarn = text.lines().any(|l| {
        let fields: Vec<&str> = l.split(' ').collect();
        let mut after = fields.iter().skip_while(|f| **f != "-").skip(1);
        let (fstype, source) = (after.next().copied().unwrap_or(""), after.next().copied().unwrap_or(""));
        let looks_tarn =
            fstype == "fuse.tarn" || (fstype == "fuse" && !source.starts_with('/') && source.contains('/'));
        fields.get(4).is_some_and(|m| tarn_daemon::mounts::unescape(m) == wanted) && looks_tarn
    });
    if !is_tarn {
        return Err(MountError::NotMounted(target.to_string()));
    }
    detach_dead(abs);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountpoint_checks_name_the_problem() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("nope");
        assert!(matches!(check_mountpoint(&missing), Err(MountError::MountpointMissing(_))));
        let file = dir.path().join("file");
        std::fs::write(&file, b"x").expect("write");
        assert!(matches!(check_mountpoint(&file), Err(MountError::MountpointNotDir(_))));
        assert!(matches!(check_mountpoint(dir.path()), Err(MountError::MountpointNotEmpty(_))));
        let empty = dir.path().join("empty");
        std::fs::create_dir(&empty).expect("mkdir");
        assert!(check_mountpoint(&empty).is_ok());
        assert!(matches!(check_mountpoint(Path::new("/proc")), Err(MountError::MountpointBusy(_))));
    }
}

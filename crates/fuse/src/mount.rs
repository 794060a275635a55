//! `tarn mount` and `tarn umount`: what the CLI calls.
//!
//! Owns: the order of a mount's life — fork, import the pool, resolve and check the
//! mountpoint, record the mount, mount, report ready, serve, and at the end commit and
//! close the pool and remove the record. Promises: every failure before "ready" is one
//! clear error (relayed to the waiting parent in daemon mode) and leaves no mount and no
//! record behind; in daemon mode the caller's `tarn mount` exits 0 silently once the
//! mount is usable, and the daemon's stderr goes to a log in the state directory; after
//! an unmount or a termination signal the pool is closed (all changes committed) before
//! the process exits; a panic in any of the daemon's threads ends the process at once
//! (the panic in its log, SIGABRT), so the kernel fails its mounts' calls with ENOTCONN
//! instead of leaving them half-served. Must never: report success before the kernel has
//! our INIT reply, or close the pool while a request can still reach it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fuser::{MountOption, SessionACL};
use tarn_pool::Pool;

use tarn_daemon::{Asked, Termination, Verdict};

use crate::fuser_front::FuserFront;
use crate::holder::{Holder, Mounted};
use crate::ops::TarnFs;
use crate::options::MountOptions;
use crate::state::{self, MountRecord};
use crate::uring::{self, Transport};
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

/// The daemon's last line in its log after a panic (the panic itself comes before it).
const PANIC_NOTE: &str = "tarn mount: a thread of this daemon panicked (a bug): the daemon ends here without a \
commit; its mounts fail with ENOTCONN until `tarn umount`, and what was fsynced is replayed when the pool is \
imported again";

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
    // This process is the daemon now (forked, or in the foreground): a panic in any of
    // its threads ends it rather than leaving its mounts half-served (`tarn_daemon::panics`).
    tarn_daemon::end_on_panic(PANIC_NOTE);
    // From here on threads may exist (the pool's sync thread): no more forking.
    let started = match start(&req, given, open_pool) {
        Ok(s) => s,
        Err(e) => {
            readiness.fail(&e);
            return Err(e);
        }
    };
    readiness.ready(Some(&state::log_path(started.holder.pool_name())));
    if !req.foreground {
        // The caller saw these lines; the log (our stderr from here on) keeps them too.
        started.holder.log_fallbacks();
    }
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

/// The running daemon: what it holds and serves, and its control socket.
struct Started {
    holder: Arc<Holder>,
    server: tarn_control::Server,
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
    // We hold the devices now, so a record of this pool is a dead daemon's: its dead
    // mounts must not make ours fail as busy.
    state::clear_stale(pool.name());
    let mut wanted = vec![(req.dataset.clone(), given)];
    wanted.extend(req.more.iter().map(|d| (d.clone(), None)));
    let mut record = MountRecord {
        pid: std::process::id(),
        pool: pool.name().to_string(),
        dataset: req.dataset.clone(),
        mountpoint: PathBuf::new(),
        mounts: Vec::new(),
    };
    let mut live: Vec<Mounted> = Vec::new();
    for (dataset, given) in wanted {
        match mount_recorded(&pool, &dataset, given, req, &mut record) {
            Ok(m) => live.push(m),
            Err(e) => return Err(undo_start(pool, live, &record, e)),
        }
    }
    let holder = Arc::new(Holder::new(pool, record, live, Box::new(mount_one)));
    let server = match tarn_control::Server::start(holder.pool_name(), holder.clone()) {
        Ok(s) => s,
        Err(e) => {
            // Without its socket no command could reach the pool: refuse the mount.
            for m in holder.abandon_sessions() {
                tarn_daemon::unmount_or_detach(&m.mountpoint);
                drop(m.session);
            }
            let _ = holder.end(false); // the socket's error is the one to report
            return Err(MountError::State(e.to_string()));
        }
    };
    Ok(Started { holder, server })
}

/// All or nothing: undoes the mounts made so far and closes the pool; returns `e`.
fn undo_start(pool: Arc<Pool>, live: Vec<Mounted>, record: &MountRecord, e: MountError) -> MountError {
    for m in live {
        tarn_daemon::unmount_or_detach(&m.mountpoint);
        drop(m.session);
    }
    record.remove();
    let _ = close_pool(pool); // the mount error is the one to report
    e
}

/// Mounts one dataset at startup, saving the record first (so a crash right after the
/// mount still names it).
fn mount_recorded(
    pool: &Arc<Pool>,
    dataset: &str,
    given: Option<PathBuf>,
    req: &MountRequest,
    record: &mut MountRecord,
) -> Result<Mounted, MountError> {
    pool.dataset(dataset)?;
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
    mount_one(pool, dataset, Some(mountpoint), req.threads, req.options).inspect_err(|_| {
        record.mounts.pop();
    })
}

/// Mounts one dataset of the open pool on `given` (or its `mountpoint` property) with
/// `threads` FUSE workers and the `-o` options.
fn mount_one(
    pool: &Arc<Pool>,
    dataset: &str,
    given: Option<PathBuf>,
    threads: usize,
    options: MountOptions,
) -> Result<Mounted, MountError> {
    let ds = pool.dataset(dataset)?;
    let mountpoint = match given {
        Some(p) => p,
        None => mountpoint_property(pool, dataset)?,
    };
    let mountpoint = check_mountpoint(&mountpoint)?;
    let atime = ds.effective().atime && options.records_atime();
    let test_panic = std::env::var_os(crate::ops::TEST_PANIC_IN_STATFS).is_some();
    let fs = TarnFs::new(pool.clone(), ds).recording_atime(atime).with_snapdir(dataset).panicking_in_statfs(test_panic);
    let open = fs.open_handles();
    let fs = Arc::new(fs);
    let dev = |fs| session(FuserFront::new(fs), &mountpoint, threads, &options, dataset, atime);
    let (session, fallback) = match options.transport {
        Transport::Uring => match uring::kernel_allows() {
            Ok(()) => {
                let s = uring::start(fs, &mountpoint, dataset, &options, atime, threads)
                    .map_err(|source| MountError::Mount { path: mountpoint.display().to_string(), source })?;
                let why = s.refused.clone();
                (Session::Uring(s), why)
            }
            Err(why) => (dev(fs)?, Some(why)),
        },
        Transport::Dev => (dev(fs)?, None),
    };
    // Before the daemon is ready its stderr is still the caller's: this is the caller's
    // one line; later (a mount asked for on the control socket) it goes to the log.
    if let Some(why) = &fallback {
        eprintln!("{}", uring::fallback_line(dataset, &mountpoint, why));
    }
    Ok(Mounted { dataset: dataset.to_string(), mountpoint, session, open, fallback })
}

/// A mount's FUSE session, on either transport.
pub(crate) enum Session {
    /// /dev/fuse through fuser, and its workers' read buffers' untouched part.
    /// (Dropping the session drops `_buffers` with it: the engine is told they are gone.)
    Dev { session: fuser::BackgroundSession, _buffers: UntouchedBuffers },
    /// FUSE over io_uring, run by tarn (`uring`).
    Uring(uring::UringSession),
}

impl Session {
    /// Whether the connection has ended and the session's threads are gone.
    pub fn is_finished(&self) -> bool {
        match self {
            Session::Dev { session, .. } => session.guard.is_finished(),
            Session::Uring(s) => s.is_finished(),
        }
    }

    /// Waits for the session's threads: what ended them.
    pub fn join(self) -> std::io::Result<()> {
        match self {
            Session::Dev { session, .. } => session.join(),
            Session::Uring(s) => s.join(),
        }
    }

    /// The transport its requests take now (a uring session the kernel refused at INIT
    /// serves on /dev/fuse), and the requests served by rings and on /dev/fuse (known
    /// for a uring session only).
    pub fn transport(&self) -> (Transport, Option<(u64, u64)>) {
        match self {
            Session::Dev { .. } => (Transport::Dev, None),
            Session::Uring(s) if s.on_rings() => (Transport::Uring, Some(s.counts.totals())),
            Session::Uring(s) => (Transport::Dev, Some(s.counts.totals())),
        }
    }
}

/// The read buffer fuser 0.18 gives each worker (`read_buf.rs`): zeroed and sized for its
/// largest write, 16 MiB + 4 KiB. The kernel writes at most our `MAX_WRITE` and a header
/// into it, so the rest of its slot is allocated but never touched, never resident.
const FUSER_READ_BUFFER: usize = (16 << 20) + 4096;
const FUSER_READ_WRITTEN_AT_MOST: usize = crate::ops::MAX_WRITE as usize + 2 * 4096;

/// `threads` workers' untouched buffer bytes, told to the engine while they exist (so
/// `tarn stats arc` does not count 150 MiB of allocations that take no memory as live).
pub(crate) struct UntouchedBuffers(u64);

impl UntouchedBuffers {
    fn of_workers(threads: usize) -> UntouchedBuffers {
        let bytes = (0..threads).map(|_| tarn_pool::add_untouched(FUSER_READ_BUFFER, FUSER_READ_WRITTEN_AT_MOST)).sum();
        UntouchedBuffers(bytes)
    }
}

impl Drop for UntouchedBuffers {
    fn drop(&mut self) {
        tarn_pool::sub_untouched_bytes(self.0);
    }
}

/// Mounts and starts the worker threads; once this returns the kernel has our INIT
/// reply, so the mount is usable.
fn session(
    fs: FuserFront,
    mountpoint: &Path,
    threads: usize,
    o: &MountOptions,
    dataset: &str,
    atime: bool,
) -> Result<Session, MountError> {
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        MountOption::FSName(dataset.to_string()),
        MountOption::Subtype("tarn".to_string()),
        MountOption::DefaultPermissions,
    ];
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
    config.n_threads = Some(threads.max(1));
    config.clone_fd = true;
    let err = |source| MountError::Mount { path: mountpoint.display().to_string(), source };
    let s = fuser::Session::new(fs, mountpoint, &config).map_err(err)?;
    let workers = threads.max(1);
    Ok(Session::Dev { session: s.spawn().map_err(err)?, _buffers: UntouchedBuffers::of_workers(workers) })
}

impl Started {
    /// Serves until every mount goes away (unmounted from outside, by `tarn umount`, or
    /// by an export through the control socket) or a signal asks us to unmount them all;
    /// then stops the control socket and ends the hold on the pool (`Holder::end`:
    /// commit and close, or export or destroy as a command asked).
    fn serve(self) -> Result<(), MountError> {
        let Started { holder, server } = self;
        let mut termination = Termination::new();
        let mut stop_now = false;
        loop {
            match termination.wait(Duration::from_millis(50)) {
                Asked::Nothing => {}
                Asked::Unmount => holder.mountpoints().iter().for_each(|mp| tarn_daemon::unmount_or_detach(mp)),
                Asked::StopNow => {
                    stop_now = true;
                    break; // still committing what we have
                }
            }
            if holder.reap() == 0 {
                break;
            }
        }
        server.close();
        if stop_now {
            // The kernel still has users of these: commit what reached us, no more.
            for m in holder.abandon_sessions() {
                std::mem::forget(m.session);
            }
        }
        holder.end(!stop_now)
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

/// `tarn umount [-f] MOUNTPOINT|POOL/DS`: unmounts and waits until the daemon has let the
/// mount go (and, for its last mount, committed and released the pool). A mount whose
/// daemon died (kill -9) is detached and its record removed.
pub fn umount(target: &str, force: bool) -> Result<(), MountError> {
    let records = state::all();
    let p = Path::new(target);
    let abs = p.canonicalize().unwrap_or_else(|_| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()));
    let found = records.iter().find_map(|r| {
        r.served().into_iter().find(|(ds, mp)| ds == target || *mp == abs).map(|(_, mp)| (r.clone(), mp))
    });
    match found {
        Some((r, mp)) if r.is_alive() => umount_served(&r, &mp, force),
        Some((r, mp)) => {
            detach_dead(&mp);
            r.remove();
            Ok(())
        }
        None => umount_unrecorded(&abs, target),
    }
}

/// Asks the daemon that serves `mp` to unmount it (it knows which files are open there);
/// a daemon that does not answer on its socket is unmounted through the kernel.
fn umount_served(r: &MountRecord, mp: &Path, force: bool) -> Result<(), MountError> {
    let mut client = match tarn_control::Client::connect(&r.pool) {
        Ok(Some(c)) => c,
        _ => return umount_live(r, mp),
    };
    let asked = tarn_control::ops::mounts::Umount { target: mp.display().to_string(), force };
    match client.call(&asked) {
        Ok(()) => {}
        // Closing already (its last mount went away, an export runs) or just killed: once
        // it is gone, what it leaves is a dead daemon's.
        Err(e) if e.is_closing() || e.is_hangup() => {
            client.wait_daemon_gone(UMOUNT_WAIT);
            if !r.is_alive() {
                detach_dead(mp);
                r.remove();
            }
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    }
    // The last mount: the daemon replied once the pool was closed, and exits now.
    if state::load(&r.pool).ok().flatten().is_none_or(|now| now.pid != r.pid) {
        client.wait_daemon_gone(UMOUNT_WAIT);
    }
    Ok(())
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

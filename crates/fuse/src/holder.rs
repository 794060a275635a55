//! The running mount daemon as the control socket sees it: the pool it holds, the mounts
//! it serves, and how it ends. Shared by the serve loop (mount.rs), the FUSE sessions and
//! the control server's threads (`tarn_control::Daemon`).
//!
//! Owns: the list of live mounts and the mount record that mirrors it, mounting and
//! unmounting on request (`tarn mount` of another dataset, `tarn umount`, `pool export`),
//! the check for open files before an unmount, and the daemon's ending (close, export or
//! destroy of the pool, and the reply to whoever asked).
//! Promises: an unmount that would fail users' I/O is refused, naming the mountpoint and
//! its open files, unless forced; a forced unmount aborts the FUSE connection (the users'
//! I/O fails) and everything that reached the daemon is still committed; once the last
//! mount is gone no new one starts (a late `tarn mount` is told the daemon is closing);
//! the pool is closed, exported or destroyed only after every command still running
//! has let go of it, and the command that asked hears the outcome after that.
//! Must never: hold the mount list's lock while waiting for a session to end, or leave a
//! finishing command without a reply.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tarn_control::{ControlError, Finish, OpError};
use tarn_pool::{HistoryEntry, Pool};

use crate::options::MountOptions;
use crate::state::MountRecord;
use crate::MountError;

/// How long open handles may take to be released after their files were closed (the
/// kernel sends RELEASE after close() returns) before an unmount is refused for them.
const RELEASE_GRACE: Duration = Duration::from_secs(1);
/// How long an unmounted session may take to end.
const SESSION_END_WAIT: Duration = Duration::from_secs(60);
/// How long the daemon waits, at its end, for commands still running (a scrub…).
const COMMANDS_WAIT: Duration = Duration::from_secs(600);

/// One mounted dataset.
pub(crate) struct Mounted {
    pub dataset: String,
    pub mountpoint: PathBuf,
    pub session: crate::mount::Session,
    pub open: Arc<AtomicU64>,
    /// Why a `--transport uring` mount is served over /dev/fuse (None: as asked).
    pub fallback: Option<String>,
}

struct Mounts {
    live: Vec<Mounted>,
    record: MountRecord,
    /// The last mount is gone (or the daemon was told to stop): no new mount.
    closing: bool,
}

/// How the daemon ends, and who waits to hear it.
struct Ending {
    how: Finish,
    history: Option<HistoryEntry>,
    reply: tarn_control::Reply,
}

/// Mounts one dataset of the pool on a mountpoint (or its property) with N threads: the
/// FUSE side of a mount, which is mount.rs's.
pub(crate) type Mounter =
    Box<dyn Fn(&Arc<Pool>, &str, Option<PathBuf>, usize, MountOptions) -> Result<Mounted, MountError> + Send + Sync>;

pub(crate) struct Holder {
    pool_name: String,
    pool: Mutex<Option<Arc<Pool>>>,
    mounts: Mutex<Mounts>,
    ending: Mutex<Option<Ending>>,
    /// Mounts a remote `tarn mount` makes; they are `tarn_fuse::mount`'s to make.
    mounter: Mounter,
}

impl Holder {
    pub fn new(pool: Arc<Pool>, record: MountRecord, live: Vec<Mounted>, mounter: Mounter) -> Holder {
        Holder {
            pool_name: pool.name().to_string(),
            pool: Mutex::new(Some(pool)),
            mounts: Mutex::new(Mounts { live, record, closing: false }),
            ending: Mutex::new(None),
            mounter,
        }
    }

    pub fn pool_name(&self) -> &str {
        &self.pool_name
    }

    /// Sessions that ended (unmounted from outside, or by a request) are joined and
    /// leave the record; returns how many mounts are still live. At zero the daemon is
    /// closing: no new mount may start.
    pub fn reap(&self) -> usize {
        let ended: Vec<Mounted> = {
            let mut m = self.mounts.lock();
            let (ended, live): (Vec<_>, Vec<_>) =
                std::mem::take(&mut m.live).into_iter().partition(|s| s.session.is_finished());
            m.live = live;
            ended
        };
        for s in ended {
            if let Err(e) = s.session.join() {
                eprintln!("tarn mount: session on {} ended with: {e}", s.mountpoint.display());
            }
            let mut m = self.mounts.lock();
            m.record.mounts.retain(|(_, mp)| *mp != s.mountpoint);
            if !m.live.is_empty() {
                let _ = m.record.save();
            }
        }
        let mut m = self.mounts.lock();
        if m.live.is_empty() {
            m.closing = true;
        }
        m.live.len()
    }

    /// Every mountpoint still served.
    pub fn mountpoints(&self) -> Vec<PathBuf> {
        self.mounts.lock().live.iter().map(|m| m.mountpoint.clone()).collect()
    }

    /// Stops the daemon taking new mounts, and hands back the sessions still live (the
    /// serve loop was told to stop at once while the kernel still has users).
    pub fn abandon_sessions(&self) -> Vec<Mounted> {
        let mut m = self.mounts.lock();
        m.closing = true;
        std::mem::take(&mut m.live)
    }

    /// Ends the daemon's hold on the pool, as a finishing command asked (close if none
    /// did): waits for running commands to let go of the pool (unless not `patient`:
    /// told to stop at once, with sessions abandoned), logs the finishing command's
    /// history, closes, exports or destroys it, removes the record, and then tells
    /// whoever asked.
    pub fn end(&self, patient: bool) -> Result<(), MountError> {
        // Commands still running hold the pool; a finishing one registers its ending
        // before it lets go, so the ending is read only once the pool is ours alone.
        let pool = self.pool.lock().take().map(|p| if patient { wait_alone(p) } else { p });
        let ending = self.ending.lock().take();
        let (how, history, reply) = match ending {
            Some(e) => (e.how, e.history, Some(e.reply)),
            None => (Finish::Close, None, None),
        };
        let result = match pool {
            Some(pool) => finish_pool(pool, how, history),
            None => Ok(()),
        };
        self.mounts.lock().record.remove();
        if let Some(reply) = reply {
            reply(result.as_ref().map(|_| ()).map_err(|e| OpError::Daemon(e.to_string())));
        }
        result
    }

    fn find(&self, target: &str) -> Option<(String, PathBuf)> {
        let abs = Path::new(target).canonicalize().unwrap_or_else(|_| PathBuf::from(target));
        self.mounts
            .lock()
            .live
            .iter()
            .find(|m| m.dataset == target || m.mountpoint == abs)
            .map(|m| (m.dataset.clone(), m.mountpoint.clone()))
    }

    fn open_handles(&self, mountpoint: &Path) -> u64 {
        self.mounts
            .lock()
            .live
            .iter()
            .find(|m| m.mountpoint == mountpoint)
            .map_or(0, |m| m.open.load(Ordering::Relaxed))
    }

    /// Open handles on `mountpoint` once the ones just closed have been released.
    fn settled_open_handles(&self, mountpoint: &Path) -> u64 {
        let deadline = Instant::now() + RELEASE_GRACE;
        loop {
            let n = self.open_handles(mountpoint);
            if n == 0 || Instant::now() >= deadline {
                return n;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Unmounts `mountpoint` of `dataset`; a busy one is refused in the words of `what`
    /// (`cannot export pool 'tank'`) unless `force`.
    fn unmount_one(&self, what: &str, dataset: &str, mountpoint: &Path, force: bool) -> Result<(), OpError> {
        let shown = mountpoint.display();
        if !force {
            let open = self.settled_open_handles(mountpoint);
            if open > 0 {
                return Err(open_files(what, open, mountpoint, dataset));
            }
        }
        match tarn_daemon::umount(mountpoint, 0) {
            Ok(()) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && force => {
                // Abort the FUSE connection (users' I/O fails from now on), then detach.
                let _ = tarn_daemon::umount(mountpoint, libc::MNT_FORCE);
                let _ = tarn_daemon::umount(mountpoint, libc::MNT_DETACH);
                Ok(())
            }
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Err(OpError::Refused(format!(
                "{what}: {shown} ({dataset}) is busy: a process has its working directory or a file there (see `fuser -vm {shown}`); use -f to force"
            ))),
            // Already gone (unmounted from outside): its session is ending anyway.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(()),
            Err(e) => Err(OpError::Daemon(format!("cannot unmount {shown}: {e}"))),
        }
    }

    /// Waits until the sessions on `mountpoints` have ended and been reaped.
    fn wait_sessions_end(&self, mountpoints: &[PathBuf]) -> Result<(), OpError> {
        let deadline = Instant::now() + SESSION_END_WAIT;
        loop {
            let pending: Vec<PathBuf> = self
                .mounts
                .lock()
                .live
                .iter()
                .filter(|m| mountpoints.contains(&m.mountpoint))
                .map(|m| m.mountpoint.clone())
                .collect();
            if pending.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(OpError::Daemon(format!(
                    "the FUSE session on {} did not end after unmounting",
                    pending[0].display()
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
            self.reap();
        }
    }

    /// Unmounts every mount for an export or destroy (`what` says which, for refusals):
    /// all are checked for open files before any is unmounted.
    fn unmount_all(&self, what: &str, force: bool) -> Result<(), OpError> {
        let all: Vec<(String, PathBuf)> =
            self.mounts.lock().live.iter().map(|m| (m.dataset.clone(), m.mountpoint.clone())).collect();
        if !force {
            for (dataset, mp) in &all {
                let open = self.settled_open_handles(mp);
                if open > 0 {
                    return Err(open_files(what, open, mp, dataset));
                }
            }
        }
        for (dataset, mp) in &all {
            self.unmount_one(what, dataset, mp, force)?;
        }
        let mps: Vec<PathBuf> = all.into_iter().map(|(_, mp)| mp).collect();
        self.wait_sessions_end(&mps)
    }
}

/// The refusal of an unmount that would cut off `open` open files.
fn open_files(what: &str, open: u64, mountpoint: &Path, dataset: &str) -> OpError {
    let (are, them) = if open == 1 { ("file is", "it") } else { ("files are", "them") };
    OpError::Refused(format!(
        "{what}: {open} {are} open on {} ({dataset}); close {them}, or use -f to force (I/O on {them} then fails)",
        mountpoint.display()
    ))
}

/// Waits for every other holder of `pool` (commands still running, sessions being torn
/// down) to let go, so it can be closed, exported or destroyed for real.
fn wait_alone(pool: Arc<Pool>) -> Arc<Pool> {
    let deadline = Instant::now() + COMMANDS_WAIT;
    while Arc::strong_count(&pool) > 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    pool
}

/// Closes, exports or destroys the pool; if something still holds it (told to stop at
/// once while the kernel had users), commits what reached us instead.
fn finish_pool(pool: Arc<Pool>, how: Finish, history: Option<HistoryEntry>) -> Result<(), MountError> {
    let pool = match Arc::try_unwrap(pool) {
        Ok(pool) => pool,
        Err(shared) => {
            shared.sync().map_err(MountError::FinalCommit)?;
            return match how {
                Finish::Stay | Finish::Close => Ok(()),
                _ => Err(MountError::State(
                    "the pool was committed but is still in use, so it was not exported or destroyed; run the command again".into(),
                )),
            };
        }
    };
    tarn_control::finish_local(pool, how, history).map_err(|e| match e {
        OpError::Pool(p) => MountError::FinalCommit(*p),
        other => MountError::State(other.to_string()),
    })
}

impl tarn_control::Daemon for Holder {
    fn pid(&self) -> u32 {
        std::process::id()
    }

    fn mount_list(&self) -> Vec<tarn_control::ops::mounts::MountInfo> {
        let m = self.mounts.lock();
        m.live
            .iter()
            .map(|l| {
                let (transport, counts) = l.session.transport();
                tarn_control::ops::mounts::MountInfo {
                    dataset: l.dataset.clone(),
                    mountpoint: l.mountpoint.clone(),
                    transport: transport.name().to_string(),
                    ring_requests: counts.map(|c| c.0),
                    dev_requests: counts.map(|c| c.1),
                    fallback: l.fallback.clone(),
                }
            })
            .collect()
    }

    fn pool(&self) -> Option<Arc<Pool>> {
        self.pool.lock().clone()
    }

    fn mount(
        &self,
        dataset: &str,
        mountpoint: Option<&Path>,
        threads: usize,
        options: &str,
    ) -> Result<PathBuf, OpError> {
        let options = MountOptions::parse(options).map_err(|e| OpError::Usage(e.to_string()))?;
        let pool = self.pool().ok_or_else(|| self.closing_error())?;
        let mut m = self.mounts.lock();
        if m.closing || self.ending.lock().is_some() {
            return Err(self.closing_error());
        }
        if let Some(there) = m.live.iter().find(|l| l.dataset == dataset) {
            return Err(OpError::Refused(format!(
                "dataset '{dataset}' is already mounted on {} (by tarn mount pid {})",
                there.mountpoint.display(),
                std::process::id()
            )));
        }
        // Under the lock: the mount is in the list before anyone can ask to unmount it.
        let mounted = (self.mounter)(&pool, dataset, mountpoint.map(Path::to_path_buf), threads, options)
            .map_err(|e| OpError::Daemon(e.to_string()))?;
        let mp = mounted.mountpoint.clone();
        m.record.mounts.push((dataset.to_string(), mp.clone()));
        m.live.push(mounted);
        if let Err(e) = m.record.save() {
            eprintln!("tarn mount: cannot update the mount record: {e}");
        }
        Ok(mp)
    }

    fn mounted(&self, dataset: &str) -> Option<PathBuf> {
        self.mounts.lock().live.iter().find(|m| m.dataset == dataset).map(|m| m.mountpoint.clone())
    }

    fn unmount(&self, target: &str, force: bool) -> Result<bool, OpError> {
        let (dataset, mp) =
            self.find(target).ok_or_else(|| OpError::Daemon(MountError::NotMounted(target.to_string()).to_string()))?;
        let what = format!("cannot unmount {}", mp.display());
        self.unmount_one(&what, &dataset, &mp, force)?;
        self.wait_sessions_end(std::slice::from_ref(&mp))?;
        Ok(self.reap() == 0)
    }

    fn finish(&self, how: Finish, history: Option<HistoryEntry>, reply: tarn_control::Reply) {
        let what = match &how {
            Finish::Stay => return reply(Ok(())),
            Finish::Close => None,
            Finish::Export { force } => Some((format!("cannot export pool '{}'", self.pool_name), *force)),
            Finish::Destroy { force } => Some((format!("cannot destroy pool '{}'", self.pool_name), *force)),
        };
        if self.ending.lock().is_some() {
            return reply(Err(self.closing_error()));
        }
        if let Some((what, force)) = what {
            if let Err(e) = self.unmount_all(&what, force) {
                return reply(Err(e));
            }
        }
        let mut ending = self.ending.lock();
        if ending.is_some() {
            drop(ending);
            return reply(Err(self.closing_error()));
        }
        *ending = Some(Ending { how, history, reply });
    }
}

impl Holder {
    /// Writes each mount's fallback line (a `--transport uring` mount served over
    /// /dev/fuse) to stderr: the daemon's log once it has detached.
    pub(crate) fn log_fallbacks(&self) {
        for m in &self.mounts.lock().live {
            if let Some(why) = &m.fallback {
                eprintln!("{}", crate::uring::fallback_line(&m.dataset, &m.mountpoint, why));
            }
        }
    }

    fn closing_error(&self) -> OpError {
        ControlError::Closing { pool: self.pool_name.clone(), pid: std::process::id() }.into()
    }
}

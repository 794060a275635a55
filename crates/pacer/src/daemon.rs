//! Process plumbing: detaching from the caller once the mount is usable, signals, the
//! serve loop that rewrites the stats file, and a clean unmount at the end.
//!
//! Owns: the process lifecycle. Promises: in daemon mode the parent exits 0 only after
//! the child reported the mount usable (printing `pid=<N>` as its last stdout line), and
//! exits non-zero with the child's error otherwise; the daemon holds none of the caller's
//! stdio afterwards, so `$(tarn-pacer ...)` returns. SIGTERM/SIGINT unmount; a busy mount
//! (a loop device still attached) is detached lazily and served until its last user
//! closes it, so no in-flight I/O is failed. Must never: fork once threads exist, or exit
//! while a mounted filesystem above still depends on us unless signalled twice.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use fuser::BackgroundSession;

use crate::error::PacerError;
use crate::stats::Stats;

/// How the process reports "mount ready" or a startup failure.
pub enum Readiness {
    /// Stay attached: print the pid ourselves.
    Foreground,
    /// We are the forked daemon: tell the waiting parent through this pipe.
    Child(File),
}

impl Readiness {
    /// Mount is usable: let the caller go on.
    pub fn ready(self) {
        let pid = std::process::id();
        match self {
            Readiness::Foreground => {
                println!("pid={pid}");
                let _ = io::stdout().flush();
            }
            Readiness::Child(mut pipe) => {
                // Release the caller's stdio before the parent exits, so a caller that
                // reads our output to EOF is not kept waiting for the daemon's life.
                detach_stdio();
                let _ = writeln!(pipe, "OK {pid}");
            }
        }
    }

    /// Startup failed after the fork: the parent prints it; the child just exits.
    pub fn fail(self, err: &PacerError) -> Result<(), PacerError> {
        match self {
            Readiness::Foreground => Ok(()),
            Readiness::Child(mut pipe) => {
                let _ = writeln!(pipe, "ERR {err}");
                std::process::exit(1);
            }
        }
    }
}

/// Fork. The parent waits for the child's verdict and exits; only the child returns.
pub fn daemonize() -> Result<Readiness, PacerError> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 fills the two-element array we pass.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(PacerError::Daemon(io::Error::last_os_error()));
    }
    // SAFETY: the descriptors were just created and are owned by nobody else.
    let (read_end, write_end) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
    // SAFETY: no thread has been started yet (checked by the caller's ordering), so the
    // child is a faithful copy of a single-threaded process.
    match unsafe { libc::fork() } {
        -1 => Err(PacerError::Daemon(io::Error::last_os_error())),
        0 => {
            drop(read_end);
            // New session: no controlling terminal, no SIGHUP/SIGINT from the caller's tty.
            // SAFETY: plain syscalls in the child.
            unsafe {
                libc::setsid();
                libc::chdir(c"/".as_ptr());
            }
            Ok(Readiness::Child(write_end))
        }
        child => {
            drop(write_end);
            parent_wait(read_end, child)
        }
    }
}

/// The parent's side: relay the child's verdict and exit.
fn parent_wait(mut pipe: File, child: libc::pid_t) -> ! {
    let mut text = String::new();
    let _ = pipe.read_to_string(&mut text);
    let line = text.lines().next().unwrap_or("");
    if let Some(pid) = line.strip_prefix("OK ") {
        println!("pid={pid}");
        let _ = io::stdout().flush();
        std::process::exit(0);
    }
    let msg = line
        .strip_prefix("ERR ")
        .map(str::to_owned)
        .unwrap_or_else(|| format!("daemon (pid {child}) exited before the mount was ready"));
    eprintln!("tarn-pacer: {}", PacerError::Startup(msg));
    std::process::exit(1);
}

/// Point stdin/stdout/stderr at /dev/null.
fn detach_stdio() {
    let _ = io::stdout().flush();
    let Ok(null) = File::options().read(true).write(true).open("/dev/null") else {
        return;
    };
    for target in 0..=2 {
        // SAFETY: dup2 onto the standard descriptors, which we own in this process.
        unsafe { libc::dup2(null.as_raw_fd(), target) };
    }
}

fn termination_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset/sigaddset initialise it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGHUP);
        set
    }
}

/// Block the termination signals in this thread and, by inheritance, in every thread
/// started afterwards, so only the serve loop receives them (via sigtimedwait).
pub fn block_termination_signals() {
    let set = termination_signals();
    // SAFETY: valid set, no old-mask output wanted.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
}

/// Wait up to `timeout` for a termination signal; Some(signal) if one came.
fn wait_signal(timeout: Duration) -> Option<i32> {
    let set = termination_signals();
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: valid set and timespec; we do not need the siginfo.
    let sig = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &ts) };
    (sig > 0).then_some(sig)
}

/// Unmount; if a user (a loop device) still holds the disk, detach lazily so the
/// kernel ends the session once the last user closes it.
fn unmount(mountpoint: &Path) {
    let Ok(c) = CString::new(mountpoint.as_os_str().as_bytes()) else {
        return;
    };
    // SAFETY: valid NUL-terminated path.
    if unsafe { libc::umount(c.as_ptr()) } == 0 {
        return;
    }
    if io::Error::last_os_error().raw_os_error() == Some(libc::EBUSY) {
        // SAFETY: as above.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

/// Serve until signalled (or unmounted from outside), rewriting the stats file once a
/// second and once more at the end.
pub fn serve(
    session: BackgroundSession,
    mountpoint: &Path,
    stats: &Arc<Stats>,
    stats_path: Option<&PathBuf>,
) -> Result<(), PacerError> {
    let write_stats = || {
        if let Some(path) = stats_path {
            let _ = stats.write_to(path); // a full stats disk must not stop the disk
        }
    };
    let mut signalled = false;
    write_stats();
    while !session.guard.is_finished() {
        if let Some(_sig) = wait_signal(Duration::from_secs(1)) {
            if signalled {
                break; // second signal: the operator insists, stop now
            }
            signalled = true;
            unmount(mountpoint);
        }
        write_stats();
    }
    write_stats();
    if session.guard.is_finished() {
        let _ = session.join();
    }
    Ok(())
}

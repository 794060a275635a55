//! Process plumbing of the mount daemon: fork with a readiness pipe, signal handling,
//! and unmounting.
//!
//! Owns: the process lifecycle. Promises: in daemon mode the parent exits 0, silently,
//! only after the child reported the mount usable, and exits non-zero with the child's
//! error otherwise; the daemon keeps none of the caller's stdio (its stderr goes to a log
//! in the state directory), so `$(tarn mount …)` returns. SIGTERM/SIGINT/SIGHUP reach
//! only the serve loop (blocked in every other thread). Must never: fork once threads
//! exist.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use crate::MountError;

/// How the process reports "mount ready" or a startup failure.
pub enum Readiness {
    /// Stay attached (`-f`): nothing to report to.
    Foreground,
    /// We are the forked daemon: tell the waiting parent through this pipe.
    Child(File),
}

impl Readiness {
    /// The mount is usable: let the caller go on. `log` receives the daemon's stderr.
    pub fn ready(self, log: &Path) {
        if let Readiness::Child(mut pipe) = self {
            detach_stdio(log);
            let _ = writeln!(pipe, "OK");
        }
    }

    /// Startup failed: in the daemon, hand the message to the parent and exit.
    pub fn fail(self, err: &MountError) {
        if let Readiness::Child(mut pipe) = self {
            let _ = writeln!(pipe, "ERR {err}");
            std::process::exit(1);
        }
    }
}

/// Forks. The parent waits for the child's verdict and exits; only the child returns.
pub fn daemonize() -> Result<Readiness, MountError> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 fills the two-element array we pass.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(MountError::Startup(format!("pipe: {}", io::Error::last_os_error())));
    }
    // SAFETY: the descriptors were just created and are owned by nobody else.
    let (read_end, write_end) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
    // SAFETY: the caller has started no thread yet, so the child is a faithful copy.
    match unsafe { libc::fork() } {
        -1 => Err(MountError::Startup(format!("fork: {}", io::Error::last_os_error()))),
        0 => {
            drop(read_end);
            // New session: no controlling terminal, no SIGINT from the caller's tty.
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
    if line == "OK" {
        std::process::exit(0);
    }
    let msg = line
        .strip_prefix("ERR ")
        .map(str::to_owned)
        .unwrap_or_else(|| format!("the mount daemon (pid {child}) exited before the mount was ready"));
    eprintln!("tarn: {msg}");
    std::process::exit(1);
}

/// Points stdin/stdout at /dev/null and stderr at `log` (or /dev/null).
fn detach_stdio(log: &Path) {
    let Ok(null) = File::options().read(true).write(true).open("/dev/null") else {
        return;
    };
    let log = File::options().create(true).append(true).open(log).ok();
    let err_fd = log.as_ref().map_or(null.as_raw_fd(), |f| f.as_raw_fd());
    // SAFETY: dup2 onto the standard descriptors, which we own in this process.
    unsafe {
        libc::dup2(null.as_raw_fd(), 0);
        libc::dup2(null.as_raw_fd(), 1);
        libc::dup2(err_fd, 2);
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

/// Blocks the termination signals in this thread and every thread started afterwards,
/// so only the serve loop receives them (through sigtimedwait).
pub fn block_termination_signals() {
    let set = termination_signals();
    // SAFETY: valid set, no old mask wanted.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
}

/// Waits up to `timeout` for a termination signal; Some(signal) if one came.
pub fn wait_signal(timeout: Duration) -> Option<i32> {
    let set = termination_signals();
    let ts = libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as libc::c_long };
    // SAFETY: valid set and timespec; no siginfo wanted.
    let sig = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &ts) };
    (sig > 0).then_some(sig)
}

/// umount2(path, flags): Ok, or the errno.
pub fn umount(path: &Path, flags: i32) -> Result<(), io::Error> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: valid NUL-terminated path.
    if unsafe { libc::umount2(c.as_ptr(), flags) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

//! Starting a daemon: fork with a readiness pipe, the parent waiting for the daemon's
//! verdict, and the daemon letting go of the caller once its mount is usable.
//!
//! Owns: the readiness protocol, one line from the daemon to the waiting parent on a
//! pipe (`OK`, or `ERR <message>`; nothing at all if the daemon died). Promises: in
//! daemon mode only the child returns from [`start`]; the parent hands the verdict to
//! the caller's [`Report`] and then exits, 0 only if the daemon said the mount is
//! usable, 1 otherwise; after [`Readiness::ready`] the daemon holds none of the caller's
//! stdio, so `$(command …)` returns. Must never: fork once a thread exists (the child
//! would start with the locks of threads it does not have): [`start`] is the first
//! thing a daemon does, before anything that may start a thread.

use std::fmt::Display;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::Path;

use crate::signals::block_termination_signals;
use crate::DaemonError;

/// How a daemon's start ended, as told to the process the caller is waiting on: the
/// parent in daemon mode, the daemon itself in the foreground (only `Ready` there; a
/// foreground failure is returned to the caller as its own error).
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict<'a> {
    /// The mount is usable; `pid` is the daemon's.
    Ready { pid: u32 },
    /// The daemon failed to start and said why.
    Failed(&'a str),
    /// The daemon `pid` exited before the mount was ready without saying why (it
    /// crashed or was killed).
    Died { pid: u32 },
}

/// Says a verdict to the caller in the daemon's own words (the parent's stdout and
/// stderr are still the caller's). A plain `fn`: it runs in the parent after the fork,
/// where no state of the caller's should be needed.
pub type Report = fn(&Verdict);

/// What the started daemon owes the process waiting for it: one "ready" or one "failed".
pub struct Readiness {
    report: Report,
    /// The write end of the readiness pipe, in the forked daemon; None in the foreground.
    parent: Option<File>,
}

/// Starts the daemon: unless `foreground`, forks, and in the parent waits for the
/// child's verdict, reports it and exits (only the child returns). Either way returns
/// with the termination signals blocked, for [`crate::Termination`].
///
/// Call it before any thread exists (see the module's "Must never"); resolve relative
/// paths first, since the daemon runs in `/`.
pub fn start(foreground: bool, report: Report) -> Result<Readiness, DaemonError> {
    let parent = if foreground { None } else { Some(fork(report)?) };
    // Blocked before any thread is started, so every thread inherits the mask.
    block_termination_signals();
    ignore_broken_pipes();
    Ok(Readiness { report, parent })
}

/// A peer that goes away (a control client that closed its socket, the parent of a
/// starting daemon, a `tarn recv` reader) must cost the daemon one failed write (EPIPE),
/// not its life: `tarn`'s `main` restores SIGPIPE's default for `tarn ls | head`, and a
/// daemon killed by it would take every mount of its pool down with it.
fn ignore_broken_pipes() {
    // SAFETY: a signal disposition set before the daemon starts its threads.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
}

impl Readiness {
    /// The mount is usable: let the caller go on. `log`, if given, receives the
    /// daemon's stderr from now on (otherwise /dev/null does).
    pub fn ready(self, log: Option<&Path>) {
        match self.parent {
            None => (self.report)(&Verdict::Ready { pid: std::process::id() }),
            Some(mut pipe) => {
                // Release the caller's stdio before the parent exits, so a caller that
                // reads our output to EOF is not kept waiting for the daemon's life.
                detach_stdio(log);
                // A write error means the parent is gone: nobody is left to tell.
                let _ = writeln!(pipe, "OK");
            }
        }
    }

    /// Startup failed: in daemon mode, hand the message to the parent and exit 1. In
    /// the foreground it returns, and the caller returns `err` as its own error.
    pub fn fail(self, err: &dyn Display) {
        if let Some(mut pipe) = self.parent {
            let _ = writeln!(pipe, "ERR {err}");
            std::process::exit(1);
        }
    }
}

/// Forks. The child returns the write end of the readiness pipe; the parent waits for
/// the child's verdict, reports it and exits.
fn fork(report: Report) -> Result<File, DaemonError> {
    let (read_end, write_end) = pipe()?;
    // SAFETY: `start`'s caller has started no thread yet, so the child is a faithful
    // copy of a single-threaded process.
    match unsafe { libc::fork() } {
        -1 => Err(DaemonError::Fork(io::Error::last_os_error())),
        0 => {
            drop(read_end);
            new_session();
            Ok(write_end)
        }
        child => {
            drop(write_end);
            // fork returned a pid, which is positive.
            parent_wait(read_end, child as u32, report)
        }
    }
}

/// The readiness pipe, close-on-exec so nothing the daemon runs holds it open.
fn pipe() -> Result<(File, File), DaemonError> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 fills the two-element array we pass.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(DaemonError::Pipe(io::Error::last_os_error()));
    }
    // SAFETY: the descriptors were just created and are owned by nobody else.
    Ok(unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) })
}

/// In the child: a new session, so no controlling terminal and no SIGHUP/SIGINT from
/// the caller's tty; and `/` as the working directory, so the daemon pins no directory
/// (nor file system) of the caller's.
fn new_session() {
    // SAFETY: plain syscalls in the child; neither can fail in a way that matters here
    // (setsid fails only for a group leader, which a fresh child is not).
    unsafe {
        libc::setsid();
        libc::chdir(c"/".as_ptr());
    }
}

/// The parent's side: read the child's one line, report it and exit.
fn parent_wait(mut pipe: File, child: u32, report: Report) -> ! {
    let mut text = String::new();
    // A read error leaves the text empty, which reads as a silent death.
    let _ = pipe.read_to_string(&mut text);
    let verdict = verdict_of(text.lines().next().unwrap_or(""), child);
    report(&verdict);
    let _ = io::stdout().flush();
    std::process::exit(if matches!(verdict, Verdict::Ready { .. }) { 0 } else { 1 });
}

/// The verdict in the daemon's first line (the pipe reaches EOF when the daemon wrote
/// it, or when it died without writing).
fn verdict_of(line: &str, child: u32) -> Verdict<'_> {
    if line == "OK" {
        return Verdict::Ready { pid: child };
    }
    match line.strip_prefix("ERR ") {
        Some(message) => Verdict::Failed(message),
        None => Verdict::Died { pid: child },
    }
}

/// Points stdin and stdout at /dev/null and stderr at `log` (appended to; /dev/null if
/// there is none or it cannot be opened).
fn detach_stdio(log: Option<&Path>) {
    // What is still buffered was meant for the caller: send it before letting go.
    let _ = io::stdout().flush();
    let Ok(null) = File::options().read(true).write(true).open("/dev/null") else {
        return;
    };
    let log = log.and_then(|p| File::options().create(true).append(true).open(p).ok());
    let err_fd = log.as_ref().map_or(null.as_raw_fd(), |f| f.as_raw_fd());
    // SAFETY: dup2 onto the standard descriptors, which we own in this process.
    unsafe {
        libc::dup2(null.as_raw_fd(), 0);
        libc::dup2(null.as_raw_fd(), 1);
        libc::dup2(err_fd, 2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_daemons_line_decides_the_verdict() {
        assert_eq!(verdict_of("OK", 7), Verdict::Ready { pid: 7 });
        assert_eq!(verdict_of("ERR mountpoint /x is busy", 7), Verdict::Failed("mountpoint /x is busy"));
        assert_eq!(verdict_of("", 7), Verdict::Died { pid: 7 }, "no line: the daemon died");
        assert_eq!(verdict_of("OKAY", 7), Verdict::Died { pid: 7 }, "only OK means ready");
    }
}

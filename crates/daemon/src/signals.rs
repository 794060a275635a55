//! The termination signals of a daemon (SIGTERM, SIGINT, SIGHUP) and what they ask of
//! its serve loop.
//!
//! Owns: the signal mask and the two-step stop: the first signal asks the daemon to
//! unmount (and so to end cleanly once its users are gone), any later one to stop at
//! once. Promises: once [`crate::start`] has blocked them (before any thread exists,
//! so every thread inherits the mask), the signals are taken only by the thread that
//! calls [`Termination::wait`]. Must never: install a signal handler (it would run in
//! whichever thread the kernel picks, in the middle of whatever that thread was doing).

use std::time::Duration;

/// What the termination signals received so far ask of the serve loop.
#[derive(Debug, PartialEq, Eq)]
pub enum Asked {
    /// No signal came within the wait.
    Nothing,
    /// The first signal: unmount, and end once the mounts are gone.
    Unmount,
    /// A later signal: the operator insists, stop now.
    StopNow,
}

/// The serve loop's memory of whether it was already signalled.
#[derive(Debug, Default)]
pub struct Termination {
    signalled: bool,
}

impl Termination {
    pub fn new() -> Termination {
        Termination::default()
    }

    /// Waits up to `timeout` for a termination signal and says what it asks.
    pub fn wait(&mut self, timeout: Duration) -> Asked {
        if wait_signal(timeout).is_none() {
            return Asked::Nothing;
        }
        if self.signalled {
            return Asked::StopNow;
        }
        self.signalled = true;
        Asked::Unmount
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

/// Blocks the termination signals in this thread and, by inheritance, in every thread
/// started afterwards, so they stay pending until the serve loop takes them (a command
/// that waits with `Termination` calls it before it starts any thread).
pub fn block_termination_signals() {
    let set = termination_signals();
    // SAFETY: valid set, no old mask wanted.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
}

/// Waits up to `timeout` for a (blocked) termination signal; Some(signal) if one came.
fn wait_signal(timeout: Duration) -> Option<i32> {
    let set = termination_signals();
    let ts =
        libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as libc::c_long };
    // SAFETY: valid set and timespec; no siginfo wanted.
    let sig = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &ts) };
    (sig > 0).then_some(sig)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_signal_asks_to_unmount_a_second_to_stop_now() {
        // Blocked in this test thread only; raise() directs the signal at this thread,
        // so it stays pending here and reaches no other test.
        block_termination_signals();
        let mut term = Termination::new();
        assert_eq!(term.wait(Duration::from_millis(10)), Asked::Nothing);
        // SAFETY: raising a blocked signal at our own thread.
        unsafe { libc::raise(libc::SIGTERM) };
        assert_eq!(term.wait(Duration::from_secs(5)), Asked::Unmount);
        assert_eq!(term.wait(Duration::from_millis(10)), Asked::Nothing);
        // SAFETY: as above.
        unsafe { libc::raise(libc::SIGHUP) };
        assert_eq!(term.wait(Duration::from_secs(5)), Asked::StopNow);
    }
}

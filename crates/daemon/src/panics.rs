//! What a daemon does when one of its threads panics: it ends at once, loudly.
//!
//! Why: a daemon that outlives a panic is half-working — a dead thread's requests are never
//! answered (or, when its FUSE session ends, the mount goes and new paths resolve to the
//! directory beneath it), and the state the bug left is committed at the clean exit. Ending
//! the process makes the kernel abort its FUSE connections: the mounts' next calls fail
//! with ENOTCONN until `umount`, and what was acknowledged (fsynced) is in the intent log,
//! replayed at the next import.
//!
//! Owns: the process's panic hook ([`end_on_panic`]).
//!
//! Promises: once installed, a panic in any thread writes the thread's name, where it
//! panicked, its message and a backtrace, then the caller's note, to stderr in one write
//! (the daemon's log once it is ready), and aborts the process (SIGABRT) — also for a panic
//! a thread would catch (the txg sync thread's, which suspends the pool in a process that
//! lives on: the CLI, tests).
//!
//! Must never: be installed outside a daemon's own process (tests and one-shot commands
//! keep unwinding: `#[should_panic]`, the txg engine's suspension), or run anything of the
//! daemon's after a panic (no unmount, no commit).
use std::io::Write;

/// Installs the panic hook that ends the process after writing the panic and `note` (the
/// caller's words: what happens to its mounts) to stderr. Call it in the daemon's process
/// once it is one (after `crate::start`).
pub fn end_on_panic(note: &'static str) {
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current();
        let name = thread.name().unwrap_or("<unnamed>");
        // Always: a daemon's panic cannot be run again with RUST_BACKTRACE set.
        let backtrace = std::backtrace::Backtrace::force_capture();
        let text = format!("thread '{name}' {info}\nstack backtrace:\n{backtrace}\n{note}\n");
        // One write, so that other threads' lines do not cut into it.
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
        std::process::abort();
    }));
}

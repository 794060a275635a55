//! `tarn send` and `tarn recv`: the stream between stdout/stdin and the pool.
//!
//! The pool may be held by a daemon (a mounted dataset) or opened by this command; either
//! way the engine reads or writes the stream through a FIFO this command makes in a
//! private directory (its path goes in the command: no stream byte crosses the control
//! socket), and a thread here copies between the FIFO and stdout or stdin, counting the
//! bytes for `--progress`.
//!
//! Owns: the FIFO's life, the copy, the progress line, and the refusal to write a binary
//! stream to a terminal.
//! Promises: the command's exit says whether the engine's side succeeded, after the copy
//! ended; the FIFO and its directory are removed; a side that failed before opening the
//! FIFO never leaves the copy waiting forever.
//! Must never: let a stream byte pass the control socket, or keep the pool open past the
//! command (see `access`).

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tarn_control::ops::stream::{NoSigpipe, Recv, Send, SendSize};
use tarn_send::ResumeToken;

use crate::access::{self, pool_of};
use crate::error::CliError;

/// Bytes per copy step.
const CHUNK: usize = 1 << 20;
/// How often the progress line is redrawn.
const REDRAW: Duration = Duration::from_millis(500);

/// A FIFO in a directory only this user can reach, removed when dropped.
struct Fifo {
    dir: PathBuf,
    path: PathBuf,
}

impl Fifo {
    fn new() -> Result<Fifo, CliError> {
        let base = std::env::temp_dir();
        let dir = base.join(format!("tarn-stream-{}-{:x}", std::process::id(), rand_suffix()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| CliError::Refused(format!("{}: {e}", dir.display())))?;
        let path = dir.join("stream");
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("a temp path has no NUL");
        // SAFETY: a valid NUL-terminated path.
        if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
            let e = io::Error::last_os_error();
            let _ = std::fs::remove_dir(&dir);
            return Err(CliError::Refused(format!("{}: {e}", path.display())));
        }
        Ok(Fifo { dir, path })
    }
}

impl Drop for Fifo {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

fn rand_suffix() -> u64 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    t.as_nanos() as u64 ^ u64::from(std::process::id()).rotate_left(32)
}

/// The progress line on stderr: bytes, rate and, with a total, time left.
struct Meter {
    on: bool,
    verb: &'static str,
    total: Option<u64>,
    start: Instant,
    drawn: Instant,
}

impl Meter {
    fn new(on: bool, verb: &'static str, total: Option<u64>) -> Meter {
        let now = Instant::now();
        Meter { on, verb, total, start: now, drawn: now }
    }

    fn tick(&mut self, bytes: u64) {
        if self.on && self.drawn.elapsed() >= REDRAW {
            self.drawn = Instant::now();
            eprint!("\r{}\x1b[K", self.line(bytes));
        }
    }

    fn done(&self, bytes: u64) {
        if self.on {
            eprintln!("\r{}\x1b[K", self.line(bytes));
        }
    }

    fn line(&self, bytes: u64) -> String {
        let secs = self.start.elapsed().as_secs_f64().max(0.001);
        let rate = bytes as f64 / secs;
        let mut line = format!("{} {} in {:.1}s, {}/s", self.verb, mib(bytes as f64), secs, mib(rate));
        if let Some(total) = self.total.filter(|&t| t > 0) {
            let left = total.saturating_sub(bytes) as f64 / rate.max(1.0);
            let pct = (bytes as f64 * 100.0 / total as f64).min(100.0);
            line.push_str(&format!(", {pct:.0}% of ~{}, ETA {left:.0}s", mib(total as f64)));
        }
        line
    }
}

fn mib(bytes: f64) -> String {
    format!("{:.1} MiB", bytes / (1u64 << 20) as f64)
}

/// Copies `from` to `to` until the end of `from`, ticking the meter; returns the bytes.
fn copy(from: &mut dyn Read, to: &mut dyn Write, meter: &mut Meter) -> io::Result<u64> {
    let mut buf = vec![0u8; CHUNK];
    let mut total = 0u64;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        to.write_all(&buf[..n])?;
        total += n as u64;
        meter.tick(total);
    }
    to.flush()?;
    meter.done(total);
    Ok(total)
}

/// Opens the FIFO's other end without blocking, again and again, until the copy thread
/// has opened its own: a side that failed before opening the FIFO must not leave the
/// copy blocked in `open` forever. What this opens is closed at once.
fn release_copier(path: &Path, opened: &AtomicBool, write_side: bool) {
    while !opened.load(Ordering::Acquire) {
        let mut o = OpenOptions::new();
        if write_side {
            o.write(true);
        } else {
            o.read(true);
        }
        let held = o.custom_flags(libc::O_NONBLOCK).open(path);
        std::thread::sleep(Duration::from_millis(10));
        drop(held);
    }
}

/// `tarn send POOL/DS@SNAP [-i|-I BASE] [--progress]`, `tarn send -t TOKEN`.
pub fn send(
    snapshot: Option<String>,
    incremental: Option<String>,
    intermediates: Option<String>,
    token: Option<String>,
    progress: bool,
) -> Result<(), CliError> {
    // SAFETY: isatty only inspects the descriptor.
    if unsafe { libc::isatty(libc::STDOUT_FILENO) } == 1 {
        return Err(CliError::Usage(
            "the stream is binary: redirect it (tarn send … > FILE, or | tarn recv …, or | ssh HOST tarn recv …)"
                .into(),
        ));
    }
    let pool = match (&token, &snapshot) {
        (Some(t), _) => {
            pool_of(&ResumeToken::decode(t).map_err(|e| CliError::from(tarn_control::OpError::from(e)))?.dataset)
                .to_string()
        }
        (None, Some(s)) => pool_of(s).to_string(),
        (None, None) => return Err(CliError::Usage("give POOL/DS@SNAP, or -t TOKEN".into())),
    };
    let base = intermediates.clone().or(incremental);
    let total = if progress {
        let size = SendSize {
            snapshot: snapshot.clone(),
            base: base.clone(),
            intermediates: intermediates.is_some(),
            token: token.clone(),
        };
        access::run(&pool, size).ok()
    } else {
        None
    };
    let fifo = Fifo::new()?;
    let opened = Arc::new(AtomicBool::new(false));
    let copier = {
        let (path, opened) = (fifo.path.clone(), opened.clone());
        std::thread::spawn(move || -> io::Result<u64> {
            let _no_sigpipe = NoSigpipe::new();
            let from = File::open(&path);
            opened.store(true, Ordering::Release);
            let mut meter = Meter::new(progress, "sent", total);
            copy(&mut from?, &mut io::stdout().lock(), &mut meter)
        })
    };
    let op = Send { snapshot, base, intermediates: intermediates.is_some(), token, path: fifo.path.clone() };
    let result = access::run(&pool, op);
    release_copier(&fifo.path, &opened, true);
    let copied = copier.join().map_err(|_| CliError::Refused("the copy to stdout panicked".into()))?;
    result?;
    copied.map_err(|e| CliError::Refused(format!("writing the stream to stdout: {e}")))?;
    Ok(())
}

/// `tarn recv POOL/DS [-F] [--progress]`, `tarn recv -A POOL/DS`.
pub fn recv(target: String, force: bool, abort: bool, progress: bool) -> Result<(), CliError> {
    let pool = pool_of(&target).to_string();
    if abort {
        access::run(&pool, Recv { target, force: false, abort: true, path: None })?;
        return Ok(());
    }
    // SAFETY: isatty only inspects the descriptor.
    if unsafe { libc::isatty(libc::STDIN_FILENO) } == 1 {
        return Err(CliError::Usage(
            "the stream comes on stdin: tarn recv POOL/DS < FILE, or … | tarn recv POOL/DS".into(),
        ));
    }
    let fifo = Fifo::new()?;
    let opened = Arc::new(AtomicBool::new(false));
    let copier = {
        let (path, opened) = (fifo.path.clone(), opened.clone());
        std::thread::spawn(move || -> io::Result<u64> {
            // The receive may stop reading (a damaged stream): an EPIPE here, not a signal.
            let _no_sigpipe = NoSigpipe::new();
            let to = OpenOptions::new().write(true).open(&path);
            opened.store(true, Ordering::Release);
            let mut meter = Meter::new(progress, "received", None);
            copy(&mut io::stdin().lock(), &mut to?, &mut meter)
        })
    };
    let op = Recv { target, force, abort: false, path: Some(fifo.path.clone()) };
    let result = access::run(&pool, op);
    release_copier(&fifo.path, &opened, false);
    // The copy's own error (EPIPE once the receive stopped reading) says less than the
    // receive's, which comes first.
    let copied = copier.join();
    for name in result? {
        println!("received {name}");
    }
    if let Ok(Err(e)) = copied {
        return Err(CliError::Refused(format!("reading the stream from stdin: {e}")));
    }
    Ok(())
}

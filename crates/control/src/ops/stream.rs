//! `tarn send` and `tarn recv` on a held pool: the stream goes through a FIFO the
//! command line made (its path in the command), so its bytes never pass through the
//! control socket and a daemon holding the pool sends and receives like the command
//! itself would on a closed pool.
//!
//! Owns: opening the FIFO for the pool's side of the copy.
//! Promises: the stream is written (read) whole or the command fails with the engine's
//! error; a receive never mounts what it received, and is refused into a mounted
//! dataset (its head is replaced at the stream's end).
//! Must never: open a path that is not absolute (a daemon's working directory is `/`).

use std::fs::{File, OpenOptions};
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tarn_send::{SendBase, SendRecv, SendSummary};

use crate::error::OpError;
use crate::op::{Held, Op};

/// Bytes buffered between the engine and the FIFO.
const BUFFER: usize = 1 << 20;

/// `tarn send POOL/DS@SNAP [-i|-I BASE]` or `tarn send -t TOKEN`.
#[derive(Serialize, Deserialize)]
pub struct Send {
    /// `POOL/DS@SNAP` (none with a token).
    pub snapshot: Option<String>,
    pub base: Option<String>,
    /// `-I`: the snapshots between the base and `snapshot` too.
    pub intermediates: bool,
    pub token: Option<String>,
    /// The FIFO (or file) the stream is written to.
    pub path: PathBuf,
}

/// What a send wrote.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct SendReport {
    pub streams: u32,
    pub bytes: u64,
    pub blocks: u64,
    pub logical: u64,
}

impl From<SendSummary> for SendReport {
    fn from(s: SendSummary) -> Self {
        SendReport { streams: s.streams, bytes: s.bytes, blocks: s.blocks, logical: s.logical }
    }
}

fn absolute(path: &Path) -> Result<(), OpError> {
    if !path.is_absolute() {
        return Err(OpError::Refused(format!("{}: the stream's path must be absolute", path.display())));
    }
    Ok(())
}

impl Send {
    fn base(&self) -> SendBase<'_> {
        match (&self.base, self.intermediates) {
            (None, _) => SendBase::Full,
            (Some(b), false) => SendBase::Incremental(b),
            (Some(b), true) => SendBase::Intermediates(b),
        }
    }
}

impl Op for Send {
    const NAME: &'static str = "send";
    type Output = SendReport;
    fn run(self, on: &Held<'_>) -> Result<SendReport, OpError> {
        absolute(&self.path)?;
        let _no_sigpipe = NoSigpipe::new();
        let file = OpenOptions::new().write(true).open(&self.path).map_err(|e| io_refused(&self.path, e))?;
        let mut out = BufWriter::with_capacity(BUFFER, file);
        let mut quiet = |_: u64| {};
        let summary = match (&self.token, &self.snapshot) {
            (Some(t), _) => on.pool.send_resume(t, &mut out, &mut quiet)?,
            (None, Some(s)) => on.pool.send(s, self.base(), &mut out, &mut quiet)?,
            (None, None) => return Err(OpError::Refused("send needs a snapshot or a resume token".into())),
        };
        out.into_inner().map_err(|e| io_refused(&self.path, e.into_error()))?;
        Ok(summary.into())
    }
}

/// The bytes a send would write, about (the stored size of the blocks it sends): what
/// `--progress` counts down from.
#[derive(Serialize, Deserialize)]
pub struct SendSize {
    pub snapshot: Option<String>,
    pub base: Option<String>,
    pub intermediates: bool,
    pub token: Option<String>,
}

impl Op for SendSize {
    const NAME: &'static str = "send.size";
    type Output = u64;
    fn run(self, on: &Held<'_>) -> Result<u64, OpError> {
        let send = Send {
            snapshot: self.snapshot,
            base: self.base,
            intermediates: self.intermediates,
            token: self.token,
            path: PathBuf::new(),
        };
        match (&send.token, &send.snapshot) {
            (Some(t), _) => Ok(on.pool.send_resume_size(t)?),
            (None, Some(s)) => Ok(on.pool.send_size(s, send.base())?),
            (None, None) => Err(OpError::Refused("send needs a snapshot or a resume token".into())),
        }
    }
}

/// `tarn recv POOL/DS [-F]` (the stream from `path`), or `tarn recv -A POOL/DS`.
#[derive(Serialize, Deserialize)]
pub struct Recv {
    pub target: String,
    pub force: bool,
    /// `-A`: drop an interrupted receive instead.
    pub abort: bool,
    pub path: Option<PathBuf>,
}

impl Op for Recv {
    const NAME: &'static str = "recv";
    const CHANGES_POOL: bool = true;
    type Output = Vec<String>;
    fn run(self, on: &Held<'_>) -> Result<Vec<String>, OpError> {
        if self.abort {
            on.pool.abort_receive(&self.target)?;
            return Ok(Vec::new());
        }
        if let Some(at) = on.daemon.and_then(|d| d.mounted(&self.target)) {
            // The swap at the stream's end replaces the dataset's head: the mount's open
            // files would go on writing into the one it dropped.
            return Err(OpError::Refused(format!(
                "cannot receive into '{}': it is mounted at {}; unmount it first (tarn umount {}), receive, then mount it again",
                self.target,
                at.display(),
                self.target
            )));
        }
        let Some(path) = &self.path else {
            return Err(OpError::Refused("recv needs the stream's path".into()));
        };
        absolute(path)?;
        let file = File::open(path).map_err(|e| io_refused(path, e))?;
        let mut input = BufReader::with_capacity(BUFFER, file);
        let summary = on.pool.receive(&self.target, self.force, &mut input, &mut |_| {})?;
        Ok(summary.received)
    }
}

/// SIGPIPE blocked on this thread while it lives: a reader that goes away (the command
/// line killed, `| head`) is an `EPIPE` for the send or receive to report, never a
/// signal that ends a daemon holding a mounted pool. A SIGPIPE raised meanwhile is
/// taken off the thread before the old mask comes back.
pub struct NoSigpipe {
    old: libc::sigset_t,
}

impl NoSigpipe {
    pub fn new() -> NoSigpipe {
        // SAFETY: sigset_t is plain data, filled by sigemptyset/sigaddset; pthread_sigmask
        // changes only this thread's mask.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGPIPE);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            NoSigpipe { old }
        }
    }
}

impl Default for NoSigpipe {
    fn default() -> Self {
        NoSigpipe::new()
    }
}

impl Drop for NoSigpipe {
    fn drop(&mut self) {
        // SAFETY: as in `new`; a zero timeout makes sigtimedwait a poll.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGPIPE);
            let zero = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            while libc::sigtimedwait(&set, std::ptr::null_mut(), &zero) == libc::SIGPIPE {}
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut());
        }
    }
}

fn io_refused(path: &Path, e: std::io::Error) -> OpError {
    OpError::Refused(format!("{}: {e}", path.display()))
}

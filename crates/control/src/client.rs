//! The caller's side of the control socket: reaching the daemon that holds a pool and
//! running commands there.
//!
//! Owns: connecting (and telling "nobody holds the pool" from "someone does, and you may
//! not"), sending a command with the caller's command line, and turning the reply back
//! into the command's output or its error.
//! Promises: [`Client::connect`] answers `None` only when no live daemon listens (no
//! socket, or a stale one whose daemon died: its connect is refused), so the caller may
//! then open the devices itself (the device locks keep that safe); an error reply keeps
//! the daemon's words and exit code.
//! Must never: remove a socket file (only the process that holds the pool's devices may
//! replace it), or retry a command on its own.

use std::io::BufReader;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::error::{ControlError, OpError};
use crate::op::Op;
use crate::peer;
use crate::protocol::{self, Reply, Request, MAX_REPLY, PROTOCOL_VERSION};

/// A connection to the daemon holding a pool.
pub struct Client {
    pool: String,
    path: PathBuf,
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    daemon_pid: u32,
    argv: Vec<String>,
}

impl Client {
    /// Connects to the daemon holding `pool`, if one is alive.
    pub fn connect(pool: &str) -> Result<Option<Client>, ControlError> {
        let path = protocol::socket_path(pool);
        let stream = match protocol::with_short_path(&path, |p| UnixStream::connect(p)) {
            Ok(s) => s,
            Err(e) => {
                return match e.raw_os_error() {
                    // No socket, a stale one (its daemon died), or not a socket at all.
                    Some(libc::ENOENT | libc::ECONNREFUSED | libc::ENOTSOCK) => Ok(None),
                    Some(libc::EACCES | libc::EPERM) => {
                        Err(ControlError::PermissionDenied { pool: pool.to_string(), path, source: e })
                    }
                    _ => Err(ControlError::Io { path, source: e }),
                };
            }
        };
        let io = |source| ControlError::Io { path: path.clone(), source };
        let daemon_pid = peer::of(&stream).map_err(io)?.pid;
        // A daemon killed a moment ago can still have its listening socket open while
        // its last threads exit (the kernel queues our connect); it will never answer.
        if wait_gone(daemon_pid, Duration::ZERO) {
            return Ok(None);
        }
        let reader = BufReader::new(stream.try_clone().map_err(io)?);
        Ok(Some(Client {
            pool: pool.to_string(),
            path,
            reader,
            writer: stream,
            daemon_pid,
            argv: std::env::args().collect(),
        }))
    }

    /// The process id of the daemon at the other end.
    pub fn daemon_pid(&self) -> u32 {
        self.daemon_pid
    }

    /// Runs `op` in the daemon.
    pub fn call<O: Op>(&mut self, op: &O) -> Result<O::Output, OpError> {
        let args = serde_json::to_value(op)
            .map_err(|e| ControlError::Malformed(format!("arguments of '{}': {e}", O::NAME)))?;
        let request = Request { version: PROTOCOL_VERSION, op: O::NAME.to_string(), args, argv: self.argv.clone() };
        // A refusal (not root) may be sent before the request is read, and the socket
        // closed: read what came even if sending failed.
        let sent = protocol::send(&mut self.writer, &request);
        let line = match protocol::receive(&mut self.reader, MAX_REPLY) {
            Ok(Some(line)) => line,
            Ok(None) => return Err(sent.err().map_or_else(|| self.hangup().into(), |e| self.io(e))),
            Err(e) => return Err(self.io(sent.err().unwrap_or(e))),
        };
        let reply: Reply = protocol::decode(&line)?;
        if let Some(err) = reply.error {
            if err.closing {
                return Err(ControlError::Closing { pool: self.pool.clone(), pid: self.daemon_pid }.into());
            }
            return Err(OpError::Remote { message: err.message, exit: err.exit });
        }
        let value = reply.ok.unwrap_or(serde_json::Value::Null);
        serde_json::from_value(value)
            .map_err(|e| ControlError::Malformed(format!("output of '{}': {e}", O::NAME)).into())
    }

    /// Waits up to `timeout` for the daemon process to be gone (it releases the pool's
    /// devices as it exits); true if it is.
    pub fn wait_daemon_gone(&self, timeout: Duration) -> bool {
        wait_gone(self.daemon_pid, timeout)
    }

    fn io(&self, source: std::io::Error) -> OpError {
        if matches!(source.kind(), std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset) {
            return self.hangup().into();
        }
        ControlError::Io { path: self.path.clone(), source }.into()
    }

    fn hangup(&self) -> ControlError {
        ControlError::Hangup {
            pool: self.pool.clone(),
            pid: self.daemon_pid,
            log: protocol::run_dir().join(format!("{}.log", self.pool)),
        }
    }
}

/// True once process `pid` has exited (or is a zombie), within `timeout`.
pub fn wait_gone(pid: u32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        let alive = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.rsplit_once(')').is_some_and(|(_, t)| !t.trim_start().starts_with(['Z', 'X'])));
        if !alive {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

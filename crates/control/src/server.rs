//! The daemon's side of the control socket: `$TARN_RUN_DIR/POOL.sock`, mode 0600, root
//! only, one thread per connection.
//!
//! Owns: the socket file from bind to removal, the peer check, reading requests and
//! writing replies, and handing a finishing command (export, destroy, the last umount)
//! to the daemon with the connection that must hear the outcome.
//! Promises: a peer that is not root (by SO_PEERCRED, whatever the file's mode) gets one
//! error line and nothing else; requests run concurrently, each on its own thread, with
//! nothing of the server locked while a command runs; once [`Server::close`] is called,
//! a new request is answered "closing" (the client then waits for the daemon to exit and
//! runs the command itself) and the socket file is removed; a stale socket file left by
//! a killed daemon is replaced atomically, never while another daemon answers on it.
//! Must never: run a command for a peer it could not identify, or remove a socket file
//! that another daemon bound.

use std::io::BufReader;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::error::{ControlError, OpError};
use crate::op::{Caller, Daemon, Held};
use crate::peer::{self, Peer};
use crate::protocol::{self, Reply, Request, MAX_REQUEST};

/// A running control socket.
pub struct Server {
    shared: Arc<Shared>,
    path: PathBuf,
    /// The inode of the socket file we bound, to remove only ours.
    inode: u64,
}

struct Shared {
    pool: String,
    daemon: Arc<dyn Daemon>,
    closing: AtomicBool,
}

impl Server {
    /// Binds the socket of pool `pool` and serves it on a thread of its own.
    pub fn start(pool: &str, daemon: Arc<dyn Daemon>) -> Result<Server, ControlError> {
        let path = protocol::socket_path(pool);
        let listener = bind(&path)?;
        let inode = std::fs::metadata(&path).map(|m| m.ino()).map_err(|e| bind_error(&path, e.to_string()))?;
        let shared = Arc::new(Shared { pool: pool.to_string(), daemon, closing: AtomicBool::new(false) });
        let accepting = shared.clone();
        std::thread::Builder::new()
            .name("tarn-control".into())
            .spawn(move || accept_loop(&listener, &accepting))
            .map_err(|e| bind_error(&path, e.to_string()))?;
        Ok(Server { shared, path, inode })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stops serving: later requests are answered "closing", and the socket file is
    /// removed (if it is still ours). Requests already running go on to their end.
    pub fn close(&self) {
        self.shared.closing.store(true, Ordering::SeqCst);
        remove_if_ours(&self.path, self.inode);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.close();
    }
}

fn bind_error(path: &Path, detail: String) -> ControlError {
    ControlError::Bind { path: path.to_path_buf(), detail }
}

/// Binds beside `path`, restricts the socket to root, then renames it into place: a
/// client never finds a half-made socket, and a stale one is replaced in one step.
fn bind(path: &Path) -> Result<UnixListener, ControlError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| bind_error(dir, e.to_string()))?;
    }
    if protocol::with_short_path(path, |p| UnixStream::connect(p)).is_ok() {
        return Err(bind_error(
            path,
            "another tarn daemon answers on it (a pool of the same name held with the same run directory)".into(),
        ));
    }
    let tmp = path.with_extension(format!("sock.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let listener =
        protocol::with_short_path(&tmp, |p| UnixListener::bind(p)).map_err(|e| bind_error(&tmp, e.to_string()))?;
    let owner_only = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
        .and_then(|_| std::fs::rename(&tmp, path));
    if let Err(e) = owner_only {
        let _ = std::fs::remove_file(&tmp);
        return Err(bind_error(path, e.to_string()));
    }
    Ok(listener)
}

/// Removes the socket file of `pool` if no daemon answers on it (its daemon was killed).
/// Only the process that has just taken the pool's devices may call this: no live
/// daemon can hold the pool then, so the file cannot be one being bound.
pub fn remove_stale(pool: &str) {
    let path = protocol::socket_path(pool);
    let refused = protocol::with_short_path(&path, |p| UnixStream::connect(p)).err().and_then(|e| e.raw_os_error())
        == Some(libc::ECONNREFUSED);
    if refused {
        let _ = std::fs::remove_file(&path);
    }
}

fn remove_if_ours(path: &Path, inode: u64) {
    if std::fs::metadata(path).is_ok_and(|m| m.ino() == inode) {
        let _ = std::fs::remove_file(path);
    }
}

fn accept_loop(listener: &UnixListener, shared: &Arc<Shared>) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else {
            // Out of descriptors or memory: let running commands finish some first.
            std::thread::sleep(std::time::Duration::from_millis(50));
            continue;
        };
        let shared = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("tarn-control-conn".into())
            .spawn(move || serve_connection(&shared, stream));
        if let Err(e) = spawned {
            eprintln!("tarn mount: cannot serve a control connection: {e}");
        }
    }
}

fn serve_connection(shared: &Shared, stream: UnixStream) {
    let Ok(peer) = peer::of(&stream) else { return };
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(read_half);
    let mut writer = Some(stream);
    if peer.uid != 0 {
        let e = ControlError::NotRoot { pool: shared.pool.clone(), uid: peer.uid };
        if let Some(w) = writer.as_mut() {
            let _ = protocol::send(w, &reply_of_error(&e.into()));
        }
        return;
    }
    while let Ok(Some(line)) = protocol::receive(&mut reader, MAX_REQUEST) {
        let Some(reply) = handle(shared, peer, &line, &mut writer) else {
            return; // handed over to the daemon, which replies when it is done
        };
        let sent = writer.as_mut().map(|w| protocol::send(w, &reply));
        if !matches!(sent, Some(Ok(()))) {
            return;
        }
    }
}

/// Runs one request; its reply, or `None` if the command finishes the pool's open life,
/// in which case the connection (`writer`) went to the daemon, which replies later.
fn handle(shared: &Shared, peer: Peer, line: &str, writer: &mut Option<UnixStream>) -> Option<Reply> {
    let request: Request = match protocol::decode(line) {
        Ok(r) => r,
        Err(e) => return Some(reply_of_error(&e.into())),
    };
    let closing =
        || Some(reply_of_error(&ControlError::Closing { pool: shared.pool.clone(), pid: shared.daemon.pid() }.into()));
    if shared.closing.load(Ordering::SeqCst) {
        return closing();
    }
    let Some(pool) = shared.daemon.pool() else {
        return closing();
    };
    let caller = Caller { uid: peer.uid, pid: peer.pid, argv: request.argv };
    let held = Held::new(&pool, Some(shared.daemon.as_ref()), &caller);
    let result = crate::ops::dispatch(&request.op, request.args, &held);
    let (how, history) = held.take_finish();
    let value = match result {
        Err(e) => return Some(reply_of_error(&e)),
        Ok(value) if how.is_stay() => return Some(Reply::ok(value)),
        Ok(value) => value,
    };
    let Some(mut w) = writer.take() else {
        return Some(Reply::ok(value));
    };
    let reply = Box::new(move |outcome: Result<(), OpError>| {
        let reply = match outcome {
            Ok(()) => Reply::ok(value),
            Err(e) => reply_of_error(&e),
        };
        let _ = protocol::send(&mut w, &reply);
    });
    // While `pool` is still held here: the daemon's end waits for every holder, so it
    // sees this finish before it closes the pool.
    shared.daemon.finish(how, history, reply);
    drop(pool);
    None
}

fn reply_of_error(e: &OpError) -> Reply {
    Reply::error(e.to_string(), e.exit_code(), e.is_closing())
}

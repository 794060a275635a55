//! control — one owner, many clients: the control socket through which the process that
//! holds a pool (the `tarn mount` daemon) serves every command for it, so a pool under a
//! running database is managed without unmounting it (ZFS's `zpool`/`zfs` on a live pool).
//!
//! Layer: between `pool` and `send` (below) and `fuse` (above: the daemon starts the [`Server`] and
//! implements [`Daemon`]); `cli` uses the [`Client`] and runs the same commands in its
//! own process when no daemon holds the pool.
//! Owns: the commands on a held pool ([`ops`], each an [`Op`]), the wire protocol
//! ([`protocol`]: versioned JSON lines), the socket server and client, the peer check,
//! and the history entry of a command.
//! Promises: a command's output and errors are the same wherever it runs (one `run`
//! serves both sides); the socket serves root only, checked by SO_PEERCRED; a daemon
//! that died leaves nothing that stops the next command (its socket is refused and
//! replaced by the next owner).
//! Must never: open a pool's devices itself (the owner does), or hold a lock of its own
//! while a command runs.

pub mod client;
pub mod error;
pub mod op;
pub mod ops;
pub mod peer;
pub mod protocol;
pub mod server;

pub use client::Client;
pub use error::{ControlError, OpError};
pub use op::{execute, finish_local, Caller, Daemon, Finish, Held, Op, Reply};
pub use server::Server;

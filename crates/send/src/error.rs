//! Why a send or a receive failed.
//!
//! Owns: [`SendError`], every way a stream could not be written or received, beside the
//! pool's own errors (passed through unchanged).
//!
//! Promises: each message names the snapshot or target and, where there is one, the fix
//! (the resume command with its token, the snapshots `-F` would destroy).
//!
//! Must never: carry a decision in a string: an interrupted receive (resumable) and a
//! damaged stream (to be sent again) are two variants.
use tarn_dataset::FsError;
use tarn_pool::PoolError;

use crate::stream::StreamError;

#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error(transparent)]
    Pool(#[from] PoolError),
    #[error("cannot send {snapshot}: {why}")]
    SendRefused { snapshot: String, why: String },
    #[error("cannot send: object {object} at byte {offset}: {why}")]
    SendRead { object: u64, offset: u64, why: String },
    #[error("writing the stream: {0}")]
    StreamWrite(#[source] std::io::Error),
    #[error("cannot receive into '{target}': {why}")]
    RecvRefused { target: String, why: String },
    #[error(
        "receive into '{target}' interrupted: {source}; what arrived is kept — resume with `tarn send -t {token} | tarn recv {target}`"
    )]
    RecvInterrupted {
        target: String,
        #[source]
        source: StreamError,
        token: String,
    },
    #[error("bad resume token: {0}")]
    BadToken(String),
    #[error("cannot receive into '{target}': {source}; '{target}' is unchanged")]
    Stream {
        target: String,
        #[source]
        source: StreamError,
    },
}

impl From<FsError> for SendError {
    fn from(e: FsError) -> Self {
        SendError::Pool(PoolError::Fs(e))
    }
}

//! send — the send stream (ZFS's dmu_send/dmu_recv): a snapshot written as a stream of
//! records, and a stream received into a dataset of this or another pool. A layer above
//! `pool`, named for the stream it owns (`tarn send`'s, its format and both of its ends),
//! reaching the pool only through its narrow replication API (`SnapshotRef`,
//! `Pool::create_receiving`, `Pool::finish_receive`…).
//!
//! Owns: the stream's format (`stream`, docs/FORMAT.md §17), what a snapshot (and a base)
//! give as records (`send`), and applying a stream's records and the resume token
//! (`recv`); `error`.
//!
//! Promises: a received snapshot equals the sender's; a damaged, cut or newer stream is
//! refused with a typed error and the target as it was; an interrupted receive resumes.
//!
//! Must never: change a pool while sending, or make a received tree visible before its
//! stream's END verified.

mod error;
mod recv;
mod send;
mod stream;

use std::io::{Read, Write};

use tarn_pool::Pool;

pub use error::SendError;
pub use recv::{ReceiveSummary, ResumeToken};
pub use send::{SendBase, SendSummary};
pub use stream::{StreamError, STREAM_MAGIC, STREAM_VERSION};

/// Send and receive as methods of a pool (`use tarn_send::SendRecv`).
pub trait SendRecv {
    /// `tarn send DS@SNAP [-i|-I BASE]`: the stream(s) to `out`; `progress` is told the
    /// bytes written so far now and then.
    fn send(
        &self,
        snapshot: &str,
        base: SendBase<'_>,
        out: &mut dyn Write,
        progress: &mut dyn FnMut(u64),
    ) -> Result<SendSummary, SendError>;
    /// About how many bytes `send` would write.
    fn send_size(&self, snapshot: &str, base: SendBase<'_>) -> Result<u64, SendError>;
    /// `tarn send -t TOKEN`: the rest of an interrupted stream.
    fn send_resume(
        &self,
        token: &str,
        out: &mut dyn Write,
        progress: &mut dyn FnMut(u64),
    ) -> Result<SendSummary, SendError>;
    /// As `send_size`, for `send -t TOKEN`.
    fn send_resume_size(&self, token: &str) -> Result<u64, SendError>;
    /// `tarn recv TARGET [-F]`: every stream on `input` into `TARGET`.
    fn receive(
        &self,
        target: &str,
        force: bool,
        input: &mut dyn Read,
        progress: &mut dyn FnMut(u64),
    ) -> Result<ReceiveSummary, SendError>;
    /// `tarn recv -A TARGET`: drops an interrupted receive.
    fn abort_receive(&self, target: &str) -> Result<(), SendError>;
    /// The resume token of an interrupted receive into `TARGET`, if there is one.
    fn resume_token(&self, target: &str) -> Option<String>;
}

impl SendRecv for Pool {
    fn send(
        &self,
        snapshot: &str,
        base: SendBase<'_>,
        out: &mut dyn Write,
        progress: &mut dyn FnMut(u64),
    ) -> Result<SendSummary, SendError> {
        send::send(self, snapshot, base, out, progress)
    }

    fn send_size(&self, snapshot: &str, base: SendBase<'_>) -> Result<u64, SendError> {
        send::send_size(self, snapshot, base)
    }

    fn send_resume(
        &self,
        token: &str,
        out: &mut dyn Write,
        progress: &mut dyn FnMut(u64),
    ) -> Result<SendSummary, SendError> {
        send::send_resume(self, token, out, progress)
    }

    fn send_resume_size(&self, token: &str) -> Result<u64, SendError> {
        send::send_resume_size(self, token)
    }

    fn receive(
        &self,
        target: &str,
        force: bool,
        input: &mut dyn Read,
        progress: &mut dyn FnMut(u64),
    ) -> Result<ReceiveSummary, SendError> {
        recv::receive(self, target, force, input, progress)
    }

    fn abort_receive(&self, target: &str) -> Result<(), SendError> {
        recv::abort_receive(self, target)
    }

    fn resume_token(&self, target: &str) -> Option<String> {
        recv::resume_token(self, target)
    }
}

//! Every way a `tarn` command can fail, as one typed error, and its exit code.
//!
//! Owns: the split between a malformed command line (exit 2, as clap's own rejections)
//! and a command that was understood but failed (exit 1), and the one line shown.
//! Promises: the engine's typed errors pass through unchanged (their words name the
//! object and the fix); what is shown is always exactly one line.
//! Must never: turn a failure into exit 0, or show a Rust debug dump.

use tarn_fuse::MountError;
use tarn_pool::PoolError;

use crate::cache::CacheError;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The command line is malformed in a way clap's grammar cannot see (an assignment
    /// without `=`, a mirror of one device, an unparsable size).
    #[error("{0}")]
    Usage(String),
    /// The command was understood, and refused for a reason the CLI found itself.
    #[error("{0}")]
    Refused(String),
    /// The pool is held by a process that cannot serve the command (a scrub process, a
    /// daemon that does not answer): busy, not unavailable.
    #[error("{0}")]
    Busy(String),
    #[error(transparent)]
    Pool(Box<PoolError>),
    #[error(transparent)]
    Mount(Box<MountError>),
    #[error(transparent)]
    Cache(#[from] CacheError),
    /// A path on the host (a file being copied in, a mountpoint, the run directory).
    #[error("{path}: {source}")]
    Host { path: String, source: std::io::Error },
    #[error("cannot encode the JSON output: {0}")]
    Json(#[from] serde_json::Error),
    /// A pool command, run here or by the daemon that holds the pool (same words and
    /// exit code either way).
    #[error(transparent)]
    Op(Box<tarn_control::OpError>),
}

// The engine's errors are boxed: they are large, and a command's Result is passed up
// through every call (clippy::result_large_err).
impl From<PoolError> for CliError {
    fn from(e: PoolError) -> CliError {
        CliError::Pool(Box::new(e))
    }
}

impl From<MountError> for CliError {
    fn from(e: MountError) -> CliError {
        CliError::Mount(Box::new(e))
    }
}

impl From<tarn_control::OpError> for CliError {
    fn from(e: tarn_control::OpError) -> CliError {
        CliError::Op(Box::new(e))
    }
}

impl CliError {
    /// 2 for a malformed command line (the README's promise), 1 for a failed command.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) => 2,
            CliError::Op(e) => e.exit_code(),
            _ => 1,
        }
    }

    /// The message on one line: a line break inside an engine message must not break
    /// the one-line promise scripts rely on.
    pub fn one_line(&self) -> String {
        let text = self.to_string();
        let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        lines.join("; ")
    }

    pub fn host(path: impl std::fmt::Display, source: std::io::Error) -> CliError {
        CliError::Host { path: path.to_string(), source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_malformed_command_line_exits_2_and_a_failed_command_1() {
        assert_eq!(CliError::Usage("'x' is not PROP=VALUE".into()).exit_code(), 2);
        assert_eq!(CliError::Refused("pool 'tank' holds 1G of data".into()).exit_code(), 1);
        assert_eq!(CliError::from(PoolError::NoSuchDataset("tank/x".into())).exit_code(), 1);
    }

    #[test]
    fn a_message_with_line_breaks_is_shown_on_one_line() {
        let e = CliError::Refused("first part\n  second part\n".into());
        assert_eq!(e.one_line(), "first part; second part");
    }
}

//! Why a hold or a wait fails: the engine is suspended after a failed commit (and why),
//! or closing.
//!
//! Owns: `SyncFailure` (kept and cloned to every caller) and `TxgError`.
//!
//! Promises: the target's own error stays reachable as the source, for callers that
//! downcast.
//!
//! Must never: lose the first failure's reason to a later one.
use std::sync::Arc;

/// Why the engine stopped committing. Cloned to every caller that finds the pool
/// suspended; the target's own error is kept as the source, for callers that downcast.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SyncFailure {
    /// The target could not write or commit txg `txg` (an I/O error, no space for the
    /// pool's root block…).
    #[error("txg {txg}: {source}")]
    Target {
        txg: u64,
        #[source]
        source: Arc<dyn std::error::Error + Send + Sync>,
    },
    /// The target or the engine panicked: a bug, caught so that waiters see an error
    /// instead of waiting forever.
    #[error("internal error in the txg sync (txg {txg}): {message}")]
    Panicked { txg: u64, message: String },
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum TxgError {
    #[error("pool is suspended after a failed commit: {0}; export and re-import it (nothing committed before the failure is lost)")]
    Suspended(SyncFailure),
    #[error("pool is closing")]
    Closing,
}

//! Typed errors of the device layer.
//!
//! Owns: every way opening, reading, writing or recognising a device can fail.
//!
//! Promises: each message names the device (path, or vdev index and offset) and, where
//! there is one, the fix; an unknown format version is its own variant, so callers
//! decide by type (a newer tarn's device is never overwritten unasked).
//!
//! Must never: be decided on by its text.
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum VdevError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: device is too small ({size} bytes); a tarn device needs at least {min} bytes")]
    TooSmall { path: PathBuf, size: u64, min: u64 },
    #[error("{path}: not a tarn device (no valid label found)")]
    NotTarn { path: PathBuf },
    #[error(
        "{path}: label format version {found} is not supported (this tarn reads version {supported}); upgrade tarn"
    )]
    UnsupportedVersion { path: PathBuf, found: u32, supported: u32 },
    #[error(
        "{path}: uberblock format version {found} is not supported (this tarn reads version {supported}); upgrade tarn"
    )]
    UnsupportedUberblockVersion { path: PathBuf, found: u32, supported: u32 },
    #[error("checksum mismatch at vdev {top} offset {offset} (all copies bad)")]
    Checksum { top: usize, offset: u64 },
    #[error("vdev {top}: no readable copy at offset {offset}: {detail}")]
    NoCopy { top: usize, offset: u64, detail: String },
    #[error("vdev {top}: write failed on every side: {detail}")]
    WriteFailed { top: usize, detail: String },
    #[error("{path}: device is in use by another tarn process (a mount or another command); stop it or wait")]
    Busy { path: PathBuf },
    #[error("{path}: {source}; the label is damaged or was not written by tarn")]
    BadLabel { path: PathBuf, source: Box<crate::label::BadField> },
    #[error("{path}: block device is in use (held by another tarn process, mounted, or claimed by another driver such as md, dm or bcache); stop its holder or wait")]
    BlockDeviceBusy { path: PathBuf },
    #[error("{path}: no such device; give --size to create an image file")]
    NoSuchDevice { path: PathBuf },
    #[error("a pool has at most {max} top-level vdevs (removed log devices count, as holes)")]
    TooManyVdevs { max: usize },
}

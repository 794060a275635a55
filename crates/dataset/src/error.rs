//! The dataset's error: what a POSIX caller is told, with its errno.
//!
//! Owns: `FsError` and how lower errors map onto it (no space stays `NoSpace`, a missing
//! object is `NotFound`, anything the disk did is `Io` with its typed cause).
//!
//! Promises: every error names one errno (`FsError::errno`); the cause of an I/O error is
//! kept as a typed source, never flattened into text.
//!
//! Must never: turn an I/O error into success, or decide anything by matching text.
use tarn_objects::ObjError;
use tarn_txg::TxgError;
use tarn_zio::ZioError;

use crate::NAME_MAX;

#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("no such file or directory")]
    NotFound,
    #[error("file exists")]
    Exists,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("directory not empty")]
    NotEmpty,
    #[error("file name too long (limit {NAME_MAX} bytes)")]
    NameTooLong,
    /// A request POSIX refuses with EINVAL; the text says which rule it broke.
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("no space left in pool")]
    NoSpace,
    /// A snapshot's contents: they never change.
    #[error("read-only file system (a snapshot)")]
    ReadOnly,
    #[error("I/O error: {0}")]
    Io(#[source] ObjError),
    #[error(transparent)]
    Txg(#[from] TxgError),
}

impl FsError {
    pub fn errno(&self) -> i32 {
        match self {
            FsError::NotFound => libc::ENOENT,
            FsError::Exists => libc::EEXIST,
            FsError::NotDir => libc::ENOTDIR,
            FsError::IsDir => libc::EISDIR,
            FsError::NotEmpty => libc::ENOTEMPTY,
            FsError::NameTooLong => libc::ENAMETOOLONG,
            FsError::Invalid(_) => libc::EINVAL,
            FsError::NoSpace => libc::ENOSPC,
            FsError::ReadOnly => libc::EROFS,
            FsError::Io(_) | FsError::Txg(_) => libc::EIO,
        }
    }
}

impl From<ZioError> for FsError {
    fn from(e: ZioError) -> Self {
        match e {
            ZioError::NoSpace(_) => FsError::NoSpace,
            other => FsError::Io(ObjError::Zio(other)),
        }
    }
}

impl From<ObjError> for FsError {
    fn from(e: ObjError) -> Self {
        match e {
            ObjError::NoObject(_) => FsError::NotFound,
            ObjError::NotDir => FsError::NotDir,
            ObjError::Zio(z) => z.into(),
            corrupt @ (ObjError::Dnode(_) | ObjError::Dir(_)) => FsError::Io(corrupt),
            refused @ (ObjError::InUse(_) | ObjError::RecordSize { .. }) => FsError::Invalid(refused.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lower_errors_map_to_the_errno_a_caller_expects() {
        assert_eq!(FsError::from(ZioError::NoSpace(4096)).errno(), libc::ENOSPC);
        assert_eq!(FsError::from(ObjError::NoObject(7)).errno(), libc::ENOENT);
        assert_eq!(FsError::from(ObjError::NotDir).errno(), libc::ENOTDIR);
        let bad = FsError::from(ZioError::Checksum { what: "data", vdev: 0, offset: 4096 });
        assert_eq!(bad.errno(), libc::EIO);
        assert!(matches!(bad, FsError::Io(ObjError::Zio(ZioError::Checksum { .. }))), "the cause stays typed");
    }
}

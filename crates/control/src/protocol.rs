//! The wire protocol of the control socket: one JSON object per line each way.
//!
//! A request: `{"version":1,"op":"pool.status","args":{…},"argv":["tarn","pool","status"]}`.
//! A reply: `{"version":1,"ok":<the command's output>}` or
//! `{"version":1,"error":{"message":"…","exit":1,"closing":false}}`.
//! A connection may carry several requests, one after the other.
//!
//! Owns: the envelope, its version, and where a pool's socket is (`$TARN_RUN_DIR`, default
//! `/run/tarn`, file `POOL.sock`).
//! Promises: the version is read and checked before anything else in a message, so a
//! peer of another version is refused with both numbers, never misread; a message is
//! one line (serde_json escapes newlines inside strings).
//! Must never: accept an unbounded line (a request is at most `MAX_REQUEST` bytes).

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::ControlError;

/// Version of the envelope and of every command's arguments and output.
pub const PROTOCOL_VERSION: u32 = 1;

/// The longest request line a daemon reads (a `put` of many paths fits easily).
pub const MAX_REQUEST: u64 = 4 << 20;
/// The longest reply line a client reads (a 1 MiB chunk of `cat`, base64, fits).
pub const MAX_REPLY: u64 = 64 << 20;

#[derive(Debug, Serialize, Deserialize)]
pub struct Request {
    pub version: u32,
    pub op: String,
    #[serde(default)]
    pub args: Value,
    /// The command line as the user typed it, for the pool's history.
    #[serde(default)]
    pub argv: Vec<String>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Reply {
    pub version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<WireError>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct WireError {
    pub message: String,
    pub exit: u8,
    /// The daemon is closing the pool: the client may wait and run the command itself.
    #[serde(default)]
    pub closing: bool,
}

impl Reply {
    pub fn ok(value: Value) -> Reply {
        Reply { version: PROTOCOL_VERSION, ok: Some(value), error: None }
    }

    pub fn error(message: String, exit: u8, closing: bool) -> Reply {
        Reply { version: PROTOCOL_VERSION, ok: None, error: Some(WireError { message, exit, closing }) }
    }
}

/// Checks the version of a message before its other fields are trusted.
pub fn check_version(line: &str) -> Result<(), ControlError> {
    #[derive(Deserialize)]
    struct VersionOnly {
        version: u32,
    }
    let v: VersionOnly = serde_json::from_str(line).map_err(|e| ControlError::Malformed(e.to_string()))?;
    if v.version != PROTOCOL_VERSION {
        return Err(ControlError::UnsupportedVersion { found: v.version, supported: PROTOCOL_VERSION });
    }
    Ok(())
}

/// Parses one message of type `T` after checking its version.
pub fn decode<T: serde::de::DeserializeOwned>(line: &str) -> Result<T, ControlError> {
    check_version(line)?;
    serde_json::from_str(line).map_err(|e| ControlError::Malformed(e.to_string()))
}

/// Writes `msg` as one line.
pub fn send(out: &mut impl Write, msg: &impl Serialize) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
    line.push(b'\n');
    out.write_all(&line)?;
    out.flush()
}

/// Reads one line of at most `max` bytes; `None` at end of stream.
pub fn receive(input: &mut impl BufRead, max: u64) -> std::io::Result<Option<String>> {
    let mut line = String::new();
    let n = std::io::Read::take(&mut *input, max).read_line(&mut line)?;
    if n == 0 {
        return Ok(None);
    }
    if !line.ends_with('\n') {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("control message longer than {max} bytes or cut short"),
        ));
    }
    Ok(Some(line))
}

/// The run directory: `$TARN_RUN_DIR`, default `/run/tarn` (mount records, sockets, logs).
pub fn run_dir() -> PathBuf {
    std::env::var_os("TARN_RUN_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/run/tarn"))
}

/// Where the daemon holding `pool` listens.
pub fn socket_path(pool: &str) -> PathBuf {
    run_dir().join(socket_name(pool))
}

/// `POOL.sock`; a pool name too long for a socket address (sun_path holds 108 bytes,
/// and a long run directory is reached through /proc/self/fd, see `sockaddr`) gets a
/// stable hashed name instead.
fn socket_name(pool: &str) -> String {
    if pool.len() <= 64 {
        return format!("{pool}.sock");
    }
    // FNV-1a: stable across builds, unlike std's hasher.
    let hash =
        pool.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3));
    let head: String = pool.chars().take(32).collect();
    format!("{head}-{hash:016x}.sock")
}

/// Calls `f` with an address for `path` short enough for a unix socket: the path itself,
/// or, for a long one, `/proc/self/fd/N/NAME` through an open handle on its directory.
pub fn with_short_path<T>(path: &Path, f: impl FnOnce(&Path) -> std::io::Result<T>) -> std::io::Result<T> {
    const SUN_PATH_MAX: usize = 107;
    if path.as_os_str().len() <= SUN_PATH_MAX {
        return f(path);
    }
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return f(path);
    };
    use std::os::fd::AsRawFd;
    let handle = std::fs::File::open(dir)?;
    let short = Path::new("/proc/self/fd").join(handle.as_raw_fd().to_string()).join(name);
    f(&short)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_version_is_refused_with_both_numbers() {
        let line = r#"{"version":99,"op":"pool.status","args":{}}"#;
        let err = decode::<Request>(line).unwrap_err().to_string();
        assert!(err.contains("version 99") && err.contains("speaks 1"), "{err}");
        let ok = r#"{"version":1,"op":"pool.status"}"#;
        assert_eq!(decode::<Request>(ok).unwrap().op, "pool.status");
        let err = decode::<Request>("not json").unwrap_err().to_string();
        assert!(err.contains("malformed"), "{err}");
    }

    #[test]
    fn a_long_pool_name_gets_a_short_stable_socket_name() {
        let long = "p".repeat(150);
        let a = socket_name(&long);
        assert!(a.len() < 60, "{a}");
        assert_eq!(a, socket_name(&long), "stable");
        assert_ne!(a, socket_name(&"p".repeat(151)));
        assert_eq!(socket_name("tank"), "tank.sock");
    }

    #[test]
    fn a_socket_in_a_directory_too_deep_for_sun_path_is_reached_all_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("d".repeat(60)).join("e".repeat(60));
        std::fs::create_dir_all(&deep).unwrap();
        let path = deep.join("tank.sock");
        assert!(path.as_os_str().len() > 108);
        let listener = with_short_path(&path, |p| std::os::unix::net::UnixListener::bind(p)).unwrap();
        assert!(path.exists(), "bound where it was asked");
        let mut client = with_short_path(&path, |p| std::os::unix::net::UnixStream::connect(p)).unwrap();
        let (mut served, _) = listener.accept().unwrap();
        send(&mut client, &Reply::ok(Value::from(7))).unwrap();
        let mut input = std::io::BufReader::new(&mut served);
        let line = receive(&mut input, 100).unwrap().unwrap();
        assert_eq!(decode::<Reply>(&line).unwrap().ok, Some(Value::from(7)));
    }

    #[test]
    fn a_line_too_long_is_an_error_not_a_truncated_message() {
        let mut input = std::io::Cursor::new(b"{\"version\":1}\n".to_vec());
        assert!(receive(&mut input, 8).is_err());
        let mut input = std::io::Cursor::new(b"{\"version\":1}\n".to_vec());
        assert_eq!(receive(&mut input, 100).unwrap().unwrap(), "{\"version\":1}\n");
        assert!(receive(&mut input, 100).unwrap().is_none());
    }
}

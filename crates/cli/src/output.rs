//! How results are shown: human by default (aligned columns, sizes like `1.5G`), `-H`
//! for scripts (no header, tab-separated), `-p` for exact bytes, `--json` for all of it.
//!
//! Owns: the meaning of those flags (the column layout itself is `table.rs`'s), and how
//! times and durations read (`zpool status`'s words: `Sun Jul 25 16:07:49 2021`,
//! `00:11:42`).
//! Promises: `-p` shows every size as a whole number of bytes; `--json` prints one
//! pretty-printed JSON document on stdout.
//! Must never: print a partial document: JSON is encoded whole before anything is
//! written.

use serde::Serialize;
use tarn_dataset::props::format_size;

use crate::args::Output;
use crate::error::CliError;

impl Output {
    /// A size as this output wants it: exact bytes with `-p`, else human (`1.5G`).
    pub fn size(&self, bytes: u64) -> String {
        if self.parsable {
            bytes.to_string()
        } else {
            format_size(bytes)
        }
    }
}

/// A Unix time in local time, as `zpool status` shows it: `Sun Jul 25 16:07:49 2021`.
pub fn format_time(unix_secs: u64) -> String {
    let t = unix_secs as libc::time_t;
    // SAFETY: `tm` is plain data filled by localtime_r; strftime writes at most
    // `buf.len()` bytes and returns how many it wrote.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            return unix_secs.to_string();
        }
        let mut buf = [0u8; 64];
        let n = libc::strftime(buf.as_mut_ptr().cast(), buf.len(), c"%a %b %e %H:%M:%S %Y".as_ptr(), &tm);
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }
}

/// A duration as `HH:MM:SS`, with whole days before it (`1 days 02:00:00`), as zpool.
pub fn format_duration(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    let hms = format!("{:02}:{:02}:{:02}", s / 3600 % 24, s / 60 % 60, s % 60);
    match s / 86400 {
        0 => hms,
        days => format!("{days} days {hms}"),
    }
}

/// Prints `value` as one pretty-printed JSON document.
pub fn print_json<T: Serialize + ?Sized>(value: &T) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value)?;
    println!("{text}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_zpool_shows_them() {
        assert_eq!(format_duration(0.4), "00:00:00");
        assert_eq!(format_duration(3725.0), "01:02:05");
        assert_eq!(format_duration(90000.0), "1 days 01:00:00");
        let when = format_time(1_700_000_000);
        assert!(when.ends_with("2023"), "{when}");
        assert_eq!(when.split_whitespace().count(), 5, "{when}");
    }

    #[test]
    fn sizes_are_exact_with_p_and_human_without() {
        let human = Output { scripted: false, parsable: false, json: false };
        let exact = Output { parsable: true, ..human };
        assert_eq!(exact.size(1536 << 20), (1536u64 << 20).to_string());
        assert_eq!(human.size(1536 << 20), format_size(1536 << 20));
        assert_ne!(human.size(1536 << 20), exact.size(1536 << 20));
    }
}

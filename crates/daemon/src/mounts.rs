//! Unmounting, and the kernel's table of mount points as seen from this process.
//!
//! Owns: the unmount policy shared by the daemons and the decoding of
//! /proc/self/mountinfo. Promises: [`unmount_or_detach`] fails no I/O in flight: a busy
//! mount is detached lazily (MNT_DETACH), so it ends when its last user leaves.
//! Must never: force an unmount (MNT_FORCE), which would fail the users' I/O.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// umount2(path, flags): Ok, or the errno.
pub fn umount(path: &Path, flags: i32) -> Result<(), io::Error> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: valid NUL-terminated path.
    if unsafe { libc::umount2(c.as_ptr(), flags) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Unmounts; a busy mount (a process or a loop device still using it) is detached
/// lazily so the kernel ends it once its last user leaves. Any other failure (not
/// mounted, already gone) leaves nothing to do.
pub fn unmount_or_detach(mountpoint: &Path) {
    if let Err(e) = umount(mountpoint, 0) {
        if e.raw_os_error() == Some(libc::EBUSY) {
            let _ = umount(mountpoint, libc::MNT_DETACH);
        }
    }
}

/// True if `abs` (absolute and canonical) is a mount point listed in
/// /proc/self/mountinfo. An unreadable table lists nothing.
pub fn is_listed(abs: &Path) -> bool {
    let wanted = abs.to_string_lossy();
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines().filter_map(|l| l.split(' ').nth(4)).any(|m| unescape(m) == wanted)
}

/// Decodes a mountinfo path field: the kernel escapes space, tab, newline and
/// backslash as octal (`\040`); anything else stands as it is.
pub fn unescape(field: &str) -> String {
    let mut out = Vec::with_capacity(field.len());
    let b = field.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let code =
            (b[i] == b'\\').then(|| field.get(i + 1..i + 4).and_then(|o| u8::from_str_radix(o, 8).ok())).flatten();
        match code {
            Some(byte) => {
                out.push(byte);
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    // Bytes of a non-UTF-8 path cannot equal a Path's lossy string anyway.
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_decoded() {
        assert_eq!(unescape("/mnt/a\\040b"), "/mnt/a b");
        assert_eq!(unescape("/mnt/tab\\011and\\134"), "/mnt/tab\tand\\");
        assert_eq!(unescape("/plain"), "/plain");
        assert_eq!(unescape("/odd\\x"), "/odd\\x", "not an escape: kept");
    }

    #[test]
    fn proc_is_listed_and_a_plain_directory_is_not() {
        assert!(is_listed(Path::new("/proc")));
        let dir = std::env::temp_dir().join(format!("tarn-daemon-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let listed = is_listed(&dir);
        let _ = std::fs::remove_dir(&dir);
        assert!(!listed);
    }
}

//! Who is at the other end of the socket, and the names the history shows.
//!
//! Owns: reading a unix socket peer's credentials (SO_PEERCRED, as the kernel recorded
//! them at connect, so a client cannot claim another identity), and turning a uid and
//! this machine into names.
//! Promises: a peer whose credentials cannot be read is treated as unknown, never as
//! root. Must never: trust anything the peer says about itself.

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

/// The credentials of a socket's peer.
#[derive(Clone, Copy, Debug)]
pub struct Peer {
    pub pid: u32,
    pub uid: u32,
}

/// The peer's credentials, as the kernel recorded them when it connected.
pub fn of(stream: &UnixStream) -> std::io::Result<Peer> {
    // SAFETY: ucred is plain data; getsockopt writes at most `len` bytes into it.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: a valid socket fd, a buffer of `len` bytes.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(Peer { pid: cred.pid as u32, uid: cred.uid })
}

/// The login name of `uid`, or the number if it has none.
pub fn user_name(uid: u32) -> String {
    let mut buf = vec![0u8; 4096];
    // SAFETY: passwd is plain data filled by getpwuid_r from `buf`, which outlives it.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the sizes given.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr().cast(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() || pwd.pw_name.is_null() {
        return uid.to_string();
    }
    // SAFETY: pw_name points into `buf`, NUL-terminated by getpwuid_r.
    let name = unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) };
    name.to_string_lossy().into_owned()
}

/// This machine's host name.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_has_a_name_and_the_peer_of_a_pair_is_this_process() {
        assert_eq!(user_name(0), "root");
        assert_eq!(user_name(4_000_000_000), "4000000000");
        let (a, _b) = UnixStream::pair().unwrap();
        let p = of(&a).unwrap();
        assert_eq!(p.pid, std::process::id());
        // SAFETY: getuid cannot fail.
        assert_eq!(p.uid, unsafe { libc::getuid() });
    }
}

//! The FUSE-over-io_uring transport (`tarn mount --transport uring`): a session tarn runs
//! itself, without fuser, because fuser refuses the FUSE_OVER_IO_URING capability at INIT
//! and the kernel only accepts ring registrations on a connection that negotiated it.
//!
//! The session: open /dev/fuse and mount(2) with it; answer INIT on /dev/fuse with
//! FUSE_OVER_IO_URING (`wire::init_reply`); then, per possible CPU (the kernel's queues,
//! `/sys/devices/system/cpu/possible`), ring threads that each own one io_uring (SQE128)
//! and register one ring entry (header buffer + payload buffer of `MAX_WRITE`). Once every
//! queue has an entry the kernel sends requests to the entries; a thread decodes each
//! (`wire`), serves it through the core (`ops::TarnFs`) with the reply written into the
//! entry's payload, and COMMIT_AND_FETCHes it (reply and re-arm in one command). FORGET
//! and INTERRUPT still come on /dev/fuse, as does anything sent before the rings are
//! ready: a /dev/fuse reader thread serves those through the same `wire::dispatch`. If
//! the kernel does not offer the capability at INIT, or its rings cannot be set up, the
//! session serves everything on /dev/fuse (`threads` readers) and says why
//! ([`UringSession::refused`]; the mount prints it as one [`fallback_line`]).
//!
//! Owns: the /dev/fuse fd of a uring mount, its mount(2), the rings and their buffers, the
//! threads, and the counts of requests served by each path ([`TransportCounts`]).
//! Promises: the mount is usable when [`start`] returns; every request that reaches a ring
//! or the reader is answered (errors as errno); when the connection ends (unmount, abort)
//! the kernel completes the pending ring commands with an error and every thread ends,
//! and the session's guard thread finishes; a thread also stops within `POLL` once the
//! reader has seen the connection end.
//! Must never: copy a read's bytes more than once (they go straight into the ring's
//! payload), or block the daemon's exit on a ring that will not complete.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use crate::ops::{Errno, TarnFs, MAX_WRITE};
use crate::options::MountOptions;
use crate::wire::{self, Answer, InHeader, IN_HEADER, OUT_HEADER};

/// `FUSE_IO_URING_CMD_REGISTER` and `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`.
const CMD_REGISTER: u32 = 1;
const CMD_COMMIT_AND_FETCH: u32 = 2;
/// `sizeof(struct fuse_uring_req_header)`: in_out[128], op_in[128], ent_in_out[32].
const RING_HEADER: usize = 288;
const OP_IN: usize = 128;
const ENT_IN_OUT: usize = 256;
/// A payload buffer holds the largest write or read (max_pages × 4 KiB = MAX_WRITE).
const PAYLOAD: usize = MAX_WRITE as usize;
/// A /dev/fuse read must offer room for the largest request (header + write).
const DEV_BUF: usize = MAX_WRITE as usize + 4096;
/// How often a ring thread waiting for a request looks whether the session ended.
const POLL: Duration = Duration::from_millis(500);
/// The module parameter that lets connections use io_uring.
pub const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";
/// A test hook: a mount behaves as if the kernel refused FUSE over io_uring, at the
/// module parameter (`knob`: not settable) or at INIT (`init`: not offered), so the
/// fallback is tested on a kernel that has it. Read once per mount, never on a request.
pub const TEST_REFUSE_URING: &str = "TARN_TEST_REFUSE_URING";

/// Whether the test hook [`TEST_REFUSE_URING`] asks for a refusal at `stage`.
fn refusal_forced(stage: &str) -> bool {
    std::env::var(TEST_REFUSE_URING).is_ok_and(|v| v == stage)
}

/// How a mount's requests reach the daemon.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// /dev/fuse read and write, through fuser (the default).
    #[default]
    Dev,
    /// FUSE over io_uring, with /dev/fuse for FORGET and INTERRUPT.
    Uring,
}

impl Transport {
    pub fn name(self) -> &'static str {
        match self {
            Transport::Dev => "dev",
            Transport::Uring => "uring",
        }
    }
}

/// Requests served by each path of a uring session (a counter per thread, so no two
/// threads write one cache line).
#[derive(Default)]
pub struct TransportCounts {
    ring: Vec<Arc<AtomicU64>>,
    dev: Vec<Arc<AtomicU64>>,
}

impl TransportCounts {
    /// (requests served by the rings, requests served on /dev/fuse).
    pub fn totals(&self) -> (u64, u64) {
        let sum = |v: &[Arc<AtomicU64>]| v.iter().map(|c| c.load(Ordering::Relaxed)).sum();
        (sum(&self.ring), sum(&self.dev))
    }
}

/// A running uring session: like fuser's `BackgroundSession`, its `guard` finishes when
/// the connection has ended and every thread is gone; dropping it unmounts.
pub struct UringSession {
    guard: Option<JoinHandle<io::Result<()>>>,
    pub mountpoint: PathBuf,
    /// Why /dev/fuse carries the requests instead of the rings (None: the rings do).
    pub refused: Option<String>,
    pub counts: Arc<TransportCounts>,
}

impl UringSession {
    /// Whether the rings carry the requests.
    pub fn on_rings(&self) -> bool {
        self.refused.is_none()
    }

    /// Whether the connection has ended and every thread is gone.
    pub fn is_finished(&self) -> bool {
        self.guard.as_ref().is_none_or(|g| g.is_finished())
    }

    /// Waits for the session's threads: what ended them.
    pub fn join(mut self) -> io::Result<()> {
        match self.guard.take() {
            Some(g) => g.join().unwrap_or_else(|_| Err(io::Error::other("the uring session thread panicked"))),
            None => Ok(()),
        }
    }
}

impl Drop for UringSession {
    fn drop(&mut self) {
        if !self.is_finished() {
            tarn_daemon::unmount_or_detach(&self.mountpoint);
        }
    }
}

/// Whether this kernel lets a connection use io_uring, setting `enable_uring` if root
/// may: why not, if not.
pub fn kernel_allows() -> Result<(), String> {
    if refusal_forced("knob") || !enable_in_kernel() {
        return Err(format!("{ENABLE_URING} is off and cannot be set here"));
    }
    Ok(())
}

/// The one line a `--transport uring` mount served over /dev/fuse prints (and logs).
pub fn fallback_line(dataset: &str, mountpoint: &Path, why: &str) -> String {
    format!(
        "tarn mount: warning: FUSE over io_uring is unavailable ({why}): {dataset} on {} is served over /dev/fuse",
        mountpoint.display()
    )
}

/// Sets `enable_uring` if it is off (root may); false if it stays off.
fn enable_in_kernel() -> bool {
    match std::fs::read_to_string(ENABLE_URING) {
        Ok(v) if v.trim() == "Y" || v.trim() == "1" => true,
        Ok(_) => {
            if std::fs::write(ENABLE_URING, b"1").is_err() {
                return false;
            }
            eprintln!("tarn mount: set {ENABLE_URING} to 1 (FUSE over io_uring)");
            true
        }
        Err(_) => false,
    }
}

/// The kernel's queues: one per possible CPU (not online: a queue without an entry
/// would hold its requests forever).
fn possible_cpus() -> io::Result<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    let bad = || io::Error::new(io::ErrorKind::InvalidData, format!("cpu/possible: '{}'", text.trim()));
    let mut n = 0;
    for range in text.trim().split(',') {
        let (lo, hi) = range.split_once('-').unwrap_or((range, range));
        let (lo, hi): (usize, usize) = (lo.parse().map_err(|_| bad())?, hi.parse().map_err(|_| bad())?);
        n = n.max(hi.checked_add(1).ok_or_else(bad)?);
        if lo > hi {
            return Err(bad());
        }
    }
    if n == 0 {
        return Err(bad());
    }
    Ok(n)
}

/// mount(2) of a FUSE filesystem served on `fd`.
fn mount_fuse(fd: i32, mountpoint: &Path, fsname: &str, o: &MountOptions, atime: bool) -> io::Result<()> {
    let cstr = |b: &[u8]| CString::new(b).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput));
    let target = cstr(mountpoint.as_os_str().as_bytes())?;
    let source = cstr(fsname.as_bytes())?;
    let fstype = cstr(b"fuse.tarn")?;
    // SAFETY: getuid/getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let data = format!("fd={fd},rootmode=40000,user_id={uid},group_id={gid},default_permissions,allow_other");
    let data = cstr(data.as_bytes())?;
    let mut flags: libc::c_ulong = 0;
    for (on, flag) in [
        (o.no_dev, libc::MS_NODEV),
        (o.no_suid, libc::MS_NOSUID),
        (o.no_exec, libc::MS_NOEXEC),
        (o.read_only, libc::MS_RDONLY),
        (!atime, libc::MS_NOATIME),
    ] {
        if on {
            flags |= flag;
        }
    }
    // SAFETY: every pointer is a live NUL-terminated string for the call's duration.
    let r = unsafe { libc::mount(source.as_ptr(), target.as_ptr(), fstype.as_ptr(), flags, data.as_ptr().cast()) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// One read from /dev/fuse: Ok(None) once the connection is gone.
fn read_dev(fd: i32, buf: &mut [u8]) -> io::Result<Option<usize>> {
    loop {
        // SAFETY: `buf` is valid for writes of its length.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(Some(n as usize));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            // Interrupted, or the request was withdrawn before we read it: read again.
            Some(libc::EINTR | libc::EAGAIN | libc::ENOENT) => continue,
            Some(libc::ENODEV) => return Ok(None),
            _ => return Err(e),
        }
    }
}

/// Writes one reply on /dev/fuse. A reply to a request the kernel has dropped meanwhile
/// (interrupted, aborted) is refused with ENOENT: nobody waits for it any more.
fn write_dev(fd: i32, bytes: &[u8]) -> io::Result<()> {
    // SAFETY: `bytes` is valid for reads of its length.
    let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
    if n < 0 {
        let e = io::Error::last_os_error();
        if !matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENODEV)) {
            return Err(e);
        }
    }
    Ok(())
}

/// Reads the kernel's INIT and answers it, asking for io_uring when `uring` and for
/// `readahead` bytes of kernel read-ahead at most: whether the
/// connection now accepts ring entries.
fn handshake(fd: i32, uring: bool, readahead: u32) -> io::Result<bool> {
    let mut buf = vec![0u8; DEV_BUF];
    let proto = |e: Errno| io::Error::other(format!("FUSE INIT: errno {}", e.code()));
    let n = read_dev(fd, &mut buf)?.ok_or_else(|| io::Error::other("FUSE connection ended before INIT"))?;
    let (h, tail, _) = wire::split_dev_request(&buf, n).map_err(proto)?;
    if h.opcode != wire::INIT {
        return Err(io::Error::other(format!("FUSE: opcode {} before INIT", h.opcode)));
    }
    let init = wire::InitIn::decode(&buf[IN_HEADER..tail]).map_err(proto)?;
    let mut out = [0u8; OUT_HEADER + 64];
    match wire::init_reply(&init, uring, readahead, &mut out[OUT_HEADER..]) {
        Ok((len, flags)) => {
            let total = OUT_HEADER + len;
            out[..OUT_HEADER].copy_from_slice(&wire::out_header(h.unique, None, total as u32));
            write_dev(fd, &out[..total])?;
            Ok(flags & wire::OVER_IO_URING != 0)
        }
        Err(e) => {
            write_dev(fd, &wire::out_header(h.unique, Some(e), OUT_HEADER as u32))?;
            Err(io::Error::other(format!(
                "FUSE INIT: kernel protocol {}.{} is too old for tarn's own session",
                init.major, init.minor
            )))
        }
    }
}

/// Serves /dev/fuse until the connection ends.
fn serve_dev(fs: &TarnFs, fd: i32, served: &AtomicU64) -> io::Result<()> {
    let mut buf = vec![0u8; DEV_BUF];
    while let Some(n) = read_dev(fd, &mut buf)? {
        let Ok((h, tail, end)) = wire::split_dev_request(&buf, n) else {
            continue; // shorter than a header: nothing to answer
        };
        // The reply goes where the arguments were, its header just before them (the
        // request's own header and struct leave room for it).
        let (head, io) = buf.split_at_mut(tail);
        let op = &head[IN_HEADER..];
        let answer = wire::dispatch(fs, &h, op, io, end - tail);
        served.fetch_add(1, Ordering::Relaxed);
        let (error, len) = match answer {
            Answer::NoReply => continue,
            Answer::Reply(len) => (None, len),
            Answer::Error(e) => (Some(e), 0),
        };
        let start = tail - OUT_HEADER;
        let total = OUT_HEADER + len;
        buf[start..tail].copy_from_slice(&wire::out_header(h.unique, error, total as u32));
        write_dev(fd, &buf[start..start + total])?;
        if h.opcode == wire::DESTROY {
            break;
        }
    }
    Ok(())
}

/// One ring entry's buffers, which the kernel reads and writes for the ring's life.
struct Entry {
    header: Box<[u8; RING_HEADER]>,
    payload: Vec<u8>,
    iov: Box<[libc::iovec; 2]>,
}

// SAFETY: the iovecs point only into this entry's own heap buffers, which move with it
// (a Box's and a Vec's heap memory stays put when the entry changes threads).
unsafe impl Send for Entry {}

impl Entry {
    fn new() -> Entry {
        let mut header = Box::new([0u8; RING_HEADER]);
        let mut payload = vec![0u8; PAYLOAD];
        let iov = Box::new([
            libc::iovec { iov_base: header.as_mut_ptr().cast(), iov_len: RING_HEADER },
            libc::iovec { iov_base: payload.as_mut_ptr().cast(), iov_len: PAYLOAD },
        ]);
        Entry { header, payload, iov }
    }
}

/// The 80-byte command area of a FUSE ring command: `struct fuse_uring_cmd_req`.
fn cmd_req(commit_id: u64, qid: u16) -> [u8; 80] {
    let mut c = [0u8; 80];
    c[8..16].copy_from_slice(&commit_id.to_ne_bytes());
    c[16..18].copy_from_slice(&qid.to_ne_bytes());
    c
}

/// REGISTER needs `sqe->len` = 2 (the iovec count), a field `UringCmd80` leaves 0.
fn register_sqe(fd: i32, qid: u16, e: &Entry, user_data: u64) -> squeue::Entry128 {
    let mut sqe = opcode::UringCmd80::new(types::Fd(fd), CMD_REGISTER)
        .cmd(cmd_req(0, qid))
        .addr(Some(e.iov.as_ptr() as u64))
        .build()
        .user_data(user_data);
    const _: () = assert!(std::mem::size_of::<squeue::Entry128>() == 128);
    // SAFETY: `Entry128` is `repr(C)` over the kernel's 128-byte `io_uring_sqe` (size
    // checked above), whose `len` is the u32 at byte 24.
    unsafe { (std::ptr::from_mut(&mut sqe).cast::<u8>().add(24).cast::<u32>()).write_unaligned(2) };
    sqe
}

fn commit_sqe(fd: i32, qid: u16, commit_id: u64, user_data: u64) -> squeue::Entry128 {
    opcode::UringCmd80::new(types::Fd(fd), CMD_COMMIT_AND_FETCH)
        .cmd(cmd_req(commit_id, qid))
        .build()
        .user_data(user_data)
}

/// A ring thread's state: its ring and entries, serving queue `qid`.
struct RingWorker {
    fs: Arc<TarnFs>,
    /// The connection's /dev/fuse fd, kept open while the ring names it.
    dev: Arc<OwnedFd>,
    qid: u16,
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    entries: Vec<Entry>,
    served: Arc<AtomicU64>,
    ended: Arc<AtomicBool>,
}

impl RingWorker {
    fn new(
        fs: Arc<TarnFs>,
        dev: Arc<OwnedFd>,
        qid: u16,
        depth: usize,
        served: Arc<AtomicU64>,
        ended: Arc<AtomicBool>,
    ) -> io::Result<RingWorker> {
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder().build((depth as u32).next_power_of_two())?;
        let entries = (0..depth).map(|_| Entry::new()).collect();
        Ok(RingWorker { fs, dev, qid, ring, entries, served, ended })
    }

    fn push(&mut self, sqe: &squeue::Entry128) -> io::Result<()> {
        // SAFETY: the buffers the command names (the entry's iovecs, header and payload)
        // live in `self.entries`, which outlives the ring (dropped after it: the ring is
        // closed first, which ends the kernel's use of them).
        unsafe { self.ring.submission().push(sqe) }.map_err(|_| io::Error::other("io_uring submission queue full"))
    }

    /// Hands every entry to the kernel (REGISTER), retrying while the connection is
    /// not yet initialised (EAGAIN): the entries a request already arrived in.
    fn register_all(&mut self) -> io::Result<Vec<u64>> {
        let mut arrived = Vec::new();
        for i in 0..self.entries.len() {
            loop {
                let sqe = register_sqe(self.dev.as_raw_fd(), self.qid, &self.entries[i], i as u64);
                self.push(&sqe)?;
                self.ring.submit()?;
                // A REGISTER that is accepted stays pending (no completion) until a
                // request arrives; one refused completes during the submit, with the
                // error. A completion without an error is a request that reached an entry
                // already registered: it must be served, not dropped (its caller waits).
                let mut refused = None;
                for c in self.ring.completion() {
                    match c.result() {
                        r if r < 0 => refused = Some(r),
                        _ => arrived.push(c.user_data()),
                    }
                }
                match refused {
                    Some(e) if -e == libc::EAGAIN => std::thread::sleep(Duration::from_millis(10)),
                    Some(e) => return Err(io::Error::from_raw_os_error(-e)),
                    None => break,
                }
            }
        }
        Ok(arrived)
    }

    /// Registers the entries (saying how that went on `ready`), then serves requests
    /// until the connection ends.
    fn run(mut self, ready: std::sync::mpsc::Sender<io::Result<()>>) -> io::Result<()> {
        let arrived = match self.register_all() {
            Ok(arrived) => {
                let _ = ready.send(Ok(()));
                arrived
            }
            Err(e) => {
                let _ = ready.send(Err(e));
                return Ok(());
            }
        };
        drop(ready);
        for idx in arrived {
            self.answer(idx)?;
        }
        let ts = types::Timespec::from(POLL);
        loop {
            let args = types::SubmitArgs::new().timespec(&ts);
            match self.ring.submitter().submit_with_args(1, &args) {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR | libc::EBUSY)) => {}
                Err(e) => return Err(e),
            }
            let mut any = false;
            loop {
                // One completion at a time (the queue's borrow ends with the statement).
                let Some((idx, res)) = self.ring.completion().next().map(|c| (c.user_data(), c.result())) else {
                    break;
                };
                any = true;
                if res < 0 {
                    // ENOTCONN (unmounted, aborted) or ECANCELED: the connection is over.
                    // Anything else is the kernel refusing our command (a reply it
                    // could not take): the session's guard reports it.
                    return match -res {
                        libc::ENOTCONN | libc::ECANCELED | libc::ENODEV => Ok(()),
                        e => {
                            let e = io::Error::other(format!(
                                "ring of queue {}: the kernel refused a command: {}",
                                self.qid,
                                io::Error::from_raw_os_error(e)
                            ));
                            eprintln!("tarn mount: {e}");
                            Err(e)
                        }
                    };
                }
                self.answer(idx)?;
            }
            if !any && self.ended.load(Ordering::Relaxed) {
                return Ok(());
            }
        }
    }

    /// Serves the request in entry `idx` and queues its reply (COMMIT_AND_FETCH, sent
    /// with the next submit).
    fn answer(&mut self, idx: u64) -> io::Result<()> {
        let commit_id = self.serve(idx as usize)?;
        let sqe = commit_sqe(self.dev.as_raw_fd(), self.qid, commit_id, idx);
        self.push(&sqe)
    }

    /// Serves the request in entry `idx` and writes its reply there: the commit id.
    fn serve(&mut self, idx: usize) -> io::Result<u64> {
        let e = self.entries.get_mut(idx).ok_or_else(|| io::Error::other("completion for an unknown ring entry"))?;
        let header = &mut e.header;
        let meta = &header[ENT_IN_OUT..];
        let commit_id = u64::from_ne_bytes(meta[8..16].try_into().unwrap_or_default());
        let payload_sz = u32::from_ne_bytes(meta[16..20].try_into().unwrap_or_default()) as usize;
        let answer = match InHeader::decode(&header[..IN_HEADER]) {
            Ok(h) => {
                let op_len = wire::op_struct_size(h.opcode).min(OP_IN);
                let op = &header[OP_IN..OP_IN + op_len];
                let a = wire::dispatch(&self.fs, &h, op, &mut e.payload, payload_sz.min(PAYLOAD));
                Some((h.unique, a))
            }
            Err(_) => None,
        };
        self.served.fetch_add(1, Ordering::Relaxed);
        let (unique, error, len) = match answer {
            Some((u, Answer::Reply(n))) => (u, None, n),
            Some((u, Answer::Error(err))) => (u, Some(err), 0),
            // No reply is expected (FORGET comes on /dev/fuse, never here): end it empty.
            Some((u, Answer::NoReply)) => (u, None, 0),
            None => (0, Some(Errno::EINVAL), 0),
        };
        header[..OUT_HEADER].copy_from_slice(&wire::out_header(unique, error, (OUT_HEADER + len) as u32));
        header[ENT_IN_OUT + 16..ENT_IN_OUT + 20].copy_from_slice(&(len as u32).to_ne_bytes());
        Ok(commit_id)
    }
}

/// Ring threads for every queue, each with its entry registered: their handles and
/// counters. The threads register their own entries: io_uring cancels a command when
/// the task that submitted it exits, and `start` may run on a passing thread (a mount
/// asked for on the control socket).
#[allow(clippy::type_complexity)]
fn ring_workers(
    fs: &Arc<TarnFs>,
    dev: &Arc<OwnedFd>,
    threads: usize,
    ended: &Arc<AtomicBool>,
) -> io::Result<(Vec<JoinHandle<io::Result<()>>>, Vec<Arc<AtomicU64>>)> {
    let queues = possible_cpus()?;
    // One thread (one ring, one entry) per queue and worker, so a slow request (an
    // fsync) holds up only its own thread.
    let per_queue = (threads / queues).max(1);
    let (mut handles, mut counts) = (Vec::new(), Vec::new());
    let (tx, rx) = std::sync::mpsc::channel();
    for qid in 0..queues {
        let qid = u16::try_from(qid).map_err(|_| io::Error::other("more CPUs than FUSE queue ids"))?;
        for _ in 0..per_queue {
            let served = Arc::new(AtomicU64::new(0));
            let w = RingWorker::new(fs.clone(), dev.clone(), qid, 1, served.clone(), ended.clone())?;
            let tx = tx.clone();
            let name = format!("tarn-ring-{qid}.{}", handles.len());
            handles.push(std::thread::Builder::new().name(name).spawn(move || w.run(tx))?);
            counts.push(served);
        }
    }
    drop(tx);
    // Every thread answers once its entry is registered (or could not be).
    let mut first_error = None;
    for answer in rx.iter() {
        if let (Err(e), None) = (answer, &first_error) {
            first_error = Some(e);
        }
    }
    match first_error {
        None => Ok((handles, counts)),
        Some(e) => {
            // The others end once the connection does (nothing will reach their entries).
            ended.store(true, Ordering::Relaxed);
            Err(e)
        }
    }
}

/// Mounts `fs` on `mountpoint` and serves it over io_uring (or, if the kernel refuses
/// the capability, on /dev/fuse with `threads` readers, the session saying why).
pub fn start(
    fs: Arc<TarnFs>,
    mountpoint: &Path,
    fsname: &str,
    options: &MountOptions,
    atime: bool,
    threads: usize,
) -> io::Result<UringSession> {
    // SAFETY: a plain open(2) of a NUL-terminated path.
    let raw = unsafe { libc::open(c"/dev/fuse".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh fd nobody else owns.
    let dev = Arc::new(unsafe { OwnedFd::from_raw_fd(raw) });
    mount_fuse(dev.as_raw_fd(), mountpoint, fsname, options, atime)?;
    // From here on a failure must not leave the mount behind (a dead connection).
    serve_mounted(fs, dev, mountpoint, threads).inspect_err(|_| tarn_daemon::unmount_or_detach(mountpoint))
}

/// The session of a mount made on `dev`: INIT, the rings, the threads.
fn serve_mounted(fs: Arc<TarnFs>, dev: Arc<OwnedFd>, mountpoint: &Path, threads: usize) -> io::Result<UringSession> {
    // The hook answers INIT as a server would on a kernel without the capability.
    let offered = handshake(dev.as_raw_fd(), !refusal_forced("init"), fs.kernel_readahead())?;
    let mut refused = (!offered).then(|| "the kernel did not offer it at FUSE INIT".to_string());
    let ended = Arc::new(AtomicBool::new(false));
    let mut counts = TransportCounts::default();
    let mut workers = Vec::new();
    if refused.is_none() {
        match ring_workers(&fs, &dev, threads, &ended) {
            Ok((handles, served)) => {
                workers = handles;
                counts.ring = served;
            }
            // The kernel then serves the connection on /dev/fuse (a refused REGISTER
            // turns io_uring off for it), and so do we.
            Err(e) => refused = Some(format!("its rings could not be set up: {e}")),
        }
    }
    let readers = if refused.is_none() { 1 } else { threads.max(1) };
    let dev_counts: Vec<Arc<AtomicU64>> = (0..readers).map(|_| Arc::new(AtomicU64::new(0))).collect();
    counts.dev = dev_counts.clone();
    let guard = std::thread::Builder::new().name("tarn-uring".into()).spawn(move || {
        let handles = workers;
        let mut readers = Vec::new();
        for served in dev_counts {
            let (fs, dev) = (fs.clone(), dev.clone());
            readers.push(
                std::thread::Builder::new()
                    .name("tarn-devfuse".into())
                    .spawn(move || serve_dev(&fs, dev.as_raw_fd(), &served))?,
            );
        }
        let mut result = Ok(());
        for r in readers {
            let r = r.join().unwrap_or_else(|_| Err(io::Error::other("a /dev/fuse thread panicked")));
            result = result.and(r);
        }
        ended.store(true, Ordering::Relaxed);
        for h in handles {
            let r = h.join().unwrap_or_else(|_| Err(io::Error::other("a ring thread panicked")));
            result = result.and(r);
        }
        result
    })?;
    Ok(UringSession { guard: Some(guard), mountpoint: mountpoint.to_path_buf(), refused, counts: Arc::new(counts) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn possible_cpus_is_at_least_one() {
        assert!(possible_cpus().expect("cpu/possible") >= 1);
    }

    #[test]
    fn the_register_command_carries_two_iovecs() {
        let e = Entry::new();
        let sqe = register_sqe(3, 1, &e, 7);
        // SAFETY: reading the 128 bytes of a repr(C) 128-byte struct.
        let bytes: [u8; 128] = unsafe { std::mem::transmute(sqe) };
        assert_eq!(u32::from_ne_bytes(bytes[24..28].try_into().expect("4")), 2);
        assert_eq!(u64::from_ne_bytes(bytes[16..24].try_into().expect("8")), e.iov.as_ptr() as u64);
    }
}

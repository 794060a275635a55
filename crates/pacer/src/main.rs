//! `tarn-pacer`: the emulated cloud disk of tarn-lab.
//!
//! Serves one regular file, `MOUNTPOINT/disk`, over FUSE; every read and write is
//! forwarded to a backing image and paced (IOPS, bandwidth, I/O size cap, added
//! latency) to behave like a cloud volume. The lab attaches a loop device to it, so the
//! pacing holds beneath every filesystem, for direct and buffered I/O alike.
//!
//! This file owns the command line and the startup order. Promises: all checks that can
//! fail (sizes, /dev/fuse, mountpoint, backing file) run before forking, so their
//! messages reach the caller; the fork happens before any thread exists; once the disk
//! is usable `pid=<N>` (the daemon's pid) is the last line on stdout, printed by the
//! waiting parent in daemon mode (which then exits 0) or by the process itself with
//! `--foreground`. Must never: mount before the backing file is the right size.

mod daemon;
mod error;
mod fs;
mod pacer;
mod preflight;
mod size;
mod stats;

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use fuser::{MountOption, SessionACL};

use tarn_daemon::Verdict;

use crate::error::PacerError;
use crate::pacer::{Limits, Pacer};
use crate::stats::Stats;

/// FUSE worker threads: enough for a loop device's and a database's concurrent I/O to
/// wait in the pacer side by side (pacing is a shared bucket, not a single queue).
const WORKERS: usize = 16;

#[derive(Debug, Parser)]
#[command(
    name = "tarn-pacer",
    version,
    about = "Emulated cloud disk: one FUSE file whose I/O is paced like a cloud volume",
    after_help = "Sizes take binary suffixes K, M, G, T (optionally with iB). Rate limits of \
                  0 mean unlimited. Each token bucket holds 1/10 s of its rate as burst."
)]
struct Args {
    /// Backing image file (created sparse if absent, grown if smaller, never shrunk).
    #[arg(long, value_name = "PATH")]
    backing: PathBuf,
    /// Size of the disk, e.g. 4G.
    #[arg(long, value_name = "SIZE", value_parser = size::parse_nonzero_size)]
    size: u64,
    /// Existing empty directory; the disk appears as DIR/disk.
    #[arg(long, value_name = "DIR")]
    mountpoint: PathBuf,
    /// I/O operations per second (after size-cap splitting); 0 = unlimited.
    #[arg(long, value_name = "N", default_value_t = 0)]
    iops: u64,
    /// Bytes per second, suffixes allowed (8M); 0 = unlimited.
    #[arg(long, value_name = "BYTES_PER_SEC", default_value = "0", value_parser = size::parse_size)]
    bandwidth: u64,
    /// I/O size cap: a larger request counts as ceil(len/cap) I/Os; 0 = no cap.
    #[arg(long, value_name = "BYTES", default_value = "0", value_parser = size::parse_size)]
    max_io: u64,
    /// Fixed latency added to every I/O and flush, in microseconds.
    #[arg(long, value_name = "N", default_value_t = 0)]
    latency_us: u64,
    /// Stay attached instead of daemonizing once the mount is ready.
    #[arg(long)]
    foreground: bool,
    /// Rewrite this JSON file with cumulative counters every second and at exit.
    #[arg(long, value_name = "PATH")]
    stats: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(err) => return usage_error(err),
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("tarn-pacer: {err}");
            ExitCode::FAILURE
        }
    }
}

/// `--help`/`--version` print as usual; a bad argument becomes one line on stderr
/// (clap's first line names the flag and the problem), exit status 2.
fn usage_error(err: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(err.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = err.print();
        return ExitCode::SUCCESS;
    }
    let text = err.render().to_string();
    // clap's message is the first paragraph (a missing-flag error lists them below).
    let paragraph: Vec<&str> = text.lines().take_while(|l| !l.trim().is_empty()).map(str::trim).collect();
    let joined = paragraph.join(" ");
    let problem = joined.strip_prefix("error: ").unwrap_or(&joined);
    eprintln!("tarn-pacer: {problem} (see tarn-pacer --help)");
    ExitCode::from(2)
}

/// What the panic hook adds after the panic itself: what became of the emulated disk.
const PANIC_NOTE: &str = "tarn-pacer: a thread of this daemon panicked (a bug): the daemon ends here; the paced \
disk fails with ENOTCONN until it is unmounted (`umount` of its mountpoint), and the backing file keeps every write \
the disk acknowledged";

fn run(args: Args) -> Result<(), PacerError> {
    let mountpoint = preflight::check_mountpoint(&args.mountpoint)?;
    preflight::check_fuse_device()?;
    let backing = preflight::prepare_backing(&args.backing, args.size)?;
    // The daemon chdirs to /, so a relative stats path must be resolved now.
    let stats_path = args.stats.as_ref().map(|p| absolute(p));
    let readiness = tarn_daemon::start(args.foreground, report)?;
    // This process is the daemon now: a panic in any of its threads ends it rather than
    // leaving the disk half-served (a dead FUSE worker's requests never answered).
    tarn_daemon::end_on_panic(PANIC_NOTE);
    // From here on threads may exist: no more forking.
    let limits =
        Limits { iops: args.iops, bandwidth: args.bandwidth, max_io: args.max_io, latency_us: args.latency_us };
    let stats = Arc::new(Stats::new());
    let disk = fs::PacedDisk::new(backing, args.size, Arc::new(Pacer::new(limits)), stats.clone());
    let session = match mount(disk, &mountpoint) {
        Ok(session) => session,
        Err(err) => {
            readiness.fail(&err);
            return Err(err);
        }
    };
    readiness.ready(None);
    daemon::serve(session, &mountpoint, &stats, stats_path.as_ref())
}

/// What the caller sees of the daemon's start: `pid=<N>` on stdout once the disk is
/// usable, or one line on stderr saying why it is not.
fn report(verdict: &Verdict) {
    let failure = match verdict {
        Verdict::Ready { pid } => {
            println!("pid={pid}");
            // In the foreground we go on running: the caller must see the line now.
            let _ = io::stdout().flush();
            return;
        }
        Verdict::Failed(msg) => PacerError::Startup(msg.to_string()),
        Verdict::Died { pid } => PacerError::Startup(format!("daemon (pid {pid}) exited before the mount was ready")),
    };
    eprintln!("tarn-pacer: {failure}");
}

/// Mount and start the worker threads; once this returns the kernel has our INIT reply
/// and requests are being served, so the disk is usable.
fn mount(disk: fs::PacedDisk, mountpoint: &std::path::Path) -> Result<fuser::BackgroundSession, PacerError> {
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        MountOption::FSName("tarn-pacer".to_owned()),
        MountOption::Subtype("tarn-pacer".to_owned()),
        MountOption::DefaultPermissions,
        MountOption::NoAtime,
    ];
    config.acl = SessionACL::All; // allow_other: the lab's database users reach the disk
    config.n_threads = Some(WORKERS);
    config.clone_fd = true;
    let mount_err = |source| PacerError::Mount { path: mountpoint.to_path_buf(), source };
    let session = fuser::Session::new(disk, mountpoint, &config).map_err(mount_err)?;
    session.spawn().map_err(mount_err)
}

fn absolute(path: &std::path::Path) -> PathBuf {
    if path.is_absolute() {
        return path.to_path_buf();
    }
    std::env::current_dir().map(|cwd| cwd.join(path)).unwrap_or_else(|_| path.to_path_buf())
}

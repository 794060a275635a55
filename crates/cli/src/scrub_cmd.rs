//! `tarn pool scrub [-s] [-d] POOL`: a scrub followed in the foreground with progress,
//! left to run in the background (`-d`), or stopped (`-s`).
//!
//! Owns: following a scrub (progress lines, the answer to a termination signal: Ctrl-C,
//! or `scrub -s` from another shell, cancels the scrub and it is recorded so), and the
//! record of a scrub process (`$TARN_RUN_DIR/POOL.scrub`, its pid) that `-s` signals.
//! A scrub runs in the process that holds the pool: the mount daemon of a mounted pool
//! (asked over its control socket; it scrubs behind the database's I/O), else this
//! command, which opens the pool for the scrub's length (or, with `-d`, a process of its
//! own started for it).
//! Promises: the same command and output whichever process scrubs: the final line reads
//! `scrub of 'tank': N blocks (SIZE) in Ts; B bad copies found, E unrecoverable`, and
//! blocks no copy can repair fail the command (exit 1); a resilver under way is finished
//! first (it must come before a scrub); a scrub a close cut short is resumed, not
//! restarted.
//! Must never: leave its record naming a process that is gone as the scrub's, or stop a
//! process that is not tarn's.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tarn_control::ops::pool as ops;
use tarn_control::Client;
use tarn_daemon::{Asked, Termination};
use tarn_dataset::props::format_size;
use tarn_pool::{Pool, ScanKind, ScanPace, ScanRecord, ScanState, ScanStatus, ScrubResult};

use crate::access::{self, Session};
use crate::error::CliError;
use crate::output::{format_duration, print_json};

pub fn run(name: &str, stop: bool, detach: bool, json: bool) -> Result<(), CliError> {
    if stop {
        return stop_scrub(name);
    }
    // Before the pool starts its threads, so the signals wait for us alone.
    tarn_daemon::signals::block_termination_signals();
    refuse_if_scrubbing(name)?;
    match access::session(name)? {
        Session::Remote(mut daemon) if detach => start_in_daemon(name, &mut daemon),
        Session::Remote(mut daemon) => foreground(name, &mut Scrubber::Daemon(&mut daemon), json),
        local if detach => {
            local.end()?;
            start_detached(name)
        }
        Session::Local { pool, .. } => {
            let _record = ScrubRecord::write(name)?;
            let result = foreground(name, &mut Scrubber::Here(&pool), json);
            let closed = pool.close();
            result?;
            Ok(closed?)
        }
    }
}

/// The process that scrubs: this one (it opened the pool), or the daemon holding it.
enum Scrubber<'a> {
    Here(&'a Pool),
    Daemon(&'a mut Client),
}

impl Scrubber<'_> {
    fn scan(&mut self) -> Result<Option<ScanStatus>, CliError> {
        match self {
            Scrubber::Here(pool) => Ok(pool.scan()),
            Scrubber::Daemon(c) => Ok(c.call(&ops::Scan {})?),
        }
    }

    /// Starts (or resumes) the scrub: here at full speed (nobody else uses the pool), in
    /// a daemon behind the database's I/O.
    fn start(&mut self) -> Result<(), CliError> {
        match self {
            Scrubber::Here(pool) => Ok(pool.scrub_start_with(foreground_pace())?),
            Scrubber::Daemon(c) => Ok(c.call(&ops::ScrubStart {})?),
        }
    }

    fn stop(&mut self) -> Result<(), CliError> {
        let stopped = match self {
            Scrubber::Here(pool) => pool.scrub_stop().map_err(CliError::from),
            Scrubber::Daemon(c) => c.call(&ops::ScrubStop {}).map_err(CliError::from),
        };
        match stopped {
            // It ended on its own meanwhile (a daemon's answer comes as its text).
            Err(CliError::Pool(e)) if matches!(*e, tarn_pool::PoolError::NoScrub(_)) => Ok(()),
            Err(e) if e.one_line().contains("no scrub in progress") => Ok(()),
            other => other,
        }
    }
}

/// Where a scrub process records its pid while it holds the pool.
fn record_path(pool: &str) -> PathBuf {
    tarn_fuse::state::run_dir().join(format!("{pool}.scrub"))
}

fn log_path(pool: &str) -> PathBuf {
    tarn_fuse::state::run_dir().join(format!("{pool}.scrub.log"))
}

/// The pid of a live scrub process of `pool`, if one is recorded (a stale record is
/// removed).
fn scrub_process(pool: &str) -> Option<u32> {
    let path = record_path(pool);
    let pid: u32 = std::fs::read_to_string(&path).ok()?.trim().parse().ok()?;
    if pid != std::process::id() && tarn_fuse::state::process_is_tarn(pid) {
        return Some(pid);
    }
    let _ = std::fs::remove_file(&path);
    None
}

/// This process's record as the scrub of a pool; removed when dropped.
struct ScrubRecord(PathBuf);

/// Refuses to open `pool` while a scrub process holds it (an open would only wait and
/// fail), saying where its progress goes and how to stop it.
pub fn refuse_if_scrubbing(pool: &str) -> Result<(), CliError> {
    match scrub_process(pool) {
        Some(pid) => Err(CliError::Busy(format!(
            "a scrub of pool '{pool}' is running (pid {pid}, progress in {}); `tarn pool scrub -s {pool}` stops it",
            log_path(pool).display()
        ))),
        None => Ok(()),
    }
}

impl ScrubRecord {
    /// Records this process as the scrub of `pool` (it holds the pool now).
    fn write(pool: &str) -> Result<ScrubRecord, CliError> {
        let path = record_path(pool);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| CliError::host(dir.display(), e))?;
        }
        std::fs::write(&path, std::process::id().to_string()).map_err(|e| CliError::host(path.display(), e))?;
        Ok(ScrubRecord(path))
    }
}

impl Drop for ScrubRecord {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Follows the scrub to its end, printing progress on stderr, until it ends or a
/// termination signal cancels it.
fn foreground(name: &str, scrubber: &mut Scrubber<'_>, json: bool) -> Result<(), CliError> {
    let (record, canceled) = scrub_with_progress(name, scrubber)?;
    let result = ScrubResult {
        blocks: record.blocks,
        bytes: record.examined,
        errors: record.errors,
        checksum_errors_seen: record.bad_copies,
        seconds: record.active_secs,
    };
    if json {
        print_json(&result)?;
    } else {
        println!(
            "scrub of '{name}': {} blocks ({}) in {:.1}s; {} bad copies found, {} unrecoverable",
            result.blocks,
            format_size(result.bytes),
            result.seconds,
            result.checksum_errors_seen,
            result.errors
        );
    }
    if canceled {
        return Err(CliError::Refused(format!("scrub of '{name}' canceled")));
    }
    if result.errors > 0 {
        return Err(CliError::Refused(format!(
            "{} blocks could not be read from any copy; see `tarn pool status -v {name}`",
            result.errors
        )));
    }
    Ok(())
}

/// `-d` on a mounted pool: the daemon scrubs in the background; returns at once.
fn start_in_daemon(name: &str, daemon: &mut Client) -> Result<(), CliError> {
    daemon.call(&ops::ScrubStart {})?;
    println!(
        "scrub of '{name}' started in the background in tarn mount (pid {}); `tarn pool status {name}` shows its progress, `tarn pool scrub -s {name}` stops it",
        daemon.daemon_pid()
    );
    Ok(())
}

/// Runs a resilver under way to its end, then the scrub; returns the scrub's record and
/// whether a signal canceled it.
fn scrub_with_progress(name: &str, scrubber: &mut Scrubber<'_>) -> Result<(ScanRecord, bool), CliError> {
    let mut term = Termination::new();
    if scrubber.scan()?.is_some_and(|s| s.running && s.record.kind == ScanKind::Resilver) {
        eprintln!("tarn: pool '{name}' is resilvering; the scrub starts when it is done");
        if follow(name, scrubber, &mut term)? {
            return Ok((scan_record(scrubber)?, true));
        }
    }
    scrubber.start()?;
    let canceled = follow(name, scrubber, &mut term)?;
    if canceled {
        scrubber.stop()?;
    }
    Ok((scan_record(scrubber)?, canceled))
}

/// Nobody else uses the pool: full speed, unless `TARN_SCAN_RATE` caps it.
fn foreground_pace() -> ScanPace {
    let cap = std::env::var("TARN_SCAN_RATE").ok().and_then(|v| tarn_dataset::props::parse_size(&v));
    ScanPace { bytes_per_sec: cap.unwrap_or(0), ..ScanPace::FULL_SPEED }
}

fn scan_record(scrubber: &mut Scrubber<'_>) -> Result<ScanRecord, CliError> {
    scrubber.scan()?.map(|s| s.record).ok_or_else(|| CliError::Refused("the scan left no record".into()))
}

/// Waits for the scan under way to end, printing progress; true if a termination
/// signal came first.
fn follow(name: &str, scrubber: &mut Scrubber<'_>, term: &mut Termination) -> Result<bool, CliError> {
    let every = if std::io::stderr().is_terminal() { Duration::from_secs(1) } else { Duration::from_secs(10) };
    let mut last = Instant::now();
    loop {
        match scrubber.scan()? {
            Some(s) if s.running => {
                if last.elapsed() >= every {
                    eprintln!("tarn: {}", progress_line(name, &s.record));
                    last = Instant::now();
                }
            }
            _ => return Ok(false),
        }
        // The wait for a signal is the pause between two looks.
        if term.wait(Duration::from_millis(200)) != Asked::Nothing {
            return Ok(true);
        }
    }
}

/// `scrub of 'tank': 45.1% done, 1.2G of 2.7G examined, 00:01:10 to go`.
pub fn progress_line(name: &str, r: &ScanRecord) -> String {
    format!(
        "{} of '{name}': {:.1}% done, {} of {} examined, {} to go",
        r.kind,
        percent_done(r),
        format_size(r.examined),
        format_size(r.to_examine),
        eta(r).map_or_else(|| "unknown time".to_string(), format_duration)
    )
}

/// Bytes examined of the bytes allocated when the scan started (at most 100).
pub fn percent_done(r: &ScanRecord) -> f64 {
    if r.to_examine == 0 {
        return 100.0;
    }
    (r.examined as f64 * 100.0 / r.to_examine as f64).min(100.0)
}

/// Seconds left at the rate so far, once there is one.
pub fn eta(r: &ScanRecord) -> Option<f64> {
    if r.state != ScanState::Scanning || r.active_secs < 0.5 || r.examined == 0 {
        return None;
    }
    let rate = r.examined as f64 / r.active_secs;
    Some(r.to_examine.saturating_sub(r.examined) as f64 / rate)
}

/// `-s`: stops the scrub of a scrub process (by signal), or the one recorded in the
/// pool (a close cut it short).
fn stop_scrub(name: &str) -> Result<(), CliError> {
    if let Some(pid) = scrub_process(name) {
        // SAFETY: sending a signal to a process we checked is tarn's.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(60);
        while tarn_fuse::state::process_is_tarn(pid) {
            if Instant::now() >= deadline {
                return Err(CliError::Refused(format!(
                    "the scrub of '{name}' (pid {pid}) did not stop within a minute"
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        println!("scrub of '{name}' canceled");
        return Ok(());
    }
    access::run(name, ops::ScrubStop {})?;
    println!("scrub of '{name}' canceled");
    Ok(())
}

/// `-d`: starts `tarn pool scrub POOL` as a process of its own (a new session, its
/// output in the run directory) and returns once it holds the pool.
fn start_detached(name: &str) -> Result<(), CliError> {
    let exe = std::env::current_exe().map_err(|e| CliError::host("cannot find the tarn binary", e))?;
    let log = log_path(name);
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir).map_err(|e| CliError::host(dir.display(), e))?;
    }
    let out = std::fs::File::create(&log).map_err(|e| CliError::host(log.display(), e))?;
    let err = out.try_clone().map_err(|e| CliError::host(log.display(), e))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["pool", "scrub", name]).stdin(std::process::Stdio::null()).stdout(out).stderr(err);
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: setsid is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            })
        };
    }
    let mut child = cmd.spawn().map_err(|e| CliError::host("cannot start the scrub process", e))?;
    // It has the pool once its record names it; if it ends first, it failed.
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let last = text.lines().last().unwrap_or("").trim_start_matches("tarn: ");
            if status.success() {
                println!("scrub of '{name}' done: {last}");
                return Ok(());
            }
            return Err(CliError::Refused(format!("the scrub of '{name}' failed: {last}")));
        }
        if scrub_process(name) == Some(child.id()) {
            println!(
                "scrub of '{name}' started in the background (pid {}); its output goes to {}",
                child.id(),
                log.display()
            );
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    println!(
        "scrub of '{name}' is starting in the background (pid {}); its output goes to {}",
        child.id(),
        log.display()
    );
    Ok(())
}

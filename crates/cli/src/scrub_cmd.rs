//! `tarn pool scrub [-s] [-d] POOL`: a scrub in the foreground with progress, in a
//! process of its own (`-d`), or stopped (`-s`).
//!
//! Owns: the foreground scrub's progress lines and its answer to a termination signal
//! (Ctrl-C, or `scrub -s` from another shell: the scrub is canceled and recorded so),
//! and the record of a scrub process (`$TARN_RUN_DIR/POOL.scrub`, its pid) that `-s`
//! signals. A scrub runs where the pool is held: here, the command opens the pool for
//! the scrub's length; once the control socket serves a held pool, the daemon runs it
//! in the background (`Pool::scrub_start`) and `-d` has nothing to start.
//! Promises: the final line reads as before (`scrub of 'tank': N blocks (SIZE) in Ts; B
//! bad copies found, E unrecoverable`), and blocks no copy can repair fail the command
//! (exit 1); a resilver under way is finished first (it must come before a scrub); a
//! scrub a close cut short is resumed, not restarted.
//! Must never: leave its record naming a process that is gone as the scrub's, or stop a
//! process that is not tarn's.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tarn_daemon::{Asked, Termination};
use tarn_dataset::props::format_size;
use tarn_pool::{Pool, ScanKind, ScanPace, ScanRecord, ScanState, ScrubResult};

use crate::access::with_pool;
use crate::error::CliError;
use crate::output::{format_duration, print_json};

pub fn run(name: &str, stop: bool, detach: bool, json: bool) -> Result<(), CliError> {
    if stop {
        stop_scrub(name)
    } else if detach {
        start_detached(name)
    } else {
        foreground(name, json)
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
        Some(pid) => Err(CliError::Refused(format!(
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

/// Scrubs in this process, printing progress on stderr, until it ends or a
/// termination signal cancels it.
fn foreground(name: &str, json: bool) -> Result<(), CliError> {
    // Before the pool starts its threads, so the signals wait for us alone.
    tarn_daemon::signals::block_termination_signals();
    refuse_if_scrubbing(name)?;
    let (record, canceled) = with_pool(name, |pool| {
        let _record = ScrubRecord::write(name)?;
        scrub_with_progress(name, pool)
    })?;
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

/// Runs a resilver under way to its end, then the scrub; returns the scrub's record and
/// whether a signal canceled it.
fn scrub_with_progress(name: &str, pool: &Pool) -> Result<(ScanRecord, bool), CliError> {
    let mut term = Termination::new();
    if pool.scan().is_some_and(|s| s.running && s.record.kind == ScanKind::Resilver) {
        eprintln!("tarn: pool '{name}' is resilvering; the scrub starts when it is done");
        if follow(name, pool, &mut term) {
            return Ok((scan_record(pool)?, true));
        }
    }
    pool.scrub_start_with(foreground_pace())?;
    let canceled = follow(name, pool, &mut term);
    if canceled {
        match pool.scrub_stop() {
            Ok(()) | Err(tarn_pool::PoolError::NoScrub(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok((scan_record(pool)?, canceled))
}

/// Nobody else uses the pool: full speed, unless `TARN_SCAN_RATE` caps it.
fn foreground_pace() -> ScanPace {
    let cap = std::env::var("TARN_SCAN_RATE").ok().and_then(|v| tarn_dataset::props::parse_size(&v));
    ScanPace { bytes_per_sec: cap.unwrap_or(0), ..ScanPace::FULL_SPEED }
}

fn scan_record(pool: &Pool) -> Result<ScanRecord, CliError> {
    pool.scan().map(|s| s.record).ok_or_else(|| CliError::Refused("the scan left no record".into()))
}

/// Waits for the scan under way to end, printing progress; true if a termination
/// signal came first.
fn follow(name: &str, pool: &Pool, term: &mut Termination) -> bool {
    let every = if std::io::stderr().is_terminal() { Duration::from_secs(1) } else { Duration::from_secs(10) };
    let mut last = Instant::now();
    loop {
        match pool.scan() {
            Some(s) if s.running => {
                if last.elapsed() >= every {
                    eprintln!("tarn: {}", progress_line(name, &s.record));
                    last = Instant::now();
                }
            }
            _ => return false,
        }
        // The wait for a signal is the pause between two looks.
        if term.wait(Duration::from_millis(200)) != Asked::Nothing {
            return true;
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
    with_pool(name, |pool| Ok(pool.scrub_stop()?))?;
    println!("scrub of '{name}' canceled");
    Ok(())
}

/// `-d`: starts `tarn pool scrub POOL` as a process of its own (a new session, its
/// output in the run directory) and returns once it holds the pool.
fn start_detached(name: &str) -> Result<(), CliError> {
    refuse_if_scrubbing(name)?;
    crate::access::pool_names(Some(name))?;
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

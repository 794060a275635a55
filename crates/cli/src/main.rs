//! cli — `tarn`, in the spirit of zpool/zfs: human output by default, `-H`/`-p` and
//! `--json` for scripts, and one clear line per error with a non-zero exit.
//!
//! This file owns only the entry: parsing the command line (the grammar is `args.rs`'s)
//! and sending each command to the room that carries it out:
//!
//! | Room | Commands |
//! |---|---|
//! | `pool_cmd` | `pool create/add/import/export/destroy/status/list/clear/history` |
//! | `scrub_cmd` | `pool scrub` |
//! | `iostat_cmd` | `pool iostat` |
//! | `ds_cmd` | `ds create/destroy/list`, `set`, `get`, `inherit` |
//! | `snap_cmd` | `snap create/list/destroy`, `rollback`, `clone` |
//! | `copy` | `put`, `cat`, `ls` |
//! | `stats_cmd` | `stats`, `tune` |
//! | `mount_cmd` | `mount`, `umount` |
//! | `mount_all` | `mount -a`, `umount -a` |
//! | `exporter` | `exporter` |
//! | `manual` | `completions`, `man` |
//!
//! Beside them: `access` (reaching a pool by name: through its daemon's control socket
//! or by opening it here), `cache` (the pool cache file), `output` and `table` (how
//! results are shown), `metrics` (Prometheus text), `space_check` (image files larger
//! than their disk), `error` (exit codes).
//!
//! Promises: exit 0 only for a command that did what it was asked; otherwise one line
//! on stderr (`tarn: …`) and exit 1, or 2 for a malformed command line.
//! Must never: print a Rust panic or debug dump for something the user or the disk
//! caused; every engine error becomes one line naming the object and, where there is
//! one, the fix.

mod access;
mod allocator;
mod args;
mod cache;
mod copy;
mod ds_cmd;
mod error;
mod exporter;
mod iostat_cmd;
mod manual;
mod metrics;
mod mount_all;
mod mount_cmd;
mod output;
mod pool_cmd;
mod scrub_cmd;
mod send_cmd;
mod snap_cmd;
mod space_check;
mod stats_cmd;
mod table;

use std::process::ExitCode;

use clap::Parser;

use args::{Cli, Cmd};
use error::CliError;

fn main() -> ExitCode {
    // `tarn ls … | head` should end quietly like other Unix tools, not panic on EPIPE.
    // SAFETY: setting a signal disposition before any thread starts.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    allocator::install();
    let cli = Cli::parse();
    match run(cli.cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tarn: {}", e.one_line());
            ExitCode::from(e.exit_code())
        }
    }
}

fn run(cmd: Cmd) -> Result<(), CliError> {
    match cmd {
        Cmd::Pool(p) => pool_cmd::run(p),
        Cmd::Ds(d) => ds_cmd::run(d),
        Cmd::Snap(s) => snap_cmd::run(s),
        Cmd::Rollback { snapshot } => snap_cmd::rollback(snapshot),
        Cmd::Clone { options, snapshot, target } => snap_cmd::clone(&options, snapshot, target),
        Cmd::Send { snapshot, incremental, intermediates, token, progress } => {
            send_cmd::send(snapshot, incremental, intermediates, token, progress)
        }
        Cmd::Recv { target, force, abort, progress } => send_cmd::recv(target, force, abort, progress),
        Cmd::Promote { dataset } => snap_cmd::promote(dataset),
        Cmd::Set { assignments_then_dataset } => ds_cmd::set(assignments_then_dataset),
        Cmd::Get { props, dataset, out } => ds_cmd::get(&props, &dataset, out),
        Cmd::Inherit { prop, dataset } => ds_cmd::inherit(&prop, &dataset),
        Cmd::Put { paths } => copy::put_cmd(paths),
        Cmd::Cat { target } => copy::cat_cmd(&target),
        Cmd::Ls { target } => copy::ls_cmd(&target),
        Cmd::Stats { which, pool, json, prometheus } => stats_cmd::stats(&which, &pool, json, prometheus),
        Cmd::Tune { pool, setting } => stats_cmd::tune(&pool, &setting),
        Cmd::Mount { all: true, .. } => mount_all::mount_all(),
        Cmd::Mount { dataset, mountpoint, foreground, threads, also, mut options, transport, .. } => {
            // Carried as a mount option, so a running daemon asked to mount gets it too.
            options.extend(transport.map(|t| format!("transport={t}")));
            mount_cmd::mount(required(dataset)?, mountpoint, foreground, threads, also, &options.join(","))
        }
        Cmd::Umount { all: true, .. } => mount_all::umount_all(),
        Cmd::Umount { target, force, .. } => mount_cmd::umount(&required(target)?, force),
        Cmd::Exporter { listen, allow_remote } => exporter::run(&listen, allow_remote),
        Cmd::Completions { shell } => manual::completions(&shell),
        Cmd::Man { dir } => manual::man(dir.as_deref()),
    }
}

/// An argument clap requires unless `-a` is given (so it is there without `-a`).
fn required(arg: Option<String>) -> Result<String, CliError> {
    arg.ok_or_else(|| CliError::Usage("give a dataset or mountpoint, or -a for all".into()))
}

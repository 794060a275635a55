//! The command line of `tarn`: every command, argument and flag, as clap definitions.
//!
//! Owns: the grammar and the help texts. Promises: a command line clap rejects exits 2
//! with clap's message; what is accepted here reaches `run` in main.rs as one [`Cmd`].
//! Must never: name an engine type or do any work: this file depends only on clap and
//! std, so shell completions and man pages can be generated from it alone (issue #10).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Parser)]
#[command(name = "tarn", version, about = "tarn: a copy-on-write storage pool for databases")]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Pools: create, add, import, export, status, list, iostat, scrub, clear, destroy, history.
    #[command(subcommand)]
    Pool(PoolCmd),
    /// Datasets: create, destroy, list.
    #[command(subcommand)]
    Ds(DsCmd),
    /// Snapshots: create, list, destroy.
    #[command(subcommand)]
    Snap(SnapCmd),
    /// Roll a dataset back to its newest snapshot (it must not be mounted): tarn rollback POOL/DS@NAME
    Rollback { snapshot: String },
    /// Make a writable dataset from a snapshot, sharing its blocks: tarn clone [-o PROP=VALUE]... POOL/DS@NAME POOL/NEW
    Clone {
        #[arg(short = 'o', value_name = "PROP=VALUE")]
        options: Vec<String>,
        snapshot: String,
        target: String,
    },
    /// Write a snapshot as a stream to stdout: tarn send POOL/DS@SNAP [-i @BASE | -I @BASE] [--progress] > FILE; tarn send -t TOKEN
    #[command(after_long_help = "Blocks go as stored (compressed, never recompressed); -i sends what changed since \
@BASE, -I also every snapshot between. Move a dataset to another host: \
`tarn send tank/db@today | ssh host tarn recv tank2/db`. An interrupted receive prints a token; \
`tarn send -t TOKEN | … tarn recv …` continues it.")]
    Send {
        /// POOL/DS@SNAP.
        #[arg(required_unless_present = "token")]
        snapshot: Option<String>,
        /// Incremental from this older snapshot of the same dataset (@NAME).
        #[arg(short = 'i', value_name = "@BASE", conflicts_with = "intermediates")]
        incremental: Option<String>,
        /// Incremental from this snapshot, sending every snapshot in between too.
        #[arg(short = 'I', value_name = "@BASE")]
        intermediates: Option<String>,
        /// Resume an interrupted receive from the token it printed.
        #[arg(short = 't', value_name = "TOKEN", conflicts_with_all = ["snapshot", "incremental", "intermediates"])]
        token: Option<String>,
        /// Show bytes, rate and time left on stderr.
        #[arg(long)]
        progress: bool,
    },
    /// Receive a stream from stdin: tarn recv POOL/DS [-F] [--progress] < FILE; tarn recv -A POOL/DS
    #[command(
        alias = "receive",
        after_long_help = "A full stream creates POOL/DS with its snapshot; an incremental one \
needs its base to be the newest snapshot of POOL/DS (-F rolls back changes made since). The received dataset is not \
mounted. An interrupted receive keeps what arrived and prints a resume token (also the receive_resume_token property)."
    )]
    Recv {
        target: String,
        /// Roll the target back to its newest snapshot first.
        #[arg(short = 'F')]
        force: bool,
        /// Abort an interrupted receive, dropping what it had received.
        #[arg(short = 'A', conflicts_with = "force")]
        abort: bool,
        /// Show bytes and rate on stderr.
        #[arg(long)]
        progress: bool,
    },
    /// Make a clone independent of its origin: it takes the origin's snapshots up to the one it was cloned from, and the origin becomes its clone: tarn promote POOL/CLONE
    Promote { dataset: String },
    /// Set properties: tarn set PROP=VALUE... DATASET
    Set {
        #[arg(required = true, num_args = 1..)]
        assignments_then_dataset: Vec<String>,
    },
    /// Show properties: tarn get PROP[,PROP]|all DATASET
    Get {
        props: String,
        dataset: String,
        #[command(flatten)]
        out: Output,
    },
    /// Clear a local property so it is inherited again.
    Inherit { prop: String, dataset: String },
    /// Copy host files or directories into a dataset: tarn put SRC... POOL/DS[:DIR]
    Put {
        #[arg(required = true, num_args = 2..)]
        paths: Vec<PathBuf>,
    },
    /// Print a file stored in a dataset: tarn cat POOL/DS:PATH
    Cat { target: String },
    /// List a directory of a dataset: tarn ls POOL/DS[:PATH]
    Ls { target: String },
    /// Change a tunable of a mounted pool at run time: tarn tune POOL arc_max=SIZE|dirty_max=SIZE
    Tune { pool: String, setting: String },
    /// Engine counters (arcstats, intent log, txg, io, space) of a pool: tarn stats [arc|zil|txg|io|space|all] POOL
    Stats {
        /// Which counters: arc, zil, txg, io, space, l2arc or all.
        #[arg(value_parser = ["arc", "zil", "txg", "io", "space", "l2arc", "all"])]
        which: String,
        pool: String,
        #[arg(long)]
        json: bool,
        /// Prometheus text exposition format.
        #[arg(long, conflicts_with = "json")]
        prometheus: bool,
    },
    /// Mount a dataset with FUSE: tarn mount POOL/DS [MOUNTPOINT] [-o OPTIONS] [-f] [--threads N]; tarn mount -a
    #[command(after_long_help = "mount(8) and /etc/fstab reach it through the helper /sbin/mount.fuse.tarn \
(installed by scripts/setup.sh): `mount -t fuse.tarn tank/db /var/lib/mysql -o noatime`, or the fstab line \
`tank/db /var/lib/mysql fuse.tarn defaults,_netdev,noatime 0 0`.")]
    Mount {
        /// Required unless -a.
        #[arg(required_unless_present = "all")]
        dataset: Option<String>,
        /// Default: the dataset's mountpoint property.
        mountpoint: Option<PathBuf>,
        /// Mount every dataset of every imported pool whose mountpoint property is a path
        /// (one daemon per pool), skipping pools already mounted; what boot runs.
        #[arg(short = 'a', long = "all", conflicts_with_all = ["dataset", "mountpoint", "also", "options", "foreground"])]
        all: bool,
        /// Mount options, comma-separated: ro, rw, noatime, atime, relatime, nodev, nosuid,
        /// noexec; mount(8)'s own (defaults, _netdev, nofail, auto, noauto, x-*) are ignored.
        #[arg(short = 'o', value_name = "OPTIONS")]
        options: Vec<String>,
        /// Stay in the foreground instead of running as a daemon.
        #[arg(short = 'f')]
        foreground: bool,
        /// Threads serving FUSE requests.
        #[arg(long, default_value_t = 8)]
        threads: usize,
        /// Also mount this dataset of the same pool, on its mountpoint property, in the
        /// same daemon (repeatable; `tarn pool import` uses it).
        #[arg(long, value_name = "POOL/DS")]
        also: Vec<String>,
    },
    /// Unmount a dataset, committing everything: tarn umount [-f] MOUNTPOINT|POOL/DS; tarn umount -a
    Umount {
        /// Required unless -a.
        #[arg(required_unless_present = "all")]
        target: Option<String>,
        /// Unmount even with files open (their I/O then fails).
        #[arg(short = 'f')]
        force: bool,
        /// Unmount every tarn mount; returns once every daemon has committed and exited.
        #[arg(short = 'a', long = "all", conflicts_with = "target")]
        all: bool,
    },
    /// Serve the counters of `tarn stats` for every imported pool to Prometheus, over HTTP
    /// at /metrics: tarn exporter [--listen 127.0.0.1:9436]
    Exporter {
        /// Address and port to listen on (a loopback address unless --allow-remote).
        #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:9436")]
        listen: String,
        /// Allow a non-loopback --listen address: the counters name your pools and
        /// datasets' sizes to whoever can reach it.
        #[arg(long)]
        allow_remote: bool,
    },
    /// Print shell completions: tarn completions bash|zsh|fish
    Completions {
        #[arg(value_parser = ["bash", "zsh", "fish"])]
        shell: String,
    },
    /// Write the man pages (tarn.1, tarn-pool.1, tarn-pool-create.1…) into DIR, or print
    /// tarn(1) without --dir: tarn man [--dir DIR]
    Man {
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// The output flags every listing takes (see `output.rs` for what they do).
#[derive(Args, Clone, Copy)]
pub struct Output {
    /// Scripted mode: no header, tab-separated.
    #[arg(short = 'H')]
    pub scripted: bool,
    /// Exact numbers (bytes) instead of human sizes.
    #[arg(short = 'p')]
    pub parsable: bool,
    /// JSON output.
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand)]
pub enum PoolCmd {
    /// Create a pool: tarn pool create POOL [mirror] DEV... [mirror DEV...] [log [mirror] DEV...] [cache DEV...]
    Create {
        /// Reuse devices that belong to another pool (destroys it).
        #[arg(short = 'f')]
        force: bool,
        /// Pool options, e.g. -o ashift=12.
        #[arg(short = 'o', value_name = "PROP=VALUE")]
        options: Vec<String>,
        /// Size of image files created for device paths that do not exist, e.g. 4G.
        #[arg(long)]
        size: Option<String>,
        pool: String,
        #[arg(required = true, num_args = 1..)]
        vdevs: Vec<String>,
    },
    /// Add separate intent-log devices or cache devices (L2ARC), also to a mounted
    /// pool: tarn pool add POOL log [mirror] DEV... | tarn pool add POOL cache DEV...
    /// A cache device starts empty and fills as blocks leave the ARC.
    Add {
        /// Reuse devices that belong to another pool (destroys it).
        #[arg(short = 'f')]
        force: bool,
        /// Size of image files created for device paths that do not exist, e.g. 1G.
        #[arg(long)]
        size: Option<String>,
        pool: String,
        #[arg(required = true, num_args = 1..)]
        vdevs: Vec<String>,
    },
    /// Remove a log or cache device (a path, or `mirror-N` as status shows it), also
    /// from a mounted pool: the intent log moves back to the data devices (or another
    /// log device) first; a cache device stops being fed and read, and its reads under
    /// way finish first. Data vdevs cannot be removed.
    Remove { pool: String, device: String },
    /// Set pool properties: tarn pool set PROP=VALUE... POOL (cacheautoreplace=on|off:
    /// whether import initialises a cache device it finds blank or foreign)
    Set {
        #[arg(required = true, num_args = 2..)]
        assignments_then_pool: Vec<String>,
    },
    /// Show pool properties: tarn pool get PROP[,PROP]|all POOL
    Get {
        props: String,
        pool: String,
        #[command(flatten)]
        out: Output,
    },
    /// Import a pool found on devices (lists importable pools without POOL), then mount
    /// every dataset whose mountpoint property is a path (one daemon for the pool).
    Import {
        /// Where to look for devices (directories or device paths); repeatable.
        #[arg(short = 'd', value_name = "DIR")]
        dirs: Vec<PathBuf>,
        pool: Option<String>,
        /// JSON output (for the list of importable pools).
        #[arg(long)]
        json: bool,
    },
    /// Commit everything and release the pool's devices; a mounted pool's datasets are
    /// unmounted first.
    Export {
        /// Unmount even datasets with open files (their I/O then fails).
        #[arg(short = 'f')]
        force: bool,
        pool: String,
    },
    /// Show health, the scan, per-device error counts and data errors.
    Status {
        /// List the files with permanent errors.
        #[arg(short = 'v')]
        verbose: bool,
        pool: Option<String>,
        #[command(flatten)]
        out: Output,
    },
    /// Capacity, operations and bandwidth per pool (per device with -v), read and
    /// write: tarn pool iostat [-v] [-l] [POOL] [INTERVAL [COUNT]]
    Iostat {
        /// One line per vdev and device too.
        #[arg(short = 'v')]
        verbose: bool,
        /// Latency columns: average device time per read, per write, per scan I/O.
        #[arg(short = 'l')]
        latency: bool,
        /// Scripted mode: no header, tab-separated.
        #[arg(short = 'H')]
        scripted: bool,
        /// Exact numbers instead of human sizes.
        #[arg(short = 'p')]
        parsable: bool,
        /// [POOL] [INTERVAL [COUNT]]: with INTERVAL (seconds), report again every
        /// INTERVAL, COUNT times (forever without COUNT).
        #[arg(num_args = 0..=3, value_name = "POOL|INTERVAL|COUNT")]
        words: Vec<String>,
    },
    /// One line per imported pool.
    List {
        #[command(flatten)]
        out: Output,
    },
    /// Read and verify every block; repair mirrors from a good copy. In the foreground
    /// (with progress) unless -d; `-s` stops a scrub in progress.
    Scrub {
        /// Stop the scrub in progress.
        #[arg(short = 's', conflicts_with = "detach")]
        stop: bool,
        /// Run it in the background, in a process of its own, and return at once.
        #[arg(short = 'd', long)]
        detach: bool,
        pool: String,
        #[arg(long)]
        json: bool,
    },
    /// Reset the device error counters and the list of data errors; dropped cache devices
    /// are opened again (their cache starts empty).
    Clear { pool: String },
    /// Destroy a pool: its devices no longer import.
    Destroy {
        /// Destroy a pool that holds data, unmounting even datasets with open files.
        #[arg(short = 'f')]
        force: bool,
        pool: String,
    },
    /// The commands that changed a pool, with time, user and host.
    History {
        pool: Option<String>,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
pub enum SnapCmd {
    /// Take snapshots, all in one txg: tarn snap create [-r] POOL/DS@NAME...
    Create {
        /// Also snapshot every dataset below each one named.
        #[arg(short = 'r')]
        recursive: bool,
        #[arg(required = true, num_args = 1..)]
        names: Vec<String>,
    },
    /// List snapshots with their space (USED: what destroying it frees): tarn snap list [POOL|DS|DS@NAME]
    List {
        target: Option<String>,
        #[command(flatten)]
        out: Output,
    },
    /// Destroy a snapshot, freeing what only it holds: tarn snap destroy POOL/DS@NAME
    Destroy { name: String },
}

#[derive(Subcommand)]
pub enum DsCmd {
    /// Create a dataset: tarn ds create [-o PROP=VALUE]... POOL/NAME
    Create {
        #[arg(short = 'o', value_name = "PROP=VALUE")]
        options: Vec<String>,
        name: String,
    },
    /// Destroy a dataset with no children (a mounted one is unmounted first).
    Destroy {
        /// Unmount it even with files open (their I/O then fails).
        #[arg(short = 'f')]
        force: bool,
        name: String,
    },
    /// List datasets with space used.
    List {
        pool: Option<String>,
        #[command(flatten)]
        out: Output,
    },
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    /// clap's own consistency checks (duplicate flags, bad defaults) of the whole grammar.
    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}

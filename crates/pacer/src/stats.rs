//! Cumulative counters of the paced disk and their JSON snapshot file.
//!
//! Owns: the counters every FUSE request bumps, and the `--stats` file. Promises: the
//! file is replaced atomically (write a temporary beside it, then rename), so a reader
//! never sees half a JSON object; counters only grow. Must never: block a request on the
//! stats file, or panic when the stats file cannot be written (the disk keeps serving).

use std::fs;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Stats {
    started: Instant,
    reads: AtomicU64,
    writes: AtomicU64,
    read_bytes: AtomicU64,
    write_bytes: AtomicU64,
    flushes: AtomicU64,
    throttled_ns: AtomicU64,
    io_units: AtomicU64,
}

/// Which way a request went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    Read,
    Write,
}

impl Stats {
    pub fn new() -> Stats {
        Stats {
            started: Instant::now(),
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            read_bytes: AtomicU64::new(0),
            write_bytes: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            throttled_ns: AtomicU64::new(0),
            io_units: AtomicU64::new(0),
        }
    }

    /// Account one completed read or write of `bytes` charged `units` I/O units.
    pub fn record_io(&self, dir: Dir, bytes: u64, units: u64) {
        let (count, volume) = match dir {
            Dir::Read => (&self.reads, &self.read_bytes),
            Dir::Write => (&self.writes, &self.write_bytes),
        };
        count.fetch_add(1, Ordering::Relaxed);
        volume.fetch_add(bytes, Ordering::Relaxed);
        self.io_units.fetch_add(units, Ordering::Relaxed);
    }

    pub fn record_flush(&self) {
        self.flushes.fetch_add(1, Ordering::Relaxed);
    }

    /// Time a request spent waiting for tokens (not the fixed added latency).
    pub fn record_throttle(&self, waited: Duration) {
        let ns = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        self.throttled_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// The snapshot as one JSON object. `elapsed_ns` (time since the daemon started, at
    /// the snapshot) lets a reader turn two snapshots into exact rates.
    pub fn to_json(&self) -> String {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "{{\"reads\":{},\"writes\":{},\"read_bytes\":{},\"write_bytes\":{},\"flushes\":{},\
             \"throttled_ns\":{},\"io_units\":{},\"elapsed_ns\":{}}}\n",
            get(&self.reads),
            get(&self.writes),
            get(&self.read_bytes),
            get(&self.write_bytes),
            get(&self.flushes),
            get(&self.throttled_ns),
            get(&self.io_units),
            self.started.elapsed().as_nanos(),
        )
    }

    /// Atomically replace `path` with the current snapshot.
    pub fn write_to(&self, path: &Path) -> std::io::Result<()> {
        let mut tmp_name = path.as_os_str().to_owned();
        tmp_name.push(format!(".tmp.{}", std::process::id()));
        let tmp = Path::new(&tmp_name);
        let result = fs::File::create(tmp)
            .and_then(|mut f| f.write_all(self.to_json().as_bytes()))
            .and_then(|()| fs::rename(tmp, path));
        if result.is_err() {
            let _ = fs::remove_file(tmp); // best effort: do not leave litter behind
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_counts_and_replaces_atomically() {
        let s = Stats::new();
        s.record_io(Dir::Read, 4096, 1);
        s.record_io(Dir::Write, 65536, 4);
        s.record_io(Dir::Write, 100, 1);
        s.record_flush();
        s.record_throttle(Duration::from_millis(3));
        let json = s.to_json();
        for field in [
            "\"reads\":1,",
            "\"writes\":2,",
            "\"read_bytes\":4096,",
            "\"write_bytes\":65636,",
            "\"flushes\":1,",
            "\"throttled_ns\":3000000,",
            "\"io_units\":6,",
        ] {
            assert!(json.contains(field), "{field} missing in {json}");
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("stats.json");
        s.write_to(&path).expect("write stats");
        s.record_flush();
        s.write_to(&path).expect("rewrite stats");
        let text = fs::read_to_string(&path).expect("read stats");
        assert!(text.contains("\"flushes\":2,"), "{text}");
        let leftovers = fs::read_dir(dir.path()).expect("list").count();
        assert_eq!(leftovers, 1, "temporary file left behind");
    }
}

//! Where the write path's memory goes (issue #11): four threads write 2 GiB sequentially
//! in 1 MiB writes through the dataset API — what `fio --rw=write --bs=1M --numjobs=4
//! --end_fsync=1` does through the mount in bench/memory.sh — with a 256 MiB ARC, the
//! default `dirty_max` (half of it, inside it), and the `tarn` binary's allocator settings
//! and size hook (crates/cli/src/allocator.rs). Every 100 ms it samples RSS beside
//! jemalloc's own counters (allocated, active, resident, retained), how many writers are in their closing fsync, the ARC's accounted
//! bytes and the dirty bytes of the open and syncing txgs; it prints the peak and exits 1
//! if RSS went over arc_max + 64 MiB.
//!
//!   cargo run --release -p tarn-pool --example write_rss
//!   TARN_MEMORY_TRACE=1            print every sample
//!   TARN_MEMORY_WRITE_MIB=1024     write less
//!   TARN_MEMORY_ARC_MIB=64         a smaller ARC (dirty_max follows at its share)
//!   TARN_MEMORY_SAMPLE_MS=20       sample more often (default 100 ms)
//!   TARN_MEMORY_FILES=100000       then create that many small files and read them back
//!                                  (a peak each, as bench/memory.sh's files phases)
//!   _RJEM_MALLOC_CONF=prof:true,lg_prof_sample:16 TARN_MEMORY_DUMP_ABOVE_MIB=700
//!       dump a heap profile (/tmp/rss-heap.<rss>.heap) at each new RSS peak above 700 MiB;
//!       read it with the jeprof that tikv-jemalloc-sys builds
//!       (target/release/build/tikv-jemalloc-sys-*/out/build/bin/jeprof --text --cum
//!       target/release/examples/write_rss FILE).
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tarn_arc::jemalloc;
use tarn_dataset::{NewObject, ROOT_ID};
use tarn_pool::{CreateOptions, Pool, VdevSpec};

tarn_arc::jemalloc_global_allocator!();

const MIB: u64 = 1 << 20;
/// The mount daemon's default under bench/memory.sh: a 256 MiB ARC (and `dirty_max` at
/// its default share of it).
const ARC_MAX_MIB: u64 = 256;
const FIXED_OVERHEAD: u64 = 64 * MIB;
const WRITERS: u64 = 4;
const WRITE: usize = 1 << 20;
const RECORD: usize = 16384;

/// A size statistic of jemalloc's, as of the last `jemalloc::refresh` (0 if unanswered).
fn je(name: &std::ffi::CStr) -> u64 {
    jemalloc::stat(name).unwrap_or(0)
}

/// One 1 MiB write of half-compressible records (as fio's buffer_compress_percentage=50):
/// each 16 KiB record is 8 KiB of noise and 8 KiB of zeros.
fn fill(buf: &mut [u8], seed: u64) {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for rec in buf.chunks_mut(RECORD) {
        let (noise, zeros) = rec.split_at_mut(RECORD / 2);
        for w in noise.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            w.copy_from_slice(&x.to_le_bytes()[..w.len()]);
        }
        zeros.fill(0);
    }
}

fn arc_max() -> u64 {
    std::env::var("TARN_MEMORY_ARC_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(ARC_MAX_MIB) * MIB
}

/// How often RSS is sampled (`TARN_MEMORY_SAMPLE_MS`, default 100): short peaks, such as a
/// closing fsync's, need 20 ms or less.
fn sample_every() -> Duration {
    Duration::from_millis(std::env::var("TARN_MEMORY_SAMPLE_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(100))
}

/// What the sampler reports a peak for, in order.
const PHASES: [&str; 3] = ["write", "files", "readfiles"];

/// Small files to create after the writes (`TARN_MEMORY_FILES`, default none).
fn files_to_create() -> u64 {
    std::env::var("TARN_MEMORY_FILES").ok().and_then(|v| v.parse().ok()).unwrap_or(0)
}

fn total_bytes() -> u64 {
    std::env::var("TARN_MEMORY_WRITE_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(2048) * MIB
}

fn main() {
    tarn_arc::jemalloc::install();
    tarn_arc::jemalloc::start_background_threads();
    let dir = tempfile::tempdir_in(std::env::var("TARN_BENCH_DIR").unwrap_or_else(|_| "/var/tmp".into())).unwrap();
    let opts = CreateOptions { size: Some(8 << 30), ..Default::default() };
    let pool = Arc::new(Pool::create("tank", &[VdevSpec::Disk(dir.path().join("d0.img"))], &opts).unwrap());
    pool.set_property("tank", "recordsize", "16K").unwrap();
    pool.set_property("tank", "compression", "lz4").unwrap();
    let arc_max = arc_max();
    pool.set_arc_max(arc_max);
    let ds = Arc::new(pool.dataset("tank").unwrap());
    let bound = arc_max + FIXED_OVERHEAD;
    let total = total_bytes();

    let done = Arc::new(AtomicBool::new(false));
    let fsyncing = Arc::new(AtomicU64::new(0));
    let phase = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (pool, done, fsyncing, phase) = (pool.clone(), done.clone(), fsyncing.clone(), phase.clone());
        std::thread::spawn(move || {
            let mut peaks = vec![(0u64, String::new()); PHASES.len()];
            while !done.load(Ordering::Relaxed) {
                let rss = tarn_arc::resident_bytes();
                jemalloc::refresh();
                let s = pool.stats();
                let line = format!(
                    "{} fsyncing {} rss {} allocated {} active {} resident {} retained {} | arc accounted {} blocks {} dirty {} decoded {} + {} heap_other {} slack {} | dirty open {} syncing {}",
                    PHASES[phase.load(Ordering::Relaxed) as usize],
                    fsyncing.load(Ordering::Relaxed),
                    rss / MIB,
                    je(c"stats.allocated") / MIB,
                    je(c"stats.active") / MIB,
                    je(c"stats.resident") / MIB,
                    je(c"stats.retained") / MIB,
                    s.arc.accounted_size / MIB,
                    s.arc.size / MIB,
                    s.arc.dirty_size / MIB,
                    s.arc.decoded_indirect_size / MIB,
                    s.arc.decoded_objects_size / MIB,
                    s.arc.heap_other_size / MIB,
                    s.arc.allocator_slack_size / MIB,
                    s.txg.get("dirty_open_bytes").copied().unwrap_or(0) / MIB,
                    s.txg.get("dirty_syncing_bytes").copied().unwrap_or(0) / MIB,
                );
                if std::env::var_os("TARN_MEMORY_TRACE").is_some() {
                    eprintln!("{line}");
                }
                let peak = &mut peaks[phase.load(Ordering::Relaxed) as usize];
                if rss > peak.0 {
                    *peak = (rss, line);
                    if let Ok(t) = std::env::var("TARN_MEMORY_DUMP_ABOVE_MIB") {
                        if rss / MIB > t.parse::<u64>().unwrap() {
                            let name = format!("/tmp/rss-heap.{}.heap\0", rss / MIB);
                            let mut p = name.as_ptr();
                            // SAFETY: prof.dump takes a const char* file name.
                            unsafe {
                                tikv_jemalloc_sys::mallctl(
                                    c"prof.dump".as_ptr(),
                                    std::ptr::null_mut(),
                                    std::ptr::null_mut(),
                                    (&mut p as *mut *const u8).cast(),
                                    std::mem::size_of::<*const u8>(),
                                );
                            }
                        }
                    }
                }
                std::thread::sleep(sample_every());
            }
            peaks
        })
    };

    let started = Instant::now();
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (ds, fsyncing) = (ds.clone(), fsyncing.clone());
            std::thread::spawn(move || {
                let ino =
                    ds.create(ROOT_ID, format!("write.{w}").as_bytes(), NewObject::File, 0o644, 0, 0).unwrap().ino;
                let mut buf = vec![0u8; WRITE];
                let mut off = 0u64;
                while off < total / WRITERS {
                    fill(&mut buf, (w << 40) + off);
                    ds.write(ino, off, &buf).unwrap();
                    off += WRITE as u64;
                }
                fsyncing.fetch_add(1, Ordering::Relaxed);
                let fsync_started = Instant::now();
                ds.fsync(ino).unwrap();
                fsync_started.elapsed()
            })
        })
        .collect();
    let slowest_fsync = writers.into_iter().map(|w| w.join().unwrap()).max().unwrap_or_default();
    let took = started.elapsed();
    pool.sync().unwrap();
    let files = files_to_create();
    if files > 0 {
        phase.store(1, Ordering::Relaxed);
        let inos = create_files(&ds, files);
        pool.sync().unwrap();
        phase.store(2, Ordering::Relaxed);
        read_files(&ds, &inos);
    }
    done.store(true, Ordering::Relaxed);
    let peaks = sampler.join().unwrap();
    eprintln!(
        "{} MiB written in {took:.1?} ({:.0} MiB/s)",
        total / MIB,
        total as f64 / MIB as f64 / took.as_secs_f64()
    );
    eprintln!(
        "slowest closing fsync {slowest_fsync:.1?}; intent log: {} KiB written, {} records in place",
        pool.stats().zil["bytes_written"] >> 10,
        pool.stats().zil["indirect_records"]
    );
    let mut over = false;
    for (name, (peak, at)) in PHASES.iter().zip(&peaks) {
        if *peak > 0 {
            eprintln!("peak of {name}: {at}");
            over |= *peak > bound;
        }
    }
    if over {
        eprintln!("RSS went over the bound of {} MiB", bound / MIB);
        std::process::exit(1);
    }
}

/// Creates `n` small files, 1,000 to a directory (as bench/memory.sh's files phase does).
fn create_files(ds: &tarn_dataset::Dataset, n: u64) -> Vec<u64> {
    let mut inos = Vec::with_capacity(n as usize);
    let mut dir = ROOT_ID;
    for i in 0..n {
        if i % 1000 == 0 {
            dir = ds.create(ROOT_ID, format!("d{}", i / 1000).as_bytes(), NewObject::Dir, 0o755, 0, 0).unwrap().ino;
        }
        let ino = ds.create(dir, format!("f{i}").as_bytes(), NewObject::File, 0o644, 0, 0).unwrap().ino;
        ds.write(ino, 0, format!("file {i}\n").as_bytes()).unwrap();
        inos.push(ino);
    }
    inos
}

fn read_files(ds: &tarn_dataset::Dataset, inos: &[u64]) {
    let mut buf = [0u8; 64];
    for &ino in inos {
        ds.read(ino, 0, &mut buf).unwrap();
    }
}

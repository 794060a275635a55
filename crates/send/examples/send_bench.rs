//! A small send benchmark (issue #13): the bytes and time of a full send of a dataset of
//! compressible pages (lz4) against its logical size, then of an incremental send after
//! 5% of its pages were rewritten, against the bytes changed. The streams go to a sink
//! (what is measured is the engine's side: the walk, the reads, the records).
//!
//! `cargo run --release -p tarn-send --example send_bench -- DIR [DATA_MIB]`
//! (DIR holds the bench's pool image, removed at the end; 256 MiB by default).
mod common;

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use common::{mib, page, PAGE};
use rand::{Rng, SeedableRng};
use tarn_dataset::{NewObject, ROOT_ID};
use tarn_pool::{CreateOptions, Pool, VdevSpec};
use tarn_send::{SendBase, SendRecv};

/// Counts what is written and keeps nothing.
struct Counting(u64);

impl Write for Counting {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0 += b.len() as u64;
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().ok_or("usage: send_bench DIR [DATA_MIB]")?);
    let data_mib: u64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(256);
    std::fs::create_dir_all(&dir)?;
    let img = dir.join("send_bench.img");
    let _ = std::fs::remove_file(&img);
    let opts = CreateOptions { size: Some((data_mib * 3 + 256) << 20), ..Default::default() };
    let pool = Pool::create("bench", &[VdevSpec::Disk(img.clone())], &opts)?;
    let ds = pool.create_dataset_with("bench/db", &[("compression", "lz4"), ("recordsize", "16K")])?;
    let ino = ds.create(ROOT_ID, b"table.ibd", NewObject::File, 0o644, 0, 0)?.ino;
    let mut rng = rand::rngs::StdRng::seed_from_u64(13);
    let pages = (data_mib << 20) / PAGE as u64;
    for n in 0..pages {
        ds.write(ino, n * PAGE as u64, &page(&mut rng))?;
    }
    pool.create_snapshots(&["bench/db@full".into()], false)?;

    let mut out = Counting(0);
    let started = Instant::now();
    let full = pool.send("bench/db@full", SendBase::Full, &mut out, &mut |_| {})?;
    let secs = started.elapsed().as_secs_f64();
    println!(
        "full send: {:.1} MiB stream for {:.1} MiB logical ({:.2}x smaller) in {:.2}s, {:.0} MiB/s of stream",
        mib(out.0),
        mib(full.logical),
        full.logical as f64 / out.0 as f64,
        secs,
        mib(out.0) / secs
    );

    let changed = pages / 20;
    for _ in 0..changed {
        let n = rng.gen_range(0..pages);
        ds.write(ino, n * PAGE as u64, &page(&mut rng))?;
    }
    pool.create_snapshots(&["bench/db@five".into()], false)?;
    let mut out = Counting(0);
    let started = Instant::now();
    let inc = pool.send("bench/db@five", SendBase::Incremental("full"), &mut out, &mut |_| {})?;
    let secs = started.elapsed().as_secs_f64();
    println!(
        "incremental after rewriting 5% of pages ({:.1} MiB written): {:.1} MiB stream, {} blocks, {:.1}% of the full \
         stream, in {:.2}s",
        mib(changed * PAGE as u64),
        mib(out.0),
        inc.blocks,
        out.0 as f64 * 100.0 / full.bytes as f64,
        secs
    );
    pool.destroy()?;
    let _ = std::fs::remove_file(&img);
    Ok(())
}

//! A receive benchmark (issue #13): the time of `tarn recv` of a full stream of
//! compressible database-like pages into a second pool, the stream read from a file. The
//! receive ends with the commit of its END (the data is on the device when it returns).
//!
//! `cargo run --release -p tarn-send --example recv_bench -- DIR [DATA_MIB] [CODEC]`
//! (DIR holds the two pool images and the stream, removed at the end; 256 MiB and lz4 by
//! default; CODEC is the `compression` of both sides, as a copy between like nodes has).
mod common;

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::time::Instant;

use common::{mib, page, PAGE};
use rand::SeedableRng;
use tarn_dataset::{NewObject, ROOT_ID};
use tarn_pool::{CreateOptions, Pool, VdevSpec};
use tarn_send::{SendBase, SendRecv};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().ok_or("usage: recv_bench DIR [DATA_MIB] [CODEC]")?);
    let data_mib: u64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(256);
    let codec = args.next().unwrap_or_else(|| "lz4".into());
    std::fs::create_dir_all(&dir)?;
    let (src_img, dst_img, stream) = (dir.join("src.img"), dir.join("dst.img"), dir.join("stream"));
    let opts = CreateOptions { size: Some((data_mib * 2 + 256) << 20), ..Default::default() };
    let src = Pool::create("src", &[VdevSpec::Disk(src_img.clone())], &opts)?;
    let ds = src.create_dataset_with("src/db", &[("compression", &codec), ("recordsize", "16K")])?;
    let ino = ds.create(ROOT_ID, b"table.ibd", NewObject::File, 0o644, 0, 0)?.ino;
    let mut rng = rand::rngs::StdRng::seed_from_u64(13);
    for n in 0..(data_mib << 20) / PAGE as u64 {
        ds.write(ino, n * PAGE as u64, &page(&mut rng))?;
    }
    src.create_snapshots(&["src/db@full".into()], false)?;
    let mut out = BufWriter::new(File::create(&stream)?);
    let sent = src.send("src/db@full", SendBase::Full, &mut out, &mut |_| {})?;
    out.flush()?;
    drop(out);
    src.destroy()?;

    let dst = Pool::create("dst", &[VdevSpec::Disk(dst_img.clone())], &opts)?;
    dst.set_property("dst", "compression", &codec)?;
    let mut input = BufReader::with_capacity(1 << 20, File::open(&stream)?);
    let started = Instant::now();
    dst.receive("dst/db", false, &mut input, &mut |_| {})?;
    let secs = started.elapsed().as_secs_f64();
    println!(
        "recv ({codec}): {:.1} MiB stream for {:.1} MiB logical in {:.2}s, {:.0} MiB/s of logical data",
        mib(sent.bytes),
        mib(sent.logical),
        secs,
        mib(sent.logical) / secs
    );
    dst.destroy()?;
    for f in [&src_img, &dst_img, &stream] {
        let _ = std::fs::remove_file(f);
    }
    Ok(())
}

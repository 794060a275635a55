//! The packing limit of a directory: the sum, over every 16 KiB page of every file, of
//! that page compressed alone with tarn's codec (a page that does not shrink by 1/8
//! counts raw). No sector padding and no metadata: what a perfect packer would store.
//!
//! Usage: cargo run --release -p tarn-zio --example packing_limit -- lz4|zstd-N DIR...
use std::io::Read;
use std::path::Path;

use tarn_zio::Compression;

const PAGE: usize = 16384;

fn codec(name: &str) -> Option<Compression> {
    match name {
        "lz4" => Some(Compression::Lz4),
        "off" => Some(Compression::Off),
        "zstd" => Some(Compression::Zstd(3)),
        z => z.strip_prefix("zstd-")?.parse().ok().map(Compression::Zstd),
    }
}

fn walk(path: &Path, c: Compression, totals: &mut (u64, u64)) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    if meta.is_dir() {
        for e in std::fs::read_dir(path)? {
            walk(&e?.path(), c, totals)?;
        }
    } else if meta.is_file() {
        let mut f = std::fs::File::open(path)?;
        let mut buf = vec![0u8; PAGE];
        loop {
            let mut n = 0;
            while n < PAGE {
                let k = f.read(&mut buf[n..])?;
                if k == 0 {
                    break;
                }
                n += k;
            }
            if n == 0 {
                break;
            }
            let page = &buf[..n];
            totals.0 += n as u64;
            if page.iter().all(|&b| b == 0) {
                continue; // a hole: tarn stores no block for it
            }
            totals.1 += c.compress(page).map_or(n, |p| p.len()) as u64;
        }
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(c) = args.first().and_then(|a| codec(a)) else {
        eprintln!("usage: packing_limit lz4|zstd|zstd-N|off DIR...");
        std::process::exit(2);
    };
    let mut totals = (0u64, 0u64);
    for dir in &args[1..] {
        if let Err(e) = walk(Path::new(dir), c, &mut totals) {
            eprintln!("packing_limit: {dir}: {e}");
            std::process::exit(1);
        }
    }
    println!("{{\"codec\": \"{}\", \"logical\": {}, \"packed\": {}}}", args[0], totals.0, totals.1);
}

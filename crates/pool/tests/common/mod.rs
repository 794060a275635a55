//! Shared test helpers: in-memory and recording devices, deterministic data, and a
//! reader that returns every file of a dataset as a name → bytes map; `db`, the
//! database-like pool the cache tests churn; `image`, an image's bytes read and damaged.
#![allow(dead_code)]

pub mod db;
pub mod image;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use tarn_dataset::{Dataset, FileKind, NewObject, ROOT_ID};
use tarn_vdev::BlockDevice;

/// Deterministic incompressible bytes (xorshift), distinct per seed.
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Compressible bytes: a short pattern repeated, with the seed mixed in.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let word = format!("tarn-{seed:08}-");
    word.bytes().cycle().take(len).collect()
}

/// An image held in memory.
pub struct MemDevice {
    pub image: Mutex<Vec<u8>>,
    path: PathBuf,
}

impl MemDevice {
    pub fn new(image: Vec<u8>, name: &str) -> Arc<MemDevice> {
        Arc::new(MemDevice { image: Mutex::new(image), path: PathBuf::from(format!("mem:{name}")) })
    }
}

fn range_check(off: u64, len: usize, size: usize) -> std::io::Result<()> {
    if off as usize + len > size {
        return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "beyond the end of the device"));
    }
    Ok(())
}

impl BlockDevice for MemDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        let img = self.image.lock();
        range_check(offset, buf.len(), img.len())?;
        buf.copy_from_slice(&img[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        let mut img = self.image.lock();
        range_check(offset, buf.len(), img.len())?;
        img[offset as usize..offset as usize + buf.len()].copy_from_slice(buf);
        Ok(())
    }
    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn size(&self) -> u64 {
        self.image.lock().len() as u64
    }
    fn path(&self) -> &Path {
        &self.path
    }
}

/// A copy-on-write view of a shared base image: writes land in private 4 KiB pages, so
/// many images differing from one base by a few megabytes cost only those megabytes.
pub struct OverlayDevice {
    base: Arc<Vec<u8>>,
    pages: Mutex<std::collections::HashMap<u64, Vec<u8>>>,
    path: PathBuf,
}

const PAGE: u64 = 4096;

impl OverlayDevice {
    pub fn new(base: Arc<Vec<u8>>, name: &str) -> OverlayDevice {
        OverlayDevice { base, pages: Mutex::new(Default::default()), path: PathBuf::from(format!("overlay:{name}")) }
    }

    /// Splits [offset, offset+len) by page: (page, offset in page, offset in buffer, length).
    fn spans(offset: u64, len: usize) -> impl Iterator<Item = (u64, usize, usize, usize)> {
        let mut at = 0usize;
        std::iter::from_fn(move || {
            if at >= len {
                return None;
            }
            let pos = offset + at as u64;
            let in_page = (pos % PAGE) as usize;
            let n = (PAGE as usize - in_page).min(len - at);
            let item = (pos / PAGE, in_page, at, n);
            at += n;
            Some(item)
        })
    }
}

impl BlockDevice for OverlayDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        range_check(offset, buf.len(), self.base.len())?;
        let pages = self.pages.lock();
        for (page, in_page, at, n) in Self::spans(offset, buf.len()) {
            match pages.get(&page) {
                Some(p) => buf[at..at + n].copy_from_slice(&p[in_page..in_page + n]),
                None => {
                    let from = (page * PAGE) as usize + in_page;
                    buf[at..at + n].copy_from_slice(&self.base[from..from + n]);
                }
            }
        }
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        range_check(offset, buf.len(), self.base.len())?;
        let mut pages = self.pages.lock();
        for (page, in_page, at, n) in Self::spans(offset, buf.len()) {
            let p = pages.entry(page).or_insert_with(|| {
                let from = (page * PAGE) as usize;
                let to = (from + PAGE as usize).min(self.base.len());
                self.base[from..to].to_vec()
            });
            p[in_page..in_page + n].copy_from_slice(&buf[at..at + n]);
        }
        Ok(())
    }
    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn size(&self) -> u64 {
        self.base.len() as u64
    }
    fn path(&self) -> &Path {
        &self.path
    }
}

/// One event of a device's write stream.
#[derive(Clone, Debug)]
pub enum Ev {
    Write { off: u64, data: Vec<u8> },
    Flush,
}

/// A device that applies writes to an in-memory image and records every write and flush
/// in order, so a test can rebuild the image as of any point of the stream. Devices of
/// one pool may share a log (entries name the device by `id`), giving one global order.
pub struct RecDevice {
    pub inner: Arc<MemDevice>,
    pub id: usize,
    pub log: Arc<Mutex<Vec<(usize, Ev)>>>,
}

impl RecDevice {
    pub fn new(image: Vec<u8>, name: &str) -> Arc<RecDevice> {
        RecDevice::shared(image, name, 0, Arc::new(Mutex::new(Vec::new())))
    }
    pub fn shared(image: Vec<u8>, name: &str, id: usize, log: Arc<Mutex<Vec<(usize, Ev)>>>) -> Arc<RecDevice> {
        Arc::new(RecDevice { inner: MemDevice::new(image, name), id, log })
    }
    pub fn events(&self) -> usize {
        self.log.lock().len()
    }
}

impl BlockDevice for RecDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        let mut log = self.log.lock();
        self.inner.write_at(buf, offset)?;
        log.push((self.id, Ev::Write { off: offset, data: buf.to_vec() }));
        Ok(())
    }
    fn flush(&self) -> std::io::Result<()> {
        self.log.lock().push((self.id, Ev::Flush));
        Ok(())
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn path(&self) -> &Path {
        self.inner.path()
    }
}

/// A dataset's files as a test expects them: name → bytes.
pub type Model = BTreeMap<String, Vec<u8>>;

/// Writes `data` at `off` of file `name` in the root directory, creating it, and in the
/// model.
pub fn write(ds: &Dataset, model: &mut Model, name: &str, off: u64, data: &[u8]) {
    let ino = match ds.lookup(ROOT_ID, name.as_bytes()) {
        Ok(a) => a.ino,
        Err(_) => ds.create(ROOT_ID, name.as_bytes(), NewObject::File, 0o644, 0, 0).unwrap().ino,
    };
    ds.write(ino, off, data).unwrap();
    let f = model.entry(name.to_string()).or_default();
    let end = off as usize + data.len();
    if f.len() < end {
        f.resize(end, 0);
    }
    f[off as usize..end].copy_from_slice(data);
}

/// Every regular file under `dir` (recursively, as "sub/name"), with its whole content.
pub fn read_tree(ds: &Dataset) -> Result<BTreeMap<String, Vec<u8>>, tarn_dataset::FsError> {
    let mut out = BTreeMap::new();
    read_dir_into(ds, ROOT_ID, "", &mut out)?;
    Ok(out)
}

fn read_dir_into(
    ds: &Dataset,
    dir: u64,
    prefix: &str,
    out: &mut BTreeMap<String, Vec<u8>>,
) -> Result<(), tarn_dataset::FsError> {
    for (name, ino, kind) in ds.readdir(dir)? {
        let name = format!("{prefix}{}", String::from_utf8_lossy(&name));
        match kind {
            FileKind::Dir => read_dir_into(ds, ino, &format!("{name}/"), out)?,
            _ => {
                out.insert(name, read_file(ds, ino)?);
            }
        }
    }
    Ok(())
}

pub fn read_file(ds: &Dataset, ino: u64) -> Result<Vec<u8>, tarn_dataset::FsError> {
    let size = ds.getattr(ino)?.size as usize;
    let mut buf = vec![0u8; size];
    let n = ds.read(ino, 0, &mut buf)?;
    assert_eq!(n, size, "short read of a whole file");
    Ok(buf)
}

/// Compact description of a file map for assertion messages.
pub fn describe(m: &BTreeMap<String, Vec<u8>>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k}:{}B:{:016x}", v.len(), xxhash_rust::xxh3::xxh3_64(v)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Finds `needle` in `hay`; returns every start offset.
pub fn find_all(hay: &[u8], needle: &[u8]) -> Vec<usize> {
    let mut hits = Vec::new();
    if needle.is_empty() || hay.len() < needle.len() {
        return hits;
    }
    let first = needle[0];
    let mut i = 0;
    while i + needle.len() <= hay.len() {
        match hay[i..hay.len() - needle.len() + 1].iter().position(|&b| b == first) {
            None => break,
            Some(p) => {
                let at = i + p;
                if &hay[at..at + needle.len()] == needle {
                    hits.push(at);
                }
                i = at + 1;
            }
        }
    }
    hits
}

/// Where the process's memory is, one line (the memory tests' report): RSS, what the
/// budget accounts for and its parts, and the rest split into live allocations and the
/// allocator's slack.
pub fn memory_split(pool: &tarn_pool::Pool) -> String {
    let stats = pool.stats();
    memory_line(stats.arc.rss, &stats)
}

/// `memory_split`'s line for an RSS sampled apart from the statistics.
pub fn memory_line(rss: u64, stats: &tarn_pool::PoolStats) -> String {
    const MIB: u64 = 1 << 20;
    let a = &stats.arc;
    format!(
        "rss {} MiB: accounted {} MiB (blocks {}, dirty {}, headers {}, decoded {} + {}, hot {}); outside it {} MiB \
         live, {} MiB the allocator's slack",
        rss / MIB,
        a.accounted_size / MIB,
        a.size / MIB,
        a.dirty_size / MIB,
        a.headers_size / MIB,
        a.decoded_indirect_size / MIB,
        a.decoded_objects_size / MIB,
        a.hot_copies_size / MIB,
        a.heap_other_size / MIB,
        a.allocator_slack_size / MIB
    )
}

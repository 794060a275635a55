//! Copying between the host and a dataset without going through a mount: `put` loads
//! files (seeding a dataset, measuring compression of a real data directory), `ls` and
//! `cat` read back.
//!
//! Owns: the walk of a host directory tree into a dataset (files, directories, symlinks;
//! modes and owners kept) and reading a dataset file in chunks. Promises: a directory
//! that already exists is merged into, a file that exists is an error naming it; `cat`
//! gets exactly the file's bytes, chunk by chunk (`Read`), so no whole file is held in
//! memory on either side of the socket. Must never: follow a symlink on the host (it is
//! copied as a symlink), or read a host path that is not absolute when run by a daemon
//! (whose working directory is `/`, not the caller's).

use std::io::Read as _;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tarn_dataset::{Dataset, FileKind, FsError, NewObject, ROOT_ID};

use crate::error::OpError;
use crate::op::{Held, Op};

/// Bytes moved per step (a `put` write, a `cat` chunk).
pub const CHUNK: usize = 1 << 20;

/// `tarn put SRC… POOL/DS[:DIR]`.
#[derive(Serialize, Deserialize)]
pub struct Put {
    pub dataset: String,
    pub dir: String,
    /// Absolute host paths.
    pub sources: Vec<PathBuf>,
}

impl Op for Put {
    const NAME: &'static str = "fs.put";
    type Output = ();
    fn run(self, on: &Held<'_>) -> Result<(), OpError> {
        let ds = on.pool.dataset(&self.dataset)?;
        let target = resolve(&ds, &self.dir)?;
        for src in &self.sources {
            if !src.is_absolute() {
                return Err(OpError::Usage(format!("{}: a source path must be absolute here", src.display())));
            }
            copy_in(&ds, target, src)?;
        }
        Ok(())
    }
}

/// One entry of `tarn ls`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Entry {
    /// `d` directory, `l` symlink, `s` special, `-` file.
    pub kind: char,
    pub size: u64,
    pub name: String,
}

/// A dataset, or a snapshot's contents (`POOL/DS@NAME`: read-only), for ls and cat.
fn readable(on: &Held<'_>, name: &str) -> Result<std::sync::Arc<tarn_dataset::Dataset>, OpError> {
    Ok(if name.contains('@') { on.pool.snapshot_dataset(name)? } else { on.pool.dataset(name)? })
}

/// `tarn ls POOL/DS[:PATH]` (or `POOL/DS@SNAP[:PATH]`).
#[derive(Serialize, Deserialize)]
pub struct List {
    pub dataset: String,
    pub path: String,
}

impl Op for List {
    const NAME: &'static str = "fs.ls";
    type Output = Vec<Entry>;
    fn run(self, on: &Held<'_>) -> Result<Vec<Entry>, OpError> {
        let ds = readable(on, &self.dataset)?;
        let ino = resolve(&ds, &self.path)?;
        let listing = ds.readdir(ino).map_err(|e| OpError::file(&self.path, e))?;
        let mut out = Vec::with_capacity(listing.len());
        for (name, child, kind) in listing {
            let name = String::from_utf8_lossy(&name).into_owned();
            let a = ds.getattr(child).map_err(|e| OpError::file(format!("{}/{name}", self.path), e))?;
            let kind = match kind {
                FileKind::Dir => 'd',
                FileKind::Symlink => 'l',
                FileKind::Special => 's',
                FileKind::File => '-',
            };
            out.push(Entry { kind, size: a.size, name });
        }
        Ok(out)
    }
}

/// One chunk of a file, for `tarn cat`.
#[derive(Serialize, Deserialize)]
pub struct Read {
    pub dataset: String,
    pub path: String,
    pub offset: u64,
    /// At most [`CHUNK`].
    pub len: usize,
}

/// Bytes of a file from an offset; empty at or past its end.
#[derive(Serialize, Deserialize)]
pub struct Chunk {
    #[serde(with = "base64_bytes")]
    pub data: Vec<u8>,
}

impl Op for Read {
    const NAME: &'static str = "fs.read";
    type Output = Chunk;
    fn run(self, on: &Held<'_>) -> Result<Chunk, OpError> {
        let ds = readable(on, &self.dataset)?;
        let ino = resolve(&ds, &self.path)?;
        let fail = |e| OpError::file(&self.path, e);
        let size = ds.getattr(ino).map_err(fail)?.size;
        let want = (size.saturating_sub(self.offset)).min(self.len.min(CHUNK) as u64) as usize;
        let mut data = vec![0u8; want];
        let mut got = 0;
        while got < want {
            let n = ds.read(ino, self.offset + got as u64, &mut data[got..]).map_err(fail)?;
            if n == 0 {
                break;
            }
            got += n;
        }
        data.truncate(got);
        Ok(Chunk { data })
    }
}

/// Resolves a slash-separated path inside a dataset to an inode.
fn resolve(ds: &Dataset, path: &str) -> Result<u64, OpError> {
    let mut ino = ROOT_ID;
    for part in path.split('/').filter(|p| !p.is_empty()) {
        ino = ds.lookup(ino, part.as_bytes()).map_err(|e| OpError::file(path, e))?.ino;
    }
    Ok(ino)
}

fn copy_in(ds: &Dataset, parent: u64, src: &Path) -> Result<(), OpError> {
    let shown = src.display().to_string();
    let host = |e| OpError::host(&shown, e);
    let fail = |e: FsError| OpError::file(&shown, e);
    let name = src.file_name().ok_or_else(|| OpError::Usage(format!("{shown}: has no file name")))?;
    let meta = std::fs::symlink_metadata(src).map_err(host)?;
    let mode = meta.permissions().mode();
    let name = name.as_encoded_bytes();
    if meta.is_dir() {
        let attr = match ds.create(parent, name, NewObject::Dir, mode, meta.uid(), meta.gid()) {
            Ok(a) => a,
            Err(FsError::Exists) => ds.lookup(parent, name).map_err(fail)?,
            Err(e) => return Err(fail(e)),
        };
        let mut entries: Vec<_> = std::fs::read_dir(src).map_err(host)?.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            copy_in(ds, attr.ino, &e.path())?;
        }
    } else if meta.file_type().is_symlink() {
        let target = std::fs::read_link(src).map_err(host)?;
        let link = NewObject::Symlink(target.as_os_str().as_encoded_bytes());
        ds.create(parent, name, link, 0o777, meta.uid(), meta.gid()).map_err(fail)?;
    } else if meta.is_file() {
        let attr = ds.create(parent, name, NewObject::File, mode, meta.uid(), meta.gid()).map_err(fail)?;
        let mut f = std::fs::File::open(src).map_err(host)?;
        let mut buf = vec![0u8; CHUNK];
        let mut off = 0u64;
        loop {
            let n = f.read(&mut buf).map_err(host)?;
            if n == 0 {
                break;
            }
            ds.write(attr.ino, off, &buf[..n]).map_err(fail)?;
            off += n as u64;
        }
    }
    Ok(())
}

/// Bytes as base64 in JSON (an array of numbers would be four times the size).
mod base64_bytes {
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD.decode(text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_crosses_the_wire_as_base64_and_back() {
        let c = Chunk { data: (0..=255u8).collect() };
        let text = serde_json::to_string(&c).unwrap();
        assert!(text.len() < 2 * 256, "{text}");
        let back: Chunk = serde_json::from_str(&text).unwrap();
        assert_eq!(back.data, c.data);
    }
}

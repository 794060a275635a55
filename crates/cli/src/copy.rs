//! Copying between the host and a dataset without a mount: `put` loads files (seeding a
//! dataset, measuring compression of a real data directory), `cat` and `ls` read back.
//!
//! Owns: the `POOL/DS:PATH` target syntax and the walk of a host directory tree into a
//! dataset (files, directories, symlinks; modes and owners kept). Promises: everything
//! copied is committed when `put` returns (the pool is closed by the caller); a
//! directory that already exists is merged into, a file that exists is an error naming
//! it; `cat` writes exactly the file's bytes to stdout. Must never: follow a symlink on
//! the host (it is copied as a symlink), or hold a whole file in memory (1 MiB chunks).

use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tarn_dataset::{Dataset, FileKind, FsError, NewObject, ROOT_ID};
use tarn_pool::Pool;

use crate::access::with_pool_of;
use crate::error::CliError;

const CHUNK: usize = 1 << 20;

/// "POOL/DS:PATH" → ("POOL/DS", "PATH"); no `:` means the dataset's root.
pub fn split_target(t: &str) -> (&str, &str) {
    t.split_once(':').unwrap_or((t, "/"))
}

/// `tarn put SRC... POOL/DS[:DIR]`.
pub fn put_cmd(mut paths: Vec<PathBuf>) -> Result<(), CliError> {
    let Some(target) = paths.pop() else {
        return Err(CliError::Usage("usage: tarn put SRC... POOL/DS[:DIR]".into()));
    };
    let target = target.display().to_string();
    let (ds, dir) = split_target(&target);
    with_pool_of(ds, |pool| put(pool, ds, dir, &paths))
}

/// `tarn cat POOL/DS:PATH`.
pub fn cat_cmd(target: &str) -> Result<(), CliError> {
    let (ds, path) = split_target(target);
    with_pool_of(ds, |pool| cat(pool, ds, path))
}

/// `tarn ls POOL/DS[:PATH]`.
pub fn ls_cmd(target: &str) -> Result<(), CliError> {
    let (ds, path) = split_target(target);
    with_pool_of(ds, |pool| ls(pool, ds, path))
}

/// Resolves a slash-separated path inside a dataset to an inode.
fn resolve(ds: &Dataset, path: &str) -> Result<u64, CliError> {
    let mut ino = ROOT_ID;
    for part in path.split('/').filter(|p| !p.is_empty()) {
        ino = ds.lookup(ino, part.as_bytes()).map_err(|e| CliError::file(path, e))?.ino;
    }
    Ok(ino)
}

fn put(pool: &Pool, ds_name: &str, dir: &str, sources: &[PathBuf]) -> Result<(), CliError> {
    let ds = pool.dataset(ds_name)?;
    let target = resolve(&ds, dir)?;
    for src in sources {
        copy_in(&ds, target, src)?;
    }
    Ok(())
}

fn copy_in(ds: &Dataset, parent: u64, src: &Path) -> Result<(), CliError> {
    let shown = src.display().to_string();
    let host = |e| CliError::host(&shown, e);
    let fail = |e: FsError| CliError::file(&shown, e);
    let name = src.file_name().ok_or_else(|| CliError::Usage(format!("{shown}: has no file name")))?;
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

fn cat(pool: &Pool, ds_name: &str, path: &str) -> Result<(), CliError> {
    let ds = pool.dataset(ds_name)?;
    let ino = resolve(&ds, path)?;
    let size = ds.getattr(ino).map_err(|e| CliError::file(path, e))?.size;
    let mut out = std::io::stdout().lock();
    let mut buf = vec![0u8; CHUNK];
    let mut off = 0;
    while off < size {
        let n = ds.read(ino, off, &mut buf).map_err(|e| CliError::file(path, e))?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n]).map_err(|e| CliError::host("stdout", e))?;
        off += n as u64;
    }
    Ok(())
}

fn ls(pool: &Pool, ds_name: &str, path: &str) -> Result<(), CliError> {
    let ds = pool.dataset(ds_name)?;
    let ino = resolve(&ds, path)?;
    for (name, child, kind) in ds.readdir(ino).map_err(|e| CliError::file(path, e))? {
        let shown = String::from_utf8_lossy(&name);
        let a = ds.getattr(child).map_err(|e| CliError::file(format!("{path}/{shown}"), e))?;
        let t = match kind {
            FileKind::Dir => 'd',
            FileKind::Symlink => 'l',
            FileKind::Special => 's',
            FileKind::File => '-',
        };
        println!("{t} {:>12} {shown}", a.size);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::split_target;

    #[test]
    fn a_target_names_a_dataset_and_a_path_in_it() {
        assert_eq!(split_target("tank/db:/a/b"), ("tank/db", "/a/b"));
        assert_eq!(split_target("tank/db"), ("tank/db", "/"));
        assert_eq!(split_target("tank:x"), ("tank", "x"));
    }
}

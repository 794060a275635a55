//! Copying between the host and a dataset without a mount: `put` loads files (seeding a
//! dataset, measuring compression of a real data directory), `cat` and `ls` read back.
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use tarn_dataset::{Dataset, FileKind, FsError, NewObject, ROOT_ID};
use tarn_pool::Pool;

const CHUNK: usize = 1 << 20;

/// Resolves a slash-separated path inside a dataset to an inode.
fn resolve(ds: &Dataset, path: &str) -> Result<u64, String> {
    let mut ino = ROOT_ID;
    for part in path.split('/').filter(|p| !p.is_empty()) {
        ino = ds.lookup(ino, part.as_bytes()).map_err(|e| format!("{path}: {e}"))?.ino;
    }
    Ok(ino)
}

pub fn put(pool: &Pool, ds_name: &str, dir: &str, sources: &[std::path::PathBuf]) -> Result<(), String> {
    let ds = pool.dataset(ds_name).map_err(|e| e.to_string())?;
    let target = resolve(&ds, dir)?;
    for src in sources {
        copy_in(&ds, target, src)?;
    }
    Ok(())
}

fn copy_in(ds: &Dataset, parent: u64, src: &Path) -> Result<(), String> {
    let name = src.file_name().ok_or_else(|| format!("{}: has no file name", src.display()))?;
    let meta = std::fs::symlink_metadata(src).map_err(|e| format!("{}: {e}", src.display()))?;
    let mode = meta.permissions().mode();
    let name = name.as_encoded_bytes();
    let fail = |e: FsError| format!("{}: {e}", src.display());
    if meta.is_dir() {
        let attr = match ds.create(parent, name, NewObject::Dir, mode, meta.uid(), meta.gid()) {
            Ok(a) => a,
            Err(FsError::Exists) => ds.lookup(parent, name).map_err(fail)?,
            Err(e) => return Err(fail(e)),
        };
        let mut entries: Vec<_> = std::fs::read_dir(src).map_err(|e| format!("{}: {e}", src.display()))?.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            copy_in(ds, attr.ino, &e.path())?;
        }
    } else if meta.file_type().is_symlink() {
        let target = std::fs::read_link(src).map_err(|e| format!("{}: {e}", src.display()))?;
        ds.create(parent, name, NewObject::Symlink(target.as_os_str().as_encoded_bytes()), 0o777, meta.uid(), meta.gid())
            .map_err(fail)?;
    } else if meta.is_file() {
        let attr = ds.create(parent, name, NewObject::File, mode, meta.uid(), meta.gid()).map_err(fail)?;
        let mut f = std::fs::File::open(src).map_err(|e| format!("{}: {e}", src.display()))?;
        let mut buf = vec![0u8; CHUNK];
        let mut off = 0u64;
        loop {
            let n = f.read(&mut buf).map_err(|e| format!("{}: {e}", src.display()))?;
            if n == 0 {
                break;
            }
            ds.write(attr.ino, off, &buf[..n]).map_err(fail)?;
            off += n as u64;
        }
    }
    Ok(())
}

pub fn cat(pool: &Pool, ds_name: &str, path: &str) -> Result<(), String> {
    let ds = pool.dataset(ds_name).map_err(|e| e.to_string())?;
    let ino = resolve(&ds, path)?;
    let size = ds.getattr(ino).map_err(|e| e.to_string())?.size;
    let mut out = std::io::stdout().lock();
    let mut buf = vec![0u8; CHUNK];
    let mut off = 0;
    while off < size {
        let n = ds.read(ino, off, &mut buf).map_err(|e| format!("{path}: {e}"))?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n]).map_err(|e| e.to_string())?;
        off += n as u64;
    }
    Ok(())
}

pub fn ls(pool: &Pool, ds_name: &str, path: &str) -> Result<(), String> {
    let ds = pool.dataset(ds_name).map_err(|e| e.to_string())?;
    let ino = resolve(&ds, path)?;
    for (name, child, kind) in ds.readdir(ino).map_err(|e| format!("{path}: {e}"))? {
        let a = ds.getattr(child).map_err(|e| e.to_string())?;
        let t = match kind {
            FileKind::Dir => 'd',
            FileKind::Symlink => 'l',
            FileKind::Special => 's',
            FileKind::File => '-',
        };
        println!("{t} {:>12} {}", a.size, String::from_utf8_lossy(&name));
    }
    Ok(())
}

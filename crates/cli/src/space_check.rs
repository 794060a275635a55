//! The warning before image files are created larger than the space their filesystem
//! has left (`tarn pool create --size 1T` on a disk with 78G free): the files are
//! sparse, so creating them works, and the pool fails writes (ENOSPC from its own
//! devices) only once the host filesystem is full.
//!
//! Owns: grouping the images a command will create by filesystem and comparing their
//! sizes with its free space. Promises: one line on stderr per filesystem that is too
//! small, naming the images' size and the free space; nothing when they fit or when
//! no image is to be created. Must never: refuse the command (a sparse pool larger than
//! the disk is a choice, as with thin provisioning) or create anything.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use tarn_dataset::props::format_size;
use tarn_pool::VdevSpec;

/// Image files that `specs` will create (paths that do not exist yet), `size` each.
struct NewImages {
    /// One directory of the filesystem, to name it.
    dir: PathBuf,
    count: u64,
}

/// Warns on stderr for each filesystem where the image files `specs` will create, of
/// `size` bytes each, add up to more than its free space.
pub fn warn_if_images_outgrow_free_space<'a>(specs: impl IntoIterator<Item = &'a VdevSpec>, size: Option<u64>) {
    let Some(size) = size else { return };
    for warning in warnings(specs, size) {
        eprintln!("tarn: warning: {warning}");
    }
}

fn warnings<'a>(specs: impl IntoIterator<Item = &'a VdevSpec>, size: u64) -> Vec<String> {
    let mut by_fs: BTreeMap<u64, NewImages> = BTreeMap::new();
    for path in specs.into_iter().flat_map(leaf_paths).filter(|p| !p.exists()) {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf();
        // A directory that cannot be read fails the create itself, with its own error.
        let Ok(meta) = std::fs::metadata(&dir) else { continue };
        by_fs.entry(meta.dev()).or_insert(NewImages { dir, count: 0 }).count += 1;
    }
    by_fs
        .into_values()
        .filter_map(|images| {
            let free = free_bytes(&images.dir)?;
            let total = size.saturating_mul(images.count);
            (total > free).then(|| message(&images, size, total, free))
        })
        .collect()
}

fn message(images: &NewImages, size: u64, total: u64, free: u64) -> String {
    let what = if images.count == 1 {
        format!("the image file of {} (sparse)", format_size(size))
    } else {
        format!("{} image files of {} each ({} in all, sparse)", images.count, format_size(size), format_size(total))
    };
    format!(
        "{what} will not fit in the {} free on the filesystem of {}: the pool's writes will fail once that filesystem is full",
        format_size(free),
        images.dir.display()
    )
}

fn leaf_paths(spec: &VdevSpec) -> Vec<PathBuf> {
    match spec {
        VdevSpec::Disk(p) => vec![p.clone()],
        VdevSpec::Mirror(ps) => ps.clone(),
    }
}

/// Bytes free for an unprivileged user on the filesystem of `dir` (df's "Avail"), or
/// None if statvfs fails.
fn free_bytes(dir: &Path) -> Option<u64> {
    let c = CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs fills the zeroed struct we pass, from a NUL-terminated path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_larger_than_the_free_space_are_named_with_both_sizes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let free = free_bytes(dir.path()).expect("statvfs");
        let specs = [VdevSpec::Mirror(vec![dir.path().join("a.img"), dir.path().join("b.img")])];
        // Two images that each fit, but not together.
        let size = free / 2 + (1 << 30);
        let w = warnings(&specs, size);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("2 image files") && w[0].contains(&format_size(size)) && w[0].contains(" free on "),
            "{}",
            w[0]
        );
        assert!(warnings(&specs, 64 << 20).is_empty(), "small images fit");
    }

    #[test]
    fn existing_devices_are_not_counted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let img = dir.path().join("old.img");
        std::fs::write(&img, b"").expect("write");
        assert!(warnings(&[VdevSpec::Disk(img)], u64::MAX / 4).is_empty());
    }
}

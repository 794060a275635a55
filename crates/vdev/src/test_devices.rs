//! Devices in memory for the crate's unit tests (test builds only).
//!
//! Owns: `MemDevice` (a device a test can damage at any byte), a two-way mirror over two
//! of them, and an uberblock of a chosen txg.
//! Promises: nothing beyond a test's life; every byte starts zero.
//! Must never: be compiled outside `cfg(test)`.
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::label::Uberblock;
use crate::leaf::Leaf;
use crate::top::TopVdev;
use crate::tree::VdevTree;
use crate::BlockDevice;

/// A device in memory, so a test can damage one side of a mirror.
pub(crate) struct MemDevice {
    pub(crate) bytes: Mutex<Vec<u8>>,
    pub(crate) path: PathBuf,
}

impl MemDevice {
    pub(crate) fn new(name: &str) -> Arc<MemDevice> {
        Arc::new(MemDevice { bytes: Mutex::new(vec![0u8; 4 << 20]), path: PathBuf::from(name) })
    }
}

impl BlockDevice for MemDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        let b = self.bytes.lock();
        buf.copy_from_slice(&b[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.bytes.lock()[offset as usize..offset as usize + buf.len()].copy_from_slice(buf);
        Ok(())
    }
    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn size(&self) -> u64 {
        self.bytes.lock().len() as u64
    }
    fn path(&self) -> &Path {
        &self.path
    }
}

pub(crate) fn mirror() -> (VdevTree, Vec<Arc<MemDevice>>) {
    let devs = vec![MemDevice::new("a"), MemDevice::new("b")];
    let leaves = devs
        .iter()
        .enumerate()
        .map(|(i, d)| Leaf::new(i as u64 + 1, d.path.display().to_string(), Some(d.clone() as Arc<dyn BlockDevice>)))
        .collect();
    let asize = TopVdev::asize_of(4 << 20, 12);
    (VdevTree::new(vec![TopVdev::new(0, 9, 12, asize, leaves)], 12), devs)
}

pub(crate) fn ub(txg: u64) -> Uberblock {
    Uberblock { txg, pool_guid: 1, guid_sum: 3, timestamp: 0, root: [0; 64] }
}

//! Open handles and files unlinked while open.
//!
//! Owns: the count of open handles per object, the set of objects whose last name went
//! while they were open, and that set as of the last quiesce (what the syncing txg
//! records, so the next import frees them if the process died first).
//!
//! Promises: an object unlinked while open keeps its data until its last `release`,
//! then is freed in the open txg; one left unlinked by a previous run is freed at import.
//!
//! Must never: free an object that still has a name or an open handle.
use tarn_objects::Object;

use crate::{Dataset, FsError};

impl Dataset {
    /// An open handle keeps an unlinked file's data alive until its release.
    pub fn open(&self, ino: u64) -> Result<(), FsError> {
        let obj = self.os.get(ino)?;
        self.opens.lock().entry(ino).or_insert((0, obj)).0 += 1;
        Ok(())
    }

    pub fn release(&self, ino: u64) -> Result<(), FsError> {
        let last = {
            let mut opens = self.opens.lock();
            let last = match opens.get_mut(&ino) {
                Some((n, _)) => {
                    *n -= 1;
                    *n == 0
                }
                None => true,
            };
            if last {
                opens.remove(&ino);
                // The table follows the files open now, not the most ever open at once.
                tarn_arc::compact::compact(&mut *opens);
            }
            last
        };
        if last && self.unlinked.lock().remove(&ino) {
            let hold = self.hold(0)?;
            let obj = self.os.get(ino)?;
            self.os.free_object(&obj, hold.txg);
        }
        Ok(())
    }

    /// `obj` lost its last name in txg `txg`: freed now, or kept until its last handle is
    /// released.
    pub(crate) fn forget_or_keep_open(&self, obj: &Object, txg: u64) {
        if self.opens.lock().get(&obj.id()).is_some_and(|(n, _)| *n > 0) {
            self.unlinked.lock().insert(obj.id());
        } else {
            self.os.free_object(obj, txg);
        }
    }

    /// Objects unlinked while open, as of the syncing txg; the next import frees them.
    pub fn unlinked_syncing(&self) -> Vec<u64> {
        self.unlinked_at_quiesce.lock().clone()
    }

    /// Frees objects left unlinked by a previous run (called once at import).
    pub fn reclaim_unlinked(&self) -> Result<(), FsError> {
        let ids: Vec<u64> = std::mem::take(&mut *self.unlinked.lock()).into_iter().collect();
        for ino in ids {
            let hold = self.hold(0)?;
            if let Ok(obj) = self.os.get(ino) {
                self.os.free_object(&obj, hold.txg);
            }
        }
        Ok(())
    }
}

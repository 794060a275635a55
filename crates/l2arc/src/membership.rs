//! Membership of the running cache: adding a device (`pool add POOL cache DEV`), taking
//! one out (`pool remove`), and re-attaching dropped ones (`pool clear`). One change at a
//! time, under `Shared::membership`.
//!
//! Owns: the rules of joining and leaving: a new member's ring starts empty, a leaving
//! one finishes the I/O under way before its header is zeroed, a removed one keeps its
//! slot as `Removed`.
//!
//! Promises: a device that cannot be used is still listed (`Unavail`, with the reason);
//! a device and its pace are added together (asserted).
//!
//! Must never: make the pool fail for a cache device's sake, or reuse a slot (readers
//! hold plain references into the list).

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tarn_vdev::{BlockDevice, FileDevice};

use crate::{feed, CacheDev, CacheSpec, DevState, L2Arc};

impl L2Arc {
    /// True if one more device fits (`add_device` then cannot fail for want of room).
    pub fn has_room(&self) -> bool {
        self.shared.devs.len() < tarn_vdev::MAX_TOPS
    }

    /// Adds a device to the running cache (`pool add POOL cache DEV`): its ring starts
    /// empty whatever it held, and it is fed at once if the cache is started. A device
    /// whose header cannot be written is kept as `Unavail` with the reason (the cache is
    /// a cache: its config names it, status says why it is unused).
    pub fn add_device(&self, spec: &CacheSpec, dev: Arc<dyn BlockDevice>) -> Result<(), AddError> {
        let _one_at_a_time = self.shared.membership.lock();
        self.add_device_locked(spec, dev)
    }

    /// `add_device` with the membership lock held by the caller.
    fn add_device_locked(&self, spec: &CacheSpec, dev: Arc<dyn BlockDevice>) -> Result<(), AddError> {
        let s = &self.shared;
        if s.devs.iter().any(|d| d.guid == spec.guid && d.state() != DevState::Removed) {
            return Err(AddError::Duplicate(spec.guid));
        }
        let d = match CacheDev::attach(spec.guid, s.pool_guid, dev) {
            Ok((d, kept_a_ring)) => {
                if kept_a_ring {
                    d.start_over(); // a new member: nothing it held before counts
                }
                d
            }
            Err(e) => CacheDev::unavailable(spec.guid, spec.path.clone(), format!("cannot initialise: {e}")),
        };
        assert_eq!(s.devs.len(), s.paces.len(), "invariant broken: a cache device without its pace");
        s.paces.push(feed::Pace::default()).map_err(|_| AddError::Full)?;
        let index = s.devs.push(Arc::new(d)).map_err(|_| AddError::Full)?;
        if s.started.load(Ordering::Acquire) {
            self.spawn_worker(index);
        }
        Ok(())
    }

    /// Takes device `guid` out of the running cache: it stops being fed and read, the
    /// reads and writes under way on it finish, then its header is zeroed and the device
    /// let go (`CacheDev::leave`). Returns its path, or `None` if the cache has no such
    /// device. An I/O error zeroing the header is returned after the device left.
    pub fn remove_device(&self, guid: u64) -> Result<Option<PathBuf>, std::io::Error> {
        let _one_at_a_time = self.shared.membership.lock();
        let Some(d) = self.shared.devs.iter().find(|d| d.guid == guid && d.state() != DevState::Removed) else {
            return Ok(None);
        };
        d.leave()?;
        Ok(Some(d.path.clone()))
    }

    /// Tries again every device that was dropped (`FAULTED`), and with `autoreplace` (the
    /// pool's `cacheautoreplace=on`) every one that could not be used (`UNAVAIL`): each
    /// leaves its slot and is opened again at its path as a new member, its ring started
    /// afresh (what it held is not trusted). What `tarn pool clear` does to cache devices,
    /// as `zpool clear` brings faulted devices back. Returns the paths re-attached; a
    /// device that still cannot be opened stays `UNAVAIL` with the reason.
    pub fn reattach(&self, autoreplace: bool) -> Vec<PathBuf> {
        let _one_at_a_time = self.shared.membership.lock();
        let again = |d: &Arc<CacheDev>| match d.state() {
            DevState::Faulted => true,
            DevState::Unavail => autoreplace,
            _ => false,
        };
        let dropped: Vec<Arc<CacheDev>> = self.shared.devs.iter().filter(|d| again(d)).cloned().collect();
        let mut back = Vec::new();
        for d in dropped {
            // Its header may not be writable (a device still failing): it starts over anyway.
            let _ = d.leave();
            let spec = CacheSpec { guid: d.guid, path: d.path.clone() };
            let added = match FileDevice::open(&spec.path) {
                Ok(f) => self.add_device_locked(&spec, Arc::new(f)),
                Err(e) => {
                    let gone = CacheDev::unavailable(spec.guid, spec.path.clone(), format!("cannot open: {e}"));
                    self.push_device(gone)
                }
            };
            if added.is_ok() && self.shared.devs.iter().any(|n| n.guid == d.guid && n.usable()) {
                back.push(spec.path);
            }
        }
        back
    }

    /// Appends a device that is not used (with its pace, as every device has).
    fn push_device(&self, d: CacheDev) -> Result<(), AddError> {
        let s = &self.shared;
        s.paces.push(feed::Pace::default()).map_err(|_| AddError::Full)?;
        s.devs.push(Arc::new(d)).map_err(|_| AddError::Full)?;
        Ok(())
    }
}

/// Why `add_device` refused a device.
#[derive(Debug, thiserror::Error)]
pub enum AddError {
    #[error("cache device {0:016x} is in the cache already")]
    Duplicate(u64),
    #[error("too many cache devices added while the pool was open (at most {max}); export and import it first", max = tarn_vdev::MAX_TOPS)]
    Full,
}

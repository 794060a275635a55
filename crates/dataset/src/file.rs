//! A file's bytes and attributes: getattr, read, write, setattr (truncate included),
//! punch a hole, and atime on read.
//!
//! Owns: the checks a data change makes before it lands (the right kind of object, an
//! offset that does not overflow, room in the pool), and queueing each change in the
//! intent log with what the log policy needs to know (the dataset's `logbias`, the write's
//! size).
//!
//! Promises: a write that cannot fit gets `NoSpace` and stores nothing; each change joins
//! one txg through its hold and locks only its object; with `sync=always` a write returns
//! only once it is durable.
//!
//! Must never: decide how a write reaches the log (the log policy does), or hold an
//! object lock across a wait for a txg.
use tarn_objects::{ObjType, Timespec};
use tarn_zil::{LoggedWrite, Op};

use crate::attr::{atime_is_stale, Attr, SetAttr};
use crate::{Dataset, FsError, SyncMode, META_CHARGE};

impl Dataset {
    pub fn getattr(&self, ino: u64) -> Result<Attr, FsError> {
        let obj = self.os.get(ino)?;
        let st = obj.lock();
        Ok(Attr::of(ino, st.dnode()))
    }

    pub fn read(&self, ino: u64, off: u64, buf: &mut [u8]) -> Result<usize, FsError> {
        let obj = self.os.get(ino)?;
        let st = obj.lock();
        if st.dnode().obj_type == ObjType::Dir {
            return Err(FsError::IsDir);
        }
        let policy = self.eff.read().primarycache;
        Ok(st.read(self.os.ctx(), off, buf, policy)?)
    }

    /// Records a read of `ino` in its atime, like Linux's relatime: only with `atime=on`,
    /// and only when the old atime is not newer than mtime or ctime or is a day old, so a
    /// file read over and over dirties its dnode at most once per change or day. ctime is
    /// left alone (an access is not a change) and nothing goes to the intent log: atime
    /// is not worth an fsync's cost, it is committed with the next txg (ZFS does the same).
    pub fn accessed(&self, ino: u64) -> Result<(), FsError> {
        if self.read_only || !self.eff.read().atime {
            return Ok(());
        }
        let now = Timespec::now();
        if !atime_is_stale(self.os.get(ino)?.lock().dnode(), now) {
            return Ok(());
        }
        let _hold = self.hold(0)?;
        let obj = self.os.get(ino)?;
        let mut st = obj.lock();
        if !atime_is_stale(st.dnode(), now) {
            return Ok(()); // another reader updated it meanwhile
        }
        st.note_access(now);
        drop(st);
        self.os.mark_dirty(ino);
        Ok(())
    }

    pub fn write(&self, ino: u64, off: u64, data: &[u8]) -> Result<usize, FsError> {
        if data.is_empty() {
            return Ok(0);
        }
        off.checked_add(data.len() as u64).ok_or_else(|| FsError::Invalid("offset too large".into()))?;
        let eff = self.effective();
        self.reserve_or_wait(data.len() as u64)?;
        let txg = {
            let hold = self.hold(data.len() as u64)?;
            let obj = self.os.get(ino)?;
            let mut st = obj.lock();
            match st.dnode().obj_type {
                ObjType::File => {}
                ObjType::Dir => return Err(FsError::IsDir),
                _ => return Err(FsError::Invalid("not a regular file".into())),
            }
            let dirtied = st.write(self.zio(), hold.txg, off, data, eff.recordsize)?;
            let blksz = st.dnode().blksz as u64;
            drop(st);
            self.os.ctx().txg.settle_dirty(data.len() as u64, dirtied);
            if self.logs(eff.sync) {
                let len = data.len() as u64;
                let w = LoggedWrite {
                    txg: hold.txg,
                    dataset: self.id,
                    obj: ino,
                    offset: off,
                    len,
                    blksz,
                    logbias: eff.logbias,
                };
                self.zil.log_write(&w);
            }
            self.os.mark_dirty(ino);
            hold.txg
        };
        if eff.sync == SyncMode::Always {
            self.commit_log(ino, txg)?;
        }
        Ok(data.len())
    }

    /// Reserves room for `bytes` of new data. If the pool looks full, waits once for the
    /// open txg to commit and asks again: a deleted file's blocks and the dirty bytes of
    /// data that will never be written (the file is gone) are given back only when the
    /// txg that freed them commits, so without this wait a writer got ENOSPC for up to
    /// a txg timeout after `rm` (ZFS waits for the txg the same way). Called without a
    /// txg hold, so the wait cannot block the commit it waits for.
    fn reserve_or_wait(&self, bytes: u64) -> Result<(), FsError> {
        match self.space.reserve(bytes) {
            Err(FsError::NoSpace) => {
                self.os.ctx().txg.sync_all()?;
                self.space.reserve(bytes)
            }
            r => r,
        }
    }

    pub fn setattr(&self, ino: u64, set: &SetAttr) -> Result<Attr, FsError> {
        let hold = self.hold(META_CHARGE)?;
        let obj = self.os.get(ino)?;
        let mut st = obj.lock();
        if let Some(size) = set.size {
            if st.dnode().obj_type != ObjType::File {
                return Err(FsError::Invalid("size can only be set on a regular file".into()));
            }
            if size > st.dnode().size {
                self.space.reserve(0)?;
                let recordsize = self.eff.read().recordsize;
                st.fit_block_size(self.zio(), size, recordsize)?;
            }
            st.truncate(self.zio(), hold.txg, size)?;
            self.log(hold.txg, Op::Truncate { obj: ino, size });
        }
        let ts = |t: Option<Timespec>| t.map(|t| (t.sec, t.nsec));
        self.log(
            hold.txg,
            Op::SetAttr {
                obj: ino,
                mode: set.mode,
                uid: set.uid,
                gid: set.gid,
                atime: ts(set.atime),
                mtime: ts(set.mtime),
            },
        );
        st.set_attrs(hold.txg, &set.attr_change());
        let attr = Attr::of(ino, st.dnode());
        drop(st);
        self.os.mark_dirty(ino);
        Ok(attr)
    }

    /// Zeros a range without changing the size (fallocate PUNCH_HOLE).
    pub fn punch_hole(&self, ino: u64, off: u64, len: u64) -> Result<(), FsError> {
        let hold = self.hold(META_CHARGE)?;
        let obj = self.os.get(ino)?;
        obj.lock().punch_hole(self.zio(), hold.txg, off, len)?;
        self.log(hold.txg, Op::PunchHole { obj: ino, offset: off, len });
        self.os.mark_dirty(ino);
        Ok(())
    }
}

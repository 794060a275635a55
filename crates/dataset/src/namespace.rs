//! Names: lookup, readdir, create, link, unlink, rmdir, rename, readlink.
//!
//! Owns: the POSIX rules of names — a valid name, no hard link to a directory, rmdir only
//! of an empty directory, rename's replace and noreplace, a directory never moved into
//! itself — and the order of a namespace change: check, log, then change.
//!
//! Promises: namespace changes of one dataset are serialised by `ns` (rename is atomic);
//! each joins one txg through its hold and is queued in the intent log before it is
//! applied; an object whose last name goes while it is open lives on until `release`.
//!
//! Must never: hold two object locks at once, except `create` filling in its new object
//! under its parent's lock (`FreshObject`); lock order is txg hold, then `ns`, then one
//! object at a time.
use tarn_objects::{DirEntry, Dnode, ObjType};
use tarn_zil::Op;

use crate::attr::{Attr, FileKind, NewObject};
use crate::{Dataset, FsError, META_CHARGE, NAME_MAX, ROOT_ID};

fn check_name(name: &[u8]) -> Result<(), FsError> {
    if name.len() > NAME_MAX {
        return Err(FsError::NameTooLong);
    }
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0) {
        return Err(FsError::Invalid(format!("bad file name {:?}", String::from_utf8_lossy(name))));
    }
    Ok(())
}

impl Dataset {
    pub fn lookup(&self, dir: u64, name: &[u8]) -> Result<Attr, FsError> {
        let entry = self.entry(dir, name)?.ok_or(FsError::NotFound)?;
        self.getattr(entry.obj)
    }

    fn entry(&self, dir: u64, name: &[u8]) -> Result<Option<DirEntry>, FsError> {
        let d = self.os.get(dir)?;
        let mut st = d.lock();
        Ok(st.lookup(self.zio(), name)?)
    }

    /// Entries of a directory, sorted by name (without "." and "..").
    pub fn readdir(&self, dir: u64) -> Result<Vec<(Vec<u8>, u64, FileKind)>, FsError> {
        let d = self.os.get(dir)?;
        let mut st = d.lock();
        let entries = st.entries(self.zio())?;
        Ok(entries.iter().map(|(n, e)| (n.clone(), e.obj, FileKind::of(e.obj_type))).collect())
    }

    pub fn parent_of(&self, dir: u64) -> Result<u64, FsError> {
        Ok(self.os.get(dir)?.lock().dnode().parent)
    }

    /// Creates `name` in `dir`.
    pub fn create(
        &self,
        dir: u64,
        name: &[u8],
        what: NewObject,
        mode: u32,
        uid: u32,
        gid: u32,
    ) -> Result<Attr, FsError> {
        check_name(name)?;
        let hold = self.hold(META_CHARGE)?;
        let _ns = self.ns.lock();
        let parent = self.os.get(dir)?;
        let mut pst = parent.lock();
        if pst.lookup(self.zio(), name)?.is_some() {
            return Err(FsError::Exists);
        }
        let kind = what.kind();
        let mut d = Dnode::new(kind.obj_type(), 512, kind.mode_with_type(mode), hold.txg);
        d.uid = uid;
        d.gid = gid;
        d.parent = dir;
        if let NewObject::Special { rdev } = what {
            d.rdev = rdev;
        }
        if kind == FileKind::Dir {
            d.nlink = 2;
        }
        let (rdev, full_mode) = (d.rdev, d.mode);
        let obj = self.os.alloc(d);
        let target = if let NewObject::Symlink(t) = what { t.to_vec() } else { Vec::new() };
        self.log(
            hold.txg,
            Op::Create {
                parent: dir,
                obj: obj.id(),
                kind: kind.obj_type() as u8,
                mode: full_mode,
                uid,
                gid,
                rdev,
                name: name.to_vec(),
                target,
            },
        );
        {
            // The one second lock: the new object, reachable by no name yet.
            let mut st = obj.lock();
            match what {
                NewObject::Dir => st.init_dir(hold.txg),
                NewObject::Symlink(target) => {
                    st.write(self.zio(), hold.txg, 0, target, 4096)?;
                }
                _ => {}
            }
            st.created_in(hold.txg);
        }
        pst.add_entry(self.zio(), hold.txg, name, DirEntry { obj: obj.id(), obj_type: kind.obj_type() })?;
        drop(pst);
        self.os.mark_dirty(dir);
        self.getattr(obj.id())
    }

    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>, FsError> {
        let obj = self.os.get(ino)?;
        let st = obj.lock();
        if st.dnode().obj_type != ObjType::Symlink {
            return Err(FsError::Invalid("not a symbolic link".into()));
        }
        let mut buf = vec![0u8; st.dnode().size as usize];
        let n = st.read(self.os.ctx(), 0, &mut buf, self.effective().primarycache)?;
        buf.truncate(n);
        Ok(buf)
    }

    /// Adds a hard link `newname` in `newdir` to `ino`.
    pub fn link(&self, ino: u64, newdir: u64, newname: &[u8]) -> Result<Attr, FsError> {
        check_name(newname)?;
        let hold = self.hold(META_CHARGE)?;
        let _ns = self.ns.lock();
        let obj = self.os.get(ino)?;
        let obj_type = obj.lock().dnode().obj_type;
        if obj_type == ObjType::Dir {
            return Err(FsError::Invalid("hard links to directories are not allowed".into()));
        }
        let d = self.os.get(newdir)?;
        let mut dst = d.lock();
        if dst.lookup(self.zio(), newname)?.is_some() {
            return Err(FsError::Exists);
        }
        dst.add_entry(self.zio(), hold.txg, newname, DirEntry { obj: ino, obj_type })?;
        self.log(hold.txg, Op::Link { obj: ino, dir: newdir, name: newname.to_vec() });
        drop(dst);
        self.os.mark_dirty(newdir);
        obj.lock().add_link(hold.txg);
        self.os.mark_dirty(ino);
        self.getattr(ino)
    }

    pub fn unlink(&self, dir: u64, name: &[u8]) -> Result<(), FsError> {
        self.remove(dir, name, false)
    }

    pub fn rmdir(&self, dir: u64, name: &[u8]) -> Result<(), FsError> {
        self.remove(dir, name, true)
    }

    fn remove(&self, dir: u64, name: &[u8], want_dir: bool) -> Result<(), FsError> {
        let hold = self.hold(0)?;
        let _ns = self.ns.lock();
        let entry = self.entry(dir, name)?.ok_or(FsError::NotFound)?;
        let is_dir = entry.obj_type == ObjType::Dir;
        match (want_dir, is_dir) {
            (false, true) => return Err(FsError::IsDir),
            (true, false) => return Err(FsError::NotDir),
            _ => {}
        }
        if is_dir && !self.dir_is_empty(entry.obj)? {
            return Err(FsError::NotEmpty);
        }
        self.log(hold.txg, Op::Remove { parent: dir, name: name.to_vec(), is_dir });
        self.drop_entry(dir, name, hold.txg)?;
        self.drop_link(entry.obj, hold.txg)
    }

    fn dir_is_empty(&self, dir: u64) -> Result<bool, FsError> {
        let d = self.os.get(dir)?;
        let mut st = d.lock();
        Ok(st.entries(self.zio())?.is_empty())
    }

    fn drop_entry(&self, dir: u64, name: &[u8], txg: u64) -> Result<(), FsError> {
        self.os.get(dir)?.lock().remove_entry(self.zio(), txg, name)?;
        self.os.mark_dirty(dir);
        Ok(())
    }

    /// One name less for `ino`; frees it when no name and no open handle is left.
    fn drop_link(&self, ino: u64, txg: u64) -> Result<(), FsError> {
        let obj = self.os.get(ino)?;
        let names_left = obj.lock().drop_link(txg);
        self.os.mark_dirty(ino);
        if names_left == 0 {
            self.forget_or_keep_open(&obj, txg);
        }
        Ok(())
    }

    /// Renames atomically; an existing target is replaced (unless `noreplace`).
    pub fn rename(&self, sdir: u64, sname: &[u8], ddir: u64, dname: &[u8], noreplace: bool) -> Result<(), FsError> {
        check_name(dname)?;
        let hold = self.hold(META_CHARGE)?;
        let _ns = self.ns.lock();
        let src = self.entry(sdir, sname)?.ok_or(FsError::NotFound)?;
        let src_is_dir = src.obj_type == ObjType::Dir;
        if src_is_dir && sdir != ddir && self.is_ancestor(src.obj, ddir)? {
            return Err(FsError::Invalid("cannot move a directory into itself".into()));
        }
        if let Some(dst) = self.entry(ddir, dname)? {
            if dst.obj == src.obj {
                return Ok(());
            }
            if noreplace {
                return Err(FsError::Exists);
            }
            let dst_is_dir = dst.obj_type == ObjType::Dir;
            match (src_is_dir, dst_is_dir) {
                (true, false) => return Err(FsError::NotDir),
                (false, true) => return Err(FsError::IsDir),
                _ => {}
            }
            if dst_is_dir && !self.dir_is_empty(dst.obj)? {
                return Err(FsError::NotEmpty);
            }
            self.log_rename(hold.txg, sdir, sname, ddir, dname, noreplace);
            self.drop_entry(ddir, dname, hold.txg)?;
            self.drop_link(dst.obj, hold.txg)?;
        } else {
            self.log_rename(hold.txg, sdir, sname, ddir, dname, noreplace);
        }
        self.drop_entry(sdir, sname, hold.txg)?;
        self.os.get(ddir)?.lock().add_entry(self.zio(), hold.txg, dname, src)?;
        self.os.mark_dirty(ddir);
        self.os.get(src.obj)?.lock().set_parent(ddir, hold.txg);
        self.os.mark_dirty(src.obj);
        Ok(())
    }

    fn log_rename(&self, txg: u64, sdir: u64, sname: &[u8], ddir: u64, dname: &[u8], noreplace: bool) {
        self.log(txg, Op::Rename { sdir, sname: sname.to_vec(), ddir, dname: dname.to_vec(), noreplace });
    }

    /// True if `dir` is `ancestor` or lies below it.
    fn is_ancestor(&self, ancestor: u64, mut dir: u64) -> Result<bool, FsError> {
        loop {
            if dir == ancestor {
                return Ok(true);
            }
            if dir == ROOT_ID {
                return Ok(false);
            }
            dir = self.parent_of(dir)?;
        }
    }
}

//! The check of the dead lists against the walks they replace (tests and `tarn` debug
//! use): for each snapshot whose next tree's list is known, the entries born after the
//! previous snapshot must be exactly the blocks only that snapshot holds, and no entry
//! may be born after the snapshot.
//!
//! Owns: nothing but the comparison.
//!
//! Promises: reads only; run with the pool quiet (no writer, no snapshot command), as
//! the trees and lists it compares must not move under it.
//!
//! Must never: change a list or free a block.
use std::collections::BTreeSet;

use tarn_zio::BlockPtr;

use super::deadlist::DeadList;
use super::for_each_unique;

use crate::pool::Pool;

type Key = (u16, u64, u64);

fn key(bp: &BlockPtr) -> Key {
    (bp.vdev, bp.offset, bp.birth)
}

impl Pool {
    /// Compares every known dead list with the walk it stands for; returns how many
    /// snapshots were checked, or the first difference. For tests: the pool must be
    /// quiet (synced, nothing writing).
    #[doc(hidden)]
    pub fn verify_dead_lists(&self) -> Result<usize, String> {
        let _serial = self.inner.snap_lock.lock();
        self.sync().map_err(|e| e.to_string())?;
        let _reclaim = self.inner.ctx.reclaim.reading();
        let zio = &self.inner.ctx.zio;
        let datasets: Vec<_> =
            self.inner.datasets.read().iter().map(|(n, (m, ds))| (n.clone(), m.clone(), ds.clone())).collect();
        let mut checked = 0;
        for (name, meta, ds) in datasets {
            let list = self.inner.snaps.read().get(&meta.id).cloned().unwrap_or_default();
            let head_dead = self.inner.head_dead.lock().get(&meta.id).cloned().unwrap_or(Some(DeadList::default()));
            let head_meta = ds.meta_dnode();
            for (i, snap) in list.iter().enumerate() {
                let prev = if i > 0 { list[i - 1].txg } else { meta.origin.as_ref().map_or(0, |o| o.txg) };
                let (next_meta, next_dead) = match list.get(i + 1) {
                    Some(n) => (&n.meta, n.dead.clone()),
                    None => (&head_meta, head_dead.clone()),
                };
                let Some(next_dead) = next_dead else { continue };
                let entries = next_dead.read_all(zio).map_err(|e| format!("{name}@{}: {e}", snap.name))?;
                let counted = next_dead.bytes_born_after(zio, prev).map_err(|e| e.to_string())?;
                let summed: u64 = entries.iter().filter(|bp| bp.birth > prev).map(|bp| u64::from(bp.psize)).sum();
                if counted != summed {
                    return Err(format!("{name}@{}: chunk records count {counted} bytes, entries {summed}", snap.name));
                }
                if let Some(young) = entries.iter().find(|bp| bp.birth > snap.txg) {
                    return Err(format!("{name}@{}: an entry born at {} after it", snap.name, young.birth));
                }
                let listed: BTreeSet<Key> = entries.iter().filter(|bp| bp.birth > prev).map(key).collect();
                if listed.len() != entries.iter().filter(|bp| bp.birth > prev).count() {
                    return Err(format!("{name}@{}: a block is listed twice", snap.name));
                }
                let mut walked = BTreeSet::new();
                for_each_unique(zio, &snap.meta, prev, snap.txg, next_meta, |bp| {
                    walked.insert(key(bp));
                });
                if listed != walked {
                    let missing = walked.difference(&listed).count();
                    let extra = listed.difference(&walked).count();
                    return Err(format!(
                        "{name}@{}: the dead list misses {missing} of the {} blocks only it holds and names {extra} others",
                        snap.name,
                        walked.len()
                    ));
                }
                checked += 1;
            }
            if !list.is_empty() {
                let origin_txg = meta.origin.as_ref().map_or(0, |o| o.txg);
                let listed = self.usedbysnapshots_listed(&list, head_dead.as_ref(), origin_txg);
                let walked = self.usedbysnapshots_walked(&list, &head_meta, origin_txg);
                if listed.is_some_and(|l| l != walked) {
                    return Err(format!("{name}: usedbysnapshots {listed:?} from the dead lists, {walked} walked"));
                }
            }
        }
        Ok(checked)
    }

    /// Makes the commits write roots of MOS version `version` (an older one: no dead
    /// lists), as an older tarn did. For tests of importing older pools.
    #[doc(hidden)]
    pub fn write_root_version_for_test(&self, version: u32) {
        assert!((crate::mos::DEADLIST_VERSION - 1..=crate::mos::MOS_VERSION).contains(&version));
        self.inner.root_version.store(version, std::sync::atomic::Ordering::Relaxed);
    }

    /// Where the chunks of a tree's dead list lie — `(vdev, device offset, psize)` each —
    /// for tests that damage one: `tree` is a snapshot (`POOL/DS@NAME`) or a head. Empty
    /// when the list has no chunk or is not known.
    #[doc(hidden)]
    pub fn dead_list_chunks_for_test(&self, tree: &str) -> Vec<(u16, u64, u32)> {
        self.sync().expect("sync");
        let list = if tree.contains('@') {
            self.find_snapshot(tree).expect("a snapshot").2.dead
        } else {
            let id = self.inner.datasets.read().get(tree).expect("a dataset").0.id;
            self.inner.head_dead.lock().get(&id).cloned().flatten()
        };
        list.iter().flat_map(|l| &l.chunks).map(|c| (c.bp.vdev, c.bp.offset, c.bp.psize)).collect()
    }
}

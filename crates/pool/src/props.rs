//! Dataset properties: set, inherit, get, and the effective values each dataset runs
//! with (a local value, else the nearest ancestor's, else the default, as in ZFS).
//!
//! Owns: local property values (in each dataset's MOS record) and their inheritance.
//!
//! Promises: an unknown name, a read-only property or an invalid value is refused with
//! a `PropError` naming what is allowed, and changes nothing; a change joins the open
//! txg (it is committed with the MOS) and reaches every dataset below at once.
//!
//! Must never: store a value its definition did not normalise, or hold the `datasets`
//! lock while waiting for a txg hold.
use std::collections::BTreeMap;

use tarn_dataset::props::{self, format_size, Effective, READONLY};
use tarn_dataset::FsError;
use tarn_l2arc::SecondaryCache;
use tarn_zio::CachePolicy;

use crate::datasets::{subtree_charged, subtree_space};
use crate::error::{PoolError, PropError};
use crate::pool::{Datasets, Pool};

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct PropRow {
    pub property: String,
    pub value: String,
    pub source: String,
    /// The exact number behind a size or ratio, for `-p` and scripts.
    pub raw: Option<String>,
}

/// The value to store for a local setting of `name` to `value`; refuses unknown names,
/// read-only properties and invalid values, naming what is allowed.
pub(crate) fn normalized(name: &str, value: &str) -> Result<String, PropError> {
    if READONLY.contains(&name) {
        return Err(PropError::ReadOnly(name.into()));
    }
    let def = props::find(name).ok_or_else(|| PropError::Unknown(name.into()))?;
    (def.validate)(value).ok_or_else(|| PropError::InvalidValue {
        name: name.into(),
        value: value.into(),
        help: def.help,
    })
}

/// The local properties to store for `props` (`-o NAME=VALUE` of a create or a clone),
/// each `normalized`: one refused setting refuses them all, so nothing is half-applied.
pub(crate) fn normalized_all(props: &[(&str, &str)]) -> Result<BTreeMap<String, String>, PropError> {
    props.iter().map(|(name, value)| Ok((name.to_string(), normalized(name, value)?))).collect()
}

impl Pool {
    /// Sets a property locally on `ds`; refuses unknown names, read-only properties and
    /// invalid values, naming what is allowed.
    pub fn set_property(&self, ds: &str, name: &str, value: &str) -> Result<(), PoolError> {
        let norm = normalized(name, value)?;
        let hold = self.inner.ctx.txg.hold(1024).map_err(FsError::from)?;
        {
            let mut sets = self.inner.datasets.write();
            let (meta, _) = sets.get_mut(ds).ok_or_else(|| PoolError::NoSuchDataset(ds.into()))?;
            meta.props.insert(name.to_string(), norm);
        }
        drop(hold);
        self.refresh_effective();
        Ok(())
    }

    /// Removes a local setting, so the value is inherited again (`zfs inherit`).
    pub fn inherit_property(&self, ds: &str, name: &str) -> Result<(), PoolError> {
        props::find(name).ok_or_else(|| PropError::Unknown(name.into()))?;
        let hold = self.inner.ctx.txg.hold(1024).map_err(FsError::from)?;
        {
            let mut sets = self.inner.datasets.write();
            let (meta, _) = sets.get_mut(ds).ok_or_else(|| PoolError::NoSuchDataset(ds.into()))?;
            meta.props.remove(name);
        }
        drop(hold);
        self.refresh_effective();
        Ok(())
    }

    /// `tarn get`: every property (or one) with its value and source.
    pub fn get_properties(&self, ds: &str, which: Option<&str>) -> Result<Vec<PropRow>, PoolError> {
        // Walks and names first: neither runs under the `datasets` lock. The reclaim
        // section opens before the head is taken (see `charged_by_dataset`).
        let (space, origin) = {
            let _reading = self.inner.ctx.reclaim.reading();
            let sets = self.inner.datasets.read();
            let Some((meta, head)) = sets.get(ds) else {
                return Err(PoolError::NoSuchDataset(ds.into()));
            };
            let (meta, head) = (meta.clone(), head.clone());
            drop(sets);
            (self.snap_space(&meta, &head), self.origin_name(meta.origin.as_ref()))
        };
        let charged = self.charged_by_dataset(Some(ds));
        let sets = self.inner.datasets.read();
        let Some((meta, head)) = sets.get(ds) else {
            return Err(PoolError::NoSuchDataset(ds.into()));
        };
        let (_, logical) = subtree_space(&sets, ds);
        let referenced = head.used().physical;
        // ZFS's sum: what the dataset, its snapshots and its children hold.
        let used = subtree_charged(&charged, ds);
        let ratio = if used == 0 { 1.0 } else { logical as f64 / used as f64 };
        let row = |property: &str, value: String, raw: Option<String>| PropRow {
            property: property.into(),
            value,
            source: "-".into(),
            raw,
        };
        let available = self.available();
        let mut rows = vec![
            row("type", "filesystem".into(), None),
            row("creation", meta.creation.to_string(), None),
            row("used", format_size(used), Some(used.to_string())),
            row("referenced", format_size(referenced), Some(referenced.to_string())),
            row("usedbysnapshots", format_size(space.usedbysnapshots), Some(space.usedbysnapshots.to_string())),
            row("usedbydataset", format_size(space.usedbydataset), Some(space.usedbydataset.to_string())),
            row("written", format_size(space.written), Some(space.written.to_string())),
            row("origin", origin, None),
            row("available", format_size(available), Some(available.to_string())),
            row("logicalused", format_size(logical), Some(logical.to_string())),
            row("compressratio", format!("{ratio:.2}x"), Some(format!("{ratio:.4}"))),
            row("receive_resume_token", Self::token_row(&sets, ds), None),
        ];
        for def in props::PROPS {
            let (value, source) = Self::resolve(&sets, ds, def.name);
            rows.push(PropRow { property: def.name.into(), value, source, raw: None });
        }
        if let Some(w) = which {
            if props::find(w).is_none() && !READONLY.contains(&w) {
                return Err(PropError::Unknown(w.into()).into());
            }
            rows.retain(|r| r.property == w);
        }
        Ok(rows)
    }

    /// The resume token of an interrupted receive into `ds` (or of `ds`, the hidden
    /// dataset of one), "-" for none.
    fn token_row(sets: &Datasets, ds: &str) -> String {
        let own = sets.get(ds).and_then(|(m, _)| m.props.get(crate::replication::TOKEN_PROP));
        let hidden = format!("{ds}{}", crate::replication::RECV_SUFFIX);
        let theirs = sets.get(&hidden).and_then(|(m, _)| m.props.get(crate::replication::TOKEN_PROP));
        own.or(theirs).cloned().unwrap_or_else(|| "-".into())
    }

    /// Value and source of a settable property, walking up the dataset tree.
    pub(crate) fn resolve(sets: &Datasets, ds: &str, name: &str) -> (String, String) {
        let mut cur = ds;
        loop {
            if let Some(v) = sets.get(cur).and_then(|(meta, _)| meta.props.get(name)) {
                let source = if cur == ds { "local".to_string() } else { format!("inherited from {cur}") };
                return (v.clone(), source);
            }
            match cur.rsplit_once('/') {
                Some((parent, _)) => cur = parent,
                None => break,
            }
        }
        let def = props::find(name).expect("resolve is asked only for known property names");
        (def.default.to_string(), "default".to_string())
    }

    /// Hands every dataset its effective values again (after a change or a new dataset),
    /// and the L2ARC every dataset's `secondarycache`.
    pub(crate) fn refresh_effective(&self) {
        let sets = self.inner.datasets.read();
        for (name, (_, ds)) in sets.iter() {
            ds.set_effective(Effective::from_values(|p| Self::resolve(&sets, name, p).0));
        }
        drop(sets);
        self.refresh_secondarycache();
    }

    /// Tells the L2ARC (if the pool has one) which datasets' blocks it may keep.
    pub(crate) fn refresh_secondarycache(&self) {
        let Some(l2) = self.inner.ctx.zio.l2arc() else { return };
        let sets = self.inner.datasets.read();
        let policy = |p: CachePolicy| match p {
            CachePolicy::All => SecondaryCache::All,
            CachePolicy::Metadata => SecondaryCache::Metadata,
            CachePolicy::None => SecondaryCache::None,
        };
        l2.set_secondarycache(sets.values().map(|(_, ds)| (ds.id, policy(ds.effective().secondarycache))));
    }
}

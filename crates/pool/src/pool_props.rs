//! Pool properties (`tarn pool set POOL PROP=VALUE`, `tarn pool get POOL`): settings of
//! the whole pool, kept in the MOS (`Mos::pool_props`, only those set away from their
//! default).
//!
//! One today: `cacheautoreplace` (on|off, default on). On: at import, a configured cache
//! device found blank — the cloud VM's ephemeral NVMe after a move — or holding anything
//! but this pool's cache is initialised and attached by itself, and status says so. Off:
//! it is left untouched and shown UNAVAIL with the reason (`tarn pool remove` and `add`
//! take it into use).
//!
//! Owns: the definitions, their validation, the values of the open pool.
//! Promises: an unknown property or value is refused naming what is allowed, and changes
//! nothing; a value set is in the root of the txg it was set in or a later one.
//! Must never: need a MOS version of its own — a tarn that does not know the field runs
//! with the defaults, which is what every tarn before it did.
use std::collections::BTreeMap;

use crate::error::{PoolError, PropError};
use crate::pool::Pool;

/// A pool property: its name, default, allowed values and how they read in a message.
type Def = (&'static str, &'static str, &'static [&'static str], &'static str);

const POOL_PROPS: &[Def] = &[("cacheautoreplace", "on", &["on", "off"], "on | off")];

/// Every pool property's name, for the message refusing an unknown one.
pub(crate) fn pool_prop_names() -> String {
    POOL_PROPS.iter().map(|d| d.0).collect::<Vec<_>>().join(", ")
}

/// One pool property as `tarn pool get` shows it.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct PoolPropRow {
    pub name: String,
    pub value: String,
    /// `local` (set) or `default`.
    pub source: String,
}

/// The definition of pool property `name`.
fn find(name: &str) -> Result<Def, PropError> {
    POOL_PROPS.iter().copied().find(|d| d.0 == name).ok_or_else(|| PropError::UnknownPool(name.to_string()))
}

impl Pool {
    /// Sets pool property `name` (see the module); the default value clears the setting.
    pub fn set_pool_property(&self, name: &str, value: &str) -> Result<(), PoolError> {
        let (name, default, allowed, help) = find(name)?;
        if !allowed.contains(&value) {
            return Err(PropError::InvalidValue { name: name.to_string(), value: value.to_string(), help }.into());
        }
        // Under a txg hold, so the change is in the root of the open txg (or a later one).
        let hold = self.inner.ctx.txg.hold(256).map_err(tarn_dataset::FsError::from)?;
        let mut props = self.inner.pool_props.lock();
        if value == default {
            props.remove(name);
        } else {
            props.insert(name.to_string(), value.to_string());
        }
        drop((props, hold));
        Ok(())
    }

    /// Every pool property (or the one named), with its value and source.
    pub fn get_pool_properties(&self, which: Option<&str>) -> Result<Vec<PoolPropRow>, PoolError> {
        let props = self.inner.pool_props.lock();
        let row = |(name, default, _, _): Def| {
            let (value, source) = match props.get(name) {
                Some(v) => (v.clone(), "local"),
                None => (default.to_string(), "default"),
            };
            PoolPropRow { name: name.to_string(), value, source: source.to_string() }
        };
        match which {
            Some(name) => Ok(vec![row(find(name)?)]),
            None => Ok(POOL_PROPS.iter().copied().map(row).collect()),
        }
    }

    /// `cacheautoreplace`: whether import initialises a cache device it finds blank or
    /// foreign.
    pub(crate) fn cache_autoreplace(&self) -> bool {
        self.inner.pool_props.lock().get("cacheautoreplace").is_none_or(|v| v == "on")
    }
}

/// The values a MOS recorded, keeping only known properties with allowed values (a newer
/// tarn's are not guessed at).
pub(crate) fn restore(recorded: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    recorded
        .iter()
        .filter(|(name, value)| find(name).is_ok_and(|d| d.2.contains(&value.as_str())))
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect()
}

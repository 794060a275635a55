//! Commands on datasets and their properties: `ds create|destroy|list`, `set`, `get`,
//! `inherit`.
//!
//! Owns: the order of a command's changes (a dataset is created before its `-o`
//! properties are set; a mounted dataset is unmounted before it is destroyed, as `zfs
//! destroy` does). Promises: the engine validates every name and value, and its error is
//! passed on as it is. Must never: decide what a property means (that is
//! `tarn_dataset::props`'s).

use serde::{Deserialize, Serialize};
use tarn_pool::{DatasetInfo, PropRow};

use crate::error::OpError;
use crate::op::{Held, Op};

/// `tarn ds list`: every dataset of the pool with its space.
#[derive(Serialize, Deserialize)]
pub struct List {}

impl Op for List {
    const NAME: &'static str = "ds.list";
    type Output = Vec<DatasetInfo>;
    fn run(self, on: &Held<'_>) -> Result<Vec<DatasetInfo>, OpError> {
        Ok(on.pool.datasets_info())
    }
}

/// `tarn ds create [-o PROP=VALUE]… POOL/NAME`.
#[derive(Serialize, Deserialize)]
pub struct Create {
    pub name: String,
    pub props: Vec<(String, String)>,
}

impl Op for Create {
    const NAME: &'static str = "ds.create";
    const CHANGES_POOL: bool = true;
    type Output = ();
    fn run(self, on: &Held<'_>) -> Result<(), OpError> {
        // Every property is checked before the dataset exists: a refused one creates
        // nothing.
        let props: Vec<(&str, &str)> = self.props.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        on.pool.create_dataset_with(&self.name, &props)?;
        Ok(())
    }
}

/// `tarn ds destroy [-f] POOL/NAME`: a dataset the daemon has mounted is unmounted first
/// (the command is refused if that mount is busy, unless `force`).
#[derive(Serialize, Deserialize)]
pub struct Destroy {
    pub name: String,
    pub force: bool,
}

impl Op for Destroy {
    const NAME: &'static str = "ds.destroy";
    const CHANGES_POOL: bool = true;
    type Output = ();
    fn run(self, on: &Held<'_>) -> Result<(), OpError> {
        // Check first, so a dataset that cannot be destroyed is not unmounted for nothing.
        on.pool.dataset(&self.name)?;
        if let Some(d) = on.daemon {
            if d.mounted(&self.name).is_some() {
                d.unmount(&self.name, self.force)?;
            }
        }
        Ok(on.pool.destroy_dataset(&self.name)?)
    }
}

/// `tarn set PROP=VALUE… DATASET`: applied in order; the first refused stops it.
#[derive(Serialize, Deserialize)]
pub struct Set {
    pub dataset: String,
    pub assignments: Vec<(String, String)>,
}

impl Op for Set {
    const NAME: &'static str = "ds.set";
    const CHANGES_POOL: bool = true;
    type Output = ();
    fn run(self, on: &Held<'_>) -> Result<(), OpError> {
        for (k, v) in &self.assignments {
            on.pool.set_property(&self.dataset, k, v)?;
        }
        Ok(())
    }
}

/// `tarn get PROP[,PROP]|all DATASET` (`props: None` is `all`).
#[derive(Serialize, Deserialize)]
pub struct Get {
    pub dataset: String,
    pub props: Option<Vec<String>>,
}

impl Op for Get {
    const NAME: &'static str = "ds.get";
    type Output = Vec<PropRow>;
    fn run(self, on: &Held<'_>) -> Result<Vec<PropRow>, OpError> {
        let Some(props) = self.props else {
            return Ok(on.pool.get_properties(&self.dataset, None)?);
        };
        let mut rows = Vec::new();
        for p in &props {
            rows.extend(on.pool.get_properties(&self.dataset, Some(p))?);
        }
        Ok(rows)
    }
}

/// `tarn inherit PROP DATASET`.
#[derive(Serialize, Deserialize)]
pub struct Inherit {
    pub dataset: String,
    pub prop: String,
}

impl Op for Inherit {
    const NAME: &'static str = "ds.inherit";
    const CHANGES_POOL: bool = true;
    type Output = ();
    fn run(self, on: &Held<'_>) -> Result<(), OpError> {
        Ok(on.pool.inherit_property(&self.dataset, &self.prop)?)
    }
}

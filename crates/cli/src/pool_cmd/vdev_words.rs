//! The device words of `tarn pool create` and `tarn pool add` (`mirror A B log C cache D`).
//!
//! Owns: turning a command line's device words into vdev specs by class (data, log,
//! cache) and into the control protocol's wire form.
//! Promises: a malformed device list is a usage error (exit 2) before any device is
//! touched; a cache device is always a plain device.
//! Must never: open or touch a device.

use std::path::PathBuf;

use tarn_control::ops::pool as ops;
use tarn_pool::{DeviceClass, VdevSpec};

use tarn_dataset::props::parse_size;

use crate::cache::absolute;
use crate::error::CliError;

/// `pool add`'s device words: a class keyword (`log` or `cache`), then its vdevs (a
/// cache device is a plain device, never a mirror).
pub(super) fn parse_add(words: &[String]) -> Result<(DeviceClass, Vec<VdevSpec>), CliError> {
    let class = match words.first().map(String::as_str) {
        Some("log") => DeviceClass::Log,
        Some("cache") => DeviceClass::Cache,
        _ => {
            return Err(CliError::Usage(
                "adding data vdevs is not supported; only log and cache devices can be added: tarn pool add POOL log|cache DEV..."
                    .into(),
            ))
        }
    };
    let specs = parse_vdevs(&words[1..])?;
    if specs.is_empty() {
        return Err(CliError::Usage(format!("`{}` needs at least one device after it", class.keyword())));
    }
    if class == DeviceClass::Cache && specs.iter().any(|s| matches!(s, VdevSpec::Mirror(_))) {
        return Err(CliError::Usage(
            "cache devices are plain devices: `cache DEV...` (a cache is never mirrored)".into(),
        ));
    }
    Ok((class, specs))
}

pub(super) fn wire_vdev(spec: &VdevSpec) -> ops::Vdev {
    match spec {
        VdevSpec::Disk(p) => ops::Vdev::Disk(p.clone()),
        VdevSpec::Mirror(ps) => ops::Vdev::Mirror(ps.clone()),
    }
}

pub(super) fn parse_size_flag(s: &str) -> Result<u64, CliError> {
    parse_size(s).ok_or_else(|| CliError::Usage(format!("invalid --size '{s}': use a size like 512M, 4G")))
}

/// Parses "DEV... mirror DEV DEV..." into vdev specs (paths made absolute).
fn parse_vdevs(words: &[String]) -> Result<Vec<VdevSpec>, CliError> {
    let mut specs = Vec::new();
    let mut i = 0;
    while i < words.len() {
        if words[i] == "mirror" {
            let mut children = Vec::new();
            i += 1;
            while i < words.len() && words[i] != "mirror" {
                children.push(absolute(words[i].as_ref()));
                i += 1;
            }
            if children.len() < 2 {
                return Err(CliError::Usage("a mirror needs at least two devices: mirror DEV DEV".into()));
            }
            specs.push(VdevSpec::Mirror(children));
        } else {
            specs.push(VdevSpec::Disk(absolute(words[i].as_ref())));
            i += 1;
        }
    }
    Ok(specs)
}

/// Takes "cache DEV..." out of a device list (up to `log` or the end): the cache
/// devices, each a plain device (a cache is not mirrored: losing it costs only speed).
pub(super) fn split_caches(words: &[String]) -> Result<(Vec<String>, Vec<PathBuf>), CliError> {
    let Some(at) = words.iter().position(|w| w == "cache") else { return Ok((words.to_vec(), Vec::new())) };
    let end = words[at + 1..].iter().position(|w| w == "log").map_or(words.len(), |n| at + 1 + n);
    let caches: Vec<PathBuf> = words[at + 1..end].iter().map(|w| absolute(w.as_ref())).collect();
    if caches.is_empty() {
        return Err(CliError::Usage("`cache` needs at least one device after it".into()));
    }
    if words[at + 1..end].iter().any(|w| w == "mirror" || w == "cache") {
        return Err(CliError::Usage(
            "cache devices are plain devices: `cache DEV...` (a cache is never mirrored)".into(),
        ));
    }
    let rest = words[..at].iter().chain(&words[end..]).cloned().collect();
    Ok((rest, caches))
}

/// Splits "DEV... log DEV..." into data and log vdev specs.
pub(super) fn split_logs(words: &[String]) -> Result<(Vec<VdevSpec>, Vec<VdevSpec>), CliError> {
    match words.iter().position(|w| w == "log") {
        Some(at) if at + 1 == words.len() => Err(CliError::Usage("`log` needs at least one device after it".into())),
        Some(at) => Ok((parse_vdevs(&words[..at])?, parse_vdevs(&words[at + 1..])?)),
        None => Ok((parse_vdevs(words)?, Vec::new())),
    }
}

pub(super) fn spec_paths(spec: &VdevSpec) -> Vec<PathBuf> {
    match spec {
        VdevSpec::Disk(p) => vec![p.clone()],
        VdevSpec::Mirror(ps) => ps.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn device_words_become_data_and_log_vdevs() {
        let (rest, caches) = split_caches(&words("/a cache /f /g log mirror /d /e")).expect("well formed");
        assert_eq!(rest, words("/a log mirror /d /e"));
        assert_eq!(caches, vec![PathBuf::from("/f"), PathBuf::from("/g")]);
        for bad in ["/a cache", "/a cache log /d", "/a cache mirror /f /g"] {
            assert!(matches!(split_caches(&words(bad)), Err(CliError::Usage(_))), "{bad}");
        }
        let (data, logs) = split_logs(&words("/a mirror /b /c log mirror /d /e")).expect("well formed");
        assert!(matches!(data.as_slice(), [VdevSpec::Disk(_), VdevSpec::Mirror(m)] if m.len() == 2));
        assert!(matches!(logs.as_slice(), [VdevSpec::Mirror(m)] if m.len() == 2));
        assert_eq!(spec_paths(&data[1]), vec![PathBuf::from("/b"), PathBuf::from("/c")]);
    }

    #[test]
    fn malformed_device_words_are_usage_errors() {
        for bad in ["/a mirror /b", "/a log", "mirror"] {
            let err = split_logs(&words(bad)).expect_err(bad);
            assert_eq!(err.exit_code(), 2, "{bad}: {err}");
        }
    }
}

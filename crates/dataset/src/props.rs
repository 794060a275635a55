//! Dataset properties: names, defaults, validation, and what each value means to the
//! engine. Values are stored as the user typed them (normalised), inherited from the
//! parent dataset unless set locally, like `zfs get`'s SOURCE column.
//!
//! Owns: the list of properties, their defaults and allowed values, and `Effective`, the
//! values as the engine uses them.
//!
//! Promises: a value that validates is stored normalised (`16k` becomes `16K`); one that
//! does not is refused with the allowed values named (`PropDef::help`).
//!
//! Must never: store or inherit anything (the pool does), or act on a value itself.
use tarn_zil::LogBias;
use tarn_zio::{CachePolicy, ChecksumKind, Compression};

pub struct PropDef {
    pub name: &'static str,
    pub default: &'static str,
    /// Allowed values, for the error message.
    pub help: &'static str,
    pub validate: fn(&str) -> Option<String>,
}

pub const PROPS: &[PropDef] = &[
    PropDef {
        name: "compression",
        default: "lz4",
        help: "off | on | lz4 | zstd | zstd-1 … zstd-19",
        validate: norm_compression,
    },
    PropDef { name: "recordsize", default: "128K", help: "a power of two from 4K to 1M", validate: norm_recordsize },
    PropDef { name: "checksum", default: "on", help: "on | xxh3 | sha256 | blake3", validate: norm_checksum },
    PropDef { name: "atime", default: "on", help: "on | off", validate: |v| one_of(v, &["on", "off"]) },
    PropDef {
        name: "sync",
        default: "standard",
        help: "standard | always | disabled",
        validate: |v| one_of(v, &["standard", "always", "disabled"]),
    },
    PropDef {
        name: "logbias",
        default: "latency",
        help: "latency | throughput",
        validate: |v| one_of(v, &["latency", "throughput"]),
    },
    PropDef {
        name: "primarycache",
        default: "all",
        help: "all | metadata | none",
        validate: |v| one_of(v, &["all", "metadata", "none"]),
    },
    PropDef {
        name: "secondarycache",
        default: "all",
        help: "all | metadata | none",
        validate: |v| one_of(v, &["all", "metadata", "none"]),
    },
    PropDef { name: "mountpoint", default: "none", help: "an absolute path | none", validate: norm_mountpoint },
    PropDef {
        name: "snapdir",
        default: "hidden",
        help: "hidden | visible",
        validate: |v| one_of(v, &["hidden", "visible"]),
    },
];

/// Properties computed by tarn, shown by `get` and refused by `set`.
pub const READONLY: &[&str] = &[
    "receive_resume_token",
    "used",
    "logicalused",
    "compressratio",
    "available",
    "type",
    "creation",
    "referenced",
    "usedbysnapshots",
    "usedbydataset",
    "written",
    "origin",
];

pub fn find(name: &str) -> Option<&'static PropDef> {
    PROPS.iter().find(|p| p.name == name)
}

fn one_of(v: &str, allowed: &[&str]) -> Option<String> {
    let v = v.to_ascii_lowercase();
    allowed.contains(&v.as_str()).then_some(v)
}

fn norm_compression(v: &str) -> Option<String> {
    let v = v.to_ascii_lowercase();
    match v.as_str() {
        "off" | "lz4" | "zstd" => Some(v),
        "on" => Some("lz4".into()),
        _ => {
            let level: i32 = v.strip_prefix("zstd-")?.parse().ok()?;
            (1..=19).contains(&level).then_some(v)
        }
    }
}

/// Parses sizes like 16K, 128k, 1M, 16384.
pub fn parse_size(v: &str) -> Option<u64> {
    let v = v.trim();
    let (num, mult) = match v.chars().last()?.to_ascii_uppercase() {
        'K' => (&v[..v.len() - 1], 1u64 << 10),
        'M' => (&v[..v.len() - 1], 1 << 20),
        'G' => (&v[..v.len() - 1], 1 << 30),
        'T' => (&v[..v.len() - 1], 1 << 40),
        _ => (v, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mult)
}

/// Formats bytes the way zfs does: 16K, 1.50M, 2.00G.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "K", "M", "G", "T", "P"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes}B")
    } else if v.fract() == 0.0 {
        format!("{v:.0}{}", UNITS[u])
    } else if v < 10.0 {
        format!("{v:.2}{}", UNITS[u])
    } else if v < 100.0 {
        format!("{v:.1}{}", UNITS[u])
    } else {
        format!("{v:.0}{}", UNITS[u])
    }
}

fn norm_recordsize(v: &str) -> Option<String> {
    let n = parse_size(v)?;
    (n.is_power_of_two() && (4096..=1 << 20).contains(&n)).then(|| format_size(n))
}

fn norm_checksum(v: &str) -> Option<String> {
    let v = v.to_ascii_lowercase();
    match v.as_str() {
        "on" | "xxh3" | "sha256" | "blake3" => Some(v),
        _ => None,
    }
}

fn norm_mountpoint(v: &str) -> Option<String> {
    (v == "none" || (v.starts_with('/') && !v.contains('\0'))).then(|| v.to_string())
}

/// The effective properties of a dataset, as the engine uses them.
#[derive(Clone, Debug)]
pub struct Effective {
    pub compression: Compression,
    pub recordsize: u32,
    pub checksum: ChecksumKind,
    pub atime: bool,
    pub sync: SyncMode,
    pub primarycache: CachePolicy,
    /// `secondarycache`: which of its blocks leaving the ARC may go to the cache devices
    /// (the pool hands it to the L2ARC, which applies it).
    pub secondarycache: CachePolicy,
    /// `logbias`: with `throughput`, written data is not copied into the intent log;
    /// fsync writes the touched records in place and logs pointers to them, which the txg
    /// adopts — one write of the data, not two (the log policy decides, `tarn_zil::policy`).
    pub logbias: LogBias,
    /// `snapdir=visible`: the mount's `.tarn` directory shows in its root's listing.
    pub snapdir_visible: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncMode {
    Standard,
    Always,
    Disabled,
}

impl Effective {
    /// Builds from normalised values (`value(name)` returns the effective value).
    pub fn from_values(value: impl Fn(&str) -> String) -> Effective {
        let compression = match value("compression").as_str() {
            "off" => Compression::Off,
            "lz4" => Compression::Lz4,
            "zstd" => Compression::Zstd(3),
            z => Compression::Zstd(z.trim_start_matches("zstd-").parse().unwrap_or(3)),
        };
        let checksum = match value("checksum").as_str() {
            "sha256" => ChecksumKind::Sha256,
            "blake3" => ChecksumKind::Blake3,
            _ => ChecksumKind::Xxh3,
        };
        let sync = match value("sync").as_str() {
            "always" => SyncMode::Always,
            "disabled" => SyncMode::Disabled,
            _ => SyncMode::Standard,
        };
        Effective {
            compression,
            recordsize: parse_size(&value("recordsize")).unwrap_or(128 << 10) as u32,
            checksum,
            atime: value("atime") == "on",
            sync,
            logbias: if value("logbias") == "throughput" { LogBias::Throughput } else { LogBias::Latency },
            snapdir_visible: value("snapdir") == "visible",
            primarycache: cache_policy(&value("primarycache")),
            secondarycache: cache_policy(&value("secondarycache")),
        }
    }
}

/// A `primarycache` or `secondarycache` value (validated already).
fn cache_policy(value: &str) -> CachePolicy {
    match value {
        "metadata" => CachePolicy::Metadata,
        "none" => CachePolicy::None,
        _ => CachePolicy::All,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_validated_and_normalised() {
        assert_eq!((find("recordsize").unwrap().validate)("16k"), Some("16K".into()));
        assert_eq!((find("recordsize").unwrap().validate)("16384"), Some("16K".into()));
        assert_eq!((find("recordsize").unwrap().validate)("3K"), None);
        assert_eq!((find("recordsize").unwrap().validate)("2M"), None);
        assert_eq!((find("compression").unwrap().validate)("zstd-19"), Some("zstd-19".into()));
        assert_eq!((find("compression").unwrap().validate)("zstd-20"), None);
        assert_eq!((find("compression").unwrap().validate)("on"), Some("lz4".into()));
        assert_eq!((find("sync").unwrap().validate)("sometimes"), None);
    }

    #[test]
    fn sizes_format_like_zfs() {
        assert_eq!(format_size(16384), "16K");
        assert_eq!(format_size(1536 * 1024), "1.50M");
        assert_eq!(format_size(100), "100B");
    }
}

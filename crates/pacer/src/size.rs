//! Byte-size parsing for the command line (`4G`, `16K`, `8MiB`, `4096`).
//!
//! Owns: the one grammar every size-like flag accepts. Promises: suffixes are binary
//! (K = 1024), case-insensitive, optionally followed by `iB`; overflow and unknown suffixes
//! are errors naming the accepted forms. Must never: guess at a malformed value or
//! silently wrap on overflow.

/// Suffixes and their multipliers; every one is binary so `16K` is the 16 KiB I/O cap
/// the cloud-disk articles mean.
const UNITS: [(&str, u64); 5] = [("", 1), ("k", 1 << 10), ("m", 1 << 20), ("g", 1 << 30), ("t", 1 << 40)];

const ACCEPTED: &str = "a whole number with an optional K, M, G or T suffix (binary, \
                        optionally followed by iB), e.g. 4096, 16K, 8M, 4GiB";

/// Parse a size; `0` is allowed here (it means "unlimited" for rate flags).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let split = trimmed.find(|c: char| !c.is_ascii_digit()).unwrap_or(trimmed.len());
    let (digits, suffix) = trimmed.split_at(split);
    if digits.is_empty() {
        return Err(format!("'{text}' is not a size: expected {ACCEPTED}"));
    }
    let multiplier = unit_multiplier(suffix)
        .ok_or_else(|| format!("'{text}' has an unknown suffix '{suffix}': expected {ACCEPTED}"))?;
    let number: u64 = digits.parse().map_err(|_| format!("'{text}' is too large"))?;
    number.checked_mul(multiplier).ok_or_else(|| format!("'{text}' is too large (over 2^64 bytes)"))
}

/// Parse a size that must be positive (the disk size).
pub fn parse_nonzero_size(text: &str) -> Result<u64, String> {
    match parse_size(text)? {
        0 => Err(format!("'{text}' is zero: the disk needs a positive size, e.g. --size 4G")),
        n => Ok(n),
    }
}

/// `K`, `k`, `KiB`, `kib` → 1024; `iB` alone or any other text → None.
fn unit_multiplier(suffix: &str) -> Option<u64> {
    let lower = suffix.to_ascii_lowercase();
    let base = lower.strip_suffix("ib").unwrap_or(&lower);
    if base.is_empty() && !lower.is_empty() {
        return None; // "4iB" names no unit
    }
    UNITS.iter().find(|(name, _)| *name == base).map(|(_, mult)| *mult)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_numbers_are_bytes() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("4096"), Ok(4096));
    }

    #[test]
    fn suffixes_are_binary_with_or_without_ib() {
        assert_eq!(parse_size("16K"), Ok(16 * 1024));
        assert_eq!(parse_size("16k"), Ok(16 * 1024));
        assert_eq!(parse_size("16KiB"), Ok(16 * 1024));
        assert_eq!(parse_size("8M"), Ok(8 << 20));
        assert_eq!(parse_size("8MiB"), Ok(8 << 20));
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert_eq!(parse_size("4gib"), Ok(4 << 30));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
    }

    #[test]
    fn bad_suffixes_name_the_problem() {
        for bad in ["4X", "4iB", "4KB", "4 Gigs", "G", "", "-4K", "1.5G"] {
            let err = parse_size(bad).expect_err(bad);
            assert!(err.contains("size") || err.contains("suffix"), "{bad}: {err}");
        }
        assert!(parse_size("4Q").unwrap_err().contains("unknown suffix 'Q'"));
    }

    #[test]
    fn overflow_is_an_error() {
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("17179869184G").is_err());
    }

    #[test]
    fn zero_disk_size_is_refused() {
        assert!(parse_nonzero_size("0").unwrap_err().contains("zero"));
        assert!(parse_nonzero_size("0G").is_err());
        assert_eq!(parse_nonzero_size("1M"), Ok(1 << 20));
    }
}

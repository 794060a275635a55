//! How results are shown: human by default (aligned columns, sizes like `1.5G`), `-H`
//! for scripts (no header, tab-separated), `-p` for exact bytes, `--json` for all of it.
//!
//! Owns: the meaning of those flags (the column layout itself is `table.rs`'s).
//! Promises: `-p` shows every size as a whole number of bytes; `--json` prints one
//! pretty-printed JSON document on stdout.
//! Must never: print a partial document: JSON is encoded whole before anything is
//! written.

use serde::Serialize;
use tarn_dataset::props::format_size;

use crate::args::Output;
use crate::error::CliError;

impl Output {
    /// A size as this output wants it: exact bytes with `-p`, else human (`1.5G`).
    pub fn size(&self, bytes: u64) -> String {
        if self.parsable {
            bytes.to_string()
        } else {
            format_size(bytes)
        }
    }
}

/// Prints `value` as one pretty-printed JSON document.
pub fn print_json<T: Serialize + ?Sized>(value: &T) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value)?;
    println!("{text}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_exact_with_p_and_human_without() {
        let human = Output {
            scripted: false,
            parsable: false,
            json: false,
        };
        let exact = Output {
            parsable: true,
            ..human
        };
        assert_eq!(exact.size(1536 << 20), (1536u64 << 20).to_string());
        assert_eq!(human.size(1536 << 20), format_size(1536 << 20));
        assert_ne!(human.size(1536 << 20), exact.size(1536 << 20));
    }
}

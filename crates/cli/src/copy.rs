//! Copying between the host and a dataset without a mount: `put` loads files (seeding a
//! dataset, measuring compression of a real data directory), `cat` and `ls` read back.
//!
//! Owns: the `POOL/DS:PATH` target syntax and what the user sees of the three; the work
//! is the `tarn_control::ops::files` commands', run here or by the daemon holding the
//! pool. Promises: everything copied is committed when `put` returns (by this process's
//! close, or by the daemon's log and txgs); `cat` writes exactly the file's bytes to
//! stdout, chunk by chunk. Must never: hold a whole file in memory, or hand the daemon a
//! relative host path (its working directory is not ours).

use std::io::Write;
use std::path::PathBuf;

use tarn_control::ops::files::{self as ops, CHUNK};

use crate::access::{self, pool_of, run_on_pool_of};
use crate::cache::absolute;
use crate::error::CliError;

/// "POOL/DS:PATH" → ("POOL/DS", "PATH"); no `:` means the dataset's root.
pub fn split_target(t: &str) -> (&str, &str) {
    t.split_once(':').unwrap_or((t, "/"))
}

/// `tarn put SRC... POOL/DS[:DIR]`.
pub fn put_cmd(mut paths: Vec<PathBuf>) -> Result<(), CliError> {
    let Some(target) = paths.pop() else {
        return Err(CliError::Usage("usage: tarn put SRC... POOL/DS[:DIR]".into()));
    };
    let target = target.display().to_string();
    let (ds, dir) = split_target(&target);
    run_on_pool_of(
        ds,
        ops::Put {
            dataset: ds.to_string(),
            dir: dir.to_string(),
            sources: paths.iter().map(|p| absolute(p)).collect(),
        },
    )
}

/// `tarn cat POOL/DS:PATH`: the file in chunks, each written out as it comes.
pub fn cat_cmd(target: &str) -> Result<(), CliError> {
    let (ds, path) = split_target(target);
    let mut session = access::session(pool_of(ds))?;
    let result = copy_out(&mut session, ds, path);
    let ended = session.end();
    result?;
    ended
}

fn copy_out(session: &mut access::Session, ds: &str, path: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    let mut offset = 0u64;
    loop {
        let chunk = session.run(ops::Read { dataset: ds.to_string(), path: path.to_string(), offset, len: CHUNK })?;
        if chunk.data.is_empty() {
            return Ok(());
        }
        out.write_all(&chunk.data).map_err(|e| CliError::host("stdout", e))?;
        offset += chunk.data.len() as u64;
    }
}

/// `tarn ls POOL/DS[:PATH]`.
pub fn ls_cmd(target: &str) -> Result<(), CliError> {
    let (ds, path) = split_target(target);
    let entries = run_on_pool_of(ds, ops::List { dataset: ds.to_string(), path: path.to_string() })?;
    for e in entries {
        println!("{} {:>12} {}", e.kind, e.size, e.name);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::split_target;

    #[test]
    fn a_target_names_a_dataset_and_a_path_in_it() {
        assert_eq!(split_target("tank/db:/a/b"), ("tank/db", "/a/b"));
        assert_eq!(split_target("tank/db"), ("tank/db", "/"));
        assert_eq!(split_target("tank:x"), ("tank", "x"));
    }
}

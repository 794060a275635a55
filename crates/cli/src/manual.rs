//! `tarn completions SHELL` and `tarn man [--dir DIR]`: shell completions and man pages,
//! generated from the command-line definition (`args.rs`) by clap_complete and
//! clap_mangen, so they can never describe another grammar than the one `tarn` parses.
//!
//! Owns: where the pages go and how they are named (`tarn.1`, `tarn-pool.1`,
//! `tarn-pool-create.1`…, one per command and subcommand, as git and systemd name
//! theirs). Promises: every command a user can type has a page and is completed.
//! Must never: hand-write anything a page or a completion says.

use std::path::Path;

use clap::CommandFactory;
use clap_complete::Shell;

use crate::args::Cli;
use crate::error::CliError;

/// `tarn completions bash|zsh|fish`: the script on stdout.
pub fn completions(shell: &str) -> Result<(), CliError> {
    let shell: Shell =
        shell.parse().map_err(|_| CliError::Usage(format!("unknown shell '{shell}'; use bash, zsh or fish")))?;
    clap_complete::generate(shell, &mut Cli::command(), "tarn", &mut std::io::stdout());
    Ok(())
}

/// `tarn man --dir DIR`: every page into DIR (created if missing); without a
/// directory, tarn(1) on stdout.
pub fn man(dir: Option<&Path>) -> Result<(), CliError> {
    let Some(dir) = dir else {
        let mut out = std::io::stdout().lock();
        return clap_mangen::Man::new(Cli::command()).render(&mut out).map_err(|e| CliError::host("stdout", e));
    };
    std::fs::create_dir_all(dir).map_err(|e| CliError::host(dir.display(), e))?;
    clap_mangen::generate_to(Cli::command(), dir).map_err(|e| CliError::host(dir.display(), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every command a user can type, as the words after `tarn` ("pool create").
    fn all_commands(cmd: &clap::Command, prefix: &[String], out: &mut Vec<Vec<String>>) {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            let mut words = prefix.to_vec();
            words.push(sub.get_name().to_string());
            out.push(words.clone());
            all_commands(sub, &words, out);
        }
    }

    fn commands() -> Vec<Vec<String>> {
        let mut out = Vec::new();
        all_commands(&Cli::command(), &[], &mut out);
        assert!(out.len() > 20, "the grammar lost its commands: {out:?}");
        out
    }

    #[test]
    fn every_command_has_a_man_page_with_its_synopsis() {
        let dir = tempfile::tempdir().expect("tempdir");
        man(Some(dir.path())).expect("man pages");
        assert!(dir.path().join("tarn.1").exists());
        for words in commands() {
            let page = dir.path().join(format!("tarn-{}.1", words.join("-")));
            let text = std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
            assert!(text.contains(".SH SYNOPSIS"), "{}: no synopsis", page.display());
        }
    }

    #[test]
    fn the_bash_completion_names_every_command() {
        let mut script = Vec::new();
        clap_complete::generate(Shell::Bash, &mut Cli::command(), "tarn", &mut script);
        let script = String::from_utf8(script).expect("utf8");
        for words in commands() {
            // clap's bash script has a case for each command path: tarn__subcmd__pool__subcmd__create
            // (tests/integration.rs asks bash itself what it completes).
            let case = format!("tarn__subcmd__{}", words.join("__subcmd__"));
            assert!(script.contains(&case), "bash completion misses `tarn {}`", words.join(" "));
            let name = words.last().expect("a word");
            assert!(script.contains(&format!(" {name}")), "bash completion never offers '{name}'");
        }
    }
}

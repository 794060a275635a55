//! Mount options (`tarn mount -o ro,noatime`, an fstab line's fourth field): which ones a
//! tarn mount honours, which ones belong to mount(8) and are ignored here, and which
//! ones are refused.
//!
//! Owns: the translation of an option list into [`MountOptions`]. Promises: every word
//! is either honoured, knowingly ignored (mount(8)'s own words such as `defaults`,
//! `_netdev`, `nofail`, `x-*`, or what a tarn mount always does), or refused with an
//! error naming it; options can only take away from what the dataset says (`noatime`
//! turns atime updates off for this mount; `atime` and `relatime` leave the dataset's
//! `atime` property in charge). Must never: silently accept an option that promises
//! something the mount does not do (`sync`, `strictatime`).

use crate::uring::Transport;

/// What a mount was asked for beyond the dataset's own properties.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MountOptions {
    /// `ro`: the kernel refuses every change (EROFS), and reads update no atime.
    pub read_only: bool,
    /// `noatime`: no atime updates on this mount, whatever the dataset's property.
    pub no_atime: bool,
    /// `nodev`, `nosuid`, `noexec`: the kernel's restrictions, passed on as they are.
    pub no_dev: bool,
    pub no_suid: bool,
    pub no_exec: bool,
    /// `transport=dev|uring` (`tarn mount --transport`): how the kernel's requests
    /// reach the daemon; carried in the option text so a mount made through a running
    /// daemon's control socket gets it too.
    pub transport: Transport,
}

#[derive(Debug, thiserror::Error)]
pub enum OptionError {
    #[error("mount option '{0}' is not supported; supported: ro, rw, atime, noatime, relatime, nodev, nosuid, noexec, transport=dev|uring (and mount(8)'s defaults, _netdev, nofail, auto, noauto, x-*, which are ignored)")]
    Unknown(String),
    #[error("mount option '{word}' is not supported: {why}")]
    Refused { word: String, why: &'static str },
}

/// Words that only mount(8), systemd or FUSE's own tools act on, or that ask for what a
/// tarn mount does anyway (`allow_other`, `default_permissions`, `nodiratime`: the
/// dataset never updates a directory's atime on a read). Accepted and ignored.
const IGNORED: &[&str] = &[
    "defaults",
    "auto",
    "noauto",
    "_netdev",
    "nofail",
    "user",
    "nouser",
    "users",
    "owner",
    "group",
    "async",
    "dev",
    "suid",
    "exec",
    "lazytime",
    "nolazytime",
    "nodiratime",
    "diratime",
    "silent",
    "loud",
    "allow_other",
    "default_permissions",
];

impl MountOptions {
    /// Parses a comma-separated option list (empty words are skipped, as mount(8)
    /// does); later words win over earlier ones (`ro,rw` is read-write).
    pub fn parse(list: &str) -> Result<MountOptions, OptionError> {
        let mut o = MountOptions::default();
        for word in list.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            o.apply(word)?;
        }
        Ok(o)
    }

    /// Whether reads on this mount may update atimes (the dataset's property still has
    /// the last word: `accessed` does nothing under `atime=off`).
    pub fn records_atime(&self) -> bool {
        !self.read_only && !self.no_atime
    }

    fn apply(&mut self, word: &str) -> Result<(), OptionError> {
        match word {
            "ro" => self.read_only = true,
            "rw" => self.read_only = false,
            "noatime" => self.no_atime = true,
            "atime" | "relatime" => self.no_atime = false,
            "nodev" => self.no_dev = true,
            "nosuid" => self.no_suid = true,
            "noexec" => self.no_exec = true,
            "transport=dev" => self.transport = Transport::Dev,
            "transport=uring" => self.transport = Transport::Uring,
            "sync" | "dirsync" => {
                return Err(refused(word, "use the dataset's sync property instead (tarn set sync=always POOL/DS)"))
            }
            "strictatime" => return Err(refused(word, "tarn updates atimes like relatime (the dataset's atime=on)")),
            _ if IGNORED.contains(&word) => {}
            // systemd's and util-linux's own options, and fstab comments.
            _ if word.starts_with("x-") || word.starts_with("comment=") => {}
            _ => return Err(OptionError::Unknown(word.to_string())),
        }
        Ok(())
    }
}

fn refused(word: &str, why: &'static str) -> OptionError {
    OptionError::Refused { word: word.to_string(), why }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_fstab_line_s_options_translate() {
        let o = MountOptions::parse("defaults,_netdev,noatime,x-systemd.after=network.target").expect("fstab words");
        assert_eq!(o, MountOptions { no_atime: true, ..Default::default() });
        assert!(!o.records_atime());
        let ro = MountOptions::parse("ro,nodev,nosuid,noexec").expect("kernel words");
        assert!(ro.read_only && ro.no_dev && ro.no_suid && ro.no_exec);
        assert!(!ro.records_atime(), "a read-only mount writes no atime");
        assert_eq!(MountOptions::parse("transport=uring").expect("transport").transport, Transport::Uring);
        assert_eq!(MountOptions::parse("transport=uring,transport=dev").expect("later wins").transport, Transport::Dev);
        assert!(MountOptions::parse("transport=carrier-pigeon").is_err());
    }

    #[test]
    fn later_words_win_and_empty_words_are_skipped() {
        assert_eq!(MountOptions::parse("ro,,rw,noatime,relatime").expect("valid"), MountOptions::default());
        assert_eq!(MountOptions::parse("").expect("empty"), MountOptions::default());
    }

    #[test]
    fn unknown_and_misleading_options_are_refused_by_name() {
        let e = MountOptions::parse("rw,bogus").expect_err("bogus").to_string();
        assert!(e.contains("'bogus'") && e.contains("supported"), "{e}");
        let e = MountOptions::parse("sync").expect_err("sync").to_string();
        assert!(e.contains("sync=always"), "{e}");
        let e = MountOptions::parse("strictatime").expect_err("strictatime").to_string();
        assert!(e.contains("relatime"), "{e}");
    }
}

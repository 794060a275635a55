//! pjdfstest and fsx (the Rust rewrites, installed by scripts/setup.sh with cargo
//! install) against a fresh tarn mount, through scripts/posix-suites.sh. Every pjdfstest
//! case must pass or be skipped by pjdfstest itself (secondary file system, remounts,
//! unknown LINK_MAX); fsx must finish its operations without a mismatch.

use std::process::Command;

#[test]
fn pjdfstest_and_fsx_pass_on_the_mount() {
    assert!(std::path::Path::new("/dev/fuse").exists(), "FUSE is unavailable (/dev/fuse missing): this test needs it");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/posix-suites.sh");
    let out = Command::new("bash")
        .args([script, "10000"])
        .env("TARN_BIN", env!("CARGO_BIN_EXE_tarn"))
        .output()
        .expect("run scripts/posix-suites.sh");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("{text}");
    assert!(out.status.success(), "POSIX suites failed:\n{text}");
    assert!(text.contains(" 0 failed,"), "pjdfstest summary missing or failures:\n{text}");
}

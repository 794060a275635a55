//! `tarn send` and `tarn recv` as a user runs them (issue #13): from a mounted dataset
//! (through its daemon) into a closed pool, as a file and as a pipe, full then
//! incremental; `--progress` on stderr; a damaged stream refused in one line with the
//! target unchanged; a receiver killed with -9 resumed with `tarn send -t` from the
//! `receive_resume_token` property, ending as an uninterrupted receive would.
mod common;

use std::fs::{self, File};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{noise, Env};

fn tarn_cmd(env: &Env, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tarn"));
    c.args(args).env("TARN_CACHE_FILE", env.path("pools.json")).env("TARN_RUN_DIR", env.run_dir());
    c
}

/// `tarn send ARGS > FILE`; returns stderr.
fn send_to_file(env: &Env, args: &[&str], file: &str) -> String {
    let out = tarn_cmd(env, args).stdout(File::create(env.path(file)).unwrap()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "tarn {args:?}: {err}");
    err
}

/// `tarn recv ARGS < FILE`: (success, stdout, stderr).
fn recv_from_file(env: &Env, args: &[&str], file: &str) -> (bool, String, String) {
    let out = tarn_cmd(env, args).stdin(File::open(env.path(file)).unwrap()).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn compressible(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| b"a database page, mostly alike "[i % 30].wrapping_add(seed * (i % 7 == 0) as u8)).collect()
}

#[test]
fn send_from_a_mounted_dataset_and_receive_into_a_closed_pool() {
    let env = Env::with_pool("512M");
    let dst_img = env.path("dst.img");
    env.ok(&["pool", "create", "dst", dst_img.to_str().unwrap(), "--size", "512M"]);
    let m = env.mount("mnt", &[]);
    let text = compressible(6 << 20, 1);
    fs::write(m.p("pages"), &text).unwrap();
    fs::create_dir(m.p("dir")).unwrap();
    fs::write(m.p("dir/small"), b"small file").unwrap();
    env.ok(&["snap", "create", "tank/db@one"]);

    // Full, from the daemon, with progress: bytes, rate, and time left against the size.
    let err = send_to_file(&env, &["send", "--progress", "tank/db@one"], "one.stream");
    assert!(err.contains("sent") && err.contains("MiB/s") && err.contains("ETA"), "{err}");
    let size = fs::metadata(env.path("one.stream")).unwrap().len();
    assert!(size < (text.len() / 4) as u64, "blocks go compressed: {size} bytes for {} logical", text.len());
    let (ok, out, err) = recv_from_file(&env, &["recv", "--progress", "dst/copy"], "one.stream");
    assert!(ok, "{err}");
    assert!(out.contains("received dst/copy@one"), "{out}");
    assert!(err.contains("received"), "{err}");
    assert_eq!(env.tarn(&["cat", "dst/copy:pages"]).stdout, text);
    assert_eq!(env.tarn(&["cat", "dst/copy@one:dir/small"]).stdout, b"small file");

    // Incremental, as a pipe: send | recv.
    let mut changed = text.clone();
    changed[1 << 20..(1 << 20) + 5].copy_from_slice(b"HELLO");
    fs::write(m.p("pages"), &changed).unwrap();
    fs::write(m.p("dir/new"), b"new file").unwrap();
    env.ok(&["snap", "create", "tank/db@two"]);
    let mut sender = tarn_cmd(&env, &["send", "-i", "@one", "tank/db@two"]).stdout(Stdio::piped()).spawn().unwrap();
    let pipe = sender.stdout.take().unwrap();
    let recv = tarn_cmd(&env, &["recv", "dst/copy"]).stdin(pipe).output().unwrap();
    assert!(sender.wait().unwrap().success());
    assert!(recv.status.success(), "{}", String::from_utf8_lossy(&recv.stderr));
    assert_eq!(env.tarn(&["cat", "dst/copy:pages"]).stdout, changed);
    assert_eq!(env.tarn(&["cat", "dst/copy:dir/new"]).stdout, b"new file");
    let snaps = env.ok(&["snap", "list", "-H", "dst/copy"]);
    assert!(snaps.contains("dst/copy@one") && snaps.contains("dst/copy@two"), "{snaps}");

    // The same increment again: its base is no longer the newest snapshot.
    send_to_file(&env, &["send", "-i", "@one", "tank/db@two"], "two.stream");
    let (ok, _, err) = recv_from_file(&env, &["recv", "dst/copy"], "two.stream");
    assert!(!ok && err.trim_end().lines().count() == 1, "{err}");
    assert!(err.contains("snapshots after the stream's base '@one': @two") && err.contains("-F"), "{err}");

    // A damaged stream: one line, nothing received.
    let mut bytes = fs::read(env.path("one.stream")).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x20;
    fs::write(env.path("bad.stream"), &bytes).unwrap();
    let (ok, _, err) = recv_from_file(&env, &["recv", "dst/other"], "bad.stream");
    assert!(!ok && err.trim_end().lines().count() == 1, "{err}");
    assert!(err.contains("damaged") && err.contains("unchanged"), "{err}");
    let list = env.ok(&["ds", "list", "-H"]);
    assert!(!list.contains("dst/other"), "{list}");

    // Into the pool held by the daemon (tank is mounted): a new dataset, not mounted;
    // an incremental into the mounted dataset itself is refused, saying why.
    let (ok, out, err) = recv_from_file(&env, &["recv", "tank/restored"], "one.stream");
    assert!(ok, "{err}");
    assert!(out.contains("received tank/restored@one"), "{out}");
    assert_eq!(env.tarn(&["cat", "tank/restored:pages"]).stdout, text);
    let (ok, _, err) = recv_from_file(&env, &["recv", "tank/db"], "two.stream");
    assert!(!ok && err.contains("is mounted at") && err.contains("unmount it first"), "{err}");

    // Bad input is one line: a snapshot that does not exist, an unknown token.
    let out = tarn_cmd(&env, &["send", "tank/db@nope"]).stdout(Stdio::null()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("does not exist"), "{err}");
    let out = tarn_cmd(&env, &["send", "-t", "garbage"]).stdout(Stdio::null()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("bad resume token"), "{err}");
    m.umount();
    env.ok(&["pool", "export", "dst"]);
}

#[test]
fn a_receiver_killed_with_sigkill_resumes_from_its_token() {
    let env = Env::with_pool("1G");
    let dst_img = env.path("dst.img");
    env.ok(&["pool", "create", "dst", dst_img.to_str().unwrap(), "--size", "1G"]);
    let m = env.mount("mnt", &[]);
    for i in 0..6u64 {
        fs::write(m.p(&format!("f{i}")), noise(i + 1, 8 << 20)).unwrap();
    }
    env.ok(&["snap", "create", "tank/db@big"]);
    m.umount();
    send_to_file(&env, &["send", "tank/db@big"], "big.stream");
    let stream = fs::read(env.path("big.stream")).unwrap();

    // Feed half the stream, give a txg time to commit it, then kill -9 the receiver.
    let mut receiver = tarn_cmd(&env, &["recv", "dst/copy"]).stdin(Stdio::piped()).spawn().unwrap();
    let mut input = receiver.stdin.take().unwrap();
    input.write_all(&stream[..stream.len() / 2]).unwrap();
    input.flush().unwrap();
    std::thread::sleep(Duration::from_secs(8));
    receiver.kill().unwrap(); // SIGKILL
    receiver.wait().unwrap();
    drop(input);

    let token_line = env.ok(&["get", "-H", "receive_resume_token", "dst/copy%recv"]);
    let token = token_line.trim_end().split('\t').nth(2).unwrap().to_string();
    assert!(token.starts_with("1-"), "{token_line}");
    // Not resumed: a new full receive is refused, saying how to resume or abort.
    let (ok, _, err) = recv_from_file(&env, &["recv", "dst/copy"], "big.stream");
    assert!(!ok && err.contains("send -t") && err.contains("recv -A"), "{err}");

    send_to_file(&env, &["send", "-t", &token], "rest.stream");
    let rest = fs::metadata(env.path("rest.stream")).unwrap().len();
    assert!(
        rest < stream.len() as u64 * 3 / 4,
        "the resumed stream leaves out what arrived: {rest} of {}",
        stream.len()
    );
    let (ok, out, err) = recv_from_file(&env, &["recv", "dst/copy"], "rest.stream");
    assert!(ok, "{err}");
    assert!(out.contains("received dst/copy@big"), "{out}");
    for i in 0..6u64 {
        let got = env.tarn(&["cat", &format!("dst/copy:f{i}")]).stdout;
        assert!(got == noise(i + 1, 8 << 20), "f{i} differs after the resumed receive");
    }
    let token_line = env.ok(&["get", "-H", "receive_resume_token", "dst/copy"]);
    assert!(token_line.contains("\t-\t") || token_line.trim_end().ends_with('-'), "{token_line}");
    env.ok(&["pool", "export", "dst"]);
}

//! SQLite on a tarn mount: a WAL-mode workload (shared-memory WAL index via mmap, fsync
//! of the WAL, checkpoints), `PRAGMA integrity_check`, then a kill -9 of the tarn daemon
//! after committed transactions: remounted, the database is intact and holds them.
//! Needs Debian's sqlite3 (scripts/setup.sh installs it); fails, not skips, without it.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

fn sqlite(db: &Path, script: &str) -> String {
    let mut child = Command::new("sqlite3")
        .arg(db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sqlite3 is needed for this test: apt-get install -y sqlite3 (scripts/setup.sh installs it)");
    child.stdin.take().expect("stdin").write_all(script.as_bytes()).expect("write script");
    let out = child.wait_with_output().expect("sqlite3 runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.is_empty(), "sqlite3 failed: {stderr}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// One transaction of the workload: inserts, updates of older rows, a delete.
fn batch(i: u32) -> String {
    let mut s = String::from("BEGIN;\n");
    for j in 0..200 {
        let k = i * 200 + j;
        s += &format!("INSERT INTO t(k, v) VALUES ({k}, randomblob(300));\n");
    }
    s += &format!("UPDATE t SET v = randomblob(500) WHERE k % 7 = {} ;\n", i % 7);
    s += &format!("DELETE FROM t WHERE k % 97 = {} AND k < {};\n", i % 97, i * 200);
    s += "COMMIT;\n";
    s
}

#[test]
fn sqlite_wal_workload_is_intact_after_remount_and_after_kill_9() {
    let env = common::Env::with_pool("512M");
    let m = env.mount("mnt", &[]);
    let db = m.p("test.db");
    let mode = sqlite(
        &db,
        "PRAGMA journal_mode=WAL;\nCREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB);\nCREATE INDEX tv ON t(length(v));\n",
    );
    assert_eq!(mode, "wal");
    let mut script = String::from("PRAGMA synchronous=FULL;\n");
    for i in 0..40 {
        script += &batch(i);
        if i % 10 == 9 {
            script += "PRAGMA wal_checkpoint(TRUNCATE);\n";
        }
    }
    sqlite(&db, &script);
    assert_eq!(sqlite(&db, "PRAGMA integrity_check;"), "ok");
    let rows = sqlite(&db, "SELECT count(*) FROM t;");
    m.umount();

    let m = env.mount("mnt", &[]);
    let db = m.p("test.db");
    assert_eq!(sqlite(&db, "PRAGMA integrity_check;"), "ok");
    assert_eq!(sqlite(&db, "SELECT count(*) FROM t;"), rows, "rows after remount");
    // Committed with synchronous=FULL (WAL fsynced), then the daemon is killed.
    let mut more = String::from("PRAGMA synchronous=FULL;\n");
    for i in 40..50 {
        more += &batch(i);
    }
    sqlite(&db, &more);
    let committed = sqlite(&db, "SELECT count(*) FROM t;");
    m.crash();

    let m = env.mount("mnt", &[]);
    let db = m.p("test.db");
    assert_eq!(sqlite(&db, "PRAGMA integrity_check;"), "ok", "integrity after kill -9");
    assert_eq!(sqlite(&db, "SELECT count(*) FROM t;"), committed, "every committed transaction survives kill -9");
    m.umount();
}

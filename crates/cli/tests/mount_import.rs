//! `tarn pool import` mounts every dataset whose `mountpoint` property is a path, all
//! served by one daemon (it holds the pool); each can be unmounted on its own, and the
//! daemon commits and exits when the last one goes.

mod common;

use std::fs;
use std::time::Duration;

use common::{wait_gone, Env};
use tarn_daemon::mounts::is_listed;

#[test]
fn pool_import_mounts_each_dataset_with_a_mountpoint_in_one_daemon() {
    let env = Env::with_pool("256M");
    env.ok(&["ds", "create", "tank/logs"]);
    env.ok(&["ds", "create", "tank/scratch"]); // no mountpoint: stays unmounted
    let (db_mp, logs_mp) = (env.path("m/db"), env.path("m/logs"));
    env.ok(&["set", &format!("mountpoint={}", db_mp.display()), "tank/db"]);
    env.ok(&["set", &format!("mountpoint={}", logs_mp.display()), "tank/logs"]);
    env.ok(&["pool", "export", "tank"]);

    let out = env.ok(&["pool", "import", "-d", env.dir.path().to_str().expect("utf8"), "tank"]);
    assert!(out.is_empty(), "import prints nothing on success: {out}");
    let (db_mp, logs_mp) =
        (db_mp.canonicalize().expect("db mountpoint made"), logs_mp.canonicalize().expect("logs mountpoint made"));
    assert!(is_listed(&db_mp) && is_listed(&logs_mp), "both datasets with a mountpoint are mounted");
    let pid = env.daemon_pid().expect("one daemon record for the pool");
    fs::write(db_mp.join("a"), b"in db").expect("write db");
    fs::write(logs_mp.join("b"), b"in logs").expect("write logs");
    assert!(!db_mp.join("b").exists(), "each mount shows its own dataset");

    // Unmounting one leaves the other served by the same daemon.
    env.ok(&["umount", logs_mp.to_str().expect("utf8")]);
    assert!(!is_listed(&logs_mp) && is_listed(&db_mp), "only logs went away");
    assert_eq!(env.daemon_pid(), Some(pid), "the daemon still serves db");
    assert_eq!(fs::read(db_mp.join("a")).expect("read db"), b"in db");

    env.ok(&["umount", "tank/db"]);
    assert!(wait_gone(pid, Duration::from_secs(30)), "the daemon exits after its last mount");
    assert!(!is_listed(&db_mp));

    // Everything was committed: both datasets read back without a mount.
    assert_eq!(env.ok(&["cat", "tank/db:/a"]), "in db");
    assert_eq!(env.ok(&["cat", "tank/logs:/b"]), "in logs");
}

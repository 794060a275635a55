//! PostgreSQL (Debian's, 15) with its data directory on a tarn mount, small: initdb,
//! `pgbench -i` and a 4-client `pgbench -T 5` run without errors; then, during a second
//! pgbench run plus a client that commits numbered rows one by one, kill -9 of every
//! postgres process and of the tarn daemon, remount, restart PostgreSQL: WAL recovery
//! succeeds, `pg_amcheck --all` finds no corruption, and every row whose commit the
//! client saw acknowledged is there.
//! Needs the postgresql package (scripts/setup.sh installs it); fails without it.
//! PostgreSQL refuses to run as root, so the server and initdb run as the `postgres`
//! user: the test's directories are made reachable by it and the data directory on the
//! mount is owned by it.

mod common;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = "/usr/lib/postgresql/15/bin";
const SCALE: &str = "2";

fn bin(name: &str) -> PathBuf {
    let p = Path::new(BIN).join(name);
    assert!(p.exists(), "{} is missing: apt-get install -y postgresql (scripts/setup.sh installs it)", p.display());
    p
}

/// uid and gid of the `postgres` user.
fn postgres_ids() -> (u32, u32) {
    let id = |flag: &str| {
        let out = Command::new("id").args([flag, "postgres"]).output().expect("run id");
        assert!(out.status.success(), "no `postgres` user: apt-get install -y postgresql creates it");
        String::from_utf8_lossy(&out.stdout).trim().parse::<u32>().expect("numeric id")
    };
    (id("-u"), id("-g"))
}

/// A command run as the postgres user.
fn as_postgres(program: PathBuf) -> Command {
    let (uid, gid) = postgres_ids();
    let mut c = Command::new(program);
    c.uid(uid).gid(gid).env("HOME", "/tmp").current_dir("/");
    c
}

fn chown_postgres(p: &Path) {
    let (uid, gid) = postgres_ids();
    std::os::unix::fs::chown(p, Some(uid), Some(gid)).expect("chown to postgres");
}

fn check(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A private postmaster. Its backends make themselves session leaders (setsid), so a
/// process-group kill would miss them: kill9 stops the postmaster (no more forks), then
/// kills it and every process whose parent it is, by pid.
struct Postgres {
    child: Child,
    sockdir: PathBuf,
}

impl Postgres {
    fn start(datadir: &Path, sockdir: &Path) -> Postgres {
        let log = std::fs::File::create(sockdir.join("postgres.log")).expect("log file");
        let child = as_postgres(bin("postgres"))
            .arg("-D")
            .arg(datadir)
            .arg("-k")
            .arg(sockdir)
            .args(["-c", "listen_addresses=", "-c", "shared_buffers=16MB", "-c", "max_connections=20"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start postgres");
        let mut db = Postgres { child, sockdir: sockdir.to_path_buf() };
        db.wait_ready();
        db
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(180);
        while !query(&self.sockdir, "SELECT 1").is_ok_and(|o| o == "1") {
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!("postgres exited ({st}) during startup:\n{}", self.log());
            }
            assert!(Instant::now() < deadline, "postgres did not start in time:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.sockdir.join("postgres.log")).unwrap_or_default()
    }

    fn pgbench(&self, args: &[&str]) -> Output {
        Command::new(bin("pgbench"))
            .args(["-U", "postgres", "-h"])
            .arg(&self.sockdir)
            .args(args)
            .arg("postgres")
            .output()
            .expect("run pgbench")
    }

    /// kill -9 of the postmaster and all its children at once, as a machine crash would.
    fn kill9(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return; // already reaped: its pid may belong to someone else now
        }
        let pm = self.child.id() as i32;
        // SAFETY: signalling our own child and the children it forked, by pid.
        unsafe { libc::kill(pm, libc::SIGSTOP) };
        for pid in children_of(pm) {
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        unsafe { libc::kill(pm, libc::SIGKILL) };
        let _ = self.child.wait();
    }

    /// Fast shutdown (SIGINT), waiting for the postmaster to exit.
    fn stop(mut self) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        common::wait_exit(&mut self.child, Duration::from_secs(120));
        self.kill9();
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Pids whose parent is `parent` (from /proc).
fn children_of(parent: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // "pid (comm) state ppid ...": comm may hold spaces, so split at the last ')'.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, t)| t.split_whitespace().nth(1))
                .and_then(|p| p.parse::<i32>().ok());
            ppid == Some(parent)
        })
        .collect()
}

/// One SQL statement through psql (as the postgres role, over the socket).
fn query(sockdir: &Path, sql: &str) -> Result<String, String> {
    common::text_of(
        Command::new(bin("psql"))
            .args(["-X", "-U", "postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-At", "-h"])
            .arg(sockdir)
            .args(["-c", sql]),
    )
}

fn amcheck(sockdir: &Path) {
    let out = Command::new(bin("pg_amcheck"))
        .args(["-U", "postgres", "--all", "--install-missing", "--heapallindexed", "-h"])
        .arg(sockdir)
        .output()
        .expect("run pg_amcheck");
    check(&out, "pg_amcheck --all");
}

/// A directory the postgres user can reach: the test's temp dir is 0700 root.
fn open_to_postgres(env: &common::Env) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(env.dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod tempdir");
    let sockdir = env.path("sock");
    std::fs::create_dir(&sockdir).expect("sockdir");
    chown_postgres(&sockdir);
    sockdir
}

/// A fresh cluster at `datadir` (on the mount), owned by the postgres user.
fn initdb(datadir: &Path) {
    std::fs::create_dir(datadir).expect("mkdir pgdata on the mount");
    chown_postgres(datadir);
    let init = as_postgres(bin("initdb"))
        .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-instructions", "-D"])
        .arg(datadir)
        .output()
        .expect("run initdb");
    check(&init, "initdb on the mount");
}

#[test]
fn postgres_pgbench_and_kill_9_recovery_on_tarn() {
    let env = common::Env::with_pool("2G");
    let sockdir = open_to_postgres(&env);
    let m = env.mount("mnt", &[]);
    let datadir = m.p("pgdata");
    initdb(&datadir);

    let db = Postgres::start(&datadir, &sockdir);
    query(&sockdir, "CREATE TABLE ledger (n BIGINT PRIMARY KEY)").expect("create ledger");
    check(&db.pgbench(&["-i", "-q", "-s", SCALE]), "pgbench -i");
    let run = db.pgbench(&["-T", "5", "-c", "4", "-j", "2"]);
    check(&run, "pgbench -T 5 -c 4");
    let text = String::from_utf8_lossy(&run.stdout);
    let tps = text.lines().find(|l| l.starts_with("tps")).unwrap_or("").to_string();
    println!("pgbench scale {SCALE}, 4 clients, 5 s: {tps}");
    amcheck(&sockdir);

    // Crash mid-run: pgbench and the ledger client are writing when both die.
    let mut db = db;
    let dir = sockdir.clone();
    let ledger = common::Ledger::start(move |n| query(&dir, &format!("INSERT INTO ledger VALUES ({n})")));
    let sd = sockdir.clone();
    let bench = std::thread::spawn(move || {
        let _ = Command::new(bin("pgbench"))
            .args(["-U", "postgres", "-T", "30", "-c", "4", "-j", "2", "-h"])
            .arg(&sd)
            .arg("postgres")
            .output();
    });
    let acked = ledger.crash_after(Duration::from_secs(4), || {
        db.kill9();
        m.crash();
    });
    let _ = bench.join();

    let m = env.mount("mnt", &[]);
    let db = Postgres::start(&m.p("pgdata"), &sockdir);
    assert!(
        db.log().contains("redo done") || db.log().contains("database system was interrupted"),
        "postgres should have run crash recovery:\n{}",
        db.log()
    );
    let present = query(&sockdir, &format!("SELECT count(*) FROM ledger WHERE n <= {acked}")).expect("count ledger");
    assert_eq!(present, acked.to_string(), "every acknowledged commit (1..={acked}) survives kill -9");
    let accounts = query(&sockdir, "SELECT count(*) FROM pgbench_accounts").expect("count accounts");
    assert_eq!(accounts, "200000", "pgbench_accounts keeps its rows");
    amcheck(&sockdir);
    println!("after kill -9: postgres recovered, pg_amcheck clean, {acked} acknowledged commits all present");
    db.stop();
    m.umount();
}

/// Issue #13's database promise for PostgreSQL: a snapshot taken while pgbench and a
/// committing client run is crash-consistent. A clone of it starts a second postmaster
/// that runs WAL recovery, passes pg_amcheck, and holds every commit acknowledged before
/// `tarn snap create` — while the first server keeps running on the head. The clone's
/// `postmaster.pid` names the live first server, so it is removed first (the documented
/// recipe; PostgreSQL would otherwise refuse to start, rightly).
#[test]
fn a_snapshot_under_running_postgres_clones_into_a_database_that_recovers() {
    let env = common::Env::with_pool("2G");
    let sockdir = open_to_postgres(&env);
    let sock_b = env.path("sock-b");
    std::fs::create_dir(&sock_b).expect("sockdir");
    chown_postgres(&sock_b);
    let m = env.mount("mnt", &[]);
    let datadir = m.p("pgdata");
    initdb(&datadir);
    let db = Postgres::start(&datadir, &sockdir);
    query(&sockdir, "CREATE TABLE ledger (n BIGINT PRIMARY KEY)").expect("create ledger");
    check(&db.pgbench(&["-i", "-q", "-s", SCALE]), "pgbench -i");

    let dir = sockdir.clone();
    let ledger = common::Ledger::start(move |n| query(&dir, &format!("INSERT INTO ledger VALUES ({n})")));
    let sd = sockdir.clone();
    let bench = std::thread::spawn(move || {
        Command::new(bin("pgbench"))
            .args(["-U", "postgres", "-T", "8", "-c", "4", "-j", "2", "-h"])
            .arg(&sd)
            .arg("postgres")
            .output()
    });
    std::thread::sleep(Duration::from_secs(3));
    let acked_before = ledger.acked();
    env.ok(&["snap", "create", "tank/db@live"]);
    std::thread::sleep(Duration::from_secs(1));
    let acked_after = ledger.stop();
    check(&bench.join().expect("pgbench thread").expect("run pgbench"), "pgbench during the snapshot");
    assert!(acked_before > 0, "the ledger client committed nothing before the snapshot");

    env.ok(&["clone", "tank/db@live", "tank/copy"]);
    let copy_mp = env.path("copy");
    std::fs::create_dir(&copy_mp).expect("mkdir clone mountpoint");
    env.ok(&["mount", "tank/copy", copy_mp.to_str().expect("utf8")]);
    let _detach = common::DetachOnDrop(copy_mp.clone());
    std::fs::remove_file(copy_mp.join("pgdata/postmaster.pid")).expect("the snapshot holds the live postmaster.pid");
    let copy = Postgres::start(&copy_mp.join("pgdata"), &sock_b);
    assert!(copy.log().contains("redo done"), "the clone should have run WAL recovery:\n{}", copy.log());
    amcheck(&sock_b);
    let prefix = query(&sock_b, &format!("SELECT count(*) FROM ledger WHERE n <= {acked_before}")).expect("count");
    assert_eq!(prefix, acked_before.to_string(), "every commit acknowledged before the snapshot is in the clone");
    let in_clone: u64 = query(&sock_b, "SELECT count(*) FROM ledger").expect("count").parse().expect("number");
    assert!(in_clone <= acked_after + 1, "the clone holds no commit made after the snapshot's moment");
    let accounts = query(&sock_b, "SELECT count(*) FROM pgbench_accounts").expect("count accounts");
    assert_eq!(accounts, "200000", "pgbench_accounts keeps its rows in the clone");
    println!("clone of a live snapshot: WAL recovery, pg_amcheck clean, {acked_before} commits acked before, {in_clone} in clone");

    query(&sock_b, "INSERT INTO ledger VALUES (999999999)").expect("write in clone");
    let head = query(&sockdir, "SELECT count(*) FROM ledger WHERE n = 999999999").expect("count head");
    assert_eq!(head, "0", "a write to the clone's database must not appear in the head's");
    copy.stop();
    env.ok(&["umount", copy_mp.to_str().expect("utf8")]);
    db.stop();
    m.umount();
}

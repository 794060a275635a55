//! The kernel's read-ahead on a tarn mount: a buffered reader of database pages
//! (PostgreSQL reads 8 KiB pages through the page cache) costs the records it asks for,
//! not a read-ahead window past each short run of neighbours; a long sequential reader
//! is still read ahead — by tarn, into the ARC (`tarn stats arc`'s prefetch counters).

mod common;

use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;

use common::Env;

const PAGE: u64 = 8192;
/// 32 MiB of pages.
const PAGES: u64 = 4096;

/// Page `n`: incompressible, so each is one record of its own size on the device.
fn page(n: u64) -> Vec<u8> {
    common::page_v(n, 0, PAGE as usize)
}

/// A counter of `tarn stats <group> tank --json`.
fn counter(env: &Env, group: &str, name: &str) -> u64 {
    let v: serde_json::Value = serde_json::from_str(&env.ok(&["stats", group, "tank", "--json"])).expect("JSON");
    v[group][name].as_u64().unwrap_or_else(|| panic!("{group}.{name} in {v}"))
}

#[test]
fn buffered_page_reads_cost_the_records_asked_for_and_a_sequential_reader_is_read_ahead_by_tarn() {
    let env = Env::with_pool("512M");
    env.ok(&["set", "recordsize=8K", "tank/db"]);
    let m = env.mount("mnt", &[]);
    let path = m.p("table");
    {
        let f = OpenOptions::new().create(true).truncate(true).write(true).open(&path).expect("create");
        for n in 0..PAGES {
            f.write_all_at(&page(n), n * PAGE).expect("write");
        }
        f.sync_all().expect("fsync");
    }
    m.umount(); // a new daemon: nothing of the file in its ARC or in the page cache
    let m = env.mount("mnt", &[]);
    let f = fs::File::open(m.p("table")).expect("open");
    let mut buf = vec![0u8; PAGE as usize];

    // 300 runs of two neighbour pages, far apart: what an index range scan reads.
    let before = counter(&env, "io", "blocks_read");
    for run in 0..300u64 {
        let first = run * 13;
        for n in [first, first + 1] {
            f.read_exact_at(&mut buf, n * PAGE).expect("read");
            assert_eq!(buf, page(n), "page {n}");
        }
    }
    let read = counter(&env, "io", "blocks_read") - before;
    // 600 records, and the file's few indirect blocks and its dnode.
    assert!(
        (600..=640).contains(&read),
        "600 pages asked for cost {read} device reads: the kernel read ahead past them"
    );

    // A whole pass in order: tarn sees the stream and reads ahead itself.
    let streams = counter(&env, "arc", "prefetch_streams");
    for n in 0..PAGES {
        f.read_exact_at(&mut buf, n * PAGE).expect("read");
        assert_eq!(buf, page(n), "page {n}");
    }
    assert!(counter(&env, "arc", "prefetch_streams") > streams, "the sequential pass was read ahead by tarn");
    assert_eq!(readahead_kb(&m.p("")), 0, "a database's dataset: no kernel read-ahead");
    drop(f);

    // Records of a file read in long runs keep the kernel's read-ahead (a request per
    // page would cost sequential readers): from the next mount on.
    env.ok(&["set", "recordsize=128K", "tank/db"]);
    m.umount();
    let m = env.mount("mnt", &[]);
    assert!(readahead_kb(&m.p("")) > 0, "a 128K dataset is read ahead by the kernel");
}

/// The kernel's read-ahead for the mount at `dir` (its FUSE connection's bdi).
fn readahead_kb(dir: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let dev = fs::metadata(dir).expect("stat mountpoint").dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let knob = format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb");
    fs::read_to_string(&knob).unwrap_or_else(|e| panic!("{knob}: {e}")).trim().parse().expect("a number")
}

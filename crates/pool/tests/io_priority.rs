//! I/O priority on a saturated disk: an fsync issued while a txg's bulk write is under
//! way completes after a few of the txg's pieces, not after all of them (issue #11).
//!
//! The disk here serves writes and flushes one at a time in arrival order, as a cloud
//! volume, the loop device and the lab's pacer do, and only when the test grants it:
//! the test is the disk's clock. So what is asserted is the order in which the disk
//! served things, never a time.
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tarn_dataset::{NewObject, ROOT_ID};
use tarn_pool::{CreateOptions, ImportOptions, Pool, VdevSpec};
use tarn_txg::TxgConfig;
use tarn_vdev::{async_write_limit, BlockDevice, FileDevice, IoClass, QueueConfig, DEFAULT_MAX_IO};

mod common;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Write,
    Flush,
}

#[derive(Clone, Debug)]
struct Op {
    ticket: u64,
    kind: Kind,
    len: usize,
    /// The thread that asked: "fsync" for the test's fsync, the txg's otherwise.
    thread: String,
}

impl Op {
    fn is_fsyncs(&self) -> bool {
        self.thread == "fsync"
    }
    fn is_txg_write(&self) -> bool {
        self.kind == Kind::Write && !self.is_fsyncs()
    }
}

#[derive(Default)]
struct Fifo {
    next_ticket: u64,
    /// The ticket being served: nothing else is until it is done.
    serving: u64,
    /// While held, each op waits for a credit from the test.
    held: bool,
    /// The first ticket given out while held.
    held_from: u64,
    credits: u64,
    /// In ticket order; `arrived[served.len()..]` are waiting.
    arrived: Vec<Op>,
    served: Vec<Op>,
}

impl Fifo {
    fn waiting(&self) -> &[Op] {
        &self.arrived[self.served.len()..]
    }
}

/// A first-come, first-served disk whose writes and flushes the test lets through one
/// at a time (reads go straight through: they are not what this test is about).
struct FifoDisk {
    inner: FileDevice,
    fifo: Mutex<Fifo>,
    changed: Condvar,
}

impl FifoDisk {
    fn serve(&self, kind: Kind, len: usize, io: impl FnOnce() -> std::io::Result<()>) -> std::io::Result<()> {
        let mut f = self.fifo.lock().unwrap();
        let op =
            Op { ticket: f.next_ticket, kind, len, thread: std::thread::current().name().unwrap_or("").to_string() };
        f.next_ticket += 1;
        f.arrived.push(op.clone());
        self.changed.notify_all();
        while f.serving != op.ticket || (f.held && f.credits == 0) {
            f = self.changed.wait(f).unwrap();
        }
        if f.held {
            f.credits -= 1;
        }
        drop(f);
        let result = io();
        let mut f = self.fifo.lock().unwrap();
        f.served.push(op);
        f.serving += 1;
        self.changed.notify_all();
        result
    }

    fn set_held(&self, held: bool) {
        let mut f = self.fifo.lock().unwrap();
        f.held = held;
        f.held_from = f.next_ticket;
        drop(f);
        self.changed.notify_all();
    }

    /// Waits (bounded) until `cond` holds of the disk's queue. Looks again every few
    /// milliseconds too: `cond` may depend on more than the queue (a thread ending).
    fn wait_until(&self, what: &str, cond: impl Fn(&Fifo) -> bool) {
        let mut f = self.fifo.lock().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !cond(&f) {
            assert!(std::time::Instant::now() < deadline, "timed out waiting until {what}");
            f = self.changed.wait_timeout(f, Duration::from_millis(5)).unwrap().0;
        }
    }

    /// Serves exactly one more op.
    fn serve_one(&self) {
        let served = {
            let mut f = self.fifo.lock().unwrap();
            f.credits += 1;
            f.served.len()
        };
        self.changed.notify_all();
        self.wait_until("the disk served one more op", |f| f.served.len() > served);
    }

    /// What was served since the disk was last held.
    fn served(&self) -> Vec<Op> {
        let f = self.fifo.lock().unwrap();
        f.served.iter().filter(|o| o.ticket >= f.held_from).cloned().collect()
    }
}

impl BlockDevice for FifoDisk {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.serve(Kind::Write, buf.len(), || self.inner.write_at(buf, offset))
    }
    fn flush(&self) -> std::io::Result<()> {
        if std::thread::current().name() == Some("fsync") {
            // The fsync's flush reaches the disk a moment after its log write completed:
            // time for any txg write let in between to arrive ahead of it.
            std::thread::sleep(Duration::from_millis(50));
        }
        self.serve(Kind::Flush, 0, || self.inner.flush())
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn path(&self) -> &Path {
        self.inner.path()
    }
}

const MIB: u64 = 1 << 20;
/// The txg being synced: 16 MiB of incompressible records, 16 runs of 1 MiB.
const BULK: u64 = 16 * MIB;

/// What the disk served by the time the fsync returned, and the ticket of the fsync's
/// first I/O.
struct Outcome {
    served: Vec<Op>,
    first_fsync_ticket: u64,
}

impl Outcome {
    fn txg_writes(&self) -> impl Iterator<Item = &Op> {
        self.served.iter().filter(|o| o.is_txg_write())
    }
}

/// Starts the sync of a 16 MiB txg on a held disk, waits until `in_flight` of its
/// pieces are at the disk, then fsyncs a small write to another file, serving the disk
/// one op at a time until the fsync returns. Between the fsync's I/Os (its log write,
/// then its flush) the disk serves nothing until the fsync's next I/O has arrived, so
/// anything served ahead of it had arrived ahead of it.
fn fsync_during_bulk_sync(dirty_max: u64, in_flight: usize) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("d0.img");
    let opts = CreateOptions { size: Some(256 << 20), ..Default::default() };
    Pool::create("tank", &[VdevSpec::Disk(img.clone())], &opts).unwrap().export().unwrap();
    let disk = Arc::new(FifoDisk {
        inner: FileDevice::open(&img).unwrap(),
        fifo: Mutex::new(Fifo::default()),
        changed: Condvar::new(),
    });
    let txg = TxgConfig {
        timeout: Duration::from_secs(3600),
        dirty_max,
        dirty_sync: dirty_max, // the test decides when the txg syncs
        pace_to_write_rate: false,
    };
    let pool = Arc::new(Pool::import(vec![disk.clone() as Arc<dyn BlockDevice>], &ImportOptions { txg }).unwrap());
    let ds = pool.dataset("tank").unwrap();
    let file = |name: &[u8]| ds.create(ROOT_ID, name, NewObject::File, 0o644, 0, 0).unwrap().ino;
    let (bulk, redo) = (file(b"bulk"), file(b"redo"));
    pool.sync().unwrap();
    for i in 0..BULK / MIB {
        ds.write(bulk, i * MIB, &common::noise(i, MIB as usize)).unwrap();
    }

    disk.set_held(true);
    let syncer = {
        let pool = pool.clone();
        std::thread::spawn(move || pool.sync().unwrap())
    };
    disk.wait_until("the txg's first pieces are at the disk", |f| {
        f.waiting().len() == in_flight && f.waiting().iter().all(Op::is_txg_write)
    });
    ds.write(redo, 0, b"commit 1").unwrap();
    let fsync = {
        let ds = ds.clone();
        std::thread::Builder::new().name("fsync".into()).spawn(move || ds.fsync(redo).unwrap()).unwrap()
    };
    let mut first_fsync_ticket = None;
    while !fsync.is_finished() {
        disk.wait_until("the fsync's next I/O is at the disk, or it returned", |f| {
            f.waiting().iter().any(Op::is_fsyncs) || fsync.is_finished()
        });
        let next = disk.fifo.lock().unwrap().waiting().iter().find(|o| o.is_fsyncs()).map(|o| o.ticket);
        let Some(ticket) = next else { continue };
        first_fsync_ticket.get_or_insert(ticket);
        while !disk.served().iter().any(|o| o.ticket == ticket) {
            disk.serve_one();
        }
    }
    fsync.join().unwrap();
    let served = disk.served();

    disk.set_held(false);
    syncer.join().unwrap();
    let mut back = vec![0u8; 8];
    ds.read(redo, 0, &mut back).unwrap();
    assert_eq!(&back, b"commit 1");
    let mut page = vec![0u8; MIB as usize];
    ds.read(bulk, 15 * MIB, &mut page).unwrap();
    assert_eq!(page, common::noise(15, MIB as usize));
    let io = pool.stats().io;
    assert!(io["sync_write_issued"] >= 1 && io["async_write_issued"] >= BULK / DEFAULT_MAX_IO);
    Outcome { served, first_fsync_ticket: first_fsync_ticket.expect("the fsync wrote its log") }
}

fn async_write_min() -> usize {
    QueueConfig::default().limits(IoClass::AsyncWrite).min_active as usize
}

/// How many pieces of a 1 MiB run the sync thread keeps at the disk when 16 MiB are
/// dirty: one after another while the async-write limit is at its minimum, up to the
/// raised limit once dirty data has pushed it up.
fn pieces_in_flight(dirty_max: u64) -> usize {
    let percent = (BULK * 100 / dirty_max) as u32;
    let limit = async_write_limit(&QueueConfig::default(), percent) as usize;
    if limit > async_write_min() {
        limit.min((MIB / DEFAULT_MAX_IO) as usize)
    } else {
        1
    }
}

/// Little dirty data: the txg writes its pieces, each at most `max_io`, one at a time.
/// The fsync's log write waits behind that one, its flush behind at most the minimum
/// more — not behind a 1 MiB run, and far from behind the whole txg.
#[test]
fn an_fsync_waits_for_a_few_pieces_of_a_txg_not_for_the_txg() {
    let (min, in_flight) = (async_write_min(), pieces_in_flight(256 * MIB));
    let out = fsync_during_bulk_sync(256 * MIB, in_flight);
    assert!(
        out.txg_writes().all(|o| o.len as u64 <= DEFAULT_MAX_IO),
        "the txg's runs were cut into pieces of at most {DEFAULT_MAX_IO} bytes"
    );
    let ahead: Vec<&Op> = out.txg_writes().collect();
    let bytes: u64 = ahead.iter().map(|o| o.len as u64).sum();
    let most = in_flight + min;
    assert!(
        ahead.len() <= most && bytes <= most as u64 * DEFAULT_MAX_IO,
        "the fsync waited for {} txg writes ({bytes} bytes): {ahead:?}",
        ahead.len()
    );
    assert!(bytes < BULK / 8, "most of the txg was still unwritten when the fsync returned");
}

/// Dirty data near the throttle: the txg may keep many pieces in flight — but from the
/// fsync's first I/O to its flush, no more than the minimum more are let in ahead of
/// it, even in the moment between its log write and its flush.
#[test]
fn while_an_fsync_is_under_way_the_txg_gets_only_its_minimum() {
    let dirty_max = 24 * MIB; // 16 MiB dirty: 66 %, past the async-write ramp
    let in_flight = pieces_in_flight(dirty_max);
    assert!(in_flight > async_write_min(), "the test needs more pieces in flight than the minimum");
    let out = fsync_during_bulk_sync(dirty_max, in_flight);
    let after_fsync_began: Vec<&Op> = out.txg_writes().filter(|o| o.ticket > out.first_fsync_ticket).collect();
    assert!(
        after_fsync_began.len() <= async_write_min(),
        "{} txg writes slipped in ahead of the fsync's flush: {after_fsync_began:?}",
        after_fsync_began.len()
    );
    assert_eq!(
        out.txg_writes().filter(|o| o.ticket < out.first_fsync_ticket).count(),
        in_flight,
        "before the fsync, only what was already at the disk"
    );
}

/// A database's page flush while a txg syncs: its data-file fsync is a bulk commit (more
/// than `BULK_IN_PLACE` of 16 KiB pages), whose pages belong to the syncing txg and can
/// no longer be written in place for it. It waits for that txg instead of copying the
/// pages into the log — where, appended under the log's chain lock, they held up every
/// redo-log fsync behind megabytes of log writes on a saturated disk (the lab's 0-TPS
/// seconds, issue #11). So a redo-log fsync issued meanwhile returns before the txg
/// commits and before any of the data file's I/O, and the data is written once.
#[test]
fn a_bulk_fsync_of_a_syncing_txg_waits_for_it_and_holds_up_no_redo_fsync() {
    const PAGE: usize = 16 << 10;
    const PAGES: u64 = 64; // 1 MiB of pages: past the bulk rule's 256 KiB
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("d0.img");
    let opts = CreateOptions { size: Some(256 << 20), ..Default::default() };
    Pool::create("tank", &[VdevSpec::Disk(img.clone())], &opts).unwrap().export().unwrap();
    let disk = Arc::new(FifoDisk {
        inner: FileDevice::open(&img).unwrap(),
        fifo: Mutex::new(Fifo::default()),
        changed: Condvar::new(),
    });
    let txg = TxgConfig {
        timeout: Duration::from_secs(3600),
        dirty_max: 256 * MIB,
        dirty_sync: 256 * MIB, // the test decides when the txg syncs
        pace_to_write_rate: false,
    };
    let pool = Arc::new(Pool::import(vec![disk.clone() as Arc<dyn BlockDevice>], &ImportOptions { txg }).unwrap());
    let ds = pool.dataset("tank").unwrap();
    let file = |name: &[u8]| ds.create(ROOT_ID, name, NewObject::File, 0o644, 0, 0).unwrap().ino;
    let (bulk, data, redo) = (file(b"bulk"), file(b"data"), file(b"redo"));
    pool.sync().unwrap();
    for i in 0..BULK / MIB {
        ds.write(bulk, i * MIB, &common::noise(i, MIB as usize)).unwrap();
    }
    for p in 0..PAGES {
        ds.write(data, p * PAGE as u64, &common::noise(100 + p, PAGE)).unwrap();
    }
    let syncing_txg = pool.stats().txg["open"];

    disk.set_held(true);
    let syncer = {
        let pool = pool.clone();
        std::thread::spawn(move || pool.sync().unwrap())
    };
    disk.wait_until("the txg's first pieces are at the disk", |f| {
        !f.waiting().is_empty() && f.waiting().iter().all(Op::is_txg_write)
    });
    let data_fsync = {
        let ds = ds.clone();
        std::thread::Builder::new().name("datafsync".into()).spawn(move || ds.fsync(data).unwrap()).unwrap()
    };
    // Either the data file's commit reaches the disk (copying its pages into the log), or
    // it waits for the syncing txg.
    disk.wait_until("the data fsync wrote to the log or waits for the txg", |f| {
        f.waiting().iter().any(|o| o.thread == "datafsync") || pool.stats().zil["settle_waits"] >= 1
    });
    ds.write(redo, 0, b"commit 1").unwrap();
    let redo_fsync = {
        let ds = ds.clone();
        std::thread::Builder::new().name("fsync".into()).spawn(move || ds.fsync(redo).unwrap()).unwrap()
    };
    while !redo_fsync.is_finished() {
        disk.wait_until("an op is at the disk, or the redo fsync returned", |f| {
            !f.waiting().is_empty() || redo_fsync.is_finished()
        });
        if !redo_fsync.is_finished() {
            disk.serve_one();
        }
    }
    redo_fsync.join().unwrap();
    let served = disk.served();
    let committed_then = pool.stats().txg["synced"];

    disk.set_held(false);
    syncer.join().unwrap();
    data_fsync.join().unwrap();
    let data_ops: Vec<&Op> = served.iter().filter(|o| o.thread == "datafsync").collect();
    assert!(data_ops.is_empty(), "the redo fsync waited behind the data fsync's log writes: {data_ops:?}");
    assert!(committed_then < syncing_txg, "the redo fsync returned before the syncing txg committed");
    let zil = pool.stats().zil;
    assert_eq!(zil["settle_waits"], 1, "the data fsync waited for its txg");
    assert!(zil["bytes_written"] < 64 << 10, "the pages were not copied into the log: {zil:?}");
    let mut back = vec![0u8; PAGE];
    for p in 0..PAGES {
        ds.read(data, p * PAGE as u64, &mut back).unwrap();
        assert_eq!(back, common::noise(100 + p, PAGE), "page {p}");
    }
    let mut redo_back = vec![0u8; 8];
    ds.read(redo, 0, &mut redo_back).unwrap();
    assert_eq!(&redo_back, b"commit 1");
}

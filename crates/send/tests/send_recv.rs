//! Send and receive: a snapshot sent and received into another pool reads back as the
//! sender's (every file's bytes against a model, holes, sizes, modes, owners, times,
//! links, symlinks, special files — and the received snapshot against the sender's, entry
//! by entry); incremental chains; `-I`; interrupted receives resumed; damaged, cut and
//! newer streams refused with the target as it was; compressed blocks sent as stored and
//! received as stored (same size, codec and checksum whatever the receiver's compression).
//! Every receiving pool is exported and imported again at the end: its walk rebuilds the
//! space maps from the trees, so a received block not accounted for shows there.
#[path = "../../pool/tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{noise, read_tree};
use tarn_dataset::{Dataset, FileKind, NewObject, SetAttr, Timespec, ROOT_ID};
use tarn_objects::traverse::{self, Flow, Options, Start, Visit};
use tarn_pool::{CreateOptions, ImportOptions, Pool};
use tarn_send::{SendBase, SendError, SendRecv, StreamError};

type Model = BTreeMap<String, Vec<u8>>;

/// What a user sees of one entry: kind, size, mode, owner, links, times, and its bytes
/// (a file's content, a symlink's target).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    kind: String,
    size: u64,
    mode: u32,
    uid: u32,
    gid: u32,
    nlink: u32,
    mtime: (i64, u32),
    ctime: (i64, u32),
    rdev: u64,
    ino: u64,
    bytes_hash: u64,
}

fn tree_state(ds: &Dataset) -> BTreeMap<String, Entry> {
    let mut out = BTreeMap::new();
    walk(ds, ROOT_ID, "", &mut out);
    out
}

fn walk(ds: &Dataset, dir: u64, prefix: &str, out: &mut BTreeMap<String, Entry>) {
    for (name, ino, kind) in ds.readdir(dir).unwrap() {
        let path = format!("{prefix}/{}", String::from_utf8_lossy(&name));
        let a = ds.getattr(ino).unwrap();
        let bytes = match kind {
            FileKind::File => common::read_file(ds, ino).unwrap(),
            FileKind::Symlink => ds.readlink(ino).unwrap(),
            _ => Vec::new(),
        };
        out.insert(
            path.clone(),
            Entry {
                kind: format!("{kind:?}"),
                size: a.size,
                mode: a.mode,
                uid: a.uid,
                gid: a.gid,
                nlink: a.nlink,
                mtime: (a.mtime.sec, a.mtime.nsec),
                ctime: (a.ctime.sec, a.ctime.nsec),
                rdev: a.rdev,
                ino,
                bytes_hash: xxhash_rust::xxh3::xxh3_64(&bytes),
            },
        );
        if kind == FileKind::Dir {
            walk(ds, ino, &path, out);
        }
    }
}

fn new_pool(dir: &Path, name: &str) -> (Pool, PathBuf) {
    let img = dir.join(format!("{name}.img"));
    let opts = CreateOptions { size: Some(512 << 20), ..Default::default() };
    let pool = Pool::create(name, &[tarn_pool::VdevSpec::Disk(img.clone())], &opts).unwrap();
    (pool, img)
}

fn reimport(pool: Pool, img: &Path) -> Pool {
    pool.export().unwrap();
    Pool::import_paths(&[img.to_path_buf()], &ImportOptions::default()).unwrap()
}

fn lookup_or_create(ds: &Dataset, dir: u64, name: &str, what: NewObject) -> u64 {
    match ds.lookup(dir, name.as_bytes()) {
        Ok(a) => a.ino,
        Err(_) => ds.create(dir, name.as_bytes(), what, 0o644, 0, 0).unwrap().ino,
    }
}

fn write(ds: &Dataset, model: &mut Model, name: &str, off: u64, data: &[u8]) {
    let ino = lookup_or_create(ds, ROOT_ID, name, NewObject::File);
    ds.write(ino, off, data).unwrap();
    let f = model.entry(name.to_string()).or_default();
    let end = off as usize + data.len();
    if f.len() < end {
        f.resize(end, 0);
    }
    f[off as usize..end].copy_from_slice(data);
}

fn punch(ds: &Dataset, model: &mut Model, name: &str, off: u64, len: u64) {
    let ino = ds.lookup(ROOT_ID, name.as_bytes()).unwrap().ino;
    ds.punch_hole(ino, off, len).unwrap();
    let f = model.get_mut(name).unwrap();
    let end = ((off + len) as usize).min(f.len());
    f[off as usize..end].fill(0);
}

fn truncate(ds: &Dataset, model: &mut Model, name: &str, size: u64) {
    let ino = ds.lookup(ROOT_ID, name.as_bytes()).unwrap().ino;
    ds.setattr(ino, &SetAttr { size: Some(size), ..Default::default() }).unwrap();
    model.get_mut(name).unwrap().resize(size as usize, 0);
}

/// Round `round` of changes: every kind of change a tree can take.
fn change(ds: &Dataset, model: &mut Model, round: u64) {
    // Overwrite inside, extend past a hole, punch a hole, shrink.
    write(ds, model, "big", round * 70_000, &noise(round, 200_000));
    write(ds, model, "sparse", (4 << 20) + round * 131_072, &noise(50 + round, 4096));
    write(ds, model, &format!("new{round}"), 0, &noise(100 + round, 10_000 + round as usize * 3000));
    if round >= 1 {
        punch(ds, model, "big", 131_072, 262_144);
        truncate(ds, model, "shrinks", 300_000 - round * 50_000);
        ds.unlink(ROOT_ID, format!("new{}", round - 1).as_bytes()).unwrap();
        model.remove(&format!("new{}", round - 1));
    } else {
        write(ds, model, "shrinks", 0, &noise(7, 300_000));
        // Never changed again: an increment must not carry it.
        write(ds, model, "static", 0, &noise(8, 4 << 20));
    }
    // A directory tree, a hard link, a symlink, a device node; modes, owners, times.
    let sub = lookup_or_create(ds, ROOT_ID, "sub", NewObject::Dir);
    let deep = lookup_or_create(ds, sub, &format!("d{round}"), NewObject::Dir);
    let f = ds.create(deep, b"f", NewObject::File, 0o600, 1000 + round as u32, 100).unwrap().ino;
    ds.write(f, 0, &noise(300 + round, 5000)).unwrap();
    ds.link(f, ROOT_ID, format!("link{round}").as_bytes()).unwrap();
    model.insert(format!("link{round}"), noise(300 + round, 5000));
    ds.create(sub, format!("sym{round}").as_bytes(), NewObject::Symlink(b"../big"), 0o777, 0, 0).unwrap();
    ds.create(sub, format!("null{round}").as_bytes(), NewObject::Special { rdev: 0x103 }, 0o020666, 0, 0).unwrap();
    let big = ds.lookup(ROOT_ID, b"big").unwrap().ino;
    let when = Timespec { sec: 1_600_000_000 + round as i64, nsec: 123_456_789 };
    ds.setattr(
        big,
        &SetAttr { mode: Some(0o100640), uid: Some(7), gid: Some(8), atime: Some(when), mtime: Some(when), size: None },
    )
    .unwrap();
}

/// `src/db` with snapshots `@s0`, `@s1`, `@s2`, each after a round of changes; the model
/// of the last.
fn three_rounds(src: &Pool) -> Model {
    src.create_dataset("src/db").unwrap();
    let ds = src.dataset("src/db").unwrap();
    let mut model = Model::new();
    for round in 0..3 {
        change(&ds, &mut model, round);
        snap(src, &format!("src/db@s{round}"));
    }
    model
}

fn snap(pool: &Pool, name: &str) {
    pool.create_snapshots(&[name.to_string()], false).unwrap();
}

fn send(pool: &Pool, snapshot: &str, base: SendBase<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    pool.send(snapshot, base, &mut out, &mut |_| {}).unwrap();
    out
}

fn recv(pool: &Pool, target: &str, force: bool, stream: &[u8]) -> Result<Vec<String>, SendError> {
    let mut input = stream;
    pool.receive(target, force, &mut input, &mut |_| {}).map(|s| s.received)
}

/// The received snapshot (and the head, if it is the newest) read back as the sender's
/// snapshot, entry by entry.
fn assert_same(sender: &Pool, from: &str, receiver: &Pool, to: &str, model: &Model) {
    let want = tree_state(&sender.snapshot_dataset(from).unwrap());
    let got = tree_state(&receiver.snapshot_dataset(to).unwrap());
    assert_eq!(got.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>(), "{to}: entries");
    for (k, w) in &want {
        assert_eq!(&got[k], w, "{to}: {k}");
    }
    let (ds, name) = to.split_once('@').unwrap();
    if receiver.snapshot_names(ds).unwrap().last().map(String::as_str) == Some(name) {
        let head = tree_state(&receiver.dataset(ds).unwrap());
        assert!(head == want, "{ds}: the head differs from the newest snapshot received");
    }
    let files = read_tree(&receiver.snapshot_dataset(to).unwrap()).unwrap();
    for (name, bytes) in model {
        assert!(files.get(name) == Some(bytes), "{to}: {name} differs from the model");
    }
}

#[test]
fn a_full_stream_and_an_incremental_chain_round_trip_against_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let (src, _) = new_pool(dir.path(), "src");
    let (mut dst, dst_img) = new_pool(dir.path(), "dst");
    src.create_dataset("src/db").unwrap();
    let ds = src.dataset("src/db").unwrap();
    let mut model = Model::new();
    let mut models = Vec::new();
    for round in 0..4 {
        change(&ds, &mut model, round);
        snap(&src, &format!("src/db@s{round}"));
        models.push(model.clone());
    }
    // s0 whole, then s1, s2, s3 each from the one before: a chain of three increments.
    let full = send(&src, "src/db@s0", SendBase::Full);
    assert_eq!(recv(&dst, "dst/copy", false, &full).unwrap(), vec!["dst/copy@s0".to_string()]);
    assert_same(&src, "src/db@s0", &dst, "dst/copy@s0", &models[0]);
    for (round, model) in models.iter().enumerate().skip(1) {
        let base = format!("@s{}", round - 1);
        let to = format!("src/db@s{round}");
        let inc = send(&src, &to, SendBase::Incremental(&base));
        let whole = send(&src, &to, SendBase::Full);
        assert!(inc.len() < whole.len() / 2, "an increment of {} bytes, the whole snapshot {}", inc.len(), whole.len());
        recv(&dst, "dst/copy", false, &inc).unwrap();
        assert_same(&src, &to, &dst, &format!("dst/copy@s{round}"), model);
    }
    // -I: every intermediate snapshot in one go, into a second target.
    recv(&dst, "dst/other", false, &full).unwrap();
    let all = send(&src, "src/db@s3", SendBase::Intermediates("s0"));
    let got = recv(&dst, "dst/other", false, &all).unwrap();
    assert_eq!(got, vec!["dst/other@s1", "dst/other@s2", "dst/other@s3"]);
    assert_eq!(dst.snapshot_names("dst/other").unwrap(), vec!["s0", "s1", "s2", "s3"]);
    for (round, model) in models.iter().enumerate() {
        assert_same(&src, &format!("src/db@s{round}"), &dst, &format!("dst/other@s{round}"), model);
    }
    // What was received survives an import (its blocks are claimed, none is lost).
    dst = reimport(dst, &dst_img);
    for (round, model) in models.iter().enumerate() {
        assert_same(&src, &format!("src/db@s{round}"), &dst, &format!("dst/copy@s{round}"), model);
    }
    // The received dataset is writable and its snapshots independent of the sender.
    let copy = dst.dataset("dst/copy").unwrap();
    let ino = copy.lookup(ROOT_ID, b"big").unwrap().ino;
    copy.write(ino, 0, b"changed").unwrap();
    dst.sync().unwrap();
    assert_eq!(dst.scrub().unwrap().errors, 0);
    dst.export().unwrap();
}

#[test]
fn an_incremental_stream_needs_its_base_as_the_targets_newest_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let (src, _) = new_pool(dir.path(), "src");
    let (dst, _) = new_pool(dir.path(), "dst");
    three_rounds(&src);
    recv(&dst, "dst/copy", false, &send(&src, "src/db@s0", SendBase::Full)).unwrap();
    let before = tree_state(&dst.dataset("dst/copy").unwrap());
    // s1→s2 on a target at s0: refused, named, nothing changed.
    let skip = send(&src, "src/db@s2", SendBase::Incremental("s1"));
    let err = recv(&dst, "dst/copy", false, &skip).unwrap_err();
    assert!(matches!(err, SendError::RecvRefused { .. }), "{err}");
    assert!(err.to_string().contains("not the stream's base"), "{err}");
    // A full stream onto an existing dataset: refused.
    let err = recv(&dst, "dst/copy", false, &send(&src, "src/db@s1", SendBase::Full)).unwrap_err();
    assert!(err.to_string().contains("exists"), "{err}");
    assert!(tree_state(&dst.dataset("dst/copy").unwrap()) == before);
    assert_eq!(dst.snapshot_names("dst/copy").unwrap(), vec!["s0"]);
    // A target changed since its newest snapshot: refused without -F, rolled back with it.
    let copy = dst.dataset("dst/copy").unwrap();
    let ino = copy.lookup(ROOT_ID, b"big").unwrap().ino;
    copy.write(ino, 0, b"local change").unwrap();
    let inc = send(&src, "src/db@s1", SendBase::Incremental("s0"));
    let err = recv(&dst, "dst/copy", false, &inc).unwrap_err();
    assert!(err.to_string().contains("-F"), "{err}");
    recv(&dst, "dst/copy", true, &inc).unwrap();
    let want = tree_state(&src.snapshot_dataset("src/db@s1").unwrap());
    assert!(tree_state(&dst.dataset("dst/copy").unwrap()) == want);
    dst.export().unwrap();
}

#[test]
fn damaged_cut_and_newer_streams_are_refused_with_the_target_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let (src, _) = new_pool(dir.path(), "src");
    let (mut dst, dst_img) = new_pool(dir.path(), "dst");
    src.create_dataset("src/db").unwrap();
    let ds = src.dataset("src/db").unwrap();
    let mut model = Model::new();
    change(&ds, &mut model, 0);
    snap(&src, "src/db@s0");
    change(&ds, &mut model, 1);
    snap(&src, "src/db@s1");
    let full = send(&src, "src/db@s0", SendBase::Full);
    let inc = send(&src, "src/db@s1", SendBase::Incremental("s0"));
    // Full streams: the target never appears.
    let mut bad_magic = full.clone();
    bad_magic[1] ^= 0xff;
    let mut newer = full.clone();
    newer[8] = 9;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("bad magic", bad_magic),
        ("newer", newer),
        ("empty", Vec::new()),
        ("garbage", b"not a stream at all, just text".to_vec()),
    ];
    for (what, bytes) in cases {
        let err = recv(&dst, "dst/copy", false, &bytes).unwrap_err();
        assert!(matches!(err, SendError::Stream { .. }), "{what}: {err}");
        assert!(dst.dataset("dst/copy").is_err(), "{what}: the target must not appear");
    }
    let err = recv(&dst, "dst/copy", false, &{
        let mut n = full.clone();
        n[8] = 9;
        n
    })
    .unwrap_err();
    assert!(err.to_string().contains("newer"), "{err}");
    for at in [40usize, full.len() / 3, full.len() / 2, full.len() - 40] {
        let mut flipped = full.clone();
        flipped[at] ^= 0x04;
        let err = recv(&dst, "dst/copy", false, &flipped).unwrap_err();
        assert!(err.to_string().contains("dst/copy"), "flip at {at}: {err}");
        assert!(dst.dataset("dst/copy").is_err(), "flip at {at}: the target must not appear");
        assert!(dst.dataset("dst/copy%recv").is_err(), "flip at {at}: a damaged stream leaves nothing behind");
    }
    // A cut stream: interrupted, the target absent, the partial receive aborted.
    let err = recv(&dst, "dst/copy", false, &full[..full.len() / 2]).unwrap_err();
    assert!(matches!(err, SendError::RecvInterrupted { .. }), "{err}");
    assert!(dst.dataset("dst/copy").is_err());
    dst.abort_receive("dst/copy").unwrap();
    assert!(dst.resume_token("dst/copy").is_none());
    // Incremental streams onto a real target: its contents and snapshots stay.
    recv(&dst, "dst/copy", false, &full).unwrap();
    let before = tree_state(&dst.dataset("dst/copy").unwrap());
    for at in [30usize, inc.len() / 2, inc.len() - 10] {
        let mut flipped = inc.clone();
        flipped[at] ^= 0x40;
        let err = recv(&dst, "dst/copy", false, &flipped).unwrap_err();
        assert!(matches!(err, SendError::Stream { .. }), "flip at {at}: {err}");
        assert!(tree_state(&dst.dataset("dst/copy").unwrap()) == before, "flip at {at}: the target changed");
        assert_eq!(dst.snapshot_names("dst/copy").unwrap(), vec!["s0"]);
    }
    // Records out of order: the second stream's records after the first's BEGIN.
    let mut spliced = inc[..inc.len() / 2].to_vec();
    spliced.extend_from_slice(&full[full.len() / 2..]);
    let err = recv(&dst, "dst/copy", false, &spliced).unwrap_err();
    assert!(matches!(err, SendError::Stream { .. }), "{err}");
    assert!(tree_state(&dst.dataset("dst/copy").unwrap()) == before);
    let err = recv(&dst, "dst/copy", false, &inc[..inc.len() - 20]).unwrap_err();
    assert!(matches!(err, SendError::RecvInterrupted { source: StreamError::Truncated { .. }, .. }), "{err}");
    assert!(tree_state(&dst.dataset("dst/copy").unwrap()) == before);
    dst.abort_receive("dst/copy").unwrap();
    dst = reimport(dst, &dst_img);
    assert!(tree_state(&dst.dataset("dst/copy").unwrap()) == before);
    recv(&dst, "dst/copy", false, &inc).unwrap();
    assert_same(&src, "src/db@s1", &dst, "dst/copy@s1", &model);
    dst.export().unwrap();
}

#[test]
fn an_interrupted_receive_resumes_from_its_token_and_equals_an_uninterrupted_one() {
    let dir = tempfile::tempdir().unwrap();
    let (src, _) = new_pool(dir.path(), "src");
    let (mut dst, dst_img) = new_pool(dir.path(), "dst");
    src.create_dataset("src/db").unwrap();
    let ds = src.dataset("src/db").unwrap();
    let mut model = Model::new();
    for i in 0..12u64 {
        write(&ds, &mut model, &format!("f{i}"), 0, &noise(i, 1 << 20));
    }
    change(&ds, &mut model, 0);
    snap(&src, "src/db@s0");
    let s0 = model.clone();
    change(&ds, &mut model, 1);
    write(&ds, &mut model, "f3", 100_000, &noise(77, 3 << 20));
    snap(&src, "src/db@s1");
    for (base, to, want) in [(None, "src/db@s0", &s0), (Some("s0"), "src/db@s1", &model)] {
        let stream = match base {
            None => send(&src, to, SendBase::Full),
            Some(b) => send(&src, to, SendBase::Incremental(b)),
        };
        // Cut three times, each resumed from the token the receive left, the last
        // resume running to the end.
        let mut cut = stream.len() / 4;
        let mut piece = stream.clone();
        let mut resumed = 0;
        loop {
            let last = piece.len() <= cut;
            let err = match recv(&dst, "dst/copy", false, &piece[..cut.min(piece.len())]) {
                Ok(_) => break,
                Err(e) => e,
            };
            assert!(!last, "the whole stream failed: {err}");
            let SendError::RecvInterrupted { token, .. } = err else { panic!("{err}") };
            assert_eq!(dst.resume_token("dst/copy").as_deref(), Some(token.as_str()));
            if resumed == 1 {
                // The token outlives an export and import.
                dst = reimport(dst, &dst_img);
            }
            let mut rest = Vec::new();
            src.send_resume(&token, &mut rest, &mut |_| {}).unwrap();
            assert!(rest.len() < stream.len(), "a resumed stream leaves out what was received");
            piece = rest;
            resumed += 1;
            cut = if resumed < 3 { piece.len() / 2 } else { usize::MAX };
        }
        assert!(resumed >= 2, "{resumed}");
        let snap_name = format!("dst/copy@{}", to.split_once('@').unwrap().1);
        assert_same(&src, to, &dst, &snap_name, want);
        assert!(dst.resume_token("dst/copy").is_none());
    }
    dst = reimport(dst, &dst_img);
    assert_same(&src, "src/db@s1", &dst, "dst/copy@s1", &model);
    dst.export().unwrap();
}

#[test]
fn compressed_blocks_go_as_stored() {
    let dir = tempfile::tempdir().unwrap();
    let (src, _) = new_pool(dir.path(), "src");
    let (dst, _) = new_pool(dir.path(), "dst");
    src.create_dataset_with("src/db", &[("compression", "lz4")]).unwrap();
    let ds = src.dataset("src/db").unwrap();
    let mut model = Model::new();
    let text: Vec<u8> = (0..(8u32 << 20)).map(|i| b"tarn sends blocks as stored "[(i % 28) as usize]).collect();
    write(&ds, &mut model, "text", 0, &text);
    snap(&src, "src/db@s0");
    let mut stream = Vec::new();
    let summary = src.send("src/db@s0", SendBase::Full, &mut stream, &mut |_| {}).unwrap();
    assert!(summary.logical >= 8 << 20, "{summary:?}");
    assert!(
        (stream.len() as u64) < summary.logical / 4,
        "a stream of {} bytes for {} logical bytes of compressible data",
        stream.len(),
        summary.logical
    );
    let estimate = src.send_size("src/db@s0", SendBase::Full).unwrap();
    assert!(estimate.abs_diff(stream.len() as u64) < stream.len() as u64 / 4, "{estimate} vs {}", stream.len());
    recv(&dst, "dst/copy", false, &stream).unwrap();
    assert_same(&src, "src/db@s0", &dst, "dst/copy@s0", &model);
    dst.export().unwrap();
}

/// Every data block of a snapshot by (object, record): its stored size, codec and checksum.
fn stored_blocks(pool: &Pool, snapshot: &str) -> BTreeMap<(u64, u64), (u32, String, [u8; 32])> {
    let snap = pool.snapshot_ref(snapshot).unwrap();
    let mut out = BTreeMap::new();
    let mut visit = |v: &Visit<'_>| {
        if let (Some(object), 0) = (v.object, v.level) {
            if object != 0 {
                out.insert((object, v.blkid), (v.bp.psize, format!("{:?}", v.bp.compression), v.bp.checksum));
            }
        }
        Flow::Continue
    };
    traverse::walk(pool.zio(), Start::ObjSet(&snap.meta), Options::default(), &mut visit);
    out
}

#[test]
fn received_blocks_are_the_senders_stored_blocks_whatever_the_receivers_compression() {
    let dir = tempfile::tempdir().unwrap();
    let (src, _) = new_pool(dir.path(), "src");
    let (dst, dst_img) = new_pool(dir.path(), "dst");
    // The sender's codec is not the receiver's: written again, every block would differ.
    src.create_dataset_with("src/db", &[("compression", "zstd-9"), ("recordsize", "16K")]).unwrap();
    dst.set_property("dst", "compression", "off").unwrap();
    let ds = src.dataset("src/db").unwrap();
    let mut model = Model::new();
    let text: Vec<u8> =
        (0..(2u32 << 20)).map(|i| b"blocks go as stored, "[(i % 21) as usize] ^ (i >> 14) as u8).collect();
    write(&ds, &mut model, "pages", 0, &text);
    write(&ds, &mut model, "noise", 0, &noise(7, 300_000));
    snap(&src, "src/db@s0");
    write(&ds, &mut model, "pages", 1 << 20, &text[..200_000]);
    snap(&src, "src/db@s1");
    recv(&dst, "dst/copy", false, &send(&src, "src/db@s0", SendBase::Full)).unwrap();
    recv(&dst, "dst/copy", false, &send(&src, "src/db@s1", SendBase::Incremental("@s0"))).unwrap();
    let dst = reimport(dst, &dst_img);
    for (from, to) in [("src/db@s0", "dst/copy@s0"), ("src/db@s1", "dst/copy@s1")] {
        let sent = stored_blocks(&src, from);
        assert!(sent.values().any(|(_, c, _)| c.starts_with("Zstd")), "the sender compressed: {sent:?}");
        assert_eq!(stored_blocks(&dst, to), sent, "{to}: every block as {from} stored it (size, codec, checksum)");
    }
    assert_same(&src, "src/db@s1", &dst, "dst/copy@s1", &model);
    dst.export().unwrap();
}

#[test]
fn recv_force_destroys_the_snapshots_after_the_base_and_without_it_names_them() {
    let dir = tempfile::tempdir().unwrap();
    let (src, _) = new_pool(dir.path(), "src");
    let (dst, dst_img) = new_pool(dir.path(), "dst");
    let model = three_rounds(&src);
    recv(&dst, "dst/copy", false, &send(&src, "src/db@s0", SendBase::Full)).unwrap();
    recv(&dst, "dst/copy", false, &send(&src, "src/db@s1", SendBase::Incremental("s0"))).unwrap();
    // The receiver took snapshots of its own after the base, and changed its head.
    let copy = dst.dataset("dst/copy").unwrap();
    let ino = copy.lookup(ROOT_ID, b"big").unwrap().ino;
    copy.write(ino, 0, b"local one").unwrap();
    snap(&dst, "dst/copy@mine1");
    copy.write(ino, 0, b"local two").unwrap();
    snap(&dst, "dst/copy@mine2");
    copy.write(ino, 0, b"local three").unwrap();
    drop(copy);
    let before = tree_state(&dst.dataset("dst/copy").unwrap());
    let inc = send(&src, "src/db@s2", SendBase::Incremental("s1"));

    // Without -F: refused, naming them and the fix; nothing changed.
    let err = recv(&dst, "dst/copy", false, &inc).unwrap_err();
    assert!(matches!(err, SendError::RecvRefused { .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("after the stream's base '@s1': @mine1, @mine2") && msg.contains("-F"), "{msg}");
    assert_eq!(dst.snapshot_names("dst/copy").unwrap(), ["s0", "s1", "mine1", "mine2"]);
    assert!(tree_state(&dst.dataset("dst/copy").unwrap()) == before);

    // A clone of one of them: -F refuses and destroys none.
    dst.clone_snapshot("dst/copy@mine1", "dst/keep", &[]).unwrap();
    let err = recv(&dst, "dst/copy", true, &inc).unwrap_err();
    assert!(err.to_string().contains("dst/copy@mine1 (clones: dst/keep)"), "{err}");
    assert_eq!(dst.snapshot_names("dst/copy").unwrap(), ["s0", "s1", "mine1", "mine2"]);
    dst.destroy_dataset("dst/keep").unwrap();

    // With -F: they go, the head rolls back to the base, the stream lands.
    assert_eq!(recv(&dst, "dst/copy", true, &inc).unwrap(), ["dst/copy@s2"]);
    assert_eq!(dst.snapshot_names("dst/copy").unwrap(), ["s0", "s1", "s2"]);
    let dst = reimport(dst, &dst_img);
    assert_same(&src, "src/db@s2", &dst, "dst/copy@s2", &model);
    assert_eq!(dst.scrub().unwrap().errors, 0);
    dst.export().unwrap();
}

/// A clone is sent whole: its full stream carries the blocks it shares with its origin
/// too, so it lands in a pool that has no origin; its increments go as any dataset's. A
/// base in its origin (ZFS's `send -i ORIGIN@SNAP CLONE@SNAP`) is refused, named.
#[test]
fn a_clone_is_sent_whole_with_its_origins_blocks_and_its_increments_follow() {
    let dir = tempfile::tempdir().unwrap();
    let (src, _) = new_pool(dir.path(), "src");
    let (dst, dst_img) = new_pool(dir.path(), "dst");
    src.create_dataset_with("src/db", &[("compression", "lz4")]).unwrap();
    let mut model = Model::new();
    change(&src.dataset("src/db").unwrap(), &mut model, 0);
    snap(&src, "src/db@s0");
    src.clone_snapshot("src/db@s0", "src/cl", &[]).unwrap();
    let cl = src.dataset("src/cl").unwrap();
    change(&cl, &mut model, 1);
    snap(&src, "src/cl@c1");
    let at_c1 = model.clone();
    recv(&dst, "dst/cl", false, &send(&src, "src/cl@c1", SendBase::Full)).unwrap();
    change(&cl, &mut model, 2);
    snap(&src, "src/cl@c2");
    recv(&dst, "dst/cl", false, &send(&src, "src/cl@c2", SendBase::Incremental("@c1"))).unwrap();
    let mut out = Vec::new();
    let err = src.send("src/cl@c2", SendBase::Incremental("src/db@s0"), &mut out, &mut |_| {}).unwrap_err();
    assert!(err.to_string().contains("is a snapshot of 'src/db', not of 'src/cl'"), "{err}");
    let dst = reimport(dst, &dst_img);
    assert_same(&src, "src/cl@c1", &dst, "dst/cl@c1", &at_c1);
    assert_same(&src, "src/cl@c2", &dst, "dst/cl@c2", &model);
    assert_eq!(dst.get_properties("dst/cl", Some("origin")).unwrap()[0].value, "-");
    assert_eq!(dst.scrub().unwrap().errors, 0);
    dst.export().unwrap();
}

fn allocated(pool: &Pool) -> u64 {
    pool.sync().unwrap();
    pool.status().allocated
}

/// A chain of increments (overwrites, holes punched, truncates, removals) keeps the
/// receiver's dead lists as local writes would: every list known and equal to the walk
/// it stands for; destroying a middle snapshot goes through them and frees exactly what
/// only it held (the running allocated count is the import walk's); and the pool scrubs
/// clean.
#[test]
fn received_increments_keep_the_dead_lists_known_and_right() {
    let dir = tempfile::tempdir().unwrap();
    let (src, _) = new_pool(dir.path(), "src");
    let (dst, dst_img) = new_pool(dir.path(), "dst");
    src.create_dataset("src/db").unwrap();
    let ds = src.dataset("src/db").unwrap();
    let mut model = Model::new();
    let mut models = Vec::new();
    for round in 0..5 {
        change(&ds, &mut model, round);
        snap(&src, &format!("src/db@s{round}"));
        models.push(model.clone());
    }
    recv(&dst, "dst/copy", false, &send(&src, "src/db@s0", SendBase::Full)).unwrap();
    for round in 1..5 {
        let inc = send(&src, &format!("src/db@s{round}"), SendBase::Incremental(&format!("@s{}", round - 1)));
        recv(&dst, "dst/copy", false, &inc).unwrap();
        // Each snapshot's next tree has a known list: all of them are compared.
        assert_eq!(dst.verify_dead_lists().unwrap(), round as usize + 1, "after receiving s{round}");
    }
    let before = allocated(&dst);
    dst.destroy_snapshot("dst/copy@s2").unwrap();
    assert!(allocated(&dst) < before, "the destroy freed what only s2 held");
    assert_eq!(dst.verify_dead_lists().unwrap(), 4);
    let running = allocated(&dst);
    let dst = reimport(dst, &dst_img);
    let walked = allocated(&dst);
    assert!(walked.abs_diff(running) <= 64 << 10, "running pool had {running} bytes allocated, import found {walked}");
    for round in [0, 1, 3, 4] {
        assert_same(&src, &format!("src/db@s{round}"), &dst, &format!("dst/copy@s{round}"), &models[round]);
    }
    assert_eq!(dst.scrub().unwrap().errors, 0);
    // And the next increment after the destroy lands on a list that is still right.
    change(&ds, &mut model, 5);
    snap(&src, "src/db@s5");
    recv(&dst, "dst/copy", false, &send(&src, "src/db@s5", SendBase::Incremental("@s4"))).unwrap();
    assert_eq!(dst.verify_dead_lists().unwrap(), 5);
    dst.export().unwrap();
}

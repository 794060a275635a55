//! `tarn recv`: a send stream (`stream/`) into a dataset (ZFS's dmu_recv).
//!
//! Theory of operation. A stream is received into a hidden dataset, `TARGET%recv`: a new
//! empty one for a full stream, a clone of the target's newest snapshot for an
//! incremental one (which must be the stream's base, found by guid). Each record is
//! applied as it is read and checked (`Dataset::recv_*`), in ordinary txgs; a WRITE's
//! block is verified (it decompresses to a whole record) and stored as it came, in its
//! sender's codec, never compressed again (`Dataset::recv_stored`). Only END —
//! its chained checksum matching every record before it — makes the result the
//! target's, in one txg: the hidden dataset's tree becomes the target's head (an
//! incremental's old head is freed as a rollback frees it), and the snapshot is taken
//! with the sender's guid. Until then the target is untouched, whatever the stream
//! holds.
//!
//! Resuming. Every few MiB the receive records in the hidden dataset's properties where
//! it stands (`receive_resume_token`: the snapshot, its base, and the object and byte
//! reached), in the open txg: the records before that point were applied in that txg or
//! earlier, so whenever the token is committed so are they. A stream that stops short
//! (cut, or the receiver killed) leaves the hidden dataset and its last committed token;
//! `tarn send -t TOKEN` sends from that point and the receive goes on. A damaged stream
//! (checksum, order, malformed) drops the hidden dataset: it is to be sent again whole.
//!
//! Owns: the checks that the stream fits the target, applying its records, the token,
//! and dropping a damaged receive. The pool makes the hidden dataset and does the switch
//! at END (`Pool::create_receiving`, `Pool::finish_receive`): they touch its directory.
//!
//! Promises: a refused or damaged stream leaves the target as it was; a received
//! snapshot equals the sender's (contents, sizes, holes, attributes, object ids).
//!
//! Must never: change the target before END verified, or mount what it received.
use std::io::Read;

use serde::{Deserialize, Serialize};
use tarn_dataset::{Dataset, FsError};
use tarn_pool::{check_name, split_snapshot_name, Pool, PoolError, Received, SnapshotRef, RECV_SUFFIX, TOKEN_PROP};
use tarn_zio::StoredAs;

use crate::error::SendError;
use crate::stream::{Begin, Record, StreamError, StreamReader};
/// Stream bytes between two token updates.
const TOKEN_EVERY: u64 = 4 << 20;

/// What a receive did.
#[derive(Clone, Debug, Default)]
pub struct ReceiveSummary {
    /// The snapshots received, `POOL/DS@NAME`, in order.
    pub received: Vec<String>,
    /// Bytes of the streams read.
    pub bytes: u64,
}

/// What a resume token holds: enough for the sender to find the snapshots again and
/// start where the receiver stands.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ResumeToken {
    pub version: u32,
    /// The sender's `DS` and the snapshot name being received.
    pub dataset: String,
    pub snapshot: String,
    pub to_guid: u64,
    /// The base of an incremental stream (0: a full one).
    pub from_guid: u64,
    /// Records before this object, and before this byte of it, are received.
    pub object: u64,
    pub offset: u64,
}

const TOKEN_VERSION: u32 = 1;

impl ResumeToken {
    /// The token as printed: `1-` and the hex of its JSON (one word, safe in a shell).
    pub fn encode(&self) -> String {
        let json = serde_json::to_vec(self).expect("a token serialises");
        let hex: String = json.iter().map(|b| format!("{b:02x}")).collect();
        format!("{TOKEN_VERSION}-{hex}")
    }

    pub fn decode(token: &str) -> Result<ResumeToken, SendError> {
        let bad = |why: &str| SendError::BadToken(why.to_string());
        let hex = token.trim().strip_prefix("1-").ok_or_else(|| bad("it does not start with '1-'"))?;
        if !hex.len().is_multiple_of(2) || !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(bad("it is not hex after '1-'"));
        }
        let bytes: Vec<u8> =
            (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap_or(0)).collect();
        let t: ResumeToken = serde_json::from_slice(&bytes).map_err(|_| bad("its contents do not decode"))?;
        if t.version != TOKEN_VERSION {
            return Err(bad("it is of another version"));
        }
        Ok(t)
    }
}

/// Where the records applied so far reach: (object, byte).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Position {
    object: u64,
    offset: u64,
}

/// The object the records being applied belong to.
struct Current {
    id: u64,
    blksz: u64,
    /// Made by this stream: it has no records to free.
    fresh: bool,
}

/// Applies one stream's records to the hidden dataset.
struct Applier<'a> {
    ds: &'a Dataset,
    current: Option<Current>,
    at: Position,
    /// A WRITE's block decompressed, to verify it (reused: no allocation per block).
    scratch: Vec<u8>,
}

impl Applier<'_> {
    fn apply(&mut self, seq: u64, rec: Record) -> Result<(), ApplyError> {
        match rec {
            Record::Begin(_) => Err(out_of_order(seq, "a second BEGIN")),
            Record::End { .. } => Ok(()),
            Record::Object { id, dnode } => {
                if id == 0 {
                    return Err(malformed(seq, "object 0 is the dnode table, never sent".into()));
                }
                let fresh = self.ds.recv_object(id, &dnode)?;
                self.current = Some(Current { id, blksz: u64::from(dnode.blksz.max(1)), fresh });
                self.at = Position { object: id, offset: 0 };
                Ok(())
            }
            Record::FreeObjects { first, count } => {
                self.current = None;
                Ok(self.ds.recv_free_objects(first, count)?)
            }
            Record::Write { object, offset, compression, lsize, data, .. } => {
                let cur = self.current_of(seq, object, "WRITE")?;
                let (id, blksz) = (cur.id, cur.blksz);
                if offset % blksz != 0 || u64::from(lsize) != blksz {
                    let why = format!("a block of {lsize} bytes at byte {offset} of object {id} (blocks of {blksz})");
                    return Err(malformed(seq, why));
                }
                // Verified before it is stored: a block that does not decompress to a
                // whole record is a malformed stream. Decompressing is the cheap half of
                // the codec; the block is then stored as it came, never compressed again.
                self.scratch.resize(lsize as usize, 0);
                compression
                    .decompress(&data, &mut self.scratch)
                    .map_err(|e| malformed(seq, format!("its block does not decompress: {e}")))?;
                if self.scratch.iter().all(|&b| b == 0) {
                    // The sender stores no zero block (it is a hole); nor does the receiver.
                    self.ds.recv_free(id, offset / blksz, 1)?;
                } else {
                    self.ds.recv_stored(id, offset / blksz, data, StoredAs { compression, lsize })?;
                }
                self.at = Position { object: id, offset: offset + blksz };
                Ok(())
            }
            Record::Free { object, offset, length } => {
                let cur = self.current_of(seq, object, "FREE")?;
                let (id, blksz, fresh) = (cur.id, cur.blksz, cur.fresh);
                if !fresh {
                    let first = offset / blksz;
                    let count = length.div_ceil(blksz);
                    self.ds.recv_free(id, first, count)?;
                }
                self.at = Position { object: id, offset: offset.saturating_add(length) };
                Ok(())
            }
        }
    }

    fn current_of(&self, seq: u64, object: u64, what: &str) -> Result<&Current, ApplyError> {
        match &self.current {
            Some(c) if c.id == object => Ok(c),
            _ => Err(out_of_order(seq, &format!("a {what} of object {object} not after its OBJECT"))),
        }
    }
}

/// Why a record could not be applied: the stream's fault, or the pool's.
enum ApplyError {
    Stream(StreamError),
    Pool(SendError),
}

impl From<FsError> for ApplyError {
    fn from(e: FsError) -> Self {
        ApplyError::Pool(e.into())
    }
}

fn out_of_order(seq: u64, why: &str) -> ApplyError {
    ApplyError::Stream(StreamError::OutOfOrder { seq, why: why.to_string() })
}

fn malformed(seq: u64, why: String) -> ApplyError {
    ApplyError::Stream(StreamError::Malformed { seq, why })
}

/// What the checks before a stream's records found: where to receive and how.
struct Plan {
    /// The hidden dataset, `TARGET%recv`.
    recv: String,
    /// For an incremental stream: the base snapshot, the target's newest.
    base: Option<SnapshotRef>,
}

/// `tarn recv TARGET [-F]`: receives every stream on `input` into `TARGET` (a full
/// stream creates it; each incremental one needs its base to be the target's newest
/// snapshot, `force` rolling the target back to it first). `progress` is told the bytes
/// read so far now and then.
pub fn receive(
    pool: &Pool,
    target: &str,
    force: bool,
    input: &mut dyn Read,
    progress: &mut dyn FnMut(u64),
) -> Result<ReceiveSummary, SendError> {
    check_name(target)?;
    pool.check_in_pool(target, target)?;
    if target == pool.name() {
        return Err(refused(target, "the pool's root dataset cannot be received into"));
    }
    let mut summary = ReceiveSummary::default();
    loop {
        let stream_err = |source| SendError::Stream { target: target.to_string(), source };
        let mut reader = match StreamReader::open(input) {
            Ok(Some(r)) => r,
            Ok(None) if summary.received.is_empty() => return Err(stream_err(StreamError::Empty)),
            Ok(None) => return Ok(summary),
            Err(e) => return Err(stream_err(e)),
        };
        let begin = match reader.next().map_err(stream_err)? {
            Record::Begin(b) => b,
            _ => {
                return Err(stream_err(StreamError::OutOfOrder { seq: 0, why: "the first record is not BEGIN".into() }))
            }
        };
        let base = summary.bytes;
        let name = receive_one(pool, target, force, &begin, &mut reader, &mut |b| progress(base + b))?;
        summary.bytes += reader.at;
        summary.received.push(name);
    }
}

fn receive_one(
    pool: &Pool,
    target: &str,
    force: bool,
    begin: &Begin,
    reader: &mut StreamReader<'_>,
    progress: &mut dyn FnMut(u64),
) -> Result<String, SendError> {
    let full = format!("{target}@{}", begin.snapshot);
    split_snapshot_name(&full)?;
    let plan = plan_receive(pool, target, force, begin)?;
    let ds = pool.dataset(&plan.recv)?;
    let mut applier = Applier { ds: &ds, current: None, at: Position::default(), scratch: Vec::new() };
    if begin.is_resume() {
        applier.at = Position { object: begin.resume_object, offset: begin.resume_offset };
    }
    let mut token_at = reader.at;
    let outcome = loop {
        let rec = match reader.next() {
            Ok(r) => r,
            Err(e) => break Err(ApplyError::Stream(e)),
        };
        let seq = reader_seq(reader);
        let end = match &rec {
            Record::End { to_guid, .. } if *to_guid != begin.to_guid => {
                break Err(malformed(seq, "END names another snapshot than BEGIN".into()));
            }
            Record::End { .. } => true,
            _ => false,
        };
        if let Err(e) = applier.apply(seq, rec) {
            break Err(e);
        }
        if end {
            break Ok(());
        }
        progress(reader.at);
        if reader.at - token_at >= TOKEN_EVERY {
            pool.set_receive_token(&plan.recv, token_of(begin, applier.at).encode())?;
            token_at = reader.at;
        }
    };
    match outcome {
        Ok(()) => {
            ds.recv_next_obj(begin.next_obj);
            ds.recv_unlinked(&begin.unlinked);
            drop(ds);
            let received = Received {
                name: begin.snapshot.clone(),
                creation: begin.creation,
                guid: begin.to_guid,
                unlinked: begin.unlinked.clone(),
            };
            pool.finish_receive(&plan.recv, target, plan.base.as_ref(), &received).map_err(|e| match e {
                // Made by another command while the stream came: the stream's tree stays
                // hidden, to be resumed into (its token is kept) or aborted.
                PoolError::DatasetExists(_) => refused(target, "it was created while the stream was being received"),
                e => e.into(),
            })?;
            Ok(full)
        }
        Err(ApplyError::Stream(e)) if e.is_interruption() => {
            let token = token_of(begin, applier.at);
            pool.set_receive_token(&plan.recv, token.encode())?;
            pool.sync()?;
            Err(SendError::RecvInterrupted { target: target.into(), source: e, token: token.encode() })
        }
        Err(e) => {
            drop(ds);
            // The hidden dataset goes; if even that fails, the next receive says so.
            let _ = pool.destroy_dataset(&plan.recv);
            Err(match e {
                ApplyError::Stream(source) => SendError::Stream { target: target.into(), source },
                ApplyError::Pool(p) => p,
            })
        }
    }
}

/// Checks the stream against the target and makes (or, resuming, finds) the hidden
/// dataset.
fn plan_receive(pool: &Pool, target: &str, force: bool, begin: &Begin) -> Result<Plan, SendError> {
    let recv = format!("{target}{RECV_SUFFIX}");
    let hidden = pool.dataset_exists(&recv);
    if hidden && !begin.is_resume() {
        // Checked before anything else: a -F must not roll the target back first.
        let why = format!(
            "a receive into it was interrupted; resume it with `tarn send -t TOKEN` (the token: `tarn get \
             {TOKEN_PROP} {recv}`) or abort it with `tarn recv -A {target}`"
        );
        return Err(refused(target, &why));
    }
    let base = if begin.is_incremental() { Some(check_base(pool, target, force, begin)?) } else { None };
    if base.is_none() && pool.dataset_exists(target) {
        let why = "it exists; a full stream creates its dataset (destroy it, or send incrementally)";
        return Err(refused(target, why));
    }
    if base.is_some() && pool.snapshot_refs(target)?.iter().any(|s| s.name == begin.snapshot) {
        return Err(refused(target, &format!("it already has a snapshot '{}'", begin.snapshot)));
    }
    if begin.is_resume() {
        if !hidden {
            return Err(refused(target, "no interrupted receive to resume (the stream was sent with -t)"));
        }
        let token = pool.local_property(&recv, TOKEN_PROP).map(|t| ResumeToken::decode(&t)).transpose()?;
        let at = token.as_ref().map(|t| (t.to_guid, t.object, t.offset));
        if at != Some((begin.to_guid, begin.resume_object, begin.resume_offset)) {
            let why =
                "the stream resumes another point than the interrupted receive (use the token `tarn recv` printed, or \
                       `tarn get receive_resume_token`)";
            return Err(refused(target, why));
        }
        return Ok(Plan { recv, base });
    }
    let Some((parent, _)) = target.rsplit_once('/') else {
        return Err(PoolError::BadName(target.into(), "a dataset name is POOL/NAME".into()).into());
    };
    pool.dataset(parent)?;
    pool.create_receiving(&recv, token_of(begin, Position::default()).encode(), base.as_ref())?;
    Ok(Plan { recv, base })
}

/// The target's snapshot that is an incremental stream's base, which must be its newest:
/// `force` destroys the snapshots after it (newest first) and rolls back changes made
/// since it, as `zfs recv -F` does — before the stream's records are read, so a stream
/// refused later does not bring them back.
fn check_base(pool: &Pool, target: &str, force: bool, begin: &Begin) -> Result<SnapshotRef, SendError> {
    if !pool.dataset_exists(target) {
        return Err(refused(target, "it does not exist; an incremental stream needs its base there"));
    }
    let list = pool.snapshot_refs(target)?;
    let Some(newest) = list.last().cloned() else {
        return Err(refused(target, "it has no snapshot; the stream is incremental and needs its base"));
    };
    let Some(at) = list.iter().position(|s| s.guid == begin.from_guid) else {
        let why = format!(
            "its newest snapshot '@{}' is not the stream's base (no snapshot of it has the base's guid {:#x})",
            newest.name, begin.from_guid
        );
        return Err(refused(target, &why));
    };
    let base = list[at].clone();
    let newer = &list[at + 1..];
    if !newer.is_empty() {
        if !force || begin.is_resume() {
            let names: Vec<String> = newer.iter().map(|s| format!("@{}", s.name)).collect();
            let why = format!(
                "it has snapshots after the stream's base '@{}': {}; receive with -F to destroy them and roll back, or \
                 destroy them first (tarn snap destroy)",
                base.name,
                names.join(", ")
            );
            return Err(refused(target, &why));
        }
        refuse_cloned(pool, target, newer)?;
        for s in newer.iter().rev() {
            pool.destroy_snapshot(&format!("{target}@{}", s.name))?;
        }
    }
    let newest = base;
    if !begin.is_resume() && !pool.head_is(target, &newest)? {
        if !force {
            let why = format!("it was modified since its newest snapshot '@{}'; use -F to roll it back", newest.name);
            return Err(refused(target, &why));
        }
        pool.rollback(&format!("{target}@{}", newest.name))?;
    }
    Ok(newest)
}

/// `-F` destroys `newer` only if none has a clone: checked for all of them first, so a
/// refusal destroys none.
fn refuse_cloned(pool: &Pool, target: &str, newer: &[SnapshotRef]) -> Result<(), SendError> {
    let names: Vec<String> = newer.iter().map(|s| format!("{target}@{}", s.name)).collect();
    let cloned: Vec<String> = pool
        .snapshots(Some(target))?
        .into_iter()
        .filter(|i| names.contains(&i.name) && !i.clones.is_empty())
        .map(|i| format!("{} (clones: {})", i.name, i.clones.join(", ")))
        .collect();
    if cloned.is_empty() {
        return Ok(());
    }
    let why = format!(
        "-F would destroy snapshots that have clones: {}; destroy or promote the clones first",
        cloned.join("; ")
    );
    Err(refused(target, &why))
}

/// `tarn recv -A TARGET`: drops an interrupted receive into `TARGET` and what it had
/// received.
pub fn abort_receive(pool: &Pool, target: &str) -> Result<(), SendError> {
    let recv = format!("{target}{RECV_SUFFIX}");
    if !pool.dataset_exists(&recv) {
        return Err(refused(target, "no interrupted receive to abort"));
    }
    Ok(pool.destroy_dataset(&recv)?)
}

/// The resume token of an interrupted receive into `TARGET`, if there is one.
pub fn resume_token(pool: &Pool, target: &str) -> Option<String> {
    pool.local_property(&format!("{target}{RECV_SUFFIX}"), TOKEN_PROP)
}

fn reader_seq(reader: &StreamReader<'_>) -> u64 {
    reader.seq().saturating_sub(1)
}

fn token_of(begin: &Begin, at: Position) -> ResumeToken {
    ResumeToken {
        version: TOKEN_VERSION,
        dataset: begin.dataset.clone(),
        snapshot: begin.snapshot.clone(),
        to_guid: begin.to_guid,
        from_guid: begin.from_guid,
        object: at.object,
        offset: at.offset,
    }
}

fn refused(target: &str, why: &str) -> SendError {
    SendError::RecvRefused { target: target.into(), why: why.into() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::StreamWriter;
    use crate::{SendBase, SendRecv};
    use tarn_dataset::{NewObject, ROOT_ID};
    use tarn_pool::{CreateOptions, VdevSpec};
    use tarn_zio::Compression;

    /// `stream` with every WRITE's block replaced by `bad` (its records' checksums made
    /// again: the stream is whole, its blocks are not).
    fn with_blocks(stream: &[u8], bad: &[u8]) -> Vec<u8> {
        let mut input = stream;
        let mut reader = StreamReader::open(&mut input).unwrap().unwrap();
        let mut out = Vec::new();
        let mut w = StreamWriter::new(&mut out).unwrap();
        loop {
            match reader.next().unwrap() {
                Record::End { to_guid, .. } => {
                    w.end(to_guid).unwrap();
                    return out;
                }
                Record::Write { object, offset, birth, lsize, .. } => {
                    let data = bad.to_vec();
                    w.put(&Record::Write { object, offset, birth, compression: Compression::Lz4, lsize, data }).unwrap()
                }
                rec => w.put(&rec).unwrap(),
            }
        }
    }

    #[test]
    fn a_block_that_does_not_decompress_to_a_whole_record_is_a_malformed_stream_never_stored() {
        let dir = tempfile::tempdir().unwrap();
        let opts = CreateOptions { size: Some(256 << 20), ..Default::default() };
        let pool = Pool::create("p", &[VdevSpec::Disk(dir.path().join("p.img"))], &opts).unwrap();
        let ds = pool.create_dataset_with("p/src", &[("compression", "lz4")]).unwrap();
        let ino = ds.create(ROOT_ID, b"f", NewObject::File, 0o644, 0, 0).unwrap().ino;
        ds.write(ino, 0, &vec![b'x'; 64 << 10]).unwrap();
        pool.create_snapshots(&["p/src@s".to_string()], false).unwrap();
        let mut stream = Vec::new();
        pool.send("p/src@s", SendBase::Full, &mut stream, &mut |_| {}).unwrap();
        // Not lz4 at all; lz4 of fewer bytes than a record; lz4 of zeros is fine (a hole).
        let short = Compression::Lz4.compress(&[b'y'; 4096]).unwrap();
        for bad in [vec![0xff; 40], short] {
            let mut input = &with_blocks(&stream, &bad)[..];
            let err = pool.receive("p/dst", false, &mut input, &mut |_| {}).unwrap_err();
            let SendError::Stream { source: StreamError::Malformed { why, .. }, .. } = &err else { panic!("{err}") };
            assert!(why.contains("does not decompress"), "{err}");
            assert!(!pool.dataset_exists("p/dst") && !pool.dataset_exists("p/dst%recv"), "nothing stored: {err}");
        }
    }
}

//! `tarn recv`: a send stream (`stream.rs`) into a dataset (ZFS's dmu_recv).
//!
//! Theory of operation. A stream is received into a hidden dataset, `TARGET%recv`: a new
//! empty one for a full stream, a clone of the target's newest snapshot for an
//! incremental one (which must be the stream's base, found by guid). Each record is
//! applied as it is read and checked (`Dataset::recv_*`), in ordinary txgs. Only END —
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
//! Owns: the hidden dataset's life, the checks that the stream fits the target, the
//! token, and the switch at END.
//!
//! Promises: a refused or damaged stream leaves the target as it was; a received
//! snapshot equals the sender's (contents, sizes, holes, attributes, object ids).
//!
//! Must never: change the target before END verified, or mount what it received.
use std::collections::BTreeMap;
use std::io::Read;

use serde::{Deserialize, Serialize};
use tarn_dataset::{Dataset, FsError};

use crate::datasets::check_name;
use crate::error::PoolError;
use crate::pool::{now_secs, Destroyed, DsMeta, Pool};
use crate::snapshots::{split_snapshot_name, Origin, Snap, SnapOp};
use crate::stream::{Begin, Record, StreamError, StreamReader};

/// The hidden dataset a receive into `TARGET` writes: `TARGET%recv`.
pub const RECV_SUFFIX: &str = "%recv";
/// The property of the hidden dataset holding where an interrupted receive stands.
pub const TOKEN_PROP: &str = "receive_resume_token";
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

    pub fn decode(token: &str) -> Result<ResumeToken, PoolError> {
        let bad = |why: &str| PoolError::BadToken(why.to_string());
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
                let mut logical = vec![0u8; lsize as usize];
                compression
                    .decompress(&data, &mut logical)
                    .map_err(|e| malformed(seq, format!("its block does not decompress: {e}")))?;
                self.ds.recv_record(id, offset / blksz, logical)?;
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
    Pool(PoolError),
}

impl From<FsError> for ApplyError {
    fn from(e: FsError) -> Self {
        ApplyError::Pool(PoolError::Fs(e))
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
    recv: String,
    /// For an incremental stream: the target's record and the base snapshot.
    incremental: Option<(DsMeta, Snap)>,
}

impl Pool {
    /// `tarn recv TARGET [-F]`: receives every stream on `input` into `TARGET` (a full
    /// stream creates it; each incremental one needs its base to be the target's newest
    /// snapshot, `force` rolling the target back to it first). `progress` is told the
    /// bytes read so far now and then.
    pub fn receive(
        &self,
        target: &str,
        force: bool,
        input: &mut dyn Read,
        progress: &mut dyn FnMut(u64),
    ) -> Result<ReceiveSummary, PoolError> {
        check_name(target)?;
        self.check_in_pool(target, target)?;
        if target == self.inner.name {
            return Err(refused(target, "the pool's root dataset cannot be received into"));
        }
        let mut summary = ReceiveSummary::default();
        loop {
            let stream_err = |source| PoolError::Stream { target: target.to_string(), source };
            let mut reader = match StreamReader::open(input) {
                Ok(Some(r)) => r,
                Ok(None) if summary.received.is_empty() => return Err(stream_err(StreamError::Empty)),
                Ok(None) => return Ok(summary),
                Err(e) => return Err(stream_err(e)),
            };
            let begin = match reader.next().map_err(stream_err)? {
                Record::Begin(b) => b,
                _ => {
                    return Err(stream_err(StreamError::OutOfOrder {
                        seq: 0,
                        why: "the first record is not BEGIN".into(),
                    }))
                }
            };
            let base = summary.bytes;
            let name = self.receive_one(target, force, &begin, &mut reader, &mut |b| progress(base + b))?;
            summary.bytes += reader.at;
            summary.received.push(name);
        }
    }

    fn receive_one(
        &self,
        target: &str,
        force: bool,
        begin: &Begin,
        reader: &mut StreamReader<'_>,
        progress: &mut dyn FnMut(u64),
    ) -> Result<String, PoolError> {
        let full = format!("{target}@{}", begin.snapshot);
        split_snapshot_name(&full)?;
        let plan = self.plan_receive(target, force, begin)?;
        let ds = self.dataset(&plan.recv)?;
        let mut applier = Applier { ds: &ds, current: None, at: Position::default() };
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
                self.set_token(&plan.recv, &token_of(begin, applier.at))?;
                token_at = reader.at;
            }
        };
        match outcome {
            Ok(()) => {
                ds.recv_next_obj(begin.next_obj);
                ds.recv_unlinked(&begin.unlinked);
                drop(ds);
                self.finish_receive(target, &plan, begin)?;
                Ok(full)
            }
            Err(ApplyError::Stream(e)) if e.is_interruption() => {
                let token = token_of(begin, applier.at);
                self.set_token(&plan.recv, &token)?;
                self.sync()?;
                Err(PoolError::RecvInterrupted { target: target.into(), source: e, token: token.encode() })
            }
            Err(e) => {
                drop(ds);
                // The hidden dataset goes; if even that fails, the next receive says so.
                let _ = self.destroy_dataset(&plan.recv);
                Err(match e {
                    ApplyError::Stream(source) => PoolError::Stream { target: target.into(), source },
                    ApplyError::Pool(p) => p,
                })
            }
        }
    }

    /// Checks the stream against the target and makes (or, resuming, finds) the hidden
    /// dataset.
    fn plan_receive(&self, target: &str, force: bool, begin: &Begin) -> Result<Plan, PoolError> {
        let recv = format!("{target}{RECV_SUFFIX}");
        let hidden = self.inner.datasets.read().get(&recv).map(|(m, _)| m.clone());
        if hidden.is_some() && !begin.is_resume() {
            // Checked before anything else: a -F must not roll the target back first.
            let why = format!(
                "a receive into it was interrupted; resume it with `tarn send -t TOKEN` (the token: `tarn get \
                 {TOKEN_PROP} {recv}`) or abort it with `tarn recv -A {target}`"
            );
            return Err(refused(target, &why));
        }
        let incremental = if begin.is_incremental() { Some(self.check_base(target, force, begin)?) } else { None };
        if incremental.is_none() && self.inner.datasets.read().contains_key(target) {
            let why = "it exists; a full stream creates its dataset (destroy it, or send incrementally)";
            return Err(refused(target, why));
        }
        if let Some((meta, _)) = &incremental {
            let taken =
                self.inner.snaps.read().get(&meta.id).is_some_and(|v| v.iter().any(|s| s.name == begin.snapshot));
            if taken {
                return Err(refused(target, &format!("it already has a snapshot '{}'", begin.snapshot)));
            }
        }
        if begin.is_resume() {
            let Some(meta) = hidden else {
                return Err(refused(target, "no interrupted receive to resume (the stream was sent with -t)"));
            };
            let token = meta.props.get(TOKEN_PROP).map(|t| ResumeToken::decode(t)).transpose()?;
            let at = token.as_ref().map(|t| (t.to_guid, t.object, t.offset));
            if at != Some((begin.to_guid, begin.resume_object, begin.resume_offset)) {
                let why = "the stream resumes another point than the interrupted receive (use the token `tarn recv` printed, or \
                           `tarn get receive_resume_token`)";
                return Err(refused(target, why));
            }
            return Ok(Plan { recv, incremental });
        }
        let Some((parent, _)) = target.rsplit_once('/') else {
            return Err(PoolError::BadName(target.into(), "a dataset name is POOL/NAME".into()));
        };
        self.dataset(parent)?;
        let id = {
            let mut next = self.inner.next_dataset_id.lock();
            *next += 1;
            *next
        };
        let mut props = BTreeMap::new();
        props.insert(TOKEN_PROP.to_string(), token_of(begin, Position::default()).encode());
        let hold = self.inner.ctx.txg.hold(1024).map_err(FsError::from)?;
        let txg = hold.txg;
        let opened = match &incremental {
            None => self.add_dataset(&recv, id, props, None, 1, Vec::new(), now_secs(), None),
            Some((meta, base)) => {
                let origin = Origin { dataset: meta.id, snapshot: base.name.clone(), txg: base.txg };
                let ds = self.add_dataset(
                    &recv,
                    id,
                    props,
                    Some(base.meta.clone()),
                    base.next_obj,
                    base.unlinked.clone(),
                    now_secs(),
                    Some(origin),
                );
                if let Ok(ds) = &ds {
                    ds.set_used(base.referenced);
                }
                ds
            }
        };
        drop(hold);
        opened?;
        self.inner.ctx.txg.wait_synced(txg).map_err(FsError::from)?;
        Ok(Plan { recv, incremental })
    }

    /// The target of an incremental stream and its newest snapshot, which must be the
    /// stream's base; `force` rolls back changes made since it.
    fn check_base(&self, target: &str, force: bool, begin: &Begin) -> Result<(DsMeta, Snap), PoolError> {
        let (meta, head) = {
            let sets = self.inner.datasets.read();
            let found = sets.get(target).map(|(m, d)| (m.clone(), d.clone()));
            found.ok_or_else(|| refused(target, "it does not exist; an incremental stream needs its base there"))?
        };
        let list = self.inner.snaps.read().get(&meta.id).cloned().unwrap_or_default();
        let Some(newest) = list.last().cloned() else {
            return Err(refused(target, "it has no snapshot; the stream is incremental and needs its base"));
        };
        if newest.guid != begin.from_guid {
            let why = match list.iter().find(|s| s.guid == begin.from_guid) {
                Some(base) => format!(
                    "its newest snapshot is '@{}', but the stream's base is '@{}'; destroy the snapshots after it first",
                    newest.name, base.name
                ),
                None => format!(
                    "its newest snapshot '@{}' is not the stream's base (no snapshot of it has the base's guid {:#x})",
                    newest.name, begin.from_guid
                ),
            };
            return Err(refused(target, &why));
        }
        if !begin.is_resume() {
            self.sync()?;
            if head.meta_dnode() != newest.meta {
                if !force {
                    let why =
                        format!("it was modified since its newest snapshot '@{}'; use -F to roll it back", newest.name);
                    return Err(refused(target, &why));
                }
                self.rollback(&format!("{target}@{}", newest.name))?;
            }
        }
        Ok((meta, newest))
    }

    /// Records where the receive into hidden dataset `recv` stands, in the open txg.
    fn set_token(&self, recv: &str, token: &ResumeToken) -> Result<(), PoolError> {
        let _hold = self.inner.ctx.txg.hold(0).map_err(FsError::from)?;
        let mut sets = self.inner.datasets.write();
        let (meta, _) = sets.get_mut(recv).ok_or_else(|| PoolError::NoSuchDataset(recv.into()))?;
        meta.props.insert(TOKEN_PROP.to_string(), token.encode());
        Ok(())
    }

    /// END verified: in one txg, the hidden dataset's tree becomes the target's head and
    /// the snapshot is taken with the sender's guid.
    fn finish_receive(&self, target: &str, plan: &Plan, begin: &Begin) -> Result<(), PoolError> {
        self.sync()?;
        let _serial = self.inner.snap_lock.lock();
        let hold = self.inner.ctx.txg.hold(1024).map_err(FsError::from)?;
        let txg = hold.txg;
        let (recv_meta, recv_ds) = {
            let mut sets = self.inner.datasets.write();
            sets.remove(&plan.recv).ok_or_else(|| PoolError::NoSuchDataset(plan.recv.clone()))?
        };
        let (id, props, creation, origin) = match &plan.incremental {
            None => {
                if self.inner.datasets.read().contains_key(target) {
                    // Made by another command while the stream came: the stream's tree
                    // stays hidden, to be resumed into (its token is kept) or aborted.
                    self.inner.datasets.write().insert(plan.recv.clone(), (recv_meta, recv_ds));
                    return Err(refused(target, "it was created while the stream was being received"));
                }
                (recv_meta.id, BTreeMap::new(), now_secs(), None)
            }
            Some((_, base)) => {
                let old = self.inner.datasets.write().remove(target);
                let (meta, old) = old.ok_or_else(|| PoolError::NoSuchDataset(target.into()))?;
                // The old head goes as a rollback's does: what it holds past the base.
                self.inner.destroy_queue.lock().push(Destroyed { meta: old.meta_dnode(), floor: base.txg });
                (meta.id, meta.props, meta.creation, meta.origin)
            }
        };
        let opened = self.add_dataset(
            target,
            id,
            props,
            Some(recv_ds.meta_dnode()),
            recv_ds.next_obj(),
            begin.unlinked.clone(),
            creation,
            origin,
        );
        let used = recv_ds.used();
        drop(recv_ds);
        let opened = opened?;
        opened.set_used(used);
        let take =
            SnapOp::Take { dataset: id, name: begin.snapshot.clone(), creation: begin.creation, guid: begin.to_guid };
        self.inner.snap_ops.lock().push(take);
        drop(hold);
        self.inner.ctx.txg.wait_synced(txg).map_err(FsError::from)?;
        Ok(())
    }

    /// `tarn recv -A TARGET`: drops an interrupted receive into `TARGET` and what it
    /// had received.
    pub fn abort_receive(&self, target: &str) -> Result<(), PoolError> {
        let recv = format!("{target}{RECV_SUFFIX}");
        if !self.inner.datasets.read().contains_key(&recv) {
            return Err(refused(target, "no interrupted receive to abort"));
        }
        self.destroy_dataset(&recv)
    }

    /// The resume token of an interrupted receive into `TARGET`, if there is one.
    pub fn resume_token(&self, target: &str) -> Option<String> {
        let recv = format!("{target}{RECV_SUFFIX}");
        let sets = self.inner.datasets.read();
        sets.get(&recv).and_then(|(m, _)| m.props.get(TOKEN_PROP).cloned())
    }
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

fn refused(target: &str, why: &str) -> PoolError {
    PoolError::RecvRefused { target: target.into(), why: why.into() }
}

//! `tarn send`: a snapshot as a stream (`stream/`), whole or incremental from an older
//! snapshot of the same dataset (ZFS's dmu_send).
//!
//! Theory of operation. The snapshot's object set is walked once (`traverse`). For an
//! incremental stream every block born at or before the base's txg is passed over with
//! its whole subtree — a block is never born before a block under it — so the walk
//! costs the blocks changed since the base, not the dataset. Each object of a dnode
//! block that changed goes as OBJECT (its attributes as stored); each level-0 block
//! reached goes as WRITE with its stored bytes, compressed as on disk (read verified,
//! never decompressed nor compressed again); each empty slot of an indirect block
//! reached goes as FREE (a hole, or records cut since the base), and each free dnode
//! slot of a changed dnode block as FREEOBJECTS (incremental only: a full stream's
//! receiver has nothing to free).
//!
//! Owns: which records a snapshot (and a base) give, in which order.
//!
//! Promises: the stream brings a receiver at the base (or at nothing) to exactly the
//! snapshot; a block that fails its checksum stops the send with the error (no stream
//! ends with END unless every block went).
//!
//! Must never: change anything in the pool, or keep a reclaim section open across the walk (it
//! would stall every commit for the length of the send): the blocks are verified by
//! their checksums, and a snapshot destroyed under the send is found at the end.
use std::io::Write;

use tarn_objects::traverse::{self, Entering, Flow, Options, Outcome, Start, Visit, Visitor};
use tarn_objects::tree::{decode_indirect, span};
use tarn_objects::{Dnode, DNODE_SIZE};
use tarn_zio::Zio;

use tarn_pool::{split_snapshot_name, Pool, SnapshotRef};

use crate::error::SendError;
use crate::stream::{Begin, Record, StreamWriter, FLAG_INCREMENTAL, FLAG_RESUME};

/// What a send wrote.
#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct SendSummary {
    /// Streams written (more than one with intermediates, `-I`).
    pub streams: u32,
    /// Bytes of the streams.
    pub bytes: u64,
    /// Blocks sent, and their logical (uncompressed) bytes.
    pub blocks: u64,
    pub logical: u64,
}

/// Which snapshots a send covers.
#[derive(Clone, Copy, Debug)]
pub enum SendBase<'a> {
    /// The whole snapshot.
    Full,
    /// Only what changed since this snapshot (`-i`): `@NAME`, `NAME` or `DS@NAME`.
    Incremental(&'a str),
    /// From this snapshot through every snapshot between it and the one sent (`-I`).
    Intermediates(&'a str),
}

/// The walk's visitor: turns visited blocks into records.
struct Sender<'a, 'w> {
    zio: &'a Zio,
    out: &'a mut StreamWriter<'w>,
    /// Blocks born at or before it are the receiver's already (0: a full stream).
    from_txg: u64,
    incremental: bool,
    /// Block size of the object being walked.
    blksz: u64,
    /// A FREE being gathered: (object, first byte, end byte).
    free: Option<(u64, u64, u64)>,
    summary: SendSummary,
    /// Count the blocks' stored bytes instead of reading and writing them.
    estimate: bool,
    /// Where a resumed send starts (object, byte): what lies before is the receiver's.
    resume: Option<(u64, u64)>,
    /// Dnodes per block of the dnode table.
    per_block: u64,
    /// Why the walk stopped, if it did.
    failed: Option<SendError>,
    progress: &'a mut dyn FnMut(u64),
}

impl Sender<'_, '_> {
    fn put(&mut self, rec: &Record) -> Flow {
        match self.out.put(rec) {
            Ok(()) => {
                (self.progress)(self.out.bytes);
                Flow::Continue
            }
            Err(e) => self.fail(SendError::StreamWrite(e)),
        }
    }

    fn fail(&mut self, e: SendError) -> Flow {
        self.failed.get_or_insert(e);
        Flow::Stop
    }

    /// Gathers adjacent holes of one object into one FREE.
    fn free(&mut self, object: u64, start: u64, end: u64) -> Flow {
        match &mut self.free {
            Some((o, _, e)) if *o == object && *e == start => {
                *e = end;
                Flow::Continue
            }
            _ => {
                let flow = self.flush_free();
                self.free = Some((object, start, end));
                flow
            }
        }
    }

    fn flush_free(&mut self) -> Flow {
        match self.free.take() {
            Some((object, start, end)) => self.put(&Record::Free { object, offset: start, length: end - start }),
            None => Flow::Continue,
        }
    }

    /// The free slots of a changed dnode block, as FREEOBJECTS runs.
    fn free_slots(&mut self, blkid: u64, data: &[u8]) -> Flow {
        let per_block = (data.len() / DNODE_SIZE) as u64;
        let mut run: Option<(u64, u64)> = None;
        for (i, raw) in data.chunks_exact(DNODE_SIZE).enumerate() {
            let id = blkid * per_block + i as u64;
            let free = id != 0 && matches!(Dnode::decode(raw), Ok(None));
            match (&mut run, free) {
                (Some((_, n)), true) => *n += 1,
                (None, true) => run = Some((id, 1)),
                (Some(_), false) => {
                    let (first, count) = run.take().expect("a run");
                    if self.put(&Record::FreeObjects { first, count }) == Flow::Stop {
                        return Flow::Stop;
                    }
                }
                (None, false) => {}
            }
        }
        match run {
            Some((first, count)) => self.put(&Record::FreeObjects { first, count }),
            None => Flow::Continue,
        }
    }

    fn data_block(&mut self, v: &Visit<'_>, object: u64) -> Flow {
        let bp = v.bp;
        if self.estimate {
            self.summary.blocks += 1;
            self.summary.logical += u64::from(bp.lsize);
            self.summary.bytes += u64::from(bp.psize);
            return Flow::Continue;
        }
        let data = match self.zio.read_stored(bp) {
            Ok(d) => d,
            Err(e) => {
                return self.fail(SendError::SendRead { object, offset: v.blkid * self.blksz, why: e.to_string() })
            }
        };
        self.summary.blocks += 1;
        self.summary.logical += u64::from(bp.lsize);
        let offset = v.blkid * self.blksz;
        let rec = Record::Write { object, offset, birth: bp.birth, compression: bp.compression, lsize: bp.lsize, data };
        self.put(&rec)
    }

    /// The empty slots of an object's indirect block: holes.
    fn holes(&mut self, v: &Visit<'_>, object: u64, data: &[u8]) -> Flow {
        let children = match decode_indirect(data) {
            Ok(c) => c,
            Err(e) => return self.fail(SendError::SendRead { object, offset: 0, why: e.to_string() }),
        };
        let records = span(v.level - 1);
        for (slot, child) in children.iter().enumerate() {
            if child.is_none() {
                let first = (v.blkid * children.len() as u64 + slot as u64).saturating_mul(records);
                let start = first.saturating_mul(self.blksz);
                let end = first.saturating_add(records).saturating_mul(self.blksz);
                if self.free(object, start, end) == Flow::Stop {
                    return Flow::Stop;
                }
            }
        }
        Flow::Continue
    }
}

impl Visitor for Sender<'_, '_> {
    fn enter(&mut self, b: &Entering<'_>) -> Flow {
        if self.incremental && b.bp.birth <= self.from_txg {
            return Flow::Skip;
        }
        if let Some((object, offset)) = self.resume {
            // A subtree wholly before the resume point was received already.
            let end = b.blkid.saturating_add(1).saturating_mul(span(b.level));
            match b.object {
                Some(0) if end.saturating_mul(self.per_block) <= object => return Flow::Skip,
                Some(o) if o == object && end.saturating_mul(self.blksz) <= offset => return Flow::Skip,
                _ => {}
            }
        }
        Flow::Continue
    }

    fn object(&mut self, id: u64, dnode: &Dnode) -> Flow {
        if self.flush_free() == Flow::Stop {
            return Flow::Stop;
        }
        if self.resume.is_some_and(|(object, _)| id < object) {
            return Flow::Skip;
        }
        self.blksz = u64::from(dnode.blksz.max(1));
        if self.put(&Record::Object { id, dnode: Box::new(dnode.clone()) }) == Flow::Stop {
            return Flow::Stop;
        }
        if self.incremental && dnode.root.is_none() {
            // No tree at all: whatever the receiver holds of it goes.
            return self.put(&Record::Free { object: id, offset: 0, length: u64::MAX });
        }
        Flow::Continue
    }

    fn block(&mut self, v: &Visit<'_>) -> Flow {
        let Some(object) = v.object else { return Flow::Continue };
        let data = match &v.outcome {
            Outcome::Failed(e) => {
                let why = e.to_string();
                return self.fail(SendError::SendRead { object, offset: v.blkid * self.blksz, why });
            }
            Outcome::Verified { data, .. } => Some(*data),
            Outcome::NotRead => None,
        };
        match (object, v.level, data) {
            (0, 0, Some(data)) if self.incremental => self.free_slots(v.blkid, data),
            (0, _, _) => Flow::Continue,
            (_, 0, _) => self.data_block(v, object),
            (_, _, Some(data)) => self.holes(v, object, data),
            (_, _, None) => Flow::Continue,
        }
    }

    fn bad_dnode(&mut self, id: u64, error: &tarn_objects::dnode::DnodeError) -> Flow {
        self.fail(SendError::SendRefused { snapshot: format!("object {id}"), why: error.to_string() })
    }
}

/// One stream to write: its base (none: full), its snapshot, where it resumes.
type Step = (Option<SnapshotRef>, SnapshotRef, Option<(u64, u64)>);

/// `tarn send DS@SNAP [-i|-I BASE]`: writes the stream(s) to `out`; `progress` is told
/// the bytes written so far now and then.
pub fn send(
    pool: &Pool,
    snapshot: &str,
    base: SendBase<'_>,
    out: &mut dyn Write,
    progress: &mut dyn FnMut(u64),
) -> Result<SendSummary, SendError> {
    let steps = send_steps(pool, snapshot, base)?;
    send_steps_to(pool, steps, false, out, progress)
}

/// About how many bytes `send` would write: the stored size of the blocks it would send,
/// found by the same walk without reading them.
pub fn send_size(pool: &Pool, snapshot: &str, base: SendBase<'_>) -> Result<u64, SendError> {
    let steps = send_steps(pool, snapshot, base)?;
    Ok(send_steps_to(pool, steps, true, &mut std::io::sink(), &mut |_| {})?.bytes)
}

/// `tarn send -t TOKEN`: the rest of an interrupted stream, from where the receiver
/// stands (the token `tarn recv` printed).
pub fn send_resume(
    pool: &Pool,
    token: &str,
    out: &mut dyn Write,
    progress: &mut dyn FnMut(u64),
) -> Result<SendSummary, SendError> {
    let step = resume_step(pool, token)?;
    send_steps_to(pool, vec![step], false, out, progress)
}

/// As `send_size`, for `send -t TOKEN`.
pub fn send_resume_size(pool: &Pool, token: &str) -> Result<u64, SendError> {
    let step = resume_step(pool, token)?;
    Ok(send_steps_to(pool, vec![step], true, &mut std::io::sink(), &mut |_| {})?.bytes)
}

fn send_steps_to(
    pool: &Pool,
    steps: Vec<Step>,
    estimate: bool,
    out: &mut dyn Write,
    progress: &mut dyn FnMut(u64),
) -> Result<SendSummary, SendError> {
    let mut summary = SendSummary::default();
    for (from, to, resume) in steps {
        let done = summary.bytes;
        let mut step_progress = |b: u64| progress(done + b);
        let part = send_one(pool, from.as_ref(), &to, resume, estimate, out, &mut step_progress)?;
        summary.streams += 1;
        summary.bytes += part.bytes;
        summary.blocks += part.blocks;
        summary.logical += part.logical;
    }
    Ok(summary)
}

/// The streams a send writes.
fn send_steps(pool: &Pool, snapshot: &str, base: SendBase<'_>) -> Result<Vec<Step>, SendError> {
    let snap = pool.snapshot_ref(snapshot)?;
    Ok(match base {
        SendBase::Full => vec![(None, snap, None)],
        SendBase::Incremental(b) => vec![(Some(send_base(pool, snapshot, b, &snap)?), snap, None)],
        SendBase::Intermediates(b) => {
            let from = send_base(pool, snapshot, b, &snap)?;
            let list = pool.snapshot_refs(&snap.dataset)?;
            let mut prev = from.clone();
            let mut steps = Vec::new();
            for s in list.into_iter().filter(|s| s.txg > from.txg && s.txg <= snap.txg) {
                steps.push((Some(prev), s.clone(), None));
                prev = s;
            }
            steps
        }
    })
}

/// The stream a resume token asks for.
fn resume_step(pool: &Pool, token: &str) -> Result<Step, SendError> {
    let t = crate::recv::ResumeToken::decode(token)?;
    let full = format!("{}@{}", t.dataset, t.snapshot);
    let to = pool.snapshot_ref(&full)?;
    if to.guid != t.to_guid {
        let why = "it is not the snapshot the token names (its guid differs: it was destroyed and made again)";
        return Err(SendError::SendRefused { snapshot: full, why: why.into() });
    }
    let from = if t.from_guid == 0 {
        None
    } else {
        let base = pool.snapshot_refs(&to.dataset)?.into_iter().find(|s| s.guid == t.from_guid);
        let why = "the base snapshot of the interrupted stream no longer exists";
        Some(base.ok_or_else(|| SendError::SendRefused { snapshot: full.clone(), why: why.into() })?)
    };
    Ok((from, to, Some((t.object, t.offset))))
}

/// The base snapshot of an incremental send: of the same dataset, older.
fn send_base(pool: &Pool, snapshot: &str, base: &str, snap: &SnapshotRef) -> Result<SnapshotRef, SendError> {
    let ds = snap.dataset.as_str();
    let name = base.rsplit_once('@').map_or(base, |(_, n)| n);
    let full = format!("{ds}@{name}");
    if let Some((other, _)) = base.split_once('@').filter(|(d, _)| !d.is_empty() && *d != ds) {
        let why = format!("the base '{base}' is a snapshot of '{other}', not of '{ds}'");
        return Err(SendError::SendRefused { snapshot: snapshot.into(), why });
    }
    split_snapshot_name(&full)?;
    let from = pool.snapshot_ref(&full)?;
    if from.txg >= snap.txg {
        let why = format!("the base '{full}' is not older than it");
        return Err(SendError::SendRefused { snapshot: snapshot.into(), why });
    }
    Ok(from)
}

/// One stream, `from` (or nothing) to `to`: BEGIN, the walk's records, END.
fn send_one(
    pool: &Pool,
    from: Option<&SnapshotRef>,
    to: &SnapshotRef,
    resume: Option<(u64, u64)>,
    estimate: bool,
    out: &mut dyn Write,
    progress: &mut dyn FnMut(u64),
) -> Result<SendSummary, SendError> {
    let begin = Begin {
        flags: if from.is_some() { FLAG_INCREMENTAL } else { 0 } | if resume.is_some() { FLAG_RESUME } else { 0 },
        to_guid: to.guid,
        to_txg: to.txg,
        creation: to.creation,
        from_guid: from.map_or(0, |f| f.guid),
        from_txg: from.map_or(0, |f| f.txg),
        pool_guid: pool.guid(),
        dataset_id: to.dataset_id,
        next_obj: to.next_obj,
        resume_object: resume.map_or(0, |r| r.0),
        resume_offset: resume.map_or(0, |r| r.1),
        dataset: to.dataset.clone(),
        snapshot: to.name.clone(),
        unlinked: to.unlinked.clone(),
    };
    let mut w = StreamWriter::new(out).map_err(SendError::StreamWrite)?;
    w.put(&Record::Begin(begin)).map_err(SendError::StreamWrite)?;
    let mut sender = Sender {
        zio: pool.zio(),
        out: &mut w,
        from_txg: from.map_or(0, |f| f.txg),
        incremental: from.is_some(),
        blksz: 1,
        free: None,
        summary: SendSummary::default(),
        estimate,
        resume,
        per_block: (u64::from(to.meta.blksz) / DNODE_SIZE as u64).max(1),
        failed: None,
        progress,
    };
    traverse::walk(pool.zio(), Start::ObjSet(&to.meta), Options::default(), &mut sender);
    sender.flush_free();
    if let Some(e) = sender.failed.take() {
        return Err(explain_send_failure(pool, to, e));
    }
    let mut part = sender.summary;
    part.bytes += w.end(to.guid).map_err(SendError::StreamWrite)?;
    Ok(part)
}

/// A read that failed because the snapshot was destroyed under the send says so.
fn explain_send_failure(pool: &Pool, to: &SnapshotRef, e: SendError) -> SendError {
    let full = format!("{}@{}", to.dataset, to.name);
    match pool.snapshot_ref(&full) {
        Ok(now) if now.guid == to.guid => e,
        _ => SendError::SendRefused { snapshot: full, why: "it was destroyed while it was being sent".into() },
    }
}

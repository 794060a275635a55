//! Replaying a block event trace (`TARN_READ_TRACE`, format in `crates/zio/src/trace.rs`)
//! through cache policies at one byte budget, the way the io pipeline drives the cache:
//! shared by the trace bench (`benches/trace.rs`) and the recorded-trace test
//! (`tests/trace_fixture.rs`).
//!
//! Owns: trace parsing, the compact fixture encoding, and the baselines (LRU, Belady's
//! OPT) the cache is measured against.
//!
//! Promises: every policy sees the same events; the hit ratio is that of demand reads of
//! file data (what the database waits for) in the measured window.
//!
//! Must never: measure anything but the replayed events (no timing: ratios only).
#![allow(dead_code)]

use std::collections::{BinaryHeap, HashMap};
use std::io::{Read, Write};
use std::sync::Arc;

use hashlink::LinkedHashMap;
use tarn_arc::{Access, ArcCache, BlockKey, Class, DataPolicy, HotCopies, Outside, PageId, ReadKind};

/// What a trace line says happened to a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// A read asked for (the read kind).
    Read(ReadKind),
    /// A block written: file data (`data`) or a dnode-table block (`meta`); indirect and
    /// pool blocks are written past the cache and are not replayed.
    Write {
        meta: bool,
    },
    Free,
    /// A block read ahead.
    Prefetch,
}

#[derive(Clone, Copy, Debug)]
pub struct Event {
    pub op: Op,
    pub key: BlockKey,
    pub psize: u32,
    pub lsize: u32,
    pub page: Option<PageId>,
}

impl Event {
    pub fn is_demand(&self) -> bool {
        self.op == Op::Read(ReadKind::Demand)
    }
}

/// One trace line, or `None` for a line the replay does not use.
pub fn parse_line(line: &str) -> Option<Event> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() != 11 {
        return None;
    }
    let num = |i: usize| f[i].parse::<u64>().ok();
    let op = match (f[0], f[2]) {
        ("R", kind) => Op::Read(ReadKind::from_name(kind)?),
        ("W", "data") => Op::Write { meta: false },
        ("W", "dnode") => Op::Write { meta: true },
        ("W", _) => return None,
        ("F", _) => Op::Free,
        ("P", _) => Op::Prefetch,
        _ => return None,
    };
    let page = match (num(8), num(9), num(10)) {
        (Some(objset), Some(object), Some(blkid)) => Some(PageId { objset, object, blkid }),
        _ => None,
    };
    Some(Event {
        op,
        key: BlockKey { vdev: num(3)? as u16, offset: num(4)?, birth: num(5)? },
        psize: num(6)? as u32,
        lsize: num(7)? as u32,
        page,
    })
}

pub fn load_text(path: &str) -> Vec<Event> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.lines().filter_map(parse_line).collect()
}

/// A cache under test: it sees every event and says whether a read hit.
pub trait Cache {
    fn name(&self) -> String;
    fn event(&mut self, e: &Event) -> bool;
    /// The cache's own counters, for a closer look.
    fn debug(&self) -> String {
        String::new()
    }
}

/// tarn's cache, driven as `tarn_zio` drives it.
pub struct Tarn {
    pub arc: ArcCache,
}

impl Tarn {
    pub fn new(budget: u64, policy: DataPolicy) -> Tarn {
        Tarn { arc: ArcCache::with_policy(budget, policy) }
    }
}

fn class_of(kind: ReadKind) -> Class {
    if kind.is_data() {
        Class::Data
    } else {
        Class::Metadata
    }
}

impl Cache for Tarn {
    fn name(&self) -> String {
        match self.arc.policy() {
            DataPolicy::SecondLevel => "tarn, second-level policy".into(),
            DataPolicy::Arc => "tarn, ARC (before #17)".into(),
        }
    }

    fn debug(&self) -> String {
        format!("{:?}", self.arc.snapshot())
    }

    fn event(&mut self, e: &Event) -> bool {
        let bytes = || Arc::from(vec![0u8; e.psize as usize]);
        match e.op {
            Op::Read(kind) => {
                let access = Access { kind, page: e.page, objset: e.page.map(|p| p.objset) };
                if self.arc.get(&e.key, access).is_some() {
                    return true;
                }
                let class = class_of(kind);
                if self.arc.keeps(class, kind) {
                    self.arc.insert(e.key, bytes(), e.lsize, class, access);
                }
                false
            }
            Op::Write { meta } => {
                let class = if meta { Class::Metadata } else { Class::Data };
                self.arc.insert_written(e.key, bytes(), e.lsize, class, e.page, e.page.map(|p| p.objset));
                false
            }
            Op::Free => {
                self.arc.remove(&e.key);
                false
            }
            Op::Prefetch => {
                if !self.arc.contains(&e.key) {
                    self.arc.insert_prefetched(e.key, bytes(), e.lsize, Class::Data, e.page);
                }
                false
            }
        }
    }
}

/// tarn's cache as the io pipeline drives it at equal memory under a buffer pool, with
/// the parts of the budget that are not cached records: decoded metadata (a fixed
/// charge), the txgs' dirty data (a recorded series, one value per slice of the measured
/// demand reads) and, as before issue #17's fix, the hot copies (`copies`: a fixed 1/16
/// of the budget held for them, a decompressed copy made at every ARC hit of a compressed
/// block and looked in first; now a whole-record reader gets none and costs nothing).
pub struct Pipeline {
    tarn: Tarn,
    copies: Option<(HotCopies, ArcCache)>,
    dirty: &'static [u64],
    /// Demand reads so far, those before the measured window, and the window's.
    reads: u64,
    skip: u64,
    window: u64,
    pub copy_hits: u64,
}

impl Pipeline {
    pub fn new(budget: u64, decoded: u64, dirty: &'static [u64], copies: bool, skip: u64, window: u64) -> Pipeline {
        let tarn = Tarn::new(budget, DataPolicy::SecondLevel);
        tarn.arc.charge(Outside::Objects, decoded);
        let copies = copies.then(|| {
            // Their whole share is held; the copies' own count is charged to a cache apart.
            tarn.arc.charge(Outside::Objects, budget / 16);
            let owner = ArcCache::new(budget);
            (owner.hot_copies(budget / 16), owner)
        });
        Pipeline { tarn, copies, dirty, reads: 0, skip, window, copy_hits: 0 }
    }

    pub fn data_bytes(&self) -> u64 {
        self.tarn.arc.snapshot().data_size
    }

    /// The dirty data at this demand read: the series spread over the measured window
    /// (none before it).
    fn follow_dirty(&mut self) {
        if !self.dirty.is_empty() && self.reads >= self.skip {
            let n = self.dirty.len() as u64;
            let i = ((self.reads - self.skip) * n / self.window.max(1)).min(n - 1);
            self.tarn.arc.set_dirty(self.dirty[i as usize]);
        }
        self.reads += 1;
    }
}

impl Cache for Pipeline {
    fn name(&self) -> String {
        let copies = if self.copies.is_some() { "copies in a reserved 1/16" } else { "no copies" };
        format!("tarn, second-level policy, {copies}, decoded metadata and dirty data beside")
    }

    fn event(&mut self, e: &Event) -> bool {
        if e.is_demand() {
            self.follow_dirty();
        }
        let (Op::Read(kind), Some((copies, _))) = (e.op, &self.copies) else { return self.tarn.event(e) };
        let mut out = vec![0u8; e.lsize as usize];
        if copies.copy_out(&e.key, &mut out) {
            self.copy_hits += 1;
            return true;
        }
        let hit = self.tarn.event(e);
        // A compressed block (stored smaller than its logical size) read again while cached.
        if hit && kind.is_data() && e.psize < e.lsize {
            copies.insert(e.key, &out);
        }
        hit
    }
}

/// A plain LRU of blocks over their stored bytes: what every read and write leaves in it.
pub struct Lru {
    map: LinkedHashMap<BlockKey, u64>,
    bytes: u64,
    budget: u64,
}

impl Lru {
    pub fn new(budget: u64) -> Lru {
        Lru { map: LinkedHashMap::new(), bytes: 0, budget }
    }

    fn insert(&mut self, key: BlockKey, size: u64) {
        if self.map.contains_key(&key) || size > self.budget {
            return;
        }
        while self.bytes + size > self.budget {
            let Some((_, s)) = self.map.pop_front() else { break };
            self.bytes -= s;
        }
        self.map.insert(key, size);
        self.bytes += size;
    }
}

impl Cache for Lru {
    fn name(&self) -> String {
        "LRU".into()
    }

    fn event(&mut self, e: &Event) -> bool {
        match e.op {
            Op::Read(_) => {
                if self.map.to_back(&e.key).is_some() {
                    return true;
                }
                self.insert(e.key, e.psize as u64);
                false
            }
            Op::Write { .. } | Op::Prefetch => {
                self.insert(e.key, e.psize as u64);
                false
            }
            Op::Free => {
                if let Some(s) = self.map.remove(&e.key) {
                    self.bytes -= s;
                }
                false
            }
        }
    }
}

/// Hit ratio of the demand reads from the `skip`-th on.
#[derive(Clone, Copy, Debug)]
pub struct Score {
    pub hits: u64,
    pub reads: u64,
}

impl Score {
    pub fn ratio(&self) -> f64 {
        self.hits as f64 / self.reads.max(1) as f64
    }
}

pub fn replay(events: &[Event], cache: &mut dyn Cache, skip: u64) -> Score {
    let mut score = Score { hits: 0, reads: 0 };
    let mut demand = 0u64;
    for e in events {
        let hit = cache.event(e);
        if e.is_demand() {
            if demand >= skip {
                score.reads += 1;
                score.hits += hit as u64;
            }
            demand += 1;
        }
    }
    score
}

/// Belady's optimum at a byte budget (evict the block read again furthest in the future;
/// reads and writes may insert): the bound no policy can pass.
pub fn opt(events: &[Event], budget: u64, skip: u64) -> Score {
    const NEVER: usize = usize::MAX;
    let mut next_read = vec![NEVER; events.len()];
    let mut upcoming: HashMap<BlockKey, usize> = HashMap::new();
    for (i, e) in events.iter().enumerate().rev() {
        match e.op {
            Op::Read(_) | Op::Write { .. } => {
                next_read[i] = upcoming.get(&e.key).copied().unwrap_or(NEVER);
                if matches!(e.op, Op::Read(_)) {
                    upcoming.insert(e.key, i);
                }
            }
            Op::Free => {
                upcoming.remove(&e.key);
            }
            Op::Prefetch => {}
        }
    }
    let mut cached: HashMap<BlockKey, (u64, usize)> = HashMap::new();
    // Keyed by (next read, vdev, offset, birth): `BlockKey` has no order.
    let mut heap: BinaryHeap<(usize, u16, u64, u64)> = BinaryHeap::new();
    let mut bytes = 0u64;
    let mut score = Score { hits: 0, reads: 0 };
    let mut demand = 0u64;
    for (i, e) in events.iter().enumerate() {
        match e.op {
            Op::Free => {
                if let Some((s, _)) = cached.remove(&e.key) {
                    bytes -= s;
                }
                continue;
            }
            Op::Prefetch => continue,
            _ => {}
        }
        if e.is_demand() {
            if demand >= skip {
                score.reads += 1;
                score.hits += cached.contains_key(&e.key) as u64;
            }
            demand += 1;
        }
        let next = next_read[i];
        if next == NEVER {
            if let Some((s, _)) = cached.remove(&e.key) {
                bytes -= s;
            }
            continue;
        }
        if let Some(c) = cached.get_mut(&e.key) {
            c.1 = next;
        } else {
            cached.insert(e.key, (e.psize as u64, next));
            bytes += e.psize as u64;
        }
        heap.push((next, e.key.vdev, e.key.offset, e.key.birth));
        while bytes > budget {
            let Some((when, vdev, offset, birth)) = heap.pop() else { break };
            let key = BlockKey { vdev, offset, birth };
            if cached.get(&key).is_some_and(|c| c.1 == when) {
                bytes -= cached.remove(&key).map_or(0, |c| c.0);
            }
        }
    }
    score
}

/// The compact fixture: the data events of a trace, blocks and pages renumbered densely,
/// zstd-compressed. Layout (little endian): magic, block count, then per block its page
/// index (u32, `u32::MAX` for none) and stored size (u16); event count, then per event
/// one byte (the op) and the block index as a LEB128 varint.
const MAGIC: &[u8; 8] = b"TARNTRC1";

const OPS: [Op; 6] = [
    Op::Read(ReadKind::Demand),
    Op::Read(ReadKind::Rmw),
    Op::Read(ReadKind::LogFetch),
    Op::Write { meta: false },
    Op::Free,
    Op::Prefetch,
];

/// Encodes the file-data events of `events` (metadata is left out).
pub fn encode_fixture(events: &[Event]) -> Vec<u8> {
    let mut blocks: HashMap<BlockKey, u32> = HashMap::new();
    let mut block_list: Vec<(u32, u16)> = Vec::new();
    let mut pages: HashMap<PageId, u32> = HashMap::new();
    let mut body = Vec::new();
    let mut count = 0u32;
    for e in events {
        let Some(op) = OPS.iter().position(|&o| o == e.op) else { continue };
        let page = e.page.map_or(u32::MAX, |p| {
            let n = pages.len() as u32;
            *pages.entry(p).or_insert(n)
        });
        let n = block_list.len() as u32;
        let index = *blocks.entry(e.key).or_insert_with(|| {
            block_list.push((page, e.psize.min(u16::MAX as u32) as u16));
            n
        });
        body.push(op as u8);
        let mut v = index;
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            body.push(if v == 0 { byte } else { byte | 0x80 });
            if v == 0 {
                break;
            }
        }
        count += 1;
    }
    let mut raw = MAGIC.to_vec();
    raw.extend((block_list.len() as u32).to_le_bytes());
    for (page, psize) in &block_list {
        raw.extend(page.to_le_bytes());
        raw.extend(psize.to_le_bytes());
    }
    raw.extend(count.to_le_bytes());
    raw.extend(body);
    let mut out = Vec::new();
    let mut z = zstd::Encoder::new(&mut out, 19).expect("zstd encoder");
    z.write_all(&raw).expect("in memory");
    z.finish().expect("in memory");
    out
}

/// The events of a fixture written by `encode_fixture`. Blocks get synthetic keys, pages
/// synthetic identities; sizes and the order of events are the trace's.
pub fn decode_fixture(compressed: &[u8]) -> Vec<Event> {
    let mut raw = Vec::new();
    zstd::Decoder::new(compressed).expect("zstd").read_to_end(&mut raw).expect("a zstd fixture");
    assert_eq!(&raw[..8], MAGIC, "not a tarn trace fixture");
    let mut at = 8;
    let u32_at = |at: &mut usize| {
        let v = u32::from_le_bytes(raw[*at..*at + 4].try_into().expect("4 bytes"));
        *at += 4;
        v
    };
    let nblocks = u32_at(&mut at) as usize;
    let mut blocks = Vec::with_capacity(nblocks);
    for i in 0..nblocks {
        let page = u32_at(&mut at);
        let psize = u16::from_le_bytes([raw[at], raw[at + 1]]) as u32;
        at += 2;
        let page = (page != u32::MAX).then_some(PageId { objset: 1, object: 2, blkid: page as u64 });
        blocks.push((BlockKey { vdev: 0, offset: i as u64 * 65536, birth: 1 }, psize, page));
    }
    let nevents = u32_at(&mut at) as usize;
    let mut events = Vec::with_capacity(nevents);
    for _ in 0..nevents {
        let op = OPS[raw[at] as usize];
        at += 1;
        let (mut index, mut shift) = (0usize, 0);
        loop {
            let b = raw[at];
            at += 1;
            index |= ((b & 0x7f) as usize) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                break;
            }
        }
        let (key, psize, page) = blocks[index];
        events.push(Event { op, key, psize, lsize: 16384, page });
    }
    events
}

//! Sequential read-ahead decisions of one object, after ZFS's zfetch: a few streams per
//! file, each confirmed by several reads in record order before it reads ahead, whose
//! distance grows only when what it read ahead was there when the reader came for it;
//! and an off switch per file that stops read-ahead when it is wasted.
//!
//! Owns: the streams of one object (where each expects the next read, how far it has
//! read ahead, its distance) and the object's waste accounting and back-off.
//!
//! Promises: random reads never read ahead — a stream must see `CONFIRM` reads in record
//! order (a database's B-tree neighbour reads come in pairs and threes) before its first
//! read-ahead; the distance starts at `MIN_DISTANCE` and doubles only on a *hit* (the
//! reader reached a read-ahead record while it was still cached), halves when a
//! read-ahead record was evicted unread, and never exceeds `MAX_DISTANCE`; a file whose
//! read-ahead was mostly wasted (records evicted unread, or never asked for before the
//! stream ended) stops reading ahead for a back-off that doubles each time it is wasted
//! again, and is forgiven only once read-ahead has clearly paid (`WASTE_LIMIT` records
//! used beyond those wasted) — a database's short runs of neighbour pages, which confirm
//! a stream and then stop, cost a few records per doubling, not a few per back-off.
//!
//! Must never: do I/O or take a lock itself (the object's lock is held by the caller; the
//! caller asks the cache what became of a read-ahead record), or ask for a record twice
//! within one stream.

/// Streams tracked per object (ZFS keeps 8 per file; a table file read by a few threads
/// in order needs one each).
const STREAMS: usize = 4;
/// Reads in record order a stream needs before it reads ahead.
pub(crate) const CONFIRM: u32 = 4;
/// Records read ahead at first, and at most.
pub(crate) const MIN_DISTANCE: u64 = 2;
pub(crate) const MAX_DISTANCE: u64 = 32;
/// Wasted read-ahead records (beyond those used) that switch read-ahead off for a file;
/// as many used beyond those wasted forgive its back-off.
const WASTE_LIMIT: i64 = 16;
/// Reads of the file that read-ahead stays off for, the first time and at most.
const BACKOFF_MIN: u64 = 256;
const BACKOFF_MAX: u64 = 1 << 16;

/// What became of a record read ahead, when its reader came for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Still cached: the read-ahead saved a device read.
    Cached,
    /// Evicted before anyone read it: the read-ahead was wasted.
    EvictedUnread,
    /// Not known (still being read, or the request was dropped): neither.
    Unknown,
}

#[derive(Clone, Copy, Debug)]
struct Stream {
    /// The record the next read starts at if the reader goes on in order.
    next: u64,
    /// Reads in record order so far.
    run: u32,
    /// Records [next, ahead_to) or part of it have been asked for.
    ahead_to: u64,
    distance: u64,
    /// Whether this stream has read ahead yet (for counting confirmed streams).
    reading_ahead: bool,
    /// Recency, for replacing the least recently used stream.
    last_used: u64,
}

/// The records to read ahead: [from, to).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ahead {
    pub from: u64,
    pub to: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Zfetch {
    streams: [Option<Stream>; STREAMS],
    /// Reads of this object seen (the clock of `last_used` and of the back-off).
    reads: u64,
    /// Read-ahead records used minus those wasted, since the last back-off.
    credit: i64,
    /// Read-ahead is off until `reads` reaches this.
    off_until: u64,
    backoff: u64,
    /// Totals for tests and diagnostics.
    pub(crate) used: u64,
    pub(crate) wasted: u64,
    /// Read-ahead records the reader reached while they were not cached: still being read
    /// (the reader's own read went to the device as well) or dropped from a full queue.
    pub(crate) late: u64,
    /// What the last `access` did to the file's read-ahead, for the pool's counters.
    pub(crate) event: Option<ZfetchEvent>,
}

/// A change in a file's read-ahead worth counting (`tarn stats arc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ZfetchEvent {
    /// A stream was confirmed and read ahead for the first time.
    StreamConfirmed,
    /// The file's read-ahead was wasted and switched off.
    SwitchedOff,
}

impl Zfetch {
    /// A read of records [first, last] of a file of `records` records. `fate` says what
    /// became of a record read ahead earlier. Returns the records to read ahead now, if any.
    pub(crate) fn access(
        &mut self,
        first: u64,
        last: u64,
        records: u64,
        mut fate: impl FnMut(u64) -> Fate,
    ) -> Option<Ahead> {
        self.reads += 1;
        self.event = None;
        let now = self.reads;
        let Some(i) = self.find(first) else {
            self.start_stream(last + 1, now);
            return None;
        };
        let mut s = self.streams[i].take().expect("found");
        s.last_used = now;
        if first == s.next {
            s.run = s.run.saturating_add(1);
            // The reader reached records read ahead: was the read-ahead right?
            for blkid in first..=last.min(s.ahead_to.saturating_sub(1)) {
                self.judge(&mut s, fate(blkid));
            }
        }
        s.next = s.next.max(last + 1);
        let ahead = self.plan(&mut s, records);
        self.streams[i] = Some(s);
        ahead
    }

    /// The stream this read continues: one expecting `first`, or re-reading the record
    /// just before (a page read twice in a row keeps its stream).
    fn find(&self, first: u64) -> Option<usize> {
        self.streams.iter().position(|s| s.is_some_and(|s| first == s.next || first + 1 == s.next))
    }

    fn start_stream(&mut self, next: u64, now: u64) {
        let slot = match self.streams.iter().position(Option::is_none) {
            Some(free) => free,
            None => {
                let lru = (0..STREAMS).min_by_key(|&k| self.streams[k].map_or(0, |s| s.last_used)).expect("streams");
                self.retire(lru);
                lru
            }
        };
        self.streams[slot] =
            Some(Stream { next, run: 1, ahead_to: next, distance: MIN_DISTANCE, reading_ahead: false, last_used: now });
    }

    /// A stream replaced by a newer one: what it read ahead and nobody read was wasted.
    fn retire(&mut self, slot: usize) {
        if let Some(s) = self.streams[slot].take() {
            let unread = s.ahead_to.saturating_sub(s.next);
            self.note_waste(unread);
        }
    }

    fn judge(&mut self, s: &mut Stream, fate: Fate) {
        match fate {
            Fate::Cached => {
                self.used += 1;
                self.credit += 1;
                s.distance = (s.distance * 2).min(MAX_DISTANCE);
            }
            Fate::EvictedUnread => {
                s.distance = (s.distance / 2).max(MIN_DISTANCE);
                self.note_waste(1);
            }
            Fate::Unknown => self.late += 1,
        }
    }

    fn note_waste(&mut self, records: u64) {
        if records == 0 {
            return;
        }
        self.wasted += records;
        self.credit -= records as i64;
        if self.credit <= -WASTE_LIMIT {
            // Mostly wasted: stop reading ahead for this file for a while, longer each time.
            self.backoff = (self.backoff * 2).clamp(BACKOFF_MIN, BACKOFF_MAX);
            self.off_until = self.reads + self.backoff;
            self.credit = 0;
            self.streams = [None; STREAMS];
            self.event = Some(ZfetchEvent::SwitchedOff);
        }
    }

    /// The next records to ask for: up to `distance` ahead of the reader, never one asked
    /// for already.
    fn plan(&mut self, s: &mut Stream, records: u64) -> Option<Ahead> {
        if s.run < CONFIRM || self.reads < self.off_until {
            return None;
        }
        if self.credit >= WASTE_LIMIT {
            // Read-ahead has clearly paid since the last back-off: the next waste starts
            // the back-off afresh. A used record or two (a short run's first read-ahead
            // hit) is not enough, or the back-off would never grow.
            self.backoff = 0;
        }
        let from = s.next.max(s.ahead_to);
        let to = (s.next + s.distance).min(records);
        if from >= to {
            return None;
        }
        if !s.reading_ahead {
            s.reading_ahead = true;
            self.event = Some(ZfetchEvent::StreamConfirmed);
        }
        s.ahead_to = to;
        Some(Ahead { from, to })
    }

    /// Whether read-ahead is switched off for this file now.
    #[cfg(test)]
    pub(crate) fn is_off(&self) -> bool {
        self.reads < self.off_until
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECORDS: u64 = 1 << 20;

    /// Reads `blkid` and returns what it asked to read ahead.
    fn read(z: &mut Zfetch, blkid: u64, fate: Fate) -> Option<Ahead> {
        z.access(blkid, blkid, RECORDS, |_| fate)
    }

    #[test]
    fn random_reads_never_read_ahead() {
        let mut z = Zfetch::default();
        let mut x = 12345u64;
        for _ in 0..100_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            assert_eq!(read(&mut z, (x >> 24) % RECORDS, Fate::Unknown), None);
        }
    }

    #[test]
    fn neighbour_reads_in_twos_and_threes_never_read_ahead() {
        let mut z = Zfetch::default();
        for base in (0..10_000u64).map(|i| i * 1000) {
            for k in 0..CONFIRM as u64 - 1 {
                assert_eq!(read(&mut z, base + k, Fate::Unknown), None, "a run of {} reads", k + 1);
            }
        }
    }

    #[test]
    fn a_scan_reads_ahead_after_confirmation_and_grows_only_on_hits() {
        let mut z = Zfetch::default();
        for b in 0..CONFIRM as u64 - 1 {
            assert_eq!(read(&mut z, b, Fate::Unknown), None);
        }
        let first = read(&mut z, CONFIRM as u64 - 1, Fate::Unknown).expect("confirmed");
        assert_eq!(first.to - first.from, MIN_DISTANCE);
        // The reader finds nothing it can judge (in flight): the distance stays.
        let next = read(&mut z, first.from, Fate::Unknown).expect("keeps going");
        assert_eq!(next.to, first.from + 1 + MIN_DISTANCE);
        // Hits double the distance, up to the limit, and nothing is asked for twice.
        let mut asked_to = next.to;
        let mut b = first.from + 1;
        for _ in 0..40 {
            b += 1;
            if let Some(a) = read(&mut z, b, Fate::Cached) {
                assert!(a.from >= asked_to, "{a:?} asks again below {asked_to}");
                assert!(a.to - b - 1 <= MAX_DISTANCE);
                asked_to = a.to;
            }
        }
        assert_eq!(asked_to, b + 1 + MAX_DISTANCE);
    }

    #[test]
    fn interleaved_scans_by_several_readers_each_keep_a_stream() {
        let mut z = Zfetch::default();
        let mut asked = 0;
        for i in 0..50u64 {
            for reader in 0..3u64 {
                asked += read(&mut z, reader * 100_000 + i, Fate::Cached).map_or(0, |a| a.to - a.from);
            }
        }
        assert!(asked > 3 * 40, "three interleaved scans read ahead: {asked}");
    }

    #[test]
    fn read_ahead_evicted_unread_switches_the_file_off_and_backs_off() {
        let mut z = Zfetch::default();
        let mut b = 0;
        while !z.is_off() {
            read(&mut z, b, Fate::EvictedUnread);
            b += 1;
            assert!(b < 10_000, "never switched off");
        }
        assert!(z.wasted >= WASTE_LIMIT as u64);
        // Off: even a clean scan asks for nothing until the back-off ends.
        let start = b + 1_000;
        for k in 0..BACKOFF_MIN - 1 {
            assert_eq!(read(&mut z, start + k, Fate::Cached), None);
        }
        let mut resumed = false;
        for k in BACKOFF_MIN..BACKOFF_MIN + 2 * CONFIRM as u64 {
            resumed |= read(&mut z, start + k, Fate::Cached).is_some();
        }
        assert!(resumed, "read-ahead resumes after the back-off");
    }

    #[test]
    fn short_runs_that_stop_waste_little_and_switch_off() {
        // Runs of CONFIRM + 1 records, each followed by a jump: every run reads ahead a
        // little and never uses it. After a few, the file stops reading ahead.
        let mut z = Zfetch::default();
        let mut asked = 0;
        for run in 0..200u64 {
            for k in 0..=CONFIRM as u64 {
                asked += read(&mut z, run * 1000 + k, Fate::Unknown).map_or(0, |a| a.to - a.from);
            }
        }
        assert!(asked < 200, "read-ahead of abandoned short runs stays small: {asked}");
    }

    /// A database under its buffer pool: random page reads, and now and then a short run
    /// of neighbours (a range scan of a few leaves) that confirms a stream and stops. Each
    /// run reads ahead a record or two, sometimes used — which must not forgive the
    /// file's back-off, or it never grows and the file wastes read-ahead all run long.
    #[test]
    fn short_runs_among_random_reads_waste_a_few_records_per_doubling_of_the_back_off() {
        let mut z = Zfetch::default();
        let mut x = 99u64;
        let (mut asked, mut reads, mut confirmed, mut offs) = (0u64, 0u64, 0u64, 0u64);
        let mut read = |z: &mut Zfetch, blkid: u64, fate: Fate| {
            reads += 1;
            asked += z.access(blkid, blkid, RECORDS, |_| fate).map_or(0, |a| a.to - a.from);
            confirmed += u64::from(z.event == Some(ZfetchEvent::StreamConfirmed));
            offs += u64::from(z.event == Some(ZfetchEvent::SwitchedOff));
        };
        for run in 0..20_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let base = (x >> 24) % RECORDS;
            // Every tenth run is a short scan whose first read-ahead record is used.
            let len = if run % 10 == 0 { CONFIRM as u64 + 2 } else { 1 };
            for k in 0..len {
                read(&mut z, base + k, if k == CONFIRM as u64 { Fate::Cached } else { Fate::Unknown });
            }
        }
        // 30,000 reads, 2,000 short scans: when one used record forgave the back-off, the
        // file was switched off 87 times (each after 16 wasted records); now the back-off
        // doubles up to its limit.
        assert!(offs <= 10, "switched off {offs} times in {reads} reads");
        assert!(asked <= 20 * WASTE_LIMIT as u64, "read ahead {asked} records in {reads} reads");
        assert!(confirmed > 0 && asked > 0, "the first scans still read ahead");
    }

    #[test]
    fn a_long_scan_after_a_back_off_reads_ahead_and_is_forgiven() {
        let mut z = Zfetch::default();
        let mut b = 0;
        while !z.is_off() {
            read(&mut z, b, Fate::EvictedUnread);
            b += 1;
        }
        let backoff = z.backoff;
        // Random reads until the back-off ends, then a scan whose read-ahead is used.
        let mut x = 7u64;
        while z.is_off() {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            read(&mut z, 1_000_000 + (x >> 24) % 1000 * 100, Fate::Unknown);
        }
        let asked: u64 =
            (0..200u64).map(|k| read(&mut z, 500_000 + k, Fate::Cached).map_or(0, |a| a.to - a.from)).sum();
        assert!(asked > 150, "the scan reads ahead: {asked}");
        assert_eq!(z.backoff, 0, "and its used read-ahead forgives the back-off of {backoff}");
    }
}

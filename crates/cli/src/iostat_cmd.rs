//! `tarn pool iostat [-v] [-l] [-H] [-p] [POOL] [INTERVAL [COUNT]]`, as `zpool iostat`:
//! capacity, operations and bandwidth per second, read and write, per pool (and per vdev
//! and device with `-v`), with the average device time per operation (`-l`).
//!
//! Owns: reading the trailing words (a word that is a number is an interval, then a
//! count: a pool name starts with a letter), turning two snapshots of the counters into
//! rates, and the two-line header of the table.
//! Promises: the first report covers the time since the pool was opened by the process
//! holding it, each later one the interval before it; a vdev with no operation in an
//! interval shows `-` as its latency, never a division by zero.
//! Must never: keep a pool open past the last report.

use std::time::Duration;

use tarn_control::ops::pool as ops;
use tarn_dataset::props::format_size;
use tarn_pool::{IoSnapshot, PoolIostat};

use crate::access::{self, Session};
use crate::error::CliError;

/// What the command line asked for.
pub struct Request {
    pub verbose: bool,
    pub latency: bool,
    pub scripted: bool,
    pub parsable: bool,
    pub words: Vec<String>,
}

/// What the trailing words say.
#[derive(Debug, PartialEq)]
struct Words {
    pool: Option<String>,
    interval: Option<Duration>,
    count: Option<u64>,
}

pub fn run(req: Request) -> Result<(), CliError> {
    let Words { pool, interval, count } = parse_words(&req.words)?;
    let names = access::pool_names(pool.as_deref())?;
    // Each pool through its daemon if one holds it, else opened here for the reports.
    let mut pools = Vec::new();
    for name in &names {
        pools.push(access::session(name)?);
    }
    let result = report(&req, &mut pools, interval, count);
    let mut ended = Ok(());
    for p in pools {
        if let Err(e) = p.end() {
            ended = Err(e);
        }
    }
    result?;
    ended
}

/// `[POOL] [INTERVAL [COUNT]]`.
fn parse_words(words: &[String]) -> Result<Words, CliError> {
    let is_number = |w: &String| w.parse::<f64>().is_ok();
    let (pool, numbers) = match words.first() {
        Some(w) if !is_number(w) => (Some(w.clone()), &words[1..]),
        _ => (None, words),
    };
    if numbers.len() > 2 || numbers.iter().any(|w| !is_number(w)) {
        return Err(CliError::Usage("usage: tarn pool iostat [-v] [-l] [POOL] [INTERVAL [COUNT]]".into()));
    }
    let interval = match numbers.first() {
        Some(w) => {
            let secs: f64 = w.parse().unwrap_or(0.0);
            if !(secs > 0.0 && secs.is_finite()) {
                return Err(CliError::Usage(format!("invalid interval '{w}': use seconds > 0")));
            }
            Some(Duration::from_secs_f64(secs))
        }
        None => None,
    };
    let count = match numbers.get(1) {
        Some(w) => Some(
            w.parse::<u64>()
                .ok()
                .filter(|c| *c > 0)
                .ok_or_else(|| CliError::Usage(format!("invalid count '{w}': use a whole number > 0")))?,
        ),
        None => None,
    };
    Ok(Words { pool, interval, count })
}

/// Prints the reports: one without an interval, else `count` (or endless).
fn report(
    req: &Request,
    pools: &mut [Session],
    interval: Option<Duration>,
    count: Option<u64>,
) -> Result<(), CliError> {
    let mut before: Vec<Option<PoolIostat>> = pools.iter().map(|_| None).collect();
    let reports = match interval {
        None => 1,
        Some(_) => count.unwrap_or(u64::MAX),
    };
    for n in 0..reports {
        if n > 0 {
            if let Some(i) = interval {
                std::thread::sleep(i);
            }
            if !req.scripted {
                println!();
            }
        }
        let mut rows = Vec::new();
        for (p, prev) in pools.iter_mut().zip(before.iter_mut()) {
            let now = p.run(ops::Iostat {})?;
            rows.extend(pool_rows(req, &now, prev.as_ref()));
            *prev = Some(now);
        }
        print_table(req, &rows);
    }
    Ok(())
}

/// One line of the table: name, then capacity, then rates (and latencies).
struct Row {
    name: String,
    alloc: Option<u64>,
    free: Option<u64>,
    io: IoSnapshot,
    seconds: f64,
}

fn pool_rows(req: &Request, now: &PoolIostat, before: Option<&PoolIostat>) -> Vec<Row> {
    let secs = |a: u64, b: u64| (a.saturating_sub(b) as f64 / 1e9).max(1e-9);
    let seconds = secs(now.elapsed_ns, before.map_or(0, |b| b.elapsed_ns));
    let mut rows = vec![Row {
        name: now.pool.clone(),
        alloc: Some(now.alloc),
        free: Some(now.free),
        io: now.io.since(&before.map_or_else(IoSnapshot::default, |b| b.io)),
        seconds,
    }];
    if !req.verbose {
        return rows;
    }
    let mut logs_header = false;
    for (i, v) in now.vdevs.iter().enumerate() {
        let prev = before.and_then(|b| b.vdevs.get(i));
        if v.log && !logs_header {
            rows.push(Row { name: "logs".into(), alloc: None, free: None, io: IoSnapshot::default(), seconds: 0.0 });
            logs_header = true;
        }
        let mirror = v.leaves.len() > 1;
        if mirror || v.log {
            rows.push(Row {
                name: format!("  {}", v.name),
                alloc: Some(v.alloc),
                free: Some(v.free),
                io: v.io.since(&prev.map_or_else(IoSnapshot::default, |p| p.io)),
                seconds,
            });
        }
        for (j, leaf) in v.leaves.iter().enumerate() {
            let was = prev.and_then(|p| p.leaves.get(j)).map_or_else(IoSnapshot::default, |l| l.io);
            let (alloc, free, indent) =
                if mirror || v.log { (None, None, "    ") } else { (Some(v.alloc), Some(v.free), "  ") };
            rows.push(Row { name: format!("{indent}{}", leaf.path), alloc, free, io: leaf.io.since(&was), seconds });
        }
    }
    rows
}

/// Operations per second as zpool shows them (`12`, `1.5K`), or exact with `-p`.
fn ops(req: &Request, n: u64, seconds: f64) -> String {
    let rate = n as f64 / seconds;
    if req.parsable {
        return format!("{}", rate.round() as u64);
    }
    match rate {
        r if r < 1000.0 => format!("{}", r.round() as u64),
        r if r < 1e6 => format!("{:.1}K", r / 1e3),
        r => format!("{:.1}M", r / 1e6),
    }
}

fn bytes_per_sec(req: &Request, n: u64, seconds: f64) -> String {
    let rate = (n as f64 / seconds).round() as u64;
    if req.parsable {
        rate.to_string()
    } else {
        format_size(rate)
    }
}

/// Average time per operation (`250us`, `3ms`), `-` without operations.
fn latency(req: &Request, ns: u64, ops: u64) -> String {
    if ops == 0 {
        return "-".into();
    }
    let avg = ns / ops;
    if req.parsable {
        return avg.to_string();
    }
    match avg {
        a if a < 1_000 => format!("{a}ns"),
        a if a < 1_000_000 => format!("{}us", a / 1_000),
        a if a < 1_000_000_000 => format!("{}ms", a / 1_000_000),
        a => format!("{}s", a / 1_000_000_000),
    }
}

fn cells(req: &Request, r: &Row) -> Vec<String> {
    let size = |v: Option<u64>| match v {
        Some(b) if req.parsable => b.to_string(),
        Some(b) => format_size(b),
        None => "-".into(),
    };
    if r.seconds == 0.0 {
        // The `logs` heading has no numbers of its own.
        let n = if req.latency { 9 } else { 6 };
        let blanks = std::iter::repeat_n(String::new(), n);
        return std::iter::once(r.name.clone()).chain(blanks).collect();
    }
    let mut c = vec![r.name.clone(), size(r.alloc), size(r.free)];
    let io = &r.io;
    c.push(ops(req, io.read_ops, r.seconds));
    c.push(ops(req, io.write_ops, r.seconds));
    c.push(bytes_per_sec(req, io.read_bytes, r.seconds));
    c.push(bytes_per_sec(req, io.write_bytes, r.seconds));
    if req.latency {
        c.push(latency(req, io.read_ns, io.read_ops));
        c.push(latency(req, io.write_ns, io.write_ops));
        c.push(latency(req, io.scan_ns, io.scan_ops));
    }
    c
}

fn print_table(req: &Request, rows: &[Row]) {
    let lines: Vec<Vec<String>> = rows.iter().map(|r| cells(req, r)).collect();
    if req.scripted {
        for l in &lines {
            println!("{}", l.join("\t"));
        }
        return;
    }
    let mut header: Vec<&str> = vec!["pool", "alloc", "free", "read", "write", "read", "write"];
    if req.latency {
        header.extend(["read", "write", "wait"]);
    }
    let mut widths: Vec<usize> = header.iter().map(|h| h.len().max(5)).collect();
    widths[0] = widths[0].max(10);
    for l in &lines {
        for (w, c) in widths.iter_mut().zip(l) {
            *w = (*w).max(c.len());
        }
    }
    // Group titles over their columns: capacity (2), operations (2), bandwidth (2),
    // disk_wait (2), scan (1).
    let mut groups: Vec<(&str, usize)> = vec![("", 1), ("capacity", 2), ("operations", 2), ("bandwidth", 2)];
    if req.latency {
        groups.extend([("disk_wait", 2), ("scan", 1)]);
    }
    let mut first = String::new();
    let mut col = 0;
    for (title, span) in groups {
        let width: usize = widths[col..col + span].iter().sum::<usize>() + 2 * (span - 1);
        if col > 0 {
            first.push_str("  ");
        }
        first.push_str(&format!("{title:^width$}"));
        col += span;
    }
    println!("{}", first.trim_end());
    let line = |cells: Vec<String>| {
        let parts: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| if i == 0 { format!("{c:<w$}", w = widths[i]) } else { format!("{c:>w$}", w = widths[i]) })
            .collect();
        println!("{}", parts.join("  ").trim_end());
    };
    line(header.iter().map(|h| h.to_string()).collect());
    line(widths.iter().map(|w| "-".repeat(*w)).collect());
    for l in lines {
        line(l);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn trailing_numbers_are_interval_and_count() {
        let w = parse_words(&words("tank 2 3")).unwrap();
        assert_eq!((w.pool.as_deref(), w.interval, w.count), (Some("tank"), Some(Duration::from_secs(2)), Some(3)));
        let w = parse_words(&words("0.5")).unwrap();
        assert_eq!((w.pool, w.interval, w.count), (None, Some(Duration::from_millis(500)), None));
        let none = Words { pool: None, interval: None, count: None };
        assert_eq!(parse_words(&[]).unwrap(), none);
        for bad in ["tank 0", "tank 1 0", "tank 1 2 3", "1 x", "tank -1"] {
            let err = parse_words(&words(bad)).expect_err(bad);
            assert_eq!(err.exit_code(), 2, "{bad}: {err}");
        }
    }

    #[test]
    fn latency_is_a_dash_without_operations() {
        let req = Request { verbose: false, latency: true, scripted: false, parsable: false, words: Vec::new() };
        assert_eq!(latency(&req, 0, 0), "-");
        assert_eq!(latency(&req, 3_000_000, 2), "1ms");
        assert_eq!(latency(&req, 500, 1), "500ns");
        assert_eq!(ops(&req, 1500, 1.0), "1.5K");
        assert_eq!(ops(&req, 30, 2.0), "15");
    }
}

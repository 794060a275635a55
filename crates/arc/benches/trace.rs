//! Replays a recorded block-read trace (TARN_READ_TRACE) through the ARC and through a
//! plain LRU of the same byte budget, both holding compressed blocks, and through an LRU
//! of uncompressed records; prints hit ratios and how many records each holds.
//!
//! Usage: cargo bench -p tarn-arc --bench trace -- TRACE_FILE BUDGET_MIB
use std::collections::HashMap;
use std::io::BufRead;
use std::sync::Arc;

use hashlink::LinkedHashMap;
use tarn_arc::{ArcCache, BlockKey, Class};

struct Access {
    key: BlockKey,
    psize: u64,
    lsize: u64,
}

fn load(path: &str) -> Vec<Access> {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    std::io::BufReader::new(file)
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| {
            let f: Vec<u64> = l.split_whitespace().filter_map(|x| x.parse().ok()).collect();
            (f.len() == 5).then(|| Access {
                key: BlockKey { vdev: f[0] as u16, offset: f[1], birth: f[2] },
                psize: f[3],
                lsize: f[4],
            })
        })
        .collect()
}

/// A plain LRU over bytes: the baseline ZFS's ARC was designed to beat.
struct Lru {
    map: LinkedHashMap<BlockKey, u64>,
    bytes: u64,
    budget: u64,
}

impl Lru {
    fn access(&mut self, key: BlockKey, size: u64) -> bool {
        if self.map.to_back(&key).is_some() {
            return true;
        }
        while self.bytes + size > self.budget {
            let Some((_, s)) = self.map.pop_front() else {
                break;
            };
            self.bytes -= s;
        }
        self.map.insert(key, size);
        self.bytes += size;
        false
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let (Some(path), Some(budget_mib)) = (args.first(), args.get(1).and_then(|b| b.parse::<u64>().ok())) else {
        eprintln!("usage: trace TRACE_FILE BUDGET_MIB");
        return;
    };
    let budget = budget_mib << 20;
    let trace = load(path);
    let arc = ArcCache::new(budget);
    let mut lru = Lru { map: LinkedHashMap::new(), bytes: 0, budget };
    let mut raw_lru = Lru { map: LinkedHashMap::new(), bytes: 0, budget };
    let (mut arc_hits, mut lru_hits, mut raw_hits) = (0u64, 0u64, 0u64);
    let mut distinct: HashMap<BlockKey, ()> = HashMap::new();
    for a in &trace {
        distinct.insert(a.key, ());
        if arc.get(&a.key).is_some() {
            arc_hits += 1;
        } else {
            arc.insert(a.key, Arc::from(vec![0u8; a.psize as usize]), a.lsize as u32, Class::Data);
        }
        lru_hits += lru.access(a.key, a.psize) as u64;
        raw_hits += raw_lru.access(a.key, a.lsize) as u64;
    }
    let n = trace.len().max(1) as f64;
    let s = arc.snapshot();
    println!("trace: {} reads of {} distinct blocks; budget {budget_mib} MiB", trace.len(), distinct.len());
    println!("{:<34} {:>9} {:>14}", "cache", "hit ratio", "records held");
    println!("{:<34} {:>9.3} {:>14}", "ARC, compressed blocks", arc_hits as f64 / n, s.blocks);
    println!("{:<34} {:>9.3} {:>14}", "LRU, compressed blocks", lru_hits as f64 / n, lru.map.len());
    println!("{:<34} {:>9.3} {:>14}", "LRU, uncompressed records", raw_hits as f64 / n, raw_lru.map.len());
    println!(
        "ARC/LRU hit ratio {:.2}; records held compressed vs uncompressed {:.2}x",
        arc_hits as f64 / lru_hits.max(1) as f64,
        s.blocks as f64 / raw_lru.map.len().max(1) as f64
    );
}

//! Replays a recorded block event trace (`TARN_READ_TRACE`, see `crates/zio/src/trace.rs`)
//! through cache policies at equal byte budgets — plain LRU, tarn's ARC as it kept data
//! before issue #17, tarn's default second-level policy, and Belady's OPT as the bound —
//! and prints the hit ratio of demand reads of file data.
//!
//! Usage:
//!   cargo bench -p tarn-arc --bench trace -- TRACE BUDGET_MIB [WINDOW]
//!   cargo bench -p tarn-arc --bench trace -- TRACE 0 WINDOW --fixture OUT.zst
//! `--verbose` adds each cache's counters. WINDOW: measure only the last WINDOW demand reads (the benchmark's run, after the data
//! load); all of them if absent. `--fixture` writes the events from the window's first
//! demand read on (from the trace's start when the window holds every demand read) as a
//! compact test fixture (`tests/trace_fixture.rs`).
#[path = "../tests/replay/mod.rs"]
mod replay;

use replay::{Cache, Lru, Tarn};
use tarn_arc::DataPolicy;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let fixture = args.iter().position(|a| a == "--fixture").and_then(|i| args.get(i + 1)).cloned();
    let positional: Vec<&String> = args
        .iter()
        .enumerate()
        .filter(|&(i, a)| {
            let is_fixture_path = i > 0 && args[i - 1] == "--fixture";
            !a.starts_with("--") && !is_fixture_path
        })
        .map(|(_, a)| a)
        .collect();
    let (Some(path), Some(budget_mib)) = (positional.first(), positional.get(1).and_then(|b| b.parse::<u64>().ok()))
    else {
        eprintln!("usage: trace TRACE BUDGET_MIB [WINDOW] [--fixture OUT]");
        return;
    };
    let events = replay::load_text(path);
    let demand = events.iter().filter(|e| e.is_demand()).count() as u64;
    let window = positional.get(2).and_then(|w| w.parse::<u64>().ok()).unwrap_or(demand).min(demand);
    let skip = demand - window;
    if let Some(out) = fixture {
        // A window over every demand read keeps what came before the first one too (a
        // restore's writes: the state a run starts from).
        let first = match skip {
            0 => 0,
            _ => events.iter().enumerate().filter(|(_, e)| e.is_demand()).nth(skip as usize).map_or(0, |(i, _)| i),
        };
        let bytes = replay::encode_fixture(&events[first..]);
        std::fs::write(&out, &bytes).unwrap_or_else(|e| panic!("{out}: {e}"));
        println!("{out}: {} events from the window's start, {} bytes", events.len() - first, bytes.len());
        return;
    }
    let budget = budget_mib << 20;
    println!(
        "{path}: {} events, {demand} demand reads, measured over the last {window}; budget {budget_mib} MiB",
        events.len()
    );
    let mut caches: Vec<Box<dyn Cache>> = vec![
        Box::new(Lru::new(budget)),
        Box::new(Tarn::new(budget, DataPolicy::Arc)),
        Box::new(Tarn::new(budget, DataPolicy::SecondLevel)),
    ];
    for cache in &mut caches {
        let s = replay::replay(&events, cache.as_mut(), skip);
        println!("{:<34} {:>8} / {:>8} = {:.3}", cache.name(), s.hits, s.reads, s.ratio());
        if args.iter().any(|a| a == "--verbose") {
            println!("  {}", cache.debug());
        }
    }
    let s = replay::opt(&events, budget, skip);
    println!("{:<34} {:>8} / {:>8} = {:.3}", "OPT (Belady, the bound)", s.hits, s.reads, s.ratio());
}

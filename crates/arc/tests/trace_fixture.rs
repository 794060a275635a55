//! The data policy against recorded traces of a database on tarn (what reached tarn under
//! MariaDB's buffer pool: its misses and its page flushes), replayed at equal byte budgets
//! through plain LRU, tarn's ARC as it kept data before issue #17, and the default policy.
//! A change that makes the default lose hits on these traces fails here.
//!
//! The fixtures (`tests/fixtures/*.trace.zst`) are the file-data events of a benchmark's
//! measured run, written by `cargo bench -p tarn-arc --bench trace -- TRACE 0 WINDOW
//! --fixture OUT`; the cache starts cold, and the first fifth of the run's demand reads
//! warm it up unmeasured.
#[path = "replay/mod.rs"]
mod replay;

use replay::{Cache, Lru, Score, Tarn};
use tarn_arc::DataPolicy;

struct Measured {
    lru: Score,
    arc: Score,
    second_level: Score,
}

fn measure(fixture: &[u8], budget_mib: u64) -> Measured {
    let events = replay::decode_fixture(fixture);
    let demand = events.iter().filter(|e| e.is_demand()).count() as u64;
    let skip = demand / 5;
    let budget = budget_mib << 20;
    let run = |cache: &mut dyn Cache| replay::replay(&events, cache, skip);
    Measured {
        lru: run(&mut Lru::new(budget)),
        arc: run(&mut Tarn::new(budget, DataPolicy::Arc)),
        second_level: run(&mut Tarn::new(budget, DataPolicy::SecondLevel)),
    }
}

fn check(name: &str, m: &Measured, recorded: f64) {
    let (lru, arc, ours) = (m.lru.ratio(), m.arc.ratio(), m.second_level.ratio());
    println!("{name}: LRU {lru:.3}, ARC {arc:.3}, second-level {ours:.3} (recorded {recorded:.3})");
    assert!(ours >= recorded - 0.002, "{name}: the default policy fell to {ours:.3} from the recorded {recorded:.3}");
    assert!(
        ours >= lru && ours >= arc,
        "{name}: the default policy ({ours:.3}) lost to LRU ({lru:.3}) or ARC ({arc:.3})"
    );
}

/// TPC-C-like, 8 warehouses, MariaDB with a 64 MiB buffer pool over tarn (lz4, 16 KiB
/// records), a 64 MiB cache (the run's configuration) and half of it: the pages that reach
/// tarn come back 1 to 19 times in the run. Fixture: `trace-tpcc-v1.txt`, WINDOW 51000 (about
/// the 120 s run's demand reads).
#[test]
fn tpcc_under_a_buffer_pool() {
    let fixture = include_bytes!("fixtures/tpcc-bp64.trace.zst");
    let m = measure(fixture, 64);
    check("TPC-C-like at 64 MiB", &m, TPCC_64);
    assert!(m.second_level.ratio() > m.arc.ratio() + 0.05, "a clear gain over ARC under a buffer pool");
    check("TPC-C-like at 32 MiB", &measure(fixture, 32), TPCC_32);
}

/// sysbench select_random_points (2 tables of 1M rows), MariaDB with a 32 MiB buffer pool
/// over tarn (lz4, 16 KiB records), a 32 MiB cache (the run's configuration) and twice
/// that: uniform random reads, where frequency has little to find and the policy must not
/// lose to recency. Fixture: `trace-srp-v2.txt`, WINDOW 100000.
#[test]
fn random_point_selects_under_a_buffer_pool() {
    let fixture = include_bytes!("fixtures/srp-bp32.trace.zst");
    check("select_random_points at 32 MiB", &measure(fixture, 32), SRP_32);
    check("select_random_points at 64 MiB", &measure(fixture, 64), SRP_64);
}

/// The default policy's hit ratios on the fixtures when they were recorded (a change may
/// raise them here; one that lowers them fails).
const TPCC_64: f64 = 0.678;
const TPCC_32: f64 = 0.409;
const SRP_32: f64 = 0.447;
const SRP_64: f64 = 0.563;

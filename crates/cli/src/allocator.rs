//! The process's allocator: jemalloc, set to give freed memory back to the OS.
//!
//! Why not glibc's malloc: the mount daemon frees as much as it allocates (records of
//! every txg, blocks leaving the ARC) from many threads, and glibc keeps what it frees in
//! per-thread arenas. Measured with `cargo run --release -p tarn-pool --example
//! arc_shrink[_jemalloc]` (a 512 MiB ARC filled from 4 threads, then shrunk to 64 MiB,
//! 62 MiB accounted after): glibc's RSS stayed at 811 MiB; glibc with `malloc_trim(0)`
//! after the shrink fell to 144 MiB; jemalloc (dirty pages decaying in 1 s, no muzzy
//! stage) peaked lower (542 MiB) but kept 498 MiB while idle — decay runs only when the
//! process allocates — and fell to 95 MiB with a purge after the shrink. So: jemalloc with
//! short decay, a purge whenever the ARC shrinks (`tarn_arc::jemalloc::purge`, through
//! `tarn_pool::set_memory_release`), and in the mount daemon background threads that
//! purge decayed pages of an idle process too.
//!
//! One arena and 200 ms decay (issue #11): with dirty data inside `arc_max`, what is left
//! over the bound while writing is jemalloc's free pages — a txg's records are allocated by
//! the writers and freed by the sync thread, and with an arena per thread (8 on 2 cores)
//! the pages freed in one arena wait for its decay while another allocates fresh ones.
//! Measured with `cargo run --release -p tarn-pool --example write_rss`, two runs each:
//! a 64 MiB ARC writing 512 MiB peaked at 147 and 141 MiB RSS with 8 arenas and 1 s
//! decay, 102 and 121 MiB with one arena and 200 ms (bandwidth 90/72 against 73/84 MiB/s);
//! a 256 MiB ARC writing 2 GiB at 384 and 404 MiB against 357 and 367 MiB (84/93 against
//! 90/86 MiB/s). The one arena's lock is rarely taken: each thread's cache serves most
//! allocations.
//!
//! A commit gives the free pages back at once when more than 16 MiB of them wait for their
//! decay (`tarn_arc::release_free_pages_over`): what the decay holds grows with the write
//! rate, and a fast machine writing 8× `arc_max` held 50–77 MiB of them.
//!
//! Owns: choosing jemalloc as the global allocator (its options are
//! `tarn_arc::jemalloc::OPTIONS`, shared with the memory tests). Promises: freed memory goes
//! back to the OS within about 200 ms of decay (at once after a shrink, or past 16 MiB at a
//! commit). Must never: start a thread before the mount daemon forks — background threads
//! are started by the daemon itself (`start_background_threads`), after its fork.

tarn_arc::jemalloc_global_allocator!();

pub use tarn_arc::jemalloc::{install, start_background_threads};

#[cfg(test)]
mod tests {
    /// The other unit tests of this binary run on other threads at the same time and
    /// allocate too, and `allocated` counts the whole process: the block is large and the
    /// bounds leave 64 MiB for them (a run on CI saw 8 MiB allocated by them in between).
    #[test]
    fn allocated_bytes_follow_what_the_process_holds() {
        const MIB: u64 = 1 << 20;
        const HELD: usize = 256 << 20;
        const SLACK: u64 = 64 * MIB;
        use tarn_arc::jemalloc::allocated;
        let before = allocated().expect("jemalloc is built with statistics (the stats feature)");
        let held = std::hint::black_box(vec![1u8; HELD]);
        let during = allocated().expect("statistics");
        assert!(during + SLACK >= before + HELD as u64, "256 MiB held: allocated went from {before} to {during}");
        drop(held);
        let after = allocated().expect("statistics");
        assert!(after + HELD as u64 <= during + SLACK, "256 MiB given back: allocated went from {during} to {after}");
    }
}

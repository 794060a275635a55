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
//! Owns: the global allocator and its options. Promises: freed memory goes back to the OS
//! within about 200 ms of decay (a purge at once after a shrink). Must never: start a
//! thread before the mount daemon forks — background threads are started by the daemon
//! itself (`start_background_threads`), after its fork.

use tarn_arc::jemalloc::{allocated, purge, slot_size};

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read at its first allocation: one arena (memory freed by one
/// thread is reused by the others), freed pages go back to the OS within 200 ms (dirty
/// decay), without the lazy "muzzy" stage in between.
#[allow(non_upper_case_globals)]
#[export_name = "_rjem_malloc_conf"]
pub static malloc_conf: &[u8] = b"narenas:1,dirty_decay_ms:200,muzzy_decay_ms:0\0";

/// Tells the engine how to give free memory back and how big a slot jemalloc hands out
/// for a request, so the ARC charges a block what it occupies (called first thing in
/// `main`, before any pool is opened).
pub fn install() {
    // `stats.allocated` lets `tarn stats arc` tell live allocations outside the budget
    // from the allocator's slack.
    tarn_pool::set_memory_release(purge);
    tarn_pool::set_alloc_size(slot_size);
    tarn_pool::set_allocated_bytes(allocated);
}

/// Starts jemalloc's background threads, which purge decayed pages while the process is
/// idle. Only in a process that will not fork again (the mount daemon, after its fork).
pub fn start_background_threads() {
    let mut on = true;
    // SAFETY: a NUL-terminated name and a bool-sized new value, as this control takes.
    unsafe {
        tikv_jemalloc_sys::mallctl(
            c"background_thread".as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            (&mut on as *mut bool).cast(),
            std::mem::size_of::<bool>(),
        );
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn allocated_bytes_follow_what_the_process_holds() {
        const MIB: u64 = 1 << 20;
        use tarn_arc::jemalloc::allocated;
        let before = allocated().expect("jemalloc is built with statistics (the stats feature)");
        let held = vec![1u8; 64 << 20];
        let during = allocated().expect("statistics");
        assert!(during >= before + 60 * MIB, "64 MiB held: allocated went from {before} to {during}");
        drop(held);
        let after = allocated().expect("statistics");
        assert!(after + 60 * MIB <= during, "64 MiB given back: allocated went from {during} to {after}");
    }
}

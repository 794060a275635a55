//! RSS after the ARC shrinks, with jemalloc (dirty pages decay in 1 s, no muzzy stage);
//! `--purge` purges every arena at once after the shrink; `--background` starts jemalloc's
//! background threads first (they purge decayed pages while the process is idle). See
//! shrink/probe.rs.
#[path = "shrink/probe.rs"]
mod probe;

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[allow(non_upper_case_globals)]
#[export_name = "_rjem_malloc_conf"]
pub static malloc_conf: &[u8] = b"dirty_decay_ms:1000,muzzy_decay_ms:0\0";

fn main() {
    if std::env::args().any(|a| a == "--background") {
        tarn_arc::jemalloc::start_background_threads();
        probe::run("jemalloc + background threads", || {});
    } else if std::env::args().any(|a| a == "--purge") {
        probe::run("jemalloc + purge", tarn_arc::jemalloc::purge);
    } else {
        probe::run("jemalloc", || {});
    }
}

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
        let mut on = true;
        // SAFETY: a NUL-terminated name and a bool-sized new value.
        unsafe {
            tikv_jemalloc_sys::mallctl(
                c"background_thread".as_ptr(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                (&mut on as *mut bool).cast(),
                std::mem::size_of::<bool>(),
            );
        }
        probe::run("jemalloc + background threads", || {});
    } else if std::env::args().any(|a| a == "--purge") {
        probe::run("jemalloc + purge", || {
            // "arena.<all>.purge": every arena's unused dirty pages back to the OS.
            let name = c"arena.4096.purge";
            // SAFETY: a NUL-terminated name; purge reads and writes no value.
            unsafe {
                tikv_jemalloc_sys::mallctl(
                    name.as_ptr(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    0,
                );
            }
        });
    } else {
        probe::run("jemalloc", || {});
    }
}

//! jemalloc's statistics and size classes, for a process that chose jemalloc as its
//! allocator (the `tarn` binary; the memory tests and examples that measure as it does).
//!
//! Owns: jemalloc's options for a tarn process (`OPTIONS`, set by
//! `jemalloc_global_allocator!` in the binary and in the tests and examples that measure
//! as it does), the hooks the engine's memory accounting takes from it (`install`), and
//! the few `mallctl` / `nallocx` calls behind them — `stats.allocated` (what `tarn stats
//! arc` splits RSS with), the free pages waiting for their decay, any other size
//! statistic, and the slot a request gets — written once (feature `jemalloc`).
//!
//! Promises: a statistic jemalloc does not answer (built without `stats`, or not the
//! process's allocator) is `None`, never a panic; `slot_size` is never below the request.
//!
//! Must never: be the allocator of a process that did not choose it (only the macro
//! makes it so), or be called on a hot path (`refresh` takes jemalloc's statistics lock).
use std::ffi::CStr;

pub use tikv_jemallocator::Jemalloc;

/// jemalloc's options, read at its first allocation (crates/cli/src/allocator.rs says
/// why): one arena, so memory freed by one thread is reused by the others; freed pages go
/// back to the OS within 200 ms of decay, without the lazy "muzzy" stage in between.
/// Background threads are started apart (`start_background_threads`), since the mount
/// daemon must fork first.
pub const OPTIONS: &[u8] = b"narenas:1,dirty_decay_ms:200,muzzy_decay_ms:0\0";

/// Makes jemalloc the process's allocator, with tarn's `OPTIONS`: one line at the root of
/// the `tarn` binary and of each test or example that measures memory as it does, so they
/// all measure the same allocator with the same settings.
#[macro_export]
macro_rules! jemalloc_global_allocator {
    () => {
        #[global_allocator]
        static ALLOCATOR: $crate::jemalloc::Jemalloc = $crate::jemalloc::Jemalloc;

        #[allow(non_upper_case_globals)]
        #[export_name = "_rjem_malloc_conf"]
        pub static malloc_conf: &[u8] = $crate::jemalloc::OPTIONS;
    };
}

/// Gives the engine jemalloc's hooks: the slot a request occupies (the budget charges it),
/// the bytes handed out (RSS's split), its free pages and how to give them back (after a
/// shrink, and whenever a commit finds more than `FREE_PAGES_KEPT` of them). Call it first
/// thing, before any pool is opened.
pub fn install() {
    crate::set_alloc_size(slot_size);
    crate::set_allocated_bytes(allocated);
    crate::set_free_page_bytes(dirty_bytes);
    crate::set_memory_release(purge);
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

/// The bytes of free pages jemalloc holds for reuse until their decay ends (every arena's
/// dirty and muzzy pages), now: what a purge would give back.
pub fn dirty_bytes() -> Option<u64> {
    refresh();
    // 4096 is MALLCTL_ARENAS_ALL: the arenas' statistics merged.
    let pages = stat(c"stats.arenas.4096.pdirty")? + stat(c"stats.arenas.4096.pmuzzy").unwrap_or(0);
    let page = stat(c"arenas.page").unwrap_or(4096);
    Some(pages * page)
}

/// Makes jemalloc's statistics current (advances its `epoch`): they are a snapshot taken
/// at the last refresh.
pub fn refresh() {
    let mut epoch: u64 = 1;
    let mut len = std::mem::size_of::<u64>();
    // SAFETY: a NUL-terminated name; `epoch` reads and writes a u64, into and from a
    // variable of that size whose length is passed along.
    unsafe {
        tikv_jemalloc_sys::mallctl(
            c"epoch".as_ptr(),
            (&mut epoch as *mut u64).cast(),
            &mut len,
            (&mut epoch as *mut u64).cast(),
            len,
        );
    }
}

/// A size statistic (`stats.allocated`, `stats.active`, `stats.resident`…) as of the last
/// `refresh`; `None` if jemalloc does not answer.
pub fn stat(name: &CStr) -> Option<u64> {
    let mut value: usize = 0;
    let mut len = std::mem::size_of::<usize>();
    // SAFETY: a NUL-terminated name of a size_t statistic, read into a size_t whose
    // length is passed along; nothing is written.
    let rc = unsafe {
        tikv_jemalloc_sys::mallctl(name.as_ptr(), (&mut value as *mut usize).cast(), &mut len, std::ptr::null_mut(), 0)
    };
    (rc == 0).then_some(value as u64)
}

/// The bytes jemalloc has handed out and not had back, now (`stats.allocated` after a
/// refresh): the hook `tarn_arc::set_allocated_bytes` takes.
pub fn allocated() -> Option<u64> {
    refresh();
    stat(c"stats.allocated")
}

/// The size of the slot jemalloc hands out for `len` bytes (its size class): the hook
/// `tarn_arc::set_alloc_size` takes.
pub fn slot_size(len: usize) -> usize {
    if len == 0 {
        return 0;
    }
    // SAFETY: nallocx only computes a size class; it allocates nothing and takes no
    // pointer. It returns 0 if the size is beyond what jemalloc could allocate.
    let slot = unsafe { tikv_jemalloc_sys::nallocx(len, 0) };
    slot.max(len)
}

/// Returns every arena's unused pages to the OS now: the hook `tarn_arc::set_memory_release`
/// takes (called whenever the ARC shrinks).
pub fn purge() {
    // 4096 is MALLCTL_ARENAS_ALL.
    // SAFETY: a NUL-terminated name; the control reads and writes nothing.
    unsafe {
        tikv_jemalloc_sys::mallctl(
            c"arena.4096.purge".as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        );
    }
}

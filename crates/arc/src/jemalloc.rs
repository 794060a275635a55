//! jemalloc's statistics and size classes, for a process that chose jemalloc as its
//! allocator (the `tarn` binary; the memory tests and examples that measure as it does).
//!
//! Owns: the few `mallctl` / `nallocx` calls the engine's memory accounting needs —
//! `stats.allocated` (what `tarn stats arc` splits RSS with), any other size statistic,
//! and the slot a request gets — written once (feature `jemalloc`).
//!
//! Promises: a statistic jemalloc does not answer (built without `stats`, or not the
//! process's allocator) is `None`, never a panic; `slot_size` is never below the request.
//!
//! Must never: choose the allocator or its options (the binary does), or be called on a
//! hot path (`refresh` takes jemalloc's statistics lock).
use std::ffi::CStr;

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

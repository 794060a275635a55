//! The process's memory as the OS sees it: resident size, physical memory, and giving the
//! allocator's free memory back.
//!
//! Owns: the hooks the binary sets to release its allocator's free memory, to say how
//! big a slot its allocator hands out for a request (`set_alloc_size`), and how many
//! bytes its allocator has handed out and not had back (`set_allocated_bytes`).
//!
//! Promises: every reading degrades to a stated default when /proc cannot be read, never
//! an error.
//!
//! Must never: choose the allocator (the binary does) or be read on a hot path (each call
//! reads /proc).

/// How the process's allocator gives free memory back to the OS, if the binary said
/// (`set_memory_release`).
static MEMORY_RELEASE: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Sets, once, how to give the allocator's free memory back to the OS: the binary chooses
/// the allocator, the engine knows when a shrink made memory free.
pub fn set_memory_release(release: fn()) {
    let _ = MEMORY_RELEASE.set(release);
}

/// The size of the slot the process's allocator hands out for a request of n bytes, if
/// the binary said (`set_alloc_size`).
static ALLOC_SIZE: std::sync::OnceLock<fn(usize) -> usize> = std::sync::OnceLock::new();

/// Sets, once, how big a slot the process's allocator hands out for a request (jemalloc's
/// `nallocx`): the budget then charges a cached block what it occupies, not its length —
/// a 8.3 KiB lz4 block sits in a 10 KiB slot (issue #11). Call it before the first cache
/// is made; an entry keeps the charge it was made with, so a later call only changes new
/// entries. Without it a block is charged its length (the engine needs no allocator).
pub fn set_alloc_size(size: fn(usize) -> usize) {
    let _ = ALLOC_SIZE.set(size);
}

/// What the budget charges for a cached block of `len` bytes: the slot an `Arc<[u8]>` of
/// that length occupies (two reference counts before the bytes), or `len` when the binary
/// gave no allocator's size function.
pub(crate) fn charged_bytes(len: usize) -> u64 {
    let charged = match ALLOC_SIZE.get() {
        Some(size) => size(len + 2 * std::mem::size_of::<usize>()).max(len),
        None => len,
    };
    charged as u64
}

/// How many bytes the process's allocator has handed out and not had back, if the binary
/// said (`set_allocated_bytes`).
static ALLOCATED: std::sync::OnceLock<fn() -> Option<u64>> = std::sync::OnceLock::new();

/// Sets, once, how to read the bytes the process's allocator has handed out and not had
/// back (jemalloc's `stats.allocated`). With it, `tarn stats arc` splits the resident
/// memory the budget does not account for into live allocations outside the budget
/// (buffers in flight, intent-log copies, tables) and the allocator's slack (pages it
/// holds with nothing allocated in them, or only partly used), which need different
/// fixes (issue #11).
pub fn set_allocated_bytes(allocated: fn() -> Option<u64>) {
    let _ = ALLOCATED.set(allocated);
}

/// The bytes the process's allocator has handed out and not had back, if the binary gave
/// a way to read them. Reads allocator statistics: not for a hot path.
pub fn allocated_bytes() -> Option<u64> {
    ALLOCATED.get().and_then(|allocated| allocated())
}

/// Bytes the process has allocated that are never written by design, so never resident.
static UNTOUCHED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Says that of an allocation of `allocation` bytes at most `written_at_most` are ever
/// written (a buffer sized for a request larger than any that will come: a FUSE worker's,
/// see `tarn_fuse::mount`), and returns how many bytes that leaves untouched, to give back
/// with `sub_untouched_bytes` when the buffer is freed. The untouched bytes run to the end
/// of the allocator's slot, not of the request: jemalloc rounds 16 MiB + 4 KiB up to a
/// 20 MiB size class and counts all of it as allocated. `tarn stats arc` leaves them out
/// of the live allocations outside the budget, which would otherwise count, against
/// resident memory, allocations that take none.
pub fn add_untouched(allocation: usize, written_at_most: usize) -> u64 {
    let slot = ALLOC_SIZE.get().map_or(allocation, |size| size(allocation).max(allocation));
    let bytes = slot.saturating_sub(written_at_most) as u64;
    UNTOUCHED.fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
    bytes
}

/// Takes back what `add_untouched` said, once those buffers are freed.
pub fn sub_untouched_bytes(bytes: u64) {
    UNTOUCHED.fetch_sub(bytes, std::sync::atomic::Ordering::Relaxed);
}

/// The bytes allocated but never written, as told (`add_untouched`).
pub fn untouched_bytes() -> u64 {
    UNTOUCHED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Gives the allocator's free memory back to the OS, if the binary said how.
pub fn release_memory() {
    if let Some(release) = MEMORY_RELEASE.get() {
        release();
    }
}

/// How many bytes of free pages the process's allocator holds for reuse, if the binary
/// said (`set_free_page_bytes`).
static FREE_PAGE_BYTES: std::sync::OnceLock<fn() -> Option<u64>> = std::sync::OnceLock::new();

/// Sets, once, how to read the bytes of free pages the allocator holds until their decay
/// gives them back (jemalloc's dirty pages): with it, `release_free_pages_over` bounds them.
pub fn set_free_page_bytes(free: fn() -> Option<u64>) {
    let _ = FREE_PAGE_BYTES.set(free);
}

/// The free pages the allocator may hold between two commits before they are given back
/// at once rather than left to their decay. Why a bound and not only the decay: the
/// decay keeps what was freed over its last interval (200 ms), so what it holds grows with
/// the write rate — a fast machine writing 8× `arc_max` peaked 50–77 MiB of them, over the
/// fixed overhead's share (docs/design/memory.md). 16 MiB: a few txgs' worth of small
/// frees, so a commit rarely pays for a purge.
pub const FREE_PAGES_KEPT: u64 = 16 << 20;

/// Gives the allocator's free pages back to the OS when more than `kept` bytes of them
/// wait for their decay (called after each commit). Returns the bytes given back (0 when
/// under `kept`, or when the binary gave no way to read or release them). Reads allocator
/// statistics: not for a hot path.
pub fn release_free_pages_over(kept: u64) -> u64 {
    let (Some(free), Some(release)) = (FREE_PAGE_BYTES.get(), MEMORY_RELEASE.get()) else {
        return 0;
    };
    match free() {
        Some(bytes) if bytes > kept => {
            release();
            bytes
        }
        _ => 0,
    }
}

/// The process's resident memory in bytes, from /proc/self/statm (0 if it cannot be
/// read).
pub fn resident_bytes() -> u64 {
    let page = 4096; // statm counts pages; every Linux platform tarn runs on has 4 KiB ones
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|n| n.parse::<u64>().ok()))
        .map_or(0, |pages| pages * page)
}

/// Physical memory in bytes, from /proc/meminfo (1 GiB if it cannot be read).
pub(crate) fn total_memory() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(1 << 30, |kb| kb * 1024)
}

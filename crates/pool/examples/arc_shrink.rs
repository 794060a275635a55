//! RSS after the ARC shrinks, with glibc's allocator; `--trim` calls `malloc_trim(0)`
//! after the shrink. See shrink/probe.rs. Run: cargo run --release -p tarn-pool --example
//! arc_shrink [-- --trim]
#[path = "shrink/probe.rs"]
mod probe;

fn main() {
    if std::env::args().any(|a| a == "--trim") {
        // SAFETY: malloc_trim only returns free memory to the OS.
        probe::run("glibc + malloc_trim", || unsafe {
            libc::malloc_trim(0);
        });
    } else {
        probe::run("glibc", || {});
    }
}

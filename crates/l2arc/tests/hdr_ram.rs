//! The RAM the L2ARC takes per cached block, from the allocator's own figures: jemalloc's
//! `stats.allocated` before the cache opens and at fills from 1 to 1.6 million blocks
//! (past a whole cycle of the index tables' growth), all in — index, per-chunk sums, the
//! feed queue and the workers' buffers, allocator slack. The device is a stand-in that
//! keeps nothing (the figure is RAM, not I/O), so the run needs no disk space.
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tarn_arc::{BlockKey, Class, Departing};
use tarn_l2arc::{CacheSpec, L2Arc};

#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Bytes jemalloc has handed out and not had back (its `epoch` advanced first, so the
/// figure is current).
fn allocated() -> u64 {
    let mut epoch: u64 = 1;
    let mut len = std::mem::size_of::<u64>();
    let mut allocated: usize = 0;
    let mut allocated_len = std::mem::size_of::<usize>();
    // SAFETY: NUL-terminated names; `epoch` reads and writes a u64, `stats.allocated`
    // reads a size_t, each into a variable of that size whose length is passed along.
    let rc = unsafe {
        tikv_jemalloc_sys::mallctl(
            c"epoch".as_ptr(),
            (&mut epoch as *mut u64).cast(),
            &mut len,
            (&mut epoch as *mut u64).cast(),
            len,
        );
        tikv_jemalloc_sys::mallctl(
            c"stats.allocated".as_ptr(),
            (&mut allocated as *mut usize).cast(),
            &mut allocated_len,
            std::ptr::null_mut(),
            0,
        )
    };
    assert_eq!(rc, 0, "jemalloc's stats.allocated");
    allocated as u64
}

/// A cache device of `size` bytes that keeps nothing: reads see a blank device.
struct Discard {
    size: u64,
    path: PathBuf,
}

impl tarn_vdev::BlockDevice for Discard {
    fn read_at(&self, buf: &mut [u8], _offset: u64) -> std::io::Result<()> {
        buf.fill(0);
        Ok(())
    }
    fn write_at(&self, _buf: &[u8], _offset: u64) -> std::io::Result<()> {
        Ok(())
    }
    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn size(&self) -> u64 {
        self.size
    }
    fn path(&self) -> &Path {
        &self.path
    }
}

const BLOCK: usize = 512;

fn wait_drained(l2: &L2Arc, written: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while l2.snapshot().written_blocks < written && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(l2.snapshot().written_blocks, written, "the feed did not write every block");
}

#[test]
fn ram_per_cached_block_from_jemalloc_stays_at_most_48_bytes_from_1_to_1_6_million_blocks() {
    let bytes: Arc<[u8]> = vec![7u8; BLOCK].into();
    let before = allocated();
    // 2 GiB: 1.6 million 512-byte blocks (with their log blocks) fit without a wrap.
    let dev = Arc::new(Discard { size: 2 << 30, path: PathBuf::from("/discard") });
    let spec = CacheSpec { guid: 1, path: dev.path.clone() };
    let l2 = L2Arc::open_devices(9, vec![(spec, dev as Arc<dyn tarn_vdev::BlockDevice>)]);
    l2.tunables().set("l2arc_write_max", 64 << 30).unwrap();
    l2.tunables().set("l2arc_headroom", 64).unwrap();
    let sink = l2.start(false);
    let mut worst = (0.0f64, 0u64);
    let mut n = 0u64;
    for target in (1_000_000..=1_600_000).step_by(50_000) {
        while n < target {
            let key = BlockKey { vdev: (n % 2) as u16, offset: n * 4096, birth: 100 + n / 10_000 };
            sink.evicted(Departing {
                key,
                bytes: &bytes,
                lsize: 16384,
                class: Class::Data,
                unread_prefetch: false,
                objset: None,
            });
            n += 1;
            if n.is_multiple_of(4096) {
                // Keep the queue under its 65536 blocks: none left out.
                while l2.snapshot().feed_backlog > (16 << 10) * BLOCK as u64 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        wait_drained(&l2, n);
        let s = l2.snapshot();
        assert_eq!((s.blocks, s.feed_behind), (n, 0), "{s:?}");
        let delta = allocated() - before;
        let per = delta as f64 / s.blocks as f64;
        eprintln!(
            "{} blocks: {delta} bytes allocated ({per:.1} per block); hdr_size {} ({} per block)",
            s.blocks, s.hdr_size, s.hdr_bytes_per_block
        );
        // hdr_size is the index and chunk sums only: the rest of the delta is the feed's
        // fixed part (its queue's slots, the worker's chunk buffer), a few MiB.
        assert!(s.hdr_size <= delta && delta - s.hdr_size < 8 << 20, "hdr_size {} of {delta}", s.hdr_size);
        if per > worst.0 {
            worst = (per, s.blocks);
        }
    }
    eprintln!("worst: {:.1} bytes per block at {} blocks", worst.0, worst.1);
    assert!(worst.0 <= 48.0, "{:.1} bytes per cached block at {} blocks", worst.0, worst.1);
    drop((sink, l2));
}

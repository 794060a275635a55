//! Memory of a txg's write (issue #11): `write_blocks` compresses a batch a slice at a
//! time, so the compressed copies it holds before placing them stay a few MiB whatever
//! the batch — not half of a txg's dirty data beside the records themselves (107 MiB at
//! the peak of four sequential writers, when the whole batch was compressed at once).
//! Measured with a counting allocator: the most bytes live at once beyond what was live
//! before the call.
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tarn_vdev::{BlockDevice, FileDevice, Leaf, TopVdev, VdevTree};
use tarn_zio::{BlockType, CachePolicy, ChecksumKind, Compression, PendingBlock, Zio};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(live, Ordering::Relaxed);
        // SAFETY: the caller's layout, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: a pointer this allocator returned, with its layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const MIB: usize = 1 << 20;
const RECORD: usize = 16384;

/// A 16 KiB record that lz4 halves (8 KiB of noise, 8 KiB of zeros), as fio's
/// `buffer_compress_percentage=50` writes.
fn record(seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut r = vec![0u8; RECORD];
    for w in r[..RECORD / 2].chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w.copy_from_slice(&x.to_le_bytes());
    }
    r
}

#[test]
fn writing_a_large_batch_holds_a_bounded_slice_of_compressed_copies() {
    let dir = tempfile::tempdir_in(std::env::var("TARN_BENCH_DIR").unwrap_or_else(|_| "/var/tmp".into())).unwrap();
    let dev = FileDevice::open_or_create(&dir.path().join("d.img"), Some(256 << 20)).unwrap();
    let asize = TopVdev::asize_of(dev.size(), 12);
    let leaf = Leaf::new(1, "d.img".into(), Some(Arc::new(dev) as Arc<dyn BlockDevice>));
    let zio = Zio::new(VdevTree::new(vec![TopVdev::new(0, 1, 12, asize, vec![leaf])], 12));
    zio.finish_load();

    // A txg's batch: 64 MiB of records, about 32 MiB once compressed.
    let records: Vec<Vec<u8>> = (0..(64 * MIB / RECORD) as u64).map(record).collect();
    let blocks: Vec<PendingBlock> = records
        .iter()
        .map(|r| PendingBlock {
            data: r,
            compression: Compression::Lz4,
            checksum: ChecksumKind::Xxh3,
            level: 0,
            block_type: BlockType::Data,
            cache: CachePolicy::None, // what the ARC keeps is its budget's, not this batch's
            page: None,
            objset: None,
        })
        .collect();
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let ptrs = zio.write_blocks(&blocks, 1).unwrap();
    let held = PEAK.load(Ordering::Relaxed) - before;

    let psize: u64 = ptrs.iter().map(|p| p.psize as u64).sum();
    assert!(psize < 40 * MIB as u64, "the records compress to about half: {psize} bytes");
    // The pointers (64 of them per MiB) and one slice's compressed copies and run buffer.
    assert!(
        held <= 12 * MIB,
        "writing a 64 MiB batch held {} MiB at once beyond its records ({} MiB compressed)",
        held / MIB,
        psize / MIB as u64
    );
    for (i, bp) in ptrs.iter().enumerate().step_by(97) {
        assert_eq!(zio.read(bp, tarn_zio::Access::of(tarn_zio::ReadKind::Demand)).unwrap(), records[i], "record {i}");
    }
}

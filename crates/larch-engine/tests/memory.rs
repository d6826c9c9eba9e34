//! `zfs_arc_max` bounds the memory the cache holds, whatever the requests look like
//! (issue 14, defect 1). Every heap allocation of this test binary is counted, so the
//! check is on memory actually held, not on the ARC's own accounting. The tests take
//! turns ([`SERIAL`]): the count is the whole process's.
//!
//! The pattern is the one that broke it: large NBD writes, each followed, while still
//! cached, by two reads of its first block far enough apart to promote that block to MFU;
//! then enough other reads to evict everything else. When a written block was a slice of
//! its request's payload, each MFU block kept its whole request alive.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use larch_engine::{BackingStore, Engine, LatencyModel, Volume, VolumeSpec};
use larch_nbd::Export;

/// Counts the bytes live on the heap.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
/// The most bytes live at once since it was last reset.
static PEAK: AtomicUsize = AtomicUsize::new(0);
/// One test at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn counted(size: usize) {
    let live = LIVE.fetch_add(size, Ordering::Relaxed) + size;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

// SAFETY: forwards to the system allocator and only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            counted(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            counted(layout.size());
        }
        p
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            counted(new_size);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const MIB: usize = 1 << 20;
const ARC_MAX: usize = 8 * MIB;
const BLOCK: u32 = 16 << 10;
const WRITES: usize = 16;
const WRITE_BYTES: usize = 4 * MIB;

/// A volume of `bytes` on a sparse file (so the backing store's bytes are not on the
/// heap), an engine with `ARC_MAX`, and a runtime to drive them; the directory is the
/// caller's to remove.
fn sparse_volume(
    name: &str,
    bytes: u64,
) -> (PathBuf, tokio::runtime::Runtime, Arc<Engine>, Volume) {
    let dir =
        std::env::temp_dir().join(format!("larch-engine-memory-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("vol.img");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(bytes)
        .unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let engine = Engine::new(ARC_MAX as u64);
    let store = BackingStore::open(&path, false, LatencyModel::default()).unwrap();
    let entry = engine
        .add_volume(VolumeSpec::new(1, BLOCK), Arc::new(store))
        .unwrap();
    let volume = Volume::new("vol".into(), entry, Arc::clone(&engine));
    (dir, runtime, engine, volume)
}

#[test]
fn the_heap_stays_within_zfs_arc_max_under_large_writes_kept_in_mfu() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (dir, runtime, engine, volume) =
        sparse_volume("mfu", (WRITES * WRITE_BYTES + 64 * MIB) as u64);
    let baseline = LIVE.load(Ordering::Relaxed);

    runtime.block_on(async {
        for i in 0..WRITES {
            let offset = (i * WRITE_BYTES) as u64;
            let payload = Bytes::from(vec![i as u8 + 1; WRITE_BYTES]);
            Export::write(&volume, offset, payload, false)
                .await
                .unwrap();
            Export::flush(&volume).await.unwrap();
            let first = Export::read(&volume, offset, BLOCK).await.unwrap();
            drop(first);
            tokio::time::sleep(Duration::from_millis(70)).await;
            drop(Export::read(&volume, offset, BLOCK).await.unwrap());
        }
        // Reads elsewhere push everything but the MFU blocks out. They go in a scattered
        // order: in sequence, the prefetcher would read ahead, and young prefetched blocks
        // are passed over by eviction, which then takes MFU blocks instead (as OpenZFS's
        // arc_min_prefetch_ms does), so whether any MFU block survived would be timing.
        let rest = (WRITES * WRITE_BYTES) as u64;
        for i in 0..64u64 {
            let mib = (i * 37) % 64;
            drop(
                Export::read(&volume, rest + mib * MIB as u64, MIB as u32)
                    .await
                    .unwrap(),
            );
        }
    });
    let held = LIVE.load(Ordering::Relaxed).saturating_sub(baseline);
    // The ARC's data, its headers and hash tables, the read path's and the runtime's
    // buffers: a few MiB beyond zfs_arc_max. Blocks that were slices of their payloads
    // would hold a whole 4 MiB payload for each block kept in MFU.
    let bound = ARC_MAX + 8 * MIB;
    eprintln!(
        "heap held after the workload: {:.1} MiB (zfs_arc_max {} MiB)",
        held as f64 / MIB as f64,
        ARC_MAX / MIB
    );
    assert!(
        held <= bound,
        "the heap holds {:.1} MiB more than before the workload; zfs_arc_max is {} MiB (bound {} MiB)",
        held as f64 / MIB as f64,
        ARC_MAX / MIB,
        bound / MIB
    );
    let stats: std::collections::HashMap<String, u64> = engine.arcstats().into_iter().collect();
    assert!(
        stats["mfu_size"] >= 4 * u64::from(BLOCK),
        "the test kept some written blocks in MFU (else it proves nothing): {} bytes",
        stats["mfu_size"]
    );
    assert!(
        stats["size"] <= ARC_MAX as u64,
        "ARC size {}",
        stats["size"]
    );
    engine.shutdown();
    drop(runtime);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A WRITE_ZEROES or a CACHE carries no payload, so a client can ask for up to 4 GiB with
/// one: the volume works through it in pieces, and the heap's peak stays near
/// `zfs_arc_max` (before, a WRITE_ZEROES allocated its whole length twice, as zeroes and
/// as dirty blocks past the dirty limit, and a CACHE held every block it read until it
/// returned).
#[test]
fn large_write_zeroes_and_cache_requests_do_not_grow_the_heap_with_their_length() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const ZEROED: u64 = 256 * MIB as u64;
    let (dir, runtime, engine, volume) = sparse_volume("zeroes", 2 * ZEROED);
    let bound = ARC_MAX + 16 * MIB;
    let peak_of = |what: &str, work: &dyn Fn()| {
        let before = LIVE.load(Ordering::Relaxed);
        PEAK.store(before, Ordering::Relaxed);
        work();
        let peak = PEAK.load(Ordering::Relaxed).saturating_sub(before);
        eprintln!(
            "{what} of {} MiB: heap peak {:.1} MiB above before",
            ZEROED >> 20,
            peak as f64 / MIB as f64
        );
        assert!(
            peak <= bound,
            "{what} of {} MiB raised the heap by {:.1} MiB at its peak (bound {} MiB)",
            ZEROED >> 20,
            peak as f64 / MIB as f64,
            bound / MIB
        );
    };
    // Data first, so that the zeroes change something a read can check.
    runtime.block_on(async {
        Export::write(&volume, MIB as u64, Bytes::from(vec![7u8; MIB]), false)
            .await
            .unwrap();
        Export::flush(&volume).await.unwrap();
    });
    peak_of("WRITE_ZEROES", &|| {
        runtime.block_on(async {
            let flags = larch_nbd::ZeroFlags {
                may_trim: false,
                fast_only: false,
                fua: true,
            };
            Export::write_zeroes(&volume, 0, ZEROED as u32, flags)
                .await
                .unwrap();
        })
    });
    let back = runtime
        .block_on(Export::read(&volume, MIB as u64, BLOCK))
        .unwrap();
    assert!(
        back.segments.iter().all(|s| match s {
            larch_nbd::ReadSegment::Data(d) => d.iter().all(|&b| b == 0),
            larch_nbd::ReadSegment::Zeroes(_) => true,
        }),
        "the zeroes reached the data written before them"
    );
    peak_of("CACHE", &|| {
        runtime.block_on(async {
            Export::cache(&volume, ZEROED, ZEROED as u32).await.unwrap();
        })
    });
    engine.shutdown();
    drop(runtime);
    let _ = std::fs::remove_dir_all(&dir);
}

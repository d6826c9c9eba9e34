//! The async write path without NBD: writer threads dirty whole blocks of a file-backed
//! volume as fast as the engine takes them (its throttle included), for SECONDS, then one
//! flush; prints the bytes per second from the first write to the end of that flush, and
//! how the syncer wrote the file. What the syncer reaches against the disk, with no
//! socket copies in the way (bench/write-path.sh compares it with fio on the same file).
//!
//! ```text
//! cargo run --release -p larch-engine --example write_path -- PATH [SECONDS] [BLOCK_KIB] [THREADS] [buffered]
//! ```
//! PATH: the backing file to create (4 GiB, sparse; removed after). SECONDS defaults to
//! 10, BLOCK_KIB to 128, THREADS to 2; the ARC is 1 GiB. `buffered`: the syncer writes
//! through the page cache (as before `O_DIRECT`), for comparison. Each thread writes 1 MiB at a
//! time, sequentially through its own quarter of the volume.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use larch_engine::{BackingStore, BlockBuf, Engine, LatencyModel, VolumeSpec};

const VOLUME_BYTES: u64 = 4 << 30;

/// The larch binary's allocator, so that the engine alone is compared like for like.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = PathBuf::from(
        args.next()
            .ok_or("usage: write_path PATH [SECONDS] [BLOCK_KIB] [THREADS]")?,
    );
    let seconds: u64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(10);
    let block_kib: u32 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(128);
    let threads: u64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(2);
    let direct = args.next().as_deref() != Some("buffered");
    let block_bytes = block_kib * 1024;
    std::fs::File::create(&path)?.set_len(VOLUME_BYTES)?;
    let engine = Engine::new(1 << 30);
    let store = BackingStore::open_with(&path, false, LatencyModel::default(), direct)?;
    let vol = engine.add_volume(VolumeSpec::new(0x5717_e001, block_bytes), Arc::new(store))?;
    let blocks_per_write = ((1 << 20) / block_bytes).max(1) as u64;
    let span = VOLUME_BYTES / u64::from(block_bytes) / threads;
    let written = AtomicU64::new(0);
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (engine, vol, written) = (&engine, &vol, &written);
            scope.spawn(move || {
                let payload = vec![t as u8 ^ 0x5a; block_bytes as usize];
                let mut next = 0u64;
                while Instant::now() < deadline {
                    let first = t * span + next % span;
                    let blocks: Vec<(u64, BlockBuf)> = (0..blocks_per_write)
                        .map(|i| (first + i, BlockBuf::copy_from(&payload)))
                        .collect();
                    engine.write_blocks(vol, &blocks, false).expect("write");
                    next += blocks_per_write;
                    written.fetch_add(blocks_per_write * u64::from(block_bytes), Ordering::Relaxed);
                }
            });
        }
    });
    engine.flush_writes(&vol)?;
    let took = started.elapsed().as_secs_f64();
    let bytes = written.load(Ordering::Relaxed);
    let stats: std::collections::HashMap<String, u64> = engine.arcstats().into_iter().collect();
    let direct = vol.backing.stats.direct_write_bytes.load(Ordering::Relaxed);
    let total = vol.backing.stats.write_bytes.load(Ordering::Relaxed);
    println!(
        "{block_kib}K blocks, {threads} writer threads: {:.0} MB/s ({bytes} bytes in {took:.2} s to the end of the last flush)",
        bytes as f64 / took / 1e6
    );
    println!(
        "syncer: {} TXGs, {:.1} ms per sync on average; {:.0}% of the bytes written with O_DIRECT ({})",
        stats["txg_syncs"],
        stats["txg_sync_us"] as f64 / stats["txg_syncs"].max(1) as f64 / 1000.0,
        direct as f64 * 100.0 / total.max(1) as f64,
        vol.backing.write_mode().unwrap_or_default()
    );
    let (writes, flushes) = (
        vol.backing.stats.write_latency.snapshot(),
        vol.backing.stats.flush_latency.snapshot(),
    );
    let ms = |d: Option<Duration>| d.map_or(0.0, |d| d.as_secs_f64() * 1000.0);
    println!(
        "backing store: {} writes, mean {:.2} ms; {} flushes, mean {:.2} ms",
        writes.count(),
        ms(writes.mean()),
        flushes.count(),
        ms(flushes.mean())
    );
    engine.shutdown();
    let _ = std::fs::remove_file(&path);
    Ok(())
}

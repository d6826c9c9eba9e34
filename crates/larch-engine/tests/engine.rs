//! The engine driven directly (no NBD): ARC size control, the L2 index's handling of
//! copies that failed verification, and a pool's cache devices across restarts. Real
//! files, real cache devices, real restarts.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use larch_engine::{
    BackingStore, BlockBuf, DeviceState, Engine, LatencyModel, VolumeEntry, VolumeSpec,
};

const BLOCK: u32 = 16 << 10;
const POOL: u64 = 0x7e57_0001;
const DEVICE: u64 = 0x7e57_0002;
const VOLUME: u64 = 0x7e57_0003;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("larch-engine-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// Block `b`'s contents in version `v`: a header naming both, then a pattern.
fn contents(b: u64, v: u8) -> Vec<u8> {
    let mut buf = vec![0u8; BLOCK as usize];
    let head = format!("block {b:08} version {v:03} ");
    buf[..head.len()].copy_from_slice(head.as_bytes());
    for (i, x) in buf.iter_mut().enumerate().skip(head.len()) {
        *x = (i as u64 ^ b.wrapping_mul(31) ^ u64::from(v)) as u8;
    }
    buf
}

fn backing_file(path: &Path, blocks: u64) {
    let mut all = Vec::with_capacity((blocks * u64::from(BLOCK)) as usize);
    for b in 0..blocks {
        all.extend_from_slice(&contents(b, 0));
    }
    std::fs::write(path, all).expect("backing file");
}

struct Setup {
    engine: Arc<Engine>,
    vol: Arc<VolumeEntry>,
    runtime: tokio::runtime::Runtime,
}

impl Setup {
    fn new(backing: &Path, arc_max: u64) -> Setup {
        Setup::with_latency(backing, arc_max, LatencyModel::default())
    }

    fn with_latency(backing: &Path, arc_max: u64, latency: LatencyModel) -> Setup {
        let engine = Engine::new(arc_max);
        let store = BackingStore::open(backing, false, latency).expect("open");
        let vol = engine
            .add_volume(VolumeSpec::new(VOLUME, BLOCK), Arc::new(store))
            .expect("volume");
        Setup {
            engine,
            vol,
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime"),
        }
    }

    fn read(&self, block: u64) -> Bytes {
        self.runtime
            .block_on(self.engine.read_block(&self.vol, block, false))
            .expect("backing store read")
    }

    /// A sync write: durable (its TXG synced) when this returns.
    fn write(&self, block: u64, data: Vec<u8>) {
        self.engine
            .write_blocks(&self.vol, &[(block, BlockBuf::from_vec(data))], true)
            .expect("write");
    }

    fn stat(&self, name: &str) -> u64 {
        let stats: HashMap<String, u64> = self.engine.arcstats().into_iter().collect();
        stats[name]
    }
}

fn wait_online(engine: &Engine) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while engine
        .devices()
        .iter()
        .any(|d| d.state() == DeviceState::Rebuilding)
    {
        assert!(Instant::now() < deadline, "rebuild did not end");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_arc_follows_zfs_arc_max_and_shrinks_to_zfs_arc_min_under_memory_pressure() {
    let dir = scratch("arc-size");
    let backing = dir.join("vol.img");
    backing_file(&backing, 2048); // 32 MiB
    let s = Setup::new(&backing, 16 << 20);
    let t = &s.engine.tunables;
    t.set("zfs_arc_min", "2M").unwrap();
    for b in 0..2048 {
        assert_eq!(s.read(b)[..], contents(b, 0)[..]);
    }
    let full = s.stat("size");
    assert!(full > 12 << 20, "the ARC grew towards zfs_arc_max: {full}");
    assert!(full <= 16 << 20, "and not past it: {full}");

    // Memory pressure: the system is to keep more free than this machine has.
    t.set("zfs_arc_sys_free", "1048576T").unwrap();
    s.engine.adjust_arc_size();
    let shrunk = s.stat("size");
    assert!(shrunk <= 2 << 20, "shrunk to zfs_arc_min: {shrunk}");
    assert_eq!(s.stat("c"), 2 << 20, "the target is zfs_arc_min");
    assert_eq!(s.stat("arc_no_grow"), 1);
    assert!(s.stat("memory_indirect_count") >= 1);
    assert_eq!(s.stat("memory_available_bytes"), 0);
    // Reads still work and the ARC stays down while the pressure lasts.
    for b in 0..512 {
        assert_eq!(s.read(b)[..], contents(b, 0)[..]);
    }
    s.engine.adjust_arc_size();
    assert!(s.stat("size") <= 2 << 20);

    // No pressure, a lower zfs_arc_max: the ARC follows at once.
    t.set("zfs_arc_sys_free", "1").unwrap();
    t.set("zfs_arc_min", "1M").unwrap();
    t.set("zfs_arc_max", "4M").unwrap();
    s.engine.adjust_arc_size();
    assert_eq!(s.stat("c_max"), 4 << 20);
    assert_eq!(s.stat("c_min"), 1 << 20);
    assert!(s.stat("size") <= 4 << 20);
    s.engine.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Flips (or restores) one byte of the record of `block` (version `v`) on a cache
/// device, found by its header. Returns whether it was found.
fn flip_record_byte(device: &Path, block: u64, v: u8) -> bool {
    let mut bytes = std::fs::read(device).expect("read device");
    let head = format!("block {block:08} version {v:03} ");
    let Some(at) = bytes.windows(head.len()).position(|w| w == head.as_bytes()) else {
        return false;
    };
    bytes[at + 100] ^= 0x5a;
    std::fs::write(device, bytes).expect("write device");
    true
}

/// A copy that failed verification once (a transient error) must still be tombstoned
/// when its block is overwritten; otherwise a restart restores it and serves the old
/// bytes. This is why bad copies stay in the index. Cache-device reads through io_uring.
#[test]
fn a_copy_that_failed_verification_is_still_tombstoned_when_overwritten() {
    bad_copy_case("bad-copy-uring", true);
}

/// The same through the blocking thread pool (`l2arc_io_uring=0`, and systems without
/// io_uring).
#[test]
fn a_copy_that_failed_verification_is_still_tombstoned_when_overwritten_thread_reads() {
    bad_copy_case("bad-copy-threads", false);
}

fn bad_copy_case(name: &str, uring: bool) {
    let dir = scratch(name);
    let backing = dir.join("vol.img");
    let device = dir.join("cache.img");
    backing_file(&backing, 512); // 8 MiB
    std::fs::write(&device, vec![0u8; 32 << 20]).expect("device file");
    let read_path = if uring { "io_uring" } else { "threads" };

    let s = Setup::new(&backing, 1 << 20);
    s.engine
        .tunables
        .set("l2arc_io_uring", if uring { "1" } else { "0" })
        .unwrap();
    let cache = s
        .engine
        .add_cache_device(&device, POOL, DEVICE, true)
        .expect("cache device");
    // Read everything in chunks and feed after each, so every block reaches the device.
    for chunk in (0..512u64).collect::<Vec<_>>().chunks(32) {
        for &b in chunk {
            s.read(b);
        }
        s.engine.feed_once(&cache, 8 << 20);
    }
    assert!(s.stat("l2_blocks") >= 400, "fed: {}", s.stat("l2_blocks"));

    // Block 0 left the ARC long ago: corrupt its copy and read it.
    assert!(flip_record_byte(&device, 0, 0), "block 0 is on the device");
    let misses_before = s.stat("l2_cksum_bad");
    assert_eq!(
        s.read(0)[..],
        contents(0, 0)[..],
        "served from the backing store"
    );
    assert_eq!(s.stat("l2_cksum_bad"), misses_before + 1);
    // The error was transient: the copy is whole again.
    assert!(flip_record_byte(&device, 0, 0));

    // Push block 0 out of the ARC, then overwrite it.
    let cached_evictions = s.stat("evict_l2_cached");
    for b in 200..300 {
        s.read(b);
    }
    assert!(
        s.stat("evict_l2_cached") > cached_evictions,
        "blocks with cache-device copies left the ARC"
    );
    let tombstones = s.stat("l2_tombstones");
    s.write(0, contents(0, 1));
    assert_eq!(
        s.stat("l2_tombstones"),
        tombstones + 1,
        "the bad copy was tombstoned"
    );
    assert_eq!(s.read(0)[..], contents(0, 1)[..]);
    s.engine.shutdown();
    drop(cache);
    drop(s);

    // Restart: the rebuild must not restore the old copy of block 0.
    let s = Setup::new(&backing, 1 << 20);
    s.engine
        .tunables
        .set("l2arc_io_uring", if uring { "1" } else { "0" })
        .unwrap();
    s.engine
        .add_cache_device(&device, POOL, DEVICE, false)
        .expect("reopen");
    wait_online(&s.engine);
    assert!(s.stat("l2_blocks") >= 300, "warm: {}", s.stat("l2_blocks"));
    let hits = s.stat("l2_hits");
    assert_eq!(s.read(0)[..], contents(0, 1)[..], "no stale read");
    assert_eq!(s.read(1)[..], contents(1, 0)[..]);
    assert_eq!(s.stat("l2_hits"), hits + 1, "block 1 came from the device");
    let path = s.engine.l2_read_path();
    if uring && path.starts_with("threads (io_uring unavailable") {
        // A system without io_uring (seccomp, io_uring_disabled): the fallback served the
        // reads above; say so rather than claim the io_uring path was tested.
        eprintln!("NOTE: io_uring path not exercised here: {path}");
    } else {
        assert_eq!(path, read_path);
    }

    // The device file shrinks underneath: its reads come back short, and every block is
    // still served, from the backing store.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&device)
        .expect("open device file");
    file.set_len(1 << 20).expect("truncate");
    let (hits, errors) = (s.stat("l2_hits"), s.stat("l2_io_error"));
    for b in 2..200 {
        assert_eq!(s.read(b)[..], contents(b, 0)[..], "block {b}");
    }
    assert!(s.stat("l2_io_error") > errors, "short reads are I/O errors");
    assert!(
        s.stat("l2_hits") - hits < 100,
        "most copies were past the new end"
    );
    s.engine.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The dirty limit of [`dirty_peak_of`].
const DIRTY_LIMIT: u64 = 2 << 20;

/// A 32 MiB volume of 16K blocks whose backing store (in `dir`) takes `write_us` per
/// write, in a 16 MiB ARC, under a dirty limit of [`DIRTY_LIMIT`].
fn slow_store(dir: &Path, write_us: u64) -> (PathBuf, Setup) {
    let backing = dir.join("vol.img");
    std::fs::write(&backing, vec![0u8; 32 << 20]).expect("backing file");
    let slow = LatencyModel {
        write_min_us: write_us,
        write_max_us: write_us,
        ..LatencyModel::default()
    };
    let s = Setup::with_latency(&backing, 16 << 20, slow);
    s.engine
        .tunables
        .set("zfs_dirty_data_max", &DIRTY_LIMIT.to_string())
        .unwrap();
    (backing, s)
}

/// Runs `writers` threads, thread `w` calling `write(engine, volume, w)`, against a 32 MiB
/// volume of 16K blocks whose backing store takes `write_us` per write, under a dirty
/// limit of [`DIRTY_LIMIT`]; flushes; checks that every block holds `contents(b, version)`
/// on the backing store, and that the dirty bytes (sampled every 100 us) reached half the
/// limit and never passed it. Returns the engine's stats after the flush.
fn dirty_peak_of(
    name: &str,
    write_us: u64,
    writers: u64,
    version: u8,
    write: impl Fn(&Engine, &Arc<VolumeEntry>, u64) + Send + Sync + 'static,
) -> HashMap<String, u64> {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let dir = scratch(name);
    let (backing, s) = slow_store(&dir, write_us);
    let (engine, vol) = (Arc::clone(&s.engine), Arc::clone(&s.vol));
    let peak = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let monitor = {
        let (engine, peak, done) = (Arc::clone(&engine), Arc::clone(&peak), Arc::clone(&done));
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(engine.txg_state().0, Ordering::Relaxed);
                std::thread::sleep(Duration::from_micros(100));
            }
        })
    };
    let write = Arc::new(write);
    let threads: Vec<_> = (0..writers)
        .map(|w| {
            let (engine, vol, write) = (Arc::clone(&engine), Arc::clone(&vol), Arc::clone(&write));
            std::thread::spawn(move || write(&engine, &vol, w))
        })
        .collect();
    for t in threads {
        t.join().expect("writer");
    }
    engine.flush_writes(&vol).expect("flush");
    done.store(true, Ordering::Relaxed);
    monitor.join().expect("monitor");
    let stats: HashMap<String, u64> = engine.arcstats().into_iter().collect();
    let on_disk = std::fs::read(&backing).expect("read backing");
    for b in 0..2048u64 {
        let at = (b * u64::from(BLOCK)) as usize;
        assert_eq!(
            on_disk[at..at + BLOCK as usize],
            contents(b, version)[..],
            "block {b} on the backing store"
        );
    }
    engine.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
    let peak = peak.load(Ordering::Relaxed);
    assert!(
        peak <= DIRTY_LIMIT,
        "dirty data peaked at {peak}, limit {DIRTY_LIMIT}"
    );
    assert!(
        peak > DIRTY_LIMIT / 2,
        "the writers did reach the throttle: {peak}"
    );
    stats
}

/// A writer faster than its backing store is slowed by the write throttle, and dirty data
/// stays at the limit.
#[test]
fn a_writer_faster_than_the_backing_store_is_throttled_and_dirty_data_stays_bounded() {
    const WRITERS: u64 = 4;
    let blocks = 2048u64; // 32 MiB of 16K blocks, in a scattered order
    let stats = dirty_peak_of("throttle", 1000, WRITERS, 1, move |engine, vol, w| {
        for i in (w..blocks).step_by(WRITERS as usize) {
            let b = (i * 1031) % blocks;
            engine
                .write_blocks(vol, &[(b, BlockBuf::from_vec(contents(b, 1)))], false)
                .expect("async write");
        }
    });
    assert!(
        stats["dmu_tx_delay"] + stats["dmu_tx_dirty_over_max"] > 0,
        "the throttle acted: {stats:?}"
    );
    assert_eq!(stats["dirty_bytes"], 0, "everything synced after the flush");
}

/// Many writers of several blocks at once never take dirty data past the limit: each
/// reserves its bytes as it passes the throttle. Before, writers that passed the check
/// together all added their bytes after it (an ARC review's finding).
#[test]
fn writers_passing_the_throttle_together_do_not_pass_the_dirty_limit() {
    const WRITERS: u64 = 32;
    const RUN: u64 = 8; // blocks per write: 128 KiB
    let runs = 2048 / RUN;
    let stats = dirty_peak_of("throttle-many", 2000, WRITERS, 3, move |engine, vol, w| {
        for round in 0..3 {
            for r in (w..runs).step_by(WRITERS as usize) {
                let first = ((r * 37) % runs) * RUN;
                let blocks: Vec<_> = (first..first + RUN)
                    .map(|b| (b, BlockBuf::from_vec(contents(b, round + 1))))
                    .collect();
                engine
                    .write_blocks(vol, &blocks, false)
                    .expect("async write");
            }
        }
    });
    assert_eq!(stats["dirty_bytes"], 0, "everything synced after the flush");
}

/// The CPU time the calling thread has used.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: fills a valid timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Writers blocked at the dirty limit sleep until a sync frees room. Before, each asked
/// for a sync and woke every waiter at each of its wake-ups, so two of them woke each
/// other in a loop for as long as the sync took (a review's finding): each writer here
/// measures its own thread's CPU time over its write, which spans a 1.5 s sync.
#[test]
fn writers_waiting_at_the_dirty_limit_sleep_rather_than_wake_each_other() {
    let dir = scratch("throttle-sleep");
    let (_, s) = slow_store(&dir, 1_500_000);
    let engine = Arc::clone(&s.engine);
    // 16 writes of 8 blocks (128 KiB) each, from three threads: the limit (2 MiB) is
    // reached at once and the rest wait for the first sync.
    let threads: Vec<_> = (0..3u64)
        .map(|w| {
            let (engine, vol) = (Arc::clone(&engine), Arc::clone(&s.vol));
            std::thread::spawn(move || {
                let mut waits = Vec::new();
                for r in 0..16u64 {
                    let first = (w * 16 + r) * 8;
                    let blocks: Vec<_> = (first..first + 8)
                        .map(|b| (b, BlockBuf::from_vec(contents(b, 1))))
                        .collect();
                    let (cpu, wall) = (thread_cpu(), Instant::now());
                    engine.write_blocks(&vol, &blocks, false).expect("write");
                    waits.push((thread_cpu() - cpu, wall.elapsed()));
                }
                waits
            })
        })
        .collect();
    let waits: Vec<(Duration, Duration)> = threads
        .into_iter()
        .flat_map(|t| t.join().expect("writer"))
        .collect();
    engine.flush_writes(&s.vol).expect("flush");
    engine.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
    let long: Vec<_> = waits
        .iter()
        .filter(|(_, wall)| *wall >= Duration::from_millis(500))
        .collect();
    assert!(!long.is_empty(), "no writer waited for a sync: {waits:?}");
    for (cpu, wall) in long {
        assert!(
            cpu.as_secs_f64() < wall.as_secs_f64() / 10.0,
            "a writer waiting {wall:?} for room used {cpu:?} of CPU: {waits:?}"
        );
    }
}

/// A write larger than the dirty limit passes once nothing is dirty, and smaller writes
/// wait behind it. Before, it waited for the dirty data to reach zero while another
/// writer kept adding to it, for as long as that writer went on (a review's finding).
#[test]
fn a_write_larger_than_the_dirty_limit_is_not_starved_by_smaller_ones() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let dir = scratch("throttle-oversized");
    let (backing, s) = slow_store(&dir, 2000);
    let engine = Arc::clone(&s.engine);
    let stop = Arc::new(AtomicBool::new(false));
    let small_writes = Arc::new(AtomicU64::new(0));
    // Four writers of one block at a time, so that the open TXG is never empty when a
    // sync ends.
    let small: Vec<_> = (0..4u64)
        .map(|w| {
            let (engine, vol) = (Arc::clone(&engine), Arc::clone(&s.vol));
            let (stop, count) = (Arc::clone(&stop), Arc::clone(&small_writes));
            std::thread::spawn(move || {
                let mut b = w * 128;
                while !stop.load(Ordering::Relaxed) {
                    let data = BlockBuf::from_vec(contents(b % 512, 1));
                    engine
                        .write_blocks(&vol, &[(b % 512, data)], false)
                        .expect("small write");
                    count.fetch_add(1, Ordering::Relaxed);
                    b += 1;
                }
            })
        })
        .collect();
    while small_writes.load(Ordering::Relaxed) < 100 {
        std::thread::sleep(Duration::from_millis(1));
    }
    // 3 MiB at once (192 blocks), past the 2 MiB limit.
    let (tx, rx) = std::sync::mpsc::channel();
    let big = {
        let (engine, vol) = (Arc::clone(&engine), Arc::clone(&s.vol));
        std::thread::spawn(move || {
            let blocks: Vec<_> = (1024..1216u64)
                .map(|b| (b, BlockBuf::from_vec(contents(b, 2))))
                .collect();
            let result = engine.write_blocks(&vol, &blocks, false);
            let _ = tx.send(result);
        })
    };
    // Not a speed limit: a starved write waits for as long as the small writer runs.
    let passed = rx.recv_timeout(Duration::from_secs(60));
    stop.store(true, Ordering::Relaxed);
    for writer in small {
        writer.join().expect("small writer");
    }
    big.join().expect("big writer");
    assert!(
        matches!(passed, Ok(Ok(()))),
        "the large write did not pass while smaller ones went on: {passed:?}"
    );
    engine.flush_writes(&s.vol).expect("flush");
    let on_disk = std::fs::read(&backing).expect("read backing");
    for b in 1024..1216u64 {
        let at = (b * u64::from(BLOCK)) as usize;
        assert!(
            on_disk[at..at + BLOCK as usize] == contents(b, 2)[..],
            "block {b} on the backing store"
        );
    }
    engine.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The write an async runtime's thread makes itself is made dirty only when the throttle
/// would not delay it, decided and reserved under one lock hold; otherwise nothing is done
/// and the caller hands the write to a thread that may sleep.
#[test]
fn an_async_write_made_on_the_callers_thread_never_waits_for_the_throttle() {
    let dir = scratch("throttle-now");
    let (_, s) = slow_store(&dir, 1_000_000);
    let engine = Arc::clone(&s.engine);
    let block = |b: u64| vec![(b, BlockBuf::from_vec(contents(b, 1)))];
    assert!(matches!(
        engine.try_write_async_now(&s.vol, &block(0)),
        Some(Ok(()))
    ));
    assert_eq!(engine.txg_state().0, u64::from(BLOCK));
    // Past zfs_delay_min_dirty_percent (60%) of the limit: the next write would be delayed.
    let many: Vec<_> = (1..81u64)
        .map(|b| (b, BlockBuf::from_vec(contents(b, 1))))
        .collect();
    engine.write_blocks(&s.vol, &many, false).expect("write");
    let dirty = engine.txg_state().0;
    assert!(dirty > DIRTY_LIMIT * 6 / 10, "{dirty}");
    assert!(engine.try_write_async_now(&s.vol, &block(100)).is_none());
    assert_eq!(engine.txg_state().0, dirty, "nothing was reserved");
    engine.flush_writes(&s.vol).expect("flush");
    engine.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A FLUSH whose writes' TXG synced before it commits nothing to the log device and
/// counts no commit (before, each such FLUSH counted a group commit that wrote nothing).
#[test]
fn a_flush_with_nothing_left_to_log_counts_no_log_commit() {
    let dir = scratch("zil-count");
    let backing = dir.join("vol.img");
    backing_file(&backing, 64);
    let s = Setup::new(&backing, 16 << 20);
    s.engine.tunables.set("zfs_txg_timeout", "600").unwrap();
    let log = Arc::new(larch_io::MemDevice::new(16 << 20));
    s.engine
        .attach_log_device(log, Path::new("log"), POOL, 0x7e57_0004, true)
        .expect("log device");
    s.engine.sync_all().expect("sync");
    s.engine
        .write_blocks(&s.vol, &[(0, BlockBuf::from_vec(contents(0, 1)))], false)
        .expect("async write");
    s.engine.sync_all().expect("sync");
    let before = s.stat("zil_commit_count");
    s.engine.flush_writes(&s.vol).expect("flush");
    s.engine.flush_writes(&s.vol).expect("flush");
    assert_eq!(s.stat("zil_commit_count"), before, "nothing was logged");
    // A write not yet synced is logged by the next FLUSH: one commit.
    s.engine
        .write_blocks(&s.vol, &[(1, BlockBuf::from_vec(contents(1, 1)))], false)
        .expect("async write");
    s.engine.flush_writes(&s.vol).expect("flush");
    assert_eq!(s.stat("zil_commit_count"), before + 1);
    s.engine.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sync writes the log device has no room for wait for their TXG's sync instead (the ring
/// is freed by it), the log stays in use, and takes records again afterwards.
#[test]
fn sync_writes_a_full_log_cannot_take_wait_for_their_txg_and_the_log_stays_in_use() {
    let dir = scratch("zil-full");
    let backing = dir.join("vol.img");
    backing_file(&backing, 64);
    let s = Setup::new(&backing, 16 << 20);
    s.engine.tunables.set("zfs_txg_timeout", "600").unwrap();
    // A ring of 256 KiB: about fifteen 16 KiB records.
    let log = Arc::new(larch_io::MemDevice::new(8192 + (256 << 10)));
    s.engine
        .attach_log_device(log, Path::new("log"), POOL, 0x7e57_0005, true)
        .expect("log device");
    s.engine.sync_all().expect("sync");
    let waits = s.stat("txg_sync_waits");
    for round in 1..=3u8 {
        for b in 0..32 {
            let data = BlockBuf::from_vec(contents(b, round));
            s.engine
                .write_blocks(&s.vol, &[(b, data)], true)
                .expect("sync write");
        }
    }
    assert!(
        s.stat("txg_sync_waits") > waits,
        "no sync write found the ring full"
    );
    let report = s.engine.log_report().expect("log device");
    assert_eq!(report.state, "online", "{:?}", report.fault);
    s.engine.sync_all().expect("sync");
    let commits = s.stat("zil_commit_count");
    let data = BlockBuf::from_vec(contents(0, 9));
    s.engine
        .write_blocks(&s.vol, &[(0, data)], true)
        .expect("sync write");
    assert_eq!(s.stat("zil_commit_count"), commits + 1, "logged again");
    for b in 0..32 {
        let want = contents(b, if b == 0 { 9 } else { 3 });
        assert_eq!(&s.read(b)[..], &want[..], "block {b}");
    }
    s.engine.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A volume whose backing store failed a TXG answers FLUSH with the error also under
/// sync=disabled (before, such a FLUSH succeeded: sync=disabled returned before the
/// failure was looked at).
#[test]
fn a_flush_of_a_failed_volume_fails_also_with_sync_disabled() {
    let engine = Engine::new(16 << 20);
    let device = Arc::new(larch_io::FaultyDevice::new(4 << 20));
    let store =
        BackingStore::on_device("faulty", Arc::clone(&device) as _, LatencyModel::default());
    let mut spec = VolumeSpec::new(VOLUME, BLOCK);
    spec.sync = larch_engine::SyncMode::Disabled;
    let vol = engine.add_volume(spec, Arc::new(store)).expect("volume");
    engine
        .write_blocks(&vol, &[(0, BlockBuf::from_vec(contents(0, 1)))], false)
        .expect("write");
    engine
        .flush_writes(&vol)
        .expect("a flush of a healthy volume");
    device.fail_writes(0..u64::MAX);
    engine
        .write_blocks(&vol, &[(1, BlockBuf::from_vec(contents(1, 1)))], false)
        .expect("write");
    let _ = engine.sync_all();
    assert!(vol.failure().is_some(), "the store's failure was noticed");
    let flushed = engine.flush_writes(&vol);
    assert!(flushed.is_err(), "{flushed:?}");
    engine.shutdown();
}

/// A feed asked for far more than one batch may span (write_max and write_boost above a
/// quarter of a small ring) writes a smaller batch; the device stays online.
#[test]
fn a_feed_larger_than_the_ring_allows_is_cut_to_fit() {
    let dir = scratch("small-ring");
    let backing = dir.join("vol.img");
    let device = dir.join("cache.img");
    backing_file(&backing, 1024); // 16 MiB
    std::fs::write(&device, vec![0u8; 16 << 20]).expect("device file");
    let s = Setup::new(&backing, 16 << 20);
    let cache = s
        .engine
        .add_cache_device(&device, POOL, DEVICE, true)
        .expect("cache device");
    for b in 0..1024 {
        s.read(b);
    }
    let written = s.engine.feed_once(&cache, 64 << 20);
    assert!(written > 0, "something was fed");
    assert_eq!(cache.state(), DeviceState::Online, "{:?}", cache.fault());
    assert_eq!(s.stat("l2_writes_error"), 0);
    s.engine.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Under the larch policy each shard keeps MFU's admission sketch once it has filled
/// (`mfu_sketch_bytes`, counted with the headers in the daemon's memory); switching back
/// to the ARC drops it.
#[test]
fn the_larch_policy_keeps_its_mfu_sketch_once_the_arc_fills() {
    let dir = scratch("mfu-sketch");
    let backing = dir.join("vol.img");
    backing_file(&backing, 2048); // 32 MiB
    let s = Setup::new(&backing, 16 << 20);
    s.engine.tunables.set("zfs_arc_policy", "larch").unwrap();
    s.engine.adjust_arc_size();
    for b in 0..64 {
        s.read(b);
    }
    assert_eq!(s.stat("mfu_sketch_bytes"), 0, "none while the ARC has room");
    for b in 0..2048 {
        s.read(b);
    }
    let bytes = s.stat("mfu_sketch_bytes");
    assert!(bytes > 0, "kept once the ARC has filled");
    // At most 16 bytes per block the ARC holds, doubled by the rounding to a power of
    // two, per shard (the smallest table is 128 bytes).
    let held = s.stat("size") / u64::from(BLOCK);
    assert!(
        bytes <= 2 * 16 * held + 128 * larch_policy::shards::SHARDS as u64,
        "{bytes} bytes for {held} blocks"
    );
    s.engine.tunables.set("zfs_arc_policy", "arc").unwrap();
    s.engine.adjust_arc_size();
    assert_eq!(s.stat("mfu_sketch_bytes"), 0, "dropped under the ARC");
    s.engine.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// `l2arc_admit`: once a cache device has filled, a feed writes only blocks read twice
/// lately; before, and with the rule off, it writes blocks read once too. The reuse
/// sketch is kept (and counted in `reuse_sketch_bytes`) only while the rule is on.
#[test]
fn admission_feeds_blocks_read_twice_once_the_device_has_filled() {
    let dir = scratch("admit");
    let backing = dir.join("vol.img");
    let device = dir.join("cache.img");
    backing_file(&backing, 2048); // 32 MiB
    std::fs::write(&device, vec![0u8; 4 << 20]).expect("device file");
    let s = Setup::new(&backing, 64 << 20);
    let cache = s
        .engine
        .add_cache_device(&device, POOL, DEVICE, true)
        .expect("cache device");
    assert_eq!(s.stat("reuse_sketch_bytes"), 0);
    s.engine.tunables.set("l2arc_admit", "1").unwrap();
    s.engine.adjust_arc_size();
    assert!(s.stat("reuse_sketch_bytes") > 0, "the sketch is kept");
    // Blocks read once fill the 4 MiB device past its first lap: all are fed.
    let fed = |s: &Setup| s.stat("l2_write_bytes");
    for b in 0..512 {
        s.read(b);
    }
    for _ in 0..64 {
        s.engine.feed_once(&cache, 64 << 20);
    }
    assert!(
        fed(&s) > 4 << 20,
        "the first lap takes blocks read once: {}",
        fed(&s)
    );
    // Now ten blocks read once and ten read twice: only the second ten are fed.
    for b in 600..610 {
        s.read(b);
    }
    for b in 700..710 {
        s.read(b);
        s.read(b);
    }
    let before = fed(&s);
    while s.engine.feed_once(&cache, 64 << 20) > 0 {}
    assert_eq!(
        fed(&s) - before,
        10 * u64::from(BLOCK),
        "the blocks read twice"
    );
    // With the rule off the blocks read once are fed, and the sketch is dropped.
    s.engine.tunables.set("l2arc_admit", "0").unwrap();
    s.engine.adjust_arc_size();
    assert_eq!(s.stat("reuse_sketch_bytes"), 0);
    assert!(s.engine.feed_once(&cache, 64 << 20) > 0);
    assert_eq!(cache.state(), DeviceState::Online, "{:?}", cache.fault());
    s.engine.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A cache device whose writes can be made to hang (a device stuck in a flush), over
/// memory.
struct Stuck {
    dev: larch_io::MemDevice,
    stuck: std::sync::Mutex<bool>,
    freed: std::sync::Condvar,
}

impl Stuck {
    fn set(&self, stuck: bool) {
        *self.stuck.lock().unwrap() = stuck;
        self.freed.notify_all();
    }

    fn wait(&self) {
        let mut stuck = self.stuck.lock().unwrap();
        while *stuck {
            stuck = self.freed.wait(stuck).unwrap();
        }
    }
}

impl larch_io::BlockDevice for Stuck {
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), larch_io::IoError> {
        self.dev.read_at(buf, offset_bytes)
    }
    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), larch_io::IoError> {
        self.wait();
        self.dev.write_at(buf, offset_bytes)
    }
    fn flush(&self) -> Result<(), larch_io::IoError> {
        self.wait();
        self.dev.flush()
    }
    fn len_bytes(&self) -> u64 {
        self.dev.len_bytes()
    }
}

/// Issue 14, defect 2: overwriting cached blocks must not wait for the cache device. The
/// writes' tombstones are queued in memory under the gate; the device I/O is the
/// syncer's. Before, the 1022nd tombstone wrote a log block (and flushed, and rewrote the
/// header) under the pool-wide gate, so every writer and the feed waited on one stuck
/// device.
#[test]
fn overwrites_of_cached_blocks_never_wait_for_a_stuck_cache_device() {
    let dir = scratch("stuck");
    let backing = dir.join("vol.img");
    let blocks = 1536u64; // 24 MiB of 16K blocks: more tombstones than one log block holds
    backing_file(&backing, blocks);
    let s = Setup::new(&backing, 64 << 20);
    let stuck = Arc::new(Stuck {
        dev: larch_io::MemDevice::new(64 << 20),
        stuck: std::sync::Mutex::new(false),
        freed: std::sync::Condvar::new(),
    });
    let cache = s
        .engine
        .add_cache_device_on(stuck.clone(), Path::new("stuck"), POOL, DEVICE, true)
        .expect("cache device");
    for b in 0..blocks {
        s.read(b);
    }
    while s.stat("l2_blocks") < blocks && s.engine.feed_once(&cache, 64 << 20) > 0 {}
    assert_eq!(
        s.stat("l2_blocks"),
        blocks,
        "every block is on the cache device"
    );

    stuck.set(true);
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let writer = {
        let (engine, vol) = (Arc::clone(&s.engine), Arc::clone(&s.vol));
        std::thread::spawn(move || {
            for b in 0..blocks {
                engine
                    .write_blocks(&vol, &[(b, BlockBuf::from_vec(contents(b, 1)))], false)
                    .expect("async write");
            }
            done_tx.send(()).unwrap();
        })
    };
    // A liveness check, not a speed limit: with the device stuck for good, the writes
    // either complete or never do.
    let finished = done_rx.recv_timeout(Duration::from_secs(60));
    assert!(
        finished.is_ok(),
        "async overwrites of cached blocks waited for the stuck cache device"
    );
    assert_eq!(s.stat("l2_tombstones"), blocks);
    assert_eq!(s.stat("l2_blocks"), 0, "every copy left the index");
    // Reads go on too, and see the new bytes.
    assert_eq!(s.read(7)[..], contents(7, 1)[..]);
    writer.join().unwrap();

    // Once the device moves again, the syncer commits the tombstones before the TXG
    // reaches the backing store, and a FLUSH returns.
    stuck.set(false);
    s.engine.flush_writes(&s.vol).expect("flush");
    assert_eq!(s.engine.queued_tombstones(), 0);
    assert_eq!(cache.state(), DeviceState::Online, "{:?}", cache.fault());
    s.engine.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A scratch directory and a 4 MiB ARC over 64 blocks whose backing-store reads take
/// `read_us` each.
fn slow_reads(name: &str, read_us: u64) -> (PathBuf, Setup) {
    let dir = scratch(name);
    let backing = dir.join("vol.img");
    backing_file(&backing, 64);
    let slow = LatencyModel {
        read_min_us: read_us,
        read_max_us: read_us,
        ..LatencyModel::default()
    };
    let s = Setup::with_latency(&backing, 4 << 20, slow);
    (dir, s)
}

/// A reader that leads a miss and is dropped before the read ends (its client went away,
/// its connection's runtime shut down) must not leave the block's read pending: others
/// waiting for it, and later readers of the block, read it themselves. (Before, they
/// waited for ever.)
#[test]
fn a_read_whose_leader_is_dropped_is_read_again_by_the_others() {
    let (dir, s) = slow_reads("abandoned-read", 200_000);
    let engine = Arc::clone(&s.engine);
    let vol = Arc::clone(&s.vol);
    s.runtime.block_on(async {
        // The leader starts the backing-store read; a second reader waits for it.
        let leader = tokio::spawn({
            let (engine, vol) = (Arc::clone(&engine), Arc::clone(&vol));
            async move { engine.read_block(&vol, 7, false).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let waiter = tokio::spawn({
            let (engine, vol) = (Arc::clone(&engine), Arc::clone(&vol));
            async move { engine.read_block(&vol, 7, false).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        leader.abort();
        assert!(leader.await.unwrap_err().is_cancelled());
        let waited = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the waiter was not left waiting for the abandoned read")
            .unwrap()
            .expect("backing store read");
        assert_eq!(waited[..], contents(7, 0)[..]);
        // A later reader too.
        let later =
            tokio::time::timeout(Duration::from_secs(10), engine.read_block(&vol, 7, false))
                .await
                .expect("a later reader was not left waiting")
                .expect("backing store read");
        assert_eq!(later[..], contents(7, 0)[..]);
    });
    s.engine.shutdown();
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A demand read that joins a prefetch still reading makes the block a demand block, as
/// OpenZFS's `arc_access` on an I/O hit does: before, it stayed flagged as an unused
/// prefetch (protected from eviction, kept off cache devices by `l2arc_noprefetch`) and
/// the client's next read counted as consuming the prefetch (an ARC review's finding).
#[test]
fn a_demand_read_joining_a_prefetch_makes_the_block_a_demand_block() {
    let (dir, s) = slow_reads("joined-prefetch", 100_000);
    let engine = Arc::clone(&s.engine);
    let vol = Arc::clone(&s.vol);
    s.runtime.block_on(async {
        let prefetch = tokio::spawn({
            let (engine, vol) = (Arc::clone(&engine), Arc::clone(&vol));
            async move { engine.read_block(&vol, 9, true).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let demand = engine.read_block(&vol, 9, false).await.expect("read");
        assert_eq!(demand[..], contents(9, 0)[..]);
        prefetch.await.unwrap().expect("prefetch");
    });
    assert_eq!(s.stat("iohits"), 1);
    assert_eq!(s.stat("demand_iohit_predictive_prefetch"), 1);
    s.read(9);
    assert_eq!(s.stat("demand_hit_predictive_prefetch"), 0);
    s.engine.shutdown();
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The guids the pool's record `l2-format` lists: cache devices to format, not rebuild.
fn to_format(dir: &Path) -> Vec<u64> {
    match std::fs::read_to_string(dir.join("l2-format")) {
        Ok(text) => serde_json::from_str(&text).expect("l2-format is a list of guids"),
        Err(_) => Vec::new(),
    }
}

/// Reads of a pool's first volume from a test's thread.
struct PoolReader(tokio::runtime::Runtime);

impl PoolReader {
    fn new() -> PoolReader {
        PoolReader(
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime"),
        )
    }

    fn read(&self, pool: &larch_engine::Pool, block: u64) -> Bytes {
        let vol = pool.volumes[0].entry();
        self.0
            .block_on(pool.engine.read_block(vol, block, false))
            .expect("read")
    }
}

/// One of a pool's arcstats.
fn pool_stat(pool: &larch_engine::Pool, name: &str) -> u64 {
    let stats: HashMap<String, u64> = pool.engine.arcstats().into_iter().collect();
    stats[name]
}

/// A cache device missing when the pool opened misses the writes of that run, so the pool
/// records that it must be formatted; when it comes back while a later run serves (the
/// daemon applies a change of pool.json: here `larch cache add` of another device), it is
/// formatted as a start would format it. Before, that add rebuilt its log (no write had
/// been seen in that run yet), and a block overwritten while it was away read back its
/// old bytes from it (a review's finding).
#[test]
fn a_device_to_format_that_comes_back_while_the_pool_runs_is_formatted_not_rebuilt() {
    use larch_engine::manage::{self, Target};
    use larch_engine::{DemoSizes, Pool, PoolConfig, create_demo};
    let dir = scratch("l2-format-at-runtime");
    create_demo(&dir, DemoSizes::TINY).expect("demo pool");
    let device = dir.join("cache0.img");
    let away = dir.join("cache0.away");
    let guid = PoolConfig::load(&dir).expect("pool.json").cache_devices[0].guid;
    let reader = PoolReader::new();
    let read = |pool: &Pool, block: u64| reader.read(pool, block);
    let stat = pool_stat;

    // Run 1: block 0 (zeroes) is cached on the device.
    let pool = Pool::open(&dir, false).expect("run 1");
    assert!(
        read(&pool, 0).iter().all(|&b| b == 0),
        "a new volume reads zeroes"
    );
    pool.engine.feed_once(&pool.engine.devices()[0], 8 << 20);
    assert_eq!(stat(&pool, "l2_blocks"), 1, "block 0 is on the device");
    pool.close().expect("close");
    drop(pool);

    // Run 2, without the device: it is recorded, and block 0 is overwritten and synced.
    std::fs::rename(&device, &away).expect("take the device away");
    let pool = Pool::open(&dir, false).expect("run 2");
    assert_eq!(pool.refused_devices.len(), 1, "{:?}", pool.refused_devices);
    assert_eq!(to_format(&dir), vec![guid]);
    let written = vec![0x5a; BLOCK as usize];
    pool.engine
        .write_blocks(
            pool.volumes[0].entry(),
            &[(0, BlockBuf::from_vec(written.clone()))],
            true,
        )
        .expect("sync write");
    pool.close().expect("close");
    drop(pool);

    // Run 3 starts without it too, and nothing is written; then it is back.
    let pool = Pool::open(&dir, false).expect("run 3");
    assert_eq!(pool.refused_devices.len(), 1, "{:?}", pool.refused_devices);
    // The report says so (`larch status` lists it), until the device is in use again.
    assert_eq!(
        pool.report().unused_cache_devices,
        pool.refused_devices,
        "the missing device is reported as not used"
    );
    std::fs::rename(&away, &device).expect("bring the device back");
    let other = dir.join("cache1.img");
    std::fs::write(&other, vec![0u8; 4 << 20]).expect("another device");
    manage::add_cache_device(Target::Running(&pool), &other, false).expect("cache add");
    let config = PoolConfig::load(&dir).expect("pool.json");
    let done = pool.apply_cache_config(&config);
    assert_eq!(done.len(), 1, "{done:?}");
    wait_online(&pool.engine);
    let back = pool.engine.devices();
    let back = back
        .iter()
        .find(|d| d.guid == guid)
        .expect("the device is in use");
    assert_eq!(back.state(), DeviceState::Online, "{:?}", back.fault());
    assert!(pool.report().unused_cache_devices.is_empty());
    let got = read(&pool, 0);
    assert!(
        got[..] == written[..],
        "stale read: block 0 begins {:02x?}, not {:02x?}",
        &got[..8],
        &written[..8]
    );
    assert_eq!(stat(&pool, "l2_hits"), 0);
    assert!(to_format(&dir).is_empty(), "formatted, and off the record");
    pool.close().expect("close");
    drop(pool);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A cache device put back as an older image of itself (a snapshot or a copy taken before
/// some overwrites, the backing store not rolled back) passes every check of its header,
/// but its log lacks the tombstones of the blocks overwritten since: rebuilt, it served
/// their old bytes (a review's finding). The pool records the header sequence each device
/// reached (`l2-sequences.json`), so such an image is formatted, not rebuilt.
#[test]
fn an_older_image_of_a_cache_device_is_formatted_not_rebuilt() {
    use larch_engine::{DemoSizes, L2_SEQUENCES_FILE, Pool, PoolConfig, create_demo};
    let dir = scratch("l2-older-image");
    create_demo(&dir, DemoSizes::TINY).expect("demo pool");
    let device = dir.join("cache0.img");
    let image = dir.join("cache0.snapshot");
    let guid = PoolConfig::load(&dir).expect("pool.json").cache_devices[0].guid;
    let reader = PoolReader::new();
    let read = |pool: &Pool, block: u64| reader.read(pool, block);
    let stat = pool_stat;
    let recorded = || -> HashMap<String, u64> {
        let text = std::fs::read_to_string(dir.join(L2_SEQUENCES_FILE)).expect("the record");
        serde_json::from_str(&text).expect("guids to sequences")
    };

    // Run 1: block 0 (zeroes) is cached on the device; a clean close records its sequence.
    let pool = Pool::open(&dir, false).expect("run 1");
    assert!(
        read(&pool, 0).iter().all(|&b| b == 0),
        "a new volume reads zeroes"
    );
    pool.engine.feed_once(&pool.engine.devices()[0], 8 << 20);
    assert_eq!(stat(&pool, "l2_blocks"), 1, "block 0 is on the device");
    pool.close().expect("close");
    drop(pool);
    let first = recorded()[&guid.to_string()];
    std::fs::copy(&device, &image).expect("an image of the device");

    // Run 2: the device is rebuilt, block 0 is overwritten (its tombstone goes to the
    // device's log) and the pool closes cleanly.
    let pool = Pool::open(&dir, false).expect("run 2");
    wait_online(&pool.engine);
    assert_eq!(stat(&pool, "l2_blocks"), 1, "rebuilt with block 0");
    let written = vec![0x5a; BLOCK as usize];
    pool.engine
        .write_blocks(
            pool.volumes[0].entry(),
            &[(0, BlockBuf::from_vec(written.clone()))],
            true,
        )
        .expect("sync write");
    pool.close().expect("close");
    drop(pool);
    let second = recorded()[&guid.to_string()];
    let on_device = {
        let dev = larch_io::FileDevice::open(&device, &larch_io::FileOptions::default())
            .expect("the device");
        larch_l2::read_header(&dev)
            .expect("its header")
            .header
            .sequence
    };
    assert_eq!(
        second, on_device,
        "a clean close records the device's sequence"
    );
    assert!(
        second > first,
        "the tombstone's commit wrote headers: {first} -> {second}"
    );

    // Run 3, with the image of run 1 put back: formatted, and block 0 reads what run 2
    // wrote.
    std::fs::copy(&image, &device).expect("the older image put back");
    let pool = Pool::open(&dir, false).expect("run 3");
    wait_online(&pool.engine);
    assert!(
        pool.refused_devices.is_empty(),
        "{:?}",
        pool.refused_devices
    );
    let got = read(&pool, 0);
    assert!(
        got[..] == written[..],
        "stale read: block 0 begins {:02x?}, not {:02x?}",
        &got[..8],
        &written[..8]
    );
    assert_eq!(stat(&pool, "l2_hits"), 0);
    assert_eq!(
        pool.formatted_devices.len(),
        1,
        "{:?}",
        pool.formatted_devices
    );
    assert!(
        pool.formatted_devices[0].contains("older image"),
        "{:?}",
        pool.formatted_devices
    );
    let reset = recorded()[&guid.to_string()];
    assert!(
        reset < first,
        "the record starts again with the format: {reset}"
    );
    pool.close().expect("close");
    drop(pool);

    // Run 4: the formatted device is current, so it is rebuilt (no false alarm).
    let pool = Pool::open(&dir, false).expect("run 4");
    assert!(
        pool.formatted_devices.is_empty(),
        "{:?}",
        pool.formatted_devices
    );
    assert!(
        pool.refused_devices.is_empty(),
        "{:?}",
        pool.refused_devices
    );
    pool.close().expect("close");
    drop(pool);
    let _ = std::fs::remove_dir_all(&dir);
}

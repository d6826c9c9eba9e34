//! Caches of real size (issue 18, item 3): the measurements behind `bench/scale.sh`.
//!
//! ```text
//! scale fill PATH GIB        format a sparse cache device of GIB GiB at PATH and fill its
//!                            first lap with 8K records through larch-l2's writer
//! scale rebuild PATH         time the engine's rebuild of that device, with its memory
//! scale walk PATH            time larch-l2's log walk of it alone (no index)
//! scale arc DIR BLOCKS       fill an 8 GiB ARC with BLOCKS blocks of 8K, with its memory
//! ```
//!
//! `fill` writes the log exactly as a real fill of distinct blocks does, but the device
//! file stays sparse: each record is its block number behind a marker, then zeros (so
//! every record, and its checksum in the log, is distinct, as real data is), and the
//! writer's device drops every sector of a record ([`RecordSectorsDropped`]): a sector of
//! zeros, or one that starts with the marker and is zeros after it. Only the headers and
//! the log blocks (0.3% of the ring) reach the file; the records' places stay holes. A
//! rebuild reads only headers and log blocks, so it sees what it would see after a real
//! fill (the records would not verify if read; nothing here reads them).
//!
//! `rebuild` and `arc` each run in a process of their own, so that the peak resident set
//! (`VmHWM`, reset through `/proc/self/clear_refs` before the measured step) is theirs;
//! the heap is also counted by this binary's allocator (live and peak bytes). Output is
//! `name: value` lines, which the script turns into its table.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use larch_engine::{BackingStore, DeviceState, Engine, LatencyModel, VolumeSpec};
use larch_io::{BlockDevice, FileDevice, FileOptions, IoError};
use larch_l2::{ArcState, BlockKey, Compression, ContentType, CreateOptions, L2Device, Record};

const RECORD: usize = 8192;
const POOL: u64 = 0x5ca1_e001;
const DEVICE: u64 = 0x5ca1_e002;
const VOLUME: u64 = 0x5ca1_e003;
/// Records per write batch (8 MiB).
const BATCH: usize = 1024;
/// The ARC of the `arc` measurement: `zfs_arc_max` = 8 GiB.
const ARC_MAX: u64 = 8 << 30;

/// Counts the bytes live on the heap and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn counted(add: usize) {
    let now = LIVE.fetch_add(add, Ordering::Relaxed) + add;
    PEAK.fetch_max(now, Ordering::Relaxed);
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

/// Resident-set figures of this process, in bytes.
struct Rss {
    now: u64,
    peak: u64,
}

fn rss() -> Rss {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024)
    };
    Rss {
        now: field("VmRSS:"),
        peak: field("VmHWM:"),
    }
}

/// Starts a new peak: `VmHWM` back to the current resident set, the heap peak to the
/// live heap.
fn reset_peaks() {
    if let Err(err) = std::fs::write("/proc/self/clear_refs", "5") {
        eprintln!("scale: resetting VmHWM failed ({err}); the peak includes earlier steps");
    }
    PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
}

/// What a record starts with: the marker, then its block number.
const MARKER: [u8; 8] = *b"SCALEREC";

/// A device that drops the writes of records' sectors (see the module comment) and
/// counts what it wrote and dropped.
struct RecordSectorsDropped<D> {
    inner: D,
    sector: usize,
    written: AtomicU64,
    dropped: AtomicU64,
    /// Sectors dropped that start with the marker: one per record.
    record_heads: AtomicU64,
}

/// Whether `s` is all zeros (an OR vectorises; no early exit is needed, the sectors
/// asked about are mostly zeros).
fn zeros(s: &[u8]) -> bool {
    s.iter().fold(0u8, |acc, &b| acc | b) == 0
}

impl<D: BlockDevice> RecordSectorsDropped<D> {
    /// Whether a sector belongs to a record: zeros, or the marker, a block number and
    /// zeros. A log block never holds a sector of either (its checksummed, compressed
    /// entries are not zeros, and it starts with its magic or an LZ4 token).
    fn is_record(&self, s: &[u8]) -> bool {
        if s.starts_with(&MARKER) && zeros(&s[16..]) {
            self.record_heads.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        zeros(s)
    }
}

impl<D: BlockDevice> BlockDevice for RecordSectorsDropped<D> {
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), IoError> {
        self.inner.read_at(buf, offset_bytes)
    }

    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), IoError> {
        if !buf.len().is_multiple_of(self.sector)
            || !offset_bytes.is_multiple_of(self.sector as u64)
        {
            self.written.fetch_add(buf.len() as u64, Ordering::Relaxed);
            return self.inner.write_at(buf, offset_bytes);
        }
        let sectors: Vec<bool> = buf.chunks(self.sector).map(|s| self.is_record(s)).collect();
        let mut i = 0;
        while i < sectors.len() {
            if sectors[i] {
                self.dropped
                    .fetch_add(self.sector as u64, Ordering::Relaxed);
                i += 1;
                continue;
            }
            let start = i;
            while i < sectors.len() && !sectors[i] {
                i += 1;
            }
            let run = &buf[start * self.sector..i * self.sector];
            self.written.fetch_add(run.len() as u64, Ordering::Relaxed);
            self.inner
                .write_at(run, offset_bytes + (start * self.sector) as u64)?;
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), IoError> {
        self.inner.flush()
    }

    fn len_bytes(&self) -> u64 {
        self.inner.len_bytes()
    }

    fn alignment_bytes(&self) -> u64 {
        self.inner.alignment_bytes()
    }
}

fn fill(path: &Path, gib: u64) -> Result<(), Box<dyn std::error::Error>> {
    let bytes = gib << 30;
    // A new file, so every sector the fill does not write reads back as zeros.
    let _ = std::fs::remove_file(path);
    let options = FileOptions {
        create_len_bytes: Some(bytes),
        ..FileOptions::default()
    };
    let file = FileDevice::open(path, &options)?;
    println!("o_direct: {}", file.is_direct());
    let dev = RecordSectorsDropped {
        inner: file,
        sector: 4096,
        written: AtomicU64::new(0),
        dropped: AtomicU64::new(0),
        record_heads: AtomicU64::new(0),
    };
    let create = CreateOptions {
        pool_guid: POOL,
        device_guid: DEVICE,
        ..CreateOptions::default()
    };
    let mut l2 = L2Device::create(dev, &create)?;
    l2.set_track_records(false);
    let ring = l2.geometry().ring_bytes();
    let mut payload = vec![0u8; RECORD * BATCH];
    let started = Instant::now();
    let mut block = 0u64;
    // The first lap only: no position is written twice, so a dropped sector is a hole.
    while l2.write_hand_pos() + (BATCH * RECORD) as u64 + (1 << 20) < ring {
        for (i, record) in payload.chunks_mut(RECORD).enumerate() {
            record[..8].copy_from_slice(&MARKER);
            record[8..16].copy_from_slice(&(block + i as u64).to_le_bytes());
        }
        let records: Vec<Record<'_>> = payload
            .chunks(RECORD)
            .enumerate()
            .map(|(i, bytes)| Record {
                key: BlockKey {
                    volume_guid: VOLUME,
                    block_number: block + i as u64,
                },
                generation: 1,
                bytes,
                logical_size: RECORD as u32,
                compression: Compression::Off,
                content: ContentType::Data,
                arc_state: ArcState::Mru,
                prefetch: false,
            })
            .collect();
        l2.write_batch(&records)?;
        block += BATCH as u64;
    }
    l2.commit_log()?;
    let stats = l2.stats();
    let dev = l2.into_device();
    dev.flush()?;
    println!("device_bytes: {bytes}");
    println!("records_written: {block}");
    println!("log_blocks_written: {}", stats.log_blocks_written);
    println!("log_bytes_written: {}", stats.log_bytes);
    println!(
        "bytes_written_to_file: {}",
        dev.written.load(Ordering::Relaxed)
    );
    println!(
        "record_bytes_dropped: {}",
        dev.dropped.load(Ordering::Relaxed)
    );
    let heads = dev.record_heads.load(Ordering::Relaxed);
    if heads != block {
        return Err(format!("{heads} record heads dropped for {block} records").into());
    }
    println!("fill_seconds: {:.1}", started.elapsed().as_secs_f64());
    Ok(())
}

/// A read-only volume over a sparse file of `bytes` (nothing is read from it by a
/// rebuild; the ARC measurement reads its holes).
fn sparse_volume(
    engine: &Engine,
    path: &Path,
    bytes: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let _ = std::fs::remove_file(path);
    std::fs::File::create(path)?.set_len(bytes)?;
    let store = BackingStore::open(path, true, LatencyModel::default())?;
    let spec = VolumeSpec {
        read_only: true,
        ..VolumeSpec::new(VOLUME, RECORD as u32)
    };
    engine.add_volume(spec, Arc::new(store))?;
    Ok(())
}

fn stats_of(engine: &Engine) -> HashMap<String, u64> {
    engine.arcstats().into_iter().collect()
}

fn rebuild(path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let device_bytes = std::fs::metadata(path)?.len();
    let engine = Engine::new(ARC_MAX);
    let backing = path.with_extension("vol");
    sparse_volume(&engine, &backing, device_bytes)?;
    let before = rss();
    let heap_before = LIVE.load(Ordering::Relaxed) as u64;
    reset_peaks();
    let started = Instant::now();
    let device = engine.add_cache_device(path, POOL, DEVICE, false)?;
    while device.state() == DeviceState::Rebuilding {
        std::thread::sleep(Duration::from_millis(1));
    }
    let seconds = started.elapsed().as_secs_f64();
    let after = rss();
    let heap_after = LIVE.load(Ordering::Relaxed) as u64;
    let heap_peak = PEAK.load(Ordering::Relaxed) as u64;
    let stats = stats_of(&engine);
    let rebuild = device.rebuild_stats().unwrap_or_default();
    let entries = stats["l2_blocks"];
    let index = stats["l2_hdr_size"];
    let per = |bytes: u64| bytes as f64 / entries.max(1) as f64;
    println!("state: {:?}", device.state());
    println!("log_blocks: {}", rebuild.l2_rebuild_log_blks);
    println!("entries_restored: {}", rebuild.l2_rebuild_bufs);
    println!("entries_evicted: {}", rebuild.l2_rebuild_evicted);
    println!("entries_indexed: {entries}");
    println!("rebuild_seconds: {seconds:.3}");
    println!("entries_per_second: {:.0}", entries as f64 / seconds);
    println!("index_bytes_per_entry: {:.1}", per(index));
    println!(
        "rss_peak_growth_per_entry: {:.1}",
        per(after.peak.saturating_sub(before.now))
    );
    println!(
        "rss_steady_growth_per_entry: {:.1}",
        per(after.now.saturating_sub(before.now))
    );
    println!(
        "rss_transient_per_entry: {:.1}",
        per(after.peak.saturating_sub(before.now).saturating_sub(index))
    );
    println!(
        "heap_peak_growth_per_entry: {:.1}",
        per(heap_peak.saturating_sub(heap_before))
    );
    println!(
        "heap_steady_growth_per_entry: {:.1}",
        per(heap_after.saturating_sub(heap_before))
    );
    println!(
        "heap_transient_per_entry: {:.1}",
        per(heap_peak.saturating_sub(heap_after))
    );
    engine.shutdown();
    let _ = std::fs::remove_file(&backing);
    Ok(())
}

/// The log walk alone (read, verify, decode; every entry counted as restored, nothing
/// kept): the floor under the engine's rebuild time.
fn walk(path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let dev = FileDevice::open(path, &FileOptions::default())?;
    let started = Instant::now();
    let mut options = larch_l2::RebuildOptions {
        prefetch: true,
        ..Default::default()
    };
    let (_, end) = L2Device::open_with(
        dev,
        Some((POOL, DEVICE)),
        &mut options,
        &mut |_: larch_l2::Sighting<'_>| larch_l2::Seen::First,
    )?;
    let seconds = started.elapsed().as_secs_f64();
    println!("walk_log_blocks: {}", end.stats.l2_rebuild_log_blks);
    println!("walk_entries: {}", end.stats.l2_rebuild_bufs);
    println!("walk_seconds: {seconds:.3}");
    println!(
        "walk_entries_per_second: {:.0}",
        end.stats.l2_rebuild_bufs as f64 / seconds
    );
    Ok(())
}

fn arc(dir: &Path, blocks: u64) -> Result<(), Box<dyn std::error::Error>> {
    let engine = Engine::new(ARC_MAX);
    let backing = dir.join("scale-arc.vol");
    sparse_volume(&engine, &backing, blocks * RECORD as u64)?;
    let vol = engine.volume(0).ok_or("no volume")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let before = rss();
    let heap_before = LIVE.load(Ordering::Relaxed) as u64;
    reset_peaks();
    let started = Instant::now();
    for block in 0..blocks {
        runtime
            .block_on(engine.read_block(&vol, block, false))
            .ok_or("backing store read failed")?;
    }
    let seconds = started.elapsed().as_secs_f64();
    let after = rss();
    let heap_after = LIVE.load(Ordering::Relaxed) as u64;
    let stats = stats_of(&engine);
    let held = stats["data_size"] / RECORD as u64;
    let per = |bytes: u64| bytes as f64 / held.max(1) as f64;
    println!("zfs_arc_max: {ARC_MAX}");
    println!("blocks_read: {blocks}");
    println!("fill_seconds: {seconds:.1}");
    for name in ["size", "data_size", "hdr_size", "c", "c_max"] {
        println!("arcstat_{name}: {}", stats.get(name).copied().unwrap_or(0));
    }
    println!("blocks_held: {held}");
    println!("hdr_bytes_per_block: {:.1}", per(stats["hdr_size"]));
    println!(
        "rss_growth_per_block_minus_data: {:.1}",
        per(after.now.saturating_sub(before.now)) - RECORD as f64
    );
    println!(
        "heap_growth_per_block_minus_data: {:.1}",
        per(heap_after.saturating_sub(heap_before)) - RECORD as f64
    );
    engine.shutdown();
    let _ = std::fs::remove_file(&backing);
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage =
        "usage: scale fill PATH GIB | scale rebuild PATH | scale walk PATH | scale arc DIR BLOCKS";
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["fill", path, gib] => fill(&PathBuf::from(path), gib.parse()?),
        ["rebuild", path] => rebuild(&PathBuf::from(path)),
        ["walk", path] => walk(&PathBuf::from(path)),
        ["arc", dir, blocks] => arc(&PathBuf::from(dir), blocks.parse()?),
        _ => Err(usage.into()),
    }
}

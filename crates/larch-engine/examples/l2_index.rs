//! Fills a cache device with one lap of 8K records, then rebuilds it through the engine
//! and reports the rebuild time, entries/s and the DRAM per indexed block (the engine's
//! `l2_hdr_size` and the process's resident-set growth).
//!
//! ```text
//! cargo run --release -p larch-engine --example l2_index -- [DEVICE_GIB] [PATH]
//! ```
//! DEVICE_GIB defaults to 4; PATH to a file in the temporary directory (removed after).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use larch_engine::{BackingStore, DeviceState, Engine, LatencyModel, VolumeSpec};
use larch_io::{FileDevice, FileOptions};
use larch_l2::{ArcState, BlockKey, Compression, ContentType, CreateOptions, L2Device, Record};

const RECORD: usize = 8192;
const POOL: u64 = 0x1a2c_0001;
const DEVICE: u64 = 0x1a2c_0002;
const VOLUME: u64 = 0x1a2c_0003;

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let gib: u64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(4);
    let path = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("larch-l2-index-example.img"));
    let bytes = gib << 30;
    let file = std::fs::File::create(&path)?;
    file.set_len(bytes)?;
    drop(file);

    // Fill one lap of the ring with 8K records, 512 per batch.
    let dev = FileDevice::open(&path, &FileOptions::default())?;
    let options = CreateOptions {
        pool_guid: POOL,
        device_guid: DEVICE,
        ..CreateOptions::default()
    };
    let mut l2 = L2Device::create(dev, &options)?;
    l2.set_track_records(false);
    let ring = l2.geometry().ring_bytes();
    let mut payload = vec![0u8; RECORD * 512];
    let mut block = 0u64;
    let started = Instant::now();
    eprint!("filling {gib} GiB with 8K records ");
    while l2.evict_hand_pos() < ring {
        for (i, chunk) in payload.chunks_mut(RECORD).enumerate() {
            chunk[..8].copy_from_slice(&(block + i as u64).to_le_bytes());
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
        block += records.len() as u64;
        if block.is_multiple_of(64 * 1024) {
            eprint!(".");
        }
    }
    l2.commit_log()?;
    drop(l2);
    eprintln!(
        " {block} records in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // Rebuild through the engine.
    let rss_before = rss_bytes();
    let engine = Engine::new(4 << 30);
    // The volume's backing store: a sparse file of its size (nothing is read from it).
    let backing_path = path.with_extension("vol");
    std::fs::File::create(&backing_path)?.set_len(block * RECORD as u64)?;
    let store = BackingStore::open(&backing_path, true, LatencyModel::default())?;
    let spec = VolumeSpec {
        read_only: true,
        ..VolumeSpec::new(VOLUME, RECORD as u32)
    };
    engine
        .add_volume(spec, Arc::new(store))
        .expect("one volume");
    let started = Instant::now();
    let device = engine.add_cache_device(&path, POOL, DEVICE, false)?;
    while device.state() == DeviceState::Rebuilding {
        std::thread::sleep(Duration::from_millis(5));
    }
    let took = started.elapsed();
    let rss_after = rss_bytes();
    let stats: std::collections::HashMap<String, u64> = engine.arcstats().into_iter().collect();
    let blocks = stats["l2_blocks"];
    let hdr = stats["l2_hdr_size"];
    println!(
        "device: {gib} GiB, {} state",
        format!("{:?}", device.state()).to_lowercase()
    );
    println!("records written: {block}; restored into the index: {blocks}");
    println!(
        "rebuild through the engine: {:.3} s, {:.2} M entries/s",
        took.as_secs_f64(),
        blocks as f64 / took.as_secs_f64() / 1e6
    );
    println!(
        "l2_hdr_size: {hdr} bytes = {:.1} bytes per block",
        hdr as f64 / blocks.max(1) as f64
    );
    println!(
        "resident set growth: {} bytes = {:.1} bytes per block (includes the rebuild's transient buffers still held by the allocator)",
        rss_after.saturating_sub(rss_before),
        rss_after.saturating_sub(rss_before) as f64 / blocks.max(1) as f64
    );
    engine.shutdown();
    drop(device);
    drop(Arc::clone(&engine));
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&backing_path);
    Ok(())
}

//! Rebuild speed and log overhead of a file-backed cache device.
//!
//! ```sh
//! cargo run --release -p larch-l2 --example rebuild_bench -- \
//!     --path target/l2bench.dev --size-gib 4 --record-kib 8 --runs 5
//! ```
//!
//! For each layout (one chain; two chains read without and with read-ahead) it formats the
//! file, fills the whole ring with records, commits the log, then times `L2Device::open`
//! (header read, validation, log walk, tombstone/duplicate filtering, index build) `runs`
//! times and prints the median. The file is opened with `O_DIRECT` when the file system
//! allows it, so the page cache does not serve the log reads; the output says which.

use std::time::{Duration, Instant};

use larch_io::{BlockDevice, FileDevice, FileOptions};
use larch_l2::{
    ArcState, BlockKey, Compression, ContentType, CreateOptions, L2Device, L2Stats, RebuildOptions,
    Record,
};

struct Args {
    path: String,
    size_bytes: u64,
    record_bytes: usize,
    runs: usize,
    keep: bool,
}

fn parse_args() -> Args {
    let mut args = Args {
        path: "target/l2bench.dev".into(),
        size_bytes: 4 << 30,
        record_bytes: 8192,
        runs: 5,
        keep: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--path" => args.path = value(),
            "--size-gib" => {
                args.size_bytes = (value().parse::<f64>().unwrap() * (1u64 << 30) as f64) as u64
            }
            "--record-kib" => args.record_bytes = value().parse::<usize>().unwrap() * 1024,
            "--runs" => args.runs = value().parse().unwrap(),
            "--keep" => args.keep = true,
            other => panic!("unknown flag {other}"),
        }
    }
    args
}

/// Fills the ring once with `record_bytes` records in 8 MiB batches.
fn fill(l2: &mut L2Device<FileDevice>, record_bytes: usize) -> (u64, Duration) {
    let batch_records = ((8 << 20) / record_bytes).max(1);
    let mut payload = vec![0u8; record_bytes * batch_records];
    let mut x = 0x1234_5678_9abc_def0u64;
    for chunk in payload.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    let ring = l2.geometry().ring_bytes();
    let started = Instant::now();
    let mut block_number = 0u64;
    while l2.write_hand_pos() + (batch_records * record_bytes) as u64 + (1 << 20) < ring {
        let records: Vec<Record<'_>> = payload
            .chunks(record_bytes)
            .map(|bytes| {
                block_number += 1;
                Record {
                    key: BlockKey {
                        volume_guid: 1,
                        block_number,
                    },
                    generation: block_number,
                    bytes,
                    logical_size: record_bytes as u32,
                    compression: Compression::Off,
                    content: ContentType::Data,
                    arc_state: ArcState::Mfu,
                    prefetch: false,
                }
            })
            .collect();
        l2.write_batch(&records).expect("write batch");
    }
    l2.commit_log().expect("commit");
    (block_number, started.elapsed())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let args = parse_args();
    let options = FileOptions {
        create_len_bytes: Some(args.size_bytes),
        ..FileOptions::default()
    };
    println!(
        "device {} bytes ({:.2} GiB), records {} bytes, {} runs per layout",
        args.size_bytes,
        args.size_bytes as f64 / (1u64 << 30) as f64,
        args.record_bytes,
        args.runs
    );
    let mut baseline = None;
    for (chains, prefetch, label) in [
        (1u32, false, "1 chain"),
        (2, false, "2 chains, no read-ahead"),
        (2, true, "2 chains, read-ahead"),
    ] {
        // The two-chain rows share one filled device.
        if !(chains == 2 && prefetch) {
            let dev = FileDevice::open(&args.path, &options).expect("open device file");
            println!(
                "O_DIRECT: {}",
                if dev.is_direct() {
                    "yes"
                } else {
                    "no (buffered)"
                }
            );
            let mut l2 = L2Device::create(
                dev,
                &CreateOptions {
                    pool_guid: 1,
                    device_guid: 2,
                    chain_count: chains,
                    ..CreateOptions::default()
                },
            )
            .expect("create");
            let (records, took) = fill(&mut l2, args.record_bytes);
            let s: L2Stats = l2.stats();
            println!(
                "fill ({chains} chain(s)): {records} records in {:.2}s ({:.0} MiB/s); log blocks {} ({} bytes); \
                 data {} bytes; log overhead {:.6} log bytes per data byte ({:.4}%)",
                took.as_secs_f64(),
                (s.data_bytes + s.log_bytes) as f64 / took.as_secs_f64() / (1 << 20) as f64,
                s.log_blocks_written,
                s.log_bytes,
                s.data_bytes,
                s.log_bytes as f64 / s.data_bytes as f64,
                100.0 * s.log_bytes as f64 / s.data_bytes as f64,
            );
            l2.device().flush().expect("flush");
        }
        let mut times = Vec::new();
        let mut entries = 0;
        let mut blocks = 0;
        let mut ring_bytes = 0;
        for _ in 0..args.runs {
            let dev = FileDevice::open(&args.path, &options).expect("reopen");
            let started = Instant::now();
            let mut rebuild = RebuildOptions {
                prefetch,
                ..RebuildOptions::default()
            };
            let (l2, outcome) = L2Device::open(dev, Some((1, 2)), &mut rebuild).expect("open");
            times.push(started.elapsed());
            assert!(outcome.stop.is_clean(), "{:?}", outcome.stop);
            entries = outcome.entries.len();
            blocks = outcome.blocks.len();
            ring_bytes = l2.geometry().ring_bytes();
        }
        let t = median(times).as_secs_f64();
        let gib = ring_bytes as f64 / (1u64 << 30) as f64;
        let rate = entries as f64 / t;
        let ratio = match baseline {
            None => {
                baseline = Some(t);
                String::from("(baseline)")
            }
            Some(b) => format!("({:.2}x the 1-chain speed)", b / t),
        };
        println!(
            "rebuild {label}: {entries} entries, {blocks} log blocks in {:.4}s median: \
             {:.2} M entries/s, {:.4} s per GiB of cache {ratio}",
            t,
            rate / 1e6,
            t / gib
        );
    }
    if !args.keep {
        std::fs::remove_file(&args.path).expect("remove device file");
    }
}

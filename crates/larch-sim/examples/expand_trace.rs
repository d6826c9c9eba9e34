//! Writes the block requests `larch sim replay` would make of a trace as a libCacheSim
//! oracleGeneral file, so that libCacheSim's policies and larch's see the same requests
//! (`bench/policy_referee.py` runs both on it).
//!
//!     cargo run --release -p larch-sim --example expand_trace -- IN OUT [BLOCK_SIZE]
//!
//! Each block a record touches becomes one request, as in the replay (writes included:
//! the replay's default `--writes access`). Blocks get dense object ids in the order they
//! are first seen, so blocks of different volumes never share one. Each record's time is
//! its request number in seconds (larch's untimed clock: no two requests fall within the
//! ARC's 62 ms), its size the block size, and its next-access field the request number of
//! the block's next request (-1 for none), which libCacheSim's Belady needs.
//! Prints `requests footprint_blocks block_size` on standard output.

use std::collections::HashMap;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use larch_sim::{Format, TraceReader};

/// Blocks in one record at most, as the replay's default.
const MAX_BLOCKS: u64 = 1 << 20;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 || args.len() > 3 {
        eprintln!("usage: expand_trace IN OUT [BLOCK_SIZE]");
        std::process::exit(2);
    }
    let input = PathBuf::from(&args[0]);
    let output = PathBuf::from(&args[1]);
    let reader = TraceReader::open(&input, None).unwrap_or_else(|e| {
        eprintln!("{}: {e}", input.display());
        std::process::exit(2);
    });
    let block_size: u32 = match args.get(2) {
        Some(text) => text.parse().unwrap_or_else(|_| {
            eprintln!("block size must be a number of bytes: {text}");
            std::process::exit(2);
        }),
        None if reader.format() == Format::Lis => 512,
        None => 4096,
    };
    let mut ids: HashMap<(u64, u64), u64> = HashMap::new();
    let mut requests: Vec<u64> = Vec::new();
    for record in reader {
        let record = record.unwrap_or_else(|e| {
            eprintln!("{}: {e}", input.display());
            std::process::exit(2);
        });
        let (first, count, _) = record.blocks(block_size, MAX_BLOCKS).unwrap_or_else(|e| {
            eprintln!("{}: {e}", input.display());
            std::process::exit(2);
        });
        for block in first..first + count {
            let next = ids.len() as u64;
            requests.push(*ids.entry((record.volume, block)).or_insert(next));
        }
    }
    let mut next_access = vec![-1i64; requests.len()];
    let mut seen: Vec<i64> = vec![-1; ids.len()];
    for (i, &id) in requests.iter().enumerate().rev() {
        next_access[i] = seen[id as usize];
        seen[id as usize] = i as i64;
    }
    let file = std::fs::File::create(&output).unwrap_or_else(|e| {
        eprintln!("{}: {e}", output.display());
        std::process::exit(2);
    });
    let mut out = BufWriter::new(file);
    for (i, (&id, &next)) in requests.iter().zip(&next_access).enumerate() {
        let mut record = [0u8; 24];
        record[0..4].copy_from_slice(&(i as u32).to_le_bytes());
        record[4..12].copy_from_slice(&id.to_le_bytes());
        record[12..16].copy_from_slice(&block_size.to_le_bytes());
        record[16..24].copy_from_slice(&next.to_le_bytes());
        out.write_all(&record).expect("write the expanded trace");
    }
    out.flush().expect("write the expanded trace");
    println!("{} {} {}", requests.len(), ids.len(), block_size);
}

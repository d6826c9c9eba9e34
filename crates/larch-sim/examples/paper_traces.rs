//! Validates larch's ARC against the hit ratios published in the ARC paper (Megiddo &
//! Modha, FAST 2003) on the OLTP and P3 traces, when `../shared/traces/arc` is present.
//!
//!     cargo run --release -p larch-sim --example paper_traces [-- TRACE_DIR]
//!
//! Prints a Markdown table, hit ratios in percent: the paper's LRU and ARC next to larch's
//! `lru`, `arc-paper` (the paper's algorithm), `arc-openzfs` (OpenZFS 2.2+ balancing) and
//! `arc` (the default).

use std::path::{Path, PathBuf};

use larch_policy::{Arc, ArcConfig, Lru, Policy};
use larch_sim::{Format, ReplayConfig, Replayer, TraceReader};

/// (trace, cache size in 512-byte pages, paper LRU %, paper ARC %).
const PAPER: [(&str, u64, f64, f64); 6] = [
    ("OLTP.lis.zst", 1000, 32.83, 38.93),
    ("OLTP.lis.zst", 2000, 42.47, 46.08),
    ("OLTP.lis.zst", 5000, 53.65, 55.25),
    ("OLTP.lis.zst", 10000, 60.70, 61.87),
    ("OLTP.lis.zst", 15000, 64.63, 65.40),
    ("P3.lis.zst", 32768, 3.57, 17.12),
];

fn hit_ratio(path: &Path, policy: &mut dyn Policy) -> f64 {
    let reader = TraceReader::open(path, Some(Format::Lis)).expect("open trace");
    let mut replayer = Replayer::new(policy, ReplayConfig::new(512));
    for record in reader {
        let record = record.expect("valid trace record");
        replayer.record(&record).expect("replayable record");
    }
    replayer.counts().hit_ratio() * 100.0
}

fn main() {
    let dir = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("../shared/traces/arc"));
    if !dir.is_dir() {
        eprintln!(
            "no trace directory at {}: nothing to validate",
            dir.display()
        );
        std::process::exit(2);
    }
    println!(
        "| trace | pages | paper LRU | larch `lru` | paper ARC | larch `arc-paper` | larch `arc-openzfs` | larch `arc` (default, vs paper ARC) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (trace, pages, paper_lru, paper_arc) in PAPER {
        let path = dir.join(trace);
        let bytes = pages * 512;
        let lru = hit_ratio(&path, &mut Lru::new(bytes));
        let exact = hit_ratio(&path, &mut Arc::new(ArcConfig::paper(bytes)).unwrap());
        let openzfs = hit_ratio(
            &path,
            &mut Arc::new(ArcConfig::openzfs_fixed(bytes)).unwrap(),
        );
        let default = hit_ratio(&path, &mut Arc::new(ArcConfig::fixed(bytes)).unwrap());
        println!(
            "| {} | {pages} | {paper_lru:.2} | {lru:.2} | {paper_arc:.2} | {exact:.2} | {openzfs:.2} | {default:.2} ({:+.2}) |",
            trace.trim_end_matches(".lis.zst"),
            default - paper_arc
        );
    }
}

//! The sampler's cost per access on the daemon's hot path, single-threaded: what
//! `AccessLog::note` does for a one-block request (count, hash, and for the sampled blocks
//! the lock-free part's record), on a working set that fits an ARC (the setting of
//! bench/mrc_cost.sh) and on larger ones. Divide by the daemon's CPU time per read
//! (bench/mrc_cost.sh prints it) for the share of an ARC hit's cost. Also the memory the
//! sampler counts (`mrc_size`) against the growth of the process's resident set.
//!
//! cargo run --release -p larch-mrc --features trace --example mrc_hot_path

use std::time::Instant;

use larch_mrc::{Access, Sampler, SamplerConfig, spatial_hash};
use larch_policy::BlockKey;
use larch_sim::{SplitMix64, Zipf};

/// This process's resident memory, bytes.
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .unwrap_or(0)
        * 1024
}

/// `budget`: the daemon's bound on sampled accesses a second (the clock here runs at
/// 200,000 accesses a second).
fn run(name: &str, blocks: u64, bytes: u32, zipf: Option<f64>, budget: Option<u64>) {
    let mut rng = SplitMix64::new(5);
    let z = zipf.map(|t| Zipf::new(blocks, t));
    let n = 5_000_000u64;
    let keys: Vec<u64> = (0..n)
        .map(|_| match &z {
            Some(z) => z.sample(&mut rng),
            None => rng.below(blocks),
        })
        .collect();
    let before = rss();
    let s = Sampler::new(SamplerConfig {
        max_sampled_per_s: budget,
        ..SamplerConfig::default()
    })
    .unwrap();
    let filter = s.filter();
    let mut s = s;
    let t = Instant::now();
    for (i, &b) in keys.iter().enumerate() {
        filter.count(1, false);
        let key = BlockKey::new(1, b);
        if filter.observe(spatial_hash(filter.seed(), &key)) {
            s.record(&Access {
                key,
                bytes,
                write: false,
                sequential: false,
                metadata: false,
                now_ms: i as u64 / 200,
            });
        }
    }
    let ns = t.elapsed().as_nanos() as f64 / n as f64;
    let name = match budget {
        Some(b) => format!("{name}, at most {b} sampled a second"),
        None => name.to_string(),
    };
    println!(
        "| {name} | {:.1} ns | {:.3}% | {} | {:.0} KiB | {:.0} KiB |",
        ns,
        100.0 * s.rate(),
        s.tracked(),
        s.memory_bytes() as f64 / 1024.0,
        rss().saturating_sub(before) as f64 / 1024.0
    );
    drop(s);
}

fn main() {
    println!(
        "| workload | per access | final rate | blocks followed | memory (its count) | resident growth |"
    );
    println!("|---|---|---|---|---|---|");
    for budget in [None, Some(10_000)] {
        run(
            "uniform over 2,048 16K blocks (32 MiB)",
            2048,
            16384,
            None,
            budget,
        );
        run(
            "uniform over 65,536 16K blocks (1 GiB)",
            65_536,
            16384,
            None,
            budget,
        );
        run(
            "uniform over 10M 8K blocks (76 GiB)",
            10_000_000,
            8192,
            None,
            budget,
        );
        run(
            "Zipf 0.9 over 10M 8K blocks",
            10_000_000,
            8192,
            Some(0.9),
            budget,
        );
    }
}

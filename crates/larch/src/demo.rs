//! `larch demo`: a generated workload through the ARC and through LRU, so a newcomer sees
//! what an ARC is for in one command.
//!
//! The workload is Zipf-distributed reads over a volume, with a one-pass scan larger than
//! the cache in the middle. LRU lets the scan flush its hot blocks; the ARC keeps them in
//! MFU and recovers at once.

use std::process::ExitCode;

use larch_policy::{Access, BlockKey, Policy};
use larch_sim::{SplitMix64, Zipf};

use crate::sim::{PolicyName, make_policy};
use larch_engine::units::format_size;

/// Arguments of `larch demo`.
#[derive(clap::Args)]
pub struct DemoArgs {
    /// Blocks in the volume.
    #[arg(long, default_value_t = 200_000)]
    pub blocks: u64,
    /// Blocks the cache holds.
    #[arg(long, default_value_t = 20_000)]
    pub cache_blocks: u64,
    /// Block size in bytes (for the sizes printed; hit ratios do not depend on it).
    #[arg(long, default_value_t = 8192)]
    pub block_size: u32,
    /// Zipf skew, between 0 and 1.
    #[arg(long, default_value_t = 0.9)]
    pub theta: f64,
    /// Reads before and after the scan.
    #[arg(long, default_value_t = 1_000_000)]
    pub reads: u64,
    /// Seed of the generator (the same seed gives the same numbers).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Hit ratios of one policy in each phase.
struct PhaseRatios {
    before: f64,
    scan: f64,
    recovery: f64,
    after: f64,
}

fn run_phase(
    policy: &mut dyn Policy,
    blocks: impl Iterator<Item = u64>,
    clock: &mut u64,
    size: u32,
) -> f64 {
    let mut actions = Vec::new();
    let (mut hits, mut total) = (0u64, 0u64);
    for block in blocks {
        // One read per millisecond: repeated reads are far enough apart to count as frequency.
        *clock += 1;
        let access = Access::data(BlockKey::new(0, block), size, *clock * 100);
        if policy.access(&access, &mut actions).is_hit() {
            hits += 1;
        }
        actions.clear();
        total += 1;
    }
    if total == 0 {
        0.0
    } else {
        hits as f64 / total as f64
    }
}

fn run_policy(name: PolicyName, args: &DemoArgs, zipf: &Zipf) -> anyhow::Result<PhaseRatios> {
    let mut policy = make_policy(name, args.cache_blocks * u64::from(args.block_size))?;
    let mut rng = SplitMix64::new(args.seed);
    let mut clock = 0;
    let size = args.block_size;
    let p = policy.as_mut();
    // Warm the cache, then measure the steady state.
    let zipf_reads =
        |n: u64, rng: &mut SplitMix64| -> Vec<u64> { (0..n).map(|_| zipf.sample(rng)).collect() };
    run_phase(
        p,
        zipf_reads(args.reads, &mut rng).into_iter(),
        &mut clock,
        size,
    );
    let before = run_phase(
        p,
        zipf_reads(args.reads, &mut rng).into_iter(),
        &mut clock,
        size,
    );
    let scan_len = args.cache_blocks * 3;
    let scan = run_phase(p, args.blocks..args.blocks + scan_len, &mut clock, size);
    let recovery_len = args.cache_blocks;
    let recovery = run_phase(
        p,
        zipf_reads(recovery_len, &mut rng).into_iter(),
        &mut clock,
        size,
    );
    let after = run_phase(
        p,
        zipf_reads(args.reads, &mut rng).into_iter(),
        &mut clock,
        size,
    );
    p.check_invariants();
    Ok(PhaseRatios {
        before,
        scan,
        recovery,
        after,
    })
}

pub fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    if args.blocks < 2 || args.cache_blocks == 0 || args.block_size == 0 {
        anyhow::bail!(
            "the demo needs at least 2 blocks, a cache of at least 1 block and a block size above 0"
        );
    }
    if !(args.theta > 0.0 && args.theta < 1.0) {
        anyhow::bail!(
            "--theta must be between 0 and 1 (exclusive), got {}",
            args.theta
        );
    }
    let zipf = Zipf::new(args.blocks, args.theta);
    let bs = u64::from(args.block_size);
    println!("larch demo: the same reads through the ARC and through LRU.");
    println!(
        "  volume {} blocks of {} ({}), cache {} blocks ({}), Zipf({}) reads",
        args.blocks,
        format_size(bs),
        format_size(args.blocks * bs),
        args.cache_blocks,
        format_size(args.cache_blocks * bs),
        args.theta
    );
    println!(
        "  {} reads to warm up, {} measured, then one pass over {} new blocks (3x the cache),",
        args.reads,
        args.reads,
        args.cache_blocks * 3
    );
    println!(
        "  then {} reads right after the scan and {} more.\n",
        args.cache_blocks, args.reads
    );
    println!(
        "  {:<12} {:>12} {:>12} {:>18} {:>12}",
        "policy", "before scan", "during scan", "just after scan", "after scan"
    );
    for name in [PolicyName::Arc, PolicyName::ArcOpenzfs, PolicyName::Lru] {
        let r = run_policy(name, &args, &zipf)?;
        let label = match name {
            PolicyName::Arc => "arc",
            PolicyName::ArcOpenzfs => "arc-openzfs",
            PolicyName::ArcPaper => "arc-paper",
            PolicyName::Lru => "lru",
            PolicyName::Larch => "larch",
        };
        println!(
            "  {:<12} {:>11.2}% {:>11.2}% {:>17.2}% {:>11.2}%",
            label,
            r.before * 100.0,
            r.scan * 100.0,
            r.recovery * 100.0,
            r.after * 100.0
        );
    }
    println!(
        "\n  (hit ratios; replay real traces with: larch sim replay --trace FILE --cache-size SIZE)"
    );
    Ok(ExitCode::SUCCESS)
}

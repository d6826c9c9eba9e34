//! How close the sampled curves come to the exact ones: on the ARC paper's traces, the
//! CloudPhysics trace and generated workloads, the exact LRU and ARC curves (every access,
//! a full replay per size) against the sampled ones at fixed rates of 0.1%, 1% and 10% and
//! in a fixed memory bound. Prints a Markdown table (mean absolute error in hit-ratio
//! points over the sizes, the sampler's memory and time per access).
//!
//! cargo run --release -p larch-mrc --features trace --example mrc_accuracy [TRACES_DIR]

use std::path::{Path, PathBuf};
use std::time::Instant;

use larch_mrc::{Access, Point, Sampler, SamplerConfig, exact};
use larch_policy::{ArcConfig, BlockKey};
use larch_sim::{SplitMix64, Zipf};

struct Workload {
    name: String,
    accesses: Vec<Access>,
}

fn from_trace(path: &Path, block: u32) -> Option<Workload> {
    let mut accesses = Vec::new();
    match larch_mrc::trace::for_each_access(path, None, block, |a| accesses.push(*a)) {
        Ok(_) => Some(Workload {
            name: path.file_name()?.to_string_lossy().into_owned(),
            accesses,
        }),
        Err(e) => {
            eprintln!("skipping {}: {e}", path.display());
            None
        }
    }
}

fn zipf(blocks: u64, theta: f64, n: usize, seed: u64) -> Workload {
    let z = Zipf::new(blocks, theta);
    let mut rng = SplitMix64::new(seed);
    let accesses = (0..n)
        .map(|i| Access {
            key: BlockKey::new(0, z.sample(&mut rng)),
            bytes: 8192,
            write: rng.next_f64() < 0.2,
            sequential: false,
            metadata: false,
            now_ms: i as u64,
        })
        .collect();
    Workload {
        name: format!("zipf θ={theta} over {blocks} 8 KiB blocks, 20% writes"),
        accesses,
    }
}

/// A hot set reread beside a loop over a larger cold range (scan resistance matters).
fn hot_and_scan(n: usize, seed: u64) -> Workload {
    let mut rng = SplitMix64::new(seed);
    let mut scan = 0u64;
    let accesses = (0..n)
        .map(|i| {
            let block = if rng.next_f64() < 0.6 {
                rng.below(20_000)
            } else {
                scan = (scan + 1) % 200_000;
                1_000_000 + scan
            };
            Access {
                key: BlockKey::new(0, block),
                bytes: 8192,
                write: false,
                sequential: block >= 1_000_000,
                metadata: false,
                now_ms: i as u64,
            }
        })
        .collect();
    Workload {
        name: "60% over 20k hot blocks, 40% a loop over 200k".into(),
        accesses,
    }
}

/// Sizes from 1/256 of the footprint to twice it, doubling.
fn sizes_for(w: &Workload) -> Vec<u64> {
    let mut seen = std::collections::HashMap::new();
    for a in &w.accesses {
        seen.insert(a.key, a.bytes);
    }
    let footprint: u64 = seen.values().map(|&b| u64::from(b)).sum();
    let top = (footprint * 2).next_power_of_two();
    (0..10).rev().map(|i| top >> i).collect()
}

fn run(w: &Workload, cfg: SamplerConfig) -> (Vec<Point>, Vec<Point>, u64, f64, f64) {
    let mut s = Sampler::new(cfg).expect("valid");
    let t = Instant::now();
    for a in &w.accesses {
        s.offer(a);
    }
    let ns = t.elapsed().as_nanos() as f64 / w.accesses.len() as f64;
    let sizes = s.config().sizes.clone();
    (
        s.lru_curve(&sizes),
        s.arc_curve(),
        s.memory_bytes(),
        s.rate(),
        ns,
    )
}

fn main() {
    let dir = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("../shared/traces"));
    let mut workloads: Vec<Workload> = Vec::new();
    for (file, block) in [
        ("arc/OLTP.lis.zst", 512),
        ("arc/P3.lis.zst", 512),
        ("cloudphysics/cloudPhysicsIO.csv", 4096),
    ] {
        workloads.extend(from_trace(&dir.join(file), block));
    }
    workloads.push(zipf(1_000_000, 0.9, 4_000_000, 1));
    workloads.push(zipf(1_000_000, 0.6, 4_000_000, 2));
    workloads.push(hot_and_scan(3_000_000, 3));
    let template = ArcConfig::fixed(1 << 20);
    println!(
        "| workload | accesses | sampler | LRU MAE (pts) | ARC MAE (pts) | final rate | memory | ns/access |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for w in &workloads {
        let sizes = sizes_for(w);
        let t = Instant::now();
        let lru = exact::lru_curve(&w.accesses, &sizes);
        let arc = exact::arc_curve(&w.accesses, &sizes, &template);
        eprintln!(
            "{}: exact curves in {:.1} s: LRU {:?} ARC {:?}",
            w.name,
            t.elapsed().as_secs_f64(),
            lru.iter()
                .map(|p| (p.1 * 1000.0).round() / 10.0)
                .collect::<Vec<_>>(),
            arc.iter()
                .map(|p| (p.1 * 1000.0).round() / 10.0)
                .collect::<Vec<_>>()
        );
        let variants: Vec<(String, SamplerConfig)> = [0.001, 0.01, 0.1]
            .iter()
            .map(|&r| {
                (
                    format!("fixed rate {}%", r * 100.0),
                    SamplerConfig {
                        max_samples: 1 << 30,
                        initial_rate: r,
                        sizes: sizes.clone(),
                        arc_template: template.clone(),
                        ..SamplerConfig::default()
                    },
                )
            })
            .chain([2048, 4096, 8192].map(|max_samples| {
                (
                    format!("fixed size ({max_samples} blocks)"),
                    SamplerConfig {
                        max_samples,
                        sizes: sizes.clone(),
                        arc_template: template.clone(),
                        ..SamplerConfig::default()
                    },
                )
            }))
            .collect();
        for (label, cfg) in variants {
            let (slru, sarc, mem, rate, ns) = run(w, cfg);
            if std::env::var_os("MRC_VERBOSE").is_some() {
                eprintln!(
                    "  {label}: LRU {:?} ARC {:?}",
                    slru.iter()
                        .map(|p| (p.1 * 1000.0).round() / 10.0)
                        .collect::<Vec<_>>(),
                    sarc.iter()
                        .map(|p| (p.1 * 1000.0).round() / 10.0)
                        .collect::<Vec<_>>()
                );
            }
            println!(
                "| {} | {} | {} | {:.2} | {:.2} | {:.3}% | {:.0} KiB | {:.0} |",
                w.name,
                w.accesses.len(),
                label,
                exact::mean_abs_error_points(&lru, &slru),
                exact::mean_abs_error_points(&arc, &sarc),
                rate * 100.0,
                mem as f64 / 1024.0,
                ns
            );
        }
    }
}

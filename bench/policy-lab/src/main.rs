//! policy-lab: object-mode prototypes of the cache policy issue 40 asks for, run on the
//! expanded traces `bench/policy_referee.py` leaves in its work directory and compared,
//! cell by cell, with the libCacheSim numbers in its JSON output.
//!
//!     CARGO_TARGET_DIR=bench/policy-lab/target cargo run --release \
//!         --manifest-path bench/policy-lab/Cargo.toml -- REFEREE.json [WORK_DIR] [VARIANT,...]
//!
//! WORK_DIR defaults to /tmp/larch-referee (the referee's default). Variants (default: all):
//! `arc` (the paper's; must equal libCacheSim's ARC), `marks`, `bimodal`, `tinylfu-position`,
//! `duel`, `sketch-to-mfu`, `adaptive` (arc.rs, unified.rs and choose.rs say what each is;
//! tuning runs may set the choosers' `LAB_PERIOD`, `LAB_PERIOD_MAX`, `LAB_MARGIN` and
//! `LAB_DECAY`, see `choose::Timing`). For each
//! cell it prints the hit ratio (%) and the margin against max(S3-FIFO, W-TinyLFU), then per
//! variant how many cells it wins, over all cells and over the cells where both rivals
//! have a working cache (at least 100 blocks: W-TinyLFU's 1% window is empty below that).
//!
//! These are prototypes over unit-size blocks, not larch's policy: what wins here is then
//! built into `larch_policy::Arc`, with sizes, generations, holds and the L2ARC feed.

mod arc;
mod choose;
mod lists;
mod sketch;
mod unified;

use std::path::{Path, PathBuf};

use arc::{Arc, Insert, Options};

const VARIANTS: [&str; 22] = [
    "u-arc",
    "u-arc-fill",
    "u-arc-fill-x",
    "u-arc-fill-cold",
    "u-s3fifo",
    "u-wtinylfu",
    "u-cold",
    "u-choose",
    "bimodal-mru-never",
    "adaptive-mru-cold-never",
    "bimodal-mru-64",
    "adaptive-mru-cold",
    "adaptive-mru-cold-64",
    "bimodal-mru",
    "adaptive-mru",
    "arc",
    "marks",
    "bimodal",
    "tinylfu-position",
    "duel",
    "sketch-to-mfu",
    "adaptive",
];

/// The cache a variant names, over `c` blocks and ids below `ids`.
fn run(variant: &str, c: u64, ids: usize, requests: &[u32]) -> (u64, u64) {
    let marks = Options {
        marks: true,
        ..Options::PAPER
    };
    let mut switches = 0;
    let unified = |rules: unified::Rules| {
        let mut cache = unified::Cache::new(c, ids, rules);
        requests.iter().filter(|&&x| cache.access(x)).count()
    };
    let hits = match variant {
        "u-arc" => unified(unified::Rules::ARC),
        "u-s3fifo" => unified(unified::Rules::S3FIFO),
        "u-wtinylfu" => unified(unified::Rules::WTINYLFU),
        "u-cold" => unified(unified::Rules::COLD),
        "u-arc-fill-cold" => unified(unified::Rules {
            fill_mfu: true,
            fill_cold: true,
            ..unified::Rules::ARC
        }),
        "u-arc-fill-x" => unified(unified::Rules {
            fill_mfu: true,
            duel: std::env::var("LAB_DUEL").is_ok(),
            sketch_mfu: std::env::var("LAB_SKETCH_MFU")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            ..unified::Rules::ARC
        }),
        "u-arc-fill" => unified(unified::Rules {
            fill_mfu: true,
            ..unified::Rules::ARC
        }),
        "u-choose" => {
            let fill = unified::Rules {
                fill_mfu: true,
                ..unified::Rules::ARC
            };
            let candidates: Vec<unified::Rules> = match std::env::var("LAB_SET").as_deref() {
                Ok("fill-s3") => vec![fill, unified::Rules::S3FIFO],
                Ok("fill-s3-cold") => vec![fill, unified::Rules::S3FIFO, unified::Rules::COLD],
                Ok("fill-cold") => vec![fill, unified::Rules::COLD],
                Ok("fill-all") => vec![
                    fill,
                    unified::Rules::S3FIFO,
                    unified::Rules::WTINYLFU,
                    unified::Rules::COLD,
                ],
                _ => vec![
                    unified::Rules::ARC,
                    unified::Rules::S3FIFO,
                    unified::Rules::WTINYLFU,
                    unified::Rules::COLD,
                ],
            };
            let timing = choose::Timing {
                period_share: env_f64("LAB_PERIOD", 1.0),
                period_max: u64::MAX,
                margin: 0.0,
                decay: 0.5,
            };
            let mut cache = choose::Chooser::<unified::Cache>::new(c, ids, &candidates, timing);
            let hits = requests.iter().filter(|&&x| cache.access(x)).count();
            switches = cache.switches;
            hits
        }
        "adaptive"
        | "adaptive-mru"
        | "adaptive-mru-cold"
        | "adaptive-mru-cold-64"
        | "adaptive-mru-cold-never" => {
            let candidates = if variant.contains("cold") {
                [Insert::ColdBimodal, Insert::Hot, Insert::ColdUnlessFrequent]
            } else {
                [Insert::Hot, Insert::ColdUnlessFrequent, Insert::ColdBimodal]
            };
            let options = Options {
                cold_takes_mru: variant != "adaptive",
                hot_every: if variant.ends_with("64") {
                    64
                } else if variant.ends_with("never") {
                    u64::MAX
                } else {
                    32
                },
                ..marks
            };
            let candidates = candidates.map(|insert| Options { insert, ..options });
            let timing = choose::Timing {
                period_share: env_f64("LAB_PERIOD", 0.25),
                period_max: env_f64("LAB_PERIOD_MAX", 1024.0) as u64,
                margin: env_f64("LAB_MARGIN", 0.0),
                decay: env_f64("LAB_DECAY", 0.5),
            };
            let mut cache = choose::Chooser::<Arc>::new(c, ids, &candidates, timing);
            let hits = requests.iter().filter(|&&x| cache.access(x)).count();
            switches = cache.switches;
            hits
        }
        _ => {
            let options = match variant {
                "arc" => Options::PAPER,
                "marks" => marks,
                "bimodal" => Options {
                    insert: Insert::ColdBimodal,
                    ..marks
                },
                "bimodal-mru-never" => Options {
                    insert: Insert::ColdBimodal,
                    cold_takes_mru: true,
                    hot_every: u64::MAX,
                    ..marks
                },
                "bimodal-mru-64" => Options {
                    insert: Insert::ColdBimodal,
                    cold_takes_mru: true,
                    hot_every: 64,
                    ..marks
                },
                "bimodal-mru" => Options {
                    insert: Insert::ColdBimodal,
                    cold_takes_mru: true,
                    ..marks
                },
                "tinylfu-position" => Options {
                    insert: Insert::ColdUnlessFrequent,
                    ..marks
                },
                "duel" => Options {
                    duel: true,
                    ..marks
                },
                "sketch-to-mfu" => Options {
                    sketch_to_mfu: 2,
                    ..marks
                },
                other => panic!("no variant {other}"),
            };
            let mut cache = Arc::new(c, ids, options, false);
            requests.iter().filter(|&&x| cache.access(x)).count()
        }
    };
    (hits as u64, switches)
}

/// A number from the environment, for tuning runs (see choose.rs), else `default`.
fn env_f64(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Dense ids of an oracleGeneral file, and one past the largest.
fn load(path: &Path) -> std::io::Result<(Vec<u32>, usize)> {
    let bytes = std::fs::read(path)?;
    let mut ids = Vec::with_capacity(bytes.len() / 24);
    let mut end = 0;
    for record in bytes.chunks_exact(24) {
        let id = u64::from_le_bytes(record[4..12].try_into().expect("8 bytes"));
        let id = u32::try_from(id).expect("the expander's ids are dense");
        end = end.max(id as usize + 1);
        ids.push(id);
    }
    Ok((ids, end))
}

struct Tally {
    wins: usize,
    cells: usize,
    fair_wins: usize,
    fair_cells: usize,
    worst: (f64, String),
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(referee) = args.first() else {
        eprintln!("usage: policy-lab REFEREE.json [WORK_DIR] [VARIANT,...]");
        std::process::exit(2);
    };
    let work = PathBuf::from(args.get(1).map_or("/tmp/larch-referee", String::as_str));
    let variants: Vec<&str> = match args.get(2) {
        Some(list) => list.split(',').collect(),
        None => VARIANTS.to_vec(),
    };
    if let Some(bad) = variants.iter().find(|v| !VARIANTS.contains(v)) {
        eprintln!("no variant {bad}; variants: {}", VARIANTS.join(", "));
        std::process::exit(2);
    }
    let text = std::fs::read_to_string(referee).unwrap_or_else(|e| {
        eprintln!("{referee}: {e}");
        std::process::exit(2);
    });
    let json: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| {
        eprintln!("{referee}: {e}");
        std::process::exit(2);
    });
    let rows = json["rows"].as_array().cloned().unwrap_or_default();
    let mut tallies: Vec<Tally> = variants
        .iter()
        .map(|_| Tally {
            wins: 0,
            cells: 0,
            fair_wins: 0,
            fair_cells: 0,
            worst: (f64::MAX, String::new()),
        })
        .collect();
    let mut loaded: Option<(String, Vec<u32>, usize)> = None;
    println!(
        "| trace | size | blocks | S3-FIFO | W-TinyLFU | {} |",
        variants.join(" | ")
    );
    println!(
        "|---|---:|---:|---:|---:|{}",
        "---:|".repeat(variants.len())
    );
    for row in rows {
        let trace = row["trace"].as_str().unwrap_or_default().to_string();
        let fraction = row["fraction"].as_f64().unwrap_or(0.0);
        let c = row["n_blocks"].as_u64().unwrap_or(1);
        let rival = |name: &str| row["hit"][name].as_f64().map(|h| h * 100.0);
        let (s3, wt) = (rival("S3-FIFO"), rival("W-TinyLFU"));
        if loaded.as_ref().is_none_or(|(name, _, _)| *name != trace) {
            let path = work.join(format!("{}.oracleGeneral", trace.replace('/', "_")));
            match load(&path) {
                Ok((ids, end)) => loaded = Some((trace.clone(), ids, end)),
                Err(e) => {
                    eprintln!("{}: {e}", path.display());
                    continue;
                }
            }
        }
        let (_, requests, ids) = loaded.as_ref().expect("loaded above");
        let target = match (s3, wt) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let fair = s3.is_some() && wt.is_some() && c >= 100;
        let show = |h: Option<f64>| h.map_or("err".to_string(), |h| format!("{h:.2}"));
        let mut line = format!(
            "| {trace} | {}% | {c} | {} | {} |",
            fraction * 100.0,
            show(s3),
            show(wt)
        );
        for (variant, tally) in variants.iter().zip(&mut tallies) {
            let (hits, switches) = run(variant, c, *ids, requests);
            let hit = hits as f64 * 100.0 / requests.len() as f64;
            line += &format!(" {hit:.2}");
            if let Some(target) = target {
                let margin = hit - target;
                line += &format!(" ({margin:+.2})");
                let won = margin >= -0.005;
                tally.cells += 1;
                tally.wins += usize::from(won);
                if fair {
                    tally.fair_cells += 1;
                    tally.fair_wins += usize::from(won);
                    if margin < tally.worst.0 {
                        tally.worst = (margin, format!("{trace} {}%", fraction * 100.0));
                    }
                }
            }
            if variant.starts_with("adaptive") || *variant == "u-choose" {
                line += &format!(" [{switches} switches]");
            }
            line += " |";
        }
        println!("{line}");
    }
    println!();
    for (variant, t) in variants.iter().zip(&tallies) {
        println!(
            "{variant}: >= max(S3-FIFO, W-TinyLFU) in {}/{} cells; where both rivals work: {}/{}, worst {:+.2} at {}",
            t.wins, t.cells, t.fair_wins, t.fair_cells, t.worst.0, t.worst.1
        );
    }
}

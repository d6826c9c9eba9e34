//! The data-driven trace suite: every trace in `testdata/policy-traces/` runs through every
//! policy, with the invariant walk after each access, and must meet the expectations its
//! header states:
//!
//!     # cache-blocks 8
//!     # expect all hits == 32
//!     # expect lru hits >= 3
//!
//! Policies: `lru`, `arc` (the default), `arc-openzfs`, `arc-paper`; `all` means each.

use std::fs;
use std::path::{Path, PathBuf};

use larch_policy::{Arc, ArcConfig, Lru, Policy};
use larch_sim::{Format, ReplayConfig, Replayer, TraceReader};

const BLOCK: u64 = 4096;
const POLICIES: [&str; 4] = ["lru", "arc", "arc-openzfs", "arc-paper"];

fn make(name: &str, blocks: u64) -> Box<dyn Policy> {
    let bytes = blocks * BLOCK;
    match name {
        "lru" => Box::new(Lru::new(bytes)),
        "arc" => Box::new(Arc::new(ArcConfig::fixed(bytes)).unwrap()),
        "arc-openzfs" => Box::new(Arc::new(ArcConfig::openzfs_fixed(bytes)).unwrap()),
        "arc-paper" => Box::new(Arc::new(ArcConfig::paper(bytes)).unwrap()),
        other => panic!("unknown policy {other}"),
    }
}

struct Expectation {
    policy: String,
    op: String,
    hits: u64,
}

fn header(path: &Path) -> (u64, Vec<Expectation>) {
    let text = fs::read_to_string(path).unwrap();
    let mut cache_blocks = None;
    let mut expectations = Vec::new();
    for line in text.lines().filter_map(|l| l.strip_prefix("# ")) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["cache-blocks", n] => cache_blocks = Some(n.parse().unwrap()),
            ["expect", policy, "hits", op, value] => expectations.push(Expectation {
                policy: policy.to_string(),
                op: op.to_string(),
                hits: value.parse().unwrap(),
            }),
            _ => {}
        }
    }
    let cache_blocks =
        cache_blocks.unwrap_or_else(|| panic!("{}: no cache-blocks", path.display()));
    assert!(
        !expectations.is_empty(),
        "{}: no expectations",
        path.display()
    );
    (cache_blocks, expectations)
}

fn hits(path: &Path, policy: &mut dyn Policy) -> u64 {
    let reader = TraceReader::open(path, Some(Format::Text)).unwrap();
    let cfg = ReplayConfig {
        check_every_accesses: 1,
        ..ReplayConfig::new(BLOCK as u32)
    };
    let mut replayer = Replayer::new(policy, cfg);
    for record in reader {
        replayer.record(&record.unwrap()).unwrap();
    }
    replayer.counts().hits
}

#[test]
fn every_policy_meets_every_trace_expectation() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/policy-traces");
    let mut traces: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "trace"))
        .collect();
    traces.sort();
    assert!(
        traces.len() >= 4,
        "trace suite missing from {}",
        dir.display()
    );
    let mut failures = Vec::new();
    for path in &traces {
        let (cache_blocks, expectations) = header(path);
        for name in POLICIES {
            let got = hits(path, make(name, cache_blocks).as_mut());
            for e in expectations
                .iter()
                .filter(|e| e.policy == name || e.policy == "all")
            {
                let ok = match e.op.as_str() {
                    "==" => got == e.hits,
                    ">=" => got >= e.hits,
                    "<=" => got <= e.hits,
                    other => panic!("unknown comparison {other}"),
                };
                if !ok {
                    failures.push(format!(
                        "{} {name}: {got} hits, expected {} {}",
                        path.file_name().unwrap().to_string_lossy(),
                        e.op,
                        e.hits
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

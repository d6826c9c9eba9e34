//! `larch sim replay` and `larch demo` as a user runs them: the real binary, real files in
//! every trace format, compressed and not, and bad input.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

fn larch(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_larch"))
        .args(args)
        .output()
        .expect("run larch")
}

fn scratch_dir() -> PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "larch-sim-cli-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write_file(path: &Path, bytes: &[u8]) {
    std::fs::File::create(path)
        .unwrap()
        .write_all(bytes)
        .unwrap();
}

fn replay_json(trace: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "sim",
        "replay",
        "--trace",
        trace.to_str().unwrap(),
        "--json",
    ];
    args.extend_from_slice(extra);
    let out = larch(&args);
    assert!(
        out.status.success(),
        "larch {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object on stdout")
}

/// Blocks 0..8 read five times: 40 requests, 32 hits in any policy with room for 8 blocks.
fn text_trace() -> String {
    let mut text = String::from("# five rounds over eight blocks\n");
    for _ in 0..5 {
        for b in 0..8 {
            text.push_str(&format!("{b}\n"));
        }
    }
    text
}

#[test]
fn replays_a_text_trace_with_every_policy() {
    let dir = scratch_dir();
    let trace = dir.join("rounds.trace");
    write_file(&trace, text_trace().as_bytes());
    for policy in ["arc", "arc-openzfs", "arc-paper", "lru"] {
        let v = replay_json(&trace, &["--cache-size", "32K", "--policy", policy]);
        assert_eq!(v["policy"], policy);
        assert_eq!(v["format"], "text");
        assert_eq!(v["requests"], 40);
        assert_eq!(v["hits"], 32);
        assert_eq!(v["cache_size_bytes"], 32768);
        assert!((v["hit_ratio"].as_f64().unwrap() - 0.8).abs() < 1e-9);
    }
    // Half the room: LRU thrashes on the loop.
    let v = replay_json(&trace, &["--cache-size", "16K", "--policy", "lru"]);
    assert_eq!(v["hits"], 0);
}

#[test]
fn reads_zstd_and_gzip_compressed_traces() {
    let dir = scratch_dir();
    let zst = dir.join("rounds.trace.zst");
    write_file(&zst, &zstd::encode_all(text_trace().as_bytes(), 3).unwrap());
    let gz = dir.join("rounds.trace.gz");
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(text_trace().as_bytes()).unwrap();
    write_file(&gz, &encoder.finish().unwrap());
    // A compressed file without a telling name: the content decides.
    let anonymous = dir.join("blob");
    write_file(
        &anonymous,
        &zstd::encode_all(text_trace().as_bytes(), 3).unwrap(),
    );
    for path in [&zst, &gz, &anonymous] {
        let v = replay_json(path, &["--cache-size", "32K"]);
        assert_eq!(
            (v["requests"].as_u64(), v["hits"].as_u64()),
            (Some(40), Some(32)),
            "{path:?}"
        );
    }
}

#[test]
fn lis_lines_expand_into_512_byte_pages() {
    let dir = scratch_dir();
    let trace = dir.join("paper.lis");
    // 4 pages from 100, then 2 pages from 102 (both hit), then 1 new page.
    write_file(&trace, b"100 4 0 0\n102 2 0 1\n500 1 0 2\n");
    let v = replay_json(&trace, &["--cache-size", "64K"]);
    assert_eq!(v["format"], "lis");
    assert_eq!(v["block_size_bytes"], 512);
    assert_eq!(v["records"], 3);
    assert_eq!(v["requests"], 7);
    assert_eq!(v["hits"], 2);
    // 4K blocks: pages 100..104 are in block 12, 102..104 too, 500 in block 62.
    let v = replay_json(&trace, &["--cache-size", "64K", "--block-size", "4K"]);
    assert_eq!(
        (v["requests"].as_u64(), v["hits"].as_u64()),
        (Some(3), Some(1))
    );
}

#[test]
fn csv_traces_with_and_without_a_header() {
    let dir = scratch_dir();
    let plain = dir.join("plain.csv");
    write_file(&plain, b"1000,0,8192,R\n2000,4096,4096,W\n3000,0,4096,R\n");
    let v = replay_json(&plain, &["--cache-size", "1M"]);
    assert_eq!(v["format"], "csv");
    assert_eq!(v["requests"], 4);
    assert_eq!(v["hits"], 2);
    assert_eq!(v["write_records"], 1);
    let v = replay_json(&plain, &["--cache-size", "1M", "--writes", "skip"]);
    assert_eq!(
        (v["requests"].as_u64(), v["hits"].as_u64()),
        (Some(3), Some(1))
    );

    let named = dir.join("named.csv");
    write_file(
        &named,
        b"version,time,op,size,lbn\n1,100,28,4096,8\n1,200,2a,4096,8\n",
    );
    let v = replay_json(&named, &["--cache-size", "1M"]);
    assert_eq!(
        (v["requests"].as_u64(), v["hits"].as_u64()),
        (Some(2), Some(1))
    );
}

#[test]
fn oracle_general_binary_traces() {
    let dir = scratch_dir();
    let trace = dir.join("objects.oracleGeneral");
    let mut bytes = Vec::new();
    for (time, id) in [(1u32, 7u64), (2, 9), (3, 7)] {
        bytes.extend_from_slice(&time.to_le_bytes());
        bytes.extend_from_slice(&id.to_le_bytes());
        bytes.extend_from_slice(&16384u32.to_le_bytes());
        bytes.extend_from_slice(&(-1i64).to_le_bytes());
    }
    write_file(&trace, &bytes);
    let v = replay_json(
        &trace,
        &["--cache-size", "1M", "--format", "oracle-general"],
    );
    assert_eq!(v["format"], "oracle-general");
    assert_eq!(
        (v["requests"].as_u64(), v["hits"].as_u64()),
        (Some(3), Some(1))
    );
    assert_eq!(v["hit_bytes"], 16384);
}

#[test]
fn malformed_lines_name_file_and_line() {
    let dir = scratch_dir();
    let trace = dir.join("bad.trace");
    write_file(&trace, b"1\n2\nthree\n4\n");
    let path = trace.to_str().unwrap();
    let out = larch(&["sim", "replay", "--trace", path, "--cache-size", "1M"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("{path}:3:")), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let v = replay_json(&trace, &["--cache-size", "1M", "--skip-bad"]);
    assert_eq!(
        (v["requests"].as_u64(), v["bad_records"].as_u64()),
        (Some(3), Some(1))
    );
}

#[test]
fn bad_arguments_are_clear_errors() {
    let dir = scratch_dir();
    let trace = dir.join("ok.trace");
    write_file(&trace, b"1\n");
    let path = trace.to_str().unwrap();
    for (args, needle) in [
        (vec!["--cache-size", "0"], "greater than 0"),
        (vec!["--cache-size", "12Q"], "invalid size"),
        (
            vec!["--cache-size", "1M", "--format", "nope"],
            "unknown trace format",
        ),
        (
            vec!["--cache-size", "1M", "--block-size", "0"],
            "block size",
        ),
    ] {
        let mut all = vec!["sim", "replay", "--trace", path];
        all.extend(args.iter().copied());
        let out = larch(&all);
        assert!(!out.status.success(), "{all:?} should fail");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(needle), "{all:?}: {stderr}");
    }
    let out = larch(&[
        "sim",
        "replay",
        "--trace",
        "/nonexistent/trace",
        "--cache-size",
        "1M",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/trace"));
}

#[test]
fn demo_shows_the_arc_surviving_a_scan() {
    let out = larch(&[
        "demo",
        "--blocks",
        "20000",
        "--cache-blocks",
        "2000",
        "--reads",
        "100000",
    ]);
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let ratios = |policy: &str| -> Vec<f64> {
        let line = stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(policy))
            .unwrap_or_else(|| panic!("no {policy} line in {stdout}"));
        line.split_whitespace()
            .skip(1)
            .map(|f| f.trim_end_matches('%').parse().unwrap())
            .collect()
    };
    let (arc, lru) = (ratios("arc"), ratios("lru"));
    // Columns: before, during, just after, after the scan.
    assert!(
        arc[2] > lru[2] + 5.0,
        "ARC {arc:?} vs LRU {lru:?} right after the scan"
    );
    assert!(
        arc[0] >= lru[0],
        "ARC {arc:?} vs LRU {lru:?} before the scan"
    );
}

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

/// Runs larch, which must succeed and print one JSON object.
fn larch_json(args: &[&str]) -> serde_json::Value {
    let out = larch(args);
    assert!(
        out.status.success(),
        "larch {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object on stdout")
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
    larch_json(&args)
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

/// `larch sim run` as a user runs it: a preset with flags, a configuration file, its
/// outputs (JSON and a report page), and bad input refused with the field named.
#[test]
fn sim_run_writes_its_outputs_and_refuses_what_cannot_run() {
    let dir = scratch_dir();
    let json = dir.join("run.json");
    let html = dir.join("run.html");
    let out = larch(&[
        "sim",
        "run",
        "--preset",
        "small",
        "--duration",
        "20s",
        "--switch",
        "off@10s",
        "--quiet",
        "-o",
        json.to_str().unwrap(),
        "--html",
        html.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for word in [
        "steady",
        // The run is shorter than a minute: its first window says how long it is.
        "first 20 s",
        "warm-up",
        "header DRAM",
        "ADS / (ARC + L2ARC)",
    ] {
        assert!(text.contains(word), "{word:?} not in the summary:\n{text}");
    }
    let run: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(run["kind"], "simulation");
    assert_eq!(run["times"].as_array().unwrap().len(), 20);
    let reads = run["series"]["volume/vol0/read_ops"].as_array().unwrap();
    assert!(reads.iter().all(|v| v.as_f64().unwrap() > 0.0));
    assert_eq!(run["events"][0]["text"], "l2arc_enabled=0");
    assert!(run["heatmaps"]["frontend/vol0/read_backing"].is_array());
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("window.LARCH_STATIC = {"));
    assert!(
        !page.contains("src=\"/"),
        "the report links a file it should hold"
    );

    // A configuration file, overridden by a flag.
    let toml = dir.join("pool.toml");
    write_file(
        &toml,
        b"name = \"mine\"\nduration = \"5s\"\narc = \"256M\"\ncaches = [\"2xssd:capacity=1G\"]\n\
          [workload]\npattern = \"zipf:0.8\"\nads = \"2G\"\n[clients]\nthreads = 8\n\
          [tunables]\nl2arc_write_max = \"16M\"\n",
    );
    let out = larch(&[
        "sim",
        "run",
        "--config",
        toml.to_str().unwrap(),
        "--threads",
        "4",
        "--quiet",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(summary["steady"]["iops"].as_f64().unwrap() > 0.0);

    // Bad input: exit 2, the field named, nothing written.
    let bad_trace = dir.join("bad.csv");
    write_file(
        &bad_trace,
        b"time,offset,size,op\n1,0,4096,R\n2,zero,4096,R\n",
    );
    let trace_arg = format!("trace:{}", bad_trace.display());
    let bad_toml = dir.join("bad.toml");
    write_file(&bad_toml, b"arcc = \"1G\"\n");
    for (args, words) in [
        (vec!["--preset", "seed999"], vec!["--preset", "seed999"]),
        (vec!["--arc", "lots"], vec!["--arc"]),
        (vec!["--ads", "1024T"], vec!["workload.ads"]),
        (vec!["--arc", "2T", "--memory", "1T"], vec!["arc", "memory"]),
        (vec!["--cache", "hdx"], vec!["caches[0]", "hdx"]),
        (vec!["--primary", "8xhdd:raidz9"], vec!["primary"]),
        (
            vec!["--set", "l2arc_write_max=fast"],
            vec!["--set", "l2arc_write_max"],
        ),
        (vec!["--rate=-5"], vec!["clients.rate"]),
        (vec!["--rate", "0"], vec!["clients.rate"]),
        (vec!["--step", "3 weeks"], vec!["--step"]),
        (
            vec!["--config", bad_toml.to_str().unwrap()],
            vec!["bad.toml", "arcc"],
        ),
        (
            vec!["--workload", trace_arg.as_str()],
            vec!["bad.csv", ":3"],
        ),
    ] {
        let mut all = vec!["sim", "run", "--quiet", "--duration", "5s"];
        all.extend(args.iter().copied());
        let out = larch(&all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        for w in words {
            assert!(err.contains(w), "{args:?}: {w:?} not in {err:?}");
        }
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `larch sim run` of a trace says how far the replay got, and names the record a run
/// ended before: here one 31 years ahead of the others, which holds back the rest.
#[test]
fn sim_run_names_the_trace_record_it_ended_before() {
    let dir = scratch_dir();
    let trace = dir.join("far.csv");
    write_file(
        &trace,
        b"time,offset,size,op\n0,0,8192,R\n1000000,8192,8192,R\n\
          1000000000000000,16384,8192,R\n2000000,24576,8192,R\n",
    );
    let workload = format!("trace:{}", trace.display());
    let out = larch(&[
        "sim",
        "run",
        "--workload",
        &workload,
        "--duration",
        "10s",
        "--quiet",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("2 records replayed, to line 3; the run ended before line 4"),
        "{text}"
    );
    // The workload line names the trace's own clock, not the preset's clients.
    assert!(text.contains(", on its own clock\n"), "{text}");
    assert!(!text.contains("closed-loop"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A trace runs at full size and from cold, in `larch sim run` and `larch size` alike:
/// `--scale` and `--prewarm` are refused for one, a preset's or file's prewarming is
/// dropped, and `larch size` does not scale it down on its own.
#[test]
fn a_trace_runs_at_full_size_and_cold() {
    let dir = scratch_dir();
    // 2000 blocks read once each, untimed: a cold cache without prefetch hits none of
    // them, one prewarmed with the first blocks of the volume would.
    let trace = dir.join("once.csv");
    let mut text = String::from("offset,size,op\n");
    for b in 0..2000u64 {
        text += &format!("{},8192,R\n", b * 8192);
    }
    write_file(&trace, text.as_bytes());
    let workload = format!("trace:{}", trace.display());
    for (args, words) in [
        (vec!["sim", "run", "--scale", "2"], vec!["scale", "trace"]),
        (vec!["sim", "run", "--prewarm"], vec!["prewarm", "trace"]),
        (vec!["size", "--scale", "2"], vec!["scale", "trace"]),
    ] {
        let mut all = args.clone();
        all.extend(["--workload", &workload, "--quiet"]);
        let out = larch(&all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        for w in words {
            assert!(err.contains(w), "{args:?}: {w:?} not in {err:?}");
        }
    }

    let toml = dir.join("warm.toml");
    write_file(&toml, b"prewarm = true\n");
    let summary = larch_json(&[
        "sim",
        "run",
        "--config",
        toml.to_str().unwrap(),
        "--workload",
        &workload,
        "--block",
        "8K",
        "--set",
        "zfs_prefetch_disable=1",
        "--quiet",
        "--json",
    ]);
    assert_eq!(summary["requests"], 2000, "{summary}");
    assert_eq!(summary["trace"]["ended"], true, "{summary}");
    assert_eq!(summary["trace"]["timed"], false, "{summary}");
    assert_eq!(summary["first_minute"]["arc_hit_ratio"], 0.0, "{summary}");

    // An active data set of 9 GiB scaled to 1/2 before; a trace stays whole.
    let out = larch(&[
        "size",
        "--workload",
        &workload,
        "--ads",
        "9G",
        "--block",
        "8K",
        "--l2-sizes",
        "0,1G",
        "--device-counts",
        "1",
        "--quiet",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for words in [
        "simulated at full size (a trace does not scale)",
        "each row replays the trace from cold",
    ] {
        assert!(text.contains(words), "{words:?} not in:\n{text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A CSV trace without a time column has no clock: `larch advise` reports no rates for it
/// (it counted a second per record as if the trace said so) and says it is untimed.
#[test]
fn advise_reports_no_rates_for_an_untimed_trace() {
    let dir = scratch_dir();
    let trace = dir.join("untimed.csv");
    let timed = loop_trace(2048, 20);
    let mut text = String::from("offset,size,op\n");
    for line in timed.lines().skip(1) {
        let (_, rest) = line.split_once(',').unwrap();
        text += rest;
        text += "\n";
    }
    write_file(&trace, text.as_bytes());
    let a = advise_json(&trace, &["--arc", "8M", "--l2", "24M"]);
    assert!(a["too_young"].is_null(), "{a}");
    assert_eq!(a["today"]["read_iops"], 0.0, "{}", a["today"]);
    assert_eq!(a["today"]["miss_bytes_per_s"], 0.0, "{}", a["today"]);
    assert!(a["asked"]["warm_s"].is_null(), "{}", a["asked"]);
    assert!(
        a["what_if"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["warm_s"].is_null())
    );
    assert!(
        a["lines"][0].as_str().unwrap().starts_with("untimed trace"),
        "{a}"
    );
    // The curves are the same as the timed trace's: an ARC that holds the loop hits.
    assert!(hit(&a["curves"]["arc"], 32 << 20) > 0.9, "{}", a["curves"]);
    let out = larch(&["advise", "--trace", trace.to_str().unwrap(), "--arc", "8M"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("- untimed trace"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `larch size`: a table of candidates simulated, the cold run, and advice; bad input
/// refused.
#[test]
fn size_simulates_a_table_of_candidates_and_advises() {
    let out = larch(&[
        "size",
        "--preset",
        "small",
        "--l2-sizes",
        "0,1G,3G",
        "--device-counts",
        "1,2",
        "--measure",
        "10s",
        "--warm-for",
        "5m",
        "--quiet",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = report["candidates"].as_array().unwrap();
    // None, then 1G, 3G and the preset's own 4G on 1 and 2 devices (the preset's single
    // device is among the counts).
    assert_eq!(rows.len(), 7, "{}", rows.len());
    let iops = |l2: u64, n: u64| {
        rows.iter()
            .find(|r| r["l2_bytes"] == l2 && r["devices"] == n)
            .unwrap()["steady"]["iops"]
            .as_f64()
            .unwrap()
    };
    let g = 1u64 << 30;
    assert!(iops(0, 0) > 0.0);
    // The small preset's 3 GiB data set beyond a 512 MiB ARC: a 3 GiB L2ARC holds it all.
    assert!(iops(3 * g, 2) > 2.0 * iops(0, 0), "{rows:?}");
    assert!(!report["advice"].as_array().unwrap().is_empty());
    assert!(report["cold_run"]["l2_bytes"].as_u64().unwrap() > 0);

    let text = larch(&[
        "size",
        "--preset",
        "small",
        "--l2-sizes",
        "0,2G",
        "--device-counts",
        "1",
        "--measure",
        "5s",
        "--warm-for",
        "2m",
        "--quiet",
    ]);
    assert!(text.status.success());
    let text = String::from_utf8_lossy(&text.stdout);
    for word in ["ADS/cache", "L2bw/pri", "from cold", "advice"] {
        assert!(text.contains(word), "{word:?} not in:\n{text}");
    }
    for (args, word) in [
        (vec!["--device-counts", "0"], "--device-counts"),
        (vec!["--l2-sizes", "lots"], "--l2-sizes"),
        (vec!["--measure", "soon"], "--measure"),
    ] {
        let mut all = vec!["size", "--preset", "small", "--quiet"];
        all.extend(args.iter().copied());
        let out = larch(&all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(word), "{args:?}: {err}");
    }
}

/// A CSV trace (µs, bytes): `rounds` passes over `blocks` 8K blocks in order, 1 ms apart.
fn loop_trace(blocks: u64, rounds: u64) -> String {
    let mut text = String::from("time,offset,size,op\n");
    let mut t = 0u64;
    for _ in 0..rounds {
        for b in 0..blocks {
            text.push_str(&format!("{t},{},8192,R\n", b * 8192));
            t += 1000;
        }
    }
    text
}

fn advise_json(trace: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["advise", "--trace", trace.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    larch_json(&args)
}

fn hit(curve: &serde_json::Value, size: u64) -> f64 {
    curve
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p[0].as_u64() == Some(size))
        .unwrap_or_else(|| panic!("no point at {size}: {curve}"))[1]
        .as_f64()
        .unwrap()
}

#[test]
fn advise_reads_a_trace_draws_its_curves_and_sizes_an_l2arc() {
    const M: u64 = 1 << 20;
    let dir = scratch_dir();
    let trace = dir.join("loop.csv");
    // 2048 blocks of 8K: a 16 MiB loop, 20 times. An LRU (or ARC) smaller than the loop
    // hits nothing; one that holds it hits every round but the first.
    write_file(&trace, loop_trace(2048, 20).as_bytes());
    let a = advise_json(&trace, &["--arc", "8M", "--l2", "24M"]);
    let c = &a["curves"];
    assert!(a["too_young"].is_null(), "{a}");
    assert!(hit(&c["lru"], 8 * M) < 0.05, "{c}");
    assert!(hit(&c["lru"], 32 * M) > 0.9, "{c}");
    assert!(hit(&c["arc"], 4 * M) < 0.1, "{c}");
    assert!(hit(&c["arc"], 32 * M) > 0.9, "{c}");
    let hour = c["working_set"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w[0] == 3600)
        .unwrap()[1]
        .as_f64()
        .unwrap();
    assert!((12.0 * M as f64..20.0 * M as f64).contains(&hour), "{hour}");
    assert_eq!(c["write_share"], 0.0);
    assert!(c["sequential_share"].as_f64().unwrap() > 0.9, "{c}");
    // ARC 8M + L2ARC 24M holds the loop: the L2ARC serves nearly every read.
    let asked = &a["asked"];
    assert!(asked["l2_hit_ratio"].as_f64().unwrap() > 0.85, "{asked}");
    assert!(asked["misses_served"].as_f64().unwrap() > 0.85, "{asked}");
    assert_eq!(asked["l2_index_bytes"], 24 * M / 8192 * 30);
    let lines = a["lines"].to_string();
    assert!(lines.contains("would serve"), "{lines}");
    assert!(lines.contains("sequential"), "{lines}");
    // The text answer says the same.
    let out = larch(&["advise", "--trace", trace.to_str().unwrap(), "--arc", "8M"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("(today)") && text.contains("would serve"),
        "{text}"
    );

    // Its records are 1 ms apart: 1000 reads a second, and no word of being untimed.
    let iops = a["today"]["read_iops"].as_f64().unwrap();
    assert!((990.0..=1010.0).contains(&iops), "{iops}");
    assert!(!lines.contains("untimed"), "{lines}");

    // Too short a trace says so instead of guessing.
    let short = dir.join("short.csv");
    write_file(&short, loop_trace(10, 2).as_bytes());
    let a = advise_json(&short, &["--arc", "8M"]);
    assert!(
        a["too_young"].as_str().unwrap().contains("too young"),
        "{a}"
    );
    assert!(a["lines"].as_array().unwrap().is_empty());

    // Bad input.
    let path = trace.to_str().unwrap();
    for (args, needle) in [
        (vec!["advise", "--trace", path], "--arc"),
        (vec!["advise", "--trace", path, "--arc", "12Q"], "--arc"),
        (
            vec!["advise", "--trace", path, "--arc", "0"],
            "out of range",
        ),
        (
            vec!["advise", "--trace", path, "--arc", "8M", "--l2", "9E"],
            "--l2",
        ),
        (
            vec![
                "advise", "--trace", path, "--arc", "8M", "--device", "floppy",
            ],
            "--device",
        ),
        (
            vec!["advise", "--trace", "/nonexistent/t.csv", "--arc", "8M"],
            "/nonexistent/t.csv",
        ),
        (
            vec!["advise", "--state-dir", "/nonexistent/pool"],
            "no running daemon",
        ),
    ] {
        let out = larch(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?} should fail");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
    let bad = dir.join("bad.csv");
    write_file(&bad, b"time,offset,size,op\n0,0,8192,R\n1000,zz,8192,R\n");
    let out = larch(&["advise", "--trace", bad.to_str().unwrap(), "--arc", "8M"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.csv"));
}

#[test]
fn sim_run_models_indirect_blocks_when_asked_and_takes_both_cache_properties() {
    let dir = scratch_dir();
    let run = |extra: &[&str]| -> serde_json::Value {
        let json = dir.join("metadata.json");
        let mut args = vec![
            "sim",
            "run",
            "--preset",
            "small",
            "--duration",
            "10s",
            "--quiet",
            "-o",
            json.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let out = larch(&args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap()
    };
    // The small preset is not a seed's ZFS pool: every block is data.
    let off = run(&[]);
    assert_eq!(off["summary"]["arcstats"]["demand_metadata_misses"], 0);
    let on = run(&["--metadata", "on"]);
    let m = &on["summary"]["arcstats"];
    assert!(m["demand_metadata_misses"].as_u64().unwrap() > 0, "{m}");
    assert!(m["metadata_size"].as_u64().unwrap() > 0, "{m}");
    // With primarycache=metadata the ARC keeps its indirect blocks and drops the data.
    let meta = run(&[
        "--metadata",
        "on",
        "--set",
        "primarycache=metadata",
        "--set",
        "secondarycache=metadata",
    ]);
    let m = &meta["summary"]["arcstats"];
    assert!(m["metadata_size"].as_u64().unwrap() > 0, "{m}");
    assert_eq!(m["l2_bufc_data_asize"], 0, "{m}");
    // Data is hit only when read again within the half second before it is dropped.
    let data_hit_ratio = |m: &serde_json::Value| {
        let hits = m["demand_data_hits"].as_f64().unwrap();
        hits / (hits + m["demand_data_misses"].as_f64().unwrap())
    };
    let all = data_hit_ratio(&on["summary"]["arcstats"]);
    assert!(
        data_hit_ratio(m) < all / 10.0,
        "{m}: against {all} with primarycache=all"
    );
    // 16 KiB indirect blocks (2009's): eight times as many blocks hold the pointers, and
    // more of the lookups miss.
    let small = run(&["--metadata", "on", "--set", "indblkshift=14"]);
    let m16 = &small["summary"]["arcstats"];
    let misses = |m: &serde_json::Value| m["demand_metadata_misses"].as_u64().unwrap();
    assert!(misses(m16) > misses(&on["summary"]["arcstats"]), "{m16}");
    // A larch object volume's block-map pages: dense pages of 1,024 pointers, read from
    // the store (the primary storage) before the blocks they point at.
    let pages = run(&["--metadata", "map-pages"]);
    let m = &pages["summary"]["arcstats"];
    let page_bytes = m["metadata_size"].as_u64().unwrap();
    assert!(page_bytes > 0 && page_bytes % 40_988 == 0, "{m}");
    assert!(
        misses(m) > 0 && m["indirect_reads"].as_u64().unwrap() > 0,
        "{m}"
    );
    for bad in [
        &["--metadata", "yes"][..],
        &["--set", "primarycache=some"][..],
        &["--set", "indblkshift=18"][..],
    ] {
        let mut args = vec!["sim", "run", "--preset", "small", "--duration", "1s"];
        args.extend_from_slice(bad);
        let out = larch(&args);
        assert!(!out.status.success(), "{bad:?} was taken");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("on, off or map-pages")
                || err.contains("all, metadata or none")
                || err.contains("indblkshift is 12 to 17"),
            "{err}"
        );
    }
}

//! larch's engine against foyer's `HybridCache` on the DRAM + disk lookup path.
//!
//! Both caches get the same DRAM capacity (64 MiB of 8 KiB blocks), the same disk cache
//! capacity (512 MiB, O_DIRECT, in a scratch directory), the same 2 GiB backing file read
//! with pread on a miss, the same key traces, and the same tokio runtime. Per run: a fresh
//! cache, one warm-up pass over the trace, a pause for background disk writers, then the
//! measured pass. A sample of lookups is checked against the backing file's bytes.
//!
//!   foyer-compare --oltp PATH [--work DIR] [--json PATH] [--zipf-len N] [--oltp-limit N]
//!                 [--concurrency 1,16] [--caches larch,foyer] [--traces oltp,zipf]
//!                 [--larch-set name=value,...]

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use foyer::{
    BlockEngineConfig, DeviceBuilder, FsDeviceBuilder, HybridCache, HybridCacheBuilder, Source,
};
use larch_engine::{BackingStore, Engine, LatencyModel, VolumeEntry, VolumeSpec};

const BLOCK: u64 = 8 << 10;
const DRAM_BYTES: u64 = 64 << 20;
const DISK_BYTES: u64 = 512 << 20;
const WORKING_SET_BYTES: u64 = 2 << 30;
const WS_BLOCKS: u64 = WORKING_SET_BYTES / BLOCK;
/// One lookup in this many has its bytes compared with the backing file.
const VERIFY_EVERY: usize = 997;
/// Pause between the warm-up and the measured pass, for both caches' disk writers.
const SETTLE: Duration = Duration::from_millis(1500);
const ZIPF_THETA: f64 = 0.9;
const ZIPF_SEED: u64 = 0x1a2c_7f00_5eed_0009;

const POOL_GUID: u64 = 0xf0e1_0001;
const DEVICE_GUID: u64 = 0xf0e1_0002;
const VOLUME_GUID: u64 = 0xf0e1_0003;

type Res<T> = Result<T, String>;

struct Options {
    oltp: PathBuf,
    work: PathBuf,
    json: PathBuf,
    zipf_len: usize,
    concurrency: Vec<usize>,
    caches: Vec<String>,
    traces: Vec<String>,
    larch_set: String,
    oltp_limit: usize,
}

fn usage() -> String {
    "usage: foyer-compare --oltp PATH [--work DIR] [--json PATH] [--zipf-len N] \
     [--oltp-limit N] [--concurrency 1,16] [--caches larch,foyer] \
     [--traces oltp,zipf] [--larch-set name=value,...]"
        .into()
}

fn parse_options() -> Res<Options> {
    let mut o = Options {
        oltp: PathBuf::from("../shared/traces/arc/OLTP.lis.zst"),
        work: std::env::temp_dir(),
        json: PathBuf::from("/tmp/foyer-results.json"),
        zipf_len: 1_000_000,
        concurrency: vec![1, 16],
        caches: vec!["larch".into(), "foyer".into()],
        traces: vec!["oltp".into(), "zipf".into()],
        larch_set: LARCH_TUNABLES.into(),
        oltp_limit: usize::MAX,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "-h" || flag == "--help" {
            return Err(usage());
        }
        let value = args
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{}", usage()))?;
        let list =
            |v: &str| -> Vec<String> { v.split(',').map(|s| s.trim().to_string()).collect() };
        match flag.as_str() {
            "--oltp" => o.oltp = PathBuf::from(value),
            "--work" => o.work = PathBuf::from(value),
            "--json" => o.json = PathBuf::from(value),
            "--zipf-len" => {
                o.zipf_len = value
                    .parse()
                    .map_err(|_| format!("--zipf-len: not a count: {value}"))?
            }
            "--concurrency" => {
                o.concurrency = list(&value)
                    .iter()
                    .map(|s| match s.parse::<usize>() {
                        Ok(n) if n > 0 => Ok(n),
                        _ => Err(format!("--concurrency: not a positive count: {s}")),
                    })
                    .collect::<Res<_>>()?
            }
            "--caches" => o.caches = list(&value),
            "--traces" => o.traces = list(&value),
            "--larch-set" => o.larch_set = value,
            "--oltp-limit" => {
                o.oltp_limit = match value.parse::<usize>() {
                    Ok(n) if n > 0 => n,
                    _ => return Err(format!("--oltp-limit: not a positive count: {value}")),
                }
            }
            _ => return Err(format!("unknown option {flag}\n{}", usage())),
        }
    }
    for c in &o.caches {
        if c != "larch" && c != "foyer" {
            return Err(format!("--caches: unknown cache {c} (larch, foyer)"));
        }
    }
    for t in &o.traces {
        if t != "oltp" && t != "zipf" {
            return Err(format!("--traces: unknown trace {t} (oltp, zipf)"));
        }
    }
    Ok(o)
}

// ---- data ---------------------------------------------------------------------------------

/// splitmix64: the generator for block contents and the Zipf trace.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Block `b`'s bytes in the backing file: pseudo-random, different in every block.
fn fill_block(b: u64, out: &mut [u8]) {
    let mut state = b.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ 0x5bd1_e995;
    for word in out.chunks_exact_mut(8) {
        state = mix(state);
        word.copy_from_slice(&state.to_le_bytes());
    }
}

/// Writes the 2 GiB backing file (every block filled, no holes).
fn make_backing(path: &Path) -> Res<()> {
    let mut f = File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let per_chunk = 1024u64; // 8 MiB per write
    let mut chunk = vec![0u8; (per_chunk * BLOCK) as usize];
    for first in (0..WS_BLOCKS).step_by(per_chunk as usize) {
        for (i, block) in chunk.chunks_exact_mut(BLOCK as usize).enumerate() {
            fill_block(first + i as u64, block);
        }
        f.write_all(&chunk)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    f.flush().map_err(|e| format!("{}: {e}", path.display()))
}

/// The ARC paper's OLTP trace: `start nblocks ignore req_no` per line, each line expanded
/// into `nblocks` requests, block numbers taken modulo the working set.
fn load_arc_trace(path: &Path) -> Res<Vec<u64>> {
    if !path.is_file() {
        return Err(format!("trace file not found: {}", path.display()));
    }
    let zstd_cli = Command::new("zstd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let keys = if zstd_cli {
        let mut child = Command::new("zstd")
            .arg("-dc")
            .arg(path)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("zstd: {e}"))?;
        let stdout = child.stdout.take().ok_or("zstd: no output")?;
        let parsed = parse_arc_lines(BufReader::new(stdout), path);
        let out = child.wait_with_output().map_err(|e| format!("zstd: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "zstd -dc {}: {}",
                path.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        parsed?
    } else {
        let f = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let dec =
            zstd::stream::read::Decoder::new(f).map_err(|e| format!("{}: {e}", path.display()))?;
        parse_arc_lines(BufReader::new(dec), path)?
    };
    if keys.is_empty() {
        return Err(format!("{}: no requests in the trace", path.display()));
    }
    Ok(keys)
}

fn parse_arc_lines(reader: impl BufRead, path: &Path) -> Res<Vec<u64>> {
    let mut keys = Vec::new();
    for (n, line) in reader.lines().enumerate() {
        let line = line.map_err(|e| format!("{}: line {}: {e}", path.display(), n + 1))?;
        let mut fields = line.split_whitespace();
        let Some(first) = fields.next() else { continue };
        let bad = || {
            format!(
                "{}: line {}: not `start nblocks ignore req`: {line:?}",
                path.display(),
                n + 1
            )
        };
        let start: u64 = first.parse().map_err(|_| bad())?;
        let count: u64 = fields.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
        if count > 1 << 20 {
            return Err(bad());
        }
        for i in 0..count {
            keys.push(start.wrapping_add(i) % WS_BLOCKS);
        }
    }
    Ok(keys)
}

/// `len` keys drawn from Zipf(theta) over the working set's blocks (rank 1 most popular),
/// by inverting the CDF; ranks are scattered over the block numbers by an odd multiplier
/// (a bijection modulo the power-of-two working set).
fn zipf_trace(len: usize, theta: f64, seed: u64) -> Vec<u64> {
    let n = WS_BLOCKS as usize;
    let mut cdf = Vec::with_capacity(n);
    let mut sum = 0.0f64;
    for rank in 1..=n {
        sum += 1.0 / (rank as f64).powf(theta);
        cdf.push(sum);
    }
    let mut state = seed;
    (0..len)
        .map(|_| {
            state = state.wrapping_add(1);
            let u = (mix(state ^ seed) >> 11) as f64 / (1u64 << 53) as f64 * sum;
            let rank = cdf.partition_point(|&c| c < u).min(n - 1) as u64;
            rank.wrapping_mul(0x9e37_79b9) % WS_BLOCKS
        })
        .collect()
}

// ---- the two caches -----------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq)]
enum Src {
    Dram,
    Disk,
    Miss,
    /// The cache does not say per lookup (larch: counted from its counters).
    Unknown,
}

struct Larch {
    engine: Arc<Engine>,
    vol: Arc<VolumeEntry>,
}

struct Foyer {
    cache: HybridCache<u64, Bytes>,
    backing: Arc<File>,
}

enum Cache {
    Larch(Larch),
    Foyer(Foyer),
}

/// The larch tunables set so the L2 feed keeps up with ARC evictions as well as it can
/// (documented in bench/foyer/README.md); `--larch-set` replaces them.
const LARCH_TUNABLES: &str = "l2arc_write_max=1G,l2arc_feed_min_ms=10";

impl Cache {
    fn name(&self) -> &'static str {
        match self {
            Cache::Larch(_) => "larch",
            Cache::Foyer(_) => "foyer",
        }
    }

    async fn open(which: &str, dir: &Path, backing: &Path, larch_set: &str) -> Res<Cache> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        if which == "larch" {
            let engine = Engine::new(DRAM_BYTES);
            for pair in larch_set.split(',').filter(|p| !p.trim().is_empty()) {
                let (name, value) = pair
                    .split_once('=')
                    .ok_or_else(|| format!("--larch-set: not name=value: {pair}"))?;
                larch_engine::tunables::set(&engine.tunables, name.trim(), value.trim())
                    .map_err(|e| format!("--larch-set {pair}: {e}"))?;
            }
            let store = BackingStore::open(backing, true, LatencyModel::default())
                .map_err(|e| format!("{}: {e}", backing.display()))?;
            let spec = VolumeSpec {
                read_only: true,
                ..VolumeSpec::new(VOLUME_GUID, BLOCK as u32)
            };
            let vol = engine
                .add_volume(spec, Arc::new(store))
                .map_err(|e| format!("larch volume: {e}"))?;
            let device = dir.join("larch-cache.img");
            let f = File::create(&device).map_err(|e| format!("{}: {e}", device.display()))?;
            f.set_len(DISK_BYTES)
                .map_err(|e| format!("{}: {e}", device.display()))?;
            drop(f);
            engine
                .add_cache_device(&device, POOL_GUID, DEVICE_GUID, true)
                .map_err(|e| format!("larch cache device: {e}"))?;
            Ok(Cache::Larch(Larch { engine, vol }))
        } else {
            let device = FsDeviceBuilder::new(dir.join("foyer"))
                .with_capacity(DISK_BYTES as usize)
                .with_direct(true)
                .build()
                .map_err(|e| format!("foyer device: {e}"))?;
            let cache: HybridCache<u64, Bytes> = HybridCacheBuilder::new()
                .with_name("bench")
                .memory(DRAM_BYTES as usize)
                .with_weighter(|_key: &u64, value: &Bytes| value.len())
                .storage()
                .with_engine_config(BlockEngineConfig::new(device))
                .build()
                .await
                .map_err(|e| format!("foyer: {e}"))?;
            let file = File::open(backing).map_err(|e| format!("{}: {e}", backing.display()))?;
            Ok(Cache::Foyer(Foyer {
                cache,
                backing: Arc::new(file),
            }))
        }
    }

    async fn lookup(&self, key: u64) -> Res<(Bytes, Src)> {
        match self {
            Cache::Larch(l) => l
                .engine
                .read_block(&l.vol, key, false)
                .await
                .map(|b| (b, Src::Unknown))
                .ok_or_else(|| format!("larch: backing store read of block {key} failed")),
            Cache::Foyer(f) => {
                let got = f
                    .cache
                    .get(&key)
                    .await
                    .map_err(|e| format!("foyer get {key}: {e}"))?;
                if let Some(entry) = got {
                    let src = match entry.source() {
                        Source::Memory => Src::Dram,
                        Source::Disk => Src::Disk,
                        Source::Outer => Src::Miss,
                    };
                    return Ok((entry.value().clone(), src));
                }
                // A miss: pread the backing file (on the blocking pool, as larch does) and
                // insert.
                let file = Arc::clone(&f.backing);
                let data = tokio::task::spawn_blocking(move || {
                    let mut buf = vec![0u8; BLOCK as usize];
                    file.read_exact_at(&mut buf, key * BLOCK).map(|()| buf)
                })
                .await
                .map_err(|e| format!("foyer miss task: {e}"))?
                .map_err(|e| format!("backing read of block {key}: {e}"))?;
                let data = Bytes::from(data);
                f.cache.insert(key, data.clone());
                Ok((data, Src::Miss))
            }
        }
    }

    /// Counters read around a pass: (l2 hits, backing reads, iohits, bytes written to
    /// disk, evicted bytes with a disk copy, evicted bytes eligible but without one).
    fn counters(&self) -> [u64; 6] {
        match self {
            Cache::Larch(l) => {
                let s = &l.engine.stats;
                let stats: std::collections::HashMap<String, u64> =
                    l.engine.arcstats().into_iter().collect();
                [
                    s.l2_hits.load(Ordering::Relaxed),
                    s.backing_reads.load(Ordering::Relaxed),
                    s.iohits.load(Ordering::Relaxed),
                    s.l2_write_bytes.load(Ordering::Relaxed),
                    stats.get("evict_l2_cached").copied().unwrap_or(0),
                    stats.get("evict_l2_eligible").copied().unwrap_or(0),
                ]
            }
            Cache::Foyer(f) => {
                let st = f.cache.statistics();
                [0, 0, 0, st.disk_write_bytes() as u64, 0, 0]
            }
        }
    }

    async fn settle(&self) {
        tokio::time::sleep(SETTLE).await;
        if let Cache::Foyer(f) = self {
            f.cache.storage().wait().await;
        }
    }

    /// A few of larch's arcstats at the end of a run (the feed's and the ARC's state).
    fn larch_stats(&self) -> serde_json::Value {
        let Cache::Larch(l) = self else {
            return serde_json::Value::Null;
        };
        let keep = [
            "size",
            "c",
            "l2_feeds",
            "l2_blocks",
            "l2_hdr_size",
            "l2_hdr_limit_skips",
            "l2_evicted",
            "l2_wasted_feed_bytes",
            "l2_write_bytes",
            "evict_l2_cached",
            "evict_l2_eligible",
            "evict_l2_ineligible",
            "l2_cksum_bad",
            "l2_io_error",
        ];
        let map: serde_json::Map<String, serde_json::Value> = l
            .engine
            .arcstats()
            .into_iter()
            .filter(|(k, _)| keep.contains(&k.as_str()))
            .map(|(k, v)| (k, v.into()))
            .collect();
        map.into()
    }

    async fn close(self) -> Res<String> {
        match self {
            Cache::Larch(l) => {
                let path = l.engine.l2_read_path();
                l.engine.shutdown();
                Ok(format!("L2 reads via {path}"))
            }
            Cache::Foyer(f) => {
                f.cache
                    .close()
                    .await
                    .map_err(|e| format!("foyer close: {e}"))?;
                Ok("psync io engine".into())
            }
        }
    }
}

// ---- a pass -------------------------------------------------------------------------------

struct Pass {
    lookups: u64,
    secs: f64,
    dram: u64,
    disk: u64,
    miss: u64,
    iohits: u64,
    lat_ns: Vec<u64>,
    verified: u64,
    disk_write_bytes: u64,
    evict_fed: u64,
    evict_unfed: u64,
}

async fn run_pass(
    cache: &Arc<Cache>,
    trace: &Arc<Vec<u64>>,
    tasks: usize,
    backing: &Arc<File>,
) -> Res<Pass> {
    let before = cache.counters();
    let next = Arc::new(AtomicUsize::new(0));
    let counts = Arc::new([
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
    ]);
    let start = Instant::now();
    let mut handles = Vec::with_capacity(tasks);
    for _ in 0..tasks {
        let (cache, trace, next, counts, backing) = (
            Arc::clone(cache),
            Arc::clone(trace),
            Arc::clone(&next),
            Arc::clone(&counts),
            Arc::clone(backing),
        );
        handles.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(trace.len() / tasks + 1);
            let mut verified = 0u64;
            let mut expect = vec![0u8; BLOCK as usize];
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&key) = trace.get(i) else { break };
                let t0 = Instant::now();
                let (bytes, src) = cache.lookup(key).await?;
                lat.push(t0.elapsed().as_nanos() as u64);
                let slot = match src {
                    Src::Dram => 0,
                    Src::Disk => 1,
                    Src::Miss => 2,
                    Src::Unknown => 3,
                };
                counts[slot].fetch_add(1, Ordering::Relaxed);
                if i % VERIFY_EVERY == 0 {
                    backing
                        .read_exact_at(&mut expect, key * BLOCK)
                        .map_err(|e| format!("verify read of block {key}: {e}"))?;
                    if bytes[..] != expect[..] {
                        return Err(format!(
                            "{}: block {key} returned {} bytes that differ from the backing file",
                            cache.name(),
                            bytes.len()
                        ));
                    }
                    verified += 1;
                }
            }
            Ok::<_, String>((lat, verified))
        }));
    }
    let mut lat_ns = Vec::with_capacity(trace.len());
    let mut verified = 0;
    for h in handles {
        let (lat, v) = h.await.map_err(|e| format!("lookup task: {e}"))??;
        lat_ns.extend(lat);
        verified += v;
    }
    let secs = start.elapsed().as_secs_f64();
    let after = cache.counters();
    let d = |i: usize| after[i].saturating_sub(before[i]);
    let lookups = lat_ns.len() as u64;
    let (dram, disk, miss) = if counts[3].load(Ordering::Relaxed) > 0 {
        // larch: disk hits and backing reads from its counters; the rest were served from
        // DRAM (including lookups that joined a read of the same block in flight).
        let (disk, miss) = (d(0), d(1));
        (lookups.saturating_sub(disk + miss), disk, miss)
    } else {
        (
            counts[0].load(Ordering::Relaxed),
            counts[1].load(Ordering::Relaxed),
            counts[2].load(Ordering::Relaxed),
        )
    };
    Ok(Pass {
        lookups,
        secs,
        dram,
        disk,
        miss,
        iohits: d(2),
        lat_ns,
        verified,
        disk_write_bytes: d(3),
        evict_fed: d(4),
        evict_unfed: d(5),
    })
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let at = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[at] as f64 / 1000.0
}

struct Row {
    cache: String,
    trace: String,
    tasks: usize,
    note: String,
    larch_stats: serde_json::Value,
    warm: Pass,
    measured: Pass,
}

async fn run_all(o: &Options) -> Res<Vec<Row>> {
    std::fs::create_dir_all(&o.work).map_err(|e| format!("{}: {e}", o.work.display()))?;
    let mut traces: Vec<(String, Arc<Vec<u64>>)> = Vec::new();
    for t in &o.traces {
        let keys = if t == "oltp" {
            let mut keys = load_arc_trace(&o.oltp)?;
            keys.truncate(o.oltp_limit);
            keys
        } else {
            zipf_trace(o.zipf_len, ZIPF_THETA, ZIPF_SEED)
        };
        let mut uniq = keys.clone();
        uniq.sort_unstable();
        uniq.dedup();
        eprintln!(
            "trace {t}: {} lookups, {} distinct 8 KiB blocks ({} MiB)",
            keys.len(),
            uniq.len(),
            (uniq.len() as u64 * BLOCK) >> 20
        );
        traces.push((t.clone(), Arc::new(keys)));
    }
    let backing_path = o.work.join("backing.img");
    let t0 = Instant::now();
    make_backing(&backing_path)?;
    eprintln!(
        "backing file {} ({} GiB) written in {:.1}s",
        backing_path.display(),
        WORKING_SET_BYTES >> 30,
        t0.elapsed().as_secs_f64()
    );
    let backing = Arc::new(
        File::open(&backing_path).map_err(|e| format!("{}: {e}", backing_path.display()))?,
    );
    let mut rows = Vec::new();
    for (tname, trace) in &traces {
        for &tasks in &o.concurrency {
            for which in &o.caches {
                let dir = o.work.join(format!("{which}-{tname}-{tasks}"));
                let _ = std::fs::remove_dir_all(&dir);
                let cache = Arc::new(Cache::open(which, &dir, &backing_path, &o.larch_set).await?);
                let monitor = if std::env::var_os("FC_DEBUG").is_some() {
                    if let Cache::Larch(l) = &*cache {
                        let engine = Arc::clone(&l.engine);
                        Some(std::thread::spawn(move || {
                            let t0 = Instant::now();
                            while Arc::strong_count(&engine) > 1 && t0.elapsed().as_secs() < 30 {
                                let s: std::collections::HashMap<String, u64> =
                                    engine.arcstats().into_iter().collect();
                                eprintln!(
                                    "{:.1}s feeds {} wrote {} MiB size {} MiB",
                                    t0.elapsed().as_secs_f64(),
                                    s["l2_feeds"],
                                    s["l2_write_bytes"] >> 20,
                                    s["size"] >> 20
                                );
                                std::thread::sleep(Duration::from_millis(500));
                            }
                        }))
                    } else {
                        None
                    }
                } else {
                    None
                };
                let warm = run_pass(&cache, trace, tasks, &backing).await?;
                cache.settle().await;
                let measured = run_pass(&cache, trace, tasks, &backing).await?;
                let larch_stats = cache.larch_stats();
                let cache =
                    Arc::try_unwrap(cache).map_err(|_| "cache still shared after the passes")?;
                let note = cache.close().await?;
                if let Some(m) = monitor {
                    let _ = m.join();
                }
                let _ = std::fs::remove_dir_all(&dir);
                eprintln!(
                    "{which} {tname} x{tasks}: warm-up {:.1}s, measured {:.1}s ({:.0} lookups/s)",
                    warm.secs,
                    measured.secs,
                    measured.lookups as f64 / measured.secs
                );
                rows.push(Row {
                    cache: which.clone(),
                    trace: tname.clone(),
                    tasks,
                    note,
                    larch_stats,
                    warm,
                    measured,
                });
            }
        }
    }
    let _ = std::fs::remove_file(&backing_path);
    Ok(rows)
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

fn report(rows: &mut [Row], o: &Options) -> Res<()> {
    println!(
        "| trace | tasks | cache | lookups/s | DRAM hit % | disk hit % | miss % | p50 µs | p99 µs | disk writes MiB | verified |"
    );
    println!("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut json_rows = Vec::new();
    for r in rows.iter_mut() {
        let m = &mut r.measured;
        m.lat_ns.sort_unstable();
        let rate = m.lookups as f64 / m.secs;
        let (p50, p99) = (percentile(&m.lat_ns, 0.50), percentile(&m.lat_ns, 0.99));
        println!(
            "| {} | {} | {} | {:.0} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {} |",
            r.trace,
            r.tasks,
            r.cache,
            rate,
            pct(m.dram, m.lookups),
            pct(m.disk, m.lookups),
            pct(m.miss, m.lookups),
            p50,
            p99,
            m.disk_write_bytes >> 20,
            m.verified + r.warm.verified
        );
        let mut row = serde_json::json!({
            "trace": r.trace,
            "tasks": r.tasks,
            "cache": r.cache,
            "lookups": m.lookups,
            "seconds": m.secs,
            "lookups_per_sec": rate,
            "dram_hit_pct": pct(m.dram, m.lookups),
            "disk_hit_pct": pct(m.disk, m.lookups),
            "miss_pct": pct(m.miss, m.lookups),
            "p50_us": p50,
            "p99_us": p99,
            "disk_write_bytes": m.disk_write_bytes,
            "verified_lookups": m.verified + r.warm.verified,
            "warmup_seconds": r.warm.secs,
            "warmup_lookups_per_sec": r.warm.lookups as f64 / r.warm.secs,
            "warmup_miss_pct": pct(r.warm.miss, r.warm.lookups),
            "note": r.note,
        });
        if r.cache == "larch" {
            row["iohits"] = m.iohits.into();
            row["evicted_bytes_with_disk_copy"] = m.evict_fed.into();
            row["evicted_bytes_eligible_without_copy"] = m.evict_unfed.into();
            row["arcstats_at_end"] = r.larch_stats.clone();
        }
        json_rows.push(row);
    }
    let doc = serde_json::json!({
        "block_bytes": BLOCK,
        "dram_bytes": DRAM_BYTES,
        "disk_bytes": DISK_BYTES,
        "working_set_bytes": WORKING_SET_BYTES,
        "zipf_theta": ZIPF_THETA,
        "zipf_seed": ZIPF_SEED,
        "zipf_len": o.zipf_len,
        "oltp_trace": o.oltp.display().to_string(),
        "oltp_limit": if o.oltp_limit == usize::MAX { serde_json::Value::Null } else { o.oltp_limit.into() },
        "verify_every": VERIFY_EVERY,
        "larch_tunables": o.larch_set,
        "foyer_version": "0.22.6",
        "runs": json_rows,
    });
    let text = serde_json::to_string_pretty(&doc).map_err(|e| format!("json: {e}"))?;
    std::fs::write(&o.json, text + "\n").map_err(|e| format!("{}: {e}", o.json.display()))?;
    eprintln!("JSON written to {}", o.json.display());
    Ok(())
}

fn main() {
    let result = parse_options().and_then(|o| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("tokio runtime: {e}"))?;
        let mut rows = runtime.block_on(run_all(&o))?;
        report(&mut rows, &o)
    });
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arc_lines_expand_and_wrap() {
        let text = "5 2 0 1\n\n262143 2 0 2\n";
        let keys = parse_arc_lines(text.as_bytes(), Path::new("t")).unwrap();
        assert_eq!(keys, vec![5, 6, 262_143, 0]);
        assert!(parse_arc_lines("x 1 0 0\n".as_bytes(), Path::new("t")).is_err());
        assert!(parse_arc_lines("7\n".as_bytes(), Path::new("t")).is_err());
    }

    #[test]
    fn zipf_is_skewed_and_in_range() {
        let keys = zipf_trace(100_000, 0.9, 1);
        assert!(keys.iter().all(|&k| k < WS_BLOCKS));
        let top = keys.iter().filter(|&&k| k == 0).count();
        assert!(top > 1000, "rank 1 drawn {top} times");
        assert_eq!(zipf_trace(1000, 0.9, 1), zipf_trace(1000, 0.9, 1));
    }
}

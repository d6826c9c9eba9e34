//! `larch sim`: the simulator's command line. `larch sim replay` streams a block trace
//! through a policy and reports hit ratios (and, for the ARC, its arcstats).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::bail;
use larch_policy::{Arc, ArcConfig, ArcPolicy, Lru, Policy};
use larch_sim::{Format, Record, ReplayConfig, Replayer, TraceError, TraceReader, WriteMode};
use serde_json::json;

use larch_engine::units::{format_size, parse_size};

/// `larch sim` subcommands.
#[derive(clap::Subcommand)]
pub enum SimCommand {
    /// Replay a block trace through a policy and report its hit ratio.
    ///
    /// Formats (detected from the name or content, or chosen with --format): text (one
    /// block number per line), lis (the ARC paper's "start count x y" lines of 512-byte
    /// pages), csv (timestamp,offset,size,op; or a header row naming the columns; MSR
    /// Cambridge and SNIA Tencent layouts are recognised), oracle-general (libCacheSim
    /// binary), vscsi (CloudPhysics binary). Any of them may be zstd or gzip compressed.
    Replay(ReplayArgs),
    /// Simulate a pool in virtual time: the daemon's ARC and L2 feed against models of
    /// disks, SSDs, NVMe and object stores, with modelled clients or a trace.
    ///
    /// Start from a preset that reproduces a seed's setup (--preset seed000), a TOML file
    /// (--config) or flags. Prints a summary (warm-up times, steady IOPS and latency, hit
    /// ratios, wasted feed, header DRAM) and writes the series and heat maps of the
    /// Analytics page as JSON (-o) or as a page to open in a browser (--html).
    /// docs/simulator.md has the models, the presets and what the seeds give.
    Run(Box<crate::sim_run::RunArgs>),
}

/// Replacement policies `larch sim replay` can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PolicyName {
    /// The ARC as larch runs it: OpenZFS 2.2+ with the paper's ghost sizing.
    Arc,
    /// The ARC balanced exactly as OpenZFS 2.2+ does.
    ArcOpenzfs,
    /// The ARC of the FAST'03 paper, for validation.
    ArcPaper,
    /// Least recently used.
    Lru,
    /// larch's refinements of the ARC (`arc` with MFU marks and MFU filled while the ARC
    /// has room; docs/arc.md, "The larch policy").
    Larch,
}

/// Arguments of `larch sim replay`.
#[derive(clap::Args)]
pub struct ReplayArgs {
    /// The trace file.
    #[arg(long, value_name = "FILE")]
    pub trace: PathBuf,
    /// Cache size in bytes, with an optional K/M/G/T suffix (binary: 16M = 16 MiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub cache_size: u64,
    /// Replacement policy.
    #[arg(long, value_enum, default_value = "arc")]
    pub policy: PolicyName,
    /// Block size: byte ranges are split into blocks of this size, and each block is one
    /// request. Default: 512 for lis traces (the paper's pages), 4K otherwise; 512 to 16M.
    #[arg(long, value_name = "B", value_parser = parse_block_size)]
    pub block_size: Option<u32>,
    /// Trace format (default: detected).
    #[arg(long, value_parser = parse_format)]
    pub format: Option<Format>,
    /// What write records do: access (write-allocate, the default), skip, or invalidate.
    #[arg(long, default_value = "access", value_parser = parse_write_mode)]
    pub writes: WriteMode,
    /// Skip malformed records (counted in the report) instead of stopping at the first.
    #[arg(long)]
    pub skip_bad: bool,
    /// Stop after this many records.
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Do not print progress on standard error.
    #[arg(long)]
    pub no_progress: bool,
}

fn parse_block_size(text: &str) -> Result<u32, String> {
    let bytes = parse_size(text).map_err(|e| e.to_string())?;
    // Not under a sector, as `larch advise`: a 64M cache of 1-byte blocks would take
    // 64M block headers (and their ghosts), gigabytes, to replay.
    if !(512..=16 << 20).contains(&bytes) {
        return Err(format!(
            "block size {bytes} must be between 512 bytes and 16M"
        ));
    }
    Ok(bytes as u32)
}

fn parse_format(text: &str) -> Result<Format, larch_sim::trace::UnknownFormatName> {
    text.parse()
}

fn parse_write_mode(text: &str) -> Result<WriteMode, larch_sim::replay::UnknownWriteMode> {
    text.parse()
}

pub fn run(cmd: SimCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        SimCommand::Replay(args) => replay(args),
        SimCommand::Run(args) => crate::sim_run::run(*args),
    }
}

/// Builds the policy named on the command line.
pub fn make_policy(name: PolicyName, cache_size_bytes: u64) -> anyhow::Result<Box<dyn Policy>> {
    if cache_size_bytes == 0 {
        bail!("the cache size must be greater than 0");
    }
    Ok(match name {
        PolicyName::Arc => Box::new(Arc::new(ArcConfig::fixed(cache_size_bytes))?),
        PolicyName::ArcOpenzfs => Box::new(Arc::new(ArcConfig::openzfs_fixed(cache_size_bytes))?),
        PolicyName::ArcPaper => Box::new(Arc::new(ArcConfig::paper(cache_size_bytes))?),
        PolicyName::Lru => Box::new(Lru::new(cache_size_bytes)),
        PolicyName::Larch => Box::new(Arc::new(ArcConfig {
            policy: ArcPolicy::Larch,
            ..ArcConfig::fixed(cache_size_bytes)
        })?),
    })
}

/// Prints progress on standard error: in place on a terminal, a line every 10 s otherwise.
struct Progress {
    enabled: bool,
    terminal: bool,
    started: Instant,
    last: Instant,
    printed: bool,
}

impl Progress {
    fn new(enabled: bool) -> Progress {
        let now = Instant::now();
        Progress {
            enabled,
            terminal: std::io::stderr().is_terminal(),
            started: now,
            last: now,
            printed: false,
        }
    }

    fn tick(&mut self, records: u64, requests: u64, hit_ratio: f64) {
        let interval = if self.terminal {
            Duration::from_millis(500)
        } else {
            Duration::from_secs(10)
        };
        if !self.enabled || self.last.elapsed() < interval {
            return;
        }
        self.last = Instant::now();
        let secs = self.started.elapsed().as_secs_f64();
        let line = format!(
            "replaying: {records} records, {requests} requests, hit ratio {:.2}%, {:.0} requests/s",
            hit_ratio * 100.0,
            requests as f64 / secs
        );
        if self.terminal {
            eprint!("\r{line}\x1b[K");
        } else {
            eprintln!("{line}");
        }
        self.printed = true;
    }

    fn finish(&self) {
        if self.enabled && self.terminal && self.printed {
            eprint!("\r\x1b[K");
        }
    }
}

/// A trace's records that parse, each with its position in the trace, read one ahead on
/// request ([`RecordsAhead::peek`]) so that a replay can hint the policy at the next one
/// while it replays the one before. With `skip_bad`, records that do not parse are
/// counted in `bad_records` and passed over.
struct RecordsAhead {
    reader: TraceReader,
    skip_bad: bool,
    bad_records: u64,
    ahead: Option<(Record, u64)>,
    ended: bool,
}

impl RecordsAhead {
    fn new(reader: TraceReader, skip_bad: bool) -> RecordsAhead {
        RecordsAhead {
            reader,
            skip_bad,
            bad_records: 0,
            ahead: None,
            ended: false,
        }
    }

    /// The next record (`None` at the end).
    fn next(&mut self) -> anyhow::Result<Option<(Record, u64)>> {
        match self.ahead.take() {
            Some(read) => Ok(Some(read)),
            None => self.read(),
        }
    }

    /// The record after the one [`Self::next`] returned last, read now if it was not.
    fn peek(&mut self) -> anyhow::Result<Option<&Record>> {
        if self.ahead.is_none() {
            self.ahead = self.read()?;
        }
        Ok(self.ahead.as_ref().map(|(record, _)| record))
    }

    fn read(&mut self) -> anyhow::Result<Option<(Record, u64)>> {
        while !self.ended {
            match self.reader.next_record() {
                Ok(Some(record)) => return Ok(Some((record, self.reader.position()))),
                Ok(None) => self.ended = true,
                Err(TraceError::Parse { .. }) if self.skip_bad => self.bad_records += 1,
                Err(err) => return Err(err.into()),
            }
        }
        Ok(None)
    }
}

fn replay(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    let reader = TraceReader::open(&args.trace, args.format)?;
    let format = reader.format();
    let block_size = args.block_size.unwrap_or(match format {
        Format::Lis => 512,
        _ => 4096,
    });
    let mut policy = make_policy(args.policy, args.cache_size)?;
    let cfg = ReplayConfig {
        writes: args.writes,
        ..ReplayConfig::new(block_size)
    };
    let started = Instant::now();
    let mut progress = Progress::new(!args.no_progress);
    let mut replayer = Replayer::new(policy.as_mut(), cfg);
    let limit = args.limit.unwrap_or(u64::MAX);
    let mut ticked_requests = 0;
    let mut records = RecordsAhead::new(reader, args.skip_bad);
    while replayer.counts().records < limit {
        let Some((record, position)) = records.next()? else {
            break;
        };
        // The policy starts loading what the next record's first block reads while this
        // one is replayed (`Replayer::hint_next`); nothing is read beyond the last record
        // the limit lets through.
        if replayer.counts().records + 1 < limit
            && let Some(ahead) = records.peek()?
        {
            replayer.hint_next(ahead);
        }
        if let Err(message) = replayer.record(&record) {
            if !args.skip_bad {
                bail!("{}:{position}: {message}", args.trace.display());
            }
            records.bad_records += 1;
        }
        // Every 65,536 records or requests (a record of large blocks counts one request per
        // block), whichever comes first: the clock is read no more often than that.
        let c = replayer.counts();
        if c.records % 65536 == 0 || c.requests >= ticked_requests + 65536 {
            ticked_requests = c.requests;
            progress.tick(c.records, c.requests, c.hit_ratio());
        }
    }
    progress.finish();
    let counts = replayer.counts();
    let elapsed = started.elapsed().as_secs_f64();
    let policy_name = policy.name();
    let arcstats = arcstats_of(policy.as_ref());
    if args.json {
        let mut out = json!({
            "trace": args.trace.display().to_string(),
            "format": format.name(),
            "policy": policy_name,
            "cache_size_bytes": args.cache_size,
            "block_size_bytes": block_size,
            "records": counts.records,
            "requests": counts.requests,
            "hits": counts.hits,
            "misses": counts.misses,
            "hit_ratio": counts.hit_ratio(),
            "hit_bytes": counts.hit_bytes,
            "miss_bytes": counts.miss_bytes,
            "write_records": counts.write_records,
            "bad_records": records.bad_records,
            "elapsed_seconds": elapsed,
        });
        if let Some(stats) = arcstats {
            out["arcstats"] =
                serde_json::Value::Object(stats.into_iter().map(|(k, v)| (k, json!(v))).collect());
        }
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!("trace        {} ({})", args.trace.display(), format.name());
        println!(
            "policy       {policy_name}, cache {} ({} bytes), block {block_size} bytes",
            format_size(args.cache_size),
            args.cache_size
        );
        println!(
            "records      {}   requests {}   writes {}   bad {}",
            counts.records, counts.requests, counts.write_records, records.bad_records
        );
        println!(
            "hits         {}   misses {}   hit ratio {:.2}%",
            counts.hits,
            counts.misses,
            counts.hit_ratio() * 100.0
        );
        if let Some(stats) = arcstats {
            let get = |name: &str| {
                stats
                    .iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| *v)
                    .unwrap_or(0)
            };
            println!(
                "arcstats     mru_hits {} mfu_hits {} mru_ghost_hits {} mfu_ghost_hits {} mru_size {} mfu_size {}",
                get("mru_hits"),
                get("mfu_hits"),
                get("mru_ghost_hits"),
                get("mfu_ghost_hits"),
                get("mru_size"),
                get("mfu_size"),
            );
        }
        println!(
            "elapsed      {elapsed:.2} s ({:.0} requests/s)",
            counts.requests as f64 / elapsed.max(1e-9)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The arcstats of a policy that keeps them (the ARC).
fn arcstats_of(policy: &dyn Policy) -> Option<Vec<(String, u64)>> {
    let stats = policy.kstats();
    (!stats.is_empty()).then_some(stats)
}

//! `larch sim run`: a pool simulated in virtual time (`larch_sim::sim`), configured by a
//! preset, a TOML file and flags (each overriding the one before), printing a summary and
//! writing the series and heat maps as JSON, or as a report page that opens in a browser
//! with no daemon and no network.
//!
//! Sizes take the suffixes `larch set` takes (`larch_engine::units`); times take `us`,
//! `ms`, `s`, `m`, `h`, `d`. Tunables are parsed by the engine's tunable table, so a name
//! or value the daemon refuses is refused here in the same words.
//!
//! One file: the presets, the file keys, the flags and the summary text all name the same
//! fields of `SimConfig` and read as one table; the tests of their precedence sit beside.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use larch_engine::units::{format_size, parse_size};
use larch_sim::device::ServerParams;
use larch_sim::sim::{
    self, CacheDevice, CacheMode, Clients, MetadataModel, Pattern, SECOND_NS, SimConfig, SimOutput,
    SimTunables, Workload,
};
use serde::Deserialize;

/// Arguments of `larch sim run`.
#[derive(clap::Args, Default)]
pub struct RunArgs {
    /// Start from a preset: seed000, seed000-raidz2, seed002-randread, seed002-seqread,
    /// seed002-randwrite (each reproduces a seed's setup; docs/simulator.md), or small (a
    /// quick demonstration).
    #[arg(long, value_name = "NAME")]
    pub preset: Option<String>,
    /// A TOML configuration file (docs/simulator.md has its keys); flags override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Virtual time to simulate (90s, 30m, 26h, 6d).
    #[arg(long, value_name = "TIME")]
    pub duration: Option<String>,
    /// Virtual time per sample of the output's series (default: 1s up to an hour, else 60s).
    #[arg(long, value_name = "TIME")]
    pub step: Option<String>,
    /// zfs_arc_max of the simulated pool.
    #[arg(long, value_name = "SIZE")]
    pub arc: Option<String>,
    /// Memory of the simulated machine: an ARC larger than it is refused.
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,
    /// The primary storage: 140xhdd:mirror, 48xhdd:raidz2:46, nvme, s3, ...
    /// (docs/simulator.md, "Device models").
    #[arg(long, value_name = "SPEC")]
    pub primary: Option<String>,
    /// Cache devices, COUNTxSPEC or SPEC: 6xreadzilla, 4xnvme, ssd:capacity=200G. Repeat
    /// for different devices; replaces the preset's.
    #[arg(long = "cache", value_name = "SPEC")]
    pub caches: Vec<String>,
    /// No cache devices (the "before" of seed 000 and seed 002's NOL2ARC).
    #[arg(long, conflicts_with = "caches")]
    pub no_l2: bool,
    /// Size of the volume.
    #[arg(long, value_name = "SIZE")]
    pub volume: Option<String>,
    /// Block size of the volume (volblocksize, record size).
    #[arg(long, value_name = "SIZE")]
    pub block: Option<String>,
    /// Where requests land: uniform, zipf[:THETA] (0 < THETA < 1, default 0.9),
    /// gaussian[:SIGMA], exponential[:MEAN], sequential, scan:HOT:SHARE, trace:FILE.
    #[arg(long, value_name = "PATTERN")]
    pub workload: Option<String>,
    /// The active data set (the part of the volume the workload touches).
    #[arg(long, value_name = "SIZE")]
    pub ads: Option<String>,
    /// Bytes per request.
    #[arg(long, value_name = "SIZE")]
    pub io: Option<String>,
    /// Fraction of requests that read (1 = only reads, 0 = only writes).
    #[arg(long, value_name = "FRACTION")]
    pub read: Option<f64>,
    /// Volumes the data set is split into, each with its own sequential-read detector.
    #[arg(long, value_name = "N")]
    pub volumes: Option<u32>,
    /// Closed-loop clients: requests outstanding at most.
    #[arg(long, value_name = "N")]
    pub threads: Option<u32>,
    /// Time a closed-loop client waits between a reply and its next request.
    #[arg(long, value_name = "TIME")]
    pub think: Option<String>,
    /// Open loop instead: requests arriving per second (Poisson).
    #[arg(long, value_name = "PER_SECOND", conflicts_with_all = ["threads", "think"])]
    pub rate: Option<f64>,
    /// Time a request spends outside the cache (network, protocol), added to each reply.
    #[arg(long, value_name = "TIME")]
    pub frontend: Option<String>,
    /// The server's CPUs and memory bandwidth, which every reply's work queues for: off,
    /// sun7410 (seed 000's 2009 machine), xeon-2s (seed 002's), with overrides such as
    /// xeon-2s:cores=16,request_us=20 (docs/simulator.md, "The server"). The seed 002
    /// presets use xeon-2s; elsewhere off.
    #[arg(long, value_name = "SPEC")]
    pub server: Option<String>,
    /// A tunable, NAME=VALUE (l2arc_write_max=8M, l2arc_noprefetch=0, ...), or the volume's
    /// primarycache/secondarycache, or the metadata model's indblkshift (12-17: 4K-128K
    /// indirect blocks, 17 by default); repeatable.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub set: Vec<String>,
    /// Flip the L2ARC switch: off@TIME or on@TIME; repeatable.
    #[arg(long = "switch", value_name = "off|on@TIME")]
    pub switch: Vec<String>,
    /// Whose L2 feed: larch (a feeder per cache device, larch's tunables) or openzfs (one
    /// feeder taking the devices in turn, 8 MiB per feed, headroom 2: as the seeds ran).
    /// The seed presets use openzfs.
    #[arg(long, value_name = "larch|openzfs")]
    pub feed: Option<String>,
    /// The metadata model: on, a read that misses first reads the ZFS volume's indirect
    /// blocks it needs, and a TXG writes the ones above what it writes; map-pages, the
    /// volume is a larch object volume, whose reads of the store first look up the
    /// block-map page that points at their block; off, every block is data, as in a larch
    /// volume on a file or a device. The seed presets have it on.
    #[arg(long, value_name = "on|off|map-pages")]
    pub metadata: Option<String>,
    /// Start with the caches full of the active data set (synthetic workloads: a trace
    /// starts cold, and a preset's prewarming is dropped for one).
    #[arg(long)]
    pub prewarm: bool,
    /// The seed of every random choice.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Run at 1/N of the pool's sizes (ARC, cache devices, disks, data set) and show the
    /// result as the full pool: N times faster, with the same hit ratios and rates for
    /// random workloads, and warm-up times multiplied back (docs/simulator.md, "Scale").
    /// Not for a trace, which runs at full size.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub scale: u64,
    /// Write the output (series, heat maps, summary) as JSON to FILE.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Write a report page to FILE: the Analytics page with the run's data inside, for any
    /// browser, with no daemon and no network.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Print the summary as JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Print no progress on standard error.
    #[arg(long)]
    pub quiet: bool,
}

/// The keys of a configuration file, each optional (docs/simulator.md).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    name: Option<String>,
    seed: Option<u64>,
    duration: Option<String>,
    step: Option<String>,
    arc: Option<String>,
    memory: Option<String>,
    primary: Option<String>,
    caches: Option<Vec<String>>,
    volume: Option<String>,
    block: Option<String>,
    frontend: Option<String>,
    server: Option<String>,
    prewarm: Option<bool>,
    switch: Option<Vec<String>>,
    workload: Option<FileWorkload>,
    clients: Option<FileClients>,
    tunables: Option<toml::Table>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileWorkload {
    pattern: Option<String>,
    ads: Option<String>,
    io: Option<String>,
    read: Option<f64>,
    volumes: Option<u32>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileClients {
    threads: Option<u32>,
    think: Option<String>,
    rate: Option<f64>,
}

/// A duration: a number and a unit (`us`, `ms`, `s`, `m`, `h`, `d`; seconds without one).
pub fn parse_duration(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?}: expected a time such as 90s, 30m, 26h or 6d"))?;
    let scale = match unit.trim() {
        "" | "s" => 1e9,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "m" | "min" => 60e9,
        "h" => 3600e9,
        "d" => 86_400e9,
        other => {
            return Err(format!(
                "{text:?}: unknown unit {other:?} (us, ms, s, m, h, d)"
            ));
        }
    };
    let ns = value * scale;
    if !ns.is_finite() || !(0.0..=1e18).contains(&ns) {
        return Err(format!("{text:?}: out of range"));
    }
    Ok(ns.round() as u64)
}

fn size(field: &str, text: &str) -> anyhow::Result<u64> {
    parse_size(text).map_err(|e| anyhow!("{field}: {e}"))
}

fn time(field: &str, text: &str) -> anyhow::Result<u64> {
    parse_duration(text).map_err(|e| anyhow!("{field}: {e}"))
}

fn server(field: &str, text: &str) -> anyhow::Result<ServerParams> {
    ServerParams::parse(text).map_err(|e| anyhow!("{field}: {e}"))
}

const GIB: u64 = 1 << 30;

/// The presets' names.
pub const PRESETS: &[&str] = &[
    "seed000",
    "seed000-raidz2",
    "seed002-randread",
    "seed002-seqread",
    "seed002-randwrite",
    "small",
];

/// A preset: a seed's setup at full scale (docs/simulator.md says where each figure
/// comes from), or a small run.
pub fn preset(name: &str) -> anyhow::Result<SimConfig> {
    // Seed 000: a Sun Storage 7410 with 128 GB of DRAM (112 GB of ARC), 6 x 100 GB
    // Readzillas, 140 disks in mirrors, 10 clients x 2 threads of 8 KB random reads over a
    // 500 GB working set, an 8 KB record size, OpenZFS's 2009 feed.
    let mut tunables = SimTunables::default();
    tunables.openzfs_feed();
    // Both seeds' pools are ZFS: their volumes' blocks are found through indirect blocks.
    tunables.metadata = MetadataModel::IndirectBlocks;
    // Indirect blocks of 128 KiB, today's: seed 000's 7410 ran 2009's ZFS with 16 KiB ones
    // (`--set indblkshift=14`), which moves its rows no closer to the seed's
    // (docs/simulator.md, "Metadata: indirect blocks").
    let seed000 = SimConfig {
        name: "seed000".to_string(),
        seed: 1,
        duration_ns: 30 * 3600 * SECOND_NS,
        step_s: 60,
        arc_max_bytes: 112 * GIB,
        memory_bytes: 128 * GIB,
        primary: "140xhdd:mirror".to_string(),
        caches: (0..6)
            .map(|_| CacheDevice {
                spec: "readzilla".to_string(),
                capacity_bytes: None,
            })
            .collect(),
        volume_bytes: 4 << 40,
        block_bytes: 8 << 10,
        workload: Workload {
            pattern: Pattern::Uniform,
            ads_bytes: 500 * GIB,
            io_bytes: 8 << 10,
            read_fraction: 1.0,
            volumes: 1,
        },
        // Each cycle of a client thread spends about half a millisecond in the NFS client
        // and the network, which the server's latency (what Analytics showed) does not
        // include: 20 threads at seed 000's ~2,700 reads/s cold and ~6 ms disk reads.
        clients: Clients::Closed {
            threads: 20,
            think_ns: 500_000,
        },
        frontend_ns: 50_000,
        tunables: tunables.clone(),
        switch: Vec::new(),
        prewarm: false,
        time_scale: 1,
    };
    // Seed 002: 512 GB of DRAM, 4 x 1.6 TB NVMe, 142 disks in 71 mirrors, 12 clients
    // with 16 threads each over 12 LUNs (1.2 TiB of active data), caches preconditioned
    // warm; zvols of 16 KiB blocks.
    let seed002 = SimConfig {
        name: "seed002-randread".to_string(),
        seed: 1,
        duration_ns: 300 * SECOND_NS,
        step_s: 1,
        arc_max_bytes: 480 * GIB,
        memory_bytes: 512 * GIB,
        primary: "142xhdd:mirror".to_string(),
        caches: (0..4)
            .map(|_| CacheDevice {
                spec: "nvme".to_string(),
                capacity_bytes: None,
            })
            .collect(),
        volume_bytes: 12 * 100 * GIB * 2,
        block_bytes: 16 << 10,
        workload: Workload {
            pattern: Pattern::Uniform,
            ads_bytes: 12 * 100 * GIB,
            io_bytes: 4 << 10,
            read_fraction: 1.0,
            volumes: 12,
        },
        clients: Clients::Closed {
            threads: 192,
            think_ns: 0,
        },
        frontend_ns: 100_000,
        // The talk's server became CPU-bound with four NVMe devices: its CPUs and memory
        // bandwidth are modelled (docs/simulator.md, "The server").
        tunables: SimTunables {
            server: ServerParams::xeon_2s(),
            ..tunables.clone()
        },
        switch: Vec::new(),
        prewarm: true,
        time_scale: 1,
    };
    Ok(match name {
        "seed000" => seed000,
        "seed000-raidz2" => SimConfig {
            name: name.to_string(),
            primary: "48xhdd:raidz2:46".to_string(),
            duration_ns: 8 * 86_400 * SECOND_NS,
            step_s: 300,
            ..seed000
        },
        "seed002-randread" => seed002,
        "seed002-seqread" => SimConfig {
            name: name.to_string(),
            block_bytes: 128 << 10,
            workload: Workload {
                pattern: Pattern::Sequential,
                io_bytes: 128 << 10,
                ..seed002.workload.clone()
            },
            ..seed002
        },
        "seed002-randwrite" => SimConfig {
            name: name.to_string(),
            prewarm: false,
            workload: Workload {
                read_fraction: 0.0,
                ..seed002.workload.clone()
            },
            ..seed002
        },
        "small" => SimConfig {
            name: "small".to_string(),
            duration_ns: 600 * SECOND_NS,
            step_s: 1,
            arc_max_bytes: 512 << 20,
            memory_bytes: 0,
            primary: "8xhdd:mirror".to_string(),
            caches: vec![CacheDevice {
                spec: "ssd".to_string(),
                capacity_bytes: Some(4 * GIB),
            }],
            volume_bytes: 64 * GIB,
            workload: Workload {
                ads_bytes: 3 * GIB,
                ..seed000.workload.clone()
            },
            // Not a seed's pool: every block is data, as in the daemon.
            tunables: SimTunables {
                metadata: MetadataModel::Off,
                ..seed000.tunables.clone()
            },
            ..seed000
        },
        other => bail!(
            "--preset: unknown preset {other:?} (known: {})",
            PRESETS.join(", ")
        ),
    })
}

/// The default configuration without a preset: the `small` one.
fn base(args: &RunArgs) -> anyhow::Result<SimConfig> {
    preset(args.preset.as_deref().unwrap_or("small"))
}

/// `off@TIME` or `on@TIME`.
fn parse_switch(field: &str, text: &str) -> anyhow::Result<(u64, bool)> {
    let (state, at) = text
        .split_once('@')
        .ok_or_else(|| anyhow!("{field}: expected off@TIME or on@TIME, got {text:?}"))?;
    let on = match state.trim() {
        "on" | "1" => true,
        "off" | "0" => false,
        other => bail!("{field}: expected off or on before @, got {other:?}"),
    };
    Ok((time(field, at)?, on))
}

/// `COUNTxSPEC` (cache devices only take a count in front) or `SPEC`.
fn cache_devices(field: &str, text: &str) -> anyhow::Result<Vec<CacheDevice>> {
    let (count, spec) = match text.split_once('x') {
        Some((n, rest)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => (
            n.parse::<u32>()
                .map_err(|_| anyhow!("{field}: bad count in {text:?}"))?,
            rest,
        ),
        _ => (1, text),
    };
    if count == 0 || count > 64 {
        bail!("{field}: 1 to 64 cache devices, got {count}");
    }
    Ok((0..count)
        .map(|_| CacheDevice {
            spec: spec.to_string(),
            capacity_bytes: None,
        })
        .collect())
}

/// A workload pattern as the flag and the file take it.
fn parse_pattern(field: &str, text: &str) -> anyhow::Result<Pattern> {
    let (kind, rest) = text.split_once(':').unwrap_or((text, ""));
    let number = |default: f64| -> anyhow::Result<f64> {
        if rest.is_empty() {
            Ok(default)
        } else {
            rest.parse()
                .map_err(|_| anyhow!("{field}: expected a number after {kind}:, got {rest:?}"))
        }
    };
    Ok(match kind {
        "uniform" | "random" => Pattern::Uniform,
        "zipf" => Pattern::Zipf {
            theta: number(0.9)?,
        },
        "gaussian" => Pattern::Gaussian {
            sigma: number(0.1)?,
        },
        "exponential" => Pattern::Exponential { mean: number(0.1)? },
        "sequential" | "seq" => Pattern::Sequential,
        "scan" => {
            let (hot, share) = rest
                .split_once(':')
                .ok_or_else(|| anyhow!("{field}: expected scan:HOT:SHARE, got {text:?}"))?;
            Pattern::Scan {
                hot_bytes: size(field, hot)?,
                scan_share: share
                    .parse()
                    .map_err(|_| anyhow!("{field}: the scan's share {share:?} is not a number"))?,
            }
        }
        "trace" if !rest.is_empty() => Pattern::Trace {
            path: PathBuf::from(rest),
            format: None,
        },
        _ => bail!(
            "{field}: unknown pattern {text:?} (uniform, zipf[:THETA], gaussian[:SIGMA], \
             exponential[:MEAN], sequential, scan:HOT:SHARE, trace:FILE)"
        ),
    })
}

/// Sets a tunable by name, its value parsed by the engine's table (the units and ranges
/// `larch set` takes).
fn set_tunable(
    tunables: &mut SimTunables,
    field: &str,
    name: &str,
    value: &str,
) -> anyhow::Result<()> {
    if name == "secondarycache" || name == "primarycache" {
        // The volume's properties, as `larch volume add` takes them; with the metadata
        // model off the simulated volume holds data only, and `metadata` is `none`.
        let mode = CacheMode::parse(value)
            .ok_or_else(|| anyhow!("{field}: {name} is all, metadata or none, got {value:?}"))?;
        if name == "primarycache" {
            tunables.primarycache = mode;
        } else {
            tunables.secondarycache = mode;
        }
        return Ok(());
    }
    if name == "indblkshift" {
        // The metadata model's indirect block size: the simulator's, not a daemon tunable.
        let shifts = larch_sim::sim::metadata::INDBLKSHIFTS;
        tunables.indblkshift = value
            .parse()
            .ok()
            .filter(|v| shifts.contains(v))
            .ok_or_else(|| {
                anyhow!(
                    "{field}: indblkshift is {} to {} (4K to 128K indirect blocks), got {value:?}",
                    shifts.start(),
                    shifts.end()
                )
            })?;
        return Ok(());
    }
    let engine = larch_engine::Tunables::default();
    larch_engine::tunables::set(&engine, name, value).map_err(|e| anyhow!("{field}: {e}"))?;
    let parsed = larch_engine::tunables::values(&engine)
        .get(name)
        .copied()
        .ok_or_else(|| anyhow!("{field}: {name} is not a tunable"))?;
    tunables
        .set(name, parsed)
        .map_err(|e| anyhow!("{field}: {e}"))
}

/// Which keys a configuration file gave that the command line's defaults depend on.
#[derive(Default)]
struct FileGave {
    duration: bool,
    step: bool,
    volume: bool,
}

/// Applies a configuration file's keys.
fn apply_file(cfg: &mut SimConfig, path: &Path) -> anyhow::Result<FileGave> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let file: FileConfig = toml::from_str(&text).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    let f = |key: &str| format!("{}: {key}", path.display());
    if let Some(v) = file.name {
        cfg.name = v;
    }
    if let Some(v) = file.seed {
        cfg.seed = v;
    }
    if let Some(v) = &file.duration {
        cfg.duration_ns = time(&f("duration"), v)?;
    }
    if let Some(v) = &file.step {
        cfg.step_s = (time(&f("step"), v)? / SECOND_NS).max(1);
    }
    if let Some(v) = &file.arc {
        cfg.arc_max_bytes = size(&f("arc"), v)?;
    }
    if let Some(v) = &file.memory {
        cfg.memory_bytes = size(&f("memory"), v)?;
    }
    if let Some(v) = file.primary {
        cfg.primary = v;
    }
    if let Some(list) = &file.caches {
        cfg.caches.clear();
        for (i, c) in list.iter().enumerate() {
            cfg.caches
                .extend(cache_devices(&f(&format!("caches[{i}]")), c)?);
        }
    }
    if let Some(v) = &file.volume {
        cfg.volume_bytes = size(&f("volume"), v)?;
    }
    if let Some(v) = &file.block {
        cfg.block_bytes = u32::try_from(size(&f("block"), v)?)
            .map_err(|_| anyhow!("{}: too large", f("block")))?;
    }
    if let Some(v) = &file.frontend {
        cfg.frontend_ns = time(&f("frontend"), v)?;
    }
    if let Some(v) = &file.server {
        cfg.tunables.server = server(&f("server"), v)?;
    }
    if let Some(v) = file.prewarm {
        cfg.prewarm = v;
    }
    if let Some(list) = &file.switch {
        cfg.switch = list
            .iter()
            .map(|s| parse_switch(&f("switch"), s))
            .collect::<anyhow::Result<_>>()?;
    }
    if let Some(w) = &file.workload {
        if let Some(v) = &w.pattern {
            cfg.workload.pattern = parse_pattern(&f("workload.pattern"), v)?;
        }
        if let Some(v) = &w.ads {
            cfg.workload.ads_bytes = size(&f("workload.ads"), v)?;
        }
        if let Some(v) = &w.io {
            cfg.workload.io_bytes = u32::try_from(size(&f("workload.io"), v)?)
                .map_err(|_| anyhow!("{}: too large", f("workload.io")))?;
        }
        if let Some(v) = w.read {
            cfg.workload.read_fraction = v;
        }
        if let Some(v) = w.volumes {
            cfg.workload.volumes = v;
        }
    }
    if let Some(c) = &file.clients {
        apply_clients(cfg, c.threads, c.think.as_deref(), c.rate, &f("clients"))?;
    }
    let gave = FileGave {
        duration: file.duration.is_some(),
        step: file.step.is_some(),
        volume: file.volume.is_some(),
    };
    if let Some(table) = &file.tunables {
        for (name, value) in table {
            let text = match value {
                toml::Value::String(s) => s.clone(),
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Boolean(b) => u8::from(*b).to_string(),
                other => bail!(
                    "{}: expected a number or a string, got {other}",
                    f(&format!("tunables.{name}"))
                ),
            };
            set_tunable(
                &mut cfg.tunables,
                &f(&format!("tunables.{name}")),
                name,
                &text,
            )?;
        }
    }
    Ok(gave)
}

fn apply_clients(
    cfg: &mut SimConfig,
    threads: Option<u32>,
    think: Option<&str>,
    rate: Option<f64>,
    field: &str,
) -> anyhow::Result<()> {
    if let Some(rate) = rate {
        cfg.clients = Clients::Open { rate };
        return Ok(());
    }
    let (mut n, mut t) = match cfg.clients {
        Clients::Closed { threads, think_ns } => (threads, think_ns),
        Clients::Open { .. } => (1, 0),
    };
    if let Some(v) = threads {
        n = v;
    }
    if let Some(v) = think {
        t = time(&format!("{field}.think"), v)?;
    }
    cfg.clients = Clients::Closed {
        threads: n,
        think_ns: t,
    };
    Ok(())
}

/// The configuration a command line asks for: preset, then file, then flags.
pub fn configure(args: &RunArgs) -> anyhow::Result<SimConfig> {
    let mut cfg = base(args)?;
    let file = match &args.config {
        Some(path) => apply_file(&mut cfg, path)?,
        None => FileGave::default(),
    };
    if let Some(v) = &args.duration {
        cfg.duration_ns = time("--duration", v)?;
    }
    // A duration chosen by the user (flag or file) picks the step unless one was chosen
    // too: 1 s up to an hour, at least a minute beyond (a month of 1 s steps would be
    // millions of samples).
    let chose_duration = args.duration.is_some() || file.duration;
    cfg.step_s = match &args.step {
        Some(v) => match time("--step", v)? / SECOND_NS {
            0 => bail!("--step {v}: at least 1 s"),
            s => s,
        },
        None if file.step => cfg.step_s,
        None if chose_duration && cfg.duration_ns <= 3600 * SECOND_NS => 1,
        None if chose_duration => cfg.step_s.max(60),
        None => cfg.step_s,
    };
    if let Some(v) = &args.arc {
        cfg.arc_max_bytes = size("--arc", v)?;
    }
    if let Some(v) = &args.memory {
        cfg.memory_bytes = size("--memory", v)?;
    }
    if let Some(v) = &args.primary {
        cfg.primary = v.clone();
    }
    if !args.caches.is_empty() {
        cfg.caches.clear();
        for c in &args.caches {
            cfg.caches.extend(cache_devices("--cache", c)?);
        }
    }
    if args.no_l2 {
        cfg.caches.clear();
    }
    if let Some(v) = &args.volume {
        cfg.volume_bytes = size("--volume", v)?;
    }
    if let Some(v) = &args.block {
        cfg.block_bytes =
            u32::try_from(size("--block", v)?).map_err(|_| anyhow!("--block: too large"))?;
    }
    if let Some(v) = &args.workload {
        cfg.workload.pattern = parse_pattern("--workload", v)?;
    }
    if let Some(v) = &args.ads {
        cfg.workload.ads_bytes = size("--ads", v)?;
    }
    // An active data set larger than the preset's volume, and no volume size given: the
    // volume grows to hold it, if the primary storage does (docs/simulator.md's own
    // examples gave `--ads` alone, and were refused as larger than the volume).
    if args.volume.is_none() && !file.volume && cfg.workload.ads_bytes > cfg.volume_bytes {
        let grown = cfg
            .workload
            .ads_bytes
            .next_multiple_of(u64::from(cfg.block_bytes.max(1)));
        let room = larch_sim::device::parse_spec(&cfg.primary, cfg.seed)
            .map_or(0, |primary| primary.capacity_bytes());
        if grown <= room {
            cfg.volume_bytes = grown;
        }
    }
    if let Some(v) = &args.io {
        cfg.workload.io_bytes =
            u32::try_from(size("--io", v)?).map_err(|_| anyhow!("--io: too large"))?;
    }
    if let Some(v) = args.read {
        cfg.workload.read_fraction = v;
    }
    if let Some(v) = args.volumes {
        cfg.workload.volumes = v;
    }
    // Only flags that were given change the clients: a file's `rate` stays open-loop.
    if args.threads.is_some() || args.think.is_some() || args.rate.is_some() {
        apply_clients(
            &mut cfg,
            args.threads,
            args.think.as_deref(),
            args.rate,
            "--threads",
        )?;
    }
    if let Some(v) = &args.frontend {
        cfg.frontend_ns = time("--frontend", v)?;
    }
    if let Some(v) = &args.server {
        cfg.tunables.server = server("--server", v)?;
    }
    match args.feed.as_deref() {
        None => {}
        Some("openzfs") => cfg.tunables.openzfs_feed(),
        Some("larch") => {
            let d = SimTunables::default();
            let t = &mut cfg.tunables;
            t.l2arc_write_max = d.l2arc_write_max;
            t.l2arc_write_boost = d.l2arc_write_boost;
            t.l2arc_headroom = d.l2arc_headroom;
            t.l2arc_feed_follow = d.l2arc_feed_follow;
            t.l2arc_nowrite = d.l2arc_nowrite;
            t.feed_round_robin = d.feed_round_robin;
        }
        Some(other) => bail!("--feed: larch or openzfs, got {other:?}"),
    }
    if let Some(text) = args.metadata.as_deref() {
        cfg.tunables.metadata = MetadataModel::parse(text)
            .ok_or_else(|| anyhow!("--metadata: on, off or map-pages, got {text:?}"))?;
    }
    for s in &args.set {
        let (name, value) = s
            .split_once('=')
            .ok_or_else(|| anyhow!("--set: expected NAME=VALUE, got {s:?}"))?;
        set_tunable(&mut cfg.tunables, "--set", name.trim(), value.trim())?;
    }
    if !args.switch.is_empty() {
        cfg.switch = args
            .switch
            .iter()
            .map(|s| parse_switch("--switch", s))
            .collect::<anyhow::Result<_>>()?;
    }
    if args.prewarm {
        cfg.prewarm = true;
    } else if matches!(cfg.workload.pattern, Pattern::Trace { .. }) {
        // A preset (or file) prewarms with its synthetic data set; a trace's blocks are
        // not known before it is replayed. Asked for on the command line, it is refused.
        cfg.prewarm = false;
    }
    if let Some(seed) = args.seed {
        cfg.seed = seed;
    }
    cfg.validate()?;
    Ok(cfg)
}

fn secs(s: Option<u64>) -> String {
    match s {
        None => "not reached".to_string(),
        Some(s) if s < 120 => format!("{s} s"),
        Some(s) if s < 7200 => format!("{:.1} min", s as f64 / 60.0),
        Some(s) => format!("{:.1} h", s as f64 / 3600.0),
    }
}

fn ms(us: f64) -> String {
    if !us.is_finite() {
        // Past the heat maps' last bound: say so, not "inf".
        let top_ns = (0..larch_policy::buckets::BUCKETS)
            .filter_map(larch_policy::buckets::upper_ns)
            .max()
            .unwrap_or(0);
        return format!("> {:.0} s", top_ns as f64 / 1e9);
    }
    if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.0} us")
    }
}

/// How far the trace was replayed, as a line of the summary.
fn trace_text(trace: &sim::TraceProgress) -> String {
    let how_far = if trace.ended {
        "to its end".to_string()
    } else if let (Some(line), Some(at_s)) = (trace.next_line, trace.next_at_s) {
        format!(
            "the run ended before line {line}, {} after the first record (--duration replays more)",
            larch_daemon::advise::span(at_s)
        )
    } else {
        "the run ended before the trace did (--duration replays more)".to_string()
    };
    format!(
        "trace         {} records replayed, to line {}; {how_far}\n",
        trace.records, trace.last_line
    )
}

/// The summary as text.
pub fn summary_text(out: &SimOutput, cfg: &SimConfig, wall_s: f64) -> String {
    let s = &out.summary;
    let w = |name: &str, x: &sim::Window| {
        format!(
            "{name:<13} {:>9.0} IOPS  mean {:>9}  p50 {:>9}  p99 {:>9}  <1 ms {:>5.1}%  ARC hits {:>5.1}%  L2 hits {:>5.1}%  DRAM hits/s {:>7.0}  disk reads {:>6.1} MiB/s\n",
            x.iops,
            ms(x.mean_latency_us),
            ms(x.p50_us),
            ms(x.p99_us),
            100.0 * x.reads_under_1ms,
            100.0 * x.arc_hit_ratio,
            100.0 * x.l2_hit_ratio,
            x.dram_hits_per_s,
            x.primary_read_bytes_per_s / (1 << 20) as f64,
        )
    };
    let mut t = String::new();
    t += &format!(
        "{}: {} of virtual time in {wall_s:.1} s ({:.2}M block I/Os per second){}\n",
        out.pool,
        secs(Some(s.virtual_seconds as u64)),
        s.block_ios as f64 / wall_s.max(1e-9) / 1e6,
        if s.scale > 1 {
            format!("; run at 1/{} scale, shown at full size", s.scale)
        } else {
            String::new()
        }
    );
    t += &format!(
        "pool          ARC {}, {} cache device(s) of {} in all, primary {}\n",
        format_size(cfg.arc_max_bytes),
        cfg.caches.len(),
        format_size(s.l2_capacity_bytes),
        cfg.primary
    );
    let clients = match cfg.clients {
        Clients::Closed { threads, .. } => format!("{threads} closed-loop clients"),
        Clients::Open { rate } => format!("{rate} requests/s arriving"),
    };
    t += &match &s.trace {
        // A trace's requests, sizes and mix are its own; a timed one also its arrivals.
        Some(trace) if trace.timed => format!(
            "workload      {}, on its own clock\n",
            cfg.workload.pattern.name()
        ),
        Some(_) => format!(
            "workload      {}, as fast as {clients} go\n",
            cfg.workload.pattern.name()
        ),
        None => format!(
            "workload      {} of {} requests over {} ({clients}), {:.0}% reads\n",
            cfg.workload.pattern.name(),
            format_size(u64::from(cfg.workload.io_bytes)),
            format_size(cfg.workload.ads_bytes),
            100.0 * cfg.workload.read_fraction
        ),
    };
    if let Some(trace) = &s.trace {
        t += &trace_text(trace);
    }
    if let Some(server) = &s.server {
        t += &format!(
            "server        {}: CPU {:.1}% busy, memory bandwidth {:.1}% (means over the run)\n",
            server.spec,
            100.0 * server.cpu_busy,
            100.0 * server.memory_busy
        );
    }
    // A step (times the scale) longer than a minute makes the first window longer too.
    let first = &s.first_minute;
    let first_name = match first.to_s.saturating_sub(first.from_s) {
        0 | 60 => "first minute".to_string(),
        span => format!("first {}", secs(Some(span))),
    };
    t += &w(&first_name, first);
    t += &w("steady", &s.steady);
    t += &format!(
        "warm-up       ARC at 90% of its size after {}; L2ARC at 50% / 90% of its final {} after {} / {}; IOPS at 50% / 90% of steady after {} / {}\n",
        secs(s.arc_warm_s),
        format_size(s.l2_bytes),
        secs(s.l2_half_s),
        secs(s.l2_90_s),
        secs(s.iops_half_s),
        secs(s.iops_90_s),
    );
    let wasted = if s.l2_write_bytes > 0 {
        100.0 * s.l2_wasted_bytes as f64 / s.l2_write_bytes as f64
    } else {
        0.0
    };
    t += &format!(
        "feed          {} written, {} of it overwritten unread ({wasted:.1}%)\n",
        format_size(s.l2_write_bytes),
        format_size(s.l2_wasted_bytes)
    );
    t += &format!(
        "header DRAM   larch {} (ARC headers {} + L2 index {}); OpenZFS would hold {}\n",
        format_size(s.larch_arc_hdr_bytes + s.larch_l2_index_bytes),
        format_size(s.larch_arc_hdr_bytes),
        format_size(s.larch_l2_index_bytes),
        format_size(s.openzfs_hdr_bytes)
    );
    t += &format!(
        "sizing        ADS / (ARC + L2ARC) = {:.2}\n",
        s.ads_over_cache
    );
    let m = &s.arcstats;
    if m.demand_metadata_hits + m.demand_metadata_misses > 0 {
        let (lookups, reads) = match cfg.tunables.metadata {
            MetadataModel::MapPages => ("map-page", "map-page"),
            _ => ("indirect-block", "indirect"),
        };
        t += &format!(
            "metadata      {} {lookups} lookups, {:.1}% hits; {} in the ARC, {} on cache \
             devices; {} {reads} reads ({} from cache devices), {} written\n",
            m.demand_metadata_hits + m.demand_metadata_misses,
            100.0 * m.demand_metadata_hits as f64
                / (m.demand_metadata_hits + m.demand_metadata_misses) as f64,
            format_size(m.metadata_size),
            format_size(m.l2_bufc_metadata_asize),
            m.indirect_reads,
            m.indirect_l2_reads,
            format_size(m.indirect_write_bytes)
        );
    }
    t
}

/// `larch sim run`.
pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let cfg = configure(&args)?;
    let show = !args.quiet;
    let started = Instant::now();
    // A line a second on a terminal, every 10 s otherwise (as `sim replay`): the simulator
    // reports every simulated minute, several times a second of wall time, which flooded
    // logs.
    let every = if std::io::stderr().is_terminal() {
        Duration::from_secs(1)
    } else {
        Duration::from_secs(10)
    };
    let mut shown: Option<Instant> = None;
    let mut progress = |p: sim::Progress| {
        if show && shown.is_none_or(|at| at.elapsed() >= every) {
            shown = Some(Instant::now());
            eprintln!(
                "larch sim: {:.1} of {:.1} h simulated, {} block I/Os, {:.0} s",
                p.virtual_s as f64 / 3600.0,
                p.total_s as f64 / 3600.0,
                p.requests,
                started.elapsed().as_secs_f64()
            );
        }
    };
    if args.scale == 0 {
        bail!("--scale: at least 1");
    }
    let scaled = cfg.scaled(args.scale)?;
    let mut out = sim::run(&scaled, &mut progress)?;
    out.rescale(args.scale);
    let wall = started.elapsed().as_secs_f64();
    if let Some(path) = &args.output {
        let text = serde_json::to_string(&out)?;
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.html {
        let data = serde_json::to_string(&out)?;
        let page = larch_daemon::page::report(&out.pool, &data);
        std::fs::write(path, page).with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&out.summary)?);
    } else {
        print!("{}", summary_text(&out, &cfg, wall));
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_simulators_default_tunables_are_the_daemons() {
        let engine = larch_engine::tunables::values(&larch_engine::Tunables::default());
        let mut from_engine = SimTunables::default();
        for name in sim::TUNABLE_NAMES {
            // The dirty limit depends on the machine's memory (10% of it, at most 4 GiB);
            // secondarycache is the volume's property, not a tunable.
            if *name == "zfs_dirty_data_max" || *name == "secondarycache" {
                continue;
            }
            let value = *engine
                .get(*name)
                .unwrap_or_else(|| panic!("{name} is no tunable of the daemon"));
            from_engine.set(name, value).unwrap();
        }
        from_engine.dirty_data_max = SimTunables::default().dirty_data_max;
        assert_eq!(from_engine, SimTunables::default());
    }

    #[test]
    fn durations_parse_and_nonsense_is_refused() {
        assert_eq!(parse_duration("90s").unwrap(), 90 * SECOND_NS);
        assert_eq!(parse_duration("1.5h").unwrap(), 5400 * SECOND_NS);
        assert_eq!(parse_duration("100us").unwrap(), 100_000);
        assert_eq!(parse_duration("2d").unwrap(), 2 * 86_400 * SECOND_NS);
        assert_eq!(parse_duration("7").unwrap(), 7 * SECOND_NS);
        for bad in ["", "h", "-1s", "3 weeks", "1e400s", "9999999999999d"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn flags_override_the_preset_and_errors_name_the_flag() {
        let args = RunArgs {
            preset: Some("seed000".into()),
            arc: Some("64G".into()),
            caches: vec!["2xnvme".into()],
            set: vec!["l2arc_write_max=16M".into()],
            switch: vec!["off@1h".into(), "on@2h".into()],
            ..RunArgs::default()
        };
        let cfg = configure(&args).unwrap();
        assert_eq!(cfg.arc_max_bytes, 64 * GIB);
        assert_eq!(cfg.caches.len(), 2);
        // A data set larger than the preset's volume makes the volume its size (the small
        // preset's is 64G), unless the volume is given or the primary storage cannot hold it.
        let ads = |ads: &str, volume: Option<&str>| {
            configure(&RunArgs {
                ads: Some(ads.into()),
                volume: volume.map(Into::into),
                ..RunArgs::default()
            })
            .map(|cfg| cfg.volume_bytes)
        };
        assert_eq!(ads("200G", None).unwrap(), 200 * GIB);
        assert_eq!(ads("1G", None).unwrap(), 64 * GIB);
        assert!(ads("200G", Some("100G")).is_err(), "a volume given stays");
        assert!(ads("1024T", None).is_err(), "more than the disks hold");
        assert_eq!(cfg.tunables.l2arc_write_max, 16 << 20);
        assert_eq!(
            cfg.switch,
            vec![(3600 * SECOND_NS, false), (7200 * SECOND_NS, true)]
        );
        for (args, words) in [
            (
                RunArgs {
                    preset: Some("seed999".into()),
                    ..RunArgs::default()
                },
                "--preset",
            ),
            (
                RunArgs {
                    arc: Some("12Q".into()),
                    ..RunArgs::default()
                },
                "--arc",
            ),
            (
                RunArgs {
                    set: vec!["nope=1".into()],
                    ..RunArgs::default()
                },
                "nope",
            ),
            (
                RunArgs {
                    set: vec!["l2arc_mfuonly=7".into()],
                    ..RunArgs::default()
                },
                "l2arc_mfuonly",
            ),
            (
                RunArgs {
                    read: Some(1.5),
                    ..RunArgs::default()
                },
                "workload.read",
            ),
            (
                RunArgs {
                    threads: Some(0),
                    ..RunArgs::default()
                },
                "clients.threads",
            ),
            (
                RunArgs {
                    ads: Some("1T".into()),
                    volume: Some("64G".into()),
                    ..RunArgs::default()
                },
                "workload.ads",
            ),
            (
                RunArgs {
                    memory: Some("1G".into()),
                    arc: Some("2G".into()),
                    ..RunArgs::default()
                },
                "arc",
            ),
            (
                RunArgs {
                    workload: Some("zipf:x".into()),
                    ..RunArgs::default()
                },
                "--workload",
            ),
            (
                RunArgs {
                    switch: vec!["sideways@1h".into()],
                    ..RunArgs::default()
                },
                "--switch",
            ),
        ] {
            let err = configure(&args).unwrap_err().to_string();
            assert!(err.contains(words), "{words:?} not in {err:?}");
        }
    }

    #[test]
    fn a_files_clients_and_duration_hold_unless_flags_change_them() {
        let dir = std::env::temp_dir().join(format!("larch-sim-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("pool.toml");
        std::fs::write(&path, "duration = \"30d\"\n[clients]\nrate = 500\n").unwrap();
        let from_file = RunArgs {
            config: Some(path.clone()),
            ..RunArgs::default()
        };
        let cfg = configure(&from_file).unwrap();
        // The rate used to become one closed-loop client with no think time.
        assert_eq!(cfg.clients, Clients::Open { rate: 500.0 });
        // A month at the preset's 1 s step would be 2.6 million samples.
        assert_eq!(cfg.duration_ns, 30 * 86_400 * SECOND_NS);
        assert_eq!(cfg.step_s, 60);
        let flags = RunArgs {
            threads: Some(8),
            step: Some("5m".into()),
            ..from_file
        };
        let cfg = configure(&flags).unwrap();
        assert!(
            matches!(cfg.clients, Clients::Closed { threads: 8, .. }),
            "{:?}",
            cfg.clients
        );
        assert_eq!(cfg.step_s, 300);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_server_model_is_on_in_the_seed_002_presets_and_set_by_file_or_flag() {
        let with = |preset: &str, server: Option<&str>| {
            configure(&RunArgs {
                preset: Some(preset.into()),
                server: server.map(Into::into),
                ..RunArgs::default()
            })
        };
        let seed002 = with("seed002-randwrite", None).unwrap();
        assert_eq!(seed002.tunables.server, ServerParams::xeon_2s());
        assert!(with("seed000", None).unwrap().tunables.server.is_off());
        let cfg = with("seed000", Some("sun7410:cores=16")).unwrap();
        assert_eq!(cfg.tunables.server.cores, 16);
        assert!(
            with("seed002-randread", Some("off"))
                .unwrap()
                .tunables
                .server
                .is_off()
        );
        let err = with("seed000", Some("sun7410:cores=0"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("--server") && err.contains("cores"), "{err}");
        let dir = std::env::temp_dir().join(format!("larch-sim-server-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("pool.toml");
        std::fs::write(&path, "server = \"xeon-2s:request_us=8\"\n").unwrap();
        let cfg = configure(&RunArgs {
            config: Some(path),
            ..RunArgs::default()
        })
        .unwrap();
        assert_eq!(cfg.tunables.server.request_us, 8.0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

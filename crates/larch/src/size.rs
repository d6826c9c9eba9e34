//! `larch size`: what an L2ARC of a given size on given devices would do for a workload,
//! before the hardware is bought. Runs the simulator (`larch_sim::sim`) on a table of
//! candidates (L2ARC sizes × device counts, each prewarmed, as seed 002 measured), one cold
//! run of the configuration asked for (its warm-up), and prints seed 002's key ratios, the
//! header DRAM, the predicted hit ratios, IOPS and latencies, and advice in the seeds' terms.
//! A trace workload runs at full size, and each candidate replays it from cold: nothing
//! knows its blocks before the replay, and its addresses and times do not scale.

use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{anyhow, bail};
use larch_engine::units::{format_size, parse_size};
use larch_sim::device::{self, DeviceSpec, streaming_read_bytes_per_s};
use larch_sim::sim::{self, CacheDevice, Clients, Ending, Pattern, SECOND_NS, SimConfig, Summary};
use serde::Serialize;

use crate::sim_run::{RunArgs, configure};

/// Arguments of `larch size`.
#[derive(clap::Args)]
pub struct SizeArgs {
    /// The workload and the pool, as `larch sim run` takes them (a preset, a file, flags);
    /// --cache names the cache devices' model (its count is one of the candidates).
    #[command(flatten)]
    pub run: RunArgs,
    /// L2ARC sizes to try, in all (default: none, a quarter, half and all of the active
    /// data set beyond the ARC, and a quarter more).
    #[arg(long, value_delimiter = ',', value_name = "SIZE,...")]
    pub l2_sizes: Vec<String>,
    /// Cache-device counts to try (default: 1, 2, 4, 8 and the count asked for).
    #[arg(long, value_delimiter = ',', value_name = "N,...")]
    pub device_counts: Vec<u32>,
    /// Virtual time each prewarmed candidate runs (its steady state). Not for a trace, which
    /// each candidate replays from cold to its end or --warm-for.
    #[arg(long, value_name = "TIME", default_value = "60s")]
    pub measure: String,
    /// Virtual time of the cold run of the configuration asked for at most (it ends
    /// earlier once settled: the ARC, the cache devices and the read rate still over the
    /// last quarter of the run and at least 2 hours), and of each candidate's replay of a
    /// trace (default: 48h).
    #[arg(long, value_name = "TIME")]
    pub warm_for: Option<String>,
}

/// One candidate's figures.
#[derive(Clone, Debug, Serialize)]
pub struct Candidate {
    /// Bytes of L2ARC in all.
    pub l2_bytes: u64,
    /// Cache devices.
    pub devices: u32,
    /// ADS / (ARC + L2ARC).
    pub ads_over_cache: f64,
    /// Cache devices' streaming bandwidth / the primary storage's.
    pub l2_over_primary_bandwidth: f64,
    /// Its steady state.
    pub steady: sim::Window,
    /// Mean busy share of its cache devices.
    pub cache_busy: f64,
    /// DRAM of larch's headers and L2 index, bytes.
    pub larch_dram_bytes: u64,
    /// DRAM OpenZFS's headers would take, bytes.
    pub openzfs_dram_bytes: u64,
}

/// What `larch size --json` prints.
#[derive(Debug, Serialize)]
struct Report {
    scale: u64,
    candidates: Vec<Candidate>,
    cold_run: Summary,
    advice: Vec<String>,
}

/// The active data set a run is scaled down to at most, unless a scale is given.
const AUTO_SCALE_ADS_BYTES: u64 = 4 << 30;

/// A scale at which the active data set is at most 4 GiB, unless one is given: hit ratios
/// and steady states are the full pool's (docs/simulator.md, "Scale"). A trace runs at full
/// size: its addresses and times do not shrink ([`SimConfig::scaled`] refuses to).
fn auto_scale(cfg: &SimConfig, asked: u64) -> u64 {
    if asked > 1 || is_trace(cfg) {
        return asked;
    }
    cfg.workload.ads_bytes.div_ceil(AUTO_SCALE_ADS_BYTES).max(1)
}

fn is_trace(cfg: &SimConfig) -> bool {
    matches!(cfg.workload.pattern, Pattern::Trace { .. })
}

/// The cold run's shortest settling window: it ends once the ARC, the cache devices and the
/// read rate have held still for a quarter of the run and at least this long (full-size
/// seconds), or at `--warm-for`.
const COLD_SETTLE_WINDOW_S: u64 = 2 * 3600;

fn run_scaled(cfg: &SimConfig, ending: Ending, scale: u64) -> anyhow::Result<Summary> {
    let mut out = sim::run_until(&cfg.scaled(scale)?, ending, &mut |_| {})?;
    out.rescale(scale);
    Ok(out.summary)
}

/// Runs the simulations of `runs` (each a name for the progress lines, a configuration
/// and when it ends), one per core of the machine at a time, and returns their summaries in
/// the order of `runs`: each is independent and deterministic, so the report is the same
/// whatever the number of cores and the order the runs end in.
fn run_all(
    runs: &[(String, SimConfig, Ending)],
    scale: u64,
    quiet: bool,
    started: Instant,
) -> Vec<anyhow::Result<Summary>> {
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(runs.len());
    let next = AtomicUsize::new(0);
    let work = || {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some((name, cfg, ending)) = runs.get(i) else {
                return done;
            };
            if !quiet {
                eprintln!(
                    "larch size: {name} ({:.0} s so far)",
                    started.elapsed().as_secs_f64()
                );
            }
            done.push((i, run_scaled(cfg, *ending, scale)));
        }
    };
    let mut results: Vec<(usize, anyhow::Result<Summary>)> = std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..workers).map(|_| scope.spawn(work)).collect();
        let mut all = work();
        for helper in helpers {
            all.extend(helper.join().expect("a simulation thread panicked"));
        }
        all
    });
    results.sort_by_key(|&(i, _)| i);
    results.into_iter().map(|(_, result)| result).collect()
}

/// Bytes per second the primary storage, or `count` cache devices of `spec`, stream: 1 MiB
/// reads, 32 outstanding, or two per disk of a pool of more (consecutive reads land on
/// consecutive vdevs, so 32 would leave the disks of a larger pool idle).
fn bandwidth(spec: &str, count: u32) -> anyhow::Result<f64> {
    let parsed = DeviceSpec::parse(spec).map_err(|e| anyhow!("{spec}: {e}"))?;
    let depth = match &parsed {
        DeviceSpec::Disks { count: disks, .. } => (2 * *disks as usize).max(32),
        _ => 32,
    };
    let mut dev = parsed.build(1).map_err(|e| anyhow!("{spec}: {e}"))?;
    Ok(f64::from(count) * streaming_read_bytes_per_s(dev.as_mut(), 0, 1 << 20, depth))
}

fn pct(x: f64) -> String {
    format!("{:.0}%", 100.0 * x)
}

fn latency(us: f64) -> String {
    if us >= 1000.0 {
        format!("{:.1} ms", us / 1000.0)
    } else {
        format!("{us:.0} us")
    }
}

fn duration(s: f64) -> String {
    larch_daemon::advise::span(s)
}

/// `larch size`.
pub fn run(args: SizeArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let mut base = configure(&args.run)?;
    let spec = base
        .caches
        .first()
        .map_or_else(|| "nvme".to_string(), |c| c.spec.clone());
    let asked_devices = base.caches.len() as u32;
    let asked_l2: u64 = if base.caches.is_empty() {
        0
    } else {
        base.caches
            .iter()
            .map(|c| {
                c.capacity_bytes.map_or_else(
                    || device::parse_spec(&c.spec, 1).map(|d| d.capacity_bytes()),
                    Ok,
                )
            })
            .sum::<Result<u64, _>>()
            .map_err(|e| anyhow!("--cache: {e}"))?
    };
    let ads = base.workload.ads_bytes;
    let beyond_arc = ads.saturating_sub(base.arc_max_bytes).max(1 << 30);
    let mut sizes: Vec<u64> = if args.l2_sizes.is_empty() {
        vec![
            0,
            beyond_arc / 4,
            beyond_arc / 2,
            beyond_arc,
            beyond_arc + beyond_arc / 4,
        ]
    } else {
        args.l2_sizes
            .iter()
            .map(|s| parse_size(s).map_err(|e| anyhow!("--l2-sizes: {e}")))
            .collect::<anyhow::Result<_>>()?
    };
    if asked_l2 > 0 {
        sizes.push(asked_l2);
    }
    sizes.sort_unstable();
    sizes.dedup();
    let mut counts = if args.device_counts.is_empty() {
        vec![1, 2, 4, 8]
    } else {
        args.device_counts.clone()
    };
    if asked_devices > 0 {
        counts.push(asked_devices);
    }
    counts.sort_unstable();
    counts.dedup();
    if counts.iter().any(|&n| n == 0 || n > 64) {
        bail!("--device-counts: 1 to 64 devices");
    }
    let measure =
        crate::sim_run::parse_duration(&args.measure).map_err(|e| anyhow!("--measure: {e}"))?;
    let warm_for = match &args.warm_for {
        Some(t) => crate::sim_run::parse_duration(t).map_err(|e| anyhow!("--warm-for: {e}"))?,
        None => 48 * 3600 * SECOND_NS,
    };
    let scale = auto_scale(&base, args.run.scale);
    // Refused here, before any run, when it cannot be (a trace asked to scale).
    base.scaled(scale)?;
    let traced = is_trace(&base);
    base.step_s = 1;
    let primary_bw = bandwidth(&base.primary, 1)?;
    let one_device_bw = bandwidth(&spec, 1)?;

    // The configuration asked for, from cold: how long it takes to warm. The longest run,
    // so it goes first and the candidates share the other cores meanwhile.
    let mut cold = base.clone();
    cold.prewarm = false;
    cold.duration_ns = warm_for;
    if !traced {
        cold.step_s = 60.max(cold.duration_ns / SECOND_NS / 2000);
    }
    // It ends once settled (a trace's at its end, which is its steady state).
    let ending = if traced {
        Ending::AtDuration
    } else {
        Ending::WhenSettled {
            window_s: COLD_SETTLE_WINDOW_S,
        }
    };
    let mut runs = vec![(
        "the configuration asked for, from cold".to_string(),
        cold,
        ending,
    )];
    let mut shapes = Vec::new();
    for &l2 in &sizes {
        let counts_here: &[u32] = if l2 == 0 { &[0] } else { &counts };
        for &n in counts_here {
            let mut cfg = base.clone();
            if traced {
                // A trace's blocks are not known before it is replayed: each candidate
                // replays it from cold, to its end (or --warm-for), and its steady state
                // is the end of the trace. The step stays a second: the run ends with the
                // interval in which the trace ended, and a longer one would count the
                // idle rest of that interval in its rates.
                cfg.prewarm = false;
                cfg.duration_ns = warm_for;
            } else {
                cfg.prewarm = true;
                // Scaling divides the time too; a steady state is measured for `measure`
                // whatever the scale.
                cfg.duration_ns = measure.saturating_mul(scale);
            }
            cfg.switch.clear();
            cfg.caches = (0..n)
                .map(|_| CacheDevice {
                    spec: spec.clone(),
                    capacity_bytes: Some(l2 / u64::from(n)),
                })
                .collect();
            let name = format!("L2ARC {} on {n} device(s)", format_size(l2));
            runs.push((name, cfg, Ending::AtDuration));
            shapes.push((l2, n));
        }
    }
    let mut summaries = run_all(&runs, scale, args.run.quiet, started).into_iter();
    // Its error, if any, after the candidates': the first error in the table's order.
    let cold_run = summaries.next().expect("the cold run's summary");
    let mut candidates = Vec::new();
    for ((l2, n), s) in shapes.into_iter().zip(summaries) {
        let s = s?;
        candidates.push(Candidate {
            l2_bytes: l2,
            devices: n,
            ads_over_cache: ads as f64 / (base.arc_max_bytes + l2) as f64,
            l2_over_primary_bandwidth: f64::from(n) * one_device_bw / primary_bw.max(1.0),
            cache_busy: s.cache_busy,
            larch_dram_bytes: s.larch_arc_hdr_bytes + s.larch_l2_index_bytes,
            openzfs_dram_bytes: s.openzfs_hdr_bytes,
            steady: s.steady,
        });
    }
    let cold_run = cold_run?;
    let advice = advise(&base, &candidates, &cold_run, asked_l2, asked_devices);
    if args.run.json {
        let report = Report {
            scale,
            candidates,
            cold_run,
            advice,
        };
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    print!(
        "{}",
        text(
            &base,
            &spec,
            scale,
            &candidates,
            Cold {
                run: &cold_run,
                warm_for_s: (warm_for / SECOND_NS) as f64,
            },
            &advice,
            started
        )
    );
    Ok(ExitCode::SUCCESS)
}

/// The cold run of the configuration asked for, and the longest it could have run.
struct Cold<'a> {
    run: &'a Summary,
    warm_for_s: f64,
}

fn text(
    cfg: &SimConfig,
    spec: &str,
    scale: u64,
    candidates: &[Candidate],
    cold: Cold<'_>,
    advice: &[String],
    started: Instant,
) -> String {
    let Cold {
        run: cold,
        warm_for_s,
    } = cold;
    let mut t = String::new();
    let clients = match cfg.clients {
        Clients::Closed { threads, .. } => format!("{threads} clients"),
        Clients::Open { rate } => format!("{rate} requests/s"),
    };
    t += &format!(
        "workload   {} requests of {} over an active data set of {} ({:.0}% reads, {clients}), {} blocks\n",
        cfg.workload.pattern.name(),
        format_size(u64::from(cfg.workload.io_bytes)),
        format_size(cfg.workload.ads_bytes),
        100.0 * cfg.workload.read_fraction,
        format_size(u64::from(cfg.block_bytes)),
    );
    let traced = is_trace(cfg);
    t += &format!(
        "pool       ARC {}, primary {}, cache devices {spec}; simulated {} in {:.0} s\n\n",
        format_size(cfg.arc_max_bytes),
        cfg.primary,
        if traced {
            "at full size (a trace does not scale)".to_string()
        } else {
            format!("at 1/{scale} scale")
        },
        started.elapsed().as_secs_f64()
    );
    t += &format!(
        "{:>9} {:>4} {:>9} {:>9} {:>9} {:>8} {:>8} {:>6} {:>6} {:>6} {:>6} {:>10} {:>10}\n",
        "L2ARC",
        "devs",
        "ADS/cache",
        "L2bw/pri",
        "IOPS",
        "p50",
        "p99",
        "<1ms",
        "ARC",
        "L2",
        "busy",
        "DRAM",
        "OpenZFS"
    );
    for c in candidates {
        let w = &c.steady;
        t += &format!(
            "{:>9} {:>4} {:>9.2} {:>9} {:>9.0} {:>8} {:>8} {:>6} {:>6} {:>6} {:>6} {:>10} {:>10}\n",
            if c.l2_bytes == 0 {
                "none".to_string()
            } else {
                format_size(c.l2_bytes)
            },
            if c.devices == 0 {
                "-".to_string()
            } else {
                c.devices.to_string()
            },
            c.ads_over_cache,
            if c.devices == 0 {
                "-".to_string()
            } else {
                format!("{:.2}", c.l2_over_primary_bandwidth)
            },
            w.iops,
            latency(w.p50_us),
            latency(w.p99_us),
            pct(w.reads_under_1ms),
            pct(w.arc_hit_ratio),
            if c.devices == 0 {
                "-".to_string()
            } else {
                pct(w.l2_hit_ratio)
            },
            if c.devices == 0 {
                "-".to_string()
            } else {
                pct(c.cache_busy)
            },
            format_size(c.larch_dram_bytes),
            format_size(c.openzfs_dram_bytes),
        );
    }
    t += if traced {
        "\n(each row replays the trace from cold, to its end or --warm-for, its figures the trace's end: a trace's\n blocks are not known before it is replayed, so nothing is prewarmed; ADS/cache is seed 002's key ratio 1,\n L2bw/pri its ratio 2; DRAM is larch's ARC headers and L2 index, OpenZFS what its headers would take)\n\n"
    } else {
        "\n(each row prewarmed, as seed 002 measured; ADS/cache is seed 002's key ratio 1, L2bw/pri its ratio 2;\n DRAM is larch's ARC headers and L2 index, OpenZFS what its headers would take)\n\n"
    };
    let at = |s: Option<u64>| s.map_or("not within the run".to_string(), |s| duration(s as f64));
    // The cold run ends once settled: say where, as its figures are relative to its end.
    let ended = if traced {
        String::new()
    } else if cold.virtual_seconds < warm_for_s {
        format!(
            " (settled: the run ended after {} of at most {})",
            duration(cold.virtual_seconds),
            duration(warm_for_s)
        )
    } else {
        format!(" (over {})", duration(warm_for_s))
    };
    t += &format!(
        "from cold  the configuration asked for{ended}: ARC warm after {}, L2ARC at 50% / 90% of {} after {} / {}, IOPS at 90% of steady after {}\n\n",
        at(cold.arc_warm_s),
        format_size(cold.l2_bytes),
        at(cold.l2_half_s),
        at(cold.l2_90_s),
        at(cold.iops_90_s),
    );
    t += "advice\n";
    for a in advice {
        t += &format!("- {a}\n");
    }
    t
}

/// Advice in the seeds' terms, from the table and the cold run.
fn advise(
    cfg: &SimConfig,
    candidates: &[Candidate],
    cold: &Summary,
    asked_l2: u64,
    asked_devices: u32,
) -> Vec<String> {
    let mut out = Vec::new();
    let none = candidates.iter().find(|c| c.devices == 0);
    let best = candidates
        .iter()
        .max_by(|a, b| a.steady.iops.total_cmp(&b.steady.iops));
    let (Some(none), Some(best)) = (none, best) else {
        return out;
    };
    let gain = best.steady.iops / none.steady.iops.max(1e-9);
    // The smallest L2ARC within 10% of the best, on the fewest devices.
    let enough = candidates
        .iter()
        .filter(|c| c.devices > 0 && c.steady.iops >= 0.9 * best.steady.iops)
        .min_by_key(|c| (c.l2_bytes, c.devices));
    if cfg.workload.read_fraction < 0.5 {
        out.push(format!(
            "write-heavy ({:.0}% writes): the ARC's MRU churns and the feed writes blocks that are soon \
             overwritten (seed 002's \"wasted L2ARC feed\"); keep the L2ARC to metadata \
             (secondarycache=metadata) or off for this volume (secondarycache=none), and keep \
             l2arc_nowrite=1",
            100.0 * (1.0 - cfg.workload.read_fraction)
        ));
    }
    if gain < 1.2 {
        let why = if none.ads_over_cache <= 1.0 || none.steady.arc_hit_ratio > 0.9 {
            "the active data set already fits in the ARC"
        } else if matches!(cfg.workload.pattern, Pattern::Sequential) {
            "sequential reads are prefetched, and the cache devices are not faster than the disks for streams"
        } else if cfg.workload.read_fraction < 0.5 {
            "the writes keep the cache a moving target"
        } else {
            "the misses are not what limits this workload"
        };
        out.push(format!(
            "an L2ARC would not help much here ({gain:.2}x at best): {why}"
        ));
    } else if let Some(e) = enough {
        let misses_served = e.steady.l2_hit_ratio;
        let warm_lower = e.l2_bytes as f64 / none.steady.primary_read_bytes_per_s.max(1.0);
        out.push(format!(
            "an L2ARC of {} on {} device(s) serves {} of the ARC's misses: {:.0} IOPS instead of {:.0} \
             ({:.1}x), p99 {} instead of {}, {} of reads under 1 ms; its index takes {} of DRAM \
             (OpenZFS's headers: {})",
            format_size(e.l2_bytes),
            e.devices,
            pct(misses_served),
            e.steady.iops,
            none.steady.iops,
            e.steady.iops / none.steady.iops.max(1e-9),
            latency(e.steady.p99_us),
            latency(none.steady.p99_us),
            pct(e.steady.reads_under_1ms),
            format_size(e.larch_dram_bytes),
            format_size(e.openzfs_dram_bytes),
        ));
        out.push(format!(
            "it warms only as fast as the disks read the data in: at today's {:.1} MiB/s of disk reads, \
             at least {} for {}, longer as the L2ARC serves more and the disks read less (seed 000: 7 h \
             by this arithmetic, over a day in practice); a persistent L2ARC keeps it warm across \
             restarts",
            none.steady.primary_read_bytes_per_s / (1 << 20) as f64,
            duration(warm_lower),
            format_size(e.l2_bytes)
        ));
    }
    // Device count: concurrency, as seed 000 and seed 002 say.
    if let Some(busy) = candidates
        .iter()
        .filter(|c| c.devices > 0 && c.cache_busy > 0.7)
        .min_by_key(|c| c.devices)
        && let Some(more) = candidates
            .iter()
            .filter(|c| c.l2_bytes == busy.l2_bytes && c.devices > busy.devices)
            .max_by(|a, b| a.steady.iops.total_cmp(&b.steady.iops))
        && more.steady.iops > 1.2 * busy.steady.iops
    {
        out.push(format!(
            "{} device(s) are {} busy: {} devices of the same total size give {:.1}x the IOPS — \
             use several cache devices for the concurrent I/O, not only for the capacity (seed 000)",
            busy.devices,
            pct(busy.cache_busy),
            more.devices,
            more.steady.iops / busy.steady.iops.max(1e-9)
        ));
    }
    if let Some(c) = candidates.iter().find(|c| c.devices > 0) {
        let ratio2 = c.l2_over_primary_bandwidth / f64::from(c.devices);
        if matches!(cfg.workload.pattern, Pattern::Sequential) {
            if ratio2 * f64::from(counts_max(candidates)) < 1.0 {
                out.push(
                    "streaming reads: these cache devices stream slower than the data vdevs \
                     (key ratio 2 < 1): keep prefetched blocks off them (l2arc_noprefetch=1)"
                        .to_string(),
                );
            } else {
                out.push(
                    "streaming reads: these cache devices stream faster than the data vdevs \
                     (key ratio 2 > 1): feed everything (l2arc_noprefetch=0), as seed 002 found \
                     with NVMe"
                        .to_string(),
                );
            }
        }
    }
    if cfg.workload.io_bytes < cfg.block_bytes
        && !matches!(cfg.workload.pattern, Pattern::Sequential)
    {
        out.push(format!(
            "requests of {} on {} blocks read and cache {}x the bytes asked for (and partial writes \
             read the block first): a record size (volblocksize) of {} matches the I/O — at the \
             price of {}x the header DRAM per byte cached",
            format_size(u64::from(cfg.workload.io_bytes)),
            format_size(u64::from(cfg.block_bytes)),
            cfg.block_bytes / cfg.workload.io_bytes,
            format_size(u64::from(cfg.workload.io_bytes)),
            cfg.block_bytes / cfg.workload.io_bytes,
        ));
    }
    if let Some(c) = candidates.iter().max_by_key(|c| c.l2_bytes)
        && c.openzfs_dram_bytes > cfg.arc_max_bytes / 4
    {
        out.push(format!(
            "with OpenZFS, {} of L2ARC at {} blocks would take {} of DRAM for headers, {} of the ARC \
             (seed 000: \"you shouldn't configure a system with only 8 Gbytes of DRAM, 600 Gbytes of \
             L2ARC, and an 8 Kbyte record size\"); larch's index takes {}",
            format_size(c.l2_bytes),
            format_size(u64::from(cfg.block_bytes)),
            format_size(c.openzfs_dram_bytes),
            pct(c.openzfs_dram_bytes as f64 / cfg.arc_max_bytes as f64),
            format_size(c.larch_dram_bytes),
        ));
    }
    if asked_l2 > 0
        && let Some(asked) = candidates
            .iter()
            .find(|c| c.l2_bytes == asked_l2 && c.devices == asked_devices)
    {
        out.push(format!(
            "the configuration asked for ({} on {} device(s)): {:.0} IOPS when warm, ADS/(ARC + L2ARC) = {:.2}{}",
            format_size(asked_l2),
            asked_devices,
            asked.steady.iops,
            asked.ads_over_cache,
            match cold.iops_90_s {
                Some(s) => format!(", 90% of that after {} from cold", duration(s as f64)),
                None => String::new(),
            }
        ));
    }
    out
}

fn counts_max(candidates: &[Candidate]) -> u32 {
    candidates
        .iter()
        .map(|c| c.devices)
        .max()
        .unwrap_or(1)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_scale_keeps_the_data_set_within_4_gib_and_leaves_a_trace_whole() {
        let mut cfg = crate::sim_run::preset("small").unwrap();
        let gib = 1u64 << 30;
        for (ads, scale) in [
            (3 * gib, 1),
            (4 * gib, 1),
            (4 * gib + 8192, 2),
            (8 * gib - 8192, 2),
            (8 * gib, 2),
            (8 * gib + 8192, 3),
        ] {
            cfg.workload.ads_bytes = ads;
            assert_eq!(auto_scale(&cfg, 1), scale, "{ads} bytes");
            let scaled = cfg.scaled(scale).unwrap();
            assert!(scaled.workload.ads_bytes <= 4 * gib, "{ads} bytes");
        }
        assert_eq!(auto_scale(&cfg, 5), 5);
        cfg.workload.pattern = Pattern::Trace {
            path: "t.csv".into(),
            format: None,
        };
        cfg.workload.ads_bytes = 100 * gib;
        assert_eq!(auto_scale(&cfg, 1), 1);
    }

    #[test]
    fn a_pool_of_many_disks_streams_from_all_of_them() {
        let one = bandwidth("hdd", 1).unwrap();
        let many = bandwidth("128xhdd", 1).unwrap();
        // 32 reads in flight kept at most 32 of the 128 disks busy.
        assert!(many > 100.0 * one, "{many} against {one} for one disk");
    }

    #[test]
    fn a_device_that_takes_no_time_still_gets_a_finite_rate() {
        // Used to loop for ever: no read ever ended after the probe's second.
        let rate = bandwidth("ram:latency_us=0", 1).unwrap();
        assert!(rate.is_finite() && rate > 0.0, "{rate}");
    }
}

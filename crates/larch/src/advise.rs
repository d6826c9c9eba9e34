//! `larch advise`: "know your workload" (seed 002). The miss-ratio curves of a running pool
//! (asked of its daemon, `GET /api/v1/advise`) or of a recorded trace (`--trace`, so a
//! pool can be sized before larch runs on it), where the configuration sits on them, and
//! what a bigger ARC or an L2ARC would buy. The arithmetic is in `larch_daemon::advise`;
//! the curves in `larch_mrc` (docs/mrc.md).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, anyhow, bail};
use larch_daemon::advise::{self, Advice, Prediction, Today};
use larch_daemon::client;
use larch_engine::units::parse_size;
use larch_mrc::{Sampler, SamplerConfig};

const AFTER_HELP: &str = "\
From a running pool (the default): its daemon samples every client access (mrc_sample=1,
a few MB at most) and answers with the curves, today's figures (the last minute's reads
and misses, the mean latencies since it started) and the advice.

From a trace (--trace FILE, any format `larch sim` reads): the trace is sampled the same
way and the latencies come from the simulator's device models (--backing, --device).

The hit ratio at a size comes from miniature ARCs run on the sample (the LRU curve from
reuse distances is printed beside it); an ARC of A with an L2ARC of L is taken to hit as
an ARC of A + L would. How close the curves come to exact ones, and how the predictions
compare with measured pools, is in docs/mrc.md.

Examples:
  larch advise                                   # the pool in ./larch-data
  larch advise --arc 8G --l2 200G --device nvme  # and one configuration of your own
  larch advise --trace prod.csv --arc 16G --backing 12xhdd --device nvme";

/// Arguments of `larch advise`.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct AdviseArgs {
    /// The running pool's state directory.
    #[arg(long, default_value = "larch-data")]
    pub state_dir: PathBuf,
    /// A block trace to advise on instead of a running pool.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// The trace's format (text, lis, csv, oracle-general, vscsi); detected by default.
    #[arg(long, requires = "trace")]
    pub format: Option<larch_sim::Format>,
    /// Block size the trace's byte ranges are split into.
    #[arg(long, default_value = "8K", requires = "trace")]
    pub block_size: String,
    /// An ARC size to predict (with --trace: the ARC the pool would have; required).
    #[arg(long, value_name = "SIZE")]
    pub arc: Option<String>,
    /// An L2ARC size to predict (with --trace: default none).
    #[arg(long, value_name = "SIZE")]
    pub l2: Option<String>,
    /// The simulator's model of the cache devices, for the latency of an L2ARC the pool
    /// does not have (nvme, ssd, readzilla; default nvme).
    #[arg(long, value_name = "SPEC")]
    pub device: Option<String>,
    /// With --trace: the simulator's model of the backing store (hdd, 12xhdd, 12xhdd:raidz2,
    /// s3, ...).
    #[arg(long, default_value = "hdd", requires = "trace")]
    pub backing: String,
    /// Print the answer as JSON.
    #[arg(long)]
    pub json: bool,
}

fn size_arg(name: &str, text: &str, min: u64) -> anyhow::Result<u64> {
    let bytes = parse_size(text).map_err(|e| anyhow!("--{name} {text:?}: {e}"))?;
    if bytes < min || bytes > advise::MAX_SIZE {
        bail!(
            "--{name} {text}: out of range ({} to {} bytes)",
            min,
            advise::MAX_SIZE
        );
    }
    Ok(bytes)
}

/// Runs `larch advise`.
pub fn run(args: AdviseArgs) -> anyhow::Result<ExitCode> {
    let arc = args
        .arc
        .as_deref()
        .map(|t| size_arg("arc", t, advise::MIN_ARC))
        .transpose()?;
    let l2 = args
        .l2
        .as_deref()
        .map(|t| size_arg("l2", t, 0))
        .transpose()?;
    let advice = match &args.trace {
        Some(_) => from_trace(&args, arc, l2)?,
        None => from_daemon(&args, arc, l2)?,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&advice)?);
    } else {
        print_advice(&advice);
    }
    Ok(ExitCode::SUCCESS)
}

fn from_daemon(args: &AdviseArgs, arc: Option<u64>, l2: Option<u64>) -> anyhow::Result<Advice> {
    let daemon = client::find(&args.state_dir).ok_or_else(|| {
        anyhow!(
            "no running daemon for {} (start it with `larch serve`, or advise on a trace with --trace)",
            args.state_dir.display()
        )
    })?;
    let arc_text = arc.map(|b| b.to_string());
    let l2_text = l2.map(|b| b.to_string());
    let mut query: Vec<(&str, &str)> = Vec::new();
    if let Some(t) = &arc_text {
        query.push(("arc", t));
    }
    if let Some(t) = &l2_text {
        query.push(("l2", t));
    }
    if let Some(d) = &args.device {
        query.push(("device", d));
    }
    let body = daemon.get_with("/api/v1/advise", &query, 16 << 20)?;
    serde_json::from_str(&body).context("the daemon's /api/v1/advise")
}

/// What `larch advise --trace` says of a trace whose records have no times.
const UNTIMED: &str = "untimed trace: its records have no times, so no rates are reported \
                       (reads/s, miss bytes/s, and the warm-up that follows from them); its \
                       time windows (working set, the last 10 min) count a record as a second";

fn from_trace(args: &AdviseArgs, arc: Option<u64>, l2: Option<u64>) -> anyhow::Result<Advice> {
    let path = args.trace.as_ref().expect("trace mode");
    let arc = arc.ok_or_else(|| anyhow!("--trace needs --arc: the ARC the pool would have"))?;
    let block = parse_size(&args.block_size)
        .map_err(|e| anyhow!("--block-size {:?}: {e}", args.block_size))?;
    if !(512..=16 << 20).contains(&block) {
        bail!(
            "--block-size {}: out of range (512 to 16M)",
            args.block_size
        );
    }
    let mut sampler = Sampler::new(SamplerConfig::default()).map_err(|e| anyhow!(e))?;
    let started = Instant::now();
    let mut last_note = Instant::now();
    let (mut reads, mut read_bytes, mut first_ms, mut last_ms) = (0u64, 0u64, None, 0u64);
    let read = larch_mrc::trace::for_each_access(path, args.format, block as u32, |a| {
        sampler.offer(a);
        if !a.write {
            reads += 1;
            read_bytes += u64::from(a.bytes);
        }
        first_ms.get_or_insert(a.now_ms);
        last_ms = a.now_ms;
        if last_note.elapsed().as_secs() >= 5 {
            eprintln!(
                "larch advise: {} accesses sampled so far ({:.0} s)",
                sampler.sampled(),
                started.elapsed().as_secs_f64()
            );
            last_note = Instant::now();
        }
    })
    .map_err(|e| anyhow!(e))?;
    if read.records == 0 {
        bail!("{}: no records", path.display());
    }
    // A trace without times (a text or lis trace, a CSV without a time column) is read on
    // the simulator's clock of a second per record: reads per second, miss bytes per
    // second and the warm-up that follows from them would be that clock's, not the
    // workload's.
    let timed = read.timed;
    let mut curves = larch_engine::mrc::curves_of(&sampler, last_ms);
    // A trace that ended warms no further: the live pool's "still warming, ask again later"
    // does not apply (its first reads show in the overall cold share instead).
    curves.recent_cold_share = 0.0;
    let ram = advise::device_read_us("ram", block).map_err(|e| anyhow!(e))?;
    let miss =
        advise::device_read_us(&args.backing, block).map_err(|e| anyhow!("--backing: {e}"))?;
    let device = args.device.clone().unwrap_or_else(|| "nvme".into());
    let l2_read = advise::device_read_us(&device, block).map_err(|e| anyhow!("--device: {e}"))?;
    let span_s = (last_ms - first_ms.unwrap_or(0)) as f64 / 1000.0;
    let (read_iops, read_bytes_per_s) = if timed && span_s > 0.0 {
        (reads as f64 / span_s, read_bytes as f64 / span_s)
    } else {
        (0.0, 0.0)
    };
    let h = advise::hit_at(&curves.arc, arc);
    let today = Today {
        arc_bytes: arc,
        l2_bytes: 0,
        block_bytes: block,
        read_iops,
        arc_hit_us: Some(ram),
        l2_hit_us: None,
        miss_us: Some(miss),
        // A trace's load is offered, not closed-loop: no IOPS are predicted from it.
        read_us: None,
        // The bytes the trace's reads asked for, not reads × --block-size: a record of an
        // object trace (oracleGeneral) is one block of the object's own size.
        miss_bytes_per_s: read_bytes_per_s * (1.0 - h),
        arc_hit_ratio: h,
        l2arc_meta_percent: 33,
    };
    let mut advice = advise::advise(&curves, &today, Some((&device, l2_read)));
    advice.asked = l2.map(|l2| advise::predict(&curves, &today, arc, l2, Some(l2_read)));
    if !timed {
        advice.lines.insert(0, UNTIMED.to_string());
    }
    Ok(advice)
}

fn bytes(b: u64) -> String {
    let f = b as f64;
    for (unit, scale) in [
        ("T", 1u64 << 40),
        ("G", 1 << 30),
        ("M", 1 << 20),
        ("K", 1 << 10),
    ] {
        if b >= scale {
            return format!("{:.1}{unit}", f / scale as f64);
        }
    }
    format!("{b}")
}

fn row(p: &Prediction) -> String {
    let opt = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map_or("-".to_string(), f);
    let over = if p.index_over_cap {
        "  index over l2arc_meta_percent"
    } else {
        ""
    };
    format!(
        "{:>8} {:>8} {:>7.1}% {:>7.1}% {:>8.1}% {:>9} {:>9} {:>10} {:>9}",
        bytes(p.arc_bytes),
        bytes(p.l2_bytes),
        100.0 * p.arc_hit_ratio,
        100.0 * p.l2_hit_ratio,
        100.0 * p.misses_served,
        opt(p.read_iops, &|v| format!("{v:.0}")),
        opt(p.read_us, &|v| format!("{:.2}ms", v / 1000.0)),
        opt(p.warm_s, &advise::span),
        bytes(p.l2_index_bytes),
    ) + over
}

fn print_advice(a: &Advice) {
    let c = &a.curves;
    println!(
        "sampled {} accesses of about {:.0} (rate {:.3}%, {} blocks followed, {} held)",
        c.sampled,
        c.estimated_accesses,
        100.0 * c.rate,
        c.tracked,
        bytes(c.memory_bytes)
    );
    println!(
        "writes {:.0}%, sequential {:.0}%, metadata {:.0}%; working set: {}",
        100.0 * c.write_share,
        100.0 * c.sequential_share,
        100.0 * c.metadata_share,
        c.working_set
            .iter()
            .map(|(w, b)| format!("{} in {}", bytes(*b as u64), window(*w)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "first reads of a block (no cache serves them): {:.0}% of reads, {:.0}% in the last 10 min",
        100.0 * c.cold_share,
        100.0 * c.recent_cold_share
    );
    if let Some(why) = &a.too_young {
        println!("{why}");
    }
    println!();
    println!("{:>10} {:>8} {:>8}", "cache", "ARC", "LRU");
    // Past the footprint every size hits alike: the rows up to the plateau's first.
    let rounded = |i: usize| {
        let lru = c.lru.get(i).map_or(0.0, |p| p.1);
        ((c.arc[i].1 * 1000.0).round(), (lru * 1000.0).round())
    };
    let last_change = (1..c.arc.len())
        .rev()
        .find(|&i| rounded(i) != rounded(i - 1))
        .unwrap_or(0);
    for (i, (size, h)) in c.arc.iter().enumerate().take(last_change + 1) {
        let lru = c.lru.get(i).map_or(0.0, |p| p.1);
        println!(
            "{:>10} {:>7.1}% {:>7.1}%",
            bytes(*size),
            100.0 * h,
            100.0 * lru
        );
    }
    if last_change + 1 < c.arc.len() {
        println!("{:>10} (the same at every larger size)", "...");
    }
    println!();
    println!(
        "{:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>9} {:>10} {:>9}",
        "ARC",
        "L2ARC",
        "ARC hit",
        "L2 hit",
        "miss srv",
        "reads/s",
        "latency",
        "warm >=",
        "L2 index"
    );
    println!("{}  (today)", row(&a.current));
    if let Some(p) = &a.asked {
        println!("{}  (asked)", row(p));
    }
    for p in &a.what_if {
        println!("{}", row(p));
    }
    if !a.volumes.is_empty() {
        println!();
        println!(
            "{:<16} {:>7} {:>9} {:>9} {:>10} {:>7} {:>6}",
            "volume", "access", "ARC hit", "+L2 hit", "WS 1 h", "writes", "seq"
        );
        for v in &a.volumes {
            let hour = v
                .curves
                .working_set
                .iter()
                .find(|w| w.0 == 3600)
                .map_or(0.0, |w| w.1);
            println!(
                "{:<16} {:>6.0}% {:>8.1}% {:>8.1}% {:>10} {:>6.0}% {:>5.0}%",
                v.name,
                100.0 * v.share_of_pool,
                100.0 * v.arc_hit_ratio,
                100.0 * v.arc_l2_hit_ratio,
                bytes(hour as u64),
                100.0 * v.curves.write_share,
                100.0 * v.curves.sequential_share
            );
        }
    }
    if !a.lines.is_empty() {
        println!();
        for l in &a.lines {
            println!("- {l}");
        }
    }
}

fn window(s: u64) -> String {
    match s {
        s if s % 86_400 == 0 => format!("{} d", s / 86_400),
        s if s % 3600 == 0 => format!("{} h", s / 3600),
        s if s % 60 == 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An object trace's reads are of the objects' sizes: the miss bytes per second (and
    /// the warm-up bounds that follow from them) came from reads × --block-size instead.
    #[test]
    fn a_trace_of_objects_misses_the_objects_bytes() {
        let dir = std::env::temp_dir().join(format!("larch-advise-objects-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let trace = dir.join("objects.oracleGeneral");
        // Ten first reads of 1 MiB objects, one a second: none can hit.
        let mut bytes = Vec::new();
        for i in 0..10u32 {
            bytes.extend_from_slice(&i.to_le_bytes());
            bytes.extend_from_slice(&u64::from(i + 100).to_le_bytes());
            bytes.extend_from_slice(&(1u32 << 20).to_le_bytes());
            bytes.extend_from_slice(&(-1i64).to_le_bytes());
        }
        std::fs::write(&trace, &bytes).unwrap();
        let args = AdviseArgs {
            state_dir: dir.clone(),
            trace: Some(trace),
            format: Some(larch_sim::Format::OracleGeneral),
            block_size: "8K".into(),
            arc: None,
            l2: None,
            device: None,
            backing: "hdd".into(),
            json: true,
        };
        let advice = from_trace(&args, Some(64 << 20), None);
        let _ = std::fs::remove_dir_all(&dir);
        let today = advice.unwrap().today;
        assert_eq!(today.arc_hit_ratio, 0.0);
        // Ten reads over the nine seconds from the first to the last.
        let expected = 10.0 * (1u64 << 20) as f64 / 9.0;
        assert!(
            (today.miss_bytes_per_s - expected).abs() < 1.0,
            "{} bytes/s, expected {expected}",
            today.miss_bytes_per_s
        );
        assert!((today.read_iops - 10.0 / 9.0).abs() < 1e-9);
    }
}

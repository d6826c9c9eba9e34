//! "Know your workload" (seed 002): from a pool's miss-ratio curves (`larch_mrc`) and what
//! it measures today, where its caches sit on the curves and what a bigger ARC or L2ARC would
//! buy — the share of today's misses it would serve, the latency and IOPS that follow, how
//! long it takes to warm, the DRAM its index takes — and when it would not help. The same
//! answer serves `larch advise` and the Analytics page's panel (`/api/v1/advise`).
//!
//! The arithmetic, stated so it can be checked:
//! - hit ratios at a size come from the ARC curve (miniature ARCs run on the sampled stream),
//!   interpolated in log size; the LRU curve is shown beside it;
//! - an ARC of A and an L2ARC of L together hit about as often as an ARC of A + L (the L2ARC
//!   extends the ARC's reach, which is what a warm L2ARC does: seed 000), so the L2ARC serves
//!   `h(A + L) − h(A)` of the reads, that share of today's misses being
//!   `(h(A + L) − h(A)) / (1 − h(A))`;
//! - a read's latency is the measured front-end time of an ARC hit, an L2 hit (or an ARC
//!   hit plus the cache device's read time from its model) and a miss, weighted by those
//!   ratios; the IOPS follow from today's requests in flight (Little's law: IOPS × latency),
//!   which a closed-loop workload keeps;
//! - an L2ARC fills no faster than the misses bring blocks in: its size over today's miss
//!   bytes per second is a lower bound on its warm-up (seed 000: 7 hours by this rule, over a
//!   day in practice);
//! - its index takes 30 bytes of DRAM per block (larch: 29.3 measured; OpenZFS's headers
//!   96), and at most `l2arc_meta_percent` of the ARC (never less than 4 MiB): an L2ARC
//!   whose index would not fit is fed only up to it.

use serde::{Deserialize, Serialize};

/// Bytes of DRAM larch's L2 index takes per block on a cache device (29.3 measured:
/// docs/engine.md).
pub const L2_INDEX_BYTES_PER_BLOCK: u64 = 30;
/// The L2 index's cap never falls below this (the engine's floor).
pub const L2_INDEX_MIN_CAP: u64 = 4 << 20;
/// Bytes OpenZFS's headers take per block only on a cache device.
pub const OPENZFS_L2_HDR_BYTES: u64 = 96;
/// Sampled accesses below which a curve is not trusted.
pub const MIN_SAMPLED: u64 = 2000;
/// Blocks followed below which a sampled (rate below 1) curve is not trusted: each would
/// stand for too large a share of the footprint.
pub const MIN_TRACKED: u64 = 64;
/// The smallest ARC a prediction is made for.
pub const MIN_ARC: u64 = 1 << 20;
/// The largest size a prediction is made for (1 PiB).
pub const MAX_SIZE: u64 = 1 << 50;

pub use larch_engine::mrc::Curves;

/// What the pool does today.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Today {
    /// `zfs_arc_max`.
    pub arc_bytes: u64,
    /// Bytes of its cache devices.
    pub l2_bytes: u64,
    /// Block size (of its first volume).
    pub block_bytes: u64,
    /// Client reads per second (the last minute).
    pub read_iops: f64,
    /// Mean front-end time of a read served from the ARC, µs.
    pub arc_hit_us: Option<f64>,
    /// Of a read served from a cache device, µs.
    pub l2_hit_us: Option<f64>,
    /// Of a read served from the backing store, µs.
    pub miss_us: Option<f64>,
    /// Mean front-end time of every read, µs.
    pub read_us: Option<f64>,
    /// Bytes per second read from backing stores for misses (the last minute).
    pub miss_bytes_per_s: f64,
    /// The measured ARC hit ratio.
    pub arc_hit_ratio: f64,
    /// `l2arc_meta_percent`: the L2 index's cap, in percent of the ARC.
    #[serde(default = "default_meta_percent")]
    pub l2arc_meta_percent: u64,
}

fn default_meta_percent() -> u64 {
    33
}

/// One configuration, predicted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    /// ARC size.
    pub arc_bytes: u64,
    /// L2ARC size.
    pub l2_bytes: u64,
    /// Reads the ARC serves.
    pub arc_hit_ratio: f64,
    /// Reads the cache devices serve.
    pub l2_hit_ratio: f64,
    /// Share of today's misses the L2ARC would serve.
    pub misses_served: f64,
    /// Mean read latency, µs (when today's latencies are known).
    pub read_us: Option<f64>,
    /// Reads per second at today's requests in flight.
    pub read_iops: Option<f64>,
    /// Lower bound on the time to fill the L2ARC at today's miss rate, s.
    pub warm_s: Option<f64>,
    /// DRAM of the L2 index, bytes.
    pub l2_index_bytes: u64,
    /// What OpenZFS's headers would take, bytes.
    pub openzfs_l2_hdr_bytes: u64,
    /// The index would exceed its cap (`l2arc_meta_percent` of the ARC): the feed stops
    /// there, and the L2ARC holds less than its size.
    pub index_over_cap: bool,
}

/// One volume's part of the pool's workload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VolumeView {
    /// Its name.
    pub name: String,
    /// Its share of the pool's accesses.
    pub share_of_pool: f64,
    /// Its reads' hit ratio in today's ARC (LRU estimate, in the cache it shares).
    pub arc_hit_ratio: f64,
    /// In today's ARC + L2ARC.
    pub arc_l2_hit_ratio: f64,
    /// Its curves (LRU only).
    pub curves: Curves,
}

impl VolumeView {
    /// A volume's view from its curves and the pool's sizes today.
    pub fn of(
        name: &str,
        curves: Curves,
        pool_estimated_accesses: f64,
        today: &Today,
    ) -> VolumeView {
        VolumeView {
            name: name.to_string(),
            share_of_pool: if pool_estimated_accesses > 0.0 {
                (curves.estimated_accesses / pool_estimated_accesses).clamp(0.0, 1.0)
            } else {
                0.0
            },
            arc_hit_ratio: hit_at(&curves.lru, today.arc_bytes),
            arc_l2_hit_ratio: hit_at(&curves.lru, today.arc_bytes + today.l2_bytes),
            curves,
        }
    }
}

/// The answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Advice {
    /// Why the curves cannot be trusted yet, if they cannot.
    pub too_young: Option<String>,
    /// What today's measurements say.
    pub today: Today,
    /// The curves the advice comes from.
    pub curves: Curves,
    /// The configuration asked about, if one was.
    pub asked: Option<Prediction>,
    /// Each volume's part (filled by the caller that knows the volumes).
    #[serde(default)]
    pub volumes: Vec<VolumeView>,
    /// Today's configuration on the curves.
    pub current: Prediction,
    /// Other configurations.
    pub what_if: Vec<Prediction>,
    /// What to do, in the seeds' terms.
    pub lines: Vec<String>,
}

/// The hit ratio of a curve at `bytes`, interpolated in log size; below the first point,
/// that point's ratio scaled by `bytes / its size` (so 0 at 0 bytes); past the last, the
/// last's.
pub fn hit_at(curve: &[(u64, f64)], bytes: u64) -> f64 {
    if curve.is_empty() || bytes == 0 {
        return 0.0;
    }
    let b = bytes as f64;
    let mut prev: Option<(f64, f64)> = None;
    for &(size, hit) in curve {
        let s = size as f64;
        if b <= s {
            return match prev {
                None => hit * (b / s).min(1.0),
                Some((ps, ph)) => {
                    let f = (b.ln() - ps.ln()) / (s.ln() - ps.ln()).max(f64::MIN_POSITIVE);
                    ph + f * (hit - ph)
                }
            };
        }
        prev = Some((s, hit));
    }
    curve.last().map_or(0.0, |p| p.1)
}

fn gib(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= (1u64 << 40) as f64 {
        format!("{:.1} TiB", b / (1u64 << 40) as f64)
    } else if b >= (1u64 << 30) as f64 {
        format!("{:.1} GiB", b / (1u64 << 30) as f64)
    } else if b >= (1u64 << 20) as f64 {
        format!("{:.0} MiB", b / (1u64 << 20) as f64)
    } else {
        format!("{:.0} KiB", b / 1024.0)
    }
}

/// A length of time, as a person would say it.
pub fn span(s: f64) -> String {
    if s < 120.0 {
        format!("{s:.0} s")
    } else if s < 7200.0 {
        format!("{:.0} min", s / 60.0)
    } else if s < 172_800.0 {
        format!("{:.1} h", s / 3600.0)
    } else {
        format!("{:.1} days", s / 86_400.0)
    }
}

/// Predicts an ARC of `arc` and an L2ARC of `l2`. `l2_read_us`: a cache device's read time
/// when the pool has none to measure.
pub fn predict(
    curves: &Curves,
    today: &Today,
    arc: u64,
    l2: u64,
    l2_read_us: Option<f64>,
) -> Prediction {
    // A volume's log has no miniature ARCs: its LRU curve stands in.
    let curve = if curves.arc.is_empty() {
        &curves.lru
    } else {
        &curves.arc
    };
    let h_arc = hit_at(curve, arc);
    let h_all = hit_at(curve, arc + l2).max(h_arc);
    let h_l2 = if l2 > 0 { h_all - h_arc } else { 0.0 };
    let h_today = hit_at(curve, today.arc_bytes);
    let misses_served = if h_today < 1.0 {
        (h_l2 / (1.0 - h_today)).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let l2_us = today
        .l2_hit_us
        .or_else(|| Some(today.arc_hit_us? + l2_read_us?));
    let read_us = match (today.arc_hit_us, today.miss_us) {
        (Some(a), Some(m)) if h_l2 == 0.0 => Some(h_arc * a + (1.0 - h_all) * m),
        (Some(a), Some(m)) => l2_us.map(|l| h_arc * a + h_l2 * l + (1.0 - h_all) * m),
        _ => None,
    };
    let in_flight = match today.read_us {
        Some(us) if today.read_iops > 0.0 => Some(today.read_iops * us / 1e6),
        _ => None,
    };
    let read_iops = match (in_flight, read_us) {
        (Some(n), Some(us)) if us > 0.0 => Some(n / (us / 1e6)),
        _ => None,
    };
    let blocks = l2 / today.block_bytes.max(512);
    Prediction {
        arc_bytes: arc,
        l2_bytes: l2,
        arc_hit_ratio: h_arc,
        l2_hit_ratio: h_l2,
        misses_served,
        read_us,
        read_iops,
        warm_s: (l2 > 0 && today.miss_bytes_per_s > 0.0)
            .then(|| l2 as f64 / today.miss_bytes_per_s),
        l2_index_bytes: blocks * L2_INDEX_BYTES_PER_BLOCK,
        openzfs_l2_hdr_bytes: blocks * OPENZFS_L2_HDR_BYTES,
        index_over_cap: blocks * L2_INDEX_BYTES_PER_BLOCK
            > (arc / 100 * today.l2arc_meta_percent).max(L2_INDEX_MIN_CAP),
    }
}

/// The advice for a pool: today's position, a what-if table (L2ARC of a quarter, a half,
/// one, two and four times the working set beyond the ARC, and a doubled ARC), and lines.
/// `device`: a cache device's name and read time, for pools that have none yet.
pub fn advise(curves: &Curves, today: &Today, device: Option<(&str, f64)>) -> Advice {
    let l2_read_us = device.map(|d| d.1);
    let current = predict(curves, today, today.arc_bytes, today.l2_bytes, l2_read_us);
    let mut lines = Vec::new();
    let too_young = if curves.sampled < MIN_SAMPLED {
        Some(format!(
            "the pool is too young for a curve: {} accesses sampled ({:.0} seen), {MIN_SAMPLED} needed",
            curves.sampled, curves.estimated_accesses
        ))
    } else if curves.rate < 1.0 && curves.tracked < MIN_TRACKED {
        Some(format!(
            "the sample follows only {} blocks (at {:.3}% of them): too few for a curve yet",
            curves.tracked,
            100.0 * curves.rate
        ))
    } else {
        None
    };
    let ws = curves
        .working_set
        .iter()
        .map(|w| w.1)
        .fold(0.0f64, f64::max) as u64;
    let beyond = ws.saturating_sub(today.arc_bytes).max(64 << 20);
    let mut what_if: Vec<Prediction> = [beyond / 4, beyond / 2, beyond, beyond * 2, beyond * 4]
        .into_iter()
        .filter(|&l2| l2 != today.l2_bytes)
        .map(|l2| predict(curves, today, today.arc_bytes, l2, l2_read_us))
        .collect();
    what_if.push(predict(
        curves,
        today,
        today.arc_bytes * 2,
        today.l2_bytes,
        l2_read_us,
    ));
    if too_young.is_some() {
        return Advice {
            too_young,
            today: today.clone(),
            curves: curves.clone(),
            asked: None,
            volumes: Vec::new(),
            current,
            what_if,
            lines,
        };
    }
    let misses = 1.0 - current.arc_hit_ratio - current.l2_hit_ratio;
    lines.push(format!(
        "today: the ARC ({}) serves {:.0}% of reads{}, {:.0}% go to the backing stores; the \
         working set of the last hour is about {}",
        gib(today.arc_bytes),
        100.0 * current.arc_hit_ratio,
        if today.l2_bytes > 0 {
            format!(
                ", the L2ARC ({}) {:.0}%",
                gib(today.l2_bytes),
                100.0 * current.l2_hit_ratio
            )
        } else {
            String::new()
        },
        100.0 * misses.max(0.0),
        gib(ws)
    ));
    if curves.recent_cold_share > 0.1 {
        lines.push(format!(
            "the pool is still warming: {:.0}% of the last ten minutes' reads were of blocks \
             not read before, which no cache serves; the curves rise as the workload re-reads \
             them — ask again later",
            100.0 * curves.recent_cold_share
        ));
    }
    if curves.write_share > 0.5 {
        lines.push(format!(
            "{:.0}% of accesses are writes: the ARC's cold end churns and what the feed writes \
             is soon overwritten (seed 002's wasted feed); an L2ARC would not help much — keep \
             write-heavy volumes to secondarycache=metadata (or none), with l2arc_nowrite=1",
            100.0 * curves.write_share
        ));
    }
    if curves.sequential_share > 0.5 {
        lines.push(format!(
            "{:.0}% of accesses continue sequential streams, which the prefetcher serves; an \
             L2ARC helps them only on cache devices faster than the disks for streams \
             (l2arc_noprefetch=0 then, else keep 1)",
            100.0 * curves.sequential_share
        ));
    }
    if misses < 0.02 && today.l2_bytes > 0 {
        lines.push(format!(
            "the ARC and its L2ARC already serve nearly every read ({:.1}%): a bigger L2ARC \
             would not help",
            100.0 * (1.0 - misses)
        ));
    } else if misses < 0.02 {
        lines.push("the ARC already serves nearly every read: an L2ARC would not help".to_string());
    } else if misses - curves.cold_share < 0.02 {
        // What is missed is (nearly) all first reads: the caches already hold what is read
        // again (a tester's finding: this was called a working set far beyond the caches).
        lines.push(format!(
            "the caches already hold what is read again: the {:.0}% of reads they miss are \
             first reads of blocks ({:.0}% of all reads were), which no cache serves; \
             neither an L2ARC nor a bigger ARC would help",
            100.0 * misses,
            100.0 * curves.cold_share
        ));
    } else if let Some(best) = what_if
        .iter()
        .filter(|p| p.arc_bytes == today.arc_bytes && p.misses_served >= 0.5)
        .min_by_key(|p| p.l2_bytes)
    {
        let mut line = format!(
            "an L2ARC of {} would serve {:.0}% of today's misses",
            gib(best.l2_bytes),
            100.0 * best.misses_served
        );
        if let (Some(iops), Some(us)) = (best.read_iops, best.read_us) {
            line += &format!(
                "; at {} latency that is about {:.0} reads/s at {:.2} ms (today {:.0} at {:.2} ms)",
                device.map_or("today's cache-device", |d| d.0),
                iops,
                us / 1000.0,
                today.read_iops,
                today.read_us.unwrap_or(0.0) / 1000.0
            );
        }
        if let Some(w) = best.warm_s {
            line += &format!(
                "; warm in no less than {} at today's miss rate (longer as it serves more)",
                span(w)
            );
        }
        line += &format!(
            "; its index takes {} of DRAM (OpenZFS's headers: {})",
            gib(best.l2_index_bytes),
            gib(best.openzfs_l2_hdr_bytes)
        );
        if best.index_over_cap {
            line += &format!(
                ", more than l2arc_meta_percent ({}%) of this ARC: raise it or the ARC, or \
                 the feed stops when the index is full",
                today.l2arc_meta_percent
            );
        }
        lines.push(line);
    } else {
        let most = what_if
            .iter()
            .map(|p| p.misses_served)
            .fold(0.0f64, f64::max);
        lines.push(format!(
            "the working set is far beyond the caches tried: an L2ARC up to {} would serve at \
             most {:.0}% of today's misses",
            gib(beyond * 4),
            100.0 * most
        ));
    }
    let doubled = what_if.last().expect("the doubled ARC is always there");
    lines.push(format!(
        "twice the ARC ({}) would serve {:.0}% of reads from DRAM instead of {:.0}%",
        gib(doubled.arc_bytes),
        100.0 * doubled.arc_hit_ratio,
        100.0 * current.arc_hit_ratio
    ));
    Advice {
        too_young,
        today: today.clone(),
        curves: curves.clone(),
        asked: None,
        volumes: Vec::new(),
        current,
        what_if,
        lines,
    }
}

/// Today's figures of a pool: sizes from its report; read IOPS and miss bytes per second
/// over the last minute of its history (`recent`: (reads/s, backing-read bytes/s), `None`
/// when the history has no minute yet: the means since the pool started); latencies as
/// means since the pool started.
pub fn today_of(
    report: &larch_engine::report::PoolReport,
    recent: Option<(f64, f64)>,
    uptime_s: f64,
) -> Today {
    let arc_bytes = report.tunables.get("zfs_arc_max").copied().unwrap_or(0);
    let l2_bytes = report.cache_devices.iter().map(|d| d.size_bytes).sum();
    let block_bytes = report
        .volumes
        .first()
        .map_or(8192, |v| u64::from(v.volblocksize));
    let mean = |pick: &dyn Fn(
        &larch_engine::report::VolumeReport,
    ) -> &larch_engine::report::LatencyReport| {
        let (n, ns) = report
            .volumes
            .iter()
            .map(pick)
            .fold((0u64, 0u64), |(n, ns), l| (n + l.count, ns + l.sum_ns));
        (n > 0).then(|| ns as f64 / n as f64 / 1000.0)
    };
    let arc_hit_us = mean(&|v| &v.read_arc_latency);
    let l2_hit_us = mean(&|v| &v.read_l2_latency);
    let miss_us = mean(&|v| &v.read_backing_latency);
    let counts = |pick: &dyn Fn(
        &larch_engine::report::VolumeReport,
    ) -> &larch_engine::report::LatencyReport| {
        report.volumes.iter().map(|v| pick(v).count).sum::<u64>()
    };
    let (arc_n, l2_n, miss_n) = (
        counts(&|v| &v.read_arc_latency),
        counts(&|v| &v.read_l2_latency),
        counts(&|v| &v.read_backing_latency),
    );
    let reads = arc_n + l2_n + miss_n;
    let read_us = (reads > 0).then(|| {
        let ns: u64 = report
            .volumes
            .iter()
            .map(|v| {
                v.read_arc_latency.sum_ns + v.read_l2_latency.sum_ns + v.read_backing_latency.sum_ns
            })
            .sum();
        ns as f64 / reads as f64 / 1000.0
    });
    let (read_iops, miss_bytes_per_s) = recent.unwrap_or_else(|| {
        let backing: u64 = report.volumes.iter().map(|v| v.backing_read_bytes).sum();
        let t = uptime_s.max(1.0);
        (reads as f64 / t, backing as f64 / t)
    });
    Today {
        arc_bytes,
        l2_bytes,
        block_bytes,
        read_iops,
        arc_hit_us,
        l2_hit_us,
        miss_us,
        read_us,
        miss_bytes_per_s,
        arc_hit_ratio: if reads == 0 {
            0.0
        } else {
            arc_n as f64 / reads as f64
        },
        l2arc_meta_percent: report
            .tunables
            .get("l2arc_meta_percent")
            .copied()
            .unwrap_or(33),
    }
}

/// A device spec the simulator's models do not parse ([`device_read_us`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("device {spec:?}: {source}")]
pub struct DeviceError {
    /// The spec as given.
    pub spec: String,
    /// Why it does not parse.
    pub source: larch_sim::device::SpecError,
}

/// The mean time of a random read of `block_bytes` on an idle device of the simulator's
/// models (`nvme`, `ssd`, `readzilla`, ...), µs: what an L2ARC on it would add to an ARC
/// miss that it serves.
pub fn device_read_us(spec: &str, block_bytes: u64) -> Result<f64, DeviceError> {
    use larch_sim::device::{IoKind, parse_spec};
    let mut device = parse_spec(spec, 1).map_err(|source| DeviceError {
        spec: spec.to_string(),
        source,
    })?;
    let capacity = device.capacity_bytes().max(block_bytes * 2);
    let blocks = capacity / block_bytes.max(512);
    let mut rng = larch_sim::SplitMix64::new(7);
    let (mut now, mut total) = (0u64, 0u64);
    const PROBES: u64 = 200;
    for _ in 0..PROBES {
        let offset = rng.below(blocks) * block_bytes;
        let done = device.submit(now, IoKind::Read, offset, block_bytes as u32);
        total = total.saturating_add(done.saturating_sub(now));
        // Idle between probes: each sees the device as a lone reader does. (Saturating: a
        // request may name an absurd latency, `read_us=1e17`.)
        now = done.saturating_add(10_000_000);
    }
    Ok(total as f64 / PROBES as f64 / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An absurd latency in a request's device spec gives an absurd answer, not an
    /// overflow (a panic in debug builds; a review's finding).
    #[test]
    fn an_absurd_device_latency_does_not_overflow() {
        let us = device_read_us("nvme:read_us=1e17", 8192).unwrap();
        assert!(us > 1e12, "{us}");
    }

    const GIB: u64 = 1 << 30;

    /// A uniform workload over 100 GiB: hit ratio = size / 100 GiB.
    fn uniform() -> Curves {
        let points: Vec<(u64, f64)> = (0..8)
            .map(|i| (GIB << i, ((GIB << i) as f64 / (100 * GIB) as f64).min(1.0)))
            .collect();
        Curves {
            arc: points.clone(),
            lru: points,
            sampled: 50_000,
            tracked: 8192,
            rate: 0.01,
            estimated_accesses: 5e6,
            working_set: vec![(3600, (100 * GIB) as f64)],
            ..Curves::default()
        }
    }

    fn today() -> Today {
        Today {
            arc_bytes: 10 * GIB,
            l2_bytes: 0,
            block_bytes: 8192,
            read_iops: 1000.0,
            arc_hit_us: Some(50.0),
            l2_hit_us: None,
            miss_us: Some(8000.0),
            read_us: Some(7205.0),
            miss_bytes_per_s: 900.0 * 8192.0,
            arc_hit_ratio: 0.1,
            l2arc_meta_percent: 33,
        }
    }

    #[test]
    fn curves_interpolate_in_log_size() {
        let c = uniform();
        assert!((hit_at(&c.arc, 4 * GIB) - 0.04).abs() < 1e-9);
        let h = hit_at(&c.arc, 3 * GIB);
        assert!(h > 0.02 && h < 0.04, "{h}");
        assert_eq!(hit_at(&c.arc, 0), 0.0);
        assert_eq!(hit_at(&c.arc, 1 << 50), c.arc.last().unwrap().1);
    }

    #[test]
    fn an_l2arc_serves_the_misses_the_curve_says_and_the_latency_follows() {
        let p = predict(&uniform(), &today(), 10 * GIB, 54 * GIB, Some(200.0));
        // h(64 GiB) − h(10 GiB) = 0.54 of reads, 0.6 of today's 0.9 misses.
        assert!((p.l2_hit_ratio - 0.54).abs() < 0.01, "{p:?}");
        assert!((p.misses_served - 0.6).abs() < 0.01, "{p:?}");
        let us = p.read_us.unwrap();
        // 0.1 × 50 + 0.54 × 250 + 0.36 × 8000
        assert!((us - 3020.0).abs() < 60.0, "{us}");
        // 7.2 requests in flight today: 7.2 / 3.02 ms.
        let iops = p.read_iops.unwrap();
        assert!((iops - 2385.0).abs() < 60.0, "{iops}");
        assert!(p.warm_s.unwrap() > 7000.0);
        assert_eq!(p.l2_index_bytes, 54 * GIB / 8192 * L2_INDEX_BYTES_PER_BLOCK);
        // 54 GiB of 8K blocks: 198 MiB of index, more than 33% of a 10 GiB ARC? No.
        assert!(!p.index_over_cap);
        let small_arc = Today {
            arc_bytes: 256 << 20,
            ..today()
        };
        assert!(predict(&uniform(), &small_arc, 256 << 20, 54 * GIB, Some(200.0)).index_over_cap);
    }

    #[test]
    fn advice_names_an_l2arc_says_when_nothing_helps_and_when_too_young() {
        let a = advise(&uniform(), &today(), Some(("nvme", 90.0)));
        assert!(a.too_young.is_none());
        assert!(
            a.lines.iter().any(|l| l.contains("would serve")),
            "{:?}",
            a.lines
        );
        let mut hot = uniform();
        hot.arc = vec![(GIB, 0.99), (100 * GIB, 1.0)];
        let mut t = today();
        t.arc_hit_ratio = 0.99;
        let a = advise(&hot, &t, None);
        assert!(
            a.lines.iter().any(|l| l.contains("would not help")),
            "{:?}",
            a.lines
        );
        let mut young = uniform();
        young.sampled = 10;
        assert!(advise(&young, &today(), None).too_young.is_some());
        let mut few = uniform();
        few.tracked = 20;
        let a = advise(&few, &today(), None);
        assert!(a.too_young.unwrap().contains("only 20 blocks"));
        assert!(a.lines.is_empty());
        let mut warming = uniform();
        warming.recent_cold_share = 0.4;
        assert!(
            advise(&warming, &today(), None)
                .lines
                .iter()
                .any(|l| l.contains("still warming"))
        );
        // The ARC holds the 1 GiB working set; the 11% it misses are first reads: no cache
        // helps, and the working set is not called "far beyond" the caches (a tester's
        // finding on cloudPhysicsIO.csv with a 4G ARC).
        let mut cold = uniform();
        cold.arc = vec![(GIB / 4, 0.5), (GIB, 0.89), (100 * GIB, 0.89)];
        cold.lru = cold.arc.clone();
        cold.working_set = vec![(3600, GIB as f64)];
        cold.cold_share = 0.11;
        let fits = Today {
            arc_bytes: 4 * GIB,
            arc_hit_ratio: 0.89,
            ..today()
        };
        let lines = advise(&cold, &fits, Some(("nvme", 90.0))).lines;
        assert!(
            lines.iter().any(|l| l.contains("first reads of blocks")),
            "{lines:?}"
        );
        assert!(!lines.iter().any(|l| l.contains("far beyond")), "{lines:?}");
        let mut writes = uniform();
        writes.write_share = 0.8;
        assert!(
            advise(&writes, &today(), None)
                .lines
                .iter()
                .any(|l| l.contains("secondarycache=metadata"))
        );
    }
}

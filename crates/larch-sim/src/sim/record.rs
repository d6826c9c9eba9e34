//! What a simulation shows: the series and latency heat maps of the Analytics page, in its
//! ids and format (docs/analytics.md), one sample per `step_s` of virtual time, and a
//! summary (warm-up times, steady-state IOPS and latency, wasted feed, header DRAM).
//!
//! Counters are per second (what happened in the interval, divided by its length) and
//! gauges the value at the end of the interval, as in the daemon's history; histograms
//! count the requests and device I/Os that started in the interval.

use std::collections::BTreeMap;

use larch_policy::buckets;
use serde::Serialize;

use super::cache::{
    ArcSizes, CacheCounters, DeviceIo, LARCH_L2_ENTRY_BYTES, OPENZFS_ARC_HDR_BYTES,
    OPENZFS_L2_HDR_BYTES, SimCache, Source,
};
use crate::device::{IoKind, Nanos};

/// The volume's name in series ids.
pub const VOLUME_NAME: &str = "vol0";

/// One series of the output.
#[derive(Clone, Debug, Serialize)]
pub struct SeriesDef {
    /// Its id, as the daemon's history names it.
    pub id: String,
    /// What the page calls it.
    pub label: String,
    /// Its unit.
    pub unit: &'static str,
    /// `counter` (a rate) or `gauge`.
    pub kind: &'static str,
}

/// One heat map of the output.
#[derive(Clone, Debug, Serialize)]
pub struct HeatDef {
    /// Its id.
    pub id: String,
    /// What the page calls it.
    pub label: String,
}

/// Something that happened (a switch flip), marked on every chart.
#[derive(Clone, Debug, Serialize)]
pub struct Event {
    /// When, seconds of virtual time (the output's times are seconds too).
    pub time: u64,
    /// `switch`.
    pub kind: &'static str,
    /// What.
    pub text: String,
}

/// Figures of a stretch of the run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Window {
    /// Its start, seconds of virtual time.
    pub from_s: u64,
    /// Its end.
    pub to_s: u64,
    /// Client requests per second.
    pub iops: f64,
    /// Reads per second.
    pub read_iops: f64,
    /// Client bytes per second.
    pub bytes_per_s: f64,
    /// Mean request latency, µs (front end included).
    pub mean_latency_us: f64,
    /// Read latency percentiles, µs (bucket upper bounds).
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Share of reads answered within 1 ms.
    pub reads_under_1ms: f64,
    /// ARC hits / block reads.
    pub arc_hit_ratio: f64,
    /// L2ARC hits / ARC misses (with cache devices in use).
    pub l2_hit_ratio: f64,
    /// Client reads served from DRAM per second (seed 000's "DRAM hits").
    pub dram_hits_per_s: f64,
    /// Primary storage reads per second.
    pub primary_reads_per_s: f64,
    /// Primary storage read bytes per second.
    pub primary_read_bytes_per_s: f64,
}

/// The summary of a run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    /// Virtual seconds simulated.
    pub virtual_seconds: f64,
    /// Client requests.
    pub requests: u64,
    /// Block reads and writes through the cache (what "I/Os" counts in speed figures).
    pub block_ios: u64,
    /// The first minute (cold).
    pub first_minute: Window,
    /// The steady state: the last tenth of the run, at most the last 10 minutes.
    pub steady: Window,
    /// Seconds until the ARC held 90% of `zfs_arc_max`.
    pub arc_warm_s: Option<u64>,
    /// Seconds until the L2ARC held half of what it held at the end.
    pub l2_half_s: Option<u64>,
    /// Seconds until it held 90% of that.
    pub l2_90_s: Option<u64>,
    /// Seconds until the IOPS (a minute's mean) first reached half the steady state's.
    pub iops_half_s: Option<u64>,
    /// Seconds until it reached 90% of it.
    pub iops_90_s: Option<u64>,
    /// Bytes on cache devices at the end.
    pub l2_bytes: u64,
    /// Their capacity.
    pub l2_capacity_bytes: u64,
    /// Bytes the feeds wrote.
    pub l2_write_bytes: u64,
    /// Bytes written and overwritten without ever being read.
    pub l2_wasted_bytes: u64,
    /// Block reads that missed the ARC and were served from a cache device, over the run.
    pub l2_hits: u64,
    /// Block reads that missed the ARC, with cache devices in use, and went to the
    /// primary storage, over the run.
    pub l2_misses: u64,
    /// DRAM of the ARC's reuse sketch (`l2arc_admit`), all shards, at the end.
    pub reuse_sketch_bytes: u64,
    /// DRAM of larch's ARC headers at the end (64 B each, resident and ghost).
    pub larch_arc_hdr_bytes: u64,
    /// DRAM of larch's L2 index (24 B per block on a cache device).
    pub larch_l2_index_bytes: u64,
    /// What OpenZFS would hold: 256 B per block in DRAM and 96 B per block only on a
    /// cache device (seed 002).
    pub openzfs_hdr_bytes: u64,
    /// Active data set / (ARC + L2ARC): seed 002's key ratio 1.
    pub ads_over_cache: f64,
    /// The run was made at 1/`scale` of the pool's sizes, and its times multiplied back
    /// (1: full size).
    pub scale: u64,
    /// Mean share of the time the cache devices were busy, over the run.
    pub cache_busy: f64,
    /// Mean share of the time the primary storage's disks (or channels) were busy.
    pub primary_busy: f64,
    /// How far a trace workload was replayed (`None` for a synthetic one).
    pub trace: Option<TraceProgress>,
    /// Data and metadata in the ARC and on the cache devices, under arcstats' names.
    pub arcstats: MetadataSummary,
    /// The server model's load, when one is given (`--server`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerSummary>,
}

/// How busy the server model was over the run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ServerSummary {
    /// Its spec (`xeon-2s`, `sun7410:cores=16`, ...).
    pub spec: String,
    /// Mean share of its cores' time spent on requests and feeds.
    pub cpu_busy: f64,
    /// Mean share of the time its memory bandwidth was in use.
    pub memory_busy: f64,
}

/// arcstats' counters and sizes by type at the end of a run (all zero for metadata with
/// the metadata model off: every block is data).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MetadataSummary {
    /// Demand reads of data found in the ARC.
    pub demand_data_hits: u64,
    /// Demand reads of data that missed.
    pub demand_data_misses: u64,
    /// Demand reads of metadata (indirect blocks or map pages) found in the ARC.
    pub demand_metadata_hits: u64,
    /// Demand reads of metadata that missed.
    pub demand_metadata_misses: u64,
    /// Bytes of data in the ARC.
    pub data_size: u64,
    /// Bytes of metadata in the ARC.
    pub metadata_size: u64,
    /// Bytes of data on the cache devices.
    pub l2_bufc_data_asize: u64,
    /// Bytes of metadata on the cache devices.
    pub l2_bufc_metadata_asize: u64,
    /// Metadata blocks (indirect blocks or map pages) read from a cache device or the
    /// primary storage.
    pub indirect_reads: u64,
    /// Of those, from a cache device.
    pub indirect_l2_reads: u64,
    /// Bytes of metadata TXGs wrote, every copy.
    pub indirect_write_bytes: u64,
}

/// How far a trace was replayed. A run ends at its duration or with the interval in which
/// its trace ended, whichever comes first; when the duration comes first, the record it
/// came before is named, so that one with a time far ahead of the others (which holds back
/// every record after it, as the clock never goes backwards) does not end a replay unseen.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TraceProgress {
    /// Its records have times: it was replayed on its own clock (else as fast as the
    /// closed-loop clients went).
    pub timed: bool,
    /// Records replayed (each one client request).
    pub records: u64,
    /// The line (or number, in a binary trace) of the last one.
    pub last_line: u64,
    /// The trace ended within the run.
    pub ended: bool,
    /// For a timed trace the run ended before: the line of the next record.
    pub next_line: Option<u64>,
    /// And its time, seconds after the first record's.
    pub next_at_s: Option<f64>,
}

/// The output of a run: the summary, and what the Analytics page shows.
#[derive(Clone, Debug, Serialize)]
pub struct SimOutput {
    /// Format of this output.
    pub version: u32,
    /// What it is (`simulation`).
    pub kind: &'static str,
    /// The run's name.
    pub pool: String,
    /// The configuration, as text.
    pub config: String,
    /// The summary.
    pub summary: Summary,
    /// Seconds per sample.
    pub step: u64,
    /// End of each interval, seconds of virtual time.
    pub times: Vec<u64>,
    /// The series.
    pub series_defs: Vec<SeriesDef>,
    /// Values by series id, one per time.
    pub series: BTreeMap<String, Vec<f64>>,
    /// The heat maps.
    pub heatmap_defs: Vec<HeatDef>,
    /// Per heat map id, per interval, flat `bucket, count` pairs of its non-empty buckets.
    pub heatmaps: BTreeMap<String, Vec<Vec<u32>>>,
    /// Upper bounds of the bounded buckets, µs.
    pub bounds_us: Vec<f64>,
    /// Switch flips.
    pub events: Vec<Event>,
}

/// The mean busy share of a device's members (spares, never used, left out) over `run_ns`.
fn busy_share(stats: impl IntoIterator<Item = crate::device::DeviceStats>, run_ns: u64) -> f64 {
    let used: Vec<_> = stats
        .into_iter()
        .filter(|s| s.reads + s.writes > 0)
        .collect();
    if used.is_empty() || run_ns == 0 {
        return 0.0;
    }
    // A device's work queued past the end of the run (a load it cannot keep up with)
    // does not make it more than busy.
    used.iter()
        .map(|s| s.busy_ns.min(run_ns) as f64)
        .sum::<f64>()
        / used.len() as f64
        / run_ns as f64
}

impl SimOutput {
    /// Shows a run made at 1/`n` of its sizes ([`super::SimConfig::scaled`]) as the full
    /// pool: every time (the intervals' ends, the step, events, warm-up times, the
    /// windows' bounds) and every size (gauges of bytes and blocks, the summary's bytes)
    /// multiplied by `n`. Rates stay: they are the full pool's.
    pub fn rescale(&mut self, n: u64) {
        if n <= 1 {
            return;
        }
        let nf = n as f64;
        for def in &self.series_defs {
            if def.kind == "gauge"
                && (def.unit == "bytes" || def.unit == "blocks")
                && let Some(values) = self.series.get_mut(&def.id)
            {
                values.iter_mut().for_each(|v| *v *= nf);
            }
        }
        {
            let s = &mut self.summary;
            for b in [
                &mut s.l2_bytes,
                &mut s.l2_capacity_bytes,
                &mut s.l2_write_bytes,
                &mut s.l2_wasted_bytes,
                &mut s.l2_hits,
                &mut s.l2_misses,
                &mut s.reuse_sketch_bytes,
                &mut s.larch_arc_hdr_bytes,
                &mut s.larch_l2_index_bytes,
                &mut s.openzfs_hdr_bytes,
            ] {
                *b *= n;
            }
            // Sizes, and counts over a run 1/n as long.
            let m = &mut s.arcstats;
            for v in [
                &mut m.demand_data_hits,
                &mut m.demand_data_misses,
                &mut m.demand_metadata_hits,
                &mut m.demand_metadata_misses,
                &mut m.data_size,
                &mut m.metadata_size,
                &mut m.l2_bufc_data_asize,
                &mut m.l2_bufc_metadata_asize,
                &mut m.indirect_reads,
                &mut m.indirect_l2_reads,
                &mut m.indirect_write_bytes,
            ] {
                *v *= n;
            }
        }
        for t in &mut self.times {
            *t *= n;
        }
        self.step *= n;
        for e in &mut self.events {
            e.time *= n;
        }
        let s = &mut self.summary;
        s.virtual_seconds *= n as f64;
        for t in [
            &mut s.arc_warm_s,
            &mut s.l2_half_s,
            &mut s.l2_90_s,
            &mut s.iops_half_s,
            &mut s.iops_90_s,
        ] {
            *t = t.map(|t| t * n);
        }
        for w in [&mut s.first_minute, &mut s.steady] {
            w.from_s *= n;
            w.to_s *= n;
        }
        s.scale = n;
    }
}

/// A histogram of one interval.
type Hist = [u32; buckets::BUCKETS];

/// Heat maps the recorder keeps, by index.
const FRONT_ARC: usize = 0;
const FRONT_L2: usize = 1;
const FRONT_PRIMARY: usize = 2;
const FRONT_WRITE: usize = 3;
const PRIMARY_READ: usize = 4;
const PRIMARY_WRITE: usize = 5;
/// Cache device `d`'s reads are heat map `CACHE + 2d`, its writes `CACHE + 2d + 1`.
const CACHE: usize = 6;

/// Request counts of an interval.
#[derive(Clone, Copy, Debug, Default)]
struct Tally {
    reads: [u64; 3],
    writes: u64,
    read_bytes: u64,
    write_bytes: u64,
}

/// What an interval counts of client requests and device I/Os: those that completed in
/// it. They are counted when they complete, not when they are issued: a device model
/// answers an I/O with its completion time at once, so under a load the devices cannot
/// keep up with (an open loop above their rate) an I/O may complete many intervals later,
/// or after the run; counted at issue, the offered load showed as served (a tester's
/// finding: 20,000 IOPS and 53 MiB/s of disk reads from eight disks, with a mean latency
/// longer than the run).
#[derive(Clone, Debug)]
struct Completed {
    tally: Tally,
    /// Latencies by heat map (the recorder's heat map indexes).
    hist: Vec<Hist>,
    latency_sum_ns: f64,
    latency_count: u64,
    /// Reads answered within 1 ms, from their exact latency (the heat maps' buckets do not
    /// end at 1 ms).
    reads_under_1ms: u64,
    /// Per device (the primary storage, then each cache device): reads, writes, bytes
    /// read, bytes written.
    device_ops: Vec<[u64; 4]>,
}

impl Completed {
    fn new(heats: usize, devices: usize) -> Completed {
        Completed {
            tally: Tally::default(),
            hist: vec![[0; buckets::BUCKETS]; heats],
            latency_sum_ns: 0.0,
            latency_count: 0,
            reads_under_1ms: 0,
            device_ops: vec![[0; 4]; 1 + devices],
        }
    }

    fn add_io(&mut self, io: &DeviceIo) {
        let heat = match (io.device, io.kind) {
            (None, IoKind::Read) => PRIMARY_READ,
            (None, IoKind::Write) => PRIMARY_WRITE,
            (Some(d), IoKind::Read) => CACHE + 2 * d,
            (Some(d), IoKind::Write) => CACHE + 2 * d + 1,
        };
        self.hist[heat][buckets::of(io.latency_ns)] += 1;
        let ops = &mut self.device_ops[io.device.map_or(0, |d| d + 1)];
        match io.kind {
            IoKind::Read => {
                ops[0] += 1;
                ops[2] += io.bytes;
            }
            IoKind::Write => {
                ops[1] += 1;
                ops[3] += io.bytes;
            }
        }
    }

    fn add(&mut self, write: bool, source: Source, latency_ns: Nanos, bytes: u64) {
        let b = buckets::of(latency_ns);
        if write {
            self.tally.writes += 1;
            self.tally.write_bytes += bytes;
            self.hist[FRONT_WRITE][b] += 1;
        } else {
            self.tally.reads[source as usize] += 1;
            self.tally.read_bytes += bytes;
            let heat = match source {
                Source::Arc => FRONT_ARC,
                Source::L2 => FRONT_L2,
                Source::Primary => FRONT_PRIMARY,
            };
            self.hist[heat][b] += 1;
            if latency_ns <= 1_000_000 {
                self.reads_under_1ms += 1;
            }
        }
        self.latency_sum_ns += latency_ns as f64;
        self.latency_count += 1;
    }

    fn requests(&self) -> u64 {
        self.latency_count
    }
}

/// How much the ARC's or the cache devices' bytes may move over a window for the run
/// to count as settled ([`Recorder::settled`]).
const SETTLED_SIZE_SHARE: f64 = 0.01;
/// How much the read rate may move between a window's halves.
const SETTLED_RATE_SHARE: f64 = 0.02;

/// Collects the output as the run goes.
pub struct Recorder {
    step_ns: u64,
    defs: Vec<SeriesDef>,
    values: Vec<Vec<f64>>,
    heat_defs: Vec<HeatDef>,
    heat: Vec<Vec<Vec<u32>>>,
    /// Requests and device I/Os completed in the open interval.
    completed: Completed,
    /// Those that complete in later intervals of the run, by interval index (one entry
    /// per interval, whatever the load; what completes after the run is not kept).
    later: BTreeMap<usize, Completed>,
    /// The run's intervals: its duration in whole steps.
    intervals: usize,
    times: Vec<u64>,
    last: CacheCounters,
    cache_devices: usize,
    events: Vec<Event>,
    /// Requests completed in the closed intervals.
    requests: u64,
    /// Per closed interval: its requests' latencies summed and counted, and its reads
    /// answered within 1 ms (the steady window's percentiles come from the heat maps).
    latency_sum_ns: Vec<f64>,
    latency_count: Vec<u64>,
    reads_under_1ms: Vec<u64>,
}

impl Recorder {
    /// A recorder for `cache` sampled every `step_s` seconds over a run of `duration_ns`.
    pub fn new(step_s: u64, duration_ns: Nanos, cache: &SimCache) -> Recorder {
        let v = VOLUME_NAME;
        let mut defs = Vec::new();
        let mut def = |id: String, label: String, unit: &'static str, kind: &'static str| {
            defs.push(SeriesDef {
                id,
                label,
                unit,
                kind,
            })
        };
        for (q, label, unit) in [
            ("read_ops", "reads", "ops/s"),
            ("write_ops", "writes", "ops/s"),
            ("read_bytes", "bytes read", "bytes/s"),
            ("write_bytes", "bytes written", "bytes/s"),
            ("read_arc_ops", "reads from the ARC", "ops/s"),
            ("read_l2_ops", "reads from cache devices", "ops/s"),
            (
                "read_backing_ops",
                "reads from the primary storage",
                "ops/s",
            ),
        ] {
            def(
                format!("volume/{v}/{q}"),
                format!("{v} {label}"),
                unit,
                "counter",
            );
        }
        for (q, label, unit) in [
            ("hits", "ARC hits", "per second"),
            ("misses", "ARC misses", "per second"),
            ("l2_hits", "L2ARC hits", "per second"),
            ("l2_misses", "L2ARC misses", "per second"),
            ("iohits", "reads that joined one in flight", "per second"),
            ("l2_write_bytes", "bytes fed to cache devices", "bytes/s"),
            (
                "l2_evicted",
                "copies the evict hands overwrote",
                "per second",
            ),
            (
                "l2_wasted_feed_bytes",
                "bytes fed and overwritten unread",
                "bytes/s",
            ),
            ("txg_syncs", "TXGs synced", "per second"),
        ] {
            def(format!("arc/{q}"), label.to_string(), unit, "counter");
        }
        for (q, label, unit) in [
            ("read_ops", "reads", "ops/s"),
            ("write_ops", "writes", "ops/s"),
            ("read_bytes", "bytes read", "bytes/s"),
            ("write_bytes", "bytes written", "bytes/s"),
        ] {
            def(
                format!("backing/{v}/{q}"),
                format!("{v} primary storage {label}"),
                unit,
                "counter",
            );
        }
        for d in &cache.devices {
            let n = &d.name;
            for (q, label, unit) in [
                ("read_ops", "reads", "ops/s"),
                ("write_ops", "writes", "ops/s"),
                ("read_bytes", "bytes read", "bytes/s"),
                ("write_bytes", "bytes written (feed)", "bytes/s"),
            ] {
                def(
                    format!("cache/{n}/{q}"),
                    format!("{n} (cache) {label}"),
                    unit,
                    "counter",
                );
            }
            def(
                format!("cache/{n}/blocks"),
                format!("{n} (cache) blocks cached"),
                "blocks",
                "gauge",
            );
        }
        for (q, label) in [
            ("size", "ARC size"),
            ("c", "ARC target"),
            ("c_max", "zfs_arc_max"),
            ("mru_size", "MRU"),
            ("mfu_size", "MFU"),
            ("mru_ghost_size", "MRU ghost"),
            ("mfu_ghost_size", "MFU ghost"),
            ("l2_size", "L2ARC size"),
            ("l2_asize", "L2ARC size on the devices"),
            ("hdr_size", "DRAM of ARC headers"),
            ("l2_hdr_size", "DRAM of the L2 index"),
            ("dirty_bytes", "dirty data"),
            ("dirty_data_max", "dirty limit"),
        ] {
            def(format!("arc/{q}"), label.to_string(), "bytes", "gauge");
        }
        def(
            "pool/l2arc_enabled".to_string(),
            "the L2ARC switch".to_string(),
            "",
            "gauge",
        );
        def(
            "sim/openzfs_hdr_bytes".to_string(),
            "DRAM OpenZFS's headers would take (at most: blocks also in the ARC counted twice)"
                .to_string(),
            "bytes",
            "gauge",
        );
        let mut heat_defs = vec![];
        for (id, label) in [
            ("read_arc", "reads served from the ARC"),
            ("read_l2", "reads served from cache devices"),
            ("read_backing", "reads served from the primary storage"),
            ("write", "writes"),
        ] {
            heat_defs.push(HeatDef {
                id: format!("frontend/{v}/{id}"),
                label: format!("{v} {label}"),
            });
        }
        for q in ["read", "write"] {
            heat_defs.push(HeatDef {
                id: format!("backing/{v}/{q}"),
                label: format!("{v} primary storage {q}s"),
            });
        }
        for d in &cache.devices {
            let n = &d.name;
            heat_defs.push(HeatDef {
                id: format!("cache/{n}/read"),
                label: format!("{n} (cache) reads"),
            });
            heat_defs.push(HeatDef {
                id: format!("cache/{n}/write"),
                label: format!("{n} (cache) writes"),
            });
        }
        let series = defs.len();
        let heats = heat_defs.len();
        Recorder {
            step_ns: step_s * super::config::SECOND_NS,
            defs,
            values: vec![Vec::new(); series],
            heat: vec![Vec::new(); heats],
            heat_defs,
            completed: Completed::new(heats, cache.devices.len()),
            later: BTreeMap::new(),
            intervals: (duration_ns / (step_s * super::config::SECOND_NS).max(1)) as usize,
            times: Vec::new(),
            last: CacheCounters::default(),
            cache_devices: cache.devices.len(),
            events: Vec::new(),
            requests: 0,
            latency_sum_ns: Vec::new(),
            latency_count: Vec::new(),
            reads_under_1ms: Vec::new(),
        }
    }

    /// A client request that completes at `done_ns`, having taken `latency_ns`: counted in
    /// the interval it completes in (the open one if that has closed already), never if
    /// that is after the run.
    pub fn request(
        &mut self,
        done_ns: Nanos,
        write: bool,
        source: Source,
        latency_ns: Nanos,
        bytes: u64,
    ) {
        if let Some(completed) = self.completed_at(done_ns) {
            completed.add(write, source, latency_ns, bytes);
        }
    }

    /// Where what completes at `done_ns` is counted: the open interval if it closes at or
    /// after `done_ns` (or has closed already), else the later interval it falls in;
    /// `None` after the run.
    fn completed_at(&mut self, done_ns: Nanos) -> Option<&mut Completed> {
        // Interval k ends at (k + 1) steps.
        let k = (done_ns.saturating_sub(1) / self.step_ns.max(1)) as usize;
        if k <= self.times.len() {
            return Some(&mut self.completed);
        }
        if k >= self.intervals {
            return None;
        }
        let (heats, devices) = (self.heat.len(), self.cache_devices);
        Some(
            self.later
                .entry(k)
                .or_insert_with(|| Completed::new(heats, devices)),
        )
    }

    /// The device I/Os the cache did since the last call.
    pub fn device_ios(&mut self, cache: &mut SimCache) {
        for io in cache.ios.drain(..) {
            if let Some(completed) = self.completed_at(io.at_ns + io.latency_ns) {
                completed.add_io(&io);
            }
        }
    }

    /// A flip of the L2ARC switch at `now`.
    pub fn event(&mut self, now: Nanos, text: String) {
        self.events.push(Event {
            time: now / super::config::SECOND_NS,
            kind: "switch",
            text,
        });
    }

    /// Closes the interval that ends at `now`: rates from the counters' differences,
    /// gauges as they are, the heat maps' cells.
    pub fn sample(&mut self, now: Nanos, cache: &mut SimCache) {
        self.device_ios(cache);
        let secs = self.step_ns as f64 / 1e9;
        let c = cache.counters;
        let l = self.last;
        let fresh = Completed::new(self.heat.len(), self.cache_devices);
        let done = std::mem::replace(&mut self.completed, fresh);
        let t = done.tally;
        let sizes: ArcSizes = cache.arc_sizes();
        let bs = u64::from(cache.block_bytes());
        let mut vals: Vec<f64> = vec![
            (t.reads.iter().sum::<u64>()) as f64 / secs,
            t.writes as f64 / secs,
            t.read_bytes as f64 / secs,
            t.write_bytes as f64 / secs,
            t.reads[0] as f64 / secs,
            t.reads[1] as f64 / secs,
            t.reads[2] as f64 / secs,
        ];
        let rate = |a: u64, b: u64| a.saturating_sub(b) as f64 / secs;
        vals.extend([
            rate(c.arc_hits, l.arc_hits),
            rate(c.arc_misses, l.arc_misses),
            rate(c.l2_hits, l.l2_hits),
            rate(c.l2_misses, l.l2_misses),
            rate(c.iohits, l.iohits),
            rate(c.l2_write_bytes, l.l2_write_bytes),
            rate(c.l2_evicted, l.l2_evicted),
            rate(c.l2_wasted_bytes, l.l2_wasted_bytes),
            rate(c.txg_syncs, l.txg_syncs),
        ]);
        // Device I/O rates from the I/Os that completed in the interval: the primary
        // storage's, then each cache device's with its blocks.
        let per_s = |ops: &[u64; 4]| ops.map(|n| n as f64 / secs);
        vals.extend(per_s(&done.device_ops[0]));
        for (dev, ops) in cache.devices.iter().zip(&done.device_ops[1..]) {
            vals.extend(per_s(ops));
            vals.push(dev.blocks as f64);
        }
        let l2_bytes = sizes.l2_bytes;
        vals.extend([
            sizes.size as f64,
            sizes.c as f64,
            sizes.c_max as f64,
            sizes.mru as f64,
            sizes.mfu as f64,
            sizes.mru_ghost as f64,
            sizes.mfu_ghost as f64,
            l2_bytes as f64,
            l2_bytes as f64,
            (sizes.headers * larch_policy::HEADER_BYTES as u64) as f64,
            (sizes.l2_blocks * LARCH_L2_ENTRY_BYTES) as f64,
            cache.dirty_bytes() as f64,
            cache.dirty_max() as f64,
            if cache.l2_enabled { 1.0 } else { 0.0 },
            ((sizes.size / bs) * OPENZFS_ARC_HDR_BYTES + sizes.l2_blocks * OPENZFS_L2_HDR_BYTES)
                as f64,
        ]);
        debug_assert_eq!(vals.len(), self.values.len());
        for (series, v) in self.values.iter_mut().zip(vals) {
            series.push(v);
        }
        self.requests += done.requests();
        self.latency_sum_ns.push(done.latency_sum_ns);
        self.latency_count.push(done.latency_count);
        self.reads_under_1ms.push(done.reads_under_1ms);
        for (heat, open) in self.heat.iter_mut().zip(&done.hist) {
            let cells: Vec<u32> = open
                .iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
                .flat_map(|(b, n)| [b as u32, *n])
                .collect();
            heat.push(cells);
        }
        self.times.push(now / super::config::SECOND_NS);
        // The interval opening now starts with what completes in it of earlier requests.
        if let Some(later) = self.later.remove(&self.times.len()) {
            self.completed = later;
        }
        self.last = c;
    }

    fn series(&self, id: &str) -> Option<&Vec<f64>> {
        let i = self.defs.iter().position(|d| d.id == id)?;
        Some(&self.values[i])
    }

    /// Whether the run has settled ([`super::Ending::WhenSettled`]): over its last
    /// quarter, and at least the last `min_intervals`, the ARC and the cache devices hold
    /// within 1% of what they held at its start and the reads per second of its second
    /// half are within 2% of its first half's.
    pub fn settled(&self, min_intervals: usize) -> bool {
        let n = self.times.len();
        let w = (n / 4).max(min_intervals.max(2));
        if n < 2 * w {
            return false;
        }
        let held = |id: &str| {
            self.series(id).is_none_or(|v| {
                let (first, last) = (v[n - w], v[n - 1]);
                (last - first).abs() <= SETTLED_SIZE_SHARE * first.max(last)
            })
        };
        let reads = self.series(&format!("volume/{VOLUME_NAME}/read_ops"));
        let steady_reads = reads.is_none_or(|v| {
            let mean =
                |from: usize, to: usize| v[from..to].iter().sum::<f64>() / (to - from) as f64;
            let (a, b) = (mean(n - w, n - w / 2), mean(n - w / 2, n));
            (a - b).abs() <= SETTLED_RATE_SHARE * a.max(b)
        });
        held("arc/size") && held("arc/l2_size") && steady_reads
    }

    /// The figures of intervals `from..to` (indexes).
    fn window(&self, from: usize, to: usize, step_s: u64) -> Window {
        let to = to.min(self.times.len());
        if from >= to {
            return Window::default();
        }
        let n = (to - from) as f64;
        let mean = |id: &str| {
            self.series(&format!("volume/{VOLUME_NAME}/{id}"))
                .or_else(|| self.series(id))
                .map_or(0.0, |v| v[from..to].iter().sum::<f64>() / n)
        };
        let reads = mean("read_ops");
        let iops = reads + mean("write_ops");
        let sum = |id: &str| {
            self.series(id)
                .map_or(0.0, |v| v[from..to].iter().sum::<f64>())
        };
        let hits = sum("arc/hits");
        let misses = sum("arc/misses");
        let l2_hits = sum("arc/l2_hits");
        let l2_misses = sum("arc/l2_misses");
        // Read latencies of the window, every source together.
        let mut hist = [0u64; buckets::BUCKETS];
        for h in [FRONT_ARC, FRONT_L2, FRONT_PRIMARY] {
            for cells in &self.heat[h][from..to] {
                for pair in cells.chunks_exact(2) {
                    hist[pair[0] as usize] += u64::from(pair[1]);
                }
            }
        }
        let total: u64 = hist.iter().sum();
        let pct = |q: f64| -> f64 {
            if total == 0 {
                return 0.0;
            }
            let want = (q * total as f64).ceil() as u64;
            let mut seen = 0;
            for (b, n) in hist.iter().enumerate() {
                seen += n;
                if seen >= want {
                    return buckets::upper_ns(b).map_or(f64::INFINITY, |ns| ns as f64 / 1000.0);
                }
            }
            f64::INFINITY
        };
        // These grow only when a request arrives: intervals past their end had none.
        let within = |len: usize| from.min(len)..to.min(len);
        let under_1ms: u64 = self.reads_under_1ms[within(self.reads_under_1ms.len())]
            .iter()
            .sum();
        let count: u64 = self.latency_count[within(self.latency_count.len())]
            .iter()
            .sum();
        let lsum: f64 = self.latency_sum_ns[within(self.latency_sum_ns.len())]
            .iter()
            .sum();
        Window {
            from_s: self.times[from] - step_s,
            to_s: self.times[to - 1],
            iops,
            read_iops: reads,
            bytes_per_s: mean("read_bytes") + mean("write_bytes"),
            mean_latency_us: if count > 0 {
                lsum / count as f64 / 1000.0
            } else {
                0.0
            },
            p50_us: pct(0.5),
            p90_us: pct(0.9),
            p99_us: pct(0.99),
            p999_us: pct(0.999),
            reads_under_1ms: if total > 0 {
                under_1ms as f64 / total as f64
            } else {
                0.0
            },
            arc_hit_ratio: if hits + misses > 0.0 {
                hits / (hits + misses)
            } else {
                0.0
            },
            l2_hit_ratio: if l2_hits + l2_misses > 0.0 {
                l2_hits / (l2_hits + l2_misses)
            } else {
                0.0
            },
            dram_hits_per_s: mean("read_arc_ops"),
            primary_reads_per_s: self
                .series(&format!("backing/{VOLUME_NAME}/read_ops"))
                .map_or(0.0, |v| v[from..to].iter().sum::<f64>() / n),
            primary_read_bytes_per_s: self
                .series(&format!("backing/{VOLUME_NAME}/read_bytes"))
                .map_or(0.0, |v| v[from..to].iter().sum::<f64>() / n),
        }
    }

    /// The first interval (index) whose value of `id` (or its mean over `avg` intervals)
    /// reaches `level`, in seconds from the start.
    fn first_reaching(&self, id: &str, level: f64, avg: usize) -> Option<u64> {
        let v = self.series(id)?;
        let avg = avg.max(1);
        (0..v.len()).find_map(|k| {
            let lo = (k + 1).saturating_sub(avg);
            let m = v[lo..=k].iter().sum::<f64>() / (k + 1 - lo) as f64;
            (m >= level && level > 0.0).then_some(self.times[k])
        })
    }

    /// The output of the run of `cfg` (`config` is its text): series, heat maps and the
    /// summary.
    pub fn finish(
        self,
        cfg: &super::SimConfig,
        config: String,
        cache: &SimCache,
        block_ios: u64,
    ) -> SimOutput {
        let (name, step_s, time_scale) = (cfg.name.clone(), cfg.step_s, cfg.time_scale);
        let ads_bytes = cfg.workload.ads_bytes;
        let n = self.times.len();
        // Windows in full-size time: an interval stands for step_s x time_scale seconds
        // (a window is at least one interval, which may be longer than the minute).
        let full_step = step_s.max(1).saturating_mul(time_scale.max(1));
        let per_minute = (60 / full_step).max(1) as usize;
        let steady_len = (n / 10).clamp(1.min(n), (600 / full_step).max(1) as usize);
        let steady = self.window(n - steady_len.min(n), n, step_s);
        let first_minute = self.window(0, per_minute.min(n), step_s);
        let sizes = cache.arc_sizes();
        let bs = u64::from(cache.block_bytes());
        let l2_end = sizes.l2_bytes;
        let c_max = sizes.c_max as f64;
        let capacity: u64 = cache.devices.iter().map(|d| d.ring_bytes()).sum();
        let overlap = cache.l2_blocks_in_arc();
        let run_ns = self.times.last().copied().unwrap_or(0) * super::config::SECOND_NS;
        let summary = Summary {
            virtual_seconds: self.times.last().copied().unwrap_or(0) as f64,
            requests: self.requests,
            block_ios,
            first_minute,
            arc_warm_s: self.first_reaching("arc/size", 0.9 * c_max, 1),
            l2_half_s: self.first_reaching("arc/l2_size", 0.5 * l2_end as f64, 1),
            l2_90_s: self.first_reaching("arc/l2_size", 0.9 * l2_end as f64, 1),
            iops_half_s: self.first_reaching(
                &format!("volume/{VOLUME_NAME}/read_ops"),
                0.5 * steady.read_iops,
                per_minute,
            ),
            iops_90_s: self.first_reaching(
                &format!("volume/{VOLUME_NAME}/read_ops"),
                0.9 * steady.read_iops,
                per_minute,
            ),
            steady,
            l2_bytes: l2_end,
            l2_capacity_bytes: capacity,
            l2_write_bytes: cache.counters.l2_write_bytes,
            l2_wasted_bytes: cache.counters.l2_wasted_bytes,
            l2_hits: cache.counters.l2_hits,
            l2_misses: cache.counters.l2_misses,
            reuse_sketch_bytes: cache.reuse_sketch_bytes(),
            larch_arc_hdr_bytes: sizes.headers * larch_policy::HEADER_BYTES as u64,
            larch_l2_index_bytes: sizes.l2_blocks * LARCH_L2_ENTRY_BYTES,
            openzfs_hdr_bytes: (sizes.size / bs) * OPENZFS_ARC_HDR_BYTES
                + (sizes.l2_blocks - overlap) * OPENZFS_L2_HDR_BYTES,
            ads_over_cache: ads_bytes as f64 / (c_max + capacity as f64).max(1.0),
            scale: 1,
            cache_busy: busy_share(cache.devices.iter().flat_map(|d| d.model.stats()), run_ns),
            primary_busy: busy_share(cache.primary.stats(), run_ns),
            trace: None,
            arcstats: cache.metadata_summary(),
            server: None,
        };
        let series = self
            .defs
            .iter()
            .zip(self.values)
            .map(|(d, v)| (d.id.clone(), v))
            .collect();
        let heatmaps = self
            .heat_defs
            .iter()
            .zip(self.heat)
            .map(|(d, h)| (d.id.clone(), h))
            .collect();
        SimOutput {
            version: 1,
            kind: "simulation",
            pool: name,
            config,
            summary,
            step: step_s,
            times: self.times,
            series_defs: self.defs,
            series,
            heatmap_defs: self.heat_defs,
            heatmaps,
            bounds_us: (0..buckets::BUCKETS - 1)
                .filter_map(buckets::upper_ns)
                .map(|ns| ns as f64 / 1000.0)
                .collect(),
            events: self.events,
        }
    }
}

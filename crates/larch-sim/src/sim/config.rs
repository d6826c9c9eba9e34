//! What a simulation runs: the pool (ARC, cache devices, primary storage), the volume,
//! the workload and its clients, the tunables, and the virtual time to run for. Sizes are
//! bytes and times nanoseconds here; the command line and configuration files parse
//! their units before building a [`SimConfig`], and [`SimConfig::validate`] refuses what
//! cannot run with an error naming the field.

use std::path::PathBuf;

use larch_policy::feed::FeedTunables;
use larch_policy::tunables::{DEFAULTS, DIRTY_DATA_MAX_CAP_BYTES};

use super::metadata::{CacheMode, MetadataModel};
use crate::device::{DeviceSpec, ServerParams};
use crate::trace::Format;

/// Nanoseconds per second.
pub const SECOND_NS: u64 = 1_000_000_000;

/// Where a workload's reads land within its active data set.
#[derive(Clone, Debug, PartialEq)]
pub enum Pattern {
    /// Every block of the active data set equally likely (seed 000: "accessed at complete
    /// random").
    Uniform,
    /// Zipf-distributed ranks, `theta` its skew (0.9 is a common choice); rank 0 hottest,
    /// ranks scattered over the data set.
    Zipf {
        /// The skew.
        theta: f64,
    },
    /// A normal distribution around the middle of the data set, `sigma` its standard
    /// deviation as a fraction of the data set (seed 000's reply names Gaussian and
    /// exponential as the shapes real working sets take).
    Gaussian {
        /// Standard deviation / data set size.
        sigma: f64,
    },
    /// An exponential distribution from the start of the data set, `mean` its mean as a
    /// fraction of the data set.
    Exponential {
        /// Mean / data set size.
        mean: f64,
    },
    /// Each client reads (or writes) sequentially from its own start, wrapping at the end
    /// of the data set: the prefetcher follows it.
    Sequential,
    /// Random reads over a hot set of `hot_bytes` at the start of the data set, and one
    /// sequential scan of the rest, `scan_share` of the I/Os.
    Scan {
        /// Bytes of the hot set.
        hot_bytes: u64,
        /// Fraction of I/Os that belong to the scan.
        scan_share: f64,
    },
    /// A block trace replayed with its own timing (open loop) when it has times, else as
    /// fast as the clients go (closed loop).
    Trace {
        /// The trace file.
        path: PathBuf,
        /// Its format (`None`: detected from the name).
        format: Option<Format>,
    },
}

impl Pattern {
    /// A short name for reports.
    pub fn name(&self) -> String {
        match self {
            Pattern::Uniform => "uniform".to_string(),
            Pattern::Zipf { theta } => format!("zipf({theta})"),
            Pattern::Gaussian { sigma } => format!("gaussian(sigma {sigma})"),
            Pattern::Exponential { mean } => format!("exponential(mean {mean})"),
            Pattern::Sequential => "sequential".to_string(),
            Pattern::Scan {
                hot_bytes,
                scan_share,
            } => format!("hot set of {hot_bytes} B + scan ({scan_share})"),
            Pattern::Trace { path, .. } => format!("trace {}", path.display()),
        }
    }
}

/// The I/O the clients issue.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    /// Where requests land.
    pub pattern: Pattern,
    /// The active data set: the part of the volume the workload touches (seed 000's
    /// "working set", seed 002's "ADS").
    pub ads_bytes: u64,
    /// Bytes per request.
    pub io_bytes: u32,
    /// Fraction of requests that read (the rest write).
    pub read_fraction: f64,
    /// Volumes the data set is split into (seed 002's 12 LUNs): each has its own
    /// sequential-read detector, as each zvol has its own `dmu_zfetch`; closed-loop clients
    /// are spread over them.
    pub volumes: u32,
}

/// Who issues the I/O.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Clients {
    /// `threads` closed loops: each issues a request, waits for it, thinks, issues the
    /// next (seed 000: 10 clients x 2 threads = 20).
    Closed {
        /// Requests outstanding at most.
        threads: u32,
        /// Time between a reply and the next request.
        think_ns: u64,
    },
    /// Requests arrive at `rate` per second (Poisson), whatever the replies do.
    Open {
        /// Requests per second.
        rate: f64,
    },
}

/// A cache device (L2ARC) of the pool.
#[derive(Clone, Debug, PartialEq)]
pub struct CacheDevice {
    /// Its model, as `device::parse_spec` reads it (`readzilla`, `nvme`, `ssd:...`).
    pub spec: String,
    /// Its capacity, when it differs from the model's.
    pub capacity_bytes: Option<u64>,
}

/// The tunables the simulation honours, with OpenZFS's (and larch's) names.
#[derive(Clone, Debug, PartialEq)]
pub struct SimTunables {
    /// `l2arc_write_max`: bytes a feed writes per device per `l2arc_feed_secs`.
    pub l2arc_write_max: u64,
    /// `l2arc_write_boost`: added while the ARC is cold.
    pub l2arc_write_boost: u64,
    /// `l2arc_headroom`: how far past the write budget a feed scans (0: no limit).
    pub l2arc_headroom: u64,
    /// `l2arc_headroom_boost`, percent.
    pub l2arc_headroom_boost: u64,
    /// `l2arc_feed_secs`.
    pub l2arc_feed_secs: u64,
    /// `l2arc_feed_min_ms`.
    pub l2arc_feed_min_ms: u64,
    /// `l2arc_feed_again`.
    pub l2arc_feed_again: bool,
    /// `l2arc_feed_follow` (larch's).
    pub l2arc_feed_follow: bool,
    /// `l2arc_noprefetch`.
    pub l2arc_noprefetch: bool,
    /// `l2arc_nowrite` (larch's).
    pub l2arc_nowrite: bool,
    /// `l2arc_mfuonly`.
    pub l2arc_mfuonly: u64,
    /// `l2arc_admit` (larch's): feed only blocks read twice lately.
    pub l2arc_admit: bool,
    /// `zfs_arc_policy`: the ARC's replacement policy.
    pub arc_policy: larch_policy::ArcPolicy,
    /// `primarycache` of the volume: what the ARC keeps once nobody holds it.
    pub primarycache: CacheMode,
    /// `secondarycache` of the volume: what the feed may write to cache devices.
    pub secondarycache: CacheMode,
    /// The metadata model ([`super::metadata`]): the volume's blocks are found through
    /// ZFS's indirect blocks (the simulator's way to model the seeds' ZFS pools) or a
    /// larch object volume's block-map pages, which are read, cached and written too; off,
    /// every block is data, as in a larch volume on a file or a device. Not a tunable of
    /// the daemon.
    pub metadata: MetadataModel,
    /// With the indirect-block model, the indirect blocks' size as a power of two
    /// (`indblkshift`, one of [`super::metadata::INDBLKSHIFTS`]): 17 (128 KiB), OpenZFS's
    /// default since 2016; 14 (16 KiB) before, in seed 000's 2009 pools.
    pub indblkshift: u32,
    /// `zfs_txg_timeout`, seconds.
    pub txg_timeout_s: u64,
    /// `zfs_dirty_data_max`, bytes (at most half the ARC, as in the engine).
    pub dirty_data_max: u64,
    /// `zfs_dirty_data_sync_percent`.
    pub dirty_data_sync_percent: u64,
    /// `zfs_delay_min_dirty_percent`.
    pub delay_min_dirty_percent: u64,
    /// `zfs_delay_scale`, ns.
    pub delay_scale_ns: u64,
    /// `zfs_prefetch_disable`.
    pub prefetch_disable: bool,
    /// `zfetch_max_distance`, bytes.
    pub prefetch_max_distance: u64,
    /// One feeder taking the cache devices in turn with one budget, as OpenZFS did up to
    /// 2.4 (`l2arc_dev_get_next`), instead of a feeder per device as larch (and OpenZFS's
    /// master) does. Not a tunable of the daemon: the simulator's way to run the seeds'
    /// feed.
    pub feed_round_robin: bool,
    /// The server around the cache ([`crate::device::Server`]): its CPU cores and memory
    /// bandwidth as queues every reply's work waits in, and the feed's buffers taken from
    /// the ARC's room. [`ServerParams::off`] (the default) costs nothing: the simulator
    /// before the model. Not a tunable of the daemon: the simulator's model of the seeds'
    /// machines (`--server`).
    pub server: ServerParams,
}

impl Default for SimTunables {
    /// larch's defaults (docs/engine.md), which are OpenZFS's where larch has not changed
    /// them: the daemon's, from the table both read (`larch_policy::tunables`). The dirty
    /// limit, 10% of RAM on the daemon's machine, is its cap: the simulated machine has no
    /// RAM to take 10% of.
    fn default() -> SimTunables {
        SimTunables {
            l2arc_write_max: DEFAULTS.l2arc_write_max,
            l2arc_write_boost: DEFAULTS.l2arc_write_boost,
            l2arc_headroom: DEFAULTS.l2arc_headroom,
            l2arc_headroom_boost: DEFAULTS.l2arc_headroom_boost,
            l2arc_feed_secs: DEFAULTS.l2arc_feed_secs,
            l2arc_feed_min_ms: DEFAULTS.l2arc_feed_min_ms,
            l2arc_feed_again: DEFAULTS.l2arc_feed_again,
            l2arc_feed_follow: DEFAULTS.l2arc_feed_follow,
            l2arc_noprefetch: DEFAULTS.l2arc_noprefetch,
            l2arc_nowrite: DEFAULTS.l2arc_nowrite,
            l2arc_mfuonly: DEFAULTS.l2arc_mfuonly,
            l2arc_admit: DEFAULTS.l2arc_admit,
            arc_policy: larch_policy::ArcPolicy::from_tunable(DEFAULTS.zfs_arc_policy),
            primarycache: CacheMode::All,
            secondarycache: CacheMode::All,
            metadata: MetadataModel::Off,
            indblkshift: 17,
            txg_timeout_s: DEFAULTS.zfs_txg_timeout,
            dirty_data_max: DIRTY_DATA_MAX_CAP_BYTES,
            dirty_data_sync_percent: DEFAULTS.zfs_dirty_data_sync_percent,
            delay_min_dirty_percent: DEFAULTS.zfs_delay_min_dirty_percent,
            delay_scale_ns: DEFAULTS.zfs_delay_scale,
            prefetch_disable: DEFAULTS.zfs_prefetch_disable,
            prefetch_max_distance: DEFAULTS.zfetch_max_distance,
            feed_round_robin: false,
            server: ServerParams::off(),
        }
    }
}

impl SimTunables {
    /// OpenZFS's feed as the seeds ran it (up to 2.2): one feeder taking the devices in
    /// turn, 8 MiB per feed (16 MiB while the ARC is cold), a headroom of 2, no follow-up
    /// feeds, prefetched blocks skipped, written ones fed.
    pub fn openzfs_feed(&mut self) {
        self.l2arc_write_max = 8 << 20;
        self.l2arc_write_boost = 8 << 20;
        self.l2arc_headroom = 2;
        self.l2arc_feed_follow = false;
        self.l2arc_nowrite = false;
        self.feed_round_robin = true;
    }

    /// Sets one tunable from its name and a number (sizes in bytes, flags 0 or 1);
    /// unknown names and values out of range are errors naming the tunable.
    pub fn set(&mut self, name: &str, value: u64) -> Result<(), ConfigError> {
        let flag = |v: u64| -> Result<bool, ConfigError> {
            match v {
                0 => Ok(false),
                1 => Ok(true),
                _ => Err(ConfigError::new(name, format!("expected 0 or 1, got {v}"))),
            }
        };
        match name {
            "l2arc_write_max" => self.l2arc_write_max = value,
            "l2arc_write_boost" => self.l2arc_write_boost = value,
            "l2arc_headroom" => self.l2arc_headroom = value,
            "l2arc_headroom_boost" => self.l2arc_headroom_boost = value,
            "l2arc_feed_secs" => self.l2arc_feed_secs = value,
            "l2arc_feed_min_ms" => self.l2arc_feed_min_ms = value,
            "l2arc_feed_again" => self.l2arc_feed_again = flag(value)?,
            "l2arc_feed_follow" => self.l2arc_feed_follow = flag(value)?,
            "l2arc_noprefetch" => self.l2arc_noprefetch = flag(value)?,
            "l2arc_nowrite" => self.l2arc_nowrite = flag(value)?,
            "l2arc_mfuonly" if value <= 2 => self.l2arc_mfuonly = value,
            "l2arc_mfuonly" => {
                return Err(ConfigError::new(
                    name,
                    format!("expected 0, 1 or 2, got {value}"),
                ));
            }
            "l2arc_admit" => self.l2arc_admit = flag(value)?,
            "zfs_arc_policy" => {
                self.arc_policy = larch_policy::ArcPolicy::from_tunable(u64::from(flag(value)?));
            }
            "secondarycache" => {
                self.secondarycache = if flag(value)? {
                    CacheMode::All
                } else {
                    CacheMode::None
                };
            }
            "zfs_txg_timeout" => self.txg_timeout_s = value,
            "zfs_dirty_data_max" => self.dirty_data_max = value,
            "zfs_dirty_data_sync_percent" if value <= 100 => self.dirty_data_sync_percent = value,
            "zfs_delay_min_dirty_percent" if value <= 100 => self.delay_min_dirty_percent = value,
            "zfs_dirty_data_sync_percent" | "zfs_delay_min_dirty_percent" => {
                return Err(ConfigError::new(name, format!("a percentage, got {value}")));
            }
            "zfs_delay_scale" => self.delay_scale_ns = value,
            "zfs_prefetch_disable" => self.prefetch_disable = flag(value)?,
            "zfetch_max_distance" => self.prefetch_max_distance = value,
            _ => {
                return Err(ConfigError::new(
                    name,
                    format!(
                        "not a tunable the simulator knows (known: {})",
                        TUNABLE_NAMES.join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The feed's tunables, as `larch_policy::feed` reads them (the engine's `Tunables` hand
/// out theirs the same way).
impl FeedTunables for SimTunables {
    fn l2arc_write_max(&self) -> u64 {
        self.l2arc_write_max
    }
    fn l2arc_write_boost(&self) -> u64 {
        self.l2arc_write_boost
    }
    fn l2arc_headroom(&self) -> u64 {
        self.l2arc_headroom
    }
    fn l2arc_headroom_boost(&self) -> u64 {
        self.l2arc_headroom_boost
    }
    fn l2arc_feed_secs(&self) -> u64 {
        self.l2arc_feed_secs
    }
    fn l2arc_feed_min_ms(&self) -> u64 {
        self.l2arc_feed_min_ms
    }
    fn l2arc_feed_again(&self) -> bool {
        self.l2arc_feed_again
    }
    fn l2arc_feed_follow(&self) -> bool {
        self.l2arc_feed_follow
    }
    fn l2arc_noprefetch(&self) -> bool {
        self.l2arc_noprefetch
    }
    fn l2arc_nowrite(&self) -> bool {
        self.l2arc_nowrite
    }
    fn l2arc_mfuonly(&self) -> u64 {
        self.l2arc_mfuonly
    }
    fn l2arc_admit(&self) -> bool {
        self.l2arc_admit
    }
}

/// The tunables [`SimTunables::set`] takes.
pub const TUNABLE_NAMES: &[&str] = &[
    "l2arc_write_max",
    "l2arc_write_boost",
    "l2arc_headroom",
    "l2arc_headroom_boost",
    "l2arc_feed_secs",
    "l2arc_feed_min_ms",
    "l2arc_feed_again",
    "l2arc_feed_follow",
    "l2arc_noprefetch",
    "l2arc_nowrite",
    "l2arc_mfuonly",
    "l2arc_admit",
    "zfs_arc_policy",
    "secondarycache",
    "zfs_txg_timeout",
    "zfs_dirty_data_max",
    "zfs_dirty_data_sync_percent",
    "zfs_delay_min_dirty_percent",
    "zfs_delay_scale",
    "zfs_prefetch_disable",
    "zfetch_max_distance",
];

/// A whole simulation.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// What the run is called in reports (a preset's name, or "custom").
    pub name: String,
    /// The seed of every random choice: the same seed, the same run.
    pub seed: u64,
    /// Virtual time to run.
    pub duration_ns: u64,
    /// Seconds per sample of the output's series (1 for an hour, 60 for a day, ...).
    pub step_s: u64,
    /// `zfs_arc_max`.
    pub arc_max_bytes: u64,
    /// Memory the simulated machine has for the ARC and the caches' headers: a
    /// configuration that needs more is refused (0: not checked).
    pub memory_bytes: u64,
    /// The primary storage (data vdevs), as `device::parse_spec` reads it.
    pub primary: String,
    /// The cache devices.
    pub caches: Vec<CacheDevice>,
    /// The volume's size.
    pub volume_bytes: u64,
    /// Its block size (`volblocksize`, the record size).
    pub block_bytes: u32,
    /// The workload.
    pub workload: Workload,
    /// Its clients.
    pub clients: Clients,
    /// Time a request spends outside the cache (network, protocol, client), added to
    /// every reply.
    pub frontend_ns: u64,
    /// Tunables.
    pub tunables: SimTunables,
    /// Flips of the L2ARC switch: at each time, reads from and feeds to cache devices
    /// stop (`false`) or resume (`true`), as seed 000's screenshots toggle it.
    pub switch: Vec<(u64, bool)>,
    /// Start with the caches full of the active data set (seed 002 preconditioned its
    /// caches "to be fully warm before measurement"): the ARC holds what it can, the cache
    /// devices the rest, as far as they hold it. Synthetic workloads only: a trace's blocks
    /// are not known before it is replayed, and a trace starts cold.
    pub prewarm: bool,
    /// The full size's multiple of this configuration: 1, or `n` once [`SimConfig::scaled`]
    /// divided it by `n` (every virtual second then stands for `n`; the summary's first
    /// minute and steady state are taken in full-size time).
    pub time_scale: u64,
}

/// Cache devices a simulation models at most (an index entry names its device in a byte).
pub const MAX_CACHE_DEVICES: usize = 256;

/// The shortest time from a closed-loop client's reply to its next request (think time
/// plus front-end time) that a run accepts.
const MIN_CLIENT_TURN_NS: u64 = 1_000;

/// A configuration that cannot run, naming the field at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {why}")]
pub struct ConfigError {
    /// The field (`arc`, `workload.ads`, `caches[2]`, ...).
    pub field: String,
    /// What is wrong with it.
    pub why: String,
}

impl ConfigError {
    /// An error about `field`.
    pub fn new(field: impl Into<String>, why: impl Into<String>) -> ConfigError {
        ConfigError {
            field: field.into(),
            why: why.into(),
        }
    }
}

impl SimConfig {
    /// Refuses what cannot run: zero sizes and devices where they are needed, fractions
    /// outside 0..=1, an active data set larger than the volume, an ARC and index larger
    /// than the memory allowed, a trace prewarmed.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |field: &str, why: String| Err(ConfigError::new(field, why));
        if self.duration_ns == 0 {
            return bad("duration", "must be more than 0".to_string());
        }
        if self.step_s == 0 {
            return bad("step", "must be at least one second".to_string());
        }
        if self.step_s.saturating_mul(1_000_000_000) > self.duration_ns {
            return bad(
                "step",
                format!(
                    "{} s, longer than the run: no sample would be taken",
                    self.step_s
                ),
            );
        }
        if self.arc_max_bytes < 1 << 20 {
            return bad(
                "arc",
                format!("at least 1 MiB, got {} bytes", self.arc_max_bytes),
            );
        }
        if !self.block_bytes.is_power_of_two() || !(512..=1 << 20).contains(&self.block_bytes) {
            return bad(
                "block",
                format!(
                    "a power of two from 512 B to 1 MiB, got {}",
                    self.block_bytes
                ),
            );
        }
        if self.volume_bytes < u64::from(self.block_bytes) {
            return bad(
                "volume",
                format!("smaller than one block ({} bytes)", self.volume_bytes),
            );
        }
        let w = &self.workload;
        if w.ads_bytes < u64::from(self.block_bytes) {
            return bad(
                "workload.ads",
                format!("smaller than one block ({} bytes)", w.ads_bytes),
            );
        }
        if w.ads_bytes > self.volume_bytes {
            return bad(
                "workload.ads",
                format!(
                    "{} bytes, larger than the volume ({} bytes)",
                    w.ads_bytes, self.volume_bytes
                ),
            );
        }
        if w.io_bytes == 0 || u64::from(w.io_bytes) > w.ads_bytes {
            return bad(
                "workload.io",
                format!("{} bytes: not within the data set", w.io_bytes),
            );
        }
        if w.volumes == 0 || u64::from(w.volumes) > w.ads_bytes / u64::from(self.block_bytes) {
            return bad(
                "workload.volumes",
                format!("1 to one per block, got {}", w.volumes),
            );
        }
        if !(0.0..=1.0).contains(&w.read_fraction) {
            return bad(
                "workload.read",
                format!("a fraction from 0 to 1, got {}", w.read_fraction),
            );
        }
        let skewed = matches!(w.pattern, Pattern::Zipf { .. } | Pattern::Scan { .. });
        if skewed && w.ads_bytes / u64::from(self.block_bytes) < 2 {
            return bad(
                "workload.ads",
                format!(
                    "a skewed pattern needs at least two blocks ({} bytes)",
                    2 * u64::from(self.block_bytes)
                ),
            );
        }
        if self.prewarm && matches!(w.pattern, Pattern::Trace { .. }) {
            // Prewarming fills the caches with the first blocks of the volume, which are
            // not the trace's: its hits would be made up.
            return bad(
                "prewarm",
                "a trace starts cold: its blocks are not known before it is replayed".to_string(),
            );
        }
        match &w.pattern {
            Pattern::Zipf { theta } if !(*theta > 0.0 && *theta < 1.0) => {
                // The sampler (Gray et al.'s, as YCSB uses) is defined for 0 < theta < 1.
                return bad(
                    "workload.zipf",
                    format!("theta above 0 and below 1 (0.9 is common), got {theta}"),
                );
            }
            Pattern::Gaussian { sigma } if !(*sigma > 0.0 && *sigma <= 10.0) => {
                return bad(
                    "workload.sigma",
                    format!("a positive fraction, got {sigma}"),
                );
            }
            Pattern::Exponential { mean } if !(*mean > 0.0 && *mean <= 10.0) => {
                return bad("workload.mean", format!("a positive fraction, got {mean}"));
            }
            Pattern::Scan {
                hot_bytes,
                scan_share,
            } => {
                if *hot_bytes == 0 || *hot_bytes >= w.ads_bytes {
                    return bad(
                        "workload.hot",
                        "between one byte and the data set".to_string(),
                    );
                }
                if !(0.0..=1.0).contains(scan_share) {
                    return bad(
                        "workload.scan_share",
                        format!("a fraction, got {scan_share}"),
                    );
                }
            }
            _ => {}
        }
        match self.clients {
            Clients::Closed { threads, .. } if threads == 0 || threads > 1_000_000 => {
                return bad("clients.threads", format!("1 to 1000000, got {threads}"));
            }
            Clients::Open { rate } if !(rate > 0.0 && rate.is_finite()) => {
                return bad("clients.rate", format!("a positive rate, got {rate}"));
            }
            // A cache hit costs no virtual time: with neither think time nor front-end
            // time, a closed-loop client whose reads all hit would ask again at the same
            // instant for ever, and the run would never end.
            Clients::Closed { think_ns, .. }
                if think_ns.saturating_add(self.frontend_ns) < MIN_CLIENT_TURN_NS =>
            {
                return bad(
                    "clients.think",
                    format!(
                        "think time plus front-end time must be at least 1 us for \
                         closed-loop clients, got {} ns",
                        think_ns.saturating_add(self.frontend_ns)
                    ),
                );
            }
            _ => {}
        }
        if self.caches.len() > MAX_CACHE_DEVICES {
            return bad(
                "caches",
                format!(
                    "at most {MAX_CACHE_DEVICES} cache devices, got {}",
                    self.caches.len()
                ),
            );
        }
        if self.primary.trim().is_empty() {
            return bad("primary", "no primary storage".to_string());
        }
        for (i, c) in self.caches.iter().enumerate() {
            if c.capacity_bytes == Some(0) {
                return bad(&format!("caches[{i}]"), "a capacity of 0".to_string());
            }
        }
        if self.memory_bytes > 0 {
            let needed = self.arc_max_bytes;
            if needed > self.memory_bytes {
                return bad(
                    "arc",
                    format!(
                        "{} bytes of ARC, more than the machine's memory ({} bytes)",
                        needed, self.memory_bytes
                    ),
                );
            }
        }
        for (i, (t, _)) in self.switch.iter().enumerate() {
            if *t > self.duration_ns {
                return bad(
                    &format!("switch[{i}]"),
                    "after the end of the run".to_string(),
                );
            }
        }
        Ok(())
    }
}

/// A device spec with its capacity divided by `n` (disks: each disk's, so that a working
/// set covers the same fraction of every disk and seeks stay as long).
fn scaled_spec(field: &str, text: &str, n: u64) -> Result<String, ConfigError> {
    let mut spec = DeviceSpec::parse(text).map_err(|e| ConfigError::new(field, e.to_string()))?;
    let shrink = |bytes: &mut u64| *bytes = (*bytes / n).max(1 << 20);
    match &mut spec {
        DeviceSpec::Disks { hdd, .. } => shrink(&mut hdd.capacity_bytes),
        DeviceSpec::Flash { params, .. } => shrink(&mut params.capacity_bytes),
        DeviceSpec::ObjectStore(params) => shrink(&mut params.capacity_bytes),
        DeviceSpec::Ram(params) => shrink(&mut params.capacity_bytes),
    }
    Ok(spec.to_string())
}

impl SimConfig {
    /// The same pool and workload at 1/`n` of its sizes: the ARC, the cache devices, the
    /// volume, the active data set, the disks (so a working set covers the same fraction of
    /// each disk) and the dirty limit shrink by `n`; rates, latencies, block and request
    /// sizes, clients and tunables stay. Hit ratios and the steady state are those of the
    /// full size (for random workloads, whose reuse scales with the data set), and
    /// everything that fills the caches happens `n` times sooner: a run of T seconds
    /// shows what the full pool does in n × T. Switch flips move to 1/n of their times.
    ///
    /// A trace is refused: its addresses and times are its own, so a volume 1/n the size
    /// would fold its blocks onto each other (more hits than the trace has) and a run 1/n
    /// as long would replay 1/n of it, shown as the whole.
    pub fn scaled(&self, n: u64) -> Result<SimConfig, ConfigError> {
        if n <= 1 {
            return Ok(self.clone());
        }
        if let Pattern::Trace { .. } = self.workload.pattern {
            return Err(ConfigError::new(
                "scale",
                format!(
                    "a trace runs at full size, not at 1/{n}: its addresses and times \
                     are its own and do not shrink with the pool"
                ),
            ));
        }
        let mut c = self.clone();
        let div = |bytes: u64| (bytes / n).max(1);
        c.arc_max_bytes = div(c.arc_max_bytes);
        c.memory_bytes = if c.memory_bytes == 0 {
            0
        } else {
            div(c.memory_bytes)
        };
        c.volume_bytes = div(c.volume_bytes);
        c.workload.ads_bytes = div(c.workload.ads_bytes);
        if let Pattern::Scan { hot_bytes, .. } = &mut c.workload.pattern {
            *hot_bytes = div(*hot_bytes);
        }
        c.tunables.dirty_data_max = div(c.tunables.dirty_data_max);
        c.primary = scaled_spec("primary", &c.primary, n)?;
        for (i, cache) in c.caches.iter_mut().enumerate() {
            let field = format!("caches[{i}]");
            match cache.capacity_bytes {
                Some(bytes) => cache.capacity_bytes = Some(div(bytes)),
                None => cache.spec = scaled_spec(&field, &cache.spec, n)?,
            }
        }
        c.duration_ns = (c.duration_ns / n).max(1);
        c.step_s = (c.step_s / n).max(1);
        for (at, _) in &mut c.switch {
            *at /= n;
        }
        c.name = format!("{} (at 1/{n} scale)", c.name);
        c.time_scale = c.time_scale.saturating_mul(n);
        Ok(c)
    }
}

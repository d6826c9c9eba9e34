//! The daemon's history of its pool: what the Analytics page and `larch analytics export`
//! show (see `docs/analytics.md`, the contract with the page).
//!
//! Once a second the daemon hands the recorder the pool's report; the recorder turns the
//! report's cumulative counters into per-second values, keeps gauges as they are, and
//! keeps the per-second latency histograms of the front end and of every device (the
//! difference of two snapshots). Seconds are kept for an hour and minutes for a day; a
//! minute is the mean of its seconds for counters (still a rate), the last of them for
//! gauges and the sum of their histograms.
//!
//! Memory is bounded: a sample holds one `f32` per series and only the non-empty buckets
//! of its histograms, and when the total passes the configured bound the oldest samples
//! go first (a range asked for beyond what is kept is then clipped and says so). The
//! history is saved in the state directory with a magic, version and checksum, and read
//! back at start so curves continue across a restart.
//!
//! The events marked on the charts are the pool's (`larch_engine::events`, which keeps
//! them across restarts in a file of its own): the daemon hands the recorder each new one
//! ([`Recorder::add_events`]), and a restart is the pool's `pool.open`.
//!
//! One file, because the recording, the queries and the saved form all walk the same
//! sample layout (one value per catalog series, sparse histograms): split apart, each part
//! would have to know that layout anyway. About a fifth of it is tests.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io;
use std::path::Path;

use larch_engine::PoolReport;
use larch_engine::latency::{BUCKETS, LatencySnapshot, bucket_upper_ns};
use larch_engine::report::LatencyReport;
use larch_engine::stats::{StatKind, StatUnit, kind_of};
use serde::{Deserialize, Serialize};

use crate::report_fields::{
    DEVICE_FIELDS, DEVICE_LATENCIES, Field, LOG_FIELDS, LOG_LATENCIES, Latency, OBJECT_FIELDS,
    VOLUME_FIELDS, VOLUME_LATENCIES,
};

/// Name of the saved history in the state directory.
pub const HISTORY_FILE: &str = "analytics.bin";
/// Seconds kept at 1-second resolution.
pub const SECONDS_KEPT: usize = 3600;
/// Minutes kept at 1-minute resolution.
pub const MINUTES_KEPT: usize = 1440;
/// The default bound of the history's memory.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;
/// Events kept: as many as the pool's event log keeps.
const EVENTS_KEPT: usize = larch_engine::events::EVENTS_KEPT;
/// Bytes of a sample besides its values and cells (its own header and the deque slot).
const SAMPLE_OVERHEAD: u64 = 64;

const FILE_MAGIC: &[u8; 8] = b"LARCHREC";
const FILE_VERSION: u32 = 1;

/// Counter (a per-second value) or gauge (a level).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Recorded as what happened during each second.
    Counter,
    /// Recorded as its value at the end of each second.
    Gauge,
}

/// A series the history holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SeriesDef {
    /// Its id (`arc/hits`, `volume/vol0/read_ops`, ...).
    pub id: String,
    /// What the page calls it.
    pub label: String,
    /// Unit of its values (`ops/s`, `bytes`, ...).
    pub unit: String,
    /// Counter or gauge.
    pub kind: Kind,
}

/// A latency histogram the history holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeatDef {
    /// Its id (`frontend/vol0/read_arc`, `cache/GUID/read`, ...).
    pub id: String,
    /// What the page calls it.
    pub label: String,
}

/// Something that happened, marked on every chart.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// When (seconds since the epoch).
    pub time: u64,
    /// `switch` (the L2ARC switch), `tunable`, `restart` (the pool opened), or the class
    /// of any other event of the pool (`cache.fault`, `l2arc.rebuild_end`, `txg.stall`,
    /// ... as `larch events` names them).
    pub kind: String,
    /// What (`l2arc_enabled=0`, `l2arc_write_max=64M`, or the event in words).
    pub text: String,
}

impl Event {
    /// How the charts mark the pool's event `e`: the switch, tunables and restarts by the
    /// kinds and texts the page has always had (a simulation's report uses them too),
    /// everything else by its class and its words.
    pub fn of(e: &larch_engine::Event) -> Event {
        use larch_engine::EventKind;
        let (kind, text) = match &e.kind {
            EventKind::L2arcSwitch { enabled } => (
                "switch".to_string(),
                format!("l2arc_enabled={}", u8::from(*enabled)),
            ),
            EventKind::TunableChanged { name, value, .. } => {
                ("tunable".to_string(), format!("{name}={value}"))
            }
            EventKind::PoolOpened => ("restart".to_string(), "daemon started".to_string()),
            other => (other.class().to_string(), other.to_string()),
        };
        Event {
            time: e.time_ms / 1000,
            kind,
            text,
        }
    }
}

/// One bucket of one histogram in one sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Cell {
    heat: u16,
    bucket: u8,
    count: u32,
}

/// One interval (a second or a minute): the values by series index (NaN: none) and the
/// non-empty histogram buckets, ordered by histogram and bucket.
#[derive(Clone, Debug, Default, PartialEq)]
struct Sample {
    /// End of the interval (seconds since the epoch).
    time: u64,
    values: Vec<f32>,
    cells: Vec<Cell>,
}

impl Sample {
    fn bytes(&self) -> u64 {
        SAMPLE_OVERHEAD + self.values.capacity() as u64 * 4 + self.cells.capacity() as u64 * 8
    }

    fn value(&self, series: usize) -> Option<f32> {
        self.values.get(series).copied().filter(|v| !v.is_nan())
    }

    /// Flat `bucket, count` pairs of histogram `heat`.
    fn cells_of(&self, heat: u16) -> Vec<u32> {
        let start = self.cells.partition_point(|c| c.heat < heat);
        self.cells[start..]
            .iter()
            .take_while(|c| c.heat == heat)
            .flat_map(|c| [u32::from(c.bucket), c.count])
            .collect()
    }
}

/// The minute being summed from its seconds.
#[derive(Debug, Default)]
struct MinuteSum {
    minute: u64,
    sums: Vec<f64>,
    seen: Vec<u32>,
    cells: BTreeMap<(u16, u8), u64>,
}

/// Why a question to the history cannot be answered (the HTTP answer is a 400 naming
/// the parameter).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{parameter}: {why}")]
pub struct QueryError {
    /// The parameter at fault.
    pub parameter: &'static str,
    /// What is wrong with it.
    pub why: String,
}

/// A time range, as asked for and resolved against what is kept.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Range {
    /// Start (exclusive), seconds since the epoch.
    pub from: u64,
    /// End (inclusive).
    pub to: u64,
    /// 1 or 60.
    pub step: u64,
    /// Why the range is shorter than asked for, if it is.
    pub clipped: Option<String>,
}

impl Range {
    /// Resolves the `from`, `to` and `step` parameters of a request (each optional) at
    /// time `now`: `to` is `now` or a time, `from` a time or seconds before `to` (negative),
    /// `step` 1 or 60. A range longer than what is kept at its step is clipped.
    pub fn parse(
        from: Option<&str>,
        to: Option<&str>,
        step: Option<&str>,
        now: u64,
    ) -> Result<Range, QueryError> {
        let bad = |parameter, why: &str| QueryError {
            parameter,
            why: why.to_string(),
        };
        let to = match to {
            None | Some("now") => now,
            Some(text) => text
                .parse::<u64>()
                .map_err(|_| bad("to", "expected seconds since the epoch or `now`"))?,
        };
        let from = match from {
            None => to.saturating_sub(300),
            Some(text) => match text.parse::<i64>() {
                Ok(back) if back < 0 => to.saturating_sub(back.unsigned_abs()),
                Ok(at) => at as u64,
                Err(_) => {
                    return Err(bad(
                        "from",
                        "expected seconds since the epoch, or negative seconds before `to`",
                    ));
                }
            },
        };
        if from >= to {
            return Err(bad("from", "the range is empty: `from` is not before `to`"));
        }
        let step = match step {
            None if from.saturating_add(SECONDS_KEPT as u64) >= now => 1,
            None => 60,
            Some("1") => 1,
            Some("60") => 60,
            Some(_) => return Err(bad("step", "expected 1 or 60")),
        };
        let kept = if step == 1 {
            SECONDS_KEPT as u64
        } else {
            MINUTES_KEPT as u64 * 60
        };
        let mut range = Range {
            from,
            to,
            step,
            clipped: None,
        };
        let oldest = now.saturating_sub(kept);
        if from < oldest {
            range.from = oldest.min(to.saturating_sub(1));
            range.clipped = Some(format!(
                "{kept} s are kept at {step}-second steps: the range starts at {} instead of {from}",
                range.from
            ));
        }
        Ok(range)
    }
}

/// The answer to a question about series.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SeriesAnswer {
    /// Format of the answer.
    pub version: u32,
    /// The range answered.
    #[serde(flatten)]
    pub range: Range,
    /// End of each interval.
    pub times: Vec<u64>,
    /// Values by id, one per time (`None`: no sample).
    pub series: BTreeMap<String, Vec<Option<f32>>>,
    /// Events within the range.
    pub events: Vec<Event>,
}

/// The answer to a question about a histogram.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HeatAnswer {
    /// Format of the answer.
    pub version: u32,
    /// The histogram.
    pub id: String,
    /// The range answered.
    #[serde(flatten)]
    pub range: Range,
    /// Upper bounds of the bounded buckets, µs.
    pub bounds_us: Vec<f64>,
    /// End of each interval.
    pub times: Vec<u64>,
    /// Per interval, flat `bucket, count` pairs of its non-empty buckets.
    pub cells: Vec<Vec<u32>>,
    /// Events within the range.
    pub events: Vec<Event>,
}

/// The newest second, as `/api/v1/live` sends it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LiveSample {
    /// End of the second.
    pub time: u64,
    /// Values by id.
    pub values: BTreeMap<String, f32>,
    /// Non-empty histogram buckets by id.
    pub heat: BTreeMap<String, Vec<u32>>,
    /// Events of that second.
    pub events: Vec<Event>,
}

/// What the history holds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Catalog {
    /// The series.
    pub series: Vec<SeriesDef>,
    /// The histograms.
    pub heatmaps: Vec<HeatDef>,
    /// Bytes of memory the history holds.
    pub bytes: u64,
    /// Its bound.
    pub max_bytes: u64,
}

/// The history.
#[derive(Debug)]
pub struct Recorder {
    series: Vec<SeriesDef>,
    series_index: HashMap<String, usize>,
    heats: Vec<HeatDef>,
    heat_index: HashMap<String, u16>,
    seconds: VecDeque<Sample>,
    minutes: VecDeque<Sample>,
    minute: Option<MinuteSum>,
    events: VecDeque<Event>,
    /// Events added since the last second was recorded (the next live sample's).
    fresh_events: usize,
    /// Cumulative counters and histograms of the last report, by id.
    last_counters: HashMap<String, u64>,
    last_heats: HashMap<String, LatencySnapshot>,
    /// The time of the last recorded second: a counter's delta is divided by the seconds
    /// since, so a late tick (a busy machine, a slow save) shows no false spike.
    last_time: Option<u64>,
    bytes: u64,
    max_bytes: u64,
}

/// A value of one report, before it is placed in a sample.
enum Reading {
    Counter(u64),
    Gauge(f64),
}

/// A series reading: its id, label, unit and value.
type SeriesReading = (String, String, &'static str, Reading);

/// The readings of one item's fields that the history shows ([`crate::report_fields`]):
/// `id` is the item's part of the series ids, `shown` its name in their labels.
fn item_readings<T>(
    item: &T,
    id: &str,
    shown: &str,
    fields: &[Field<T>],
    readings: &mut Vec<SeriesReading>,
) {
    for field in fields {
        let Some(series) = &field.series else {
            continue;
        };
        let value = (field.value)(item);
        let reading = match field.kind {
            StatKind::Counter => Reading::Counter(value),
            StatKind::Gauge => Reading::Gauge(value as f64),
        };
        readings.push((series.id(id), series.label(shown), series.unit, reading));
    }
}

/// The readings and heat maps of the pool's items: each volume (and its object store's
/// series when it has one), each cache device, the log device.
fn pool_items<'r>(
    report: &'r PoolReport,
    readings: &mut Vec<SeriesReading>,
    heats: &mut Vec<(String, String, &'r LatencyReport)>,
) {
    for v in &report.volumes {
        let n = &v.name;
        item_readings(v, n, n, VOLUME_FIELDS, readings);
        if v.object.is_some() {
            item_readings(v, n, n, OBJECT_FIELDS, readings);
        }
        item_heats(v, n, n, VOLUME_LATENCIES, heats);
    }
    for d in &report.cache_devices {
        let (g, name) = (format!("{:016x}", d.guid), file_name(&d.path));
        item_readings(d, &g, &name, DEVICE_FIELDS, readings);
        item_heats(d, &g, &name, DEVICE_LATENCIES, heats);
    }
    if let Some(l) = &report.log_device {
        let (g, name) = (format!("{:016x}", l.guid), file_name(&l.path));
        item_readings(l, &g, &name, LOG_FIELDS, readings);
        item_heats(l, &g, &name, LOG_LATENCIES, heats);
    }
}

/// The latency histograms of one item that the history shows, named as in
/// [`item_readings`].
fn item_heats<'r, T>(
    item: &'r T,
    id: &str,
    shown: &str,
    latencies: &[Latency<T>],
    heats: &mut Vec<(String, String, &'r LatencyReport)>,
) {
    for latency in latencies {
        if let Some(heat) = &latency.heat {
            heats.push((heat.id(id), heat.label(shown), (latency.latency)(item)));
        }
    }
}

/// The last part of a device's path, as the page names the device.
fn file_name(path: &str) -> String {
    Path::new(path)
        .file_name()
        .map_or(path.to_string(), |f| f.to_string_lossy().into_owned())
}

/// The unit of an arcstat's series, from the unit its declaration names and its kind (a
/// counter's series is a rate).
fn arcstat_unit(name: &str, kind: StatKind) -> &'static str {
    let unit = larch_engine::stats::document(name).map_or(StatUnit::Count, |(_, unit)| unit);
    match (unit, kind) {
        (StatUnit::Bytes, StatKind::Gauge) => "bytes",
        (StatUnit::Bytes, StatKind::Counter) => "bytes/s",
        (StatUnit::Micros, StatKind::Gauge) => "us",
        (StatUnit::Micros, StatKind::Counter) => "us/s",
        (StatUnit::Fraction, _) => "fraction (2^32 = 1)",
        (StatUnit::Count, StatKind::Gauge) => "",
        (StatUnit::Count, StatKind::Counter) => "per second",
    }
}

impl Recorder {
    /// An empty history holding at most `max_bytes` of samples.
    pub fn new(max_bytes: u64) -> Recorder {
        Recorder {
            series: Vec::new(),
            series_index: HashMap::new(),
            heats: Vec::new(),
            heat_index: HashMap::new(),
            seconds: VecDeque::new(),
            minutes: VecDeque::new(),
            minute: None,
            events: VecDeque::new(),
            fresh_events: 0,
            last_counters: HashMap::new(),
            last_heats: HashMap::new(),
            last_time: None,
            bytes: 0,
            max_bytes,
        }
    }

    /// Bytes of memory the samples hold.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// What the history holds.
    pub fn catalog(&self) -> Catalog {
        Catalog {
            series: self.series.clone(),
            heatmaps: self.heats.clone(),
            bytes: self.bytes,
            max_bytes: self.max_bytes,
        }
    }

    /// Marks an event at `time`; it goes out with the next live second.
    pub fn event(&mut self, time: u64, kind: &str, text: String) {
        if self.events.len() == EVENTS_KEPT {
            self.events.pop_front();
        }
        self.events.push_back(Event {
            time,
            kind: kind.to_string(),
            text,
        });
        self.fresh_events = (self.fresh_events + 1).min(self.events.len());
    }

    /// Marks the pool's new events (oldest first), as [`Event::of`] shows them.
    pub fn add_events(&mut self, events: &[larch_engine::Event]) {
        for e in events {
            let Event { time, kind, text } = Event::of(e);
            self.event(time, &kind, text);
        }
    }

    /// Marks the pool's events of before this history was loaded (oldest first): on the
    /// charts, but not in the next live second.
    pub fn restore_events(&mut self, events: &[larch_engine::Event]) {
        let fresh = self.fresh_events;
        self.add_events(events);
        self.fresh_events = fresh.min(self.events.len());
    }

    fn series_slot(&mut self, id: String, label: String, unit: &str, kind: Kind) -> usize {
        if let Some(&i) = self.series_index.get(&id) {
            return i;
        }
        let i = self.series.len();
        self.series_index.insert(id.clone(), i);
        self.series.push(SeriesDef {
            id,
            label,
            unit: unit.to_string(),
            kind,
        });
        i
    }

    fn heat_slot(&mut self, id: String, label: String) -> Option<u16> {
        if let Some(&i) = self.heat_index.get(&id) {
            return Some(i);
        }
        let i = u16::try_from(self.heats.len()).ok()?;
        self.heat_index.insert(id.clone(), i);
        self.heats.push(HeatDef { id, label });
        Some(i)
    }

    /// Records the second that ends at `now` from the pool's `report`, and returns it as
    /// `/api/v1/live` sends it.
    pub fn record(&mut self, now: u64, report: &PoolReport) -> LiveSample {
        // Seconds since the last record: a counter's delta over them is its rate. A clock
        // that stepped back (or a second recorded twice) gives no sample: the history
        // stays in time order, and the next second's deltas start from this report.
        let elapsed = self.last_time.map_or(1, |t| now.saturating_sub(t));
        let in_order = elapsed > 0;
        if in_order {
            self.last_time = Some(now);
        }
        let mut readings: Vec<SeriesReading> = Vec::new();
        let mut heats: Vec<(String, String, &LatencyReport)> = Vec::new();
        for (name, &value) in &report.arcstats.0 {
            let kind = kind_of(name);
            let reading = match kind {
                StatKind::Counter => Reading::Counter(value),
                StatKind::Gauge => Reading::Gauge(value as f64),
            };
            readings.push((
                format!("arc/{name}"),
                format!("arcstat {name}"),
                arcstat_unit(name, kind),
                reading,
            ));
        }
        pool_items(report, &mut readings, &mut heats);
        let switch = report.tunables.get("l2arc_enabled").copied().unwrap_or(1);
        readings.push((
            "pool/l2arc_enabled".to_string(),
            "the L2ARC switch".to_string(),
            "",
            Reading::Gauge(switch as f64),
        ));
        readings.push((
            "recorder/bytes".to_string(),
            "memory of this history".to_string(),
            "bytes",
            Reading::Gauge(self.bytes as f64),
        ));

        let mut sample = Sample {
            time: now,
            values: Vec::new(),
            cells: Vec::new(),
        };
        let mut live = LiveSample {
            time: now,
            values: BTreeMap::new(),
            heat: BTreeMap::new(),
            events: self
                .events
                .range(self.events.len() - self.fresh_events..)
                .cloned()
                .collect(),
        };
        self.fresh_events = 0;
        for (id, label, unit, reading) in readings {
            let (kind, value) = match reading {
                Reading::Gauge(v) => (Kind::Gauge, Some(v as f32)),
                Reading::Counter(now_total) => {
                    let before = self.last_counters.insert(id.clone(), now_total);
                    // The first report, or a counter that went back (a device removed
                    // and added again): no value for this second.
                    let delta = before.and_then(|b| now_total.checked_sub(b));
                    (
                        Kind::Counter,
                        delta.map(|d| (d as f64 / elapsed.max(1) as f64) as f32),
                    )
                }
            };
            let slot = self.series_slot(id.clone(), label, unit, kind);
            if sample.values.len() <= slot {
                sample.values.resize(slot + 1, f32::NAN);
            }
            if let Some(v) = value {
                sample.values[slot] = v;
                live.values.insert(id, v);
            }
        }
        for (id, label, latency) in heats {
            let snapshot = latency.snapshot();
            let before = self.last_heats.insert(id.clone(), snapshot);
            let Some(before) = before else { continue };
            let Some(slot) = self.heat_slot(id.clone(), label) else {
                continue;
            };
            let delta = snapshot.since(&before);
            let mut flat = Vec::new();
            for (bucket, &count) in delta.buckets.iter().enumerate() {
                if count > 0 {
                    let count = u32::try_from(count).unwrap_or(u32::MAX);
                    sample.cells.push(Cell {
                        heat: slot,
                        bucket: bucket as u8,
                        count,
                    });
                    flat.extend([bucket as u32, count]);
                }
            }
            if !flat.is_empty() {
                live.heat.insert(id, flat);
            }
        }
        if !in_order {
            live.values.clear();
            live.heat.clear();
            return live;
        }
        sample.cells.sort_by_key(|c| (c.heat, c.bucket));
        sample.values.shrink_to_fit();
        sample.cells.shrink_to_fit();
        self.add_to_minute(&sample);
        self.bytes += sample.bytes();
        self.seconds.push_back(sample);
        if self.seconds.len() > SECONDS_KEPT {
            let old = self.seconds.pop_front().expect("not empty");
            self.bytes -= old.bytes();
        }
        self.keep_within_bound();
        live
    }

    fn add_to_minute(&mut self, second: &Sample) {
        let minute = second.time.saturating_sub(1) / 60;
        if self.minute.as_ref().is_some_and(|m| m.minute != minute) {
            let done = self.minute.take().expect("checked");
            self.close_minute(done);
        }
        let sum = self.minute.get_or_insert_with(|| MinuteSum {
            minute,
            ..MinuteSum::default()
        });
        if sum.sums.len() < second.values.len() {
            sum.sums.resize(second.values.len(), 0.0);
            sum.seen.resize(second.values.len(), 0);
        }
        for (i, &v) in second.values.iter().enumerate() {
            if v.is_nan() {
                continue;
            }
            if self.series[i].kind == Kind::Gauge {
                sum.sums[i] = f64::from(v);
                sum.seen[i] = 1;
            } else {
                sum.sums[i] += f64::from(v);
                sum.seen[i] += 1;
            }
        }
        for c in &second.cells {
            *sum.cells.entry((c.heat, c.bucket)).or_default() += u64::from(c.count);
        }
    }

    fn close_minute(&mut self, sum: MinuteSum) {
        let values = sum
            .sums
            .iter()
            .zip(&sum.seen)
            .map(|(&s, &n)| {
                if n == 0 {
                    f32::NAN
                } else {
                    (s / f64::from(n)) as f32
                }
            })
            .collect();
        let cells = sum
            .cells
            .into_iter()
            .map(|((heat, bucket), count)| Cell {
                heat,
                bucket,
                count: u32::try_from(count).unwrap_or(u32::MAX),
            })
            .collect();
        let sample = Sample {
            time: (sum.minute + 1) * 60,
            values,
            cells,
        };
        self.bytes += sample.bytes();
        self.minutes.push_back(sample);
        if self.minutes.len() > MINUTES_KEPT {
            let old = self.minutes.pop_front().expect("not empty");
            self.bytes -= old.bytes();
        }
    }

    /// Drops the oldest samples (seconds first: minutes cover them) while over the bound.
    fn keep_within_bound(&mut self) {
        while self.bytes > self.max_bytes {
            let old = if self.seconds.len() > 1 {
                self.seconds.pop_front()
            } else {
                self.minutes.pop_front()
            };
            match old {
                Some(old) => self.bytes -= old.bytes(),
                None => break,
            }
        }
    }

    fn tier(&self, step: u64) -> &VecDeque<Sample> {
        if step == 1 {
            &self.seconds
        } else {
            &self.minutes
        }
    }

    /// The samples of `range`, with `None` where the daemon was not running (a gap of
    /// more than two steps between samples).
    fn samples_in(&self, range: &Range) -> Vec<Option<&Sample>> {
        let tier = self.tier(range.step);
        let start = tier.partition_point(|s| s.time <= range.from);
        let mut out = Vec::new();
        let mut last: Option<u64> = None;
        for s in tier.range(start..).take_while(|s| s.time <= range.to) {
            if last.is_some_and(|t| s.time > t + 2 * range.step) {
                out.push(None);
            }
            out.push(Some(s));
            last = Some(s.time);
        }
        out
    }

    fn times_of(samples: &[Option<&Sample>], step: u64) -> Vec<u64> {
        let mut last = 0;
        samples
            .iter()
            .map(|s| {
                last = s.map_or(last + step, |s| s.time);
                last
            })
            .collect()
    }

    fn events_in(&self, range: &Range) -> Vec<Event> {
        self.events
            .iter()
            .filter(|e| e.time > range.from && e.time <= range.to)
            .cloned()
            .collect()
    }

    /// The values of series `ids` over `range`.
    pub fn series(&self, ids: &[String], range: Range) -> Result<SeriesAnswer, QueryError> {
        let mut slots = Vec::new();
        for id in ids {
            let slot = self.series_index.get(id).ok_or_else(|| QueryError {
                parameter: "ids",
                why: format!("no series {id:?} (GET /api/v1/catalog lists them)"),
            })?;
            slots.push((id.clone(), *slot));
        }
        let samples = self.samples_in(&range);
        let series = slots
            .into_iter()
            .map(|(id, slot)| {
                let values = samples
                    .iter()
                    .map(|s| s.and_then(|s| s.value(slot)))
                    .collect();
                (id, values)
            })
            .collect();
        Ok(SeriesAnswer {
            version: 1,
            times: Self::times_of(&samples, range.step),
            series,
            events: self.events_in(&range),
            range,
        })
    }

    /// The histograms of `id` over `range`.
    pub fn heatmap(&self, id: &str, range: Range) -> Result<HeatAnswer, QueryError> {
        let slot = *self.heat_index.get(id).ok_or_else(|| QueryError {
            parameter: "id",
            why: format!("no heat map {id:?} (GET /api/v1/catalog lists them)"),
        })?;
        let samples = self.samples_in(&range);
        Ok(HeatAnswer {
            version: 1,
            id: id.to_string(),
            bounds_us: (0..BUCKETS - 1)
                .filter_map(bucket_upper_ns)
                .map(|ns| ns as f64 / 1000.0)
                .collect(),
            times: Self::times_of(&samples, range.step),
            cells: samples
                .iter()
                .map(|s| s.map(|s| s.cells_of(slot)).unwrap_or_default())
                .collect(),
            events: self.events_in(&range),
            range,
        })
    }

    /// The values of `ids` over `range` as CSV: a `time` column, then one per id.
    pub fn csv(&self, ids: &[String], range: Range) -> Result<String, QueryError> {
        let answer = self.series(ids, range)?;
        let mut out = String::from("time");
        for id in ids {
            out.push(',');
            out.push_str(id);
        }
        out.push('\n');
        for (k, time) in answer.times.iter().enumerate() {
            out.push_str(&time.to_string());
            for id in ids {
                out.push(',');
                if let Some(v) = answer.series[id][k] {
                    out.push_str(&v.to_string());
                }
            }
            out.push('\n');
        }
        Ok(out)
    }

    /// Saves the history in `state_dir` (owner-only, atomically).
    pub fn save(&self, state_dir: &Path) -> io::Result<()> {
        self.snapshot().save(state_dir)
    }

    /// A copy of the history to save: taken under the recorder's lock (a copy of the
    /// samples), encoded, compressed and written after it is released.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot(Saved {
            series: self.series.clone(),
            heats: self.heats.clone(),
            seconds: self.seconds.iter().map(SavedSample::of).collect(),
            minutes: self.minutes.iter().map(SavedSample::of).collect(),
        })
    }

    /// The history saved in `state_dir` (without events: they are the pool's, see
    /// [`Recorder::add_events`]); an empty one if there is none. A file that cannot be
    /// read is reported and set aside: a history is never a reason not to serve.
    pub fn load(state_dir: &Path, max_bytes: u64) -> (Recorder, Option<String>) {
        let mut recorder = Recorder::new(max_bytes);
        let path = state_dir.join(HISTORY_FILE);
        let warning = match std::fs::read(&path) {
            Err(err) if err.kind() == io::ErrorKind::NotFound => None,
            Err(err) => Some(format!("{}: {err}", path.display())),
            Ok(bytes) => match Saved::decode(&bytes, decoded_limit(max_bytes)) {
                Ok(saved) => {
                    recorder.restore(saved);
                    None
                }
                Err(why) => Some(format!("{}: {why}; starting a new history", path.display())),
            },
        };
        (recorder, warning)
    }

    fn restore(&mut self, saved: Saved) {
        for def in saved.series {
            let (id, label, unit, kind) = (def.id, def.label, def.unit, def.kind);
            self.series_slot(id, label, &unit, kind);
        }
        for def in saved.heats {
            self.heat_slot(def.id, def.label);
        }
        let heats = self.heats.len();
        let series = self.series.len();
        let restore = |saved: Vec<SavedSample>, keep: usize| {
            let mut out = VecDeque::new();
            for s in saved.into_iter().rev().take(keep).rev() {
                let mut sample = s.into_sample();
                // A file is checked by its checksum, but never trusted to index past what
                // it declares.
                sample.values.truncate(series);
                sample
                    .cells
                    .retain(|c| usize::from(c.heat) < heats && usize::from(c.bucket) < BUCKETS);
                out.push_back(sample);
            }
            out
        };
        self.seconds = restore(saved.seconds, SECONDS_KEPT);
        self.minutes = restore(saved.minutes, MINUTES_KEPT);
        self.bytes = self
            .seconds
            .iter()
            .chain(&self.minutes)
            .map(Sample::bytes)
            .sum();
        self.keep_within_bound();
    }
}

/// A copy of the history, to be saved without holding the recorder ([`Recorder::snapshot`]).
pub struct Snapshot(Saved);

impl Snapshot {
    /// Saves the copy in `state_dir` (owner-only, atomically). Two saves into one directory
    /// must not run at once: they write the same temporary file.
    pub fn save(self, state_dir: &Path) -> io::Result<()> {
        // The JSON goes straight into the compressor: only the compressed file is ever
        // whole in memory beside the copy (the JSON spells the samples out in text, several
        // times the history's size, and a save runs every minute). The header's 16 bytes
        // are kept free at the front and filled in once the checksum is known.
        let mut file = vec![0u8; 16];
        let encoder = zstd::Encoder::new(&mut file, 3)?;
        let mut writer = io::BufWriter::with_capacity(64 << 10, encoder);
        serde_json::to_writer(&mut writer, &self.0)?;
        drop(self);
        writer
            .into_inner()
            .map_err(io::IntoInnerError::into_error)?
            .finish()?;
        let checksum = crc32c::crc32c(&file[16..]);
        file[..8].copy_from_slice(FILE_MAGIC);
        file[8..12].copy_from_slice(&FILE_VERSION.to_le_bytes());
        file[12..16].copy_from_slice(&checksum.to_le_bytes());
        larch_engine::write_private_state_file(state_dir, HISTORY_FILE, &file)
    }
}

/// The history as saved.
#[derive(Serialize, Deserialize)]
struct Saved {
    series: Vec<SeriesDef>,
    heats: Vec<HeatDef>,
    seconds: Vec<SavedSample>,
    minutes: Vec<SavedSample>,
}

#[derive(Serialize, Deserialize)]
struct SavedSample {
    time: u64,
    values: Vec<Option<f32>>,
    cells: Vec<(u16, u8, u32)>,
}

impl SavedSample {
    fn of(s: &Sample) -> SavedSample {
        SavedSample {
            time: s.time,
            values: s
                .values
                .iter()
                .map(|&v| (!v.is_nan()).then_some(v))
                .collect(),
            cells: s
                .cells
                .iter()
                .map(|c| (c.heat, c.bucket, c.count))
                .collect(),
        }
    }

    fn into_sample(self) -> Sample {
        let mut cells: Vec<Cell> = self
            .cells
            .into_iter()
            .map(|(heat, bucket, count)| Cell {
                heat,
                bucket,
                count,
            })
            .collect();
        cells.sort_by_key(|c| (c.heat, c.bucket));
        cells.shrink_to_fit();
        // Collected in place, the values would keep the larger allocation they came in.
        let mut values: Vec<f32> = self
            .values
            .into_iter()
            .map(|v| v.unwrap_or(f32::NAN))
            .collect();
        values.shrink_to_fit();
        Sample {
            time: self.time,
            values,
            cells,
        }
    }
}

/// Why a saved history file is not taken (it is set aside and a new history starts).
#[derive(Debug, thiserror::Error)]
enum HistoryFileError {
    /// Too short, or not the history's magic.
    #[error("not a larch history (bad magic)")]
    Magic,
    /// Another version of the file.
    #[error("history version {0}; this larch reads version {FILE_VERSION}")]
    Version(u32),
    /// The payload's checksum does not match.
    #[error("checksum mismatch")]
    Checksum,
    /// The payload does not decompress.
    #[error("decompressing: {0}")]
    Decompress(#[source] io::Error),
    /// The payload decompresses to more than the limit.
    #[error("it holds more than {limit} bytes of history, more than --history allows")]
    TooLarge {
        /// The limit, bytes.
        limit: u64,
    },
    /// The decompressed JSON is not a history.
    #[error("decoding: {0}")]
    Decode(#[source] serde_json::Error),
}

impl Saved {
    /// The file's history; refused when it would decompress to more than `limit` bytes
    /// (a file saved under a larger `--history`, or not the daemon's own).
    fn decode(bytes: &[u8], limit: u64) -> Result<Saved, HistoryFileError> {
        if bytes.len() < 16 || &bytes[..8] != FILE_MAGIC {
            return Err(HistoryFileError::Magic);
        }
        let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
        if version != FILE_VERSION {
            return Err(HistoryFileError::Version(version));
        }
        let checksum = u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes"));
        let payload = &bytes[16..];
        if crc32c::crc32c(payload) != checksum {
            return Err(HistoryFileError::Checksum);
        }
        // Decompressed at most to the limit: a start never needs more memory for the file
        // than the history it may hold (a file saved under a larger `--history` would, and
        // a crash loop under a memory limit would follow).
        let mut json = Vec::new();
        let decoder = zstd::Decoder::new(payload).map_err(HistoryFileError::Decompress)?;
        io::Read::read_to_end(
            &mut io::Read::take(decoder, limit.saturating_add(1)),
            &mut json,
        )
        .map_err(HistoryFileError::Decompress)?;
        if json.len() as u64 > limit {
            return Err(HistoryFileError::TooLarge { limit });
        }
        let mut saved: Saved = serde_json::from_slice(&json).map_err(HistoryFileError::Decode)?;
        // Samples in time order, each tier.
        saved.seconds.sort_by_key(|s| s.time);
        saved.minutes.sort_by_key(|s| s.time);
        Ok(saved)
    }
}

/// The most a saved history of at most `max_bytes` in memory decompresses to: its JSON
/// spells each value and cell out in text, several times its size in memory (with room
/// for the series' names).
fn decoded_limit(max_bytes: u64) -> u64 {
    max_bytes.saturating_mul(8).max(16 << 20)
}

#[cfg(test)]
mod tests {
    use super::*;
    use larch_engine::LatencyHistogram;
    use larch_engine::report::{Arcstats, VolumeReport};
    use std::time::Duration;

    /// A report with arcstat `hits` at `hits`, size at `size`, and volume `vol0` whose
    /// ARC-hit histogram is `arc_hits`.
    fn report(hits: u64, size: u64, arc_hits: &LatencyHistogram, switch: u64) -> PoolReport {
        let mut arcstats = BTreeMap::new();
        arcstats.insert("hits".to_string(), hits);
        arcstats.insert("size".to_string(), size);
        let mut tunables = BTreeMap::new();
        tunables.insert("l2arc_enabled".to_string(), switch);
        PoolReport {
            pool: "tank".to_string(),
            volumes: vec![VolumeReport {
                name: "vol0".to_string(),
                read_arc_latency: LatencyReport::of(&arc_hits.snapshot()),
                ..VolumeReport::default()
            }],
            tunables,
            arcstats: Arcstats(arcstats),
            ..PoolReport::default()
        }
    }

    fn all(now: u64, back: i64) -> Range {
        Range::parse(Some(&back.to_string()), Some(&now.to_string()), None, now).unwrap()
    }

    #[test]
    fn counters_become_rates_gauges_stay_levels_and_histograms_per_second() {
        let mut r = Recorder::new(DEFAULT_MAX_BYTES);
        let h = LatencyHistogram::new();
        let t0 = 1_000_000;
        r.record(t0, &report(100, 5, &h, 1));
        h.record(Duration::from_micros(50));
        h.record(Duration::from_micros(50));
        h.record(Duration::from_millis(5));
        let live = r.record(t0 + 1, &report(130, 7, &h, 1));
        assert_eq!(live.values["arc/hits"], 30.0);
        assert_eq!(live.values["arc/size"], 7.0);
        let ids = ["arc/hits".to_string(), "arc/size".to_string()];
        let answer = r.series(&ids, all(t0 + 1, -10)).unwrap();
        assert_eq!(answer.times, [t0, t0 + 1]);
        assert_eq!(answer.series["arc/hits"], [None, Some(30.0)]);
        assert_eq!(answer.series["arc/size"], [Some(5.0), Some(7.0)]);
        let heat = r
            .heatmap("frontend/vol0/read_arc", all(t0 + 1, -10))
            .unwrap();
        assert_eq!(heat.bounds_us.len(), BUCKETS - 1);
        let counts: u32 = heat.cells[1].chunks(2).map(|p| p[1]).sum();
        assert_eq!(counts, 3);
        assert_eq!(heat.cells[1].len(), 4, "two buckets: {:?}", heat.cells[1]);
        assert!(r.series(&["nope".to_string()], all(t0, -10)).is_err());
        assert_eq!(r.heatmap("nope", all(t0, -10)).unwrap_err().parameter, "id");
    }

    /// A tick that comes late (a second skipped) records the counter's rate over the two
    /// seconds, not their sum; a clock that steps back records nothing, and the history
    /// stays in time order (a review's finding: rate charts showed 2x spikes after a slow
    /// tick, and a backward step put samples out of order).
    #[test]
    fn late_ticks_give_rates_and_a_clock_stepped_back_records_nothing() {
        let mut r = Recorder::new(DEFAULT_MAX_BYTES);
        let h = LatencyHistogram::new();
        let t0 = 2_000_000;
        r.record(t0, &report(100, 5, &h, 1));
        let live = r.record(t0 + 2, &report(160, 5, &h, 1));
        assert_eq!(live.values["arc/hits"], 30.0, "60 hits over 2 s");
        let live = r.record(t0 + 1, &report(190, 5, &h, 1));
        assert!(live.values.is_empty(), "{:?}", live.values);
        let live = r.record(t0 + 3, &report(220, 5, &h, 1));
        assert_eq!(
            live.values["arc/hits"], 30.0,
            "from the report of the step back"
        );
        let answer = r
            .series(&["arc/hits".to_string()], all(t0 + 3, -10))
            .unwrap();
        assert_eq!(answer.times, [t0, t0 + 2, t0 + 3]);
    }

    #[test]
    fn seconds_roll_into_minutes_and_both_are_bounded() {
        let mut r = Recorder::new(DEFAULT_MAX_BYTES);
        let h = LatencyHistogram::new();
        let t0 = 6_000_000; // a whole minute
        let mut hits = 0;
        for s in 0..=(SECONDS_KEPT as u64 + 120) {
            hits += s % 7;
            h.record(Duration::from_micros(10));
            r.record(t0 + s, &report(hits, s, &h, 1));
        }
        assert_eq!(r.seconds.len(), SECONDS_KEPT);
        assert_eq!(r.minutes.len(), 62);
        let now = t0 + SECONDS_KEPT as u64 + 120;
        let minutes = r
            .series(
                &["arc/hits".to_string(), "arc/size".to_string()],
                Range::parse(Some("-7200"), None, Some("60"), now).unwrap(),
            )
            .unwrap();
        // The second full minute: seconds 61..=120, mean of s % 7 over them.
        let expect: f64 = (61..=120u64).map(|s| (s % 7) as f64).sum::<f64>() / 60.0;
        let k = minutes.times.iter().position(|&t| t == t0 + 120).unwrap();
        assert!((f64::from(minutes.series["arc/hits"][k].unwrap()) - expect).abs() < 1e-3);
        assert_eq!(minutes.series["arc/size"][k], Some(120.0));
        let heat = r
            .heatmap(
                "frontend/vol0/read_arc",
                Range::parse(Some("-7200"), None, Some("60"), now).unwrap(),
            )
            .unwrap();
        assert_eq!(
            heat.cells[k][1], 60,
            "a minute holds its 60 seconds' counts"
        );
        // Memory: what the samples hold, as stated.
        let expected: u64 = r.seconds.iter().chain(&r.minutes).map(Sample::bytes).sum();
        assert_eq!(r.bytes(), expected);
        assert!(r.bytes() < 2 << 20, "{}", r.bytes());
    }

    #[test]
    fn the_memory_bound_drops_the_oldest_seconds_first() {
        let h = LatencyHistogram::new();
        let mut r = Recorder::new(64 << 10);
        for s in 0..2000u64 {
            h.record(Duration::from_micros(1 + s % 5000));
            r.record(1_000_000 + s, &report(s, s, &h, 1));
            assert!(r.bytes() <= 64 << 10);
        }
        assert!(r.seconds.len() < 2000);
        assert_eq!(r.seconds.back().unwrap().time, 1_000_000 + 1999);
    }

    #[test]
    fn ranges_parse_clip_and_refuse_nonsense() {
        let now = 10_000_000;
        let r = Range::parse(None, None, None, now).unwrap();
        assert_eq!((r.from, r.to, r.step, r.clipped), (now - 300, now, 1, None));
        let r = Range::parse(Some("-7200"), Some("now"), Some("1"), now).unwrap();
        assert_eq!(r.from, now - 3600);
        assert!(r.clipped.unwrap().contains("3600 s are kept"));
        let r = Range::parse(Some("-7200"), None, None, now).unwrap();
        assert_eq!((r.step, r.clipped), (60, None));
        for (from, to, step, parameter) in [
            (Some("x"), None, None, "from"),
            (None, Some("yesterday"), None, "to"),
            (None, None, Some("5"), "step"),
            (Some("20"), Some("10"), None, "from"),
        ] {
            assert_eq!(
                Range::parse(from, to, step, now).unwrap_err().parameter,
                parameter
            );
        }
    }

    #[test]
    fn the_pools_events_are_marked_and_go_out_with_the_next_second() {
        use larch_engine::{EventKind, Events};
        let pool = Events::new();
        let mut r = Recorder::new(DEFAULT_MAX_BYTES);
        let h = LatencyHistogram::new();
        // Before the history was loaded: marked, not live.
        pool.record_at(50_000, EventKind::PoolOpened);
        r.restore_events(&pool.since(0));
        assert!(r.record(100, &report(0, 0, &h, 1)).events.is_empty());
        pool.record_at(100_400, EventKind::L2arcSwitch { enabled: false });
        pool.record_at(
            100_700,
            EventKind::CacheDeviceFaulted {
                device: "/dev/sdc".into(),
                why: "feed write failed".into(),
            },
        );
        r.add_events(&pool.since(1));
        let live = r.record(101, &report(0, 0, &h, 0));
        let marks: Vec<(u64, &str, &str)> = live
            .events
            .iter()
            .map(|e| (e.time, e.kind.as_str(), e.text.as_str()))
            .collect();
        assert_eq!(
            marks,
            [
                (100, "switch", "l2arc_enabled=0"),
                (
                    100,
                    "cache.fault",
                    "cache device /dev/sdc faulted: feed write failed"
                ),
            ]
        );
        assert!(r.record(102, &report(0, 0, &h, 0)).events.is_empty());
        let answer = r
            .series(&["pool/l2arc_enabled".to_string()], all(102, -10))
            .unwrap();
        assert_eq!(
            answer.series["pool/l2arc_enabled"],
            [Some(1.0), Some(0.0), Some(0.0)]
        );
        assert_eq!(answer.events.len(), 2, "{:?}", answer.events);
        let restart = &r.series(&[], all(102, -100)).unwrap().events[0];
        assert_eq!((restart.time, restart.kind.as_str()), (50, "restart"));
    }

    #[test]
    fn the_history_survives_a_restart_and_a_bad_file_is_set_aside() {
        let dir = std::env::temp_dir().join(format!("larch-recorder-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let h = LatencyHistogram::new();
        let mut r = Recorder::new(DEFAULT_MAX_BYTES);
        for s in 0..200u64 {
            h.record(Duration::from_micros(7));
            r.record(1_000_000 + s, &report(s * 3, s, &h, 1));
        }
        r.save(&dir).unwrap();
        let (back, warning) = Recorder::load(&dir, DEFAULT_MAX_BYTES);
        assert_eq!(warning, None);
        // Compared as text: a NaN (no value) is not equal to itself.
        let text = |r: &Recorder| format!("{:?} {:?}", r.seconds, r.minutes);
        assert!(text(&back) == text(&r), "the restored samples differ");
        assert_eq!(back.series, r.series);
        assert_eq!(back.bytes(), r.bytes());
        // The events are the pool's, kept in its own file.
        assert!(back.events.is_empty());
        // The gap while the daemon was down reads as no sample.
        let mut back = back;
        back.record(1_000_500, &report(0, 1, &h, 1));
        let answer = back
            .series(&["arc/size".to_string()], all(1_000_500, -400))
            .unwrap();
        assert_eq!(
            answer.series["arc/size"]
                .iter()
                .filter(|v| v.is_none())
                .count(),
            1
        );
        assert_eq!(answer.series["arc/size"].last(), Some(&Some(1.0)));

        let path = dir.join(HISTORY_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
        let (fresh, warning) = Recorder::load(&dir, DEFAULT_MAX_BYTES);
        assert!(warning.unwrap().contains("checksum"));
        assert!(fresh.seconds.is_empty());
        std::fs::write(&path, b"garbage").unwrap();
        assert!(
            Recorder::load(&dir, DEFAULT_MAX_BYTES)
                .1
                .unwrap()
                .contains("magic")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A history at its memory bound decompresses within the limit a start allows it, and
    /// a file that decompresses past the limit is refused, not read whole (a review's
    /// finding: a file saved under a larger `--history` was decompressed without bound).
    #[test]
    fn a_saved_history_decompresses_within_its_limit_and_no_further() {
        let dir = std::env::temp_dir().join(format!("larch-recorder-limit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let max = 256 << 10;
        let mut r = Recorder::new(max);
        let h = LatencyHistogram::new();
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        for s in 0..4000u64 {
            let mut report = report(s * 7, s, &h, 1);
            for i in 0..40 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                report.arcstats.0.insert(format!("size_{i}"), x >> 20);
            }
            h.record(Duration::from_micros(x % 5000));
            r.record(1_000_000 + s, &report);
        }
        assert!(
            r.bytes() > max / 2,
            "the history is not near its bound: {}",
            r.bytes()
        );
        r.save(&dir).unwrap();
        let bytes = std::fs::read(dir.join(HISTORY_FILE)).unwrap();
        let saved = Saved::decode(&bytes, max * 8).expect("within 8x its bound");
        assert!(!saved.seconds.is_empty());
        let refused = Saved::decode(&bytes, 4096)
            .err()
            .expect("past the limit")
            .to_string();
        assert!(refused.contains("more than 4096 bytes"), "{refused}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn csv_has_a_time_column_and_one_per_series() {
        let mut r = Recorder::new(DEFAULT_MAX_BYTES);
        let h = LatencyHistogram::new();
        r.record(100, &report(0, 4, &h, 1));
        r.record(101, &report(2, 5, &h, 1));
        let csv = r
            .csv(
                &["arc/hits".to_string(), "arc/size".to_string()],
                all(101, -10),
            )
            .unwrap();
        assert_eq!(csv, "time,arc/hits,arc/size\n100,,4\n101,2,5\n");
    }
}

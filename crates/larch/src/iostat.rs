//! `larch iostat`: operations and bandwidth of a running pool's devices, as `zpool
//! iostat` prints them. The first report covers the time since the pool was opened (the
//! counters' whole span: the status report's `uptime_ms`); with an interval, each later
//! one covers the interval before it. The figures are differences between two reads of
//! the daemon's status file.
//!
//! Without `-v` one line, the pool's; with it, the tree of `zpool iostat -v`: the pool,
//! each volume's backing store under it, then the log device under `logs` and the cache
//! devices under `cache`. The pool's line adds up its backing stores and its log device,
//! as a zpool's adds up its data and log vdevs (cache devices have lines of their own
//! only, in both).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;
use larch_daemon::status::StatusReport;
use larch_engine::LatencySnapshot;
use larch_engine::report::QueueReport;
use larch_engine::units::format_size;

use crate::status;

/// Arguments of `larch iostat`.
#[derive(clap::Args)]
#[command(after_help = IOSTAT_HELP)]
pub struct IostatArgs {
    /// Seconds between reports. Without it, one report of the averages since the pool
    /// was opened; with it, that report first, then one per interval.
    pub interval: Option<u64>,
    /// Reports to print, the first included (default: until interrupted).
    pub count: Option<u64>,
    /// The pool's state directory.
    #[arg(long, default_value = "larch-data")]
    pub state_dir: PathBuf,
    /// The tree of `zpool iostat -v`: the pool, each volume's backing store, then the log
    /// device under `logs` and the cache devices under `cache`.
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// Wait times, as `zpool iostat -l`, for reads and writes: total_wait (from the
    /// request's queueing in larch to its end), disk_wait (the device's own time),
    /// queue_wait (queued in larch before the device got it) and p99_wait (the 99th
    /// percentile of total_wait).
    #[arg(short = 'l', long)]
    pub latency: bool,
    /// Queue depths, as `zpool iostat -q`: requests queued in larch (pend) and at the
    /// device (activ), for reads (readq) and writes (writeq), at the time of the report.
    #[arg(short = 'q', long)]
    pub queues: bool,
}

/// What `--help` adds: what larch's queues are, per kind of device.
const IOSTAT_HELP: &str = "\
What larch queues (docs/engine.md, \"larch iostat\"):
  backing store  readq: reads waiting for an I/O thread of the blocking pool, and at the
                 store; writeq: a TXG's write runs waiting for one of
                 zfs_vdev_async_write_max_active writers (as asyncq_write), and written
                 (a volume on an object store has none: its TXG is one commit)
  cache device   readq: reads waiting to be submitted to io_uring or taken by an I/O
                 thread, and at the device; writes (feeds) have no queue
  log device     no queue: a commit is written by the writer that leads it
A '-' is a queue larch does not have, or no operation in the interval.";

/// What to check when there is no status file.
const HINT: &str = "is `larch serve` running?";

/// Read and write, as indexes of a row's pairs.
const READ: usize = 0;
const WRITE: usize = 1;

/// The queue of one direction of a device, as the report has it.
#[derive(Clone, Copy, Default)]
struct Queue {
    pending: u64,
    active: u64,
    wait: LatencySnapshot,
    total: LatencySnapshot,
}

impl Queue {
    fn of(report: &QueueReport) -> Queue {
        Queue {
            pending: report.pending,
            active: report.active,
            wait: report.wait.snapshot(),
            total: report.total.snapshot(),
        }
    }

    /// What was counted after `earlier`; the depths are those of now.
    fn since(&self, earlier: &Queue) -> Queue {
        Queue {
            wait: self.wait.since(&earlier.wait),
            total: self.total.since(&earlier.total),
            ..*self
        }
    }

    fn add(&mut self, other: &Queue) {
        self.pending += other.pending;
        self.active += other.active;
        add_snapshot(&mut self.wait, &other.wait);
        add_snapshot(&mut self.total, &other.total);
    }
}

fn add_snapshot(to: &mut LatencySnapshot, other: &LatencySnapshot) {
    for (a, b) in to.buckets.iter_mut().zip(other.buckets) {
        *a += b;
    }
    to.sum_ns += other.sum_ns;
}

/// Where a line sits in the tree.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Place {
    /// The pool's line.
    Pool,
    /// A volume's backing store.
    Backing,
    /// The log device.
    Log,
    /// A cache device.
    Cache,
}

/// The I/O of one device (or the pool), reads then writes.
#[derive(Clone)]
struct Row {
    name: String,
    place: Place,
    ops: [u64; 2],
    bytes: [u64; 2],
    /// Time of each operation at the device, for directions without a queue.
    device: [LatencySnapshot; 2],
    /// The queue of each direction that has one.
    queue: [Option<Queue>; 2],
}

impl Row {
    fn empty(name: &str, place: Place) -> Row {
        Row {
            name: name.to_string(),
            place,
            ops: [0; 2],
            bytes: [0; 2],
            device: [LatencySnapshot::default(); 2],
            queue: [None; 2],
        }
    }

    /// What was counted after `earlier` (the same device's row of an earlier report;
    /// `None`: a device new since, whose counts all fall in the interval).
    fn since(&self, earlier: Option<&Row>) -> Row {
        let Some(earlier) = earlier else {
            return self.clone();
        };
        let mut row = self.clone();
        for d in [READ, WRITE] {
            row.ops[d] = self.ops[d].saturating_sub(earlier.ops[d]);
            row.bytes[d] = self.bytes[d].saturating_sub(earlier.bytes[d]);
            row.device[d] = self.device[d].since(&earlier.device[d]);
            row.queue[d] = match (self.queue[d], earlier.queue[d]) {
                (Some(now), Some(then)) => Some(now.since(&then)),
                (now, _) => now,
            };
        }
        row
    }

    /// Adds `other`'s counts (the pool's line).
    fn add(&mut self, other: &Row) {
        for d in [READ, WRITE] {
            self.ops[d] += other.ops[d];
            self.bytes[d] += other.bytes[d];
            add_snapshot(&mut self.device[d], &other.device[d]);
            if let Some(q) = &other.queue[d] {
                self.queue[d].get_or_insert_with(Queue::default).add(q);
            }
        }
    }

    /// The waits of direction `d`: total, disk and queue (`None`: no queue), and the
    /// total's distribution for its percentile. Where there is a queue, its totals and
    /// waits time the same requests, so the device's mean time is the one's mean less
    /// the other's, exactly.
    fn waits(&self, d: usize) -> Waits {
        match &self.queue[d] {
            Some(q) if q.total.count() > 0 => {
                let count = q.total.count();
                let disk_ns = q.total.sum_ns.saturating_sub(q.wait.sum_ns) / count;
                Waits {
                    total: q.total.mean(),
                    disk: Some(Duration::from_nanos(disk_ns)),
                    queue: Some(q.wait.mean()),
                    p99: q.total.percentile(0.99),
                }
            }
            queue => Waits {
                total: self.device[d].mean(),
                disk: self.device[d].mean(),
                queue: queue.map(|_| None),
                p99: self.device[d].percentile(0.99),
            },
        }
    }
}

/// The wait columns of one direction: `None` for no operation; `queue` is `None` where
/// there is no queue, `Some(None)` for a queue with no operation.
struct Waits {
    total: Option<Duration>,
    disk: Option<Duration>,
    queue: Option<Option<Duration>>,
    p99: Option<Duration>,
}

/// The last part of a device's path.
fn file_name(path: &str) -> String {
    Path::new(path)
        .file_name()
        .map_or_else(|| path.to_string(), |f| f.to_string_lossy().into_owned())
}

/// The devices of a report, in tree order: backing stores, the log device, cache devices.
fn device_rows(status: &StatusReport) -> Vec<Row> {
    let mut rows = Vec::new();
    for v in &status.pool.volumes {
        let object = v.object.is_some();
        rows.push(Row {
            name: v.name.clone(),
            place: Place::Backing,
            ops: [v.backing_reads, v.backing_writes],
            bytes: [v.backing_read_bytes, v.backing_write_bytes],
            device: [
                v.backing_read_latency.snapshot(),
                v.backing_write_latency.snapshot(),
            ],
            queue: [
                Some(Queue::of(&v.backing_read_queue)),
                (!object).then(|| Queue::of(&v.backing_write_queue)),
            ],
        });
    }
    if let Some(l) = &status.pool.log_device {
        rows.push(Row {
            name: file_name(&l.path),
            place: Place::Log,
            ops: [0, l.commits],
            bytes: [0, l.bytes],
            device: [LatencySnapshot::default(), l.commit_latency.snapshot()],
            queue: [None, None],
        });
    }
    for d in &status.pool.cache_devices {
        rows.push(Row {
            name: file_name(&d.path),
            place: Place::Cache,
            ops: [d.reads, d.writes],
            bytes: [d.read_bytes, d.write_bytes],
            device: [d.read_latency.snapshot(), d.write_latency.snapshot()],
            queue: [Some(Queue::of(&d.read_queue)), None],
        });
    }
    rows
}

/// One read of the status file: its devices and the span of its counters.
struct Sample {
    pool: String,
    uptime_ms: u64,
    rows: Vec<Row>,
}

impl Sample {
    fn of(status: &StatusReport) -> Sample {
        Sample {
            pool: status.pool.pool.clone(),
            uptime_ms: status.pool.uptime_ms,
            rows: device_rows(status),
        }
    }
}

/// `larch iostat`.
pub fn run(args: IostatArgs) -> anyhow::Result<ExitCode> {
    if args.interval == Some(0) {
        bail!("the interval must be at least 1 second");
    }
    if args.count == Some(0) {
        return Ok(ExitCode::SUCCESS);
    }
    let mut previous: Option<Sample> = None;
    let mut printed = 0u64;
    loop {
        let now = Sample::of(&status::read_running(&args.state_dir, HINT)?);
        print!("{}", report(&now, previous.as_ref(), &args));
        printed += 1;
        let Some(interval) = args.interval else {
            break;
        };
        if args.count.is_some_and(|c| printed >= c) {
            break;
        }
        previous = Some(now);
        std::thread::sleep(Duration::from_secs(interval));
    }
    Ok(ExitCode::SUCCESS)
}

/// Width of the value columns: operations and bandwidth, waits, queue depths.
const OPS: usize = 7;
const BW: usize = 8;
const WAIT: usize = 7;
const DEPTH: usize = 5;

/// One report: from `previous` to `now`, or over the counters' whole span without one.
fn report(now: &Sample, previous: Option<&Sample>, args: &IostatArgs) -> String {
    let seconds = match previous {
        Some(p) => now.uptime_ms.saturating_sub(p.uptime_ms),
        None => now.uptime_ms,
    } as f64
        / 1000.0;
    // At least a second: a report right after a start (or two of one second) would
    // divide by next to nothing.
    let seconds = seconds.max(1.0);
    let rows: Vec<Row> = now
        .rows
        .iter()
        .map(|row| {
            let before = previous.and_then(|p| {
                p.rows
                    .iter()
                    .find(|r| r.place == row.place && r.name == row.name)
            });
            row.since(before)
        })
        .collect();
    let mut pool = Row::empty(&now.pool, Place::Pool);
    for row in rows
        .iter()
        .filter(|r| matches!(r.place, Place::Backing | Place::Log))
    {
        pool.add(row);
    }
    let mut lines: Vec<(String, Option<&Row>)> = vec![(now.pool.clone(), Some(&pool))];
    if args.verbose {
        let indented = |place: Place| {
            rows.iter()
                .filter(move |r| r.place == place)
                .map(|r| (format!("  {}", r.name), Some(r)))
        };
        lines.extend(indented(Place::Backing));
        for (heading, place) in [("logs", Place::Log), ("cache", Place::Cache)] {
            if rows.iter().any(|r| r.place == place) {
                lines.push((heading.to_string(), None));
                lines.extend(indented(place));
            }
        }
    }
    let name_width = lines
        .iter()
        .map(|(name, _)| name.len())
        .max()
        .unwrap_or(0)
        .max(20);
    let mut out = heading(name_width, args);
    let rule = rule_line(name_width, args);
    out += &rule;
    for (name, row) in &lines {
        out += &format!("{name:<name_width$}");
        match row {
            Some(row) => out += &columns(row, seconds, args),
            None => out += &no_columns(args),
        }
        out.push('\n');
    }
    if args.verbose {
        out += &rule;
    }
    out.push('\n');
    out
}

/// The two heading lines: column groups, then each column's name.
fn heading(name_width: usize, args: &IostatArgs) -> String {
    let pair = |width: usize| width * 2 + 1;
    let mut groups = format!(
        "{:<name_width$}  {:^ops$}  {:^bw$}",
        "",
        "operations",
        "bandwidth",
        ops = pair(OPS),
        bw = pair(BW)
    );
    let mut names = format!(
        "{:<name_width$}  {:>OPS$} {:>OPS$}  {:>BW$} {:>BW$}",
        "pool", "read", "write", "read", "write"
    );
    if args.latency {
        for group in ["total_wait", "disk_wait", "queue_wait", "p99_wait"] {
            groups += &format!("  {group:^w$}", w = pair(WAIT));
            names += &format!("  {:>WAIT$} {:>WAIT$}", "read", "write");
        }
    }
    if args.queues {
        for group in ["readq", "writeq"] {
            groups += &format!("  {group:^w$}", w = pair(DEPTH));
            names += &format!("  {:>DEPTH$} {:>DEPTH$}", "pend", "activ");
        }
    }
    format!("{}\n{}\n", groups.trim_end(), names)
}

/// The dashes under the heading, one run per column.
fn rule_line(name_width: usize, args: &IostatArgs) -> String {
    let dash = |n: usize| "-".repeat(n);
    let mut out = format!(
        "{}  {} {}  {} {}",
        dash(name_width),
        dash(OPS),
        dash(OPS),
        dash(BW),
        dash(BW)
    );
    if args.latency {
        for _ in 0..4 {
            out += &format!("  {} {}", dash(WAIT), dash(WAIT));
        }
    }
    if args.queues {
        for _ in 0..2 {
            out += &format!("  {} {}", dash(DEPTH), dash(DEPTH));
        }
    }
    out + "\n"
}

/// A heading line's columns (`logs`, `cache`): all `-`, as zpool prints them.
fn no_columns(args: &IostatArgs) -> String {
    let mut out = format!("  {:>OPS$} {:>OPS$}  {:>BW$} {:>BW$}", "-", "-", "-", "-");
    if args.latency {
        for _ in 0..4 {
            out += &format!("  {:>WAIT$} {:>WAIT$}", "-", "-");
        }
    }
    if args.queues {
        for _ in 0..2 {
            out += &format!("  {:>DEPTH$} {:>DEPTH$}", "-", "-");
        }
    }
    out
}

/// A row's columns, its counts divided by `seconds`.
fn columns(row: &Row, seconds: f64, args: &IostatArgs) -> String {
    let rate = |n: u64| (n as f64 / seconds).round() as u64;
    let mut out = format!(
        "  {:>OPS$} {:>OPS$}  {:>BW$} {:>BW$}",
        rate(row.ops[READ]),
        rate(row.ops[WRITE]),
        format_size(rate(row.bytes[READ])),
        format_size(rate(row.bytes[WRITE])),
    );
    if args.latency {
        let [read, write] = [row.waits(READ), row.waits(WRITE)];
        let queue = |q: &Option<Option<Duration>>| match q {
            Some(wait) => format_wait(*wait),
            None => "-".to_string(),
        };
        for (r, w) in [
            (format_wait(read.total), format_wait(write.total)),
            (format_wait(read.disk), format_wait(write.disk)),
            (queue(&read.queue), queue(&write.queue)),
            (format_wait(read.p99), format_wait(write.p99)),
        ] {
            out += &format!("  {r:>WAIT$} {w:>WAIT$}");
        }
    }
    if args.queues {
        for q in &row.queue {
            let (pend, activ) = match q {
                Some(q) => (q.pending.to_string(), q.active.to_string()),
                None => ("-".to_string(), "-".to_string()),
            };
            out += &format!("  {pend:>DEPTH$} {activ:>DEPTH$}");
        }
    }
    out
}

/// A wait time as `zpool iostat -l` prints one: a unit suffix, "-" for no operation.
fn format_wait(wait: Option<Duration>) -> String {
    let Some(wait) = wait else {
        return "-".to_string();
    };
    let ns = wait.as_nanos() as f64;
    let (value, unit) = if ns < 1e3 {
        (ns, "ns")
    } else if ns < 1e6 {
        (ns / 1e3, "us")
    } else if ns < 1e9 {
        (ns / 1e6, "ms")
    } else {
        (ns / 1e9, "s")
    };
    if value < 10.0 && unit != "ns" {
        format!("{value:.1}{unit}")
    } else {
        format!("{value:.0}{unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use larch_engine::LatencyHistogram;

    #[test]
    fn waits_print_with_a_unit_like_zpool_iostat() {
        let cases = [
            (None, "-"),
            (Some(Duration::from_nanos(450)), "450ns"),
            (Some(Duration::from_nanos(1_500)), "1.5us"),
            (Some(Duration::from_micros(345)), "345us"),
            (Some(Duration::from_micros(2_250)), "2.2ms"),
            (Some(Duration::from_millis(12)), "12ms"),
            (Some(Duration::from_secs(3)), "3.0s"),
        ];
        for (wait, text) in cases {
            assert_eq!(format_wait(wait), text, "{wait:?}");
        }
    }

    fn snapshot(times_us: &[u64]) -> LatencySnapshot {
        let h = LatencyHistogram::new();
        for &us in times_us {
            h.record(Duration::from_micros(us));
        }
        h.snapshot()
    }

    fn args(verbose: bool, latency: bool, queues: bool) -> IostatArgs {
        IostatArgs {
            interval: None,
            count: None,
            state_dir: PathBuf::from("unused"),
            verbose,
            latency,
            queues,
        }
    }

    /// A pool of one volume (reads through a queue, 100 µs waiting and 300 µs at the
    /// store each), a log device and a cache device.
    fn sample(reads: u64, uptime_ms: u64) -> Sample {
        let queue = Queue {
            pending: 2,
            active: 4,
            wait: snapshot(&vec![100; reads as usize]),
            total: snapshot(&vec![400; reads as usize]),
        };
        Sample {
            pool: "tank".into(),
            uptime_ms,
            rows: vec![
                Row {
                    name: "vol0".into(),
                    place: Place::Backing,
                    ops: [reads, 10],
                    bytes: [reads * 16384, 10 * 65536],
                    device: [snapshot(&vec![300; reads as usize]), snapshot(&[900; 10])],
                    queue: [Some(queue), None],
                },
                Row {
                    name: "log0.img".into(),
                    place: Place::Log,
                    ops: [0, 20],
                    bytes: [0, 20 * 4096],
                    device: [LatencySnapshot::default(), snapshot(&[50; 20])],
                    queue: [None, None],
                },
                Row {
                    name: "cache0.img".into(),
                    place: Place::Cache,
                    ops: [5, 1],
                    bytes: [5 * 16384, 1 << 20],
                    device: [snapshot(&[80; 5]), snapshot(&[2000])],
                    queue: [Some(Queue::default()), None],
                },
            ],
        }
    }

    /// The value columns of the line that starts with `name`.
    fn line<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
        text.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no line {name:?} in\n{text}"))
            .split_whitespace()
            .skip(1)
            .collect()
    }

    #[test]
    fn the_first_report_averages_over_the_time_since_the_pool_opened() {
        let now = sample(200, 10_000);
        let text = report(&now, None, &args(false, false, false));
        // One line, the pool's: its backing store and its log device, per second.
        assert_eq!(line(&text, "tank"), ["20", "3", "320.0K", "72.0K"]);
        assert!(!text.contains("vol0") && !text.contains("cache"), "{text}");
        // Then an interval: only what happened in it.
        let later = sample(260, 12_000);
        let text = report(&later, Some(&now), &args(false, false, false));
        assert_eq!(line(&text, "tank"), ["30", "0", "480.0K", "0"]);
    }

    #[test]
    fn verbose_is_the_tree_of_zpool_iostat_v() {
        let text = report(&sample(200, 10_000), None, &args(true, false, false));
        let names: Vec<&str> = text
            .lines()
            .skip(3)
            .filter(|l| !l.starts_with('-') && !l.is_empty())
            .map(|l| l[..20].trim_end())
            .collect();
        assert_eq!(
            names,
            [
                "tank",
                "  vol0",
                "logs",
                "  log0.img",
                "cache",
                "  cache0.img"
            ]
        );
        assert_eq!(line(&text, "logs"), ["-", "-", "-", "-"]);
        assert_eq!(line(&text, "  cache0.img"), ["1", "0", "8.0K", "102.4K"]);
        assert!(text.starts_with(&format!("{:20}  ", "")), "{text}");
    }

    #[test]
    fn latency_splits_total_into_disk_and_queue_where_there_is_a_queue() {
        let text = report(&sample(200, 10_000), None, &args(true, true, false));
        let heading = text.lines().next().unwrap();
        for group in ["total_wait", "disk_wait", "queue_wait", "p99_wait"] {
            assert!(heading.contains(group), "{heading}");
        }
        // Reads of vol0: 400 µs in all, 100 µs queued, so 300 µs at the store; writes
        // have no queue: total and disk are the store's time, queue is "-".
        let vol0 = line(&text, "  vol0");
        assert_eq!(
            &vol0[4..10],
            ["400us", "900us", "300us", "900us", "100us", "-"]
        );
        // The percentile is of the total, within its bucket (a fifth of an octave).
        for (p99, us) in [(vol0[10], 400.0), (vol0[11], 900.0)] {
            let got: f64 = match p99.strip_suffix("ms") {
                Some(ms) => ms.parse::<f64>().unwrap() * 1000.0,
                None => p99.trim_end_matches("us").parse().unwrap(),
            };
            assert!((us..=us * 1.2).contains(&got), "{p99} for {us} µs");
        }
        // A cache device queue with nothing through it yet: its device times stand.
        let cache = line(&text, "  cache0.img");
        assert_eq!(&cache[4..8], ["80us", "2.0ms", "80us", "2.0ms"]);
        assert_eq!(&cache[8..10], ["-", "-"]);
        // The log device reads nothing: "-" for its read times.
        let log = line(&text, "  log0.img");
        assert_eq!(log[4], "-");
    }

    #[test]
    fn queues_show_pending_and_active_or_a_dash_where_larch_has_none() {
        let text = report(&sample(200, 10_000), None, &args(true, false, true));
        assert!(text.lines().next().unwrap().contains("readq"), "{text}");
        assert_eq!(&line(&text, "  vol0")[4..], ["2", "4", "-", "-"]);
        assert_eq!(&line(&text, "  log0.img")[4..], ["-", "-", "-", "-"]);
        assert_eq!(&line(&text, "  cache0.img")[4..], ["0", "0", "-", "-"]);
        // The pool adds up its backing stores' and log device's queues.
        assert_eq!(&line(&text, "tank")[4..], ["2", "4", "-", "-"]);
    }
}

//! `larch iostat`: operations and bandwidth per backing store and cache device, per
//! interval, in the layout of `zpool iostat -v`; with `-l`, wait times as well. The figures
//! are differences between two reads of the daemon's status file.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;
use larch_daemon::status::StatusReport;
use larch_engine::LatencySnapshot;
use larch_engine::units::format_size;

use crate::status;

/// Arguments of `larch iostat`.
#[derive(clap::Args)]
pub struct IostatArgs {
    /// Seconds between reports.
    #[arg(default_value_t = 1)]
    pub interval: u64,
    /// Reports to print (default: until interrupted).
    pub count: Option<u64>,
    /// The pool's state directory.
    #[arg(long, default_value = "larch-data")]
    pub state_dir: PathBuf,
    /// Add latency columns, as `zpool iostat -l`: the mean (total_wait) and the 99th
    /// percentile (p99_wait) of read and write times in the interval.
    #[arg(short = 'l', long)]
    pub latency: bool,
}

/// What to check when there is no status file.
const HINT: &str = "is `larch serve` running?";

/// The I/O of one backing store or cache device, as the status report has it.
struct IoRow {
    name: String,
    /// Reads, writes, read bytes, write bytes.
    counters: [u64; 4],
    read_latency: LatencySnapshot,
    write_latency: LatencySnapshot,
}

/// Every volume's backing store and every cache device, in status order.
fn io_rows(status: &StatusReport) -> Vec<IoRow> {
    let mut rows = Vec::new();
    for v in &status.pool.volumes {
        rows.push(IoRow {
            name: format!("  {}", v.name),
            counters: [
                v.backing_reads,
                v.backing_writes,
                v.backing_read_bytes,
                v.backing_write_bytes,
            ],
            read_latency: v.backing_read_latency.snapshot(),
            write_latency: v.backing_write_latency.snapshot(),
        });
    }
    for d in &status.pool.cache_devices {
        let name = Path::new(&d.path)
            .file_name()
            .map(|f| f.to_string_lossy().to_string())
            .unwrap_or_else(|| d.path.clone());
        rows.push(IoRow {
            name: format!("  {name} (cache)"),
            counters: [d.reads, d.writes, d.read_bytes, d.write_bytes],
            read_latency: d.read_latency.snapshot(),
            write_latency: d.write_latency.snapshot(),
        });
    }
    rows
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

/// `larch iostat`.
pub fn run(args: IostatArgs) -> anyhow::Result<ExitCode> {
    if args.interval == 0 {
        bail!("the interval must be at least 1 second");
    }
    let mut previous = io_rows(&status::read_running(&args.state_dir, HINT)?);
    let mut printed = 0u64;
    while args.count.is_none_or(|c| printed < c) {
        std::thread::sleep(Duration::from_secs(args.interval));
        let status = status::read_running(&args.state_dir, HINT)?;
        let rows = io_rows(&status);
        print!("{}", report(&status.pool.pool, &rows, &previous, &args));
        previous = rows;
        printed += 1;
    }
    Ok(ExitCode::SUCCESS)
}

/// One report: the heading and a line per row, from `previous` to `rows`.
fn report(pool: &str, rows: &[IoRow], previous: &[IoRow], args: &IostatArgs) -> String {
    let mut groups = format!("{:<28} {:>17} {:>19}", "", "operations", "bandwidth");
    let mut header = format!(
        "{:<28} {:>8} {:>8} {:>9} {:>9}",
        format!("pool {pool}"),
        "read",
        "write",
        "read",
        "write"
    );
    if args.latency {
        groups += &format!(" {:>15} {:>15}", "total_wait", "p99_wait");
        header += &format!(" {:>7} {:>7} {:>7} {:>7}", "read", "write", "read", "write");
    }
    let mut out = format!("{groups}\n{header}\n");
    for row in rows {
        let before = previous.iter().find(|p| p.name == row.name);
        let rate = |i: usize| {
            let then = before.map_or(0, |b| b.counters[i]);
            row.counters[i].saturating_sub(then) / args.interval
        };
        out += &format!(
            "{:<28} {:>8} {:>8} {:>9} {:>9}",
            row.name,
            rate(0),
            rate(1),
            format_size(rate(2)),
            format_size(rate(3))
        );
        if args.latency {
            let since = |now: &LatencySnapshot, then: Option<&LatencySnapshot>| {
                then.map_or(*now, |then| now.since(then))
            };
            let read = since(&row.read_latency, before.map(|b| &b.read_latency));
            let write = since(&row.write_latency, before.map(|b| &b.write_latency));
            out += &format!(
                " {:>7} {:>7} {:>7} {:>7}",
                format_wait(read.mean()),
                format_wait(write.mean()),
                format_wait(read.percentile(0.99)),
                format_wait(write.percentile(0.99)),
            );
        }
        out.push('\n');
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
}

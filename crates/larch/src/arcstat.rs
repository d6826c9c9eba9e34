//! `larch arcstat`: OpenZFS arcstat-style lines (reads, hit ratios, ARC and L2 sizes, dirty
//! data, TXG syncs, intent-log commits) from the daemon's status file, one per interval.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;
use larch_engine::report::{Arcstats, MissingStat};
use larch_engine::units::format_size;

use crate::status;

/// Arguments of `larch arcstat`.
#[derive(clap::Args)]
pub struct ArcstatArgs {
    /// Seconds between lines.
    #[arg(default_value_t = 1)]
    pub interval: u64,
    /// Lines to print (default: until interrupted).
    pub count: Option<u64>,
    /// The pool's state directory.
    #[arg(long, default_value = "larch-data")]
    pub state_dir: PathBuf,
}

/// What to check when there is no status file.
const HINT: &str = "is `larch serve` running?";

/// `larch arcstat`: a line per interval, the column names every 20 lines.
pub fn run(args: ArcstatArgs) -> anyhow::Result<ExitCode> {
    if args.interval == 0 {
        bail!("the interval must be at least 1 second");
    }
    let mut previous = status::read_running(&args.state_dir, HINT)?.pool.arcstats;
    let mut printed = 0u64;
    loop {
        if args.count.is_some_and(|c| printed >= c) {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(Duration::from_secs(args.interval));
        let now = status::read_running(&args.state_dir, HINT)?.pool.arcstats;
        if printed.is_multiple_of(20) {
            println!("{}", header());
        }
        let secs = larch_daemon::unix_time_secs();
        println!("{}", line(&now, &previous, args.interval, secs)?);
        printed += 1;
        previous = now;
    }
}

/// The column names.
fn header() -> String {
    format!(
        "{:>8} {:>6} {:>4} {:>5} {:>7} {:>7} {:>6} {:>6} {:>7} {:>7} {:>7} {:>4} {:>5}",
        "time",
        "read",
        "hit%",
        "miss%",
        "arcsz",
        "c",
        "l2read",
        "l2hit%",
        "l2size",
        "l2wbyt",
        "dirty",
        "txg",
        "zilc"
    )
}

/// The line of an interval of `interval` seconds from `previous` to `now`, which ended at
/// `secs` (seconds since the epoch).
fn line(
    now: &Arcstats,
    previous: &Arcstats,
    interval: u64,
    secs: u64,
) -> Result<String, MissingStat> {
    let d = |name: &str| now.delta(previous, name);
    let pct = |a: u64, b: u64| (a * 100).checked_div(a + b).unwrap_or(0);
    let (hits, misses) = (d("hits")?, d("misses")?);
    let reads = hits + misses;
    Ok(format!(
        "{:02}:{:02}:{:02} {:>6} {:>4} {:>5} {:>7} {:>7} {:>6} {:>6} {:>7} {:>7} {:>7} {:>4} {:>5}",
        (secs / 3600) % 24,
        (secs / 60) % 60,
        secs % 60,
        reads / interval,
        pct(hits, misses),
        if reads == 0 {
            0
        } else {
            100 - pct(hits, misses)
        },
        format_size(now.get("size")?),
        format_size(now.get("c")?),
        (d("l2_hits")? + d("l2_misses")?) / interval,
        pct(d("l2_hits")?, d("l2_misses")?),
        format_size(now.get("l2_size")?),
        format_size(d("l2_write_bytes")? / interval),
        format_size(now.get("dirty_bytes")?),
        d("txg_syncs")? / interval,
        d("zil_commit_count")? / interval,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_arcstat_the_line_reads_is_in_a_pool_report() {
        let now = crate::testing::demo_report("arcstat-names").arcstats;
        let mut before = now.clone();
        before.0.insert("hits".to_string(), 0);
        before.0.insert("misses".to_string(), 0);
        let mut now = now;
        now.0.insert("hits".to_string(), 30);
        now.0.insert("misses".to_string(), 10);
        let text = line(&now, &before, 2, 3600 * 25 + 61).expect("every stat is there");
        let fields: Vec<&str> = text.split_whitespace().collect();
        assert_eq!(fields.len(), header().split_whitespace().count(), "{text}");
        assert_eq!(&fields[..4], ["01:01:01", "20", "75", "25"], "{text}");
        let mut without = now.clone();
        without.0.remove("zil_commit_count");
        assert_eq!(
            line(&without, &before, 1, 0).unwrap_err(),
            MissingStat("zil_commit_count".to_string())
        );
    }
}

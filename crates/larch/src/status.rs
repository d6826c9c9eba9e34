//! `larch status`: what a running (or the last) `larch serve` of a pool reports, from its
//! status file. Also how `arcstat` and `iostat` read that file: through the daemon's own
//! type, `larch_daemon::status::StatusReport`, so that a file of another version is
//! refused rather than shown as zeros.

use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use larch_daemon::status::{STATUS_FILE, StatusReport};
use larch_engine::DeviceState;
use larch_engine::report::MissingStat;
use larch_engine::units::format_size;

/// Arguments of `larch status`.
#[derive(clap::Args)]
pub struct StatusArgs {
    /// The pool's state directory.
    #[arg(long, default_value = "larch-data")]
    pub state_dir: PathBuf,
    /// Print the status as JSON (all arcstats included).
    #[arg(long)]
    pub json: bool,
}

/// The status file of `state_dir`; `hint` says, when there is none, what to check.
pub fn read(state_dir: &Path, hint: &str) -> anyhow::Result<StatusReport> {
    let path = state_dir.join(STATUS_FILE);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("{}: no status ({hint})", path.display()))?;
    StatusReport::from_json(&text).with_context(|| format!("{}", path.display()))
}

/// How old a running daemon's status may be before it counts as not running: it writes
/// one every second.
const FRESH_SECS: u64 = 5;

/// Whether `status` comes from a daemon that runs at `now` (seconds since the epoch): it
/// said it runs, and said so within the last [`FRESH_SECS`].
fn is_running(status: &StatusReport, now: u64) -> bool {
    status.running && now.saturating_sub(status.time) < FRESH_SECS
}

/// The status of the daemon that serves the pool of `state_dir` now, for the commands
/// that follow it over time (`arcstat`, `iostat`): an error when none does, instead of
/// lines of zeros from an old status.
pub fn read_running(state_dir: &Path, hint: &str) -> anyhow::Result<StatusReport> {
    let status = read(state_dir, hint)?;
    let now = larch_daemon::unix_time_secs();
    if !is_running(&status, now) {
        anyhow::bail!(
            "larch serve for {} is not running (last status {} s ago)",
            state_dir.display(),
            now.saturating_sub(status.time)
        );
    }
    Ok(status)
}

/// `larch status`.
pub fn run(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let hint = format!(
        "has `larch serve --state-dir {}` run?",
        args.state_dir.display()
    );
    let status = read(&args.state_dir, &hint)?;
    if args.json {
        // Through a `Value`, whose objects keep their fields sorted by name.
        let value = serde_json::to_value(&status)?;
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", render(&status, larch_daemon::unix_time_secs())?);
    Ok(ExitCode::SUCCESS)
}

/// A cache device's state as the status file spells it.
fn state_name(state: DeviceState) -> &'static str {
    match state {
        DeviceState::Rebuilding => "rebuilding",
        DeviceState::Online => "online",
        DeviceState::Faulted => "faulted",
        DeviceState::Removed => "removed",
    }
}

/// The text of `larch status` at the time `now` (seconds since the epoch).
fn render(status: &StatusReport, now: u64) -> Result<String, MissingStat> {
    let report = &status.pool;
    let mut out = String::new();
    let age = now.saturating_sub(status.time);
    let state = if is_running(status, now) {
        format!("serving (pid {})", status.pid)
    } else {
        format!("not running (status from {age} s ago)")
    };
    // Writing to a String cannot fail.
    let _ = writeln!(out, "pool {}: {state}", report.pool);
    for vol in &report.volumes {
        let _ = writeln!(
            out,
            "  volume {}: {} ({}K blocks), backing {}: {} reads, {} writes, {} errors",
            vol.name,
            format_size(vol.size_bytes),
            vol.volblocksize / 1024,
            vol.backing,
            vol.backing_reads,
            vol.backing_writes,
            vol.backing_errors,
        );
        if vol.sync == larch_engine::SyncMode::Disabled {
            let _ = writeln!(
                out,
                "    sync=disabled: FUA and FLUSH are acknowledged before the data is durable; \
                 a crash loses the last seconds of acknowledged writes"
            );
        }
        if let Some(mode) = &vol.backing_write_mode
            && mode != "O_DIRECT"
        {
            let _ = writeln!(
                out,
                "    backing writes: {mode}: the page cache copies every TXG"
            );
        }
        if let Some(why) = &vol.write_failure {
            let _ = writeln!(out, "    WRITES FAIL: {why}");
            let _ = writeln!(
                out,
                "    {} blocks lost their acknowledged writes and read as errors; \
                 `larch volume clear {}` (pool stopped) accepts the loss",
                vol.lost_blocks, vol.name
            );
        }
        if let Some(o) = &vol.object {
            let amplification = if o.committed_bytes > 0 {
                format!("{:.2}", o.put_bytes as f64 / o.committed_bytes as f64)
            } else {
                "-".into()
            };
            let _ = writeln!(
                out,
                "    object store: commit {} (token {}), {} commits, {} GETs ({}), {} PUTs ({}), \
                 {} deletes, write amplification {amplification}, {} errors, map {}",
                o.commit_seq,
                o.token,
                o.commits,
                o.gets,
                format_size(o.get_bytes),
                o.puts,
                format_size(o.put_bytes),
                o.deletes,
                o.errors,
                format_size(o.map_bytes),
            );
            if o.layout == "segments" {
                let live = if o.stored_bytes > 0 {
                    format!(
                        "{:.0}%",
                        o.live_bytes as f64 * 100.0 / o.stored_bytes as f64
                    )
                } else {
                    "-".into()
                };
                let _ = writeln!(
                    out,
                    "    segments: {} holding {} ({live} live), {} repacked ({} moved), {} freed; \
                     {} map pages read ({} more from cache devices)",
                    o.segments,
                    format_size(o.stored_bytes),
                    o.repacked_segments,
                    format_size(o.repack_bytes),
                    o.segments_freed,
                    o.map_page_gets,
                    o.map_page_l2_reads,
                );
            }
            if o.delete_errors > 0 {
                let _ = writeln!(
                    out,
                    "    {} deletes failed: those objects stay on the store until the \
                     volume's next open collects them",
                    o.delete_errors
                );
            }
            if let Some(why) = &o.unusable {
                let _ = writeln!(out, "    NOT SERVED: {why}");
            }
        }
    }
    if let Some(log) = &report.log_device {
        let mut line = format!(
            "  log {}: {}, {} commits, {} records, {} logged",
            log.path,
            log.state,
            log.commits,
            log.records,
            format_size(log.bytes),
        );
        if let Some(fault) = &log.fault {
            line += &format!(" ({fault}; sync writes go through TXG syncs)");
        }
        let _ = writeln!(out, "{line}");
        if let Some(mode) = &log.io_mode
            && mode != "O_DIRECT"
        {
            let _ = writeln!(
                out,
                "    log device I/O: {mode}: commits are copied into the page cache before each flush"
            );
        }
    }
    // A removed device stays in the engine's list (its index is never reused): it is not
    // the pool's any more, and removing and adding a device again listed it each time.
    for d in (report.cache_devices.iter()).filter(|d| d.state != DeviceState::Removed) {
        let mut line = format!(
            "  cache {}: {} {}",
            d.path,
            format_size(d.size_bytes),
            state_name(d.state)
        );
        if d.state == DeviceState::Rebuilding {
            line += &format!(
                ", {:.1}% of the log read, {} entries restored so far",
                d.rebuild_permille as f64 / 10.0,
                d.rebuild_entries
            );
        }
        if let Some(fault) = &d.fault {
            line += &format!(" ({fault})");
        }
        line += &format!(", reads through {}", report.l2_read_path);
        let _ = writeln!(out, "{line}");
        if let Some(mode) = &d.io_mode
            && mode != "O_DIRECT"
        {
            let _ = writeln!(
                out,
                "    cache device I/O: {mode}: the page cache keeps copies of what it reads and writes"
            );
        }
    }
    for why in &report.unused_cache_devices {
        let _ = writeln!(out, "  cache device not used: {why}");
    }
    let a = &report.arcstats;
    let ratio = |h: u64, m: u64| {
        if h + m == 0 {
            0.0
        } else {
            h as f64 * 100.0 / (h + m) as f64
        }
    };
    let _ = writeln!(
        out,
        "  ARC: size {} of c {}, hits {} misses {} ({:.1}% hit), mru {} mfu {}",
        format_size(a.get("size")?),
        format_size(a.get("c")?),
        a.get("hits")?,
        a.get("misses")?,
        ratio(a.get("hits")?, a.get("misses")?),
        format_size(a.get("mru_size")?),
        format_size(a.get("mfu_size")?),
    );
    let _ = writeln!(
        out,
        "  L2: size {} in {} blocks, hits {} misses {} ({:.1}% hit), feeds {}, written {}, wasted feed {}, cksum_bad {} io_error {} evicted_in_flight {}",
        format_size(a.get("l2_size")?),
        a.get("l2_blocks")?,
        a.get("l2_hits")?,
        a.get("l2_misses")?,
        ratio(a.get("l2_hits")?, a.get("l2_misses")?),
        a.get("l2_feeds")?,
        format_size(a.get("l2_write_bytes")?),
        format_size(a.get("l2_wasted_feed_bytes")?),
        a.get("l2_cksum_bad")?,
        a.get("l2_io_error")?,
        a.get("l2_evicted_in_flight")?,
    );
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use larch_daemon::status::STATUS_FORMAT;

    fn status(name: &str) -> StatusReport {
        StatusReport {
            format: STATUS_FORMAT,
            pid: 4242,
            time: 1_000,
            running: true,
            http: None,
            pool: crate::testing::demo_report(name),
        }
    }

    #[test]
    fn every_arcstat_the_status_reads_is_in_a_pool_report() {
        let status = status("status-names");
        let text = render(&status, 1_001).expect("every stat is in the report");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "pool demo: serving (pid 4242)");
        assert!(
            lines[1].starts_with("  volume vol0: 4.0M (16K blocks), backing "),
            "{text}"
        );
        assert!(lines[2].starts_with("  cache "), "{text}");
        assert!(lines[3].starts_with("  ARC: size "), "{text}");
        assert!(lines[4].starts_with("  L2: size "), "{text}");
        assert_eq!(lines.len(), 5, "{text}");
        let old = render(&status, 1_010).unwrap();
        assert!(old.starts_with("pool demo: not running (status from 10 s ago)\n"));
    }

    /// A removed device is not listed (removed and added again, the same file was listed
    /// once per removal), and a device pool.json lists but the pool does not use is, with
    /// why (it showed only on the daemon's stderr: a tester's findings).
    #[test]
    fn removed_devices_are_not_listed_and_unused_ones_are() {
        let mut status = status("status-unused");
        let mut removed = status.pool.cache_devices[0].clone();
        removed.state = DeviceState::Removed;
        status.pool.cache_devices.insert(0, removed);
        status.pool.unused_cache_devices = vec!["/x/cache1.img: not a larch cache device".into()];
        let text = render(&status, 1_001).unwrap();
        let cache_lines = text.lines().filter(|l| l.starts_with("  cache /")).count();
        assert_eq!(cache_lines, 1, "{text}");
        assert!(!text.contains("removed"), "{text}");
        assert!(
            text.contains("  cache device not used: /x/cache1.img: not a larch cache device\n"),
            "{text}"
        );
    }

    #[test]
    fn devices_that_went_buffered_say_so() {
        let mut status = status("status-io-mode");
        let why = "buffered (the file system refused an O_DIRECT read of 4096 bytes at 0: \
                   Invalid argument (os error 22))";
        status.pool.cache_devices[0].io_mode = Some(why.to_string());
        status.pool.log_device = Some(larch_engine::report::LogDeviceReport {
            path: "/dev/log0".to_string(),
            state: "online".to_string(),
            io_mode: Some("O_DIRECT".to_string()),
            ..Default::default()
        });
        let text = render(&status, 1_001).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[2].starts_with("  log /dev/log0: online"), "{text}");
        // A log device with O_DIRECT gets no line of its own.
        assert!(lines[3].starts_with("  cache "), "{text}");
        assert_eq!(
            lines[4],
            format!(
                "    cache device I/O: {why}: the page cache keeps copies of what it reads and writes"
            ),
            "{text}"
        );
        status.pool.log_device.as_mut().unwrap().io_mode =
            Some("buffered (O_DIRECT not tried)".to_string());
        let text = render(&status, 1_001).unwrap();
        assert!(
            text.contains(
                "\n    log device I/O: buffered (O_DIRECT not tried): commits are copied into \
                 the page cache before each flush\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_missing_arcstat_is_an_error_that_names_it() {
        let mut status = status("status-missing");
        status.pool.arcstats.0.remove("l2_feeds");
        let err = render(&status, 1_001).unwrap_err();
        assert_eq!(err, MissingStat("l2_feeds".to_string()));
        assert!(err.to_string().contains("\"l2_feeds\""), "{err}");
    }

    #[test]
    fn device_states_are_spelled_as_in_the_status_file() {
        for state in [
            DeviceState::Rebuilding,
            DeviceState::Online,
            DeviceState::Faulted,
            DeviceState::Removed,
        ] {
            assert_eq!(
                serde_json::to_value(state).unwrap(),
                state_name(state),
                "{state:?}"
            );
        }
    }

    /// `arcstat` and `iostat` stop with an error when the daemon is not running, whether
    /// it stopped cleanly or its last status is old (a reviewer's finding: they printed
    /// rows of zeros from the last status file for ever).
    #[test]
    fn arcstat_and_iostat_stop_when_the_daemon_is_not_running() {
        let dir =
            std::env::temp_dir().join(format!("larch-cli-{}-stale-status", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let now = larch_daemon::unix_time_secs();
        for (running, time) in [(true, now - 60), (false, now)] {
            let mut report = status("stale");
            report.running = running;
            report.time = time;
            report.write(&dir).unwrap();
            let arcstat = crate::arcstat::run(crate::arcstat::ArcstatArgs {
                interval: 1,
                count: Some(1),
                state_dir: dir.clone(),
            });
            let iostat = crate::iostat::run(crate::iostat::IostatArgs {
                interval: Some(1),
                count: Some(1),
                state_dir: dir.clone(),
                verbose: false,
                latency: false,
                queues: false,
            });
            for outcome in [arcstat, iostat] {
                let err = outcome.expect_err("ran on a stopped daemon's status");
                let text = err.to_string();
                assert!(
                    text.contains(&format!("larch serve for {} is not running", dir.display()))
                        && text.contains("(last status "),
                    "{text}"
                );
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

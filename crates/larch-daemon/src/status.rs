//! The status report: what the daemon writes to `status.json` every second and answers on
//! `/status`, and what `larch status`, `arcstat` and `iostat` read.
//!
//! Writer and reader use the same serde type, [`StatusReport`], so a field renamed on one
//! side is a compile error instead of a value the CLI silently reads as zero. The file
//! carries a [`STATUS_FORMAT`] number; a reader refuses a file of another format (or of a
//! larch from before the number) with an error that says so.
//!
//! The JSON shape, the pool's report (`larch_engine::PoolReport`) flattened beside `pid`,
//! `time`, `running` and `http`, is also read by the integration tests of `larch` and the
//! scripts of `bench/`; `tests::the_json_shape_is_what_scripts_read` pins its field names.

use std::io;
use std::path::Path;

use larch_engine::{Pool, PoolReport};
use serde::{Deserialize, Serialize};

/// Name of the status file the daemon keeps in the state directory.
pub const STATUS_FILE: &str = "status.json";

/// The format of [`StatusReport`] this larch writes and reads. Raise it when a field
/// changes meaning or goes away (adding a field needs no new number: readers ignore fields
/// they do not know).
pub const STATUS_FORMAT: u32 = 2;

/// What a running daemon reports: its pool's report and who wrote it when.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatusReport {
    /// [`STATUS_FORMAT`] of the larch that wrote it.
    pub format: u32,
    /// The daemon's process id.
    pub pid: u32,
    /// When it was written, in seconds since the epoch.
    pub time: u64,
    /// `false` in the last report, written when the daemon stopped cleanly.
    pub running: bool,
    /// The daemon's HTTP address, if it serves HTTP.
    pub http: Option<String>,
    /// The pool's report, whose fields sit at the top level of the JSON.
    #[serde(flatten)]
    pub pool: PoolReport,
}

/// Why a text is not a status report this larch can read.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// Not JSON, or not the shape of a [`StatusReport`].
    #[error(transparent)]
    Invalid(#[from] serde_json::Error),
    /// A report of another format: written by another version of larch.
    #[error(
        "written by another version of larch ({}; this larch reads status format {STATUS_FORMAT})",
        format_name(.found)
    )]
    OtherFormat {
        /// The format the report says it has (`None`: from before format numbers).
        found: Option<u32>,
    },
}

/// A format number as [`StatusError::OtherFormat`] names it.
fn format_name(found: &Option<u32>) -> String {
    match found {
        Some(n) => format!("status format {n}"),
        None => "no status format".to_string(),
    }
}

impl StatusReport {
    /// The report of `pool` now, from this process.
    pub fn of(pool: &Pool, running: bool, http: Option<String>) -> StatusReport {
        StatusReport {
            format: STATUS_FORMAT,
            pid: std::process::id(),
            time: crate::unix_time_secs(),
            running,
            http,
            pool: pool.report(),
        }
    }

    /// The report as compact JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a status report always serializes")
    }

    /// Writes the report to [`STATUS_FILE`] in `state_dir`, atomically and durably.
    pub fn write(&self, state_dir: &Path) -> io::Result<()> {
        larch_engine::write_state_file(state_dir, STATUS_FILE, self.to_json().as_bytes())
    }

    /// Reads a report from its JSON, refusing one of another [`STATUS_FORMAT`].
    pub fn from_json(text: &str) -> Result<StatusReport, StatusError> {
        /// Only the format, so that a report of another format is refused for that and
        /// not for a field it lacks.
        #[derive(Deserialize)]
        struct Format {
            format: Option<u32>,
        }
        let Format { format } = serde_json::from_str(text)?;
        if format != Some(STATUS_FORMAT) {
            return Err(StatusError::OtherFormat { found: format });
        }
        Ok(serde_json::from_str(text)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::DemoPool;
    use larch_engine::report::{LatencyReport, LogDeviceReport, RebuildReport};

    /// The sorted field names of a JSON object.
    fn keys(value: &serde_json::Value) -> Vec<&str> {
        let mut keys: Vec<&str> = value
            .as_object()
            .unwrap_or_else(|| panic!("not an object: {value}"))
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        keys
    }

    fn sorted<'a>(names: &[&'a str]) -> Vec<&'a str> {
        let mut names = names.to_vec();
        names.sort_unstable();
        names
    }

    #[test]
    fn the_json_shape_is_what_scripts_read() {
        let demo = DemoPool::new("status-shape");
        let status = StatusReport::of(&demo.pool, true, Some("127.0.0.1:1".to_string()));
        let value: serde_json::Value = serde_json::from_str(&status.to_json()).unwrap();
        assert_eq!(
            keys(&value),
            sorted(&[
                "format",
                "pid",
                "time",
                "running",
                "pool",
                "pool_guid",
                "uptime_ms",
                "volumes",
                "cache_devices",
                "unused_cache_devices",
                "l2_read_path",
                "log_device",
                "tunables",
                "http",
                "arcstats",
            ])
        );
        assert_eq!(value["pool"], "demo");
        assert_eq!(value["http"], "127.0.0.1:1");
        assert_eq!(value["running"], true);
        assert!(value["arcstats"]["hits"].is_u64(), "{}", value["arcstats"]);
        assert!(value["tunables"]["l2arc_write_max"].is_u64());
        let latency = ["count", "sum_ns", "mean_us", "p50_us", "p99_us", "buckets"];
        let volume = &value["volumes"][0];
        assert_eq!(
            keys(volume),
            sorted(&[
                "name",
                "size_bytes",
                "volblocksize",
                "readonly",
                "sync",
                "primarycache",
                "secondarycache",
                "logbias",
                "write_failure",
                "lost_blocks",
                "backing",
                "backing_write_mode",
                "backing_reads",
                "backing_read_bytes",
                "backing_writes",
                "backing_write_bytes",
                "backing_flushes",
                "backing_errors",
                "backing_zeroes",
                "backing_zeroed_bytes",
                "backing_zeroes_written_bytes",
                "backing_read_latency",
                "backing_write_latency",
                "backing_flush_latency",
                "backing_read_queue",
                "backing_write_queue",
                "read_bytes",
                "write_bytes",
                "read_arc_latency",
                "read_l2_latency",
                "read_backing_latency",
                "write_latency",
            ])
        );
        assert_eq!(volume["sync"], "standard");
        assert_eq!(volume["primarycache"], "all");
        assert_eq!(volume["secondarycache"], "all");
        assert_eq!(volume["logbias"], "latency");
        assert_eq!(keys(&volume["backing_read_latency"]), sorted(&latency));
        let device = &value["cache_devices"][0];
        assert_eq!(
            keys(device),
            sorted(&[
                "path",
                "guid",
                "size_bytes",
                "blocks",
                "state",
                "fault",
                "io_mode",
                "rebuild_entries",
                "rebuild_permille",
                "reads",
                "read_bytes",
                "read_errors",
                "writes",
                "write_bytes",
                "read_latency",
                "write_latency",
                "read_queue",
                "rebuild",
            ])
        );
        let queue = ["pending", "active", "wait", "total"];
        assert_eq!(keys(&device["read_queue"]), sorted(&queue));
        assert_eq!(keys(&volume["backing_write_queue"]), sorted(&queue));
        assert_eq!(keys(&device["read_queue"]["wait"]), sorted(&latency));
        assert!(value["uptime_ms"].is_u64());
        assert!(
            ["rebuilding", "online"].contains(&device["state"].as_str().unwrap()),
            "{device}"
        );
        assert_eq!(keys(&device["read_latency"]), sorted(&latency));
        // A demo pool has no log device and its new cache device no finished rebuild:
        // their parts are checked on their own.
        assert!(value["log_device"].is_null());
        let rebuild = serde_json::to_value(RebuildReport::default()).unwrap();
        assert_eq!(
            keys(&rebuild),
            sorted(&[
                "success",
                "bufs",
                "log_blocks",
                "io_errors",
                "cksum_lb_errors"
            ])
        );
        // A log device on a file says how it is written (a device that is not a file,
        // as in the default report, has no io_mode at all).
        let log = serde_json::to_value(LogDeviceReport {
            io_mode: Some("O_DIRECT".to_string()),
            ..LogDeviceReport::default()
        })
        .unwrap();
        assert_eq!(
            keys(&log),
            sorted(&[
                "path",
                "guid",
                "state",
                "fault",
                "io_mode",
                "commits",
                "blocks_written",
                "records",
                "bytes",
                "commit_latency",
            ])
        );
        let no_mode = serde_json::to_value(LogDeviceReport::default()).unwrap();
        assert!(no_mode.get("io_mode").is_none(), "{no_mode}");
        let latency_report = serde_json::to_value(LatencyReport::default()).unwrap();
        assert!(latency_report["mean_us"].is_null(), "{latency_report}");
    }

    #[test]
    fn a_report_reads_back_as_written() {
        let demo = DemoPool::new("status-roundtrip");
        let status = StatusReport::of(&demo.pool, false, None);
        let read = StatusReport::from_json(&status.to_json()).unwrap();
        assert_eq!(read, status);
        demo.pool.close().unwrap();
        status.write(&demo.dir).unwrap();
        let text = std::fs::read_to_string(demo.dir.join(STATUS_FILE)).unwrap();
        assert_eq!(StatusReport::from_json(&text).unwrap(), status);
    }

    #[test]
    fn reports_of_another_format_are_refused_by_their_number() {
        let demo = DemoPool::new("status-format");
        let mut value =
            serde_json::to_value(StatusReport::of(&demo.pool, true, None)).expect("a value");
        value["format"] = serde_json::json!(STATUS_FORMAT + 1);
        let err = StatusReport::from_json(&value.to_string()).unwrap_err();
        assert!(
            matches!(err, StatusError::OtherFormat { found: Some(n) } if n == STATUS_FORMAT + 1),
            "{err}"
        );
        assert!(
            err.to_string().contains("another version of larch"),
            "{err}"
        );
        // A file from before format numbers, even with every other field.
        value.as_object_mut().unwrap().remove("format");
        let err = StatusReport::from_json(&value.to_string()).unwrap_err();
        assert!(
            matches!(err, StatusError::OtherFormat { found: None }),
            "{err}"
        );
        assert!(err.to_string().contains("no status format"), "{err}");
        let err = StatusReport::from_json(&format!("{{\"format\": {STATUS_FORMAT}}}")).unwrap_err();
        assert!(matches!(err, StatusError::Invalid(_)), "{err}");
        let err = StatusReport::from_json("not json").unwrap_err();
        assert!(matches!(err, StatusError::Invalid(_)), "{err}");
    }
}

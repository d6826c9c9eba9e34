//! The larch daemon: what `larch serve` runs, and what the CLI needs to read and reach it.
//!
//! The binary `larch` only parses arguments and prints; running a pool lives here. The
//! daemon and the commands that look at it (`larch status`, `arcstat`, `iostat`, `set`,
//! `get`, `cache`, `log`) meet in two places, and both are in this crate so that the two
//! sides share one definition: the status file, whose writer and reader are the serde types
//! of [`status`], and the HTTP API, whose server is [`http`] and whose client is
//! [`client`], with the answers of both in [`api`]. A field renamed on one side is then a
//! compile error, and a file from another version of larch is refused by its format
//! number instead of being read as zeros.
//!
//! The modules, each depending only on the ones before it:
//! - [`advise`]: "know your workload": where the caches sit on the pool's miss-ratio
//!   curves and what a bigger ARC or L2ARC would buy.
//! - [`history`]: the pool's history file (`zpool history`).
//! - [`status`]: [`status::StatusReport`], the pool's report with the daemon's pid and
//!   time, as `status.json` and `/status` carry it.
//! - [`report_fields`]: the report's per-volume and per-device fields with their names in
//!   `/metrics` and in the Analytics history: one table, which both read.
//! - [`metrics`]: the Prometheus and kstat texts of a report (`/metrics`, `/arcstats`).
//! - [`recorder`]: the history of the pool the Analytics page shows (per-second series and
//!   latency histograms, an hour of seconds and a day of minutes).
//! - [`api`]: the HTTP API's names and answers, shared by [`http`] and [`client`].
//! - [`client`]: the daemon's record (`daemon.json`), finding a live daemon, and the
//!   blocking HTTP client (`ureq`) the CLI sends requests with.
//! - [`page`]: the Analytics page's files, and a self-contained report page of them.
//! - [`http`]: the loopback HTTP endpoint.
//! - [`systemd`]: readiness notifications and the sockets of socket activation.
//! - [`serve`]: running a pool: listeners, signals, the per-second housekeeping.
//!
//! Everything shown about a pool comes from `larch_engine::Pool::report`; this crate reads
//! no engine internals.

#![warn(missing_docs)]

pub mod advise;
pub mod api;
pub mod client;
pub mod history;
mod housekeeping;
pub mod http;
pub mod metrics;
pub mod page;
pub mod recorder;
pub mod report_fields;
pub mod serve;
pub mod status;
pub mod stderr;
pub mod systemd;

#[cfg(test)]
mod testing;

use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch (0 if the clock is before it), the time the daemon's files
/// record.
pub fn unix_time_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

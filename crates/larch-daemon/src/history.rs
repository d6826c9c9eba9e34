//! The pool's history: one line per event (pool created, opened and closed, cache and log
//! devices added or removed, rebuilds finished, faults), each after the time in seconds
//! since the epoch, like `zpool history`.
//!
//! Appending is best effort: a history that cannot be written must never stop a pool that
//! serves volumes, so errors are ignored.

use std::io::Write;
use std::path::Path;

/// Name of the pool history file in the state directory.
pub const HISTORY_FILE: &str = "history";

/// Appends `line` to the history of the pool in `state_dir`.
pub fn append(state_dir: &Path, line: &str) {
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(state_dir.join(HISTORY_FILE))
    {
        let _ = writeln!(f, "{} {line}", crate::unix_time_secs());
    }
}

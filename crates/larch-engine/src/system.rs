//! What the engine reads of the system it runs on: its memory (`/proc/meminfo`).

use larch_policy::tunables::DIRTY_DATA_MAX_CAP_BYTES;

/// The default `zfs_dirty_data_max`: 10% of RAM, at most 4 GiB (OpenZFS).
pub fn default_dirty_data_max() -> u64 {
    meminfo()
        .map_or(DIRTY_DATA_MAX_CAP_BYTES, |(total, _)| total / 10)
        .min(DIRTY_DATA_MAX_CAP_BYTES)
}

/// MemTotal and MemAvailable of /proc/meminfo, in bytes.
pub(crate) fn meminfo() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    };
    Some((field("MemTotal:")?, field("MemAvailable:")?))
}

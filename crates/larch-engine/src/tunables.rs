//! Setting tunables by name, as users type them (`l2arc_write_max=64M`), and the
//! `tunables.json` file in a pool's state directory that carries them to a running daemon
//! and keeps them across restarts.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::Path;
use std::sync::atomic::Ordering;

use crate::engine::Tunables;

/// Name of the tunables file in a state directory.
pub const TUNABLES_FILE: &str = "tunables.json";

/// Every tunable, with its default and meaning (for `--help` and docs).
pub const TUNABLES: &[(&str, &str, &str)] = &[
    (
        "zfs_arc_max",
        "pool.json",
        "most bytes of data the ARC holds (the pool's arc_max_bytes unless set)",
    ),
    (
        "zfs_arc_min",
        "0",
        "the ARC target never shrinks below this (0: min(zfs_arc_max, max(32M, zfs_arc_max/32)))",
    ),
    (
        "zfs_arc_sys_free",
        "0",
        "memory left to the system; below it the ARC shrinks (0: 1/32 of RAM)",
    ),
    ("zfs_txg_timeout", "5", "seconds between TXG syncs"),
    (
        "zfs_vdev_async_write_max_active",
        "10",
        "most writes a TXG sync has in flight to one backing store",
    ),
    (
        "zfs_dirty_data_max",
        "10% of RAM, at most 4G",
        "most dirty bytes in DRAM (also at most half of zfs_arc_max)",
    ),
    (
        "zfs_dirty_data_sync_percent",
        "20",
        "a TXG syncs early when its dirty bytes pass this percent of the limit",
    ),
    (
        "zfs_delay_min_dirty_percent",
        "60",
        "the write throttle starts at this percent of the dirty limit",
    ),
    (
        "zfs_delay_scale",
        "500000",
        "scale of the write throttle's delay curve, ns",
    ),
    (
        "l2arc_write_max",
        "32M",
        "bytes written to each cache device per feed",
    ),
    (
        "l2arc_write_boost",
        "32M",
        "extra bytes per feed until the ARC first evicts (it is cold)",
    ),
    (
        "l2arc_headroom",
        "8",
        "scan depth per feed, as a multiple of l2arc_write_max (0 = unlimited)",
    ),
    (
        "l2arc_headroom_boost",
        "200",
        "percent applied to l2arc_headroom",
    ),
    ("l2arc_feed_secs", "1", "seconds between feeds"),
    (
        "l2arc_feed_min_ms",
        "200",
        "interval when feeding again quickly",
    ),
    (
        "l2arc_feed_again",
        "1",
        "feed again after l2arc_feed_min_ms when a feed wrote over half its budget",
    ),
    (
        "l2arc_feed_follow",
        "1",
        "feed every l2arc_feed_min_ms (same bytes per second) while blocks leave the ARC unfed (larch's)",
    ),
    (
        "l2arc_noprefetch",
        "1",
        "do not feed blocks read by prefetch",
    ),
    (
        "l2arc_nowrite",
        "1",
        "do not feed blocks written and not read since (larch's; OpenZFS feeds them)",
    ),
    (
        "l2arc_io_uring",
        "1",
        "read cache devices through io_uring (larch's; 0: through a pool of threads)",
    ),
    (
        "l2arc_mfuonly",
        "0",
        "0: feed MRU and MFU; 1: MFU only; 2: MFU data and all metadata",
    ),
    (
        "l2arc_meta_percent",
        "33",
        "DRAM the L2 index may use, in percent of zfs_arc_max (at least 4M)",
    ),
    (
        "l2arc_rebuild_enabled",
        "1",
        "rebuild cache devices' indexes at start",
    ),
    (
        "l2arc_rebuild_blocks_min_l2size",
        "0",
        "cache devices smaller than this are formatted at start, not rebuilt",
    ),
    (
        "zfs_prefetch_disable",
        "0",
        "turn the sequential-read prefetcher off",
    ),
    (
        "zfetch_max_distance",
        "8M",
        "most bytes read ahead of a sequential stream",
    ),
];

fn parse_number(value: &str) -> Result<u64, String> {
    let v = value.trim();
    let (digits, shift) = match v.chars().last() {
        Some('K' | 'k') => (&v[..v.len() - 1], 10),
        Some('M' | 'm') => (&v[..v.len() - 1], 20),
        Some('G' | 'g') => (&v[..v.len() - 1], 30),
        _ => (v, 0),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or_else(|| format!("{value:?} is not a number (K/M/G suffixes allowed)"))
}

/// The default of a tunable, as a number; `None` for an unknown name.
pub fn default_value(name: &str) -> Option<u64> {
    values(&Tunables::default()).get(name).copied()
}

/// A tunable's value as users type it: sizes (the tunables whose default has a K/M/G
/// suffix) with the largest suffix that divides them, everything else as a number.
pub fn format_value(name: &str, value: u64) -> String {
    let is_size = TUNABLES
        .iter()
        .any(|t| t.0 == name && t.1.ends_with(|c: char| c.is_ascii_alphabetic()));
    if is_size && value > 0 {
        for (shift, suffix) in [(30, "G"), (20, "M"), (10, "K")] {
            if value.trailing_zeros() >= shift {
                return format!("{}{suffix}", value >> shift);
            }
        }
    }
    value.to_string()
}

/// Sets one tunable by name. Values out of range are refused with a reason.
pub fn set(tunables: &Tunables, name: &str, value: &str) -> Result<(), String> {
    let n = parse_number(value)?;
    let flag = |n: u64| match n {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(format!("{name} is 0 or 1, not {n}")),
    };
    match name {
        "zfs_arc_max" => {
            if n < 1 << 20 {
                return Err(format!("{name} must be at least 1M, not {n}"));
            }
            let min = tunables.zfs_arc_min.load(Ordering::Relaxed);
            if min > n {
                return Err(format!("{name} {n} is below zfs_arc_min {min}"));
            }
            tunables.zfs_arc_max.store(n, Ordering::Relaxed);
        }
        "zfs_arc_min" => {
            let max = tunables.zfs_arc_max.load(Ordering::Relaxed);
            if n > max {
                return Err(format!("{name} {n} is above zfs_arc_max {max}"));
            }
            tunables.zfs_arc_min.store(n, Ordering::Relaxed);
        }
        "zfs_arc_sys_free" => tunables.zfs_arc_sys_free.store(n, Ordering::Relaxed),
        "zfs_txg_timeout" => {
            if !(1..=600).contains(&n) {
                return Err(format!("{name} must be between 1 and 600, not {n}"));
            }
            tunables.zfs_txg_timeout.store(n, Ordering::Relaxed);
        }
        "zfs_vdev_async_write_max_active" => {
            if !(1..=1000).contains(&n) {
                return Err(format!("{name} must be between 1 and 1000, not {n}"));
            }
            tunables
                .zfs_vdev_async_write_max_active
                .store(n, Ordering::Relaxed);
        }
        "zfs_dirty_data_max" => {
            if n < 1 << 20 {
                return Err(format!("{name} must be at least 1M, not {n}"));
            }
            tunables.zfs_dirty_data_max.store(n, Ordering::Relaxed);
        }
        "zfs_dirty_data_sync_percent" | "zfs_delay_min_dirty_percent" => {
            if !(1..=100).contains(&n) {
                return Err(format!("{name} must be between 1 and 100, not {n}"));
            }
            let target = if name == "zfs_dirty_data_sync_percent" {
                &tunables.zfs_dirty_data_sync_percent
            } else {
                &tunables.zfs_delay_min_dirty_percent
            };
            target.store(n, Ordering::Relaxed);
        }
        "zfs_delay_scale" => {
            if n > 1_000_000_000 {
                return Err(format!("{name} must be at most 1000000000, not {n}"));
            }
            tunables.zfs_delay_scale.store(n, Ordering::Relaxed);
        }
        "l2arc_write_max" => {
            if !(64 << 10..=1 << 30).contains(&n) {
                return Err(format!("{name} must be between 64K and 1G, not {n}"));
            }
            tunables.l2arc_write_max.store(n, Ordering::Relaxed);
        }
        "l2arc_write_boost" => {
            if n > 1 << 30 {
                return Err(format!("{name} must be at most 1G, not {n}"));
            }
            tunables.l2arc_write_boost.store(n, Ordering::Relaxed);
        }
        "l2arc_headroom_boost" => {
            if !(100..=10_000).contains(&n) {
                return Err(format!("{name} must be between 100 and 10000, not {n}"));
            }
            tunables.l2arc_headroom_boost.store(n, Ordering::Relaxed);
        }
        "l2arc_meta_percent" => {
            if !(1..=100).contains(&n) {
                return Err(format!("{name} must be between 1 and 100, not {n}"));
            }
            tunables.l2arc_meta_percent.store(n, Ordering::Relaxed);
        }
        "l2arc_rebuild_blocks_min_l2size" => tunables
            .l2arc_rebuild_blocks_min_l2size
            .store(n, Ordering::Relaxed),
        "l2arc_headroom" => {
            if n > 1000 {
                return Err(format!("{name} must be at most 1000, not {n}"));
            }
            tunables.l2arc_headroom.store(n, Ordering::Relaxed);
        }
        "l2arc_feed_secs" => {
            if !(1..=3600).contains(&n) {
                return Err(format!("{name} must be between 1 and 3600, not {n}"));
            }
            tunables.l2arc_feed_secs.store(n, Ordering::Relaxed);
        }
        "l2arc_feed_min_ms" => {
            if !(10..=60_000).contains(&n) {
                return Err(format!("{name} must be between 10 and 60000, not {n}"));
            }
            tunables.l2arc_feed_min_ms.store(n, Ordering::Relaxed);
        }
        "l2arc_feed_again" => tunables.l2arc_feed_again.store(flag(n)?, Ordering::Relaxed),
        "l2arc_feed_follow" => tunables
            .l2arc_feed_follow
            .store(flag(n)?, Ordering::Relaxed),
        "l2arc_noprefetch" => tunables.l2arc_noprefetch.store(flag(n)?, Ordering::Relaxed),
        "l2arc_nowrite" => tunables.l2arc_nowrite.store(flag(n)?, Ordering::Relaxed),
        "l2arc_io_uring" => tunables.l2arc_io_uring.store(flag(n)?, Ordering::Relaxed),
        "l2arc_mfuonly" => {
            if n > 2 {
                return Err(format!("{name} is 0, 1 or 2, not {n}"));
            }
            tunables.l2arc_mfuonly.store(n as u8, Ordering::Relaxed);
        }
        "l2arc_rebuild_enabled" => tunables
            .l2arc_rebuild_enabled
            .store(flag(n)?, Ordering::Relaxed),
        "zfs_prefetch_disable" => tunables
            .zfs_prefetch_disable
            .store(flag(n)?, Ordering::Relaxed),
        "zfetch_max_distance" => {
            if n > 256 << 20 {
                return Err(format!("{name} must be at most 256M, not {n}"));
            }
            tunables.zfetch_max_distance.store(n, Ordering::Relaxed);
        }
        _ => {
            let names: Vec<&str> = TUNABLES.iter().map(|t| t.0).collect();
            return Err(format!(
                "unknown tunable {name:?} (known: {})",
                names.join(", ")
            ));
        }
    }
    Ok(())
}

/// Current values, by name.
pub fn values(tunables: &Tunables) -> BTreeMap<String, u64> {
    let r = Ordering::Relaxed;
    [
        ("zfs_arc_max", tunables.zfs_arc_max.load(r)),
        ("zfs_arc_min", tunables.zfs_arc_min.load(r)),
        ("zfs_arc_sys_free", tunables.zfs_arc_sys_free.load(r)),
        ("zfs_txg_timeout", tunables.zfs_txg_timeout.load(r)),
        (
            "zfs_vdev_async_write_max_active",
            tunables.zfs_vdev_async_write_max_active.load(r),
        ),
        ("zfs_dirty_data_max", tunables.zfs_dirty_data_max.load(r)),
        (
            "zfs_dirty_data_sync_percent",
            tunables.zfs_dirty_data_sync_percent.load(r),
        ),
        (
            "zfs_delay_min_dirty_percent",
            tunables.zfs_delay_min_dirty_percent.load(r),
        ),
        ("zfs_delay_scale", tunables.zfs_delay_scale.load(r)),
        ("l2arc_write_max", tunables.l2arc_write_max.load(r)),
        ("l2arc_write_boost", tunables.l2arc_write_boost.load(r)),
        ("l2arc_headroom", tunables.l2arc_headroom.load(r)),
        (
            "l2arc_headroom_boost",
            tunables.l2arc_headroom_boost.load(r),
        ),
        ("l2arc_meta_percent", tunables.l2arc_meta_percent.load(r)),
        (
            "l2arc_rebuild_blocks_min_l2size",
            tunables.l2arc_rebuild_blocks_min_l2size.load(r),
        ),
        ("l2arc_feed_secs", tunables.l2arc_feed_secs.load(r)),
        ("l2arc_feed_min_ms", tunables.l2arc_feed_min_ms.load(r)),
        (
            "l2arc_feed_again",
            u64::from(tunables.l2arc_feed_again.load(r)),
        ),
        (
            "l2arc_feed_follow",
            u64::from(tunables.l2arc_feed_follow.load(r)),
        ),
        (
            "l2arc_noprefetch",
            u64::from(tunables.l2arc_noprefetch.load(r)),
        ),
        ("l2arc_nowrite", u64::from(tunables.l2arc_nowrite.load(r))),
        ("l2arc_io_uring", u64::from(tunables.l2arc_io_uring.load(r))),
        ("l2arc_mfuonly", u64::from(tunables.l2arc_mfuonly.load(r))),
        (
            "l2arc_rebuild_enabled",
            u64::from(tunables.l2arc_rebuild_enabled.load(r)),
        ),
        (
            "zfs_prefetch_disable",
            u64::from(tunables.zfs_prefetch_disable.load(r)),
        ),
        ("zfetch_max_distance", tunables.zfetch_max_distance.load(r)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// The tunables saved in a state directory (empty when there is no file).
pub fn load(state_dir: &Path) -> io::Result<BTreeMap<String, String>> {
    match fs::read_to_string(state_dir.join(TUNABLES_FILE)) {
        Ok(text) => {
            serde_json::from_str(&text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(e),
    }
}

/// Saves tunables in a state directory (atomically: temporary file and rename).
pub fn save(state_dir: &Path, saved: &BTreeMap<String, String>) -> io::Result<()> {
    let tmp = state_dir.join(format!("{TUNABLES_FILE}.tmp"));
    fs::write(
        &tmp,
        serde_json::to_string_pretty(saved).map_err(io::Error::other)?,
    )?;
    fs::rename(tmp, state_dir.join(TUNABLES_FILE))
}

/// Applies saved tunables; returns the ones refused, with reasons.
pub fn apply(tunables: &Tunables, saved: &BTreeMap<String, String>) -> Vec<String> {
    saved
        .iter()
        .filter_map(|(name, value)| set(tunables, name, value).err())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_parses_checks_and_reports() {
        let t = Tunables::default();
        set(&t, "l2arc_write_max", "8M").unwrap();
        set(&t, "l2arc_mfuonly", "2").unwrap();
        set(&t, "l2arc_noprefetch", "0").unwrap();
        let v = values(&t);
        assert_eq!(v["l2arc_write_max"], 8 << 20);
        assert_eq!(v["l2arc_mfuonly"], 2);
        assert_eq!(v["l2arc_noprefetch"], 0);
        assert!(set(&t, "l2arc_mfuonly", "3").is_err());
        assert!(set(&t, "l2arc_write_max", "1").is_err());
        assert!(set(&t, "l2arc_noprefetch", "yes").is_err());
        assert!(
            set(&t, "nope", "1")
                .unwrap_err()
                .contains("unknown tunable")
        );
        assert_eq!(values(&t).len(), TUNABLES.len());
    }

    #[test]
    fn defaults_and_formatted_values_match_the_table() {
        let t = Tunables::default();
        for (name, value) in values(&t) {
            assert_eq!(default_value(&name), Some(value), "{name}");
            let (_, default, _) = TUNABLES.iter().find(|e| e.0 == name).unwrap();
            if parse_number(default).is_err() {
                // Defaults that depend on the pool or the machine are described in words.
                assert!(["zfs_arc_max", "zfs_dirty_data_max"].contains(&name.as_str()));
                continue;
            }
            assert_eq!(&format_value(&name, value), default, "{name}");
        }
        assert_eq!(default_value("nope"), None);
        assert_eq!(format_value("l2arc_write_max", 96 << 10), "96K");
        assert_eq!(format_value("l2arc_write_max", (1 << 20) + 1), "1048577");
        assert_eq!(format_value("zfetch_max_distance", 0), "0");
        assert_eq!(format_value("l2arc_headroom", 1024), "1024");
    }
}

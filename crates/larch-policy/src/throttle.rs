//! The write throttle's curve (OpenZFS `dmu_tx_delay`): once dirty bytes pass
//! `zfs_delay_min_dirty_percent` of the limit, each write waits `zfs_delay_scale` ×
//! (dirty − min) / (limit − dirty) ns, at most [`MAX_DELAY_NS`]; at the limit writers
//! block until a sync frees room (the caller's business). The engine sleeps for it; the
//! simulator adds it to a write's virtual time.

/// Longest delay the throttle puts on one write (OpenZFS caps it at 100 ms too).
pub const MAX_DELAY_NS: u64 = 100_000_000;

/// The delay of a write, ns, when `dirty` bytes are dirty under a limit of `max`, the
/// curve starting at `min`: 0 up to `min` and at or past `max` (where writers block
/// instead).
pub fn write_delay_ns(dirty: u64, min: u64, max: u64, scale_ns: u64) -> u64 {
    if dirty <= min || dirty >= max {
        return 0;
    }
    (scale_ns.saturating_mul(dirty - min) / (max - dirty)).min(MAX_DELAY_NS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_curve_starts_at_min_and_is_capped() {
        let (min, max) = (600, 1000);
        assert_eq!(write_delay_ns(500, min, max, 500_000), 0);
        assert_eq!(write_delay_ns(600, min, max, 500_000), 0);
        // Halfway between min and max: scale × 200 / 200.
        assert_eq!(write_delay_ns(800, min, max, 500_000), 500_000);
        assert_eq!(write_delay_ns(999, min, max, 1_000_000_000), MAX_DELAY_NS);
        assert_eq!(write_delay_ns(1000, min, max, 500_000), 0);
    }
}

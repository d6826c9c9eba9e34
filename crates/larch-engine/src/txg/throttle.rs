//! The write throttle (OpenZFS `dmu_tx_delay`): each write is delayed once dirty bytes
//! pass `zfs_delay_min_dirty_percent` of the limit, by `zfs_delay_scale` × (dirty − min)
//! / (limit − dirty) ns (at most 100 ms), and writers block at the limit until a sync
//! frees room. The limit is `zfs_dirty_data_max`, but at most half of `zfs_arc_max`
//! (dirty blocks live in the ARC and cannot be evicted).

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::engine::Engine;

/// Longest delay the throttle puts on one write (OpenZFS caps it at 100 ms too).
const MAX_DELAY: Duration = Duration::from_millis(100);

/// The delay of a write when `dirty` bytes are dirty under a limit of `max`, the curve
/// starting at `min`.
pub(super) fn delay(dirty: u64, min: u64, max: u64, scale_ns: u64) -> Duration {
    if dirty <= min || dirty >= max {
        return Duration::ZERO;
    }
    let ns = scale_ns.saturating_mul(dirty - min) / (max - dirty);
    Duration::from_nanos(ns).min(MAX_DELAY)
}

impl Engine {
    /// Delays a writer of `bytes` as the dirty data approaches the limit; blocks it at
    /// the limit until a sync frees room.
    pub(super) fn throttle(&self, bytes: u64) {
        let max = self.dirty_max();
        let min_percent = self.tunables.zfs_delay_min_dirty_percent().min(100);
        let min = max / 100 * min_percent;
        let scale = self.tunables.zfs_delay_scale();
        let mut inner = self.txg.lock();
        if inner.dirty_bytes + bytes > max && inner.dirty_bytes > 0 {
            self.write_stats
                .dmu_tx_dirty_over_max
                .fetch_add(1, Ordering::Relaxed);
            while inner.dirty_bytes + bytes > max
                && inner.dirty_bytes > 0
                && !self.is_shutting_down()
            {
                inner.sync_requested = true;
                self.txg.changed.notify_all();
                inner = self.txg.wait(inner, Duration::from_millis(100));
            }
        }
        let dirty = inner.dirty_bytes;
        drop(inner);
        let delay = delay(dirty, min, max, scale);
        if !delay.is_zero() {
            self.write_stats
                .dmu_tx_delay
                .fetch_add(1, Ordering::Relaxed);
            self.write_stats
                .dmu_tx_delay_us
                .fetch_add(delay.as_micros() as u64, Ordering::Relaxed);
            std::thread::sleep(delay);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_curve_starts_at_min_and_is_capped() {
        let (min, max) = (600, 1000);
        assert_eq!(delay(500, min, max, 500_000), Duration::ZERO);
        assert_eq!(delay(600, min, max, 500_000), Duration::ZERO);
        // Halfway between min and max: scale × 200 / 200.
        assert_eq!(delay(800, min, max, 500_000), Duration::from_nanos(500_000));
        assert_eq!(delay(999, min, max, 1_000_000_000), MAX_DELAY);
        assert_eq!(delay(1000, min, max, 500_000), Duration::ZERO);
    }
}

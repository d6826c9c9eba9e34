//! The write throttle (OpenZFS `dmu_tx_delay`): each write is delayed once dirty bytes
//! pass `zfs_delay_min_dirty_percent` of the limit, by the curve of
//! `larch_policy::throttle` (`zfs_delay_scale` × (dirty − min) / (limit − dirty) ns, at
//! most 100 ms), counted from when the previous delayed write was let go, so that the
//! delay paces all writers together (at the curve's midpoint, 1 / `zfs_delay_scale`
//! writes per second: 2,000 by default); writers block at the limit until a sync frees
//! room. The dirty data settles where the paced rate equals what the syncs write, short of
//! the limit, and no write waits for a whole TXG sync. The limit is `zfs_dirty_data_max`,
//! but at most half of `zfs_arc_max` (dirty blocks live in the ARC and cannot be evicted).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use larch_policy::throttle::write_delay_ns;

use crate::engine::Engine;

impl Engine {
    /// Delays a writer of `bytes` as the dirty data approaches the limit; blocks it at
    /// the limit until a sync frees room. The bytes are counted as dirty from here on
    /// (reserved under the same lock hold as the check), and the caller must hand them to
    /// [`Engine::make_dirty`] as reserved: before, writers that passed the check together
    /// all added their bytes after it, and dirty data passed the limit by as much as the
    /// writes in flight (OpenZFS reserves too, `dsl_dir_tempreserve_space`).
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
        inner.dirty_bytes += bytes;
        let delay = Duration::from_nanos(write_delay_ns(dirty, min, max, scale));
        if delay.is_zero() {
            return;
        }
        // As OpenZFS: a write is let go `delay` after the previous throttled one (or now,
        // if that was longer ago), so the delay bounds the rate of all writers together,
        // however many there are. Each sleeping on its own, 32 clients would pass 32
        // times the rate the curve means, the dirty data would reach the limit, and
        // writers would block there for a whole TXG sync.
        let now = Instant::now();
        let wakeup = (inner.last_wakeup + delay).max(now);
        inner.last_wakeup = wakeup;
        drop(inner);
        let wait = wakeup - now;
        self.write_stats
            .dmu_tx_delay
            .fetch_add(1, Ordering::Relaxed);
        self.write_stats
            .dmu_tx_delay_us
            .fetch_add(wait.as_micros() as u64, Ordering::Relaxed);
        std::thread::sleep(wait);
    }
}

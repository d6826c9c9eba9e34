//! The write throttle (OpenZFS `dmu_tx_delay`): each write is delayed once dirty bytes
//! pass `zfs_delay_min_dirty_percent` of the limit, by the curve of
//! `larch_policy::throttle` (`zfs_delay_scale` × (dirty − min) / (limit − dirty) ns, at
//! most 100 ms), counted from when the previous delayed write was let go, so that the
//! delay paces all writers together (at the curve's midpoint, 1 / `zfs_delay_scale`
//! writes per second: 2,000 by default); writers block at the limit until a sync frees
//! room. The dirty data settles where the paced rate equals what the syncs write, short of
//! the limit, and no write waits for a whole TXG sync. The limit is `zfs_dirty_data_max`,
//! but at most half of `zfs_arc_max` (dirty blocks live in the ARC and cannot be evicted).
//!
//! A write larger than the limit itself (a 32 MiB NBD write with a small ARC) passes only
//! when nothing is dirty; while one waits, other writers wait behind it, so that it is not
//! starved by a stream of small writes that never let the dirty data reach zero.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use larch_policy::throttle::write_delay_ns;

use super::Txg;

impl Txg {
    /// Delays a writer of `bytes` as the dirty data approaches the limit; blocks it at
    /// the limit until a sync frees room. The bytes are counted as dirty from here on
    /// (reserved under the same lock hold as the check), and the caller must hand them to
    /// [`Txg::make_dirty`] as reserved: before, writers that passed the check together
    /// all added their bytes after it, and dirty data passed the limit by as much as the
    /// writes in flight (OpenZFS reserves too, `dsl_dir_tempreserve_space`).
    ///
    /// An error, reserving nothing, when the syncer has stopped (a write waiting for room
    /// would wait for ever).
    pub(super) fn throttle(&self, bytes: u64) -> Result<(), String> {
        let max = self.dirty_max();
        let min_percent = self.tunables.zfs_delay_min_dirty_percent().min(100);
        let min = max / 100 * min_percent;
        let scale = self.tunables.zfs_delay_scale();
        let oversized = bytes > max;
        let mut inner = self.lock();
        let must_wait = |inner: &super::TxgInner| {
            (inner.dirty_bytes > 0 && inner.dirty_bytes + bytes > max)
                || (!oversized && inner.oversized_waiting > 0)
        };
        if must_wait(&inner) {
            self.write_stats
                .dmu_tx_dirty_over_max
                .fetch_add(1, Ordering::Relaxed);
            if oversized {
                inner.oversized_waiting += 1;
            }
            while must_wait(&inner) && !self.life.is_shutting_down() {
                if !self.life.syncer_running() {
                    if oversized {
                        inner.oversized_waiting -= 1;
                    }
                    return Err("the TXG syncer stopped (see the daemon's log)".into());
                }
                // Asked for once, and only when the open TXG holds something: writers
                // that each asked and notified at every wake-up woke one another in a
                // loop (no sleep between), and the syncer, finding the request set again
                // after each sync, closed empty TXGs back to back. The syncing TXG's end
                // and a merge giving back its bytes wake the waiters themselves.
                if !inner.sync_requested && !inner.open.is_empty() {
                    inner.sync_requested = true;
                    self.changed.notify_all();
                }
                inner = self.wait(inner, Duration::from_millis(100));
            }
            if oversized {
                inner.oversized_waiting -= 1;
            }
        }
        let dirty = inner.dirty_bytes;
        inner.dirty_bytes += bytes;
        let delay = Duration::from_nanos(write_delay_ns(dirty, min, max, scale));
        if delay.is_zero() {
            return Ok(());
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
        Ok(())
    }

    /// Reserves `bytes` as dirty if the throttle would neither delay nor block a write of
    /// them now (checked and reserved under one lock hold); false, reserving nothing,
    /// otherwise. For writers on an async runtime's thread, which must not sleep: before,
    /// they looked at the dirty bytes, let go of the lock and throttled, and a write that
    /// crossed the threshold meanwhile slept its delay (up to seconds behind other
    /// delayed writers) on a runtime worker, holding up every connection on it.
    pub(crate) fn try_reserve_undelayed(&self, bytes: u64) -> bool {
        let max = self.dirty_max();
        let min_percent = self.tunables.zfs_delay_min_dirty_percent().min(100);
        let min = max / 100 * min_percent;
        let mut inner = self.lock();
        let dirty = inner.dirty_bytes;
        if dirty > min || (dirty > 0 && dirty + bytes > max) || inner.oversized_waiting > 0 {
            return false;
        }
        inner.dirty_bytes += bytes;
        true
    }
}

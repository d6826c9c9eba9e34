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

use super::{Txg, TxgInner};
use crate::error::WriteError;

/// The dirty limit's one rule, which every writer goes by: bytes fit when nothing is
/// dirty (a write larger than the limit passes alone) or when they keep the dirty bytes
/// within `max`; and while a write larger than the limit waits for the dirty bytes to
/// reach zero, the others (`behind_oversized`) wait behind it.
impl TxgInner {
    fn fits(&self, bytes: u64, max: u64, behind_oversized: bool) -> bool {
        let over = self.dirty_bytes > 0 && self.dirty_bytes + bytes > max;
        let queued = behind_oversized && self.oversized_waiting > 0;
        !(over || queued)
    }
}

impl Txg {
    /// The dirty limit in force: `zfs_dirty_data_max`, at most half of `zfs_arc_max`, and
    /// at least 1 MiB.
    pub(crate) fn dirty_max(&self) -> u64 {
        self.tunables
            .zfs_dirty_data_max()
            .min(self.tunables.zfs_arc_max() / 2)
            .max(1 << 20)
    }

    /// Dirty bytes past which writes are delayed: `zfs_delay_min_dirty_percent` of the
    /// limit `max`.
    fn delay_min(&self, max: u64) -> u64 {
        max / 100 * self.tunables.zfs_delay_min_dirty_percent().min(100)
    }

    /// Delays a writer of `bytes` as the dirty data approaches the limit; blocks it at
    /// the limit until a sync frees room. The bytes are counted as dirty from here on
    /// (reserved under the same lock hold as the check), and the caller must hand them to
    /// [`Txg::make_dirty`] as reserved: before, writers that passed the check together
    /// all added their bytes after it, and dirty data passed the limit by as much as the
    /// writes in flight (OpenZFS reserves too, `dsl_dir_tempreserve_space`).
    ///
    /// An error, reserving nothing, when the syncer has stopped (a write waiting for room
    /// would wait for ever).
    pub(super) fn throttle(&self, bytes: u64) -> Result<(), WriteError> {
        let max = self.dirty_max();
        let min = self.delay_min(max);
        let scale = self.tunables.zfs_delay_scale();
        let oversized = bytes > max;
        let mut inner = self.lock();
        let must_wait = |inner: &TxgInner| !inner.fits(bytes, max, !oversized);
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
                    return Err(WriteError::SyncerStopped);
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
        let min = self.delay_min(max);
        let mut inner = self.lock();
        if inner.dirty_bytes > min || !inner.fits(bytes, max, true) {
            return false;
        }
        inner.dirty_bytes += bytes;
        true
    }

    /// Counts `bytes` of a partial write waiting for its merge as dirty (the throttle
    /// sees them; [`Txg::release_dirty`] gives them back once it is merged), if they
    /// fit under the dirty limit or nothing is dirty (as the throttle lets a write pass);
    /// false, counting nothing, if they do not.
    pub(super) fn try_reserve_dirty(&self, bytes: u64) -> bool {
        let max = self.dirty_max();
        let mut inner = self.lock();
        if !inner.fits(bytes, max, true) {
            return false;
        }
        inner.dirty_bytes += bytes;
        true
    }

    /// Gives back bytes [`Txg::try_reserve_dirty`] counted, and wakes throttled writers.
    pub(super) fn release_dirty(&self, bytes: u64) {
        let mut inner = self.lock();
        inner.dirty_bytes -= bytes;
        drop(inner);
        self.changed.notify_all();
    }

    /// Whether a write now would be delayed by the throttle (dirty bytes past
    /// `zfs_delay_min_dirty_percent` of the limit).
    pub(crate) fn throttle_due(&self) -> bool {
        let min = self.delay_min(self.dirty_max());
        self.lock().dirty_bytes > min
    }
}

//! Dropping the cache-device copies a volume no longer wants: all of them when its
//! `secondarycache` is narrowed, those past its new end when it shrinks.
//!
//! They leave the index as copies of overwritten blocks do ([`crate::coherence`], rule
//! 1): under the gate, each gets a tombstone queued for its device; the caller then
//! commits the queued tombstones at once ([`L2Arc::commit_queued_tombstones`]), so that
//! no restart restores one, whatever the pool's files say by then (a volume that shrinks
//! and later grows again must read zeros there, never a copy of its old tail). What runs
//! meanwhile is kept out as well:
//! - a feed in flight indexes a copy only if its volume still caches that block on cache
//!   devices, looked at under the gate (`feed::index_placements`), and tombstones it
//!   otherwise;
//! - a rebuild in flight drops, when it attaches its index under the gate, the copies of
//!   blocks its volumes no longer cache, if any purge ran since it began
//!   ([`Coherence::purges`]); entries it meets after the change are not restored at all;
//! - the read path reads no copy of a volume whose `secondarycache` is not `all`.

use std::sync::atomic::Ordering;

use super::index::unpack_key;
use super::{CacheDevice, DeviceState, L2Arc};
use crate::arc::index_key;
use crate::coherence::Tombstone;
use crate::error::DistrustError;
use crate::volumes::VolumeInfo;

impl L2Arc {
    /// Drops every indexed copy of volume `info.slot`'s blocks from block `from` on, on
    /// every device, queueing a tombstone for each (under the gate). `info` is the volume
    /// as it was before the change (the copies' sizes are its blocks' sizes). Returns the
    /// copies dropped.
    pub(crate) fn drop_copies(&self, info: &VolumeInfo, from: u64) -> u64 {
        let _gate = self.coherence.gate();
        self.coherence.note_purge();
        // Newer than every copy's: a tombstone hides every older entry of its key.
        let generation = self.generations.fresh();
        let mut dropped = 0;
        for mut shard in self.arc.shards() {
            let keys = shard.l2.keys_where(|key| {
                let (slot, block) = unpack_key(key);
                slot == info.slot && block >= from
            });
            for key in keys {
                let (_, block) = unpack_key(key);
                let psize = info.cached_len(block) as u32;
                for loc in shard.l2.remove(key, psize, &self.stats) {
                    let on_disk = larch_l2::BlockKey {
                        volume_guid: info.guid,
                        block_number: block,
                    };
                    self.coherence.queue_tombstone(
                        loc.device,
                        Tombstone {
                            key: on_disk,
                            generation,
                        },
                    );
                    self.stats.l2_tombstones.fetch_add(1, Ordering::Relaxed);
                    dropped += 1;
                }
            }
        }
        dropped
    }

    /// Forgets every cached copy of `blocks` of volume `info`, which another node changed
    /// on the store this node follows read-only: as a write does (rule 1), under the
    /// gate, each block's cache-device copies leave the index with a tombstone queued, the
    /// feed in flight and the rebuilds learn of the change, and the ARC's copy (or read
    /// in flight) is dropped. The caller commits the queued tombstones before it records
    /// the change as seen. Returns the ARC copies and the cache-device copies dropped.
    pub(crate) fn forget_blocks(&self, info: &VolumeInfo, blocks: &[u64]) -> (u64, u64) {
        let _gate = self.coherence.gate();
        let (mut arc_dropped, mut l2_dropped) = (0, 0);
        for &block in blocks {
            let key = info.key(block);
            let generation = self.generations.fresh();
            let psize = info.block_len(block) as u32;
            let removed = {
                let mut shard = self.arc.shard(&key);
                arc_dropped += u64::from(shard.drop_block(&key));
                shard.l2.remove(index_key(&key), psize, &self.stats)
            };
            for loc in removed {
                self.coherence.queue_tombstone(
                    loc.device,
                    Tombstone {
                        key: larch_l2::BlockKey {
                            volume_guid: info.guid,
                            block_number: block,
                        },
                        generation,
                    },
                );
                self.stats.l2_tombstones.fetch_add(1, Ordering::Relaxed);
                l2_dropped += 1;
            }
            self.coherence.note_write(key);
        }
        (arc_dropped, l2_dropped)
    }

    /// Whether the volume of `slot` caches block `block` on cache devices now
    /// ([`VolumeInfo::keeps_on_devices`]).
    pub(crate) fn keeps_copy(&self, slot: u16, block: u64) -> bool {
        (self.volumes.get(slot)).is_some_and(|v| v.info().keeps_on_devices(block))
    }

    /// Makes the tombstones queued so far durable (step 1 of a TXG sync, which calls it;
    /// and a purge, at once): under `feed_io` (a feed in flight has queued its
    /// tombstones), every online device commits the tombstones queued for it, and every
    /// device still rebuilding has its log emptied once for that rebuild (rule 2). A
    /// device that fails is faulted and its log emptied; `Err` only when that failed too
    /// and the pool could not record it.
    pub(crate) fn commit_queued_tombstones(&self) -> Result<(), DistrustError> {
        let _io = self.coherence.feed_io();
        for device in self.devices.all() {
            self.commit_or_forget(&device)?;
        }
        Ok(())
    }

    fn commit_or_forget(&self, device: &CacheDevice) -> Result<(), DistrustError> {
        let mut writer = device.writer();
        match (writer.as_mut(), device.state()) {
            (Some(l2), _) => {
                let queued = self.coherence.take_tombstones(device.index);
                // A commit that needs space moves the evict hand: the index entries it
                // passes go before their space is overwritten, as in a feed.
                let evict = |floor: u64| self.evict_below(device.index, floor);
                let committed = CacheDevice::append_tombstones(l2, &queued, evict).and_then(|()| {
                    if l2.open_entries() > 0 {
                        l2.commit_log_with(evict).map(drop)
                    } else {
                        Ok(())
                    }
                });
                if let Err(err) = committed {
                    drop(writer);
                    return self.fault_device(device, format!("tombstone commit failed: {err}"));
                }
                Ok(())
            }
            (None, DeviceState::Rebuilding) => {
                if self.coherence.forget_in_rebuild_once(device.index) {
                    // Under the writer's lock: the rebuild installs its writer (and then
                    // writes its first header) only after this returns.
                    return self.forget_log(device);
                }
                Ok(())
            }
            // Faulted or removed: its log was emptied when it left (or is recorded).
            (None, _) => Ok(()),
        }
    }
}

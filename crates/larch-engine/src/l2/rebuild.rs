//! The rebuild of a cache device's index from its log, at open, in the device's feeder
//! thread: volumes serve (cold) meanwhile, and the device is neither read nor fed until
//! its rebuild ended. `larch_l2` walks and validates the log; this module puts what it
//! restored into the index under the coherence rules (see [`crate::coherence`], rule 3).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use larch_l2::{ArcState, Compression, ContentType, L2Device, RebuildOptions};
use larch_policy::BlockKey;

use super::index::{self, flags_of};
use super::{CacheDevice, DeviceState};
use crate::coherence::Tombstone;
use crate::engine::Engine;

impl Engine {
    /// Opens a device's log, restores its live entries into the L2 index, and puts it
    /// online. Entries of blocks written since the rebuild began, and entries past the
    /// index's memory cap, are tombstoned instead, in the commit that ends the rebuild.
    pub(crate) fn rebuild_device(&self, device: &Arc<CacheDevice>, pool_guid: u64) {
        let progress_device = Arc::clone(device);
        let mut progress = move |p: &larch_l2::RebuildProgress| {
            progress_device
                .rebuild_entries
                .store(p.entries, Ordering::Relaxed);
            let permille = (p.ring_bytes_walked.saturating_mul(1000))
                .checked_div(p.ring_bytes_total)
                .unwrap_or(1000)
                .min(1000);
            progress_device
                .rebuild_permille
                .store(permille, Ordering::Relaxed);
            std::ops::ControlFlow::Continue(())
        };
        let mut options = RebuildOptions {
            prefetch: true,
            max_entries: None,
            progress: Some(&mut progress),
        };
        let opened = L2Device::open(
            Arc::clone(device.dev()),
            Some((pool_guid, device.guid)),
            &mut options,
        );
        let (mut writer, outcome) = match opened {
            Ok(pair) => pair,
            Err(err) => {
                self.end_rebuild_faulted(device, format!("rebuild failed: {err}"));
                return;
            }
        };
        let geometry = writer.geometry();
        writer.set_track_records(false);
        if let Err(why) = index::fresh_index(&geometry) {
            self.end_rebuild_faulted(device, why);
            return;
        }
        let _ = device.geometry.set(geometry);
        // The index takes copies in ring order.
        let mut order: Vec<&larch_l2::RestoredEntry> = outcome.entries.iter().collect();
        order.sort_unstable_by_key(|r| r.ring_pos);
        let cap = self.l2_index_cap();
        {
            // Under the gate: no write changes a generation while entries go in, and the
            // writer is installed before any write can find an entry (rule 3).
            let _gate = self.coherence.gate();
            let written = self.coherence.written_during_rebuild();
            for mut shard in self.arc.shards() {
                shard.l2.attach(
                    device.index,
                    index::fresh_index(&geometry).expect("the geometry fits, checked above"),
                );
            }
            let mut over_cap = false;
            for (n, restored) in order.into_iter().enumerate() {
                let e = &restored.entry;
                if n % 16384 == 0 && !over_cap && self.arc.l2_index_bytes() >= cap {
                    over_cap = true;
                }
                let slot = self.volumes.slot_of(e.volume_guid);
                let key = slot.map(|slot| BlockKey::new(u64::from(slot), e.block_number));
                // A copy of an object-store block that another node committed since is
                // stale: not indexed (so tombstoned, as below).
                let psize = slot
                    .and_then(|slot| self.volumes.get(slot))
                    .filter(|v| !v.backing.cached_copy_stale(e.block_number))
                    .map(|v| v.info.block_len(e.block_number) as u32);
                // A copy the index cannot hold is tombstoned: only indexed copies are
                // tombstoned when their block is overwritten later.
                let mut indexed = false;
                if over_cap {
                    self.stats.l2_rebuild_lowmem.fetch_add(1, Ordering::Relaxed);
                } else if let (Some(key), Some(psize)) = (key, psize)
                    && !written.contains(&key)
                    && e.compression == Compression::Off
                    && e.logical_size == e.physical_size
                    && psize == e.physical_size
                {
                    let mut shard = self.arc.shard(&key);
                    let index_key = crate::arc::index_key(&key);
                    if !shard.l2.contains(index_key) {
                        let flags = flags_of(
                            e.arc_state == ArcState::Mfu,
                            e.prefetch,
                            e.content == ContentType::Metadata,
                        );
                        if let Some(d) = shard.l2.device_mut(device.index)
                            && d.push(index_key, restored.ring_pos, e.data_checksum, flags)
                        {
                            indexed = true;
                            let copy = d.get(index_key).expect("just pushed");
                            index::account(&copy, psize, &self.stats, true);
                        }
                    }
                }
                if !indexed {
                    self.coherence.queue_tombstone(
                        device.index,
                        Tombstone {
                            key: larch_l2::BlockKey {
                                volume_guid: e.volume_guid,
                                block_number: e.block_number,
                            },
                            generation: e.generation,
                        },
                    );
                    self.stats.l2_tombstones.fetch_add(1, Ordering::Relaxed);
                }
            }
            *device.writer() = Some(writer);
            *device.rebuild.lock() = Some(outcome.stats);
            device.set_state(DeviceState::Online);
            self.coherence.rebuild_ended();
        }
        // The commit that ends the rebuild: the tombstones queued above go out with the
        // device's first header since it was opened (unless a TXG got there first, which
        // commits them the same way). Under `feed_io`, so that no TXG writes a backing
        // store between a failed commit and the device's log being emptied.
        let _io = self.coherence.feed_io();
        if let Err(err) = self.commit_device_log(device) {
            let why = format!("tombstone write after rebuild failed: {err}");
            if let Err(why) = self.fault_device(device, why) {
                eprintln!("larch: {why}");
            }
        }
    }

    /// A rebuild that could not finish: the device is faulted and its log emptied, since
    /// writes made meanwhile were not tombstoned on it (rule 4).
    pub(crate) fn end_rebuild_faulted(&self, device: &CacheDevice, why: String) {
        {
            let _io = self.coherence.feed_io();
            if let Err(why) = self.fault_device(device, why) {
                eprintln!("larch: {why}");
            }
        }
        self.coherence.rebuild_ended();
    }
}

//! The feeder of a cache device: the I/O of the L2 feed. What a feed writes, in what
//! order and within which budget, and when the next one runs, is decided by
//! `larch_policy::feed` (the simulator runs the same functions); this module gathers the
//! blocks' bytes, writes the batch at the ring's write hand, drops the index entries the
//! evict hand uncovers before the batch overwrites them, and indexes the new copies under
//! the coherence rules (see [`crate::coherence`], rule 1).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use larch_l2::{ArcState, Compression, ContentType, Record};
use larch_policy::feed::{
    self, BudgetRules, FeedBudget, FeedPick, FeedRules, FeedTunables, PaceRules,
};
use larch_policy::{BufType, State};

use super::index::{self, READ};
use super::{CacheDevice, DeviceState, L2Arc};
use crate::arc::{SHARDS, index_key};
use crate::coherence::Tombstone;
use crate::tunables::Tunables;
use crate::volumes::info::{MIN_FED_PAGE_BYTES, is_map_page};

/// A block chosen for a feed, with its bytes and on-disk identity.
struct Candidate {
    pick: FeedPick,
    bytes: Bytes,
    volume_guid: u64,
}

impl L2Arc {
    /// The feeder thread's loop (after the device's rebuild): one feed per interval, as
    /// `larch_policy::feed::next_feed` paces it, until shutdown.
    pub(crate) fn feed_loop(&self, device: &Arc<CacheDevice>) {
        let mut wrote_bytes = 0u64;
        let mut unfed_seen = self.arc.unfed_evictions();
        let mut behind = false;
        while !self.life.is_shutting_down() {
            let t = &*self.tunables;
            let allowance = feed::write_allowance(&BudgetRules::from_tunables(t), self.arc.warm());
            let pace =
                feed::next_feed(&PaceRules::from_tunables(t), allowance, wrote_bytes, behind);
            self.life
                .sleep_unless_shutdown(Duration::from_millis(pace.wait_ms));
            // A removed device never comes back (a later add is a new device with a
            // feeder of its own): its feeder ends.
            if self.life.is_shutting_down() || device.state() == DeviceState::Removed {
                break;
            }
            wrote_bytes = match device.state() {
                // The L2ARC switch off: no feed (tombstones still go out with TXGs).
                DeviceState::Online if t.l2arc_enabled() => {
                    self.feed_once(device, pace.budget_bytes)
                }
                _ => 0,
            };
            // Blocks the feed would have written left the ARC before it came round.
            let unfed = self.arc.unfed_evictions();
            behind = unfed > unfed_seen;
            unfed_seen = unfed;
        }
    }

    /// One feed of at most `budget_bytes` to `device`: choose (the policy), copy, write,
    /// index. Returns the bytes of data written.
    pub(crate) fn feed_once(&self, device: &Arc<CacheDevice>, budget_bytes: u64) -> u64 {
        if self.l2_index_bytes_all() >= self.l2_index_cap() {
            // OpenZFS `l2arc_hdr_limit_reached`: no feed while the index is at its cap.
            self.stats
                .l2_hdr_limit_skips
                .fetch_add(1, Ordering::Relaxed);
            return 0;
        }
        // One feed at a time does I/O; from here on, writes are recorded so that this
        // feed's copies of blocks they overwrite are known to be stale (rule 1).
        let _io = self.coherence.feed_io();
        let watch = self.coherence.watch_feed();
        let (batch_limit, first_sweep) = match device.writer().as_ref() {
            Some(l2) => (
                feed::batch_data_limit(l2.max_batch_bytes()),
                l2.first_sweep(),
            ),
            None => return 0,
        };
        let rules = BudgetRules::from_tunables(&*self.tunables);
        let budget = FeedBudget::new(&rules, budget_bytes, batch_limit);
        let candidates = self.choose(&budget, batch_limit, first_sweep);
        if candidates.is_empty() {
            return 0;
        }
        let records: Vec<Record<'_>> = candidates.iter().map(record_of).collect();
        let started = Instant::now();
        let outcome = {
            let mut writer = device.writer();
            let Some(l2) = writer.as_mut() else {
                return 0;
            };
            // Tombstones queued for this device go into the same commit (rule 2).
            let queued = self.coherence.take_tombstones(device.index);
            // The evict hand moves first: index entries below its floor go before the
            // batch overwrites their records, so no reader is sent to overwritten space.
            let evict = |floor: u64| self.evict_below(device.index, floor);
            // The log is committed with the batch, so that a crash loses at most the
            // feed in flight (an open log block would otherwise wait for 1022 entries).
            let result = CacheDevice::append_tombstones(l2, &queued, evict)
                .and_then(|()| l2.write_batch_with(&records, evict))
                .and_then(|outcome| l2.commit_log_with(evict).map(|_| outcome));
            match result {
                Ok(outcome) => outcome,
                Err(err) if !l2.is_poisoned() => {
                    // Refused before anything was written (the plan did not fit): the
                    // device is fine; this feed is skipped. Appended tombstones stay in
                    // the writer's open block for its next commit.
                    self.stats.l2_writes_error.fetch_add(1, Ordering::Relaxed);
                    eprintln!("larch: feed of {} skipped: {err}", device.path.display());
                    return 0;
                }
                Err(err) => {
                    self.stats.l2_writes_error.fetch_add(1, Ordering::Relaxed);
                    drop(writer);
                    if let Err(why) = self.fault_device(device, format!("feed write failed: {err}"))
                    {
                        eprintln!("larch: {why}");
                    }
                    return 0;
                }
            }
        };
        let write_time = started.elapsed();
        self.stats.l2_writes_sent.fetch_add(1, Ordering::Relaxed);
        self.stats.l2_feeds.fetch_add(1, Ordering::Relaxed);
        let written = self.index_placements(device, &candidates, &outcome.placements, watch.take());
        self.stats
            .l2_write_bytes
            .fetch_add(written, Ordering::Relaxed);
        device.io.writes.fetch_add(1, Ordering::Relaxed);
        device.io.write_bytes.fetch_add(written, Ordering::Relaxed);
        device.io.write_latency.record(write_time);
        written
    }

    /// Chooses the blocks of a feed, shard by shard (each shard a 1/SHARDS share of the
    /// budget), with their bytes, and drops those a write changed since (the batch is
    /// written without the gate; what writes overwrite meanwhile is sorted out when it is
    /// indexed). `first_sweep`: the device has not filled once (`l2arc_admit` waits for
    /// it).
    fn choose(&self, budget: &FeedBudget, batch_limit: u64, first_sweep: bool) -> Vec<Candidate> {
        let mut rules = FeedRules::from_tunables(&*self.tunables).for_device(first_sweep);
        // `object_l2_prefetch`: the prefetched blocks of object volumes are fed, so that
        // `l2arc_noprefetch` is applied here, to the other volumes' blocks only. (A block
        // read around a miss comes with the miss's GET for free, and once evicted unfed
        // it costs a GET again; a stream read again from the store costs its GETs again.)
        let noprefetch_elsewhere = rules.noprefetch && self.tunables.object_l2_prefetch();
        if noprefetch_elsewhere {
            rules.noprefetch = false;
        }
        // Looked at before any shard is held (the volume table has a lock of its own).
        let object_slots: Vec<bool> = if noprefetch_elsewhere {
            (self.volumes.all().iter())
                .map(|v| v.backing.object().is_some())
                .collect()
        } else {
            Vec::new()
        };
        let on_object = |slot: u64| object_slots.get(slot as usize) == Some(&true);
        let share = budget.split(SHARDS as u64);
        let mut picks = Vec::new();
        let mut chosen: Vec<(FeedPick, Bytes)> = Vec::new();
        for shard in self.arc.shards() {
            picks.clear();
            feed::select(
                &shard.arc,
                &rules,
                &share,
                |info| {
                    shard.l2.contains(index_key(&info.key))
                        || shard.buf(&info.key).is_none()
                        || (noprefetch_elsewhere && info.prefetch && !on_object(info.key.volume))
                },
                &mut picks,
            );
            for pick in &picks {
                let bytes = shard.buf(&pick.key).expect("selected blocks are buffered");
                chosen.push((*pick, bytes.clone()));
            }
        }
        chosen
            .into_iter()
            .filter_map(|(pick, bytes)| {
                let current = self
                    .arc
                    .shard(&pick.key)
                    .arc
                    .info(&pick.key)
                    .is_some_and(|i| {
                        i.generation == pick.generation
                            && i.state.is_resident()
                            && i.state != State::Anon
                    });
                let volume = self.volumes.get(pick.key.volume as u16)?;
                let info = volume.info();
                // Not a block its volume caches on cache devices any more (see `purge`).
                let block = pick.key.block;
                let (whole, bytes) = if is_map_page(block) {
                    let full = bytes.len() >= MIN_FED_PAGE_BYTES;
                    (full, padded(&bytes, info.cached_len(block)))
                } else {
                    (bytes.len() == info.block_len(block), bytes)
                };
                (current && whole && info.keeps_on_devices(block)).then_some(Candidate {
                    pick,
                    bytes,
                    volume_guid: info.guid,
                })
            })
            // Map pages are written padded, larger than the policy counted them: the
            // batch stays within what the device takes.
            .scan(0usize, |total, candidate| {
                *total += candidate.bytes.len();
                (*total as u64 <= batch_limit).then_some(candidate)
            })
            .collect()
    }

    /// Drops device `index`'s entries below ring position `floor`: the evict hand passed
    /// them.
    pub(crate) fn evict_below(&self, device: u16, floor: u64) {
        for mut shard in self.arc.shards() {
            if let Some(d) = shard.l2.device_mut(device) {
                d.evict_below(floor, |index_key, copy| {
                    let psize = self.psize_of(index_key);
                    index::account(&copy, psize, &self.stats, false);
                    self.stats.l2_evicted.fetch_add(1, Ordering::Relaxed);
                    if copy.flags & READ == 0 {
                        self.stats
                            .l2_wasted_feed_bytes
                            .fetch_add(u64::from(psize), Ordering::Relaxed);
                    }
                });
            }
        }
    }

    /// Indexes a written batch under the gate: a copy whose block was written since it
    /// was chosen is stale, and is tombstoned instead (rule 1); so are a copy the index
    /// cannot hold (rule 0) and one its volume no longer wants (`purge`). Returns the bytes
    /// written.
    fn index_placements(
        &self,
        device: &CacheDevice,
        candidates: &[Candidate],
        placements: &[larch_l2::Placement],
        overwritten_since: HashSet<larch_policy::BlockKey>,
    ) -> u64 {
        let _gate = self.coherence.gate();
        let mut written = 0u64;
        for (candidate, placement) in candidates.iter().zip(placements) {
            let pick = &candidate.pick;
            let key = pick.key;
            let mut shard = self.arc.shard(&key);
            // Stale if written since it was chosen (evicted meanwhile is fine), or no
            // longer wanted on cache devices: its volume's `secondarycache` narrowed, or
            // the volume shrank below it (see `purge`; looked at under the gate, which
            // the purge holds).
            let current = !overwritten_since.contains(&key)
                && self.keeps_copy(key.volume as u16, key.block)
                && shard
                    .arc
                    .info(&key)
                    .is_none_or(|i| i.generation == pick.generation);
            let flags = index::flags_of(
                pick.state == State::Mfu,
                pick.prefetch,
                pick.buf_type == BufType::Metadata,
            );
            let indexed = current
                && shard.l2.device_mut(device.index).is_some_and(|d| {
                    let pushed = d.push(
                        index_key(&key),
                        placement.ring_pos,
                        placement.data_checksum,
                        flags,
                    );
                    if pushed {
                        let copy = d.get(index_key(&key)).expect("just pushed");
                        let psize = candidate.bytes.len() as u32;
                        index::account(&copy, psize, &self.stats, true);
                    }
                    pushed
                });
            drop(shard);
            if !indexed {
                // Logged but not indexed: a later overwrite would not tombstone it.
                self.coherence.queue_tombstone(
                    device.index,
                    Tombstone {
                        key: larch_l2::BlockKey {
                            volume_guid: candidate.volume_guid,
                            block_number: key.block,
                        },
                        generation: pick.generation,
                    },
                );
                self.stats.l2_tombstones.fetch_add(1, Ordering::Relaxed);
            }
            written += candidate.bytes.len() as u64;
        }
        written
    }
}

/// A block-map page's bytes followed by zeros up to `len`, the size of its copies on
/// cache devices (see `arc::map_pages`).
fn padded(page: &Bytes, len: usize) -> Bytes {
    let mut out = page.to_vec();
    out.resize(len.max(page.len()), 0);
    Bytes::from(out)
}

/// The feed's tunables, as `larch_policy::feed` reads them.
impl FeedTunables for Tunables {
    fn l2arc_write_max(&self) -> u64 {
        Tunables::l2arc_write_max(self)
    }
    fn l2arc_write_boost(&self) -> u64 {
        Tunables::l2arc_write_boost(self)
    }
    fn l2arc_headroom(&self) -> u64 {
        Tunables::l2arc_headroom(self)
    }
    fn l2arc_headroom_boost(&self) -> u64 {
        Tunables::l2arc_headroom_boost(self)
    }
    fn l2arc_feed_secs(&self) -> u64 {
        Tunables::l2arc_feed_secs(self)
    }
    fn l2arc_feed_min_ms(&self) -> u64 {
        Tunables::l2arc_feed_min_ms(self)
    }
    fn l2arc_feed_again(&self) -> bool {
        Tunables::l2arc_feed_again(self)
    }
    fn l2arc_feed_follow(&self) -> bool {
        Tunables::l2arc_feed_follow(self)
    }
    fn l2arc_noprefetch(&self) -> bool {
        Tunables::l2arc_noprefetch(self)
    }
    fn l2arc_nowrite(&self) -> bool {
        Tunables::l2arc_nowrite(self)
    }
    fn l2arc_mfuonly(&self) -> u64 {
        Tunables::l2arc_mfuonly(self)
    }
    fn l2arc_admit(&self) -> bool {
        Tunables::l2arc_admit(self)
    }
}

fn record_of(c: &Candidate) -> Record<'_> {
    let pick = &c.pick;
    Record {
        key: larch_l2::BlockKey {
            volume_guid: c.volume_guid,
            block_number: pick.key.block,
        },
        generation: pick.generation,
        bytes: &c.bytes,
        logical_size: c.bytes.len() as u32,
        compression: Compression::Off,
        content: if pick.buf_type == BufType::Metadata {
            ContentType::Metadata
        } else {
            ContentType::Data
        },
        arc_state: if pick.state == State::Mfu {
            ArcState::Mfu
        } else {
            ArcState::Mru
        },
        prefetch: pick.prefetch,
    }
}

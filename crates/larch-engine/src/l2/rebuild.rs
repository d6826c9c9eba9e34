//! The rebuild of a cache device's index from its log, at open, in the device's feeder
//! thread: volumes serve (cold) meanwhile, and the device is neither read nor fed until
//! its rebuild ended. `larch_l2` walks and validates the log; this module puts what it
//! restored into the index under the coherence rules (see [`crate::coherence`], rule 3).
//!
//! The rebuild streams: each entry goes into the index as the walk delivers it, newest
//! first, so nothing per entry is held besides the index itself. The per-shard indexes
//! ([`DeviceIndex`]) are built privately, in reverse ring order, and at first without
//! their hash tables ([`DeviceIndex::push_front_unindexed`]): appending 20-byte entries
//! is sequential memory, where a table lookup per entry is a cache miss or two (8M
//! entries: about 1 s of CPU). The tables are filled once, at the end, in their own
//! order ([`DeviceIndex::index_unindexed`]), which is also where two data copies of a
//! block are found (the newer stays, the older is dead and counted as superseded). A
//! compact set of 64-bit index keys holds the keys met but not indexed (tombstones, and
//! copies the index does not take), so that their older copies are superseded at once;
//! a copy the index does not take waits for the tables to learn whether a newer copy of
//! its block is indexed, and is tombstoned if not. When the index's cap is reached the
//! tables are built there and then, and every later entry is looked up as it comes. Only
//! the end holds the gate: it drops the copies of blocks written meanwhile, attaches the
//! indexes and installs the writer, as one step for every write (rule 3).
//!
//! One file: the rebuild is one flow, from the walk to the commit that ends it; about
//! half of the file is its tests, which drive whole rebuilds through devices that fail,
//! hold or record their I/O.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use larch_l2::{
    ArcState, Compression, ContentType, Geometry, L2Device, RebuildOptions, Seen, Sighting,
};
use larch_policy::BlockKey;
use larch_policy::shards::shard_of;

use super::index::{self, DeviceIndex, KeySet, PushFront, Tally, flags_of};
use super::{CacheDevice, DeviceState, L2Arc};
use crate::arc::{SHARDS, index_key};
use crate::coherence::Tombstone;
use crate::events::EventKind;
use crate::volumes::VolumeEntry;
use crate::volumes::info::is_map_page;

/// Entries met between two looks at the index's memory cap.
const CAP_CHECK_ENTRIES: u64 = 16384;

/// What an indexed entry costs, about: its 20 bytes and its share of the hash table.
const INDEX_BYTES_PER_ENTRY: u64 = 28;

/// Tombstones gathered before they are queued in one go.
const TOMBSTONE_BATCH: usize = 1024;

/// The index flags of a logged copy: MFU, prefetch, metadata as the feed recorded them.
fn entry_flags(e: &larch_l2::LogEntryPhys) -> u8 {
    flags_of(
        e.arc_state == ArcState::Mfu,
        e.prefetch,
        e.content == ContentType::Metadata,
    )
}

/// What the engine knows of a block a log entry names.
struct Block {
    key: BlockKey,
    /// The engine shard of the key.
    shard: u8,
    /// The block's size (the last block of a volume may be short).
    psize: u32,
    /// An object-store block that another node committed since this node took over.
    stale: bool,
    /// Its volume caches no data on cache devices (`secondarycache` is not `all`).
    uncached: bool,
}

/// A device's index while its rebuild builds it, not yet attached to the shards.
struct Restore<'e> {
    l2: &'e L2Arc,
    device: &'e CacheDevice,
    /// One index per engine shard, built newest first.
    shards: Vec<DeviceIndex>,
    /// Index keys met in the log but not in `shards`: tombstones, and copies the index
    /// did not take (over the cap, stale, not a whole uncompressed block, on another
    /// device). A key in neither has not been met yet.
    met: KeySet,
    /// Keys met that have no index key: a volume this engine does not know (when first
    /// asked), a block past its volume's end. Their copies are all tombstoned.
    met_foreign: HashSet<larch_l2::BlockKey>,
    /// Volumes by guid, as first looked up (a volume added during the rebuild is foreign
    /// to it: its copies are tombstoned, which is always safe).
    volumes: HashMap<u64, Option<Arc<VolumeEntry>>>,
    /// The volume looked up last (a log holds long runs of one volume's blocks).
    last_volume: (Option<u64>, Option<Arc<VolumeEntry>>),
    /// Tombstones not yet queued.
    tombstones: Vec<Tombstone>,
    /// The L2 size counters of the copies indexed, published when the index is attached.
    tally: Tally,
    /// Whether another device had an index when the rebuild began: a copy also indexed
    /// there is not indexed twice.
    others: bool,
    cap_bytes: u64,
    over_cap: bool,
    met_count: u64,
    /// The tables are not built yet: indexable copies only go into the queues.
    deferred: bool,
    /// Copies met while deferred that the index did not take.
    pending: Vec<Pending>,
    /// Corrections to the walk's counters that only the built tables, or the end, could
    /// tell.
    undone: Undone,
    geometry: Geometry,
    /// The purges when the rebuild began (see `l2::purge`): if any ran since, the attach
    /// drops the copies that their volumes no longer cache.
    purges: u64,
}

/// A copy met while the tables were not built that the index did not take.
struct Pending {
    key: larch_l2::BlockKey,
    generation: u64,
    ik: u64,
    shard: u8,
}

/// Corrections to the walk's counters: entries it counted as restored that were not
/// restored in the end (a newer copy found when the tables were built, a block written
/// during the rebuild), and entries answered [`Seen::Dropped`] that turned out superseded
/// by a newer indexed copy.
#[derive(Clone, Copy, Debug, Default)]
struct Undone {
    entries: u64,
    size: u64,
    asize: u64,
    superseded: u64,
}

impl Undone {
    /// A restored entry (a whole uncompressed block of `psize` bytes, as the index takes
    /// them) that is not restored after all.
    fn unrestore(&mut self, psize: u32, geometry: &Geometry) {
        self.entries += 1;
        self.size += u64::from(psize);
        self.asize += geometry.asize(u64::from(psize));
    }

    /// A restored entry found superseded by a newer copy.
    fn supersede(&mut self, psize: u32, geometry: &Geometry) {
        self.unrestore(psize, geometry);
        self.superseded += 1;
    }

    /// Takes the entries back from restored, and counts the superseded ones.
    fn correct(&self, stats: &mut larch_l2::RebuildStats) {
        stats.l2_rebuild_bufs -= self.entries;
        stats.l2_rebuild_size -= self.size;
        stats.l2_rebuild_asize -= self.asize;
        stats.l2_rebuild_superseded += self.superseded;
    }
}

impl<'e> Restore<'e> {
    /// A rebuild's index for `device`, whose log holds at most `logged` entries: each
    /// shard's table is sized once for its share of them, as far as the cap allows.
    fn new(
        l2: &'e L2Arc,
        device: &'e CacheDevice,
        geometry: &Geometry,
        logged: u64,
    ) -> Restore<'e> {
        let cap_bytes = l2.l2_index_cap();
        let room = cap_bytes.saturating_sub(l2.l2_index_bytes_all()) / INDEX_BYTES_PER_ENTRY;
        // A little over the even share: the shards' shares differ by a fraction of one.
        let per_shard = logged.min(room) / SHARDS as u64;
        let per_shard = (per_shard + per_shard / 64) as usize;
        let shards = (0..SHARDS)
            .map(|_| {
                let mut index =
                    index::fresh_index(geometry).expect("the geometry fits, checked before");
                index.reserve(per_shard);
                index
            })
            .collect();
        let others = l2
            .devices
            .all()
            .iter()
            .any(|d| d.index != device.index && d.state() == DeviceState::Online);
        Restore {
            l2,
            device,
            shards,
            met: KeySet::default(),
            met_foreign: HashSet::new(),
            volumes: HashMap::new(),
            last_volume: (None, None),
            tombstones: Vec::new(),
            tally: Tally::default(),
            others,
            cap_bytes,
            over_cap: false,
            met_count: 0,
            deferred: true,
            pending: Vec::new(),
            undone: Undone::default(),
            geometry: *geometry,
            purges: l2.coherence.purges(),
        }
    }

    /// An entry of a block this engine has no key for: its copies are tombstoned.
    fn sight_foreign(&mut self, sighting: Sighting<'_>) -> Seen {
        if !self.met_foreign.insert(sighting.key()) {
            return Seen::Again;
        }
        if sighting.ring_pos.is_none() {
            return Seen::First;
        }
        self.tombstone(sighting.key(), sighting.entry.generation);
        Seen::Dropped
    }

    /// An entry of a known block. One lookup in the index for the common case (a key met
    /// for the first time and indexed).
    fn sight_known(&mut self, sighting: Sighting<'_>, block: &Block) -> Seen {
        self.met_count += 1;
        if !self.over_cap && self.met_count.is_multiple_of(CAP_CHECK_ENTRIES) {
            self.check_cap();
        }
        let e = sighting.entry;
        let ik = index_key(&block.key);
        if self.met.contains(ik) {
            return Seen::Again;
        }
        let shard = usize::from(block.shard);
        if self.deferred {
            return self.sight_deferred(sighting, block, ik, shard);
        }
        let Some(ring_pos) = sighting.ring_pos else {
            // A tombstone: it hides the key's older copies.
            if self.shards[shard].contains(ik) {
                return Seen::Again;
            }
            self.met.insert(ik);
            return Seen::First;
        };
        if self.indexable(block, e) {
            let flags = entry_flags(e);
            match self.shards[shard].push_front_new(ik, ring_pos, e.data_checksum, flags) {
                PushFront::Indexed => {
                    self.tally.add(flags, block.psize);
                    return Seen::First;
                }
                PushFront::Present => return Seen::Again,
                PushFront::Refused => {}
            }
        } else if self.shards[shard].contains(ik) {
            return Seen::Again;
        }
        // A copy the index does not take is tombstoned: only indexed copies are
        // tombstoned when their block is overwritten later (rule 0).
        if self.over_cap {
            self.l2
                .stats
                .l2_rebuild_lowmem
                .fetch_add(1, Ordering::Relaxed);
        }
        self.met.insert(ik);
        self.tombstone(sighting.key(), e.generation);
        Seen::Dropped
    }

    /// An entry of a known block while the index's tables are not built: an indexable
    /// copy goes into the queue (its duplicates are found when the tables are built); any
    /// other key is remembered as met, and a copy the index does not take (dropped) waits
    /// to learn whether a newer copy of its block is indexed (then it is superseded) or
    /// not (then it is tombstoned).
    fn sight_deferred(
        &mut self,
        sighting: Sighting<'_>,
        block: &Block,
        ik: u64,
        shard: usize,
    ) -> Seen {
        let e = sighting.entry;
        let Some(ring_pos) = sighting.ring_pos else {
            self.met.insert(ik);
            return Seen::First;
        };
        if self.indexable(block, e) {
            let flags = entry_flags(e);
            if self.shards[shard].push_front_unindexed(ik, ring_pos, e.data_checksum, flags) {
                self.tally.add(flags, block.psize);
                return Seen::First;
            }
        }
        self.met.insert(ik);
        self.pending.push(Pending {
            key: sighting.key(),
            generation: e.generation,
            ik,
            shard: block.shard,
        });
        Seen::Dropped
    }

    /// Builds the index's hash tables from the queues (once): duplicates found there
    /// are dead and counted as superseded, and the copies not indexed meanwhile are
    /// superseded by a newer indexed copy of their block or tombstoned. From then on
    /// every entry is looked up as it comes.
    fn build_tables(&mut self) {
        if !self.deferred {
            return;
        }
        self.deferred = false;
        let l2 = self.l2;
        let geometry = self.geometry;
        let mut undone = Undone::default();
        let mut tally = self.tally;
        for index in &mut self.shards {
            index.index_unindexed(|key, copy| {
                let psize = l2.psize_of(key);
                tally.sub(copy.flags, psize);
                undone.supersede(psize, &geometry);
            });
        }
        self.tally = tally;
        for p in std::mem::take(&mut self.pending) {
            if self.shards[usize::from(p.shard)].contains(p.ik) {
                // Dropped when met, so never counted as restored.
                undone.superseded += 1;
            } else {
                self.tombstone(p.key, p.generation);
            }
        }
        self.undone = undone;
    }

    /// What the engine knows of a logged block: its key, size and staleness, if its
    /// volume is known (as first asked) and the block lies inside it.
    fn block_of(&mut self, guid: u64, block: u64) -> Option<Block> {
        if self.last_volume.0 != Some(guid) {
            let volumes = &self.l2.volumes;
            let volume = self
                .volumes
                .entry(guid)
                .or_insert_with(|| volumes.by_guid(guid))
                .clone();
            self.last_volume = (Some(guid), volume);
        }
        let volume = self.last_volume.1.as_ref()?;
        let info = volume.info();
        let key = info.key(block);
        let map_page = is_map_page(block);
        (block < info.blocks() || map_page).then(|| Block {
            key,
            shard: shard_of(&key) as u8,
            psize: info.cached_len(block) as u32,
            // A copy of an object-store block that another node committed since. (A map
            // page's copy names the page object it holds: the volume checks it when read.)
            stale: !map_page && volume.backing.cached_copy_stale(block),
            uncached: !info.keeps_on_devices(block),
        })
    }

    /// Whether the index takes this copy, its key aside: not over the cap, current, of a
    /// volume that caches its blocks on cache devices, a whole uncompressed block, and
    /// not indexed on another device already.
    fn indexable(&self, block: &Block, e: &larch_l2::LogEntryPhys) -> bool {
        !self.over_cap
            && !block.stale
            && !block.uncached
            && e.compression == Compression::Off
            && e.logical_size == e.physical_size
            && block.psize == e.physical_size
            && !(self.others
                && self
                    .l2
                    .arc
                    .shard(&block.key)
                    .l2
                    .contains(index_key(&block.key)))
    }

    /// Queues (in batches) a tombstone for a copy that is not indexed: only indexed
    /// copies are tombstoned when their block is overwritten later (rule 0).
    fn tombstone(&mut self, key: larch_l2::BlockKey, generation: u64) {
        self.tombstones.push(Tombstone { key, generation });
        if self.tombstones.len() >= TOMBSTONE_BATCH {
            self.queue_tombstones();
        }
    }

    fn queue_tombstones(&mut self) {
        let stats = &self.l2.stats;
        stats
            .l2_tombstones
            .fetch_add(self.tombstones.len() as u64, Ordering::Relaxed);
        for tombstone in self.tombstones.drain(..) {
            self.l2
                .coherence
                .queue_tombstone(self.device.index, tombstone);
        }
    }

    /// Bytes the index being built holds.
    fn index_bytes(&self) -> u64 {
        self.shards.iter().map(DeviceIndex::dram_bytes).sum()
    }

    /// Stops indexing once the L2 index of every device, this one's as built so far
    /// included, reaches the cap: the entries met from then on (older ones) are
    /// tombstoned.
    fn check_cap(&mut self) {
        let own = self.index_bytes();
        self.device
            .rebuild_index_bytes
            .store(own, Ordering::Relaxed);
        let l2 = self.l2;
        let all =
            own + l2.arc.l2_index_bytes() + l2.l2_index_bytes_building(Some(self.device.index));
        if all >= self.cap_bytes {
            self.over_cap = true;
            // The entries met from now on are looked up, not queued.
            self.build_tables();
        }
    }

    /// Under the gate: drops the copies of blocks written since the rebuild began (their
    /// tombstones are queued), attaches the indexes and publishes their counters. Returns
    /// the corrections to the walk's counters (what it counted as restored and was not).
    fn attach(mut self) -> Undone {
        self.build_tables();
        let written = self.l2.coherence.written_during_rebuild();
        // The generation that superseded a copy is not known here, only that it is at
        // most the newest one issued; a tombstone hides every older entry of its key
        // whatever its generation.
        let generation = self.l2.generations.newest();
        for key in written {
            let Some(volume) = self.l2.volumes.get(key.volume as u16) else {
                continue;
            };
            let shard = &mut self.shards[shard_of(&key)];
            if let Some(copy) = shard.remove(index_key(&key)) {
                let psize = volume.info().cached_len(key.block) as u32;
                self.tally.sub(copy.flags, psize);
                self.undone.unrestore(psize, &self.geometry);
                let on_disk = larch_l2::BlockKey {
                    volume_guid: volume.info().guid,
                    block_number: key.block,
                };
                self.tombstone(on_disk, generation);
            }
        }
        if self.l2.coherence.purges() != self.purges {
            self.drop_unwanted();
        }
        self.queue_tombstones();
        for (mut shard, index) in self.l2.arc.shards().zip(self.shards) {
            shard.l2.attach(self.device.index, index);
        }
        self.device.rebuild_index_bytes.store(0, Ordering::Relaxed);
        self.tally.apply(&self.l2.stats);
        self.undone
    }
}

impl Restore<'_> {
    /// Under the gate, at the attach, after a purge since the rebuild began: drops (and
    /// tombstones) the restored copies of blocks their volumes no longer cache on cache
    /// devices (`secondarycache` narrowed, or past a shrunk volume's end), which the
    /// purge could not find in an index not yet attached.
    fn drop_unwanted(&mut self) {
        let generation = self.l2.generations.newest();
        for i in 0..self.shards.len() {
            let l2 = self.l2;
            let keys = self.shards[i].live_keys_where(|key| {
                let (slot, block) = index::unpack_key(key);
                !l2.keeps_copy(slot, block)
            });
            for key in keys {
                let (slot, block) = index::unpack_key(key);
                let Some(copy) = self.shards[i].remove(key) else {
                    continue;
                };
                let psize = l2.psize_of(key);
                self.tally.sub(copy.flags, psize);
                self.undone.unrestore(psize, &self.geometry);
                if let Some(volume) = l2.volumes.get(slot) {
                    let on_disk = larch_l2::BlockKey {
                        volume_guid: volume.info().guid,
                        block_number: block,
                    };
                    self.tombstone(on_disk, generation);
                }
            }
        }
    }
}

impl larch_l2::Restorer for Restore<'_> {
    fn sight(&mut self, sighting: Sighting<'_>) -> Seen {
        let e = sighting.entry;
        match self.block_of(e.volume_guid, e.block_number) {
            Some(block) => self.sight_known(sighting, &block),
            None => self.sight_foreign(sighting),
        }
    }
}

impl L2Arc {
    /// Opens a device's log, restores its live entries into the L2 index, and puts it
    /// online. Entries of blocks written since the rebuild began, and entries past the
    /// index's memory cap, are tombstoned instead, in the commit that ends the rebuild.
    pub(crate) fn rebuild_device(&self, device: &Arc<CacheDevice>, pool_guid: u64) {
        let began = std::time::Instant::now();
        self.events.record(EventKind::RebuildStarted {
            device: device.path.display().to_string(),
        });
        let (geometry, header) = match self.rebuild_geometry(device, pool_guid) {
            Ok(found) => found,
            Err(why) => {
                self.end_rebuild_faulted(device, why);
                return;
            }
        };
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
        let logged = header
            .log_block_count
            .saturating_mul(u64::from(header.entries_per_block));
        let mut restore = Restore::new(self, device, &geometry, logged);
        let opened = L2Device::open_with(
            Arc::clone(device.dev()),
            Some((pool_guid, device.guid)),
            &mut options,
            &mut restore,
        );
        let (writer, end) = match opened {
            Ok(pair) => pair,
            Err(err) => {
                device.rebuild_index_bytes.store(0, Ordering::Relaxed);
                self.end_rebuild_faulted(device, format!("rebuild failed: {err}"));
                return;
            }
        };
        if writer.geometry() != geometry {
            device.rebuild_index_bytes.store(0, Ordering::Relaxed);
            let why = format!(
                "the ring changed during the rebuild: {:?}, then {:?}",
                geometry,
                writer.geometry()
            );
            self.end_rebuild_faulted(device, why);
            return;
        }
        let _ = device.geometry.set(geometry);
        if !end.stop.is_clean() {
            // A log block that could not be read or checked ends the walk early: the
            // entries behind it were neither indexed nor tombstoned, and the writer would
            // chain its next blocks onto them, so a later rebuild that reads that block
            // could serve copies written over meanwhile. The device's log is not kept
            // (rule 6: faulted and emptied), and the device comes back at once, empty,
            // as the next start would bring it (OpenZFS too keeps such a device in use).
            // The walk's counters still tell what it met (`l2_rebuild_cksum_lb_errors`...),
            // but nothing it met is restored.
            let mut stats = end.stats;
            stats.l2_rebuild_bufs = 0;
            stats.l2_rebuild_size = 0;
            stats.l2_rebuild_asize = 0;
            *device.rebuild.lock() = Some(stats);
            self.record_rebuild_end(device, &stats, began);
            device.rebuild_index_bytes.store(0, Ordering::Relaxed);
            let why = format!("rebuild stopped before the end of its log: {}", end.stop);
            self.end_rebuild_faulted(device, why);
            self.resume_emptied(device, pool_guid);
            return;
        }
        // The tables are built before the gate is taken: that is most of the indexing.
        restore.build_tables();
        if self.install_rebuilt(device, restore, writer, end) {
            if let Some(stats) = device.rebuild_stats() {
                self.record_rebuild_end(device, &stats, began);
            }
            self.end_rebuild_commit(device);
        }
    }

    /// Records the end of a device's rebuild, begun at `began`, with what it found.
    fn record_rebuild_end(
        &self,
        device: &CacheDevice,
        stats: &larch_l2::RebuildStats,
        began: std::time::Instant,
    ) {
        self.events.record(EventKind::RebuildEnded {
            device: device.path.display().to_string(),
            success: stats.l2_rebuild_success > 0,
            blocks: stats.l2_rebuild_bufs,
            log_blocks: stats.l2_rebuild_log_blks,
            errors: stats.l2_rebuild_io_errors + stats.l2_rebuild_cksum_lb_errors,
            ms: began.elapsed().as_millis() as u64,
        });
    }

    /// Puts a rebuilt index and its writer in use, under the gate: no write changes a
    /// generation while the index goes in, and the writer is installed before any write
    /// can find an entry (rule 3). False when the device was removed or faulted meanwhile.
    fn install_rebuilt(
        &self,
        device: &CacheDevice,
        restore: Restore<'_>,
        writer: super::Writer,
        mut end: larch_l2::RebuildEnd,
    ) -> bool {
        let _gate = self.coherence.gate();
        if device.state() != DeviceState::Rebuilding {
            // Removed (or faulted) while it was rebuilding: its log was emptied then,
            // and it must not come back to life with the rebuilt index and writer.
            // The tombstones the walk queued since are for that dead log, and no
            // writer will ever take them: they go too.
            device.rebuild_index_bytes.store(0, Ordering::Relaxed);
            self.coherence.drop_tombstones(device.index);
            self.coherence.rebuild_ended();
            return false;
        }
        // The counters say what was restored: the walk counted what the tables or
        // the writes since took back.
        restore.attach().correct(&mut end.stats);
        let mut writer = writer;
        let mut slot = device.writer();
        // Under the writer's lock, where a TXG empties the log of a device still
        // rebuilding (rule 2): if one did, the headers this writer writes point at
        // no log until the tombstones that make its log right again are all on the
        // device (revealed by the commit that ends the rebuild).
        if self.coherence.log_forgotten_in_rebuild(device.index) {
            writer.hide_log();
        }
        *slot = Some(writer);
        drop(slot);
        *device.rebuild.lock() = Some(end.stats);
        device.set_state(DeviceState::Online);
        self.coherence.rebuild_ended();
        true
    }

    /// The commit that ends a rebuild: the tombstones queued during it go out with the
    /// device's first header since it was opened (unless a TXG got there first, which
    /// commits them the same way). Under `feed_io`, so that no TXG writes a backing
    /// store between a failed commit and the device's log being emptied.
    fn end_rebuild_commit(&self, device: &CacheDevice) {
        let _io = self.coherence.feed_io();
        let committed = self.commit_device_log(device).and_then(|()| {
            device
                .writer()
                .as_mut()
                .map_or(Ok(()), |l2| l2.reveal_log())
        });
        if let Err(err) = committed {
            let why = format!("tombstone write after rebuild failed: {err}");
            if let Err(why) = self.fault_device(device, why) {
                eprintln!("larch: {why}");
            }
        }
    }

    /// The ring geometry of a device about to be rebuilt and the header it was added with
    /// (the walk reads and checks it again), or why its index cannot be built.
    fn rebuild_geometry(
        &self,
        device: &CacheDevice,
        pool_guid: u64,
    ) -> Result<(Geometry, larch_format::DevHeaderPhys), String> {
        let dev = device.dev();
        let known = *device.known_header.lock();
        let header = match known {
            Some(header) => header,
            None => {
                larch_l2::read_header(&**dev)
                    .map_err(|e| format!("rebuild failed: {e}"))?
                    .header
            }
        };
        let geometry =
            larch_l2::validate_header(&header, dev.len_bytes(), Some((pool_guid, device.guid)))
                .map_err(|e| format!("rebuild failed: {e}"))?;
        index::fresh_index(&geometry).map_err(|e| e.to_string())?;
        Ok((geometry, header))
    }

    /// Puts a device whose rebuild stopped early back in use, empty, once its log was
    /// emptied on the device (rule 6): its header then points at no log block, so a
    /// writer that resumes after it chains its blocks onto nothing, and no copy written
    /// before can be found by any later rebuild, as on a device formatted at runtime
    /// (rule 5). Left faulted when the log could not be emptied (the pool recorded that
    /// the device is to be formatted), when the device cannot be opened again, or when it
    /// was removed meanwhile.
    fn resume_emptied(&self, device: &CacheDevice, pool_guid: u64) {
        let emptied = device
            .known_header
            .lock()
            .is_some_and(|h| h.newest.iter().all(|p| p.is_null()))
            && !device.known_header_unsure.load(Ordering::Acquire);
        if !emptied {
            return;
        }
        let mut options = RebuildOptions {
            prefetch: false,
            max_entries: None,
            progress: None,
        };
        let opened = L2Device::open(
            Arc::clone(device.dev()),
            Some((pool_guid, device.guid)),
            &mut options,
        );
        let mut writer = match opened {
            Ok((writer, outcome)) if outcome.entries.is_empty() && outcome.stop.is_clean() => {
                writer
            }
            Ok((_, outcome)) => {
                eprintln!(
                    "larch: cache device {}: its emptied log still held {} entries (stopped at \
                     {}); left faulted",
                    device.path.display(),
                    outcome.entries.len(),
                    outcome.stop
                );
                return;
            }
            Err(err) => {
                eprintln!(
                    "larch: cache device {}: opening it again after emptying its log failed \
                     ({err}); left faulted",
                    device.path.display()
                );
                return;
            }
        };
        writer.set_track_records(false);
        let geometry = writer.geometry();
        if index::fresh_index(&geometry).is_err() {
            return;
        }
        // As a removal takes them: a device removed meanwhile stays removed.
        let _io = self.coherence.feed_io();
        let _gate = self.coherence.gate();
        if device.state() != DeviceState::Faulted {
            return;
        }
        for mut shard in self.arc.shards() {
            let fresh = index::fresh_index(&geometry).expect("the geometry fits, checked above");
            shard.l2.attach(device.index, fresh);
        }
        *device.writer() = Some(writer);
        *device.fault.lock() = None;
        device.set_state(DeviceState::Online);
        eprintln!(
            "larch: cache device {}: back in use, empty (its log was emptied)",
            device.path.display()
        );
        self.events.record(EventKind::CacheDeviceOnline {
            device: device.path.display().to_string(),
            why: "back in use, empty (its log was emptied after its rebuild stopped early)"
                .to_string(),
        });
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

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::{Duration, Instant};

    use larch_io::{BlockDevice, MemDevice};
    use larch_l2::{CreateOptions, LogEntryPhys, Record};

    use super::*;
    use crate::backing::{BackingStore, LatencyModel};
    use crate::engine::Engine;
    use crate::volumes::VolumeSpec;

    const POOL: u64 = 0x5ca1_0001;
    const DEVICE: u64 = 0x5ca1_0002;
    const VOLUME: u64 = 0x5ca1_0003;
    const BLOCK: u64 = 512;

    /// An engine with one volume of `blocks` blocks of 512 bytes, in memory.
    fn engine_with_volume(blocks: u64) -> Arc<Engine> {
        let engine = Engine::new(64 << 20);
        let dev = Arc::new(MemDevice::new(blocks * BLOCK));
        let store = BackingStore::on_device("volume", dev, LatencyModel::default());
        engine
            .add_volume(VolumeSpec::new(VOLUME, BLOCK as u32), Arc::new(store))
            .expect("one volume");
        engine
    }

    fn data(block: u64, generation: u64, ring_pos: u64) -> LogEntryPhys {
        LogEntryPhys {
            kind: larch_l2::EntryKind::Data,
            volume_guid: VOLUME,
            block_number: block,
            generation,
            daddr: 8192 + ring_pos,
            data_checksum: block ^ (generation << 32),
            logical_size: BLOCK as u32,
            physical_size: BLOCK as u32,
            compression: Compression::Off,
            content: ContentType::Data,
            arc_state: ArcState::Mru,
            prefetch: false,
        }
    }

    fn key(block: u64) -> BlockKey {
        BlockKey::new(0, block)
    }

    /// The copy of `block` in the index being built.
    fn built(restore: &Restore<'_>, block: u64) -> Option<index::Copy> {
        restore.shards[shard_of(&key(block))].get(index_key(&key(block)))
    }

    /// The copy of `block` in the engine's attached index of device 0.
    fn attached(engine: &Engine, block: u64) -> Option<index::Copy> {
        let mut shard = engine.arc.shard(&key(block));
        shard.l2.device_mut(0)?.get(index_key(&key(block)))
    }

    /// A cache device the engine does not know of (no I/O reaches it), and a geometry.
    fn device() -> (CacheDevice, Geometry) {
        let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(0));
        let device = CacheDevice::new(0, Path::new("mem"), DEVICE, dev, None);
        (
            device,
            Geometry::for_device(64 << 20, BLOCK).expect("geometry"),
        )
    }

    fn sight(restore: &mut Restore<'_>, entry: &LogEntryPhys) -> Seen {
        let ring_pos = (entry.kind == larch_l2::EntryKind::Data).then(|| entry.daddr - 8192);
        larch_l2::Restorer::sight(restore, Sighting { entry, ring_pos })
    }

    /// Newest first: the first entry of a key wins, a tombstone hides older copies, copies
    /// the index cannot take are tombstoned (and answered as dropped, not restored), and
    /// the index holds exactly the winners (once its tables are built).
    #[test]
    fn the_newest_entry_of_each_key_is_indexed_and_the_rest_tombstoned() {
        let engine = engine_with_volume(1000);
        let (device, geometry) = device();
        let mut restore = Restore::new(&engine.l2, &device, &geometry, 0);
        let pos = |n: u64| (1000 - n) * BLOCK;
        assert_eq!(sight(&mut restore, &data(1, 9, pos(0))), Seen::First);
        let tomb = LogEntryPhys::tombstone(VOLUME, 2, 8);
        assert_eq!(sight(&mut restore, &tomb), Seen::First);
        assert_eq!(sight(&mut restore, &data(2, 7, pos(1))), Seen::Again);
        // Two data copies: only the built tables tell (see the next test).
        assert_eq!(sight(&mut restore, &data(1, 6, pos(2))), Seen::First);
        let compressed = LogEntryPhys {
            compression: Compression::Lz4,
            physical_size: 100,
            ..data(3, 5, pos(3))
        };
        assert_eq!(sight(&mut restore, &compressed), Seen::Dropped);
        assert_eq!(sight(&mut restore, &data(3, 4, pos(4))), Seen::Again);
        let foreign = LogEntryPhys {
            volume_guid: VOLUME + 1,
            ..data(4, 3, pos(5))
        };
        assert_eq!(sight(&mut restore, &foreign), Seen::Dropped);
        assert_eq!(sight(&mut restore, &foreign), Seen::Again);
        let foreign_tomb = LogEntryPhys::tombstone(VOLUME + 1, 9, 3);
        assert_eq!(sight(&mut restore, &foreign_tomb), Seen::First);
        assert_eq!(sight(&mut restore, &data(1000, 3, pos(6))), Seen::Dropped);
        assert_eq!(sight(&mut restore, &data(5, 2, pos(7))), Seen::First);
        restore.build_tables();

        assert_eq!(built(&restore, 1).map(|c| c.ring_pos), Some(pos(0)));
        assert_eq!(built(&restore, 1).map(|c| c.checksum), Some(1 ^ (9 << 32)));
        assert_eq!(built(&restore, 5).map(|c| c.ring_pos), Some(pos(7)));
        for hidden in [2, 3, 4] {
            assert!(built(&restore, hidden).is_none(), "block {hidden}");
        }
        let live: usize = restore.shards.iter().map(DeviceIndex::live).sum();
        assert_eq!(live, 2);
        restore.shards.iter().for_each(DeviceIndex::check);
        // Tombstoned: the compressed copy, the foreign volume's, the block past the end;
        // not the tombstone's own key, nor superseded copies.
        let mut tombstoned: Vec<(u64, u64)> = restore
            .tombstones
            .iter()
            .map(|t| (t.key.volume_guid, t.key.block_number))
            .collect();
        tombstoned.sort_unstable();
        assert_eq!(
            tombstoned,
            vec![(VOLUME, 3), (VOLUME, 1000), (VOLUME + 1, 4)]
        );
        engine.shutdown();
    }

    /// Two data copies of a block with no tombstone between them: the walk answers both
    /// as first while the tables are not built; building them keeps the newer, marks the
    /// older dead and takes it back from the counters. An older copy the index would not
    /// take (answered as dropped: never counted as restored) is superseded by the newer
    /// indexed one, not tombstoned (a tombstone would hide the indexed copy at the next
    /// restart).
    #[test]
    fn duplicates_found_when_the_tables_are_built_are_superseded() {
        let engine = engine_with_volume(100);
        let (device, geometry) = device();
        let mut restore = Restore::new(&engine.l2, &device, &geometry, 0);
        let pos = |n: u64| (100 - n) * BLOCK;
        assert_eq!(sight(&mut restore, &data(1, 9, pos(0))), Seen::First);
        assert_eq!(sight(&mut restore, &data(2, 9, pos(1))), Seen::First);
        assert_eq!(sight(&mut restore, &data(1, 8, pos(2))), Seen::First);
        let compressed = LogEntryPhys {
            compression: Compression::Lz4,
            physical_size: 100,
            ..data(2, 7, pos(3))
        };
        assert_eq!(sight(&mut restore, &compressed), Seen::Dropped);
        assert_eq!(sight(&mut restore, &data(2, 6, pos(4))), Seen::Again);
        restore.build_tables();
        assert_eq!(built(&restore, 1).map(|c| c.ring_pos), Some(pos(0)));
        assert_eq!(built(&restore, 2).map(|c| c.ring_pos), Some(pos(1)));
        let live: usize = restore.shards.iter().map(DeviceIndex::live).sum();
        let queued: usize = restore.shards.iter().map(DeviceIndex::len).sum();
        assert_eq!(
            (live, queued),
            (2, 3),
            "the older copy of 1 is dead in place"
        );
        restore.shards.iter().for_each(DeviceIndex::check);
        assert!(restore.tombstones.is_empty(), "{:?}", restore.tombstones);
        // What the walk counted: the three entries answered first.
        let mut stats = larch_l2::RebuildStats {
            l2_rebuild_bufs: 3,
            l2_rebuild_size: 3 * BLOCK,
            l2_rebuild_asize: 3 * BLOCK,
            l2_rebuild_superseded: 1,
            ..Default::default()
        };
        restore.undone.correct(&mut stats);
        assert_eq!(stats.l2_rebuild_bufs, 2);
        assert_eq!(stats.l2_rebuild_superseded, 3);
        assert_eq!(stats.l2_rebuild_size, 2 * BLOCK);
        assert_eq!(stats.l2_rebuild_asize, 2 * BLOCK);
        assert_eq!(restore.tally.blocks(), 2);
        engine.shutdown();
    }

    /// The cap is looked at every `CAP_CHECK_ENTRIES` entries; from the first look that
    /// finds it reached, the (older) entries met are tombstoned and counted as lowmem.
    #[test]
    fn the_cap_reached_mid_walk_keeps_the_newest_entries() {
        let blocks = 2 * CAP_CHECK_ENTRIES;
        let engine = engine_with_volume(blocks);
        let (device, geometry) = device();
        let mut restore = Restore::new(&engine.l2, &device, &geometry, 0);
        restore.cap_bytes = 1;
        let indexed = CAP_CHECK_ENTRIES - 1;
        for n in 0..blocks {
            let block = (n * 7919) % blocks;
            let want = if n < indexed {
                Seen::First
            } else {
                Seen::Dropped
            };
            assert_eq!(
                sight(&mut restore, &data(block, 1, (blocks - n) * BLOCK)),
                want,
                "entry {n}"
            );
        }
        let live: u64 = restore.shards.iter().map(|s| s.live() as u64).sum();
        assert_eq!(live, indexed);
        assert_eq!(
            engine.stats.l2_rebuild_lowmem.load(Ordering::Relaxed),
            blocks - indexed
        );
        assert_eq!(
            (restore.tombstones.len() + engine.coherence.queued_tombstones()) as u64,
            blocks - indexed
        );
        for n in [0, indexed - 1] {
            let block = (n * 7919) % blocks;
            assert!(built(&restore, block).is_some(), "entry {n} is indexed");
        }
        for n in [indexed, blocks - 1] {
            let block = (n * 7919) % blocks;
            assert!(built(&restore, block).is_none(), "entry {n} is not");
        }
        restore.shards.iter().for_each(DeviceIndex::check);
        engine.shutdown();
    }

    /// Blocks written while the walk ran leave the index when it is attached, with a
    /// tombstone each, and are taken back from what the walk counted as restored; the
    /// rest is attached and counted.
    #[test]
    fn keys_written_during_the_rebuild_are_tombstoned_at_attach() {
        let engine = engine_with_volume(100);
        let (device, geometry) = device();
        engine.coherence.rebuild_began();
        let mut restore = Restore::new(&engine.l2, &device, &geometry, 0);
        for block in 0..10 {
            sight(&mut restore, &data(block, 1, (100 - block) * BLOCK));
        }
        {
            let _gate = engine.coherence.gate();
            engine.coherence.note_write(key(3));
            engine.coherence.note_write(key(50));
        }
        let generation = engine.l2.generations.fresh();
        let undone = {
            let _gate = engine.coherence.gate();
            let undone = restore.attach();
            engine.coherence.rebuild_ended();
            undone
        };
        assert_eq!((undone.entries, undone.size), (1, BLOCK), "block 3");
        assert_eq!(undone.superseded, 0);
        assert!(attached(&engine, 3).is_none());
        assert_eq!(attached(&engine, 4).map(|c| c.ring_pos), Some(96 * BLOCK));
        assert_eq!(engine.stats.l2_blocks.load(Ordering::Relaxed), 9);
        assert_eq!(engine.stats.l2_size.load(Ordering::Relaxed), 9 * BLOCK);
        let queued = engine.coherence.take_tombstones(0);
        assert_eq!(queued.len(), 1, "{queued:?}");
        assert_eq!(queued[0].key.block_number, 3);
        assert!(queued[0].generation >= generation);
        engine.shutdown();
    }

    /// A purge while a rebuild runs (`l2::purge`: a volume shrank, or stopped caching on
    /// cache devices) cannot find the copies of an index not yet attached: the attach drops
    /// them, counts them as not restored, and tombstones them. Copies met after the change
    /// are not restored at all.
    #[test]
    fn copies_their_volume_no_longer_caches_are_dropped_at_attach() {
        for narrowed in [false, true] {
            let engine = engine_with_volume(100);
            let vol = engine.volume(0).expect("the volume");
            let (device, geometry) = device();
            engine.coherence.rebuild_began();
            let mut restore = Restore::new(&engine.l2, &device, &geometry, 0);
            for block in 0..10 {
                sight(&mut restore, &data(block, 1, (100 - block) * BLOCK));
            }
            {
                let _gate = engine.coherence.gate();
                if narrowed {
                    vol.set_props(crate::volumes::VolumeProps {
                        secondarycache: crate::volumes::CacheMode::None,
                        ..vol.props()
                    });
                } else {
                    vol.set_size_bytes(6 * BLOCK);
                }
                engine.coherence.note_purge();
            }
            // Met after the change: block 20 is past the new end, or of a volume that
            // caches nothing on cache devices.
            assert_eq!(sight(&mut restore, &data(20, 1, 50 * BLOCK)), Seen::Dropped);
            let undone = {
                let _gate = engine.coherence.gate();
                let undone = restore.attach();
                engine.coherence.rebuild_ended();
                undone
            };
            let kept: Vec<u64> = (0..10)
                .filter(|&b| attached(&engine, b).is_some())
                .collect();
            let dropped = if narrowed { 0..10 } else { 6..10 };
            let expect: Vec<u64> = (0..10).filter(|b| !dropped.contains(b)).collect();
            assert_eq!(kept, expect, "narrowed: {narrowed}");
            let n = dropped.end - dropped.start;
            assert_eq!((undone.entries, undone.size), (n, n * BLOCK));
            assert_eq!(
                engine.stats.l2_blocks.load(Ordering::Relaxed),
                10 - n,
                "narrowed: {narrowed}"
            );
            let mut queued: Vec<u64> = (engine.coherence.take_tombstones(0).iter())
                .map(|t| t.key.block_number)
                .collect();
            queued.sort_unstable();
            let mut want: Vec<u64> = dropped.chain([20]).collect();
            want.sort_unstable();
            assert_eq!(queued, want, "narrowed: {narrowed}");
            engine.shutdown();
        }
    }

    /// Through the engine: a log of many small blocks where a block is cached twice (in
    /// different log blocks) and another is tombstoned; the rebuild indexes the newest
    /// copies only, and its end commits the tombstones of what it did not index.
    /// Block `block`'s bytes at `generation`, as the logged devices below hold them.
    fn bytes(block: u64, generation: u64) -> Vec<u8> {
        vec![(block + 16 * generation) as u8; 512]
    }

    /// A device of 4 MiB with a log of small blocks (4 entries each): blocks 0-19 at
    /// generation 1, then 5, 30 and 31 at 2, a tombstone of 7, and 32 at 4.
    fn logged_device() -> Arc<MemDevice> {
        let dev = Arc::new(MemDevice::new(4 << 20));
        let options = CreateOptions {
            pool_guid: POOL,
            device_guid: DEVICE,
            sector_bytes: BLOCK,
            entries_per_block: 4,
            chain_count: 2,
        };
        let mut l2 = L2Device::create(Arc::clone(&dev), &options).expect("create");
        let write = |l2: &mut L2Device<Arc<MemDevice>>, blocks: &[u64], generation: u64| {
            let payloads: Vec<Vec<u8>> = blocks.iter().map(|&b| bytes(b, generation)).collect();
            let records: Vec<Record<'_>> = blocks
                .iter()
                .zip(&payloads)
                .map(|(&block, payload)| Record {
                    key: larch_l2::BlockKey {
                        volume_guid: VOLUME,
                        block_number: block,
                    },
                    generation,
                    bytes: payload,
                    logical_size: BLOCK as u32,
                    compression: Compression::Off,
                    content: ContentType::Data,
                    arc_state: ArcState::Mfu,
                    prefetch: false,
                })
                .collect();
            l2.write_batch(&records).expect("batch");
        };
        write(&mut l2, &(0..20).collect::<Vec<_>>(), 1);
        write(&mut l2, &[5, 30, 31], 2);
        let key7 = larch_l2::BlockKey {
            volume_guid: VOLUME,
            block_number: 7,
        };
        l2.tombstone(key7, 3).expect("tombstone");
        write(&mut l2, &[32], 4);
        l2.commit_log().expect("commit");
        drop(l2);
        dev
    }

    #[test]
    fn a_device_rebuilt_through_the_engine_restores_the_newest_copies() {
        let engine = engine_with_volume(64);
        let dev = logged_device();

        let device = engine
            .add_cache_device_on(
                Arc::clone(&dev) as Arc<dyn BlockDevice>,
                Path::new("mem"),
                POOL,
                DEVICE,
                false,
            )
            .expect("add");
        let deadline = Instant::now() + Duration::from_secs(30);
        while device.state() == DeviceState::Rebuilding {
            assert!(Instant::now() < deadline, "the rebuild did not end");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(device.state(), DeviceState::Online);
        let stats = device.rebuild_stats().expect("stats");
        assert_eq!(stats.l2_rebuild_success, 1);
        assert_eq!(
            stats.l2_rebuild_bufs, 22,
            "blocks 0..20 but 7, and 30, 31, 32"
        );
        assert_eq!(stats.l2_rebuild_superseded, 2, "the old copies of 5 and 7");
        let checksum =
            |block: u64, generation: u64| larch_format::checksum(&bytes(block, generation));
        assert_eq!(
            attached(&engine, 5).map(|c| c.checksum),
            Some(checksum(5, 2))
        );
        assert_eq!(
            attached(&engine, 6).map(|c| c.checksum),
            Some(checksum(6, 1))
        );
        assert!(attached(&engine, 7).is_none());
        assert_eq!(engine.stats.l2_blocks.load(Ordering::Relaxed), 22);
        // What the log says now agrees with the index.
        let header = larch_l2::read_header(&*dev).expect("header").header;
        let outcome = larch_l2::rebuild(&*dev, &header, &mut RebuildOptions::default());
        let mut logged: Vec<u64> = outcome
            .entries
            .iter()
            .map(|r| r.entry.block_number)
            .collect();
        logged.sort_unstable();
        let mut want: Vec<u64> = (0..20).filter(|&b| b != 7).chain([30, 31, 32]).collect();
        want.sort_unstable();
        assert_eq!(logged, want);
        engine.shutdown();
    }

    /// The rebuild's counters (`l2_rebuild_bufs`, `_size`, `_asize`, and so the "restored
    /// N blocks" of the pool's history) count the copies it restored, which are the ones
    /// it indexed: not those of blocks the pool does not have (tombstoned instead), nor
    /// those of blocks written while it ran. Before, they counted every first entry of a
    /// key (a review's finding).
    #[test]
    fn the_rebuild_counts_the_copies_it_restored_and_no_others() {
        // Blocks 30, 31 and 32 of the log lie past the end of this volume.
        let engine = engine_with_volume(20);
        let dev = Rigged::new(logged_device(), usize::MAX, true);
        let device = add(&engine, Arc::clone(&dev));
        // The write comes once the walk has its header: a TXG that empties the log from
        // then on does not change what the walk reads.
        wait_for_walk(&dev);
        let vol = engine.volumes.get(0).expect("the volume");
        let written = crate::arc::BlockBuf::from_vec(vec![0xab; BLOCK as usize]);
        engine
            .write_blocks(&vol, &[(3, written)], false)
            .expect("write");
        dev.open();
        wait_for_rebuilds(&engine);
        assert_eq!(device.state(), DeviceState::Online);
        let restored = engine.stats.l2_blocks.load(Ordering::Relaxed);
        assert_eq!(restored, 18, "blocks 0..20 but 3 and 7");
        let stats = device.rebuild_stats().expect("stats");
        assert_eq!(stats.l2_rebuild_bufs, restored);
        assert_eq!(stats.l2_rebuild_size, restored * BLOCK);
        assert_eq!(stats.l2_rebuild_asize, restored * BLOCK);
        assert_eq!(stats.l2_rebuild_superseded, 2, "the old copies of 5 and 7");
        let arcstats: HashMap<String, u64> = engine.arcstats().into_iter().collect();
        assert_eq!(arcstats["l2_rebuild_bufs"], restored);
        assert_eq!(arcstats["l2_rebuild_size"], restored * BLOCK);
        engine.shutdown();
    }

    /// A device whose reads past its header slots fail from the `fail_from`-th on, and
    /// wait while `held`.
    struct Rigged {
        inner: Arc<MemDevice>,
        reads: std::sync::atomic::AtomicUsize,
        fail_from: usize,
        held: std::sync::Mutex<bool>,
        opened: std::sync::Condvar,
        /// The device as a crash right after each header write would leave it.
        at_headers: std::sync::Mutex<Vec<Vec<u8>>>,
        /// Reads that waited while `held`.
        waited: std::sync::atomic::AtomicUsize,
    }

    impl Rigged {
        fn new(inner: Arc<MemDevice>, fail_from: usize, held: bool) -> Arc<Rigged> {
            Arc::new(Rigged {
                inner,
                reads: Default::default(),
                fail_from,
                held: std::sync::Mutex::new(held),
                opened: Default::default(),
                at_headers: Default::default(),
                waited: Default::default(),
            })
        }

        fn open(&self) {
            *self.held.lock().unwrap() = false;
            self.opened.notify_all();
        }
    }

    impl BlockDevice for Rigged {
        fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), larch_io::IoError> {
            if offset_bytes >= 2 * larch_format::HEADER_SLOT_BYTES {
                let mut held = self.held.lock().unwrap();
                if *held {
                    self.waited.fetch_add(1, Ordering::SeqCst);
                }
                while *held {
                    held = self.opened.wait(held).unwrap();
                }
                drop(held);
                if self.reads.fetch_add(1, Ordering::SeqCst) >= self.fail_from {
                    return Err(larch_io::IoError::Os {
                        op: "read",
                        offset_bytes,
                        len_bytes: buf.len() as u64,
                        source: std::io::Error::other("injected read error"),
                    });
                }
            }
            self.inner.read_at(buf, offset_bytes)
        }
        fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), larch_io::IoError> {
            self.inner.write_at(buf, offset_bytes)?;
            if offset_bytes < 2 * larch_format::HEADER_SLOT_BYTES {
                self.at_headers.lock().unwrap().push(self.inner.snapshot());
            }
            Ok(())
        }
        fn flush(&self) -> Result<(), larch_io::IoError> {
            self.inner.flush()
        }
        fn len_bytes(&self) -> u64 {
            self.inner.len_bytes()
        }
        fn alignment_bytes(&self) -> u64 {
            self.inner.alignment_bytes()
        }
    }

    fn add(engine: &Arc<Engine>, dev: Arc<Rigged>) -> Arc<CacheDevice> {
        engine
            .add_cache_device_on(
                dev as Arc<dyn BlockDevice>,
                Path::new("mem"),
                POOL,
                DEVICE,
                false,
            )
            .expect("add")
    }

    /// Waits until the walk has read the device's header and waits for its first log
    /// block (what it walks is decided then, whatever happens to the log after).
    fn wait_for_walk(dev: &Rigged) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while dev.waited.load(Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline, "the walk never reached the log");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn wait_for_rebuilds(engine: &Engine) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while engine.coherence.rebuilds_running() > 0 {
            assert!(Instant::now() < deadline, "the rebuild did not end");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A log block that cannot be read ends the walk before the end of the log: the
    /// entries behind it were neither indexed nor tombstoned, so the log is not kept (a
    /// later walk that could read that block would bring back copies overwritten
    /// meanwhile): its log is emptied, and the device comes back in use at once, empty,
    /// with a writer that resumes after the emptied header (before, it stayed faulted, and
    /// unfed, until the next start: a tester's finding).
    #[test]
    fn a_walk_cut_short_by_a_read_error_empties_the_log_and_the_device_comes_back_empty() {
        let engine = engine_with_volume(64);
        let dev = Rigged::new(logged_device(), 2, false);
        let before = larch_l2::read_header(&*dev.inner).expect("header").header;
        let device = add(&engine, Arc::clone(&dev));
        wait_for_rebuilds(&engine);
        let deadline = Instant::now() + Duration::from_secs(30);
        while device.state() != DeviceState::Online {
            assert!(Instant::now() < deadline, "state {:?}", device.state());
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(device.fault(), None);
        assert!(device.writer().is_some(), "a writer was installed");
        let stats = device.rebuild_stats().expect("the walk's counters");
        assert!(
            stats.l2_rebuild_io_errors > 0,
            "the walk's counters say what stopped it"
        );
        assert_eq!(stats.l2_rebuild_bufs, 0, "and that nothing was restored");
        assert!(attached(&engine, 32).is_none(), "nothing of it is served");
        let header = larch_l2::read_header(&*dev.inner).expect("header").header;
        assert!(
            header.sequence > before.sequence,
            "the emptied log's header supersedes the old one: {} after {}",
            header.sequence,
            before.sequence
        );
        let outcome = larch_l2::rebuild(&*dev.inner, &header, &mut RebuildOptions::default());
        assert!(outcome.entries.is_empty(), "its log was emptied");
    }

    /// A device removed while its index is being rebuilt stays removed: the rebuild's end
    /// neither attaches its index nor puts it back online.
    #[test]
    fn a_device_removed_while_it_rebuilds_stays_removed() {
        let engine = engine_with_volume(64);
        let dev = Rigged::new(logged_device(), usize::MAX, true);
        let device = add(&engine, Arc::clone(&dev));
        assert_eq!(device.state(), DeviceState::Rebuilding);
        assert!(engine.remove_cache_device(device.index));
        dev.open();
        wait_for_rebuilds(&engine);
        assert_eq!(device.state(), DeviceState::Removed);
        assert!(device.writer().is_none(), "no writer was installed");
        assert!(attached(&engine, 32).is_none(), "no index was attached");
        let header = larch_l2::read_header(&*dev.inner).expect("header").header;
        let outcome = larch_l2::rebuild(&*dev.inner, &header, &mut RebuildOptions::default());
        assert!(outcome.entries.is_empty(), "its log stays emptied");
        // Its feeder thread ends (it held the last reference beside the pool's and ours).
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while Arc::strong_count(&device) > 2 {
            assert!(
                std::time::Instant::now() < deadline,
                "the removed device's feeder thread still runs"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The tombstones a rebuild queues (a batch at a time) for a device removed while it
    /// rebuilds are dropped at its end: no writer will take them. Before, they stayed
    /// queued until the pool closed (a review's finding).
    #[test]
    fn a_device_removed_while_it_rebuilds_leaves_no_tombstones_queued() {
        let engine = engine_with_volume(64);
        let inner = Arc::new(MemDevice::new(4 << 20));
        let options = CreateOptions {
            pool_guid: POOL,
            device_guid: DEVICE,
            sector_bytes: BLOCK,
            ..CreateOptions::default()
        };
        let mut l2 = L2Device::create(Arc::clone(&inner), &options).expect("create");
        // Copies of a volume the engine does not have: the walk tombstones each, more
        // than a batch of them.
        let payload = vec![7u8; BLOCK as usize];
        let foreign: Vec<u64> = (0..TOMBSTONE_BATCH as u64 + 100).collect();
        for blocks in foreign.chunks(256) {
            let records: Vec<Record<'_>> = blocks
                .iter()
                .map(|&block| Record {
                    key: larch_l2::BlockKey {
                        volume_guid: VOLUME + 1,
                        block_number: block,
                    },
                    generation: 1,
                    bytes: &payload,
                    logical_size: BLOCK as u32,
                    compression: Compression::Off,
                    content: ContentType::Data,
                    arc_state: ArcState::Mru,
                    prefetch: false,
                })
                .collect();
            l2.write_batch(&records).expect("batch");
        }
        l2.commit_log().expect("commit");
        drop(l2);
        let dev = Rigged::new(inner, usize::MAX, true);
        let device = add(&engine, Arc::clone(&dev));
        wait_for_walk(&dev);
        assert!(engine.remove_cache_device(device.index));
        dev.open();
        wait_for_rebuilds(&engine);
        assert_eq!(device.state(), DeviceState::Removed);
        assert!(
            engine.stats.l2_tombstones.load(Ordering::Relaxed) >= TOMBSTONE_BATCH as u64,
            "the walk queued a batch of tombstones after the removal"
        );
        assert_eq!(engine.coherence.queued_tombstones(), 0);
        engine.shutdown();
    }

    /// Writes during a rebuild make a TXG empty the device's log before it writes the
    /// backing store; the rebuild's end then tombstones the restored copies of those
    /// blocks, in several log blocks here (4 entries each). No header written from then
    /// on may point at a log that still holds one of those copies: a crash right after
    /// any of them (checked on the device as each left it) must restore none.
    #[test]
    fn no_header_brings_back_an_emptied_log_before_its_tombstones_are_on_the_device() {
        let engine = engine_with_volume(64);
        let dev = Rigged::new(logged_device(), usize::MAX, true);
        let device = add(&engine, Arc::clone(&dev));
        assert_eq!(device.state(), DeviceState::Rebuilding);
        // The walk has read the header and waits for its first log block.
        let deadline = Instant::now() + Duration::from_secs(30);
        while dev.waited.load(Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline, "the walk never reached the log");
            std::thread::sleep(Duration::from_millis(1));
        }
        let vol = engine.volumes.get(0).expect("the volume");
        let written: Vec<u64> = (0..14).collect();
        for &b in &written {
            // Sync writes: each waits for its TXG, which empties the log first (rule 2).
            engine
                .write_blocks(
                    &vol,
                    &[(b, crate::arc::BlockBuf::from_vec(vec![0xab; 512]))],
                    true,
                )
                .expect("write");
        }
        let before_end = dev.at_headers.lock().unwrap().len();
        assert!(before_end >= 1, "a TXG emptied the log during the rebuild");
        dev.open();
        wait_for_rebuilds(&engine);
        assert_eq!(device.state(), DeviceState::Online);
        // The shutdown waits for the rebuild's thread, whose end commit follows the
        // attach, and commits the log once more (that header is checked too).
        engine.shutdown();
        let snapshots = dev.at_headers.lock().unwrap().clone();
        assert!(
            snapshots.len() > before_end + 1,
            "the rebuild's end wrote several headers: {before_end} then {}",
            snapshots.len()
        );
        for (i, snapshot) in snapshots.iter().enumerate() {
            let crashed = MemDevice::from_bytes(snapshot.clone());
            let header = larch_l2::read_header(&crashed).expect("header").header;
            let outcome = larch_l2::rebuild(&crashed, &header, &mut RebuildOptions::default());
            let stale: Vec<u64> = outcome
                .entries
                .iter()
                .map(|r| r.entry.block_number)
                .filter(|b| written.contains(b))
                .collect();
            assert!(
                stale.is_empty(),
                "a crash after header write {i} of {} would restore copies of blocks written since: {stale:?}",
                snapshots.len()
            );
        }
        // And the log is back once its tombstones are: the copies not written over.
        let header = larch_l2::read_header(&*dev.inner).expect("header").header;
        let outcome = larch_l2::rebuild(&*dev.inner, &header, &mut RebuildOptions::default());
        assert!(
            outcome.entries.iter().any(|r| r.entry.block_number == 30),
            "the log was revealed at the end"
        );
    }
}

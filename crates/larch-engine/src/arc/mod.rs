//! The ARC in DRAM: the policy's headers, the buffers they describe, reads in flight and
//! the L2 index, in [`SHARDS`] shards so that a hit takes one of many locks, never a
//! global one.
//!
//! A shard is one `larch_policy::Arc` with 1/SHARDS of the ARC's target, the `Bytes`
//! buffer of every resident block, the misses being read ([`InFlight`]), and the shard's
//! part of the L2 index ([`ShardL2`]): blocks only on a cache device have no policy
//! header, only an index entry. Keys carry the volume's slot (see [`crate::volumes`]).
//!
//! **The ARC's bytes are its own.** A buffer is a block's bytes and nothing else, so the
//! bytes `size` counts are the bytes the ARC pins and `zfs_arc_max` bounds resident
//! memory. Blocks enter from the backing store and cache devices (buffers allocated for
//! the block) and from writes as a [`BlockBuf`], which can only be made by copying or
//! from a vector of exactly the block's length: a block written by a 32 MiB NBD request
//! must not keep the whole request alive (issue 14, defect 1).

mod flight;
mod install;
pub(crate) mod map_pages;
mod sizing;

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::BuildHasherDefault;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use larch_policy::shards::{shard_of, sum_kstats};
use larch_policy::{Access, Action, BlockKey, BufType, KeyHasher, State};

pub(crate) use sizing::{ArcSizer, TRIM_INTERVAL, limits as sizing_limits, release_free_memory};

pub use crate::system::default_dirty_data_max;
pub(crate) use flight::InFlight;
pub use flight::Served;
use install::{Install, Installs};
pub use sizing::{default_arc_min, set_free_memory_release};

use crate::l2::index::{ShardL2, pack_key};
use crate::lock::{Rank, RankedGuard, RankedMutex};
use crate::volumes::info::{CacheMode, VolumeInfo};

/// Shards of the ARC: each has its own lock, policy instance (with 1/SHARDS of the
/// target) and buffers (`larch_policy::shards`, which the simulator splits its ARC by too).
pub use larch_policy::shards::SHARDS;

/// Bytes of the zeros every zeroed block shares: the largest `volblocksize` (128 KiB).
pub const SHARED_ZEROS_BYTES: usize = 128 << 10;

/// The zeros zeroed blocks share: read-only, so its pages are the binary's and no
/// block holds a copy.
static SHARED_ZEROS: [u8; SHARED_ZEROS_BYTES] = [0; SHARED_ZEROS_BYTES];

/// The shared zeros ([`SHARED_ZEROS_BYTES`] of them), to write from.
pub(crate) fn shared_zeros() -> &'static [u8] {
    &SHARED_ZEROS
}

/// Whether `bytes` (a block or a piece of one) lies in the shared zeros: a zeroed block's
/// bytes, which a read may send as a run of zeros rather than as data.
pub fn is_shared_zeros(bytes: &[u8]) -> bool {
    let zeros = SHARED_ZEROS.as_ptr_range();
    let at = bytes.as_ptr();
    !bytes.is_empty() && zeros.start <= at && at < zeros.end
}

/// A block's bytes, owned: made by copying, or from a vector whose allocation is exactly
/// the block (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockBuf(Bytes);

impl BlockBuf {
    /// A copy of `bytes`.
    pub fn copy_from(bytes: &[u8]) -> BlockBuf {
        BlockBuf(Bytes::copy_from_slice(bytes))
    }

    /// `bytes` as they are, no copy. They must be a buffer of their own, not a slice of a
    /// larger one: the ARC counts a block's length, and a slice would keep the whole
    /// buffer alive (BENCHMARKS.md, "Issue 14": the heap past `zfs_arc_max`).
    pub(crate) fn from_own_bytes(bytes: Bytes) -> BlockBuf {
        BlockBuf(bytes)
    }

    /// The bytes of `vec`, its spare capacity given back first.
    pub fn from_vec(mut vec: Vec<u8>) -> BlockBuf {
        vec.shrink_to_fit();
        BlockBuf(Bytes::from(vec))
    }

    /// A block of `len` zeros: a slice of one buffer every zeroed block shares (see
    /// [`SHARED_ZEROS_BYTES`]), or a buffer of its own when the block is larger.
    pub fn zeros(len: usize) -> BlockBuf {
        match SHARED_ZEROS.get(..len) {
            Some(zeros) => BlockBuf(Bytes::from_static(zeros)),
            None => BlockBuf(Bytes::from(vec![0u8; len])),
        }
    }

    /// Whether it is a block made by [`BlockBuf::zeros`] from the shared buffer: a zeroed
    /// block (TRIM, WRITE_ZEROES) that takes no memory of its own.
    pub fn is_shared_zeros(&self) -> bool {
        is_shared_zeros(&self.0)
    }

    /// Its length.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The bytes.
    pub fn bytes(&self) -> &Bytes {
        &self.0
    }
}

impl std::ops::Deref for BlockBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

/// A table by block key, hashed as the policy hashes its keys (the keys of a shard's
/// blocks are in the policy's table already, so a keyed hash here would only cost time).
type KeyMap<V> = HashMap<BlockKey, V, BuildHasherDefault<KeyHasher>>;

/// One shard (see the module documentation).
pub(crate) struct Shard {
    /// The policy: headers, lists, targets.
    pub(crate) arc: larch_policy::Arc,
    /// The buffer of every resident block.
    bufs: KeyMap<Bytes>,
    /// Misses being read, which later readers of the block wait for. A read's flight
    /// stays here until its install is drained ([`install`]).
    inflight: KeyMap<Arc<InFlight>>,
    /// The shard's part of the L2 index.
    pub(crate) l2: ShardL2,
    /// Scratch for the policy's actions.
    actions: Vec<Action>,
    /// The policy evicted something at least once (OpenZFS `arc_warm`).
    evicted_any: bool,
    /// Bytes evicted from MRU and MFU whose blocks had a cache-device copy. The policy is
    /// not told of copies, so it counts them as `evict_l2_eligible`; arcstats moves them.
    evicted_l2_cached: [u64; 2],
}

/// What a reader does after looking in the cache.
pub(crate) enum Lookup {
    /// The block is in DRAM.
    Hit(Bytes),
    /// Another reader is reading it: wait for that read.
    Wait(Arc<InFlight>),
    /// Read it: from the cache device when `l2` says where, else from the backing store.
    Lead {
        flight: Arc<InFlight>,
        generation: u64,
        l2: Option<crate::l2::index::L2Loc>,
    },
}

impl Shard {
    fn new(arc: larch_policy::Arc) -> Shard {
        Shard {
            arc,
            bufs: KeyMap::default(),
            inflight: KeyMap::default(),
            l2: ShardL2::default(),
            actions: Vec::new(),
            evicted_any: false,
            evicted_l2_cached: [0; 2],
        }
    }

    /// Carries out what the policy decided: frees evicted buffers. (The policy is never
    /// told of cache-device copies, so it asks for no L2 invalidation.)
    fn apply_actions(&mut self) {
        for action in self.actions.drain(..) {
            if let Action::Evict { key, from, .. } = action {
                let freed = self.bufs.remove(&key).map_or(0, |b| b.len() as u64);
                self.evicted_any = true;
                let state = match from {
                    State::Mru => 0,
                    State::Mfu => 1,
                    _ => continue,
                };
                if self.l2.contains(index_key(&key)) {
                    self.evicted_l2_cached[state] += freed;
                }
            }
        }
    }

    /// Runs a policy operation and applies its actions.
    pub(crate) fn with_policy<R>(
        &mut self,
        op: impl FnOnce(&mut larch_policy::Arc, &mut Vec<Action>) -> R,
    ) -> R {
        let result = op(&mut self.arc, &mut self.actions);
        self.apply_actions();
        result
    }

    /// The buffer of a resident block.
    pub(crate) fn buf(&self, key: &BlockKey) -> Option<&Bytes> {
        self.bufs.get(key)
    }

    /// The lookup of a read (one lock hold): a hit counts in the policy; a miss either
    /// joins the read in flight or leads a new one, with the generation the block will
    /// have (its header's, or `fresh`) and the L2 copy to read if there is one.
    pub(crate) fn lookup(&mut self, access: Access, fresh: impl FnOnce() -> u64) -> Lookup {
        let key = access.key;
        if let Some(buf) = self.bufs.get(&key).cloned() {
            let generation = self
                .arc
                .info(&key)
                .expect("buffered blocks have headers")
                .generation;
            let access = Access {
                generation,
                ..access
            };
            let outcome = self.with_policy(|arc, actions| arc.access(&access, actions));
            debug_assert!(outcome.is_hit(), "{key:?} buffered but {outcome:?}");
            return Lookup::Hit(buf);
        }
        if let Some(flight) = self.inflight.get(&key) {
            if !access.prefetch {
                flight.join_demand();
            }
            return Lookup::Wait(Arc::clone(flight));
        }
        let generation = self
            .arc
            .info(&key)
            .map(|i| i.generation)
            .unwrap_or_else(fresh);
        let l2 = self.l2.get_for_read(index_key(&key));
        let flight = Arc::new(InFlight::new());
        self.inflight.insert(key, Arc::clone(&flight));
        Lookup::Lead {
            flight,
            generation,
            l2,
        }
    }

    /// The read `flight` leaves the table of reads in flight, if it is still there (a
    /// write may have taken it out, and another read of the block may lead since).
    pub(crate) fn end_flight(&mut self, key: &BlockKey, flight: &Arc<InFlight>) {
        if let Entry::Occupied(found) = self.inflight.entry(*key)
            && Arc::ptr_eq(found.get(), flight)
        {
            found.remove();
        }
    }

    /// Puts the bytes of the read `flight` in the ARC (the flight has left the table),
    /// unless a write overtook the read or the block is buffered already.
    fn install(&mut self, access: &Access, flight: &InFlight, bytes: Bytes) {
        let key = access.key;
        if flight.invalidated() || self.bufs.contains_key(&key) {
            return;
        }
        self.with_policy(|arc, actions| arc.access(access, actions));
        if access.prefetch && flight.demand_joined() {
            // Joins happen under this shard's lock, and the flight has left the table.
            self.arc.demand_joined(&key);
        }
        if self.arc.info(&key).is_some_and(|i| i.state.is_resident()) {
            self.bufs.insert(key, bytes);
        }
    }

    /// A write makes `data` the new contents of `key` with `generation`, dirty: a read in
    /// flight is invalidated (its bytes are older) and the buffer replaced.
    pub(crate) fn write(&mut self, key: BlockKey, generation: u64, data: &BlockBuf, now_ms: u64) {
        if let Some(flight) = self.inflight.remove(&key) {
            flight.invalidate();
        }
        self.with_policy(|arc, actions| {
            arc.write(
                key,
                generation,
                data.len() as u32,
                BufType::Data,
                now_ms,
                actions,
            )
        });
        self.bufs.insert(key, data.0.clone());
    }

    /// The backing-store write of `generation` completed: the block is clean (and, for a
    /// volume whose ARC use is restricted or a `zeroed` block, dropped: the store holds
    /// nothing there to cache).
    pub(crate) fn write_done(
        &mut self,
        vol: &VolumeInfo,
        key: BlockKey,
        generation: u64,
        zeroed: bool,
        now_ms: u64,
    ) {
        let l2cache = !zeroed && vol.secondarycache == CacheMode::All;
        let keep = !zeroed && vol.primarycache == CacheMode::All;
        self.with_policy(|arc, actions| {
            if arc.write_done(&key, generation, l2cache, now_ms, actions) && !keep {
                arc.remove(&key, actions);
            }
        });
    }

    /// The backing-store write of `generation` failed: its bytes are nowhere else, so the
    /// cache must not keep them either.
    pub(crate) fn write_failed(&mut self, key: BlockKey, generation: u64) {
        if self
            .arc
            .info(&key)
            .is_some_and(|i| i.generation == generation)
        {
            self.with_policy(|arc, actions| arc.remove(&key, actions));
            self.bufs.remove(&key);
        }
    }

    /// Bytes evicted that could have gone to a cache device and had no copy there.
    pub(crate) fn unfed_evictions(&self) -> u64 {
        let [mru, mfu] = self.evicted_l2_cached;
        self.arc.stats().evict_l2_eligible.saturating_sub(mru + mfu)
    }

    /// Drops block `key` (a block another node changed on a store this node follows): a
    /// read of it in flight is invalidated (its bytes will not be installed) and a resident
    /// copy leaves the policy and its buffer is freed. A dirty one is kept (a follower's
    /// volume has none). Returns whether a copy was dropped.
    pub(crate) fn drop_block(&mut self, key: &BlockKey) -> bool {
        if let Some(flight) = self.inflight.get(key) {
            flight.invalidate();
        }
        if !self.bufs.contains_key(key) {
            return false;
        }
        if self.arc.info(key).is_some_and(|i| i.state == State::Anon) {
            return false;
        }
        let removed = self.with_policy(|arc, actions| arc.remove(key, actions));
        debug_assert!(removed, "{key:?} is held");
        self.bufs.remove(key);
        true
    }

    /// Drops the blocks `blocks` of volume `slot` (see [`ArcCache::drop_blocks`]): reads
    /// in flight are invalidated (their bytes will not be installed), resident blocks
    /// leave the policy and their buffers are freed, dirty ones too unless `keep_dirty`.
    /// Returns the blocks dropped and the dirty ones met.
    fn drop_blocks(
        &mut self,
        slot: u16,
        blocks: &std::ops::Range<u64>,
        keep_dirty: bool,
    ) -> (u64, u64) {
        let ours = |key: &BlockKey| key.volume == u64::from(slot) && blocks.contains(&key.block);
        for (_, flight) in self.inflight.iter().filter(|(key, _)| ours(key)) {
            flight.invalidate();
        }
        let keys: Vec<BlockKey> = self.bufs.keys().filter(|key| ours(key)).copied().collect();
        let (mut dropped, mut dirty_met) = (0, 0);
        for key in keys {
            let dirty = self.arc.info(&key).is_some_and(|i| i.state == State::Anon);
            dirty_met += u64::from(dirty);
            if dirty && keep_dirty {
                continue;
            }
            let removed = self.with_policy(|arc, actions| arc.remove(&key, actions));
            // Nothing holds policy headers in the engine: a remove always succeeds.
            debug_assert!(removed, "{key:?} is held");
            self.bufs.remove(&key);
            dropped += 1;
        }
        (dropped, dirty_met)
    }
}

/// The L2 index key of an in-memory key (whose volume part is the slot).
pub(crate) fn index_key(key: &BlockKey) -> u64 {
    pack_key(key.volume as u16, key.block)
}

/// One shard's lock, and the installs waiting for it.
struct Slot {
    shard: RankedMutex<Shard>,
    installs: Installs,
}

/// The shards, and the clock policy operations are stamped with.
pub(crate) struct ArcCache {
    slots: Box<[Slot]>,
    started: Instant,
}

impl ArcCache {
    /// An ARC of at most `c_max_bytes` (each shard a 1/SHARDS part) that never shrinks
    /// below `c_min_bytes` under pressure.
    pub(crate) fn new(c_min_bytes: u64, c_max_bytes: u64) -> ArcCache {
        let cfg = larch_policy::shards::shard_config(c_min_bytes, c_max_bytes);
        let slots = (0..SHARDS)
            .map(|_| {
                let arc = larch_policy::Arc::new(cfg.clone())
                    .expect("limits of at least one byte per shard are valid");
                Slot {
                    shard: RankedMutex::new(Rank::Shard, Shard::new(arc)),
                    installs: Installs::default(),
                }
            })
            .collect();
        ArcCache {
            slots,
            started: Instant::now(),
        }
    }

    /// Milliseconds since the engine started: the policy's clock.
    pub(crate) fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// The shard of `key`, locked, with the installs queued for it applied.
    pub(crate) fn shard(&self, key: &BlockKey) -> RankedGuard<'_, Shard> {
        self.lock(&self.slots[shard_of(key)])
    }

    /// Takes a shard's lock and applies the installs queued for it first ([`install`]):
    /// whoever holds the lock sees every read that ended in the ARC.
    fn lock<'a>(&self, slot: &'a Slot) -> RankedGuard<'a, Shard> {
        let mut shard = slot.shard.lock();
        if !slot.installs.is_empty() {
            slot.installs.drain(&mut shard);
        }
        shard
    }

    /// Ends the read `flight` led, without its shard's lock: queues the install of its
    /// bytes (`None`: the read failed), which the next holder of the lock applies (see
    /// [`install`]). The caller completes the flight after this.
    pub(crate) fn finish_read(&self, access: Access, flight: Arc<InFlight>, data: Option<Bytes>) {
        let install = Install {
            access,
            flight,
            data,
        };
        self.slots[shard_of(&access.key)].installs.push(install);
    }

    /// Applies the installs queued for every shard (the ARC sizer's pass does, so that
    /// none waits for long in a shard nothing else locks).
    pub(crate) fn drain_installs(&self) {
        for slot in self.slots.iter().filter(|s| !s.installs.is_empty()) {
            drop(self.lock(slot));
        }
    }

    /// Bytes of ended reads waiting in the shards' queues to enter the ARC.
    pub(crate) fn install_queued_bytes(&self) -> u64 {
        self.slots.iter().map(|s| s.installs.queued_bytes()).sum()
    }

    /// `key`'s bytes if they are in DRAM (dirty blocks always are), without counting an
    /// access.
    pub(crate) fn buf_of(&self, key: &BlockKey) -> Option<Bytes> {
        self.shard(key).buf(key).cloned()
    }

    /// Whether `key` is dirty in the ARC with bytes other than a zeroed block's (which read
    /// as zeros), without counting an access: bytes the backing store does not hold yet (a
    /// clean block is what the store holds).
    pub(crate) fn holds_dirty_data(&self, key: &BlockKey) -> bool {
        let shard = self.shard(key);
        let dirty = (shard.arc.info(key)).is_some_and(|i| i.state == State::Anon);
        dirty && shard.buf(key).is_some_and(|buf| !is_shared_zeros(buf))
    }

    /// Every shard, one at a time (each with its queued installs applied).
    pub(crate) fn shards(&self) -> impl Iterator<Item = RankedGuard<'_, Shard>> {
        self.slots.iter().map(|s| self.lock(s))
    }

    /// The access a read of `key` in `vol` makes.
    pub(crate) fn access_of(
        &self,
        vol: &VolumeInfo,
        key: BlockKey,
        generation: u64,
        prefetch: bool,
    ) -> Access {
        Access {
            key,
            generation,
            size_bytes: vol.block_bytes,
            buf_type: BufType::Data,
            prefetch,
            l2cache: vol.secondarycache == CacheMode::All,
            uncached: vol.primarycache != CacheMode::All,
            now_ms: self.now_ms(),
        }
    }

    /// Drops the blocks `blocks` of volume `slot` from every shard (its data blocks are
    /// below [`crate::volumes::info::MAP_PAGE_KEYS`], its map pages from there on): a volume that no
    /// longer caches its blocks in DRAM (`primarycache` narrowed: `keep_dirty`, they are
    /// dropped once synced) or whose tail is cut off (a shrink: the caller made sure none
    /// is dirty). Reads of them in flight are invalidated, so none is installed after
    /// this returns; a read that starts later looks at the volume's size and properties
    /// again before it installs (`Reader`). Returns the blocks dropped and the dirty
    /// blocks met (kept, or dropped too).
    pub(crate) fn drop_blocks(
        &self,
        slot: u16,
        blocks: std::ops::Range<u64>,
        keep_dirty: bool,
    ) -> (u64, u64) {
        self.shards().fold((0, 0), |(dropped, kept), mut shard| {
            let (d, k) = shard.drop_blocks(slot, &blocks, keep_dirty);
            (dropped + d, kept + k)
        })
    }

    /// Whether the ARC has evicted anything yet (OpenZFS `arc_warm`).
    pub(crate) fn warm(&self) -> bool {
        self.shards().any(|s| s.evicted_any)
    }

    /// Bytes evicted that were eligible for a cache device and had no copy there (what
    /// the feed missed, plus blocks it skips: prefetched, written).
    pub(crate) fn unfed_evictions(&self) -> u64 {
        self.shards().map(|s| s.unfed_evictions()).sum()
    }

    /// Bytes of data the ARC holds (`size`) and of what describes it: its headers
    /// (`hdr_size`), the reuse sketches of `l2arc_admit` (`reuse_sketch_bytes`) and, under
    /// the larch policy, MFU's admission sketches (`mfu_sketch_bytes`).
    pub(crate) fn size_and_headers(&self) -> (u64, u64) {
        self.shards().fold((0, 0), |(size, headers), s| {
            (
                size + s.arc.size(),
                headers
                    + (larch_policy::Policy::tracked_headers(&s.arc) * larch_policy::HEADER_BYTES)
                        as u64
                    + s.arc.reuse_sketch_bytes()
                    + s.arc.mfu_sketch_bytes(),
            )
        })
    }

    /// Blocks with a live copy on cache device `device`.
    pub(crate) fn l2_blocks_on(&self, device: u16) -> u64 {
        self.shards().map(|s| s.l2.live_on(device)).sum()
    }

    /// DRAM held by the L2 index (`l2_hdr_size`).
    pub(crate) fn l2_index_bytes(&self) -> u64 {
        self.shards().map(|s| s.l2.dram_bytes()).sum()
    }

    /// The policy's kstats summed over the shards (fractions and flags averaged), with
    /// evictions of blocks that had a cache-device copy moved from `evict_l2_eligible*`
    /// to `evict_l2_cached`.
    pub(crate) fn kstats(&self) -> Vec<(String, u64)> {
        let mut l2_cached = [0u64; 2];
        let mut sums = sum_kstats(self.shards().map(|shard| {
            l2_cached[0] += shard.evicted_l2_cached[0];
            l2_cached[1] += shard.evicted_l2_cached[1];
            shard.arc.kstats()
        }));
        let cached = l2_cached[0] + l2_cached[1];
        for (name, value) in sums.iter_mut() {
            match name.as_str() {
                "meta" | "pd" | "pm" | "arc_no_grow" => *value /= SHARDS as u64,
                "evict_l2_cached" => *value += cached,
                "evict_l2_eligible" => *value = value.saturating_sub(cached),
                "evict_l2_eligible_mru" => *value = value.saturating_sub(l2_cached[0]),
                "evict_l2_eligible_mfu" => *value = value.saturating_sub(l2_cached[1]),
                _ => {}
            }
        }
        sums
    }
}

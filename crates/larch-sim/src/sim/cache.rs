//! The cache of a simulated pool: the daemon's ARC, split into the same shards, with the
//! same policy code (`larch_policy`), an index of the blocks on each cache device, the
//! feed's choices and ring arithmetic from `larch_policy::feed` and `larch_policy::ring`,
//! and the dirty data of the TXG cycle. Device I/O goes to the device models, which answer
//! when it completes; nothing here waits. The primary storage's disks may hold an I/O until
//! they choose to serve it: its blocks are then in flight with no time yet, a read that
//! needs them names them ([`SimCache::take_awaited`]), and [`SimCache::settle`] gives them
//! their times once the disks decide.
//!
//! What the engine does and this model does the same way: a read finds its block in the
//! ARC (a hit), joins a read of it in flight, or reads it from a cache device whose index
//! has a copy (when the L2ARC switch is on) or from the primary storage, and the block
//! enters the ARC through the policy; a write dirties the block, drops its cache-device
//! copy, and waits on the throttle's curve; a TXG writes the dirty blocks to the primary
//! storage every `zfs_txg_timeout` (or sooner past `zfs_dirty_data_sync_percent`), after
//! which they are clean MRU blocks; a feed per cache device chooses blocks with
//! `larch_policy::feed::select` over every shard (each a share of the budget), places them
//! with the device's `RingSpace`, drops the index entries the evict hand passes, writes the
//! batch as one sequential I/O and indexes the copies when it completes (unless the block
//! was written meanwhile).
//!
//! Memory pressure, with a server model (`Run`'s, in the parent module): a feed's buffers
//! take their bytes from an ARC at its maximum ([`SimCache::take_room`]); dirty data is in
//! the ARC's size already, as anonymous buffers.
//!
//! What it leaves out, and why: cache-device log blocks and headers (a few hundred bytes
//! per 1,022 records: within the noise of a feed's write), I/O errors, rebuilds (a
//! simulated pool starts cold or prewarmed), the intent log (writes are asynchronous), and
//! CPU time, checksums included, which the server model prices per reply
//! ([`crate::device::Server`]) rather than here.

use std::collections::VecDeque;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use larch_policy::feed::{self, BudgetRules, FeedBudget, FeedPick, FeedRules, PaceRules};
use larch_policy::ring::RingSpace;
use larch_policy::shards::{SHARDS, shard_config, shard_of, sum_kstats};
use larch_policy::{Access, Action, Arc, BlockInfo, BlockKey, BufType, State};

use super::block_map::BlockMap;
use super::config::SimTunables;
use super::metadata::{
    IndirectTree, MAP_PAGE_BLOCKS, MAP_PAGE_BYTES, MetadataModel, VolumeMetadata,
};
use crate::device::{Device, IoId, IoKind, Nanos, Queued};

/// The volume's id in block keys (the simulation has one volume).
const VOLUME: u64 = 0;
/// The cache devices' allocation unit.
const SECTOR_BYTES: u64 = 4096;
/// Bytes the engine's L2 index holds per block: 20 for the entry, 4 for its hash slot
/// (larch-engine's `l2::index`).
pub const LARCH_L2_ENTRY_BYTES: u64 = 24;
/// Bytes OpenZFS's ARC holds per block only on a cache device (seed 002: "96 bytes per
/// block (reclaimed from ARC)").
pub const OPENZFS_L2_HDR_BYTES: u64 = 96;
/// Bytes OpenZFS's ARC holds per block in DRAM, header and buffer descriptors (seed 002:
/// "256 bytes per block (still in ARC also)").
pub const OPENZFS_ARC_HDR_BYTES: u64 = 256;

/// Where a read was served from (as the engine's `Served`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    /// The ARC.
    Arc = 0,
    /// A cache device.
    L2 = 1,
    /// The primary storage.
    Primary = 2,
}

/// The blocks a TXG writes, each with its write count when it was dirtied.
pub type TxgBlocks = Vec<(u64, u64)>;

/// A block being read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Inflight {
    /// It is there at this time, from this source.
    At(Nanos, Source),
    /// The primary storage holds the read (a disk reordering its queue has not yet chosen
    /// when to serve it).
    Held(IoId),
    /// The read waits for its indirect blocks: the chain of that number issues it.
    Chained(u64),
}

/// What a read waits for besides the time it was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Wait {
    /// A read the primary storage holds.
    Io(IoId),
    /// Data reads waiting for their indirect blocks ([`SimCache::run_chain`] issues them).
    Chain(u64),
}

/// Data blocks whose read waits for their indirect blocks to arrive.
#[derive(Clone, Copy, Debug)]
struct Chain {
    first: u64,
    count: u64,
    prefetch: bool,
    /// The latest arrival known so far.
    at: Nanos,
    /// Indirect reads the primary storage still holds.
    held: usize,
    /// Where the slowest of its indirect blocks came from.
    source: Source,
}

/// An I/O the primary storage holds, for what follows once its time is decided.
#[derive(Clone, Copy, Debug)]
struct HeldIo {
    kind: IoKind,
    at_ns: Nanos,
    bytes: u64,
    /// The blocks a read brings in: first and count.
    blocks: Option<(u64, u64)>,
    /// Whether it is part of the syncing TXG.
    txg: bool,
}

/// A copy on a cache device: the device, its ring position, whether a read used it, in
/// one word (the index holds one per block fed: 61M of them for seed 000 at full size).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct L2Entry(u64);

impl L2Entry {
    /// Bits of the ring position: a device's write hand passes 32 PiB before it needs more.
    const POS_BITS: u32 = 55;
    const READ: u64 = 1 << Self::POS_BITS;
    const DEVICE_SHIFT: u32 = Self::POS_BITS + 1;

    fn new(device: usize, pos: u64) -> L2Entry {
        assert!(
            pos < Self::READ && device <= usize::from(u8::MAX),
            "a copy on device {device} at {pos}: beyond the index's bits"
        );
        L2Entry((device as u64) << Self::DEVICE_SHIFT | pos)
    }

    fn device(self) -> usize {
        (self.0 >> Self::DEVICE_SHIFT) as usize
    }

    fn pos(self) -> u64 {
        self.0 & (Self::READ - 1)
    }

    /// Whether a read used the copy.
    fn read(self) -> bool {
        self.0 & Self::READ != 0
    }

    fn mark_read(&mut self) {
        self.0 |= Self::READ;
    }
}

/// A batch a feed is writing: what gets indexed when it completes.
struct FeedBatch {
    device: usize,
    picks: Vec<(u64, u64, u64)>, // (block, write count when chosen, ring position)
}

/// One cache device: its model, ring and the order its copies were written in.
pub struct L2Device {
    /// Its name in reports (`cache0`, ...).
    pub name: String,
    /// The model.
    pub model: Box<dyn Device>,
    ring: RingSpace,
    order: VecDeque<(u64, u64)>, // (ring position, block)
    /// Live copies on it.
    pub blocks: u64,
    /// Bytes of those copies.
    pub bytes: u64,
    /// Reads served.
    pub reads: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Feed batches written.
    pub writes: u64,
    /// Bytes of data written by feeds.
    pub write_bytes: u64,
    /// When its next feed runs.
    pub next_feed_ns: Nanos,
    budget_bytes: u64,
    wrote_last: u64,
    unfed_seen: u64,
    feeding: bool,
}

/// Counters of the cache, cumulative (the recorder turns them into rates).
#[derive(Clone, Copy, Debug, Default)]
pub struct CacheCounters {
    /// Block reads served from the ARC.
    pub arc_hits: u64,
    /// Block reads that were not.
    pub arc_misses: u64,
    /// Misses served from a cache device.
    pub l2_hits: u64,
    /// Misses, with cache devices in use, served from the primary storage.
    pub l2_misses: u64,
    /// Reads that joined a read in flight.
    pub iohits: u64,
    /// Bytes the feeds wrote.
    pub l2_write_bytes: u64,
    /// Copies the evict hands overwrote.
    pub l2_evicted: u64,
    /// Bytes of copies overwritten without ever being read.
    pub l2_wasted_bytes: u64,
    /// TXGs synced.
    pub txg_syncs: u64,
    /// Blocks TXGs wrote.
    pub txg_blocks: u64,
    /// Bytes the primary storage read.
    pub primary_read_bytes: u64,
    /// Reads it served (merged I/Os).
    pub primary_reads: u64,
    /// Bytes it wrote.
    pub primary_write_bytes: u64,
    /// Writes it served (merged I/Os).
    pub primary_writes: u64,
    /// Prefetch reads issued.
    pub prefetches: u64,
    /// Writes the throttle delayed or blocked.
    pub throttled: u64,
    /// Metadata blocks (indirect blocks or map pages) read (missed in the ARC), from a cache
    /// device or the primary storage.
    pub indirect_reads: u64,
    /// Of those, read from a cache device.
    pub indirect_l2_reads: u64,
    /// Bytes of metadata blocks TXGs wrote (every copy).
    pub indirect_write_bytes: u64,
}

/// A read or write of device `device` (`None`: the primary storage) that took
/// `latency_ns`, for the recorder.
#[derive(Clone, Copy, Debug)]
pub struct DeviceIo {
    /// The cache device, or `None` for the primary storage.
    pub device: Option<usize>,
    /// Read or write.
    pub kind: IoKind,
    /// When it was submitted.
    pub at_ns: Nanos,
    /// How long it took.
    pub latency_ns: Nanos,
    /// Its bytes.
    pub bytes: u64,
}

/// The pool's cache.
pub struct SimCache {
    shards: Vec<Arc>,
    /// The cache devices' copies, by block.
    l2: BlockMap<L2Entry>,
    /// The cache devices.
    pub devices: Vec<L2Device>,
    /// The primary storage.
    pub primary: Box<dyn Device>,
    inflight: HashMap<u64, Inflight>,
    /// The primary storage's I/Os it holds, by its id.
    held: HashMap<IoId, HeldIo>,
    /// What the last [`SimCache::read`] waits for besides its time.
    awaited: Vec<Wait>,
    /// The volume's metadata, when a metadata model is on.
    metadata: Option<VolumeMetadata>,
    /// Data reads waiting for indirect blocks, by number.
    chains: HashMap<u64, Chain>,
    next_chain: u64,
    /// The chains waiting for each held indirect read.
    chain_waits: HashMap<IoId, Vec<u64>>,
    /// Chains whose indirect blocks are all there, with that time, to be run.
    ready: Vec<(Nanos, u64)>,
    /// I/Os decided out of turn (a writer at the dirty limit needed the TXG's end), for the
    /// simulator to hand to their waiters.
    drained: Vec<(IoId, Nanos)>,
    /// Parts of the syncing TXG still held.
    sync_parts_held: usize,
    /// Whether the syncing TXG's end became known when its last held part was decided.
    sync_decided: bool,
    writes: HashMap<u64, u64>,
    batches: HashMap<u64, FeedBatch>,
    in_batch: HashSet<u64>,
    next_batch: u64,
    actions: Vec<Action>,
    picks: Vec<FeedPick>,
    /// Each shard's picks while a feed chooses (`feed::select_shards`), kept between feeds.
    shard_picks: Vec<Vec<FeedPick>>,
    /// Counters.
    pub counters: CacheCounters,
    /// Device I/O since the recorder last took it.
    pub ios: Vec<DeviceIo>,
    block_bytes: u32,
    /// The tunables.
    pub tunables: SimTunables,
    /// The L2ARC switch.
    pub l2_enabled: bool,
    warm: bool,
    unfed_bytes: u64,
    dirty: Vec<(u64, u64)>,
    dirty_bytes: u64,
    syncing_bytes: u64,
    sync_done_ns: Nanos,
    /// When the last delayed write was let go: the next waits its delay after it, so the
    /// delay paces all writers together (OpenZFS `dp_last_wakeup`, as the engine does).
    last_wakeup_ns: Nanos,
    dirty_max: u64,
}

fn key(block: u64) -> BlockKey {
    BlockKey::new(VOLUME, block)
}

impl SimCache {
    /// DRAM of the shards' reuse sketches (`l2arc_admit`).
    pub fn reuse_sketch_bytes(&self) -> u64 {
        self.shards.iter().map(Arc::reuse_sketch_bytes).sum()
    }
}

impl L2Device {
    /// Bytes of the feed batch it was last given (0 if its last feed wrote nothing).
    pub fn batch_bytes(&self) -> u64 {
        self.wrote_last
    }
}

impl SimCache {
    /// A cold cache of `arc_max_bytes` over `primary`, with `devices` as cache devices.
    pub fn new(
        arc_max_bytes: u64,
        block_bytes: u32,
        primary: Box<dyn Device>,
        devices: Vec<(String, Box<dyn Device>, u64)>,
        tunables: SimTunables,
    ) -> SimCache {
        // As the engine: zfs_arc_min defaults to max(32M, max/32), at most the maximum.
        let arc_min = arc_max_bytes.min((32 << 20u64).max(arc_max_bytes / 32));
        let cfg = larch_policy::ArcConfig {
            policy: tunables.arc_policy,
            ..shard_config(arc_min, arc_max_bytes)
        };
        let l2_bytes: u64 = devices.iter().map(|(_, _, capacity)| *capacity).sum();
        let window = larch_policy::reuse::shard_window_blocks(
            arc_max_bytes,
            l2_bytes,
            u64::from(block_bytes),
            SHARDS as u64,
        );
        let shards = (0..SHARDS)
            .map(|_| {
                let mut arc =
                    Arc::new(cfg.clone()).expect("shard limits of at least one byte are valid");
                if tunables.l2arc_admit {
                    arc.set_reuse_window(window);
                }
                arc
            })
            .collect();
        let devices = devices
            .into_iter()
            .map(|(name, model, capacity)| {
                // The whole device is ring: the engine's `larch_l2::Geometry` keeps two
                // 4 KiB header slots before it, which the simulator does not model (a
                // batch limit, a quarter of the ring, 2 KiB larger on devices of GiBs).
                let ring_bytes = (capacity / SECTOR_BYTES * SECTOR_BYTES).max(SECTOR_BYTES * 16);
                L2Device {
                    name,
                    model,
                    ring: RingSpace::new(ring_bytes, SECTOR_BYTES),
                    order: VecDeque::new(),
                    blocks: 0,
                    bytes: 0,
                    reads: 0,
                    read_bytes: 0,
                    writes: 0,
                    write_bytes: 0,
                    next_feed_ns: 0,
                    budget_bytes: 0,
                    wrote_last: 0,
                    unfed_seen: 0,
                    feeding: false,
                }
            })
            .collect();
        let dirty_max = tunables.dirty_data_max.min(arc_max_bytes / 2).max(1);
        SimCache {
            shards,
            l2: BlockMap::default(),
            devices,
            primary,
            inflight: HashMap::default(),
            held: HashMap::default(),
            awaited: Vec::new(),
            metadata: None,
            chains: HashMap::default(),
            next_chain: 0,
            chain_waits: HashMap::default(),
            ready: Vec::new(),
            drained: Vec::new(),
            sync_parts_held: 0,
            sync_decided: false,
            writes: HashMap::default(),
            batches: HashMap::default(),
            in_batch: HashSet::default(),
            next_batch: 0,
            actions: Vec::new(),
            picks: Vec::new(),
            shard_picks: Vec::new(),
            counters: CacheCounters::default(),
            ios: Vec::new(),
            block_bytes,
            tunables,
            l2_enabled: true,
            warm: false,
            unfed_bytes: 0,
            dirty: Vec::new(),
            dirty_bytes: 0,
            syncing_bytes: 0,
            sync_done_ns: 0,
            last_wakeup_ns: 0,
            dirty_max,
        }
    }

    /// Turns the metadata model on for a volume of `volume_blocks` blocks: reads that miss
    /// look up and read its indirect blocks first, TXGs write the ones above what they
    /// write ([`super::metadata`]). Off, every block is data, as in the daemon.
    pub fn model_indirect_blocks(&mut self, volume_blocks: u64) {
        self.model_metadata(MetadataModel::IndirectBlocks, volume_blocks);
    }

    /// Turns metadata model `model` on (or off) for a volume of `volume_blocks` blocks:
    /// ZFS's indirect blocks ([`SimCache::model_indirect_blocks`]), or a larch object
    /// volume's block-map pages, which a read of the store looks up first
    /// ([`super::metadata`]).
    pub fn model_metadata(&mut self, model: MetadataModel, volume_blocks: u64) {
        self.metadata = VolumeMetadata::new(
            model,
            volume_blocks,
            self.block_bytes,
            self.tunables.indblkshift,
        );
    }

    /// The indirect blocks' tree, when the indirect-block model is on.
    pub fn indirect_tree(&self) -> Option<&IndirectTree> {
        match &self.metadata {
            Some(VolumeMetadata::Indirect(tree)) => Some(tree),
            _ => None,
        }
    }

    /// The volume's metadata, when a metadata model is on.
    pub fn metadata(&self) -> Option<&VolumeMetadata> {
        self.metadata.as_ref()
    }

    /// Whether `block` is metadata.
    fn is_metadata(&self, block: u64) -> bool {
        self.metadata.as_ref().is_some_and(|m| m.is_metadata(block))
    }

    /// Bytes of `block`, data or metadata.
    fn size_of(&self, block: u64) -> u32 {
        match &self.metadata {
            Some(m) => m.size_bytes(block),
            None => self.block_bytes,
        }
    }

    /// Where `block` lies on the primary storage.
    fn offset_of(&self, block: u64) -> u64 {
        match &self.metadata {
            Some(m) => m.offset(block),
            None => block * u64::from(self.block_bytes),
        }
    }

    /// Whether `block` is in DRAM (an access would hit).
    fn resident(&self, block: u64) -> bool {
        let key = key(block);
        self.shards[shard_of(&key)]
            .info(&key)
            .is_some_and(|i| i.state.is_resident())
    }

    fn primary_io(&mut self, now: Nanos, kind: IoKind, offset: u64, bytes: u64) -> Queued {
        let queued = self
            .primary
            .queue(now, kind, offset, bytes.min(u64::from(u32::MAX)) as u32);
        match kind {
            IoKind::Read => {
                self.counters.primary_reads += 1;
                self.counters.primary_read_bytes += bytes;
            }
            IoKind::Write => {
                self.counters.primary_writes += 1;
                self.counters.primary_write_bytes += bytes;
            }
        }
        match queued {
            Queued::Done(done) => self.ios.push(DeviceIo {
                device: None,
                kind,
                at_ns: now,
                latency_ns: done - now,
                bytes,
            }),
            Queued::Held(id) => {
                let held = HeldIo {
                    kind,
                    at_ns: now,
                    bytes,
                    blocks: None,
                    txg: false,
                };
                self.held.insert(id, held);
            }
        }
        queued
    }

    /// Decides the primary storage's services that start by `until` (all of them for
    /// `Nanos::MAX`): the blocks they read are there at their times, the TXG's end is known
    /// once its last part is; appends each decided I/O and its time to `decided`, for the
    /// requests waiting on it.
    pub fn settle(&mut self, until: Nanos, decided: &mut Vec<(IoId, Nanos)>) {
        let first = decided.len();
        self.primary.decide(until, decided);
        for &(id, at) in &decided[first..] {
            let held = self
                .held
                .remove(&id)
                .expect("the primary storage decides only I/Os it was given");
            self.ios.push(DeviceIo {
                device: None,
                kind: held.kind,
                at_ns: held.at_ns,
                latency_ns: at - held.at_ns,
                bytes: held.bytes,
            });
            if let Some((start, n)) = held.blocks {
                for block in start..start + n {
                    if let Some(entry) = self.inflight.get_mut(&block)
                        && *entry == Inflight::Held(id)
                    {
                        *entry = Inflight::At(at, Source::Primary);
                    }
                }
            }
            for c in self.chain_waits.remove(&id).unwrap_or_default() {
                let chain = self
                    .chains
                    .get_mut(&c)
                    .expect("a chain waits until it runs");
                chain.at = chain.at.max(at);
                chain.held -= 1;
                if chain.held == 0 {
                    self.ready.push((chain.at, c));
                }
            }
            if held.txg {
                self.sync_done_ns = self.sync_done_ns.max(at);
                self.sync_parts_held -= 1;
                self.sync_decided = self.sync_parts_held == 0;
            }
        }
    }

    /// What the last [`SimCache::read`] must wait for besides its time, each once.
    pub fn take_awaited(&mut self) -> Vec<Wait> {
        self.awaited.sort_unstable();
        self.awaited.dedup();
        std::mem::take(&mut self.awaited)
    }

    /// The I/Os decided out of turn since the last call.
    pub fn take_drained(&mut self) -> Vec<(IoId, Nanos)> {
        std::mem::take(&mut self.drained)
    }

    /// When the syncing TXG is on disk, if that became known since the last call.
    pub fn take_sync_decided(&mut self) -> Option<Nanos> {
        std::mem::take(&mut self.sync_decided).then_some(self.sync_done_ns)
    }

    /// Waits for a primary read: a decided time joins `done`, a held read the awaited list.
    /// `run` (first block, count) of primary misses with `block` added: one more block when
    /// it follows the run, else the run is read (its completion joining `done`) and a new
    /// one starts at `block`.
    fn extend_run(
        &mut self,
        now: Nanos,
        run: Option<(u64, u64)>,
        block: u64,
        done: &mut Nanos,
    ) -> Option<(u64, u64)> {
        match run {
            Some((start, n)) if start + n == block => Some((start, n + 1)),
            Some(_) => {
                self.end_run(now, run, done);
                Some((block, 1))
            }
            None => Some((block, 1)),
        }
    }

    /// Reads `run` of primary misses, if there is one, its completion joining `done`.
    fn end_run(&mut self, now: Nanos, run: Option<(u64, u64)>, done: &mut Nanos) {
        if let Some((start, n)) = run {
            let queued = self.read_primary(now, start, n);
            self.wait_for(queued, done);
        }
    }

    fn wait_for(&mut self, queued: Queued, done: &mut Nanos) {
        match queued {
            Queued::Done(at) => *done = (*done).max(at),
            Queued::Held(id) => self.awaited.push(Wait::Io(id)),
        }
    }

    /// Makes metadata block `id`, about to enter the ARC, a new version of itself to the
    /// policy: its generation (the count `write` keeps) moves on (larch's block-map pages;
    /// see [`super::metadata`], "Generations").
    fn renew(&mut self, id: u64) {
        *self.writes.entry(id).or_insert(0) += 1;
    }

    fn generation(&self, block: u64) -> u64 {
        self.writes.get(&block).copied().unwrap_or(0)
    }

    fn access(&self, block: u64, prefetch: bool, now: Nanos) -> Access {
        let metadata = self.is_metadata(block);
        Access {
            key: key(block),
            generation: self.generation(block),
            size_bytes: self.size_of(block),
            buf_type: if metadata {
                BufType::Metadata
            } else {
                BufType::Data
            },
            prefetch,
            l2cache: self.tunables.secondarycache.caches(metadata),
            uncached: !self.tunables.primarycache.caches(metadata),
            now_ms: now / 1_000_000,
        }
    }

    /// Starts loading what the ARC's lookup of `block` reads first (a hint to the CPU).
    pub(crate) fn prefetch_lookup(&self, block: u64) {
        let key = key(block);
        self.shards[shard_of(&key)].prefetch(&key);
    }

    /// Starts loading the header the ARC's lookup of `block` compares, through the index
    /// bucket [`SimCache::prefetch_lookup`] asked for earlier, and the block's slot in the
    /// cache devices' index (a hint to the CPU).
    pub(crate) fn prefetch_header(&self, block: u64) {
        let key = key(block);
        self.shards[shard_of(&key)].prefetch_header(&key);
        self.l2.prefetch(block);
    }

    /// Runs one policy operation on the shard of `block` and applies what it asks.
    fn with_shard<T>(&mut self, block: u64, op: impl FnOnce(&mut Arc, &mut Vec<Action>) -> T) -> T {
        let shard = shard_of(&key(block));
        let mut actions = std::mem::take(&mut self.actions);
        let out = op(&mut self.shards[shard], &mut actions);
        self.note_evictions(&mut actions);
        self.actions = actions;
        out
    }

    /// Counts the blocks the policy evicted that the feed could have taken.
    fn note_evictions(&mut self, actions: &mut Vec<Action>) {
        for action in actions.drain(..) {
            if let Action::Evict { key, from, .. } = action {
                self.warm = true;
                let metadata = self.is_metadata(key.block);
                let eligible = self.tunables.secondarycache.caches(metadata) && from != State::Anon;
                if eligible && !self.l2.contains_key(key.block) {
                    self.unfed_bytes += u64::from(self.size_of(key.block));
                }
            }
        }
    }

    /// Device reads issued so far, cache devices and primary storage together: how many
    /// I/Os and their bytes (the server model charges a request for the reads it caused).
    pub fn device_reads(&self) -> (u64, u64) {
        self.devices.iter().fold(
            (
                self.counters.primary_reads,
                self.counters.primary_read_bytes,
            ),
            |(n, bytes), d| (n + d.reads, bytes + d.read_bytes),
        )
    }

    /// Memory pressure: `bytes` of the machine's memory are taken elsewhere (a feed's
    /// buffers) while the ARC may use all of `zfs_arc_max`. What the ARC and they would
    /// hold beyond `zfs_arc_max` the ARC gives up: each shard's target shrinks by its
    /// share and evicts down to it, as OpenZFS's reclaim lowers `arc_c`. An ARC below its
    /// maximum (warming) loses nothing: the buffers take memory it does not use. The ARC
    /// grows back as it allocates again (`Arc::grow`), as OpenZFS's `arc_adapt` lets it.
    pub fn take_room(&mut self, now: Nanos, bytes: u64) {
        let size: u64 = self.shards.iter().map(Arc::size).sum();
        let max: u64 = self.shards.iter().map(|a| a.config().c_max_bytes).sum();
        let over = size.saturating_add(bytes).saturating_sub(max);
        let share = over.div_ceil(self.shards.len() as u64);
        if share == 0 {
            return;
        }
        let now_ms = now / 1_000_000;
        let mut actions = std::mem::take(&mut self.actions);
        for s in 0..self.shards.len() {
            self.shards[s].shrink(share, now_ms, &mut actions);
            self.note_evictions(&mut actions);
        }
        self.actions = actions;
    }

    /// A read of `count` consecutive blocks from `first` at `now`: when the last is
    /// there and where the slowest came from; when it also waits for reads the primary
    /// storage holds, their ids are in [`SimCache::take_awaited`] and the read is done when
    /// the later of the time returned and theirs is. Misses to the primary storage are merged into
    /// one I/O per run of consecutive blocks (as vdev aggregation does). Blocks are
    /// addresses on the simulated volume: the simulator places every request within it
    /// (`first + count` at most its blocks, far below 2^64 with blocks of 512 bytes or more),
    /// as the byte offsets of the primary storage's I/O need.
    pub fn read(&mut self, now: Nanos, first: u64, count: u64, prefetch: bool) -> (Nanos, Source) {
        let mut done = now;
        let mut slowest = Source::Arc;
        let mut run: Option<(u64, u64)> = None; // (first block, count) of primary misses
        // Consecutive misses waiting for indirect blocks: first, count, and what they wait for.
        let mut chained: Option<(u64, u64, Nanos, Source, Vec<IoId>)> = None;
        for block in first..first + count {
            match self.inflight.get(&block) {
                Some(&Inflight::Chained(c)) => {
                    self.counters.iohits += 1;
                    self.awaited.push(Wait::Chain(c));
                    let source = self.chains.get(&c).map_or(Source::Primary, |ch| ch.source);
                    slowest = slowest.max(source);
                    continue;
                }
                // Another read of the block is on its way: this one waits for it.
                Some(&Inflight::At(at, source)) if at > now => {
                    self.counters.iohits += 1;
                    done = done.max(at);
                    slowest = slowest.max(source);
                    continue;
                }
                Some(&Inflight::Held(id)) => {
                    self.counters.iohits += 1;
                    self.awaited.push(Wait::Io(id));
                    slowest = Source::Primary;
                    continue;
                }
                Some(Inflight::At(..)) => {
                    self.inflight.remove(&block);
                }
                None => {}
            }
            // The cache-device copy is needed only on a miss, but its slot is seldom in the
            // CPU's caches: asking for it now, before the ARC's lookup, makes the two waits
            // for memory one. The next block's ARC lookup starts the same way, while this
            // one runs.
            self.l2.prefetch(block);
            if block + 1 < first + count {
                self.prefetch_lookup(block + 1);
            }
            // A larch object volume looks the block's map page up before the block enters
            // the ARC, and only for a read of the store.
            let page_wait = self.read_map_page(now, block, prefetch);
            let access = self.access(block, prefetch, now);
            let outcome = self.with_shard(block, |arc, actions| arc.access(&access, actions));
            if outcome.is_hit() {
                if !prefetch {
                    self.counters.arc_hits += 1;
                }
                continue;
            }
            if prefetch {
                self.counters.prefetches += 1;
            } else {
                self.counters.arc_misses += 1;
            }
            let wait = page_wait.or_else(|| self.read_indirect(now, block, prefetch));
            if let Some((at, source, held)) = wait {
                // Its address is not known before its indirect blocks are there; where its
                // data comes from is known when the chain runs.
                slowest = slowest.max(source);
                chained = match chained {
                    Some((start, n, t, src, mut h)) if start + n == block => {
                        h.extend(held);
                        Some((start, n + 1, t.max(at), src.max(source), h))
                    }
                    Some((start, n, t, src, h)) => {
                        self.chain(start, n, prefetch, (t, src), h);
                        Some((block, 1, at, source, held))
                    }
                    None => Some((block, 1, at, source, held)),
                };
                continue;
            }
            if let Some(at) = self.read_l2(now, block) {
                if !prefetch {
                    self.counters.l2_hits += 1;
                }
                slowest = slowest.max(Source::L2);
                self.inflight.insert(block, Inflight::At(at, Source::L2));
                done = done.max(at);
                continue;
            }
            if !prefetch && self.l2_in_use() {
                self.counters.l2_misses += 1;
            }
            slowest = Source::Primary;
            run = self.extend_run(now, run, block, &mut done);
        }
        self.end_run(now, run, &mut done);
        if let Some((start, n, at, source, held)) = chained {
            self.chain(start, n, prefetch, (at, source), held);
        }
        (done, slowest)
    }

    /// Looks up the indirect blocks above data block `block`, which missed the ARC, top
    /// level first, and reads those that miss. Returns `None` when all are in the ARC (or
    /// the indirect-block model is off), else when the last read by then arrives, where
    /// the slowest came from, and the held reads to wait for too.
    fn read_indirect(
        &mut self,
        now: Nanos,
        block: u64,
        prefetch: bool,
    ) -> Option<(Nanos, Source, Vec<IoId>)> {
        let Some(VolumeMetadata::Indirect(tree)) = self.metadata else {
            return None;
        };
        self.read_metadata(now, tree.parents(block), prefetch, false)
    }

    /// With the map-page model, looks up the block-map page of data block `block` when
    /// the block is to be read from the store (not in the ARC, no copy on a cache device
    /// in use), and reads it if it misses; returns what [`SimCache::read_indirect`] does.
    fn read_map_page(
        &mut self,
        now: Nanos,
        block: u64,
        prefetch: bool,
    ) -> Option<(Nanos, Source, Vec<IoId>)> {
        let Some(VolumeMetadata::MapPages(pages)) = self.metadata else {
            return None;
        };
        if self.resident(block) || (self.l2_enabled && self.l2.contains_key(block)) {
            return None;
        }
        self.read_metadata(now, std::iter::once(pages.page_of(block)), prefetch, true)
    }

    /// Looks up the metadata blocks `ids`, in order, and reads those that miss (each, with
    /// `renew`, a new version of itself to the policy as it enters the ARC). Returns what
    /// [`SimCache::read_indirect`] does.
    fn read_metadata(
        &mut self,
        now: Nanos,
        ids: impl Iterator<Item = u64> + Clone,
        prefetch: bool,
        renew: bool,
    ) -> Option<(Nanos, Source, Vec<IoId>)> {
        // The levels are looked up one after the other, each lookup a wait for memory:
        // asking for all their index buckets first makes those waits overlap.
        for id in ids.clone() {
            self.prefetch_lookup(id);
        }
        let mut wait: Option<(Nanos, Source, Vec<IoId>)> = None;
        for id in ids {
            let (at, source, held) = wait.get_or_insert_with(|| (now, Source::Arc, Vec::new()));
            match self.inflight.get(&id) {
                Some(&Inflight::At(t, src)) if t > now => {
                    self.counters.iohits += 1;
                    *at = (*at).max(t);
                    *source = (*source).max(src);
                    continue;
                }
                Some(&Inflight::Held(io)) => {
                    self.counters.iohits += 1;
                    *source = Source::Primary;
                    held.push(io);
                    continue;
                }
                Some(_) => {
                    self.inflight.remove(&id);
                }
                None => {}
            }
            if renew && !self.resident(id) {
                self.renew(id);
            }
            let access = self.access(id, prefetch, now);
            let outcome = self.with_shard(id, |arc, actions| arc.access(&access, actions));
            if outcome.is_hit() {
                continue;
            }
            self.counters.indirect_reads += 1;
            let (at, source, held) = wait.get_or_insert_with(|| (now, Source::Arc, Vec::new()));
            if let Some(t) = self.read_l2(now, id) {
                self.counters.indirect_l2_reads += 1;
                self.inflight.insert(id, Inflight::At(t, Source::L2));
                *at = (*at).max(t);
                *source = (*source).max(Source::L2);
                continue;
            }
            *source = Source::Primary;
            match self.read_primary(now, id, 1) {
                Queued::Done(t) => *at = (*at).max(t),
                Queued::Held(io) => held.push(io),
            }
        }
        // Only a wait that found something to wait for.
        wait.filter(|(at, _, held)| *at > now || !held.is_empty())
    }

    /// Data blocks `first..first + count` wait for indirect blocks: due at `at` (their
    /// slowest from `source`) once the held reads `held` are decided too, when
    /// [`SimCache::run_chain`] reads them.
    fn chain(
        &mut self,
        first: u64,
        count: u64,
        prefetch: bool,
        (at, source): (Nanos, Source),
        mut held: Vec<IoId>,
    ) {
        held.sort_unstable();
        held.dedup();
        let c = self.next_chain;
        self.next_chain += 1;
        for &io in &held {
            self.chain_waits.entry(io).or_default().push(c);
        }
        if held.is_empty() {
            self.ready.push((at, c));
        }
        let chain = Chain {
            first,
            count,
            prefetch,
            at,
            held: held.len(),
            source,
        };
        self.chains.insert(c, chain);
        for block in first..first + count {
            self.inflight.insert(block, Inflight::Chained(c));
        }
        self.awaited.push(Wait::Chain(c));
    }

    /// The chains whose indirect blocks are all there, each with that time: the simulator
    /// runs each ([`SimCache::run_chain`]) at its time.
    pub fn take_ready(&mut self) -> Vec<(Nanos, u64)> {
        std::mem::take(&mut self.ready)
    }

    /// Chain `c`'s indirect blocks are there at `now`: reads its data blocks (from a cache
    /// device, or the primary storage in one I/O per run), unless written meanwhile.
    /// Returns when they are there, where the slowest of them and their indirect blocks
    /// came from, and the held reads to wait for too.
    pub fn run_chain(&mut self, now: Nanos, c: u64) -> (Nanos, Source, Vec<Wait>) {
        let Some(chain) = self.chains.remove(&c) else {
            return (now, Source::Arc, Vec::new());
        };
        let mut slowest = chain.source;
        let mut done = now;
        let mut run: Option<(u64, u64)> = None;
        let mut waits = std::mem::take(&mut self.awaited);
        for block in chain.first..chain.first + chain.count {
            if self.inflight.get(&block) != Some(&Inflight::Chained(c)) {
                // Written since: the write's data is in the ARC.
                continue;
            }
            self.inflight.remove(&block);
            if let Some(at) = self.read_l2(now, block) {
                if !chain.prefetch {
                    self.counters.l2_hits += 1;
                }
                self.inflight.insert(block, Inflight::At(at, Source::L2));
                done = done.max(at);
                slowest = slowest.max(Source::L2);
                continue;
            }
            if !chain.prefetch && self.l2_in_use() {
                self.counters.l2_misses += 1;
            }
            slowest = Source::Primary;
            run = self.extend_run(now, run, block, &mut done);
        }
        self.end_run(now, run, &mut done);
        // What the caller of the last read had not taken stays; this chain's waits go.
        std::mem::swap(&mut waits, &mut self.awaited);
        (done, slowest, waits)
    }

    /// Forgets the reads in flight that completed by `now` (a block read once and never
    /// again would otherwise stay in the table).
    pub fn expire_inflight(&mut self, now: Nanos) {
        self.inflight.retain(|_, entry| match entry {
            Inflight::At(at, _) => *at > now,
            Inflight::Held(_) | Inflight::Chained(_) => true,
        });
    }

    /// Reads `n` blocks from `start` from the primary storage; they are in flight until
    /// it is done.
    fn read_primary(&mut self, now: Nanos, start: u64, n: u64) -> Queued {
        let bytes = n * u64::from(self.size_of(start));
        let offset = self.offset_of(start);
        let queued = self.primary_io(now, IoKind::Read, offset, bytes);
        let entry = match queued {
            Queued::Done(at) => Inflight::At(at, Source::Primary),
            Queued::Held(id) => {
                if let Some(held) = self.held.get_mut(&id) {
                    held.blocks = Some((start, n));
                }
                Inflight::Held(id)
            }
        };
        for b in start..start + n {
            self.inflight.insert(b, entry);
        }
        queued
    }

    /// Whether a miss would look for a cache-device copy (the switch on, a device there).
    fn l2_in_use(&self) -> bool {
        self.l2_enabled && !self.devices.is_empty()
    }

    /// Reads `block` from the cache device holding it, when the switch is on; returns when
    /// the copy is there.
    fn read_l2(&mut self, now: Nanos, block: u64) -> Option<Nanos> {
        if !self.l2_enabled {
            return None;
        }
        let size = self.size_of(block);
        let entry = self.l2.get_mut(block)?;
        entry.mark_read();
        let entry = *entry;
        let d = &mut self.devices[entry.device()];
        let offset = entry.pos() % d.ring.ring_bytes();
        let at = d.model.submit(now, IoKind::Read, offset, size);
        d.reads += 1;
        d.read_bytes += u64::from(size);
        self.ios.push(DeviceIo {
            device: Some(entry.device()),
            kind: IoKind::Read,
            at_ns: now,
            latency_ns: at - now,
            bytes: u64::from(size),
        });
        Some(at)
    }

    /// A write of `count` blocks from `first` at `now`, `partial` when it covers only part
    /// of its first or last block (read-modify-write); the blocks lie on the simulated
    /// volume, as a read's. Returns when it is acknowledged
    /// (asynchronous: once dirty, after the throttle).
    pub fn write(&mut self, now: Nanos, first: u64, count: u64, partial: bool) -> Nanos {
        let mut at = now;
        if partial {
            // The block's old bytes are needed to merge the new ones in (as a zvol with a
            // volblocksize larger than the write does). The daemon acknowledges an async
            // partial write before that read (`larch_engine::txg::partial`): the read
            // loads the devices, the writer does not wait for it.
            let _ = self.read(now, first, count, false);
            self.awaited.clear();
        }
        let bytes = count * u64::from(self.block_bytes);
        // At the limit, a writer waits until the TXG being synced frees its bytes.
        if self.dirty_bytes + self.syncing_bytes + bytes > self.dirty_max && self.syncing_bytes > 0
        {
            if self.sync_parts_held > 0 {
                // The TXG's end is not yet known: the disks decide what they hold now, as
                // if nothing more arrived before it is served (the simulator hands the
                // decisions to their waiters).
                let mut drained = std::mem::take(&mut self.drained);
                self.settle(Nanos::MAX, &mut drained);
                self.drained = drained;
            }
            at = at.max(self.sync_done_ns);
            self.counters.throttled += 1;
        }
        let min = self.dirty_max / 100 * self.tunables.delay_min_dirty_percent.min(100);
        let delay = larch_policy::throttle::write_delay_ns(
            self.dirty_bytes + self.syncing_bytes,
            min,
            self.dirty_max,
            self.tunables.delay_scale_ns,
        );
        if delay > 0 {
            self.counters.throttled += 1;
            at = at.max(self.last_wakeup_ns + delay);
            self.last_wakeup_ns = at;
        }
        for block in first..first + count {
            let generation = self.writes.entry(block).or_insert(0);
            *generation += 1;
            let generation = *generation;
            self.inflight.remove(&block);
            if let Some(old) = self.l2.remove(block) {
                let d = &mut self.devices[old.device()];
                d.blocks -= 1;
                d.bytes -= u64::from(self.block_bytes);
            }
            let size = self.block_bytes;
            let now_ms = now / 1_000_000;
            self.with_shard(block, |arc, actions| {
                arc.write(key(block), generation, size, BufType::Data, now_ms, actions)
            });
            self.dirty.push((block, generation));
        }
        self.dirty_bytes += bytes;
        at
    }

    /// Whether the open TXG should sync now (past `zfs_dirty_data_sync_percent`).
    pub fn sync_due(&self) -> bool {
        self.syncing_bytes == 0
            && self.dirty_bytes
                >= self.dirty_max / 100 * self.tunables.dirty_data_sync_percent.max(1)
    }

    /// Whether a TXG is being written.
    pub fn syncing(&self) -> bool {
        self.syncing_bytes > 0
    }

    /// Starts syncing the open TXG at `now`: its blocks go to the primary storage in
    /// order, consecutive ones merged. Returns when the TXG is on disk (`None` while the
    /// primary storage holds some of its writes: [`SimCache::take_sync_decided`] tells it
    /// later) and the blocks it wrote (the caller hands them back to
    /// [`SimCache::sync_done`]), or `None` when there is nothing to write.
    pub fn start_sync(&mut self, now: Nanos) -> Option<(Option<Nanos>, TxgBlocks)> {
        if self.dirty.is_empty() || self.syncing_bytes > 0 {
            return None;
        }
        let mut blocks = std::mem::take(&mut self.dirty);
        blocks.sort_unstable();
        blocks.dedup_by_key(|(b, _)| *b);
        self.syncing_bytes = self.dirty_bytes;
        self.dirty_bytes = 0;
        let bs = u64::from(self.block_bytes);
        debug_assert_eq!(self.sync_parts_held, 0, "one TXG syncs at a time");
        let mut done = now;
        let mut i = 0;
        while i < blocks.len() {
            let start = blocks[i].0;
            let mut n = 1;
            while i + (n as usize) < blocks.len() && blocks[i + n as usize].0 == start + n {
                n += 1;
            }
            match self.primary_io(now, IoKind::Write, start * bs, n * bs) {
                Queued::Done(at) => done = done.max(at),
                Queued::Held(id) => {
                    if let Some(held) = self.held.get_mut(&id) {
                        held.txg = true;
                    }
                    self.sync_parts_held += 1;
                }
            }
            i += n as usize;
        }
        if let Some(meta) = self.metadata {
            // Each metadata block above a written block is written once, in every copy;
            // an indirect block's second copy elsewhere in the pool (a ditto block on
            // another vdev).
            let mut parents: Vec<u64> = blocks.iter().flat_map(|&(b, _)| meta.parents(b)).collect();
            parents.sort_unstable();
            parents.dedup();
            let copies = meta.copies();
            let spread = self.primary.capacity_bytes() / copies;
            for id in parents {
                let bytes = u64::from(meta.size_bytes(id));
                for copy in 0..copies {
                    let offset = meta.offset(id) + copy * spread;
                    self.counters.indirect_write_bytes += bytes;
                    match self.primary_io(now, IoKind::Write, offset, bytes) {
                        Queued::Done(at) => done = done.max(at),
                        Queued::Held(id) => {
                            if let Some(held) = self.held.get_mut(&id) {
                                held.txg = true;
                            }
                            self.sync_parts_held += 1;
                        }
                    }
                }
            }
        }
        self.sync_done_ns = done;
        self.sync_decided = false;
        self.counters.txg_syncs += 1;
        self.counters.txg_blocks += blocks.len() as u64;
        let known = (self.sync_parts_held == 0).then_some(done);
        Some((known, blocks))
    }

    /// A TXG reached the primary storage at `now`: its blocks are clean (MRU) unless
    /// written again since.
    pub fn sync_done(&mut self, now: Nanos, blocks: Vec<(u64, u64)>) {
        let l2cache = self.tunables.secondarycache.caches(false);
        let now_ms = now / 1_000_000;
        for (block, generation) in blocks {
            self.with_shard(block, |arc, actions| {
                arc.write_done(&key(block), generation, l2cache, now_ms, actions)
            });
        }
        self.syncing_bytes = 0;
    }

    /// Dirty bytes, open and syncing.
    pub fn dirty_bytes(&self) -> u64 {
        self.dirty_bytes + self.syncing_bytes
    }

    /// The dirty limit in force.
    pub fn dirty_max(&self) -> u64 {
        self.dirty_max
    }

    /// The pace of feeds: when device `d`'s next feed runs after the one that ran now.
    fn pace(&mut self, d: usize) -> feed::FeedPace {
        let t = &self.tunables;
        let allowance = feed::write_allowance(&BudgetRules::from_tunables(t), self.warm);
        let dev = &mut self.devices[d];
        let behind = self.unfed_bytes > dev.unfed_seen;
        dev.unfed_seen = self.unfed_bytes;
        feed::next_feed(
            &PaceRules::from_tunables(t),
            allowance,
            dev.wrote_last,
            behind,
        )
    }

    /// Device `d`'s feed at `now`, with the budget its last pace gave: choose (the
    /// policy), place (the ring), write. Returns the batch's id and when it completes, or
    /// `None` when nothing was written; the next feed's time is then in `next_feed_ns`.
    pub fn feed(&mut self, now: Nanos, d: usize) -> Option<(u64, Nanos)> {
        if self.devices[d].budget_bytes == 0 {
            // The first feed: the allowance of a cold ARC.
            self.devices[d].budget_bytes =
                feed::write_allowance(&BudgetRules::from_tunables(&self.tunables), self.warm);
        }
        self.devices[d].wrote_last = 0;
        let budget = self.devices[d].budget_bytes;
        let written = if self.l2_enabled && !self.devices[d].feeding {
            self.feed_once(now, d, budget)
        } else {
            None
        };
        let pace = self.pace(d);
        // Per device, the device's own feeder goes on; with OpenZFS's round robin (up to
        // 2.4), the one feeder's next turn is the next device's, with the same budget.
        let next = self.next_feeder(d);
        let written_bytes = self.devices[d].wrote_last;
        let dev = &mut self.devices[next];
        dev.next_feed_ns = now + pace.wait_ms.max(1) * 1_000_000;
        dev.budget_bytes = pace.budget_bytes;
        dev.wrote_last = written_bytes;
        written
    }

    /// The device fed after device `d`: `d` itself (a feeder per device, as larch and
    /// OpenZFS after 2.4 do), or the next one in turn (OpenZFS's one feed thread).
    pub fn next_feeder(&self, d: usize) -> usize {
        if self.tunables.feed_round_robin {
            (d + 1) % self.devices.len()
        } else {
            d
        }
    }

    /// Device `d`'s feed at `now` with `budget_bytes` given, as the engine's
    /// `Engine::feed_once` takes it, instead of the budget of [`SimCache::feed`]'s pace; the
    /// pace is left as it was. For tests that drive the engine and the simulator with one
    /// sequence; the caller completes each batch ([`SimCache::feed_done`]) before the next.
    pub fn feed_with_budget(
        &mut self,
        now: Nanos,
        d: usize,
        budget_bytes: u64,
    ) -> Option<(u64, Nanos)> {
        self.feed_once(now, d, budget_bytes)
    }

    fn feed_once(&mut self, now: Nanos, d: usize, budget_bytes: u64) -> Option<(u64, Nanos)> {
        let batch_limit = feed::batch_data_limit(self.devices[d].ring.max_batch_bytes());
        let budget = FeedBudget::new(
            &BudgetRules::from_tunables(&self.tunables),
            budget_bytes,
            batch_limit,
        );
        let rules =
            FeedRules::from_tunables(&self.tunables).for_device(self.devices[d].ring.first_sweep());
        let share = budget.split(SHARDS as u64);
        let mut picks = std::mem::take(&mut self.picks);
        picks.clear();
        let (l2, in_batch) = (&self.l2, &self.in_batch);
        // Blocks on a device, or in another device's batch in flight, are not written
        // again.
        let skip = |i: &BlockInfo| l2.contains_key(i.key.block) || in_batch.contains(&i.key.block);
        feed::select_shards(
            &self.shards,
            &rules,
            &share,
            skip,
            &mut self.shard_picks,
            &mut picks,
        );
        if picks.is_empty() {
            self.picks = picks;
            return None;
        }
        let metadata = self.metadata;
        let block_bytes = self.block_bytes;
        let size_of = |block: u64| u64::from(metadata.map_or(block_bytes, |m| m.size_bytes(block)));
        let dev = &mut self.devices[d];
        let plan = dev.ring.plan(picks.iter().map(|p| u64::from(p.size_bytes)));
        let floor = dev.ring.apply(&plan);
        // The evict hand passed these: their copies are gone.
        while let Some(&(pos, block)) = dev.order.front() {
            if pos >= floor {
                break;
            }
            dev.order.pop_front();
            if let Some(e) = self.l2.get(block)
                && e.device() == d
                && e.pos() == pos
            {
                let e = self.l2.remove(block).expect("just found");
                dev.blocks -= 1;
                dev.bytes -= size_of(block);
                self.counters.l2_evicted += 1;
                if !e.read() {
                    self.counters.l2_wasted_bytes += size_of(block);
                }
            }
        }
        let first = plan.positions[0];
        let ring = dev.ring.ring_bytes();
        let data: u64 = picks.iter().map(|p| u64::from(p.size_bytes)).sum();
        let span = plan.end_pos - first;
        // One sequential write; a batch that skipped the ring's tail is two.
        let mut done = now;
        let start = first % ring;
        if start + span <= ring {
            done = done.max(dev.model.submit(
                now,
                IoKind::Write,
                start,
                span.min(u64::from(u32::MAX)) as u32,
            ));
        } else {
            let head = ring - start;
            done = done.max(dev.model.submit(now, IoKind::Write, start, head as u32));
            done = done.max(
                dev.model
                    .submit(now, IoKind::Write, 0, (span - head) as u32),
            );
        }
        dev.writes += 1;
        dev.write_bytes += data;
        dev.wrote_last = data;
        dev.feeding = true;
        self.ios.push(DeviceIo {
            device: Some(d),
            kind: IoKind::Write,
            at_ns: now,
            latency_ns: done - now,
            bytes: data,
        });
        self.counters.l2_write_bytes += data;
        let id = self.next_batch;
        self.next_batch += 1;
        let batch = FeedBatch {
            device: d,
            picks: picks
                .iter()
                .zip(&plan.positions)
                .map(|(p, &pos)| (p.key.block, p.generation, pos))
                .collect(),
        };
        for (p, &pos) in picks.iter().zip(&plan.positions) {
            dev.order.push_back((pos, p.key.block));
            self.in_batch.insert(p.key.block);
        }
        self.batches.insert(id, batch);
        self.picks = picks;
        Some((id, done))
    }

    /// Feed batch `id` is on its device: index its copies, unless the block was written
    /// since it was chosen.
    pub fn feed_done(&mut self, id: u64) {
        let Some(batch) = self.batches.remove(&id) else {
            return;
        };
        let d = batch.device;
        self.devices[d].feeding = false;
        let floor = self.devices[d].ring.evict_floor();
        for (block, generation, pos) in batch.picks {
            self.in_batch.remove(&block);
            // Written since it was chosen: the copy is stale (the engine tombstones it).
            if self.generation(block) != generation || pos < floor || self.l2.contains_key(block) {
                continue;
            }
            self.l2.insert(block, L2Entry::new(d, pos));
            let size = u64::from(self.size_of(block));
            let dev = &mut self.devices[d];
            dev.blocks += 1;
            dev.bytes += size;
        }
    }

    /// Fills the caches as if warm: the first `ads_blocks` blocks (in a scattered order)
    /// go through the ARC until it is full, and those it cannot hold onto the cache
    /// devices, as far as their rings hold them. Virtual time does not move.
    pub fn prewarm(&mut self, ads_blocks: u64, seed: u64) {
        let mut rng = crate::workload::SplitMix64::new(seed ^ 0x5157_4152_4d00);
        let bs = u64::from(self.block_bytes);
        // A permutation of the data set by an odd multiplier modulo a power of two,
        // skipping what falls outside: each block once, scattered.
        let span = ads_blocks.next_power_of_two();
        let mult = ((rng.next_u64() | 1) % span.max(2)) | 1;
        let offset = rng.below(span);
        let order = move |i: u64| (i.wrapping_mul(mult).wrapping_add(offset)) % span;
        let arc_bytes: u64 = self.shards.iter().map(|a| a.config().c_max_bytes).sum();
        // A warm pool holds the data set's metadata (read before any of its data), and the
        // data in what it leaves of the ARC.
        let mut meta_bytes = 0;
        match self.metadata {
            Some(VolumeMetadata::Indirect(tree)) => {
                for level in (1..=tree.levels()).rev() {
                    for index in 0..ads_blocks.div_ceil(tree.span(level)) {
                        let id = tree.parent(index * tree.span(level), level);
                        let access = self.access(id, false, 0);
                        self.with_shard(id, |arc, actions| arc.access(&access, actions));
                    }
                }
                meta_bytes = tree.indirect_bytes(ads_blocks);
            }
            Some(VolumeMetadata::MapPages(pages)) => {
                for page in 0..pages.pages(ads_blocks) {
                    let id = pages.page_of(page * MAP_PAGE_BLOCKS);
                    self.renew(id);
                    let access = self.access(id, false, 0);
                    self.with_shard(id, |arc, actions| arc.access(&access, actions));
                }
                meta_bytes = pages.pages(ads_blocks) * u64::from(MAP_PAGE_BYTES);
            }
            None => {}
        }
        let arc_blocks = arc_bytes.saturating_sub(meta_bytes) / bs;
        // The ARC takes the first blocks of the permutation; the cache devices hold the
        // others first (a warm pool has them only there), then, while they have room, the
        // ARC's too (blocks pass through the ARC on their way to a cache device, so a warm
        // pool has most of its ARC's blocks there as well).
        let mut next_device = 0usize;
        for pass in 0..2 {
            let mut placed = 0u64;
            for i in 0..span {
                let block = order(i);
                if block >= ads_blocks {
                    continue;
                }
                placed += 1;
                let in_arc = placed <= arc_blocks;
                if pass == 0 && in_arc {
                    let access = self.access(block, false, 0);
                    self.with_shard(block, |arc, actions| arc.access(&access, actions));
                    continue;
                }
                if (pass == 1) != in_arc {
                    continue;
                }
                if !self.prewarm_copy(block, &mut next_device) {
                    break;
                }
            }
        }
        self.warm = true;
        self.unfed_bytes = 0;
    }

    /// Puts a copy of `block` on the next cache device with room (prewarming, the rings'
    /// first lap); false when no device has room left.
    fn prewarm_copy(&mut self, block: u64, next_device: &mut usize) -> bool {
        let bs = u64::from(self.block_bytes);
        let n = self.devices.len();
        for _ in 0..n {
            let d = *next_device % n;
            *next_device += 1;
            let dev = &mut self.devices[d];
            let plan = dev.ring.plan([bs]);
            // Stay a sixteenth of the ring short of its end, where the evict hand runs.
            if plan.end_pos + dev.ring.ring_bytes() / 16 > dev.ring.ring_bytes() {
                continue;
            }
            dev.ring.apply(&plan);
            dev.order.push_back((plan.positions[0], block));
            dev.blocks += 1;
            dev.bytes += bs;
            self.l2.insert(block, L2Entry::new(d, plan.positions[0]));
            return true;
        }
        false
    }

    /// Sizes for the recorder: (ARC size, c, c_max, MRU, MFU, MRU ghost, MFU ghost,
    /// headers in DRAM).
    pub fn arc_sizes(&self) -> ArcSizes {
        let mut s = ArcSizes::default();
        for arc in &self.shards {
            s.size += arc.size();
            s.c += arc.c();
            s.c_max += arc.config().c_max_bytes;
            s.mru += arc.state_bytes(State::Mru);
            s.mfu += arc.state_bytes(State::Mfu);
            s.mru_ghost += arc.state_bytes(State::MruGhost);
            s.mfu_ghost += arc.state_bytes(State::MfuGhost);
            s.headers += larch_policy::Policy::tracked_headers(arc) as u64;
        }
        s.l2_blocks = self.l2.len() as u64;
        s.l2_bytes = self.devices.iter().map(|d| d.bytes).sum();
        s
    }

    /// The policy's arcstats (`larch_policy::Arc::kstats`: counters, sizes and targets
    /// under their OpenZFS names), each summed over the shards.
    pub fn kstats(&self) -> Vec<(String, u64)> {
        sum_kstats(self.shards.iter().map(Arc::kstats))
    }

    /// arcstats' counters and sizes by type, summed over the shards, with the metadata
    /// model's reads and writes.
    pub fn metadata_summary(&self) -> super::record::MetadataSummary {
        let mut m = super::record::MetadataSummary::default();
        for (name, value) in self.kstats() {
            match name.as_str() {
                "demand_data_hits" => m.demand_data_hits = value,
                "demand_data_misses" => m.demand_data_misses = value,
                "demand_metadata_hits" => m.demand_metadata_hits = value,
                "demand_metadata_misses" => m.demand_metadata_misses = value,
                "data_size" => m.data_size = value,
                "metadata_size" => m.metadata_size = value,
                _ => {}
            }
        }
        for block in self.l2.keys() {
            let size = u64::from(self.size_of(block));
            if self.is_metadata(block) {
                m.l2_bufc_metadata_asize += size;
            } else {
                m.l2_bufc_data_asize += size;
            }
        }
        m.indirect_reads = self.counters.indirect_reads;
        m.indirect_l2_reads = self.counters.indirect_l2_reads;
        m.indirect_write_bytes = self.counters.indirect_write_bytes;
        m
    }

    /// Blocks with a copy on some cache device.
    pub fn l2_blocks(&self) -> u64 {
        self.l2.len() as u64
    }

    /// The cache device and ring position of `block`'s indexed copy, if it has one (its
    /// feed batch completed): which blocks a feed wrote, and in what order.
    pub fn cache_device_copy(&self, block: u64) -> Option<(usize, u64)> {
        self.l2.get(block).map(|e| (e.device(), e.pos()))
    }

    /// Blocks with a copy on a cache device that are in DRAM too (OpenZFS keeps a full
    /// header for those, and the 96-byte one only for the others).
    pub fn l2_blocks_in_arc(&self) -> u64 {
        self.l2
            .keys()
            .filter(|&b| {
                self.shards[shard_of(&key(b))]
                    .info(&key(b))
                    .is_some_and(|i| i.state.is_resident())
            })
            .count() as u64
    }

    /// The volume's block size.
    pub fn block_bytes(&self) -> u32 {
        self.block_bytes
    }

    /// Walks the policy's structures of every shard and the cache devices' indexes, and
    /// panics with the values if an invariant is broken (tests and debug runs).
    pub fn check_invariants(&self) {
        for arc in &self.shards {
            arc.check_invariants();
        }
        for (d, dev) in self.devices.iter().enumerate() {
            let indexed = self.l2.values().filter(|e| e.device() == d).count() as u64;
            assert_eq!(
                indexed, dev.blocks,
                "device {d}: {indexed} indexed, {} counted",
                dev.blocks
            );
            let bytes: u64 = self
                .l2
                .iter()
                .filter(|(_, e)| e.device() == d)
                .map(|(b, _)| u64::from(self.size_of(b)))
                .sum();
            assert_eq!(dev.bytes, bytes, "device {d}");
            let floor = dev.ring.evict_floor();
            for e in self.l2.values().filter(|e| e.device() == d) {
                assert!(
                    e.pos() >= floor,
                    "device {d}: a copy at {} below the floor {floor}",
                    e.pos()
                );
                assert!(
                    e.pos() < dev.ring.write_pos(),
                    "device {d}: a copy at {} past the write hand",
                    e.pos()
                );
            }
        }
    }
}

impl L2Device {
    /// Bytes of its ring.
    pub fn ring_bytes(&self) -> u64 {
        self.ring.ring_bytes()
    }
}

/// The ARC's sizes at one moment.
#[derive(Clone, Copy, Debug, Default)]
pub struct ArcSizes {
    /// Bytes of data in DRAM.
    pub size: u64,
    /// The target.
    pub c: u64,
    /// `zfs_arc_max`.
    pub c_max: u64,
    /// MRU bytes.
    pub mru: u64,
    /// MFU bytes.
    pub mfu: u64,
    /// MRU ghost bytes.
    pub mru_ghost: u64,
    /// MFU ghost bytes.
    pub mfu_ghost: u64,
    /// Headers the policy tracks (resident and ghost).
    pub headers: u64,
    /// Blocks on cache devices.
    pub l2_blocks: u64,
    /// Their bytes.
    pub l2_bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::parse_spec;
    use crate::sim::SECOND_NS;
    use crate::sim::metadata::{CacheMode, INDIRECT_BLOCK_BYTES, MAP_PAGE_IDS, METADATA_COPIES};

    const BLOCK: u32 = 8 << 10;
    /// 2,048 blocks: one level of indirect blocks, two of them (1,024 blocks each).
    const VOLUME_BLOCKS: u64 = 2048;

    fn cache(primarycache: CacheMode, secondarycache: CacheMode) -> SimCache {
        let cache = cache_with(SimTunables {
            primarycache,
            secondarycache,
            ..SimTunables::default()
        });
        assert_eq!(cache.indirect_tree().map(|t| t.levels()), Some(1));
        cache
    }

    /// A cache of 64 MiB in RAM, with one cache device of 64 MiB, over a volume of
    /// `VOLUME_BLOCKS` with indirect blocks, under `tunables`.
    fn cache_with(tunables: SimTunables) -> SimCache {
        let ram = |seed| parse_spec("ram", seed).expect("the ram model");
        let mut cache = SimCache::new(
            64 << 20,
            BLOCK,
            ram(1),
            vec![("cache0".into(), ram(2), 64 << 20)],
            tunables,
        );
        cache.model_indirect_blocks(VOLUME_BLOCKS);
        cache
    }

    /// Reads `block` at `now` as a request does: runs the chain it waits for, if any, at
    /// its time. Returns when the read is done and whether it waited for a chain.
    fn read(cache: &mut SimCache, now: Nanos, block: u64) -> (Nanos, bool) {
        let (mut done, _) = cache.read(now, block, 1, false);
        let awaited = cache.take_awaited();
        let ready = cache.take_ready();
        assert!(ready.len() <= 1, "{ready:?}");
        let Some(&(at, c)) = ready.first() else {
            assert!(awaited.is_empty(), "{awaited:?}");
            return (done, false);
        };
        assert_eq!(awaited, vec![Wait::Chain(c)]);
        let (data_done, _, waits) = cache.run_chain(at, c);
        assert!(waits.is_empty(), "the ram model decides at once");
        done = done.max(data_done);
        (done, true)
    }

    #[test]
    fn a_feeds_buffers_take_room_only_from_an_arc_at_its_maximum() {
        let ram = |seed| parse_spec("ram", seed).expect("the ram model");
        let tunables = SimTunables::default();
        let mut cache = SimCache::new(64 << 20, BLOCK, ram(1), Vec::new(), tunables);
        let size = |c: &SimCache| c.arc_sizes().size;
        // 4 MiB read into an ARC of 64 (its minimum 32): 8 MiB of buffers fit beside it.
        for b in 0..512 {
            read(&mut cache, b * SECOND_NS, b);
        }
        let warming = size(&cache);
        cache.take_room(600 * SECOND_NS, 8 << 20);
        assert_eq!(size(&cache), warming, "a warming ARC gives nothing up");
        // 256 MiB through it: full, it gives up the buffers' 8 MiB.
        for b in 512..32_768 {
            read(&mut cache, (600 + b) * SECOND_NS, b);
        }
        let full = size(&cache);
        assert!(full > 63 << 20, "full at {full} bytes");
        // The reads are done: nothing holds their blocks.
        cache.expire_inflight(40_000 * SECOND_NS);
        cache.take_room(40_000 * SECOND_NS, 8 << 20);
        let given = full - size(&cache);
        assert!(
            (7 << 20..=9 << 20).contains(&given),
            "gave up {given} bytes of {full} for 8 MiB of buffers"
        );
    }

    #[test]
    fn a_cold_read_with_a_cold_indirect_block_reads_it_then_the_data() {
        let mut c = cache(CacheMode::All, CacheMode::All);
        let (done, chained) = read(&mut c, 0, 5);
        assert!(chained);
        let reads: Vec<&DeviceIo> = c.ios.iter().filter(|io| io.kind == IoKind::Read).collect();
        assert_eq!(reads.len(), 2, "{reads:?}");
        assert_eq!(reads[0].bytes, u64::from(INDIRECT_BLOCK_BYTES));
        assert_eq!(reads[1].bytes, u64::from(BLOCK));
        // The data read is issued when the indirect block is there, not before.
        assert!(reads[0].latency_ns > 0);
        assert_eq!(reads[1].at_ns, reads[0].at_ns + reads[0].latency_ns);
        assert_eq!(done, reads[1].at_ns + reads[1].latency_ns);
        assert_eq!(c.counters.primary_reads, 2);
        assert_eq!(c.counters.indirect_reads, 1);
    }

    #[test]
    fn a_read_under_a_warm_indirect_block_reads_only_the_data() {
        let mut c = cache(CacheMode::All, CacheMode::All);
        read(&mut c, 0, 5);
        c.ios.clear();
        // Block 6 shares block 5's level-1 block, now in the ARC; block 1500 does not.
        let (_, chained) = read(&mut c, SECOND_NS, 6);
        assert!(!chained);
        assert_eq!(c.ios.len(), 1);
        assert_eq!(c.ios[0].bytes, u64::from(BLOCK));
        assert_eq!(c.ios[0].at_ns, SECOND_NS);
        let (_, chained) = read(&mut c, 2 * SECOND_NS, 1500);
        assert!(chained);
        assert_eq!(c.counters.indirect_reads, 2);
    }

    #[test]
    fn the_metadata_counters_count_lookups_and_sizes() {
        let mut c = cache(CacheMode::All, CacheMode::All);
        read(&mut c, 0, 5);
        read(&mut c, SECOND_NS, 6);
        read(&mut c, 2 * SECOND_NS, 1500);
        // A hit on data skips the lookup.
        read(&mut c, 3 * SECOND_NS, 6);
        let m = c.metadata_summary();
        assert_eq!((m.demand_metadata_hits, m.demand_metadata_misses), (1, 2));
        assert_eq!((m.demand_data_hits, m.demand_data_misses), (1, 3));
        assert_eq!(m.metadata_size, 2 * u64::from(INDIRECT_BLOCK_BYTES));
        assert_eq!(m.data_size, 3 * u64::from(BLOCK));
    }

    #[test]
    fn primarycache_metadata_keeps_indirect_blocks_and_no_data() {
        let mut c = cache(CacheMode::Metadata, CacheMode::All);
        read(&mut c, 0, 5);
        let tree = *c.indirect_tree().expect("on");
        let state = |c: &SimCache, block: u64| {
            c.shards[shard_of(&key(block))]
                .info(&key(block))
                .map(|i| i.state)
        };
        assert_eq!(state(&c, tree.parent(5, 1)), Some(State::Mru));
        assert_eq!(state(&c, 5), Some(State::Uncached));
        // Uncached data is dropped once nobody holds it and half a second has passed, when
        // its shard next evicts (a miss of another block of the shard): a later read of it
        // misses again, and reads only the data, its indirect block being kept.
        let neighbour = (0..1024)
            .find(|&b| b != 5 && shard_of(&key(b)) == shard_of(&key(5)))
            .expect("a block of the same shard under the same indirect block");
        read(&mut c, 10 * SECOND_NS, neighbour);
        assert_eq!(state(&c, 5), None);
        c.ios.clear();
        let (_, chained) = read(&mut c, 11 * SECOND_NS, 5);
        assert!(!chained);
        assert_eq!(c.ios.len(), 1, "{:?}", c.ios);
        assert_eq!(c.ios[0].bytes, u64::from(BLOCK));
        let m = c.metadata_summary();
        assert_eq!(m.metadata_size, u64::from(INDIRECT_BLOCK_BYTES));
        assert_eq!((m.demand_data_hits, m.demand_data_misses), (0, 3));
    }

    #[test]
    fn secondarycache_metadata_feeds_only_indirect_blocks() {
        for (mode, data_fed) in [(CacheMode::Metadata, false), (CacheMode::All, true)] {
            let mut c = cache(CacheMode::All, mode);
            read(&mut c, 0, 5);
            read(&mut c, SECOND_NS, 1500);
            let (id, at) = c
                .feed_with_budget(2 * SECOND_NS, 0, 64 << 20)
                .expect("a feed writes");
            assert!(at > 2 * SECOND_NS);
            c.feed_done(id);
            let tree = *c.indirect_tree().expect("on");
            for data in [5, 1500] {
                let parent = tree.parent(data, 1);
                assert!(c.cache_device_copy(parent).is_some(), "{mode:?}");
                assert_eq!(c.cache_device_copy(data).is_some(), data_fed, "{mode:?}");
            }
            let m = c.metadata_summary();
            assert_eq!(
                m.l2_bufc_metadata_asize,
                2 * u64::from(INDIRECT_BLOCK_BYTES)
            );
            c.check_invariants();
        }
    }

    #[test]
    fn a_txg_writes_each_changed_indirect_block_once_in_two_copies() {
        let mut c = cache(CacheMode::All, CacheMode::All);
        c.write(0, 5, 2, false);
        c.write(0, 1500, 1, false);
        c.write(0, 6, 1, false);
        let before = c.counters.primary_write_bytes;
        assert_eq!(before, 0);
        c.start_sync(SECOND_NS).expect("dirty data to sync");
        let indirect = 2 * METADATA_COPIES * u64::from(INDIRECT_BLOCK_BYTES);
        assert_eq!(c.counters.indirect_write_bytes, indirect);
        assert_eq!(
            c.counters.primary_write_bytes,
            3 * u64::from(BLOCK) + indirect
        );
    }

    #[test]
    fn a_prewarmed_pool_holds_every_indirect_block_whatever_their_size() {
        for (indblkshift, blocks) in [(17, 2), (14, 16 + 1)] {
            let mut c = cache_with(SimTunables {
                indblkshift,
                ..SimTunables::default()
            });
            c.prewarm(VOLUME_BLOCKS, 7);
            let bytes = u64::from(c.indirect_tree().unwrap().indirect_block_bytes());
            assert_eq!(
                c.metadata_summary().metadata_size,
                blocks * bytes,
                "indblkshift {indblkshift}"
            );
        }
    }

    /// [`cache`] with a larch object volume's block-map pages instead of indirect blocks:
    /// two pages, of blocks 0 to 1,023 and 1,024 to 2,047.
    fn map_page_cache() -> SimCache {
        let mut cache = cache(CacheMode::All, CacheMode::All);
        cache.model_metadata(MetadataModel::MapPages, VOLUME_BLOCKS);
        assert!(cache.indirect_tree().is_none());
        cache
    }

    #[test]
    fn an_object_volume_looks_a_map_page_up_only_to_read_the_store() {
        let mut c = map_page_cache();
        let lookups = |c: &SimCache| {
            let m = c.metadata_summary();
            (m.demand_metadata_hits, m.demand_metadata_misses)
        };
        // A cold read: the page, then the data it points at.
        let (_, chained) = read(&mut c, 0, 5);
        assert!(chained, "the data read waits for its page");
        let bytes: Vec<u64> = c.ios.iter().map(|io| io.bytes).collect();
        assert_eq!(bytes, [u64::from(MAP_PAGE_BYTES), u64::from(BLOCK)]);
        assert_eq!(c.ios[0].at_ns + c.ios[0].latency_ns, c.ios[1].at_ns);
        assert_eq!(lookups(&c), (0, 1));
        assert_eq!(
            c.metadata_summary().metadata_size,
            u64::from(MAP_PAGE_BYTES)
        );
        // A hit in the ARC looks nothing up; another block of the page finds it there.
        read(&mut c, SECOND_NS, 5);
        read(&mut c, 2 * SECOND_NS, 6);
        assert_eq!(lookups(&c), (1, 1));
        // A block with a copy on the cache device is read from there by its key: its
        // page is not looked up.
        let (id, _) = c
            .feed_with_budget(3 * SECOND_NS, 0, 64 << 20)
            .expect("a feed writes");
        c.feed_done(id);
        assert!(
            c.cache_device_copy(MAP_PAGE_IDS).is_some(),
            "the page was fed"
        );
        c.with_shard(5, |arc, actions| arc.remove(&key(5), actions));
        c.ios.clear();
        let (_, chained) = read(&mut c, 4 * SECOND_NS, 5);
        assert!(!chained);
        assert_eq!(c.ios.len(), 1, "{:?}", c.ios);
        assert_eq!(c.ios[0].device, Some(0));
        assert_eq!(lookups(&c), (1, 1));
        assert_eq!(c.counters.indirect_reads, 1);
        c.check_invariants();
    }

    #[test]
    fn a_txg_writes_each_changed_map_page_once() {
        let mut c = map_page_cache();
        c.write(0, 5, 2, false);
        c.write(0, 1500, 1, false);
        c.start_sync(SECOND_NS).expect("dirty data to sync");
        let pages = 2 * u64::from(MAP_PAGE_BYTES);
        assert_eq!(c.counters.indirect_write_bytes, pages);
        assert_eq!(c.counters.primary_write_bytes, 3 * u64::from(BLOCK) + pages);
    }

    #[test]
    fn without_the_model_a_cold_read_is_one_read() {
        let ram = |seed| parse_spec("ram", seed).expect("the ram model");
        let mut c = SimCache::new(64 << 20, BLOCK, ram(1), vec![], SimTunables::default());
        let (_, chained) = read(&mut c, 0, 5);
        assert!(!chained);
        assert_eq!(c.counters.primary_reads, 1);
        assert_eq!(c.metadata_summary().demand_metadata_misses, 0);
    }
}

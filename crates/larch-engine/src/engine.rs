//! The cache engine: ARC buffers in DRAM driven by `larch-policy`, the L2 index, the read
//! path, the write path, the feeders and the rebuild. See the crate documentation for the
//! theory, in particular the no-stale-read argument.

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use larch_io::{BlockDevice, FileDevice, FileOptions};
use larch_l2::{
    ArcState, Compression, ContentType, CreateOptions, EntryKind, Geometry, L2Device, LogEntryPhys,
    RebuildOptions, RebuildStats, Record,
};
use larch_policy::{Access, Action, ArcConfig, BlockKey, BufType, State};

use crate::backing::BackingStore;
pub use crate::tunables::Tunables;

mod txg;
use crate::l2index::{self, DeviceIndex, pack_key};
use crate::latency::LatencyHistogram;
use crate::uring::UringReader;
pub use txg::{LogHandle, WriteStats};

/// Shards of the ARC: each has its own lock, policy instance (with 1/SHARDS of the target)
/// and buffers, so the hit path takes one of many locks, never a global one.
pub const SHARDS: usize = 16;

/// The L2 index's memory cap never goes below this (4 MiB: ~130,000 blocks).
pub const L2_INDEX_MIN_CAP: u64 = 4 << 20;

/// How a volume uses a cache level (ZFS `primarycache`/`secondarycache`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheMode {
    /// Data and metadata.
    All,
    /// Metadata only (the NBD front end reads data, so for it this is "nothing").
    Metadata,
    /// Nothing.
    None,
}

/// When a volume's writes are durable (ZFS `sync`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SyncMode {
    /// FUA writes and FLUSH are made durable before they are acknowledged.
    #[default]
    Standard,
    /// Every write is made durable before it is acknowledged.
    Always,
    /// Nothing waits for durability: FUA and FLUSH are acknowledged at once. A crash
    /// loses up to `zfs_txg_timeout` seconds of acknowledged writes.
    Disabled,
}

/// What the engine needs to know of a volume on every request.
#[derive(Clone, Copy, Debug)]
pub struct VolumeInfo {
    /// Identity of the volume in cache keys and cache-device logs.
    pub guid: u64,
    /// The volume's short number in the L2 index ([`Engine::volume_slot`]).
    pub slot: u16,
    /// Size in bytes.
    pub size_bytes: u64,
    /// Block size (`volblocksize`).
    pub block_bytes: u32,
    /// `primarycache`.
    pub primarycache: CacheMode,
    /// `secondarycache`.
    pub secondarycache: CacheMode,
    /// `sync`.
    pub sync: SyncMode,
}

impl VolumeInfo {
    /// Bytes of block `block` (the last block may be short).
    pub fn block_len(&self, block: u64) -> usize {
        let start = block * u64::from(self.block_bytes);
        (self.size_bytes - start).min(u64::from(self.block_bytes)) as usize
    }
}

/// Counters of the engine (OpenZFS arcstats names where the meaning matches).
#[derive(Debug, Default)]
pub struct EngineStats {
    /// Reads served from a cache device.
    pub l2_hits: AtomicU64,
    /// Misses (in a pool with cache devices) that went to the backing store.
    pub l2_misses: AtomicU64,
    /// Bytes read from cache devices.
    pub l2_read_bytes: AtomicU64,
    /// Bytes of data written to cache devices.
    pub l2_write_bytes: AtomicU64,
    /// Cache-device reads whose checksum did not match (served from the backing store).
    pub l2_cksum_bad: AtomicU64,
    /// Cache-device reads that failed (served from the backing store).
    pub l2_io_error: AtomicU64,
    /// Feeds that wrote something.
    pub l2_feeds: AtomicU64,
    /// Batches written.
    pub l2_writes_sent: AtomicU64,
    /// Batches that failed.
    pub l2_writes_error: AtomicU64,
    /// Records the ring overwrote.
    pub l2_evicted: AtomicU64,
    /// Bytes written to cache devices and overwritten by the ring without ever being read
    /// ("wasted feed").
    pub l2_wasted_feed_bytes: AtomicU64,
    /// Σ logical size of blocks indexed on cache devices.
    pub l2_size: AtomicU64,
    /// Σ physical size of blocks indexed on cache devices.
    pub l2_asize: AtomicU64,
    /// Part of `l2_asize` written from MRU (not prefetched).
    pub l2_mru_asize: AtomicU64,
    /// Part of `l2_asize` written from MFU (not prefetched).
    pub l2_mfu_asize: AtomicU64,
    /// Part of `l2_asize` that was prefetched.
    pub l2_prefetch_asize: AtomicU64,
    /// Part of `l2_asize` holding data.
    pub l2_bufc_data_asize: AtomicU64,
    /// Part of `l2_asize` holding metadata.
    pub l2_bufc_metadata_asize: AtomicU64,
    /// Blocks indexed on cache devices.
    pub l2_blocks: AtomicU64,
    /// Times the ARC shrank because available memory fell below `zfs_arc_sys_free`
    /// (OpenZFS `memory_indirect_count`).
    pub memory_indirect_count: AtomicU64,
    /// Available memory (MemAvailable − `zfs_arc_sys_free`) at the last check, bytes; 0
    /// when below (OpenZFS `memory_available_bytes`, which may go negative).
    pub memory_available_bytes: AtomicU64,
    /// Tombstones written (overwrites of blocks with cache-device copies).
    pub l2_tombstones: AtomicU64,
    /// Feeds skipped because the L2 index reached `l2arc_meta_percent`.
    pub l2_hdr_limit_skips: AtomicU64,
    /// Entries a rebuild did not restore because the L2 index reached
    /// `l2arc_meta_percent` (tombstoned instead; OpenZFS stops the rebuild).
    pub l2_rebuild_lowmem: AtomicU64,
    /// Reads that joined another read of the same block already in flight.
    pub iohits: AtomicU64,
    /// Backing-store reads issued by the cache.
    pub backing_reads: AtomicU64,
}

/// State of a cache device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceState {
    /// Its index is being rebuilt; not fed yet.
    Rebuilding,
    /// Fed and read.
    Online,
    /// Not used: an error made it unsafe or useless.
    Faulted,
    /// Removed by the user.
    Removed,
}

impl DeviceState {
    fn from_u8(v: u8) -> DeviceState {
        match v {
            0 => DeviceState::Rebuilding,
            1 => DeviceState::Online,
            2 => DeviceState::Faulted,
            _ => DeviceState::Removed,
        }
    }
}

/// A cache device of the pool.
pub struct CacheDevice {
    /// Index in the engine's device list.
    pub index: u16,
    /// Its path.
    pub path: PathBuf,
    /// Its guid (in its header).
    pub guid: u64,
    dev: Arc<FileDevice>,
    writer: Mutex<Option<L2Device<Arc<FileDevice>>>>,
    geometry: Mutex<Option<Geometry>>,
    state: AtomicU8,
    /// Why it is faulted, if it is.
    pub fault: Mutex<Option<String>>,
    /// Rebuild counters, once the rebuild ended.
    pub rebuild: Mutex<Option<RebuildStats>>,
    /// Entries restored so far by the rebuild.
    pub rebuild_progress: AtomicU64,
    /// How far the rebuild walked the ring, in thousandths.
    pub rebuild_permille: AtomicU64,
    /// I/O counters of this device.
    pub io: DeviceIo,
}

/// I/O counters of one cache device (for `larch iostat` and /metrics).
#[derive(Debug, Default)]
pub struct DeviceIo {
    /// Block reads (L2 hits and failed attempts).
    pub reads: AtomicU64,
    /// Bytes read.
    pub read_bytes: AtomicU64,
    /// Reads that failed or did not verify.
    pub read_errors: AtomicU64,
    /// Feed batches written.
    pub writes: AtomicU64,
    /// Bytes of data written by feeds.
    pub write_bytes: AtomicU64,
    /// Time of each block read, verification included.
    pub read_latency: LatencyHistogram,
    /// Time of each feed batch: its writes and the log commit.
    pub write_latency: LatencyHistogram,
}

impl CacheDevice {
    /// Current state.
    pub fn state(&self) -> DeviceState {
        DeviceState::from_u8(self.state.load(Ordering::Acquire))
    }

    fn set_state(&self, state: DeviceState) {
        self.state.store(state as u8, Ordering::Release);
    }

    fn set_fault(&self, why: String) {
        *self.fault.lock().expect("fault lock") = Some(why);
        self.set_state(DeviceState::Faulted);
    }

    /// Size of the device in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.dev.len_bytes()
    }
}

/// When the next feed runs and how much it may write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FeedStep {
    wait: Duration,
    budget: u64,
}

/// OpenZFS's feed interval (`l2arc_feed_secs`, or `l2arc_feed_min_ms` after a feed that
/// wrote over half its budget), and larch's `l2arc_feed_follow`: when blocks the feed
/// could have written left the ARC since the last feed (`behind`), the next feed comes
/// after `l2arc_feed_min_ms` with that share of the per-second budget. The feed then
/// keeps up with an ARC that turns over faster than once a second, at the same bytes per
/// second.
fn feed_step(tunables: &Tunables, budget: u64, wrote_bytes: u64, behind: bool) -> FeedStep {
    let min_ms = tunables.l2arc_feed_min_ms().max(1);
    let secs = tunables.l2arc_feed_secs().max(1);
    if tunables.l2arc_feed_again() && wrote_bytes > budget / 2 {
        return FeedStep {
            wait: Duration::from_millis(min_ms),
            budget,
        };
    }
    if behind && min_ms < secs * 1000 {
        return FeedStep {
            wait: Duration::from_millis(min_ms),
            budget: (budget * min_ms / (secs * 1000)).max(4096),
        };
    }
    FeedStep {
        wait: Duration::from_secs(secs),
        budget,
    }
}

/// Whether cache-device reads can go through io_uring.
enum UringState {
    /// Not needed yet (it is set up by the first cache-device read, on the runtime that
    /// serves it).
    Untried,
    Ready(Arc<UringReader>),
    /// Setting it up failed (why): reads use the blocking thread pool.
    Unavailable(String),
}

impl UringState {
    /// The reader to use (`Some(None)`: none, io_uring is unavailable), or `None` when one
    /// must be set up: not tried yet, or its runtime ended.
    fn settled(&self) -> Option<Option<Arc<UringReader>>> {
        match self {
            UringState::Ready(reader) if reader.is_alive() => Some(Some(Arc::clone(reader))),
            UringState::Unavailable(_) => Some(None),
            _ => None,
        }
    }
}

/// Where a block's copy lives: the device and what the index says of it.
#[derive(Clone, Copy, Debug)]
struct L2Loc {
    device: u16,
    copy: l2index::Copy,
}

/// Adds (`add`) or removes a copy of `psize` bytes in the L2 size counters.
fn account(copy: &l2index::Copy, psize: u32, stats: &EngineStats, add: bool) {
    let update = |counter: &AtomicU64, bytes: u64| {
        if add {
            counter.fetch_add(bytes, Ordering::Relaxed);
        } else {
            counter.fetch_sub(bytes, Ordering::Relaxed);
        }
    };
    let asize = u64::from(psize);
    update(&stats.l2_size, asize);
    update(&stats.l2_asize, asize);
    update(&stats.l2_blocks, 1);
    let by_state = if copy.flags & l2index::PREFETCH != 0 {
        &stats.l2_prefetch_asize
    } else if copy.flags & l2index::MFU != 0 {
        &stats.l2_mfu_asize
    } else {
        &stats.l2_mru_asize
    };
    update(by_state, asize);
    let by_type = if copy.flags & l2index::METADATA != 0 {
        &stats.l2_bufc_metadata_asize
    } else {
        &stats.l2_bufc_data_asize
    };
    update(by_type, asize);
}

/// A shard's L2 index: one compact [`DeviceIndex`] per cache device.
#[derive(Default)]
struct ShardL2 {
    devices: Vec<Option<DeviceIndex>>,
}

impl ShardL2 {
    fn device_mut(&mut self, device: u16) -> Option<&mut DeviceIndex> {
        self.devices.get_mut(usize::from(device))?.as_mut()
    }

    /// The readable copy of `key`, on whichever device holds it, marked as read (a read
    /// of it follows).
    fn get_for_read(&mut self, key: u64) -> Option<L2Loc> {
        self.devices.iter_mut().enumerate().find_map(|(i, d)| {
            let copy = d.as_mut()?.get_for_read(key)?;
            Some(L2Loc {
                device: i as u16,
                copy,
            })
        })
    }

    /// Whether any device has an entry (readable or bad) for `key`.
    fn contains(&self, key: u64) -> bool {
        self.devices.iter().flatten().any(|d| d.contains(key))
    }

    /// Removes every entry of `key` (a block of `psize` bytes; at most one entry per
    /// device), returning where they were.
    fn remove(&mut self, key: u64, psize: u32, stats: &EngineStats) -> Vec<L2Loc> {
        let mut out = Vec::new();
        for (i, d) in self.devices.iter_mut().enumerate() {
            if let Some(copy) = d.as_mut().and_then(|d| d.remove(key)) {
                account(&copy, psize, stats, false);
                out.push(L2Loc {
                    device: i as u16,
                    copy,
                });
            }
        }
        out
    }

    fn dram_bytes(&self) -> u64 {
        self.devices.iter().flatten().map(|d| d.dram_bytes()).sum()
    }
}

/// A read of a block from a cache device or the backing store that other readers of the
/// same block wait for instead of issuing their own.
struct InFlight {
    result: Mutex<Option<Option<Bytes>>>,
    done: tokio::sync::Notify,
    /// A write overtook this read: its data must not be installed in the cache.
    invalidated: AtomicBool,
}

struct Shard {
    arc: larch_policy::Arc,
    bufs: HashMap<BlockKey, Bytes>,
    inflight: HashMap<BlockKey, Arc<InFlight>>,
    l2: ShardL2,
    actions: Vec<Action>,
    /// The policy evicted something at least once (OpenZFS `arc_warm`).
    evicted_any: bool,
    /// Volume guids by slot (a copy of the engine's table), to find evicted blocks in the
    /// L2 index.
    slots: Vec<u64>,
    /// Bytes evicted from MRU and MFU whose blocks had a cache-device copy. The policy is
    /// not told of copies, so it counts them as `evict_l2_eligible`; `arcstats` moves them.
    evicted_l2_cached: [u64; 2],
}

impl Shard {
    /// Carries out what the policy decided: free evicted buffers. (The policy is never
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
                let slot = self.slots.iter().position(|&guid| guid == key.volume);
                if let Some(slot) = slot
                    && key.block <= l2index::MAX_BLOCK
                    && self.l2.contains(pack_key(slot as u16, key.block))
                {
                    self.evicted_l2_cached[state] += freed;
                }
            }
        }
    }
}

/// What a reader does after looking in the cache.
enum ReadStep {
    Hit(Bytes),
    Wait(Arc<InFlight>),
    Lead {
        flight: Arc<InFlight>,
        generation: u64,
        l2: Option<L2Loc>,
    },
}

/// A volume as the L2 index knows it: the index stores no record sizes, since a record is
/// always one whole block of its volume.
#[derive(Clone, Copy, Debug)]
struct SlotInfo {
    guid: u64,
    block_bytes: u32,
    size_bytes: u64,
}

impl SlotInfo {
    fn block_len(&self, block: u64) -> u32 {
        let start = block.saturating_mul(u64::from(self.block_bytes));
        self.size_bytes
            .saturating_sub(start)
            .min(u64::from(self.block_bytes)) as u32
    }
}

/// The engine shared by every volume of a pool.
pub struct Engine {
    shards: Box<[Mutex<Shard>]>,
    /// Serialises generation changes (writes) with L2 feed batches; see the crate docs.
    gate: Mutex<()>,
    /// Held by a feed from its batch write until its placements are indexed or
    /// tombstoned; a TXG sync takes it before committing tombstones, so no TXG writes a
    /// block to its backing store while a feed may still log an older copy of it.
    feed_io: Mutex<()>,
    /// Blocks written since the feed in flight chose its candidates (`None` when no feed
    /// is in flight): its copies of them are stale. Filled under the gate.
    feed_written: Mutex<Option<HashSet<BlockKey>>>,
    next_generation: AtomicU64,
    devices: RwLock<Vec<Arc<CacheDevice>>>,
    pending_rebuilds: AtomicUsize,
    /// Blocks written while a rebuild runs: their logged copies must not be restored.
    written_during_rebuild: Mutex<HashSet<BlockKey>>,
    /// Volumes by slot (the short volume number in L2 index keys).
    volume_slots: RwLock<Vec<SlotInfo>>,
    feeders: Mutex<Vec<JoinHandle<()>>>,
    shutdown: AtomicBool,
    started: Instant,
    /// The L2ARC tunables.
    pub tunables: Tunables,
    /// The counters.
    pub stats: EngineStats,
    /// The ARC limits the shards run with (c_min, c_max), as last applied.
    arc_limits: Mutex<(u64, u64)>,
    /// When memory pressure last stopped the ARC from growing.
    no_grow_since: Mutex<Option<Instant>>,
    /// The io_uring cache-device reads go through, once the first one set it up.
    uring: RwLock<UringState>,
    /// Transaction groups.
    txg: txg::Txg,
    /// Counters of the write path.
    pub write_stats: WriteStats,
    /// The intent log's device, if the pool has one.
    log: RwLock<Option<Arc<LogHandle>>>,
    /// Backing stores by volume guid (the syncer writes them).
    backings: RwLock<HashMap<u64, Arc<BackingStore>>>,
    /// Volumes whose backing store failed, with the reason: their writes fail.
    failed_volumes: Mutex<HashMap<u64, String>>,
    /// A write was accepted since start: a cache device added from now on is formatted,
    /// not rebuilt (its log could hold copies those writes superseded untombstoned).
    writes_seen: AtomicBool,
    syncer: Mutex<Option<JoinHandle<()>>>,
    syncer_done: AtomicBool,
    /// TXGs up to this one are on the backing stores, as the pool (not the log device)
    /// recorded it: replay skips their records even if the log could not record it.
    committed_floor: AtomicU64,
    /// Where the pool records a committed TXG when the log device cannot (OpenZFS keeps
    /// it in the pool's uberblock, off the log device, for the same reason).
    committed_sink: Mutex<Option<CommittedSink>>,
}

/// Records a committed TXG durably outside the log device (see
/// [`Engine::set_committed_txg_sink`]).
pub type CommittedSink = Box<dyn Fn(u64) -> io::Result<()> + Send + Sync>;

/// How long the ARC does not grow after memory pressure (OpenZFS `arc_grow_retry`, 5 s).
const ARC_GROW_RETRY: Duration = Duration::from_secs(5);

/// The default `zfs_dirty_data_max`: 10% of RAM, at most 4 GiB (OpenZFS).
pub fn default_dirty_data_max() -> u64 {
    meminfo()
        .map_or(4 << 30, |(total, _)| total / 10)
        .min(4 << 30)
}

/// The automatic `zfs_arc_min` for a `zfs_arc_max`.
pub fn default_arc_min(arc_max_bytes: u64) -> u64 {
    arc_max_bytes.min((32 << 20u64).max(arc_max_bytes / 32))
}

fn shard_config(c_min_bytes: u64, c_max_bytes: u64) -> ArcConfig {
    let per_shard = |bytes: u64| (bytes / SHARDS as u64).max(1);
    let mut cfg = ArcConfig::new(per_shard(c_min_bytes), per_shard(c_max_bytes));
    // The growth rule's constants are pool-wide in OpenZFS: split them over the shards.
    cfg.grow_slack_bytes /= SHARDS as u64;
    cfg.grow_step_min_bytes /= SHARDS as u64;
    cfg
}

/// MemTotal and MemAvailable of /proc/meminfo, in bytes.
fn meminfo() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    };
    Some((field("MemTotal:")?, field("MemAvailable:")?))
}

fn shard_of(key: &BlockKey) -> usize {
    let mut h = key.volume ^ key.block.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= h >> 29;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (h >> 40) as usize % SHARDS
}

fn l2_key(key: &BlockKey) -> larch_l2::BlockKey {
    larch_l2::BlockKey {
        volume_guid: key.volume,
        block_number: key.block,
    }
}

impl Engine {
    /// An engine whose ARC holds at most `arc_max_bytes` of data (`zfs_arc_max`), and
    /// its ARC size control thread (limits set at runtime, memory pressure), which stops
    /// with [`Engine::shutdown`] or when the engine is dropped.
    pub fn new(arc_max_bytes: u64) -> Arc<Engine> {
        let arc_max_bytes = arc_max_bytes.max(SHARDS as u64);
        let arc_min_bytes = default_arc_min(arc_max_bytes);
        let shards = (0..SHARDS)
            .map(|_| {
                Mutex::new(Shard {
                    arc: larch_policy::Arc::new(shard_config(arc_min_bytes, arc_max_bytes))
                        .expect("limits of at least one byte per shard are valid"),
                    bufs: HashMap::new(),
                    inflight: HashMap::new(),
                    l2: ShardL2::default(),
                    actions: Vec::new(),
                    evicted_any: false,
                    slots: Vec::new(),
                    evicted_l2_cached: [0; 2],
                })
            })
            .collect();
        // Generations only need to differ from those of older copies of the same block.
        // Starting from the wall clock in µs keeps them above any earlier run's.
        let start = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(1);
        let engine = Arc::new(Engine {
            shards,
            gate: Mutex::new(()),
            feed_io: Mutex::new(()),
            feed_written: Mutex::new(None),
            next_generation: AtomicU64::new(start),
            devices: RwLock::new(Vec::new()),
            pending_rebuilds: AtomicUsize::new(0),
            written_during_rebuild: Mutex::new(HashSet::new()),
            volume_slots: RwLock::new(Vec::new()),
            feeders: Mutex::new(Vec::new()),
            shutdown: AtomicBool::new(false),
            started: Instant::now(),
            tunables: Tunables::default(),
            stats: EngineStats::default(),
            arc_limits: Mutex::new((arc_min_bytes, arc_max_bytes)),
            no_grow_since: Mutex::new(None),
            uring: RwLock::new(UringState::Untried),
            txg: txg::Txg::new(1),
            write_stats: WriteStats::default(),
            log: RwLock::new(None),
            backings: RwLock::new(HashMap::new()),
            failed_volumes: Mutex::new(HashMap::new()),
            writes_seen: AtomicBool::new(false),
            syncer: Mutex::new(None),
            syncer_done: AtomicBool::new(false),
            committed_floor: AtomicU64::new(0),
            committed_sink: Mutex::new(None),
        });
        let syncer_engine = Arc::clone(&engine);
        let syncer = std::thread::Builder::new()
            .name("larch-txg-sync".into())
            .spawn(move || {
                syncer_engine.syncer_loop();
                syncer_engine.syncer_done.store(true, Ordering::Release);
            })
            .expect("spawn the TXG syncer");
        *engine.syncer.lock().expect("syncer lock") = Some(syncer);
        engine.tunables.store("zfs_arc_max", arc_max_bytes);
        let weak = Arc::downgrade(&engine);
        let _ = std::thread::Builder::new()
            .name("larch-arc-size".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(Duration::from_millis(250));
                    let Some(engine) = weak.upgrade() else {
                        return;
                    };
                    if engine.shutdown.load(Ordering::Acquire) {
                        return;
                    }
                    engine.adjust_arc_size();
                }
            });
        engine
    }

    /// `zfs_arc_max` as set now.
    pub fn arc_max_bytes(&self) -> u64 {
        self.tunables.zfs_arc_max()
    }

    /// The ARC limits in force: (`zfs_arc_min`, `zfs_arc_max`), the automatic minimum
    /// resolved and the minimum never above the maximum.
    pub fn arc_limits(&self) -> (u64, u64) {
        let max = self.arc_max_bytes().max(SHARDS as u64);
        let min = match self.tunables.zfs_arc_min() {
            0 => default_arc_min(max),
            n => n.min(max),
        };
        (min, max)
    }

    /// One pass of ARC size control (the daemon's thread runs it four times a second):
    /// applies changed `zfs_arc_min`/`zfs_arc_max`, and under memory pressure (available
    /// memory below `zfs_arc_sys_free`) stops growth for 5 s and shrinks the target by the
    /// shortfall, never below `zfs_arc_min` (OpenZFS `arc_reap_cb_check`/`arc_reap_cb`).
    pub fn adjust_arc_size(&self) {
        let now = self.now_ms();
        let limits = self.arc_limits();
        {
            let mut applied = self.arc_limits.lock().expect("limits lock");
            if *applied != limits {
                let cfg = shard_config(limits.0, limits.1);
                for shard in self.shards.iter() {
                    let mut shard = shard.lock().expect("shard lock");
                    let s = &mut *shard;
                    let _ = s
                        .arc
                        .set_limits(cfg.c_min_bytes, cfg.c_max_bytes, now, &mut s.actions);
                    s.apply_actions();
                }
                *applied = limits;
            }
        }
        let Some((total, available)) = meminfo() else {
            return;
        };
        let sys_free = match self.tunables.zfs_arc_sys_free() {
            0 => total / 32,
            n => n,
        };
        let free = available as i128 - sys_free as i128;
        self.stats
            .memory_available_bytes
            .store(free.max(0) as u64, Ordering::Relaxed);
        let c: u64 = self
            .shards
            .iter()
            .map(|s| s.lock().expect("shard lock").arc.c())
            .sum();
        let mut since = self.no_grow_since.lock().expect("no-grow lock");
        if free < 0 {
            // Shrink by the shortfall plus 1/128 of what is above the minimum.
            let to_free = (-free) as u64 + (c.saturating_sub(limits.0) >> 7);
            let per_shard = to_free.div_ceil(SHARDS as u64);
            for shard in self.shards.iter() {
                let mut shard = shard.lock().expect("shard lock");
                let s = &mut *shard;
                s.arc.set_no_grow(true);
                s.arc.shrink(per_shard, now, &mut s.actions);
                s.apply_actions();
            }
            self.stats
                .memory_indirect_count
                .fetch_add(1, Ordering::Relaxed);
            *since = Some(Instant::now());
        } else if (free as u64) < c >> 5 {
            // Close to the line: do not grow (OpenZFS `zfs_arc_no_grow_shift`).
            for shard in self.shards.iter() {
                shard.lock().expect("shard lock").arc.set_no_grow(true);
            }
            *since = Some(Instant::now());
        } else if since.is_some_and(|t| t.elapsed() >= ARC_GROW_RETRY) {
            for shard in self.shards.iter() {
                shard.lock().expect("shard lock").arc.set_no_grow(false);
            }
            *since = None;
        }
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn shard(&self, key: &BlockKey) -> MutexGuard<'_, Shard> {
        self.shards[shard_of(key)].lock().expect("shard lock")
    }

    /// Registers a volume (or updates its size) and returns its slot in L2 index keys.
    /// `None` when [`l2index::VOLUME_SLOTS`] volumes are registered already.
    pub fn register_volume(&self, guid: u64, block_bytes: u32, size_bytes: u64) -> Option<u16> {
        let mut slots = self.volume_slots.write().expect("slots lock");
        let info = SlotInfo {
            guid,
            block_bytes,
            size_bytes,
        };
        if let Some(i) = slots.iter().position(|s| s.guid == guid) {
            slots[i] = info;
            return Some(i as u16);
        }
        if slots.len() >= l2index::VOLUME_SLOTS {
            return None;
        }
        slots.push(info);
        let guids: Vec<u64> = slots.iter().map(|s| s.guid).collect();
        // Shards are locked after the table is released: feeds look the table up while
        // holding a shard.
        drop(slots);
        for shard in self.shards.iter() {
            shard.lock().expect("shard lock").slots = guids.clone();
        }
        Some((guids.len() - 1) as u16)
    }

    /// The L2 index key of a block known by volume guid (feeds and rebuilds; the read and
    /// write paths use the slot in [`VolumeInfo`]), with the block's size. `None` for a
    /// volume the engine does not serve or a block beyond the key.
    fn index_key(&self, key: &BlockKey) -> Option<(u64, u32)> {
        if key.block > l2index::MAX_BLOCK {
            return None;
        }
        let slots = self.volume_slots.read().expect("slots lock");
        let slot = slots.iter().position(|s| s.guid == key.volume)?;
        Some((
            pack_key(slot as u16, key.block),
            slots[slot].block_len(key.block),
        ))
    }

    /// The size of the block behind an L2 index key.
    fn psize_of(&self, index_key: u64) -> u32 {
        let (slot, block) = l2index::unpack_key(index_key);
        self.volume_slots
            .read()
            .expect("slots lock")
            .get(usize::from(slot))
            .map_or(0, |s| s.block_len(block))
    }

    fn fresh_generation(&self) -> u64 {
        self.next_generation.fetch_add(1, Ordering::Relaxed)
    }

    /// The cache devices.
    pub fn devices(&self) -> Vec<Arc<CacheDevice>> {
        self.devices.read().expect("devices lock").clone()
    }

    fn device(&self, index: u16) -> Option<Arc<CacheDevice>> {
        self.devices
            .read()
            .expect("devices lock")
            .get(usize::from(index))
            .cloned()
    }

    fn has_l2(&self) -> bool {
        self.devices
            .read()
            .expect("devices lock")
            .iter()
            .any(|d| matches!(d.state(), DeviceState::Online | DeviceState::Rebuilding))
    }

    // ---- reads ---------------------------------------------------------------------------

    fn access_of(
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

    fn read_step(&self, vol: &VolumeInfo, key: BlockKey, prefetch: bool) -> ReadStep {
        let mut shard = self.shard(&key);
        if let Some(buf) = shard.bufs.get(&key).cloned() {
            let generation = shard
                .arc
                .info(&key)
                .expect("buffered blocks have headers")
                .generation;
            let access = self.access_of(vol, key, generation, prefetch);
            let s = &mut *shard;
            let outcome = s.arc.access(&access, &mut s.actions);
            debug_assert!(outcome.is_hit(), "{key:?} buffered but {outcome:?}");
            s.apply_actions();
            return ReadStep::Hit(buf);
        }
        if let Some(flight) = shard.inflight.get(&key) {
            self.stats.iohits.fetch_add(1, Ordering::Relaxed);
            return ReadStep::Wait(Arc::clone(flight));
        }
        let generation = shard
            .arc
            .info(&key)
            .map(|i| i.generation)
            .unwrap_or_else(|| self.fresh_generation());
        let l2 = shard.l2.get_for_read(pack_key(vol.slot, key.block));
        let flight = Arc::new(InFlight {
            result: Mutex::new(None),
            done: tokio::sync::Notify::new(),
            invalidated: AtomicBool::new(false),
        });
        shard.inflight.insert(key, Arc::clone(&flight));
        ReadStep::Lead {
            flight,
            generation,
            l2,
        }
    }

    /// Reads one block of a volume through the ARC, the cache devices and the backing
    /// store. `None` means the backing store failed (the client gets EIO).
    pub async fn read_block(
        self: &Arc<Self>,
        backing: &Arc<BackingStore>,
        vol: &VolumeInfo,
        block: u64,
        prefetch: bool,
    ) -> Option<Bytes> {
        let key = BlockKey::new(vol.guid, block);
        let (flight, generation, l2) = match self.read_step(vol, key, prefetch) {
            ReadStep::Hit(buf) => return Some(buf),
            ReadStep::Wait(flight) => return wait_for(&flight).await,
            ReadStep::Lead {
                flight,
                generation,
                l2,
            } => (flight, generation, l2),
        };
        let data = match l2 {
            Some(loc) => match self.read_l2_uring(vol, key, &loc).await {
                Some(Ok(bytes)) => Some(bytes),
                // The copy failed and is marked bad: the backing store has the block.
                Some(Err(())) => self.fill_blocking(backing, vol, key, None, false).await,
                None => self.fill_blocking(backing, vol, key, Some(loc), true).await,
            },
            None => self.fill_blocking(backing, vol, key, None, true).await,
        };
        self.finish_read(vol, key, generation, prefetch, &flight, data.clone());
        data
    }

    /// [`Engine::fill`] on the blocking thread pool.
    async fn fill_blocking(
        self: &Arc<Self>,
        backing: &Arc<BackingStore>,
        vol: &VolumeInfo,
        key: BlockKey,
        l2: Option<L2Loc>,
        count_miss: bool,
    ) -> Option<Bytes> {
        let engine = Arc::clone(self);
        let backing = Arc::clone(backing);
        let vol = *vol;
        tokio::task::spawn_blocking(move || engine.fill(&backing, &vol, key, l2, count_miss))
            .await
            .ok()
            .flatten()
    }

    /// The blocking part of a miss: the cache device if it has the block (verified), else
    /// the backing store (an L2 miss if `count_miss` and the pool has cache devices).
    fn fill(
        &self,
        backing: &BackingStore,
        vol: &VolumeInfo,
        key: BlockKey,
        l2: Option<L2Loc>,
        count_miss: bool,
    ) -> Option<Bytes> {
        if let Some(loc) = l2 {
            let index_key = pack_key(vol.slot, key.block);
            match self.read_l2(&loc, vol.block_len(key.block) as u32) {
                Ok(bytes) if bytes.len() == vol.block_len(key.block) => {
                    let bytes = Bytes::from(bytes);
                    self.count_l2_hit(&bytes);
                    return Some(bytes);
                }
                Ok(_) | Err(_) => self.drop_bad_l2(key, index_key, &loc),
            }
        } else if count_miss && self.has_l2() {
            self.stats.l2_misses.fetch_add(1, Ordering::Relaxed);
        }
        let mut buf = vec![0u8; vol.block_len(key.block)];
        self.stats.backing_reads.fetch_add(1, Ordering::Relaxed);
        backing
            .read_at(&mut buf, key.block * u64::from(vol.block_bytes))
            .ok()?;
        Some(Bytes::from(buf))
    }

    /// Counts an L2 hit (the index marked the copy read when the read was decided).
    fn count_l2_hit(&self, bytes: &Bytes) {
        self.stats.l2_hits.fetch_add(1, Ordering::Relaxed);
        self.stats
            .l2_read_bytes
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
    }

    /// The io_uring reader, set up on first use; `None` when switched off
    /// (`l2arc_io_uring=0`) or unavailable.
    fn uring_reader(&self) -> Option<Arc<UringReader>> {
        if !self.tunables.l2arc_io_uring() {
            return None;
        }
        // The common case under a shared lock: every L2 hit comes here.
        if let Some(settled) = self.uring.read().expect("uring lock").settled() {
            return settled;
        }
        let mut state = self.uring.write().expect("uring lock");
        // Another reader may have set it up meanwhile.
        if let Some(settled) = state.settled() {
            return settled;
        }
        // Untried, or its runtime ended (a new one serves now): set up again.
        match UringReader::new() {
            Ok(reader) => {
                *state = UringState::Ready(Arc::clone(&reader));
                Some(reader)
            }
            Err(err) => {
                *state = UringState::Unavailable(err.to_string());
                None
            }
        }
    }

    /// How cache-device reads are done now: `io_uring`, `threads` (switched off or not
    /// set up yet) or `threads (io_uring unavailable: why)`.
    pub fn l2_read_path(&self) -> String {
        let state = self.uring.read().expect("uring lock");
        match &*state {
            UringState::Unavailable(why) => format!("threads (io_uring unavailable: {why})"),
            _ if !self.tunables.l2arc_io_uring() => "threads".into(),
            UringState::Ready(_) => "io_uring".into(),
            UringState::Untried => "io_uring (not used yet)".into(),
        }
    }

    /// Reads and verifies a cache-device copy through io_uring. `None` when io_uring is
    /// not usable for it (the caller reads on the blocking pool); `Some(Err)` when the copy
    /// failed (it is marked bad and counted).
    async fn read_l2_uring(
        &self,
        vol: &VolumeInfo,
        key: BlockKey,
        loc: &L2Loc,
    ) -> Option<Result<Bytes, ()>> {
        let reader = self.uring_reader()?;
        let index_key = pack_key(vol.slot, key.block);
        let psize = vol.block_len(key.block);
        let Some((device, geometry)) = self.readable_device(loc) else {
            self.drop_bad_l2(key, index_key, loc);
            return Some(Err(()));
        };
        let len = geometry.asize(psize as u64) as usize;
        let started = Instant::now();
        let read = reader.read(&device.dev, loc.copy.daddr, len).await;
        let bytes = match read {
            Ok(None) => return None,
            Ok(Some(bytes)) => bytes.slice(..psize),
            Err(_) => {
                self.count_l2_read(&device, psize, started, false);
                self.stats.l2_io_error.fetch_add(1, Ordering::Relaxed);
                self.drop_bad_l2(key, index_key, loc);
                return Some(Err(()));
            }
        };
        if larch_format::checksum(&bytes) != loc.copy.checksum {
            self.count_l2_read(&device, psize, started, false);
            self.stats.l2_cksum_bad.fetch_add(1, Ordering::Relaxed);
            self.drop_bad_l2(key, index_key, loc);
            return Some(Err(()));
        }
        self.count_l2_read(&device, psize, started, true);
        self.count_l2_hit(&bytes);
        Some(Ok(bytes))
    }

    /// The device holding `loc` and its geometry, if it is online (both read paths).
    fn readable_device(&self, loc: &L2Loc) -> Option<(Arc<CacheDevice>, Geometry)> {
        let device = self.device(loc.device)?;
        if device.state() != DeviceState::Online {
            return None;
        }
        let geometry = (*device.geometry.lock().expect("geometry lock"))?;
        Some((device, geometry))
    }

    /// A cache device's read counters and latency histogram, for one read.
    fn count_l2_read(&self, device: &CacheDevice, psize: usize, started: Instant, ok: bool) {
        device.io.reads.fetch_add(1, Ordering::Relaxed);
        device
            .io
            .read_bytes
            .fetch_add(psize as u64, Ordering::Relaxed);
        device.io.read_latency.record(started.elapsed());
        if !ok {
            device.io.read_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn read_l2(&self, loc: &L2Loc, psize: u32) -> Result<Vec<u8>, ()> {
        let (device, geometry) = self.readable_device(loc).ok_or(())?;
        let entry = LogEntryPhys {
            kind: EntryKind::Data,
            volume_guid: 0,
            block_number: 0,
            generation: 0,
            daddr: loc.copy.daddr,
            data_checksum: loc.copy.checksum,
            logical_size: psize,
            physical_size: psize,
            compression: Compression::Off,
            content: ContentType::Data,
            arc_state: ArcState::Mru,
            prefetch: false,
        };
        let started = Instant::now();
        let result = larch_l2::read_verified(&*device.dev, &geometry, &entry);
        self.count_l2_read(&device, psize as usize, started, result.is_ok());
        match result {
            Ok(bytes) => Ok(bytes),
            Err(larch_l2::ReadError::Checksum { .. }) => {
                self.stats.l2_cksum_bad.fetch_add(1, Ordering::Relaxed);
                Err(())
            }
            Err(_) => {
                self.stats.l2_io_error.fetch_add(1, Ordering::Relaxed);
                Err(())
            }
        }
    }

    /// A cache-device copy failed verification: the index marks it bad, so it is not read
    /// again, but keeps it until the block is overwritten (which then tombstones it) or
    /// the ring passes it. Dropping it at once would let a later overwrite skip the
    /// tombstone, and a restart could then restore this copy if its failure was transient.
    fn drop_bad_l2(&self, key: BlockKey, index_key: u64, loc: &L2Loc) {
        let mut shard = self.shard(&key);
        if let Some(d) = shard.l2.device_mut(loc.device) {
            d.mark_bad(index_key, loc.copy.ring_pos);
        }
    }

    fn finish_read(
        &self,
        vol: &VolumeInfo,
        key: BlockKey,
        generation: u64,
        prefetch: bool,
        flight: &Arc<InFlight>,
        data: Option<Bytes>,
    ) {
        {
            let mut shard = self.shard(&key);
            if shard
                .inflight
                .get(&key)
                .is_some_and(|f| Arc::ptr_eq(f, flight))
            {
                shard.inflight.remove(&key);
            }
            if let Some(bytes) = &data
                && !flight.invalidated.load(Ordering::Acquire)
                && !shard.bufs.contains_key(&key)
            {
                let access = self.access_of(vol, key, generation, prefetch);
                let s = &mut *shard;
                s.arc.access(&access, &mut s.actions);
                s.apply_actions();
                if s.arc.info(&key).is_some_and(|i| i.state.is_resident()) {
                    s.bufs.insert(key, bytes.clone());
                }
            }
        }
        *flight.result.lock().expect("flight lock") = Some(data);
        flight.done.notify_waiters();
    }

    // ---- writes --------------------------------------------------------------------------

    /// Makes whole blocks the new contents of a volume's blocks in the cache (dirty until
    /// [`Engine::write_done`]) and appends a tombstone for every cache-device copy of them
    /// to that device's open log block; the TXG sync commits them before the blocks reach
    /// the backing store. Returns the new generations.
    fn write_prepare(&self, vol: &VolumeInfo, blocks: &[(u64, Bytes)]) -> Vec<u64> {
        let _gate = self.gate.lock().expect("gate lock");
        let rebuilding = self.pending_rebuilds.load(Ordering::Acquire) > 0;
        let mut tombstones: Vec<(u16, BlockKey, u64)> = Vec::new();
        let mut generations = Vec::with_capacity(blocks.len());
        let now = self.now_ms();
        for (block, data) in blocks {
            let key = BlockKey::new(vol.guid, *block);
            let generation = self.fresh_generation();
            let mut shard = self.shard(&key);
            if let Some(flight) = shard.inflight.remove(&key) {
                flight.invalidated.store(true, Ordering::Release);
            }
            let psize = vol.block_len(*block) as u32;
            for loc in shard
                .l2
                .remove(pack_key(vol.slot, *block), psize, &self.stats)
            {
                tombstones.push((loc.device, key, generation));
            }
            let s = &mut *shard;
            s.arc.write(
                key,
                generation,
                data.len() as u32,
                BufType::Data,
                now,
                &mut s.actions,
            );
            s.apply_actions();
            s.bufs.insert(key, data.clone());
            drop(shard);
            if rebuilding {
                self.written_during_rebuild
                    .lock()
                    .expect("rebuild set lock")
                    .insert(key);
            }
            if let Some(written) = self.feed_written.lock().expect("feed set lock").as_mut() {
                written.insert(key);
            }
            generations.push(generation);
        }
        self.append_tombstones(&tombstones);
        generations
    }

    /// Appends tombstones to the devices' open log blocks (durable with the next commit:
    /// a feed batch, a TXG sync, or a full block). A device that cannot take them is
    /// faulted and its log invalidated.
    fn append_tombstones(&self, tombstones: &[(u16, BlockKey, u64)]) {
        for (index, key, generation) in tombstones {
            let Some(device) = self.device(*index) else {
                continue;
            };
            let mut writer = device.writer.lock().expect("writer lock");
            let Some(l2) = writer.as_mut() else {
                continue;
            };
            self.stats.l2_tombstones.fetch_add(1, Ordering::Relaxed);
            if let Err(err) = l2.tombstone(l2_key(key), *generation) {
                *writer = None;
                drop(writer);
                invalidate_log(&device);
                device.set_fault(format!("tombstone write failed: {err}"));
                self.forget_device(device.index);
            }
        }
    }

    /// Commits every cache device's open log block (the tombstones of a TXG), before the
    /// TXG writes the backing stores. A device that fails is faulted, its log invalidated.
    fn commit_tombstones(&self) {
        let _feed = self.feed_io.lock().expect("feed lock");
        let _gate = self.gate.lock().expect("gate lock");
        for device in self.devices() {
            let mut writer = device.writer.lock().expect("writer lock");
            let Some(l2) = writer.as_mut() else {
                continue;
            };
            if l2.open_entries() == 0 {
                continue;
            }
            if let Err(err) = l2.commit_log() {
                *writer = None;
                drop(writer);
                invalidate_log(&device);
                device.set_fault(format!("tombstone commit failed: {err}"));
                self.forget_device(device.index);
            }
        }
    }

    /// The backing-store write of `generation` completed: the block is clean.
    pub fn write_done(&self, vol: &VolumeInfo, block: u64, generation: u64) {
        let key = BlockKey::new(vol.guid, block);
        let mut shard = self.shard(&key);
        let s = &mut *shard;
        let now = self.now_ms();
        let l2cache = vol.secondarycache == CacheMode::All;
        if s.arc
            .write_done(&key, generation, l2cache, now, &mut s.actions)
            && vol.primarycache != CacheMode::All
        {
            s.arc.remove(&key, &mut s.actions);
        }
        s.apply_actions();
    }

    /// The backing-store write failed: the new contents are not stored anywhere, so the
    /// cache must not keep them either.
    pub fn write_failed(&self, vol: &VolumeInfo, block: u64, generation: u64) {
        let key = BlockKey::new(vol.guid, block);
        let mut shard = self.shard(&key);
        let s = &mut *shard;
        if s.arc.info(&key).is_some_and(|i| i.generation == generation) {
            s.arc.remove(&key, &mut s.actions);
            s.apply_actions();
            s.bufs.remove(&key);
        }
    }

    // ---- volumes and the log device ---------------------------------------------------

    /// Gives the syncer a volume's backing store.
    pub fn attach_backing(&self, volume: u64, backing: Arc<BackingStore>) {
        self.backings
            .write()
            .expect("backings lock")
            .insert(volume, backing);
    }

    fn backing_of(&self, volume: u64) -> Option<Arc<BackingStore>> {
        self.backings
            .read()
            .expect("backings lock")
            .get(&volume)
            .cloned()
    }

    /// Why writes to a volume fail, if they do (its backing store failed).
    pub fn volume_failure(&self, vol: &VolumeInfo) -> Option<String> {
        self.failed_volumes
            .lock()
            .expect("failures lock")
            .get(&vol.guid)
            .cloned()
    }

    fn fail_volume(&self, volume: u64, why: &str) {
        self.failed_volumes
            .lock()
            .expect("failures lock")
            .entry(volume)
            .or_insert_with(|| why.to_string());
    }

    fn syncer_running(&self) -> bool {
        !self.syncer_done.load(Ordering::Acquire)
    }

    /// The log device, if one is attached.
    pub fn log_device(&self) -> Option<Arc<LogHandle>> {
        self.log.read().expect("log lock").clone()
    }

    fn log_is_usable(&self) -> bool {
        self.log_device().is_some_and(|l| l.is_healthy())
    }

    /// Attaches the pool's log device. `create` formats it; otherwise its log is replayed
    /// first: every record newer than the last committed TXG is written to its volume's
    /// backing store (which is then flushed), its blocks' cache-device copies are
    /// tombstoned by the rebuild that follows, and TXG numbers continue after the log's.
    /// Call it after the volumes' backing stores are attached and before cache devices
    /// are added. Returns the records replayed.
    pub fn attach_log(
        &self,
        path: &Path,
        pool_guid: u64,
        device_guid: u64,
        create: bool,
    ) -> io::Result<u64> {
        let named =
            |e: &dyn std::fmt::Display| io::Error::other(format!("{}: {e}", path.display()));
        let dev = Arc::new(FileDevice::open(path, &FileOptions::default()).map_err(|e| named(&e))?);
        self.attach_log_device(dev, path, pool_guid, device_guid, create)
    }

    /// [`Engine::attach_log`] on any [`BlockDevice`] (in-process tests use a
    /// fault-injecting one); `path` names it.
    pub fn attach_log_device(
        &self,
        dev: Arc<dyn BlockDevice>,
        path: &Path,
        pool_guid: u64,
        device_guid: u64,
        create: bool,
    ) -> io::Result<u64> {
        let named =
            |e: &dyn std::fmt::Display| io::Error::other(format!("{}: {e}", path.display()));
        let (device, replayed) = if create {
            let device =
                larch_zil::LogDevice::create(dev, pool_guid, device_guid).map_err(|e| named(&e))?;
            (device, 0)
        } else {
            let (device, replay) =
                larch_zil::LogDevice::open(dev, pool_guid).map_err(|e| named(&e))?;
            if device.device_guid() != device_guid {
                return Err(named(&format!(
                    "log device guid {:#x}, the pool expects {device_guid:#x}",
                    device.device_guid()
                )));
            }
            let replayed = self.replay_log(&replay)?;
            let next = replay
                .committed_txg
                .max(replay.max_txg().unwrap_or(0))
                .max(self.committed_floor.load(Ordering::Acquire))
                + 1;
            self.txg.start_at(next);
            (device, replayed)
        };
        // Writes acknowledged before the log takes over have no records in it: sync them
        // first, so that a FLUSH answered from the log covers them too.
        let open = self.txg_state().1;
        if let Err(why) = self.wait_synced_quiet(open) {
            return Err(io::Error::other(format!(
                "syncing before the log device takes over: {why}"
            )));
        }
        *self.log.write().expect("log lock") = Some(Arc::new(LogHandle {
            path: path.to_path_buf(),
            guid: device_guid,
            device,
            fault: Mutex::new(None),
            draining: AtomicBool::new(false),
        }));
        Ok(replayed)
    }

    /// The committed TXG the pool recorded outside the log device (its state directory),
    /// and where to record later ones when the log device cannot take them (a failed or
    /// removed log). Call before [`Engine::attach_log`]: replay skips records of TXGs up to
    /// the floor, which the backing stores hold (possibly with newer data on top).
    pub fn set_committed_txg_sink(&self, floor: u64, sink: CommittedSink) {
        self.committed_floor.store(floor, Ordering::Release);
        *self.committed_sink.lock().expect("sink lock") = Some(sink);
    }

    /// Records that TXGs up to `txg` are on the backing stores when the log device could
    /// not: through the pool's sink, and in the replay floor.
    fn record_committed_elsewhere(&self, txg: u64) -> Result<(), String> {
        self.committed_floor.fetch_max(txg, Ordering::AcqRel);
        match self.committed_sink.lock().expect("sink lock").as_ref() {
            Some(sink) => sink(txg).map_err(|e| format!("recording committed TXG {txg}: {e}")),
            None => Err(format!(
                "no place to record committed TXG {txg}: a restart may replay older log records"
            )),
        }
    }

    /// Applies replayed records (see [`Engine::attach_log`]).
    fn replay_log(&self, replay: &larch_zil::Replay) -> io::Result<u64> {
        let floor = self.committed_floor.load(Ordering::Acquire);
        let mut touched: HashMap<u64, Arc<BackingStore>> = HashMap::new();
        let mut written = self
            .written_during_rebuild
            .lock()
            .expect("rebuild set lock");
        let mut applied = 0;
        for record in replay.records.iter().filter(|r| r.txg > floor) {
            applied += 1;
            let Some(backing) = self.backing_of(record.volume_id) else {
                return Err(io::Error::other(format!(
                    "the intent log has writes of volume {:#x}, which the pool does not have",
                    record.volume_id
                )));
            };
            let end = record.offset_bytes + record.data.len() as u64;
            if end > backing.size_bytes() {
                return Err(io::Error::other(format!(
                    "an intent-log record of volume {:#x} ends at {end}, past its size",
                    record.volume_id
                )));
            }
            backing.write_at(&record.data, record.offset_bytes)?;
            let block_bytes = self
                .volume_slots
                .read()
                .expect("slots lock")
                .iter()
                .find(|s| s.guid == record.volume_id)
                .map_or(4096, |s| u64::from(s.block_bytes));
            if !record.data.is_empty() {
                for block in record.offset_bytes / block_bytes..=(end - 1) / block_bytes {
                    written.insert(BlockKey::new(record.volume_id, block));
                }
            }
            touched.insert(record.volume_id, backing);
        }
        for backing in touched.values() {
            backing.flush()?;
        }
        Ok(applied)
    }

    // ---- cache devices -------------------------------------------------------------------

    /// Adds a cache device: formats it (`create`) or opens it and rebuilds its index in
    /// the background. A device whose header names another pool or device is refused.
    pub fn add_cache_device(
        self: &Arc<Self>,
        path: &Path,
        pool_guid: u64,
        device_guid: u64,
        create: bool,
    ) -> io::Result<Arc<CacheDevice>> {
        let dev = FileDevice::open(path, &FileOptions::default())
            .map_err(|e| io::Error::other(format!("{}: {e}", path.display())))?;
        let dev = Arc::new(dev);
        let mut devices = self.devices.write().expect("devices lock");
        let device = Arc::new(CacheDevice {
            index: devices.len() as u16,
            path: path.to_path_buf(),
            guid: device_guid,
            dev: Arc::clone(&dev),
            writer: Mutex::new(None),
            geometry: Mutex::new(None),
            state: AtomicU8::new(DeviceState::Rebuilding as u8),
            fault: Mutex::new(None),
            rebuild: Mutex::new(None),
            rebuild_progress: AtomicU64::new(0),
            rebuild_permille: AtomicU64::new(0),
            io: DeviceIo::default(),
        });
        let rebuild = !create
            && !self.writes_seen.load(Ordering::Acquire)
            && self.tunables.l2arc_rebuild_enabled()
            && dev.len_bytes() >= self.tunables.l2arc_rebuild_blocks_min_l2size();
        if !rebuild {
            let options = CreateOptions {
                pool_guid,
                device_guid,
                ..CreateOptions::default()
            };
            let mut l2 = L2Device::create(Arc::clone(&dev), &options)
                .map_err(|e| io::Error::other(format!("{}: {e}", path.display())))?;
            l2.set_track_records(false);
            self.attach_index(&device, l2.geometry())
                .map_err(|e| io::Error::other(format!("{}: {e}", path.display())))?;
            *device.geometry.lock().expect("geometry lock") = Some(l2.geometry());
            *device.writer.lock().expect("writer lock") = Some(l2);
            device.set_state(DeviceState::Online);
        } else {
            // Refuse foreign devices at once, before serving anything.
            let header = larch_l2::read_header(&*dev).map_err(|e| {
                io::Error::other(format!("{}: not a larch cache device: {e}", path.display()))
            })?;
            larch_l2::validate_header(
                &header.header,
                dev.len_bytes(),
                Some((pool_guid, device_guid)),
            )
            .map_err(|e| io::Error::other(format!("{}: {e}", path.display())))?;
            self.pending_rebuilds.fetch_add(1, Ordering::AcqRel);
        }
        devices.push(Arc::clone(&device));
        drop(devices);
        let engine = Arc::clone(self);
        let feeder_device = Arc::clone(&device);
        let handle = std::thread::Builder::new()
            .name(format!("larch-l2-{}", device.index))
            .spawn(move || {
                if rebuild {
                    engine.rebuild_device(&feeder_device, pool_guid);
                }
                engine.feed_loop(&feeder_device);
            })?;
        self.feeders.lock().expect("feeders lock").push(handle);
        Ok(device)
    }

    /// Opens a device's log, restores its live entries into the L2 index, and puts it
    /// online. Entries for blocks written since start, and entries past the index's
    /// memory cap, are tombstoned instead.
    fn rebuild_device(&self, device: &Arc<CacheDevice>, pool_guid: u64) {
        let progress_device = Arc::clone(device);
        let mut progress = move |p: &larch_l2::RebuildProgress| {
            progress_device
                .rebuild_progress
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
            Arc::clone(&device.dev),
            Some((pool_guid, device.guid)),
            &mut options,
        );
        let (mut l2, outcome) = match opened {
            Ok(pair) => pair,
            Err(err) => {
                device.set_fault(format!("rebuild failed: {err}"));
                self.pending_rebuilds.fetch_sub(1, Ordering::AcqRel);
                return;
            }
        };
        let geometry = l2.geometry();
        l2.set_track_records(false);
        if let Err(err) = self.attach_index(device, geometry) {
            device.set_fault(err);
            self.pending_rebuilds.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        *device.geometry.lock().expect("geometry lock") = Some(geometry);
        // Holding the gate: no write can change a generation while entries go in.
        let _gate = self.gate.lock().expect("gate lock");
        let written = self
            .written_during_rebuild
            .lock()
            .expect("rebuild set lock")
            .clone();
        // The index takes copies in ring order.
        let mut order: Vec<&larch_l2::RestoredEntry> = outcome.entries.iter().collect();
        order.sort_unstable_by_key(|r| r.ring_pos);
        let cap = self.l2_index_cap();
        let mut over_cap = false;
        let mut stale = Vec::new();
        for (n, restored) in order.into_iter().enumerate() {
            let e = &restored.entry;
            let key = BlockKey::new(e.volume_guid, e.block_number);
            if n % 16384 == 0 && !over_cap && self.l2_index_bytes() >= cap {
                over_cap = true;
            }
            // A copy the index cannot hold is tombstoned: only indexed copies are
            // tombstoned when their block is overwritten later.
            let mut indexed = false;
            if over_cap {
                self.stats.l2_rebuild_lowmem.fetch_add(1, Ordering::Relaxed);
            } else if !written.contains(&key)
                && e.compression == Compression::Off
                && e.logical_size == e.physical_size
                && let Some((index_key, psize)) = self.index_key(&key)
                && psize == e.physical_size
            {
                let mut shard = self.shard(&key);
                if !shard.l2.contains(index_key) {
                    let mut flags = 0;
                    if e.arc_state == ArcState::Mfu {
                        flags |= l2index::MFU;
                    }
                    if e.prefetch {
                        flags |= l2index::PREFETCH;
                    }
                    if e.content == ContentType::Metadata {
                        flags |= l2index::METADATA;
                    }
                    if let Some(d) = shard.l2.device_mut(device.index)
                        && d.push(index_key, restored.ring_pos, e.data_checksum, flags)
                    {
                        indexed = true;
                        let copy = d.get(index_key).expect("just pushed");
                        account(&copy, psize, &self.stats, true);
                    }
                }
            }
            if !indexed {
                stale.push((key, e.generation));
            }
        }
        let result = stale
            .iter()
            .try_for_each(|(key, generation)| l2.tombstone(l2_key(key), *generation))
            .and_then(|()| l2.commit_log().map(|_| ()));
        if let Err(err) = result {
            self.forget_device(device.index);
            invalidate_log(device);
            device.set_fault(format!("tombstone write after rebuild failed: {err}"));
            self.pending_rebuilds.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        self.stats
            .l2_tombstones
            .fetch_add(stale.len() as u64, Ordering::Relaxed);
        *device.rebuild.lock().expect("rebuild lock") = Some(outcome.stats);
        *device.writer.lock().expect("writer lock") = Some(l2);
        device.set_state(DeviceState::Online);
        if self.pending_rebuilds.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.written_during_rebuild
                .lock()
                .expect("rebuild set lock")
                .clear();
        }
    }

    /// Gives every shard an empty index for `device`.
    fn attach_index(&self, device: &CacheDevice, geometry: Geometry) -> Result<(), String> {
        let fresh = || {
            DeviceIndex::new(
                geometry.ring_start,
                geometry.ring_bytes(),
                geometry.sector_bytes,
            )
        };
        if fresh().is_none() {
            return Err(format!(
                "a ring of {} bytes in {}-byte sectors is too large for the L2 index",
                geometry.ring_bytes(),
                geometry.sector_bytes
            ));
        }
        for shard in self.shards.iter() {
            let mut shard = shard.lock().expect("shard lock");
            let slot = usize::from(device.index);
            if shard.l2.devices.len() <= slot {
                shard.l2.devices.resize_with(slot + 1, || None);
            }
            shard.l2.devices[slot] = fresh();
        }
        Ok(())
    }

    /// DRAM held by the L2 index (`l2_hdr_size`).
    pub fn l2_index_bytes(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.lock().expect("shard lock").l2.dram_bytes())
            .sum()
    }

    /// The most DRAM the L2 index may take: `l2arc_meta_percent` of `zfs_arc_max`, but
    /// at least [`L2_INDEX_MIN_CAP`] (the index allocates in chunks per shard and device).
    fn l2_index_cap(&self) -> u64 {
        let percent = self.tunables.l2arc_meta_percent();
        (self.arc_max_bytes().saturating_mul(percent) / 100).max(L2_INDEX_MIN_CAP)
    }

    /// Whether the ARC has evicted anything yet (OpenZFS `arc_warm`): until then feeds
    /// may write `l2arc_write_boost` more.
    pub fn arc_warm(&self) -> bool {
        self.shards
            .iter()
            .any(|s| s.lock().expect("shard lock").evicted_any)
    }

    // ---- the feeder ----------------------------------------------------------------------

    fn feed_loop(&self, device: &Arc<CacheDevice>) {
        let mut wrote_bytes = 0u64;
        let mut unfed_seen = self.unfed_evictions();
        let mut behind = false;
        while !self.shutdown.load(Ordering::Acquire) {
            let mut budget = self.tunables.l2arc_write_max().max(4096);
            if !self.arc_warm() {
                budget += self.tunables.l2arc_write_boost();
            }
            let step = feed_step(
                &self.tunables,
                budget,
                wrote_bytes,
                behind && self.tunables.l2arc_feed_follow(),
            );
            self.sleep_unless_shutdown(step.wait);
            if self.shutdown.load(Ordering::Acquire) {
                break;
            }
            wrote_bytes = match device.state() {
                DeviceState::Online => self.feed_once(device, step.budget),
                _ => 0,
            };
            // Blocks the feed would have written left the ARC before it came round.
            let unfed = self.unfed_evictions();
            behind = unfed > unfed_seen;
            unfed_seen = unfed;
        }
    }

    /// Bytes evicted from the ARC that were eligible for a cache device and had no copy
    /// there (what the feed missed, plus blocks it skips: prefetched, written).
    fn unfed_evictions(&self) -> u64 {
        self.shards
            .iter()
            .map(|shard| {
                let shard = shard.lock().expect("shard lock");
                let [mru, mfu] = shard.evicted_l2_cached;
                shard
                    .arc
                    .stats()
                    .evict_l2_eligible
                    .saturating_sub(mru + mfu)
            })
            .sum()
    }

    fn sleep_unless_shutdown(&self, wait: Duration) {
        let deadline = Instant::now() + wait;
        while !self.shutdown.load(Ordering::Acquire) {
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            std::thread::sleep((deadline - now).min(Duration::from_millis(50)));
        }
    }

    /// One feed: scan the cold ends (metadata first, MFU before MRU), copy eligible clean
    /// blocks into one batch, write it at the write hand, index the placements and drop
    /// what the evict hand overwrote. Returns the bytes written.
    pub fn feed_once(&self, device: &Arc<CacheDevice>, budget_bytes: u64) -> u64 {
        if self.l2_index_bytes() >= self.l2_index_cap() {
            // OpenZFS `l2arc_hdr_limit_reached`: no feed while the index is at its cap.
            self.stats
                .l2_hdr_limit_skips
                .fetch_add(1, Ordering::Relaxed);
            return 0;
        }
        // One feed at a time does I/O (see `feed_io`); from here on, writes are recorded
        // so that this feed's copies of blocks they overwrite are known to be stale.
        let _io = self.feed_io.lock().expect("feed lock");
        {
            let _gate = self.gate.lock().expect("gate lock");
            *self.feed_written.lock().expect("feed set lock") = Some(HashSet::new());
        }
        let finished = FeedWatch(&self.feed_written);
        let noprefetch = self.tunables.l2arc_noprefetch();
        let nowrite = self.tunables.l2arc_nowrite();
        let mfuonly = self.tunables.l2arc_mfuonly();
        let headroom = self.tunables.l2arc_headroom();
        let headroom_boost = self.tunables.l2arc_headroom_boost();
        let max_batch = {
            let writer = device.writer.lock().expect("writer lock");
            match writer.as_ref() {
                // The batch also carries log blocks, sector padding and perhaps a skipped
                // ring tail: keep the data to 3/4 of what one batch may span.
                Some(l2) => (l2.max_batch_bytes() / 4 * 3).min(budget_bytes),
                None => return 0,
            }
        };
        let scan_limit = if headroom == 0 {
            u64::MAX
        } else {
            max_batch
                .saturating_mul(headroom)
                .saturating_mul(headroom_boost)
                / 100
        };
        let per_shard_budget = (max_batch / SHARDS as u64).max(1);
        let per_shard_scan = (scan_limit / SHARDS as u64).max(1);
        let order: &[(State, BufType)] = &[
            (State::Mfu, BufType::Metadata),
            (State::Mru, BufType::Metadata),
            (State::Mfu, BufType::Data),
            (State::Mru, BufType::Data),
        ];
        let mut candidates: Vec<(BlockKey, u64, Bytes, State, BufType, bool)> = Vec::new();
        for shard in self.shards.iter() {
            let shard = shard.lock().expect("shard lock");
            let (mut taken, mut scanned) = (0u64, 0u64);
            for &(state, buf_type) in order {
                let allowed = match mfuonly {
                    1 => state == State::Mfu,
                    2 => state == State::Mfu || buf_type == BufType::Metadata,
                    _ => true,
                };
                if !allowed {
                    continue;
                }
                for info in shard.arc.cold_end(state, buf_type) {
                    scanned += u64::from(info.size_bytes);
                    if scanned > per_shard_scan || taken >= per_shard_budget {
                        break;
                    }
                    if !info.l2cache || (noprefetch && info.prefetch) || (nowrite && info.written) {
                        continue;
                    }
                    let Some((index_key, _)) = self.index_key(&info.key) else {
                        continue;
                    };
                    if shard.l2.contains(index_key) {
                        continue;
                    }
                    let Some(buf) = shard.bufs.get(&info.key) else {
                        continue;
                    };
                    taken += buf.len() as u64;
                    candidates.push((
                        info.key,
                        info.generation,
                        buf.clone(),
                        state,
                        buf_type,
                        info.prefetch,
                    ));
                }
            }
        }
        if candidates.is_empty() {
            return 0;
        }
        // The batch is written without the gate, so writes go on meanwhile; what they
        // overwrite is sorted out below under the gate.
        candidates.retain(|(key, generation, ..)| {
            self.shard(key).arc.info(key).is_some_and(|i| {
                i.generation == *generation && i.state.is_resident() && i.state != State::Anon
            })
        });
        let records: Vec<Record<'_>> = candidates
            .iter()
            .map(|(key, generation, buf, state, buf_type, prefetch)| Record {
                key: l2_key(key),
                generation: *generation,
                bytes: buf,
                logical_size: buf.len() as u32,
                compression: Compression::Off,
                content: if *buf_type == BufType::Metadata {
                    ContentType::Metadata
                } else {
                    ContentType::Data
                },
                arc_state: if *state == State::Mfu {
                    ArcState::Mfu
                } else {
                    ArcState::Mru
                },
                prefetch: *prefetch,
            })
            .collect();
        if records.is_empty() {
            return 0;
        }
        let mut writer = device.writer.lock().expect("writer lock");
        let Some(l2) = writer.as_mut() else {
            return 0;
        };
        // The evict hand moves first: index entries below its floor go before the batch
        // overwrites their records, so no reader is sent to overwritten space.
        let evict = |floor: u64| {
            for shard in self.shards.iter() {
                let mut shard = shard.lock().expect("shard lock");
                if let Some(d) = shard.l2.device_mut(device.index) {
                    d.evict_below(floor, |index_key, copy| {
                        let psize = self.psize_of(index_key);
                        account(&copy, psize, &self.stats, false);
                        self.stats.l2_evicted.fetch_add(1, Ordering::Relaxed);
                        if copy.flags & l2index::READ == 0 {
                            self.stats
                                .l2_wasted_feed_bytes
                                .fetch_add(u64::from(psize), Ordering::Relaxed);
                        }
                    });
                }
            }
        };
        // Commit the log with the batch, so that a crash loses at most the feed in flight
        // (an open log block would otherwise wait for 1022 entries).
        let started = Instant::now();
        let outcome = match l2
            .write_batch_with(&records, evict)
            .and_then(|outcome| l2.commit_log().map(|_| outcome))
        {
            Ok(outcome) => outcome,
            Err(err) if !l2.is_poisoned() => {
                // Refused before anything was written (the plan did not fit): the device
                // is fine; this feed is skipped.
                self.stats.l2_writes_error.fetch_add(1, Ordering::Relaxed);
                eprintln!("larch: feed of {} skipped: {err}", device.path.display());
                return 0;
            }
            Err(err) => {
                self.stats.l2_writes_error.fetch_add(1, Ordering::Relaxed);
                *writer = None;
                drop(writer);
                invalidate_log(device);
                device.set_fault(format!("feed write failed: {err}"));
                self.forget_device(device.index);
                return 0;
            }
        };
        drop(writer);
        let write_time = started.elapsed();
        self.stats.l2_writes_sent.fetch_add(1, Ordering::Relaxed);
        self.stats.l2_feeds.fetch_add(1, Ordering::Relaxed);
        let mut written = 0u64;
        let mut unindexed = Vec::new();
        // Under the gate: a copy whose block was written during the batch is stale, and is
        // tombstoned instead of indexed (committed by the next TXG sync before that write
        // reaches the backing store, see `feed_io`).
        let _gate = self.gate.lock().expect("gate lock");
        let overwritten = finished.take();
        for ((key, generation, buf, state, buf_type, prefetch), placement) in
            candidates.iter().zip(&outcome.placements)
        {
            let mut flags = 0;
            if *state == State::Mfu {
                flags |= l2index::MFU;
            }
            if *prefetch {
                flags |= l2index::PREFETCH;
            }
            if *buf_type == BufType::Metadata {
                flags |= l2index::METADATA;
            }
            let index_key = self.index_key(key);
            let mut shard = self.shard(key);
            // Stale if written since the candidates were chosen (evicted meanwhile is fine).
            let current = !overwritten.contains(key)
                && shard
                    .arc
                    .info(key)
                    .is_none_or(|i| i.generation == *generation);
            let indexed = current
                && index_key.is_some_and(|(index_key, psize)| {
                    let Some(d) = shard.l2.device_mut(device.index) else {
                        return false;
                    };
                    // A block whose volume changed size since it was read is not indexed.
                    let pushed = psize as usize == buf.len()
                        && d.push(
                            index_key,
                            placement.ring_pos,
                            placement.data_checksum,
                            flags,
                        );
                    if pushed {
                        let copy = d.get(index_key).expect("just pushed");
                        account(&copy, psize, &self.stats, true);
                    }
                    pushed
                });
            drop(shard);
            if !indexed {
                // Logged but not indexed (stale, or the index cannot hold it): a later
                // overwrite would not tombstone it, so it is tombstoned now.
                unindexed.push((device.index, *key, *generation));
            }
            written += buf.len() as u64;
        }
        self.append_tombstones(&unindexed);
        self.stats
            .l2_write_bytes
            .fetch_add(written, Ordering::Relaxed);
        device.io.writes.fetch_add(1, Ordering::Relaxed);
        device.io.write_bytes.fetch_add(written, Ordering::Relaxed);
        device.io.write_latency.record(write_time);
        written
    }

    /// Drops every index entry that points at a device.
    fn forget_device(&self, index: u16) {
        for shard in self.shards.iter() {
            let mut shard = shard.lock().expect("shard lock");
            if let Some(d) = shard.l2.device_mut(index) {
                for (index_key, copy) in d.drain_live() {
                    account(&copy, self.psize_of(index_key), &self.stats, false);
                }
            }
            if let Some(slot) = shard.l2.devices.get_mut(usize::from(index)) {
                *slot = None;
            }
        }
    }

    /// Removes a cache device at runtime: no new reads go to it, its index entries are
    /// dropped, and its log is invalidated: writes from now on no longer tombstone its
    /// copies, so a later `add` must start it empty, never rebuild it.
    pub fn remove_cache_device(&self, index: u16) -> bool {
        let Some(device) = self.device(index) else {
            return false;
        };
        let _gate = self.gate.lock().expect("gate lock");
        device.set_state(DeviceState::Removed);
        *device.writer.lock().expect("writer lock") = None;
        invalidate_log(&device);
        self.forget_device(index);
        true
    }

    // ---- shutdown and stats ----------------------------------------------------------------

    /// Syncs what is dirty, stops the feeders and commits every open log block, so a
    /// restart comes back warm.
    pub fn shutdown(&self) {
        self.shutdown.store(true, Ordering::Release);
        self.txg.changed.notify_all();
        let syncer = self.syncer.lock().expect("syncer lock").take();
        if let Some(handle) = syncer {
            let _ = handle.join();
        }
        let handles: Vec<_> = self
            .feeders
            .lock()
            .expect("feeders lock")
            .drain(..)
            .collect();
        for handle in handles {
            let _ = handle.join();
        }
        let _gate = self.gate.lock().expect("gate lock");
        for device in self.devices() {
            if let Some(l2) = device.writer.lock().expect("writer lock").as_mut() {
                let _ = l2.commit_log();
            }
        }
    }

    /// The report of every cache device.
    pub fn device_reports(&self) -> Vec<crate::report::CacheDeviceReport> {
        use crate::report::{CacheDeviceReport, LatencyReport, RebuildReport};
        self.devices()
            .iter()
            .map(|d| {
                let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
                CacheDeviceReport {
                    path: d.path.display().to_string(),
                    guid: d.guid,
                    size_bytes: d.size_bytes(),
                    state: d.state(),
                    fault: d.fault.lock().expect("fault lock").clone(),
                    rebuild_entries: load(&d.rebuild_progress),
                    rebuild_permille: load(&d.rebuild_permille),
                    reads: load(&d.io.reads),
                    read_bytes: load(&d.io.read_bytes),
                    read_errors: load(&d.io.read_errors),
                    writes: load(&d.io.writes),
                    write_bytes: load(&d.io.write_bytes),
                    read_latency: LatencyReport::of(&d.io.read_latency.snapshot()),
                    write_latency: LatencyReport::of(&d.io.write_latency.snapshot()),
                    rebuild: (*d.rebuild.lock().expect("rebuild lock")).map(|r| RebuildReport {
                        success: r.l2_rebuild_success,
                        bufs: r.l2_rebuild_bufs,
                        log_blocks: r.l2_rebuild_log_blks,
                        io_errors: r.l2_rebuild_io_errors,
                        cksum_lb_errors: r.l2_rebuild_cksum_lb_errors,
                    }),
                }
            })
            .collect()
    }

    /// The report of the log device, if there is one.
    pub fn log_report(&self) -> Option<crate::report::LogDeviceReport> {
        self.log_device().map(|l| {
            let s = l.stats();
            crate::report::LogDeviceReport {
                path: l.path.display().to_string(),
                guid: l.guid,
                state: if l.is_healthy() { "online" } else { "faulted" }.to_string(),
                fault: l.fault.lock().expect("fault lock").clone(),
                commits: s.zil_commit_count,
                blocks_written: s.zil_commit_writer_count,
                records: s.zil_itx_count,
                bytes: s.zil_itx_copied_bytes,
            }
        })
    }

    /// ARC counters summed over the shards (targets and fractions as the shards hold them,
    /// fractions averaged), followed by the engine's L2 counters.
    pub fn arcstats(&self) -> Vec<(String, u64)> {
        let mut sums: Vec<(String, u64)> = Vec::new();
        let mut l2_cached = [0u64; 2];
        for shard in self.shards.iter() {
            let shard = shard.lock().expect("shard lock");
            let stats = shard.arc.kstats();
            l2_cached[0] += shard.evicted_l2_cached[0];
            l2_cached[1] += shard.evicted_l2_cached[1];
            drop(shard);
            if sums.is_empty() {
                sums = stats;
            } else {
                for ((_, total), (_, v)) in sums.iter_mut().zip(stats) {
                    *total += v;
                }
            }
        }
        for (name, value) in sums.iter_mut() {
            match name.as_str() {
                "meta" | "pd" | "pm" | "arc_no_grow" => *value /= SHARDS as u64,
                "evict_l2_cached" => *value += l2_cached[0] + l2_cached[1],
                "evict_l2_eligible" => *value = value.saturating_sub(l2_cached[0] + l2_cached[1]),
                "evict_l2_eligible_mru" => *value = value.saturating_sub(l2_cached[0]),
                "evict_l2_eligible_mfu" => *value = value.saturating_sub(l2_cached[1]),
                _ => {}
            }
        }
        let s = &self.stats;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let devices = self.devices();
        sums.extend(
            [
                ("l2_hits", load(&s.l2_hits)),
                ("l2_misses", load(&s.l2_misses)),
                ("l2_read_bytes", load(&s.l2_read_bytes)),
                ("l2_write_bytes", load(&s.l2_write_bytes)),
                ("l2_cksum_bad", load(&s.l2_cksum_bad)),
                ("l2_io_error", load(&s.l2_io_error)),
                ("l2_feeds", load(&s.l2_feeds)),
                ("l2_writes_sent", load(&s.l2_writes_sent)),
                ("l2_writes_error", load(&s.l2_writes_error)),
                ("l2_evicted", load(&s.l2_evicted)),
                ("l2_wasted_feed_bytes", load(&s.l2_wasted_feed_bytes)),
                ("l2_size", load(&s.l2_size)),
                ("l2_asize", load(&s.l2_asize)),
                ("l2_mru_asize", load(&s.l2_mru_asize)),
                ("l2_mfu_asize", load(&s.l2_mfu_asize)),
                ("l2_prefetch_asize", load(&s.l2_prefetch_asize)),
                ("l2_bufc_data_asize", load(&s.l2_bufc_data_asize)),
                ("l2_bufc_metadata_asize", load(&s.l2_bufc_metadata_asize)),
                ("l2_blocks", load(&s.l2_blocks)),
                ("memory_indirect_count", load(&s.memory_indirect_count)),
                ("dirty_bytes", self.txg_state().0),
                ("dirty_data_max", self.dirty_max()),
                ("txg_open", self.txg_state().1),
                ("txg_synced", self.txg_state().2),
                ("txg_syncs", load(&self.write_stats.txg_syncs)),
                ("txg_last_sync_us", load(&self.write_stats.txg_last_sync_us)),
                ("txg_sync_us", load(&self.write_stats.txg_sync_us)),
                (
                    "txg_last_sync_bytes",
                    load(&self.write_stats.txg_last_sync_bytes),
                ),
                (
                    "txg_blocks_written",
                    load(&self.write_stats.txg_blocks_written),
                ),
                ("txg_sync_waits", load(&self.write_stats.txg_sync_waits)),
                ("txg_sync_errors", load(&self.write_stats.txg_sync_errors)),
                ("dmu_tx_delay", load(&self.write_stats.throttle_delays)),
                ("dmu_tx_delay_us", load(&self.write_stats.throttle_delay_us)),
                (
                    "dmu_tx_dirty_over_max",
                    load(&self.write_stats.throttle_over_max),
                ),
                ("zil_commit_count", load(&self.write_stats.zil_commits)),
                ("zil_itx_count", load(&self.write_stats.zil_records)),
                ("zil_itx_copied_bytes", load(&self.write_stats.zil_bytes)),
                ("zil_commit_us", load(&self.write_stats.zil_commit_us)),
                ("memory_available_bytes", load(&s.memory_available_bytes)),
                ("l2_tombstones", load(&s.l2_tombstones)),
                ("l2_hdr_size", self.l2_index_bytes()),
                ("l2_hdr_limit_skips", load(&s.l2_hdr_limit_skips)),
                ("l2_ndev", devices.len() as u64),
                ("iohits", load(&s.iohits)),
                ("backing_reads", load(&s.backing_reads)),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v)),
        );
        let mut rebuild = RebuildStats::default();
        for device in &devices {
            if let Some(r) = *device.rebuild.lock().expect("rebuild lock") {
                rebuild.l2_rebuild_success += r.l2_rebuild_success;
                rebuild.l2_rebuild_io_errors += r.l2_rebuild_io_errors;
                rebuild.l2_rebuild_cksum_lb_errors += r.l2_rebuild_cksum_lb_errors;
                rebuild.l2_rebuild_bufs += r.l2_rebuild_bufs;
                rebuild.l2_rebuild_size += r.l2_rebuild_size;
                rebuild.l2_rebuild_log_blks += r.l2_rebuild_log_blks;
            }
        }
        sums.extend(
            [
                ("l2_rebuild_success", rebuild.l2_rebuild_success),
                ("l2_rebuild_io_errors", rebuild.l2_rebuild_io_errors),
                (
                    "l2_rebuild_cksum_lb_errors",
                    rebuild.l2_rebuild_cksum_lb_errors,
                ),
                ("l2_rebuild_bufs", rebuild.l2_rebuild_bufs),
                ("l2_rebuild_size", rebuild.l2_rebuild_size),
                ("l2_rebuild_log_blks", rebuild.l2_rebuild_log_blks),
                ("l2_rebuild_lowmem", load(&self.stats.l2_rebuild_lowmem)),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v)),
        );
        sums
    }
}

/// Ends a feed's watch of writes (see `Engine::feed_written`) however the feed returns.
struct FeedWatch<'a>(&'a Mutex<Option<HashSet<BlockKey>>>);

impl FeedWatch<'_> {
    /// The blocks written since the watch began; the watch ends.
    fn take(&self) -> HashSet<BlockKey> {
        self.0
            .lock()
            .expect("feed set lock")
            .take()
            .unwrap_or_default()
    }
}

impl Drop for FeedWatch<'_> {
    fn drop(&mut self) {
        *self.0.lock().expect("feed set lock") = None;
    }
}

/// Makes a device's persistent log unusable (zeroes both header slots), for when a
/// tombstone could not be made durable: a restart must not restore superseded copies.
fn invalidate_log(device: &CacheDevice) {
    let zeroes = larch_io::AlignedBuf::zeroed(larch_format::HEADER_SLOT_BYTES as usize);
    for slot in 0..2 {
        let _ = device.dev.write_at(&zeroes, Geometry::header_offset(slot));
    }
    let _ = device.dev.flush();
}

async fn wait_for(flight: &InFlight) -> Option<Bytes> {
    loop {
        let notified = flight.done.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if let Some(result) = flight.result.lock().expect("flight lock").clone() {
            return result;
        }
        notified.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_feed_follows_a_fast_arc_at_the_same_bytes_per_second() {
        let t = Tunables::default();
        let budget = 32 << 20;
        let quiet = feed_step(&t, budget, 1 << 20, false);
        assert_eq!(quiet.wait, Duration::from_secs(1));
        assert_eq!(quiet.budget, budget);
        // OpenZFS's feed again: a full feed comes back after l2arc_feed_min_ms.
        let again = feed_step(&t, budget, budget, false);
        assert_eq!(again.wait, Duration::from_millis(200));
        assert_eq!(again.budget, budget);
        // Behind the ARC: a fifth of the budget every 200 ms.
        let behind = feed_step(&t, budget, 1 << 20, true);
        assert_eq!(behind.wait, Duration::from_millis(200));
        assert_eq!(behind.budget, budget / 5);
        // A minimum interval as long as the interval changes nothing.
        t.set("l2arc_feed_min_ms", "1000").unwrap();
        assert_eq!(feed_step(&t, budget, 1 << 20, true), quiet);
    }
}

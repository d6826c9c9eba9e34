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
use larch_policy::{Access, Action, ArcConfig, BlockKey, BufType, Restore, State};

use crate::backing::BackingStore;
use crate::latency::LatencyHistogram;

/// Shards of the ARC: each has its own lock, policy instance (with 1/SHARDS of the target)
/// and buffers, so the hit path takes one of many locks, never a global one.
pub const SHARDS: usize = 16;

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

/// What the engine needs to know of a volume on every request.
#[derive(Clone, Copy, Debug)]
pub struct VolumeInfo {
    /// Identity of the volume in cache keys and cache-device logs.
    pub guid: u64,
    /// Size in bytes.
    pub size_bytes: u64,
    /// Block size (`volblocksize`).
    pub block_bytes: u32,
    /// `primarycache`.
    pub primarycache: CacheMode,
    /// `secondarycache`.
    pub secondarycache: CacheMode,
}

impl VolumeInfo {
    /// Bytes of block `block` (the last block may be short).
    pub fn block_len(&self, block: u64) -> usize {
        let start = block * u64::from(self.block_bytes);
        (self.size_bytes - start).min(u64::from(self.block_bytes)) as usize
    }
}

/// L2ARC tunables with OpenZFS names and (2.2.7–2.4) defaults; settable at runtime.
#[derive(Debug)]
pub struct Tunables {
    /// Bytes written to each cache device per feed (`l2arc_write_max`, 32 MiB).
    pub l2arc_write_max: AtomicU64,
    /// Scan depth as a multiple of the write size (`l2arc_headroom`, 8; 0 = unlimited).
    pub l2arc_headroom: AtomicU64,
    /// Seconds between feeds (`l2arc_feed_secs`, 1).
    pub l2arc_feed_secs: AtomicU64,
    /// Shortest interval when feeding again quickly (`l2arc_feed_min_ms`, 200).
    pub l2arc_feed_min_ms: AtomicU64,
    /// Feed again after `l2arc_feed_min_ms` when the last feed wrote more than half the
    /// budget (`l2arc_feed_again`, 1).
    pub l2arc_feed_again: AtomicBool,
    /// Do not feed prefetched blocks (`l2arc_noprefetch`, 1).
    pub l2arc_noprefetch: AtomicBool,
    /// 0: feed MRU and MFU; 1: MFU only; 2: MFU data, all metadata (`l2arc_mfuonly`, 0).
    pub l2arc_mfuonly: AtomicU8,
    /// Rebuild cache devices at start (`l2arc_rebuild_enabled`, 1).
    pub l2arc_rebuild_enabled: AtomicBool,
    /// Turn the sequential-read prefetcher off (`zfs_prefetch_disable`, 0).
    pub zfs_prefetch_disable: AtomicBool,
    /// Most bytes the prefetcher reads ahead of a stream (`zfetch_max_distance`, 64 MiB in
    /// OpenZFS; 8 MiB here, since NBD clients already issue large reads).
    pub zfetch_max_distance: AtomicU64,
}

impl Default for Tunables {
    fn default() -> Tunables {
        Tunables {
            l2arc_write_max: AtomicU64::new(32 << 20),
            l2arc_headroom: AtomicU64::new(8),
            l2arc_feed_secs: AtomicU64::new(1),
            l2arc_feed_min_ms: AtomicU64::new(200),
            l2arc_feed_again: AtomicBool::new(true),
            l2arc_noprefetch: AtomicBool::new(true),
            l2arc_mfuonly: AtomicU8::new(0),
            l2arc_rebuild_enabled: AtomicBool::new(true),
            zfs_prefetch_disable: AtomicBool::new(false),
            zfetch_max_distance: AtomicU64::new(8 << 20),
        }
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
    /// Tombstones written (overwrites of blocks with cache-device copies).
    pub l2_tombstones: AtomicU64,
    /// Reads that joined another read of the same block already in flight.
    pub iohits: AtomicU64,
    /// Backing-store reads issued by the cache.
    pub backing_reads: AtomicU64,
}

/// State of a cache device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

/// Where a block's copy lives on a cache device.
#[derive(Clone, Copy, Debug)]
struct L2Loc {
    device: u16,
    daddr: u64,
    physical_size: u32,
    logical_size: u32,
    checksum: u64,
    generation: u64,
    read: bool,
    /// Written from MFU (else MRU), for `l2_mfu_asize`/`l2_mru_asize`.
    mfu: bool,
    /// A prefetched block (`l2_prefetch_asize`).
    prefetch: bool,
    /// Metadata (`l2_bufc_metadata_asize`).
    metadata: bool,
}

impl L2Loc {
    /// Adds (`add`) or removes this copy in the L2 size counters.
    fn account(&self, stats: &EngineStats, add: bool) {
        let update = |counter: &AtomicU64, bytes: u64| {
            if add {
                counter.fetch_add(bytes, Ordering::Relaxed);
            } else {
                counter.fetch_sub(bytes, Ordering::Relaxed);
            }
        };
        let asize = u64::from(self.physical_size);
        update(&stats.l2_size, u64::from(self.logical_size));
        update(&stats.l2_asize, asize);
        update(&stats.l2_blocks, 1);
        let by_state = if self.prefetch {
            &stats.l2_prefetch_asize
        } else if self.mfu {
            &stats.l2_mfu_asize
        } else {
            &stats.l2_mru_asize
        };
        update(by_state, asize);
        let by_type = if self.metadata {
            &stats.l2_bufc_metadata_asize
        } else {
            &stats.l2_bufc_data_asize
        };
        update(by_type, asize);
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
    l2: HashMap<BlockKey, L2Loc>,
    actions: Vec<Action>,
}

impl Shard {
    /// Carries out what the policy decided: free evicted buffers, drop invalid L2 index
    /// entries.
    fn apply_actions(&mut self, stats: &EngineStats) {
        for action in self.actions.drain(..) {
            match action {
                Action::Evict { key, .. } => {
                    self.bufs.remove(&key);
                }
                Action::Forget { .. } => {}
                Action::InvalidateL2 { key, generation } => {
                    if self
                        .l2
                        .get(&key)
                        .is_some_and(|l| l.generation == generation)
                    {
                        let loc = self.l2.remove(&key).expect("present");
                        loc.account(stats, false);
                    }
                }
            }
        }
    }

    fn index_l2(&mut self, key: BlockKey, loc: L2Loc, stats: &EngineStats) {
        if let Some(old) = self.l2.insert(key, loc) {
            old.account(stats, false);
        }
        loc.account(stats, true);
    }

    fn unindex_l2(&mut self, key: &BlockKey, stats: &EngineStats) -> Option<L2Loc> {
        let loc = self.l2.remove(key)?;
        loc.account(stats, false);
        Some(loc)
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

/// The engine shared by every volume of a pool.
pub struct Engine {
    shards: Box<[Mutex<Shard>]>,
    /// Serialises generation changes (writes) with L2 feed batches; see the crate docs.
    gate: Mutex<()>,
    next_generation: AtomicU64,
    devices: RwLock<Vec<Arc<CacheDevice>>>,
    pending_rebuilds: AtomicUsize,
    /// Blocks written while a rebuild runs: their logged copies must not be restored.
    written_during_rebuild: Mutex<HashSet<BlockKey>>,
    feeders: Mutex<Vec<JoinHandle<()>>>,
    shutdown: AtomicBool,
    started: Instant,
    /// The L2ARC tunables.
    pub tunables: Tunables,
    /// The counters.
    pub stats: EngineStats,
    /// `zfs_arc_max`.
    pub arc_max_bytes: u64,
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
    /// An engine whose ARC holds at most `arc_max_bytes` of data.
    pub fn new(arc_max_bytes: u64) -> Arc<Engine> {
        let per_shard = (arc_max_bytes / SHARDS as u64).max(1);
        let shards = (0..SHARDS)
            .map(|_| {
                Mutex::new(Shard {
                    arc: larch_policy::Arc::new(ArcConfig::fixed(per_shard))
                        .expect("a positive size is a valid config"),
                    bufs: HashMap::new(),
                    inflight: HashMap::new(),
                    l2: HashMap::new(),
                    actions: Vec::new(),
                })
            })
            .collect();
        // Generations only need to differ from those of older copies of the same block.
        // Starting from the wall clock in µs keeps them above any earlier run's.
        let start = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(1);
        Arc::new(Engine {
            shards,
            gate: Mutex::new(()),
            next_generation: AtomicU64::new(start),
            devices: RwLock::new(Vec::new()),
            pending_rebuilds: AtomicUsize::new(0),
            written_during_rebuild: Mutex::new(HashSet::new()),
            feeders: Mutex::new(Vec::new()),
            shutdown: AtomicBool::new(false),
            started: Instant::now(),
            tunables: Tunables::default(),
            stats: EngineStats::default(),
            arc_max_bytes,
        })
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn shard(&self, key: &BlockKey) -> MutexGuard<'_, Shard> {
        self.shards[shard_of(key)].lock().expect("shard lock")
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
            s.apply_actions(&self.stats);
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
        let l2 = shard
            .l2
            .get(&key)
            .copied()
            .filter(|l| l.generation == generation);
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
        let engine = Arc::clone(self);
        let backing = Arc::clone(backing);
        let vol = *vol;
        let data = tokio::task::spawn_blocking(move || engine.fill(&backing, &vol, key, l2))
            .await
            .ok()
            .flatten();
        self.finish_read(&vol, key, generation, prefetch, &flight, data.clone());
        data
    }

    /// The blocking part of a miss: the cache device if it has the block (verified), else
    /// the backing store.
    fn fill(
        &self,
        backing: &BackingStore,
        vol: &VolumeInfo,
        key: BlockKey,
        l2: Option<L2Loc>,
    ) -> Option<Bytes> {
        if let Some(loc) = l2 {
            match self.read_l2(&loc) {
                Ok(bytes) if bytes.len() == vol.block_len(key.block) => {
                    self.stats.l2_hits.fetch_add(1, Ordering::Relaxed);
                    self.stats
                        .l2_read_bytes
                        .fetch_add(u64::from(loc.physical_size), Ordering::Relaxed);
                    let mut shard = self.shard(&key);
                    if let Some(l) = shard.l2.get_mut(&key) {
                        l.read = true;
                    }
                    return Some(Bytes::from(bytes));
                }
                Ok(_) | Err(_) => self.drop_bad_l2(key, &loc),
            }
        } else if self.has_l2() {
            self.stats.l2_misses.fetch_add(1, Ordering::Relaxed);
        }
        let mut buf = vec![0u8; vol.block_len(key.block)];
        self.stats.backing_reads.fetch_add(1, Ordering::Relaxed);
        backing
            .read_at(&mut buf, key.block * u64::from(vol.block_bytes))
            .ok()?;
        Some(Bytes::from(buf))
    }

    fn read_l2(&self, loc: &L2Loc) -> Result<Vec<u8>, ()> {
        let device = self.device(loc.device).ok_or(())?;
        if device.state() != DeviceState::Online {
            return Err(());
        }
        let geometry = (*device.geometry.lock().expect("geometry lock")).ok_or(())?;
        let entry = LogEntryPhys {
            kind: EntryKind::Data,
            volume_guid: 0,
            block_number: 0,
            generation: loc.generation,
            daddr: loc.daddr,
            data_checksum: loc.checksum,
            logical_size: loc.logical_size,
            physical_size: loc.physical_size,
            compression: Compression::Off,
            content: ContentType::Data,
            arc_state: ArcState::Mru,
            prefetch: false,
        };
        device.io.reads.fetch_add(1, Ordering::Relaxed);
        device
            .io
            .read_bytes
            .fetch_add(u64::from(loc.physical_size), Ordering::Relaxed);
        let started = Instant::now();
        let result = larch_l2::read_verified(&*device.dev, &geometry, &entry);
        device.io.read_latency.record(started.elapsed());
        if result.is_err() {
            device.io.read_errors.fetch_add(1, Ordering::Relaxed);
        }
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

    /// A cache-device copy failed verification: forget it (the next read goes to the
    /// backing store). The log entry stays, but a rebuild verifies nothing more than this
    /// read did, so it is dropped there too when it is read again.
    fn drop_bad_l2(&self, key: BlockKey, loc: &L2Loc) {
        let mut shard = self.shard(&key);
        if shard.l2.get(&key).is_some_and(|l| l.daddr == loc.daddr) {
            shard.unindex_l2(&key, &self.stats);
            let s = &mut *shard;
            s.arc.l2_evicted(&key, loc.generation, &mut s.actions);
            s.apply_actions(&self.stats);
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
                s.apply_actions(&self.stats);
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
    /// [`Engine::write_done`]) after invalidating every cache-device copy of them durably.
    /// Blocking (it may write and flush tombstones). Returns the new generations.
    pub fn write_prepare(&self, vol: &VolumeInfo, blocks: &[(u64, Bytes)]) -> io::Result<Vec<u64>> {
        let _gate = self.gate.lock().expect("gate lock");
        let rebuilding = self.pending_rebuilds.load(Ordering::Acquire) > 0;
        let mut tombstones: Vec<(L2Loc, BlockKey)> = Vec::new();
        let mut generations = Vec::with_capacity(blocks.len());
        let now = self.now_ms();
        for (block, data) in blocks {
            let key = BlockKey::new(vol.guid, *block);
            let generation = self.fresh_generation();
            let mut shard = self.shard(&key);
            if let Some(flight) = shard.inflight.remove(&key) {
                flight.invalidated.store(true, Ordering::Release);
            }
            if let Some(loc) = shard.unindex_l2(&key, &self.stats) {
                tombstones.push((loc, key));
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
            s.apply_actions(&self.stats);
            s.bufs.insert(key, data.clone());
            drop(shard);
            if rebuilding {
                self.written_during_rebuild
                    .lock()
                    .expect("rebuild set lock")
                    .insert(key);
            }
            generations.push(generation);
        }
        self.write_tombstones(&tombstones);
        Ok(generations)
    }

    /// Writes and commits tombstones; a device that cannot take them is faulted and its
    /// log invalidated, so that no restart can restore the superseded copies.
    fn write_tombstones(&self, tombstones: &[(L2Loc, BlockKey)]) {
        if tombstones.is_empty() {
            return;
        }
        let mut by_device: HashMap<u16, Vec<(BlockKey, u64)>> = HashMap::new();
        for (loc, key) in tombstones {
            by_device
                .entry(loc.device)
                .or_default()
                .push((*key, loc.generation));
        }
        for (index, keys) in by_device {
            let Some(device) = self.device(index) else {
                continue;
            };
            let mut writer = device.writer.lock().expect("writer lock");
            let Some(l2) = writer.as_mut() else {
                continue;
            };
            let result = keys
                .iter()
                .try_for_each(|(key, generation)| l2.tombstone(l2_key(key), *generation))
                .and_then(|()| l2.commit_log().map(|_| ()));
            self.stats
                .l2_tombstones
                .fetch_add(keys.len() as u64, Ordering::Relaxed);
            if let Err(err) = result {
                *writer = None;
                drop(writer);
                invalidate_log(&device);
                device.set_fault(format!("tombstone write failed: {err}"));
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
        s.apply_actions(&self.stats);
    }

    /// The backing-store write failed: the new contents are not stored anywhere, so the
    /// cache must not keep them either.
    pub fn write_failed(&self, vol: &VolumeInfo, block: u64, generation: u64) {
        let key = BlockKey::new(vol.guid, block);
        let mut shard = self.shard(&key);
        let s = &mut *shard;
        if s.arc.info(&key).is_some_and(|i| i.generation == generation) {
            s.arc.remove(&key, &mut s.actions);
            s.apply_actions(&self.stats);
            s.bufs.remove(&key);
        }
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
            io: DeviceIo::default(),
        });
        let rebuild = !create && self.tunables.l2arc_rebuild_enabled.load(Ordering::Relaxed);
        if !rebuild {
            let options = CreateOptions {
                pool_guid,
                device_guid,
                ..CreateOptions::default()
            };
            let l2 = L2Device::create(Arc::clone(&dev), &options)
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

    /// Opens a device's log, restores its live entries as `l2c_only` headers, and puts it
    /// online. Entries for blocks written since start are tombstoned instead.
    fn rebuild_device(&self, device: &Arc<CacheDevice>, pool_guid: u64) {
        let progress_device = Arc::clone(device);
        let mut progress = move |p: &larch_l2::RebuildProgress| {
            progress_device
                .rebuild_progress
                .store(p.entries, Ordering::Relaxed);
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
        *device.geometry.lock().expect("geometry lock") = Some(geometry);
        let now = self.now_ms();
        let mut stale = Vec::new();
        {
            // Holding the gate: no write can change a generation while entries go in.
            let _gate = self.gate.lock().expect("gate lock");
            let written = self
                .written_during_rebuild
                .lock()
                .expect("rebuild set lock")
                .clone();
            for restored in &outcome.entries {
                let e = &restored.entry;
                let key = BlockKey::new(e.volume_guid, e.block_number);
                if written.contains(&key) {
                    stale.push((key, e.generation));
                    continue;
                }
                let mut shard = self.shard(&key);
                let buf_type = if e.content == ContentType::Metadata {
                    BufType::Metadata
                } else {
                    BufType::Data
                };
                match shard
                    .arc
                    .l2_restore(key, e.generation, e.logical_size, buf_type, now)
                {
                    Restore::Restored | Restore::AlreadyCached => {
                        let loc = L2Loc {
                            device: device.index,
                            daddr: e.daddr,
                            physical_size: e.physical_size,
                            logical_size: e.logical_size,
                            checksum: e.data_checksum,
                            generation: e.generation,
                            read: false,
                            mfu: e.arc_state == ArcState::Mfu,
                            prefetch: e.prefetch,
                            metadata: e.content == ContentType::Metadata,
                        };
                        shard.index_l2(key, loc, &self.stats);
                    }
                    Restore::Stale => stale.push((key, e.generation)),
                }
            }
            let result = stale
                .iter()
                .try_for_each(|(key, generation)| l2.tombstone(l2_key(key), *generation))
                .and_then(|()| l2.commit_log().map(|_| ()));
            if let Err(err) = result {
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
    }

    // ---- the feeder ----------------------------------------------------------------------

    fn feed_loop(&self, device: &Arc<CacheDevice>) {
        let mut wrote_bytes = 0u64;
        while !self.shutdown.load(Ordering::Acquire) {
            let budget = self
                .tunables
                .l2arc_write_max
                .load(Ordering::Relaxed)
                .max(4096);
            let again =
                self.tunables.l2arc_feed_again.load(Ordering::Relaxed) && wrote_bytes > budget / 2;
            let wait = if again {
                Duration::from_millis(self.tunables.l2arc_feed_min_ms.load(Ordering::Relaxed))
            } else {
                Duration::from_secs(self.tunables.l2arc_feed_secs.load(Ordering::Relaxed).max(1))
            };
            self.sleep_unless_shutdown(wait);
            if self.shutdown.load(Ordering::Acquire) {
                break;
            }
            wrote_bytes = match device.state() {
                DeviceState::Online => self.feed_once(device, budget),
                _ => 0,
            };
        }
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
        let noprefetch = self.tunables.l2arc_noprefetch.load(Ordering::Relaxed);
        let mfuonly = self.tunables.l2arc_mfuonly.load(Ordering::Relaxed);
        let headroom = self.tunables.l2arc_headroom.load(Ordering::Relaxed);
        let max_batch = {
            let writer = device.writer.lock().expect("writer lock");
            match writer.as_ref() {
                Some(l2) => l2.max_batch_bytes().min(budget_bytes),
                None => return 0,
            }
        };
        let scan_limit = if headroom == 0 {
            u64::MAX
        } else {
            max_batch.saturating_mul(headroom)
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
                    if info.on_l2 || !info.l2cache || (noprefetch && info.prefetch) {
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
        let _gate = self.gate.lock().expect("gate lock");
        // Writers were free to change generations until the gate: keep only current copies.
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
        // Commit the log with the batch, so that a crash loses at most the feed in flight
        // (an open log block would otherwise wait for 1022 entries).
        let started = Instant::now();
        let outcome = match l2
            .write_batch(&records)
            .and_then(|outcome| l2.commit_log().map(|_| outcome))
        {
            Ok(outcome) => outcome,
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
        for evicted in &outcome.evicted {
            let key = BlockKey::new(evicted.key.volume_guid, evicted.key.block_number);
            let mut shard = self.shard(&key);
            let matches = shard
                .l2
                .get(&key)
                .is_some_and(|l| l.device == device.index && l.daddr == evicted.daddr);
            if matches {
                let loc = shard.unindex_l2(&key, &self.stats).expect("present");
                self.stats.l2_evicted.fetch_add(1, Ordering::Relaxed);
                if !loc.read {
                    self.stats
                        .l2_wasted_feed_bytes
                        .fetch_add(u64::from(loc.physical_size), Ordering::Relaxed);
                }
                let s = &mut *shard;
                s.arc.l2_evicted(&key, evicted.generation, &mut s.actions);
                s.apply_actions(&self.stats);
            }
        }
        let mut written = 0u64;
        for ((key, generation, buf, state, buf_type, prefetch), placement) in
            candidates.iter().zip(&outcome.placements)
        {
            let mut shard = self.shard(key);
            let indexed = shard.arc.l2_written(key, *generation)
                || shard.arc.l2_restore(
                    *key,
                    *generation,
                    buf.len() as u32,
                    *buf_type,
                    self.now_ms(),
                ) != Restore::Stale;
            if indexed {
                let loc = L2Loc {
                    device: device.index,
                    daddr: placement.daddr,
                    physical_size: buf.len() as u32,
                    logical_size: buf.len() as u32,
                    checksum: placement.data_checksum,
                    generation: *generation,
                    read: false,
                    mfu: *state == State::Mfu,
                    prefetch: *prefetch,
                    metadata: *buf_type == BufType::Metadata,
                };
                shard.index_l2(*key, loc, &self.stats);
            }
            written += buf.len() as u64;
        }
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
            let keys: Vec<(BlockKey, u64)> = shard
                .l2
                .iter()
                .filter(|(_, l)| l.device == index)
                .map(|(k, l)| (*k, l.generation))
                .collect();
            for (key, generation) in keys {
                shard.unindex_l2(&key, &self.stats);
                let s = &mut *shard;
                s.arc.l2_evicted(&key, generation, &mut s.actions);
                s.apply_actions(&self.stats);
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

    /// Stops the feeders and commits every open log block, so a restart comes back warm.
    pub fn shutdown(&self) {
        self.shutdown.store(true, Ordering::Release);
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

    /// ARC counters summed over the shards (targets and fractions as the shards hold them,
    /// fractions averaged), followed by the engine's L2 counters.
    pub fn arcstats(&self) -> Vec<(String, u64)> {
        let mut sums: Vec<(String, u64)> = Vec::new();
        for shard in self.shards.iter() {
            let stats = shard.lock().expect("shard lock").arc.kstats();
            if sums.is_empty() {
                sums = stats;
            } else {
                for ((_, total), (_, v)) in sums.iter_mut().zip(stats) {
                    *total += v;
                }
            }
        }
        for (name, value) in sums.iter_mut() {
            if matches!(name.as_str(), "meta" | "pd" | "pm" | "arc_no_grow") {
                *value /= SHARDS as u64;
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
                ("l2_tombstones", load(&s.l2_tombstones)),
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
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v)),
        );
        sums
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

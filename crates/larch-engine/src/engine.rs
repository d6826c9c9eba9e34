//! The engine shared by every volume of a pool: the assembly of its parts, their threads,
//! its start and its end. Each part lives in its own module, owns its state and carries
//! its flows; a flow that crosses parts (a read, a write, a feed, a rebuild, a TXG sync)
//! is a method of the part it belongs to, which holds the others it needs. This module
//! builds the parts (`Shared`, then each flow's part from it), starts the syncer and the
//! ARC sizer, keeps the feeders' handles, and hands each library call to its part.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use larch_io::BlockDevice;

use crate::arc::{ArcCache, ArcSizer, BlockBuf, TRIM_INTERVAL, release_free_memory, sizing_limits};
use crate::backing::{BackingStore, ZeroMode};
use crate::coherence::{Coherence, DistrustSink};
use crate::error::{DetachError, VolumeTableError, WriteError};
use crate::events::Events;
use crate::l2::{CacheDevice, CacheDevices, L2Arc};
use crate::lock::RankedMutex;
use crate::read::{Reader, Served};
use crate::report::{
    CacheDeviceReport, LatencyReport, LogDeviceReport, QueueReport, RebuildReport,
};
use crate::run::{Background, Generations, Lifecycle};
use crate::stats::{ComputedStats, EngineStats, WriteStats};
use crate::tunables::Tunables;
use crate::txg::zil::{LogAttach, ReplayedSink};
use crate::txg::{CommittedSink, Faults, LogHandle, PartialWrites, Syncer, Txg, TxgParts};
use crate::volumes::{VolumeEntry, VolumeFailure, VolumeSpec, Volumes};

/// The engine shared by every volume of a pool: the assembly of its parts. It builds
/// them, wires each to the few others it works with, owns their threads, and is the
/// library's entry point: its methods hand each request to the part whose flow it is.
pub struct Engine {
    /// The ARC: shards of policy, buffers, in-flight reads and L2 index.
    pub(crate) arc: Arc<ArcCache>,
    /// ARC sizing and memory pressure.
    sizer: ArcSizer,
    /// The cache devices and their flows (feed, rebuild, reads, faults).
    pub(crate) l2: Arc<L2Arc>,
    /// What the no-stale-read argument relies on.
    pub(crate) coherence: Arc<Coherence>,
    /// The volumes, by slot.
    pub(crate) volumes: Arc<Volumes>,
    /// The TXG engine: writes, FLUSH, the throttle and the intent log.
    pub(crate) txg: Arc<Txg>,
    /// Writes smaller than a block waiting for their merge.
    pub(crate) partials: Arc<PartialWrites>,
    /// The read path.
    reader: Reader,
    /// The tunables (OpenZFS names).
    pub tunables: Arc<Tunables>,
    /// The counters of the read path and the L2ARC.
    pub stats: Arc<EngineStats>,
    /// The counters of the write path.
    pub write_stats: Arc<WriteStats>,
    /// The pool's clients' accesses, sampled for its miss-ratio curves.
    pub access_log: crate::mrc::AccessLog,
    /// What happened to the pool, and when (`larch events`): every part records here.
    pub events: Arc<Events>,
    life: Arc<Lifecycle>,
    /// The runtime blocking I/O and prefetch run on, when set ([`Engine::run_background_on`]).
    pub(crate) background: Arc<Background>,
    syncer: RankedMutex<Option<JoinHandle<()>>>,
    /// The feeder threads.
    threads: RankedMutex<Vec<JoinHandle<()>>>,
    /// Faults tests inject.
    #[cfg_attr(not(feature = "fault-injection"), allow(dead_code))]
    faults: Arc<Faults>,
}

impl Engine {
    /// Runs the engine's blocking I/O (backing-store reads and writes, cache-device reads
    /// without io_uring) and its prefetch reads on `runtime` from now on, whichever
    /// runtime the request came from. The daemon serves each NBD connection on a runtime
    /// of its own that ends with the connection: a prefetch must outlive it, and one
    /// shared blocking pool keeps the thread count bounded. Without it (or after a second
    /// call, which changes nothing) they run on the caller's runtime.
    pub fn run_background_on(&self, runtime: tokio::runtime::Handle) {
        self.background.set(runtime);
    }

    /// Where volume failures are recorded from now on (see
    /// [`crate::volumes::Volumes::set_failure_sink`]).
    pub fn set_volume_failure_sink(&self, sink: crate::volumes::FailureSink) {
        self.volumes.set_failure_sink(sink);
    }

    /// Marks a volume failed as an earlier run recorded it: its writes fail and its lost
    /// blocks read as errors. Call after the volume is registered, before it is served.
    pub fn restore_volume_failure(&self, failure: &VolumeFailure) -> Result<(), VolumeTableError> {
        self.volumes.restore_failure(failure)
    }

    /// An engine whose ARC holds at most `arc_max_bytes` of data (`zfs_arc_max`), with its
    /// TXG syncer and its ARC size control thread (limits set at runtime, memory
    /// pressure), which stop with [`Engine::shutdown`].
    pub fn new(arc_max_bytes: u64) -> Arc<Engine> {
        let tunables = Arc::new(crate::tunables::starting(arc_max_bytes));
        let limits = sizing_limits(&tunables);
        let events = Arc::new(Events::new());
        let shared = Shared {
            arc: Arc::new(ArcCache::new(limits.0, limits.1)),
            coherence: Arc::new(Coherence::new()),
            volumes: Arc::new(Volumes::new(Arc::clone(&events))),
            events,
            tunables,
            stats: Arc::new(EngineStats::default()),
            write_stats: Arc::new(WriteStats::default()),
            generations: Arc::new(Generations::new()),
            life: Arc::new(Lifecycle::new()),
            background: Arc::new(Background::default()),
        };
        let l2 = Arc::new(shared.l2arc());
        let txg = Arc::new(Txg::new(1, shared.txg_parts()));
        let partials = Arc::new(shared.partial_writes(&txg));
        let faults = Arc::new(Faults::default());
        let syncer = spawn_syncer(shared.syncer(&txg, &l2, &faults));
        let Shared {
            arc,
            coherence,
            volumes,
            events,
            tunables,
            stats,
            write_stats,
            generations,
            life,
            background,
        } = shared;
        let reader = Reader {
            arc: Arc::clone(&arc),
            l2: Arc::clone(&l2),
            stats: Arc::clone(&stats),
            tunables: Arc::clone(&tunables),
            generations,
            background: Arc::clone(&background),
        };
        let engine = Arc::new(Engine {
            sizer: ArcSizer::new(limits),
            arc,
            l2,
            coherence,
            volumes,
            txg,
            partials,
            reader,
            tunables,
            stats,
            write_stats,
            access_log: crate::mrc::AccessLog::new(),
            events,
            life,
            background,
            syncer: RankedMutex::leaf(Some(syncer)),
            threads: RankedMutex::leaf(Vec::new()),
            faults,
        });
        spawn_arc_sizer(&engine);
        engine
    }

    /// Registers a volume over `backing`; it can be read and written at once. Refused:
    /// a guid registered already, too many volumes, a volume too large for cache keys.
    pub fn add_volume(
        &self,
        spec: VolumeSpec,
        backing: Arc<BackingStore>,
    ) -> Result<Arc<VolumeEntry>, VolumeTableError> {
        // A volume added while a log device takes records may have records from the open
        // TXG on: an object volume records that none of its log's are older (see
        // `attach_log_device`).
        if self.txg.zil.device().is_some() {
            let before_open = self.txg_state().1.saturating_sub(1);
            backing
                .catch_up(before_open)
                .map_err(VolumeTableError::LogState)?;
        }
        let entry = self.volumes.register(spec, backing)?;
        // A segments volume's map pages are metadata in the ARC from now on.
        if let Some(vol) = entry.backing.object() {
            let pages = crate::arc::map_pages::MapPagesInArc::new(&self.l2, &entry);
            vol.attach_map_cache(Arc::new(pages));
        }
        Ok(entry)
    }

    /// The volume in `slot`.
    pub fn volume(&self, slot: u16) -> Option<Arc<VolumeEntry>> {
        self.volumes.get(slot)
    }

    /// Where the pool records that a cache device must be formatted at the next open,
    /// when the device itself cannot be told (see [`crate::coherence`], rule 4).
    pub fn set_distrust_sink(&self, sink: DistrustSink) {
        self.coherence.set_distrust_sink(sink);
    }

    /// `zfs_arc_max` as set now.
    pub fn arc_max_bytes(&self) -> u64 {
        self.tunables.zfs_arc_max()
    }

    /// The ARC limits in force: (`zfs_arc_min`, `zfs_arc_max`), the automatic minimum
    /// resolved and the minimum never above the maximum.
    pub fn arc_limits(&self) -> (u64, u64) {
        sizing_limits(&self.tunables)
    }

    /// One pass of ARC size control (the engine's thread runs it four times a second):
    /// applies changed `zfs_arc_min`/`zfs_arc_max`, and under memory pressure (available
    /// memory below `zfs_arc_sys_free`) stops growth for 5 s and shrinks the target by the
    /// shortfall, never below `zfs_arc_min`, at most once a second. Returns whether it
    /// shrank.
    pub fn adjust_arc_size(&self) -> bool {
        self.sizer
            .apply_reuse_window(&self.arc, self.reuse_window());
        self.sizer.adjust(&self.arc, &self.tunables, &self.stats)
    }

    /// The window, in blocks per shard, of the reuse sketches `l2arc_admit` reads (0 while
    /// it is off): `zfs_arc_max` and the cache devices not removed, in blocks of the
    /// smallest `volblocksize` of the pool's volumes (4 KiB without volumes), the devices
    /// counted for no more blocks than the L2 index may hold (its cap, at 16 bytes an
    /// entry at least). So the sketches' DRAM (4 bytes per block of the window) is bounded
    /// by `zfs_arc_max` and `l2arc_meta_percent` as the headers and the index are.
    fn reuse_window(&self) -> u64 {
        if !self.tunables.l2arc_admit() {
            return 0;
        }
        let l2_bytes: u64 = (self.l2.devices.all().iter())
            .filter(|d| d.state() != crate::l2::DeviceState::Removed)
            .map(|d| d.size_bytes())
            .sum();
        let block_bytes = (self.volumes.all().iter())
            .map(|v| v.info().block_bytes)
            .min()
            .unwrap_or(4096);
        let indexable = (self.l2.l2_index_cap() / 16).saturating_mul(u64::from(block_bytes));
        larch_policy::reuse::shard_window_blocks(
            self.tunables.zfs_arc_max(),
            l2_bytes.min(indexable),
            u64::from(block_bytes),
            larch_policy::shards::SHARDS as u64,
        )
    }

    /// Gives freed memory back to the system when the process holds much more than the
    /// cache accounts for (see `arc::sizing`); counted in `memory_trims`.
    fn release_free_memory(&self) -> bool {
        let (size, headers) = self.arc.size_and_headers();
        let trimmed = release_free_memory(size + headers + self.arc.l2_index_bytes());
        if trimmed {
            self.stats.memory_trims.fetch_add(1, Ordering::Relaxed);
        }
        trimmed
    }

    /// Whether the ARC has evicted anything yet (OpenZFS `arc_warm`): until then feeds
    /// may write `l2arc_write_boost` more.
    pub fn arc_warm(&self) -> bool {
        self.arc.warm()
    }

    /// DRAM held by the L2 index (`l2_hdr_size`).
    pub fn l2_index_bytes(&self) -> u64 {
        self.arc.l2_index_bytes()
    }

    /// Makes the syncer skip the tombstone commit before TXG writes (a test fault).
    #[cfg(feature = "fault-injection")]
    pub fn inject_skip_tombstone_commit(&self, on: bool) {
        self.faults
            .skip_tombstone_commit
            .store(on, Ordering::Relaxed);
    }

    /// Syncs what is dirty, stops the feeders and commits every cache device's log (with
    /// its queued tombstones), so a restart comes back warm.
    pub fn shutdown(&self) {
        // Partial writes acknowledged and not merged yet join the TXGs first.
        self.partials.merge_all_partials();
        self.partials.queue.stop();
        self.life.begin_shutdown();
        self.txg.wake_all();
        let syncer = self.syncer.lock().take();
        if let Some(handle) = syncer {
            let _ = handle.join();
        }
        let handles: Vec<_> = self.threads.lock().drain(..).collect();
        for handle in handles {
            let _ = handle.join();
        }
        let _io = self.coherence.feed_io();
        for device in self.l2.devices.all() {
            if let Err(err) = self.l2.commit_device_log(&device) {
                let why = format!("log commit at shutdown failed: {err}");
                if let Err(why) = self.l2.fault_device(&device, why) {
                    eprintln!("larch: {why}");
                }
            }
            device.release_file_lock();
        }
        // Nothing writes the devices from here on: their files are free for another pool
        // (or this one opened again) even while something still holds this engine.
        if let Some(log) = self.txg.zil.device() {
            log.release_file_lock();
        }
    }

    /// The report of every cache device.
    pub fn device_reports(&self) -> Vec<CacheDeviceReport> {
        self.l2
            .devices
            .all()
            .iter()
            .map(|d| {
                let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
                let (entries, permille) = d.rebuild_progress();
                CacheDeviceReport {
                    path: d.path.display().to_string(),
                    guid: d.guid,
                    size_bytes: d.size_bytes(),
                    blocks: self.arc.l2_blocks_on(d.index),
                    state: d.state(),
                    fault: d.fault(),
                    io_mode: d.dev().io_mode(),
                    rebuild_entries: entries,
                    rebuild_permille: permille,
                    reads: load(&d.io.reads),
                    read_bytes: load(&d.io.read_bytes),
                    read_errors: load(&d.io.read_errors),
                    writes: load(&d.io.writes),
                    write_bytes: load(&d.io.write_bytes),
                    read_latency: LatencyReport::of(&d.io.read_latency.snapshot()),
                    write_latency: LatencyReport::of(&d.io.write_latency.snapshot()),
                    read_queue: QueueReport::of(&d.io.read_queue),
                    rebuild: d.rebuild_stats().map(|r| RebuildReport {
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
    pub fn log_report(&self) -> Option<LogDeviceReport> {
        self.txg.zil.device().map(|l| {
            let s = l.stats();
            LogDeviceReport {
                path: l.path.display().to_string(),
                guid: l.guid,
                state: if l.is_healthy() { "online" } else { "faulted" }.to_string(),
                fault: l.fault(),
                io_mode: l.device.device().io_mode(),
                commits: s.zil_commit_count,
                blocks_written: s.zil_commit_writer_count,
                records: s.zil_itx_count,
                bytes: s.zil_itx_copied_bytes,
                commit_latency: LatencyReport::of(&l.commit_latency.snapshot()),
            }
        })
    }

    /// Bytes the sampled access log holds.
    pub fn mrc_memory_bytes(&self) -> u64 {
        self.access_log.memory_bytes()
    }

    /// Milliseconds since the engine started: the clock of the ARC and the access logs.
    pub fn now_ms(&self) -> u64 {
        self.arc.now_ms()
    }

    /// The arcstats: the policy's kstats summed over the shards, then the engine's own
    /// (see [`crate::stats`]).
    pub fn arcstats(&self) -> Vec<(String, u64)> {
        // Taken first: the shards' pass below installs what waits.
        let install_queued_bytes = self.arc.install_queued_bytes();
        let mut out = self.arc.kstats();
        let named =
            |values: Vec<(&'static str, u64)>| values.into_iter().map(|(k, v)| (k.to_string(), v));
        out.extend(named(self.stats.values()));
        out.extend(named(self.write_stats.values()));
        let (dirty, open, synced) = self.txg_state();
        let devices = self.l2.devices.all();
        let mut computed = ComputedStats {
            dirty_bytes: dirty,
            dirty_data_max: self.txg.dirty_max(),
            write_partial_pending: self.partials.pending_partials(),
            zil_itx_pending: self.txg.log_pending_records(),
            txg_open: open,
            txg_synced: synced,
            l2_hdr_size: self.arc.l2_index_bytes(),
            install_queued_bytes,
            mrc_size: self.mrc_memory_bytes(),
            l2_ndev: devices.len() as u64,
            events_recorded: self.events.recorded(),
            events_skipped: self.events.skipped(),
            ..ComputedStats::default()
        };
        (computed.events_kept, computed.events_bytes) = self.events.kept();
        for r in devices.iter().filter_map(|d| d.rebuild_stats()) {
            computed.l2_rebuild_success += r.l2_rebuild_success;
            computed.l2_rebuild_io_errors += r.l2_rebuild_io_errors;
            computed.l2_rebuild_cksum_lb_errors += r.l2_rebuild_cksum_lb_errors;
            computed.l2_rebuild_bufs += r.l2_rebuild_bufs;
            computed.l2_rebuild_size += r.l2_rebuild_size;
            computed.l2_rebuild_log_blks += r.l2_rebuild_log_blks;
        }
        out.extend(named(computed.values()));
        out
    }

    /// Tombstones queued for cache-device logs and not yet committed.
    pub fn queued_tombstones(&self) -> usize {
        self.coherence.queued_tombstones()
    }

    /// Reads one block of a volume through the ARC, the cache devices and the backing
    /// store. `None` means the backing store failed (the client gets EIO).
    pub async fn read_block(
        &self,
        vol: &Arc<VolumeEntry>,
        block: u64,
        prefetch: bool,
    ) -> Option<Bytes> {
        self.reader.read_block(vol, block, prefetch).await
    }

    /// [`Engine::read_block`], and where the block came from.
    pub async fn read_block_served(
        &self,
        vol: &Arc<VolumeEntry>,
        block: u64,
        prefetch: bool,
    ) -> (Option<Bytes>, Served) {
        self.reader.read_block_served(vol, block, prefetch).await
    }

    /// Reads blocks `blocks` of a volume, the misses from the backing store in runs of
    /// neighbouring blocks (see `Reader::read_run`): each block's bytes (`None`: the
    /// backing store failed) and where it came from, in block order.
    pub async fn read_run(
        &self,
        vol: &Arc<VolumeEntry>,
        blocks: std::ops::Range<u64>,
        prefetch: bool,
    ) -> Vec<(Option<Bytes>, Served)> {
        self.reader.read_run(vol, blocks, prefetch).await
    }

    /// Writes whole blocks of a volume (see `Txg::write_blocks`): returns when the
    /// write may be acknowledged: at once for an async write, once durable for a sync
    /// one (`fua`, or the volume's `sync=always`; never with `sync=disabled`). Blocking.
    pub fn write_blocks(
        &self,
        vol: &Arc<VolumeEntry>,
        blocks: &[(u64, BlockBuf)],
        fua: bool,
    ) -> Result<(), WriteError> {
        self.txg
            .write_blocks(vol, blocks, vol.info().write_is_sync(fua), None)
    }

    /// Zeroes whole blocks of a volume (see `Volume::write_zeroes`): they read as zeros at
    /// once and the TXG that syncs them zeroes them on the backing store as `mode` says.
    /// Acknowledged as [`Engine::write_blocks`] acknowledges; a sync one waits for its TXG
    /// (zeroed blocks are not logged). Blocking.
    pub fn write_zeroed_blocks(
        &self,
        vol: &Arc<VolumeEntry>,
        blocks: &[u64],
        mode: ZeroMode,
        fua: bool,
    ) -> Result<(), WriteError> {
        let zeroed: Vec<(u64, BlockBuf)> = blocks
            .iter()
            .map(|&b| (b, BlockBuf::zeros(vol.info().block_len(b))))
            .collect();
        let sync = vol.info().write_is_sync(fua);
        self.txg.write_blocks(vol, &zeroed, sync, Some(mode))
    }

    /// [`Engine::write_blocks`] of an async write from a thread that must not block: `None`,
    /// doing nothing, when the throttle would delay it (see `Txg::try_write_async_now`).
    pub fn try_write_async_now(
        &self,
        vol: &Arc<VolumeEntry>,
        blocks: &[(u64, BlockBuf)],
    ) -> Option<Result<(), WriteError>> {
        self.txg.try_write_async_now(vol, blocks, None)
    }

    /// Makes every write acknowledged so far durable (NBD FLUSH). Blocking.
    pub fn flush_writes(&self, vol: &VolumeEntry) -> Result<(), WriteError> {
        self.txg.flush_writes(vol)
    }

    /// Forgets every cached copy of `blocks` of `vol`, a volume this node follows
    /// read-only, which another node changed on the store (`ObjectVolume::watch_commits`
    /// calls it for each followed commit): the ARC's copies and reads in flight dropped,
    /// the cache devices' copies tombstoned as for a write, and the tombstones made
    /// durable before this returns, so that the follower records the commit as seen only
    /// once no restart can bring an older copy back.
    pub fn forget_changed_blocks(&self, vol: &VolumeEntry, blocks: &[u64]) -> std::io::Result<()> {
        if blocks.is_empty() {
            return Ok(());
        }
        let (arc, l2) = self.l2.forget_blocks(&vol.info(), blocks);
        self.stats
            .follower_dropped_copies
            .fetch_add(arc + l2, std::sync::atomic::Ordering::Relaxed);
        self.l2
            .commit_queued_tombstones()
            .map_err(|e| std::io::Error::other(e.to_string()))
    }

    /// Closes the open TXG and waits until it and every TXG before it synced, for every
    /// volume (tests and tools).
    pub fn sync_all(&self) -> Result<(), WriteError> {
        self.txg.sync_all()
    }

    /// Dirty bytes, open TXG, synced TXG (for stats).
    pub fn txg_state(&self) -> (u64, u64, u64) {
        self.txg.txg_state()
    }

    /// The log device, if one is attached.
    pub fn log_device(&self) -> Option<Arc<LogHandle>> {
        self.txg.zil.device()
    }

    /// Attaches the pool's log device, replaying its log first unless `create` formats
    /// it (see `IntentLog::attach`). Returns the records replayed.
    pub fn attach_log(
        &self,
        path: &Path,
        pool_guid: u64,
        device_guid: u64,
        create: bool,
    ) -> io::Result<u64> {
        let (dev, file_lock) = crate::txg::zil::open_file(path)?;
        let log = LogAttach::new(path, pool_guid, device_guid, create);
        self.txg.zil.attach(&self.txg, dev, file_lock, &log)
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
        let log = LogAttach::new(path, pool_guid, device_guid, create);
        self.txg.zil.attach(&self.txg, dev, None, &log)
    }

    /// The committed TXG the pool recorded outside the log device, and where to record
    /// later ones when the log device cannot (see `IntentLog::set_committed_txg_sink`).
    /// Call after the volumes are registered and before [`Engine::attach_log`].
    pub fn set_committed_txg_sink(&self, floor: u64, sink: CommittedSink) {
        self.txg.zil.set_committed_txg_sink(&self.txg, floor, sink);
    }

    /// Where the pool records that a replay applied records (see
    /// `IntentLog::set_replayed_sink`). Call before [`Engine::attach_log`].
    pub fn set_replayed_sink(&self, sink: ReplayedSink) {
        self.txg.zil.set_replayed_sink(sink);
    }

    /// Takes the log device out of use without losing what it covers (see
    /// `IntentLog::detach`). `Ok(None)` when there is none.
    pub fn detach_log(&self) -> Result<Option<Arc<LogHandle>>, DetachError> {
        self.txg.zil.detach(&self.txg)
    }

    /// Adds a cache device: formats it (`create`) or opens it and rebuilds its index in
    /// the background (see `L2Arc::add_device`); its feeder thread is the engine's.
    pub fn add_cache_device(
        &self,
        path: &Path,
        pool_guid: u64,
        device_guid: u64,
        create: bool,
    ) -> io::Result<Arc<CacheDevice>> {
        let added = self.l2.add_device(path, pool_guid, device_guid, create);
        self.keep_feeder(added)
    }

    /// [`Engine::add_cache_device`] on any [`BlockDevice`] (in-process tests use a
    /// fault-injecting one); `path` names it.
    pub fn add_cache_device_on(
        &self,
        dev: Arc<dyn BlockDevice>,
        path: &Path,
        pool_guid: u64,
        device_guid: u64,
        create: bool,
    ) -> io::Result<Arc<CacheDevice>> {
        let added = self
            .l2
            .add_device_on(dev, path, pool_guid, device_guid, create);
        self.keep_feeder(added)
    }

    /// Keeps a new device's feeder thread, for [`Engine::shutdown`] to join.
    fn keep_feeder(
        &self,
        added: io::Result<(Arc<CacheDevice>, JoinHandle<()>)>,
    ) -> io::Result<Arc<CacheDevice>> {
        let (device, feeder) = added?;
        let mut threads = self.threads.lock();
        // Feeders of removed devices have ended: their handles need no join.
        threads.retain(|t| !t.is_finished());
        threads.push(feeder);
        Ok(device)
    }

    /// Removes a cache device at runtime (see `L2Arc::remove_device`).
    pub fn remove_cache_device(&self, index: u16) -> bool {
        self.l2.remove_device(index)
    }

    /// The cache devices.
    pub fn devices(&self) -> Vec<Arc<CacheDevice>> {
        self.l2.devices.all()
    }

    /// How cache-device reads are done now: `io_uring`, `threads` (switched off or not
    /// set up yet) or `threads (io_uring unavailable: why)`.
    pub fn l2_read_path(&self) -> String {
        self.l2.devices.read_path(self.tunables.l2arc_io_uring())
    }

    /// One feed of at most `budget_bytes` to `device` (see `L2Arc::feed_once`). Returns
    /// the bytes of data written.
    pub fn feed_once(&self, device: &Arc<CacheDevice>, budget_bytes: u64) -> u64 {
        self.l2.feed_once(device, budget_bytes)
    }
}

/// Starts the ARC size control thread: four passes a second (limits set at runtime,
/// memory pressure), until the engine shuts down or is gone.
fn spawn_arc_sizer(engine: &Arc<Engine>) {
    let weak = Arc::downgrade(engine);
    let _ = std::thread::Builder::new()
        .name("larch-arc-size".into())
        .spawn(move || {
            let mut last_trim = Instant::now();
            for pass in 1u64.. {
                std::thread::sleep(Duration::from_millis(250));
                let Some(engine) = weak.upgrade() else {
                    return;
                };
                if engine.life.is_shutting_down() {
                    return;
                }
                let shrank = engine.adjust_arc_size();
                // Resident memory is looked at once a second (it sums every shard),
                // and given back at most every TRIM_INTERVAL, or at once after a
                // shrink for memory pressure (what it freed must reach the system).
                let due = pass.is_multiple_of(4) && last_trim.elapsed() >= TRIM_INTERVAL;
                if (shrank || due) && engine.release_free_memory() {
                    last_trim = Instant::now();
                }
            }
        });
}

/// Starts the TXG syncer's thread.
fn spawn_syncer(syncer: Syncer) -> JoinHandle<()> {
    let life = Arc::clone(&syncer.life);
    std::thread::Builder::new()
        .name("larch-txg-sync".into())
        .spawn(move || {
            // Set however the loop ends: should it panic (a bug), FLUSHes and sync
            // writes waiting for it get an error instead of waiting for ever.
            struct Done(Arc<Lifecycle>);
            impl Drop for Done {
                fn drop(&mut self) {
                    self.0.syncer_ended();
                }
            }
            let _done = Done(life);
            syncer.run();
        })
        .expect("spawn the TXG syncer")
}

/// The parts every flow shares, built first; each flow's part is wired from them.
struct Shared {
    arc: Arc<ArcCache>,
    coherence: Arc<Coherence>,
    volumes: Arc<Volumes>,
    events: Arc<Events>,
    tunables: Arc<Tunables>,
    stats: Arc<EngineStats>,
    write_stats: Arc<WriteStats>,
    generations: Arc<Generations>,
    life: Arc<Lifecycle>,
    background: Arc<Background>,
}

impl Shared {
    fn l2arc(&self) -> L2Arc {
        L2Arc {
            devices: CacheDevices::new(),
            arc: Arc::clone(&self.arc),
            coherence: Arc::clone(&self.coherence),
            volumes: Arc::clone(&self.volumes),
            tunables: Arc::clone(&self.tunables),
            stats: Arc::clone(&self.stats),
            life: Arc::clone(&self.life),
            generations: Arc::clone(&self.generations),
            background: Arc::clone(&self.background),
            events: Arc::clone(&self.events),
        }
    }

    fn txg_parts(&self) -> TxgParts {
        TxgParts {
            arc: Arc::clone(&self.arc),
            coherence: Arc::clone(&self.coherence),
            volumes: Arc::clone(&self.volumes),
            tunables: Arc::clone(&self.tunables),
            stats: Arc::clone(&self.stats),
            write_stats: Arc::clone(&self.write_stats),
            generations: Arc::clone(&self.generations),
            life: Arc::clone(&self.life),
            events: Arc::clone(&self.events),
        }
    }

    fn partial_writes(&self, txg: &Arc<Txg>) -> PartialWrites {
        PartialWrites {
            queue: Default::default(),
            txg: Arc::clone(txg),
            arc: Arc::clone(&self.arc),
            volumes: Arc::clone(&self.volumes),
            tunables: Arc::clone(&self.tunables),
            stats: Arc::clone(&self.stats),
            write_stats: Arc::clone(&self.write_stats),
            background: Arc::clone(&self.background),
        }
    }

    fn syncer(&self, txg: &Arc<Txg>, l2: &Arc<L2Arc>, faults: &Arc<Faults>) -> Syncer {
        Syncer {
            txg: Arc::clone(txg),
            l2: Arc::clone(l2),
            arc: Arc::clone(&self.arc),
            volumes: Arc::clone(&self.volumes),
            tunables: Arc::clone(&self.tunables),
            write_stats: Arc::clone(&self.write_stats),
            life: Arc::clone(&self.life),
            faults: Arc::clone(faults),
            events: Arc::clone(&self.events),
        }
    }
}

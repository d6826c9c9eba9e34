//! The engine shared by every volume of a pool: its parts, its threads, its start and
//! its end. Each part lives in its own module and owns its state; the flows that cross
//! parts (a read, a write, a feed, a rebuild, a TXG sync) are in their modules too.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use larch_l2::RebuildStats;

use crate::arc::{ArcCache, ArcSizer, TRIM_INTERVAL, release_free_memory, sizing_limits};
use crate::backing::BackingStore;
use crate::coherence::{Coherence, DistrustSink};
use crate::l2::CacheDevices;
use crate::lock::{RankedMutex, RankedRwLock};
use crate::report::{CacheDeviceReport, LatencyReport, LogDeviceReport, RebuildReport};
use crate::stats::{EngineStats, WriteStats};
use crate::tunables::Tunables;
use crate::txg::{LogHandle, Txg, zil::Committed};
use crate::volumes::{VolumeEntry, VolumeFailure, VolumeSpec, Volumes};

/// An I/O error naming the device (`path`) it came from.
pub(crate) fn device_error(path: &std::path::Path, e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(format!("{}: {e}", path.display()))
}

/// The engine shared by every volume of a pool.
pub struct Engine {
    /// The ARC: shards of policy, buffers, in-flight reads and L2 index.
    pub(crate) arc: ArcCache,
    /// ARC sizing and memory pressure.
    sizer: ArcSizer,
    /// The cache devices.
    pub(crate) l2: CacheDevices,
    /// What the no-stale-read argument relies on.
    pub(crate) coherence: Coherence,
    /// The volumes, by slot.
    pub(crate) volumes: Volumes,
    /// Transaction groups.
    pub(crate) txg: Txg,
    /// The intent log's device, if the pool has one.
    pub(crate) log: RankedRwLock<Option<Arc<LogHandle>>>,
    /// The pool's record of committed TXGs outside the log device.
    pub(crate) committed: Committed,
    /// The tunables (OpenZFS names).
    pub tunables: Tunables,
    /// The counters of the read path and the L2ARC.
    pub stats: EngineStats,
    /// The counters of the write path.
    pub write_stats: WriteStats,
    /// The pool's clients' accesses, sampled for its miss-ratio curves.
    pub access_log: crate::mrc::AccessLog,
    next_generation: AtomicU64,
    shutdown: AtomicBool,
    /// Wakes threads sleeping until their next round (feeders) at shutdown.
    wake: (RankedMutex<()>, Condvar),
    syncer: RankedMutex<Option<JoinHandle<()>>>,
    syncer_done: AtomicBool,
    /// The feeder threads.
    pub(crate) threads: RankedMutex<Vec<JoinHandle<()>>>,
    /// The runtime blocking I/O and prefetch run on, when set ([`Engine::run_background_on`]).
    background: std::sync::OnceLock<tokio::runtime::Handle>,
    /// Partial-write merges waiting for a merge thread (`txg::partial`).
    pub(crate) merge_queue: crate::txg::MergeQueue,
    /// Faults tests inject.
    #[cfg(feature = "fault-injection")]
    pub(crate) faults: Faults,
}

/// Faults the power-loss tests inject to show that they catch what the faults break.
#[cfg(feature = "fault-injection")]
#[derive(Debug, Default)]
pub(crate) struct Faults {
    /// The syncer skips step 1 (tombstones and rebuild logs) before writing a TXG.
    pub(crate) skip_tombstone_commit: AtomicBool,
}

impl Engine {
    /// Runs the engine's blocking I/O (backing-store reads and writes, cache-device reads
    /// without io_uring) and its prefetch reads on `runtime` from now on, whichever
    /// runtime the request came from. The daemon serves each NBD connection on a runtime
    /// of its own that ends with the connection: a prefetch must outlive it, and one
    /// shared blocking pool keeps the thread count bounded. Without it (or after a second
    /// call, which changes nothing) they run on the caller's runtime.
    pub fn run_background_on(&self, runtime: tokio::runtime::Handle) {
        let _ = self.background.set(runtime);
    }

    /// Where volume failures are recorded from now on (see
    /// [`crate::volumes::Volumes::set_failure_sink`]).
    pub fn set_volume_failure_sink(&self, sink: crate::volumes::FailureSink) {
        self.volumes.set_failure_sink(sink);
    }

    /// Marks a volume failed as an earlier run recorded it: its writes fail and its lost
    /// blocks read as errors. Call after the volume is registered, before it is served.
    pub fn restore_volume_failure(&self, failure: &VolumeFailure) -> Result<(), String> {
        self.volumes.restore_failure(failure)
    }

    /// The runtime set by [`Engine::run_background_on`].
    pub(crate) fn background_runtime(&self) -> Option<&tokio::runtime::Handle> {
        self.background.get()
    }

    /// Runs `work` on the blocking pool (see [`Engine::run_background_on`]).
    pub(crate) fn spawn_blocking<F, R>(&self, work: F) -> tokio::task::JoinHandle<R>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        match self.background.get() {
            Some(runtime) => runtime.spawn_blocking(work),
            None => tokio::task::spawn_blocking(work),
        }
    }

    /// Runs `task` in the background (see [`Engine::run_background_on`]).
    pub(crate) fn spawn_background<F>(&self, task: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match self.background.get() {
            Some(runtime) => runtime.spawn(task),
            None => tokio::spawn(task),
        }
    }

    /// An engine whose ARC holds at most `arc_max_bytes` of data (`zfs_arc_max`), with its
    /// TXG syncer and its ARC size control thread (limits set at runtime, memory
    /// pressure), which stop with [`Engine::shutdown`].
    pub fn new(arc_max_bytes: u64) -> Arc<Engine> {
        let tunables = crate::tunables::starting(arc_max_bytes);
        let limits = sizing_limits(&tunables);
        // Generations only need to differ from those of older copies of the same block.
        // Starting from the wall clock in µs keeps them above any earlier run's.
        let start = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(1);
        let engine = Arc::new(Engine {
            arc: ArcCache::new(limits.0, limits.1),
            sizer: ArcSizer::new(limits),
            l2: CacheDevices::new(),
            coherence: Coherence::new(),
            volumes: Volumes::default(),
            txg: Txg::new(1),
            log: RankedRwLock::leaf(None),
            committed: Committed::new(),
            tunables,
            stats: EngineStats::default(),
            write_stats: WriteStats::default(),
            access_log: crate::mrc::AccessLog::new(),
            next_generation: AtomicU64::new(start),
            shutdown: AtomicBool::new(false),
            wake: (RankedMutex::leaf(()), Condvar::new()),
            syncer: RankedMutex::leaf(None),
            syncer_done: AtomicBool::new(false),
            threads: RankedMutex::leaf(Vec::new()),
            background: std::sync::OnceLock::new(),
            merge_queue: crate::txg::MergeQueue::default(),
            #[cfg(feature = "fault-injection")]
            faults: Faults::default(),
        });
        let syncer_engine = Arc::clone(&engine);
        let syncer = std::thread::Builder::new()
            .name("larch-txg-sync".into())
            .spawn(move || {
                // Set however the loop ends: should it panic (a bug), FLUSHes and sync
                // writes waiting for it get an error instead of waiting for ever.
                struct Done<'a>(&'a AtomicBool);
                impl Drop for Done<'_> {
                    fn drop(&mut self) {
                        self.0.store(true, Ordering::Release);
                    }
                }
                let _done = Done(&syncer_engine.syncer_done);
                syncer_engine.syncer_loop();
            })
            .expect("spawn the TXG syncer");
        *engine.syncer.lock() = Some(syncer);
        let weak = Arc::downgrade(&engine);
        let _ = std::thread::Builder::new()
            .name("larch-arc-size".into())
            .spawn(move || {
                let mut last_trim = Instant::now();
                for pass in 1u64.. {
                    std::thread::sleep(Duration::from_millis(250));
                    let Some(engine) = weak.upgrade() else {
                        return;
                    };
                    if engine.is_shutting_down() {
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
        engine
    }

    /// Registers a volume over `backing`; it can be read and written at once. Refused:
    /// a guid registered already, too many volumes, a volume too large for cache keys.
    pub fn add_volume(
        &self,
        spec: VolumeSpec,
        backing: Arc<BackingStore>,
    ) -> Result<Arc<VolumeEntry>, String> {
        // A volume added while a log device takes records may have records from the open
        // TXG on: an object volume records that none of its log's are older (see
        // `attach_log_device`).
        if self.log_device().is_some() {
            let before_open = self.txg_state().1.saturating_sub(1);
            backing
                .catch_up(before_open)
                .map_err(|e| format!("recording its intent-log state: {e}"))?;
        }
        self.volumes.register(spec, backing)
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
        self.sizer.adjust(&self.arc, &self.tunables, &self.stats)
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

    pub(crate) fn fresh_generation(&self) -> u64 {
        self.next_generation.fetch_add(1, Ordering::Relaxed)
    }

    /// The newest generation issued so far.
    pub(crate) fn newest_generation(&self) -> u64 {
        self.next_generation
            .load(Ordering::Relaxed)
            .saturating_sub(1)
    }

    pub(crate) fn is_shutting_down(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

    pub(crate) fn syncer_running(&self) -> bool {
        !self.syncer_done.load(Ordering::Acquire)
    }

    /// Sleeps for `wait`, or until shutdown begins.
    pub(crate) fn sleep_unless_shutdown(&self, wait: Duration) {
        let deadline = Instant::now() + wait;
        let mut guard = self.wake.0.lock();
        while !self.is_shutting_down() {
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            guard = guard.wait_timeout(&self.wake.1, deadline - now);
        }
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
        self.merge_all_partials();
        self.merge_queue.stop();
        self.shutdown.store(true, Ordering::Release);
        {
            let _guard = self.wake.0.lock();
            self.wake.1.notify_all();
        }
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
        for device in self.l2.all() {
            if let Err(err) = self.commit_device_log(&device) {
                let why = format!("log commit at shutdown failed: {err}");
                if let Err(why) = self.fault_device(&device, why) {
                    eprintln!("larch: {why}");
                }
            }
            device.release_file_lock();
        }
        // Nothing writes the devices from here on: their files are free for another pool
        // (or this one opened again) even while something still holds this engine.
        if let Some(log) = self.log_device() {
            log.release_file_lock();
        }
    }

    /// The report of every cache device.
    pub fn device_reports(&self) -> Vec<CacheDeviceReport> {
        self.l2
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
        self.log_device().map(|l| {
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
        let mut out = self.arc.kstats();
        let named =
            |values: Vec<(&'static str, u64)>| values.into_iter().map(|(k, v)| (k.to_string(), v));
        out.extend(named(self.stats.values()));
        out.extend(named(self.write_stats.values()));
        let (dirty, open, synced) = self.txg_state();
        let mut rebuild = RebuildStats::default();
        let devices = self.l2.all();
        for r in devices.iter().filter_map(|d| d.rebuild_stats()) {
            rebuild.l2_rebuild_success += r.l2_rebuild_success;
            rebuild.l2_rebuild_io_errors += r.l2_rebuild_io_errors;
            rebuild.l2_rebuild_cksum_lb_errors += r.l2_rebuild_cksum_lb_errors;
            rebuild.l2_rebuild_bufs += r.l2_rebuild_bufs;
            rebuild.l2_rebuild_size += r.l2_rebuild_size;
            rebuild.l2_rebuild_log_blks += r.l2_rebuild_log_blks;
        }
        out.extend(named(vec![
            ("dirty_bytes", dirty),
            ("dirty_data_max", self.dirty_max()),
            ("write_partial_pending", self.pending_partials()),
            ("zil_itx_pending", self.log_pending_records()),
            ("txg_open", open),
            ("txg_synced", synced),
            ("l2_hdr_size", self.arc.l2_index_bytes()),
            ("mrc_size", self.mrc_memory_bytes()),
            ("l2_ndev", devices.len() as u64),
            ("l2_rebuild_success", rebuild.l2_rebuild_success),
            ("l2_rebuild_io_errors", rebuild.l2_rebuild_io_errors),
            (
                "l2_rebuild_cksum_lb_errors",
                rebuild.l2_rebuild_cksum_lb_errors,
            ),
            ("l2_rebuild_bufs", rebuild.l2_rebuild_bufs),
            ("l2_rebuild_size", rebuild.l2_rebuild_size),
            ("l2_rebuild_log_blks", rebuild.l2_rebuild_log_blks),
        ]));
        out
    }

    /// Tombstones queued for cache-device logs and not yet committed.
    pub fn queued_tombstones(&self) -> usize {
        self.coherence.queued_tombstones()
    }
}

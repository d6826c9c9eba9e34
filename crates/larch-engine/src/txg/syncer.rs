//! The syncer: one thread that closes the open TXG and writes it to the backing stores,
//! after making the tombstones of the copies it supersedes durable (see the parent
//! module's steps 1-3 and [`crate::coherence`], rule 2).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use larch_policy::BlockKey;

use super::{DirtyBlock, Txg};
use crate::arc::ArcCache;
use crate::backing::BackingStore;
use crate::error::{DistrustError, SyncError};
use crate::events::{Events, StallWatch};
use crate::l2::L2Arc;
use crate::run::Lifecycle;
use crate::stats::WriteStats;
use crate::tunables::Tunables;
use crate::volumes::{VolumeEntry, Volumes};

/// Faults the power-loss tests inject to show that they catch what the faults break.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    /// The syncer skips step 1 (tombstones and rebuild logs) before writing a TXG.
    #[cfg_attr(not(feature = "fault-injection"), allow(dead_code))]
    pub(crate) skip_tombstone_commit: AtomicBool,
}

/// The syncer: the parts a TXG sync reads and changes. It runs on its own thread
/// ([`Syncer::run`]) until the engine shuts down.
pub(crate) struct Syncer {
    pub(crate) txg: Arc<Txg>,
    pub(crate) l2: Arc<L2Arc>,
    pub(crate) arc: Arc<ArcCache>,
    pub(crate) volumes: Arc<Volumes>,
    pub(crate) tunables: Arc<Tunables>,
    pub(crate) write_stats: Arc<WriteStats>,
    pub(crate) life: Arc<Lifecycle>,
    #[cfg_attr(not(feature = "fault-injection"), allow(dead_code))]
    pub(crate) faults: Arc<Faults>,
    pub(crate) events: Arc<Events>,
}

impl Syncer {
    /// The syncer thread's loop: waits for a reason to sync, then syncs the open TXG.
    /// Returns at shutdown, after syncing what is dirty. Stalled TXGs are recorded as
    /// events by the rule of [`StallWatch`].
    pub(crate) fn run(&self) {
        let started = Instant::now();
        let clock_ms = || started.elapsed().as_millis() as u64;
        let mut stalls = StallWatch::default();
        loop {
            let mut inner = self.txg.lock();
            loop {
                let timeout_s = self.tunables.zfs_txg_timeout();
                let due = inner.open_since.elapsed() >= Duration::from_secs(timeout_s);
                let stopping = self.life.is_shutting_down();
                if inner.sync_requested || stopping || (due && !inner.open.is_empty()) {
                    break;
                }
                if due {
                    inner.open_since = Instant::now();
                }
                if let Some(over) = stalls.quiet(clock_ms(), timeout_s) {
                    self.events.record(over);
                }
                inner = self.txg.wait(inner, Duration::from_millis(50));
            }
            let stopping = self.life.is_shutting_down();
            // Close the open TXG.
            let txg = inner.open_txg;
            let blocks = std::mem::take(&mut inner.open);
            let bytes = std::mem::take(&mut inner.open_bytes);
            inner.open_txg += 1;
            inner.open_since = Instant::now();
            inner.sync_requested = false;
            drop(inner);
            let syncing = Instant::now();
            let result = self.sync_txg(txg, &blocks);
            let stalled = stalls.txg_synced(
                clock_ms(),
                txg,
                syncing.elapsed().as_millis() as u64,
                self.tunables.zfs_txg_timeout(),
                self.write_stats
                    .dmu_tx_dirty_over_max
                    .load(Ordering::Relaxed),
            );
            if let Some(stall) = stalled {
                self.events.record(stall);
            }
            let mut inner = self.txg.lock();
            inner.dirty_bytes -= bytes;
            inner.synced_txg = txg;
            let synced = inner.synced_txg;
            self.txg.zil.synced(synced);
            if let Err(why) = result {
                // The failed volumes are marked; their waiters see it.
                eprintln!("larch: TXG {txg}: {why}");
            }
            self.txg.changed.notify_all();
            let empty = inner.open.is_empty();
            drop(inner);
            if stopping && empty {
                return;
            }
        }
    }

    /// Syncs one closed TXG (steps 1-3 of the module comment).
    fn sync_txg(&self, txg: u64, blocks: &HashMap<BlockKey, DirtyBlock>) -> Result<(), SyncError> {
        let started = Instant::now();
        let mut by_volume: HashMap<u16, Vec<(u64, &DirtyBlock)>> = HashMap::new();
        for (key, dirty) in blocks {
            by_volume
                .entry(key.volume as u16)
                .or_default()
                .push((key.block, dirty));
        }
        // 1. Tombstones of the superseded cache-device copies are durable first.
        if !blocks.is_empty()
            && let Err(why) = self.commit_tombstones()
        {
            // No log could be made right, not even by the pool's record: writing the
            // backing stores now could let a restart serve stale copies. The TXG fails.
            let text = why.to_string();
            for (slot, list) in &by_volume {
                self.fail_txg(*slot, list, &text);
            }
            return Err(why.into());
        }
        // 2. The blocks, per volume in block order, contiguous runs in one write.
        let mut failure = None;
        let mut written = 0u64;
        for (slot, mut list) in by_volume {
            list.sort_unstable_by_key(|(block, _)| *block);
            let Some(vol) = self.volumes.get(slot) else {
                failure = Some(SyncError::UnknownSlot(slot));
                continue;
            };
            let max_active = self.tunables.zfs_vdev_async_write_max_active().max(1) as usize;
            let stored = if vol.backing.object().is_some() {
                // An object store: the blocks are staged (no copy) and the flush is one
                // commit that uploads them in parallel (see `larch_object`).
                let staged = list.iter().map(|(b, d)| (*b, d.data.clone())).collect();
                vol.backing
                    .stage_blocks(|b| vol.info().offset_of(b), staged)
                    .and_then(|n| vol.backing.flush().map(|()| n))
            } else {
                write_runs(&vol, &list, max_active).and_then(|n| vol.backing.flush().map(|()| n))
            };
            match stored {
                Ok(n) => written += n,
                Err(source) => {
                    let why = SyncError::Backing {
                        path: vol.backing.path().display().to_string(),
                        txg,
                        source,
                    };
                    self.fail_txg(slot, &list, &why.to_string());
                    failure = Some(why);
                    continue;
                }
            }
            // Clean (the end of step 2): the blocks may now be evicted and fed; zeroed ones
            // leave the ARC (the store reads as zeros there now).
            let now = self.arc.now_ms();
            for (block, dirty) in &list {
                let key = vol.info().key(*block);
                self.arc.shard(&key).write_done(
                    &vol.info(),
                    key,
                    dirty.generation,
                    dirty.zeroed.is_some(),
                    now,
                );
            }
        }
        // 3. The log may forget this TXG (see `zil`).
        self.txg.zil.txg_committed(txg);
        let s = &self.write_stats;
        if !blocks.is_empty() {
            s.txg_syncs.fetch_add(1, Ordering::Relaxed);
            let us = started.elapsed().as_micros() as u64;
            s.txg_last_sync_us.store(us, Ordering::Relaxed);
            s.txg_sync_us.fetch_add(us, Ordering::Relaxed);
            s.txg_last_sync_bytes.store(written, Ordering::Relaxed);
            s.txg_blocks_written
                .fetch_add(blocks.len() as u64, Ordering::Relaxed);
        }
        failure.map_or(Ok(()), Err)
    }

    /// A volume's blocks of a TXG did not reach its backing store: the volume fails (its
    /// writes and FLUSHes get EIO from now on), the cache drops the unstored bytes, and
    /// reads of those blocks get EIO too: the store holds older bytes than were
    /// acknowledged, and serving them would be a silent step back in time.
    fn fail_txg(&self, slot: u16, list: &[(u64, &DirtyBlock)], why: &str) {
        self.write_stats
            .txg_sync_errors
            .fetch_add(1, Ordering::Relaxed);
        let Some(vol) = self.volumes.get(slot) else {
            return;
        };
        vol.fail(why);
        vol.lose(list.iter().map(|(block, _)| *block));
        // Recorded before the TXG is committed (the caller's next step): from then on the
        // intent log no longer holds these writes, and the record is all that keeps a
        // restart from serving the store's older bytes.
        self.volumes.record_failure_counted(&vol, &self.write_stats);
        for (block, dirty) in list {
            let key = vol.info().key(*block);
            self.arc.shard(&key).write_failed(key, dirty.generation);
        }
    }

    /// Step 1: every online device commits the tombstones queued for it, and every
    /// device still rebuilding has its log emptied once for that rebuild (rule 2; see
    /// [`L2Arc::commit_queued_tombstones`]). `Err` only when a device failed, its log could
    /// not be emptied and the pool could not record it.
    fn commit_tombstones(&self) -> Result<(), DistrustError> {
        if self.skip_tombstone_commit() {
            return Ok(());
        }
        self.l2.commit_queued_tombstones()
    }

    /// Whether the tombstone commit is to be skipped: a fault injected by tests to show
    /// that the power-loss test catches the stale reads it causes.
    #[cfg(feature = "fault-injection")]
    fn skip_tombstone_commit(&self) -> bool {
        self.faults.skip_tombstone_commit.load(Ordering::Relaxed)
    }

    #[cfg(not(feature = "fault-injection"))]
    fn skip_tombstone_commit(&self) -> bool {
        false
    }
}

/// Most bytes in one write of a TXG's run (at least one block): 1 MiB writes keep a disk
/// streaming, and a long sequential run still spreads over the parallel writers.
const RUN_BYTES: u64 = 1 << 20;

/// Writes sorted blocks of one volume, merging contiguous ones into one write, with up to
/// `max_active` writes in flight (a slow store is mostly waiting: ZFS keeps
/// `zfs_vdev_async_write_max_active` writes queued per disk for the same reason). The
/// order does not matter: the caller flushes the store before the TXG counts as synced.
/// Returns the bytes written, or the first error (the remaining runs are not started).
fn write_runs(
    vol: &VolumeEntry,
    list: &[(u64, &DirtyBlock)],
    max_active: usize,
) -> std::io::Result<u64> {
    let block_bytes = u64::from(vol.info().block_bytes).max(1);
    let run_blocks = (RUN_BYTES / block_bytes).max(1) as usize;
    let mut runs: Vec<&[(u64, &DirtyBlock)]> = Vec::new();
    let mut i = 0;
    while i < list.len() {
        let mut j = i + 1;
        // A run is of one kind: blocks to write, or zeroed blocks of one mode (a range
        // zeroed in one call, however long).
        let zeroed = list[i].1.zeroed;
        while j < list.len()
            && list[j].0 == list[j - 1].0 + 1
            && list[j].1.zeroed == zeroed
            && (zeroed.is_some() || j - i < run_blocks)
        {
            j += 1;
        }
        runs.push(&list[i..j]);
        i = j;
    }
    let backing = &vol.backing;
    let offset = |block: u64| vol.info().offset_of(block);
    let workers = max_active.min(runs.len());
    // Every run waits for a writer from here (`larch iostat -q`'s write queue).
    let queued = backing.stats.write_queue.enter_batch(runs.len() as u64);
    let write = |run: &[(u64, &DirtyBlock)]| {
        let _active = queued.issue_one();
        write_run(backing, offset(run[0].0), run)
    };
    if workers <= 1 {
        return runs.iter().map(|run| write(run)).sum();
    }
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    // Each writer takes the next run until none is left, so any number of them writes
    // every run: the syncer's own thread is one, and a thread the system refuses (a
    // cgroup's pids.max, RLIMIT_NPROC) only leaves fewer (`Scope::spawn` would panic and
    // take the syncer with it).
    let writer = || -> std::io::Result<u64> {
        let mut written = 0;
        while !failed.load(Ordering::Relaxed) {
            let Some(run) = runs.get(next.fetch_add(1, Ordering::Relaxed)) else {
                break;
            };
            match write(run) {
                Ok(n) => written += n,
                Err(err) => {
                    failed.store(true, Ordering::Relaxed);
                    return Err(err);
                }
            }
        }
        Ok(written)
    };
    std::thread::scope(|scope| {
        let handles: Vec<_> = (1..workers)
            .map_while(|_| {
                std::thread::Builder::new()
                    .name("larch-txg-write".into())
                    .spawn_scoped(scope, writer)
                    .ok()
            })
            .collect();
        let mut total = writer();
        for handle in handles {
            let result = handle
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("a TXG writer panicked")));
            total = match (total, result) {
                (Ok(a), Ok(b)) => Ok(a + b),
                (Err(e), _) | (Ok(_), Err(e)) => Err(e),
            };
        }
        total
    })
}

/// Writes one run of contiguous blocks at `offset` in one (vectored) write, or zeroes
/// the range of a run of zeroed blocks.
fn write_run(
    backing: &BackingStore,
    offset: u64,
    run: &[(u64, &DirtyBlock)],
) -> std::io::Result<u64> {
    if let Some(mode) = run[0].1.zeroed {
        let len = run.iter().map(|(_, d)| d.data.len() as u64).sum();
        backing.zero_range(offset, len, mode)?;
        return Ok(len);
    }
    let parts: Vec<&[u8]> = run.iter().map(|(_, d)| &d.data[..]).collect();
    backing.write_vectored_at(&parts, offset)?;
    Ok(parts.iter().map(|p| p.len() as u64).sum())
}

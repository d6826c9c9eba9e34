//! The write path: dirty blocks in the ARC, transaction groups, the write throttle, and
//! the intent log (ZIL) on a log device. `docs/write-path.md` has the states and steps.
//!
//! A write makes its blocks dirty in the ARC and puts them in the **open TXG**; an async
//! write is then acknowledged. The **syncer** thread closes the open TXG every
//! `zfs_txg_timeout` seconds, when its dirty bytes pass `zfs_dirty_data_sync_percent` of
//! the dirty limit, or when a sync write or FLUSH asks for it, and syncs it:
//! 1. commits the open log block of every cache device, which holds the tombstones of the
//!    L2 copies this TXG's writes superseded (appended when the writes arrived);
//! 2. writes the TXG's blocks to the backing stores (contiguous runs in one write) and
//!    fdatasyncs every store it wrote;
//! 3. records the TXG as committed in the intent log, which frees the log's space;
//! 4. marks the blocks clean: they move to MRU and may be fed to cache devices.
//!
//! Closing a TXG is instantaneous (writers put their blocks in the open TXG under the
//! same lock that closes it), so the quiescing state lasts no time; only one TXG syncs at
//! a time and TXGs sync in order, so a block's newer contents always reach its backing
//! store after its older ones.
//!
//! A **sync** write (NBD FUA, or any write to a `sync=always` volume) is acknowledged
//! once it is durable: with a healthy log device, its records are committed to the log
//! (concurrent writers share one log write and flush); without one, the TXG holding it
//! is synced and waited for. A **FLUSH** makes every write acknowledged before it durable
//! the same way: with a log device, by committing the records of every async write not
//! yet synced; without one, by syncing the open TXG. `sync=disabled` volumes acknowledge
//! both at once and say so in `larch status`.
//!
//! The **write throttle** (OpenZFS `dmu_tx_delay`) delays each write once dirty bytes
//! pass `zfs_delay_min_dirty_percent` of the limit, by `zfs_delay_scale` × (dirty −
//! min) / (limit − dirty) ns (at most 100 ms), and blocks writers at the limit until a
//! sync frees room. The limit is `zfs_dirty_data_max`, but at most half of `zfs_arc_max`
//! (dirty blocks live in the ARC and cannot be evicted).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use larch_policy::BlockKey;

use super::{Engine, SyncMode, VolumeInfo};
use crate::backing::BackingStore;

/// Longest delay the throttle puts on one write (OpenZFS caps it at 100 ms too).
const MAX_DELAY: Duration = Duration::from_millis(100);

/// A dirty block waiting in a TXG.
#[derive(Clone)]
struct DirtyBlock {
    vol: VolumeInfo,
    generation: u64,
    data: Bytes,
}

/// A write whose record the log does not have yet (OpenZFS keeps them as `itx`s). Every
/// write gets one while a log device is attached; a sync write or FLUSH commits all of
/// them up to its own. They reach the log in the order of the writes, so replay (which
/// applies records in log order) ends every block with its newest logged bytes.
#[derive(Clone)]
struct PendingRecord {
    txg: u64,
    volume: u64,
    offset: u64,
    data: Bytes,
}

/// What the syncer and the writers share.
struct TxgInner {
    /// The open TXG's number.
    open_txg: u64,
    open: HashMap<BlockKey, DirtyBlock>,
    open_bytes: u64,
    open_since: Instant,
    /// TXGs up to this one are on the backing stores.
    synced_txg: u64,
    /// Bytes dirty in the open and the syncing TXG.
    dirty_bytes: u64,
    /// A waiter asked for the open TXG to sync now.
    sync_requested: bool,
    /// Writes not in the log yet (only kept while a log device is attached).
    pending: Vec<PendingRecord>,
    /// Sequence number of the next pending record.
    next_seq: u64,
    /// Every record up to this one is durable (in the log, or its TXG synced).
    durable_seq: u64,
    /// A leader is committing records to the log.
    log_busy: bool,
}

/// The TXG machinery of an engine.
pub(super) struct Txg {
    inner: Mutex<TxgInner>,
    /// Signalled when a TXG synced or a sync is requested.
    pub(super) changed: Condvar,
}

/// Counters of the write path (in arcstats, `larch status` and /metrics).
#[derive(Debug, Default)]
pub struct WriteStats {
    /// TXGs synced.
    pub txg_syncs: AtomicU64,
    /// Duration of the last TXG sync, µs.
    pub txg_last_sync_us: AtomicU64,
    /// Total duration of TXG syncs, µs.
    pub txg_sync_us: AtomicU64,
    /// Bytes the last TXG wrote.
    pub txg_last_sync_bytes: AtomicU64,
    /// Blocks written by TXG syncs.
    pub txg_blocks_written: AtomicU64,
    /// Writes the throttle delayed (OpenZFS `dmu_tx_delay`).
    pub throttle_delays: AtomicU64,
    /// Total delay, µs.
    pub throttle_delay_us: AtomicU64,
    /// Writes that waited at the dirty limit (OpenZFS `dmu_tx_dirty_over_max`).
    pub throttle_over_max: AtomicU64,
    /// Sync writes and FLUSHes made durable through the log.
    pub zil_commits: AtomicU64,
    /// Records written to the log.
    pub zil_records: AtomicU64,
    /// Bytes of record data written to the log.
    pub zil_bytes: AtomicU64,
    /// Total time of log commits, µs.
    pub zil_commit_us: AtomicU64,
    /// Sync writes and FLUSHes made durable by syncing a TXG (no usable log device).
    pub txg_sync_waits: AtomicU64,
    /// Failed syncs of a TXG (backing-store write or flush errors).
    pub txg_sync_errors: AtomicU64,
}

impl Txg {
    pub(super) fn new(first_txg: u64) -> Txg {
        Txg {
            inner: Mutex::new(TxgInner {
                open_txg: first_txg.max(1),
                open: HashMap::new(),
                open_bytes: 0,
                open_since: Instant::now(),
                synced_txg: first_txg.max(1) - 1,
                dirty_bytes: 0,
                sync_requested: false,
                pending: Vec::new(),
                next_seq: 1,
                durable_seq: 0,
                log_busy: false,
            }),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, TxgInner> {
        self.inner.lock().expect("txg lock")
    }

    /// Waits for a change (a sync, a request) or `timeout`, whichever comes first.
    fn wait<'a>(
        &self,
        inner: MutexGuard<'a, TxgInner>,
        timeout: Duration,
    ) -> MutexGuard<'a, TxgInner> {
        self.changed
            .wait_timeout(inner, timeout)
            .expect("txg lock")
            .0
    }

    /// Continues TXG numbering at `next` (after a log replay), if that is higher.
    pub(super) fn start_at(&self, next: u64) {
        let mut inner = self.lock();
        if next > inner.open_txg && inner.open.is_empty() {
            inner.open_txg = next;
            inner.synced_txg = next - 1;
        }
    }
}

impl Engine {
    /// The dirty limit in force: `zfs_dirty_data_max`, at most half of `zfs_arc_max`.
    pub(super) fn dirty_max(&self) -> u64 {
        self.tunables
            .zfs_dirty_data_max()
            .min(self.arc_max_bytes() / 2)
            .max(1 << 20)
    }

    /// Delays a writer of `bytes` as the dirty data approaches the limit; blocks it at
    /// the limit until a sync frees room.
    fn throttle(&self, bytes: u64) {
        let max = self.dirty_max();
        let min_percent = self.tunables.zfs_delay_min_dirty_percent().min(100);
        let min = max / 100 * min_percent;
        let scale = self.tunables.zfs_delay_scale();
        let mut inner = self.txg.lock();
        if inner.dirty_bytes + bytes > max && inner.dirty_bytes > 0 {
            self.write_stats
                .throttle_over_max
                .fetch_add(1, Ordering::Relaxed);
            while inner.dirty_bytes + bytes > max
                && inner.dirty_bytes > 0
                && !self.shutdown.load(Ordering::Acquire)
            {
                inner.sync_requested = true;
                self.txg.changed.notify_all();
                inner = self.txg.wait(inner, Duration::from_millis(100));
            }
        }
        let dirty = inner.dirty_bytes;
        drop(inner);
        if dirty > min && max > dirty {
            let ns = scale.saturating_mul(dirty - min) / (max - dirty);
            let delay = Duration::from_nanos(ns).min(MAX_DELAY);
            if !delay.is_zero() {
                self.write_stats
                    .throttle_delays
                    .fetch_add(1, Ordering::Relaxed);
                self.write_stats
                    .throttle_delay_us
                    .fetch_add(delay.as_micros() as u64, Ordering::Relaxed);
                std::thread::sleep(delay);
            }
        }
    }

    /// Writes whole blocks of a volume: throttled, dirty in the ARC and in the open TXG,
    /// every cache-device copy of them tombstoned (made durable before the TXG reaches the
    /// backing store). Returns when the write may be acknowledged: at once for an async
    /// write, once durable for a sync one (`sync`, or the volume's `sync=always`).
    /// Blocking.
    pub fn write_blocks(
        &self,
        vol: &VolumeInfo,
        blocks: &[(u64, Bytes)],
        sync: bool,
    ) -> Result<(), String> {
        if let Some(why) = self.volume_failure(vol) {
            return Err(why);
        }
        let bytes: u64 = blocks.iter().map(|(_, b)| b.len() as u64).sum();
        self.throttle(bytes);
        self.writes_seen.store(true, Ordering::Release);
        let (txg, seq) = self.make_dirty(vol, blocks);
        let sync = match vol.sync {
            SyncMode::Disabled => false,
            SyncMode::Always => true,
            SyncMode::Standard => sync,
        };
        if !sync {
            return Ok(());
        }
        if let Some(seq) = seq
            && self.log_is_usable()
        {
            self.log_commit_upto(seq)?;
        } else {
            self.wait_synced(txg)?;
        }
        // A TXG of this volume that failed to reach its backing store.
        self.volume_failure(vol).map_or(Ok(()), Err)
    }

    /// Makes every write acknowledged so far durable (NBD FLUSH). Blocking.
    pub fn flush_writes(&self, vol: &VolumeInfo) -> Result<(), String> {
        if vol.sync == SyncMode::Disabled {
            return Ok(());
        }
        if let Some(why) = self.volume_failure(vol) {
            return Err(why);
        }
        if self.log_is_usable() {
            let upto = self.txg.lock().next_seq - 1;
            self.log_commit_upto(upto)?;
        } else {
            let txg = self.txg.lock().open_txg;
            self.wait_synced(txg)?;
        }
        self.volume_failure(vol).map_or(Ok(()), Err)
    }

    /// Makes every pending record up to `seq` durable: one caller at a time (the leader)
    /// takes all pending records, in order, and commits them to the log in one call;
    /// the others wait for it (group commit, ordered). If the log cannot take them (full,
    /// failed), the leader syncs their TXGs instead, for the whole group.
    fn log_commit_upto(&self, seq: u64) -> Result<(), String> {
        let mut inner = self.txg.lock();
        loop {
            if inner.durable_seq >= seq {
                return Ok(());
            }
            if !inner.log_busy {
                break;
            }
            inner = self.txg.wait(inner, Duration::from_millis(100));
        }
        inner.log_busy = true;
        let synced = inner.synced_txg;
        let mut group = std::mem::take(&mut inner.pending);
        let upto = inner.next_seq - 1;
        drop(inner);
        group.retain(|r| r.txg > synced);
        let logged = self.commit_records(&group);
        let result = if logged {
            Ok(())
        } else {
            let txg = group.iter().map(|r| r.txg).max().unwrap_or(0);
            self.wait_synced(txg)
        };
        let mut inner = self.txg.lock();
        inner.log_busy = false;
        if result.is_ok() {
            inner.durable_seq = inner.durable_seq.max(upto);
        }
        self.txg.changed.notify_all();
        drop(inner);
        result
    }

    /// Dirties blocks (see [`Engine::write_blocks`]) and returns the TXG they joined and,
    /// with a log device attached, the sequence number of their last pending record.
    fn make_dirty(&self, vol: &VolumeInfo, blocks: &[(u64, Bytes)]) -> (u64, Option<u64>) {
        let generations = self.write_prepare(vol, blocks);
        let mut inner = self.txg.lock();
        let txg = inner.open_txg;
        let keep_pending = self.log_is_usable();
        let mut last_seq = None;
        for ((block, data), generation) in blocks.iter().zip(generations) {
            let key = BlockKey::new(vol.guid, *block);
            let len = data.len() as u64;
            let dirty = DirtyBlock {
                vol: *vol,
                generation,
                data: data.clone(),
            };
            match inner.open.insert(key, dirty) {
                Some(old) => {
                    let old_len = old.data.len() as u64;
                    inner.open_bytes = inner.open_bytes - old_len + len;
                    inner.dirty_bytes = inner.dirty_bytes - old_len + len;
                }
                None => {
                    inner.open_bytes += len;
                    inner.dirty_bytes += len;
                }
            }
            if keep_pending {
                let seq = inner.next_seq;
                inner.next_seq += 1;
                last_seq = Some(seq);
                inner.pending.push(PendingRecord {
                    txg,
                    volume: vol.guid,
                    offset: block * u64::from(vol.block_bytes),
                    data: data.clone(),
                });
            }
        }
        let sync_percent = self.tunables.zfs_dirty_data_sync_percent().min(100);
        if inner.open_bytes >= self.dirty_max() / 100 * sync_percent {
            inner.sync_requested = true;
            self.txg.changed.notify_all();
        }
        (txg, last_seq)
    }

    /// Commits records to the log device. False when the log cannot take them (full,
    /// failed, removed): the caller falls back to syncing the TXG.
    fn commit_records(&self, records: &[PendingRecord]) -> bool {
        let Some(log) = self.log.read().expect("log lock").clone() else {
            return false;
        };
        let max = (log.device.max_record_data_bytes() as usize).max(1);
        let mut views = Vec::with_capacity(records.len());
        for r in records {
            // Records larger than the log takes are split.
            for (i, piece) in r.data.chunks(max).enumerate() {
                views.push(larch_zil::RecordRef {
                    txg: r.txg,
                    volume_id: r.volume,
                    offset_bytes: r.offset + (i * max) as u64,
                    data: piece,
                });
            }
        }
        let started = Instant::now();
        // Commit in pieces the log accepts in one block, in order.
        let limit = log.device.max_commit_bytes();
        let mut start = 0;
        loop {
            let mut end = start;
            let mut size = 0u64;
            while end < views.len() {
                let bytes = larch_zil::encoded_record_bytes(views[end].data.len());
                if end > start && size + bytes > limit {
                    break;
                }
                size += bytes;
                end += 1;
            }
            match log.device.commit(&views[start..end]) {
                Ok(_) => {}
                // Before anything is written: the log stays usable, this group falls
                // back to a TXG sync.
                Err(larch_zil::LogError::Full { .. } | larch_zil::LogError::TooLarge { .. }) => {
                    return false;
                }
                Err(err) => {
                    log.fail(format!("log commit failed: {err}"));
                    return false;
                }
            }
            start = end;
            if start >= views.len() {
                break;
            }
        }
        let s = &self.write_stats;
        s.zil_commits.fetch_add(1, Ordering::Relaxed);
        s.zil_records
            .fetch_add(views.len() as u64, Ordering::Relaxed);
        s.zil_bytes.fetch_add(
            views.iter().map(|v| v.data.len() as u64).sum(),
            Ordering::Relaxed,
        );
        s.zil_commit_us
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        true
    }

    /// Asks for the TXGs up to `txg` to sync and waits until they did (a sync write or
    /// FLUSH without a usable log device).
    fn wait_synced(&self, txg: u64) -> Result<(), String> {
        self.write_stats
            .txg_sync_waits
            .fetch_add(1, Ordering::Relaxed);
        self.wait_synced_quiet(txg)
    }

    /// [`Engine::wait_synced`] without counting it.
    pub(super) fn wait_synced_quiet(&self, txg: u64) -> Result<(), String> {
        let mut inner = self.txg.lock();
        while inner.synced_txg < txg {
            if self.shutdown.load(Ordering::Acquire) && !self.syncer_running() {
                return Err("the pool is shutting down".into());
            }
            inner.sync_requested = true;
            self.txg.changed.notify_all();
            inner = self.txg.wait(inner, Duration::from_millis(100));
        }
        Ok(())
    }

    /// The syncer thread's loop: waits for a reason to sync, then syncs the open TXG.
    /// Returns at shutdown, after syncing what is dirty.
    pub(super) fn syncer_loop(&self) {
        loop {
            let mut inner = self.txg.lock();
            loop {
                let timeout = Duration::from_secs(self.tunables.zfs_txg_timeout());
                let due = inner.open_since.elapsed() >= timeout;
                let stopping = self.shutdown.load(Ordering::Acquire);
                if inner.sync_requested || stopping || (due && !inner.open.is_empty()) {
                    break;
                }
                if due {
                    inner.open_since = Instant::now();
                }
                inner = self.txg.wait(inner, Duration::from_millis(50));
            }
            let stopping = self.shutdown.load(Ordering::Acquire);
            // Close the open TXG.
            let txg = inner.open_txg;
            let blocks = std::mem::take(&mut inner.open);
            let bytes = std::mem::take(&mut inner.open_bytes);
            inner.open_txg += 1;
            inner.open_since = Instant::now();
            inner.sync_requested = false;
            drop(inner);
            let result = self.sync_txg(txg, &blocks);
            let mut inner = self.txg.lock();
            inner.dirty_bytes -= bytes;
            inner.synced_txg = txg;
            let synced = inner.synced_txg;
            inner.pending.retain(|r| r.txg > synced);
            if let Err(why) = result {
                // The failed volumes are marked (`fail_volume`); their waiters see it.
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

    /// Syncs one closed TXG (steps 1–4 of the module comment).
    fn sync_txg(&self, txg: u64, blocks: &HashMap<BlockKey, DirtyBlock>) -> Result<(), String> {
        let started = Instant::now();
        // 1. Tombstones of the superseded cache-device copies are durable first.
        if !blocks.is_empty() {
            self.commit_tombstones();
        }
        // 2. The blocks, per volume in block order, contiguous runs in one write.
        let mut by_volume: HashMap<u64, Vec<(u64, &DirtyBlock)>> = HashMap::new();
        for (key, dirty) in blocks {
            by_volume
                .entry(key.volume)
                .or_default()
                .push((key.block, dirty));
        }
        let mut failure = None;
        let mut written = 0u64;
        for (volume, mut list) in by_volume {
            list.sort_unstable_by_key(|(block, _)| *block);
            let Some(backing) = self.backing_of(volume) else {
                failure = Some(format!("volume {volume:#x} has no backing store"));
                continue;
            };
            let max_active = self.tunables.zfs_vdev_async_write_max_active().max(1) as usize;
            match write_runs(&backing, &list, max_active).and_then(|n| backing.flush().map(|()| n))
            {
                Ok(n) => written += n,
                Err(err) => {
                    let why = format!(
                        "backing store {} failed: {err}; TXG {txg} is not stored",
                        backing.path().display()
                    );
                    self.fail_volume(volume, &why);
                    self.write_stats
                        .txg_sync_errors
                        .fetch_add(1, Ordering::Relaxed);
                    for (block, dirty) in &list {
                        self.write_failed(&dirty.vol, *block, dirty.generation);
                    }
                    failure = Some(why);
                    continue;
                }
            }
            // 4. Clean: the blocks may now be evicted and fed.
            for (block, dirty) in &list {
                self.write_done(&dirty.vol, *block, dirty.generation);
            }
        }
        // 3. The log may forget this TXG, unless a rebuild still has to tombstone copies
        //    of blocks that replay rewrote (see `Engine::replay_log`). A volume whose
        //    store failed does not hold the TXG back: replaying its records later would
        //    also replay the other volumes' records over their newer bytes. (That volume
        //    is failed: its writes and FLUSHes get EIO from now on.)
        if self.pending_rebuilds.load(Ordering::Acquire) == 0 {
            let log = self.log.read().expect("log lock").clone();
            if let Some(log) = log
                && let Err(err) = log.device.txg_committed(txg)
            {
                // The log cannot record it (failed, poisoned): the pool must, or a
                // restart would replay these records over newer bytes.
                log.fail(format!("log header update failed: {err}"));
                if let Err(why) = self.record_committed_elsewhere(txg) {
                    eprintln!("larch: {why}");
                }
            }
        }
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
        match failure {
            Some(why) => Err(why),
            None => Ok(()),
        }
    }

    /// Takes the log device out of use without losing what it covers: it stops taking
    /// records (sync writes go through TXG syncs from now on), the open TXG is synced, and
    /// once no cache-device rebuild needs the log kept, the log is told that every TXG up
    /// to it is committed, so a later replay of the device (if it is attached again by
    /// hand) has nothing to apply.
    pub fn detach_log(&self) -> Option<Arc<LogHandle>> {
        let log = self.log_device()?;
        log.draining.store(true, Ordering::Release);
        let txg = self.txg.lock().open_txg;
        let _ = self.wait_synced_quiet(txg);
        while self.pending_rebuilds.load(Ordering::Acquire) > 0
            && !self.shutdown.load(Ordering::Acquire)
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        let synced = self.txg.lock().synced_txg;
        if let Err(err) = log.device.txg_committed(synced) {
            log.fail(format!("log header update at removal failed: {err}"));
            if let Err(why) = self.record_committed_elsewhere(synced) {
                eprintln!("larch: {why}");
            }
        }
        let mut slot = self.log.write().expect("log lock");
        if slot.as_ref().is_some_and(|l| Arc::ptr_eq(l, &log)) {
            *slot = None;
        }
        drop(slot);
        self.txg.lock().pending.clear();
        Some(log)
    }

    /// Dirty bytes, open TXG, synced TXG (for stats).
    pub fn txg_state(&self) -> (u64, u64, u64) {
        let inner = self.txg.lock();
        (inner.dirty_bytes, inner.open_txg, inner.synced_txg)
    }
}

/// Writes sorted blocks of one volume, merging contiguous ones into one write, with up to
/// `max_active` writes in flight (a slow store is mostly waiting: ZFS keeps
/// `zfs_vdev_async_write_max_active` writes queued per disk for the same reason). The
/// order does not matter: the caller flushes the store before the TXG counts as synced.
/// Returns the bytes written, or the first error (the remaining runs are not started).
fn write_runs(
    backing: &BackingStore,
    list: &[(u64, &DirtyBlock)],
    max_active: usize,
) -> std::io::Result<u64> {
    let mut runs: Vec<&[(u64, &DirtyBlock)]> = Vec::new();
    let mut i = 0;
    while i < list.len() {
        let mut j = i + 1;
        while j < list.len() && list[j].0 == list[j - 1].0 + 1 && j - i < 256 {
            j += 1;
        }
        runs.push(&list[i..j]);
        i = j;
    }
    let workers = max_active.min(runs.len());
    if workers <= 1 {
        return runs.iter().map(|run| write_run(backing, run)).sum();
    }
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                scope.spawn(|| -> std::io::Result<u64> {
                    let mut written = 0;
                    while !failed.load(Ordering::Relaxed) {
                        let Some(run) = runs.get(next.fetch_add(1, Ordering::Relaxed)) else {
                            break;
                        };
                        match write_run(backing, run) {
                            Ok(n) => written += n,
                            Err(err) => {
                                failed.store(true, Ordering::Relaxed);
                                return Err(err);
                            }
                        }
                    }
                    Ok(written)
                })
            })
            .collect();
        let mut total = Ok(0u64);
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

/// Writes one run of contiguous blocks in one (vectored) write.
fn write_run(backing: &BackingStore, run: &[(u64, &DirtyBlock)]) -> std::io::Result<u64> {
    let offset = run[0].0 * u64::from(run[0].1.vol.block_bytes);
    let parts: Vec<&[u8]> = run.iter().map(|(_, d)| &d.data[..]).collect();
    backing.write_vectored_at(&parts, offset)?;
    Ok(parts.iter().map(|p| p.len() as u64).sum())
}

/// A log device attached to the engine.
pub struct LogHandle {
    /// Its path.
    pub path: std::path::PathBuf,
    /// Its guid.
    pub guid: u64,
    pub(super) device: larch_zil::LogDevice<Arc<dyn larch_io::BlockDevice>>,
    /// Why it was taken out of use, if it was.
    pub fault: Mutex<Option<String>>,
    /// Being removed: takes no new records; its TXGs are synced and committed first.
    pub(super) draining: std::sync::atomic::AtomicBool,
}

impl LogHandle {
    fn fail(&self, why: String) {
        let mut fault = self.fault.lock().expect("fault lock");
        if fault.is_none() {
            *fault = Some(why);
        }
    }

    /// Whether it takes records (not faulted, poisoned or being removed).
    pub fn is_healthy(&self) -> bool {
        self.fault.lock().expect("fault lock").is_none()
            && !self.device.is_poisoned()
            && !self.draining.load(Ordering::Acquire)
    }

    /// Its counters.
    pub fn stats(&self) -> larch_zil::LogStats {
        self.device.stats()
    }
}

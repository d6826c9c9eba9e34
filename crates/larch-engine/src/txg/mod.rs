//! The write path: dirty blocks in the ARC, transaction groups, the write throttle, and
//! the intent log (ZIL) on a log device. `docs/write-path.md` has the states and steps.
//!
//! A write makes its blocks dirty in the ARC and puts them in the **open TXG**; an async
//! write is then acknowledged. The **syncer** thread ([`syncer`]) closes the open TXG
//! every `zfs_txg_timeout` seconds, when its dirty bytes pass
//! `zfs_dirty_data_sync_percent` of the dirty limit, or when a sync write or FLUSH asks
//! for it, and syncs it:
//! 1. commits the tombstones of the cache-device copies this TXG's writes superseded
//!    (queued when the writes arrived; see [`crate::coherence`], rule 2);
//! 2. writes the TXG's blocks to the backing stores (contiguous runs in one write) and
//!    fdatasyncs every store it wrote; as each store's fdatasync returns, that volume's
//!    blocks are marked clean: they move to MRU and may be fed to cache devices;
//! 3. records the TXG as committed in the intent log, which frees the log's space.
//!
//! Closing a TXG is instantaneous (writers put their blocks in the open TXG under the
//! same lock that closes it), so the quiescing state lasts no time; only one TXG syncs at
//! a time and TXGs sync in order, so a block's newer contents always reach its backing
//! store after its older ones.
//!
//! A **sync** write (NBD FUA, or any write to a `sync=always` volume) is acknowledged
//! once it is durable ([`zil`]): with a healthy log device, its records are committed to
//! the log (concurrent writers share one log write and flush); without one, the TXG
//! holding it is synced and waited for. A **FLUSH** makes every write acknowledged
//! before it durable the same way. `sync=disabled` volumes acknowledge both at once.
//!
//! The **write throttle** ([`throttle`]) delays writers as dirty data approaches the
//! limit and blocks them at it.

pub(crate) mod partial;
mod syncer;
mod throttle;
pub(crate) mod zil;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Condvar;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use larch_policy::BlockKey;

pub(crate) use partial::{Offer, PartialWrites};
pub use zil::{CommittedSink, LogHandle};

use crate::arc::{ArcCache, BlockBuf, index_key};
use crate::backing::ZeroMode;
use crate::coherence::{Coherence, Tombstone};
use crate::error::WriteError;
use crate::events::Events;
use crate::lock::{Rank, RankedGuard, RankedMutex};
use crate::run::{Generations, Lifecycle};
use crate::stats::{EngineStats, WriteStats};
use crate::tunables::Tunables;
use crate::volumes::{LogBias, SyncMode, VolumeEntry, Volumes};

pub(crate) use syncer::{Faults, Syncer};
pub(crate) use zil::IntentLog;

/// A dirty block waiting in a TXG.
#[derive(Clone)]
struct DirtyBlock {
    generation: u64,
    data: Bytes,
    /// A zeroed block (TRIM, WRITE_ZEROES): the syncer zeroes its range on the backing
    /// store this way instead of writing `data` (the shared zeros), and the intent log has
    /// no record of it.
    zeroed: Option<ZeroMode>,
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
    /// Bytes dirty in the open and the syncing TXG, and those reserved by partial writes
    /// waiting for their merge ([`partial`]).
    dirty_bytes: u64,
    /// A waiter asked for the open TXG to sync now.
    sync_requested: bool,
    /// When the last throttled write was let go (OpenZFS `dp_last_wakeup`): the next one
    /// waits its delay after it, so delays space writes out across all writers.
    last_wakeup: Instant,
    /// Writes larger than the dirty limit waiting for the dirty data to reach zero; the
    /// other writers wait behind them ([`throttle`]).
    oversized_waiting: usize,
}

/// What [`Txg::make_dirty`] did: the TXG the blocks joined and, with a log device
/// attached, the log and the ticket of their last record in it.
struct Dirtied {
    txg: u64,
    logged: Option<(Arc<LogHandle>, u64)>,
    /// Some of the blocks are zeroed ones, which only a TXG sync makes durable.
    unlogged: bool,
}

/// The parts the write path reads and changes besides the TXG state: a write changes
/// generations in the ARC under the coherence gate, counts, and waits on the syncer.
pub(crate) struct TxgParts {
    pub(crate) arc: Arc<ArcCache>,
    pub(crate) coherence: Arc<Coherence>,
    pub(crate) volumes: Arc<Volumes>,
    pub(crate) tunables: Arc<Tunables>,
    pub(crate) stats: Arc<EngineStats>,
    pub(crate) write_stats: Arc<WriteStats>,
    pub(crate) generations: Arc<Generations>,
    pub(crate) life: Arc<Lifecycle>,
    pub(crate) events: Arc<Events>,
}

/// The TXG engine: the open and syncing TXGs' state shared by writers and the syncer,
/// and the write path's flows over it (writes, FLUSH, the throttle, the intent log's
/// group commit). The syncer ([`Syncer`]) runs beside it on its own thread.
pub(crate) struct Txg {
    inner: RankedMutex<TxgInner>,
    /// Signalled when a TXG synced or a sync is requested.
    changed: Condvar,
    /// The intent log: the log device and the committed TXG recorded outside it.
    pub(crate) zil: IntentLog,
    arc: Arc<ArcCache>,
    coherence: Arc<Coherence>,
    tunables: Arc<Tunables>,
    stats: Arc<EngineStats>,
    write_stats: Arc<WriteStats>,
    generations: Arc<Generations>,
    life: Arc<Lifecycle>,
}

impl Txg {
    pub(crate) fn new(first_txg: u64, parts: TxgParts) -> Txg {
        Txg {
            inner: RankedMutex::new(
                Rank::Txg,
                TxgInner {
                    open_txg: first_txg.max(1),
                    open: HashMap::new(),
                    open_bytes: 0,
                    open_since: Instant::now(),
                    last_wakeup: Instant::now(),
                    synced_txg: first_txg.max(1) - 1,
                    dirty_bytes: 0,
                    sync_requested: false,
                    oversized_waiting: 0,
                },
            ),
            changed: Condvar::new(),
            zil: IntentLog::new(
                parts.volumes,
                Arc::clone(&parts.coherence),
                Arc::clone(&parts.write_stats),
                parts.events,
            ),
            arc: parts.arc,
            coherence: parts.coherence,
            tunables: parts.tunables,
            stats: parts.stats,
            write_stats: parts.write_stats,
            generations: parts.generations,
            life: parts.life,
        }
    }

    fn lock(&self) -> RankedGuard<'_, TxgInner> {
        self.inner.lock()
    }

    /// Waits for a change (a sync, a request) or `timeout`, whichever comes first.
    fn wait<'a>(
        &self,
        inner: RankedGuard<'a, TxgInner>,
        timeout: Duration,
    ) -> RankedGuard<'a, TxgInner> {
        inner.wait_timeout(&self.changed, timeout)
    }

    /// Wakes everyone waiting on the TXG state (shutdown).
    pub(crate) fn wake_all(&self) {
        self.changed.notify_all();
    }

    /// Continues TXG numbering at `next` (after a log replay), if that is higher.
    fn start_at(&self, next: u64) {
        let mut inner = self.lock();
        if next > inner.open_txg && inner.open.is_empty() {
            inner.open_txg = next;
            inner.synced_txg = next - 1;
            self.zil.synced(next - 1);
        }
    }

    /// Writes whole blocks of a volume: throttled, dirty in the ARC and in the open TXG,
    /// every cache-device copy of them tombstoned (made durable before the TXG reaches the
    /// backing store). Returns when the write may be acknowledged: at once for an async
    /// write, once durable for a sync one. `sync` is decided by the caller, once, from
    /// the request's FUA and the volume's `sync` property ([`VolumeInfo::write_is_sync`]).
    /// Blocking.
    ///
    /// The TXG lock is taken twice on the way: by the throttle, and to make the blocks
    /// dirty, which also queues their records in the intent log in the order of the
    /// writes; the commit (the log's group commit) takes only the log's own lock.
    ///
    /// With `zeroing`, the blocks that are [`BlockBuf::zeros`] are zeroed blocks: the
    /// syncer zeroes their ranges that way, and they are not logged (a sync write of them
    /// waits for its TXG to sync; docs/write-path.md, "Zeroed blocks").
    ///
    /// [`VolumeInfo::write_is_sync`]: crate::volumes::VolumeInfo::write_is_sync
    pub fn write_blocks(
        &self,
        vol: &Arc<VolumeEntry>,
        blocks: &[(u64, BlockBuf)],
        sync: bool,
        zeroing: Option<ZeroMode>,
    ) -> Result<(), WriteError> {
        let bytes = Self::check_blocks(vol, blocks)?;
        self.throttle(bytes)?;
        let dirtied = self.make_dirty(vol, blocks, bytes, zeroing);
        if !sync {
            return Ok(());
        }
        match dirtied.logged {
            // Committed through the log that has the records, whatever became of it since
            // (a failed log makes the commit sync the TXG instead).
            Some((log, ticket)) if !dirtied.unlogged => {
                self.zil.commit_through(self, &log, ticket, dirtied.txg)?
            }
            _ => self.wait_synced(dirtied.txg)?,
        }
        // A TXG of this volume that failed to reach its backing store.
        vol.failure()
            .map_or(Ok(()), |why| Err(WriteError::VolumeFailed(why)))
    }

    /// [`Txg::write_blocks`] of an async write from a thread that must not block (an
    /// async runtime's): the blocks are made dirty at once if the throttle would neither
    /// delay nor block them ([`Txg::try_reserve_undelayed`]); `None`, doing nothing,
    /// if it would: the caller then writes them where it may wait.
    pub fn try_write_async_now(
        &self,
        vol: &Arc<VolumeEntry>,
        blocks: &[(u64, BlockBuf)],
        zeroing: Option<ZeroMode>,
    ) -> Option<Result<(), WriteError>> {
        let bytes = match Self::check_blocks(vol, blocks) {
            Ok(bytes) => bytes,
            Err(why) => return Some(Err(why)),
        };
        if !self.try_reserve_undelayed(bytes) {
            return None;
        }
        self.make_dirty(vol, blocks, bytes, zeroing);
        Some(Ok(()))
    }

    /// The bytes of `blocks` if the volume takes writes and each block is whole.
    fn check_blocks(vol: &VolumeEntry, blocks: &[(u64, BlockBuf)]) -> Result<u64, WriteError> {
        if let Some(why) = vol.failure() {
            return Err(WriteError::VolumeFailed(why));
        }
        if let Some((block, data)) = blocks
            .iter()
            .find(|(block, data)| data.len() != vol.info().block_len(*block) || data.is_empty())
        {
            return Err(WriteError::BlockMisfit {
                block: *block,
                len: data.len(),
                guid: vol.info().guid,
                block_bytes: vol.info().block_bytes,
                size_bytes: vol.info().size_bytes,
            });
        }
        Ok(blocks.iter().map(|(_, b)| b.len() as u64).sum())
    }

    /// Makes every write acknowledged so far durable (NBD FLUSH). Blocking.
    pub fn flush_writes(&self, vol: &VolumeEntry) -> Result<(), WriteError> {
        // A failed volume answers every FLUSH with its error, sync=disabled or not: its
        // acknowledged writes are lost, and the client must hear so.
        if let Some(why) = vol.failure() {
            return Err(WriteError::VolumeFailed(why));
        }
        let info = vol.info();
        if info.sync == SyncMode::Disabled {
            return Ok(());
        }
        match self.zil.usable() {
            Some(log) if info.logbias == LogBias::Latency => {
                self.zil.commit_all(self, &log)?;
                // Writes with no records (zeroed blocks, writes made while the volume had
                // `logbias=throughput`): their TXGs must be on the backing store.
                let unlogged = vol.unlogged_txg();
                if unlogged != 0 && unlogged > self.lock().synced_txg {
                    self.wait_synced(unlogged)?;
                }
            }
            _ => {
                let txg = self.lock().open_txg;
                self.wait_synced(txg)?;
            }
        }
        vol.failure()
            .map_or(Ok(()), |why| Err(WriteError::VolumeFailed(why)))
    }

    /// Dirties blocks (see [`Txg::write_blocks`]) in one hold of the TXG lock: they join
    /// the open TXG and, with a log device attached, their records join the log's queue.
    /// `reserved` bytes of them were counted as dirty already (by the throttle).
    fn make_dirty(
        &self,
        vol: &VolumeEntry,
        blocks: &[(u64, BlockBuf)],
        reserved: u64,
        zeroing: Option<ZeroMode>,
    ) -> Dirtied {
        let generations = self.change_generations(vol, blocks);
        let mut inner = self.lock();
        inner.dirty_bytes -= reserved;
        let txg = inner.open_txg;
        // Decided under the TXG lock, which the log device's attach takes too. A volume
        // with `logbias=throughput` keeps its writes out of the log: its sync writes and
        // FLUSHes wait for their TXG instead, and so does a FLUSH after it changes back.
        let log = match self.zil.usable() {
            Some(_) if vol.info().logbias == LogBias::Throughput => {
                vol.note_unlogged(txg);
                None
            }
            log => log,
        };
        // The blocks' records join the log's queue in the order of the writes, under the
        // TXG lock; a record the log refuses (poisoned) leaves the write to a TXG sync.
        let mut logged = log.map(|log| (log, 0));
        let mut unlogged = false;
        for ((block, data), generation) in blocks.iter().zip(generations) {
            let key = vol.info().key(*block);
            let len = data.len() as u64;
            let zeroed = zeroing.filter(|_| data.is_shared_zeros());
            let dirty = DirtyBlock {
                generation,
                data: data.bytes().clone(),
                zeroed,
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
            if zeroed.is_some() {
                unlogged = true;
                vol.note_unlogged(txg);
            } else if let Some((log, _)) = &logged {
                let place = (vol.info().guid, vol.info().offset_of(*block));
                let ticket = self.zil.append(log, txg, place, data.bytes());
                logged = logged.take().zip(ticket).map(|((log, _), t)| (log, t));
            }
        }
        let sync_percent = self.tunables.zfs_dirty_data_sync_percent().min(100);
        if inner.open_bytes >= self.dirty_max() / 100 * sync_percent {
            inner.sync_requested = true;
            self.changed.notify_all();
        }
        Dirtied {
            txg,
            logged,
            unlogged,
        }
    }

    /// Gives each block a new generation and makes `data` its dirty contents in the ARC,
    /// under the gate: every cache-device copy of the block leaves the L2 index and gets
    /// a tombstone queued, and the feed in flight and the rebuilds learn of the write
    /// (see [`crate::coherence`], rule 1). No device I/O happens here: the syncer commits
    /// the tombstones before the TXG writes the backing store. Returns the generations.
    fn change_generations(&self, vol: &VolumeEntry, blocks: &[(u64, BlockBuf)]) -> Vec<u64> {
        let _gate = self.coherence.gate();
        let now = self.arc.now_ms();
        let mut generations = Vec::with_capacity(blocks.len());
        for (block, data) in blocks {
            let key = vol.info().key(*block);
            let generation = self.generations.fresh();
            let psize = vol.info().block_len(*block) as u32;
            let removed = {
                let mut shard = self.arc.shard(&key);
                let removed = shard.l2.remove(index_key(&key), psize, &self.stats);
                shard.write(key, generation, data, now);
                removed
            };
            for loc in removed {
                self.coherence.queue_tombstone(
                    loc.device,
                    Tombstone {
                        key: larch_l2::BlockKey {
                            volume_guid: vol.info().guid,
                            block_number: *block,
                        },
                        generation,
                    },
                );
                self.stats.l2_tombstones.fetch_add(1, Ordering::Relaxed);
            }
            self.coherence.note_write(key);
            generations.push(generation);
        }
        generations
    }

    /// Asks for the TXGs up to `txg` to sync and waits until they did (a sync write or
    /// FLUSH without a usable log device).
    fn wait_synced(&self, txg: u64) -> Result<(), WriteError> {
        self.write_stats
            .txg_sync_waits
            .fetch_add(1, Ordering::Relaxed);
        self.wait_synced_quiet(txg)
    }

    /// [`Txg::wait_synced`] without counting it.
    pub(crate) fn wait_synced_quiet(&self, txg: u64) -> Result<(), WriteError> {
        let mut inner = self.lock();
        while inner.synced_txg < txg {
            if !self.life.syncer_running() {
                return Err(if self.life.is_shutting_down() {
                    WriteError::ShuttingDown
                } else {
                    WriteError::SyncerStopped
                });
            }
            // Asked for only while `txg` is still open: once it is closed the syncer is
            // at it, and asking again would close the next TXG too for nothing.
            if inner.open_txg <= txg {
                inner.sync_requested = true;
                self.changed.notify_all();
            }
            inner = self.wait(inner, Duration::from_millis(100));
        }
        Ok(())
    }

    /// Closes the open TXG and waits until it and every TXG before it synced, as a FLUSH
    /// without a log device does, for every volume (tests and tools).
    pub fn sync_all(&self) -> Result<(), WriteError> {
        let txg = self.lock().open_txg;
        self.wait_synced_quiet(txg)
    }

    /// Throttles a write whose bytes are counted as dirty already (a partial write that
    /// reserved them). Blocking.
    pub(crate) fn throttle_reserved(&self) {
        // A stopped syncer fails the writes that follow; this one is acknowledged already.
        let _ = self.throttle(0);
    }

    /// Writes waiting for a sync write or FLUSH to put them in the log (for stats).
    pub(crate) fn log_pending_records(&self) -> u64 {
        self.zil.pending_records()
    }

    /// Dirty bytes, open TXG, synced TXG (for stats).
    pub fn txg_state(&self) -> (u64, u64, u64) {
        let inner = self.lock();
        (inner.dirty_bytes, inner.open_txg, inner.synced_txg)
    }
}

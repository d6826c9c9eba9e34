//! The intent log's glue: the log device of the pool, the ordered group commit of pending
//! records that makes sync writes and FLUSHes durable, replay at attach, the committed
//! TXG (step 3 of the syncer), and removal. The log device's format and protocol are
//! `larch_zil`'s (docs/zil.md).

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use larch_io::{BlockDevice, FileDevice, FileOptions};

use bytes::Bytes;

use super::Txg;
use crate::coherence::Coherence;
use crate::error::{DetachError, RecordError, WriteError, device_error};
use crate::events::{EventKind, Events};
use crate::latency::LatencyHistogram;
use crate::lock::{RankedMutex, RankedRwLock};
use crate::stats::WriteStats;
use crate::volumes::{VolumeEntry, Volumes};

/// A log device to attach: where it is (its name in messages), whose it is, and whether
/// to format it (`create`) rather than replay it.
pub(crate) struct LogAttach<'a> {
    pub(crate) path: &'a Path,
    pub(crate) pool_guid: u64,
    pub(crate) device_guid: u64,
    pub(crate) create: bool,
}

impl<'a> LogAttach<'a> {
    pub(crate) fn new(path: &'a Path, pool_guid: u64, device_guid: u64, create: bool) -> Self {
        LogAttach {
            path,
            pool_guid,
            device_guid,
            create,
        }
    }
}

/// Opens a log device's file, locked for this pool (another running pool's volume, cache
/// or log device is refused); the lock is kept with the attached log.
pub(crate) fn open_file(path: &Path) -> io::Result<(Arc<dyn BlockDevice>, Option<std::fs::File>)> {
    let file_lock = crate::files::lock_device(path)?;
    let dev = FileDevice::open(path, &FileOptions::default()).map_err(|e| device_error(path, e))?;
    Ok((Arc::new(dev), file_lock))
}

/// Records a committed TXG durably outside the log device (see
/// `Engine::set_committed_txg_sink`).
pub type CommittedSink = Box<dyn Fn(u64) -> io::Result<()> + Send + Sync>;

/// Records, before the log forgets them, that a replay applied records (see
/// `Engine::set_replayed_sink`).
pub type ReplayedSink = Box<dyn Fn() -> io::Result<()> + Send + Sync>;

/// A log device attached to the engine.
pub struct LogHandle {
    /// Its path.
    pub path: PathBuf,
    /// Its guid.
    pub guid: u64,
    pub(crate) device: larch_zil::LogDevice<Arc<dyn BlockDevice>>,
    /// The first TXG all of whose writes have records in the log: writes of older TXGs
    /// may have none, so a FLUSH answered from the log also waits for those TXGs to be
    /// synced (at once true, once the TXG open at attach has synced).
    covers_from_txg: u64,
    /// Why it was taken out of use, if it was.
    fault: RankedMutex<Option<String>>,
    /// Being removed: takes no new records; its TXGs are synced and committed first.
    draining: AtomicBool,
    /// Time of each commit's write (records written and the device flushed).
    pub commit_latency: LatencyHistogram,
    /// The descriptor whose `flock` keeps other pools off the device file while this one
    /// uses it (`crate::files::lock_device`), until it is detached or the engine shuts
    /// down. `None` for a block device or a device given in process.
    file_lock: RankedMutex<Option<std::fs::File>>,
    /// Where its fault is recorded as an event.
    events: Arc<Events>,
}

impl LogHandle {
    fn fail(&self, why: String) {
        let first = {
            let mut fault = self.fault.lock();
            let first = fault.is_none();
            if first {
                *fault = Some(why.clone());
            }
            first
        };
        if first {
            self.events.record(EventKind::LogDeviceFaulted {
                device: self.path.display().to_string(),
                why,
            });
        }
    }

    /// Releases the device file's lock: the pool no longer writes it.
    pub(crate) fn release_file_lock(&self) {
        self.file_lock.lock().take();
    }

    /// Why it stopped taking records, if it did.
    pub fn fault(&self) -> Option<String> {
        self.fault.lock().clone()
    }

    /// Whether it takes records (not faulted, poisoned or being removed).
    pub fn is_healthy(&self) -> bool {
        self.fault.lock().is_none()
            && !self.device.is_poisoned()
            && !self.draining.load(Ordering::Acquire)
    }

    /// Its counters.
    pub fn stats(&self) -> larch_zil::LogStats {
        self.device.stats()
    }
}

/// The pool's record of committed TXGs outside the log device.
struct Committed {
    /// TXGs up to this one are on the backing stores, as the pool (not the log device)
    /// recorded it: replay skips their records even if the log could not record it.
    floor: AtomicU64,
    /// Where the pool records a committed TXG when the log device cannot (OpenZFS keeps
    /// it in the pool's uberblock, off the log device, for the same reason).
    sink: RankedMutex<Option<CommittedSink>>,
    /// Where the pool records that a replay applied records (its cache devices are to be
    /// formatted), before the log may forget them.
    replayed: RankedMutex<Option<ReplayedSink>>,
}

impl Committed {
    fn new() -> Committed {
        Committed {
            floor: AtomicU64::new(0),
            sink: RankedMutex::leaf(None),
            replayed: RankedMutex::leaf(None),
        }
    }
}

/// The intent log of the pool: its log device, if one is attached, and the record of
/// committed TXGs outside it. Its flows are the group commit that makes sync writes and
/// FLUSHes durable, attaching (with replay) and detaching the device, and step 3 of a
/// TXG sync; each takes the TXG engine whose state the records belong to.
pub(crate) struct IntentLog {
    slot: RankedRwLock<Option<Arc<LogHandle>>>,
    /// TXGs up to this one are on the backing stores (the syncer's, copied here).
    synced_txg: AtomicU64,
    committed: Committed,
    volumes: Arc<Volumes>,
    coherence: Arc<Coherence>,
    write_stats: Arc<WriteStats>,
    events: Arc<Events>,
}

impl IntentLog {
    pub(super) fn new(
        volumes: Arc<Volumes>,
        coherence: Arc<Coherence>,
        write_stats: Arc<WriteStats>,
        events: Arc<Events>,
    ) -> IntentLog {
        IntentLog {
            slot: RankedRwLock::leaf(None),
            synced_txg: AtomicU64::new(0),
            committed: Committed::new(),
            volumes,
            coherence,
            write_stats,
            events,
        }
    }

    /// The log device, if one is attached.
    pub(crate) fn device(&self) -> Option<Arc<LogHandle>> {
        self.slot.read().clone()
    }

    /// The log device, if one is attached and takes records.
    pub(super) fn usable(&self) -> Option<Arc<LogHandle>> {
        self.device().filter(|l| l.is_healthy())
    }

    /// The syncer synced TXGs up to `synced` (under the TXG lock): the records of those
    /// TXGs need not reach the log any more.
    pub(super) fn synced(&self, synced: u64) {
        self.synced_txg.fetch_max(synced, Ordering::AcqRel);
        if let Some(log) = self.device() {
            log.device.forget_through(synced);
        }
    }

    /// Queues a write's record in the log (under the TXG lock, in the order of the
    /// writes: see `larch_zil::LogDevice::append`). Returns the ticket a sync write
    /// commits through; `None` when the log takes no records (poisoned).
    pub(super) fn append(
        &self,
        log: &LogHandle,
        txg: u64,
        place: (u64, u64),
        data: &Bytes,
    ) -> Option<u64> {
        let (volume_id, offset_bytes) = place;
        log.device
            .append(larch_zil::QueuedRecord {
                txg,
                volume_id,
                offset_bytes,
                data: data.clone(),
            })
            .ok()
    }

    /// Makes every write so far durable (a FLUSH): commits every record the log holds.
    pub(super) fn commit_all(&self, txg: &Txg, log: &LogHandle) -> Result<(), WriteError> {
        let committed = log.device.commit_all();
        self.settle_commit(txg, log, committed, None)
    }

    /// Makes every record up to `ticket` durable: the log's group commit leads or waits
    /// (`larch_zil::LogDevice::commit_through`). `own_txg`: the TXG of the caller's
    /// write, synced instead should the log fail.
    pub(super) fn commit_through(
        &self,
        txg: &Txg,
        log: &LogHandle,
        ticket: u64,
        own_txg: u64,
    ) -> Result<(), WriteError> {
        let committed = log.device.commit_through(ticket);
        self.settle_commit(txg, log, committed, Some(own_txg))
    }

    /// Counts what a commit wrote, or falls back to syncing TXGs when the log could not
    /// take the records: the TXG the log names for records it had no room for (the log
    /// stays in use), else the caller's own (`None`: a FLUSH, every TXG open now); a
    /// failed log is taken out of use. Writes from before the log took over are in older
    /// TXGs, which are synced too.
    fn settle_commit(
        &self,
        txg: &Txg,
        log: &LogHandle,
        committed: Result<larch_zil::Led, larch_zil::LogError>,
        own_txg: Option<u64>,
    ) -> Result<(), WriteError> {
        match committed {
            Ok(led) => self.count(log, &led),
            Err(larch_zil::LogError::Unlogged { txg: through }) => txg.wait_synced(through)?,
            Err(err) => {
                log.fail(format!("log commit failed: {err}"));
                let through = own_txg.unwrap_or_else(|| txg.lock().open_txg);
                txg.wait_synced(through)?;
            }
        }
        let covered = log.covers_from_txg.saturating_sub(1);
        if self.synced_txg.load(Ordering::Acquire) >= covered {
            Ok(())
        } else {
            txg.wait_synced_quiet(covered)
        }
    }

    /// Counts the blocks a commit's caller wrote as the log's leader.
    fn count(&self, log: &LogHandle, led: &larch_zil::Led) {
        if led.blocks == 0 {
            // Every record was durable already, or in a TXG that has synced since:
            // nothing written, no commit to count.
            return;
        }
        log.commit_latency
            .record(Duration::from_micros(led.write_us));
        let s = &self.write_stats;
        s.zil_commit_count.fetch_add(led.blocks, Ordering::Relaxed);
        s.zil_itx_count.fetch_add(led.records, Ordering::Relaxed);
        s.zil_itx_copied_bytes
            .fetch_add(led.data_bytes, Ordering::Relaxed);
        s.zil_commit_us.fetch_add(led.write_us, Ordering::Relaxed);
    }

    /// Records waiting in the log for a sync write or FLUSH (for stats).
    pub(super) fn pending_records(&self) -> u64 {
        self.device().map_or(0, |l| l.device.queued())
    }

    /// Step 3 of a TXG sync: the log may forget `txg`. A volume whose store failed does
    /// not hold the TXG back: replaying its records later would also replay the other
    /// volumes' records over their newer bytes (that volume is failed: its writes and
    /// FLUSHes get EIO from now on).
    ///
    /// The log never keeps a synced TXG's records for a later replay: a replay would put
    /// them over whatever later TXGs wrote to the same blocks, acknowledged or not. (A
    /// replay that applied records is followed by no cache-device rebuild in that run, so
    /// no rebuild needs them: the devices are formatted, [`crate::coherence`] rule 5.)
    pub(super) fn txg_committed(&self, txg: u64) {
        let Some(log) = self.device() else {
            return;
        };
        let Err(err) = log.device.txg_committed(txg) else {
            return;
        };
        // The log cannot record it (failed, poisoned): the pool must, or a restart
        // would replay these records over newer bytes.
        log.fail(format!("log header update failed: {err}"));
        if let Err(why) = self.record_committed_elsewhere(txg) {
            // Recorded nowhere: a restart replays this TXG's records over whatever reaches
            // the stores later. Every volume fails (its writes and FLUSHes get EIO from
            // now on), as a TXG whose tombstones cannot be made durable does (rule 4), so
            // no later write is acknowledged as durable: blocks already dirty still sync,
            // and a replay may put older bytes over them, which no FLUSH covered.
            let why = format!("the committed TXG {txg} could not be recorded: {why}");
            eprintln!("larch: {why}");
            for vol in self.volumes.all() {
                vol.fail(&why);
            }
        }
    }

    /// Attaches the pool's log device. `create` formats it; otherwise its log is replayed
    /// first: every record newer than the last committed TXG is written to its volume's
    /// backing store (which is then flushed), the cache devices added after a replay that
    /// applied records are formatted rather than rebuilt (their copies of the replayed
    /// blocks may be older; [`crate::coherence`] rule 5), and TXG numbers continue after
    /// the log's.
    /// Call it after the volumes are registered and before cache devices are added.
    /// Returns the records replayed. A file another process holds locked (another running
    /// pool's volume, cache or log device) is refused; the device's file stays locked until
    /// it is detached or the engine shuts down.
    pub(crate) fn attach(
        &self,
        txg: &Txg,
        dev: Arc<dyn BlockDevice>,
        file_lock: Option<std::fs::File>,
        log: &LogAttach<'_>,
    ) -> io::Result<u64> {
        let (path, pool_guid, device_guid, create) =
            (log.path, log.pool_guid, log.device_guid, log.create);
        let named = |e: &dyn std::fmt::Display| device_error(path, e);
        let (device, replayed) = if create {
            let device =
                larch_zil::LogDevice::create(dev, pool_guid, device_guid).map_err(|e| named(&e))?;
            (device, 0)
        } else {
            let (device, replay) = larch_zil::LogDevice::open_device(dev, pool_guid, device_guid)
                .map_err(|e| named(&e))?;
            let replayed = self.replay_log(&replay)?;
            // Before the log takes over: from its first TXG commit on it no longer holds
            // these records, and only the pool's record says that the cache devices' logs
            // may hold copies they superseded (coherence rule 5).
            if replayed > 0
                && let Some(sink) = self.committed.replayed.lock().as_ref()
            {
                sink().map_err(|e| {
                    io::Error::other(format!(
                        "recording that the replay applied {replayed} records: {e}"
                    ))
                })?;
            }
            let next = replay
                .committed_txg
                .max(replay.max_txg().unwrap_or(0))
                .max(self.committed.floor.load(Ordering::Acquire))
                + 1;
            txg.start_at(next);
            (device, replayed)
        };
        // Before the log takes records: an object volume whose replay dropped every record
        // (another node had committed) records that commit and that the log holds nothing
        // of earlier runs above the TXG before the open one, so that a crash before this
        // run's first commit drops none of the records it is about to write.
        let before_open = txg.lock().open_txg.saturating_sub(1);
        for vol in self.volumes.all() {
            vol.backing.catch_up(before_open).map_err(|e| {
                io::Error::other(format!(
                    "volume {:#x}: recording its intent-log state: {e}",
                    vol.info().guid
                ))
            })?;
        }
        // The log takes over now: writers decide under the TXG lock whether they keep
        // records, so every write that joins after this has one, and the ones before it
        // are in the open TXG or older, which a FLUSH answered from the log waits for
        // (`covers_from_txg`); a sync of the open TXG is requested at once.
        let mut inner = txg.lock();
        let handle = Arc::new(LogHandle {
            path: path.to_path_buf(),
            guid: device_guid,
            device,
            covers_from_txg: inner.open_txg + 1,
            fault: RankedMutex::leaf(None),
            draining: AtomicBool::new(false),
            commit_latency: LatencyHistogram::new(),
            file_lock: RankedMutex::leaf(file_lock),
            events: Arc::clone(&self.events),
        });
        *self.slot.write() = Some(handle);
        inner.sync_requested = true;
        txg.changed.notify_all();
        drop(inner);
        Ok(replayed)
    }

    /// The committed TXG the pool recorded outside the log device (its state directory),
    /// and where to record later ones when the log device cannot take them (a failed or
    /// removed log). Call after the volumes are registered and before
    /// [`IntentLog::attach`]: replay skips records of TXGs up to the floor, which the
    /// backing stores hold (possibly with newer data on top).
    pub(crate) fn set_committed_txg_sink(&self, txg: &Txg, floor: u64, sink: CommittedSink) {
        self.committed.floor.store(floor, Ordering::Release);
        // TXG numbers continue above the floor, and above every object volume's discarded
        // records, whatever log device is attached later (a blank one, or none): a record
        // numbered at or below either would be skipped by the next replay.
        let above = (self.volumes.all().iter())
            .map(|v| v.backing.log_discard_through())
            .fold(floor, u64::max);
        txg.start_at(above.saturating_add(1));
        *self.committed.sink.lock() = Some(sink);
    }

    /// Where the pool records that a replay applied records, before the log can forget
    /// them: every cache device is then to be formatted rather than rebuilt, at this start
    /// and at any start after a crash that comes before they are (coherence rule 5). Call
    /// before [`IntentLog::attach`].
    pub(crate) fn set_replayed_sink(&self, sink: ReplayedSink) {
        *self.committed.replayed.lock() = Some(sink);
    }

    /// Records that TXGs up to `txg` are on the backing stores when the log device could
    /// not: through the pool's sink, and in the replay floor.
    fn record_committed_elsewhere(&self, txg: u64) -> Result<(), RecordError> {
        self.committed.floor.fetch_max(txg, Ordering::AcqRel);
        match self.committed.sink.lock().as_ref() {
            Some(sink) => sink(txg).map_err(|source| RecordError::CommittedTxg { txg, source }),
            None => Err(RecordError::NoCommittedSink(txg)),
        }
    }

    /// Applies replayed records (see [`IntentLog::attach`]).
    fn replay_log(&self, replay: &larch_zil::Replay) -> io::Result<u64> {
        let floor = self.committed.floor.load(Ordering::Acquire);
        let mut touched: HashMap<u64, Arc<VolumeEntry>> = HashMap::new();
        let mut applied = 0;
        let mut discarded: Vec<(u64, u64, Arc<VolumeEntry>)> = Vec::new();
        for record in replay.records.iter().filter(|r| r.txg > floor) {
            let Some(vol) = self.volumes.by_guid(record.volume_id) else {
                return Err(io::Error::other(format!(
                    "the intent log has writes of volume {:#x}, which the pool does not have",
                    record.volume_id
                )));
            };
            if vol.backing.discards_log_record(record.txg) {
                // Another node committed this object-store volume since this node logged
                // the record: replaying it would put older bytes over newer ones. Lost, as
                // a lost node's log tail is (docs/object-store.md).
                match discarded
                    .iter_mut()
                    .find(|(id, _, _)| *id == record.volume_id)
                {
                    Some((_, through, _)) => *through = (*through).max(record.txg),
                    None => discarded.push((record.volume_id, record.txg, Arc::clone(&vol))),
                }
                continue;
            }
            applied += 1;
            let end = record.offset_bytes.checked_add(record.data.len() as u64);
            if end.is_none_or(|end| end > vol.info().size_bytes) {
                return Err(io::Error::other(format!(
                    "an intent-log record of volume {:#x} ({} bytes at {}) ends past its size",
                    record.volume_id,
                    record.data.len(),
                    record.offset_bytes
                )));
            }
            vol.backing.write_at(&record.data, record.offset_bytes)?;
            touched.insert(record.volume_id, vol);
        }
        for vol in touched.values() {
            vol.backing.flush()?;
        }
        for (id, through, vol) in &discarded {
            eprintln!(
                "larch: volume {id:#x}: intent-log records up to TXG {through} dropped: \
                 another node committed to {} since this node wrote them",
                vol.backing.path().display()
            );
            vol.backing.note_log_discarded(*through)?;
        }
        if applied > 0 {
            self.coherence.mark_writes_seen();
        }
        Ok(applied)
    }

    /// Takes the log device out of use without losing what it covers: it stops taking
    /// records (sync writes go through TXG syncs from now on), the open TXG is synced, and
    /// the log is told that every TXG up to it is committed, so a later replay of the
    /// device (if it is attached again by hand) has nothing to apply. `Ok(None)` when
    /// there is no log device. `Err` when the open TXG could not be synced (the syncer
    /// stopped): the log stays in use, since it may hold the only copy of acknowledged
    /// sync writes, and the caller must keep it in the pool's configuration.
    pub(crate) fn detach(&self, txg: &Txg) -> Result<Option<Arc<LogHandle>>, DetachError> {
        let Some(log) = self.device() else {
            return Ok(None);
        };
        log.draining.store(true, Ordering::Release);
        let open = txg.lock().open_txg;
        if let Err(source) = txg.wait_synced_quiet(open) {
            log.draining.store(false, Ordering::Release);
            return Err(DetachError { txg: open, source });
        }
        let synced = txg.lock().synced_txg;
        if let Err(err) = log.device.txg_committed(synced) {
            log.fail(format!("log header update at removal failed: {err}"));
            if let Err(why) = self.record_committed_elsewhere(synced) {
                eprintln!("larch: {why}");
            }
        }
        let mut slot = self.slot.write();
        if slot.as_ref().is_some_and(|l| Arc::ptr_eq(l, &log)) {
            *slot = None;
        }
        drop(slot);
        // The pool writes it no more: another pool (or this one, adding it again) may.
        log.release_file_lock();
        Ok(Some(log))
    }
}

//! The engine's one table of volumes, by slot.
//!
//! A volume's **slot** is its short number in this process: the index of its entry here.
//! Every in-memory key carries the slot (ARC keys, L2 index keys, dirty blocks); the
//! volume's **guid** appears only where bytes leave the process and must mean the same
//! after a restart: cache-device log entries and intent-log records. Translating guid to
//! slot therefore happens only at those boundaries (a rebuild, a replay), through
//! [`Volumes::slot_of`].
//!
//! Volumes are registered before they are served and never leave while the engine runs,
//! so a slot never changes meaning. Their size and their cache and sync properties may
//! change meanwhile ([`VolumeEntry::info`] is a snapshot; see `info`).

use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::backing::BackingStore;
use crate::error::{RecordError, VolumeTableError};
use crate::events::{EventKind, Events};
use crate::l2::index::{MAX_BLOCK, VOLUME_SLOTS};
use crate::lock::{RankedMutex, RankedRwLock};
use crate::stats::WriteStats;

pub(crate) mod info;
use info::LiveInfo;
pub use info::{CacheMode, LogBias, PropertyValue, SyncMode, VolumeInfo, VolumeProps, VolumeSpec};

/// One volume of the table: what it is, where its bytes are, and whether its backing
/// store failed.
#[derive(Debug)]
pub struct VolumeEntry {
    /// Identity and geometry; its size and properties as registered (the ones in force
    /// are `live`'s).
    fixed: VolumeInfo,
    /// Size and properties in force.
    live: LiveInfo,
    /// The newest TXG with a write of this volume that has no intent-log record because
    /// of `logbias=throughput` while a log device took records (0: none): a FLUSH
    /// answered from the log waits for it to sync.
    unlogged_txg: AtomicU64,
    /// The backing store.
    pub backing: Arc<BackingStore>,
    /// Why its writes fail, once its backing store failed a TXG.
    failure: RankedMutex<Option<String>>,
    /// Blocks whose acknowledged writes a failed TXG lost: their reads fail rather than
    /// return the older bytes the backing store still has. At most the dirty blocks of
    /// the TXGs that failed (writes are refused once one has).
    lost: RankedMutex<HashSet<u64>>,
    /// Whether `lost` has any block (read on every read: a lock-free check first).
    any_lost: AtomicBool,
    /// Its partial-block writes waiting for their block's read.
    pub(crate) partials: crate::txg::partial::table::Partials,
    /// Its name, once its `Volume` gave it one (events name the volume by it).
    name: std::sync::OnceLock<String>,
    /// Where its failure is recorded as an event.
    events: Arc<Events>,
}

impl VolumeEntry {
    /// Identity, size and properties in force now (a snapshot: two atomic loads).
    pub fn info(&self) -> VolumeInfo {
        self.live.snapshot(&self.fixed)
    }

    /// The changeable properties in force now.
    pub fn props(&self) -> VolumeProps {
        self.live.props()
    }

    /// Puts `props` in force: the next request of the volume sees them. What else a
    /// change needs (dropping cached copies) is the caller's.
    pub(crate) fn set_props(&self, props: VolumeProps) {
        self.live.set_props(props);
    }

    /// Puts a new size in force: the next request checks its range against it. What else
    /// a resize needs (the backing store, the cached tail) is the caller's.
    pub(crate) fn set_size_bytes(&self, size_bytes: u64) {
        self.live.set_size_bytes(size_bytes);
    }

    /// A write of TXG `txg` was not logged because of `logbias=throughput`.
    pub(crate) fn note_unlogged(&self, txg: u64) {
        self.unlogged_txg.fetch_max(txg, Ordering::AcqRel);
    }

    /// The newest TXG with a write that `logbias=throughput` kept out of the log (0:
    /// none).
    pub(crate) fn unlogged_txg(&self) -> u64 {
        self.unlogged_txg.load(Ordering::Acquire)
    }

    /// Reads blocks `first..` from the backing store into `bufs` (one per block, each
    /// exactly its block's bytes) in one read, trying `attempts` times, 100 ms, 200 ms...
    /// apart, and counting every try in `counted` (`backing_reads`). The engine's one
    /// backing-store read of blocks; its callers state how often they try: a client's read
    /// (and a prefetch) once (the client sees EIO at once and may retry itself, and a slow
    /// retry would hold its request), a partial write's merge three times (writes already
    /// acknowledged depend on it, and its failure fails the volume). Blocking.
    pub(crate) fn read_blocks_into(
        &self,
        first: u64,
        bufs: &mut [Vec<u8>],
        attempts: u32,
        counted: &std::sync::atomic::AtomicU64,
    ) -> io::Result<()> {
        let mut tried = 0;
        loop {
            counted.fetch_add(1, Ordering::Relaxed);
            let Err(err) = (self.backing).read_blocks_at(bufs, self.fixed.offset_of(first)) else {
                return Ok(());
            };
            tried += 1;
            if tried >= attempts {
                return Err(err);
            }
            std::thread::sleep(std::time::Duration::from_millis(50 << tried));
        }
    }

    /// Why writes to the volume fail, if they do.
    pub fn failure(&self) -> Option<String> {
        self.failure.lock().clone()
    }

    /// Marks the volume failed (the first reason stays).
    pub(crate) fn fail(&self, why: &str) {
        if self.set_failure(why) {
            self.events.record(EventKind::VolumeFailed {
                volume: self.name(),
                why: why.to_string(),
            });
        }
    }

    /// Marks the volume failed with `why` unless it failed already; whether it did now.
    fn set_failure(&self, why: &str) -> bool {
        let mut failure = self.failure.lock();
        let first = failure.is_none();
        if first {
            *failure = Some(why.to_string());
        }
        first
    }

    /// Its name: what its `Volume` named it, else its guid.
    pub fn name(&self) -> String {
        self.name
            .get()
            .cloned()
            .unwrap_or_else(|| format!("{:016x}", self.fixed.guid))
    }

    /// Names the volume (once: a later name is ignored).
    pub(crate) fn set_name(&self, name: &str) {
        let _ = self.name.set(name.to_string());
    }

    /// Records blocks whose acknowledged writes never reached the backing store.
    pub(crate) fn lose(&self, blocks: impl IntoIterator<Item = u64>) {
        let mut lost = self.lost.lock();
        lost.extend(blocks);
        self.any_lost.store(!lost.is_empty(), Ordering::Release);
    }

    /// Whether `block`'s newest acknowledged write was lost by a failed TXG.
    pub(crate) fn is_lost(&self, block: u64) -> bool {
        self.any_lost.load(Ordering::Acquire) && self.lost.lock().contains(&block)
    }

    /// How many blocks' acknowledged writes were lost (their reads fail).
    pub fn lost_count(&self) -> u64 {
        self.lost.lock().len() as u64
    }

    /// The volume's failure as the pool records it, if it failed.
    pub fn failure_record(&self) -> Option<VolumeFailure> {
        let why = self.failure()?;
        let mut lost: Vec<u64> = self.lost.lock().iter().copied().collect();
        lost.sort_unstable();
        Some(VolumeFailure {
            guid: self.fixed.guid,
            why,
            lost,
        })
    }
}

/// Refuses a volume of `size_bytes` in blocks of `block_bytes` with more blocks than an
/// in-memory key (and the L2 index's) holds: [`MAX_BLOCK`] + 1.
pub fn check_blocks(size_bytes: u64, block_bytes: u32) -> Result<(), VolumeTableError> {
    let blocks = size_bytes.div_ceil(u64::from(block_bytes.max(1)));
    if blocks > MAX_BLOCK + 1 {
        return Err(VolumeTableError::TooManyBlocks {
            blocks,
            block_bytes,
            max: MAX_BLOCK + 1,
        });
    }
    Ok(())
}

/// A failed volume as the pool's state directory keeps it across restarts (see
/// [`Volumes::set_failure_sink`]): why its writes fail, and the blocks whose acknowledged
/// writes never reached its backing store (sorted), which must not read as the older
/// bytes the store still has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeFailure {
    /// The volume's guid.
    pub guid: u64,
    /// Why it failed.
    pub why: String,
    /// Its lost blocks, sorted.
    pub lost: Vec<u64>,
}

/// Records a volume's failure durably (see [`Volumes::set_failure_sink`]).
pub type FailureSink = Box<dyn Fn(&VolumeFailure) -> io::Result<()> + Send + Sync>;

/// Where failures are recorded, if anywhere.
#[derive(Default)]
struct FailureRecorder(RankedMutex<Option<FailureSink>>);

impl std::fmt::Debug for FailureRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FailureRecorder")
    }
}

/// The volumes, by slot.
#[derive(Debug, Default)]
pub struct Volumes {
    table: RankedRwLock<Table>,
    failures: FailureRecorder,
    /// The pool's events, where volume failures go.
    events: Arc<Events>,
}

#[derive(Debug, Default)]
struct Table {
    by_slot: Vec<Arc<VolumeEntry>>,
    by_guid: HashMap<u64, u16>,
}

impl Volumes {
    /// An empty table whose volumes record their failures in `events`.
    pub fn new(events: Arc<Events>) -> Volumes {
        Volumes {
            events,
            ..Volumes::default()
        }
    }

    /// Registers a volume over `backing` and returns its entry. Refused: a guid already
    /// registered, more than [`VOLUME_SLOTS`] volumes, a volume with more blocks than an
    /// index key holds ([`check_blocks`]), a block size of 0, a size larger than the
    /// backing store.
    pub fn register(
        &self,
        spec: VolumeSpec,
        backing: Arc<BackingStore>,
    ) -> Result<Arc<VolumeEntry>, VolumeTableError> {
        if spec.block_bytes == 0 {
            return Err(VolumeTableError::ZeroBlockSize);
        }
        let mut table = self.table.write();
        if table.by_guid.contains_key(&spec.guid) {
            return Err(VolumeTableError::Registered(spec.guid));
        }
        if table.by_slot.len() >= VOLUME_SLOTS {
            return Err(VolumeTableError::Full(VOLUME_SLOTS));
        }
        let slot = table.by_slot.len() as u16;
        let size_bytes = spec.size_bytes.unwrap_or_else(|| backing.size_bytes());
        if size_bytes > backing.size_bytes() {
            return Err(VolumeTableError::LargerThanBacking {
                size_bytes,
                backing_bytes: backing.size_bytes(),
            });
        }
        check_blocks(size_bytes, spec.block_bytes)?;
        let fixed = VolumeInfo {
            guid: spec.guid,
            slot,
            size_bytes,
            block_bytes: spec.block_bytes,
            primarycache: spec.primarycache,
            secondarycache: spec.secondarycache,
            sync: spec.sync,
            logbias: spec.logbias,
            read_only: spec.read_only,
        };
        let entry = Arc::new(VolumeEntry {
            fixed,
            live: LiveInfo::new(size_bytes, spec.props()),
            unlogged_txg: AtomicU64::new(0),
            backing,
            failure: RankedMutex::leaf(None),
            lost: RankedMutex::leaf(HashSet::new()),
            any_lost: AtomicBool::new(false),
            partials: crate::txg::partial::table::Partials::default(),
            name: std::sync::OnceLock::new(),
            events: Arc::clone(&self.events),
        });
        table.by_slot.push(Arc::clone(&entry));
        table.by_guid.insert(spec.guid, slot);
        Ok(entry)
    }

    /// The volume in `slot`.
    pub fn get(&self, slot: u16) -> Option<Arc<VolumeEntry>> {
        self.table.read().by_slot.get(usize::from(slot)).cloned()
    }

    /// The slot of the volume with `guid` (at on-disk boundaries only).
    pub fn slot_of(&self, guid: u64) -> Option<u16> {
        self.table.read().by_guid.get(&guid).copied()
    }

    /// The volume with `guid` (at on-disk boundaries only).
    pub fn by_guid(&self, guid: u64) -> Option<Arc<VolumeEntry>> {
        let table = self.table.read();
        let slot = *table.by_guid.get(&guid)?;
        table.by_slot.get(usize::from(slot)).cloned()
    }

    /// Every volume, by slot.
    pub fn all(&self) -> Vec<Arc<VolumeEntry>> {
        self.table.read().by_slot.clone()
    }

    /// Where a volume's failure is recorded from now on: the pool's state directory, so
    /// that a restart does not serve the store's older bytes of its lost blocks as if
    /// nothing had happened. Called with the whole record (every lost block so far) each
    /// time a TXG of the volume fails, before that TXG is recorded as committed.
    pub fn set_failure_sink(&self, sink: FailureSink) {
        *self.failures.0.lock() = Some(sink);
    }

    /// Marks the volume of `failure.guid` failed as a previous run recorded it: its writes
    /// fail and its lost blocks read as errors, as they did before the restart.
    pub fn restore_failure(&self, failure: &VolumeFailure) -> Result<(), VolumeTableError> {
        let vol =
            (self.by_guid(failure.guid)).ok_or(VolumeTableError::UnknownFailed(failure.guid))?;
        // Not an event: the failure happened in an earlier run, which recorded it.
        vol.set_failure(&failure.why);
        // Blocks past the end (a backing store made smaller since) cannot be read anyway.
        let blocks = vol.info().blocks();
        vol.lose(failure.lost.iter().copied().filter(|&b| b < blocks));
        Ok(())
    }

    /// Records `vol`'s failure through the sink: `Err` says why it could not be (no
    /// sink, or the sink failed), for the caller to report.
    pub(crate) fn record_failure(&self, vol: &VolumeEntry) -> Result<(), RecordError> {
        let Some(record) = vol.failure_record() else {
            return Ok(());
        };
        match self.failures.0.lock().as_ref() {
            Some(sink) => sink(&record).map_err(|source| RecordError::VolumeFailure {
                guid: record.guid,
                lost: record.lost.len(),
                source,
            }),
            None => Ok(()),
        }
    }

    /// [`Volumes::record_failure`], logging and counting (in `write_stats`) a record that
    /// could not be written.
    pub(crate) fn record_failure_counted(&self, vol: &VolumeEntry, write_stats: &WriteStats) {
        if let Err(err) = self.record_failure(vol) {
            eprintln!("larch: {err}");
            write_stats
                .volume_failure_record_errors
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

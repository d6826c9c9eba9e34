//! Why no restart can serve stale data from a cache device, and the state that argument
//! relies on.
//!
//! ZFS gets this for free from copy-on-write: an address with a birth TXG is never
//! reused, so a cached copy can never describe bytes that were overwritten. larch
//! overwrites blocks in place, so it keeps its own rule:
//!
//! **Before a backing store receives new bytes for a block, every copy of older bytes
//! that a cache-device rebuild could still find is dead in that device's durable log, or
//! that log is dead.**
//!
//! Why it holds, step by step (the names are this module's):
//! 0. Every copy logged on a cache device and not yet passed by its evict hand is in the
//!    L2 index (readable, or marked bad after a failed read: bad copies stay indexed for
//!    this reason), or has a tombstone queued. A feed or a rebuild that cannot index a
//!    logged copy queues its tombstone at once.
//! 1. A write, under the [`gate`](Coherence::gate), removes every indexed copy of its
//!    blocks and queues a tombstone for each, before the new generation exists. A feed's
//!    batch is written without the gate; its copies are indexed under the gate only if
//!    their block was not written since the feed chose it (the feed watch,
//!    [`Coherence::watch_feed`]), and are tombstoned otherwise. The feed holds
//!    [`feed_io`](Coherence::feed_io) from its choice until then.
//! 2. Only the syncer writes dirty blocks to backing stores, one TXG at a time. Before it
//!    writes any, it takes `feed_io` (so a feed in flight has queued its tombstones) and,
//!    for every cache device: if the device is online, appends the tombstones queued for
//!    it and commits its log (durable on return); if it is still rebuilding (it has no
//!    writer yet, and its rebuild cannot know of this TXG's writes before it ends), it
//!    empties the device's log on disk once for that rebuild
//!    ([`larch_l2::forget_log`]), so a crash before the rebuild ends brings the device
//!    back cold. Every commit of a device's log, whoever makes it (a feed, the syncer,
//!    the end of a rebuild, a clean shutdown), first appends the tombstones queued for
//!    that device.
//! 3. A rebuild applies tombstones newest first. Blocks written since the rebuild began
//!    ([`Coherence::note_write`], under the gate) are not restored: their copies are
//!    tombstoned in the commit that ends the rebuild, which is also the first header the
//!    rebuilt device writes, so a log emptied by step 2 comes back only with those
//!    tombstones in it. The restored entries are indexed, the tombstones queued and the
//!    writer installed under one hold of the gate, so a write is either seen by the
//!    rebuild or finds the copy in the index. An intent-log replay that applied records
//!    counts as writes before any rebuild (rule 5): no device is rebuilt in that run. (The
//!    log does not keep a synced TXG's records for a rebuild: replayed again after a
//!    crash, they would overwrite newer bytes, acknowledged ones too; a review found
//!    that.)
//! 4. When a device's tombstones cannot be made durable, the device is faulted and its
//!    log emptied. If even that fails, the pool records in its state directory that the
//!    device's log is not to be trusted ([`Coherence::set_distrust_sink`]) and the next
//!    open formats the device instead of rebuilding it; if that fails too, the TXG fails
//!    (its volumes get EIO) rather than write the backing stores.
//! 5. A cache device added after any write (at runtime, or at open after an intent-log
//!    replay that applied records) is formatted, never rebuilt: its log could hold copies
//!    those writes superseded without tombstones. So is one that a
//!    start could not open (missing, unreadable): the pool records it before serving
//!    (rule 4's record), and formats it when it is back, provided its header is this
//!    pool's device's (anything else at its path is left alone).
//! 6. A rebuild whose walk stops before the end of the log (a block that cannot be read
//!    or checked) faults the device and empties its log: the entries behind that block
//!    were neither indexed nor tombstoned, and a later walk that could read it would bring
//!    them back. Once the log is emptied on the device, the device comes back in use,
//!    empty (a writer resumes after the emptied header, chaining onto no block, as on a
//!    device formatted at runtime, rule 5); if it could not be emptied, it stays faulted.
//!    A device removed while it rebuilds stays removed: the rebuild's end attaches
//!    nothing, installs no writer and drops the tombstones its walk queued.
//!
//! 7. When step 2 emptied a log during a rebuild, the writer the rebuild installs writes
//!    headers that point at no log ([`larch_l2::L2Device::hide_log`]) until the commit
//!    that ends the rebuild has put every tombstone of rule 3 on the device; only then
//!    does a header point at the log again. Before, the first of those headers (one that
//!    moved the evict hand, or the commit of the first full block of tombstones) pointed
//!    at the old log while copies that writes had superseded were still untombstoned in
//!    it: a power cut there brought them back (found by a review).
//!
//! The cost: one log commit (a small write and a flush) per cache device per TXG that
//! superseded copies on it; writes themselves do no cache-device I/O (they queue
//! tombstones in memory); and a crash during a rebuild that overlapped writes loses the
//! device's warmth, never its correctness. The queues are bounded by the blocks one TXG
//! may dirty (`zfs_dirty_data_max` / block size) plus one feed's batch: 32 bytes each.

use std::collections::HashSet;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use larch_policy::BlockKey;

use crate::error::DistrustError;
use crate::lock::{Rank, RankedGuard, RankedMutex};

/// A tombstone waiting for its device's next log commit: the on-disk identity of a block
/// (volume guid) and the generation that superseded the copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tombstone {
    pub(crate) key: larch_l2::BlockKey,
    pub(crate) generation: u64,
}

/// Records durably, outside a cache device, that its log must not be rebuilt (rule 4):
/// called with the device's guid.
pub type DistrustSink = Box<dyn Fn(u64) -> io::Result<()> + Send + Sync>;

/// What each cache device needs of the argument.
#[derive(Debug, Default)]
struct DeviceState {
    /// Tombstones queued for the device's next commit.
    tombstones: Vec<Tombstone>,
    /// A TXG emptied the device's log during its current rebuild (rule 2); once is enough.
    forgotten_in_rebuild: bool,
}

/// The state the no-stale-read argument relies on. See the module documentation.
pub(crate) struct Coherence {
    /// Orders generation changes (writes) against the indexing of feed batches and the
    /// end of rebuilds.
    gate: RankedMutex<()>,
    /// Held by a feed from choosing its blocks until its copies are indexed or
    /// tombstoned, and by the syncer while it commits tombstones.
    feed_io: RankedMutex<()>,
    /// Blocks written since the feed in flight chose its blocks (`None`: no feed).
    feed_written: RankedMutex<Option<HashSet<BlockKey>>>,
    /// Rebuilds not yet ended.
    rebuilds: AtomicUsize,
    /// Blocks written (or replayed) while a rebuild runs.
    rebuild_written: RankedMutex<HashSet<BlockKey>>,
    /// Per cache device, by index.
    devices: RankedMutex<Vec<DeviceState>>,
    /// A write was accepted since start (rule 5).
    writes_seen: AtomicBool,
    /// Where rule 4 records a log it could not empty.
    distrust: RankedMutex<Option<DistrustSink>>,
    /// Purges so far: drops of a volume's copies it no longer wants (`l2::purge`), which
    /// a rebuild that began before one must apply to its index too.
    purges: AtomicU64,
}

/// A feed's watch of writes (see [`Coherence::watch_feed`]); ends when dropped.
pub(crate) struct FeedWatch<'a> {
    coherence: &'a Coherence,
}

impl FeedWatch<'_> {
    /// The blocks written since the watch began; the watch ends.
    pub(crate) fn take(&self) -> HashSet<BlockKey> {
        self.coherence
            .feed_written
            .lock()
            .take()
            .unwrap_or_default()
    }
}

impl Drop for FeedWatch<'_> {
    fn drop(&mut self) {
        *self.coherence.feed_written.lock() = None;
    }
}

impl Coherence {
    pub(crate) fn new() -> Coherence {
        Coherence {
            gate: RankedMutex::new(Rank::Gate, ()),
            feed_io: RankedMutex::new(Rank::FeedIo, ()),
            feed_written: RankedMutex::new(Rank::Coherence, None),
            rebuilds: AtomicUsize::new(0),
            rebuild_written: RankedMutex::new(Rank::Coherence, HashSet::new()),
            devices: RankedMutex::new(Rank::Coherence, Vec::new()),
            writes_seen: AtomicBool::new(false),
            distrust: RankedMutex::leaf(None),
            purges: AtomicU64::new(0),
        }
    }

    /// The gate (rule 1).
    pub(crate) fn gate(&self) -> RankedGuard<'_, ()> {
        self.gate.lock()
    }

    /// The feed's and the tombstone commit's lock (rules 1 and 2).
    pub(crate) fn feed_io(&self) -> RankedGuard<'_, ()> {
        self.feed_io.lock()
    }

    /// Starts a feed's watch of writes. Call with `feed_io` held, before choosing blocks.
    pub(crate) fn watch_feed(&self) -> FeedWatch<'_> {
        let _gate = self.gate();
        *self.feed_written.lock() = Some(HashSet::new());
        FeedWatch { coherence: self }
    }

    /// A write changed `key`'s generation: the feed in flight and the rebuilds must know
    /// (rules 1 and 3). Call under the gate.
    pub(crate) fn note_write(&self, key: BlockKey) {
        self.writes_seen.store(true, Ordering::Release);
        if let Some(written) = self.feed_written.lock().as_mut() {
            written.insert(key);
        }
        if self.rebuilds.load(Ordering::Acquire) > 0 {
            self.rebuild_written.lock().insert(key);
        }
    }

    /// A purge drops copies (call under the gate).
    pub(crate) fn note_purge(&self) {
        self.purges.fetch_add(1, Ordering::AcqRel);
    }

    /// Purges so far (see `l2::purge`).
    pub(crate) fn purges(&self) -> u64 {
        self.purges.load(Ordering::Acquire)
    }

    /// Whether any write was accepted since start (rule 5).
    pub(crate) fn writes_seen(&self) -> bool {
        self.writes_seen.load(Ordering::Acquire)
    }

    /// Marks that writes were accepted (a replay counts as writes).
    pub(crate) fn mark_writes_seen(&self) {
        self.writes_seen.store(true, Ordering::Release);
    }

    /// A rebuild begins (call under the gate, with the decision to rebuild). A device's
    /// index is never reused, so its state starts fresh.
    pub(crate) fn rebuild_began(&self) {
        self.rebuilds.fetch_add(1, Ordering::AcqRel);
    }

    /// Rebuilds running now.
    #[cfg(test)]
    pub(crate) fn rebuilds_running(&self) -> usize {
        self.rebuilds.load(Ordering::Acquire)
    }

    /// A rebuild ended (indexed, failed or cancelled). The last one forgets the blocks
    /// written meanwhile.
    pub(crate) fn rebuild_ended(&self) {
        if self.rebuilds.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.rebuild_written.lock().clear();
        }
    }

    /// The blocks written (or replayed) since the rebuilds began.
    pub(crate) fn written_during_rebuild(&self) -> HashSet<BlockKey> {
        self.rebuild_written.lock().clone()
    }

    fn device<R>(&self, index: u16, f: impl FnOnce(&mut DeviceState) -> R) -> R {
        let mut devices = self.devices.lock();
        let i = usize::from(index);
        if devices.len() <= i {
            devices.resize_with(i + 1, DeviceState::default);
        }
        f(&mut devices[i])
    }

    /// Queues a tombstone for device `index`'s next log commit.
    pub(crate) fn queue_tombstone(&self, index: u16, tombstone: Tombstone) {
        self.device(index, |d| d.tombstones.push(tombstone));
    }

    /// Takes the tombstones queued for device `index` (its writer is about to commit).
    pub(crate) fn take_tombstones(&self, index: u16) -> Vec<Tombstone> {
        self.device(index, |d| std::mem::take(&mut d.tombstones))
    }

    /// Drops the tombstones of a device whose log is dead (faulted, removed, emptied).
    pub(crate) fn drop_tombstones(&self, index: u16) {
        self.device(index, |d| d.tombstones = Vec::new());
    }

    /// Tombstones queued over all devices (for stats and tests).
    pub(crate) fn queued_tombstones(&self) -> usize {
        self.devices.lock().iter().map(|d| d.tombstones.len()).sum()
    }

    /// Whether a TXG still has to empty device `index`'s log during its rebuild (rule
    /// 2); marks it done.
    pub(crate) fn forget_in_rebuild_once(&self, index: u16) -> bool {
        self.device(index, |d| {
            !std::mem::replace(&mut d.forgotten_in_rebuild, true)
        })
    }

    /// Whether a TXG emptied device `index`'s log during its rebuild.
    pub(crate) fn log_forgotten_in_rebuild(&self, index: u16) -> bool {
        self.device(index, |d| d.forgotten_in_rebuild)
    }

    /// Where rule 4 records a log it could not empty on the device.
    pub(crate) fn set_distrust_sink(&self, sink: DistrustSink) {
        *self.distrust.lock() = Some(sink);
    }

    /// Records that the log of the device with `guid` must not be rebuilt (rule 4).
    pub(crate) fn distrust(&self, guid: u64) -> Result<(), DistrustError> {
        match self.distrust.lock().as_ref() {
            Some(sink) => sink(guid).map_err(|source| DistrustError::Record { guid, source }),
            None => Err(DistrustError::NoSink { guid }),
        }
    }
}

//! Cache devices (the L2ARC): their state, their writers and their index, and the
//! operations that change which devices the engine uses.
//!
//! Each device has a feeder thread that first rebuilds the device's index from its log
//! ([`rebuild`]) and then feeds it ([`feed`]). Reads of cached copies go through one
//! verified path ([`read`]), over io_uring ([`uring`]) where the device has a file
//! descriptor and the system allows it. The compact index of copies lives in the ARC's
//! shards ([`index`]).

pub(crate) mod feed;
pub mod index;
mod purge;
pub(crate) mod read;
pub(crate) mod rebuild;
pub mod uring;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use larch_format::DevHeaderPhys;
use larch_io::{BlockDevice, FileDevice, FileOptions};
use larch_l2::{CreateOptions, Geometry, L2Device, RebuildStats};

use crate::arc::ArcCache;
use crate::coherence::{Coherence, Tombstone};
use crate::error::{DistrustError, device_error};
use crate::events::{EventKind, Events};
use crate::latency::LatencyHistogram;
use crate::lock::{Rank, RankedGuard, RankedMutex, RankedRwLock};
use crate::run::{Background, Generations, Lifecycle};
use crate::stats::EngineStats;
use crate::tunables::Tunables;
use crate::volumes::Volumes;
use uring::UringReader;

/// The L2 index's memory cap never goes below this (4 MiB: ~130,000 blocks).
pub const L2_INDEX_MIN_CAP: u64 = 4 << 20;

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

/// I/O counters of one cache device (for `larch iostat` and /metrics).
#[derive(Debug, Default)]
pub struct DeviceIo {
    /// Block reads (L2 hits and failed attempts).
    pub reads: AtomicU64,
    /// Bytes read.
    pub read_bytes: AtomicU64,
    /// Reads that failed or did not verify (a copy the ring wrote over during its read
    /// is not counted: `l2_evicted_in_flight`).
    pub read_errors: AtomicU64,
    /// Feed batches written.
    pub writes: AtomicU64,
    /// Bytes of data written by feeds.
    pub write_bytes: AtomicU64,
    /// Time of each block read, verification included.
    pub read_latency: LatencyHistogram,
    /// Time of each feed batch: its writes and the log commit.
    pub write_latency: LatencyHistogram,
    /// Block reads waiting to be issued (for an I/O thread, when they do not go through
    /// io_uring), and reads at the device.
    pub read_queue: Arc<crate::latency::IoQueue>,
}

/// The writer of a cache device: the ring and log of `larch-l2` over the device.
pub(crate) type Writer = L2Device<Arc<dyn BlockDevice>>;

/// A cache device of the pool.
pub struct CacheDevice {
    /// Index in the engine's device list (and in every shard's L2 index).
    pub index: u16,
    /// Its path (or name, for a device given in process).
    pub path: PathBuf,
    /// Its guid (in its header).
    pub guid: u64,
    dev: Arc<dyn BlockDevice>,
    /// The ring writer, once formatted or rebuilt; `None` while rebuilding and after a
    /// fault or removal.
    writer: RankedMutex<Option<Writer>>,
    /// Its ring's geometry, once known.
    geometry: OnceLock<Geometry>,
    /// The newest header on the device while no writer holds it (read when it was
    /// opened, or the writer's last when the writer was dropped), for emptying its log
    /// without reading it back.
    known_header: RankedMutex<Option<DevHeaderPhys>>,
    /// Whether `known_header` is the last header of a writer that an I/O error poisoned:
    /// the header write that failed may not have landed, so the device may be one
    /// sequence short of it (until a header is written over it, [`L2Arc::forget_log`]).
    known_header_unsure: AtomicBool,
    state: AtomicU8,
    fault: RankedMutex<Option<String>>,
    rebuild: RankedMutex<Option<RebuildStats>>,
    rebuild_entries: AtomicU64,
    rebuild_permille: AtomicU64,
    /// DRAM of the index its rebuild is building, not attached yet (for the cap).
    rebuild_index_bytes: AtomicU64,
    /// I/O counters of this device.
    pub io: DeviceIo,
    /// The descriptor whose `flock` keeps other pools off the device file while this one
    /// uses it (`crate::files::lock_device`): from its add to its removal or the engine's
    /// shutdown. `None` for a block device or a device given in process.
    file_lock: RankedMutex<Option<std::fs::File>>,
}

impl CacheDevice {
    /// A device of `index`: rebuilding (`writer` is `None`) or online with `writer`.
    fn new(
        index: u16,
        path: &Path,
        guid: u64,
        dev: Arc<dyn BlockDevice>,
        writer: Option<Writer>,
    ) -> CacheDevice {
        let geometry = OnceLock::new();
        let state = match &writer {
            Some(l2) => {
                let _ = geometry.set(l2.geometry());
                DeviceState::Online
            }
            None => DeviceState::Rebuilding,
        };
        CacheDevice {
            index,
            path: path.to_path_buf(),
            guid,
            dev,
            writer: RankedMutex::new(Rank::DeviceWriter, writer),
            geometry,
            known_header: RankedMutex::leaf(None),
            known_header_unsure: AtomicBool::new(false),
            state: AtomicU8::new(state as u8),
            fault: RankedMutex::leaf(None),
            rebuild: RankedMutex::leaf(None),
            rebuild_entries: AtomicU64::new(0),
            rebuild_permille: AtomicU64::new(0),
            rebuild_index_bytes: AtomicU64::new(0),
            file_lock: RankedMutex::leaf(None),
            io: DeviceIo::default(),
        }
    }

    /// Current state.
    pub fn state(&self) -> DeviceState {
        DeviceState::from_u8(self.state.load(Ordering::Acquire))
    }

    fn set_state(&self, state: DeviceState) {
        self.state.store(state as u8, Ordering::Release);
    }

    /// Why it is faulted, if it is.
    pub fn fault(&self) -> Option<String> {
        self.fault.lock().clone()
    }

    /// What its rebuild found, once it ended.
    pub fn rebuild_stats(&self) -> Option<RebuildStats> {
        *self.rebuild.lock()
    }

    /// Entries its rebuild restored so far, and how far it walked the ring (‰).
    pub fn rebuild_progress(&self) -> (u64, u64) {
        (
            self.rebuild_entries.load(Ordering::Relaxed),
            self.rebuild_permille.load(Ordering::Relaxed),
        )
    }

    /// Size of the device in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.dev.len_bytes()
    }

    /// The device, for readers.
    pub(crate) fn dev(&self) -> &Arc<dyn BlockDevice> {
        &self.dev
    }

    /// The geometry of a device that can be read (online).
    pub(crate) fn readable_geometry(&self) -> Option<Geometry> {
        (self.state() == DeviceState::Online)
            .then(|| self.geometry.get().copied())
            .flatten()
    }

    /// The writer, locked.
    pub(crate) fn writer(&self) -> RankedGuard<'_, Option<Writer>> {
        self.writer.lock()
    }

    /// A header sequence this device has reached on the media, never more than it has:
    /// its writer's, or else the newest header known to be on it; one less when an I/O
    /// error poisoned that writer, since the header write that failed may not have landed.
    /// `None` when nothing of it is known (never formatted). The pool records it so that
    /// an older image of the device is not rebuilt (`l2-sequences.json`).
    pub fn sequence_reached(&self) -> Option<u64> {
        let from_writer = self.writer().as_ref().map(|l2| {
            let sequence = l2.header().sequence;
            sequence.saturating_sub(u64::from(l2.is_poisoned()))
        });
        from_writer.or_else(|| {
            let known = self.known_header.lock().map(|h| h.sequence)?;
            let unsure = self.known_header_unsure.load(Ordering::Acquire);
            Some(known.saturating_sub(u64::from(unsure)))
        })
    }

    /// Takes the writer out of use, remembering its last header.
    /// Releases the device file's lock: the pool no longer writes it.
    pub(crate) fn release_file_lock(&self) {
        self.file_lock.lock().take();
    }

    fn drop_writer(&self) {
        let writer = self.writer().take();
        if let Some(l2) = writer {
            // Unsure first: a reader between the two stores then understates, never
            // overstates, what the device reached.
            self.known_header_unsure
                .store(l2.is_poisoned(), Ordering::Release);
            *self.known_header.lock() = Some(l2.header());
        }
    }

    /// Appends `tombstones` to the writer's open log block (committed with the writer's
    /// next commit; a full block commits itself, telling `evict` the evict floor before
    /// it overwrites anything, so the caller drops the index entries the hand passed).
    pub(crate) fn append_tombstones(
        writer: &mut Writer,
        tombstones: &[Tombstone],
        evict: impl Fn(u64) + Copy,
    ) -> Result<(), larch_l2::L2Error> {
        tombstones
            .iter()
            .try_for_each(|t| writer.tombstone_with(t.key, t.generation, evict))
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

/// Cache devices one engine can add in its life: a removed device keeps its index (and
/// its place in the list, with its open file) until the pool closes, and indexes are 16
/// bits wide.
const MAX_DEVICES_ADDED: usize = u16::MAX as usize;

/// Why an add was refused once [`MAX_DEVICES_ADDED`] were added.
const TOO_MANY_DEVICES: &str =
    "65,535 cache devices were added since the pool was opened: restart the daemon to add more";

/// The cache devices of an engine.
pub(crate) struct CacheDevices {
    list: RankedRwLock<Vec<Arc<CacheDevice>>>,
    /// Devices the list takes at most ([`MAX_DEVICES_ADDED`]; fewer in tests).
    max_added: usize,
    /// The io_uring cache-device reads go through, once the first one set it up.
    uring: RankedRwLock<UringState>,
    /// Whether a thread's own ring ([`uring::local_reader`]) has served a read.
    local_rings_used: AtomicBool,
}

impl CacheDevices {
    pub(crate) fn new() -> CacheDevices {
        CacheDevices {
            list: RankedRwLock::leaf(Vec::new()),
            max_added: MAX_DEVICES_ADDED,
            uring: RankedRwLock::leaf(UringState::Untried),
            local_rings_used: AtomicBool::new(false),
        }
    }

    /// Every device, in the order they were added.
    pub(crate) fn all(&self) -> Vec<Arc<CacheDevice>> {
        self.list.read().clone()
    }

    /// The device of `index`.
    pub(crate) fn get(&self, index: u16) -> Option<Arc<CacheDevice>> {
        self.list.read().get(usize::from(index)).cloned()
    }

    /// Whether any device is online or rebuilding.
    pub(crate) fn any_in_use(&self) -> bool {
        self.list
            .read()
            .iter()
            .any(|d| matches!(d.state(), DeviceState::Online | DeviceState::Rebuilding))
    }

    /// Whether another device can be added: indexes are never reused while the pool is
    /// open (a removed device keeps its place), and they are 16 bits wide.
    fn has_room(&self) -> bool {
        self.list.read().len() < self.max_added
    }

    /// Adds a device to the list under the next index: rebuilding when `writer` is
    /// `None`, online with it otherwise. `None` when the list is full ([`MAX_DEVICES_ADDED`]).
    fn push(
        &self,
        path: &Path,
        guid: u64,
        dev: Arc<dyn BlockDevice>,
        writer: Option<Writer>,
    ) -> Option<Arc<CacheDevice>> {
        let mut list = self.list.write();
        let index = u16::try_from(list.len())
            .ok()
            .filter(|&i| usize::from(i) < self.max_added)?;
        let device = Arc::new(CacheDevice::new(index, path, guid, dev, writer));
        list.push(Arc::clone(&device));
        Some(device)
    }

    /// The io_uring reader, set up on first use; `None` when switched off or unavailable.
    /// A thread running a single-threaded runtime (the daemon's connection threads) reads
    /// through a ring of its own ([`uring::local_reader`]), other threads through the
    /// shared one, whose reaper runs on `runtime` (the engine's background runtime, if
    /// set: it outlives every connection) or else the current one.
    pub(crate) fn uring_reader(
        &self,
        enabled: bool,
        runtime: Option<&tokio::runtime::Handle>,
    ) -> Option<Arc<UringReader>> {
        if !enabled {
            return None;
        }
        // Without deferred completions here (kernels before 6.1), the shared ring serves.
        if let Some(reader) = uring::local_reader() {
            if !self.local_rings_used.load(Ordering::Relaxed) {
                self.local_rings_used.store(true, Ordering::Relaxed);
            }
            return Some(reader);
        }
        // Other threads: the shared ring, found under a shared lock.
        if let Some(settled) = self.uring.read().settled() {
            return settled;
        }
        let mut state = self.uring.write();
        // Another reader may have set it up meanwhile.
        if let Some(settled) = state.settled() {
            return settled;
        }
        // Untried, or its runtime ended (a new one serves now): set up again.
        match UringReader::shared(runtime) {
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

    /// How cache-device reads are done now.
    pub(crate) fn read_path(&self, enabled: bool) -> String {
        match &*self.uring.read() {
            UringState::Unavailable(why) => format!("threads (io_uring unavailable: {why})"),
            _ if !enabled => "threads".into(),
            UringState::Ready(_) => "io_uring".into(),
            UringState::Untried if self.local_rings_used.load(Ordering::Relaxed) => {
                "io_uring".into()
            }
            UringState::Untried => "io_uring (not used yet)".into(),
        }
    }
}

/// The L2ARC: the cache devices and their flows — adding, removing and faulting a device,
/// the feed, the rebuild, and verified reads of cached copies ([`read`]). It reads and
/// changes the ARC's shards (where the L2 index lives) under the coherence rules.
pub(crate) struct L2Arc {
    pub(crate) devices: CacheDevices,
    pub(crate) arc: Arc<ArcCache>,
    pub(crate) coherence: Arc<Coherence>,
    pub(crate) volumes: Arc<Volumes>,
    pub(crate) tunables: Arc<Tunables>,
    pub(crate) stats: Arc<EngineStats>,
    pub(crate) life: Arc<Lifecycle>,
    pub(crate) generations: Arc<Generations>,
    pub(crate) background: Arc<Background>,
    pub(crate) events: Arc<Events>,
}

impl L2Arc {
    /// Adds a cache device: formats it (`create`) or opens it and rebuilds its index in
    /// the background. A device whose header names another pool or device is refused, and
    /// so is a file another process holds locked (another running pool's volume, cache or
    /// log device): the device's file stays locked until it is removed or the engine shuts
    /// down.
    pub(crate) fn add_device(
        self: &Arc<Self>,
        path: &Path,
        pool_guid: u64,
        device_guid: u64,
        create: bool,
    ) -> io::Result<(Arc<CacheDevice>, JoinHandle<()>)> {
        let file_lock = crate::files::lock_device(path)?;
        let dev = FileDevice::open(path, &FileOptions::default())
            .map_err(|e| io::Error::other(format!("{}: {e}", path.display())))?;
        let (device, feeder) =
            self.add_device_on(Arc::new(dev), path, pool_guid, device_guid, create)?;
        *device.file_lock.lock() = file_lock;
        Ok((device, feeder))
    }

    /// [`L2Arc::add_device`] on any [`BlockDevice`] (in-process tests use a
    /// fault-injecting one); `path` names it. Returns the device and its feeder thread.
    pub(crate) fn add_device_on(
        self: &Arc<Self>,
        dev: Arc<dyn BlockDevice>,
        path: &Path,
        pool_guid: u64,
        device_guid: u64,
        create: bool,
    ) -> io::Result<(Arc<CacheDevice>, JoinHandle<()>)> {
        let named = |e: &dyn std::fmt::Display| device_error(path, e);
        let full = || named(&TOO_MANY_DEVICES);
        if !self.devices.has_room() {
            return Err(full());
        }
        let t = &self.tunables;
        // Whether the device's log may be rebuilt is decided under the gate, where writes
        // change generations: a write came either before (then the device is formatted,
        // rule 5 of `coherence`) or after the rebuild began (then the rebuild sees it,
        // rule 3).
        let rebuild = {
            let _gate = self.coherence.gate();
            let rebuild = !create
                && !self.coherence.writes_seen()
                && t.l2arc_rebuild_enabled()
                && dev.len_bytes() >= t.l2arc_rebuild_blocks_min_l2size();
            if rebuild {
                self.coherence.rebuild_began();
            }
            rebuild
        };
        let device = if rebuild {
            // Refuse foreign devices at once, before serving anything.
            let header = larch_l2::read_header(&*dev)
                .map_err(|e| format!("not a larch cache device: {e}"))
                .and_then(|header| {
                    larch_l2::validate_header(
                        &header.header,
                        dev.len_bytes(),
                        Some((pool_guid, device_guid)),
                    )
                    .map(|_| header.header)
                    .map_err(|e| e.to_string())
                });
            let header = match header {
                Ok(header) => header,
                Err(why) => {
                    self.coherence.rebuild_ended();
                    return Err(named(&why));
                }
            };
            let Some(device) = self.devices.push(path, device_guid, dev, None) else {
                self.coherence.rebuild_ended();
                return Err(full());
            };
            *device.known_header.lock() = Some(header);
            device
        } else {
            let options = CreateOptions {
                pool_guid,
                device_guid,
                ..CreateOptions::default()
            };
            let mut writer = L2Device::create(Arc::clone(&dev), &options).map_err(|e| named(&e))?;
            writer.set_track_records(false);
            let geometry = writer.geometry();
            index::fresh_index(&geometry).map_err(|e| named(&e))?;
            // Online from the start: until its index is attached below, nothing finds a
            // copy on it and nothing feeds it (its feeder starts after).
            let device = self
                .devices
                .push(path, device_guid, dev, Some(writer))
                .ok_or_else(full)?;
            for mut shard in self.arc.shards() {
                let fresh =
                    index::fresh_index(&geometry).expect("the geometry fits, checked above");
                shard.l2.attach(device.index, fresh);
            }
            device
        };
        let l2 = Arc::clone(self);
        let feeder_device = Arc::clone(&device);
        let handle = std::thread::Builder::new()
            .name(format!("larch-l2-{}", device.index))
            .spawn(move || {
                if rebuild {
                    l2.rebuild_device(&feeder_device, pool_guid);
                }
                l2.feed_loop(&feeder_device);
            });
        let handle = match handle {
            Ok(handle) => handle,
            Err(err) => {
                let why = format!("no feeder thread: {err}");
                if rebuild {
                    self.end_rebuild_faulted(&device, why);
                } else {
                    let _io = self.coherence.feed_io();
                    if let Err(why) = self.fault_device(&device, why) {
                        eprintln!("larch: {why}");
                    }
                }
                return Err(named(&err));
            }
        };
        Ok((device, handle))
    }

    /// Removes a cache device at runtime: no new reads go to it, its index entries are
    /// dropped, and its log is emptied: writes from now on no longer tombstone its copies,
    /// so a later add must start it empty, never rebuild it.
    ///
    /// It holds `feed_io` until the log is emptied, so no TXG writes a backing store
    /// meanwhile (a TXG commits tombstones under `feed_io` first), but not the gate:
    /// writers go on.
    pub(crate) fn remove_device(&self, index: u16) -> bool {
        let Some(device) = self.devices.get(index) else {
            return false;
        };
        let _io = self.coherence.feed_io();
        {
            let _gate = self.coherence.gate();
            device.set_state(DeviceState::Removed);
            device.drop_writer();
            self.drop_device_index(&device);
        }
        if let Err(why) = self.forget_log(&device) {
            eprintln!("larch: cache device {}: {why}", device.path.display());
        }
        // The pool writes it no more: another pool (or this one, adding it again) may.
        device.release_file_lock();
        true
    }

    /// Takes a device out of use because its log cannot be kept right (rule 4 of
    /// [`crate::coherence`]): faulted with `why`, its index and queued tombstones dropped,
    /// its on-disk log emptied. `Err` when even the pool could not record that the log
    /// must not be rebuilt: the caller must not write the backing stores.
    ///
    /// The caller holds no lock of the device (its writer is taken here).
    pub(crate) fn fault_device(
        &self,
        device: &CacheDevice,
        why: String,
    ) -> Result<(), DistrustError> {
        eprintln!(
            "larch: cache device {} faulted: {why}",
            device.path.display()
        );
        self.events.record(EventKind::CacheDeviceFaulted {
            device: device.path.display().to_string(),
            why: why.clone(),
        });
        *device.fault.lock() = Some(why);
        device.set_state(DeviceState::Faulted);
        device.drop_writer();
        self.drop_device_index(device);
        self.forget_log(device)
    }

    /// Drops a device's index entries and queued tombstones.
    fn drop_device_index(&self, device: &CacheDevice) {
        for mut shard in self.arc.shards() {
            for (index_key, copy) in shard.l2.detach(device.index) {
                index::account(&copy, self.psize_of(index_key), &self.stats, false);
            }
        }
        self.coherence.drop_tombstones(device.index);
    }

    /// Empties a device's log on disk; if the device cannot take it, records in the pool
    /// that the device must be formatted at the next open.
    pub(crate) fn forget_log(&self, device: &CacheDevice) -> Result<(), DistrustError> {
        self.stats.l2_log_forgotten.fetch_add(1, Ordering::Relaxed);
        let known = *device.known_header.lock();
        let forgotten = match known {
            Some(header) => larch_l2::forget_log_after(&*device.dev, &header),
            None => larch_l2::forget_log(&*device.dev),
        };
        match forgotten {
            Ok(header) => {
                *device.known_header.lock() = Some(header);
                device.known_header_unsure.store(false, Ordering::Release);
                Ok(())
            }
            // A device that was never formatted has no log to forget.
            Err(larch_l2::L2Error::NoHeader) => Ok(()),
            Err(err) => {
                eprintln!(
                    "larch: cache device {}: emptying its log failed ({err}); the pool records that it must be formatted",
                    device.path.display()
                );
                self.coherence.distrust(device.guid)
            }
        }
    }

    /// The size of the copy behind an L2 index key (see `VolumeInfo::cached_len`).
    pub(crate) fn psize_of(&self, index_key: u64) -> u32 {
        let (slot, block) = index::unpack_key(index_key);
        self.volumes
            .get(slot)
            .map_or(0, |v| v.info().cached_len(block) as u32)
    }

    /// The most DRAM the L2 index may take: `l2arc_meta_percent` of `zfs_arc_max`, but
    /// at least [`L2_INDEX_MIN_CAP`] (the index allocates in chunks per shard and device).
    pub(crate) fn l2_index_cap(&self) -> u64 {
        let percent = self.tunables.l2arc_meta_percent();
        (self.tunables.zfs_arc_max().saturating_mul(percent) / 100).max(L2_INDEX_MIN_CAP)
    }

    /// DRAM held by the L2 index with the indexes that rebuilds are building (what the
    /// cap, [`L2Arc::l2_index_cap`], bounds).
    pub(crate) fn l2_index_bytes_all(&self) -> u64 {
        self.arc.l2_index_bytes() + self.l2_index_bytes_building(None)
    }

    /// DRAM of the indexes that rebuilds are building, but device `except`'s.
    pub(crate) fn l2_index_bytes_building(&self, except: Option<u16>) -> u64 {
        self.devices
            .all()
            .iter()
            .filter(|d| Some(d.index) != except)
            .map(|d| d.rebuild_index_bytes.load(Ordering::Relaxed))
            .sum()
    }

    /// Commits a device's log now, with the tombstones queued for it (a clean shutdown).
    pub(crate) fn commit_device_log(&self, device: &CacheDevice) -> Result<(), larch_l2::L2Error> {
        let mut writer = device.writer();
        let Some(l2) = writer.as_mut() else {
            return Ok(());
        };
        let queued = self.coherence.take_tombstones(device.index);
        let evict = |floor: u64| self.evict_below(device.index, floor);
        CacheDevice::append_tombstones(l2, &queued, evict)?;
        l2.commit_log_with(evict).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Engine;

    #[test]
    fn indexes_are_never_reused_and_a_full_list_refuses_more() {
        let mut devices = CacheDevices::new();
        devices.max_added = 2;
        let dev = || -> Arc<dyn BlockDevice> { Arc::new(larch_io::MemDevice::new(1 << 20)) };
        let path = Path::new("/dev/null");
        assert!(devices.has_room());
        let first = devices.push(path, 1, dev(), None).expect("room");
        first.set_state(DeviceState::Removed);
        let second = devices.push(path, 2, dev(), None).expect("room");
        assert_eq!((first.index, second.index), (0, 1));
        assert!(!devices.has_room());
        // Before, the index was the list's length cast to 16 bits: the 65,537th device
        // took index 0 again, and the entries of both.
        assert!(devices.push(path, 3, dev(), None).is_none());
        assert_eq!(devices.all().len(), 2);
    }

    /// What the pool records of a device (`l2-sequences.json`) never exceeds the newest
    /// header on it, or it would format a current device as an older image of itself: not
    /// while it is fed, not when a header write fails (the writer has counted the header
    /// that did not land), and not once it is faulted and its log could not be emptied.
    #[test]
    fn the_sequence_reached_never_exceeds_the_devices() {
        use crate::backing::{BackingStore, LatencyModel};
        use crate::volumes::VolumeSpec;
        const BLOCK: u64 = 4096;
        let engine = Engine::new(64 << 20);
        let backing: Arc<dyn BlockDevice> = Arc::new(larch_io::MemDevice::new(64 * BLOCK));
        let store = BackingStore::on_device("volume", backing, LatencyModel::default());
        let vol = engine
            .add_volume(VolumeSpec::new(7, BLOCK as u32), Arc::new(store))
            .expect("volume");
        let faulty = Arc::new(larch_io::FaultyDevice::new(8 << 20));
        let device = engine
            .add_cache_device_on(Arc::clone(&faulty) as _, Path::new("faulty"), 1, 2, true)
            .expect("formatted");
        let on_device = || {
            larch_l2::read_header(&*faulty)
                .expect("a header")
                .header
                .sequence
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let read = |blocks: std::ops::Range<u64>| {
            for block in blocks {
                runtime
                    .block_on(engine.read_block(&vol, block, false))
                    .expect("read");
            }
        };
        assert_eq!(device.sequence_reached(), Some(on_device()), "formatted");
        read(0..16);
        assert!(engine.feed_once(&device, 1 << 20) > 0, "fed");
        assert!(on_device() > 1, "the feed wrote headers");
        assert_eq!(device.sequence_reached(), Some(on_device()), "fed");
        // Header writes fail from now on: the next feed's poisons the writer, which has
        // already counted it, and the device is faulted with its log not emptied.
        faulty.fail_writes(0..2 * larch_format::HEADER_SLOT_BYTES);
        read(16..32);
        engine.feed_once(&device, 1 << 20);
        assert_eq!(device.state(), DeviceState::Faulted);
        let reached = device.sequence_reached().expect("known");
        assert!(
            reached <= on_device(),
            "{reached} recorded, {} on the device",
            on_device()
        );
        engine.shutdown();
    }
}

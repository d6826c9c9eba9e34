//! Pools: the configuration kept in a state directory (`pool.json`), and opening it into
//! an engine with volumes and cache devices.
//!
//! One file with its unit tests (the code is about 1,100 lines): the tests open pools
//! through private helpers here, and opening a pool and applying a changed `pool.json`
//! share the rules for each device. The state directory's records for the engine are in
//! `records`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::backing::{BackingStore, LatencyModel};
use crate::engine::Engine;
use crate::error::ConfigError;
use crate::events::EventKind;
use crate::volume::Volume;
use crate::volumes::{
    CacheMode, LogBias, PropertyValue, SyncMode, VolumeEntry, VolumeProps, VolumeSpec,
};

mod records;
pub(crate) use crate::files::lock_backing;
pub use crate::files::{
    CONFIG_FILE, CONFIG_LOCK_FILE, ConfigLock, LOCK_FILE, PoolLock, lock_file,
    write_private_state_file, write_state_file,
};
pub use records::{
    COMMITTED_TXG_FILE, DISTRUSTED_FILE, FAILED_VOLUMES_FILE, L2_SEQUENCES_FILE,
    clear_failed_volume, read_failed_volumes,
};
use records::{
    RecordChanges, add_guids, read_committed_txg, read_distrusted, read_l2_sequences,
    record_failed_volume, set_sequences, update_distrusted, update_l2_sequences,
    write_committed_txg,
};

/// A volume of a pool, as configured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VolumeConfig {
    /// Name (the NBD export name).
    pub name: String,
    /// Identity in cache keys and cache-device logs.
    pub guid: u64,
    /// Backing file or block device (relative paths are relative to the state directory).
    pub backing: PathBuf,
    /// Block size in bytes (`volblocksize`, 4K–128K).
    pub volblocksize: u32,
    /// `primarycache`.
    pub primarycache: CacheMode,
    /// `secondarycache`.
    pub secondarycache: CacheMode,
    /// `readonly`.
    pub readonly: bool,
    /// Injected backing-store latency (a device model for tests and benchmarks; off by default).
    #[serde(default)]
    pub latency: LatencyModel,
    /// `sync`: standard, always or disabled.
    #[serde(default)]
    pub sync: SyncMode,
    /// `logbias`: latency or throughput.
    #[serde(default)]
    pub logbias: LogBias,
    /// `volsize`, once set by a resize (`larch volume set NAME volsize=...`): the size
    /// served, at most the backing store's. Absent: the backing store's size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volsize: Option<u64>,
    /// The properties set by the user (`larch set`, or a value other than the default at
    /// `larch volume add`): their source is `local`, the others' `default`.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub local: BTreeSet<String>,
    /// For a volume on an object store (`backing` is `s3://BUCKET/PREFIX`): how to reach
    /// it (credentials are never kept here: they come from the environment or the AWS
    /// profile files at each start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<larch_object::s3::Settings>,
    /// For a volume on an object store: its size in bytes as `larch volume add` created
    /// or adopted it. A root that names another size is refused at open, before any of
    /// its map is read (a hostile root could otherwise make this node load a map of its
    /// choosing). Absent in pools configured before it was recorded: then the root's own
    /// size is trusted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_size_bytes: Option<u64>,
    /// For a volume on an object store: a grow to this size recorded before the daemon
    /// wrote the volume's root with it (`larch volume set NAME volsize=...`), cleared once
    /// that write succeeded. An open takes a root of either size and completes the grow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_grow_bytes: Option<u64>,
}

impl VolumeConfig {
    /// Its changeable properties.
    pub fn props(&self) -> VolumeProps {
        VolumeProps {
            primarycache: self.primarycache,
            secondarycache: self.secondarycache,
            sync: self.sync,
            logbias: self.logbias,
        }
    }

    /// Sets its changeable properties.
    pub fn set_props(&mut self, props: VolumeProps) {
        self.primarycache = props.primarycache;
        self.secondarycache = props.secondarycache;
        self.sync = props.sync;
        self.logbias = props.logbias;
    }

    /// The object-store address of the volume, if its backing is one.
    pub fn object_url(&self) -> Option<&str> {
        self.backing.to_str().filter(|s| is_object_url(s))
    }
}

/// Whether a `--backing` names an object store rather than a file.
pub fn is_object_url(text: &str) -> bool {
    text.starts_with("s3://")
}

/// This pool's name for itself on object stores (the owner of the leases it takes): the
/// host's name and the pool's guid, so that two pools on one host are two nodes.
pub fn node_name(pool_guid: u64) -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let host = if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        "unknown-host".to_string()
    };
    format!("{host}/{pool_guid:016x}")
}

/// The state file where a pool keeps what it knows of an object-store volume between runs
/// ([`larch_object::LocalState`]).
fn object_state_file(volume_guid: u64) -> String {
    format!("object-{volume_guid:016x}.json")
}

/// Opens an object-store volume of the pool as a backing store: the client, the root and
/// map, the lease.
fn open_object_backing(
    state_dir: &Path,
    pool_guid: u64,
    v: &VolumeConfig,
    url: &str,
) -> io::Result<BackingStore> {
    let (location, odd_prefix) =
        larch_object::s3::Location::parse_recorded(url).map_err(io::Error::other)?;
    if let Some(why) = odd_prefix {
        // Added by an earlier larch: it opens as before (docs/object-store.md, "The prefix").
        eprintln!("larch: volume {}: {why}", v.name);
    }
    let settings = v.s3.clone().unwrap_or_default();
    settings
        .check()
        .map_err(|why| io::Error::new(io::ErrorKind::InvalidInput, format!("{url}: {why}")))?;
    let store = larch_object::s3::client(&location, &settings)?;
    let name = object_state_file(v.guid);
    let state_path = state_dir.join(&name);
    let local = match fs::read(&state_path) {
        Ok(bytes) => larch_object::LocalState::decode(&bytes)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{name}: {e}")))?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => larch_object::LocalState::default(),
        Err(e) => return Err(e),
    };
    let dir = state_dir.to_path_buf();
    let sink: larch_object::StateSink =
        Box::new(move |state| write_state_file(&dir, &name, &state.encode()));
    let options = larch_object::Options {
        lease: settings.lease(),
        // The engine reads and writes the volume in its volblocksize: a root that says
        // otherwise (a pool.json edited, or another volume at that address) is refused.
        block_bytes: Some(v.volblocksize),
        size_bytes: v.object_size_bytes,
        grow_to: v.object_grow_bytes,
        ..larch_object::Options::default()
    };
    // A read-only volume follows the node that writes it (no lease; see docs/object-store.md).
    let open = if v.readonly {
        larch_object::ObjectVolume::open_follower
    } else {
        larch_object::ObjectVolume::open
    };
    let vol = open(
        store,
        &location.prefix,
        &location.display(),
        &node_name(pool_guid),
        local,
        options,
        sink,
    )
    .map_err(|e| match e.kind() {
        // Refusals that this node's record of the volume decides (a root older than the
        // commits it saw) say where that record is.
        io::ErrorKind::InvalidData => io::Error::new(
            e.kind(),
            format!("{e} (local state: {})", state_path.display()),
        ),
        _ => e,
    })?;
    // The client's time limit for a data object's transfer was made from the object size
    // `volume add` recorded; a volume made again at this address with larger objects
    // would have its uploads cut short on a slow link, so that is said.
    let root = vol.geometry();
    let object_bytes = u64::from(root.object_blocks) * u64::from(root.block_bytes);
    if let Some(recorded) = settings.object_bytes.filter(|&r| r < object_bytes) {
        eprintln!(
            "larch: {url}: the volume's objects are {object_bytes} bytes, but {CONFIG_FILE} \
             records {recorded}: their uploads get the shorter time limit made for those, \
             which a slow link may not meet (remove the volume and add it again to record \
             its object size)"
        );
    }
    Ok(BackingStore::on_object(url, vol, v.latency))
}

/// Has every commit `vol` follows drop the cached copies of the blocks it changed
/// ([`Engine::forget_changed_blocks`]). Weak references: the engine holds the volume's
/// backing store, which holds the watcher.
fn follow_commits(
    engine: &Arc<Engine>,
    entry: &Arc<VolumeEntry>,
    vol: &larch_object::ObjectVolume,
) {
    let (engine, entry) = (Arc::downgrade(engine), Arc::downgrade(entry));
    vol.watch_commits(Box::new(move |blocks| {
        match (engine.upgrade(), entry.upgrade()) {
            (Some(engine), Some(entry)) => engine.forget_changed_blocks(&entry, blocks),
            // The pool is closing: nothing is served from these caches any more, and the
            // commit stays unrecorded (a restart distrusts the copies).
            _ => Err(io::Error::other("the pool is closing")),
        }
    }));
}

/// Records that this node took the lease of the object-store volume `name`, and every
/// change of that lease from now on, as events.
fn watch_lease(events: &Arc<crate::Events>, name: &str, vol: &larch_object::ObjectVolume) {
    events.record(EventKind::LeaseTaken {
        volume: name.to_string(),
        token: vol.token(),
        takeover: vol.taken_over(),
    });
    let (events, volume) = (Arc::clone(events), name.to_string());
    vol.watch_lease(Box::new(move |change| {
        let volume = volume.clone();
        events.record(match change {
            larch_object::LeaseChange::Lost(why) => EventKind::LeaseLost { volume, why },
            larch_object::LeaseChange::Lapsed => EventKind::LeaseLapsed { volume },
            larch_object::LeaseChange::Resumed => EventKind::LeaseResumed { volume },
            larch_object::LeaseChange::Released => EventKind::LeaseReleased { volume },
        });
    }));
}

/// A cache device of a pool, as configured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CacheDeviceConfig {
    /// The file or block device (relative paths are relative to the state directory).
    pub path: PathBuf,
    /// The guid written in its header: a device whose header says otherwise is refused.
    pub guid: u64,
}

/// A log device (SLOG) of a pool, as configured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LogDeviceConfig {
    /// The file or block device (relative paths are relative to the state directory).
    pub path: PathBuf,
    /// The guid written in its header.
    pub guid: u64,
}

/// A pool, as kept in `pool.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PoolConfig {
    /// Name.
    pub name: String,
    /// Identity, written in every cache device's header.
    pub guid: u64,
    /// `zfs_arc_max`: bytes of data the ARC may hold.
    pub arc_max_bytes: u64,
    /// The volumes.
    pub volumes: Vec<VolumeConfig>,
    /// The cache devices (L2ARC).
    pub cache_devices: Vec<CacheDeviceConfig>,
    /// The log device (SLOG) holding the intent log; at most one.
    #[serde(default)]
    pub log_devices: Vec<LogDeviceConfig>,
}

impl PoolConfig {
    /// Reads `pool.json` from a state directory: `NotFound` when there is none (no pool
    /// there), `InvalidData` when it does not parse, with a message that says so and
    /// what to do.
    pub fn load(state_dir: &Path) -> io::Result<PoolConfig> {
        let path = state_dir.join(CONFIG_FILE);
        let text = fs::read_to_string(&path).map_err(|e| match e.kind() {
            // Left as it is: callers tell "no pool here" from this kind.
            io::ErrorKind::NotFound => e,
            kind => io::Error::new(kind, format!("reading {}: {e}", path.display())),
        })?;
        serde_json::from_str(&text).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} is damaged: {e}; restore it from a copy or move it aside",
                    path.display()
                ),
            )
        })
    }

    /// Writes `pool.json` atomically and durably ([`write_state_file`]).
    pub fn save(&self, state_dir: &Path) -> io::Result<()> {
        let text = serde_json::to_string_pretty(self).map_err(io::Error::other)?;
        write_state_file(state_dir, CONFIG_FILE, text.as_bytes())
    }

    /// Checks the values a user can get wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.arc_max_bytes < (1 << 20) {
            return Err(ConfigError::ArcTooSmall(self.arc_max_bytes));
        }
        let mut names = std::collections::HashSet::new();
        for v in &self.volumes {
            if !(4096..=128 << 10).contains(&v.volblocksize) || !v.volblocksize.is_power_of_two() {
                return Err(ConfigError::BlockSize {
                    name: v.name.clone(),
                    volblocksize: v.volblocksize,
                });
            }
            if !names.insert(v.name.as_str()) {
                return Err(ConfigError::NameTwice(v.name.clone()));
            }
        }
        Ok(())
    }
}

/// A fresh random 64-bit identifier (never 0).
pub fn new_guid() -> u64 {
    let mut bytes = [0u8; 8];
    if fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .is_err()
    {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        bytes = (t ^ u64::from(std::process::id()).rotate_left(32)).to_le_bytes();
    }
    u64::from_le_bytes(bytes).max(1)
}

/// `path` of `pool.json` as a path to open: relative ones are relative to the state
/// directory.
pub(crate) fn resolve(state_dir: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        state_dir.join(path)
    }
}

/// Sizes of the demo pool `larch serve` creates when given nothing.
#[derive(Clone, Copy, Debug)]
pub struct DemoSizes {
    /// The volume (a sparse file).
    pub volume_bytes: u64,
    /// The cache device (a sparse file).
    pub cache_bytes: u64,
    /// `zfs_arc_max`.
    pub arc_max_bytes: u64,
}

impl DemoSizes {
    /// The smallest demo pool that works (a 4 MiB volume and cache device, a 1 MiB ARC),
    /// for tests.
    pub const TINY: DemoSizes = DemoSizes {
        volume_bytes: 4 << 20,
        cache_bytes: 4 << 20,
        arc_max_bytes: 1 << 20,
    };
}

impl Default for DemoSizes {
    fn default() -> DemoSizes {
        DemoSizes {
            volume_bytes: 1 << 30,
            cache_bytes: 256 << 20,
            arc_max_bytes: 64 << 20,
        }
    }
}

/// Creates a demo pool in `state_dir`: one file-backed volume `vol0` and one cache device.
pub fn create_demo(state_dir: &Path, sizes: DemoSizes) -> io::Result<PoolConfig> {
    fs::create_dir_all(state_dir)?;
    let volume = PathBuf::from("vol0.img");
    let cache = PathBuf::from("cache0.img");
    for (path, bytes) in [(&volume, sizes.volume_bytes), (&cache, sizes.cache_bytes)] {
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(state_dir.join(path))?;
        file.set_len(bytes)?;
    }
    let config = PoolConfig {
        name: "demo".to_string(),
        guid: new_guid(),
        arc_max_bytes: sizes.arc_max_bytes,
        volumes: vec![VolumeConfig {
            name: "vol0".to_string(),
            guid: new_guid(),
            backing: volume,
            volblocksize: 16 << 10,
            primarycache: CacheMode::All,
            secondarycache: CacheMode::All,
            readonly: false,
            latency: LatencyModel::default(),
            sync: SyncMode::Standard,
            logbias: LogBias::Latency,
            volsize: None,
            local: BTreeSet::new(),
            s3: None,
            object_size_bytes: None,
            object_grow_bytes: None,
        }],
        cache_devices: vec![CacheDeviceConfig {
            path: cache,
            guid: new_guid(),
        }],
        log_devices: Vec::new(),
    };
    config.save(state_dir)?;
    Ok(config)
}

/// An open pool: the engine and its volumes.
pub struct Pool {
    /// Where its state lives.
    pub state_dir: PathBuf,
    /// Its configuration.
    pub config: PoolConfig,
    /// The engine shared by its volumes.
    pub engine: Arc<Engine>,
    /// Its volumes, in configuration order.
    pub volumes: Vec<Arc<Volume>>,
    /// Cache devices that could not be used (foreign, unreadable), with the reason: the
    /// pool serves without them.
    pub refused_devices: Vec<String>,
    /// The cache devices of `pool.json` not in use now, by guid, with why: those refused
    /// at open, and at each later change of the configuration (`larch status` lists them).
    pub unused_devices: Mutex<BTreeMap<u64, String>>,
    /// Cache devices formatted at open although their logs were valid, with the reason
    /// (an older image of the device: see [`L2_SEQUENCES_FILE`]); they serve empty.
    pub formatted_devices: Vec<String>,
    /// Saved tunables (`tunables.json`) that were refused, with the reason.
    pub refused_tunables: Vec<String>,
    /// Records replayed from the intent log at open (`None`: no log device, or a new one).
    pub log_replayed: Option<u64>,
    /// Held while the running pool's configuration changes (`pool.json`, `tunables.json`
    /// and what the engine runs with), so that requests to the daemon and its polling of
    /// the files apply one change at a time. It holds `true` once the pool is closing:
    /// no change applies after that ([`Pool::close`] waits for the one in flight).
    pub config_lock: Mutex<bool>,
    /// This process's hold of the pool, for as long as it is open.
    _lock: PoolLock,
    /// The locks on its volumes' backing files (see `lock_backing`).
    _backing_locks: Vec<fs::File>,
}

/// Whether both header slots of a device are all zeroes: a log that larch invalidated
/// (or never wrote), which it may format again; anything else unreadable is refused.
pub fn headers_are_blank(path: &Path) -> bool {
    let mut buf = vec![0u8; 2 * larch_format::HEADER_SLOT_BYTES as usize];
    fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut buf))
        .is_ok_and(|()| buf.iter().all(|&b| b == 0))
}

/// Whether the device at `path` has a valid header of this pool's cache device
/// `device_guid` (so that formatting it destroys nothing but that device's cache).
fn header_is_ours(path: &Path, pool_guid: u64, device_guid: u64) -> bool {
    use larch_io::BlockDevice;
    let Ok(dev) = larch_io::FileDevice::open(path, &larch_io::FileOptions::default()) else {
        return false;
    };
    larch_l2::read_header(&dev).is_ok_and(|read| {
        larch_l2::validate_header(
            &read.header,
            dev.len_bytes(),
            Some((pool_guid, device_guid)),
        )
        .is_ok()
    })
}

/// The newest header sequence on the device at `path` when it is this pool's cache device
/// `device_guid` and that sequence is below `recorded`, the one the pool saw it reach: an
/// older image of the device (restored from a snapshot or a copy), whose log lacks the
/// tombstones of the blocks overwritten since, so it must not be rebuilt.
fn older_image(path: &Path, pool_guid: u64, device_guid: u64, recorded: u64) -> Option<u64> {
    use larch_io::BlockDevice;
    let dev = larch_io::FileDevice::open(path, &larch_io::FileOptions::default()).ok()?;
    let read = larch_l2::read_header(&dev).ok()?;
    larch_l2::validate_header(
        &read.header,
        dev.len_bytes(),
        Some((pool_guid, device_guid)),
    )
    .ok()?;
    (read.header.sequence < recorded).then_some(read.header.sequence)
}

/// A cache device of `pool.json` that [`add_listed_cache_device`] added.
struct Added {
    device: Arc<crate::CacheDevice>,
    /// Why it was formatted although its log was valid, if it was.
    formatted: Option<String>,
}

/// Adds the cache device `d` of `pool.json` to the engine: formatted when `format_cache`,
/// when `distrust` (the pool recorded that its log missed writes), when its headers are
/// blank or when its header is older than `recorded` (the sequence the pool saw it reach,
/// [`L2_SEQUENCES_FILE`]), otherwise opened and rebuilt. A device to format is left alone
/// when what is at its path does not carry its header. `Err` says why it is not in use.
fn add_listed_cache_device(
    engine: &Arc<Engine>,
    state_dir: &Path,
    pool_guid: u64,
    d: &CacheDeviceConfig,
    distrust: bool,
    format_cache: bool,
    recorded: Option<u64>,
) -> Result<Added, String> {
    let path = resolve(state_dir, &d.path);
    let blank = headers_are_blank(&path);
    if distrust && !blank && !format_cache && !header_is_ours(&path, pool_guid, d.guid) {
        // Its log must not be rebuilt, and what is at its path now is not this pool's
        // device (a renamed disk, another pool's): formatting it could destroy someone's
        // data. Left out until the device itself is back.
        return Err(format!(
            "{}: cache device {:#x} is to be formatted (its log missed writes), but the \
             device there now does not carry its header; not touched",
            path.display(),
            d.guid
        ));
    }
    let older = match recorded {
        Some(recorded) if !(format_cache || distrust || blank) => {
            older_image(&path, pool_guid, d.guid, recorded).map(|found| {
                format!(
                    "{}: cache device {:#x} is an older image of itself (header sequence \
                     {found}, the pool saw it reach {recorded}): its log may serve blocks \
                     overwritten since, so it is formatted, not rebuilt",
                    path.display(),
                    d.guid
                )
            })
        }
        _ => None,
    };
    let create = format_cache || distrust || blank || older.is_some();
    let device = engine
        .add_cache_device(&path, pool_guid, d.guid, create)
        .map_err(|err| err.to_string())?;
    if let Some(why) = &older {
        eprintln!("larch: {why}");
    }
    Ok(Added {
        device,
        formatted: older,
    })
}

/// Records that the cache devices `guids` must be formatted at the next open, not rebuilt
/// ([`DISTRUSTED_FILE`]): their logs may hold copies that a change made while the pool
/// was stopped superseded (a volume shrunk on its files).
pub(crate) fn distrust_cache_devices(state_dir: &Path, guids: &[u64]) -> io::Result<()> {
    update_distrusted(state_dir, |list| add_guids(list, guids))
}

/// Drops the record of the cache device `guid` ([`L2_SEQUENCES_FILE`]): it left the pool.
pub(crate) fn drop_l2_sequence(state_dir: &Path, guid: u64) -> io::Result<()> {
    update_l2_sequences(state_dir, |sequences| {
        sequences.remove(&guid);
    })
}

/// The sequence each added device has reached (formatted: the new format's), to record.
fn reached(added: &[Arc<crate::CacheDevice>]) -> Vec<(u64, Option<u64>)> {
    added
        .iter()
        .map(|device| (device.guid, device.sequence_reached()))
        .collect()
}

/// A state-directory record [`Pool::apply_cache_config`] needs for the devices it is about
/// to add: not read when there are none; when it cannot be read, none is added (`new` is
/// emptied, and `done` says why).
fn read_unless_none_new<T: Default>(
    new: &mut Vec<&CacheDeviceConfig>,
    done: &mut Vec<String>,
    file: &str,
    read: impl FnOnce() -> io::Result<T>,
) -> T {
    if new.is_empty() {
        return T::default();
    }
    read().unwrap_or_else(|err| {
        done.push(format!(
            "cache devices not added: {file} cannot be read: {err}"
        ));
        new.clear();
        T::default()
    })
}

/// The records a log device holds for the next replay, read without writing anything;
/// `None` when it cannot be read.
pub fn log_records_to_replay(path: &Path) -> Option<u64> {
    let options = larch_io::FileOptions {
        read_only: true,
        ..larch_io::FileOptions::default()
    };
    larch_io::FileDevice::open(path, &options)
        .ok()
        .and_then(|dev| larch_zil::describe(&dev).ok())
        .map(|log| log.records_to_replay)
}

/// Whether both header slots of a log device are all zeroes (never written).
pub fn log_is_blank(path: &Path) -> bool {
    let mut buf = vec![0u8; 2 * larch_format::zil::ZIL_HEADER_SLOT_BYTES as usize];
    fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut buf))
        .is_ok_and(|()| buf.iter().all(|&b| b == 0))
}

impl Pool {
    /// Opens the pool of a state directory: volumes at once, cache devices rebuilding in
    /// the background. `format_cache` formats the cache devices instead (a new pool).
    /// Fails, touching nothing, while another process has the pool open ([`PoolLock`]).
    pub fn open(state_dir: &Path, format_cache: bool) -> io::Result<Pool> {
        // A directory without a pool gets that error, not a lock file.
        PoolConfig::load(state_dir)?;
        let lock = PoolLock::acquire(state_dir)?;
        Pool::open_locked(state_dir, format_cache, lock)
    }

    /// [`Pool::open`] with the pool's lock already taken (so that a caller can create the
    /// pool under it first).
    pub fn open_locked(state_dir: &Path, format_cache: bool, lock: PoolLock) -> io::Result<Pool> {
        let config = PoolConfig::load(state_dir)?;
        config.validate().map_err(io::Error::other)?;
        let engine = Engine::new(config.arc_max_bytes);
        // Read first: the events of this open (rebuilds begun, leases taken) are numbered
        // after the file's.
        let events_file = state_dir.join(crate::events::EVENTS_FILE);
        match engine.events.open_file(state_dir) {
            Ok(0) => {}
            Ok(skipped) => eprintln!(
                "larch: {}: {skipped} lines skipped (torn or damaged); the file is written \
                 again without them",
                events_file.display()
            ),
            Err(err) => eprintln!("larch: {}: {err}", events_file.display()),
        }
        engine.events.record(EventKind::PoolOpened);
        // Saved tunables apply before any cache device opens: some decide how it opens.
        let refused_tunables = match crate::tunables::load(state_dir) {
            Ok(saved) => crate::tunables::apply(&engine.tunables, &saved),
            Err(err) => vec![format!("{}: {err}", crate::tunables::TUNABLES_FILE)],
        };
        let (volumes, backing_locks) = open_volumes(state_dir, &config, &engine)?;
        // Volumes whose backing store failed a TXG in an earlier run stay failed, their lost
        // blocks unreadable, until the operator clears the record; failures from now on
        // are recorded as they happen.
        for failure in read_failed_volumes(state_dir)? {
            if let Err(why) = engine.restore_volume_failure(&failure) {
                // A volume removed from pool.json by hand: nothing of it is served.
                eprintln!("larch: {FAILED_VOLUMES_FILE}: {why}; ignored");
            }
        }
        let sink_dir = state_dir.to_path_buf();
        engine.set_volume_failure_sink(Box::new(move |failure| {
            record_failed_volume(&sink_dir, failure)
        }));
        let log_replayed = attach_logs(state_dir, &config, &engine)?;
        // Cache devices whose logs the engine could not empty when it had to are formatted
        // (see `larch_engine::coherence`, rule 4), and so are all after a replay that
        // applied records (above) and those an earlier start could not open (rule 5); the
        // record is dropped once they are.
        let distrusted = read_distrusted(state_dir)?;
        let sink_dir = state_dir.to_path_buf();
        engine.set_distrust_sink(Box::new(move |guid| {
            update_distrusted(&sink_dir, |guids| add_guids(guids, &[guid]))
        }));
        // The header sequence the pool saw each device reach: an older image of a device
        // is formatted (see `L2_SEQUENCES_FILE`).
        let sequences = read_l2_sequences(state_dir)?;
        let mut refused_devices = Vec::new();
        let mut unused_devices = BTreeMap::new();
        let mut formatted_devices = Vec::new();
        let mut added = Vec::new();
        let mut changes = RecordChanges::default();
        for d in &config.cache_devices {
            let distrust = distrusted.contains(&d.guid);
            let recorded = sequences.get(&d.guid).copied();
            let result = add_listed_cache_device(
                &engine,
                state_dir,
                config.guid,
                d,
                distrust,
                format_cache,
                recorded,
            );
            match result {
                Ok(Added { device, formatted }) => {
                    changes.note(d.guid, distrust, true);
                    formatted_devices.extend(formatted);
                    added.push(device);
                }
                Err(why) => {
                    changes.note(d.guid, distrust, false);
                    unused_devices.insert(d.guid, why.clone());
                    refused_devices.push(why);
                }
            }
        }
        // Written before any volume is served: no write happens before the record.
        changes.record(state_dir)?;
        // Each added device's record is what it has reached now (a formatted one starts
        // again from its new header); devices no longer in the pool have none. Devices
        // missing now keep theirs, to be checked when they are back.
        let reached = reached(&added);
        update_l2_sequences(state_dir, |sequences| {
            sequences.retain(|guid, _| config.cache_devices.iter().any(|d| d.guid == *guid));
            set_sequences(sequences, &reached);
        })?;
        Ok(Pool {
            state_dir: state_dir.to_path_buf(),
            config,
            engine,
            volumes,
            refused_devices,
            unused_devices: Mutex::new(unused_devices),
            formatted_devices,
            refused_tunables,
            log_replayed,
            config_lock: Mutex::new(false),
            _lock: lock,
            _backing_locks: backing_locks,
        })
    }

    /// Brings the running engine's cache devices in line with `config` (as `larch cache
    /// add/remove` left it): adds new devices, and devices of `pool.json` that are not in
    /// use (missing at open, and back now), by the rules of [`Pool::open`]; removes
    /// dropped ones. Returns what it did.
    pub fn apply_cache_config(&self, config: &PoolConfig) -> Vec<String> {
        let mut done = Vec::new();
        let running = self.engine.devices();
        let mut new: Vec<&CacheDeviceConfig> = (config.cache_devices.iter())
            .filter(|d| {
                !running
                    .iter()
                    .any(|r| r.guid == d.guid && r.state() != crate::DeviceState::Removed)
            })
            .collect();
        // A device the pool must format (its log missed writes: it was missing when the
        // pool opened, say) is formatted here as at open. Rebuilt instead, its log would
        // bring back copies of blocks overwritten while it was away.
        let distrusted = read_unless_none_new(&mut new, &mut done, DISTRUSTED_FILE, || {
            read_distrusted(&self.state_dir)
        });
        // And so is an older image of a device, as at open.
        let sequences = read_unless_none_new(&mut new, &mut done, L2_SEQUENCES_FILE, || {
            read_l2_sequences(&self.state_dir)
        });
        let mut changes = RecordChanges::default();
        let mut added = Vec::new();
        for d in new {
            let path = resolve(&self.state_dir, &d.path);
            let distrust = distrusted.contains(&d.guid);
            let result = add_listed_cache_device(
                &self.engine,
                &self.state_dir,
                config.guid,
                d,
                distrust,
                false,
                sequences.get(&d.guid).copied(),
            );
            changes.note(d.guid, distrust, result.is_ok());
            let was_unused = {
                let mut unused = self
                    .unused_devices
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                match &result {
                    Ok(_) => unused.remove(&d.guid),
                    Err(why) => unused.insert(d.guid, why.clone()),
                }
            };
            if result.is_ok() {
                let device = path.display().to_string();
                self.engine.events.record(match was_unused {
                    // Listed but not in use (missing or unreadable until now): back.
                    Some(_) => EventKind::CacheDeviceOnline {
                        device,
                        why: "found again when pool.json changed".to_string(),
                    },
                    None => EventKind::CacheDeviceAdded { device },
                });
            }
            match result {
                Ok(Added {
                    device,
                    formatted: Some(why),
                }) => {
                    added.push(device);
                    done.push(format!(
                        "cache device {} added, formatted: {why}",
                        path.display()
                    ));
                }
                Ok(Added { device, .. }) => {
                    added.push(device);
                    done.push(format!("cache device {} added", path.display()));
                }
                Err(why) => done.push(format!("cache device not used: {why}")),
            }
        }
        if let Err(err) = changes.record(&self.state_dir) {
            done.push(format!("cache devices: {err}"));
        }
        // A device taken out of pool.json is no longer "not used": it is not the pool's.
        self.unused_devices
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|guid, _| config.cache_devices.iter().any(|d| d.guid == *guid));
        let mut dropped = Vec::new();
        for r in running {
            let wanted = config.cache_devices.iter().any(|d| d.guid == r.guid);
            if !wanted && r.state() != crate::DeviceState::Removed {
                self.engine.remove_cache_device(r.index);
                dropped.push(r.guid);
                done.push(format!("cache device {} removed", r.path.display()));
                self.engine.events.record(EventKind::CacheDeviceRemoved {
                    device: r.path.display().to_string(),
                });
            }
        }
        // Added devices are recorded at what they reached (a formatted one from its new
        // header), removed ones are no longer recorded.
        if !(added.is_empty() && dropped.is_empty()) {
            let reached = reached(&added);
            let recorded = update_l2_sequences(&self.state_dir, |sequences| {
                sequences.retain(|guid, _| !dropped.contains(guid));
                set_sequences(sequences, &reached);
            });
            if let Err(err) = recorded {
                done.push(format!("cache devices: {L2_SEQUENCES_FILE}: {err}"));
            }
        }
        done.extend(self.apply_log_config(config));
        done
    }

    /// Brings the running engine's log device in line with `config`: a new one is
    /// formatted and used from then on; a dropped one is taken out of use after the TXGs
    /// it covered are synced.
    pub fn apply_log_config(&self, config: &PoolConfig) -> Vec<String> {
        let mut done = Vec::new();
        let running = self.engine.log_device();
        let wanted = config.log_devices.first();
        if let Some(log) = &running
            && wanted.is_none_or(|w| w.guid != log.guid)
        {
            match self.engine.detach_log() {
                Ok(_) => {
                    done.push(format!("log device {} removed", log.path.display()));
                    self.engine.events.record(EventKind::LogDeviceRemoved {
                        device: log.path.display().to_string(),
                    });
                }
                Err(why) => {
                    // Nothing else changes while it holds writes no TXG has synced.
                    done.push(format!(
                        "log device {} not removed: {why}",
                        log.path.display()
                    ));
                    return done;
                }
            }
        }
        if let Some(w) = wanted
            && running.as_ref().is_none_or(|r| r.guid != w.guid)
        {
            let path = resolve(&self.state_dir, &w.path);
            // A device added at runtime is formatted: a log of the running pool cannot
            // be waiting on it.
            match self.engine.attach_log(&path, config.guid, w.guid, true) {
                Ok(_) => {
                    done.push(format!("log device {} added", path.display()));
                    self.engine.events.record(EventKind::LogDeviceAdded {
                        device: path.display().to_string(),
                    });
                }
                Err(err) => done.push(format!("log device not used: {err}")),
            }
        }
        done
    }

    /// Brings the served volumes' properties in line with `config` (what `larch set` saved
    /// in `pool.json` while the daemon's HTTP endpoint did not answer, or an edit by hand),
    /// as a change over HTTP would apply them. A `volsize` other than the size served is
    /// only reported: a resize goes through `larch volume set`. Returns what it did.
    pub fn apply_volume_config(&self, config: &PoolConfig) -> Vec<String> {
        let mut done = Vec::new();
        for v in &config.volumes {
            let Some(volume) = self.volumes.iter().find(|s| s.name == v.name) else {
                continue;
            };
            let props = v.props();
            if props != volume.props() {
                let line = match volume.set_properties(props) {
                    Ok(_) => format!(
                        "volume {}: primarycache={} secondarycache={} sync={} logbias={} \
                         (from {CONFIG_FILE})",
                        v.name,
                        props.primarycache.name(),
                        props.secondarycache.name(),
                        props.sync.name(),
                        props.logbias.name()
                    ),
                    Err(err) => format!("volume {}: {err}", v.name),
                };
                done.push(line);
            }
            let served = volume.info().size_bytes;
            if let Some(size) = v.volsize.filter(|&s| s != served) {
                done.push(format!(
                    "volume {}: {CONFIG_FILE} says volsize {size}, but {served} bytes are \
                     served: resize it with `larch volume set`",
                    v.name
                ));
            }
        }
        done
    }

    /// Stops the feeders, commits the logs and flushes every backing store; object-store
    /// volumes give their leases up. A volume whose close fails does not keep the others
    /// from closing: the error has the first failure's kind and every failure's message.
    pub fn close(&self) -> io::Result<()> {
        // A change in flight (a cache device being added over HTTP) ends first, and none
        // starts after: it would act on an engine that has stopped.
        *self
            .config_lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = true;
        self.engine.shutdown();
        // The sequences the devices reached, exactly: an image of one taken before now is
        // then caught at the next open.
        if let Err(err) = self.record_l2_sequences() {
            eprintln!("larch: {L2_SEQUENCES_FILE} not written: {err}");
        }
        let closed = close_volumes(&self.volumes);
        self.engine.events.record(EventKind::PoolClosed);
        self.save_events();
        closed
    }

    /// Writes the events recorded since the last save to the pool's event file (see
    /// [`crate::events`]); a failure is reported, never fatal.
    pub fn save_events(&self) {
        if let Err(err) = self.engine.events.save() {
            eprintln!(
                "larch: {}: {err}",
                self.state_dir.join(crate::events::EVENTS_FILE).display()
            );
        }
    }

    /// Records the header sequence each cache device in use (or faulted) has reached
    /// ([`L2_SEQUENCES_FILE`]): at a clean close, and periodically while the pool runs
    /// (the daemon's housekeeping), so that an older image of a device put back later is
    /// formatted rather than rebuilt. Devices not in the engine keep their record.
    pub fn record_l2_sequences(&self) -> io::Result<()> {
        update_l2_sequences(&self.state_dir, |sequences| {
            // Under the record's lock: a device formatted meanwhile has its record reset
            // after this, never before (see `L2_SEQUENCES_LOCK`).
            let devices = self.engine.devices();
            let in_use: Vec<_> = devices
                .into_iter()
                .filter(|d| d.state() != crate::DeviceState::Removed)
                .collect();
            let reached: Vec<_> = reached(&in_use)
                .into_iter()
                .filter(|(_, sequence)| sequence.is_some())
                .collect();
            set_sequences(sequences, &reached);
        })
    }
}

/// Opens every volume of `config` (its backing file locked, or its object store) and
/// registers it with `engine`. Returns the volumes and the locks on their backing files.
fn open_volumes(
    state_dir: &Path,
    config: &PoolConfig,
    engine: &Arc<Engine>,
) -> io::Result<(Vec<Arc<Volume>>, Vec<fs::File>)> {
    let mut volumes = Vec::new();
    let mut backing_locks = Vec::new();
    for v in &config.volumes {
        let backing = if let Some(url) = v.object_url() {
            let backing = open_object_backing(state_dir, config.guid, v, url)
                .map_err(|e| io::Error::new(e.kind(), format!("volume {}: {e}", v.name)))?;
            if let Some(vol) = backing.object().filter(|vol| !vol.is_follower()) {
                watch_lease(&engine.events, &v.name, vol);
            }
            backing
        } else {
            let path = resolve(state_dir, &v.backing);
            let lock = lock_backing(&path, v.readonly).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("volume {}: {}: {e}", v.name, path.display()),
                )
            })?;
            backing_locks.extend(lock);
            BackingStore::open(&path, v.readonly, v.latency).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("volume {}: {}: {e}", v.name, path.display()),
                )
            })?
        };
        let spec = VolumeSpec {
            guid: v.guid,
            block_bytes: v.volblocksize,
            size_bytes: v.volsize,
            primarycache: v.primarycache,
            secondarycache: v.secondarycache,
            sync: v.sync,
            logbias: v.logbias,
            read_only: v.readonly,
        };
        let follower = backing.object().filter(|vol| vol.is_follower()).cloned();
        let entry = engine
            .add_volume(spec, Arc::new(backing))
            .map_err(|e| io::Error::other(format!("volume {}: {e}", v.name)))?;
        if let Some(vol) = follower {
            follow_commits(engine, &entry, &vol);
        }
        volumes.push(Arc::new(Volume::new(
            v.name.clone(),
            entry,
            Arc::clone(engine),
        )));
    }
    Ok((volumes, backing_locks))
}

/// Attaches the pool's log devices, replaying their logs, after giving the engine the
/// pool's records a replay relies on. Returns the records replayed (`None`: no log
/// device had a log to replay).
fn attach_logs(state_dir: &Path, config: &PoolConfig, engine: &Engine) -> io::Result<Option<u64>> {
    // The pool's own record of the committed TXG (written when the log device cannot
    // record it), then the intent log, replayed before anything is served or any
    // cache device is added (after a replay that applied records, they are formatted:
    // their copies of the replayed blocks may be older).
    let floor = read_committed_txg(state_dir)?;
    let sink_dir = state_dir.to_path_buf();
    engine.set_committed_txg_sink(
        floor,
        Box::new(move |txg| write_committed_txg(&sink_dir, txg)),
    );
    let mut log_replayed = None;
    // A replay that applies records means every cache device is formatted, not rebuilt
    // (rule 5): their logs may hold copies the replayed writes superseded. The log
    // forgets the records at its first TXG commit, which the syncer may make before
    // the devices below are formatted, and a crash in between would find no records
    // and rebuild stale copies. So the pool records first, before the log takes over,
    // that they are to be formatted.
    let cache_guids: Vec<u64> = config.cache_devices.iter().map(|d| d.guid).collect();
    let sink_dir = state_dir.to_path_buf();
    engine.set_replayed_sink(Box::new(move || {
        update_distrusted(&sink_dir, |guids| add_guids(guids, &cache_guids))
    }));
    for l in &config.log_devices {
        let path = resolve(state_dir, &l.path);
        let create = log_is_blank(&path);
        let replayed = engine
            .attach_log(&path, config.guid, l.guid, create)
            .map_err(|e| {
                io::Error::other(format!(
                    "log device: {e} (acknowledged sync writes may be only there; \
                     `larch log remove` drops it and them)"
                ))
            })?;
        if !create {
            log_replayed = Some(replayed);
        }
    }
    Ok(log_replayed)
}

/// Closes the backing store of every volume that may have something to give back (writes
/// to flush, a lease to release), each even when an earlier one failed: a store that is
/// down at shutdown must not leave the other volumes' staged blocks uncommitted and their
/// leases held until they lapse.
fn close_volumes(volumes: &[Arc<Volume>]) -> io::Result<()> {
    let mut first_kind = None;
    let mut messages = Vec::new();
    for v in volumes {
        if v.read_only() && v.backing().object().is_none() {
            continue;
        }
        if let Err(err) = v.backing().close() {
            first_kind.get_or_insert(err.kind());
            messages.push(format!("{}: {err}", v.name));
        }
    }
    match first_kind {
        None => Ok(()),
        Some(kind) => Err(io::Error::new(kind, messages.join("; "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An object-store volume's lease is an event when taken, and each change after
    /// (here its release at a clean stop) too.
    #[test]
    fn the_lease_of_an_object_volume_is_watched_as_events() {
        use object_store::ObjectStore;
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let root = larch_object::layout::Root::new(0x1e45, 16 * 4096, 4096, 4);
        larch_object::create(&store, "vols/a/", "mem://vols/a", &root).unwrap();
        let vol = larch_object::ObjectVolume::open(
            store,
            "vols/a",
            "mem://vols/a",
            "node-a",
            larch_object::LocalState::default(),
            larch_object::Options::default(),
            Box::new(|_| Ok(())),
        )
        .unwrap();
        let events = Arc::new(crate::Events::new());
        watch_lease(&events, "objs", &vol);
        vol.release().unwrap();
        let seen: Vec<EventKind> = events.since(0).into_iter().map(|e| e.kind).collect();
        assert_eq!(
            seen,
            [
                EventKind::LeaseTaken {
                    volume: "objs".into(),
                    token: vol.token(),
                    takeover: false,
                },
                EventKind::LeaseReleased {
                    volume: "objs".into()
                },
            ]
        );
    }

    /// A state file that cannot be written leaves no temporary file behind (a tester's
    /// finding: on a full file system, `analytics.bin.tmp` and `failed-volumes.json.tmp`
    /// stayed), and the file it was to replace is as it was.
    #[test]
    fn a_failed_state_file_write_leaves_no_temporary_file() {
        let dir = std::env::temp_dir().join(format!("larch-state-tmp-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        // A directory in the file's place: the rename over it fails after the write.
        fs::create_dir_all(dir.join("record.json").join("inside")).unwrap();
        let err = write_state_file(&dir, "record.json", b"{}").unwrap_err();
        assert!(err.to_string().contains("record.json"), "{err}");
        assert!(
            !dir.join("record.json.tmp").exists(),
            "the temporary file stayed"
        );
        assert!(dir.join("record.json").join("inside").is_dir());
        write_state_file(&dir, "other.json", b"{}").unwrap();
        assert_eq!(fs::read(dir.join("other.json")).unwrap(), b"{}");
        assert!(!dir.join("other.json.tmp").exists());
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A volume whose close fails (its store is down at shutdown) does not keep the
    /// volumes after it from committing their staged blocks and giving their leases up;
    /// the error names every volume that failed (a reviewer's finding: the loop stopped at
    /// the first failure).
    #[test]
    fn a_failed_close_does_not_keep_the_other_volumes_from_closing() {
        use larch_io::{BlockDevice, FaultyDevice};
        use larch_object::layout::Root;
        use larch_object::{LocalState, ObjectVolume, Options};
        use object_store::ObjectStore;
        use object_store::memory::InMemory;

        const BLOCK: u32 = 4096;
        let engine = Engine::new(1 << 20);
        let volume = |name: &str, guid: u64, backing: BackingStore| {
            let entry = engine
                .add_volume(VolumeSpec::new(guid, BLOCK), Arc::new(backing))
                .unwrap();
            Arc::new(Volume::new(name.into(), entry, Arc::clone(&engine)))
        };
        let failing = |name: &str, guid: u64| {
            let device = Arc::new(FaultyDevice::new(16 * u64::from(BLOCK)));
            device.fail_flushes(true);
            let backing = BackingStore::on_device(
                name,
                device as Arc<dyn BlockDevice>,
                LatencyModel::default(),
            );
            volume(name, guid, backing)
        };
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let root = Root::new(0x1234, 16 * u64::from(BLOCK), BLOCK, 4);
        larch_object::create(&store, "vols/a/", "mem://vols/a", &root).unwrap();
        let open = |node: &str| {
            ObjectVolume::open(
                Arc::clone(&store),
                "vols/a",
                "mem://vols/a",
                node,
                LocalState::default(),
                Options::default(),
                Box::new(|_| Ok(())),
            )
        };
        let object = open("node-a").unwrap();
        // A block staged and not committed yet: the close commits it.
        object.write_at(&[7; BLOCK as usize], 0).unwrap();
        let volumes = [
            failing("down-1", 1),
            volume(
                "object",
                2,
                BackingStore::on_object("mem://vols/a", object, LatencyModel::default()),
            ),
            failing("down-2", 3),
        ];

        let err = close_volumes(&volumes).expect_err("two closes failed");
        let text = err.to_string();
        assert!(
            text.contains("down-1") && text.contains("down-2") && !text.contains("object"),
            "{text}"
        );
        // The object volume's lease was given up (another node takes it at once) and its
        // staged block committed.
        let other = open("node-b").expect("the lease was not given up");
        let mut block = vec![0; BLOCK as usize];
        other.read_at(&mut block, 0).unwrap();
        assert!(block.iter().all(|&b| b == 7), "the staged block was lost");
        other.release().unwrap();
        engine.shutdown();
    }

    #[test]
    fn a_pool_is_open_in_one_place_at_a_time() {
        let dir = std::env::temp_dir().join(format!("larch-pool-lock-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        create_demo(&dir, DemoSizes::TINY).unwrap();
        let pool = Pool::open(&dir, true).unwrap();
        // flock conflicts between open file descriptions, so a second open in this very
        // process is refused as another process's would be.
        let err = Pool::open(&dir, false).err().expect("opened twice");
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        let text = err.to_string();
        assert!(
            text.contains("open in another process")
                && text.contains(&format!("pid {}", std::process::id())),
            "{text}"
        );
        assert!(PoolLock::acquire(&dir).is_err());
        pool.close().unwrap();
        drop(pool);
        // Closed and dropped: free again.
        let lock = PoolLock::acquire(&dir).unwrap();
        drop(lock);
        // Two pools on one backing file: the second is refused while the first runs,
        // unless both volumes are read-only.
        let other = dir.with_extension("other");
        let _ = fs::remove_dir_all(&other);
        let mut config = create_demo(&other, DemoSizes::TINY).unwrap();
        config.volumes[0].backing = fs::canonicalize(dir.join("vol0.img")).unwrap();
        config.save(&other).unwrap();
        let first = Pool::open(&dir, false).unwrap();
        let text = Pool::open(&other, false).err().expect("shared").to_string();
        assert!(
            text.contains("vol0") && text.contains("in use by another running pool"),
            "{text}"
        );
        first.close().unwrap();
        drop(first);
        let second = Pool::open(&other, false).unwrap();
        second.close().unwrap();
        drop(second);
        for dir in [&dir, &other] {
            let mut c = PoolConfig::load(dir).unwrap();
            c.volumes[0].readonly = true;
            c.save(dir).unwrap();
        }
        let first = Pool::open(&dir, false).unwrap();
        let second = Pool::open(&other, false).unwrap();
        first.close().unwrap();
        second.close().unwrap();
        drop((first, second));
        fs::remove_dir_all(&other).unwrap();
        let missing = dir.join("nothing-here");
        assert!(Pool::open(&missing, false).is_err());
        assert!(!missing.join(LOCK_FILE).exists());
        fs::remove_dir_all(&dir).unwrap();
    }
}

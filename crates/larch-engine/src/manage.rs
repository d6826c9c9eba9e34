//! Changes a user makes to a pool with `larch set`, `larch cache add|remove`, `larch log
//! add|remove` and `larch volume set` (a volume's properties: [`volume`]): checked,
//! applied at once to the running pool when there is one, and saved in the state
//! directory (`tunables.json`, `pool.json`). A daemon makes them on requests to its
//! loopback HTTP endpoint; the CLI makes them on the files when no daemon runs. Both
//! go through these functions, so both refuse the same things with the same words.
//!
//! Adding a cache device never overwrites data silently: a device whose header slots
//! are not blank (another pool's cache device, a file system, anything else) is refused
//! unless the user forces it.
//!
//! One file with its unit tests (the code is under 700 lines): the tests open pools and
//! call the private checks (device sizes, headers, same-file) the functions share.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::MutexGuard;

use larch_format::{DevHeaderPhys, HEADER_SLOT_BYTES};

use crate::events::EventKind;
use crate::l2::DeviceState;
use crate::pool::{CONFIG_FILE, CacheDeviceConfig, ConfigLock, Pool, PoolConfig, new_guid};
use crate::tunables;

mod volume;
pub use volume::{
    PropertyDef, VOLUME_PROPERTIES, VolumeProperty, differing_properties, set_volume_properties,
    volume_properties,
};

/// Why a change was not made. Each kind has its HTTP status: 400, 404, 409, 500.
#[derive(Debug, thiserror::Error)]
pub enum ManageError {
    /// The request is wrong in itself: an unknown tunable, a value out of range, a line
    /// that is not `NAME=VALUE`, a relative path.
    #[error("{0}")]
    Invalid(String),
    /// What the request names is not in the pool: a volume.
    #[error("{0}")]
    NotFound(String),
    /// The request is well formed but the pool refuses it: a device that is not blank, a
    /// device already in the pool or not in it, a volume's backing store.
    #[error("{0}")]
    Refused(String),
    /// Reading or writing the state directory or a device failed.
    #[error("{0}")]
    Io(String),
}

/// Where a change goes.
#[derive(Clone, Copy)]
pub enum Target<'a> {
    /// The files of a state directory only: no daemon runs, the next start reads them.
    Files(&'a Path),
    /// A running pool: applied at once and saved in its state directory.
    Running(&'a Pool),
}

impl Target<'_> {
    fn state_dir(&self) -> &Path {
        match self {
            Target::Files(dir) => dir,
            Target::Running(pool) => &pool.state_dir,
        }
    }

    /// Serialises changes: within a running pool (see [`Pool::config_lock`]), and between
    /// processes through the state directory's [`ConfigLock`] (two CLI commands on a
    /// stopped pool, or one beside the daemon).
    fn lock(&self) -> Result<(Option<MutexGuard<'_, bool>>, ConfigLock), ManageError> {
        let inner = match self {
            Target::Files(_) => None,
            // The lock guards a flag only, so a panic while it was held leaves nothing
            // broken.
            Target::Running(pool) => {
                let closing = pool
                    .config_lock
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if *closing {
                    return Err(ManageError::Refused("the pool is shutting down".into()));
                }
                Some(closing)
            }
        };
        let files = ConfigLock::acquire(self.state_dir()).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                // No pool there: the same error as loading it gives.
                self.load()
                    .err()
                    .unwrap_or_else(|| ManageError::Io(e.to_string()))
            } else {
                ManageError::Io(e.to_string())
            }
        })?;
        Ok((inner, files))
    }

    fn load(&self) -> Result<PoolConfig, ManageError> {
        let dir = self.state_dir();
        PoolConfig::load(dir).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => ManageError::Io(format!(
                "no pool in {} ({}: {e})",
                dir.display(),
                dir.join(CONFIG_FILE).display()
            )),
            // Damaged or unreadable: the error says which, and names the file.
            _ => ManageError::Io(e.to_string()),
        })
    }
}

/// Records what a change did as events ([`crate::events`]): in the running pool's log
/// (saved by its owner), or straight in the event file of a stopped pool. Every change of
/// this module records its events here, and so should any other change made to a pool
/// (a volume's property: [`EventKind::PropertyChanged`]). An event file that cannot be
/// written is reported and does not undo the change.
pub fn record_events(target: Target<'_>, kinds: Vec<EventKind>) {
    match target {
        Target::Running(pool) => {
            for kind in kinds {
                pool.engine.events.record(kind);
            }
        }
        Target::Files(dir) => {
            if let Err(err) = crate::events::record_in_file(dir, kinds) {
                eprintln!(
                    "larch: {}: {err}",
                    dir.join(crate::events::EVENTS_FILE).display()
                );
            }
        }
    }
}

/// Splits `NAME=VALUE` (spaces around either side are ignored).
pub fn parse_assignment(text: &str) -> Result<(String, String), ManageError> {
    match text.split_once('=') {
        Some((name, value)) if !name.trim().is_empty() => {
            Ok((name.trim().to_string(), value.trim().to_string()))
        }
        _ => Err(ManageError::Invalid(format!(
            "{text:?}: expected NAME=VALUE"
        ))),
    }
}

/// Sets tunables (`NAME=VALUE` each): all or none. Every value is checked first; then
/// they are saved in `tunables.json` and, on a running pool, applied. Returns everything
/// `tunables.json` now holds.
pub fn set_tunables(
    target: Target<'_>,
    assignments: &[String],
) -> Result<BTreeMap<String, String>, ManageError> {
    if assignments.is_empty() {
        return Err(ManageError::Invalid("nothing to set".to_string()));
    }
    let parsed = assignments
        .iter()
        .map(|a| parse_assignment(a))
        .collect::<Result<Vec<_>, _>>()?;
    let _guard = target.lock()?;
    let dir = target.state_dir();
    let config = target.load()?;
    let io = |e: std::io::Error| {
        ManageError::Io(format!(
            "{}: {e}",
            dir.join(tunables::TUNABLES_FILE).display()
        ))
    };
    let mut saved = tunables::load(dir).map_err(io)?;
    // Tried first on a copy of the values the change applies to (the running pool's, or
    // what a start would have: pool.json's ARC size, then tunables.json), so that a
    // refused value, or two ARC limits that contradict each other or the pool's, change
    // nothing anywhere.
    let scratch = match target {
        Target::Running(pool) => tunables::scratch_copy(&pool.engine.tunables),
        Target::Files(_) => {
            let start = tunables::starting(config.arc_max_bytes);
            tunables::apply(&start, &saved);
            start
        }
    };
    let before = tunables::values(&scratch);
    if let Some((_, why)) = tunables::apply_in_turn(&scratch, &parsed)
        .into_iter()
        .next()
    {
        return Err(ManageError::Invalid(why));
    }
    let changed = tunables::change_events(&before, &tunables::values(&scratch));
    for (name, value) in &parsed {
        saved.insert(name.clone(), value.clone());
    }
    tunables::save(dir, &saved).map_err(io)?;
    if let Target::Running(pool) = target
        && let Some((_, why)) = tunables::apply_in_turn(&pool.engine.tunables, &parsed)
            .into_iter()
            .next()
    {
        // Not reached: the copy took the same values under the same lock.
        return Err(ManageError::Invalid(format!(
            "saved, but the running pool refused it: {why}"
        )));
    }
    record_events(target, changed);
    Ok(saved)
}

/// Adds a cache device (an absolute path to an existing file or block device). It must be
/// blank (both header slots zero) unless `force`, which zeroes them. A running pool
/// formats it and feeds it at once; otherwise the next start does. Returns what was done.
pub fn add_cache_device(
    target: Target<'_>,
    path: &Path,
    force: bool,
) -> Result<String, ManageError> {
    if !path.is_absolute() {
        return Err(ManageError::Invalid(format!(
            "{}: give an absolute path",
            path.display()
        )));
    }
    let _guard = target.lock()?;
    let dir = target.state_dir();
    let mut config = target.load()?;
    if config
        .cache_devices
        .iter()
        .any(|d| same_file(dir, &d.path, path))
    {
        return Err(ManageError::Refused(format!(
            "{} is already a cache device of this pool",
            path.display()
        )));
    }
    if let Some(v) = config
        .volumes
        .iter()
        .find(|v| same_file(dir, &v.backing, path))
    {
        return Err(ManageError::Refused(format!(
            "{} is the backing store of volume {}",
            path.display(),
            v.name
        )));
    }
    // Formatting the pool's own log as a cache device would lose the acknowledged sync
    // writes it holds (--force included: this is never what the user means).
    if config
        .log_devices
        .iter()
        .any(|l| same_file(dir, &l.path, path))
    {
        return Err(ManageError::Refused(format!(
            "{} is the pool's log device",
            path.display()
        )));
    }
    check_file_or_block_device(path)?;
    // Held while the headers are looked at and zeroed: a file another running pool uses
    // is refused (--force included) before anything touches it.
    let file_lock = hold_device(path)?;
    check_cache_device_size(path)?;
    let found = not_blank(path, config.guid)?.map(|contents| {
        format!(
            "{} {contents}; refusing to overwrite it (--force formats it anyway)",
            path.display()
        )
    });
    clear_headers(path, found, force)?;
    // A running pool's engine takes the lock again for as long as it uses the device (a
    // second lock of this process would conflict with this one).
    drop(file_lock);
    let guid = new_guid();
    let added = match target {
        Target::Files(_) => None,
        Target::Running(pool) => Some(
            pool.engine
                .add_cache_device(path, config.guid, guid, true)
                .map_err(|e| {
                    ManageError::Refused(format!("{} cannot be used: {e}", path.display()))
                })?,
        ),
    };
    config.cache_devices.push(CacheDeviceConfig {
        path: path.to_path_buf(),
        guid,
    });
    if let Err(err) = save(dir, &config) {
        if let (Target::Running(pool), Some(device)) = (target, added) {
            pool.engine.remove_cache_device(device.index);
        }
        return Err(err);
    }
    let device = path.display().to_string();
    record_events(target, vec![EventKind::CacheDeviceAdded { device }]);
    Ok(format!("cache device {} added", path.display()))
}

/// Removes a cache device (as it was added, or any path to the same file). A running pool
/// stops reading and feeding it at once and invalidates its log. Returns what was done.
pub fn remove_cache_device(target: Target<'_>, path: &Path) -> Result<String, ManageError> {
    if !path.is_absolute() {
        return Err(ManageError::Invalid(format!(
            "{}: give an absolute path",
            path.display()
        )));
    }
    let _guard = target.lock()?;
    let dir = target.state_dir();
    let mut config = target.load()?;
    let Some(at) = config
        .cache_devices
        .iter()
        .position(|d| same_file(dir, &d.path, path))
    else {
        return Err(ManageError::Refused(format!(
            "{} is not a cache device of this pool",
            path.display()
        )));
    };
    let removed = config.cache_devices.remove(at);
    save(dir, &config)?;
    if let Target::Running(pool) = target {
        let running = pool.engine.devices();
        let device = running
            .iter()
            .find(|d| d.guid == removed.guid && d.state() != DeviceState::Removed);
        if let Some(device) = device {
            pool.engine.remove_cache_device(device.index);
        }
    }
    // Its record goes with it (a device added again is formatted under a new guid).
    crate::pool::drop_l2_sequence(dir, removed.guid).map_err(|e| {
        ManageError::Io(format!(
            "cache device {} removed, but {}: {e}",
            path.display(),
            crate::pool::L2_SEQUENCES_FILE
        ))
    })?;
    let device = path.display().to_string();
    record_events(target, vec![EventKind::CacheDeviceRemoved { device }]);
    Ok(format!("cache device {} removed", path.display()))
}

/// Adds the pool's log device (an absolute path to an existing file or block device; at
/// most one per pool). It must be blank unless `force`, which zeroes its head. A running
/// pool formats it and logs sync writes there at once. Returns what was done.
pub fn add_log_device(target: Target<'_>, path: &Path, force: bool) -> Result<String, ManageError> {
    if !path.is_absolute() {
        return Err(ManageError::Invalid(format!(
            "{}: give an absolute path",
            path.display()
        )));
    }
    let _guard = target.lock()?;
    let dir = target.state_dir();
    let mut config = target.load()?;
    if let Some(l) = config.log_devices.first() {
        return Err(ManageError::Refused(format!(
            "the pool has a log device already ({}); remove it first",
            l.path.display()
        )));
    }
    let in_use = config
        .cache_devices
        .iter()
        .any(|d| same_file(dir, &d.path, path))
        || config
            .volumes
            .iter()
            .any(|v| same_file(dir, &v.backing, path));
    if in_use {
        return Err(ManageError::Refused(format!(
            "{} is in use by the pool",
            path.display()
        )));
    }
    check_file_or_block_device(path)?;
    check_log_device_size(path)?;
    // Held while the headers are looked at and zeroed, as for a cache device.
    let file_lock = hold_device(path)?;
    let found = (!crate::pool::log_is_blank(path)).then(|| {
        format!(
            "{} is not blank (its first 8 KiB hold data); --force formats it",
            path.display()
        )
    });
    clear_headers(path, found, force)?;
    drop(file_lock);
    // The configuration names the device before the running pool acknowledges a single
    // sync write from it: a crash in between must find it at the next start (blank, so it
    // is formatted then), not forget a device that holds acknowledged writes.
    let guid = new_guid();
    config.log_devices.push(crate::pool::LogDeviceConfig {
        path: path.to_path_buf(),
        guid,
    });
    save(dir, &config)?;
    if let Target::Running(pool) = target
        && let Err(e) = pool.engine.attach_log(path, config.guid, guid, true)
    {
        let why = format!("{} cannot be used: {e}", path.display());
        config.log_devices.pop();
        return Err(match save(dir, &config) {
            Ok(()) => ManageError::Refused(why),
            Err(err) => ManageError::Refused(format!(
                "{why}; and the pool's configuration, which names it now, could not be \
                 restored: {err}"
            )),
        });
    }
    let device = path.display().to_string();
    record_events(target, vec![EventKind::LogDeviceAdded { device }]);
    Ok(format!("log device {} added", path.display()))
}

/// Removes the pool's log device. A running pool first stops logging to it and syncs and
/// commits what it covered, and only then saves the configuration without it, so no
/// crash can leave acknowledged sync writes only on a device the pool forgot. For a
/// stopped pool, records the device still holds are not replayed at the next start.
pub fn remove_log_device(target: Target<'_>) -> Result<String, ManageError> {
    remove_log_device_with(target, false)
}

/// [`remove_log_device`] of a stopped pool whose log holds acknowledged writes not yet
/// replayed (after a crash), discarding them (`larch log remove --force`).
pub fn remove_log_device_discarding(target: Target<'_>) -> Result<String, ManageError> {
    remove_log_device_with(target, true)
}

fn remove_log_device_with(target: Target<'_>, discard: bool) -> Result<String, ManageError> {
    let _guard = target.lock()?;
    let dir = target.state_dir();
    let mut config = target.load()?;
    let Some(removed) = config.log_devices.pop() else {
        return Err(ManageError::Refused("the pool has no log device".into()));
    };
    if let Target::Running(pool) = target {
        pool.engine
            .detach_log()
            .map_err(|e| ManageError::Refused(e.to_string()))?;
    } else if !discard {
        // A stopped pool's log may hold sync writes that were acknowledged and never
        // reached their volumes (the pool was killed): only the next start replays them,
        // and without the device they would be gone. (A running pool replayed its log
        // at open, and detach_log syncs before letting go.)
        let path = if removed.path.is_absolute() {
            removed.path.clone()
        } else {
            dir.join(&removed.path)
        };
        let pending = crate::log_records_to_replay(&path).unwrap_or(0);
        if pending > 0 {
            return Err(ManageError::Refused(format!(
                "the log device {} holds {pending} acknowledged writes not yet replayed (the \
                 pool was not stopped cleanly): start the pool once (`larch serve`, then stop \
                 it) so they reach their volumes, then remove it; or remove it with --force, \
                 which discards those writes",
                path.display()
            )));
        }
    }
    save(dir, &config)?;
    let device = removed.path.display().to_string();
    record_events(target, vec![EventKind::LogDeviceRemoved { device }]);
    Ok(format!("log device {} removed", removed.path.display()))
}

/// Refuses what cannot be a cache device, a log device or a volume's backing store: a
/// path where nothing is, or something that is neither a regular file nor a block device
/// (a directory, `/dev/null`).
pub fn check_file_or_block_device(path: &Path) -> Result<(), ManageError> {
    match fs::metadata(path) {
        Ok(m) if m.is_file() || m.file_type().is_block_device() => Ok(()),
        Ok(_) => Err(ManageError::Invalid(format!(
            "{} is neither a file nor a block device",
            path.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(ManageError::Invalid(format!(
            "{} does not exist (give --size to create a file)",
            path.display()
        ))),
        Err(e) => Err(ManageError::Io(format!("{}: {e}", path.display()))),
    }
}

/// Why `path` cannot be the backing store of a new volume of the pool in `dir` (`None`
/// when it can): it is one of the pool's cache or log devices, another volume's backing
/// store while either volume is writable, or it carries a larch cache-device or log-device
/// header (any pool's: the volume and the device would overwrite each other).
pub fn backing_in_use(
    dir: &Path,
    config: &PoolConfig,
    path: &Path,
    readonly: bool,
) -> Option<String> {
    let device = config
        .cache_devices
        .iter()
        .map(|d| &d.path)
        .chain(config.log_devices.iter().map(|l| &l.path))
        .any(|d| same_file(dir, d, path));
    if device {
        return Some(format!(
            "{} is a cache or log device of this pool",
            path.display()
        ));
    }
    if let Some(kind) = larch_device_kind(path) {
        return Some(format!(
            "{} holds a larch {kind} header: it is (or was) a {kind} of a pool, which a volume \
             on it would overwrite; use another file, or, if no pool uses it any more, zero \
             its first 8 KiB (`dd if=/dev/zero of={} bs=4K count=2 conv=notrunc`)",
            path.display(),
            path.display()
        ));
    }
    let volume = config
        .volumes
        .iter()
        .find(|v| same_file(dir, &v.backing, path) && !(readonly && v.readonly))?;
    Some(format!(
        "{} is the backing store of volume {} (volumes share a backing store only when all are read-only)",
        path.display(),
        volume.name
    ))
}

fn save(dir: &Path, config: &PoolConfig) -> Result<(), ManageError> {
    (config.validate()).map_err(|e| ManageError::Invalid(e.to_string()))?;
    config
        .save(dir)
        .map_err(|e| ManageError::Io(format!("saving {}: {e}", dir.join(CONFIG_FILE).display())))
}

/// Whether `entry` (from `pool.json`, relative to the state directory) and `path` name the
/// same file or block device: the same inode, or the same device number for two device
/// nodes; lexically equal absolute paths when either does not exist.
fn same_file(state_dir: &Path, entry: &Path, path: &Path) -> bool {
    let resolved = state_dir.join(entry);
    match (fs::metadata(&resolved), fs::metadata(path)) {
        (Ok(a), Ok(b)) if a.file_type().is_block_device() && b.file_type().is_block_device() => {
            a.rdev() == b.rdev()
        }
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => absolute(&resolved) == path,
    }
}

fn absolute(path: &Path) -> PathBuf {
    if path.is_absolute() {
        return path.to_path_buf();
    }
    std::env::current_dir()
        .map(|cwd| cwd.join(path))
        .unwrap_or_else(|_| path.to_path_buf())
}

/// The lock a cache or log device's file is looked at and zeroed under
/// ([`crate::files::lock_device`]): refused when another process holds it.
fn hold_device(path: &Path) -> Result<Option<fs::File>, ManageError> {
    crate::files::lock_device(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock => ManageError::Refused(e.to_string()),
        _ => ManageError::Io(e.to_string()),
    })
}

/// Refuses a device too small for a cache device's ring, saying how large it must be
/// (before, this was found only when the pool formatted it: at once on a running pool,
/// at the next start otherwise).
fn check_cache_device_size(path: &Path) -> Result<(), ManageError> {
    let sector_bytes = larch_l2::CreateOptions::default().sector_bytes;
    check_device_size(
        path,
        "a cache device",
        |bytes| match larch_l2::Geometry::for_device(bytes, sector_bytes) {
            Err(larch_l2::L2Error::DeviceTooSmall { min_bytes, .. }) => Some(min_bytes),
            _ => None,
        },
    )
}

/// Refuses a device too small for a log device's ring. Before, a stopped pool took it,
/// and its next start failed on it (every volume unserved until `larch log remove`).
fn check_log_device_size(path: &Path) -> Result<(), ManageError> {
    let sector_bytes = larch_zil::CreateOptions::default().sector_bytes;
    check_device_size(
        path,
        "a log device",
        |bytes| match larch_zil::Geometry::for_device(bytes, sector_bytes) {
            Err(larch_zil::LogError::DeviceTooSmall { min_bytes, .. }) => Some(min_bytes),
            _ => None,
        },
    )
}

/// Refuses the file or block device at `path` as too small for `what` when `min_bytes`
/// of its size names the least it needs.
fn check_device_size(
    path: &Path,
    what: &str,
    min_bytes: impl FnOnce(u64) -> Option<u64>,
) -> Result<(), ManageError> {
    use std::io::{Seek, SeekFrom};
    let bytes = fs::File::open(path)
        .and_then(|mut f| f.seek(SeekFrom::End(0)))
        .map_err(|e| ManageError::Io(format!("reading the size of {}: {e}", path.display())))?;
    match min_bytes(bytes) {
        Some(min_bytes) => Err(ManageError::Refused(format!(
            "{} has {bytes} bytes: too small for {what}, which needs at least {min_bytes} ({})",
            path.display(),
            crate::units::format_size(min_bytes)
        ))),
        None => Ok(()),
    }
}

/// The first `2 * HEADER_SLOT_BYTES` of a device (both header slots of a cache or log
/// device), and how many of them it has (fewer when it is smaller).
fn read_header_slots(path: &Path) -> std::io::Result<(Vec<u8>, usize)> {
    let mut slots = vec![0u8; 2 * HEADER_SLOT_BYTES as usize];
    let mut file = fs::File::open(path)?;
    let mut filled = 0;
    while filled < slots.len() {
        match file.read(&mut slots[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok((slots, filled))
}

/// Which larch device a header slot of `path` says it is ("cache device" or "log
/// device"), by the magic at the head of either slot (a damaged header still names its
/// kind); `None` when neither does or it cannot be read.
fn larch_device_kind(path: &Path) -> Option<&'static str> {
    let (slots, filled) = read_header_slots(path).ok()?;
    slots[..filled]
        .chunks_exact(HEADER_SLOT_BYTES as usize)
        .find_map(|slot| {
            let magic = u64::from_le_bytes(slot[..8].try_into().expect("8 bytes"));
            match magic {
                larch_format::HEADER_MAGIC => Some("cache device"),
                larch_format::zil::ZIL_HEADER_MAGIC => Some("log device"),
                _ => None,
            }
        })
}

/// What a device holds when its header slots are not all zero (`None` when blank).
fn not_blank(path: &Path, pool_guid: u64) -> Result<Option<String>, ManageError> {
    let (slots, filled) = read_header_slots(path)
        .map_err(|e| ManageError::Io(format!("reading {}: {e}", path.display())))?;
    if filled < slots.len() {
        return Err(ManageError::Refused(format!(
            "{} has {filled} bytes: too small for a cache device",
            path.display()
        )));
    }
    if slots.iter().all(|&b| b == 0) {
        return Ok(None);
    }
    let header = slots
        .chunks(HEADER_SLOT_BYTES as usize)
        .find_map(|slot| DevHeaderPhys::decode(slot).ok());
    Ok(Some(match header {
        Some(h) if h.pool_guid == pool_guid => format!(
            "holds a cache device of this pool (device guid {:#x}) that pool.json does not list",
            h.device_guid
        ),
        Some(h) => format!(
            "holds a larch cache device of another pool (pool guid {:#x})",
            h.pool_guid
        ),
        None => format!(
            "is not blank: its first {} KiB hold data that is not a larch header",
            slots.len() / 1024
        ),
    }))
}

/// Zeroes the headers of a device about to be formatted when something is on it (`found`:
/// the refusal, saying what) and `force` says to; refused otherwise. Nothing on it: nothing
/// to do.
fn clear_headers(path: &Path, found: Option<String>, force: bool) -> Result<(), ManageError> {
    match found {
        None => Ok(()),
        Some(refusal) if !force => Err(ManageError::Refused(refusal)),
        Some(_) => zero_headers(path),
    }
}

/// Zeroes both header slots (durably): the pool formats the device when it opens it.
fn zero_headers(path: &Path) -> Result<(), ManageError> {
    let zeroes = vec![0u8; 2 * HEADER_SLOT_BYTES as usize];
    fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|f| f.write_all_at(&zeroes, 0).and_then(|()| f.sync_all()))
        .map_err(|e| ManageError::Io(format!("zeroing the headers of {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::{DemoSizes, create_demo};

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("larch-manage-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    /// A change that reaches a pool after its close began is refused: it would act on an
    /// engine that has stopped (a review's finding: a cache device added over HTTP during
    /// the daemon's shutdown raced the engine's).
    #[test]
    fn a_closing_pool_takes_no_change() {
        let dir = demo("closing");
        let pool = Pool::open(&dir, true).unwrap();
        pool.close().unwrap();
        let err =
            set_tunables(Target::Running(&pool), &["l2arc_write_max=1M".to_string()]).unwrap_err();
        assert!(
            matches!(err, ManageError::Refused(ref why) if why.contains("shutting down")),
            "{err}"
        );
        let _ = fs::remove_dir_all(&dir);
    }

    fn demo(name: &str) -> PathBuf {
        let dir = scratch(name);
        let sizes = DemoSizes {
            volume_bytes: 1 << 20,
            cache_bytes: 4 << 20,
            arc_max_bytes: 1 << 20,
        };
        create_demo(&dir, sizes).unwrap();
        dir
    }

    #[test]
    fn set_is_all_or_nothing_and_saves() {
        let dir = demo("set");
        let files = Target::Files(&dir);
        let bad = [
            "l2arc_write_max=8M".to_string(),
            "l2arc_mfuonly=7".to_string(),
        ];
        let err = set_tunables(files, &bad).unwrap_err();
        assert!(
            matches!(err, ManageError::Invalid(ref m) if m.contains("0, 1 or 2")),
            "{err}"
        );
        assert!(
            tunables::load(&dir).unwrap().is_empty(),
            "a refused set saved something"
        );
        for bad in ["nope=1", "l2arc_write_max", "=3"] {
            let err = set_tunables(files, &[bad.to_string()]).unwrap_err();
            assert!(matches!(err, ManageError::Invalid(_)), "{bad}: {err}");
        }
        let saved = set_tunables(files, &[" l2arc_write_max = 8M ".to_string()]).unwrap();
        assert_eq!(saved["l2arc_write_max"], "8M");
        assert_eq!(tunables::load(&dir).unwrap(), saved);
        let err = set_tunables(Target::Files(&scratch("set-nopool")), &bad[..1]).unwrap_err();
        assert!(
            matches!(err, ManageError::Io(ref m) if m.contains("no pool")),
            "{err}"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    /// The ARC limits are checked against the pool's own values, not the built-in
    /// defaults, in either order; a refused change saves and applies nothing, and a
    /// running pool does not panic on it (a reviewer's finding: `zfs_arc_min` above a
    /// small pool's `zfs_arc_max` passed the check, was saved, then panicked).
    #[test]
    fn arc_limits_are_checked_against_the_pools_own_values() {
        let dir = demo("arc-limits"); // zfs_arc_max 1 MiB
        let files = Target::Files(&dir);
        let set = |target, list: &[&str]| {
            let list: Vec<String> = list.iter().map(|s| s.to_string()).collect();
            set_tunables(target, &list)
        };
        let err = set(files, &["zfs_arc_min=128M"]).unwrap_err();
        assert!(
            matches!(err, ManageError::Invalid(ref m) if m.contains("above zfs_arc_max")),
            "{err}"
        );
        assert!(tunables::load(&dir).unwrap().is_empty());
        // Both raised in one change, the minimum first: the order does not matter.
        set(files, &["zfs_arc_min=32M", "zfs_arc_max=64M"]).unwrap();
        let pool = Pool::open(&dir, true).unwrap();
        let running = Target::Running(&pool);
        assert_eq!(pool.engine.tunables.zfs_arc_max(), 64 << 20);
        let before = tunables::load(&dir).unwrap();
        let err = set(running, &["l2arc_write_max=3M", "zfs_arc_min=128M"]).unwrap_err();
        assert!(matches!(err, ManageError::Invalid(_)), "{err}");
        assert_eq!(
            tunables::load(&dir).unwrap(),
            before,
            "a refused change was saved"
        );
        assert_ne!(pool.engine.tunables.l2arc_write_max(), 3 << 20);
        // Both lowered below the old minimum, the maximum first: taken as well.
        set(running, &["zfs_arc_max=8M", "zfs_arc_min=4M"]).unwrap();
        assert_eq!(pool.engine.tunables.zfs_arc_min(), 4 << 20);
        pool.close().unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_new_volume_may_not_use_a_device_or_a_writable_volume_s_backing_store() {
        let dir = fs::canonicalize(demo("backing")).unwrap();
        let mut config = PoolConfig::load(&dir).unwrap();
        let cache = dir.join("cache0.img");
        let vol0 = dir.join("vol0.img");
        let fresh = dir.join("new.img");
        let why = backing_in_use(&dir, &config, &cache, false).unwrap();
        assert!(why.contains("cache or log device"), "{why}");
        // vol0 is writable: nobody shares it, read-only or not.
        for readonly in [false, true] {
            let why = backing_in_use(&dir, &config, &vol0, readonly).unwrap();
            assert!(why.contains("volume vol0"), "{why}");
        }
        assert_eq!(backing_in_use(&dir, &config, &fresh, false), None);
        // Read-only volumes may share a backing store with each other.
        config.volumes[0].readonly = true;
        assert_eq!(backing_in_use(&dir, &config, &vol0, true), None);
        assert!(backing_in_use(&dir, &config, &vol0, false).is_some());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn running_pools_apply_cache_devices_at_once_and_refuse_foreign_ones() {
        let dir = demo("cache");
        let pool = Pool::open(&dir, true).unwrap();
        let running = Target::Running(&pool);
        let dir = fs::canonicalize(&dir).unwrap();
        // The demo's own device, named by another path: already in the pool.
        let err = add_cache_device(running, &dir.join("cache0.img"), false).unwrap_err();
        assert!(
            matches!(err, ManageError::Refused(ref m) if m.contains("already")),
            "{err}"
        );
        let err = add_cache_device(running, &dir.join("vol0.img"), true).unwrap_err();
        assert!(
            matches!(err, ManageError::Refused(ref m) if m.contains("backing store")),
            "{err}"
        );
        let err = add_cache_device(running, Path::new("x.img"), false).unwrap_err();
        assert!(matches!(err, ManageError::Invalid(_)), "{err}");
        // Not blank: refused, untouched, not in pool.json.
        let foreign = dir.join("foreign.img");
        fs::write(&foreign, vec![0x5a; 4 << 20]).unwrap();
        let err = add_cache_device(running, &foreign, false).unwrap_err();
        assert!(
            matches!(err, ManageError::Refused(ref m) if m.contains("not blank")),
            "{err}"
        );
        assert!(fs::read(&foreign).unwrap().iter().all(|&b| b == 0x5a));
        assert_eq!(PoolConfig::load(&dir).unwrap().cache_devices.len(), 1);
        // Forced: formatted and online at once.
        let added = add_cache_device(running, &foreign, true).unwrap();
        assert!(added.contains("added"), "{added}");
        let devices = pool.engine.devices();
        assert_eq!(devices.len(), 2);
        assert_eq!(devices[1].state(), DeviceState::Online);
        assert_eq!(PoolConfig::load(&dir).unwrap().cache_devices.len(), 2);
        // It now holds this pool's header, which another pool would refuse.
        let ours = not_blank(&foreign, pool.config.guid).unwrap().unwrap();
        assert!(ours.contains("of this pool"), "{ours}");
        let theirs = not_blank(&foreign, pool.config.guid ^ 1).unwrap().unwrap();
        assert!(theirs.contains("another pool"), "{theirs}");
        remove_cache_device(running, &foreign).unwrap();
        assert_eq!(devices[1].state(), DeviceState::Removed);
        assert_eq!(PoolConfig::load(&dir).unwrap().cache_devices.len(), 1);
        let err = remove_cache_device(running, &foreign).unwrap_err();
        assert!(matches!(err, ManageError::Refused(_)), "{err}");
        pool.close().unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Changes to a stopped pool's files from several processes at once lose none of
    /// each other's (each reads, changes and saves pool.json under the configuration
    /// lock; threads stand for the processes here: the lock is an flock of its own file
    /// descriptor, which threads do not share).
    #[test]
    fn changes_at_once_to_the_files_lose_nothing() {
        let dir = fs::canonicalize(demo("at-once")).unwrap();
        let paths: Vec<PathBuf> = (0..8).map(|i| dir.join(format!("c{i}.img"))).collect();
        for path in &paths {
            fs::write(path, vec![0u8; 4 << 20]).unwrap();
        }
        std::thread::scope(|scope| {
            for path in &paths {
                let dir = &dir;
                scope.spawn(move || add_cache_device(Target::Files(dir), path, false).unwrap());
            }
        });
        assert_eq!(
            PoolConfig::load(&dir).unwrap().cache_devices.len(),
            1 + paths.len()
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    /// The pool's log device is never taken as a cache device, not even with force (it
    /// would be formatted under the acknowledged sync writes it holds; a reviewer's
    /// finding); a log device the engine cannot use leaves no trace in pool.json.
    #[test]
    fn a_log_device_is_never_formatted_as_a_cache_device() {
        let dir = demo("log-as-cache");
        let pool = Pool::open(&dir, true).unwrap();
        let running = Target::Running(&pool);
        let dir = fs::canonicalize(&dir).unwrap();
        // Too small for a log: refused by the engine, and pool.json is as it was.
        let tiny = dir.join("tiny.img");
        fs::write(&tiny, vec![0u8; 4096]).unwrap();
        let err = add_log_device(running, &tiny, false).unwrap_err();
        assert!(matches!(err, ManageError::Refused(_)), "{err}");
        assert!(PoolConfig::load(&dir).unwrap().log_devices.is_empty());
        let log = dir.join("log.img");
        fs::write(&log, vec![0u8; 4 << 20]).unwrap();
        add_log_device(running, &log, false).unwrap();
        assert_eq!(PoolConfig::load(&dir).unwrap().log_devices.len(), 1);
        for force in [false, true] {
            let err = add_cache_device(running, &log, force).unwrap_err();
            assert!(
                matches!(err, ManageError::Refused(ref m) if m.contains("log device")),
                "{err}"
            );
        }
        assert!(
            pool.engine.log_report().is_some(),
            "the log is still in use"
        );
        assert_eq!(PoolConfig::load(&dir).unwrap().cache_devices.len(), 1);
        pool.close().unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A stopped pool refuses a log device too small for its ring, with the size it needs,
    /// and stays as it was: before, it took one, and the next start failed on it (a tester's
    /// finding; an all-zero 4 KiB file was called "not blank").
    #[test]
    fn a_stopped_pool_refuses_a_log_device_too_small_to_open() {
        let dir = fs::canonicalize(demo("log-too-small")).unwrap();
        let files = Target::Files(&dir);
        for (name, bytes) in [("zeros.img", 4096), ("small.img", 20 << 10)] {
            let path = dir.join(name);
            fs::write(&path, vec![0u8; bytes]).unwrap();
            let err = add_log_device(files, &path, false).unwrap_err();
            assert!(
                matches!(err, ManageError::Refused(ref m)
                    if m.contains(&format!("has {bytes} bytes: too small for a log device, which needs at least"))),
                "{err}"
            );
        }
        assert!(PoolConfig::load(&dir).unwrap().log_devices.is_empty());
        let log = dir.join("log.img");
        fs::write(&log, vec![0u8; 4 << 20]).unwrap();
        add_log_device(files, &log, false).unwrap();
        let pool = Pool::open(&dir, false).unwrap();
        assert!(pool.engine.log_report().is_some());
        pool.close().unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A file another running pool uses (its volume's backing file, its cache or log
    /// device) is never taken as a cache or log device, --force or not, and a pool that
    /// lists such a file does not open it; a file the pool let go of is free again (a
    /// reviewer's finding: another pool's volume, its first 8 KiB zero, passed as a blank
    /// cache device and the feed overwrote it while that pool served it).
    #[test]
    fn another_running_pool_s_files_are_not_taken_as_devices() {
        let first_dir = fs::canonicalize(demo("held-first")).unwrap();
        let first = Pool::open(&first_dir, true).unwrap();
        let log = first_dir.join("log.img");
        fs::write(&log, vec![0u8; 4 << 20]).unwrap();
        add_log_device(Target::Running(&first), &log, false).unwrap();
        // The first pool's volume: blank at its head, data behind.
        let volume = first_dir.join("vol0.img");
        fs::OpenOptions::new()
            .write(true)
            .open(&volume)
            .and_then(|f| f.write_all_at(&[0x5a; 4096], 64 << 10))
            .unwrap();
        let second_dir = fs::canonicalize(demo("held-second")).unwrap();
        let held = [volume.clone(), first_dir.join("cache0.img"), log.clone()];
        for path in &held {
            for force in [false, true] {
                let err = add_cache_device(Target::Files(&second_dir), path, force).unwrap_err();
                assert!(
                    matches!(err, ManageError::Refused(ref m)
                        if m.contains("in use by another running pool")
                            && m.contains(&*path.to_string_lossy())),
                    "{}: {err}",
                    path.display()
                );
                let err = add_log_device(Target::Files(&second_dir), path, force).unwrap_err();
                assert!(
                    matches!(err, ManageError::Refused(ref m) if m.contains("in use")),
                    "{}: {err}",
                    path.display()
                );
            }
        }
        assert_eq!(
            PoolConfig::load(&second_dir).unwrap().cache_devices.len(),
            1
        );
        assert!(
            PoolConfig::load(&second_dir)
                .unwrap()
                .log_devices
                .is_empty()
        );
        let mut block = [0u8; 4096];
        let file = fs::File::open(&volume).unwrap();
        file.read_exact_at(&mut block, 64 << 10).unwrap();
        assert_eq!(block, [0x5a; 4096], "the first pool's volume was written");
        // A pool whose pool.json names them (edited by hand) does not use them either: the
        // cache device is left out, the log device stops the open.
        let mut config = PoolConfig::load(&second_dir).unwrap();
        config.cache_devices[0].path = volume.clone();
        config.save(&second_dir).unwrap();
        let second = Pool::open(&second_dir, false).unwrap();
        assert!(
            second
                .refused_devices
                .iter()
                .any(|why| why.contains("in use")),
            "{:?}",
            second.refused_devices
        );
        assert!(pool_devices_of(&second).is_empty());
        second.close().unwrap();
        drop(second);
        config.log_devices.push(crate::pool::LogDeviceConfig {
            path: log.clone(),
            guid: new_guid(),
        });
        config.save(&second_dir).unwrap();
        let text = Pool::open(&second_dir, false)
            .err()
            .expect("opened")
            .to_string();
        assert!(text.contains("in use by another running pool"), "{text}");
        // A device the first pool removes is free at once, for it or another pool.
        let cache = first_dir.join("cache0.img");
        remove_cache_device(Target::Running(&first), &cache).unwrap();
        add_cache_device(Target::Running(&first), &cache, true).unwrap();
        remove_log_device(Target::Running(&first)).unwrap();
        add_log_device(Target::Running(&first), &log, true).unwrap();
        first.close().unwrap();
        drop(first);
        // Closed: the second pool may have them (forced: they carry the first's headers).
        add_cache_device(Target::Files(&second_dir), &cache, true).unwrap();
        for dir in [&first_dir, &second_dir] {
            fs::remove_dir_all(dir).unwrap();
        }
    }

    fn pool_devices_of(pool: &Pool) -> Vec<PathBuf> {
        (pool.engine.devices().iter())
            .filter(|d| d.state() != DeviceState::Removed)
            .map(|d| d.path.clone())
            .collect()
    }

    /// A file that carries a larch cache-device or log-device header is not taken as a
    /// volume's backing store, whichever pool it belongs to (a reviewer's finding:
    /// `volume add --backing` of another pool's device was accepted).
    #[test]
    fn a_cache_or_log_device_is_not_taken_as_a_backing_store() {
        let first_dir = fs::canonicalize(demo("device-backing-first")).unwrap();
        let first = Pool::open(&first_dir, true).unwrap();
        let log = first_dir.join("log.img");
        fs::write(&log, vec![0u8; 4 << 20]).unwrap();
        add_log_device(Target::Running(&first), &log, false).unwrap();
        first.close().unwrap();
        drop(first);
        let second_dir = fs::canonicalize(demo("device-backing-second")).unwrap();
        let config = PoolConfig::load(&second_dir).unwrap();
        for (path, kind) in [(first_dir.join("cache0.img"), "cache"), (log, "log")] {
            let why = backing_in_use(&second_dir, &config, &path, false).expect("accepted");
            assert!(
                why.contains(&format!("larch {kind} device header")) && why.contains("dd "),
                "{why}"
            );
        }
        // A blank file or an ordinary volume is fine.
        assert_eq!(
            backing_in_use(&second_dir, &config, &first_dir.join("vol0.img"), false),
            None
        );
        for dir in [&first_dir, &second_dir] {
            fs::remove_dir_all(dir).unwrap();
        }
    }
}

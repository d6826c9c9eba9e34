//! A volume's properties: `larch set VOLUME PROP=VALUE...` and `larch volume set NAME
//! PROP=VALUE... [--force]` change them, `larch get VOLUME [PROP...]` shows them, on a
//! running pool (applied at once, then saved) or on a stopped one's `pool.json`.
//!
//! `primarycache`, `secondarycache`, `sync` and `logbias` are kept in `pool.json` and
//! applied by the running engine at once (`Volume::set_properties`); `volsize` resizes the
//! volume (`Volume::resize` on a running pool; the backing store itself on a stopped one,
//! whose cache devices are then formatted at the next start after a shrink: their logs may
//! hold copies of the tail, which a stopped pool cannot tombstone). `volblocksize` and
//! `readonly` are fixed when the volume is added.

use std::collections::BTreeSet;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{ManageError, Target};
use crate::backing::{BackingStore, LatencyModel};
use crate::error::ChangeError;
use crate::events::EventKind;
use crate::pool::{PoolConfig, PoolLock, VolumeConfig};
use crate::units::{format_size_exact, parse_size};
use crate::volume::{Volume, check_resize};
use crate::volumes::{CacheMode, LogBias, PropertyValue, SyncMode, VolumeInfo, VolumeProps};

/// A property of a volume as `larch get` and `larch set` know it.
#[derive(Clone, Copy, Debug)]
pub struct PropertyDef {
    /// Its name (OpenZFS's).
    pub name: &'static str,
    /// Whether `larch set` changes it.
    pub settable: bool,
    /// What it is, and its values.
    pub help: &'static str,
}

/// Every volume property, in the order `larch get` lists them.
pub const VOLUME_PROPERTIES: &[PropertyDef] = &[
    PropertyDef {
        name: "volsize",
        settable: true,
        help: "size in bytes, a multiple of volblocksize; a shrink drops the data past the \
               new end and needs --force",
    },
    PropertyDef {
        name: "volblocksize",
        settable: false,
        help: "block size (set by `larch volume add`)",
    },
    PropertyDef {
        name: "readonly",
        settable: false,
        help: "on: writes are refused (set by `larch volume add`)",
    },
    PropertyDef {
        name: "primarycache",
        settable: true,
        help: "what the ARC keeps: all, metadata or none",
    },
    PropertyDef {
        name: "secondarycache",
        settable: true,
        help: "what goes to cache devices: all, metadata or none",
    },
    PropertyDef {
        name: "sync",
        settable: true,
        help: "standard (FUA and FLUSH wait), always (every write waits) or disabled",
    },
    PropertyDef {
        name: "logbias",
        settable: true,
        help: "latency (sync writes go to the log device) or throughput (they wait for a \
               TXG sync)",
    },
];

/// The properties whose source is `-` in `larch get`: the size and what `larch volume add`
/// fixed.
const NO_SOURCE: &[&str] = &["volsize", "volblocksize", "readonly"];

/// One line of `larch get VOLUME`, as `zfs get` prints it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeProperty {
    /// The volume's name.
    pub name: String,
    /// The property.
    pub property: String,
    /// Its value as `larch set` takes it (`16M`, `all`, `on`); `-` when it cannot be
    /// known now (the size of a stopped pool's volume whose backing store is missing).
    pub value: String,
    /// For a size (`volsize`, `volblocksize`), the bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// The value a volume has when nobody set it (`all`, `standard`); `-` for the
    /// size and what `larch volume add` fixed, which have none.
    #[serde(default = "no_default")]
    pub default: String,
    /// `local` (set by the user), `default`, or `-` (no source: see [`NO_SOURCE`]).
    pub source: String,
}

/// What [`VolumeProperty::default`] reads when an older daemon's answer has none.
fn no_default() -> String {
    "-".to_string()
}

/// The settable properties of `props` other than their value in `defaults`: what `larch
/// volume add` records as set by the user (their source is `local`).
pub fn differing_properties(props: VolumeProps, defaults: VolumeProps) -> BTreeSet<String> {
    SETTABLE
        .iter()
        .filter(|&&name| settable_value(props, name) != settable_value(defaults, name))
        .map(|name| name.to_string())
        .collect()
}

/// The properties [`VolumeProps`] holds, which change while a volume is served.
const SETTABLE: [&str; 4] = ["primarycache", "secondarycache", "sync", "logbias"];

/// The value of `props`' property `name` as `larch set` takes it; `None` for a property
/// not in [`SETTABLE`].
fn settable_value(props: VolumeProps, name: &str) -> Option<&'static str> {
    match name {
        "primarycache" => Some(props.primarycache.name()),
        "secondarycache" => Some(props.secondarycache.name()),
        "sync" => Some(props.sync.name()),
        "logbias" => Some(props.logbias.name()),
        _ => None,
    }
}

/// What the assignments of a change ask for.
struct Change {
    props: VolumeProps,
    size: Option<u64>,
    /// The properties named, in order (each once).
    named: Vec<String>,
}

/// The names of the volume properties, for messages.
fn property_names() -> String {
    let names: Vec<&str> = VOLUME_PROPERTIES.iter().map(|p| p.name).collect();
    names.join(", ")
}

/// Refuses a name that is no volume property.
fn known(name: &str) -> Result<&'static PropertyDef, ManageError> {
    VOLUME_PROPERTIES
        .iter()
        .find(|p| p.name == name)
        .ok_or_else(|| {
            ManageError::Invalid(format!(
                "unknown volume property {name:?} (volume properties: {})",
                property_names()
            ))
        })
}

/// Parses `NAME=VALUE` assignments over `base`: every name known and settable, every
/// value valid, or the first that is not, said.
fn parse_changes(base: VolumeProps, assignments: &[String]) -> Result<Change, ManageError> {
    if assignments.is_empty() {
        return Err(ManageError::Invalid(
            "nothing to set: give PROPERTY=VALUE".to_string(),
        ));
    }
    let mut change = Change {
        props: base,
        size: None,
        named: Vec::new(),
    };
    for assignment in assignments {
        let (name, value) = super::parse_assignment(assignment)?;
        let def = known(&name)?;
        if !def.settable {
            return Err(ManageError::Invalid(format!(
                "{name} is read-only: {}",
                def.help
            )));
        }
        let bad = |why: String| ManageError::Invalid(format!("{name}={value}: {why}"));
        let p = &mut change.props;
        match def.name {
            "volsize" => change.size = Some(parse_size(&value).map_err(|e| bad(e.to_string()))?),
            "primarycache" => p.primarycache = CacheMode::parse(&value).map_err(bad)?,
            "secondarycache" => p.secondarycache = CacheMode::parse(&value).map_err(bad)?,
            "sync" => p.sync = SyncMode::parse(&value).map_err(bad)?,
            _ => p.logbias = LogBias::parse(&value).map_err(bad)?,
        }
        if !change.named.contains(&name) {
            change.named.push(name);
        }
    }
    Ok(change)
}

/// The words of an engine's refusal or failure of a change, with its HTTP kind.
fn change_error(volume: &str, err: ChangeError) -> ManageError {
    let text = format!("volume {volume}: {err}");
    match err {
        ChangeError::NotWholeBlocks { .. } | ChangeError::Empty | ChangeError::TooManyBlocks(_) => {
            ManageError::Invalid(text)
        }
        ChangeError::PartBlock { .. } | ChangeError::ReadOnly => ManageError::Refused(text),
        ChangeError::Backing { ref source, .. }
            if matches!(
                source.kind(),
                std::io::ErrorKind::InvalidInput | std::io::ErrorKind::Unsupported
            ) =>
        {
            ManageError::Refused(text)
        }
        _ => ManageError::Io(text),
    }
}

/// Sets properties of volume `name` (`PROP=VALUE` each), all checked first. A shrink
/// (`volsize` below the size now) is refused unless `force`: it drops the data past the
/// new end. Returns what was done, a line per step.
pub fn set_volume_properties(
    target: Target<'_>,
    name: &str,
    assignments: &[String],
    force: bool,
) -> Result<String, ManageError> {
    // The names and the values are checked before anything is locked or read.
    parse_changes(VolumeProps::default(), assignments)?;
    let _guard = target.lock()?;
    let dir = target.state_dir();
    let mut config = target.load()?;
    let at = volume_at(&config, name)?;
    let served = match target {
        Target::Running(pool) => pool.volumes.iter().find(|v| v.name == name).cloned(),
        Target::Files(_) => None,
    };
    let base = served
        .as_ref()
        .map_or(config.volumes[at].props(), |v| v.props());
    let change = parse_changes(base, assignments)?;
    let size_now = match &served {
        Some(v) => Some(v.info().size_bytes),
        None => stopped_size(dir, &config.volumes[at]),
    };
    let resize = match (change.size, size_now) {
        (Some(size), Some(now)) if size != now => {
            check_size(&config.volumes[at], now, size, force)?;
            Some((now, size))
        }
        (Some(_), None) => {
            return Err(ManageError::Io(format!(
                "volume {name}: the size of its backing store {} cannot be read",
                config.volumes[at].backing.display()
            )));
        }
        _ => None,
    };
    let volume = &mut config.volumes[at];
    volume.set_props(change.props);
    (volume.local).extend(change.named.iter().filter(|n| *n != "volsize").cloned());
    let mut done = vec![format!(
        "volume {name}: {}",
        (change.named.iter())
            .map(|n| format!("{n}={}", shown(n, &change)))
            .collect::<Vec<_>>()
            .join(" ")
    )];
    match &served {
        Some(vol) => apply_running(dir, &mut config, at, vol, &change, resize, &mut done)?,
        None => apply_stopped(target, &mut config, at, resize, &mut done)?,
    }
    // In force and saved: each property whose value changed is an event.
    let events = (change.named.iter())
        .map(|n| (n, value_of(n, &base, size_now), shown(n, &change)))
        .filter(|(_, previous, value)| previous != value)
        .map(|(n, previous, value)| EventKind::PropertyChanged {
            volume: name.to_string(),
            property: n.clone(),
            value,
            previous,
        })
        .collect();
    super::record_events(target, events);
    Ok(done.join("\n"))
}

/// The value a change sets for `name`, as users type it.
fn shown(name: &str, change: &Change) -> String {
    value_of(name, &change.props, change.size)
}

/// Property `name`'s value among `p` and `size`, as users type it.
fn value_of(name: &str, p: &VolumeProps, size: Option<u64>) -> String {
    match name {
        "volsize" => size.map_or("-".to_string(), format_size_exact),
        "primarycache" => p.primarycache.name().to_string(),
        "secondarycache" => p.secondarycache.name().to_string(),
        "sync" => p.sync.name().to_string(),
        _ => p.logbias.name().to_string(),
    }
}

/// The index of volume `name` in `config`, or "no such volume" (404).
fn volume_at(config: &PoolConfig, name: &str) -> Result<usize, ManageError> {
    config
        .volumes
        .iter()
        .position(|v| v.name == name)
        .ok_or_else(|| {
            let names: Vec<&str> = config.volumes.iter().map(|v| v.name.as_str()).collect();
            ManageError::NotFound(format!(
                "the pool has no volume {name:?} (its volumes: {})",
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ))
        })
}

/// Refuses a resize of `v` from `now` to `size` bytes that the pool will not make.
fn check_size(v: &VolumeConfig, now: u64, size: u64, force: bool) -> Result<(), ManageError> {
    if let Some(url) = v.object_url()
        && size < now
    {
        return Err(ManageError::Refused(format!(
            "volume {} is on an object store ({url}): it grows (segments layout) but never \
             shrinks; copy what to keep to a new, smaller volume",
            v.name
        )));
    }
    let info = VolumeInfo {
        guid: v.guid,
        slot: 0,
        size_bytes: now,
        block_bytes: v.volblocksize,
        primarycache: v.primarycache,
        secondarycache: v.secondarycache,
        sync: v.sync,
        logbias: v.logbias,
        read_only: v.readonly,
    };
    check_resize(&info, size).map_err(|e| change_error(&v.name, e))?;
    if size < now && !force {
        return Err(ManageError::Refused(format!(
            "volsize {} is smaller than volume {}'s {} bytes ({}): the data past the new end \
             would be dropped; give --force to shrink it",
            format_size_exact(size),
            v.name,
            now,
            format_size_exact(now)
        )));
    }
    Ok(())
}

/// A running pool: the properties saved, then in force; then the resize, which saves the
/// size when it must survive a crash.
fn apply_running(
    dir: &Path,
    config: &mut PoolConfig,
    at: usize,
    volume: &Volume,
    change: &Change,
    resize: Option<(u64, u64)>,
    done: &mut Vec<String>,
) -> Result<(), ManageError> {
    super::save(dir, config)?;
    let name = volume.name.clone();
    let dropped = (volume.set_properties(change.props)).map_err(|e| change_error(&name, e))?;
    if dropped.arc_blocks > 0 || dropped.l2_copies > 0 {
        done.push(format!(
            "volume {name}: {} blocks dropped from the ARC, {} copies from cache devices",
            dropped.arc_blocks, dropped.l2_copies
        ));
    }
    let Some((_, size)) = resize else {
        return Ok(());
    };
    let object = config.volumes[at].object_url().is_some();
    let resized = volume
        .resize(size, |size| {
            let v = &mut config.volumes[at];
            v.volsize = Some(size);
            // A volume on an object store records the grow before its root has it: an
            // open then takes a root of either size and completes the grow.
            if object {
                v.object_grow_bytes = Some(size);
            }
            config.save(dir)
        })
        .map_err(|e| change_error(&name, e))?;
    if object {
        // The root has the size now: an open expects it and no other.
        let v = &mut config.volumes[at];
        v.object_size_bytes = Some(size);
        v.object_grow_bytes = None;
        super::save(dir, config)?;
    }
    done.push(resized_line(&name, resized.from_bytes, resized.to_bytes));
    if resized.to_bytes < resized.from_bytes {
        done.push(format!(
            "volume {name}: {} blocks of the cut tail dropped from the ARC, {} copies from \
             cache devices",
            resized.dropped.arc_blocks, resized.dropped.l2_copies
        ));
    }
    Ok(())
}

fn resized_line(name: &str, from: u64, to: u64) -> String {
    format!(
        "volume {name}: volsize {} -> {} ({from} -> {to} bytes); NBD clients see it on their \
         next connection",
        format_size_exact(from),
        format_size_exact(to)
    )
}

/// A stopped pool (or a volume the running pool does not serve): `pool.json`, and for a
/// resize the backing store itself, under the pool's lock.
fn apply_stopped(
    target: Target<'_>,
    config: &mut PoolConfig,
    at: usize,
    resize: Option<(u64, u64)>,
    done: &mut Vec<String>,
) -> Result<(), ManageError> {
    let dir = target.state_dir();
    let Some((now, size)) = resize else {
        return super::save(dir, config);
    };
    let name = config.volumes[at].name.clone();
    if let Some(url) = config.volumes[at].object_url() {
        return Err(ManageError::Refused(format!(
            "volume {name} is on an object store ({url}): it is resized by the daemon that \
             serves it (its root on the store changes); start the pool (larch serve --http) \
             and run this again"
        )));
    }
    // No process may serve the pool while a backing store changes under it.
    let _pool_lock = match target {
        Target::Files(dir) => Some(PoolLock::acquire(dir).map_err(|e| {
            ManageError::Refused(format!(
                "{e}; a served volume is resized by its daemon, which the CLI reaches over \
                 HTTP: start it with --http, or stop it"
            ))
        })?),
        // Ours: the volume is not among those it serves.
        Target::Running(_) => None,
    };
    let path = crate::pool::resolve(dir, &config.volumes[at].backing);
    let backing = BackingStore::open(&path, false, LatencyModel::default())
        .map_err(|e| ManageError::Io(format!("volume {name}: {}: {e}", path.display())))?;
    let cut = |e: std::io::Error| {
        change_error(
            &name,
            ChangeError::Backing {
                path: path.display().to_string(),
                source: e,
            },
        )
    };
    if size > now {
        backing.resize(now, size).map_err(cut)?;
        config.volumes[at].volsize = Some(size);
        super::save(dir, config)?;
    } else {
        refuse_unreplayed_log(dir, config, &name)?;
        // Their logs may hold copies of the tail, and a stopped pool cannot tombstone
        // them: a later grow would read them back instead of zeros.
        let guids: Vec<u64> = config.cache_devices.iter().map(|d| d.guid).collect();
        crate::pool::distrust_cache_devices(dir, &guids).map_err(|e| {
            ManageError::Io(format!(
                "recording that the cache devices are to be formatted: {e}"
            ))
        })?;
        config.volumes[at].volsize = Some(size);
        super::save(dir, config)?;
        backing.resize(now, size).map_err(cut)?;
        if !guids.is_empty() {
            done.push(format!(
                "the pool's cache devices are formatted at its next start (their logs may \
                 hold copies of volume {name}'s cut tail)"
            ));
        }
    }
    done.push(resized_line(&name, now, size));
    Ok(())
}

/// Refuses a shrink while the pool's log device holds writes a start must replay: a record
/// past the new end could not be replayed.
fn refuse_unreplayed_log(dir: &Path, config: &PoolConfig, name: &str) -> Result<(), ManageError> {
    for log in &config.log_devices {
        let path = crate::pool::resolve(dir, &log.path);
        let pending = crate::pool::log_records_to_replay(&path).unwrap_or(0);
        if pending > 0 {
            return Err(ManageError::Refused(format!(
                "the log device {} holds {pending} acknowledged writes not yet replayed (the \
                 pool was not stopped cleanly): start the pool once (`larch serve`, then stop \
                 it) so they reach their volumes, then shrink {name}",
                path.display()
            )));
        }
    }
    Ok(())
}

/// The size of a stopped pool's volume: its recorded `volsize`, else its backing store's
/// (an object store's as `volume add` recorded it). `None` when it cannot be read.
fn stopped_size(dir: &Path, v: &VolumeConfig) -> Option<u64> {
    if let Some(size) = v.volsize {
        return Some(size);
    }
    if v.object_url().is_some() {
        return v.object_size_bytes;
    }
    use std::io::{Seek, SeekFrom};
    let path = crate::pool::resolve(dir, &v.backing);
    std::fs::File::open(path)
        .and_then(|mut f| f.seek(SeekFrom::End(0)))
        .ok()
}

/// The properties `names` (every one when empty) of volume `name`, as `larch get VOLUME`
/// lists them: the running pool's values when it serves the volume, else `pool.json`'s.
pub fn volume_properties(
    target: Target<'_>,
    name: &str,
    names: &[String],
) -> Result<Vec<VolumeProperty>, ManageError> {
    let defs: Vec<&PropertyDef> = if names.is_empty() {
        VOLUME_PROPERTIES.iter().collect()
    } else {
        names.iter().map(|n| known(n)).collect::<Result<_, _>>()?
    };
    let config = target.load()?;
    let v = &config.volumes[volume_at(&config, name)?];
    let served = match target {
        Target::Running(pool) => pool.volumes.iter().find(|s| s.name == name).cloned(),
        Target::Files(_) => None,
    };
    let (props, size) = match &served {
        Some(s) => (s.props(), Some(s.info().size_bytes)),
        None => (v.props(), stopped_size(target.state_dir(), v)),
    };
    let defaults = VolumeProps::default();
    let row = |def: &PropertyDef| {
        let default = settable_value(defaults, def.name).unwrap_or("-");
        let (value, bytes) = match def.name {
            "volsize" => (size.map_or("-".to_string(), format_size_exact), size),
            "volblocksize" => {
                let bytes = u64::from(v.volblocksize);
                (format_size_exact(bytes), Some(bytes))
            }
            "readonly" => ((if v.readonly { "on" } else { "off" }).to_string(), None),
            name => (settable_value(props, name).unwrap_or("-").to_string(), None),
        };
        let source = if NO_SOURCE.contains(&def.name) {
            "-"
        } else if v.local.contains(def.name) {
            "local"
        } else {
            "default"
        };
        VolumeProperty {
            name: name.to_string(),
            property: def.name.to_string(),
            value,
            bytes,
            default: default.to_string(),
            source: source.to_string(),
        }
    };
    Ok(defs.into_iter().map(row).collect())
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::path::PathBuf;

    use super::*;
    use crate::pool::{DISTRUSTED_FILE, DemoSizes, Pool, create_demo};

    /// A demo pool (a 1 MiB volume `vol0` of 16K blocks, a cache device) in a fresh
    /// directory, made absolute.
    fn demo(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("larch-manage-vol-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let sizes = DemoSizes {
            volume_bytes: 1 << 20,
            cache_bytes: 4 << 20,
            arc_max_bytes: 1 << 20,
        };
        create_demo(&dir, sizes).unwrap();
        fs::canonicalize(&dir).unwrap()
    }

    fn set(target: Target<'_>, list: &[&str], force: bool) -> Result<String, ManageError> {
        let list: Vec<String> = list.iter().map(|s| s.to_string()).collect();
        set_volume_properties(target, "vol0", &list, force)
    }

    /// (value, source) of each property of `vol0`.
    fn shown(target: Target<'_>) -> Vec<(String, String, String)> {
        (volume_properties(target, "vol0", &[]).unwrap().into_iter())
            .map(|p| (p.property, p.value, p.source))
            .collect()
    }

    fn row(property: &str, value: &str, source: &str) -> (String, String, String) {
        (property.into(), value.into(), source.into())
    }

    /// Bad requests change nothing and say what is wrong, with their kind (the HTTP
    /// status): an unknown or read-only property, a bad value, an unknown volume, a size
    /// that is not whole blocks, a shrink without force.
    #[test]
    fn bad_requests_are_refused_with_their_reason_and_change_nothing() {
        let dir = demo("bad");
        let files = Target::Files(&dir);
        let before = fs::read(dir.join(crate::pool::CONFIG_FILE)).unwrap();
        let cases: [(&[&str], &str); 7] = [
            (&["bogus=1"], "unknown volume property \"bogus\""),
            (&["volblocksize=8K"], "volblocksize is read-only"),
            (&["sync=sometimes"], "expected standard, always, disabled"),
            (&["primarycache"], "expected NAME=VALUE"),
            (
                &["volsize=1000"],
                "not a multiple of the volume's volblocksize",
            ),
            (&["volsize=lots"], "volsize=lots"),
            (&[], "nothing to set"),
        ];
        for (list, why) in cases {
            let err = set(files, list, false).unwrap_err();
            assert!(
                matches!(err, ManageError::Invalid(ref m) if m.contains(why)),
                "{list:?}: {err}"
            );
        }
        let err = set(files, &["volsize=512K"], false).unwrap_err();
        assert!(
            matches!(err, ManageError::Refused(ref m) if m.contains("give --force")),
            "{err}"
        );
        let list = vec!["sync=always".to_string()];
        let err = set_volume_properties(files, "nope", &list, false).unwrap_err();
        assert!(
            matches!(err, ManageError::NotFound(ref m) if m.contains("its volumes: vol0")),
            "{err}"
        );
        let err = volume_properties(files, "vol0", &["bogus".into()]).unwrap_err();
        assert!(matches!(err, ManageError::Invalid(_)), "{err}");
        let err = volume_properties(files, "nope", &[]).unwrap_err();
        assert!(matches!(err, ManageError::NotFound(_)), "{err}");
        assert_eq!(
            fs::read(dir.join(crate::pool::CONFIG_FILE)).unwrap(),
            before
        );
        assert_eq!(fs::metadata(dir.join("vol0.img")).unwrap().len(), 1 << 20);
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A volume on an object store shows the size `volume add` recorded; a stopped pool
    /// does not resize it (its size is in its root on the store: its daemon grows it) and
    /// nothing shrinks it; its other properties change.
    #[test]
    fn a_stopped_pool_does_not_resize_a_volume_on_an_object_store() {
        let dir = demo("object");
        let mut config = PoolConfig::load(&dir).unwrap();
        let mut object = config.volumes[0].clone();
        object.name = "objs".into();
        object.guid ^= 1;
        object.backing = "s3://bucket/vols/objs".into();
        object.object_size_bytes = Some(64 << 20);
        config.volumes.push(object);
        config.save(&dir).unwrap();
        let files = Target::Files(&dir);
        let rows = volume_properties(files, "objs", &["volsize".into()]).unwrap();
        assert_eq!(
            (rows[0].value.as_str(), rows[0].bytes),
            ("64M", Some(64 << 20))
        );
        let list = vec!["volsize=128M".to_string()];
        let err = set_volume_properties(files, "objs", &list, false).unwrap_err();
        assert!(
            matches!(err, ManageError::Refused(ref m) if m.contains("resized by the daemon")),
            "{err}"
        );
        let list = vec!["volsize=32M".to_string()];
        let err = set_volume_properties(files, "objs", &list, true).unwrap_err();
        assert!(
            matches!(err, ManageError::Refused(ref m) if m.contains("never shrinks")),
            "{err}"
        );
        assert_eq!(
            PoolConfig::load(&dir).unwrap().volumes[1].object_size_bytes,
            Some(64 << 20)
        );
        let list = vec!["sync=always".to_string()];
        set_volume_properties(files, "objs", &list, false).unwrap();
        assert_eq!(
            PoolConfig::load(&dir).unwrap().volumes[1].sync,
            SyncMode::Always
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    /// On a stopped pool: properties go to pool.json with their source `local`; a grow
    /// extends the backing file; a forced shrink cuts it and has the cache devices
    /// formatted at the next start (their logs may hold the tail).
    #[test]
    fn a_stopped_pool_s_files_are_changed() {
        let dir = demo("files");
        let files = Target::Files(&dir);
        assert_eq!(
            shown(files),
            [
                row("volsize", "1M", "-"),
                row("volblocksize", "16K", "-"),
                row("readonly", "off", "-"),
                row("primarycache", "all", "default"),
                row("secondarycache", "all", "default"),
                row("sync", "standard", "default"),
                row("logbias", "latency", "default"),
            ]
        );
        set(
            files,
            &["secondarycache=none", "logbias=throughput", "volsize=2M"],
            false,
        )
        .unwrap();
        let config = PoolConfig::load(&dir).unwrap();
        let v = &config.volumes[0];
        assert_eq!(
            (v.secondarycache, v.logbias),
            (CacheMode::None, LogBias::Throughput)
        );
        assert_eq!(v.volsize, Some(2 << 20));
        assert_eq!(fs::metadata(dir.join("vol0.img")).unwrap().len(), 2 << 20);
        let now = shown(files);
        assert_eq!(now[0], row("volsize", "2M", "-"));
        assert_eq!(now[4], row("secondarycache", "none", "local"));
        assert_eq!(now[5], row("sync", "standard", "default"));
        // Set to its default value, a property is still local (as in ZFS).
        set(files, &["sync=standard"], false).unwrap();
        assert_eq!(shown(files)[5], row("sync", "standard", "local"));
        assert!(!dir.join(DISTRUSTED_FILE).exists());
        set(files, &["volsize=512K"], true).unwrap();
        assert_eq!(fs::metadata(dir.join("vol0.img")).unwrap().len(), 512 << 10);
        let distrusted = fs::read_to_string(dir.join(DISTRUSTED_FILE)).unwrap();
        assert!(
            distrusted.contains(&config.cache_devices[0].guid.to_string()),
            "{distrusted}"
        );
        // A stopped pool opens at the recorded size.
        let pool = Pool::open(&dir, false).unwrap();
        assert_eq!(pool.volumes[0].info().size_bytes, 512 << 10);
        assert_eq!(pool.volumes[0].props().secondarycache, CacheMode::None);
        // And a served pool is not resized on its files behind its back.
        let err = set(files, &["volsize=1M"], false).unwrap_err();
        assert!(
            matches!(err, ManageError::Refused(ref m) if m.contains("--http")),
            "{err}"
        );
        pool.close().unwrap();
        drop(pool);
        fs::remove_dir_all(&dir).unwrap();
    }

    /// On a running pool: in force at once and saved; `get` shows the running values;
    /// an edit of pool.json by hand is brought in by `apply_volume_config`.
    #[test]
    fn a_running_pool_applies_and_saves() {
        let dir = demo("running");
        let pool = Pool::open(&dir, true).unwrap();
        let running = Target::Running(&pool);
        let vol = &pool.volumes[0];
        let done = set(running, &["primarycache=none", "volsize=2M"], false).unwrap();
        assert!(done.contains("volsize 1M -> 2M"), "{done}");
        assert_eq!(vol.props().primarycache, CacheMode::None);
        assert_eq!(vol.info().size_bytes, 2 << 20);
        assert_eq!(fs::metadata(dir.join("vol0.img")).unwrap().len(), 2 << 20);
        let saved = PoolConfig::load(&dir).unwrap();
        assert_eq!(saved.volumes[0].primarycache, CacheMode::None);
        assert_eq!(saved.volumes[0].volsize, Some(2 << 20));
        assert_eq!(shown(running)[0], row("volsize", "2M", "-"));
        let done = set(running, &["volsize=1M"], true).unwrap();
        assert!(done.contains("volsize 2M -> 1M"), "{done}");
        assert_eq!(fs::metadata(dir.join("vol0.img")).unwrap().len(), 1 << 20);
        // Edited by hand (as `larch set` does on the files when no endpoint answers).
        let mut edited = PoolConfig::load(&dir).unwrap();
        edited.volumes[0].sync = SyncMode::Always;
        edited.save(&dir).unwrap();
        let done = pool.apply_volume_config(&edited);
        assert!(done.iter().any(|l| l.contains("sync=always")), "{done:?}");
        assert_eq!(vol.props().sync, SyncMode::Always);
        assert!(
            pool.apply_volume_config(&edited).is_empty(),
            "applied twice"
        );
        pool.close().unwrap();
        drop(pool);
        fs::remove_dir_all(&dir).unwrap();
    }
}

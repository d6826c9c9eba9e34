//! Tunables: OpenZFS names and meanings, settable at runtime, declared once.
//!
//! The table below is the only place a tunable is spelled out. Each takes its default from
//! `larch_policy::tunables::DEFAULTS` under its own name, the table the simulator reads
//! too, unless the table gives one: the two decided by the pool or the machine
//! (`zfs_arc_max`, `zfs_dirty_data_max`). From it come the
//! [`Tunables`] struct and its typed getters, the defaults, parsing and range checks
//! ([`set`]), the values `larch get` and `status.json` show ([`values`]), and the help
//! text of `larch get`/`larch set --help` and the docs ([`TUNABLES`]). Values live in
//! atomics, so the engine reads them on every use and a change applies at once.
//!
//! `tunables.json` in a pool's state directory carries what `larch set` saved to a
//! running daemon and across restarts; it is written with the pool's atomic, fsynced
//! state-file writer ([`crate::files::write_state_file`]).

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use larch_policy::tunables::DEFAULTS;

use crate::units::{format_size_exact, parse_size};

/// Name of the tunables file in a state directory.
pub const TUNABLES_FILE: &str = "tunables.json";

/// How a tunable's value is typed, parsed and shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Bytes: `64M`, `1G` (the size syntax of `--size`, [`parse_size`]).
    Size,
    /// A plain number (seconds, percent, a count, a mode).
    Count,
    /// 0 or 1.
    Flag,
    /// The ARC's replacement policy by name: `arc` (0) or `larch` (1).
    Policy,
}

/// One tunable as the table declares it.
#[derive(Clone, Copy, Debug)]
pub struct TunableDef {
    /// Its OpenZFS (or, where larch adds one, larch's) name.
    pub name: &'static str,
    /// How its value is typed.
    pub kind: Kind,
    /// Smallest value accepted.
    pub min: u64,
    /// Largest value accepted.
    pub max: u64,
    /// The default in words, where it depends on the pool or the machine; otherwise the
    /// default is shown as a value ([`default_text`]).
    pub default_words: Option<&'static str>,
    /// What it does, in one line.
    pub help: &'static str,
}

macro_rules! tunables {
    (@ty Flag) => { bool };
    (@ty Policy) => { larch_policy::ArcPolicy };
    (@ty $kind:ident) => { u64 };
    (@get Flag, $cell:expr) => { $cell.load(Ordering::Relaxed) != 0 };
    (@get Policy, $cell:expr) => { larch_policy::ArcPolicy::from_tunable($cell.load(Ordering::Relaxed)) };
    (@get $kind:ident, $cell:expr) => { $cell.load(Ordering::Relaxed) };
    (@words) => { None };
    (@words $words:literal) => { Some($words) };
    (@stored Flag, $value:expr) => { u64::from($value) };
    (@stored $kind:ident, $value:expr) => { $value };
    (@default $name:ident, $kind:ident) => { tunables!(@stored $kind, DEFAULTS.$name) };
    (@default $name:ident, $kind:ident, $default:expr) => { $default };
    ($(
        $name:ident: $kind:ident $(= $default:expr)?, $min:expr, $max:expr $(, default $words:literal)?;
        $help:literal
    )+) => {
        /// The tunables of a pool (OpenZFS names; see [`TUNABLES`] for each one's meaning
        /// and docs/engine.md for how larch's defaults differ from OpenZFS's).
        #[derive(Debug)]
        pub struct Tunables {
            $( #[doc = $help] $name: AtomicU64, )+
        }

        impl Default for Tunables {
            fn default() -> Tunables {
                Tunables { $( $name: AtomicU64::new(tunables!(@default $name, $kind $(, $default)?)), )+ }
            }
        }

        impl Tunables {
            $(
                #[doc = $help]
                pub fn $name(&self) -> tunables!(@ty $kind) {
                    tunables!(@get $kind, self.$name)
                }
            )+

            fn cell(&self, name: &str) -> Option<&AtomicU64> {
                match name {
                    $( stringify!($name) => Some(&self.$name), )+
                    _ => None,
                }
            }
        }

        /// Every tunable, in the order `larch get` lists them.
        pub const TUNABLES: &[TunableDef] = &[
            $( TunableDef {
                name: stringify!($name),
                kind: Kind::$kind,
                min: $min,
                max: $max,
                default_words: tunables!(@words $($words)?),
                help: $help,
            }, )+
        ];
    };
}

const K: u64 = 1 << 10;
const M: u64 = 1 << 20;
const G: u64 = 1 << 30;

tunables! {
    zfs_arc_max: Size = G, M, u64::MAX, default "pool.json";
        "most bytes of data the ARC holds (the pool's arc_max_bytes unless set)"
    zfs_arc_min: Size, 0, u64::MAX;
        "the ARC target never shrinks below this (0: min(zfs_arc_max, max(32M, zfs_arc_max/32)))"
    zfs_arc_policy: Policy, 0, 1;
        "the ARC's replacement policy: arc (OpenZFS's ARC) or larch (the ARC with MFU marks, MFU filled while there is room and MRU ghost hits kept out of MFU when all of it was read since; docs/arc.md)"
    zfs_arc_sys_free: Size, 0, u64::MAX;
        "memory left to the system; below it the ARC shrinks (0: 1/32 of RAM)"
    zfs_txg_timeout: Count, 1, 600;
        "seconds between TXG syncs"
    zfs_vdev_async_write_max_active: Count, 1, 1000;
        "most writes a TXG sync has in flight to one backing store"
    zfs_dirty_data_max: Size = crate::system::default_dirty_data_max(), M, u64::MAX,
        default "10% of RAM, at most 4G";
        "most dirty bytes in DRAM (also at most half of zfs_arc_max)"
    zfs_dirty_data_sync_percent: Count, 1, 100;
        "a TXG syncs early when its dirty bytes pass this percent of the limit"
    zfs_delay_min_dirty_percent: Count, 1, 100;
        "the write throttle starts at this percent of the dirty limit"
    zfs_delay_scale: Count, 0, 1_000_000_000;
        "scale of the write throttle's delay curve, ns"
    l2arc_write_max: Size, 64 * K, G;
        "bytes written to each cache device per feed"
    l2arc_write_boost: Size, 0, G;
        "extra bytes per feed until the ARC first evicts (it is cold)"
    l2arc_headroom: Count, 0, 1000;
        "scan depth per feed, as a multiple of l2arc_write_max (0 = unlimited)"
    l2arc_headroom_boost: Count, 100, 10_000;
        "percent applied to l2arc_headroom"
    l2arc_meta_percent: Count, 1, 100;
        "DRAM the L2 index may use, in percent of zfs_arc_max (at least 4M)"
    l2arc_rebuild_blocks_min_l2size: Size, 0, u64::MAX;
        "cache devices smaller than this are formatted at start, not rebuilt"
    l2arc_feed_secs: Count, 1, 3600;
        "seconds between feeds"
    l2arc_feed_min_ms: Count, 10, 60_000;
        "interval when feeding again quickly"
    l2arc_feed_again: Flag, 0, 1;
        "feed again after l2arc_feed_min_ms when a feed wrote over half its budget"
    l2arc_feed_follow: Flag, 0, 1;
        "feed every l2arc_feed_min_ms (same bytes per second) while blocks leave the ARC unfed (larch's)"
    l2arc_noprefetch: Flag, 0, 1;
        "do not feed blocks read by prefetch"
    l2arc_nowrite: Flag, 0, 1;
        "do not feed blocks written and not read since (larch's; OpenZFS feeds them)"
    l2arc_io_uring: Flag, 0, 1;
        "read cache devices through io_uring (larch's; 0: through a pool of threads)"
    l2arc_mfuonly: Count, 0, 2;
        "0: feed MRU and MFU; 1: MFU only; 2: MFU data and all metadata"
    l2arc_admit: Flag, 0, 1;
        "once a cache device has filled, feed only blocks read at least twice lately, as a sketch of 4 bytes per block of the ARC and cache devices counts reads, unless one in four blocks read once comes back: most of the feed's wasted writes are blocks read once (larch's; 0: feed as OpenZFS)"
    l2arc_enabled: Flag, 0, 1;
        "the L2ARC switch: 0 stops reads from and feeds to every cache device at once, keeping what they hold; 1 resumes (larch's)"
    l2arc_rebuild_enabled: Flag, 0, 1;
        "rebuild cache devices' indexes at start"
    zfs_prefetch_disable: Flag, 0, 1;
        "turn the sequential-read prefetcher off"
    zfetch_max_distance: Size, 0, 256 * M;
        "most bytes read ahead of a sequential stream (at most 1/8 of zfs_arc_max)"
    write_partial_defer: Flag, 0, 1;
        "acknowledge async writes of part of a block not in the ARC before the block is read (larch's); 0: read the block first, as ZFS does"
    nbd_idle_yield: Flag, 0, 1;
        "an idle NBD connection whose client waits for each reply watches its socket for up to 50 us calling sched_yield, not spinning or parking: more reads at queue depth 1, a longer p99 with many such clients (larch's)"
    object_read_around: Size, 0, 8 * M;
        "a demand miss on an object volume that goes to the store fetches the blocks around it, within this many aligned bytes, when their records sit next to its in the same segment, and they are fed to the cache devices (larch's; 0 or one block: only the block)"
    object_l2_prefetch: Flag, 0, 1;
        "feed the blocks of object volumes that a prefetch or a read around a miss brought in to the cache devices whatever l2arc_noprefetch says: the store is the slow side for them too (larch's; 0: l2arc_noprefetch applies to them as to others)"
    mrc_sample: Flag, 0, 1;
        "sample block accesses for the miss-ratio curves of larch advise and the Analytics page (larch's)"
}

impl Tunables {
    /// Sets one tunable by name from text as users type it (`64M`, `1`); values out of
    /// range are refused with a reason and change nothing.
    pub fn set(&self, name: &str, text: &str) -> Result<(), TunableError> {
        let def = lookup(name)?;
        let value = parse(def, text)?;
        let cell = self.cell(name).expect("every table entry has a cell");
        // The two ARC limits are checked against each other.
        match name {
            "zfs_arc_max" if self.zfs_arc_min() > value => {
                return Err(TunableError::ArcMaxBelowMin {
                    value,
                    min: self.zfs_arc_min(),
                });
            }
            "zfs_arc_min" if value > self.zfs_arc_max() => {
                return Err(TunableError::ArcMinAboveMax {
                    value,
                    max: self.zfs_arc_max(),
                });
            }
            _ => {}
        }
        cell.store(value, Ordering::Relaxed);
        Ok(())
    }

    /// Sets a tunable the engine itself decides (the pool's `zfs_arc_max` at start).
    pub(crate) fn store(&self, name: &str, value: u64) {
        self.cell(name)
            .unwrap_or_else(|| panic!("{name} is not a tunable"))
            .store(value, Ordering::Relaxed);
    }

    /// Current values, by name.
    pub fn values(&self) -> BTreeMap<String, u64> {
        TUNABLES
            .iter()
            .map(|d| {
                let cell = self.cell(d.name).expect("every table entry has a cell");
                (d.name.to_string(), cell.load(Ordering::Relaxed))
            })
            .collect()
    }
}

fn lookup(name: &str) -> Result<&'static TunableDef, TunableError> {
    TUNABLES.iter().find(|d| d.name == name).ok_or_else(|| {
        let names: Vec<&str> = TUNABLES.iter().map(|d| d.name).collect();
        TunableError::Unknown {
            name: name.to_string(),
            known: names.join(", "),
        }
    })
}

/// Parses and range-checks a value of `def`.
fn parse(def: &TunableDef, text: &str) -> Result<u64, TunableError> {
    let name = def.name;
    let value = match def.kind {
        Kind::Policy => {
            let text = text.trim();
            let all = larch_policy::ArcPolicy::ALL;
            let named = all.iter().position(|p| p.name() == text);
            match named.map(|i| i as u64).or_else(|| text.parse::<u64>().ok()) {
                Some(value) if value < all.len() as u64 => return Ok(value),
                _ => {
                    let (last, rest) = all.split_last().expect("two policies");
                    return Err(TunableError::NotAChoice {
                        name,
                        choices: rest.iter().map(|p| p.name()).collect::<Vec<_>>().join(", "),
                        last: last.name().to_string(),
                        value: text.to_string(),
                    });
                }
            }
        }
        Kind::Size => parse_size(text).map_err(|source| TunableError::NotASize { name, source })?,
        Kind::Count | Kind::Flag => {
            text.trim()
                .parse::<u64>()
                .map_err(|_| TunableError::NotANumber {
                    name,
                    text: text.to_string(),
                })?
        }
    };
    if (def.min..=def.max).contains(&value) {
        return Ok(value);
    }
    Err(match def.kind {
        // A choice among a few values names them all.
        Kind::Flag | Kind::Count if def.max - def.min < 3 => {
            let mut choices: Vec<String> = (def.min..=def.max).map(|v| v.to_string()).collect();
            let last = choices.pop().expect("min <= max");
            TunableError::NotAChoice {
                name,
                choices: choices.join(", "),
                last,
                value: value.to_string(),
            }
        }
        _ if def.max == u64::MAX => TunableError::TooSmall {
            name,
            min: shown(def, def.min),
            value,
        },
        _ => TunableError::OutOfRange {
            name,
            min: shown(def, def.min),
            max: shown(def, def.max),
            value,
        },
    })
}

/// A tunable that cannot be set to a value, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TunableError {
    /// No tunable of that name.
    #[error("unknown tunable {name:?} (known: {known})")]
    Unknown {
        /// The name given.
        name: String,
        /// Every tunable's name.
        known: String,
    },
    /// A size tunable given something that is not a size.
    #[error("{name}: {source}")]
    NotASize {
        /// The tunable.
        name: &'static str,
        /// Why the text is not a size.
        #[source]
        source: crate::units::SizeError,
    },
    /// A count given something that is not a whole number.
    #[error("{name}: {text:?} is not a whole number")]
    NotANumber {
        /// The tunable.
        name: &'static str,
        /// The text given.
        text: String,
    },
    /// A choice among a few values given another.
    #[error("{name} is {choices} or {last}, not {value}")]
    NotAChoice {
        /// The tunable.
        name: &'static str,
        /// The values it takes, but the last.
        choices: String,
        /// The last value it takes.
        last: String,
        /// The value given, as given.
        value: String,
    },
    /// A value under a tunable's minimum (it has no maximum).
    #[error("{name} must be at least {min}, not {value}")]
    TooSmall {
        /// The tunable.
        name: &'static str,
        /// Its minimum, as users type it.
        min: String,
        /// The value given.
        value: u64,
    },
    /// A value out of a tunable's range.
    #[error("{name} must be between {min} and {max}, not {value}")]
    OutOfRange {
        /// The tunable.
        name: &'static str,
        /// Its minimum, as users type it.
        min: String,
        /// Its maximum, as users type it.
        max: String,
        /// The value given.
        value: u64,
    },
    /// `zfs_arc_max` under `zfs_arc_min`.
    #[error("zfs_arc_max {value} is below zfs_arc_min {min}")]
    ArcMaxBelowMin {
        /// The value given.
        value: u64,
        /// `zfs_arc_min` now.
        min: u64,
    },
    /// `zfs_arc_min` over `zfs_arc_max`.
    #[error("zfs_arc_min {value} is above zfs_arc_max {max}")]
    ArcMinAboveMax {
        /// The value given.
        value: u64,
        /// `zfs_arc_max` now.
        max: u64,
    },
}

fn shown(def: &TunableDef, value: u64) -> String {
    match def.kind {
        Kind::Size => format_size_exact(value),
        Kind::Policy => larch_policy::ArcPolicy::from_tunable(value)
            .name()
            .to_string(),
        _ => value.to_string(),
    }
}

/// Sets one tunable by name (see [`Tunables::set`]).
pub fn set(tunables: &Tunables, name: &str, value: &str) -> Result<(), TunableError> {
    tunables.set(name, value)
}

/// Current values, by name.
pub fn values(tunables: &Tunables) -> BTreeMap<String, u64> {
    tunables.values()
}

/// The default of a tunable, as a number; `None` for an unknown name.
pub fn default_value(name: &str) -> Option<u64> {
    Tunables::default()
        .cell(name)
        .map(|c| c.load(Ordering::Relaxed))
}

/// The default as `larch get` and the docs show it: words where it depends on the pool
/// or the machine, else the value as users type it.
pub fn default_text(def: &TunableDef) -> String {
    match def.default_words {
        Some(words) => words.to_string(),
        None => format_value(def.name, default_value(def.name).unwrap_or(0)),
    }
}

/// A tunable's value as users type it: sizes with the largest suffix that divides them,
/// everything else as a number.
pub fn format_value(name: &str, value: u64) -> String {
    match lookup(name) {
        Ok(def) if def.kind == Kind::Size => format_size_exact(value),
        Ok(def) if def.kind == Kind::Policy => larch_policy::ArcPolicy::from_tunable(value)
            .name()
            .to_string(),
        _ => value.to_string(),
    }
}

/// The tunables saved in a state directory (empty when there is no file).
pub fn load(state_dir: &Path) -> io::Result<BTreeMap<String, String>> {
    match fs::read_to_string(state_dir.join(TUNABLES_FILE)) {
        Ok(text) => {
            serde_json::from_str(&text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(e),
    }
}

/// Saves tunables in a state directory (atomically and durably).
pub fn save(state_dir: &Path, saved: &BTreeMap<String, String>) -> io::Result<()> {
    let text = serde_json::to_string_pretty(saved).map_err(io::Error::other)?;
    crate::files::write_state_file(state_dir, TUNABLES_FILE, text.as_bytes())
}

/// The tunables an engine of `arc_max_bytes` starts with, before saved ones apply: the
/// defaults, with `zfs_arc_max` the pool's ARC size.
pub fn starting(arc_max_bytes: u64) -> Tunables {
    let tunables = Tunables::default();
    tunables.store(
        "zfs_arc_max",
        arc_max_bytes.max(larch_policy::shards::SHARDS as u64),
    );
    tunables
}

/// Applies saved tunables; returns the ones refused, with reasons.
pub fn apply(tunables: &Tunables, saved: &BTreeMap<String, String>) -> Vec<String> {
    let list: Vec<(String, String)> = saved
        .iter()
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    apply_in_turn(tunables, &list)
        .into_iter()
        .map(|(_, why)| why)
        .collect()
}

/// Sets each `(name, value)`; returns the names refused, with reasons. The two ARC limits
/// are checked against each other, so one of them can be refused only because the other
/// comes later (`zfs_arc_min` raised above the old `zfs_arc_max` before that is raised):
/// what is refused is tried once more after the rest, which settles any order.
pub fn apply_in_turn(tunables: &Tunables, list: &[(String, String)]) -> Vec<(String, String)> {
    let refused: Vec<&(String, String)> = list
        .iter()
        .filter(|(name, value)| tunables.set(name, value).is_err())
        .collect();
    refused
        .into_iter()
        .filter_map(|(name, value)| {
            tunables
                .set(name, value)
                .err()
                .map(|why| (name.clone(), why.to_string()))
        })
        .collect()
}

/// The events of a change of the tunables from `before` to `after` (values by name, as
/// [`values`] gives them): a flip of the L2ARC switch for `l2arc_enabled`, a tunable
/// change for each other one whose value differs.
pub fn change_events(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
) -> Vec<crate::events::EventKind> {
    use crate::events::EventKind;
    after
        .iter()
        .filter_map(|(name, &value)| {
            let &previous = before.get(name).filter(|&&p| p != value)?;
            Some(if name == "l2arc_enabled" {
                EventKind::L2arcSwitch {
                    enabled: value != 0,
                }
            } else {
                EventKind::TunableChanged {
                    name: name.clone(),
                    value: format_value(name, value),
                    previous: format_value(name, previous),
                }
            })
        })
        .collect()
}

/// A copy of `tunables`' current values, to try changes on.
pub fn scratch_copy(tunables: &Tunables) -> Tunables {
    let copy = Tunables::default();
    for (name, value) in tunables.values() {
        copy.store(&name, value);
    }
    copy
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_are_a_switch_flip_or_a_tunable_change_each() {
        use crate::events::EventKind;
        let t = Tunables::default();
        let before = values(&t);
        assert!(change_events(&before, &values(&t)).is_empty());
        set(&t, "l2arc_enabled", "0").unwrap();
        set(&t, "l2arc_write_max", "64M").unwrap();
        // Set to what it was: no change.
        set(
            &t,
            "l2arc_noprefetch",
            &before["l2arc_noprefetch"].to_string(),
        )
        .unwrap();
        let mut events = change_events(&before, &values(&t));
        events.sort_by_key(|e| e.class());
        assert_eq!(
            events,
            [
                EventKind::L2arcSwitch { enabled: false },
                EventKind::TunableChanged {
                    name: "l2arc_write_max".into(),
                    value: "64M".into(),
                    previous: format_value("l2arc_write_max", before["l2arc_write_max"]),
                },
            ]
        );
    }

    #[test]
    fn set_parses_checks_and_reports() {
        let t = Tunables::default();
        set(&t, "l2arc_write_max", "8M").unwrap();
        set(&t, "l2arc_mfuonly", "2").unwrap();
        set(&t, "l2arc_noprefetch", "0").unwrap();
        let v = values(&t);
        assert_eq!(v["l2arc_write_max"], 8 << 20);
        assert_eq!(t.l2arc_write_max(), 8 << 20);
        assert_eq!(v["l2arc_mfuonly"], 2);
        assert!(!t.l2arc_noprefetch());
        assert!(set(&t, "l2arc_mfuonly", "3").is_err());
        assert_eq!(t.zfs_arc_policy(), larch_policy::ArcPolicy::Arc);
        set(&t, "zfs_arc_policy", "larch").unwrap();
        assert_eq!(t.zfs_arc_policy(), larch_policy::ArcPolicy::Larch);
        assert_eq!(values(&t)["zfs_arc_policy"], 1);
        assert_eq!(format_value("zfs_arc_policy", 1), "larch");
        set(&t, "zfs_arc_policy", "0").unwrap();
        assert_eq!(t.zfs_arc_policy(), larch_policy::ArcPolicy::Arc);
        let other = set(&t, "zfs_arc_policy", "lru").unwrap_err().to_string();
        assert_eq!(other, "zfs_arc_policy is arc or larch, not lru");
        assert!(set(&t, "zfs_arc_policy", "2").is_err());
        let low = set(&t, "l2arc_write_max", "1").unwrap_err().to_string();
        assert!(low.contains("between 64K and 1G"), "{low}");
        assert!(set(&t, "l2arc_noprefetch", "yes").is_err());
        assert!(
            set(&t, "nope", "1")
                .unwrap_err()
                .to_string()
                .contains("unknown tunable")
        );
        assert_eq!(values(&t).len(), TUNABLES.len());
        // A refused value leaves the old one.
        assert_eq!(t.l2arc_write_max(), 8 << 20);
    }

    #[test]
    fn sizes_take_the_syntax_of_size_flags() {
        // One parser for `--size` and `larch set`: fractions and IEC suffixes too.
        let t = Tunables::default();
        set(&t, "l2arc_write_max", "1.5M").unwrap();
        assert_eq!(t.l2arc_write_max(), 3 << 19);
        set(&t, "zfetch_max_distance", "16MiB").unwrap();
        assert_eq!(t.zfetch_max_distance(), 16 << 20);
        set(&t, "zfs_arc_max", "2g").unwrap();
        assert_eq!(t.zfs_arc_max(), 2 << 30);
        let bad = set(&t, "l2arc_write_max", "12Q").unwrap_err().to_string();
        assert!(
            bad.contains("l2arc_write_max") && bad.contains("unknown suffix"),
            "{bad}"
        );
        // Counts are plain numbers.
        assert!(set(&t, "l2arc_headroom", "2K").is_err());
        set(&t, "l2arc_headroom", "16").unwrap();
        assert_eq!(t.l2arc_headroom(), 16);
    }

    #[test]
    fn the_arc_limits_are_checked_against_each_other() {
        let t = Tunables::default();
        set(&t, "zfs_arc_max", "64M").unwrap();
        assert!(
            set(&t, "zfs_arc_min", "128M")
                .unwrap_err()
                .to_string()
                .contains("above")
        );
        set(&t, "zfs_arc_min", "32M").unwrap();
        assert!(
            set(&t, "zfs_arc_max", "16M")
                .unwrap_err()
                .to_string()
                .contains("below")
        );
    }

    #[test]
    fn defaults_and_formatted_values_match_the_table() {
        let t = Tunables::default();
        for def in TUNABLES {
            let value = values(&t)[def.name];
            assert_eq!(default_value(def.name), Some(value), "{}", def.name);
            assert!(
                (def.min..=def.max).contains(&value) || def.default_words.is_some(),
                "{}: default {value} outside {}..={}",
                def.name,
                def.min,
                def.max
            );
            if def.default_words.is_none() {
                // The shown default parses back to the default.
                let text = default_text(def);
                let probe = Tunables::default();
                probe.set(def.name, &text).unwrap();
                assert_eq!(probe.values()[def.name], value, "{}", def.name);
            }
        }
        assert_eq!(default_value("nope"), None);
        assert_eq!(format_value("l2arc_write_max", 96 << 10), "96K");
        assert_eq!(format_value("l2arc_write_max", (1 << 20) + 1), "1048577");
        assert_eq!(format_value("zfetch_max_distance", 0), "0");
        assert_eq!(format_value("l2arc_headroom", 1024), "1024");
    }
}

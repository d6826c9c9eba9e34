//! What a volume is, as every part sees it: its identity, geometry and cache and sync
//! properties. Plain data, known to every part; the table of volumes is the parent module.
//!
//! Some of it changes while the volume is served (`larch set VOLUME ...`, `larch volume
//! set NAME volsize=...`): the size and the four properties of [`VolumeProps`]. The
//! volume's entry keeps them in atomics ([`LiveInfo`]) and every request reads a
//! [`VolumeInfo`] snapshot of them with two atomic loads, no lock; the guid, the slot, the
//! block size and `readonly` never change.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use larch_policy::BlockKey;

/// The block number of block-map page 0 in an object volume's key space: above every
/// data block (a volume has at most 2^41, a PiB of 512-byte blocks) and within the L2
/// index's keys. The pages are the volume's metadata (`arc::map_pages`).
pub const MAP_PAGE_KEYS: u64 = 1 << 43;

/// Whether `block` of a volume's key space is a block-map page.
pub fn is_map_page(block: u64) -> bool {
    block >= MAP_PAGE_KEYS
}

/// The smallest block-map page (in the ARC) fed to cache devices: a quarter of the bytes
/// its padded copy takes there, so that padding at most quadruples what a fed page costs.
pub const MIN_FED_PAGE_BYTES: usize = larch_object::CACHED_PAGE_BYTES as usize / 4;

/// How a volume uses a cache level (ZFS `primarycache`/`secondarycache`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheMode {
    /// Data and metadata.
    #[default]
    All,
    /// Metadata only: an object volume's block-map pages (a file or device volume has no
    /// metadata, so for it this is "nothing").
    Metadata,
    /// Nothing.
    None,
}

/// When a volume's writes are durable (ZFS `sync`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SyncMode {
    /// FUA writes and FLUSH are made durable before they are acknowledged.
    #[default]
    Standard,
    /// Every write is made durable before it is acknowledged.
    Always,
    /// Nothing waits for durability: FUA and FLUSH are acknowledged at once. A crash
    /// loses up to `zfs_txg_timeout` seconds of acknowledged writes.
    Disabled,
}

/// Where a volume's sync writes go to be durable (ZFS `logbias`).
///
/// OpenZFS's `throughput` writes the data of large sync writes to the main pool at once
/// and logs only a pointer to it, so the log device's bandwidth is left to other
/// datasets. larch's backing stores are written in place by TXGs only, so there is no
/// such pointer to log: with `throughput`, a sync write or FLUSH of the volume does not
/// use the log device at all and waits for a TXG sync instead (higher latency, no log
/// device bandwidth).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogBias {
    /// Sync writes are committed to the log device when the pool has one.
    #[default]
    Latency,
    /// Sync writes wait for a TXG sync; the log device is not used for the volume.
    Throughput,
}

/// A property value as users type and read it (`all`, `standard`, `latency`, ...).
pub trait PropertyValue: Sized + Copy + PartialEq + 'static {
    /// Every value with its name, the default first.
    const NAMES: &'static [(&'static str, Self)];

    /// Its name.
    fn name(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(_, v)| *v == self)
            .map_or("?", |(n, _)| n)
    }

    /// The value named `text`, or why there is none.
    fn parse(text: &str) -> Result<Self, String> {
        match Self::NAMES.iter().find(|(n, _)| *n == text) {
            Some((_, v)) => Ok(*v),
            None => {
                let names: Vec<&str> = Self::NAMES.iter().map(|(n, _)| *n).collect();
                Err(format!("{text:?}: expected {}", names.join(", ")))
            }
        }
    }
}

impl PropertyValue for CacheMode {
    const NAMES: &'static [(&'static str, CacheMode)] = &[
        ("all", CacheMode::All),
        ("metadata", CacheMode::Metadata),
        ("none", CacheMode::None),
    ];
}

impl PropertyValue for SyncMode {
    const NAMES: &'static [(&'static str, SyncMode)] = &[
        ("standard", SyncMode::Standard),
        ("always", SyncMode::Always),
        ("disabled", SyncMode::Disabled),
    ];
}

impl PropertyValue for LogBias {
    const NAMES: &'static [(&'static str, LogBias)] = &[
        ("latency", LogBias::Latency),
        ("throughput", LogBias::Throughput),
    ];
}

/// The properties of a volume a user may change while it is served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VolumeProps {
    /// `primarycache`.
    pub primarycache: CacheMode,
    /// `secondarycache`.
    pub secondarycache: CacheMode,
    /// `sync`.
    pub sync: SyncMode,
    /// `logbias`.
    pub logbias: LogBias,
}

impl VolumeProps {
    /// One word: two bits per property, in the order of the fields.
    fn pack(self) -> u32 {
        let index = |i: Option<usize>| i.expect("a value of its own list") as u32;
        let cache = |m: CacheMode| index(CacheMode::NAMES.iter().position(|(_, v)| *v == m));
        let sync = index(SyncMode::NAMES.iter().position(|(_, v)| *v == self.sync));
        let bias = index(LogBias::NAMES.iter().position(|(_, v)| *v == self.logbias));
        cache(self.primarycache) | cache(self.secondarycache) << 2 | sync << 4 | bias << 6
    }

    /// The properties of a word [`VolumeProps::pack`] made.
    fn unpack(word: u32) -> VolumeProps {
        fn at<T: PropertyValue>(word: u32, shift: u32) -> T {
            T::NAMES[(word >> shift & 3) as usize].1
        }
        VolumeProps {
            primarycache: at(word, 0),
            secondarycache: at(word, 2),
            sync: at(word, 4),
            logbias: at(word, 6),
        }
    }
}

/// A volume's identity and properties, as the caller registers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VolumeSpec {
    /// Identity of the volume in cache-device logs and intent-log records.
    pub guid: u64,
    /// Block size (`volblocksize`).
    pub block_bytes: u32,
    /// Size in bytes (`volsize`); `None`: the backing store's size.
    pub size_bytes: Option<u64>,
    /// `primarycache`.
    pub primarycache: CacheMode,
    /// `secondarycache`.
    pub secondarycache: CacheMode,
    /// `sync`.
    pub sync: SyncMode,
    /// `logbias`.
    pub logbias: LogBias,
    /// `readonly`.
    pub read_only: bool,
}

impl VolumeSpec {
    /// A writable volume of `block_bytes` blocks, the backing store's size, that caches
    /// everything, `sync=standard`, `logbias=latency`.
    pub fn new(guid: u64, block_bytes: u32) -> VolumeSpec {
        VolumeSpec {
            guid,
            block_bytes,
            size_bytes: None,
            primarycache: CacheMode::All,
            secondarycache: CacheMode::All,
            sync: SyncMode::Standard,
            logbias: LogBias::Latency,
            read_only: false,
        }
    }

    /// Its changeable properties.
    pub fn props(&self) -> VolumeProps {
        VolumeProps {
            primarycache: self.primarycache,
            secondarycache: self.secondarycache,
            sync: self.sync,
            logbias: self.logbias,
        }
    }
}

/// What the engine needs to know of a volume on every request: a snapshot (see the
/// module documentation), taken once per request or step so that one request sees one
/// size and one set of properties throughout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VolumeInfo {
    /// Identity of the volume in cache-device logs and intent-log records.
    pub guid: u64,
    /// Its slot: the volume part of every in-memory key.
    pub slot: u16,
    /// Size in bytes.
    pub size_bytes: u64,
    /// Block size (`volblocksize`).
    pub block_bytes: u32,
    /// `primarycache`.
    pub primarycache: CacheMode,
    /// `secondarycache`.
    pub secondarycache: CacheMode,
    /// `sync`.
    pub sync: SyncMode,
    /// `logbias`.
    pub logbias: LogBias,
    /// `readonly`.
    pub read_only: bool,
}

/// The parts of a volume's [`VolumeInfo`] that change while it is served, each read with
/// one atomic load.
#[derive(Debug)]
pub(crate) struct LiveInfo {
    size_bytes: AtomicU64,
    props: AtomicU32,
}

impl LiveInfo {
    pub(crate) fn new(size_bytes: u64, props: VolumeProps) -> LiveInfo {
        LiveInfo {
            size_bytes: AtomicU64::new(size_bytes),
            props: AtomicU32::new(props.pack()),
        }
    }

    /// `info` with the size and properties in force now.
    pub(crate) fn snapshot(&self, fixed: &VolumeInfo) -> VolumeInfo {
        let props = self.props();
        VolumeInfo {
            size_bytes: self.size_bytes.load(Ordering::Acquire),
            primarycache: props.primarycache,
            secondarycache: props.secondarycache,
            sync: props.sync,
            logbias: props.logbias,
            ..*fixed
        }
    }

    pub(crate) fn props(&self) -> VolumeProps {
        VolumeProps::unpack(self.props.load(Ordering::Acquire))
    }

    pub(crate) fn set_props(&self, props: VolumeProps) {
        self.props.store(props.pack(), Ordering::Release);
    }

    pub(crate) fn set_size_bytes(&self, size_bytes: u64) {
        self.size_bytes.store(size_bytes, Ordering::Release);
    }
}

impl VolumeInfo {
    /// Its changeable properties.
    pub fn props(&self) -> VolumeProps {
        VolumeProps {
            primarycache: self.primarycache,
            secondarycache: self.secondarycache,
            sync: self.sync,
            logbias: self.logbias,
        }
    }

    /// Whether a write with FUA set to `fua` is acknowledged only once durable.
    pub fn write_is_sync(&self, fua: bool) -> bool {
        match self.sync {
            SyncMode::Disabled => false,
            SyncMode::Always => true,
            SyncMode::Standard => fua,
        }
    }

    /// Bytes of block `block` (the last block may be short; 0 past the end).
    pub fn block_len(&self, block: u64) -> usize {
        let start = block.saturating_mul(u64::from(self.block_bytes));
        self.size_bytes
            .saturating_sub(start)
            .min(u64::from(self.block_bytes)) as usize
    }

    /// Bytes of a cached copy of block `block`: its length inside the volume, or a whole
    /// block past the end (only whole blocks are ever cut off: a volume is resized only
    /// from and to whole numbers of blocks, so a copy of a block past the end, in the
    /// moments before a shrink drops it, is of a whole block). A block-map page's copy
    /// on a cache device is always [`larch_object::CACHED_PAGE_BYTES`] (padded: see
    /// `arc::map_pages`).
    pub fn cached_len(&self, block: u64) -> usize {
        if is_map_page(block) {
            larch_object::CACHED_PAGE_BYTES as usize
        } else if block < self.blocks() {
            self.block_len(block)
        } else {
            self.block_bytes as usize
        }
    }

    /// Whether the volume keeps copies of `block` on cache devices now: a data block
    /// inside it under `secondarycache=all`; a block-map page (metadata) under `all` or
    /// `metadata`.
    pub fn keeps_on_devices(&self, block: u64) -> bool {
        if is_map_page(block) {
            self.secondarycache != CacheMode::None
        } else {
            block < self.blocks() && self.secondarycache == CacheMode::All
        }
    }

    /// Number of blocks.
    pub fn blocks(&self) -> u64 {
        self.size_bytes.div_ceil(u64::from(self.block_bytes))
    }

    /// The in-memory key of block `block`.
    pub fn key(&self, block: u64) -> BlockKey {
        BlockKey::new(u64::from(self.slot), block)
    }

    /// Device offset of block `block` on the backing store.
    pub fn offset_of(&self, block: u64) -> u64 {
        block * u64::from(self.block_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every combination of the four properties comes back from its word as it went in,
    /// and distinct combinations make distinct words.
    #[test]
    fn properties_pack_into_one_word_and_back() {
        let mut words = std::collections::HashSet::new();
        for &(_, primarycache) in CacheMode::NAMES {
            for &(_, secondarycache) in CacheMode::NAMES {
                for &(_, sync) in SyncMode::NAMES {
                    for &(_, logbias) in LogBias::NAMES {
                        let props = VolumeProps {
                            primarycache,
                            secondarycache,
                            sync,
                            logbias,
                        };
                        let word = props.pack();
                        assert_eq!(VolumeProps::unpack(word), props, "{word:#x}");
                        assert!(words.insert(word), "{props:?} packs like another");
                    }
                }
            }
        }
        assert_eq!(words.len(), 3 * 3 * 3 * 2);
        assert_eq!(
            VolumeProps::default().pack(),
            0,
            "the defaults are the first names"
        );
    }

    #[test]
    fn values_parse_from_and_print_as_their_names() {
        assert_eq!(CacheMode::parse("metadata"), Ok(CacheMode::Metadata));
        assert_eq!(LogBias::parse("throughput"), Ok(LogBias::Throughput));
        assert_eq!(SyncMode::Always.name(), "always");
        let err = SyncMode::parse("sometimes").unwrap_err();
        assert_eq!(err, "\"sometimes\": expected standard, always, disabled");
        let live = LiveInfo::new(4096, VolumeProps::default());
        let props = VolumeProps {
            logbias: LogBias::Throughput,
            ..VolumeProps::default()
        };
        live.set_props(props);
        live.set_size_bytes(8192);
        let fixed = VolumeInfo {
            guid: 7,
            slot: 1,
            size_bytes: 0,
            block_bytes: 4096,
            primarycache: CacheMode::None,
            secondarycache: CacheMode::None,
            sync: SyncMode::Disabled,
            logbias: LogBias::Latency,
            read_only: true,
        };
        let now = live.snapshot(&fixed);
        assert_eq!(
            (now.size_bytes, now.blocks(), now.props()),
            (8192, 2, props)
        );
        assert_eq!((now.guid, now.slot, now.read_only), (7, 1, true));
    }
}

//! What a volume is, as every part sees it: its identity, geometry and cache and sync
//! properties. Plain data, known to every part; the table of volumes is the parent module.

use larch_policy::BlockKey;

/// How a volume uses a cache level (ZFS `primarycache`/`secondarycache`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheMode {
    /// Data and metadata.
    All,
    /// Metadata only (the NBD front end reads data, so for it this is "nothing").
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

/// A volume's identity and properties, as the caller registers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VolumeSpec {
    /// Identity of the volume in cache-device logs and intent-log records.
    pub guid: u64,
    /// Block size (`volblocksize`).
    pub block_bytes: u32,
    /// `primarycache`.
    pub primarycache: CacheMode,
    /// `secondarycache`.
    pub secondarycache: CacheMode,
    /// `sync`.
    pub sync: SyncMode,
    /// `readonly`.
    pub read_only: bool,
}

impl VolumeSpec {
    /// A writable volume of `block_bytes` blocks that caches everything, `sync=standard`.
    pub fn new(guid: u64, block_bytes: u32) -> VolumeSpec {
        VolumeSpec {
            guid,
            block_bytes,
            primarycache: CacheMode::All,
            secondarycache: CacheMode::All,
            sync: SyncMode::Standard,
            read_only: false,
        }
    }
}

/// What the engine needs to know of a volume on every request.
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
    /// `readonly`.
    pub read_only: bool,
}

impl VolumeInfo {
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

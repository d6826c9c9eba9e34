//! The engine's errors as the parts raise them.

/// An I/O error naming the device (`path`) it came from.
pub(crate) fn device_error(path: &std::path::Path, e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(format!("{}: {e}", path.display()))
}

/// Why a write or a FLUSH was refused or could not be made durable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// The volume failed earlier (a TXG, a merge or a record of it could not be stored):
    /// its acknowledged writes may be lost, so it takes no more. Says why, as recorded.
    #[error("{0}")]
    VolumeFailed(String),
    /// A block that is not a whole block of the volume.
    #[error(
        "block {block} of {len} bytes does not fit volume {guid:#x} ({block_bytes} bytes per block, {size_bytes} bytes)"
    )]
    BlockMisfit {
        block: u64,
        len: usize,
        guid: u64,
        block_bytes: u32,
        size_bytes: u64,
    },
    /// The engine is stopping: no TXG will sync any more.
    #[error("the pool is shutting down")]
    ShuttingDown,
    /// The syncer's thread ended (a bug; the daemon's log says why).
    #[error("the TXG syncer stopped (see the daemon's log)")]
    SyncerStopped,
}

/// The pool could not record that a cache device's log must not be rebuilt (coherence
/// rule 4): the caller must not write the backing stores.
#[derive(Debug, thiserror::Error)]
pub enum DistrustError {
    /// The pool's sink failed.
    #[error("recording that cache device {guid:#x} must be formatted: {source}")]
    Record {
        guid: u64,
        #[source]
        source: std::io::Error,
    },
    /// The engine was given no sink (a pool without a state directory).
    #[error("no place to record that cache device {guid:#x} must be formatted")]
    NoSink { guid: u64 },
}

/// Why a TXG was not stored whole.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// Its tombstones could not be made durable, nor the devices' logs forgotten.
    #[error(transparent)]
    Tombstones(#[from] DistrustError),
    /// A dirty block's volume is not in the table (a bug).
    #[error("volume slot {0} is not registered")]
    UnknownSlot(u16),
    /// A volume's backing store failed.
    #[error("backing store {path} failed: {source}; TXG {txg} is not stored")]
    Backing {
        path: String,
        txg: u64,
        #[source]
        source: std::io::Error,
    },
}

/// Why the log device stays in the pool when asked to leave.
#[derive(Debug, thiserror::Error)]
#[error(
    "TXG {txg} could not be synced ({source}): the log device may hold the only copy of acknowledged sync writes, so it stays"
)]
pub struct DetachError {
    pub txg: u64,
    #[source]
    pub source: WriteError,
}

/// Why a volume could not join the engine's table, or a recorded failure could not be
/// applied to one.
#[derive(Debug, thiserror::Error)]
pub enum VolumeTableError {
    /// `volblocksize` 0.
    #[error("a volume's block size must not be 0")]
    ZeroBlockSize,
    /// The guid is in the table already.
    #[error("volume {0:#x} is registered already")]
    Registered(u64),
    /// The table is full.
    #[error("more than {0} volumes")]
    Full(usize),
    /// More blocks than a cache key can name.
    #[error("{blocks} blocks of {block_bytes} bytes: more than a cache key holds ({max})")]
    TooManyBlocks {
        blocks: u64,
        block_bytes: u32,
        max: u64,
    },
    /// A size (`volsize` of `pool.json`) beyond the end of the backing store.
    #[error(
        "a size of {size_bytes} bytes, but the backing store has {backing_bytes}: restore \
         the store, or set the volume's volsize in pool.json to at most its size"
    )]
    LargerThanBacking { size_bytes: u64, backing_bytes: u64 },
    /// A recorded failure names a volume the pool does not have.
    #[error("a failure is recorded for volume {0:#x}, which the pool does not have")]
    UnknownFailed(u64),
    /// Recording the volume's intent-log state when it joined a pool with a log device.
    #[error("recording its intent-log state: {0}")]
    LogState(#[source] std::io::Error),
}

/// A record the pool keeps for the engine (a volume's failure, a committed TXG) could not
/// be written.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The pool's sink for a volume's failure failed.
    #[error(
        "recording the failure of volume {guid:#x} in the pool's state directory: {source}; after a restart its {lost} lost blocks would read as older bytes"
    )]
    VolumeFailure {
        guid: u64,
        lost: usize,
        #[source]
        source: std::io::Error,
    },
    /// The pool's sink for the committed TXG failed.
    #[error("recording committed TXG {txg}: {source}")]
    CommittedTxg {
        txg: u64,
        #[source]
        source: std::io::Error,
    },
    /// The engine was given no sink for the committed TXG.
    #[error("no place to record committed TXG {0}: a restart may replay older log records")]
    NoCommittedSink(u64),
}

/// A value of `pool.json` a user can get wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `arc_max_bytes` under 1 MiB.
    #[error("arc_max_bytes {0} is below 1 MiB")]
    ArcTooSmall(u64),
    /// A `volblocksize` that is not a power of two from 4K to 128K.
    #[error("volume {name}: volblocksize {volblocksize} must be a power of two from 4K to 128K")]
    BlockSize { name: String, volblocksize: u32 },
    /// Two volumes of one name.
    #[error("volume name {0:?} is used twice")]
    NameTwice(String),
}

/// The L2 index cannot hold a device's ring.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a ring of {ring_bytes} bytes in {sector_bytes}-byte sectors is too large for the L2 index"
)]
pub struct IndexTooLarge {
    pub ring_bytes: u64,
    pub sector_bytes: u64,
}

/// Why a volume's size or properties did not change, or changed only in part.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    /// A size that is not a whole number of blocks (OpenZFS asks the same of `volsize`).
    #[error("volsize {size_bytes} is not a multiple of the volume's volblocksize ({block_bytes})")]
    NotWholeBlocks { size_bytes: u64, block_bytes: u32 },
    /// The volume's size now is not a whole number of blocks (a backing file of another
    /// size): its last block would change length, which cached copies cannot follow.
    #[error(
        "the volume has {size_bytes} bytes, not a whole number of its {block_bytes}-byte \
         blocks: only volumes of whole blocks are resized"
    )]
    PartBlock { size_bytes: u64, block_bytes: u32 },
    /// No size at all.
    #[error("volsize 0: a volume needs at least one block")]
    Empty,
    /// More blocks than the in-memory keys and the L2 index hold.
    #[error(transparent)]
    TooManyBlocks(#[from] VolumeTableError),
    /// A read-only volume's backing store is not opened for writing.
    #[error("the volume is read-only: its backing store cannot be resized")]
    ReadOnly,
    /// The backing store refused (a device too small, an object store) or failed.
    #[error("the backing store {path}: {source}")]
    Backing {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The blocks past the new end could not be synced first (the syncer stopped).
    #[error("syncing the volume before cutting its tail: {0}")]
    Sync(#[from] WriteError),
    /// The tombstones of the dropped cache-device copies could not be made durable, nor
    /// the devices' logs emptied, nor that recorded.
    #[error(transparent)]
    Tombstones(#[from] DistrustError),
    /// The caller's record of the new size (`pool.json`) failed.
    #[error("recording the new size: {0}")]
    Record(#[source] std::io::Error),
}

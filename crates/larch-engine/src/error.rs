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

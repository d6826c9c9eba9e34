//! A volume's pending partial writes, by block: the table each volume keeps
//! (`VolumeEntry::partials`). Data only; the flows over it are the parent module's.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;

use crate::lock::{Rank, RankedMutex};

/// One write's piece of a block.
pub(crate) struct Piece {
    /// Where it starts in the block.
    pub(crate) at: usize,
    pub(crate) bytes: Bytes,
}

/// Where a pending partial is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Waiting for a merge to start.
    Queued,
    /// Its block is being read; writes still join it.
    Reading,
    /// Its pieces are being laid over the block and made dirty; writers wait.
    Applying,
}

/// The writes of one block waiting for its merge.
pub(crate) struct Pending {
    pub(crate) stage: Stage,
    pub(crate) pieces: Vec<Piece>,
    /// Dirty bytes reserved for it (released when it is merged).
    pub(crate) reserved: u64,
    /// Set to `true` once it is merged (or failed) and gone from the table.
    pub(crate) done: tokio::sync::watch::Sender<bool>,
}

/// A volume's pending partial writes, by block.
pub(crate) struct Partials {
    pub(crate) table: RankedMutex<HashMap<u64, Pending>>,
    /// Entries in the table: lets reads and whole-block writes skip the lock when 0.
    pub(crate) count: AtomicUsize,
}

impl Default for Partials {
    fn default() -> Partials {
        Partials {
            table: RankedMutex::new(Rank::Partials, HashMap::new()),
            count: AtomicUsize::new(0),
        }
    }
}

impl std::fmt::Debug for Partials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Partials({})", self.count.load(Ordering::Relaxed))
    }
}

impl Partials {
    /// Blocks with writes waiting for their merge.
    pub(crate) fn len(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// Whether `block` has writes waiting for their merge.
    pub(crate) fn has(&self, block: u64) -> bool {
        self.len() > 0 && self.table.lock().contains_key(&block)
    }

    /// The completion of `block`'s pending partial, if it has one.
    pub(crate) fn waiter(&self, block: u64) -> Option<tokio::sync::watch::Receiver<bool>> {
        self.table.lock().get(&block).map(|p| p.done.subscribe())
    }
}

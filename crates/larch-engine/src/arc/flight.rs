//! Reads in flight: a read of a block from a cache device or the backing store that other
//! readers of the same block wait for instead of issuing their own. The ARC's shards keep
//! them beside the buffers (a lookup that misses finds the read to join under the same
//! lock); the read path leads them.

use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;

use crate::lock::RankedMutex;

/// Where a block read was served from, fastest first: a request of several blocks is as
/// slow as its slowest, so it is counted by the largest of its blocks' sources.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Served {
    /// A buffer in the ARC.
    Arc,
    /// A cache device (or the read of another client that went to one).
    L2,
    /// The backing store (or the read of another client that went to it).
    Backing,
}

/// A read's bytes (`None`: the backing store failed) and where they came from.
pub(crate) type ReadOutcome = (Option<Bytes>, Served);

/// A read of a block from a cache device or the backing store that other readers of the
/// same block wait for instead of issuing their own.
pub(crate) struct InFlight {
    /// `Some(None)`: the reader leading it gave up (its client went away) before the read
    /// ended; a waiter then reads the block itself.
    result: RankedMutex<Option<Option<ReadOutcome>>>,
    done: tokio::sync::Notify,
    /// A write overtook this read: its data must not be installed in the cache.
    invalidated: AtomicBool,
    /// A demand read joined it (it may be a prefetch's).
    demand_joined: AtomicBool,
}

impl InFlight {
    pub(crate) fn new() -> InFlight {
        InFlight {
            result: RankedMutex::leaf(None),
            done: tokio::sync::Notify::new(),
            invalidated: AtomicBool::new(false),
            demand_joined: AtomicBool::new(false),
        }
    }

    /// A demand read waits for this one.
    pub(crate) fn join_demand(&self) {
        self.demand_joined.store(true, Ordering::Relaxed);
    }

    pub(crate) fn demand_joined(&self) -> bool {
        self.demand_joined.load(Ordering::Relaxed)
    }

    /// A write changed the block: the bytes being read are older than the cache's.
    pub(crate) fn invalidate(&self) {
        self.invalidated.store(true, Ordering::Release);
    }

    pub(crate) fn invalidated(&self) -> bool {
        self.invalidated.load(Ordering::Acquire)
    }

    pub(crate) fn complete(&self, data: Option<Bytes>, served: Served) {
        *self.result.lock() = Some(Some((data, served)));
        self.done.notify_waiters();
    }

    pub(crate) fn abandon(&self) {
        *self.result.lock() = Some(None);
        self.done.notify_waiters();
    }

    /// The read's outcome, or `None` when its leader gave up.
    pub(crate) async fn wait(&self) -> Option<ReadOutcome> {
        loop {
            let notified = self.done.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(result) = self.result.lock().clone() {
                return result;
            }
            notified.await;
        }
    }
}

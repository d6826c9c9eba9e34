//! The read path: a block through the ARC, the cache devices and the backing store.
//!
//! A buffer in the ARC is a hit (one shard lock). Otherwise one reader leads and the
//! others wait for it ([`InFlight`]: concurrent misses share one I/O); the leader reads
//! the cache device if the L2 index has a readable copy (verified, see
//! [`crate::l2::read`]) and falls back to the backing store on any failure; the block then
//! enters the ARC, unless a write overtook the read.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;

use crate::arc::{Lookup, index_key};
use crate::engine::Engine;
use crate::l2::read::L2Read;
use crate::lock::RankedMutex;
use crate::volumes::VolumeEntry;

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
type ReadOutcome = (Option<Bytes>, Served);

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

    fn complete(&self, data: Option<Bytes>, served: Served) {
        *self.result.lock() = Some(Some((data, served)));
        self.done.notify_waiters();
    }

    fn abandon(&self) {
        *self.result.lock() = Some(None);
        self.done.notify_waiters();
    }

    /// The read's outcome, or `None` when its leader gave up.
    async fn wait(&self) -> Option<ReadOutcome> {
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

impl Engine {
    /// Reads one block of a volume through the ARC, the cache devices and the backing
    /// store. `None` means the backing store failed (the client gets EIO).
    pub async fn read_block(
        self: &Arc<Self>,
        vol: &Arc<VolumeEntry>,
        block: u64,
        prefetch: bool,
    ) -> Option<Bytes> {
        self.read_block_served(vol, block, prefetch).await.0
    }

    /// [`Engine::read_block`], and where the block came from.
    pub async fn read_block_served(
        self: &Arc<Self>,
        vol: &Arc<VolumeEntry>,
        block: u64,
        prefetch: bool,
    ) -> (Option<Bytes>, Served) {
        let info = &vol.info;
        if block >= info.blocks() {
            return (None, Served::Arc);
        }
        if vol.is_lost(block) {
            return (None, Served::Backing);
        }
        let key = info.key(block);
        let (flight, generation, l2) = loop {
            let access = self.arc.access_of(info, key, 0, prefetch);
            let lookup = self
                .arc
                .shard(&key)
                .lookup(access, || self.fresh_generation());
            match lookup {
                Lookup::Hit(buf) => return (Some(buf), Served::Arc),
                Lookup::Wait(flight) => {
                    self.stats.iohits.fetch_add(1, Ordering::Relaxed);
                    if let Some(result) = flight.wait().await {
                        return result;
                    }
                    // Its leader gave up: look again (and maybe lead).
                }
                Lookup::Lead {
                    flight,
                    generation,
                    l2,
                } => break (flight, generation, l2),
            }
        };
        // Should this future be dropped before the read ends (its client went away), the
        // flight leaves the table and its waiters read the block themselves.
        let leading = Leading {
            engine: self,
            key,
            flight: &flight,
        };
        let psize = info.block_len(block);
        let mut data = None;
        let mut served = Served::L2;
        let mut count_miss = true;
        // The L2ARC switch off: the copy stays indexed, unread.
        let l2_enabled = self.tunables.l2arc_enabled();
        if let Some(loc) = l2.filter(|_| l2_enabled) {
            match self.read_l2(&key, index_key(&key), psize, loc).await {
                L2Read::Hit(bytes) => data = Some(bytes),
                // The copy failed, or the ring wrote over it during the read; either is
                // counted: the backing store has the block.
                L2Read::BadCopy | L2Read::Evicted => count_miss = false,
                L2Read::Unavailable => {}
            }
        }
        if data.is_none() {
            if count_miss && l2_enabled && self.l2.any_in_use() {
                self.stats.l2_misses.fetch_add(1, Ordering::Relaxed);
            }
            data = self.read_backing(vol, block, psize).await;
            served = Served::Backing;
        }
        // Looked at again after the read: a TXG that failed meanwhile marked its blocks
        // lost before dropping them from the ARC (which made this lookup miss), and the
        // bytes just read are then older than a write it acknowledged. They are neither
        // served nor cached.
        if data.is_some() && vol.is_lost(block) {
            data = None;
        }
        std::mem::forget(leading);
        let access = self.arc.access_of(info, key, generation, prefetch);
        self.arc
            .shard(&key)
            .finish_read(&access, &flight, data.as_ref());
        flight.complete(data.clone(), served);
        (data, served)
    }

    /// Reads a block from its volume's backing store on the blocking pool, into a buffer
    /// of exactly the block's size (it may enter the ARC).
    async fn read_backing(
        self: &Arc<Self>,
        vol: &Arc<VolumeEntry>,
        block: u64,
        psize: usize,
    ) -> Option<Bytes> {
        self.stats.backing_reads.fetch_add(1, Ordering::Relaxed);
        let vol = Arc::clone(vol);
        self.spawn_blocking(move || {
            let mut buf = vec![0u8; psize];
            vol.backing
                .read_at(&mut buf, vol.info.offset_of(block))
                .ok()?;
            Some(Bytes::from(buf))
        })
        .await
        .ok()
        .flatten()
    }
}

/// A read led by a future that may be dropped before it ends (see
/// [`Engine::read_block_served`]); forgotten once the read is finished.
struct Leading<'a> {
    engine: &'a Engine,
    key: larch_policy::BlockKey,
    flight: &'a Arc<InFlight>,
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        self.engine
            .arc
            .shard(&self.key)
            .abandon_read(&self.key, self.flight);
        self.flight.abandon();
    }
}

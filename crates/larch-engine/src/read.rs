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

/// A read of a block from a cache device or the backing store that other readers of the
/// same block wait for instead of issuing their own.
pub(crate) struct InFlight {
    result: RankedMutex<Option<Option<Bytes>>>,
    done: tokio::sync::Notify,
    /// A write overtook this read: its data must not be installed in the cache.
    invalidated: AtomicBool,
}

impl InFlight {
    pub(crate) fn new() -> InFlight {
        InFlight {
            result: RankedMutex::leaf(None),
            done: tokio::sync::Notify::new(),
            invalidated: AtomicBool::new(false),
        }
    }

    /// A write changed the block: the bytes being read are older than the cache's.
    pub(crate) fn invalidate(&self) {
        self.invalidated.store(true, Ordering::Release);
    }

    pub(crate) fn invalidated(&self) -> bool {
        self.invalidated.load(Ordering::Acquire)
    }

    fn complete(&self, data: Option<Bytes>) {
        *self.result.lock() = Some(data);
        self.done.notify_waiters();
    }

    async fn wait(&self) -> Option<Bytes> {
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
        let info = &vol.info;
        if block >= info.blocks() {
            return None;
        }
        let key = info.key(block);
        let access = self.arc.access_of(info, key, 0, prefetch);
        let lookup = self
            .arc
            .shard(&key)
            .lookup(access, || self.fresh_generation());
        let (flight, generation, l2) = match lookup {
            Lookup::Hit(buf) => return Some(buf),
            Lookup::Wait(flight) => {
                self.stats.iohits.fetch_add(1, Ordering::Relaxed);
                return flight.wait().await;
            }
            Lookup::Lead {
                flight,
                generation,
                l2,
            } => (flight, generation, l2),
        };
        let psize = info.block_len(block);
        let mut data = None;
        let mut count_miss = true;
        if let Some(loc) = l2 {
            match self.read_l2(&key, index_key(&key), psize, loc).await {
                L2Read::Hit(bytes) => data = Some(bytes),
                // The copy failed and is counted: the backing store has the block.
                L2Read::BadCopy => count_miss = false,
                L2Read::Unavailable => {}
            }
        }
        if data.is_none() {
            if count_miss && self.l2.any_in_use() {
                self.stats.l2_misses.fetch_add(1, Ordering::Relaxed);
            }
            data = self.read_backing(vol, block, psize).await;
        }
        let access = self.arc.access_of(info, key, generation, prefetch);
        self.arc
            .shard(&key)
            .finish_read(&access, &flight, data.as_ref());
        flight.complete(data.clone());
        data
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
        tokio::task::spawn_blocking(move || {
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

//! The read path: a block through the ARC, the cache devices and the backing store.
//!
//! A buffer in the ARC is a hit (one shard lock). Otherwise one reader leads and the
//! others wait for it ([`InFlight`]: concurrent misses share one I/O); the leader reads
//! the cache device if the L2 index has a readable copy (verified, see
//! [`crate::l2::read`]) and falls back to the backing store on any failure. The block then
//! enters the ARC, unless a write overtook the read, without a second hold of the shard's
//! lock: the leader queues the install, and the next holder of the lock applies it before
//! anything else (`arc::install`). So a miss, an L2 hit included, takes its shard's lock
//! once, as a hit does.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;

pub use crate::arc::Served;
use crate::arc::{ArcCache, InFlight, Lookup, index_key};
use crate::l2::L2Arc;
use crate::l2::read::L2Read;
use crate::run::{Background, Generations};
use crate::stats::EngineStats;
use crate::tunables::Tunables;
use crate::volumes::{CacheMode, VolumeEntry};

/// Tries of a client's block read from the backing store (see
/// [`VolumeEntry::read_block_into`]).
const CLIENT_READ_ATTEMPTS: u32 = 1;

/// The read path: the parts a block read goes through.
pub(crate) struct Reader {
    pub(crate) arc: Arc<ArcCache>,
    pub(crate) l2: Arc<L2Arc>,
    pub(crate) stats: Arc<EngineStats>,
    pub(crate) tunables: Arc<Tunables>,
    pub(crate) generations: Arc<Generations>,
    pub(crate) background: Arc<Background>,
}

impl Reader {
    /// Reads one block of a volume through the ARC, the cache devices and the backing
    /// store. `None` means the backing store failed (the client gets EIO).
    pub(crate) async fn read_block(
        &self,
        vol: &Arc<VolumeEntry>,
        block: u64,
        prefetch: bool,
    ) -> Option<Bytes> {
        self.read_block_served(vol, block, prefetch).await.0
    }

    /// [`Reader::read_block`], and where the block came from.
    pub(crate) async fn read_block_served(
        &self,
        vol: &Arc<VolumeEntry>,
        block: u64,
        prefetch: bool,
    ) -> (Option<Bytes>, Served) {
        let info = vol.info();
        if block >= info.blocks() {
            return (None, Served::Arc);
        }
        if vol.is_lost(block) {
            return (None, Served::Backing);
        }
        let key = info.key(block);
        // Built once: the lookup gives it the block's generation; the install after a
        // read takes that, and the drain that applies it the time the block enters the
        // ARC.
        let access = self.arc.access_of(&info, key, 0, prefetch);
        let (flight, generation, l2) = loop {
            let lookup = self
                .arc
                .shard(&key)
                .lookup(access, || self.generations.fresh());
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
            arc: &self.arc,
            key,
            flight: &flight,
        };
        let psize = info.block_len(block);
        let mut data = None;
        let mut served = Served::L2;
        let mut count_miss = true;
        // The L2ARC switch off: the copy stays indexed, unread. A volume whose
        // `secondarycache` was narrowed reads none of its copies (`l2::purge` drops them;
        // this covers the moment before it does).
        let l2_enabled = self.tunables.l2arc_enabled();
        let l2_wanted = l2_enabled && info.secondarycache == CacheMode::All;
        if let Some(loc) = l2.filter(|_| l2_wanted) {
            match self.l2.read_l2(&key, index_key(&key), psize, loc).await {
                L2Read::Hit(bytes) => data = Some(bytes),
                // The copy failed, or the ring wrote over it during the read; either is
                // counted: the backing store has the block.
                L2Read::BadCopy | L2Read::Evicted => count_miss = false,
                L2Read::Unavailable => {}
            }
        }
        if data.is_none() {
            if count_miss && l2_enabled && self.l2.devices.any_in_use() {
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
        // The volume as it is now: a change of its properties or size since the read
        // began decides how the block enters the ARC, and whether it does. A change after
        // this look finds the read's flight in its shard's table and invalidates it
        // (`ArcCache::drop_blocks`), so a block past a shrunk volume's end, or one of a
        // volume that stopped caching, is never installed after the change.
        let now = vol.info();
        let access = larch_policy::Access {
            generation,
            now_ms: self.arc.now_ms(),
            uncached: now.primarycache != CacheMode::All,
            l2cache: now.secondarycache == CacheMode::All,
            ..access
        };
        let install = data.clone().filter(|_| block < now.blocks());
        // Queued before the flight completes: a lookup after that finds the bytes in the
        // ARC (it applies the install first), never a flight that left nothing behind.
        self.arc.finish_read(access, Arc::clone(&flight), install);
        flight.complete(data.clone(), served);
        (data, served)
    }

    /// Reads a block from its volume's backing store on the blocking pool, into a buffer
    /// of exactly the block's size (it may enter the ARC).
    async fn read_backing(
        &self,
        vol: &Arc<VolumeEntry>,
        block: u64,
        psize: usize,
    ) -> Option<Bytes> {
        let vol = Arc::clone(vol);
        let stats = Arc::clone(&self.stats);
        self.background
            .spawn_blocking(move || {
                let mut buf = vec![0u8; psize];
                vol.read_block_into(block, &mut buf, CLIENT_READ_ATTEMPTS, &stats.backing_reads)
                    .ok()?;
                Some(Bytes::from(buf))
            })
            .await
            .ok()
            .flatten()
    }
}

/// A read led by a future that may be dropped before it ends (see
/// [`Reader::read_block_served`]); forgotten once the read is finished.
struct Leading<'a> {
    arc: &'a ArcCache,
    key: larch_policy::BlockKey,
    flight: &'a Arc<InFlight>,
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        self.arc.shard(&self.key).end_flight(&self.key, self.flight);
        self.flight.abandon();
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::arc::BlockBuf;
    use crate::engine::Engine;
    use crate::lock::{Rank, taken};
    use crate::testing::{VolumeAndCache, contents};

    const BLOCK: u64 = 8192;
    const BLOCKS: u64 = 64;

    /// An L2 hit takes its shard's lock once (it took it twice: to find the copy, then to
    /// put the bytes in the ARC), and so does the ARC hit that follows it, with no second
    /// read of the device. A write after an L2 read ended wins over the read's install,
    /// whether the install was applied before the write or waits for it.
    #[test]
    fn an_l2_hit_takes_its_shards_lock_once() {
        let engine = Engine::new(16 << 20);
        engine.tunables.set("l2arc_io_uring", "0").unwrap();
        let VolumeAndCache {
            vol,
            device,
            runtime,
            ..
        } = VolumeAndCache::new(&engine, BLOCK, BLOCKS);
        let key = vol.info().key(0);
        // Reads block 0, counting this thread's shard locks.
        let read = || {
            let before = taken(Rank::Shard);
            let (data, served) = runtime.block_on(engine.read_block_served(&vol, 0, false));
            (data.expect("read"), served, taken(Rank::Shard) - before)
        };
        // Leaves block 0 only on the cache device.
        let drop_from_arc = || {
            engine.arc.shard(&key).with_policy(|arc, actions| {
                assert!(arc.remove(&key, actions));
            });
            assert_eq!(engine.arc.buf_of(&key), None);
        };
        read();
        engine.feed_once(&device, 1 << 20);
        drop_from_arc();

        let (data, served, locks) = read();
        assert_eq!((served, locks), (Served::L2, 1), "an L2 hit");
        assert_eq!(data, contents(0, BLOCK));
        let device_reads = device.io.reads.load(Ordering::Relaxed);
        let (data, served, locks) = read();
        assert_eq!((served, locks), (Served::Arc, 1), "the hit after it");
        assert_eq!(data, contents(0, BLOCK));
        assert_eq!(device.io.reads.load(Ordering::Relaxed), device_reads);

        drop_from_arc();
        let (_, served, _) = read();
        assert_eq!(served, Served::L2);
        let new = vec![0xa5; BLOCK as usize];
        engine
            .write_blocks(&vol, &[(0, BlockBuf::copy_from(&new))], false)
            .expect("write");
        assert_eq!(engine.arc.buf_of(&key).as_deref(), Some(&new[..]));
        assert_eq!(read().0, new);
        engine.arc.drain_installs();
        assert_eq!(engine.arc.install_queued_bytes(), 0);
        engine.shutdown();
    }
}

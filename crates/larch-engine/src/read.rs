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
use futures_util::future::join_all;

pub use crate::arc::Served;
use crate::arc::{ArcCache, InFlight, Lookup, index_key};
use crate::l2::L2Arc;
use crate::l2::index::L2Loc;
use crate::l2::read::L2Read;
use crate::run::{Background, Generations};
use crate::stats::EngineStats;
use crate::tunables::Tunables;
use crate::volumes::{CacheMode, VolumeEntry};

/// Tries of a client's block read from the backing store (see
/// [`VolumeEntry::read_blocks_into`]).
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

/// A block a read leads (its lookup missed and no one else reads it): the flight its
/// waiters wait on, the generation it will have, where a cache device holds it, and the
/// access the read makes.
struct Led {
    block: u64,
    flight: Arc<InFlight>,
    generation: u64,
    l2: Option<L2Loc>,
    access: larch_policy::Access,
}

/// What one lookup of a block found.
enum Looked {
    /// Its answer: a hit, or a block past the end or lost (`None`).
    Done((Option<Bytes>, Served)),
    /// Another read of it is in flight.
    Wait(Arc<InFlight>),
    /// This read leads.
    Lead(Led),
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
        loop {
            match self.look(vol, block, prefetch) {
                Looked::Done(answer) => return answer,
                Looked::Wait(flight) => {
                    if let Some(answer) = flight.wait().await {
                        return answer;
                    }
                    // Its leader gave up: look again (and maybe lead).
                }
                Looked::Lead(led) => {
                    let mut all = vec![led];
                    if !prefetch && all[0].l2.is_none() {
                        let around = self.around(vol, &(block..block + 1));
                        if !around.is_empty() {
                            all.extend(around);
                            all.sort_unstable_by_key(|l| l.block);
                        }
                    }
                    let at = all.iter().position(|l| l.block == block);
                    let mut answers = self.read_led(vol, all).await;
                    return answers.swap_remove(at.expect("the block is led"));
                }
            }
        }
    }

    /// Reads blocks `blocks` of a volume (a client's read of several blocks, a prefetch):
    /// as [`Reader::read_block_served`] reads each, except that the misses no cache
    /// device holds are read from the backing store in runs of neighbouring blocks, one
    /// read per run of at most [`BackingStore::read_run_bytes`] (ZFS aggregates
    /// neighbouring reads of a vdev the same way), the runs and the cache-device reads in
    /// parallel. Answers in block order.
    ///
    /// [`BackingStore::read_run_bytes`]: crate::backing::BackingStore::read_run_bytes
    pub(crate) async fn read_run(
        &self,
        vol: &Arc<VolumeEntry>,
        blocks: std::ops::Range<u64>,
        prefetch: bool,
    ) -> Vec<(Option<Bytes>, Served)> {
        let mut answers: Vec<Option<(Option<Bytes>, Served)>> = Vec::new();
        let mut waits = Vec::new();
        let mut led = Vec::new();
        for (i, block) in blocks.clone().enumerate() {
            answers.push(None);
            match self.look(vol, block, prefetch) {
                Looked::Done(answer) => answers[i] = Some(answer),
                Looked::Wait(flight) => waits.push((i, block, flight)),
                Looked::Lead(l) => led.push((i, l)),
            }
        }
        // Only a read that goes to the store brings blocks around it (an L2 hit does not).
        if !prefetch && led.iter().any(|(_, l)| l.l2.is_none()) {
            let around = self.around(vol, &blocks);
            if !around.is_empty() {
                led.extend(around.into_iter().map(|l| (usize::MAX, l)));
                // In block order, so that the run's blocks and those around it are one read.
                led.sort_unstable_by_key(|(_, l)| l.block);
            }
        }
        let (places, led): (Vec<usize>, Vec<Led>) = led.into_iter().unzip();
        for (i, answer) in places.into_iter().zip(self.read_led(vol, led).await) {
            // (The blocks read around the run have no place: they only enter the ARC.)
            if let Some(slot) = answers.get_mut(i) {
                *slot = Some(answer);
            }
        }
        for (i, block, flight) in waits {
            answers[i] = Some(match flight.wait().await {
                Some(answer) => answer,
                None => Box::pin(self.read_block_served(vol, block, prefetch)).await,
            });
        }
        answers
            .into_iter()
            .map(|a| a.expect("every block answered"))
            .collect()
    }

    /// The blocks a demand read of `blocks` that missed fetches around them as prefetches
    /// (`object_read_around`, object volumes only): those of the aligned window of that
    /// many bytes that sit next to the run's records in their segment, so that the same
    /// GET brings them. Taken outwards from the run, up to the first one that is cached,
    /// being read, or on a cache device (that one is read from there, as its lookup made
    /// this read its reader): a gap would cut the GET in two. Their lookups are led here;
    /// the caller reads them with its own.
    fn around(&self, vol: &VolumeEntry, blocks: &std::ops::Range<u64>) -> Vec<Led> {
        let info = vol.info();
        let bs = u64::from(info.block_bytes).max(1);
        let per = self.tunables.object_read_around() / bs;
        if per <= 1 || vol.backing.object().is_none() || blocks.is_empty() {
            return Vec::new();
        }
        let window = blocks.start / per * per..(blocks.end.div_ceil(per) * per).min(info.blocks());
        let before = vol
            .backing
            .record_neighbours(blocks.start, window.clone())
            .start;
        let after = vol.backing.record_neighbours(blocks.end - 1, window).end;
        let mut led = Vec::new();
        let mut take = |block: u64| match self.look(vol, block, true) {
            Looked::Lead(l) => {
                let from_backing = l.l2.is_none();
                led.push(l);
                from_backing
            }
            Looked::Done(_) | Looked::Wait(_) => false,
        };
        for block in (before..blocks.start).rev() {
            if !take(block) {
                break;
            }
        }
        for block in blocks.end..after {
            if !take(block) {
                break;
            }
        }
        led
    }

    /// One lookup of `block` (one hold of its shard's lock).
    fn look(&self, vol: &VolumeEntry, block: u64, prefetch: bool) -> Looked {
        let info = vol.info();
        if block >= info.blocks() {
            return Looked::Done((None, Served::Arc));
        }
        if vol.is_lost(block) {
            return Looked::Done((None, Served::Backing));
        }
        let key = info.key(block);
        // Built once: the lookup gives it the block's generation; the install after a
        // read takes that, and the drain that applies it the time the block enters the
        // ARC.
        let access = self.arc.access_of(&info, key, 0, prefetch);
        match (self.arc.shard(&key)).lookup(access, || self.generations.fresh()) {
            Lookup::Hit(buf) => Looked::Done((Some(buf), Served::Arc)),
            Lookup::Wait(flight) => {
                self.stats.iohits.fetch_add(1, Ordering::Relaxed);
                Looked::Wait(flight)
            }
            Lookup::Lead {
                flight,
                generation,
                l2,
            } => Looked::Lead(Led {
                block,
                flight,
                generation,
                l2,
                access,
            }),
        }
    }

    /// Reads the blocks this read leads: each copy a cache device holds from there
    /// (verified, see [`crate::l2::read`]), the rest, and those whose copies failed, from
    /// the backing store in runs; then every flight ends and its block is queued to enter
    /// the ARC. Answers in the order of `led`.
    async fn read_led(
        &self,
        vol: &Arc<VolumeEntry>,
        led: Vec<Led>,
    ) -> Vec<(Option<Bytes>, Served)> {
        // Should this future be dropped before the reads end (its client went away), the
        // flights leave the table and their waiters read the blocks themselves.
        let leading = Leading {
            arc: &self.arc,
            led: &led,
        };
        let info = &vol.info();
        // The L2ARC switch off: the copies stay indexed, unread. A volume whose
        // `secondarycache` was narrowed reads none of its copies (`l2::purge` drops them;
        // this covers the moment before it does).
        let l2_enabled = self.tunables.l2arc_enabled();
        let l2_wanted = l2_enabled && info.secondarycache == CacheMode::All;
        let l2_reads = led.iter().map(|l| async move {
            let loc = l.l2.filter(|_| l2_wanted)?;
            let key = info.key(l.block);
            let psize = info.block_len(l.block);
            Some(self.l2.read_l2(&key, index_key(&key), psize, loc).await)
        });
        let l2_answers = join_all(l2_reads).await;
        let mut data: Vec<Option<Bytes>> = Vec::with_capacity(led.len());
        let mut served = Vec::with_capacity(led.len());
        let mut from_backing = Vec::new();
        for (i, answer) in l2_answers.into_iter().enumerate() {
            let count_miss = match answer {
                Some(L2Read::Hit(bytes)) => {
                    data.push(Some(bytes));
                    served.push(Served::L2);
                    continue;
                }
                // The copy failed, or the ring wrote over it during the read; either is
                // counted: the backing store has the block.
                Some(L2Read::BadCopy | L2Read::Evicted) => false,
                Some(L2Read::Unavailable) | None => true,
            };
            if count_miss && l2_enabled && self.l2.devices.any_in_use() {
                self.stats.l2_misses.fetch_add(1, Ordering::Relaxed);
            }
            data.push(None);
            served.push(Served::Backing);
            from_backing.push(i);
        }
        let runs = runs_of(&led, &from_backing, info, vol.backing.read_run_bytes());
        let run_reads = runs.iter().map(|run| {
            let first = led[run[0]].block;
            let lens = run.iter().map(|&i| info.block_len(led[i].block)).collect();
            self.read_backing(vol, first, lens)
        });
        for (run, read) in runs.iter().zip(join_all(run_reads).await) {
            if let Some(blocks) = read {
                for (&i, bytes) in run.iter().zip(blocks) {
                    data[i] = Some(bytes);
                }
            }
        }
        std::mem::forget(leading);
        let now_ms = self.arc.now_ms();
        // The volume as it is now: a change of its properties or size since the reads
        // began decides how their blocks enter the ARC, and whether they do. A change
        // after this look finds the reads' flights in their shards' tables and invalidates
        // them (`ArcCache::drop_blocks`), so a block past a shrunk volume's end, or one of a
        // volume that stopped caching, is never installed after the change.
        let now = vol.info();
        led.into_iter()
            .zip(data.into_iter().zip(served))
            .map(|(l, (mut data, served))| {
                // Looked at again after the read: a TXG that failed meanwhile marked its
                // blocks lost before dropping them from the ARC (which made the lookup
                // miss), and the bytes just read are then older than a write it
                // acknowledged. They are neither served nor cached.
                if data.is_some() && vol.is_lost(l.block) {
                    data = None;
                }
                let access = larch_policy::Access {
                    generation: l.generation,
                    now_ms,
                    uncached: now.primarycache != CacheMode::All,
                    l2cache: now.secondarycache == CacheMode::All,
                    ..l.access
                };
                let install = data.clone().filter(|_| l.block < now.blocks());
                // Queued before the flight completes: a lookup after that finds the bytes
                // in the ARC (it applies the install first), never a flight that left
                // nothing behind.
                self.arc.finish_read(access, Arc::clone(&l.flight), install);
                l.flight.complete(data.clone(), served);
                (data, served)
            })
            .collect()
    }

    /// Reads blocks `first..` (of the sizes `lens`) from their volume's backing store in
    /// one read on the blocking pool, each into a buffer of exactly its size (it may enter
    /// the ARC).
    async fn read_backing(
        &self,
        vol: &Arc<VolumeEntry>,
        first: u64,
        lens: Vec<usize>,
    ) -> Option<Vec<Bytes>> {
        let vol = Arc::clone(vol);
        let stats = Arc::clone(&self.stats);
        // Waiting from here until an I/O thread of the blocking pool takes it.
        let queued = vol.backing.stats.read_queue.enter();
        self.background
            .spawn_blocking(move || {
                let _active = queued.issue();
                let mut bufs: Vec<Vec<u8>> = lens.into_iter().map(|n| vec![0u8; n]).collect();
                let attempts = CLIENT_READ_ATTEMPTS;
                vol.read_blocks_into(first, &mut bufs, attempts, &stats.backing_reads)
                    .ok()?;
                Some(bufs.into_iter().map(Bytes::from).collect())
            })
            .await
            .ok()
            .flatten()
    }
}

/// The blocks of `led` at the places `from_backing` (in block order) cut into runs of
/// neighbouring blocks of at most `max_bytes` (at least one block each).
fn runs_of(
    led: &[Led],
    from_backing: &[usize],
    info: &crate::volumes::VolumeInfo,
    max_bytes: u64,
) -> Vec<Vec<usize>> {
    let max_blocks = (max_bytes / u64::from(info.block_bytes).max(1)).max(1) as usize;
    let mut runs: Vec<Vec<usize>> = Vec::new();
    for &i in from_backing {
        match runs.last_mut() {
            Some(run)
                if run.len() < max_blocks
                    && led[*run.last().expect("runs are not empty")].block + 1 == led[i].block =>
            {
                run.push(i)
            }
            _ => runs.push(vec![i]),
        }
    }
    runs
}

/// Reads led by a future that may be dropped before they end (see
/// [`Reader::read_led`]); forgotten once the reads are finished.
struct Leading<'a> {
    arc: &'a ArcCache,
    led: &'a [Led],
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        for l in self.led {
            let key = l.access.key;
            self.arc.shard(&key).end_flight(&key, &l.flight);
            l.flight.abandon();
        }
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

    /// An engine whose cache-device reads run on the blocking pool (no io_uring), with
    /// [`VolumeAndCache`]'s volume and device.
    fn engine_and_cache() -> (Arc<Engine>, VolumeAndCache) {
        let engine = Engine::new(16 << 20);
        engine.tunables.set("l2arc_io_uring", "0").unwrap();
        let parts = VolumeAndCache::new(&engine, BLOCK, BLOCKS);
        (engine, parts)
    }

    /// Leaves `block` only where else it is (a cache device, the backing store).
    fn drop_from_arc(engine: &Engine, vol: &VolumeEntry, block: u64) {
        let key = vol.info().key(block);
        engine.arc.shard(&key).with_policy(|arc, actions| {
            assert!(arc.remove(&key, actions));
        });
        assert_eq!(engine.arc.buf_of(&key), None);
    }

    /// A run's misses are read from the backing store together: one read per run of
    /// neighbouring blocks, cut at blocks the ARC holds and at blocks a cache device holds
    /// (read from there), each block exactly its bytes.
    #[test]
    fn a_runs_misses_are_read_in_runs_of_neighbouring_blocks() {
        let (
            engine,
            VolumeAndCache {
                vol,
                device,
                runtime,
                ..
            },
        ) = engine_and_cache();
        // Block 3 in the ARC; block 6 only on the cache device.
        runtime.block_on(engine.read_block(&vol, 3, false)).unwrap();
        runtime.block_on(engine.read_block(&vol, 6, false)).unwrap();
        engine.feed_once(&device, 1 << 20);
        drop_from_arc(&engine, &vol, 6);
        let reads = || vol.backing.stats.reads.load(Ordering::Relaxed);
        let before = reads();
        let answers = runtime.block_on(engine.read_run(&vol, 0..10, false));
        // 0-2, 4-5 and 7-9 from the store: three reads.
        assert_eq!(reads() - before, 3);
        let served: Vec<Served> = answers.iter().map(|(_, s)| *s).collect();
        use Served::{Arc as A, Backing as B, L2};
        assert_eq!(served, [B, B, B, A, B, B, L2, B, B, B]);
        for (b, (data, _)) in answers.iter().enumerate() {
            assert_eq!(
                data.as_deref(),
                Some(&contents(b as u64, BLOCK)[..]),
                "block {b}"
            );
        }
        // All of them are in the ARC now: no read.
        let before = reads();
        let again = runtime.block_on(engine.read_run(&vol, 0..10, false));
        assert!(again.iter().all(|(_, s)| *s == Served::Arc));
        assert_eq!(reads(), before);
        engine.shutdown();
    }

    /// An L2 hit takes its shard's lock once (it took it twice: to find the copy, then to
    /// put the bytes in the ARC), and so does the ARC hit that follows it, with no second
    /// read of the device. A write after an L2 read ended wins over the read's install,
    /// whether the install was applied before the write or waits for it.
    #[test]
    fn an_l2_hit_takes_its_shards_lock_once() {
        let (
            engine,
            VolumeAndCache {
                vol,
                device,
                runtime,
                ..
            },
        ) = engine_and_cache();
        let key = vol.info().key(0);
        // Reads block 0, counting this thread's shard locks.
        let read = || {
            let before = taken(Rank::Shard);
            let (data, served) = runtime.block_on(engine.read_block_served(&vol, 0, false));
            (data.expect("read"), served, taken(Rank::Shard) - before)
        };
        read();
        engine.feed_once(&device, 1 << 20);
        drop_from_arc(&engine, &vol, 0);

        let (data, served, locks) = read();
        assert_eq!((served, locks), (Served::L2, 1), "an L2 hit");
        assert_eq!(data, contents(0, BLOCK));
        let device_reads = device.io.reads.load(Ordering::Relaxed);
        let (data, served, locks) = read();
        assert_eq!((served, locks), (Served::Arc, 1), "the hit after it");
        assert_eq!(data, contents(0, BLOCK));
        assert_eq!(device.io.reads.load(Ordering::Relaxed), device_reads);

        drop_from_arc(&engine, &vol, 0);
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

//! Writes smaller than a block, acknowledged before the block is read.
//!
//! A write that covers only part of a block must be merged with the rest of the block's
//! bytes before the block can be dirty in the ARC. When the block is in the ARC that
//! merge is a copy; when it is not, the bytes are on the backing store (a block that is
//! not in the ARC is clean: dirty blocks cannot be evicted), and reading them first made
//! every such write wait a whole backing-store read: 4K writes into 8K blocks over a
//! store of 8 ms reads could not pass 32 / 8 ms = 4,000 a second with 32 in flight,
//! 0.6x of what the store itself takes (issue 18).
//!
//! An **async** partial write of a block that is not in the ARC is instead kept as a
//! *pending partial* of its volume: its bytes and where they go in the block. It is
//! acknowledged at once, throttled like any write (its bytes, and the block it will
//! become, count as dirty: counted only if they fit under the dirty limit; at the limit
//! the write reads its block itself, or waits for the pending partial's merge, and goes
//! through the throttle, which waits for room). A merge then reads the block from the backing store (on the
//! engine's merge threads, at most [`MERGE_THREADS`], [`MERGE_GRACE`] after the first
//! write), lays every pending write of the block over it in the order they came, and
//! makes the block dirty through the ordinary write path (ARC, open TXG, tombstones, a
//! log record); only then does the pending partial go away. Writes whose pieces cover
//! the whole block by then need no read at all.
//!
//! Until then:
//! - more writes of the block join it (in order; a whole-block write too), while it waits
//!   and while its block is read; once its bytes are being laid over the block (a copy,
//!   no I/O), a writer waits for that to end;
//! - a **read** of the block waits for the merge (and starts it, if it is still queued),
//!   so it sees every write acknowledged before it;
//! - a **sync** write (FUA, `sync=always`) of the block waits for the merge, then merges
//!   through the ARC as before, and is made durable as any sync write;
//! - a **FLUSH** waits for every pending partial of the volume first;
//! - the engine's **shutdown** merges whatever is left before its last TXG sync.
//!
//! A block whose read fails (after [`READ_ATTEMPTS`] tries) cannot take the writes that
//! were acknowledged for it: the volume is marked failed, as when a TXG fails, and every
//! later write and FLUSH of it gets EIO. An async write acknowledged before a crash may
//! be lost either way until a FLUSH (or the TXG) made it durable; that does not change.
//!
//! Lock order: a volume's pending table ranks below the TXG lock (a writer reserves its
//! dirty bytes while holding it) and above the ARC shards (the ARC is looked at before
//! the table is taken, never while it is held).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;

pub(crate) mod table;

use table::{Pending, Piece, Stage};

use super::Txg;
use crate::arc::{ArcCache, BlockBuf};
use crate::lock::RankedMutex;
use crate::run::Background;
use crate::stats::{EngineStats, WriteStats};
use crate::tunables::Tunables;
use crate::volumes::{VolumeEntry, Volumes};

/// Merge threads at most, over all volumes, so block reads for merges in flight at
/// once: like the syncer's 32 writes in flight, enough to keep a slow or remote store
/// busy (4K writes into 8K blocks at 6,000 a second over 8 ms reads need ~50). They are
/// threads of their own, not the async runtime's blocking pool: a pool full of writers
/// waiting at the dirty limit must not keep out the merges that would free it.
pub(crate) const MERGE_THREADS: usize = 64;

/// A merge thread with nothing to do for this long ends.
const MERGE_THREAD_IDLE: Duration = Duration::from_secs(10);

/// A merge starts no sooner than this after its block's first pending write, so that a
/// stream of writes smaller than the block (a file system's 4K writes into 128K blocks)
/// can cover it first and no read is needed. Nobody waits for it: a read, a sync write,
/// a FLUSH or the shutdown that needs the block merges it at once.
const MERGE_GRACE: Duration = Duration::from_millis(5);

/// Tries of a merge's block read before the volume is failed.
pub(crate) const READ_ATTEMPTS: u32 = 3;

/// The memory a piece holds besides its bytes (its entry in the pending partial's list,
/// up to twice its 40 bytes as the list grows, and its allocation's header and rounding),
/// counted as dirty with the bytes: before, a client sending 1-byte writes to a block whose
/// merge read was stalled held ~100 bytes of heap per byte of dirty data counted.
const PIECE_OVERHEAD_BYTES: u64 = 96;

/// What became of a write's piece of one block ([`PartialWrites::offer_piece`]).
pub(crate) enum Offer {
    /// It joined the block's pending partial (a new one, or one already there): the
    /// write may be acknowledged.
    Pending,
    /// The block's pending partial is being merged (or the write is sync): wait for it
    /// ([`PartialWrites::wait_partial`]) and offer the piece again.
    Wait(tokio::sync::watch::Receiver<bool>),
    /// Write it as before: whole, or merged with the block from the ARC.
    Direct,
}

/// The merges waiting for a merge thread, and the threads.
#[derive(Default)]
pub(crate) struct MergeQueue {
    state: RankedMutex<QueueState>,
    work: Condvar,
}

/// A queued merge: of `block` of `vol`, not before `due`.
struct Job {
    vol: Arc<VolumeEntry>,
    block: u64,
    due: Instant,
}

#[derive(Default)]
struct QueueState {
    jobs: VecDeque<Job>,
    threads: usize,
    /// Threads waiting for a job (or for the first job's time).
    idle: usize,
    /// One idle thread waits for the first job's time; the others wait to be woken.
    timer: bool,
    stopping: bool,
}

impl MergeQueue {
    /// Ends the merge threads once the queue is empty (engine shutdown).
    pub(crate) fn stop(&self) {
        self.state.lock().stopping = true;
        self.work.notify_all();
    }
}

/// The partial writes of an engine: the merge queue with its threads, and the flows of
/// pending partials (offering a piece, waiting for and settling merges, merging). A
/// merge ends in the TXG engine's write path.
pub(crate) struct PartialWrites {
    pub(crate) queue: MergeQueue,
    pub(crate) txg: Arc<Txg>,
    pub(crate) arc: Arc<ArcCache>,
    pub(crate) volumes: Arc<Volumes>,
    pub(crate) tunables: Arc<Tunables>,
    pub(crate) stats: Arc<EngineStats>,
    pub(crate) write_stats: Arc<WriteStats>,
    pub(crate) background: Arc<Background>,
}

/// A merge thread: merges queued blocks until it has been idle for
/// [`MERGE_THREAD_IDLE`], or the engine stops or is gone.
fn merge_thread(partials: Weak<PartialWrites>) {
    while let Some((partials, vol, block)) = next_merge(&partials) {
        partials.merge_partial(&vol, block);
    }
}

/// The next merge that is due (at once when the engine stops), or `None` when the thread
/// is to end (it is counted out). Jobs are due in the order they were queued: one idle
/// thread sleeps until the first is, the others until they are woken, so that a job's
/// time wakes one thread, not all of them.
fn next_merge(
    partials: &Weak<PartialWrites>,
) -> Option<(Arc<PartialWrites>, Arc<VolumeEntry>, u64)> {
    let strong = partials.upgrade()?;
    let queue = &strong.queue;
    let mut state = queue.state.lock();
    let mut idle_since = Instant::now();
    loop {
        let now = Instant::now();
        let mut wait = MERGE_THREAD_IDLE;
        if let Some(due) = state.jobs.front().map(|job| job.due) {
            if due <= now || state.stopping {
                let job = state.jobs.pop_front().expect("a first job");
                if !state.jobs.is_empty() {
                    // Someone must wait for the next one's time.
                    queue.work.notify_one();
                }
                drop(state);
                return Some((strong, job.vol, job.block));
            }
            idle_since = now;
            if !state.timer {
                state.timer = true;
                state.idle += 1;
                state = state.wait_timeout(&queue.work, due - now);
                state.idle -= 1;
                state.timer = false;
                continue;
            }
        } else if state.stopping || idle_since.elapsed() >= MERGE_THREAD_IDLE {
            state.threads -= 1;
            return None;
        } else {
            wait = MERGE_THREAD_IDLE - idle_since.elapsed();
        }
        state.idle += 1;
        state = state.wait_timeout(&queue.work, wait);
        state.idle -= 1;
    }
}

/// Whether `pieces` together cover `0..len`.
fn covers(pieces: &[Piece], len: usize) -> bool {
    let mut spans: Vec<(usize, usize)> = pieces
        .iter()
        .map(|p| (p.at, p.at + p.bytes.len()))
        .collect();
    spans.sort_unstable();
    let mut reached = 0;
    for (from, to) in spans {
        if from > reached {
            return false;
        }
        reached = reached.max(to);
    }
    reached >= len
}

impl PartialWrites {
    /// Offers one block's piece of a write (`bytes` at `at` in `block`; `may_defer`:
    /// the write is async). See the module documentation for what each answer means.
    /// The caller holds the block's write stripe (`Volume`), so no other writer offers a
    /// piece of the block meanwhile.
    pub(crate) fn offer_piece(
        self: &Arc<Self>,
        vol: &Arc<VolumeEntry>,
        block: u64,
        at: usize,
        bytes: &[u8],
        may_defer: bool,
    ) -> Offer {
        let len = vol.info().block_len(block);
        let whole = at == 0 && bytes.len() == len;
        let partials = &vol.partials;
        if (whole || !may_defer) && partials.len() == 0 {
            return Offer::Direct;
        }
        {
            let mut table = partials.table.lock();
            if let Some(pending) = table.get_mut(&block) {
                // At the dirty limit the piece waits for the merge instead, then writes
                // through the throttle like any write.
                let charge = bytes.len() as u64 + PIECE_OVERHEAD_BYTES;
                if pending.stage == Stage::Applying
                    || !may_defer
                    || !self.txg.try_reserve_dirty(charge)
                {
                    return Offer::Wait(pending.done.subscribe());
                }
                pending.pieces.push(Piece {
                    at,
                    bytes: Bytes::copy_from_slice(bytes),
                });
                pending.reserved += charge;
                self.write_stats
                    .write_partial_deferred
                    .fetch_add(1, Ordering::Relaxed);
                return Offer::Pending;
            }
        }
        // The block has no pending partial. The ARC is looked at only now, after the
        // table (its lock may not be taken under the table's): a pending partial leaves
        // the table only once its block is dirty in the ARC, so a block whose merge just
        // ended is seen as cached here and merged from the ARC's newest bytes, never
        // pended again over the store's older ones.
        if whole
            || !may_defer
            || !self.tunables.write_partial_defer()
            // A failed volume acknowledges no more writes (a writer that waited out a merge
            // whose read failed gets here): the direct path returns its error.
            || vol.failure().is_some()
            || self.arc.buf_of(&vol.info().key(block)).is_some()
        {
            return Offer::Direct;
        }
        let reserved = (len + bytes.len()) as u64 + PIECE_OVERHEAD_BYTES;
        let mut table = partials.table.lock();
        // Counted as dirty only if it fits under the limit: at the limit the write reads
        // its block and goes through the throttle, which waits for room.
        if !self.txg.try_reserve_dirty(reserved) {
            return Offer::Direct;
        }
        let earlier = table.insert(
            block,
            Pending {
                stage: Stage::Queued,
                pieces: vec![Piece {
                    at,
                    bytes: Bytes::copy_from_slice(bytes),
                }],
                reserved,
                done: tokio::sync::watch::Sender::new(false),
            },
        );
        debug_assert!(
            earlier.is_none(),
            "only the stripe's holder adds block {block}"
        );
        partials.count.fetch_add(1, Ordering::SeqCst);
        drop(table);
        self.write_stats
            .write_partial_deferred
            .fetch_add(1, Ordering::Relaxed);
        self.queue_merge(vol, block);
        Offer::Pending
    }

    /// Queues `block`'s merge for the merge threads, due [`MERGE_GRACE`] from now, and
    /// starts a thread when more merges wait than threads do.
    fn queue_merge(self: &Arc<Self>, vol: &Arc<VolumeEntry>, block: u64) {
        let queue = &self.queue;
        let mut state = queue.state.lock();
        state.jobs.push_back(Job {
            vol: Arc::clone(vol),
            block,
            due: Instant::now() + MERGE_GRACE,
        });
        let start = state.jobs.len() > state.idle && state.threads < MERGE_THREADS;
        if !start || state.stopping {
            drop(state);
            queue.work.notify_one();
            return;
        }
        state.threads += 1;
        drop(state);
        let partials = Arc::downgrade(self);
        let started = std::thread::Builder::new()
            .name("larch-merge".into())
            .spawn(move || merge_thread(partials));
        if started.is_err() {
            // No thread: the job waits for another one, a reader, a FLUSH or shutdown.
            self.queue.state.lock().threads -= 1;
        }
    }

    /// Waits until the pending partial `done` belongs to is merged, merging it on the
    /// blocking pool now if no merge has taken it yet (a reader must not wait behind the
    /// queue).
    pub(crate) async fn wait_partial(
        self: &Arc<Self>,
        vol: &Arc<VolumeEntry>,
        block: u64,
        mut done: tokio::sync::watch::Receiver<bool>,
    ) {
        if !*done.borrow() {
            let partials = Arc::clone(self);
            let vol = Arc::clone(vol);
            let _ = self
                .background
                .spawn_blocking(move || partials.merge_partial(&vol, block))
                .await;
        }
        // An error means the sender is gone, which happens only once it is done.
        let _ = done.wait_for(|merged| *merged).await;
    }

    /// Waits for the pending partials of `blocks` (a read of them must see them).
    pub(crate) async fn settle_partials(
        self: &Arc<Self>,
        vol: &Arc<VolumeEntry>,
        blocks: std::ops::RangeInclusive<u64>,
    ) {
        if vol.partials.len() == 0 {
            return;
        }
        for block in blocks {
            if let Some(done) = vol.partials.waiter(block) {
                self.wait_partial(vol, block, done).await;
            }
        }
    }

    /// Waits for every pending partial of `vol` there is now (a FLUSH).
    pub(crate) async fn settle_all_partials(self: &Arc<Self>, vol: &Arc<VolumeEntry>) {
        if vol.partials.len() == 0 {
            return;
        }
        let waiting: Vec<_> = vol
            .partials
            .table
            .lock()
            .iter()
            .map(|(block, p)| (*block, p.done.subscribe()))
            .collect();
        for (block, done) in waiting {
            self.wait_partial(vol, block, done).await;
        }
    }

    /// Merges `block`'s pending partial, if it has one no merge took yet: reads the
    /// block unless its pieces cover it, lays the pieces over it, makes it dirty, and
    /// removes the pending partial. Blocking.
    pub(crate) fn merge_partial(&self, vol: &VolumeEntry, block: u64) {
        let len = vol.info().block_len(block);
        let covered = {
            let mut table = vol.partials.table.lock();
            let Some(pending) = table.get_mut(&block) else {
                return;
            };
            if pending.stage != Stage::Queued {
                return;
            }
            pending.stage = Stage::Reading;
            covers(&pending.pieces, len)
        };
        let mut buf = vec![0u8; len];
        let key = vol.info().key(block);
        let read = if covered {
            Ok(())
        } else if let Some(cached) = self.arc.buf_of(&key) {
            // In the ARC after all (a read or prefetch brought it in, with the store's
            // bytes, since the pending partial was made): those bytes, no read.
            buf.copy_from_slice(&cached);
            Ok(())
        } else {
            // Looked at after the read: a TXG that fails meanwhile marks its blocks lost
            // before it drops them from the ARC, so a block whose newest write it lost is
            // seen here and not merged over the store's older bytes.
            // Read by the merge thread itself: issued as soon as queued.
            let _active = vol.backing.stats.read_queue.enter().issue();
            (vol.read_blocks_into(
                block,
                std::slice::from_mut(&mut buf),
                READ_ATTEMPTS,
                &self.stats.backing_reads,
            ))
            .map_err(|e| e.to_string())
            .and_then(|()| {
                if vol.is_lost(block) {
                    Err("a failed TXG lost its newest acknowledged write".to_string())
                } else {
                    Ok(())
                }
            })
        };
        // Applying: no piece joins it from here on, so its reservation is final.
        let (pieces, reserved) = {
            let mut table = vol.partials.table.lock();
            let pending = table
                .get_mut(&block)
                .expect("only its merge removes a pending partial");
            pending.stage = Stage::Applying;
            (std::mem::take(&mut pending.pieces), pending.reserved)
        };
        // Bytes of the pending partial's reservation handed to the dirty block.
        let mut handed = 0;
        match read {
            Ok(()) => {
                for piece in &pieces {
                    buf[piece.at..piece.at + piece.bytes.len()].copy_from_slice(&piece.bytes);
                }
                // The reservation counted the block it would become: that part of it is
                // the dirty block's now (never counted twice, never not at all), the
                // pieces' part is given back below. (A reservation smaller than the block
                // hands over what it has; make_dirty counts the rest.)
                handed = reserved.min(len as u64);
                let merged = [(block, BlockBuf::from_vec(buf))];
                self.txg.make_dirty(vol, &merged, handed, None);
                self.write_stats
                    .write_partial_merges
                    .fetch_add(1, Ordering::Relaxed);
            }
            Err(err) => {
                let why = format!(
                    "backing store {} failed reading block {block} to merge {} partial \
                     write(s) acknowledged before the read: {err}",
                    vol.backing.path().display(),
                    pieces.len()
                );
                eprintln!("larch: {why}");
                vol.fail(&why);
                // The acknowledged pieces are gone: the block reads as an error from now on,
                // never as the store's older bytes (as after a failed TXG).
                vol.lose(std::iter::once(block));
                self.volumes.record_failure_counted(vol, &self.write_stats);
                self.write_stats
                    .write_partial_errors
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        let mut table = vol.partials.table.lock();
        let pending = table
            .remove(&block)
            .expect("only its merge removes a pending partial");
        vol.partials.count.fetch_sub(1, Ordering::SeqCst);
        self.txg.release_dirty(pending.reserved - handed);
        drop(table);
        pending.done.send_replace(true);
    }

    /// Merges every pending partial of every volume, and waits for merges other threads
    /// are running (at shutdown, before the last TXG sync: a merge queued on a runtime
    /// that has ended would otherwise never run). Blocking.
    pub(crate) fn merge_all_partials(&self) {
        for vol in self.volumes.all() {
            let left = self.merge_volume_partials(&vol);
            if left > 0 {
                eprintln!(
                    "larch: volume {:#x}: {left} partial-block merges did not end within 60 s \
                     of the shutdown; their writes are lost",
                    vol.info().guid,
                );
            }
        }
    }

    /// Merges every pending partial of `vol`, and waits (at most 60 s: a read that never
    /// returns must not hold the caller for ever) for merges other threads are running.
    /// Returns the pending partials left (0 but for such a read). No new one can appear
    /// while the caller holds the volume's write stripes. Blocking.
    pub(crate) fn merge_volume_partials(&self, vol: &VolumeEntry) -> usize {
        let blocks: Vec<u64> = vol.partials.table.lock().keys().copied().collect();
        for block in blocks {
            self.merge_partial(vol, block);
        }
        // Merges another thread took: their reads are in flight.
        let mut waited = Duration::ZERO;
        while vol.partials.len() > 0 && waited < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(5));
            waited += Duration::from_millis(5);
        }
        vol.partials.len()
    }

    /// Blocks with writes waiting for their merge, over every volume.
    pub(crate) fn pending_partials(&self) -> u64 {
        self.volumes
            .all()
            .iter()
            .map(|v| v.partials.len() as u64)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backing::{BackingStore, LatencyModel};
    use crate::engine::Engine;
    use crate::volume::Volume;
    use crate::volumes::VolumeSpec;
    use larch_io::{BlockDevice, MemDevice};

    const BLOCK: usize = 8192;

    fn piece(at: usize, len: usize) -> Piece {
        Piece {
            at,
            bytes: Bytes::from(vec![1u8; len]),
        }
    }

    #[test]
    fn pieces_cover_a_block_only_without_gaps() {
        assert!(covers(&[piece(0, 8192)], 8192));
        assert!(covers(&[piece(4096, 4096), piece(0, 4096)], 8192));
        assert!(covers(&[piece(0, 5000), piece(4096, 4096)], 8192));
        assert!(!covers(&[piece(0, 4096)], 8192));
        assert!(!covers(&[piece(0, 4000), piece(4096, 4096)], 8192));
        assert!(!covers(&[piece(1, 8191)], 8192));
        assert!(!covers(&[], 8192));
        // A short last block.
        assert!(covers(&[piece(0, 100)], 100));
    }

    /// An engine whose merge threads never start (merges run only when a reader, a
    /// FLUSH or the shutdown runs them), a volume of 16 blocks of 8K filled with 0xee.
    fn setup() -> (Arc<Engine>, Arc<MemDevice>, Volume) {
        let engine = Engine::new(16 << 20);
        engine.partials.queue.stop();
        let device = Arc::new(MemDevice::from_bytes(vec![0xee; 16 * BLOCK]));
        let store = BackingStore::on_device(
            "mem",
            device.clone() as Arc<dyn BlockDevice>,
            LatencyModel::default(),
        );
        let entry = engine
            .add_volume(VolumeSpec::new(0x5a, BLOCK as u32), Arc::new(store))
            .unwrap();
        let volume = Volume::new("v".into(), entry, Arc::clone(&engine));
        (engine, device, volume)
    }

    fn stat(engine: &Engine, name: &str) -> u64 {
        engine
            .arcstats()
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
            .unwrap()
    }

    fn on_device(device: &MemDevice, block: usize) -> Vec<u8> {
        device.snapshot()[block * BLOCK..(block + 1) * BLOCK].to_vec()
    }

    #[test]
    fn pieces_that_cover_a_block_need_no_read_and_a_whole_block_write_joins_in_order() {
        let (engine, device, volume) = setup();
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            // Block 2: two halves, nothing else.
            volume
                .write(2 * 8192 + 4096, &[5; 4096], false)
                .await
                .unwrap();
            volume.write(2 * 8192, &[6; 4096], false).await.unwrap();
            // Block 3: a piece, a whole-block write, a piece: the last two win.
            volume.write(3 * 8192, &[7; 100], false).await.unwrap();
            volume.write(3 * 8192, &[8; BLOCK], false).await.unwrap();
            volume
                .write(3 * 8192 + 200, &[9; 100], false)
                .await
                .unwrap();
        });
        assert_eq!(stat(&engine, "write_partial_deferred"), 5);
        assert_eq!(stat(&engine, "write_partial_pending"), 2);
        rt.block_on(volume.flush()).unwrap();
        assert_eq!(stat(&engine, "backing_reads"), 0, "no block was read");
        assert_eq!(stat(&engine, "write_partial_merges"), 2);
        let mut want = vec![6u8; 4096];
        want.extend([5u8; 4096]);
        assert!(on_device(&device, 2) == want);
        let mut want = vec![8u8; BLOCK];
        want[200..300].fill(9);
        assert!(on_device(&device, 3) == want);
        engine.shutdown();
    }

    /// A pending partial made while its block is dirty in the ARC (a writer that looked
    /// at the ARC just before the block's previous merge ended, had it looked before the
    /// table) merges over the ARC's bytes, not the store's older ones.
    #[test]
    fn a_merge_over_a_block_dirty_in_the_arc_starts_from_the_arc() {
        let (engine, device, volume) = setup();
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            volume.write(4 * 8192, &[1; 100], false).await.unwrap();
            // A read merges it: dirty in the ARC, not on the store yet.
            let seen = volume.read(4 * 8192, 200).await.unwrap().concat();
            assert!(seen[..100] == [1; 100] && seen[100..] == [0xee; 100]);
        });
        assert!(on_device(&device, 4) == vec![0xee; BLOCK], "not synced yet");
        let entry = Arc::clone(volume.entry());
        entry.partials.table.lock().insert(
            4,
            Pending {
                stage: Stage::Queued,
                pieces: vec![Piece {
                    at: 50,
                    bytes: Bytes::from(vec![2u8; 100]),
                }],
                reserved: (BLOCK + 100) as u64,
                done: tokio::sync::watch::Sender::new(false),
            },
        );
        assert!(engine.txg.try_reserve_dirty((BLOCK + 100) as u64));
        entry.partials.count.fetch_add(1, Ordering::SeqCst);
        engine.partials.merge_partial(&entry, 4);
        let seen = rt.block_on(volume.read(4 * 8192, 200)).unwrap().concat();
        assert!(seen[..50] == [1; 50], "the first write's bytes survive");
        assert!(seen[50..150] == [2; 100] && seen[150..] == [0xee; 50]);
        engine.shutdown();
    }

    #[test]
    fn shutdown_merges_partial_writes_no_merge_took() {
        let (engine, device, volume) = setup();
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(volume.write(5 * 8192 + 10, &[1; 20], false))
            .unwrap();
        assert_eq!(stat(&engine, "write_partial_pending"), 1);
        assert_eq!(stat(&engine, "backing_reads"), 0);
        engine.shutdown();
        let mut want = vec![0xee; BLOCK];
        want[10..30].fill(1);
        assert!(
            on_device(&device, 5) == want,
            "merged and synced at shutdown"
        );
        assert_eq!(stat(&engine, "write_partial_pending"), 0);
    }
}

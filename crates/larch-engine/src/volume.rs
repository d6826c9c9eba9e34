//! A volume as clients use it, without any protocol: byte ranges split into
//! `volblocksize` blocks, each read through the engine (with read-ahead for sequential
//! streams), each write merged into whole blocks and handed to the engine's write path
//! (dirty in the ARC, synced by transaction groups). The NBD front end ([`crate::nbd`])
//! and in-process callers use it alike.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::Mutex as AsyncMutex;

use crate::arc::BlockBuf;
use crate::backing::{BackingStore, ZeroMode};
use crate::engine::Engine;
use crate::latency::LatencyHistogram;
use crate::lock::RankedMutex;
use crate::read::Served;
use crate::txg::Offer;
use crate::volumes::{VolumeEntry, VolumeInfo};
use larch_policy::prefetch::Prefetcher;

mod allocation;
mod props;
pub use allocation::{Allocation, HOLE_SCAN_BLOCKS};
pub use props::{Dropped, Resized, check_resize};

/// Most bytes of one step a TRIM or WRITE_ZEROES is split into (a whole number of blocks
/// when blocks are smaller): each step's blocks are throttled and made dirty together.
const ZEROES_BYTES: u64 = 8 << 20;

/// Most bytes an NBD CACHE brings in per step: their blocks are read in parallel and
/// let go before the next step.
const CACHE_STEP_BYTES: u64 = 8 << 20;

/// Write locks per volume, by block number: writes of the same block are serialised so
/// the cache and the backing store end with the same contents; others run in parallel.
const WRITE_STRIPES: usize = 256;

/// The bytes of a write.
#[derive(Clone, Copy)]
enum Source<'a> {
    /// One slice.
    Slice(&'a [u8]),
    /// One buffer per block, cut at the volume's block boundaries (`Volume::write_chunks`).
    Blocks(&'a [Bytes]),
    /// This many zeros (TRIM, WRITE_ZEROES): whole blocks become [`BlockBuf::zeros`].
    Zeroes(usize),
}

impl Source<'_> {
    fn len(&self) -> usize {
        match self {
            Source::Slice(data) => data.len(),
            Source::Blocks(chunks) => chunks.iter().map(|c| c.len()).sum(),
            Source::Zeroes(len) => *len,
        }
    }
}

/// Why a volume request failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VolumeError {
    /// The backing store failed (a read), or the volume failed a TXG (writes): EIO.
    #[error("I/O error: {0}")]
    Io(String),
    /// The range is outside the volume.
    #[error("{offset}+{length} is outside the volume of {size_bytes} bytes")]
    OutOfRange {
        /// Start of the request.
        offset: u64,
        /// Its length.
        length: u64,
        /// The volume's size.
        size_bytes: u64,
    },
    /// A write to a read-only volume.
    #[error("the volume is read-only")]
    ReadOnly,
}

/// What clients asked of a volume and how long it took: the front end's view, which the
/// Analytics page shows as heat maps (reads apart by where they were served, so that the
/// ARC's hits show as a stripe of their own). A request is timed from when the volume
/// takes it to when its data or acknowledgement is ready; failed ones are not counted.
#[derive(Debug, Default)]
pub struct FrontendStats {
    /// Reads whose blocks were all in the ARC.
    pub read_arc: LatencyHistogram,
    /// Reads that needed a cache device and no backing store.
    pub read_l2: LatencyHistogram,
    /// Reads that needed the backing store.
    pub read_backing: LatencyHistogram,
    /// Writes and write-zeroes.
    pub write: LatencyHistogram,
    /// Bytes read by clients.
    pub read_bytes: AtomicU64,
    /// Bytes written by clients.
    pub write_bytes: AtomicU64,
}

/// A volume: its entry in the engine's table and the engine it shares.
pub struct Volume {
    /// The volume's name (the NBD export name).
    pub name: String,
    /// Its clients' requests, counted and timed.
    pub frontend: FrontendStats,
    entry: Arc<VolumeEntry>,
    engine: Arc<Engine>,
    /// Shared so that a write's blocking step can own its stripes (see
    /// [`Volume::write_blocks`]).
    stripes: Vec<Arc<AsyncMutex<()>>>,
    prefetcher: RankedMutex<Prefetcher>,
    /// Held by a change of the volume's properties or size (`props`), one at a time; it
    /// comes before every other lock (the write stripes too).
    changing: std::sync::Mutex<()>,
}

impl Volume {
    /// The volume of `entry` (registered with `engine`), named `name`.
    pub fn new(name: String, entry: Arc<VolumeEntry>, engine: Arc<Engine>) -> Volume {
        entry.set_name(&name);
        Volume {
            name,
            frontend: FrontendStats::default(),
            entry,
            engine,
            stripes: (0..WRITE_STRIPES)
                .map(|_| Arc::new(AsyncMutex::new(())))
                .collect(),
            prefetcher: RankedMutex::leaf(Prefetcher::default()),
            changing: std::sync::Mutex::new(()),
        }
    }

    /// Identity, size, block size and properties in force now (a snapshot).
    pub fn info(&self) -> VolumeInfo {
        self.entry.info()
    }

    /// The properties in force now.
    pub fn props(&self) -> crate::volumes::VolumeProps {
        self.entry.props()
    }

    /// Its entry in the engine's volume table.
    pub fn entry(&self) -> &Arc<VolumeEntry> {
        &self.entry
    }

    /// The backing store.
    pub fn backing(&self) -> &Arc<BackingStore> {
        &self.entry.backing
    }

    /// Whether writes are refused.
    pub fn read_only(&self) -> bool {
        self.entry.info().read_only
    }

    /// Checks a request's range, and that the volume may be served at all (an
    /// object-store volume whose lease another node took, or that lapsed, may not: its
    /// cached bytes could be older than the store's).
    fn check_range(&self, offset: u64, length: u64) -> Result<(), VolumeError> {
        if let Some(why) = self.entry.backing.unusable() {
            return Err(VolumeError::Io(why));
        }
        let size_bytes = self.entry.info().size_bytes;
        if offset
            .checked_add(length)
            .is_none_or(|end| end > size_bytes)
        {
            return Err(VolumeError::OutOfRange {
                offset,
                length,
                size_bytes,
            });
        }
        Ok(())
    }

    fn blocks_of(&self, offset: u64, length: u64) -> std::ops::RangeInclusive<u64> {
        let bs = u64::from(self.entry.info().block_bytes);
        let last = (offset + length.max(1) - 1) / bs;
        offset / bs..=last
    }

    /// Reads `length` bytes at `offset`: the pieces of the blocks it covers, in order
    /// (slices of the ARC's buffers, no copy).
    pub async fn read(&self, offset: u64, length: u32) -> Result<Vec<Bytes>, VolumeError> {
        if length == 0 {
            return Ok(Vec::new());
        }
        self.check_range(offset, u64::from(length))?;
        let started = Instant::now();
        let bs = u64::from(self.entry.info().block_bytes);
        let end = offset + u64::from(length);
        let sequential = self.prefetch_after(offset, u64::from(length));
        self.note_access(offset, u64::from(length), false, sequential);
        let (blocks, served) = self.read_blocks(offset, u64::from(length), false).await?;
        let histogram = match served {
            Served::Arc => &self.frontend.read_arc,
            Served::L2 => &self.frontend.read_l2,
            Served::Backing => &self.frontend.read_backing,
        };
        histogram.record(started.elapsed());
        self.frontend
            .read_bytes
            .fetch_add(u64::from(length), Ordering::Relaxed);
        let first = offset / bs;
        Ok(blocks
            .into_iter()
            .enumerate()
            .map(|(i, data)| {
                let start = (first + i as u64) * bs;
                let from = offset.max(start) - start;
                let to = end.min(start + data.len() as u64) - start;
                let (from, to) = (from as usize, to as usize);
                // A reply shares its block's buffer, which stays in memory as long as the
                // reply waits, evicted or not: less than half a block is copied out, so
                // what a queue of replies holds is at most twice what it counts.
                if (to - from) * 2 < data.len() {
                    Bytes::copy_from_slice(&data[from..to])
                } else {
                    data.slice(from..to)
                }
            })
            .collect())
    }

    /// Brings the blocks of a range into the cache as a prefetch would (NBD CACHE).
    /// A range of any size is brought in [`CACHE_STEP_BYTES`] at a time, so that the
    /// blocks held while it runs stay few whatever the client asks.
    pub async fn cache(&self, offset: u64, length: u32) -> Result<(), VolumeError> {
        if length == 0 {
            return Ok(());
        }
        self.check_range(offset, u64::from(length))?;
        let end = offset + u64::from(length);
        for (from, to) in self.steps(offset, end, CACHE_STEP_BYTES) {
            self.read_blocks(from, to - from, true).await?;
        }
        Ok(())
    }

    /// Writes `data` at `offset`: whole blocks are copied into buffers of their own;
    /// partial ones are merged with the block's current contents, at once when the block
    /// is in the ARC, otherwise (async writes) by a merge after the acknowledgement (see
    /// `txg::partial`). `fua`: acknowledged once durable.
    pub async fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<(), VolumeError> {
        self.write_from(offset, Source::Slice(data), fua).await
    }

    /// [`Volume::write`] of bytes already cut at the volume's block boundaries: `chunks`
    /// are the pieces of the blocks from `offset` on, in order (the first from `offset`
    /// to the end of its block, the last up to the end of the write), each a buffer of its
    /// own (never a slice of a larger one: a whole block's chunk becomes its ARC buffer as
    /// it is, with no copy, and the ARC counts only its length). Chunks cut anywhere else
    /// are joined and written as one slice.
    pub async fn write_chunks(
        &self,
        offset: u64,
        chunks: &[Bytes],
        fua: bool,
    ) -> Result<(), VolumeError> {
        if self.cut_at_blocks(offset, chunks) {
            return self.write_from(offset, Source::Blocks(chunks), fua).await;
        }
        let joined = chunks.concat();
        self.write_from(offset, Source::Slice(&joined), fua).await
    }

    /// Whether `chunks` are the pieces of consecutive blocks from `offset` on.
    fn cut_at_blocks(&self, offset: u64, chunks: &[Bytes]) -> bool {
        let bs = u64::from(self.entry.info().block_bytes);
        let total: u64 = chunks.iter().map(|c| c.len() as u64).sum();
        let end = offset.saturating_add(total);
        let mut at = offset;
        for chunk in chunks {
            let piece = ((at / bs + 1) * bs).min(end) - at;
            if chunk.len() as u64 != piece {
                return false;
            }
            at += piece;
        }
        true
    }

    /// [`Volume::write`] of a [`Source`].
    async fn write_from(
        &self,
        offset: u64,
        data: Source<'_>,
        fua: bool,
    ) -> Result<(), VolumeError> {
        let length = data.len() as u64;
        self.write_checked(offset, length, self.write_blocks(offset, data, fua, None))
            .await
    }

    /// Checks a client's write of `length` bytes at `offset` (read-only, range), then
    /// runs `body` (a future: none of it runs before the checks) and counts the write in
    /// the front end's figures.
    async fn write_checked(
        &self,
        offset: u64,
        length: u64,
        body: impl std::future::Future<Output = Result<(), VolumeError>>,
    ) -> Result<(), VolumeError> {
        if self.read_only() {
            return Err(VolumeError::ReadOnly);
        }
        if length == 0 {
            return Ok(());
        }
        self.check_range(offset, length)?;
        let started = Instant::now();
        self.note_access(offset, length, true, false);
        body.await?;
        self.frontend.write.record(started.elapsed());
        self.frontend
            .write_bytes
            .fetch_add(length, Ordering::Relaxed);
        Ok(())
    }

    /// `offset..end` cut into steps of at most `max` bytes (at least one block) that end
    /// on block boundaries, so that no block is in two of them.
    fn steps(&self, offset: u64, end: u64, max: u64) -> impl Iterator<Item = (u64, u64)> {
        let bs = u64::from(self.entry.info().block_bytes);
        let max = max.max(bs);
        let mut at = offset;
        std::iter::from_fn(move || {
            (at < end).then(|| {
                let from = at;
                at = ((from / bs) * bs + max).min(end);
                (from, at)
            })
        })
    }

    /// The whole blocks a write makes dirty now, and whether any of its pieces joined a
    /// pending partial write instead (`may_defer`: an async write): each block's piece is
    /// offered to the partial writes, then taken whole, or merged with the block's current
    /// bytes. The caller holds the blocks' write stripes.
    async fn gather(
        &self,
        offset: u64,
        data: Source<'_>,
        blocks: std::ops::RangeInclusive<u64>,
        may_defer: bool,
    ) -> Result<(Vec<(u64, BlockBuf)>, bool), VolumeError> {
        let info = self.entry.info();
        let bs = u64::from(info.block_bytes);
        let first = *blocks.start();
        let end = offset + data.len() as u64;
        let mut new_blocks: Vec<(u64, BlockBuf)> = Vec::new();
        let mut deferred = false;
        // The zeros of a piece of a block larger than the shared zeros.
        let mut zeros = Vec::new();
        for block in blocks {
            let start = block * bs;
            let len = info.block_len(block) as u64;
            let (from, to) = (offset.max(start), end.min(start + len));
            let piece = match data {
                Source::Slice(data) => &data[(from - offset) as usize..(to - offset) as usize],
                Source::Blocks(chunks) => &chunks[(block - first) as usize][..],
                Source::Zeroes(_) => {
                    let n = (to - from) as usize;
                    match crate::arc::shared_zeros().get(..n) {
                        Some(shared) => shared,
                        None => {
                            zeros.resize(n, 0);
                            &zeros[..n]
                        }
                    }
                }
            };
            let at = (from - start) as usize;
            let offer = loop {
                match (self.engine.partials).offer_piece(&self.entry, block, at, piece, may_defer) {
                    Offer::Wait(done) => {
                        (self.engine.partials)
                            .wait_partial(&self.entry, block, done)
                            .await
                    }
                    offer => break offer,
                }
            };
            match offer {
                Offer::Pending => deferred = true,
                Offer::Direct if piece.len() as u64 == len => {
                    let buf = match data {
                        Source::Slice(_) => BlockBuf::copy_from(piece),
                        // A buffer of its own (see `write_chunks`): kept, not copied.
                        Source::Blocks(chunks) => {
                            BlockBuf::from_own_bytes(chunks[(block - first) as usize].clone())
                        }
                        Source::Zeroes(_) => BlockBuf::zeros(piece.len()),
                    };
                    new_blocks.push((block, buf));
                }
                _ => {
                    let current = self
                        .engine
                        .read_block(&self.entry, block, false)
                        .await
                        .ok_or_else(|| {
                            VolumeError::Io(format!(
                                "reading block {block} to merge a partial write"
                            ))
                        })?;
                    let mut merged = current.to_vec();
                    merged[at..at + piece.len()].copy_from_slice(piece);
                    new_blocks.push((block, BlockBuf::from_vec(merged)));
                }
            }
        }
        Ok((new_blocks, deferred))
    }

    /// The body of [`Volume::write`] once the request is checked; with `zeroing`, its
    /// whole zeroed blocks are zeroed on the backing store that way (see
    /// `Txg::write_blocks`).
    async fn write_blocks(
        &self,
        offset: u64,
        data: Source<'_>,
        fua: bool,
        zeroing: Option<ZeroMode>,
    ) -> Result<(), VolumeError> {
        if let Some(why) = self.entry.failure() {
            return Err(VolumeError::Io(why));
        }
        let blocks = self.blocks_of(offset, data.len() as u64);
        let mut stripes: Vec<usize> = blocks
            .clone()
            .map(|b| (b % WRITE_STRIPES as u64) as usize)
            .collect();
        stripes.sort_unstable();
        stripes.dedup();
        let mut guards = Vec::with_capacity(stripes.len());
        for stripe in stripes {
            guards.push(Arc::clone(&self.stripes[stripe]).lock_owned().await);
        }
        // Checked again with the stripes held: a shrink holds every stripe while it cuts
        // the tail off (`volume::props`), so a write checked before it cannot make a block
        // past the new end dirty after it.
        self.check_range(offset, data.len() as u64)?;
        let info = self.entry.info();
        // Decided once for the whole write.
        let sync = info.write_is_sync(fua);
        let may_defer = !sync;
        let (new_blocks, deferred) = self.gather(offset, data, blocks, may_defer).await?;
        let engine = Arc::clone(&self.engine);
        if new_blocks.is_empty() {
            // Every piece waits for its merge; its bytes are dirty already.
            drop(guards);
            if deferred && engine.txg.throttle_due() {
                let _ = (self.engine.background)
                    .spawn_blocking(move || engine.txg.throttle_reserved())
                    .await;
            }
            return Ok(());
        }
        let entry = Arc::clone(&self.entry);
        // The stripes stay held until the blocks are dirty in the ARC, so a block's
        // writes enter the cache (and their TXGs) in the order they were merged. An async
        // write the throttle will not delay is made dirty here at once (a few locks and
        // no I/O; the throttle's check and its reservation are one lock hold, so this
        // thread never sleeps); the others wait on the blocking pool. That step owns the
        // stripes: if this future is dropped (its connection died) while it runs, the
        // stripes stay held until it has made its blocks dirty, so no later write of
        // those blocks can pass it and be overwritten by bytes merged before it.
        let now = if sync {
            None
        } else {
            engine.txg.try_write_async_now(&entry, &new_blocks, zeroing)
        };
        let result = if let Some(result) = now {
            drop(guards);
            Ok(result)
        } else {
            (self.engine.background)
                .spawn_blocking(move || {
                    let result = engine.txg.write_blocks(&entry, &new_blocks, sync, zeroing);
                    drop(guards);
                    result
                })
                .await
        };
        match result {
            Ok(Ok(())) => Ok(()),
            // Clients hear the write path's reason as EIO's text.
            Ok(Err(why)) => Err(VolumeError::Io(why.to_string())),
            Err(err) => Err(VolumeError::Io(err.to_string())),
        }
    }

    /// Zeroes `length` bytes at `offset` (NBD WRITE_ZEROES, and TRIM with
    /// [`ZeroMode::Punch`]): the whole blocks of the range become zeroed blocks, which read
    /// as zeros at once, hold no memory of their own, are not logged, and are zeroed on the
    /// backing store by the TXG that syncs them as `mode` says (a hole punched, or zeros
    /// kept allocated), then leave the ARC; their cache-device copies are tombstoned as
    /// for any write. A partial block at either end is written with zeros like any
    /// partial write. The range goes in steps of at most [`ZEROES_BYTES`], each throttled
    /// and made dirty on its own (a client may ask for gigabytes with no payload). With
    /// `fua` and more than one step, the steps are made durable together at the end, as a
    /// FLUSH would.
    pub async fn write_zeroes(
        &self,
        offset: u64,
        length: u32,
        mode: ZeroMode,
        fua: bool,
    ) -> Result<(), VolumeError> {
        let length = u64::from(length);
        let body = async {
            let end = offset + length;
            for (from, to) in self.steps(offset, end, ZEROES_BYTES) {
                let whole_request = from == offset && to == end;
                let piece = Source::Zeroes((to - from) as usize);
                self.write_blocks(from, piece, fua && whole_request, Some(mode))
                    .await?;
                if fua && !whole_request && to == end {
                    self.flush().await?;
                }
            }
            Ok(())
        };
        self.write_checked(offset, length, body).await
    }

    /// Whether zeroing a range costs no write of its bytes (NBD's FAST_ZERO is refused
    /// when not): the backing store zeroes ranges in place ([`BackingStore::zeroes_fast`]).
    pub fn zeroes_fast(&self) -> bool {
        self.entry.backing.zeroes_fast()
    }

    /// Makes every write acknowledged so far durable.
    pub async fn flush(&self) -> Result<(), VolumeError> {
        if let Some(why) = self.entry.backing.unusable() {
            return Err(VolumeError::Io(why));
        }
        // Partial writes acknowledged before the FLUSH join the TXGs (and the log) first.
        self.engine.partials.settle_all_partials(&self.entry).await;
        let engine = Arc::clone(&self.engine);
        let entry = Arc::clone(&self.entry);
        match (self.engine.background)
            .spawn_blocking(move || engine.flush_writes(&entry))
            .await
        {
            Ok(Ok(())) => Ok(()),
            // Clients hear the write path's reason as EIO's text.
            Ok(Err(why)) => Err(VolumeError::Io(why.to_string())),
            Err(err) => Err(VolumeError::Io(err.to_string())),
        }
    }

    /// Whether the NBD server's idle connections may watch their sockets yielding their
    /// CPU (the `nbd_idle_yield` tunable; docs/nbd.md).
    pub fn idle_yield(&self) -> bool {
        self.engine.tunables.nbd_idle_yield()
    }

    /// Offers a client request's blocks to the pool's access log.
    fn note_access(&self, offset: u64, length: u64, write: bool, sequential: bool) {
        if !self.engine.tunables.mrc_sample() {
            return;
        }
        let how = crate::mrc::Noted {
            block_bytes: self.entry.info().block_bytes,
            write,
            sequential,
        };
        let blocks = self.blocks_of(offset, length);
        let engine = &self.engine;
        engine
            .access_log
            .note(self.entry.info().guid, blocks, how, || engine.now_ms());
    }

    /// Starts prefetch reads ahead of a sequential stream (they complete in the
    /// background). Returns whether the read continued a stream the prefetcher follows
    /// (it follows them with `zfs_prefetch_disable=1` too, without reading ahead).
    fn prefetch_after(&self, offset: u64, length: u64) -> bool {
        let tunables = &self.engine.tunables;
        let bs = u64::from(self.entry.info().block_bytes);
        // Reading further ahead than the ARC holds evicts the stream's own blocks before
        // the client reaches them, and they are read twice: a stream keeps to an eighth.
        let (_, arc_max) = crate::arc::sizing_limits(tunables);
        let max_blocks = tunables.zfetch_max_distance().min(arc_max / 8) / bs;
        let chunk_blocks = self.entry.backing.prefetch_chunk_bytes() / bs;
        let blocks = self.blocks_of(offset, length);
        let (sequential, range) = {
            let mut prefetcher = self.prefetcher.lock();
            let sequential = prefetcher.continues(*blocks.start());
            (
                sequential,
                prefetcher.observe(*blocks.start(), *blocks.end(), max_blocks, chunk_blocks),
            )
        };
        if tunables.zfs_prefetch_disable() {
            return sequential;
        }
        let Some(range) = range else {
            return sequential;
        };
        // A task per run of blocks the backing store reads at once (its misses are read
        // together, see `Engine::read_run`).
        let end = range.end.min(self.entry.info().blocks());
        let run_blocks = (self.entry.backing.read_run_bytes() / bs).max(1);
        let mut first = range.start;
        while first < end {
            let run = first..(first + run_blocks).min(end);
            first = run.end;
            let engine = Arc::clone(&self.engine);
            let entry = Arc::clone(&self.entry);
            self.engine.background.spawn(async move {
                engine.read_run(&entry, run, true).await;
            });
        }
        sequential
    }

    /// Reads the blocks of a range, in parallel when there are several, and where the
    /// slowest of them came from.
    async fn read_blocks(
        &self,
        offset: u64,
        length: u64,
        prefetch: bool,
    ) -> Result<(Vec<Bytes>, Served), VolumeError> {
        let blocks = self.blocks_of(offset, length);
        // A partial write acknowledged before this read is seen by it.
        (self.engine.partials)
            .settle_partials(&self.entry, blocks.clone())
            .await;
        // A block the volume no longer has (a shrink since the range was checked) is out of
        // range, as the request would be now; any other failure is the store's.
        let failed = |block: u64| {
            let info = self.entry.info();
            if block >= info.blocks() {
                return VolumeError::OutOfRange {
                    offset,
                    length,
                    size_bytes: info.size_bytes,
                };
            }
            VolumeError::Io(format!("reading block {block} from the backing store"))
        };
        if blocks.start() == blocks.end() {
            let block = *blocks.start();
            let (data, served) = self
                .engine
                .read_block_served(&self.entry, block, prefetch)
                .await;
            return Ok((vec![data.ok_or_else(|| failed(block))?], served));
        }
        // One run: the hits at once, the cache-device copies in parallel, the misses from
        // the backing store in reads of neighbouring blocks.
        let run = *blocks.start()..*blocks.end() + 1;
        let answers = self.engine.read_run(&self.entry, run, prefetch).await;
        let mut out = Vec::with_capacity(answers.len());
        let mut slowest = Served::Arc;
        for (block, (data, served)) in blocks.zip(answers) {
            out.push(data.ok_or_else(|| failed(block))?);
            slowest = slowest.max(served);
        }
        Ok((out, slowest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backing::LatencyModel;
    use crate::volumes::VolumeSpec;
    use larch_io::{BlockDevice, MemDevice};

    const BLOCK: usize = 8192;

    fn setup() -> (Arc<Engine>, Volume) {
        let engine = Engine::new(16 << 20);
        let device = Arc::new(MemDevice::from_bytes(vec![0xee; 16 * BLOCK]));
        let store = BackingStore::on_device(
            "mem",
            device as Arc<dyn BlockDevice>,
            LatencyModel::default(),
        );
        let entry = engine
            .add_volume(VolumeSpec::new(0x77, BLOCK as u32), Arc::new(store))
            .unwrap();
        let volume = Volume::new("v".into(), entry, Arc::clone(&engine));
        (engine, volume)
    }

    /// A zeroing: its whole blocks read as zeros at once and share the one buffer of
    /// zeros, its partial ends are merged, its TXG zeroes the store (an in-process device
    /// is written zeros: one run, counted) and then drops the blocks from the ARC; FAST_ZERO
    /// is refused on such a store before anything is done.
    #[test]
    fn zeroed_blocks_share_one_buffer_reach_the_store_and_leave_the_arc() {
        let (engine, volume) = setup();
        let rt = tokio::runtime::Runtime::new().unwrap();
        // From 100 bytes into block 1 to 100 bytes into block 4: blocks 2 and 3 whole.
        let offset = BLOCK as u64 + 100;
        rt.block_on(volume.write_zeroes(offset, 3 * BLOCK as u32, ZeroMode::Punch, false))
            .unwrap();
        let keys = [2u64, 3].map(|b| volume.info().key(b));
        for key in &keys {
            let cached = engine.arc.buf_of(key).unwrap();
            assert!(
                crate::arc::is_shared_zeros(&cached),
                "{key:?} has a buffer of its own"
            );
        }
        let mut want = vec![0xee; 5 * BLOCK];
        want[BLOCK + 100..4 * BLOCK + 100].fill(0);
        let back = rt.block_on(volume.read(0, 5 * BLOCK as u32)).unwrap();
        assert!(back.concat() == want, "read before the sync");
        engine.sync_all().unwrap();
        for key in &keys {
            assert!(
                engine.arc.buf_of(key).is_none(),
                "{key:?} stayed in the ARC"
            );
        }
        let mut stored = vec![0u8; 5 * BLOCK];
        volume.backing().read_at(&mut stored, 0).unwrap();
        assert!(stored == want, "the store after the sync");
        let stats = &volume.backing().stats;
        assert_eq!(stats.zeroes.load(Ordering::Relaxed), 1);
        assert_eq!(
            stats.zeroes_written_bytes.load(Ordering::Relaxed),
            2 * BLOCK as u64
        );
        assert!(!volume.zeroes_fast());
        let fast = larch_nbd::ZeroFlags {
            may_trim: true,
            fast_only: true,
            fua: false,
        };
        let refused = rt.block_on(larch_nbd::Export::write_zeroes(
            &volume,
            0,
            BLOCK as u32,
            fast,
        ));
        assert_eq!(refused, Err(larch_nbd::Errno::NotSup));
        let back = rt.block_on(volume.read(0, BLOCK as u32)).unwrap();
        assert!(
            back.concat() == want[..BLOCK],
            "a refused FAST_ZERO changed the block"
        );
    }

    /// Chunks cut at the blocks: a whole block's chunk becomes its ARC buffer as it is
    /// (the same memory), the partial ones are merged; chunks cut anywhere else are
    /// joined first. Either way the volume reads back what was written.
    #[test]
    fn chunks_cut_at_blocks_keep_whole_blocks_without_a_copy() {
        let (engine, volume) = setup();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let bytes =
            |len: usize, v: u8| Bytes::from((0..len).map(|i| i as u8 ^ v).collect::<Vec<_>>());
        // From 4K into block 1 to 1K into block 4: pieces of 4K, 8K, 8K, 1K.
        let offset = BLOCK as u64 + 4096;
        let chunks = vec![
            bytes(4096, 1),
            bytes(BLOCK, 2),
            bytes(BLOCK, 3),
            bytes(1024, 4),
        ];
        assert!(volume.cut_at_blocks(offset, &chunks));
        rt.block_on(volume.write_chunks(offset, &chunks, false))
            .unwrap();
        for (i, block) in [(1usize, 2u64), (2, 3)] {
            let cached = engine.arc.buf_of(&volume.info().key(block)).unwrap();
            assert_eq!(
                cached.as_ptr(),
                chunks[i].as_ptr(),
                "block {block} was copied"
            );
        }
        let want = chunks.concat();
        let back = rt.block_on(volume.read(offset, want.len() as u32)).unwrap();
        assert!(back.concat() == want);
        // Cut elsewhere: joined, written, read back the same.
        let offset = 10 * BLOCK as u64 + 100;
        let odd = vec![bytes(5000, 5), bytes(9000, 6), bytes(3, 7)];
        assert!(!volume.cut_at_blocks(offset, &odd));
        rt.block_on(volume.write_chunks(offset, &odd, false))
            .unwrap();
        let want = odd.concat();
        let back = rt.block_on(volume.read(offset, want.len() as u32)).unwrap();
        assert!(back.concat() == want);
        engine.shutdown();
    }
}

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
use crate::backing::BackingStore;
use crate::engine::Engine;
use crate::latency::LatencyHistogram;
use crate::lock::RankedMutex;
use crate::read::Served;
use crate::txg::Offer;
use crate::volumes::{VolumeEntry, VolumeInfo};
use larch_policy::prefetch::Prefetcher;

/// Write locks per volume, by block number: writes of the same block are serialised so
/// the cache and the backing store end with the same contents; others run in parallel.
const WRITE_STRIPES: usize = 256;

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
    stripes: Vec<AsyncMutex<()>>,
    prefetcher: RankedMutex<Prefetcher>,
}

impl Volume {
    /// The volume of `entry` (registered with `engine`), named `name`.
    pub fn new(name: String, entry: Arc<VolumeEntry>, engine: Arc<Engine>) -> Volume {
        Volume {
            name,
            frontend: FrontendStats::default(),
            entry,
            engine,
            stripes: (0..WRITE_STRIPES).map(|_| AsyncMutex::new(())).collect(),
            prefetcher: RankedMutex::leaf(Prefetcher::default()),
        }
    }

    /// Identity, size, block size and properties.
    pub fn info(&self) -> &VolumeInfo {
        &self.entry.info
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
        self.entry.info.read_only
    }

    /// Checks a request's range, and that the volume may be served at all (an
    /// object-store volume whose lease another node took, or that lapsed, may not: its
    /// cached bytes could be older than the store's).
    fn check_range(&self, offset: u64, length: u64) -> Result<(), VolumeError> {
        if let Some(why) = self.entry.backing.unusable() {
            return Err(VolumeError::Io(why));
        }
        let size_bytes = self.entry.info.size_bytes;
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
        let bs = u64::from(self.entry.info.block_bytes);
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
        let bs = u64::from(self.entry.info.block_bytes);
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
                data.slice(from as usize..to as usize)
            })
            .collect())
    }

    /// Brings the blocks of a range into the cache as a prefetch would (NBD CACHE).
    pub async fn cache(&self, offset: u64, length: u32) -> Result<(), VolumeError> {
        self.check_range(offset, u64::from(length))?;
        self.read_blocks(offset, u64::from(length), true)
            .await
            .map(drop)
    }

    /// Writes `data` at `offset`: whole blocks are copied into buffers of their own;
    /// partial ones are merged with the block's current contents, at once when the block
    /// is in the ARC, otherwise (async writes) by a merge after the acknowledgement (see
    /// `txg::partial`). `fua`: acknowledged once durable.
    pub async fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<(), VolumeError> {
        if self.read_only() {
            return Err(VolumeError::ReadOnly);
        }
        if data.is_empty() {
            return Ok(());
        }
        self.check_range(offset, data.len() as u64)?;
        let started = Instant::now();
        self.note_access(offset, data.len() as u64, true, false);
        self.write_blocks(offset, data, fua).await?;
        self.frontend.write.record(started.elapsed());
        self.frontend
            .write_bytes
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// The body of [`Volume::write`] once the request is checked.
    async fn write_blocks(&self, offset: u64, data: &[u8], fua: bool) -> Result<(), VolumeError> {
        if let Some(why) = self.entry.failure() {
            return Err(VolumeError::Io(why));
        }
        let info = self.entry.info;
        let bs = u64::from(info.block_bytes);
        let blocks = self.blocks_of(offset, data.len() as u64);
        let mut stripes: Vec<usize> = blocks
            .clone()
            .map(|b| (b % WRITE_STRIPES as u64) as usize)
            .collect();
        stripes.sort_unstable();
        stripes.dedup();
        let mut guards = Vec::with_capacity(stripes.len());
        for stripe in stripes {
            guards.push(self.stripes[stripe].lock().await);
        }
        let may_defer = !self.engine.write_is_sync(&self.entry, fua);
        let end = offset + data.len() as u64;
        let mut new_blocks: Vec<(u64, BlockBuf)> = Vec::new();
        let mut deferred = false;
        for block in blocks {
            let start = block * bs;
            let len = info.block_len(block) as u64;
            let (from, to) = (offset.max(start), end.min(start + len));
            let piece = &data[(from - offset) as usize..(to - offset) as usize];
            let at = (from - start) as usize;
            let offer = loop {
                match self
                    .engine
                    .offer_piece(&self.entry, block, at, piece, may_defer)
                {
                    Offer::Wait(done) => self.engine.wait_partial(&self.entry, block, done).await,
                    offer => break offer,
                }
            };
            match offer {
                Offer::Pending => deferred = true,
                Offer::Direct if piece.len() as u64 == len => {
                    new_blocks.push((block, BlockBuf::copy_from(piece)));
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
        let engine = Arc::clone(&self.engine);
        if new_blocks.is_empty() {
            // Every piece waits for its merge; its bytes are dirty already.
            drop(guards);
            if deferred && engine.throttle_due() {
                let _ = self
                    .engine
                    .spawn_blocking(move || engine.throttle_reserved())
                    .await;
            }
            return Ok(());
        }
        let entry = Arc::clone(&self.entry);
        // The stripes stay held until the blocks are dirty in the ARC, so a block's
        // writes enter the cache (and their TXGs) in the order they were merged.
        let result = self
            .engine
            .spawn_blocking(move || engine.write_blocks(&entry, &new_blocks, fua))
            .await;
        drop(guards);
        match result {
            Ok(Ok(())) => Ok(()),
            Ok(Err(why)) => Err(VolumeError::Io(why)),
            Err(err) => Err(VolumeError::Io(err.to_string())),
        }
    }

    /// Writes `length` zero bytes at `offset`.
    pub async fn write_zeroes(
        &self,
        offset: u64,
        length: u32,
        fua: bool,
    ) -> Result<(), VolumeError> {
        let zeroes = vec![0u8; length as usize];
        self.write(offset, &zeroes, fua).await
    }

    /// Makes every write acknowledged so far durable.
    pub async fn flush(&self) -> Result<(), VolumeError> {
        if let Some(why) = self.entry.backing.unusable() {
            return Err(VolumeError::Io(why));
        }
        // Partial writes acknowledged before the FLUSH join the TXGs (and the log) first.
        self.engine.settle_all_partials(&self.entry).await;
        let engine = Arc::clone(&self.engine);
        let entry = Arc::clone(&self.entry);
        match self
            .engine
            .spawn_blocking(move || engine.flush_writes(&entry))
            .await
        {
            Ok(Ok(())) => Ok(()),
            Ok(Err(why)) => Err(VolumeError::Io(why)),
            Err(err) => Err(VolumeError::Io(err.to_string())),
        }
    }

    /// Offers a client request's blocks to the pool's access log.
    fn note_access(&self, offset: u64, length: u64, write: bool, sequential: bool) {
        if !self.engine.tunables.mrc_sample() {
            return;
        }
        let how = crate::mrc::Noted {
            block_bytes: self.entry.info.block_bytes,
            write,
            sequential,
        };
        let blocks = self.blocks_of(offset, length);
        let engine = &self.engine;
        engine
            .access_log
            .note(self.entry.info.guid, blocks, how, || engine.now_ms());
    }

    /// Starts prefetch reads ahead of a sequential stream (they complete in the
    /// background). Returns whether the read continued a stream the prefetcher follows
    /// (it follows them with `zfs_prefetch_disable=1` too, without reading ahead).
    fn prefetch_after(&self, offset: u64, length: u64) -> bool {
        let tunables = &self.engine.tunables;
        let bs = u64::from(self.entry.info.block_bytes);
        // Reading further ahead than the ARC holds evicts the stream's own blocks before
        // the client reaches them, and they are read twice: a stream keeps to an eighth.
        let (_, arc_max) = crate::arc::sizing_limits(tunables);
        let max_blocks = tunables.zfetch_max_distance().min(arc_max / 8) / bs;
        let blocks = self.blocks_of(offset, length);
        let (sequential, range) = {
            let mut prefetcher = self.prefetcher.lock();
            let sequential = prefetcher.continues(*blocks.start());
            (
                sequential,
                prefetcher.observe(*blocks.start(), *blocks.end(), max_blocks),
            )
        };
        if tunables.zfs_prefetch_disable() {
            return sequential;
        }
        let Some(range) = range else {
            return sequential;
        };
        for block in range.start..range.end.min(self.entry.info.blocks()) {
            let engine = Arc::clone(&self.engine);
            let entry = Arc::clone(&self.entry);
            self.engine.spawn_background(async move {
                engine.read_block(&entry, block, true).await;
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
        self.engine
            .settle_partials(&self.entry, blocks.clone())
            .await;
        let failed =
            |block: u64| VolumeError::Io(format!("reading block {block} from the backing store"));
        if blocks.start() == blocks.end() {
            let block = *blocks.start();
            let (data, served) = self
                .engine
                .read_block_served(&self.entry, block, prefetch)
                .await;
            return Ok((vec![data.ok_or_else(|| failed(block))?], served));
        }
        let mut tasks = Vec::new();
        for block in blocks.clone() {
            let engine = Arc::clone(&self.engine);
            let entry = Arc::clone(&self.entry);
            tasks.push(tokio::spawn(async move {
                engine.read_block_served(&entry, block, prefetch).await
            }));
        }
        let mut out = Vec::with_capacity(tasks.len());
        let mut slowest = Served::Arc;
        for (block, task) in blocks.zip(tasks) {
            let (data, served) = task.await.unwrap_or((None, Served::Backing));
            out.push(data.ok_or_else(|| failed(block))?);
            slowest = slowest.max(served);
        }
        Ok((out, slowest))
    }
}

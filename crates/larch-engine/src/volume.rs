//! A volume served over NBD: byte ranges split into `volblocksize` blocks, each read
//! through the engine, each write merged into whole blocks and handed to the engine's
//! write path (dirty in the ARC, synced by transaction groups).

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use larch_nbd::{
    BlockSizes, Errno, Export, ExportResult, Features, ReadData, ReadSegment, ZeroFlags,
};
use tokio::sync::Mutex as AsyncMutex;

use crate::backing::BackingStore;
use crate::engine::{Engine, VolumeInfo};

/// Write locks per volume, by block number: writes of the same block are serialised so
/// the cache and the backing store end with the same contents; others run in parallel.
const WRITE_STRIPES: usize = 256;

/// Sequential streams per volume the prefetcher follows at once.
const STREAMS: usize = 8;

/// Most blocks one read can start prefetching (the rest follow with the next reads).
const PREFETCH_BLOCKS_PER_READ: u64 = 64;

/// One sequential stream: where its next read should start and how far ahead it has
/// already been prefetched.
#[derive(Clone, Copy, Debug, Default)]
struct Stream {
    next_block: u64,
    reads: u64,
    prefetched_until: u64,
    last_use: u64,
}

/// A small `dmu_zfetch`: detects reads that continue where an earlier one ended and reads
/// ahead of them, farther the longer the stream runs.
#[derive(Debug, Default)]
struct Prefetcher {
    streams: [Stream; STREAMS],
    clock: u64,
}

impl Prefetcher {
    /// Records a demand read of blocks `first..=last`; returns the blocks to prefetch.
    fn observe(&mut self, first: u64, last: u64, max_blocks: u64) -> Option<std::ops::Range<u64>> {
        self.clock += 1;
        let clock = self.clock;
        if let Some(s) = self
            .streams
            .iter_mut()
            .find(|s| s.reads > 0 && s.next_block == first)
        {
            s.reads += 1;
            s.next_block = last + 1;
            s.last_use = clock;
            let distance = (s.reads * (last - first + 1) * 2).min(max_blocks);
            let start = s.prefetched_until.max(last + 1);
            let end = (last + 1 + distance).min(start + PREFETCH_BLOCKS_PER_READ);
            if end > start {
                s.prefetched_until = end;
                return Some(start..end);
            }
            return None;
        }
        let victim = self
            .streams
            .iter_mut()
            .min_by_key(|s| s.last_use)
            .expect("streams is not empty");
        *victim = Stream {
            next_block: last + 1,
            reads: 1,
            prefetched_until: last + 1,
            last_use: clock,
        };
        None
    }
}

/// A volume: its backing store, its cache settings, and the engine it shares.
pub struct Volume {
    /// The volume's name (the NBD export name).
    pub name: String,
    /// Identity, size, block size and cache settings.
    pub info: VolumeInfo,
    /// Refuse writes.
    pub read_only: bool,
    backing: Arc<BackingStore>,
    engine: Arc<Engine>,
    stripes: Vec<AsyncMutex<()>>,
    prefetcher: std::sync::Mutex<Prefetcher>,
}

impl Volume {
    /// A volume over `backing`.
    pub fn new(
        name: String,
        info: VolumeInfo,
        read_only: bool,
        backing: Arc<BackingStore>,
        engine: Arc<Engine>,
    ) -> Volume {
        Volume {
            name,
            info,
            read_only,
            backing,
            engine,
            stripes: (0..WRITE_STRIPES).map(|_| AsyncMutex::new(())).collect(),
            prefetcher: std::sync::Mutex::new(Prefetcher::default()),
        }
    }

    /// The backing store.
    pub fn backing(&self) -> &Arc<BackingStore> {
        &self.backing
    }

    fn blocks_of(&self, offset: u64, length: u64) -> std::ops::RangeInclusive<u64> {
        let bs = u64::from(self.info.block_bytes);
        let last = (offset + length.max(1) - 1) / bs;
        offset / bs..=last
    }

    /// Starts prefetch reads ahead of a sequential stream (they complete in the background).
    fn prefetch_after(&self, offset: u64, length: u64) {
        let tunables = &self.engine.tunables;
        if tunables.zfs_prefetch_disable() {
            return;
        }
        let bs = u64::from(self.info.block_bytes);
        let max_blocks = tunables.zfetch_max_distance() / bs;
        let blocks = self.blocks_of(offset, length);
        let range = self.prefetcher.lock().expect("prefetcher lock").observe(
            *blocks.start(),
            *blocks.end(),
            max_blocks,
        );
        let Some(range) = range else {
            return;
        };
        let total_blocks = self.info.size_bytes.div_ceil(bs);
        for block in range.start..range.end.min(total_blocks) {
            let engine = Arc::clone(&self.engine);
            let backing = Arc::clone(&self.backing);
            let info = self.info;
            tokio::spawn(async move {
                engine.read_block(&backing, &info, block, true).await;
            });
        }
    }

    /// Reads the blocks of a range, in parallel when there are several.
    async fn read_blocks(
        &self,
        offset: u64,
        length: u64,
        prefetch: bool,
    ) -> ExportResult<Vec<Bytes>> {
        let blocks = self.blocks_of(offset, length);
        if blocks.start() == blocks.end() {
            let block = *blocks.start();
            let data = self
                .engine
                .read_block(&self.backing, &self.info, block, prefetch)
                .await
                .ok_or(Errno::Io)?;
            return Ok(vec![data]);
        }
        let mut tasks = Vec::new();
        for block in blocks {
            let engine = Arc::clone(&self.engine);
            let backing = Arc::clone(&self.backing);
            let info = self.info;
            tasks.push(tokio::spawn(async move {
                engine.read_block(&backing, &info, block, prefetch).await
            }));
        }
        let mut out = Vec::with_capacity(tasks.len());
        for task in tasks {
            out.push(task.await.ok().flatten().ok_or(Errno::Io)?);
        }
        Ok(out)
    }

    /// Writes `data` at `offset`: whole blocks go in as they are, partial ones are merged
    /// with the block's current contents first (read-modify-write through the cache).
    async fn write_range(&self, offset: u64, data: Bytes, fua: bool) -> ExportResult<()> {
        if data.is_empty() {
            return Ok(());
        }
        let bs = u64::from(self.info.block_bytes);
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
        let end = offset + data.len() as u64;
        let mut new_blocks: Vec<(u64, Bytes)> = Vec::new();
        for block in blocks.clone() {
            let start = block * bs;
            let len = self.info.block_len(block) as u64;
            let (from, to) = (offset.max(start), end.min(start + len));
            let piece = data.slice((from - offset) as usize..(to - offset) as usize);
            if from == start && to == start + len {
                new_blocks.push((block, piece));
                continue;
            }
            let current = self
                .engine
                .read_block(&self.backing, &self.info, block, false)
                .await
                .ok_or(Errno::Io)?;
            let mut merged = BytesMut::from(&current[..]);
            merged[(from - start) as usize..(to - start) as usize].copy_from_slice(&piece);
            new_blocks.push((block, merged.freeze()));
        }
        let engine = Arc::clone(&self.engine);
        let info = self.info;
        // The stripes stay held until the blocks are dirty in the ARC, so a block's
        // writes enter the cache (and their TXGs) in the order they were merged.
        let result =
            tokio::task::spawn_blocking(move || engine.write_blocks(&info, &new_blocks, fua)).await;
        drop(guards);
        match result {
            Ok(Ok(())) => Ok(()),
            _ => Err(Errno::Io),
        }
    }
}

impl Export for Volume {
    fn size_bytes(&self) -> u64 {
        self.info.size_bytes
    }

    fn block_sizes(&self) -> BlockSizes {
        BlockSizes {
            minimum_bytes: 1,
            preferred_bytes: self.info.block_bytes.max(4096),
            maximum_bytes: 32 << 20,
        }
    }

    fn features(&self) -> Features {
        Features {
            read_only: self.read_only,
            flush: true,
            trim: false,
            write_zeroes: true,
            fast_zero: false,
            cache: true,
            block_status: true,
            // A FLUSH makes every write the pool acknowledged durable (it commits the whole
            // intent log or syncs the open TXG), whichever connection sent it.
            multi_conn: true,
            rotational: false,
        }
    }

    async fn read(&self, offset: u64, length: u32) -> ExportResult<ReadData> {
        if length == 0 {
            return Ok(ReadData::default());
        }
        let bs = u64::from(self.info.block_bytes);
        let end = offset + u64::from(length);
        self.prefetch_after(offset, u64::from(length));
        let blocks = self.read_blocks(offset, u64::from(length), false).await?;
        let first = offset / bs;
        let mut segments = Vec::with_capacity(blocks.len());
        for (i, data) in blocks.into_iter().enumerate() {
            let start = (first + i as u64) * bs;
            let from = offset.max(start) - start;
            let to = end.min(start + data.len() as u64) - start;
            segments.push(ReadSegment::Data(data.slice(from as usize..to as usize)));
        }
        Ok(ReadData { segments })
    }

    async fn write(&self, offset: u64, data: Bytes, fua: bool) -> ExportResult<()> {
        self.write_range(offset, data, fua).await
    }

    async fn flush(&self) -> ExportResult<()> {
        let engine = Arc::clone(&self.engine);
        let info = self.info;
        match tokio::task::spawn_blocking(move || engine.flush_writes(&info)).await {
            Ok(Ok(())) => Ok(()),
            _ => Err(Errno::Io),
        }
    }

    async fn write_zeroes(&self, offset: u64, length: u32, flags: ZeroFlags) -> ExportResult<()> {
        let zeroes = Bytes::from(vec![0u8; length as usize]);
        self.write_range(offset, zeroes, flags.fua).await
    }

    async fn cache(&self, offset: u64, length: u32) -> ExportResult<()> {
        self.read_blocks(offset, u64::from(length), true)
            .await
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefetcher_follows_sequential_streams_only() {
        let mut p = Prefetcher::default();
        assert_eq!(p.observe(0, 3, 512), None, "a first read starts a stream");
        let ahead = p.observe(4, 7, 512).expect("the second read continues it");
        assert_eq!(ahead.start, 8);
        assert!(ahead.end > 8);
        // A random read elsewhere does not prefetch, and does not break the stream.
        assert_eq!(p.observe(1000, 1000, 512), None);
        let next = p.observe(8, 11, 512).expect("the stream goes on");
        assert!(next.start >= ahead.end, "nothing is prefetched twice");
        // The distance is capped.
        let mut q = Prefetcher::default();
        q.observe(0, 0, 4);
        let mut end = 0;
        for b in 1..100 {
            if let Some(r) = q.observe(b, b, 4) {
                end = r.end;
            }
            assert!(end <= b + 1 + 4, "prefetched {end} at block {b}");
        }
    }
}

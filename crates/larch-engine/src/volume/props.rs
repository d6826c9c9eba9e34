//! A served volume's properties and size, changed while clients use it (`larch set VOLUME
//! PROP=VALUE`, `larch volume set NAME volsize=SIZE`).
//!
//! Every request reads the volume's size and properties once, from atomics, with no lock
//! (`volumes::info`), so a change is in force for the requests that start after it and
//! the ones under way finish as they began. What the caches hold is then brought in line:
//! - `primarycache` narrowed (from `all`): the volume's clean blocks leave the ARC at
//!   once; dirty ones stay until their TXG is synced, and are not kept then
//!   (`Shard::write_done`). Reads under way install nothing (their flights are
//!   invalidated), and reads that start later look at the property before they install.
//! - `secondarycache` narrowed: the volume's copies leave the L2 index with tombstones,
//!   which are committed at once (`l2::purge`); nothing reads or feeds them meanwhile.
//! - `sync` and `logbias`: nothing to drop; the next write and FLUSH go by them (a FLUSH
//!   also covers writes that `logbias=throughput` kept out of the log, `Txg::flush_writes`).
//!
//! A resize keeps the volume a whole number of blocks, so that no block changes length
//! (cached copies could not follow). Growing makes the new range read as zeros on the
//! backing store first (`BackingStore::resize`), then records the size and puts it in
//! force: nothing of the new range can be cached before, since no request could name it,
//! and a shrink never leaves a copy of its tail behind. Shrinking cuts the tail off:
//! 1. every write stripe of the volume is taken, so no write is between its range check
//!    and its blocks being dirty (a write waiting for a stripe checks its range again once
//!    it has it), and the partial writes pending are merged;
//! 2. the new size is in force: requests past it are refused;
//! 3. the open TXG is synced, so no block of the tail is dirty any more (its bytes go to
//!    the store, still long enough, and are cut off below);
//! 4. the tail's blocks leave the ARC (reads under way are invalidated) and its copies the
//!    L2 index, with tombstones committed at once: no restart serves a block of the old
//!    tail, even after the volume grows back over it;
//! 5. the caller records the size (`pool.json`), then the backing store is cut.
//!
//! Should a step before the record fail, the old size is put back (what was dropped were
//! cached copies only); once recorded, the new size stays.

use std::sync::PoisonError;

use super::Volume;
use crate::error::{ChangeError, VolumeTableError};
use crate::volumes::info::MAP_PAGE_KEYS;
use crate::volumes::{CacheMode, VolumeInfo, VolumeProps, check_blocks};

/// What a change of properties dropped from the caches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dropped {
    /// Clean blocks dropped from the ARC.
    pub arc_blocks: u64,
    /// Copies dropped from cache devices (tombstoned).
    pub l2_copies: u64,
}

/// What a resize did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resized {
    /// The size before.
    pub from_bytes: u64,
    /// The size now.
    pub to_bytes: u64,
    /// The blocks and copies of the cut-off tail dropped from the caches (a shrink).
    pub dropped: Dropped,
}

impl Volume {
    /// Puts `props` in force at once and drops what the caches hold that the new values
    /// exclude (see the module documentation). `Err` only when the tombstones of dropped
    /// cache-device copies could not be made durable nor the devices' logs emptied (the
    /// properties are in force all the same). Blocking.
    pub fn set_properties(&self, props: VolumeProps) -> Result<Dropped, ChangeError> {
        let _changing = self.changing.lock().unwrap_or_else(PoisonError::into_inner);
        let before = self.entry.info();
        self.entry.set_props(props);
        let mut dropped = Dropped::default();
        // `metadata` keeps an object volume's map pages (its metadata), `none` drops them
        // too; what is dropped is counted as blocks: the data's.
        if before.primarycache == CacheMode::All && props.primarycache != CacheMode::All {
            let data = 0..MAP_PAGE_KEYS;
            dropped.arc_blocks = self.engine.arc.drop_blocks(before.slot, data, true).0;
        }
        if before.primarycache != CacheMode::None && props.primarycache == CacheMode::None {
            let map_pages = MAP_PAGE_KEYS..u64::MAX;
            self.engine.arc.drop_blocks(before.slot, map_pages, true);
        }
        if before.secondarycache == CacheMode::All && props.secondarycache != CacheMode::All {
            dropped.l2_copies = self.engine.l2.drop_copies(&before, 0);
            self.engine.l2.commit_queued_tombstones()?;
        }
        Ok(dropped)
    }

    /// Why the volume cannot be resized to `size_bytes`, if it cannot: not a whole number
    /// of blocks (before or after), no blocks, more blocks than the L2 index's keys hold,
    /// read-only.
    pub fn check_resize(&self, size_bytes: u64) -> Result<(), ChangeError> {
        check_resize(&self.entry.info(), size_bytes)
    }

    /// Grows or shrinks the volume to `size_bytes` while it is served (see the module
    /// documentation; a shrink drops the data past the new end). `record` is called with
    /// the new size at the point from which it must survive a crash (the pool saves it in
    /// `pool.json`); its error stops the resize, the old size kept. Blocking: never call it
    /// on an async runtime's thread (it takes the write stripes as a blocking thread).
    pub fn resize(
        &self,
        size_bytes: u64,
        record: impl FnOnce(u64) -> std::io::Result<()>,
    ) -> Result<Resized, ChangeError> {
        let _changing = self.changing.lock().unwrap_or_else(PoisonError::into_inner);
        let before = self.entry.info();
        check_resize(&before, size_bytes)?;
        (self.entry.backing)
            .check_resize(before.size_bytes, size_bytes)
            .map_err(|e| self.backing_error(e))?;
        let dropped = if size_bytes >= before.size_bytes {
            self.grow(&before, size_bytes, record)?;
            Dropped::default()
        } else {
            self.shrink(&before, size_bytes, record)?
        };
        Ok(Resized {
            from_bytes: before.size_bytes,
            to_bytes: size_bytes,
            dropped,
        })
    }

    fn backing_error(&self, source: std::io::Error) -> ChangeError {
        ChangeError::Backing {
            path: self.entry.backing.path().display().to_string(),
            source,
        }
    }

    fn grow(
        &self,
        before: &VolumeInfo,
        size_bytes: u64,
        record: impl FnOnce(u64) -> std::io::Result<()>,
    ) -> Result<(), ChangeError> {
        let backing = &self.entry.backing;
        let first = backing.records_size_first();
        let mut record = Some(record);
        let mut record_now = || {
            let record = record.take().expect("recorded once");
            record(size_bytes).map_err(ChangeError::Record)
        };
        if first {
            record_now()?;
        }
        if size_bytes > before.size_bytes {
            (backing.resize(before.size_bytes, size_bytes)).map_err(|e| self.backing_error(e))?;
        }
        if !first {
            record_now()?;
        }
        self.entry.set_size_bytes(size_bytes);
        Ok(())
    }

    fn shrink(
        &self,
        before: &VolumeInfo,
        size_bytes: u64,
        record: impl FnOnce(u64) -> std::io::Result<()>,
    ) -> Result<Dropped, ChangeError> {
        let from = size_bytes / u64::from(before.block_bytes);
        // 1. In stripe order, as writers take them.
        let stripes: Vec<_> = self.stripes.iter().map(|s| s.blocking_lock()).collect();
        self.engine.partials.merge_volume_partials(&self.entry);
        // 2.
        self.entry.set_size_bytes(size_bytes);
        let cut = self.cut_tail(before, from);
        let dropped =
            match cut.and_then(|d| record(size_bytes).map(|()| d).map_err(ChangeError::Record)) {
                Ok(dropped) => dropped,
                Err(err) => {
                    self.entry.set_size_bytes(before.size_bytes);
                    return Err(err);
                }
            };
        // 5. Recorded: the new size stays, whatever the store says.
        let cut = (self.entry.backing).resize(before.size_bytes, size_bytes);
        drop(stripes);
        cut.map_err(|e| self.backing_error(e))?;
        Ok(dropped)
    }

    /// Steps 3 and 4 of a shrink: the tail synced, then dropped from the caches.
    fn cut_tail(&self, before: &VolumeInfo, from: u64) -> Result<Dropped, ChangeError> {
        self.engine.sync_all()?;
        let (arc_blocks, dirty) =
            (self.engine.arc).drop_blocks(before.slot, from..MAP_PAGE_KEYS, false);
        assert_eq!(
            dirty, 0,
            "volume {:#x}: {dirty} dirty blocks past block {from} after the sync, with every \
             write stripe held",
            before.guid
        );
        let l2_copies = self.engine.l2.drop_copies(before, from);
        self.engine.l2.commit_queued_tombstones()?;
        Ok(Dropped {
            arc_blocks,
            l2_copies,
        })
    }
}

/// [`Volume::check_resize`] of a volume as `info` has it (a stopped pool's, too).
pub fn check_resize(info: &VolumeInfo, size_bytes: u64) -> Result<(), ChangeError> {
    let block_bytes = info.block_bytes;
    if info.read_only {
        return Err(ChangeError::ReadOnly);
    }
    if size_bytes == 0 {
        return Err(ChangeError::Empty);
    }
    if !size_bytes.is_multiple_of(u64::from(block_bytes)) {
        return Err(ChangeError::NotWholeBlocks {
            size_bytes,
            block_bytes,
        });
    }
    if !info.size_bytes.is_multiple_of(u64::from(block_bytes)) {
        return Err(ChangeError::PartBlock {
            size_bytes: info.size_bytes,
            block_bytes,
        });
    }
    check_blocks(size_bytes, block_bytes).map_err(|e: VolumeTableError| e.into())
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;
    use std::sync::atomic::Ordering;

    use larch_io::{BlockDevice, MemDevice};
    use larch_policy::State;

    use super::*;
    use crate::arc::{BlockBuf, Served};
    use crate::backing::{BackingStore, LatencyModel};
    use crate::engine::Engine;
    use crate::l2::{CacheDevice, DeviceState};
    use crate::testing::contents;
    use crate::volume::VolumeError;
    use crate::volumes::{LogBias, VolumeSpec};

    const BLOCK: u64 = 4096;
    /// Blocks of the volume at first; its store holds twice as many.
    const BLOCKS: u64 = 16;

    /// A volume of [`BLOCKS`] blocks ([`contents`]) on a memory store of twice that, and a
    /// cache device on `cache` (formatted when `format`, else rebuilt).
    struct Setup {
        engine: Arc<Engine>,
        volume: Volume,
        device: Arc<CacheDevice>,
        runtime: tokio::runtime::Runtime,
    }

    impl Setup {
        fn new(store: &Arc<MemDevice>, cache: &Arc<MemDevice>, spec: VolumeSpec) -> Setup {
            let format = cache.snapshot().iter().all(|&b| b == 0);
            let engine = Engine::new(16 << 20);
            let backing = BackingStore::on_device(
                "volume",
                Arc::clone(store) as Arc<dyn BlockDevice>,
                LatencyModel::default(),
            );
            let entry = engine.add_volume(spec, Arc::new(backing)).expect("volume");
            let device = engine
                .add_cache_device_on(
                    Arc::clone(cache) as Arc<dyn BlockDevice>,
                    Path::new("mem"),
                    1,
                    2,
                    format,
                )
                .expect("cache device");
            while device.state() == DeviceState::Rebuilding {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            let volume = Volume::new("v".into(), entry, Arc::clone(&engine));
            Setup {
                engine,
                volume,
                device,
                runtime,
            }
        }

        /// Block `block` as a client reads it, and where it came from.
        fn read(&self, block: u64) -> Result<(Vec<u8>, Served), VolumeError> {
            self.volume.check_range(block * BLOCK, BLOCK)?;
            let (data, served) = self.runtime.block_on(self.engine.read_block_served(
                self.volume.entry(),
                block,
                false,
            ));
            Ok((data.expect("read").to_vec(), served))
        }

        fn in_arc(&self, block: u64) -> bool {
            self.engine
                .arc
                .buf_of(&self.volume.info().key(block))
                .is_some()
        }

        /// The ARC state of `block`, if the ARC knows it.
        fn state(&self, block: u64) -> Option<State> {
            let key = self.volume.info().key(block);
            self.engine.arc.shard(&key).arc.info(&key).map(|i| i.state)
        }

        /// The volume's blocks with a copy on the cache device.
        fn on_l2(&self) -> Vec<u64> {
            let slot = self.volume.info().slot;
            let mut blocks: Vec<u64> = (self.engine.arc.shards())
                .flat_map(|s| s.l2.keys_where(|_| true))
                .map(crate::l2::index::unpack_key)
                .filter(|(s, _)| *s == slot)
                .map(|(_, b)| b)
                .collect();
            blocks.sort_unstable();
            blocks
        }

        /// Reads every block and feeds them all to the cache device, then empties the ARC:
        /// reads go to the cache device from here on.
        fn warm_l2(&self) {
            for block in 0..self.volume.info().blocks() {
                self.read(block).expect("in range");
            }
            self.engine.feed_once(&self.device, 64 << 20);
            self.engine
                .arc
                .drop_blocks(self.volume.info().slot, 0..u64::MAX, true);
            assert_eq!(self.on_l2().len() as u64, self.volume.info().blocks());
        }
    }

    fn stores() -> (Arc<MemDevice>, Arc<MemDevice>) {
        let bytes: Vec<u8> = (0..2 * BLOCKS).flat_map(|b| contents(b, BLOCK)).collect();
        (
            Arc::new(MemDevice::from_bytes(bytes)),
            Arc::new(MemDevice::new(4 << 20)),
        )
    }

    fn spec() -> VolumeSpec {
        VolumeSpec {
            size_bytes: Some(BLOCKS * BLOCK),
            ..VolumeSpec::new(0x77, BLOCK as u32)
        }
    }

    fn with(props: VolumeProps, change: impl FnOnce(&mut VolumeProps)) -> VolumeProps {
        let mut props = props;
        change(&mut props);
        props
    }

    /// `primarycache` narrowed: the clean blocks leave the ARC at once, a dirty one stays
    /// until its TXG is synced and is not kept then, and reads bring nothing in until it
    /// is widened again.
    #[test]
    fn narrowing_primarycache_drops_clean_blocks_and_dirty_ones_once_synced() {
        let (store, cache) = stores();
        let s = Setup::new(&store, &cache, spec());
        for block in 0..8 {
            s.read(block).unwrap();
        }
        let written = vec![0x5a; BLOCK as usize];
        (s.engine)
            .write_blocks(
                s.volume.entry(),
                &[(9, BlockBuf::copy_from(&written))],
                false,
            )
            .unwrap();
        assert!((0..8).chain([9]).all(|b| s.in_arc(b)));
        let none = with(s.volume.props(), |p| p.primarycache = CacheMode::None);
        let dropped = s.volume.set_properties(none).unwrap();
        assert_eq!(
            dropped,
            Dropped {
                arc_blocks: 8,
                l2_copies: 0
            }
        );
        assert!((0..8).all(|b| !s.in_arc(b)));
        assert!(s.in_arc(9), "a dirty block stays until it is synced");
        s.engine.sync_all().unwrap();
        assert!(!s.in_arc(9), "kept after its sync");
        // Read now, a block enters as uncached (OpenZFS's state for it: dropped soon,
        // never kept in MRU or MFU).
        let (data, served) = s.read(3).unwrap();
        assert_eq!((data, served), (contents(3, BLOCK), Served::Backing));
        assert_eq!(s.state(3), Some(State::Uncached));
        assert_eq!(s.read(9).unwrap().0, written);
        s.volume.set_properties(VolumeProps::default()).unwrap();
        s.read(5).unwrap();
        assert_eq!(
            s.state(5),
            Some(State::Mru),
            "widened again, a read caches it"
        );
        s.engine.shutdown();
    }

    /// `secondarycache` narrowed: the volume's copies leave the index, nothing reads or
    /// feeds them afterwards, and a restart restores none of them, whatever the setting
    /// is by then (their tombstones were committed); and a volume started with
    /// `secondarycache=none` restores none of the copies its device holds.
    #[test]
    fn narrowing_secondarycache_means_no_l2_read_now_or_after_a_restart() {
        let (store, cache) = stores();
        let s = Setup::new(&store, &cache, spec());
        s.warm_l2();
        assert_eq!(
            s.read(0).unwrap().1,
            Served::L2,
            "the copies serve at first"
        );
        s.engine
            .arc
            .drop_blocks(s.volume.info().slot, 0..u64::MAX, true);
        let none = with(s.volume.props(), |p| p.secondarycache = CacheMode::None);
        let dropped = s.volume.set_properties(none).unwrap();
        assert_eq!(
            dropped,
            Dropped {
                arc_blocks: 0,
                l2_copies: BLOCKS
            }
        );
        assert_eq!(s.engine.queued_tombstones(), 0, "committed at once");
        assert!(s.on_l2().is_empty());
        let device_reads = s.device.io.reads.load(Ordering::Relaxed);
        for block in 0..BLOCKS {
            assert_eq!(
                s.read(block).unwrap(),
                (contents(block, BLOCK), Served::Backing)
            );
        }
        assert_eq!(s.engine.feed_once(&s.device, 64 << 20), 0, "fed");
        assert_eq!(s.device.io.reads.load(Ordering::Relaxed), device_reads);
        s.engine.shutdown();
        drop(s);
        // Back with `secondarycache=all`: the tombstones hide every copy.
        let s = Setup::new(&store, &cache, spec());
        assert!(s.on_l2().is_empty(), "restored: {:?}", s.on_l2());
        // Fed again, then started with `secondarycache=none`: none restored.
        s.warm_l2();
        s.engine.shutdown();
        drop(s);
        let uncached = VolumeSpec {
            secondarycache: CacheMode::None,
            ..spec()
        };
        let s = Setup::new(&store, &cache, uncached);
        assert!(s.on_l2().is_empty(), "restored: {:?}", s.on_l2());
        assert_eq!(s.read(5).unwrap(), (contents(5, BLOCK), Served::Backing));
        s.engine.shutdown();
    }

    /// A shrink drops every cached copy of the tail (ARC, dirty blocks, a pending partial
    /// write, cache-device copies with their tombstones committed), records the size and
    /// refuses requests past it; growing back, the new tail reads as zeros from the
    /// store, also after a restart with the same cache device.
    #[test]
    fn a_shrink_drops_the_tail_everywhere_and_growing_back_reads_zeros() {
        let (store, cache) = stores();
        let s = Setup::new(&store, &cache, spec());
        s.warm_l2();
        for block in 0..4 {
            s.read(block).unwrap();
        }
        // Block 15 dirty, block 13 a partial write waiting for the block's read, block 12
        // in the ARC.
        let new = vec![0xc3; BLOCK as usize];
        let rt = &s.runtime;
        rt.block_on(s.volume.write(15 * BLOCK, &new, false))
            .unwrap();
        rt.block_on(s.volume.write(13 * BLOCK + 100, b"partial", false))
            .unwrap();
        assert_eq!(s.volume.entry().partials.len(), 1);
        s.read(12).unwrap();
        let mut recorded = None;
        let resized = (s.volume)
            .resize(8 * BLOCK, |size| {
                recorded = Some(size);
                Ok(())
            })
            .unwrap();
        assert_eq!(recorded, Some(8 * BLOCK));
        assert_eq!(
            (resized.from_bytes, resized.to_bytes),
            (BLOCKS * BLOCK, 8 * BLOCK)
        );
        // Blocks 13 and 15 lost their copies when they were written.
        assert_eq!(resized.dropped.l2_copies, 6);
        assert_eq!(s.volume.info().size_bytes, 8 * BLOCK);
        assert_eq!(s.volume.entry().partials.len(), 0);
        assert!((8..BLOCKS).all(|b| !s.in_arc(b)));
        assert!((0..4).all(|b| s.in_arc(b)), "blocks before the end stay");
        assert_eq!(s.on_l2(), (0..8).collect::<Vec<_>>());
        assert_eq!(s.engine.queued_tombstones(), 0, "committed at once");
        assert_eq!(s.engine.txg_state().0, 0, "dirty bytes");
        let past = 8 * BLOCK;
        assert!(matches!(s.read(8), Err(VolumeError::OutOfRange { .. })));
        let write = rt.block_on(s.volume.write(past, &new, false));
        assert!(
            matches!(write, Err(VolumeError::OutOfRange { .. })),
            "{write:?}"
        );
        // The device keeps its bytes past the end (the dirty block went there first).
        assert_eq!(
            store.snapshot()[(15 * BLOCK) as usize..][..BLOCK as usize],
            new[..]
        );

        s.volume.resize(BLOCKS * BLOCK, |_| Ok(())).unwrap();
        let zeros = vec![0u8; BLOCK as usize];
        for block in 8..BLOCKS {
            let (data, served) = s.read(block).unwrap();
            assert!(data == zeros, "block {block}: from {served:?}, not zeros");
            assert_eq!(served, Served::Backing, "block {block}");
        }
        assert_eq!(s.read(3).unwrap().0, contents(3, BLOCK));
        s.engine.shutdown();
        drop(s);
        let s = Setup::new(&store, &cache, spec());
        assert_eq!(s.on_l2(), (0..8).collect::<Vec<_>>(), "restored");
        for block in 8..BLOCKS {
            let (data, served) = s.read(block).unwrap();
            assert!(
                data == zeros,
                "block {block} after the restart: from {served:?}, not zeros"
            );
        }
        s.engine.shutdown();
    }

    /// Sizes that are not whole blocks, empty, larger than the device, beyond the index's
    /// keys, and read-only volumes are refused, and nothing changes.
    #[test]
    fn resizes_the_engine_cannot_make_are_refused() {
        let (store, cache) = stores();
        let s = Setup::new(&store, &cache, spec());
        let size = |bytes| s.volume.resize(bytes, |_| panic!("recorded"));
        assert!(matches!(
            size(BLOCK + 1),
            Err(ChangeError::NotWholeBlocks { .. })
        ));
        assert!(matches!(size(0), Err(ChangeError::Empty)));
        let err = size(4 * BLOCKS * BLOCK).unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("has {} bytes", 2 * BLOCKS * BLOCK)),
            "{err}"
        );
        let huge = (crate::l2::index::MAX_BLOCK + 2) * BLOCK;
        assert!(matches!(size(huge), Err(ChangeError::TooManyBlocks(_))));
        assert_eq!(s.volume.info().size_bytes, BLOCKS * BLOCK);
        s.engine.shutdown();
        let (store, cache) = stores();
        let odd = VolumeSpec {
            size_bytes: Some(BLOCKS * BLOCK - 100),
            ..spec()
        };
        let s = Setup::new(&store, &cache, odd);
        let err = s.volume.resize(BLOCKS * BLOCK, |_| Ok(())).unwrap_err();
        assert!(matches!(err, ChangeError::PartBlock { .. }), "{err}");
        s.engine.shutdown();
        let read_only = VolumeSpec {
            read_only: true,
            ..spec()
        };
        let s = Setup::new(&store, &cache, read_only);
        let err = s.volume.resize(8 * BLOCK, |_| Ok(())).unwrap_err();
        assert!(matches!(err, ChangeError::ReadOnly), "{err}");
        s.engine.shutdown();
    }

    /// A file is cut on a shrink and extended with zeros on a grow, also over a tail it
    /// kept past the volume's end (a crash between a shrink's record and its cut).
    #[test]
    fn a_file_is_cut_and_extended_with_zeros() {
        let path = std::env::temp_dir().join(format!("larch-resize-{}", std::process::id()));
        let bytes: Vec<u8> = (0..BLOCKS).flat_map(|b| contents(b, BLOCK)).collect();
        std::fs::write(&path, &bytes).unwrap();
        let engine = Engine::new(16 << 20);
        let backing = BackingStore::open(&path, false, LatencyModel::default()).unwrap();
        let spec = VolumeSpec {
            size_bytes: Some(12 * BLOCK),
            ..VolumeSpec::new(0x78, BLOCK as u32)
        };
        let entry = engine.add_volume(spec, Arc::new(backing)).unwrap();
        let volume = Volume::new("f".into(), entry, Arc::clone(&engine));
        volume.resize(8 * BLOCK, |_| Ok(())).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 8 * BLOCK);
        volume.resize(10 * BLOCK, |_| Ok(())).unwrap();
        let now = std::fs::read(&path).unwrap();
        assert_eq!(now.len() as u64, 10 * BLOCK);
        assert_eq!(now[..(8 * BLOCK) as usize], bytes[..(8 * BLOCK) as usize]);
        assert!(now[(8 * BLOCK) as usize..].iter().all(|&b| b == 0));
        engine.shutdown();
        std::fs::remove_file(&path).unwrap();
    }

    /// `logbias=throughput`: sync writes do not go to the log device and wait for their
    /// TXG; back to `latency`, they are logged again, and a FLUSH also waits for the TXG
    /// of a write the log never saw.
    #[test]
    fn logbias_throughput_keeps_sync_writes_out_of_the_log() {
        let (store, cache) = stores();
        let s = Setup::new(&store, &cache, spec());
        // Long TXGs: only a sync write or FLUSH syncs one here.
        s.engine.tunables.set("zfs_txg_timeout", "600").unwrap();
        let log = Arc::new(MemDevice::new(4 << 20));
        (s.engine)
            .attach_log_device(log as Arc<dyn BlockDevice>, Path::new("log"), 1, 3, true)
            .unwrap();
        s.engine.sync_all().unwrap();
        let logged = || s.engine.write_stats.zil_itx_count.load(Ordering::Relaxed);
        let block = |v: u8| [(0, BlockBuf::copy_from(&vec![v; BLOCK as usize]))];
        let entry = s.volume.entry();
        s.engine.write_blocks(entry, &block(1), true).unwrap();
        assert_eq!(logged(), 1, "latency: logged");
        let throughput = with(s.volume.props(), |p| p.logbias = LogBias::Throughput);
        s.volume.set_properties(throughput).unwrap();
        let (_, open, _) = s.engine.txg_state();
        s.engine.write_blocks(entry, &block(2), true).unwrap();
        assert_eq!(logged(), 1, "throughput: not logged");
        assert!(
            s.engine.txg_state().2 >= open,
            "the sync write waited for its TXG"
        );
        // An async write the log never sees, then back to latency and a FLUSH.
        let (_, open, _) = s.engine.txg_state();
        s.engine.write_blocks(entry, &block(3), false).unwrap();
        s.volume.set_properties(VolumeProps::default()).unwrap();
        assert!(s.engine.txg_state().2 < open, "synced already");
        s.engine.flush_writes(entry).unwrap();
        assert!(
            s.engine.txg_state().2 >= open,
            "the FLUSH waited for the unlogged write"
        );
        s.engine.write_blocks(entry, &block(4), true).unwrap();
        assert_eq!(logged(), 2, "latency again: logged");
        s.engine.shutdown();
    }
}

//! A segments object volume's block-map pages in the ARC, as metadata: what ZFS's
//! indirect blocks are to its data. `larch_object` asks for a page by number and checks
//! what it gets (a page carries the name of the page object it came from); this module
//! keeps the pages under keys of their own in the volume's slot, above every data block,
//! so that they compete with the volume's data under one `zfs_arc_max`, are balanced as
//! metadata (`arc_meta`), and are counted in arcstats' `demand_metadata_hits` and
//! `_misses`.
//!
//! A volume with `primarycache=none` keeps no page (each lookup that needs one reads it
//! from the store, as ZFS reads indirect blocks under that setting).
//!
//! Pages go to the cache devices as ZFS's indirect blocks go to the L2ARC: fed from the
//! ARC's cold ends like data, under `secondarycache=all` or `metadata`, and read back
//! (verified) when the ARC no longer holds one, before the store is asked. An L2 index
//! entry has no size of its own (its size follows from its key), so a page's copy on a
//! device is always [`larch_object::CACHED_PAGE_BYTES`], the page padded with zeros; to
//! bound what that padding costs, a page is fed only when it fills at least a quarter of
//! that (`volumes::info::MIN_FED_PAGE_BYTES`: the pages of a volume written here and
//! there are a few hundred bytes in the ARC and stay there). A copy names the page object
//! it holds, so one of a page since rewritten is never used: the volume finds the names
//! differ, reads the store, and the copy is dropped as the new page enters the ARC. No
//! tombstone is needed for it, before or after a restart.

use std::sync::{Arc, Weak};

use bytes::Bytes;
use larch_policy::{Access, BlockKey, BufType};

use super::{ArcCache, index_key};
use crate::l2::L2Arc;
use crate::l2::read::L2Read;
use crate::volumes::VolumeEntry;
use crate::volumes::info::{CacheMode, MAP_PAGE_KEYS};

/// The map pages of the volume in `slot`, in the ARC and on the cache devices.
pub(crate) struct MapPagesInArc {
    arc: Arc<ArcCache>,
    /// Weak: the cache devices' side holds the volume table, which holds this.
    l2: Weak<L2Arc>,
    slot: u16,
    /// Its properties in force (`primarycache`, `secondarycache`); weak, as the volume
    /// holds this.
    volume: Weak<VolumeEntry>,
}

impl MapPagesInArc {
    /// The pages of `volume`, kept in `l2`'s ARC and on its devices.
    pub(crate) fn new(l2: &Arc<L2Arc>, volume: &Arc<VolumeEntry>) -> MapPagesInArc {
        MapPagesInArc {
            arc: Arc::clone(&l2.arc),
            l2: Arc::downgrade(l2),
            slot: volume.info().slot,
            volume: Arc::downgrade(volume),
        }
    }

    fn access(&self, page: u64, size: usize) -> Option<Access> {
        let volume = self.volume.upgrade()?;
        let info = volume.info();
        let key = BlockKey::new(u64::from(self.slot), MAP_PAGE_KEYS + page);
        Some(Access {
            key,
            generation: 0,
            size_bytes: u32::try_from(size).ok()?,
            buf_type: BufType::Metadata,
            prefetch: false,
            l2cache: info.keeps_on_devices(key.block),
            uncached: info.primarycache == CacheMode::None,
            now_ms: self.arc.now_ms(),
        })
    }

    /// The copy of `key`'s page a cache device holds, read and verified, without its
    /// padding; it then enters the ARC (a miss there, as a read's install counts one).
    fn read_from_device(&self, access: Access) -> Option<Bytes> {
        let l2 = self.l2.upgrade()?;
        let volume = self.volume.upgrade()?;
        let info = volume.info();
        if !l2.tunables.l2arc_enabled() || !info.keeps_on_devices(access.key.block) {
            return None;
        }
        let ik = index_key(&access.key);
        let loc = self.arc.shard(&access.key).l2.get_for_read(ik)?;
        let psize = info.cached_len(access.key.block);
        let L2Read::Hit(mut bytes) = l2.read_l2_now(&access.key, ik, psize, loc) else {
            return None;
        };
        if let Some(object) = volume.backing.object() {
            object
                .stats
                .map_page_l2_reads
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        bytes.truncate(larch_object::cached_page_len(&bytes)?);
        let mut shard = self.arc.shard(&access.key);
        if shard.bufs.contains_key(&access.key) {
            // Another lookup put the page in the ARC meanwhile.
            return Some(bytes);
        }
        let access = Access {
            generation: l2.generations.fresh(),
            size_bytes: u32::try_from(bytes.len()).ok()?,
            ..access
        };
        shard.with_policy(|arc, actions| arc.access(&access, actions));
        if shard
            .arc
            .info(&access.key)
            .is_some_and(|i| i.state.is_resident())
        {
            shard.bufs.insert(access.key, bytes.clone());
        }
        Some(bytes)
    }
}

impl larch_object::MapCache for MapPagesInArc {
    fn get(&self, page: u64) -> Option<Bytes> {
        let access = self.access(page, larch_object::CACHED_PAGE_BYTES as usize)?;
        let mut shard = self.arc.shard(&access.key);
        let Some(buf) = shard.bufs.get(&access.key).cloned() else {
            drop(shard);
            return self.read_from_device(access);
        };
        let generation = shard.arc.info(&access.key)?.generation;
        let access = Access {
            generation,
            size_bytes: buf.len() as u32,
            ..access
        };
        shard.with_policy(|arc, actions| arc.access(&access, actions));
        Some(buf)
    }

    fn insert(&self, page: u64, bytes: Bytes) {
        let Some(mut access) = self.access(page, bytes.len()) else {
            return;
        };
        let key = access.key;
        let l2 = self.l2.upgrade();
        if let Some(l2) = &l2 {
            // Each version of a page is a block of its own to the feed (one chosen before
            // this is not indexed: its generation is gone).
            access.generation = l2.generations.fresh();
        }
        let mut shard = self.arc.shard(&key);
        if shard.bufs.remove(&key).is_some() {
            shard.with_policy(|arc, actions| arc.remove(&key, actions));
        }
        // A page read from the store: the cache devices' copy, if any, holds another
        // version (or failed), and the feed writes a page only while none is indexed.
        if let Some(l2) = &l2 {
            let psize = larch_object::CACHED_PAGE_BYTES as u32;
            shard.l2.remove(index_key(&key), psize, &l2.stats);
        }
        // A miss, as a read's install counts one: the page enters the MRU list.
        shard.with_policy(|arc, actions| arc.access(&access, actions));
        if shard.arc.info(&key).is_some_and(|i| i.state.is_resident()) {
            shard.bufs.insert(key, bytes);
        }
    }
}

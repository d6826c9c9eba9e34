//! A segments object volume's block-map pages in the ARC, as metadata: what ZFS's
//! indirect blocks are to its data. `larch_object` asks for a page by number and checks
//! what it gets (a page carries the name of the page object it came from); this module
//! keeps the pages under keys of their own in the volume's slot, above every data block,
//! so that they compete with the volume's data under one `zfs_arc_max`, are balanced as
//! metadata (`arc_meta`), and are counted in arcstats' `demand_metadata_hits` and
//! `_misses`.
//!
//! A volume with `primarycache=none` keeps no page (each lookup that needs one reads it
//! from the store, as ZFS reads indirect blocks under that setting). Pages are not fed to
//! the cache devices: an L2 index entry has no size of its own (a copy is a block of its
//! volume), and a page is larger than most blocks (docs/object-store.md, "Limits").

use std::sync::{Arc, Weak};

use bytes::Bytes;
use larch_policy::{Access, BlockKey, BufType};

use super::ArcCache;
use crate::volumes::VolumeEntry;
use crate::volumes::info::CacheMode;

/// The block number of map page 0 in its volume's key space: above every data block (a
/// volume has at most 2^41, a PiB of 512-byte blocks) and within the L2 index's keys.
pub const MAP_PAGE_KEYS: u64 = 1 << 43;

/// The map pages of the volume in `slot`, in the ARC.
pub(crate) struct MapPagesInArc {
    arc: Arc<ArcCache>,
    slot: u16,
    /// Its properties in force (`primarycache`); weak, as the volume holds this.
    volume: Weak<VolumeEntry>,
}

impl MapPagesInArc {
    /// The pages of `volume`, kept in `arc`.
    pub(crate) fn new(arc: &Arc<ArcCache>, volume: &Arc<VolumeEntry>) -> MapPagesInArc {
        MapPagesInArc {
            arc: Arc::clone(arc),
            slot: volume.info().slot,
            volume: Arc::downgrade(volume),
        }
    }

    fn access(&self, page: u64, size: usize) -> Option<Access> {
        let volume = self.volume.upgrade()?;
        let uncached = volume.info().primarycache == CacheMode::None;
        let key = BlockKey::new(u64::from(self.slot), MAP_PAGE_KEYS + page);
        Some(Access {
            key,
            generation: 0,
            size_bytes: u32::try_from(size).ok()?,
            buf_type: BufType::Metadata,
            prefetch: false,
            l2cache: false,
            uncached,
            now_ms: self.arc.now_ms(),
        })
    }
}

impl larch_object::MapCache for MapPagesInArc {
    fn get(&self, page: u64) -> Option<Bytes> {
        let access = self.access(page, larch_object::CACHED_PAGE_BYTES as usize)?;
        let mut shard = self.arc.shard(&access.key);
        let buf = shard.bufs.get(&access.key)?.clone();
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
        let Some(access) = self.access(page, bytes.len()) else {
            return;
        };
        let key = access.key;
        let mut shard = self.arc.shard(&key);
        if shard.bufs.remove(&key).is_some() {
            shard.with_policy(|arc, actions| arc.remove(&key, actions));
        }
        // A miss, as a read's install counts one: the page enters the MRU list.
        shard.with_policy(|arc, actions| arc.access(&access, actions));
        if shard.arc.info(&key).is_some_and(|i| i.state.is_resident()) {
            shard.bufs.insert(key, bytes);
        }
    }
}

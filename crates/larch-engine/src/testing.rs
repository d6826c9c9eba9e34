//! What the crate's unit tests share: an engine's volume on memory whose blocks all differ,
//! with a cache device on memory.

use std::path::Path;
use std::sync::Arc;

use larch_io::{BlockDevice, MemDevice};

use crate::backing::{BackingStore, LatencyModel};
use crate::engine::Engine;
use crate::l2::CacheDevice;
use crate::volumes::{VolumeEntry, VolumeSpec};

/// Block `b`'s bytes (`block` of them) on the backing store: no two blocks alike.
pub(crate) fn contents(b: u64, block: u64) -> Vec<u8> {
    (0..block).map(|i| (i ^ b ^ (b >> 8)) as u8).collect()
}

/// A volume of `blocks` blocks of `block` bytes ([`contents`]) and a 4 MiB cache device,
/// both on memory, added to `engine`, with a runtime to read through.
pub(crate) struct VolumeAndCache {
    pub(crate) vol: Arc<VolumeEntry>,
    pub(crate) device: Arc<CacheDevice>,
    pub(crate) cache: Arc<MemDevice>,
    pub(crate) runtime: tokio::runtime::Runtime,
}

impl VolumeAndCache {
    pub(crate) fn new(engine: &Engine, block: u64, blocks: u64) -> VolumeAndCache {
        let volume: Vec<u8> = (0..blocks).flat_map(|b| contents(b, block)).collect();
        let backing = BackingStore::on_device(
            "volume",
            Arc::new(MemDevice::from_bytes(volume)),
            LatencyModel::default(),
        );
        let vol = engine
            .add_volume(VolumeSpec::new(7, block as u32), Arc::new(backing))
            .expect("volume");
        let cache = Arc::new(MemDevice::new(4 << 20));
        let device = engine
            .add_cache_device_on(
                Arc::clone(&cache) as Arc<dyn BlockDevice>,
                Path::new("mem"),
                1,
                2,
                true,
            )
            .expect("cache device");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        VolumeAndCache {
            vol,
            device,
            cache,
            runtime,
        }
    }
}

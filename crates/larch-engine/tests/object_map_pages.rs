//! A segments object volume's block-map pages live in the ARC as metadata: lookups of
//! block pointers hit there (arcstats' `demand_metadata_hits`), pages the ARC evicted are
//! read from the store again, and `zfs_arc_max` bounds them with the data. The store is
//! object_store's in-process one, the volume written through the engine.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use larch_engine::{BackingStore, BlockBuf, Engine, LatencyModel, VolumeEntry, VolumeSpec};
use larch_object::layout::{Format, Root};
use larch_object::{ObjectVolume, Options};
use object_store::ObjectStore;
use object_store::memory::InMemory;

const BLOCK: u32 = 4096;
/// 64 block-map pages of 1,024 blocks.
const PAGES: u64 = 64;
const VOLUME: u64 = 0x0a20_0002;

fn pattern(block: u64) -> Vec<u8> {
    (0..BLOCK as usize)
        .map(|i| (block as usize * 13 + i * 5) as u8)
        .collect()
}

/// The blocks written: two in each page.
fn written() -> impl Iterator<Item = u64> {
    (0..PAGES).flat_map(|p| [p * 1024 + 1, p * 1024 + 900])
}

/// A segments volume with a block in each of its pages, written and committed by one
/// engine, then opened under another of `arc_bytes` (its ARC holding none of the data).
fn open(arc_bytes: u64) -> (Arc<Engine>, Arc<VolumeEntry>, Arc<ObjectVolume>) {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let mut root = Root::new(VOLUME, PAGES * 1024 * u64::from(BLOCK), BLOCK, 16);
    root.format = Format::Segments;
    larch_object::create(&store, "v/", "mem://v", &root).unwrap();
    let options = Options {
        map_log_commits: 0,
        ..Options::default()
    };
    let attach = |engine: &Arc<Engine>| {
        let object = ObjectVolume::open(
            Arc::clone(&store),
            "v",
            "mem://v",
            "node",
            Default::default(),
            options,
            Box::new(|_| Ok(())),
        )
        .unwrap();
        let backing =
            BackingStore::on_object("mem://v", Arc::clone(&object), LatencyModel::default());
        let entry = engine
            .add_volume(VolumeSpec::new(VOLUME, BLOCK), Arc::new(backing))
            .unwrap();
        (entry, object)
    };
    let writer = Engine::new(64 << 20);
    let (entry, object) = attach(&writer);
    let blocks: Vec<(u64, BlockBuf)> = written()
        .map(|b| (b, BlockBuf::from_vec(pattern(b))))
        .collect();
    writer.write_blocks(&entry, &blocks, false).unwrap();
    writer.sync_all().unwrap();
    object.release().unwrap();
    writer.shutdown();
    let engine = Engine::new(arc_bytes);
    let (entry, object) = attach(&engine);
    (engine, entry, object)
}

fn stat(engine: &Engine, name: &str) -> u64 {
    let stats = engine.arcstats();
    stats
        .iter()
        .find(|(k, _)| k == name)
        .map_or_else(|| panic!("no arcstat {name}"), |(_, v)| *v)
}

fn read_all(engine: &Engine, entry: &Arc<VolumeEntry>) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    for b in written() {
        let data = rt
            .block_on(engine.read_block(entry, b, false))
            .expect("the block reads");
        assert_eq!(&data[..], &pattern(b)[..], "block {b}");
        // Its neighbour is a hole: zeros, which the map says without a GET of data.
        let data = rt
            .block_on(engine.read_block(entry, b + 1, false))
            .expect("the hole reads");
        assert!(data.iter().all(|&x| x == 0), "block {}", b + 1);
    }
}

#[test]
fn map_pages_are_metadata_in_the_arc() {
    let (engine, entry, object) = open(64 << 20);
    let page_gets = || object.stats.map_page_gets.load(Ordering::Relaxed);
    assert_eq!(page_gets(), PAGES, "the open reads each page once");
    // The pages the open read moved into the ARC as metadata.
    let meta = stat(&engine, "mru_metadata") + stat(&engine, "mfu_metadata");
    // Two pointers a page: kept sparse.
    assert_eq!(meta, PAGES * larch_object::cached_page_bytes(2));
    read_all(&engine, &entry);
    assert_eq!(page_gets(), PAGES, "every lookup found its page in the ARC");
    assert!(stat(&engine, "demand_metadata_hits") >= 4 * PAGES);
    // The volume's own cache is gone: the map's memory is refs and counts only.
    assert!(object.map_bytes() < larch_object::CACHED_PAGE_BYTES);
    object.release().unwrap();
    engine.shutdown();
}

#[test]
fn an_arc_smaller_than_the_map_reads_pages_again_and_stays_bounded() {
    // Room for a few blocks and pages (16 of its 64 blocks' worth; the ARC's shards
    // each take a 1/16th of it).
    let arc_max = 64 << 10;
    let (engine, entry, object) = open(arc_max);
    let page_gets = || object.stats.map_page_gets.load(Ordering::Relaxed);
    let before = page_gets();
    for _ in 0..2 {
        read_all(&engine, &entry);
        let size = stat(&engine, "size");
        assert!(
            size <= arc_max,
            "ARC size {size} over its maximum {arc_max}"
        );
    }
    // The data read evicts pages (metadata goes first), which lookups read again.
    assert!(
        page_gets() > before,
        "no evicted page was read from the store again"
    );
    assert!(stat(&engine, "demand_metadata_misses") > 0);
    object.release().unwrap();
    engine.shutdown();
}

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

/// An empty segments volume of `PAGES` block-map pages on an in-process store, and the
/// options its tests open it with (every commit a checkpoint: no map logs).
fn new_volume() -> (Arc<dyn ObjectStore>, Options) {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let mut root = Root::new(VOLUME, PAGES * 1024 * u64::from(BLOCK), BLOCK, 16);
    root.format = Format::Segments;
    larch_object::create(&store, "v/", "mem://v", &root).unwrap();
    let options = Options {
        map_log_commits: 0,
        ..Options::default()
    };
    (store, options)
}

/// The volume `new_volume` made, opened by its writer.
fn open_writer(store: &Arc<dyn ObjectStore>, options: Options) -> Arc<ObjectVolume> {
    ObjectVolume::open(
        Arc::clone(store),
        "v",
        "mem://v",
        "node",
        Default::default(),
        options,
        Box::new(|_| Ok(())),
    )
    .unwrap()
}

/// `object` served by `engine`.
fn add(engine: &Arc<Engine>, object: &Arc<ObjectVolume>) -> Arc<VolumeEntry> {
    let backing = BackingStore::on_object("mem://v", Arc::clone(object), LatencyModel::default());
    engine
        .add_volume(VolumeSpec::new(VOLUME, BLOCK), Arc::new(backing))
        .unwrap()
}

/// A segments volume with a block in each of its pages, written and committed by one
/// engine, then opened under another of `arc_bytes` (its ARC holding none of the data).
fn open(arc_bytes: u64) -> (Arc<Engine>, Arc<VolumeEntry>, Arc<ObjectVolume>) {
    let (store, options) = new_volume();
    let attach = |engine: &Arc<Engine>| {
        let object = open_writer(&store, options);
        (add(engine, &object), object)
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

/// Map pages go to the cache devices as ZFS's indirect blocks go to the L2ARC: fed from
/// the ARC (those that fill at least a quarter of their padded copy), restored by the
/// rebuild after a restart, and read back from there by a node whose ARC holds none of
/// them, before the store is asked; a page too sparse to feed is read from the store.
#[test]
fn map_pages_are_fed_to_the_cache_device_and_read_back_after_a_restart() {
    const DENSE_PAGES: u64 = 6;
    const WRITTEN_PER_PAGE: u64 = 300; // 300 pointers: over a quarter of a page's copy
    let dir = std::env::temp_dir().join(format!("larch-map-l2-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let device = dir.join("cache.img");
    std::fs::write(&device, vec![0u8; 64 << 20]).unwrap();
    let (pool, device_guid) = (0x7e57_0038, 0x7e57_0039);

    // The volume: six pages with 300 blocks each, one (the last) with two.
    let (store, options) = new_volume();
    let written: Vec<u64> = (0..DENSE_PAGES)
        .flat_map(|p| (0..WRITTEN_PER_PAGE).map(move |i| p * 1024 + 3 * i))
        .chain([(PAGES - 1) * 1024 + 5, (PAGES - 1) * 1024 + 6])
        .collect();
    let open_writer = || open_writer(&store, options);
    // A follower on a new engine (its ARC empty), the cache device reopened and rebuilt.
    let start_follower = || {
        let engine = Engine::new(64 << 20);
        let object = ObjectVolume::open_follower(
            Arc::clone(&store),
            "v",
            "mem://v",
            "node-f",
            Default::default(),
            Options {
                poll: std::time::Duration::from_secs(3600),
                ..options
            },
            Box::new(|_| Ok(())),
        )
        .unwrap();
        let entry = add(&engine, &object);
        engine
            .add_cache_device(&device, pool, device_guid, false)
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while (engine.devices().iter()).any(|d| d.state() == larch_engine::DeviceState::Rebuilding)
        {
            assert!(std::time::Instant::now() < deadline, "rebuild did not end");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        (engine, entry, object)
    };
    {
        let engine = Engine::new(64 << 20);
        let object = open_writer();
        let entry = add(&engine, &object);
        let blocks: Vec<(u64, BlockBuf)> = (written.iter())
            .map(|&b| (b, BlockBuf::from_vec(pattern(b))))
            .collect();
        engine.write_blocks(&entry, &blocks, false).unwrap();
        engine.sync_all().unwrap();
        object.release().unwrap();
        engine.shutdown();
    }

    // A writer's open reads every page (it counts its segments); they enter the ARC as
    // the engine attaches the volume, and a feed writes the dense ones to the device.
    {
        let engine = Engine::new(64 << 20);
        let object = open_writer();
        let _entry = add(&engine, &object);
        let cache = engine
            .add_cache_device(&device, pool, device_guid, true)
            .unwrap();
        // (The device's feeder thread may have fed them first.)
        engine.feed_once(&cache, 8 << 20);
        assert_eq!(
            stat(&engine, "l2_blocks"),
            DENSE_PAGES,
            "the dense pages are fed, the sparse one is not"
        );
        assert_eq!(
            stat(&engine, "l2_size"),
            DENSE_PAGES * larch_object::CACHED_PAGE_BYTES,
            "each copy is a padded page"
        );
        object.release().unwrap();
        engine.shutdown();
    }

    // A follower on another engine (ARC empty, the device rebuilt) reads every block: the
    // pages come from the device, but the sparse one, which comes from the store.
    let (engine, entry, object) = start_follower();
    assert_eq!(stat(&engine, "l2_blocks"), DENSE_PAGES, "restored");
    let page_gets = object.stats.map_page_gets.load(Ordering::Relaxed);
    let rt = tokio::runtime::Runtime::new().unwrap();
    for &b in &written {
        let data = rt
            .block_on(engine.read_block(&entry, b, false))
            .expect("the block reads");
        assert_eq!(&data[..], &pattern(b)[..], "block {b}");
    }
    assert_eq!(
        stat(&engine, "l2_hits"),
        DENSE_PAGES,
        "each dense page read once from the device, then from the ARC"
    );
    assert_eq!(
        object.stats.map_page_gets.load(Ordering::Relaxed) - page_gets,
        1,
        "only the sparse page came from the store"
    );
    assert_eq!(
        object.stats.map_page_l2_reads.load(Ordering::Relaxed),
        DENSE_PAGES,
        "the volume counts the pages its lookups read from the device"
    );
    object.release().unwrap();
    engine.shutdown();

    // The writer rewrites a block of page 0 (a new version of the page, on another engine
    // with no cache device). A follower restarted on the device meets page 0's old copy
    // there: it names another page object, so the new page is read from the store, and
    // the block reads new; the other pages still come from the device.
    let changed = written[0];
    let new_bytes: Vec<u8> = pattern(changed).iter().map(|b| !b).collect();
    {
        let engine = Engine::new(64 << 20);
        let object = open_writer();
        let entry = add(&engine, &object);
        let blocks = [(changed, BlockBuf::from_vec(new_bytes.clone()))];
        engine.write_blocks(&entry, &blocks, false).unwrap();
        engine.sync_all().unwrap();
        object.release().unwrap();
        engine.shutdown();
    }
    let (engine, entry, object) = start_follower();
    let page_gets = object.stats.map_page_gets.load(Ordering::Relaxed);
    for &b in &written {
        let data = rt
            .block_on(engine.read_block(&entry, b, false))
            .expect("the block reads");
        let want = if b == changed {
            new_bytes.clone()
        } else {
            pattern(b)
        };
        assert_eq!(&data[..], &want[..], "block {b} after the rewrite");
    }
    assert_eq!(
        object.stats.map_page_gets.load(Ordering::Relaxed) - page_gets,
        2,
        "page 0 (its copy is of the old page) and the sparse page came from the store"
    );
    assert_eq!(
        stat(&engine, "l2_hits"),
        DENSE_PAGES,
        "every dense page's copy was read (page 0's found stale)"
    );
    object.release().unwrap();
    engine.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

//! `object_read_around`: a demand miss on an object volume fetches, in the same GET, the
//! blocks of its aligned window whose records sit next to its in the segment, and enters
//! them in the ARC as prefetches; it fetches nothing around blocks whose neighbours live
//! elsewhere, and nothing with the tunable at 0. The store is object_store's in-process
//! one, the volume a segments one written through the engine.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use larch_engine::{BackingStore, BlockBuf, Engine, LatencyModel, VolumeEntry, VolumeSpec};
use larch_object::layout::{Format, Root};
use larch_object::{ObjectVolume, Options};
use object_store::ObjectStore;
use object_store::memory::InMemory;

const BLOCK: u32 = 4096;
const BLOCKS: u64 = 256;
const VOLUME: u64 = 0x0a20_0001;

struct Setup {
    engine: Arc<Engine>,
    entry: Arc<VolumeEntry>,
    object: Arc<ObjectVolume>,
}

/// A segments volume of 64-block segments, opened under an engine with a 1 MiB ARC.
fn setup() -> Setup {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let mut root = Root::new(VOLUME, BLOCKS * u64::from(BLOCK), BLOCK, 64);
    root.format = Format::Segments;
    larch_object::create(&store, "v/", "mem://v", &root).unwrap();
    let object = ObjectVolume::open(
        store,
        "v",
        "mem://v",
        "node",
        Default::default(),
        Options::default(),
        Box::new(|_| Ok(())),
    )
    .unwrap();
    let engine = Engine::new(1 << 20);
    let backing = BackingStore::on_object("mem://v", Arc::clone(&object), LatencyModel::default());
    let entry = engine
        .add_volume(VolumeSpec::new(VOLUME, BLOCK), Arc::new(backing))
        .unwrap();
    Setup {
        engine,
        entry,
        object,
    }
}

fn pattern(block: u64) -> Vec<u8> {
    (0..BLOCK as usize)
        .map(|i| (block as usize * 31 + i * 7) as u8)
        .collect()
}

impl Setup {
    /// Writes `blocks`, one TXG each when `one_by_one` (so that no two are neighbours
    /// in a segment), else all in one; commits them and empties the ARC.
    fn write(&self, blocks: impl Iterator<Item = u64>, one_by_one: bool) {
        let mut batch = Vec::new();
        for b in blocks {
            batch.push((b, BlockBuf::from_vec(pattern(b))));
            if one_by_one {
                self.engine
                    .write_blocks(&self.entry, &batch, false)
                    .unwrap();
                self.engine.sync_all().unwrap();
                batch.clear();
            }
        }
        if !batch.is_empty() {
            self.engine
                .write_blocks(&self.entry, &batch, false)
                .unwrap();
            self.engine.sync_all().unwrap();
        }
        self.forget_all();
    }

    /// Drops every cached copy of the volume's blocks.
    fn forget_all(&self) {
        let all: Vec<u64> = (0..BLOCKS).collect();
        self.engine
            .forget_changed_blocks(&self.entry, &all)
            .unwrap();
    }

    fn gets(&self) -> u64 {
        self.object.stats.gets.load(Ordering::Relaxed)
    }

    /// Reads `block` as a client does (a demand read), checks its bytes, and returns the
    /// GETs it took.
    fn read(&self, block: u64) -> u64 {
        let before = self.gets();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let data = rt
            .block_on(self.engine.read_block(&self.entry, block, false))
            .expect("the block reads");
        assert_eq!(&data[..], &pattern(block)[..], "block {block}");
        self.gets() - before
    }

    /// Blocks the ARC holds (its MRU and MFU lists' bytes of data: the volume's map pages
    /// are there too, as metadata).
    fn cached(&self) -> u64 {
        let stats = self.engine.arcstats();
        let value = |name: &str| stats.iter().find(|(k, _)| k == name).map_or(0, |(_, v)| *v);
        (value("mru_data") + value("mfu_data")) / u64::from(BLOCK)
    }
}

#[test]
fn a_miss_brings_its_segment_neighbours_in_the_same_get() {
    let s = setup();
    s.write(0..BLOCKS, false);
    // 64 KiB around a 4 KiB block: the 16 blocks of its aligned window, one GET.
    s.engine.tunables.set("object_read_around", "64K").unwrap();
    assert_eq!(s.read(37), 1);
    assert_eq!(s.cached(), 16, "the window 32..48 entered the ARC");
    for b in 32..48 {
        assert_eq!(s.read(b), 0, "block {b} was fetched with 37");
    }
    assert_eq!(s.read(48), 1, "block 48 is past the window");
    // Off: one block per miss.
    s.forget_all();
    s.engine.tunables.set("object_read_around", "0").unwrap();
    assert_eq!(s.read(100), 1);
    assert_eq!(s.cached(), 1);
}

#[test]
fn blocks_whose_records_live_elsewhere_are_not_fetched_around() {
    let s = setup();
    // Each block its own commit: no two are neighbours in a segment.
    s.write(0..32, true);
    s.engine.tunables.set("object_read_around", "64K").unwrap();
    assert_eq!(s.read(5), 1);
    assert_eq!(
        s.cached(),
        1,
        "a neighbour would have cost a GET of its own"
    );
    // Blocks 16..20 written again together: neighbours in one segment, the window cut
    // where they stop (20..32 live in segments of their own).
    s.write(16..20, false);
    assert_eq!(s.read(17), 1);
    assert_eq!(s.cached(), 4, "16..20 entered the ARC, nothing else");
    for b in 16..20 {
        assert_eq!(s.read(b), 0, "block {b} shares 17's segment");
    }
}

/// The blocks read around a miss are fed to a cache device with the demand block, though
/// they entered the ARC as prefetches and `l2arc_noprefetch` is on (`object_l2_prefetch`,
/// on by default); with it off, only the demand block is.
#[test]
fn blocks_read_around_are_fed_to_the_cache_device() {
    for (object_l2_prefetch, fed) in [("1", 16), ("0", 1)] {
        let s = setup();
        s.write(0..BLOCKS, false);
        let device = Arc::new(larch_io::MemDevice::new(16 << 20));
        let cache = s
            .engine
            .add_cache_device_on(
                device,
                std::path::Path::new("mem-cache"),
                0x9001,
                0x9002,
                true,
            )
            .unwrap();
        let t = &s.engine.tunables;
        t.set("object_read_around", "64K").unwrap();
        t.set("object_l2_prefetch", object_l2_prefetch).unwrap();
        assert!(t.l2arc_noprefetch());
        assert_eq!(s.read(37), 1);
        assert_eq!(s.cached(), 16);
        s.engine.feed_once(&cache, 8 << 20);
        let stats = s.engine.arcstats();
        let l2_blocks = stats
            .iter()
            .find(|(k, _)| k == "l2_blocks")
            .map_or(0, |(_, v)| *v);
        assert_eq!(l2_blocks, fed, "object_l2_prefetch={object_l2_prefetch}");
    }
}

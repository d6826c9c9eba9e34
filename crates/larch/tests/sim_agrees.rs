//! The daemon's cache and the simulator decide alike (issues 16 and 37). One sequence of
//! block reads drives `larch_engine::Engine` (in memory, through `Engine::read_block`) and
//! `larch_sim::sim::cache::SimCache` (in virtual time); at every checkpoint the ARC's sizes
//! and counters must be equal, and each L2 feed, given the same budget, must write the
//! same bytes and the same blocks in the same order. Both run the same `larch_policy` code
//! (`Arc` in the same `shards`, `feed::select` over a split budget), so a difference can
//! only come from the code around the policy: what each side tells it, when, and what each
//! does with its answers. Every comparison is exact.
//!
//! Two volumes are compared:
//! - **Data only** (issue 16): a volume in memory, every block data, the simulator with no
//!   metadata model; once under the ARC, once under the larch policy (issue 40,
//!   `zfs_arc_policy=larch`, set in the engine before the first read and given to the
//!   simulator's tunables).
//! - **With metadata** (issue 37): an object volume of the segments layout on
//!   object_store's in-process store, every block written (so every block-map page is
//!   dense, of a known size), read by a follower (which reads no page as it opens: a
//!   writer reads them all, in the order the store answers). Its misses look up their
//!   block-map pages, which the engine keeps in its ARC as metadata; the simulator runs
//!   the same reads with its map-page model (`--metadata map-pages`,
//!   `larch_sim::sim::metadata::MapPages`). A checkpoint compares the policy's arcstats,
//!   data and metadata apart (`demand_metadata_hits` and `_misses`, `metadata_size`, each
//!   list's metadata bytes, `stale_drops`, the balance `meta`), the cache device's
//!   (`l2_hits`, which count pages read there, `l2_bufc_metadata_asize`, ...), the pages
//!   the volume read from the store and from the cache device against those the
//!   simulator read from its primary storage and cache device, and the blocks and pages
//!   on the cache device in ring order (a page's block number in the engine's log is its
//!   key's, the simulator's page id). Once with `secondarycache=all`, once with
//!   `metadata` (only pages fed). The simulator's page size and blocks per page are
//!   checked against `larch_object`'s.
//!
//! What makes exact comparison possible:
//! - **Time.** The policy reads the time it is given only to tell a quick re-read from a
//!   second use (`ARC_MINTIME`, 62 ms, before MRU → MFU) and to age prefetched blocks
//!   (there are none here). The engine stamps operations with real milliseconds, the
//!   simulator with virtual ones, so the sequence is cut into phases that read each block
//!   at most once, with a pause longer than `ARC_MINTIME` after each phase on both sides:
//!   any two reads of one block are then more than 62 ms apart on both.
//! - **Feeds.** The engine's feeder thread feeds on its own clock. `l2arc_feed_secs` is set
//!   to its maximum (an hour) before the device is added, so the thread's first sleep
//!   outlasts the test and only the test's `Engine::feed_once` calls feed (the engine's
//!   count of feeds is checked at the end).
//! - **Time, with pages.** A page is looked up by every read of the store under it, so
//!   the object volume's phases read at most one block under each page: a page looked up
//!   twice in one phase could be a quick re-read on one side and not on the other.
//! - **Prefetch.** Reads go through `Engine::read_block`, below the volume's prefetcher,
//!   and `SimCache::read` with `prefetch: false`, so neither side reads ahead (checked).
//!   The engine reads no blocks around an object volume's miss (`object_read_around` is
//!   0): the simulator does not model it.
//! - **Memory pressure.** The engine's size controller shrinks the ARC when the machine
//!   runs short of memory; the simulator has no such thing. `zfs_arc_sys_free` is set to
//!   one byte so that it never acts during the test (checked).
//! - **The rings.** The engine's ring holds log blocks between records and the simulator's
//!   does not, so their evict hands would not move at the same feeds; the cache device is
//!   large enough that neither ring's evict hand moves.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use larch_engine::volumes::{CacheMode, PropertyValue};
use larch_engine::{BackingStore, CacheDevice, Engine, LatencyModel, VolumeEntry, VolumeSpec};
use larch_io::{BlockDevice, MemDevice};
use larch_l2::{ArcState, RebuildOptions};
use larch_object::layout::{Format, PAGE_BLOCKS, Root};
use larch_object::{ObjectVolume, Options};
use larch_policy::ArcPolicy;
use larch_sim::SplitMix64;
use larch_sim::device::parse_spec;
use larch_sim::sim::cache::SimCache;
use larch_sim::sim::metadata::{MAP_PAGE_BLOCKS, MAP_PAGE_BYTES, MAP_PAGE_IDS};
use larch_sim::sim::{self, MetadataModel, SimTunables};
use object_store::ObjectStore;
use object_store::memory::InMemory;

const BLOCK_BYTES: u32 = 8 << 10;
/// `zfs_arc_max`: 5,120 blocks, 320 per shard. Its automatic `zfs_arc_min` is 32 MiB, so
/// the target `c` starts below the maximum and grows as the ARC fills (the growth rule is
/// compared too).
const ARC_MAX_BYTES: u64 = 40 << 20;
/// 160 MiB: four times the ARC.
const VOLUME_BLOCKS: u64 = 20 << 10;
/// Blocks read twice in the first round, far apart: MFU. About six per shard, fewer than
/// a shard's share of a feed (eight blocks), so the first feed takes MFU and MRU blocks.
const HOT_BLOCKS: usize = 96;
/// Blocks read once in the first round: three times what the ARC holds.
const COLD_BLOCKS: usize = 15 << 10;
/// What each feed may write, on both sides.
const FEED_BUDGET_BYTES: u64 = 1 << 20;
/// Large enough that feeds never move either ring's evict hand.
const CACHE_DEVICE_BYTES: u64 = 64 << 20;
/// The pause after each phase: more than the policy's 62 ms `ARC_MINTIME`.
const PAUSE: Duration = Duration::from_millis(100);
const SEED: u64 = 16;
const POOL: u64 = 0x516d_0001;
const DEVICE: u64 = 0x516d_0002;
const VOLUME: u64 = 0x516d_0003;

/// Tunables that decide a feed, set alike on both sides (their defaults agree; setting
/// them here keeps the two sides from drifting apart if a default changes). A headroom of
/// 2 (OpenZFS's) makes the scan limit bind: 32 blocks per list and shard.
const SHARED_TUNABLES: &[(&str, u64)] = &[
    ("l2arc_headroom", 2),
    ("l2arc_headroom_boost", 200),
    ("l2arc_noprefetch", 1),
    ("l2arc_nowrite", 1),
    ("l2arc_mfuonly", 0),
];

/// Tunables of the engine's threads, which the simulator does not have (see the module
/// documentation).
const ENGINE_TUNABLES: &[(&str, u64)] = &[("l2arc_feed_secs", 3600), ("zfs_arc_sys_free", 1)];

/// What a checkpoint compares: the ARC's sizes and counters, and the L2 index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Observed {
    size: u64,
    c: u64,
    mru: u64,
    mfu: u64,
    mru_ghost: u64,
    mfu_ghost: u64,
    /// Headers the policy tracks (resident and ghost).
    headers: u64,
    hits: u64,
    misses: u64,
    l2_hits: u64,
    l2_misses: u64,
    l2_blocks: u64,
    l2_bytes: u64,
}

/// The engine, over memory: a volume, one cache device.
struct EngineSide {
    engine: Arc<Engine>,
    vol: Arc<VolumeEntry>,
    cache: Arc<CacheDevice>,
    /// The cache device's bytes, for reading its log back.
    cache_dev: Arc<MemDevice>,
    runtime: tokio::runtime::Runtime,
}

impl EngineSide {
    /// An ARC of `ARC_MAX_BYTES` over a volume in memory.
    fn new() -> EngineSide {
        let backing = Arc::new(MemDevice::new(VOLUME_BLOCKS * u64::from(BLOCK_BYTES)));
        let store = BackingStore::on_device("volume", backing, LatencyModel::default());
        EngineSide::with_volume(ARC_MAX_BYTES, VolumeSpec::new(VOLUME, BLOCK_BYTES), store)
    }

    /// An ARC of `arc_max_bytes` over the volume `spec` on `store`.
    fn with_volume(arc_max_bytes: u64, spec: VolumeSpec, store: BackingStore) -> EngineSide {
        let engine = Engine::new(arc_max_bytes);
        for &(name, value) in SHARED_TUNABLES.iter().chain(ENGINE_TUNABLES) {
            engine
                .tunables
                .set(name, &value.to_string())
                .unwrap_or_else(|e| panic!("engine tunable {name}: {e}"));
        }
        let vol = engine.add_volume(spec, Arc::new(store)).expect("volume");
        let cache_dev = Arc::new(MemDevice::new(CACHE_DEVICE_BYTES));
        let cache = engine
            .add_cache_device_on(
                Arc::clone(&cache_dev) as Arc<dyn BlockDevice>,
                Path::new("cache"),
                POOL,
                DEVICE,
                true,
            )
            .expect("cache device");
        EngineSide {
            engine,
            vol,
            cache,
            cache_dev,
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime"),
        }
    }

    fn read(&self, block: u64) {
        self.runtime
            .block_on(self.engine.read_block(&self.vol, block, false))
            .unwrap_or_else(|| panic!("engine: block {block} could not be read"));
    }

    fn pause(&self) {
        std::thread::sleep(PAUSE);
    }

    /// One feed; the bytes of data it wrote.
    fn feed(&self) -> u64 {
        self.engine.feed_once(&self.cache, FEED_BUDGET_BYTES)
    }

    fn stats(&self) -> HashMap<String, u64> {
        self.engine.arcstats().into_iter().collect()
    }

    fn observe(&self) -> Observed {
        let s = self.stats();
        let stat = |name: &str| *s.get(name).unwrap_or_else(|| panic!("no arcstat {name}"));
        Observed {
            size: stat("size"),
            c: stat("c"),
            mru: stat("mru_size"),
            mfu: stat("mfu_size"),
            mru_ghost: stat("mru_ghost_size"),
            mfu_ghost: stat("mfu_ghost_size"),
            headers: stat("hash_elements"),
            hits: stat("hits"),
            misses: stat("misses"),
            l2_hits: stat("l2_hits"),
            l2_misses: stat("l2_misses"),
            l2_blocks: stat("l2_blocks"),
            l2_bytes: stat("l2_size"),
        }
    }

    /// The blocks on the cache device in ring order, with the ARC state each was fed from,
    /// as its log says (read back as a rebuild would read it: what the device holds, not
    /// what the engine's index believes).
    fn copies(&self) -> Vec<(u64, ArcState)> {
        let dev: &dyn BlockDevice = &*self.cache_dev;
        let header = larch_l2::read_header(dev)
            .expect("cache device header")
            .header;
        larch_l2::validate_header(&header, dev.len_bytes(), Some((POOL, DEVICE)))
            .expect("a valid header");
        let outcome = larch_l2::rebuild(dev, &header, &mut RebuildOptions::default());
        assert!(
            outcome.stop.is_clean(),
            "the log walk stopped early: {:?}",
            outcome.stop
        );
        let mut entries: Vec<_> = outcome
            .entries
            .iter()
            .map(|e| (e.ring_pos, e.entry.block_number, e.entry.arc_state))
            .collect();
        entries.sort_unstable_by_key(|&(pos, _, _)| pos);
        entries.into_iter().map(|(_, b, s)| (b, s)).collect()
    }
}

/// The simulator, in virtual time.
struct SimSide {
    cache: SimCache,
    now_ns: u64,
}

impl SimSide {
    /// The cache of `SimSide::with`'s defaults over a volume of data, under `policy`.
    fn new(policy: ArcPolicy) -> SimSide {
        let tunables = SimTunables {
            arc_policy: policy,
            ..SimTunables::default()
        };
        SimSide::with(ARC_MAX_BYTES, BLOCK_BYTES, tunables)
    }

    /// An ARC of `arc_max_bytes` over a volume of `block_bytes` blocks, with `tunables` and
    /// the shared ones.
    fn with(arc_max_bytes: u64, block_bytes: u32, mut tunables: SimTunables) -> SimSide {
        for &(name, value) in SHARED_TUNABLES {
            tunables
                .set(name, value)
                .unwrap_or_else(|e| panic!("simulator tunable {name}: {e}"));
        }
        let model = |seed| parse_spec("ram", seed).expect("the ram model");
        let cache = SimCache::new(
            arc_max_bytes,
            block_bytes,
            model(1),
            vec![("cache0".into(), model(2), CACHE_DEVICE_BYTES)],
            tunables,
        );
        SimSide { cache, now_ns: 0 }
    }

    fn read(&mut self, block: u64) {
        self.cache.read(self.now_ns, block, 1, false);
        // A block whose metadata missed is read once that is there (the simulator's event
        // loop runs these chains at their times; nothing else happens meanwhile here).
        for (at, chain) in self.cache.take_ready() {
            self.cache.run_chain(at, chain);
        }
        self.cache.take_awaited();
        // Time moves within a phase as it does for the engine (how fast does not matter:
        // no block is read twice in a phase, so the policy never compares these times),
        // and the device models see one request after another, not all at one instant.
        self.now_ns += 1_000;
    }

    fn pause(&mut self) {
        self.now_ns += PAUSE.as_nanos() as u64;
        self.cache.expire_inflight(self.now_ns);
    }

    /// One feed; the bytes of data it wrote. The batch is indexed at once, as the engine's
    /// `feed_once` indexes its batch before it returns.
    fn feed(&mut self) -> u64 {
        let before = self.cache.devices[0].write_bytes;
        if let Some((id, _done)) = self
            .cache
            .feed_with_budget(self.now_ns, 0, FEED_BUDGET_BYTES)
        {
            self.cache.feed_done(id);
        }
        self.cache.devices[0].write_bytes - before
    }

    fn observe(&self) -> Observed {
        let a = self.cache.arc_sizes();
        let n = &self.cache.counters;
        Observed {
            size: a.size,
            c: a.c,
            mru: a.mru,
            mfu: a.mfu,
            mru_ghost: a.mru_ghost,
            mfu_ghost: a.mfu_ghost,
            headers: a.headers,
            hits: n.arc_hits,
            misses: n.arc_misses,
            l2_hits: n.l2_hits,
            l2_misses: n.l2_misses,
            l2_blocks: self.cache.l2_blocks(),
            l2_bytes: self.cache.devices[0].bytes,
        }
    }

    /// The blocks on the cache device in ring order: data blocks of a volume of
    /// `volume_blocks`, and its map pages when the model has them (under the ids the
    /// engine's keys have).
    fn copies(&self, volume_blocks: u64) -> Vec<u64> {
        let pages = match self.cache.metadata() {
            Some(sim::metadata::VolumeMetadata::MapPages(p)) => p.pages(volume_blocks),
            _ => 0,
        };
        let blocks = (0..volume_blocks).chain(MAP_PAGE_IDS..MAP_PAGE_IDS + pages);
        let mut copies: Vec<(u64, u64)> = blocks
            .filter_map(|b| self.cache.cache_device_copy(b).map(|(_, pos)| (pos, b)))
            .collect();
        copies.sort_unstable();
        copies.into_iter().map(|(_, b)| b).collect()
    }
}

/// One round of the sequence: phases of reads, each followed by a pause, then a
/// checkpoint, a feed, and another checkpoint.
struct Round {
    name: &'static str,
    phases: Vec<Vec<u64>>,
}

fn shuffled(mut blocks: Vec<u64>, rng: &mut SplitMix64) -> Vec<u64> {
    for i in (1..blocks.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        blocks.swap(i, j);
    }
    blocks
}

/// The sequence: scattered reads (no run of consecutive blocks, and no prefetch anyway),
/// each block at most once per phase.
fn rounds() -> Vec<Round> {
    let mut rng = SplitMix64::new(SEED);
    let blocks = shuffled((0..VOLUME_BLOCKS).collect(), &mut rng);
    let (hot, rest) = blocks.split_at(HOT_BLOCKS);
    let (cold, fresh) = rest.split_at(COLD_BLOCKS);
    // The newest cold blocks are still in the ARC after the first round: re-read, they
    // are MRU hits that move to MFU.
    let recent = &cold[COLD_BLOCKS - 1024..];
    vec![
        Round {
            // MFU from the hot blocks, then three ARCs' worth read once: the ARC grows to
            // its maximum, evicts, and keeps ghosts.
            name: "fill",
            phases: vec![hot.to_vec(), hot.to_vec(), cold.to_vec()],
        },
        Round {
            // New blocks push what the first feed wrote out of the ARC; recent ones move
            // to MFU.
            name: "turn over",
            phases: vec![shuffled([&fresh[..2560], recent].concat(), &mut rng)],
        },
        Round {
            // Everything read before, again: ARC hits, ghost hits, cache-device hits
            // (the copies of blocks evicted since they were fed) and forgotten blocks.
            name: "re-read",
            phases: vec![shuffled([hot, cold].concat(), &mut rng)],
        },
        Round {
            // The cold blocks once more: most are MFU or MFU-bound by now, so the MFU list
            // outgrows its target and evicts to its ghost list.
            name: "again",
            phases: vec![shuffled(cold.to_vec(), &mut rng)],
        },
    ]
}

fn assert_agree(engine: &EngineSide, sim: &SimSide, when: &str) -> Observed {
    let e = engine.observe();
    let s = sim.observe();
    assert_eq!(
        e, s,
        "{when}: the engine (left) and the simulator (right) differ"
    );
    let copies: Vec<u64> = engine.copies().into_iter().map(|(b, _)| b).collect();
    assert_eq!(
        copies.len() as u64,
        e.l2_blocks,
        "{when}: the engine's log and its index differ"
    );
    assert_eq!(
        copies,
        sim.copies(VOLUME_BLOCKS),
        "{when}: the blocks on the cache device, in ring order, differ (engine left)"
    );
    e
}

#[test]
fn the_engine_and_the_simulator_decide_alike_on_one_sequence() {
    decide_alike_on_one_sequence(ArcPolicy::Arc);
}

/// The same with the larch policy (`zfs_arc_policy=larch`, docs/arc.md).
#[test]
fn under_the_larch_policy_the_engine_and_the_simulator_decide_alike() {
    decide_alike_on_one_sequence(ArcPolicy::Larch);
}

fn decide_alike_on_one_sequence(policy: ArcPolicy) {
    let engine = EngineSide::new();
    engine
        .engine
        .tunables
        .set("zfs_arc_policy", policy.name())
        .expect("zfs_arc_policy");
    // The size controller's pass applies it; the ARC is empty, so it starts afresh.
    engine.engine.adjust_arc_size();
    let mut sim = SimSide::new(policy);
    let mut fed_states = Vec::new();
    let mut l2_hits_before = 0;
    for round in rounds() {
        for phase in &round.phases {
            for &block in phase {
                engine.read(block);
                sim.read(block);
            }
            engine.pause();
            sim.pause();
        }
        let before = assert_agree(&engine, &sim, &format!("after the reads of {}", round.name));
        let fed_before = engine.copies().len();

        let written = engine.feed();
        assert_eq!(
            written,
            sim.feed(),
            "{}: bytes fed by the engine (left) and the simulator (right)",
            round.name
        );
        let after = assert_agree(&engine, &sim, &format!("after the feed of {}", round.name));
        // The policy is not told of copies: a feed changes nothing in the ARC.
        assert_eq!(
            (after.size, after.mru, after.mfu),
            (before.size, before.mru, before.mfu),
            "{}",
            round.name
        );
        let copies = engine.copies();
        let fed = &copies[fed_before..];
        assert!(!fed.is_empty(), "{}: the feed wrote nothing", round.name);
        assert_eq!(
            fed.len() as u64 * u64::from(BLOCK_BYTES),
            written,
            "{}: bytes written and blocks fed",
            round.name
        );
        fed_states.extend(fed.iter().map(|&(_, state)| state));
        engine.pause();
        sim.pause();

        // Outcomes each round must have had, or the comparison proved little.
        match round.name {
            "fill" => {
                assert_eq!(after.c, ARC_MAX_BYTES, "the target grew to zfs_arc_max");
                assert!(after.mfu > 0 && after.mru_ghost > 0, "{after:?}");
            }
            "re-read" => assert!(after.l2_hits > l2_hits_before, "{after:?}"),
            "again" => assert!(after.mfu_ghost > 0, "{after:?}"),
            _ => {}
        }
        l2_hits_before = after.l2_hits;
    }
    // Under the larch policy MFU filled while the ARC had room and MRU keeps 1/32: the
    // feeds find MFU's blocks.
    let from_mru = policy == ArcPolicy::Arc;
    assert!(
        fed_states.contains(&ArcState::Mfu) && fed_states.contains(&ArcState::Mru) == from_mru,
        "the feeds took blocks from MFU{}: {fed_states:?}",
        if from_mru { " and MRU" } else { " only" }
    );

    let stats = engine.stats();
    assert_eq!(
        stats["l2_feeds"], 4,
        "only the test's feeds ran (the feeder thread slept)"
    );
    assert_eq!(
        stats["predictive_prefetch"], 0,
        "the engine read nothing ahead"
    );
    assert_eq!(
        sim.cache.counters.prefetches, 0,
        "the simulator read nothing ahead"
    );
    assert_eq!(stats["memory_indirect_count"], 0, "no memory pressure");
    assert_eq!(
        stats["l2_evicted"], 0,
        "the engine's evict hand did not move"
    );
    assert_eq!(
        sim.cache.counters.l2_evicted, 0,
        "the simulator's evict hand did not move"
    );
    sim.cache.check_invariants();
    engine.engine.shutdown();
}

// ---- Metadata: an object volume's block-map pages (issue 37) ----

/// The object volume's block size.
const OBJECT_BLOCK_BYTES: u32 = 4 << 10;
/// Its block-map pages. A phase reads at most one block of each (see
/// `one_block_per_page`), so this is also the most reads a phase has.
const OBJECT_PAGES: u64 = 32;
/// 128 MiB, every block written: every page is dense, `CACHED_PAGE_BYTES` in the ARC.
const OBJECT_BLOCKS: u64 = OBJECT_PAGES * PAGE_BLOCKS;
/// `zfs_arc_max` for it: 192 KiB a shard, four or five pages' worth; the pages take 1.3 MB
/// of it.
const OBJECT_ARC_MAX_BYTES: u64 = 3 << 20;
/// Blocks a segment object holds.
const OBJECT_SEGMENT_BLOCKS: u32 = 256;
const OBJECT_VOLUME: u64 = 0x516d_0004;
/// Engine tunables of the object volume's test only: no blocks read around a miss (the
/// simulator does not model it; see the module documentation).
const OBJECT_ENGINE_TUNABLES: &[(&str, u64)] = &[("object_read_around", 0)];

/// A block's bytes: never all zeros (a block of zeros would be a hole, not a pointer).
fn object_pattern(block: u64) -> Vec<u8> {
    (0..OBJECT_BLOCK_BYTES as usize)
        .map(|i| (block as usize * 7 + i * 3) as u8 | 1)
        .collect()
}

/// An in-process store holding the object volume, every block written (made once for the
/// tests of this file, which read it through followers).
fn object_store() -> Arc<dyn ObjectStore> {
    static STORE: OnceLock<Arc<dyn ObjectStore>> = OnceLock::new();
    let store = STORE.get_or_init(|| {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let bytes = OBJECT_BLOCKS * u64::from(OBJECT_BLOCK_BYTES);
        let mut root = Root::new(
            OBJECT_VOLUME,
            bytes,
            OBJECT_BLOCK_BYTES,
            OBJECT_SEGMENT_BLOCKS,
        );
        root.format = Format::Segments;
        larch_object::create(&store, "v/", "mem://v", &root).expect("create the volume");
        let options = Options {
            map_log_commits: 0,
            ..Options::default()
        };
        let writer = ObjectVolume::open(
            Arc::clone(&store),
            "v",
            "mem://v",
            "writer",
            Default::default(),
            options,
            Box::new(|_| Ok(())),
        )
        .expect("open the writer");
        for page in 0..OBJECT_PAGES {
            let blocks = page * PAGE_BLOCKS..(page + 1) * PAGE_BLOCKS;
            let data: Vec<u8> = blocks.clone().flat_map(object_pattern).collect();
            writer
                .write_at(&data, blocks.start * u64::from(OBJECT_BLOCK_BYTES))
                .expect("write a page's blocks");
            writer.flush().expect("commit");
        }
        writer.release().expect("release the writer");
        store
    });
    Arc::clone(store)
}

/// A follower of the volume: it reads no page when it opens (a writer reads them all to
/// count its segments, in an order of the store's answers), and polls the root once an
/// hour (never, in the test).
fn object_follower(node: &str) -> Arc<ObjectVolume> {
    let options = Options {
        poll: Duration::from_secs(3600),
        ..Options::default()
    };
    ObjectVolume::open_follower(
        object_store(),
        "v",
        "mem://v",
        node,
        Default::default(),
        options,
        Box::new(|_| Ok(())),
    )
    .expect("open a follower")
}

/// The object volume's run on both sides, with the volume's `secondarycache`.
struct ObjectRun {
    engine: EngineSide,
    object: Arc<ObjectVolume>,
    sim: SimSide,
}

impl ObjectRun {
    fn new(secondarycache: CacheMode) -> ObjectRun {
        let object = object_follower(&format!("follower-{secondarycache:?}"));
        let store =
            BackingStore::on_object("mem://v", Arc::clone(&object), LatencyModel::default());
        let spec = VolumeSpec {
            secondarycache,
            ..VolumeSpec::new(OBJECT_VOLUME, OBJECT_BLOCK_BYTES)
        };
        let engine = EngineSide::with_volume(OBJECT_ARC_MAX_BYTES, spec, store);
        for &(name, value) in OBJECT_ENGINE_TUNABLES {
            (engine.engine.tunables)
                .set(name, &value.to_string())
                .unwrap_or_else(|e| panic!("engine tunable {name}: {e}"));
        }
        let tunables = SimTunables {
            secondarycache: sim::CacheMode::parse(secondarycache.name())
                .expect("a cache mode of both"),
            ..SimTunables::default()
        };
        let mut sim = SimSide::with(OBJECT_ARC_MAX_BYTES, OBJECT_BLOCK_BYTES, tunables);
        sim.cache
            .model_metadata(MetadataModel::MapPages, OBJECT_BLOCKS);
        ObjectRun {
            engine,
            object,
            sim,
        }
    }

    /// The engine's side of a checkpoint (see `ObjectRun::sim_view`).
    fn engine_view(&self) -> BTreeMap<&'static str, u64> {
        let stats = self.engine.stats();
        let stat = |name: &str| {
            *stats
                .get(name)
                .unwrap_or_else(|| panic!("no arcstat {name}"))
        };
        let mut view: BTreeMap<&'static str, u64> = POLICY_KSTATS
            .iter()
            .map(|&name| (name, stat(name)))
            .collect();
        for name in [
            "l2_hits",
            "l2_misses",
            "l2_blocks",
            "l2_size",
            "l2_bufc_data_asize",
            "l2_bufc_metadata_asize",
        ] {
            view.insert(name, stat(name));
        }
        let volume = &self.object.stats;
        view.insert(
            "map_page_store_reads",
            volume.map_page_gets.load(Ordering::Relaxed),
        );
        view.insert(
            "map_page_l2_reads",
            volume.map_page_l2_reads.load(Ordering::Relaxed),
        );
        view
    }

    /// The simulator's side of a checkpoint, under the engine's names: the policy's
    /// arcstats (summed over the shards as the engine sums them, which averages `meta`),
    /// the cache device's index, and the map pages read from the store and the device.
    fn sim_view(&self) -> BTreeMap<&'static str, u64> {
        let cache = &self.sim.cache;
        let stats: HashMap<String, u64> = cache.kstats().into_iter().collect();
        let mut view: BTreeMap<&'static str, u64> = POLICY_KSTATS
            .iter()
            .map(|&name| (name, stats[name]))
            .collect();
        view.insert("meta", stats["meta"] / larch_engine::SHARDS as u64);
        let n = &cache.counters;
        let m = cache.metadata_summary();
        view.insert("l2_hits", n.l2_hits + n.indirect_l2_reads);
        view.insert("l2_misses", n.l2_misses);
        view.insert("l2_blocks", cache.l2_blocks());
        view.insert("l2_size", cache.devices[0].bytes);
        view.insert("l2_bufc_data_asize", m.l2_bufc_data_asize);
        view.insert("l2_bufc_metadata_asize", m.l2_bufc_metadata_asize);
        view.insert(
            "map_page_store_reads",
            n.indirect_reads - n.indirect_l2_reads,
        );
        view.insert("map_page_l2_reads", n.indirect_l2_reads);
        view
    }

    /// Both sides agree: every value of the views, and the cache device's blocks in ring
    /// order. Returns the view.
    fn assert_agree(&self, when: &str) -> BTreeMap<&'static str, u64> {
        let e = self.engine_view();
        let s = self.sim_view();
        let differ: Vec<String> = e
            .iter()
            .filter(|&(name, v)| s[name] != *v)
            .map(|(name, v)| format!("{name}: engine {v}, simulator {}", s[name]))
            .collect();
        assert!(
            differ.is_empty(),
            "{when}: the engine and the simulator differ: {differ:#?}\nengine: {e:#?}"
        );
        let copies: Vec<u64> = self.engine.copies().into_iter().map(|(b, _)| b).collect();
        assert_eq!(
            copies.len() as u64,
            e["l2_blocks"],
            "{when}: the engine's log and its index differ"
        );
        assert_eq!(
            copies,
            self.sim.copies(OBJECT_BLOCKS),
            "{when}: the blocks on the cache device, in ring order, differ (engine left)"
        );
        e
    }
}

/// The policy's arcstats a checkpoint compares (`larch_policy::Arc::kstats`), data and
/// metadata apart; `meta` is the balance of the two (`arc_meta`).
const POLICY_KSTATS: &[&str] = &[
    "hits",
    "misses",
    "demand_data_hits",
    "demand_data_misses",
    "demand_metadata_hits",
    "demand_metadata_misses",
    "mru_hits",
    "mfu_hits",
    "mru_ghost_hits",
    "mfu_ghost_hits",
    "stale_drops",
    "hash_elements",
    "c",
    "p",
    "meta",
    "size",
    "data_size",
    "metadata_size",
    "mru_data",
    "mru_metadata",
    "mfu_data",
    "mfu_metadata",
    "mru_ghost_data",
    "mru_ghost_metadata",
    "mfu_ghost_data",
    "mfu_ghost_metadata",
];

/// One block of each page of `pages`, in a shuffled order, chosen by `pick` (its index in
/// the page). A phase reads a page's block at most once: a page looked up twice in one
/// phase could be a quick re-read (within `ARC_MINTIME`) on one side and not on the other.
fn one_block_per_page(
    pages: std::ops::Range<u64>,
    mut pick: impl FnMut(u64) -> u64,
    rng: &mut SplitMix64,
) -> Vec<u64> {
    let blocks = pages
        .map(|p| p * PAGE_BLOCKS + pick(p) % PAGE_BLOCKS)
        .collect();
    shuffled(blocks, rng)
}

/// The object volume's sequence: at most one read of each page in a phase (so at most
/// one lookup of it), each block at most once.
fn object_rounds() -> Vec<Round> {
    let mut rng = SplitMix64::new(SEED + 1);
    let all = 0..OBJECT_PAGES;
    let half = 0..OBJECT_PAGES / 2;
    let rest = OBJECT_PAGES / 2..OBJECT_PAGES;
    // Phase `i` reads block `i` of a page (scattered by the page), so phases of one round
    // never read one block twice, and a later phase with the same `i` reads it again.
    let nth = |i: u64| move |page: u64| i * 37 + page * 11;
    let phases = |pages: &std::ops::Range<u64>, from: u64, to: u64, rng: &mut SplitMix64| {
        (from..to)
            .map(|i| one_block_per_page(pages.clone(), nth(i), rng))
            .collect::<Vec<_>>()
    };
    vec![
        Round {
            // Every page looked up: misses, then hits that make them MFU. The first phase
            // reads the last block of each page, where a page's first block ends.
            name: "cold",
            phases: [one_block_per_page(
                all.clone(),
                |_| PAGE_BLOCKS - 1,
                &mut rng,
            )]
            .into_iter()
            .chain(phases(&all, 1, 8, &mut rng))
            .collect(),
        },
        Round {
            // Half the pages, new blocks and blocks read again: data fills the ARC, some
            // of it MFU, and the other half's pages age at the MFU list's cold end.
            name: "half",
            phases: (8..40)
                .flat_map(|i| {
                    let fresh = one_block_per_page(half.clone(), nth(i), &mut rng);
                    let again = one_block_per_page(half.clone(), nth(i - 2), &mut rng);
                    [fresh, again]
                })
                .collect(),
        },
        Round {
            // The other half again: their pages come back from the cache device or the
            // store, or are still in the ARC.
            name: "return",
            phases: phases(&rest, 40, 48, &mut rng),
        },
        Round {
            // Blocks of every page read before: ARC hits, ghost hits, cache-device hits.
            name: "again",
            phases: phases(&all, 0, 16, &mut rng),
        },
    ]
}

/// What a run of the object volume's sequence came to (both sides agreeing on all of it).
struct ObjectOutcome {
    /// The last checkpoint's view.
    last: BTreeMap<&'static str, u64>,
    /// The most bytes of MFU pages at a checkpoint.
    peak_mfu_metadata: u64,
    /// The blocks each feed wrote, in ring order.
    fed: Vec<Vec<u64>>,
}

/// Runs `object_rounds` on both sides with the volume's `secondarycache`, checking at
/// every checkpoint.
fn run_object_volume(secondarycache: CacheMode) -> ObjectOutcome {
    assert_eq!(
        MAP_PAGE_BLOCKS, PAGE_BLOCKS,
        "the simulator's pages' blocks"
    );
    assert_eq!(
        u64::from(MAP_PAGE_BYTES),
        larch_object::CACHED_PAGE_BYTES,
        "the simulator's dense page's bytes"
    );
    let mut run = ObjectRun::new(secondarycache);
    let mut fed: Vec<Vec<u64>> = Vec::new();
    let mut last = BTreeMap::new();
    let mut peak_mfu_metadata = 0;
    for round in object_rounds() {
        for phase in &round.phases {
            for &block in phase {
                run.engine.read(block);
                run.sim.read(block);
            }
            run.engine.pause();
            run.sim.pause();
        }
        run.assert_agree(&format!("after the reads of {}", round.name));
        let before = run.engine.copies().len();
        let written = run.engine.feed();
        assert_eq!(
            written,
            run.sim.feed(),
            "{}: bytes fed by the engine (left) and the simulator (right)",
            round.name
        );
        last = run.assert_agree(&format!("after the feed of {}", round.name));
        peak_mfu_metadata = last["mfu_metadata"].max(peak_mfu_metadata);
        fed.push(
            run.engine.copies()[before..]
                .iter()
                .map(|&(b, _)| b)
                .collect(),
        );
        run.engine.pause();
        run.sim.pause();
    }
    let stats = run.engine.stats();
    let writing = fed.iter().filter(|f| !f.is_empty()).count() as u64;
    assert_eq!(stats["l2_feeds"], writing, "only the test's feeds ran");
    assert_eq!(
        stats["predictive_prefetch"], 0,
        "the engine read nothing ahead"
    );
    assert_eq!(run.sim.cache.counters.prefetches, 0);
    assert_eq!(stats["memory_indirect_count"], 0, "no memory pressure");
    assert_eq!(stats["l2_evicted"], 0);
    run.sim.cache.check_invariants();
    run.object.release().expect("release the follower");
    run.engine.engine.shutdown();
    ObjectOutcome {
        last,
        peak_mfu_metadata,
        fed,
    }
}

#[test]
fn with_map_pages_the_engine_and_the_simulator_decide_alike() {
    let ObjectOutcome {
        last,
        peak_mfu_metadata,
        fed,
    } = run_object_volume(CacheMode::All);
    // Outcomes the run must have had, or the comparison proved little.
    assert!(
        last["demand_metadata_misses"] > 2 * OBJECT_PAGES && last["stale_drops"] > 0,
        "pages were evicted and read again, each a new block to the policy: {last:#?}"
    );
    assert!(
        last["map_page_l2_reads"] > 0 && last["map_page_store_reads"] > OBJECT_PAGES,
        "pages came back from the cache device and from the store: {last:#?}"
    );
    assert!(
        last["l2_hits"] > last["map_page_l2_reads"],
        "data came back from the cache device: {last:#?}"
    );
    assert!(
        last["mru_ghost_hits"] > 0 && last["mfu_ghost_hits"] > 0,
        "data came back to the ARC through its ghost lists: {last:#?}"
    );
    assert!(
        peak_mfu_metadata > 0 && last["metadata_size"] < peak_mfu_metadata,
        "pages became MFU ({peak_mfu_metadata} bytes), and the data pushed them out: {last:#?}"
    );
    let (pages, data): (Vec<u64>, Vec<u64>) =
        fed.iter().flatten().partition(|&&b| b >= MAP_PAGE_IDS);
    assert!(
        !pages.is_empty() && !data.is_empty(),
        "the feeds wrote pages and data: {fed:?}"
    );
}

#[test]
fn with_secondarycache_metadata_only_map_pages_are_fed_alike() {
    let ObjectOutcome { last, fed, .. } = run_object_volume(CacheMode::Metadata);
    assert!(
        fed.iter().flatten().all(|&b| b >= MAP_PAGE_IDS),
        "only pages were fed: {fed:?}"
    );
    assert!(
        last["l2_bufc_data_asize"] == 0 && last["l2_bufc_metadata_asize"] > 0,
        "{last:#?}"
    );
    assert!(
        last["map_page_l2_reads"] > 0 && last["l2_hits"] == last["map_page_l2_reads"],
        "pages, and only pages, came back from the cache device: {last:#?}"
    );
}

//! The daemon's cache and the simulator decide alike (issue 16). One sequence of block
//! reads drives `larch_engine::Engine` (in memory, through `Engine::read_block`) and
//! `larch_sim::sim::cache::SimCache` (in virtual time); at every checkpoint the ARC's sizes
//! and counters must be equal, and each L2 feed, given the same budget, must write the
//! same bytes and the same blocks in the same order. Both run the same `larch_policy` code
//! (`Arc` in the same `shards`, `feed::select` over a split budget), so a difference can
//! only come from the code around the policy: what each side tells it, when, and what each
//! does with its answers. Every comparison is exact.
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
//! - **Prefetch.** Reads go through `Engine::read_block`, below the volume's prefetcher,
//!   and `SimCache::read` with `prefetch: false`, so neither side reads ahead (checked).
//! - **Memory pressure.** The engine's size controller shrinks the ARC when the machine
//!   runs short of memory; the simulator has no such thing. `zfs_arc_sys_free` is set to
//!   one byte so that it never acts during the test (checked).
//! - **The rings.** The engine's ring holds log blocks between records and the simulator's
//!   does not, so their evict hands would not move at the same feeds; the cache device is
//!   large enough that neither ring's evict hand moves.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use larch_engine::{BackingStore, CacheDevice, Engine, LatencyModel, VolumeEntry, VolumeSpec};
use larch_io::{BlockDevice, MemDevice};
use larch_l2::{ArcState, RebuildOptions};
use larch_sim::SplitMix64;
use larch_sim::device::parse_spec;
use larch_sim::sim::SimTunables;
use larch_sim::sim::cache::SimCache;

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
    fn new() -> EngineSide {
        let engine = Engine::new(ARC_MAX_BYTES);
        for &(name, value) in SHARED_TUNABLES.iter().chain(ENGINE_TUNABLES) {
            engine
                .tunables
                .set(name, &value.to_string())
                .unwrap_or_else(|e| panic!("engine tunable {name}: {e}"));
        }
        let backing = Arc::new(MemDevice::new(VOLUME_BLOCKS * u64::from(BLOCK_BYTES)));
        let store = BackingStore::on_device("volume", backing, LatencyModel::default());
        let vol = engine
            .add_volume(VolumeSpec::new(VOLUME, BLOCK_BYTES), Arc::new(store))
            .expect("volume");
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
    fn new() -> SimSide {
        let mut tunables = SimTunables::default();
        for &(name, value) in SHARED_TUNABLES {
            tunables
                .set(name, value)
                .unwrap_or_else(|e| panic!("simulator tunable {name}: {e}"));
        }
        let model = |seed| parse_spec("ram", seed).expect("the ram model");
        let cache = SimCache::new(
            ARC_MAX_BYTES,
            BLOCK_BYTES,
            model(1),
            vec![("cache0".into(), model(2), CACHE_DEVICE_BYTES)],
            tunables,
        );
        SimSide { cache, now_ns: 0 }
    }

    fn read(&mut self, block: u64) {
        self.cache.read(self.now_ns, block, 1, false);
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

    /// The blocks on the cache device in ring order.
    fn copies(&self) -> Vec<u64> {
        let mut copies: Vec<(u64, u64)> = (0..VOLUME_BLOCKS)
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
        sim.copies(),
        "{when}: the blocks on the cache device, in ring order, differ (engine left)"
    );
    e
}

#[test]
fn the_engine_and_the_simulator_decide_alike_on_one_sequence() {
    let engine = EngineSide::new();
    let mut sim = SimSide::new();
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
    assert!(
        fed_states.contains(&ArcState::Mfu) && fed_states.contains(&ArcState::Mru),
        "the feeds took blocks from both lists: {fed_states:?}"
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

//! Miss-ratio curves of a live workload in fixed memory.
//!
//! A cache's hit ratio at every size it could have comes from one pass over its accesses if
//! each access's *reuse distance* is known: the bytes of distinct blocks touched since the
//! previous access to the same block. An LRU cache of `C` bytes hits exactly the accesses
//! whose distance (with the block itself) is at most `C` (Mattson et al., 1970). Computing
//! every distance needs memory in proportion to the blocks a workload touches; SHARDS
//! (Waldspurger et al., FAST'15) makes it constant by **spatial sampling**: a block is
//! tracked only if a hash of its identity falls below a threshold `T`, so a fraction
//! `R = T / 2^64` of the blocks is followed through *all* its accesses, and distances
//! measured among the sampled blocks, divided by `R`, estimate the real ones.
//!
//! What this crate does, and where it departs from the paper:
//! - **Fixed size** (SHARDS's `s_max` variant): at most [`SamplerConfig::max_samples`]
//!   blocks are tracked. When one more would be, the one with the largest hash is dropped
//!   and `T` falls to its hash, so the rate adapts down to what the workload's footprint
//!   allows. Each sampled access weighs `1 / R` at the time it is seen (the estimator stays
//!   unbiased while `R` falls). The rate starts at 1: a small footprint is followed whole.
//! - **A budget of time** (larch's): a hot path may bound the sampled accesses per second
//!   ([`SamplerConfig::max_sampled_per_s`]); past it the threshold halves, by the same
//!   spatial rule, so a small footprint under many IOPS is followed at the rate the
//!   budget allows instead of costing every access.
//! - **SHARDS-adj**: the number of sampled accesses differs from `R ×` all accesses by
//!   chance, mostly through a few hot blocks falling in or out of the sample. The difference
//!   is added to the shortest distances (the paper's correction), using the count of every
//!   access that the [`Filter`] saw. The miniature ARCs take the same correction as hits at
//!   every size (measured: without it a Zipf workload's ARC curve was off by 5 points at a
//!   10% rate, by whether the hottest block fell in the sample).
//! - **The effective rate**: a small sample follows 10-20% more or fewer blocks than `R`
//!   says (their number is binomial), and every distance scaled by `1/R` is that far off. The
//!   filter keeps a HyperLogLog sketch of the distinct blocks, so `followed / distinct`
//!   estimates the rate too; weighed with `R` by their variances it rescales distances and
//!   weights when a curve is read ([`Sampler::effective_rate`]).
//! - Distances are counted **in bytes** (blocks of different volumes may differ in size), in
//!   a Fenwick tree over access stamps; when the stamps run out the live ones are renumbered
//!   in order, so the tree stays within twice the table.
//! - The ARC is not a stack algorithm, so its curve cannot come from distances. As SHARDS
//!   does for such policies, the sampled stream is run through **miniature caches** — here
//!   the real [`larch_policy::Arc`] — of `R ×` each size. Caches that never evicted are all
//!   the same, so only sizes up to the first such one run; the next one starts as a clone of
//!   it when it is about to evict, which is exact (its whole history was "no eviction").
//!   Sizes whose miniature would hold fewer than [`MIN_MINI_BLOCKS`] blocks are too coarse
//!   and report the LRU value instead.
//! - Only reads are scored (the hit ratio is a read hit ratio); writes move a block to the
//!   front as the engine's write path does (the written block is cached), sequential and
//!   metadata accesses are counted for the workload's shares.
//!
//! Memory: the sample table, the stamp tree (at most 2 × `max_samples` stamps), the
//! miniature ARCs' headers and each volume's histogram, reported by
//! [`Sampler::memory_bytes`] (the filter's 16 KiB sketch besides); the defaults stay under a
//! few MB.

use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use larch_policy::{Access as ArcAccess, Arc, ArcConfig, BlockKey, BufType};

/// Miniature caches holding fewer blocks than this report the LRU curve's value (and are
/// not run: the rate only falls, so a size too coarse stays so).
pub const MIN_MINI_BLOCKS: u64 = 32;

/// Minutes over which the recent share of first reads is kept.
pub const RECENT_MINUTES: u64 = 10;

/// Volumes whose own figures a sampler keeps; accesses of others count for the pool only.
pub const MAX_VOLUMES: usize = 256;

/// Hashes block keys for the sampler's tables: keys are mixed with the sampler's own
/// finaliser, seeded like the spatial hash, rather than SipHash, which cost a measurable
/// share of the sampled path. A client cannot aim at one bucket without the seed, which
/// the daemon draws at random when it starts.
#[derive(Clone, Copy)]
struct KeyBuild(u64);

impl BuildHasher for KeyBuild {
    type Hasher = KeyHasher;
    fn build_hasher(&self) -> KeyHasher {
        KeyHasher(self.0)
    }
}

struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        mix(self.0)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = mix(self.0 ^ x);
    }
}

type KeyMap<V> = HashMap<BlockKey, V, KeyBuild>;

/// Log-spaced buckets per doubling of the reuse-distance histogram.
const SUB_BUCKETS: usize = 8;
/// Buckets: distances up to 2^62 bytes.
const BUCKETS: usize = 62 * SUB_BUCKETS;

/// The default sizes at which curves are computed: powers of two from 1 MiB to 16 TiB.
pub fn default_sizes() -> Vec<u64> {
    (20..=44).map(|s| 1u64 << s).collect()
}

/// One access of one block, as the sampler records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    /// The block.
    pub key: BlockKey,
    /// Its size in bytes.
    pub bytes: u32,
    /// A write (else a read).
    pub write: bool,
    /// The request continued a sequential stream.
    pub sequential: bool,
    /// Metadata rather than data.
    pub metadata: bool,
    /// The caller's clock, ms; it must not go backwards.
    pub now_ms: u64,
}

impl Access {
    /// The demand read an ARC sees for this access (a write moves its block to the front
    /// as a read would).
    fn arc_access(&self) -> ArcAccess {
        ArcAccess {
            key: self.key,
            generation: 0,
            size_bytes: self.bytes.max(1),
            buf_type: if self.metadata {
                BufType::Metadata
            } else {
                BufType::Data
            },
            prefetch: false,
            l2cache: true,
            uncached: false,
            now_ms: self.now_ms,
        }
    }
}

/// How a [`Sampler`] samples.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerConfig {
    /// Most blocks tracked at once (SHARDS's `s_max`).
    pub max_samples: usize,
    /// The sampling rate to start at (it only falls from there). 1 by default: a small
    /// footprint is followed whole, and exactly.
    pub initial_rate: f64,
    /// Most sampled accesses per second of the sampler's clock; past it the rate halves.
    /// Bounds the sampler's CPU time on a hot path (`None`: no bound, for traces).
    pub max_sampled_per_s: Option<u64>,
    /// Cache sizes, bytes, ascending, at which curves are computed.
    pub sizes: Vec<u64>,
    /// Seeds the spatial hash (and the tables' hash). The default is fixed, for
    /// reproducible runs; a daemon takes a random one ([`random_seed`]).
    pub seed: u64,
    /// Run miniature ARCs (the ARC curve); the LRU curve needs none.
    pub arc_curve: bool,
    /// The ARC's configuration at each size (its sizes are replaced by the scaled ones).
    pub arc_template: ArcConfig,
}

impl Default for SamplerConfig {
    fn default() -> SamplerConfig {
        SamplerConfig {
            max_samples: 8192,
            initial_rate: 1.0,
            max_sampled_per_s: None,
            sizes: default_sizes(),
            seed: 0x6c61_7263_686d_7263,
            arc_curve: true,
            arc_template: ArcConfig::fixed(1 << 20),
        }
    }
}

impl SamplerConfig {
    /// Checks that the values make sense together.
    pub fn validate(&self) -> Result<(), String> {
        if !(16..=1 << 30).contains(&self.max_samples) {
            return Err(format!(
                "max_samples {} is not between 16 and 2^30",
                self.max_samples
            ));
        }
        if !(self.initial_rate > 0.0 && self.initial_rate <= 1.0) {
            return Err(format!(
                "the sampling rate {} is not in (0, 1]",
                self.initial_rate
            ));
        }
        if self.sizes.is_empty() || self.sizes.windows(2).any(|w| w[0] >= w[1]) {
            return Err("the curve's sizes must be ascending and not empty".into());
        }
        if self.sizes[0] == 0 {
            return Err("a cache size of 0 has no curve".into());
        }
        if self.max_sampled_per_s == Some(0) {
            return Err("a budget of 0 sampled accesses a second samples nothing".into());
        }
        Ok(())
    }
}

/// The hash that decides which blocks are sampled: the same block always gets the same one.
pub fn spatial_hash(seed: u64, key: &BlockKey) -> u64 {
    mix(seed ^ mix(key.volume.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ key.block))
}

/// A seed drawn from the standard library's per-process random keys.
pub fn random_seed() -> u64 {
    std::collections::hash_map::RandomState::new().hash_one(0x6c61_7263_u64)
}

fn mix(mut z: u64) -> u64 {
    // SplitMix64's finaliser: every input bit reaches every output bit.
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn threshold_of(rate: f64) -> u64 {
    if rate >= 1.0 {
        u64::MAX
    } else {
        (rate * 18_446_744_073_709_551_616.0) as u64
    }
}

fn rate_of(threshold: u64) -> f64 {
    if threshold == u64::MAX {
        1.0
    } else {
        threshold as f64 / 18_446_744_073_709_551_616.0
    }
}

/// The lock-free front of a sampler: which accesses it wants, and how many it saw in all.
/// Callers on a hot path count each request once ([`Filter::count`]: one relaxed atomic
/// add), hash each block once ([`spatial_hash`] with [`Filter::seed`]) and take the
/// sampler's lock only for the blocks it wants ([`Filter::wants_hash`]: one atomic load).
#[derive(Debug)]
pub struct Filter {
    seed: u64,
    threshold: AtomicU64,
    /// Reads and writes counted, striped by thread so that cores do not pass one cache
    /// line back and forth on every request (measured: a shared counter was a third of
    /// the sampler's cost on ARC hits).
    counts: [Stripe; STRIPES],
    /// A HyperLogLog sketch of the distinct blocks seen: what fraction of them the sample
    /// really follows (see [`Sampler::effective_rate`]).
    registers: Box<[AtomicU8]>,
}

/// Registers of the distinct-block sketch: 2^14 (16 KiB), a standard error of 0.8%.
const HLL_BITS: u32 = 14;

/// Counter stripes of a [`Filter`].
const STRIPES: usize = 16;

#[derive(Debug, Default)]
#[repr(align(128))]
struct Stripe {
    reads: AtomicU64,
    writes: AtomicU64,
}

/// This thread's stripe (threads take stripes in turn as they first count).
fn stripe_index() -> usize {
    use std::cell::Cell;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    thread_local! {
        static INDEX: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    INDEX.with(|i| {
        if i.get() == usize::MAX {
            i.set(NEXT.fetch_add(1, Ordering::Relaxed) as usize % STRIPES);
        }
        i.get()
    })
}

impl Filter {
    /// Counts `blocks` accesses of one request.
    pub fn count(&self, blocks: u64, write: bool) {
        let stripe = &self.counts[stripe_index()];
        let counter = if write { &stripe.writes } else { &stripe.reads };
        counter.fetch_add(blocks, Ordering::Relaxed);
    }

    /// Notes the block of this [`spatial_hash`] in the distinct-block sketch and says
    /// whether the sampler wants it. A register is written only when it grows, which is
    /// rare once the sketch has seen a few blocks, so cores seldom share a dirty line.
    pub fn observe(&self, hash: u64) -> bool {
        let h = mix(hash ^ 0x2545_f491_4f6c_dd1d);
        let index = (h >> (64 - HLL_BITS)) as usize;
        let rank = ((h << HLL_BITS) | (1 << (HLL_BITS - 1))).leading_zeros() as u8 + 1;
        let register = &self.registers[index];
        if rank > register.load(Ordering::Relaxed) {
            register.fetch_max(rank, Ordering::Relaxed);
        }
        hash < self.threshold.load(Ordering::Relaxed)
    }

    /// Counts one access (a read when `read`) and says whether the sampler wants it.
    pub fn wants(&self, key: &BlockKey, read: bool) -> bool {
        self.count(1, !read);
        self.observe(spatial_hash(self.seed, key))
    }

    /// The estimated number of distinct blocks seen (HyperLogLog, with linear counting
    /// while many registers are empty).
    pub fn distinct(&self) -> f64 {
        let m = self.registers.len() as f64;
        let (mut sum, mut zeros) = (0.0, 0u32);
        for r in self.registers.iter() {
            let v = r.load(Ordering::Relaxed);
            sum += (-f64::from(v)).exp2();
            zeros += u32::from(v == 0);
        }
        let alpha = 0.7213 / (1.0 + 1.079 / m);
        let estimate = alpha * m * m / sum;
        if estimate <= 2.5 * m && zeros > 0 {
            m * (m / f64::from(zeros)).ln()
        } else {
            estimate
        }
    }

    /// The seed of the hash.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The sampling rate now.
    pub fn rate(&self) -> f64 {
        rate_of(self.threshold.load(Ordering::Relaxed))
    }

    /// Accesses counted, and of them reads.
    pub fn counted(&self) -> (u64, u64) {
        let (mut reads, mut writes) = (0, 0);
        for s in &self.counts {
            reads += s.reads.load(Ordering::Relaxed);
            writes += s.writes.load(Ordering::Relaxed);
        }
        (reads + writes, reads)
    }
}

/// A Fenwick tree of bytes over access stamps.
#[derive(Clone, Debug)]
struct Fenwick {
    tree: Vec<i64>,
}

impl Fenwick {
    fn new(n: usize) -> Fenwick {
        Fenwick {
            tree: vec![0; n + 1],
        }
    }
    fn len(&self) -> usize {
        self.tree.len() - 1
    }
    fn add(&mut self, at: usize, delta: i64) {
        let mut i = at;
        while i < self.tree.len() {
            self.tree[i] += delta;
            i += i & i.wrapping_neg();
        }
    }
    /// Sum of positions 1..=at.
    fn prefix(&self, at: usize) -> i64 {
        let mut i = at.min(self.len());
        let mut s = 0;
        while i > 0 {
            s += self.tree[i];
            i &= i - 1;
        }
        s
    }
}

#[derive(Clone, Copy, Debug)]
struct Sample {
    hash: u64,
    last_ms: u64,
    stamp: u32,
    bytes: u32,
}

/// One miniature ARC: the full-size cache it stands for and what it scored.
#[derive(Clone)]
struct Mini {
    size: u64,
    arc: Arc,
    hits: f64,
    reads: f64,
}

/// What a sampler keeps of one volume: its reads' reuse distances in the pool's stream (so
/// its hit ratio in the pool's cache at each size) and its shares.
#[derive(Clone, Debug)]
struct VolumeTally {
    histogram: Vec<f64>,
    cold: f64,
    read_weight: f64,
    all_weight: f64,
    write_weight: f64,
    sequential_weight: f64,
    metadata_weight: f64,
}

impl VolumeTally {
    fn new() -> VolumeTally {
        VolumeTally {
            histogram: vec![0.0; BUCKETS],
            cold: 0.0,
            read_weight: 0.0,
            all_weight: 0.0,
            write_weight: 0.0,
            sequential_weight: 0.0,
            metadata_weight: 0.0,
        }
    }
}

/// Shares of the workload, by accesses.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Shares {
    /// Writes among all accesses.
    pub write: f64,
    /// Accesses that continued a sequential stream.
    pub sequential: f64,
    /// Metadata accesses.
    pub metadata: f64,
    /// A volume's share of the pool's accesses (1 for the pool's own shares).
    pub of_pool: f64,
}

/// A point of a curve: a cache size and the read hit ratio there.
pub type Point = (u64, f64);

/// The sampler: a spatially sampled access log in fixed memory and the curves from it.
pub struct Sampler {
    cfg: SamplerConfig,
    filter: std::sync::Arc<Filter>,
    threshold: u64,
    samples: KeyMap<Sample>,
    by_hash: BinaryHeap<(u64, BlockKey)>,
    tree: Fenwick,
    stamps: usize,
    /// Read weight per distance bucket; `cold`: first reads of a block.
    histogram: Vec<f64>,
    cold: f64,
    /// (minute, cold read weight, read weight) of the last [`RECENT_MINUTES`] minutes.
    recent: std::collections::VecDeque<(u64, f64, f64)>,
    read_weight: f64,
    all_weight: f64,
    write_weight: f64,
    sequential_weight: f64,
    metadata_weight: f64,
    sampled: u64,
    /// The miniature ARCs of `sizes[first_mini..]`, up to the first that never evicted.
    minis: Vec<Mini>,
    first_mini: usize,
    /// The second of the sampler's clock being counted against the budget, and its count.
    budget_second: u64,
    budget_spent: u64,
    mini_blocks_bytes: u64,
    volumes: HashMap<u64, VolumeTally>,
    actions: Vec<larch_policy::Action>,
}

impl Sampler {
    /// A sampler; `cfg` must validate.
    pub fn new(cfg: SamplerConfig) -> Result<Sampler, String> {
        cfg.validate()?;
        let threshold = threshold_of(cfg.initial_rate);
        let tree = Fenwick::new(cfg.max_samples.saturating_mul(4).min(1 << 14));
        let filter = std::sync::Arc::new(Filter {
            seed: cfg.seed,
            threshold: AtomicU64::new(threshold),
            counts: Default::default(),
            registers: (0..1usize << HLL_BITS).map(|_| AtomicU8::new(0)).collect(),
        });
        Ok(Sampler {
            filter,
            threshold,
            samples: KeyMap::with_hasher(KeyBuild(mix(cfg.seed ^ 0x5851_f42d_4c95_7f2d))),
            by_hash: BinaryHeap::new(),
            tree,
            stamps: 0,
            histogram: vec![0.0; BUCKETS],
            cold: 0.0,
            recent: std::collections::VecDeque::new(),
            read_weight: 0.0,
            all_weight: 0.0,
            write_weight: 0.0,
            sequential_weight: 0.0,
            metadata_weight: 0.0,
            sampled: 0,
            minis: Vec::new(),
            first_mini: 0,
            budget_second: 0,
            budget_spent: 0,
            mini_blocks_bytes: 0,
            volumes: HashMap::new(),
            actions: Vec::new(),
            cfg,
        })
    }

    /// The filter to ask before [`Sampler::record`]; shared with hot paths.
    pub fn filter(&self) -> std::sync::Arc<Filter> {
        self.filter.clone()
    }

    /// The configuration.
    pub fn config(&self) -> &SamplerConfig {
        &self.cfg
    }

    /// The sampling rate now.
    pub fn rate(&self) -> f64 {
        rate_of(self.threshold)
    }

    /// Accesses recorded (sampled).
    pub fn sampled(&self) -> u64 {
        self.sampled
    }

    /// Blocks tracked now.
    pub fn tracked(&self) -> usize {
        self.samples.len()
    }

    /// Reads the sample stands for (every read the filter counted).
    pub fn estimated_reads(&self) -> f64 {
        let (_, reads) = self.filter.counted();
        (reads as f64).max(self.read_weight)
    }

    /// Accesses the sample stands for.
    pub fn estimated_accesses(&self) -> f64 {
        let (all, _) = self.filter.counted();
        (all as f64).max(self.all_weight)
    }

    /// Convenience for callers without a hot path: filter and record in one call.
    pub fn offer(&mut self, access: &Access) {
        if self.filter.wants(&access.key, !access.write) {
            self.record(access);
        }
    }

    /// Records an access the filter wanted. Accesses it would not want (their block's hash
    /// is above the threshold, which may have fallen since) are ignored.
    pub fn record(&mut self, a: &Access) {
        let hash = spatial_hash(self.cfg.seed, &a.key);
        if hash >= self.threshold {
            return;
        }
        let rate = self.rate();
        let weight = 1.0 / rate;
        let bytes = a.bytes.max(1);
        self.sampled += 1;
        self.all_weight += weight;
        if a.write {
            self.write_weight += weight;
        }
        if a.sequential {
            self.sequential_weight += weight;
        }
        if a.metadata {
            self.metadata_weight += weight;
        }
        if !a.write {
            self.read_weight += weight;
            let minute = a.now_ms / 60_000;
            if self.recent.back().is_none_or(|r| r.0 != minute) {
                self.recent.push_back((minute, 0.0, 0.0));
                while self
                    .recent
                    .front()
                    .is_some_and(|r| r.0 + RECENT_MINUTES <= minute)
                {
                    self.recent.pop_front();
                }
            }
            if let Some(r) = self.recent.back_mut() {
                r.2 += weight;
            }
        }
        if self.volumes.len() < MAX_VOLUMES || self.volumes.contains_key(&a.key.volume) {
            let v = self
                .volumes
                .entry(a.key.volume)
                .or_insert_with(VolumeTally::new);
            v.all_weight += weight;
            if a.write {
                v.write_weight += weight;
            } else {
                v.read_weight += weight;
            }
            if a.sequential {
                v.sequential_weight += weight;
            }
            if a.metadata {
                v.metadata_weight += weight;
            }
        }
        if self.stamps == self.tree.len() {
            self.renumber();
        }
        self.stamps += 1;
        let now = self.stamps;
        match self.samples.get_mut(&a.key) {
            Some(s) => {
                if !a.write {
                    let between = self.tree.prefix(now - 1) - self.tree.prefix(s.stamp as usize);
                    let distance = between.max(0) as f64 / rate + f64::from(bytes);
                    let bucket = bucket_of(distance);
                    self.histogram[bucket] += weight;
                    if let Some(v) = self.volumes.get_mut(&a.key.volume) {
                        v.histogram[bucket] += weight;
                    }
                }
                self.tree.add(s.stamp as usize, -i64::from(s.bytes));
                s.stamp = now as u32;
                s.bytes = bytes;
                s.last_ms = a.now_ms;
                self.tree.add(now, i64::from(bytes));
            }
            None => {
                if !a.write {
                    self.cold += weight;
                    if let Some(r) = self.recent.back_mut() {
                        r.1 += weight;
                    }
                    if let Some(v) = self.volumes.get_mut(&a.key.volume) {
                        v.cold += weight;
                    }
                }
                self.samples.insert(
                    a.key,
                    Sample {
                        hash,
                        stamp: now as u32,
                        bytes,
                        last_ms: a.now_ms,
                    },
                );
                self.by_hash.push((hash, a.key));
                self.tree.add(now, i64::from(bytes));
                self.mini_blocks_bytes = self.mini_blocks_bytes.max(u64::from(bytes));
            }
        }
        if self.cfg.arc_curve {
            self.run_minis(a, weight);
        }
        if self.samples.len() > self.cfg.max_samples {
            self.lower_threshold(a.now_ms);
        }
        self.spend(a.now_ms);
    }

    /// Drops the block with the largest hash until the table fits; the threshold falls to it.
    fn lower_threshold(&mut self, now_ms: u64) {
        let mut threshold = self.threshold;
        while self.samples.len() > self.cfg.max_samples {
            let Some((hash, key)) = self.by_hash.pop() else {
                break;
            };
            threshold = hash;
            self.forget(&key);
        }
        self.set_threshold(threshold, now_ms);
    }

    /// Lowers the threshold to `threshold`: every block at or above it leaves the sample,
    /// the miniatures shrink to the new rate, the ones too coarse stop.
    fn set_threshold(&mut self, threshold: u64, now_ms: u64) {
        self.threshold = self.threshold.min(threshold);
        while let Some(&(hash, key)) = self.by_hash.peek() {
            if hash < self.threshold {
                break;
            }
            self.by_hash.pop();
            self.forget(&key);
        }
        self.filter
            .threshold
            .store(self.threshold, Ordering::Relaxed);
        // The smallest miniatures that became too coarse stop (the largest always runs: it
        // stands for every larger size too).
        while self.minis.len() > 1 && self.coarse(self.first_mini) {
            self.minis.remove(0);
            self.first_mini += 1;
        }
        let rate = self.rate();
        let floor = self.mini_floor();
        for m in &mut self.minis {
            let scaled = ((m.size as f64 * rate) as u64).max(floor);
            // The scaled size only falls; a valid config stays valid.
            let _ = m.arc.set_limits(scaled, scaled, now_ms, &mut self.actions);
        }
        self.actions.clear();
    }

    /// Takes a block out of the sample (its table entry, its stamp, the miniatures).
    fn forget(&mut self, key: &BlockKey) {
        if let Some(s) = self.samples.remove(key) {
            self.tree.add(s.stamp as usize, -i64::from(s.bytes));
        }
        for m in &mut self.minis {
            m.arc.remove(key, &mut self.actions);
        }
    }

    /// Counts a sampled access against the budget of [`SamplerConfig::max_sampled_per_s`];
    /// over it, the rate halves (spatially, as for the size bound: the blocks in the upper
    /// half of the hash range leave).
    fn spend(&mut self, now_ms: u64) {
        let Some(budget) = self.cfg.max_sampled_per_s else {
            return;
        };
        let second = now_ms / 1000;
        if second != self.budget_second {
            self.budget_second = second;
            self.budget_spent = 0;
        }
        self.budget_spent += 1;
        if self.budget_spent > budget {
            self.budget_spent = 0;
            self.set_threshold(self.threshold / 2, now_ms);
        }
    }

    /// Renumbers the live stamps 1..=n in their order, so the tree stays bounded.
    fn renumber(&mut self) {
        let mut live: Vec<(u32, BlockKey)> =
            self.samples.iter().map(|(k, s)| (s.stamp, *k)).collect();
        live.sort_unstable();
        // At least twice the live stamps, so renumbering stays rare: at most 2 × max_samples
        // (or the starting size).
        self.tree = Fenwick::new(self.tree.len().max(2 * live.len()));
        for (i, (_, key)) in live.iter().enumerate() {
            let s = self.samples.get_mut(key).expect("live key");
            s.stamp = (i + 1) as u32;
            self.tree.add(i + 1, i64::from(s.bytes));
        }
        self.stamps = live.len();
    }

    fn mini_floor(&self) -> u64 {
        self.mini_blocks_bytes.max(512)
    }

    /// Whether the miniature of `sizes[i]` would hold too few blocks to mean anything.
    fn coarse(&self, i: usize) -> bool {
        let typical = self.mini_blocks_bytes.max(512) as f64;
        (self.cfg.sizes[i] as f64 * self.rate()) / typical < MIN_MINI_BLOCKS as f64
    }

    fn scaled(&self, size: u64) -> u64 {
        ((size as f64 * self.rate()) as u64).max(self.mini_floor())
    }

    fn new_mini(&self, size: u64) -> Mini {
        let scaled = self.scaled(size);
        let cfg = ArcConfig {
            c_min_bytes: scaled,
            c_max_bytes: scaled,
            ..self.cfg.arc_template.clone()
        };
        Mini {
            size,
            arc: Arc::new(cfg).expect("a scaled size above 0 is valid"),
            hits: 0.0,
            reads: 0.0,
        }
    }

    /// Runs one sampled access through the miniature ARCs.
    fn run_minis(&mut self, a: &Access, weight: f64) {
        if self.minis.is_empty() {
            // The first size not too coarse (the largest if all are).
            let last = self.cfg.sizes.len() - 1;
            self.first_mini = (0..last).find(|&i| !self.coarse(i)).unwrap_or(last);
            let first = self.new_mini(self.cfg.sizes[self.first_mini]);
            self.minis.push(first);
        }
        // The largest running cache never evicted; before it would, the next size starts as
        // its clone, with the history it would have had (the same).
        loop {
            let top = self.minis.last().expect("one mini at least");
            let next = self.first_mini + self.minis.len();
            if next >= self.cfg.sizes.len()
                || top.arc.size() + u64::from(a.bytes.max(1)) <= top.arc.c()
            {
                break;
            }
            let size = self.cfg.sizes[next];
            let scaled = self.scaled(size);
            let mut clone = top.clone();
            clone.size = size;
            let _ = clone
                .arc
                .set_limits(scaled, scaled, a.now_ms, &mut self.actions);
            self.minis.push(clone);
        }
        let access = a.arc_access();
        for m in &mut self.minis {
            let outcome = m.arc.access(&access, &mut self.actions);
            if !a.write {
                m.reads += weight;
                if outcome.is_hit() {
                    m.hits += weight;
                }
            }
        }
        self.actions.clear();
    }

    /// The fraction of the distinct blocks seen that the sample follows. Spatial sampling
    /// follows `R` of them on average, but a small sample is often 10-20% more or fewer
    /// (the count of blocks below the threshold is binomial), and every distance scaled by
    /// `1/R` is as far off: a uniform workload's curve shifts by that much. The filter's
    /// sketch counts the distinct blocks (±0.8%), so `followed / distinct` is a second
    /// estimate; the two are weighed by their variances (in log space): the sketch's for a
    /// small sample, `R` for a large one. 1 while nothing was left out.
    pub fn effective_rate(&self) -> f64 {
        let rate = self.rate();
        let distinct = self.filter.distinct();
        let followed = self.samples.len() as f64;
        if rate >= 1.0 || distinct < 1.0 || followed < 1.0 {
            return rate;
        }
        let counted = (followed / distinct).clamp(rate / 2.0, (rate * 2.0).min(1.0));
        let var_rate = (1.0 - rate) / followed;
        let sketch_error = 1.04 / f64::from(1u32 << (HLL_BITS / 2));
        let var_counted = sketch_error * sketch_error;
        let w = var_counted / (var_rate + var_counted);
        (w * rate.ln() + (1.0 - w) * counted.ln()).exp()
    }

    /// `R / R_eff` (distances and weights recorded at `1/R` are this far from the
    /// effective rate's) and the SHARDS-adj correction: the reads the sample missed or
    /// over-counted by chance beyond that, as weight to add at the shortest distance.
    fn scale_and_correction(&self) -> (f64, f64) {
        let k = self.rate() / self.effective_rate();
        let (_, reads) = self.filter.counted();
        let fix = if reads == 0 {
            0.0
        } else {
            reads as f64 - k * self.read_weight
        };
        (k, fix)
    }

    /// The LRU hit ratio of reads at each size: `(size, hit ratio)`.
    pub fn lru_curve(&self, sizes: &[u64]) -> Vec<Point> {
        let (k, fix) = self.scale_and_correction();
        curve_of(&self.histogram, k, fix, self.read_weight, sizes)
    }

    /// The ARC's hit ratio of reads at each configured size, from the miniature ARCs
    /// (sizes whose miniature is too coarse take the LRU value). A miniature of `R × S`
    /// stands for a cache of `S × R / R_eff`; the sizes asked for are interpolated between
    /// them in log size.
    pub fn arc_curve(&self) -> Vec<Point> {
        let lru = self.lru_curve(&self.cfg.sizes);
        // The reads the sample missed or over-counted by chance are mostly a few hot
        // blocks', which hit at every size: SHARDS-adj's correction, applied as hits.
        let (k, fix) = self.scale_and_correction();
        let points: Vec<(f64, f64)> = self
            .minis
            .iter()
            .filter(|m| k * m.reads + fix > 0.0)
            .map(|m| {
                (
                    m.size as f64 * k,
                    ((k * m.hits + fix) / (k * m.reads + fix)).clamp(0.0, 1.0),
                )
            })
            .collect();
        self.cfg
            .sizes
            .iter()
            .enumerate()
            .map(|(i, &size)| {
                if self.coarse(i) {
                    return lru[i];
                }
                match interpolate(&points, size as f64) {
                    Some(h) => (size, h),
                    None => lru[i],
                }
            })
            .collect()
    }

    /// The volumes the sampler keeps figures of.
    pub fn volumes(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.volumes.keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// A volume's reads' hit ratio in an LRU cache of each size shared with the rest of
    /// the pool (its reuse distances in the pool's stream). No SHARDS-adj correction: the
    /// filter counts the pool's reads, not each volume's.
    pub fn volume_lru_curve(&self, volume: u64, sizes: &[u64]) -> Vec<Point> {
        let Some(v) = self.volumes.get(&volume) else {
            return sizes.iter().map(|&s| (s, 0.0)).collect();
        };
        let k = self.rate() / self.effective_rate();
        curve_of(&v.histogram, k, 0.0, v.read_weight, sizes)
    }

    /// A volume's shares of writes, sequential and metadata accesses, and its share of
    /// the pool's accesses (in `Shares::of_pool`).
    pub fn volume_shares(&self, volume: u64) -> Shares {
        let Some(v) = self.volumes.get(&volume) else {
            return Shares::default();
        };
        if v.all_weight == 0.0 {
            return Shares::default();
        }
        Shares {
            write: v.write_weight / v.all_weight,
            sequential: v.sequential_weight / v.all_weight,
            metadata: v.metadata_weight / v.all_weight,
            of_pool: v.all_weight / self.all_weight.max(f64::MIN_POSITIVE),
        }
    }

    /// Bytes of a volume's distinct blocks touched in the last `window_ms`.
    pub fn volume_working_set_bytes(&self, volume: u64, window_ms: u64, now_ms: u64) -> f64 {
        let since = now_ms.saturating_sub(window_ms);
        let bytes: u64 = self
            .samples
            .iter()
            .filter(|(k, s)| k.volume == volume && s.last_ms >= since)
            .map(|(_, s)| u64::from(s.bytes))
            .sum();
        bytes as f64 / self.effective_rate()
    }

    /// Bytes of distinct blocks touched in the last `window_ms` (estimated from the sample).
    pub fn working_set_bytes(&self, window_ms: u64, now_ms: u64) -> f64 {
        let since = now_ms.saturating_sub(window_ms);
        let bytes: u64 = self
            .samples
            .values()
            .filter(|s| s.last_ms >= since)
            .map(|s| u64::from(s.bytes))
            .sum();
        bytes as f64 / self.effective_rate()
    }

    /// The share of sampled reads that were a block's first (no cache could have served
    /// them): since the sampler started, and over the last [`RECENT_MINUTES`] minutes of
    /// its clock (a workload still warming has many; the curves' top is 1 minus them).
    pub fn cold_shares(&self) -> (f64, f64) {
        let all = if self.read_weight > 0.0 {
            self.cold / self.read_weight
        } else {
            0.0
        };
        let (cold, reads) = self
            .recent
            .iter()
            .fold((0.0, 0.0), |(c, r), m| (c + m.1, r + m.2));
        (all, if reads > 0.0 { cold / reads } else { 0.0 })
    }

    /// Shares of writes, sequential and metadata accesses in the sample.
    pub fn shares(&self) -> Shares {
        if self.all_weight == 0.0 {
            return Shares::default();
        }
        Shares {
            write: self.write_weight / self.all_weight,
            sequential: self.sequential_weight / self.all_weight,
            metadata: self.metadata_weight / self.all_weight,
            of_pool: 1.0,
        }
    }

    /// Bytes the sampler holds: its tables, its tree and its miniature ARCs' headers.
    pub fn memory_bytes(&self) -> u64 {
        let table = self.samples.capacity() * (std::mem::size_of::<(BlockKey, Sample)>() + 1)
            + self.by_hash.capacity() * std::mem::size_of::<(u64, BlockKey)>();
        let tree = self.tree.tree.capacity() * std::mem::size_of::<i64>();
        let minis: u64 = self
            .minis
            .iter()
            .map(|m| {
                let headers = m
                    .arc
                    .kstats()
                    .iter()
                    .find(|k| k.0 == "hdr_size")
                    .map_or(0, |k| k.1);
                headers + std::mem::size_of::<Mini>() as u64
            })
            .sum();
        let volumes = self.volumes.capacity() * (std::mem::size_of::<(u64, VolumeTally)>() + 1)
            + self.volumes.len() * BUCKETS * std::mem::size_of::<f64>();
        (table + tree + volumes + self.histogram.capacity() * 8) as u64 + minis
    }

    /// Checks the sampler's own invariants (tests).
    pub fn check_invariants(&self) {
        assert!(self.samples.len() <= self.cfg.max_samples);
        assert_eq!(self.samples.len(), self.by_hash.len());
        let live: i64 = self.samples.values().map(|s| i64::from(s.bytes)).sum();
        assert_eq!(self.tree.prefix(self.tree.len()), live);
        for s in self.samples.values() {
            assert!(s.hash < self.threshold);
            assert!(s.stamp >= 1 && s.stamp as usize <= self.stamps);
        }
        for m in &self.minis {
            m.arc.check_invariants();
        }
    }
}

/// The value at `x` of a curve of `(size, ratio)` points ascending in size, interpolated in
/// log size; past the last point, the last value (a cache that never evicted stands for
/// every larger one); `None` before the first.
fn interpolate(points: &[(f64, f64)], x: f64) -> Option<f64> {
    let first = points.first()?;
    if x < first.0 * 0.999 {
        return None;
    }
    for w in points.windows(2) {
        let ((x0, y0), (x1, y1)) = (w[0], w[1]);
        if x <= x1 {
            let f = ((x.max(x0)).ln() - x0.ln()) / (x1.ln() - x0.ln()).max(f64::MIN_POSITIVE);
            return Some(y0 + f.clamp(0.0, 1.0) * (y1 - y0));
        }
    }
    points.last().map(|p| p.1)
}

/// Hit ratios at `sizes` from a histogram of reuse distances recorded at `1/R` (`k`:
/// `R / R_eff`; `fix`: SHARDS-adj's weight, added at the shortest distance; `reads`: the
/// histogram's reads, cold ones included).
fn curve_of(histogram: &[f64], k: f64, fix: f64, reads: f64, sizes: &[u64]) -> Vec<Point> {
    let total = k * reads + fix;
    if total <= 0.0 {
        return sizes.iter().map(|&s| (s, 0.0)).collect();
    }
    let mut cumulative = vec![0.0; histogram.len() + 1];
    for (i, w) in histogram.iter().enumerate() {
        cumulative[i + 1] = cumulative[i] + w;
    }
    sizes
        .iter()
        .map(|&size| {
            // Buckets wholly at or below `size` (in recorded distances: `size / k`) hit; the
            // shortest carries the correction.
            let (upto, part) = buckets_within(size as f64 / k);
            let partial = histogram.get(upto).map_or(0.0, |w| part * w);
            let mut hits = k * (cumulative[upto] + partial);
            if upto > 0 || part > 0.0 {
                hits += fix;
            }
            (size, (hits / total).clamp(0.0, 1.0))
        })
        .collect()
}

fn bucket_of(distance: f64) -> usize {
    if distance <= 1.0 {
        return 0;
    }
    // Bucket i holds (2^(i/8), 2^((i+1)/8)]: a distance of exactly 2^k fits a cache of 2^k.
    let edge = (distance.log2() * SUB_BUCKETS as f64).ceil() as usize;
    edge.saturating_sub(1).min(BUCKETS - 1)
}

/// How many buckets hold only distances at most `size`, and the share (in log size) of the
/// next one below `size`: its weight counts in that proportion, so a size between two
/// bucket edges does not jump to either.
fn buckets_within(size: f64) -> (usize, f64) {
    if size < 1.0 {
        return (0, 0.0);
    }
    let edge = size.log2() * SUB_BUCKETS as f64;
    // Guard against 2^k landing a hair below its integer.
    let whole = (edge + 1e-9).floor();
    if whole as usize >= BUCKETS {
        return (BUCKETS, 0.0);
    }
    (whole as usize, (edge - whole).max(0.0))
}

/// Exact curves, for checking the sampled ones: every access kept, every size replayed.
pub mod exact {
    use super::*;

    /// The exact LRU hit ratio of reads at each size, from exact reuse distances.
    pub fn lru_curve(accesses: &[Access], sizes: &[u64]) -> Vec<Point> {
        let mut last: HashMap<BlockKey, (usize, u32)> = HashMap::new();
        let mut tree = Fenwick::new(accesses.len() + 1);
        let mut distances = Vec::new();
        let mut reads = 0u64;
        for (i, a) in accesses.iter().enumerate() {
            let stamp = i + 1;
            let bytes = a.bytes.max(1);
            if let Some(&(prev, prev_bytes)) = last.get(&a.key) {
                if !a.write {
                    let between = tree.prefix(stamp - 1) - tree.prefix(prev);
                    distances.push(between as u64 + u64::from(bytes));
                }
                tree.add(prev, -i64::from(prev_bytes));
            }
            if !a.write {
                reads += 1;
            }
            tree.add(stamp, i64::from(bytes));
            last.insert(a.key, (stamp, bytes));
        }
        distances.sort_unstable();
        sizes
            .iter()
            .map(|&s| {
                let hits = distances.partition_point(|&d| d <= s);
                (
                    s,
                    if reads == 0 {
                        0.0
                    } else {
                        hits as f64 / reads as f64
                    },
                )
            })
            .collect()
    }

    /// The exact ARC hit ratio of reads at each size: a full-size ARC replayed per size.
    pub fn arc_curve(accesses: &[Access], sizes: &[u64], template: &ArcConfig) -> Vec<Point> {
        sizes
            .iter()
            .map(|&size| {
                let mut arc = Arc::new(ArcConfig {
                    c_min_bytes: size,
                    c_max_bytes: size,
                    ..template.clone()
                })
                .expect("valid size");
                let mut actions = Vec::new();
                let (mut hits, mut reads) = (0u64, 0u64);
                for a in accesses {
                    let access = a.arc_access();
                    let hit = arc.access(&access, &mut actions).is_hit();
                    actions.clear();
                    if !a.write {
                        reads += 1;
                        hits += u64::from(hit);
                    }
                }
                (
                    size,
                    if reads == 0 {
                        0.0
                    } else {
                        hits as f64 / reads as f64
                    },
                )
            })
            .collect()
    }

    /// Mean absolute difference of two curves' hit ratios, in points (0..100).
    pub fn mean_abs_error_points(a: &[Point], b: &[Point]) -> f64 {
        let n = a.len().min(b.len());
        if n == 0 {
            return 0.0;
        }
        100.0 * a.iter().zip(b).map(|(x, y)| (x.1 - y.1).abs()).sum::<f64>() / n as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(block: u64, now_ms: u64) -> Access {
        Access {
            key: BlockKey::new(1, block),
            bytes: 4096,
            write: false,
            sequential: false,
            metadata: false,
            now_ms,
        }
    }

    /// A small deterministic generator (no dependency for tests).
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 = mix(self.0);
            self.0 % n
        }
    }

    #[test]
    fn at_full_rate_the_lru_curve_is_exact() {
        let mut rng = Rng(7);
        let accesses: Vec<Access> = (0..20_000)
            .map(|i| read(rng.below(2000) * rng.below(2) + rng.below(50), i))
            .collect();
        let sizes: Vec<u64> = (12..=24).map(|s| 1u64 << s).collect();
        let mut s = Sampler::new(SamplerConfig {
            max_samples: 1 << 16,
            initial_rate: 1.0,
            sizes: sizes.clone(),
            arc_curve: false,
            ..SamplerConfig::default()
        })
        .unwrap();
        for a in &accesses {
            s.offer(a);
        }
        s.check_invariants();
        let exact = exact::lru_curve(&accesses, &sizes);
        let sampled = s.lru_curve(&sizes);
        assert!(
            exact::mean_abs_error_points(&exact, &sampled) < 1e-6,
            "{exact:?} vs {sampled:?}"
        );
    }

    #[test]
    fn the_table_stays_bounded_and_the_rate_falls_to_fit() {
        let mut s = Sampler::new(SamplerConfig {
            max_samples: 256,
            initial_rate: 1.0,
            ..SamplerConfig::default()
        })
        .unwrap();
        let mut rng = Rng(3);
        for i in 0..200_000 {
            s.offer(&read(rng.below(100_000), i));
            if i % 50_000 == 0 {
                s.check_invariants();
            }
        }
        s.check_invariants();
        assert!(s.tracked() <= 256);
        // 100k blocks, 256 tracked: the rate is near 256 / 100k.
        let rate = s.rate();
        assert!(rate > 0.001 && rate < 0.006, "{rate}");
        assert!(s.memory_bytes() < 4 << 20, "{}", s.memory_bytes());
    }

    #[test]
    fn sampled_curves_follow_the_exact_ones() {
        // Zipf-like: block = n² / N skews toward low numbers.
        let mut rng = Rng(11);
        let n = 200_000u64;
        let accesses: Vec<Access> = (0..400_000)
            .map(|i| {
                let x = rng.below(n);
                read(x * x / n, i)
            })
            .collect();
        let sizes: Vec<u64> = (20..=30).map(|s| 1u64 << s).collect();
        let cfg = SamplerConfig {
            max_samples: 4096,
            initial_rate: 0.1,
            sizes: sizes.clone(),
            ..SamplerConfig::default()
        };
        let mut s = Sampler::new(cfg.clone()).unwrap();
        for a in &accesses {
            s.offer(a);
        }
        s.check_invariants();
        let lru_err = exact::mean_abs_error_points(
            &exact::lru_curve(&accesses, &sizes),
            &s.lru_curve(&sizes),
        );
        assert!(lru_err < 2.0, "LRU error {lru_err} points");
        let arc_err = exact::mean_abs_error_points(
            &exact::arc_curve(&accesses, &sizes, &cfg.arc_template),
            &s.arc_curve(),
        );
        assert!(arc_err < 3.0, "ARC error {arc_err} points");
    }

    #[test]
    fn writes_shape_recency_but_only_reads_score_and_shares_add_up() {
        let mut s = Sampler::new(SamplerConfig {
            initial_rate: 1.0,
            sizes: vec![8192, 1 << 20],
            ..SamplerConfig::default()
        })
        .unwrap();
        let mut w = read(5, 0);
        w.write = true;
        s.offer(&w);
        s.offer(&read(5, 1)); // reuse at distance 4 KiB: a hit for both sizes
        let mut q = read(6, 2);
        q.sequential = true;
        s.offer(&q); // cold
        let lru = s.lru_curve(&[8192]);
        assert!((lru[0].1 - 0.5).abs() < 1e-9, "{lru:?}");
        let sh = s.shares();
        assert!((sh.write - 1.0 / 3.0).abs() < 1e-9);
        assert!((sh.sequential - 1.0 / 3.0).abs() < 1e-9);
        assert_eq!(sh.metadata, 0.0);
        assert!((s.working_set_bytes(10, 2) - 8192.0).abs() < 1e-9);
        // Two reads, one the first of its block.
        assert_eq!(s.cold_shares(), (0.5, 0.5));
    }

    #[test]
    fn a_budget_of_sampled_accesses_halves_the_rate_until_it_holds() {
        let mut s = Sampler::new(SamplerConfig {
            max_sampled_per_s: Some(10_000),
            ..SamplerConfig::default()
        })
        .unwrap();
        let mut rng = Rng(9);
        // 100,000 accesses a second over 4,096 blocks for five seconds.
        for i in 0..500_000u64 {
            s.offer(&read(rng.below(4096), i / 100));
        }
        s.check_invariants();
        let rate = s.rate();
        // 10,000 a second of 100,000: the rate settles at a power of two near 10%.
        assert!((1.0 / 32.0..=1.0 / 8.0).contains(&rate), "{rate}");
        // A stationary uniform workload over 16 MiB: the curve is still about linear.
        let c = s.lru_curve(&[4 << 20, 8 << 20, 32 << 20]);
        assert!(
            (c[0].1 - 0.25).abs() < 0.1 && (c[1].1 - 0.5).abs() < 0.1,
            "{c:?}"
        );
        assert!(c[2].1 > 0.95, "{c:?}");
        let shares = s.cold_shares();
        assert!(shares.0 < 0.05, "{shares:?}");
    }

    #[test]
    fn bad_configurations_are_refused() {
        for cfg in [
            SamplerConfig {
                initial_rate: 0.0,
                ..SamplerConfig::default()
            },
            SamplerConfig {
                sizes: vec![2, 1],
                ..SamplerConfig::default()
            },
            SamplerConfig {
                max_samples: 1,
                ..SamplerConfig::default()
            },
            SamplerConfig {
                max_sampled_per_s: Some(0),
                ..SamplerConfig::default()
            },
        ] {
            assert!(Sampler::new(cfg).is_err());
        }
    }
}

/// Block traces as sampler accesses (feature `trace`).
#[cfg(feature = "trace")]
pub mod trace {
    use std::path::Path;

    use larch_policy::BlockKey;
    use larch_sim::replay::UNTIMED_TICK_MS;
    use larch_sim::{Format, Op, TraceReader};

    use crate::Access;

    /// Most blocks one record may touch.
    pub const MAX_BLOCKS_PER_RECORD: u64 = 1 << 20;

    /// Reads a trace and calls `each` with every block access, in order, split into blocks
    /// of `block_size_bytes`; a trace without times advances by the simulator's tick per
    /// record. A request continuing where the previous one of its volume ended is
    /// sequential. Returns the records read; a malformed record is an error naming it.
    pub fn for_each_access(
        path: &Path,
        format: Option<Format>,
        block_size_bytes: u32,
        mut each: impl FnMut(&Access),
    ) -> Result<u64, String> {
        let mut reader = TraceReader::open(path, format).map_err(|e| e.to_string())?;
        let mut origin: Option<u64> = None;
        let mut now_ms = 0u64;
        let mut records = 0u64;
        let mut next_of: std::collections::HashMap<u64, u64> = Default::default();
        while let Some(record) = reader.next_record().map_err(|e| e.to_string())? {
            records += 1;
            let (first, count, bytes) = record
                .blocks(block_size_bytes, MAX_BLOCKS_PER_RECORD)
                .map_err(|e| format!("{}: record {records}: {e}", path.display()))?;
            match record.time_ms {
                Some(t) => {
                    let o = *origin.get_or_insert(t);
                    now_ms = now_ms.max(t.saturating_sub(o));
                }
                None => now_ms += UNTIMED_TICK_MS,
            }
            let sequential = next_of.get(&record.volume) == Some(&first);
            next_of.insert(record.volume, first + count);
            if next_of.len() > 1 << 16 {
                next_of.clear();
            }
            for block in first..first + count {
                each(&Access {
                    key: BlockKey::new(record.volume, block),
                    bytes,
                    write: record.op == Op::Write,
                    sequential,
                    metadata: false,
                    now_ms,
                });
            }
        }
        Ok(records)
    }
}

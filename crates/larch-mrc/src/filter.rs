//! The sampler's front: the spatial hash that picks the blocks followed, the lock-free
//! [`Filter`] a hot path asks (striped access counters, the HyperLogLog sketch of distinct
//! blocks, the threshold), and the seeded hash of the sampler's own tables.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use larch_policy::BlockKey;

/// Hashes block keys for the sampler's tables: keys are mixed with the sampler's own
/// finaliser, seeded like the spatial hash, rather than SipHash, which cost a measurable
/// share of the sampled path. A client cannot aim at one bucket without the seed, which
/// the daemon draws at random when it starts.
#[derive(Clone, Copy)]
pub(crate) struct KeyBuild(pub(crate) u64);

impl BuildHasher for KeyBuild {
    type Hasher = KeyHasher;
    fn build_hasher(&self) -> KeyHasher {
        KeyHasher(self.0)
    }
}

pub(crate) struct KeyHasher(u64);

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

pub(crate) type KeyMap<V> = HashMap<BlockKey, V, KeyBuild>;

/// The hash that decides which blocks are sampled: the same block always gets the same one.
pub fn spatial_hash(seed: u64, key: &BlockKey) -> u64 {
    mix(seed ^ mix(key.volume.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ key.block))
}

/// A seed drawn from the standard library's per-process random keys.
pub fn random_seed() -> u64 {
    std::collections::hash_map::RandomState::new().hash_one(0x6c61_7263_u64)
}

pub(crate) fn mix(mut z: u64) -> u64 {
    // SplitMix64's finaliser: every input bit reaches every output bit.
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

pub(crate) fn threshold_of(rate: f64) -> u64 {
    if rate >= 1.0 {
        u64::MAX
    } else {
        (rate * 18_446_744_073_709_551_616.0) as u64
    }
}

pub(crate) fn rate_of(threshold: u64) -> f64 {
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
    pub(crate) threshold: AtomicU64,
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
    /// The sketch's relative standard error (1.04 / sqrt(registers)).
    pub(crate) const SKETCH_ERROR: f64 = 1.04 / (1u32 << (HLL_BITS / 2)) as f64;

    /// A filter wanting the blocks whose hash is below `threshold`.
    pub(crate) fn new(seed: u64, threshold: u64) -> Filter {
        Filter {
            seed,
            threshold: AtomicU64::new(threshold),
            counts: Default::default(),
            registers: (0..1usize << HLL_BITS).map(|_| AtomicU8::new(0)).collect(),
        }
    }

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

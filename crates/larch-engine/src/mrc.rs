//! The sampled access log behind the miss-ratio curves (`larch advise`, the Analytics
//! page's advice panel): every client read and write of a block is offered to the pool's
//! [`larch_mrc::Sampler`], whose miniature ARCs give the ARC curve and whose reuse
//! distances give the LRU curve, the pool's and each volume's (a volume's: its reads' hit
//! ratio in the cache it shares with the others). The hot path pays one relaxed atomic add
//! per request, one hash per block and, for the sampled blocks only (a fraction that falls
//! as the footprint grows), one leaf lock. `mrc_sample=0` stops it.

use std::ops::RangeInclusive;

use larch_mrc::{Access, Filter, Sampler, SamplerConfig};
use larch_policy::BlockKey;
use serde::{Deserialize, Serialize};

use crate::lock::RankedMutex;

/// Most accesses a second the pool's sampler takes (its rate halves past it): with the
/// per-read filter, about 2% of one core at 220,000 reads a second (docs/mrc.md, "Cost").
pub const SAMPLED_PER_S: u64 = 10_000;

/// The windows over which working sets are reported: a minute, ten, an hour, a day.
pub const WORKING_SET_WINDOWS_S: [u64; 4] = [60, 600, 3600, 86_400];

/// A sampler's curves and what it saw.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Curves {
    /// (cache size in bytes, read hit ratio) of miniature ARCs (empty for a volume's).
    pub arc: Vec<(u64, f64)>,
    /// (cache size in bytes, read hit ratio) of an LRU cache, from reuse distances.
    pub lru: Vec<(u64, f64)>,
    /// Accesses sampled.
    pub sampled: u64,
    /// Blocks followed now.
    pub tracked: u64,
    /// The sampling rate now.
    pub rate: f64,
    /// Accesses counted in all (sampled or not).
    pub estimated_accesses: f64,
    /// Reads counted in all.
    pub estimated_reads: f64,
    /// (window in seconds, bytes of distinct blocks touched in it).
    pub working_set: Vec<(u64, f64)>,
    /// Share of accesses that were writes.
    pub write_share: f64,
    /// Share that continued a sequential stream.
    pub sequential_share: f64,
    /// Share of metadata.
    pub metadata_share: f64,
    /// Share of reads that were a block's first, since the sampler started.
    #[serde(default)]
    pub cold_share: f64,
    /// The same over the ten minutes up to the time the curves were read (0 when no read
    /// fell in them).
    #[serde(default)]
    pub recent_cold_share: f64,
    /// Bytes the sampler holds.
    pub memory_bytes: u64,
}

/// One sampled access log.
pub struct AccessLog {
    filter: std::sync::Arc<Filter>,
    sampler: RankedMutex<Sampler>,
}

impl AccessLog {
    /// A log with the default bound (8192 blocks followed), [`SAMPLED_PER_S`] and a random
    /// seed, so that no
    /// client can tell which blocks are sampled or aim at the tables' buckets.
    pub fn new() -> AccessLog {
        let sampler = Sampler::new(SamplerConfig {
            seed: larch_mrc::random_seed(),
            max_sampled_per_s: Some(SAMPLED_PER_S),
            ..SamplerConfig::default()
        })
        .expect("the default sampler configuration is valid");
        AccessLog {
            filter: sampler.filter(),
            sampler: RankedMutex::leaf(sampler),
        }
    }

    /// Offers the blocks of one client request; `now_ms` is asked only if a block is
    /// sampled.
    pub fn note(
        &self,
        volume: u64,
        blocks: RangeInclusive<u64>,
        how: Noted,
        now_ms: impl Fn() -> u64,
    ) {
        self.filter
            .count(blocks.end() - blocks.start() + 1, how.write);
        let seed = self.filter.seed();
        let mut held = None;
        for block in blocks {
            let key = BlockKey::new(volume, block);
            if self.filter.observe(larch_mrc::spatial_hash(seed, &key)) {
                let (sampler, now) = held.get_or_insert_with(|| (self.sampler.lock(), now_ms()));
                sampler.record(&Access {
                    key,
                    bytes: how.block_bytes,
                    write: how.write,
                    sequential: how.sequential,
                    metadata: false,
                    now_ms: *now,
                });
            }
        }
    }

    /// Bytes the sampler holds.
    pub fn memory_bytes(&self) -> u64 {
        self.sampler.lock().memory_bytes()
    }

    /// The curves now, at the sampler's sizes.
    pub fn curves(&self, now_ms: u64) -> Curves {
        curves_of(&self.sampler.lock(), now_ms)
    }

    /// A volume's curves now (its guid): its reads' LRU hit ratio in the pool's cache, its
    /// working sets and shares; `None` when none of its blocks was sampled.
    pub fn volume_curves(&self, volume: u64, now_ms: u64) -> Option<Curves> {
        let s = self.sampler.lock();
        if !s.volumes().contains(&volume) {
            return None;
        }
        let sizes = s.config().sizes.clone();
        let shares = s.volume_shares(volume);
        Some(Curves {
            arc: Vec::new(),
            lru: s.volume_lru_curve(volume, &sizes),
            sampled: 0,
            tracked: 0,
            rate: s.rate(),
            estimated_accesses: shares.of_pool * s.estimated_accesses(),
            estimated_reads: 0.0,
            working_set: WORKING_SET_WINDOWS_S
                .iter()
                .map(|&w| (w, s.volume_working_set_bytes(volume, w * 1000, now_ms)))
                .collect(),
            write_share: shares.write,
            sequential_share: shares.sequential,
            metadata_share: shares.metadata,
            cold_share: 0.0,
            recent_cold_share: 0.0,
            memory_bytes: 0,
        })
    }
}

impl Default for AccessLog {
    fn default() -> AccessLog {
        AccessLog::new()
    }
}

/// A sampler's curves and figures at `now_ms` (its clock).
pub fn curves_of(s: &Sampler, now_ms: u64) -> Curves {
    let sizes = s.config().sizes.clone();
    let shares = s.shares();
    Curves {
        arc: if s.config().arc_curve {
            s.arc_curve()
        } else {
            Vec::new()
        },
        lru: s.lru_curve(&sizes),
        sampled: s.sampled(),
        tracked: s.tracked() as u64,
        rate: s.rate(),
        estimated_accesses: s.estimated_accesses(),
        estimated_reads: s.estimated_reads(),
        working_set: WORKING_SET_WINDOWS_S
            .iter()
            .map(|&w| (w, s.working_set_bytes(w * 1000, now_ms)))
            .collect(),
        write_share: shares.write,
        sequential_share: shares.sequential,
        metadata_share: shares.metadata,
        cold_share: s.cold_shares(now_ms).0,
        recent_cold_share: s.cold_shares(now_ms).1,
        memory_bytes: s.memory_bytes(),
    }
}

impl std::fmt::Debug for AccessLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessLog")
            .field("rate", &self.filter.rate())
            .finish_non_exhaustive()
    }
}

/// What kind of request the blocks came with.
#[derive(Clone, Copy, Debug)]
pub struct Noted {
    /// The volume's block size.
    pub block_bytes: u32,
    /// A write.
    pub write: bool,
    /// It continued a sequential stream.
    pub sequential: bool,
}

//! One ARC as [`SHARDS`] independent [`crate::Arc`]s, each with its share of the limits:
//! the engine locks a shard per access instead of the whole cache, and the simulator
//! splits its ARC the same way so that both evict and feed alike (an ARC of 16 shards
//! is not quite one ARC of 16 times the size: each shard adapts on its own).

use crate::{ArcConfig, BlockKey};

/// Shards of an ARC.
pub const SHARDS: usize = 16;

/// The shard that holds `key`: a mix of volume and block, so that neighbouring blocks and
/// volumes spread evenly.
pub fn shard_of(key: &BlockKey) -> usize {
    let mut h = key.volume ^ key.block.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= h >> 29;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (h >> 40) as usize % SHARDS
}

/// The configuration of one shard of an ARC of these limits (each at least one byte).
pub fn shard_config(c_min_bytes: u64, c_max_bytes: u64) -> ArcConfig {
    let per_shard = |bytes: u64| (bytes / SHARDS as u64).max(1);
    let mut cfg = ArcConfig::new(per_shard(c_min_bytes), per_shard(c_max_bytes));
    // The growth rule's constants are pool-wide in OpenZFS: split them over the shards.
    cfg.grow_slack_bytes /= SHARDS as u64;
    cfg.grow_step_min_bytes /= SHARDS as u64;
    cfg
}

/// Each shard's kstats ([`crate::Arc::kstats`]) summed name by name: the shards all list
/// the same names in the same order. Fractions and flags are summed too; a caller that
/// shows them averages them.
pub fn sum_kstats(shards: impl IntoIterator<Item = Vec<(String, u64)>>) -> Vec<(String, u64)> {
    let mut shards = shards.into_iter();
    let mut sums = shards.next().unwrap_or_default();
    for stats in shards {
        for ((_, total), (_, value)) in sums.iter_mut().zip(stats) {
            *total += value;
        }
    }
    sums
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_spread_over_every_shard_and_configs_split_the_limits() {
        let mut seen = [0u32; SHARDS];
        for block in 0..16_000 {
            seen[shard_of(&BlockKey::new(1, block))] += 1;
        }
        for (i, n) in seen.iter().enumerate() {
            assert!((800..1200).contains(n), "shard {i} holds {n} of 16000");
        }
        let cfg = shard_config(32 << 20, 1 << 30);
        assert_eq!(cfg.c_max_bytes, (1 << 30) / SHARDS as u64);
        assert_eq!(cfg.c_min_bytes, (32 << 20) / SHARDS as u64);
        assert_eq!(shard_config(0, 0).c_max_bytes, 1);
    }
}

//! arcstats: the counters of the ARC, with OpenZFS kstat names where the meaning matches.

/// Event counters of an [`crate::Arc`]. Sizes and targets are read with
/// [`crate::Arc::kstats`], which adds them to these under their OpenZFS names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArcStats {
    /// Accesses served from DRAM.
    pub hits: u64,
    /// Accesses that had to read (from a cache device or the backing store).
    pub misses: u64,
    /// Demand reads of data found in DRAM.
    pub demand_data_hits: u64,
    /// Demand reads of data that missed.
    pub demand_data_misses: u64,
    /// Demand reads of metadata found in DRAM.
    pub demand_metadata_hits: u64,
    /// Demand reads of metadata that missed.
    pub demand_metadata_misses: u64,
    /// Prefetches of data already in DRAM.
    pub prefetch_data_hits: u64,
    /// Prefetches of data that had to read.
    pub prefetch_data_misses: u64,
    /// Prefetches of metadata already in DRAM.
    pub prefetch_metadata_hits: u64,
    /// Prefetches of metadata that had to read.
    pub prefetch_metadata_misses: u64,
    /// Hits in MRU.
    pub mru_hits: u64,
    /// Hits in MFU.
    pub mfu_hits: u64,
    /// Accesses that found an MRU ghost.
    pub mru_ghost_hits: u64,
    /// Accesses that found an MFU ghost.
    pub mfu_ghost_hits: u64,
    /// Hits in the uncached state.
    pub uncached_hits: u64,
    /// Hits on dirty (anon) blocks. Not an OpenZFS kstat: ZFS readers never find anon buffers.
    pub anon_hits: u64,
    /// Prefetch accesses.
    pub predictive_prefetch: u64,
    /// Demand reads that found a completed prefetch.
    pub demand_hit_predictive_prefetch: u64,
    /// Ghost and L2-only headers destroyed.
    pub deleted: u64,
    /// Headers passed over by eviction (prefetched blocks younger than `arc_min_prefetch_ms`).
    pub evict_skip: u64,
    /// Eviction passes that could not bring the size down to the target.
    pub evict_not_enough: u64,
    /// Bytes evicted from DRAM whose block was already on a cache device.
    pub evict_l2_cached: u64,
    /// Bytes evicted that could have gone to a cache device but had not.
    pub evict_l2_eligible: u64,
    /// Part of `evict_l2_eligible` evicted from MRU.
    pub evict_l2_eligible_mru: u64,
    /// Part of `evict_l2_eligible` evicted from MFU.
    pub evict_l2_eligible_mfu: u64,
    /// Bytes evicted that were not allowed on a cache device.
    pub evict_l2_ineligible: u64,
    /// Headers dropped because an access carried a newer generation (the block was overwritten).
    /// larch-only: ZFS identities never go stale.
    pub stale_drops: u64,
    /// Times `c` grew.
    pub grow_count: u64,
    /// Times `c` was reduced by memory pressure (`memory_indirect_count` in OpenZFS is close).
    pub shrink_count: u64,
}

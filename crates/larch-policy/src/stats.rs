//! arcstats: the counters of the ARC, with OpenZFS kstat names where the meaning matches,
//! and the help text and unit of every stat [`crate::Arc::kstats`] reports ([`describe`]).

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
    /// Demand reads that joined a prefetch still reading ([`crate::Arc::demand_joined`]).
    pub demand_iohit_predictive_prefetch: u64,
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
    /// Under the larch policy: times a block hit while in MFU passed MFU's cold end again
    /// instead of leaving (each spends one of its marks). Not an OpenZFS kstat.
    pub mfu_passes: u64,
    /// Under the larch policy: MRU ghost hits that entered MRU, not MFU, because all of
    /// MFU was read since the block was. Not an OpenZFS kstat.
    pub mfu_refused: u64,
    /// Under the larch policy: misses of blocks no ghost remembered that entered MFU
    /// because its admission sketch counted more reads of them lately than of MFU's
    /// coldest, unmarked block. Not an OpenZFS kstat.
    pub mfu_sketch_admits: u64,
    /// Times `c` grew.
    pub grow_count: u64,
    /// Times `c` was reduced by memory pressure (`memory_indirect_count` in OpenZFS is close).
    pub shrink_count: u64,
}

/// What an arcstat's value counts, so that a reader can name and scale it (Prometheus wants
/// bytes in metrics ending in `_bytes` and times in seconds, for instance).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatUnit {
    /// Things or events (hits, headers, TXGs), or a flag that is 0 or 1.
    Count,
    /// Bytes.
    Bytes,
    /// Microseconds.
    Micros,
    /// A fraction in 32-bit fixed point: [`crate::adapt::ONE`] is 100%.
    Fraction,
}

/// One arcstat of the policy as documented: what [`crate::Arc::kstats`] calls it, what it
/// counts, and in what unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KstatDef {
    /// Its arcstats name.
    pub name: &'static str,
    /// What it counts, as a help line shows it.
    pub help: &'static str,
    /// What its value is measured in.
    pub unit: StatUnit,
}

const fn count(name: &'static str, help: &'static str) -> KstatDef {
    KstatDef {
        name,
        help,
        unit: StatUnit::Count,
    }
}

const fn bytes(name: &'static str, help: &'static str) -> KstatDef {
    KstatDef {
        name,
        help,
        unit: StatUnit::Bytes,
    }
}

const fn fraction(name: &'static str, help: &'static str) -> KstatDef {
    KstatDef {
        name,
        help,
        unit: StatUnit::Fraction,
    }
}

/// The stats [`crate::Arc::kstats`] reports besides the per-state sizes.
const KSTATS: &[KstatDef] = &[
    count("hits", "accesses served from DRAM"),
    count(
        "misses",
        "accesses that had to read (from a cache device or the backing store)",
    ),
    count("demand_data_hits", "demand reads of data found in DRAM"),
    count("demand_data_misses", "demand reads of data that missed"),
    count(
        "demand_metadata_hits",
        "demand reads of metadata found in DRAM",
    ),
    count(
        "demand_metadata_misses",
        "demand reads of metadata that missed",
    ),
    count("prefetch_data_hits", "prefetches of data already in DRAM"),
    count(
        "prefetch_data_misses",
        "prefetches of data that had to read",
    ),
    count(
        "prefetch_metadata_hits",
        "prefetches of metadata already in DRAM",
    ),
    count(
        "prefetch_metadata_misses",
        "prefetches of metadata that had to read",
    ),
    count("mru_hits", "hits in MRU"),
    count("mru_ghost_hits", "accesses that found an MRU ghost"),
    count("mfu_hits", "hits in MFU"),
    count("mfu_ghost_hits", "accesses that found an MFU ghost"),
    count("uncached_hits", "hits in the uncached state"),
    count(
        "anon_hits",
        "hits on dirty (anon) blocks; larch only, ZFS readers never find anon buffers",
    ),
    count("deleted", "ghost and L2-only headers destroyed"),
    count(
        "evict_skip",
        "headers passed over by eviction (prefetched blocks younger than arc_min_prefetch_ms)",
    ),
    count(
        "evict_not_enough",
        "eviction passes that could not bring the size down to the target",
    ),
    bytes(
        "evict_l2_cached",
        "bytes evicted from DRAM whose block was already on a cache device",
    ),
    bytes(
        "evict_l2_eligible",
        "bytes evicted that could have gone to a cache device but had not",
    ),
    bytes(
        "evict_l2_eligible_mfu",
        "part of evict_l2_eligible evicted from MFU",
    ),
    bytes(
        "evict_l2_eligible_mru",
        "part of evict_l2_eligible evicted from MRU",
    ),
    bytes(
        "evict_l2_ineligible",
        "bytes evicted that were not allowed on a cache device",
    ),
    count("predictive_prefetch", "prefetch accesses"),
    count(
        "demand_hit_predictive_prefetch",
        "demand reads that found a completed prefetch",
    ),
    count(
        "demand_iohit_predictive_prefetch",
        "demand reads that joined a prefetch still reading",
    ),
    count(
        "stale_drops",
        "headers dropped because an access carried a newer generation (the block was overwritten); larch only",
    ),
    count(
        "mfu_passes",
        "times a block hit while in MFU passed MFU's cold end again instead of leaving (larch policy only)",
    ),
    count(
        "mfu_refused",
        "MRU ghost hits sent back to MRU because all of MFU was read more recently (larch policy only)",
    ),
    count(
        "mfu_sketch_admits",
        "misses of blocks no ghost remembered that entered MFU, not MRU, because MFU's admission sketch (of reads that found no header) counted more reads of them lately than of MFU's coldest, unmarked block (larch policy only)",
    ),
    count(
        "hash_elements",
        "headers tracked: resident, ghost and L2-only",
    ),
    bytes("c", "target size of the ARC"),
    bytes("c_min", "lower bound of the target size c"),
    bytes("c_max", "upper bound of the target size c (zfs_arc_max)"),
    bytes(
        "size",
        "bytes of data and metadata in DRAM (anon, MRU, MFU and uncached)",
    ),
    fraction(
        "meta",
        "metadata share of c, in 32-bit fixed point (4294967296 is 100%)",
    ),
    fraction(
        "pd",
        "MRU share of the data target, in 32-bit fixed point (4294967296 is 100%)",
    ),
    fraction(
        "pm",
        "MRU share of the metadata target, in 32-bit fixed point (4294967296 is 100%)",
    ),
    bytes(
        "p",
        "the FAST'03 paper's target for MRU (T1), in paper mode",
    ),
    count(
        "arc_no_grow",
        "1 while memory pressure keeps c from growing, else 0",
    ),
    bytes("hdr_size", "DRAM held by ARC headers"),
    bytes(
        "reuse_sketch_bytes",
        "DRAM held by the sketch of blocks' recent reads that l2arc_admit reads (0 while it is off)",
    ),
    bytes(
        "mfu_sketch_bytes",
        "DRAM held by MFU's admission sketch (larch policy only, kept once the ARC has filled)",
    ),
    count(
        "reuse_first_reads",
        "reads lately, as the reuse sketch counts them (halved with its counters), that found their block unread before; l2arc_admit feeds blocks read once too while reuse_second_reads is at least a quarter of this",
    ),
    count(
        "reuse_second_reads",
        "reads lately, as the reuse sketch counts them (halved with its counters), that found their block read once before",
    ),
    bytes(
        "data_size",
        "bytes of data in DRAM (anon, MRU, MFU and uncached)",
    ),
    bytes(
        "metadata_size",
        "bytes of metadata in DRAM (anon, MRU, MFU and uncached)",
    ),
];

/// The five sizes [`crate::Arc::kstats`] reports for one state, named `STATE_size`,
/// `STATE_data`, ... with the state described by `$what`.
macro_rules! state_kstats {
    ($($state:literal, $what:literal;)+) => {
        &[$(
            bytes(
                concat!($state, "_size"),
                concat!("bytes of data and metadata in ", $what),
            ),
            bytes(concat!($state, "_data"), concat!("bytes of data in ", $what)),
            bytes(
                concat!($state, "_metadata"),
                concat!("bytes of metadata in ", $what),
            ),
            bytes(
                concat!($state, "_evictable_data"),
                concat!("bytes of data in ", $what, " that eviction may take (neither dirty nor held)"),
            ),
            bytes(
                concat!($state, "_evictable_metadata"),
                concat!("bytes of metadata in ", $what, " that eviction may take (neither dirty nor held)"),
            ),
        )+]
    };
}

/// The per-state sizes, one group per [`crate::State`] (ghost and L2-only states count the
/// bytes of the blocks they remember, which are not in DRAM).
const STATE_KSTATS: &[KstatDef] = state_kstats! {
    "anon", "anon (dirty blocks not yet on the backing store)";
    "mru", "MRU (blocks used once recently)";
    "mru_ghost", "the MRU ghost list (blocks evicted from MRU, remembered without their data)";
    "mfu", "MFU (blocks used again)";
    "mfu_ghost", "the MFU ghost list (blocks evicted from MFU, remembered without their data)";
    "uncached", "the uncached state (blocks dropped once nobody holds them)";
    "l2c_only", "l2c_only (blocks known only to a cache device)";
};

/// The documentation of an arcstat that [`crate::Arc::kstats`] reports, or `None` for a
/// name it never reports (such as the engine's own stats).
pub fn describe(name: &str) -> Option<&'static KstatDef> {
    KSTATS.iter().chain(STATE_KSTATS).find(|d| d.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Arc, ArcConfig, ArcMode, State};

    #[test]
    fn every_kstat_the_arc_reports_is_described_once() {
        let mut names: Vec<&str> = KSTATS.iter().chain(STATE_KSTATS).map(|d| d.name).collect();
        let all = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all, "a kstat is described twice");
        for mode in [ArcMode::OpenZfs, ArcMode::Paper] {
            let mut config = ArcConfig::fixed(1 << 20);
            config.mode = mode;
            let arc = Arc::new(config).unwrap();
            let reported = arc.kstats();
            for (name, _) in &reported {
                let def = describe(name).unwrap_or_else(|| panic!("{name} has no help"));
                assert!(!def.help.is_empty(), "{name}");
            }
            // Nothing is described that is never reported: a renamed stat leaves no stale
            // help behind.
            for name in &names {
                assert!(
                    reported.iter().any(|(n, _)| n == name),
                    "{name} is described but not reported ({mode:?})"
                );
            }
        }
        assert_eq!(State::ALL.len() * 5, STATE_KSTATS.len());
        assert_eq!(describe("mru_ghost_size").unwrap().unit, StatUnit::Bytes);
        assert_eq!(describe("pd").unwrap().unit, StatUnit::Fraction);
        assert_eq!(describe("hits").unwrap().unit, StatUnit::Count);
        assert!(describe("l2_hits").is_none());
    }
}

//! The engine's counters and gauges, each declared once with its kind, unit and help text.
//! Together with the policy's kstats (documented in `larch_policy::stats`) they are the
//! arcstats (`larch status`, `/arcstats`, `/metrics`); names follow OpenZFS's kstats where
//! the meaning matches. [`document`] gives any arcstat's help and unit, which `/metrics`
//! turns into its help lines and unit-suffixed names.

use std::sync::atomic::{AtomicU64, Ordering};

pub use larch_policy::stats::StatUnit;

/// Whether a stat only grows (a counter) or goes up and down (a gauge).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatKind {
    /// Only grows (until a restart).
    Counter,
    /// A level: a size, a count in use, a time of the last event.
    Gauge,
}

/// One stat as declared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatDef {
    /// Its arcstats name.
    pub name: &'static str,
    /// Counter or gauge.
    pub kind: StatKind,
    /// What its value is measured in.
    pub unit: StatUnit,
    /// What it counts.
    pub help: &'static str,
}

/// The unit of a declared stat: `Count` unless the declaration says `in UNIT`.
macro_rules! unit {
    () => {
        StatUnit::Count
    };
    ($unit:ident) => {
        StatUnit::$unit
    };
}

/// What a stat's field holds: an atomic the engine updates as it goes, or a plain value
/// it computes when asked.
trait StatValue {
    fn value(&self) -> u64;
}

impl StatValue for AtomicU64 {
    fn value(&self) -> u64 {
        self.load(Ordering::Relaxed)
    }
}

impl StatValue for u64 {
    fn value(&self) -> u64 {
        *self
    }
}

macro_rules! stats {
    ($(#[$meta:meta])* pub struct $name:ident<$store:ty> {
        $( $field:ident: $kind:ident $(in $unit:ident)?, $help:literal; )+
    }) => {
        $(#[$meta])*
        #[derive(Debug, Default)]
        pub struct $name {
            $( #[doc = $help] pub $field: $store, )+
        }

        impl $name {
            /// Every stat of this group, as declared.
            pub const STATS: &'static [StatDef] = &[
                $( StatDef {
                    name: stringify!($field),
                    kind: StatKind::$kind,
                    unit: unit!($($unit)?),
                    help: $help,
                }, )+
            ];

            /// Current values, in declaration order.
            pub fn values(&self) -> Vec<(&'static str, u64)> {
                vec![ $( (stringify!($field), StatValue::value(&self.$field)), )+ ]
            }
        }
    };
}

stats! {
    /// Counters of the read path, the L2ARC and memory pressure.
    pub struct EngineStats<AtomicU64> {
        l2_hits: Counter, "reads served from a cache device";
        l2_misses: Counter, "misses, in a pool with cache devices, that went to the backing store";
        l2_read_bytes: Counter in Bytes, "bytes read from cache devices for hits";
        l2_write_bytes: Counter in Bytes, "bytes of data written to cache devices";
        l2_cksum_bad: Counter, "cache-device reads whose checksum did not match (served from the backing store)";
        l2_io_error: Counter, "cache-device reads that failed (served from the backing store)";
        l2_evicted_in_flight: Counter, "cache-device reads whose copy the ring's evict hand passed and wrote over while they were in flight, so that it did not verify (served from the backing store; not in l2_cksum_bad, not a device error; larch's)";
        l2_feeds: Counter, "feeds that wrote something";
        l2_writes_sent: Counter, "feed batches written";
        l2_writes_error: Counter, "feed batches that failed";
        l2_evicted: Counter, "copies the ring's evict hand overwrote";
        l2_wasted_feed_bytes: Counter in Bytes, "bytes written to cache devices and overwritten without ever being read";
        l2_size: Gauge in Bytes, "logical bytes of blocks indexed on cache devices";
        l2_asize: Gauge in Bytes, "physical bytes of blocks indexed on cache devices";
        l2_mru_asize: Gauge in Bytes, "part of l2_asize written from MRU (not prefetched)";
        l2_mfu_asize: Gauge in Bytes, "part of l2_asize written from MFU (not prefetched)";
        l2_prefetch_asize: Gauge in Bytes, "part of l2_asize that was prefetched";
        l2_bufc_data_asize: Gauge in Bytes, "part of l2_asize holding data";
        l2_bufc_metadata_asize: Gauge in Bytes, "part of l2_asize holding metadata";
        l2_blocks: Gauge, "blocks indexed on cache devices";
        l2_tombstones: Counter, "tombstones queued for cache-device logs (overwrites of cached blocks)";
        follower_dropped_copies: Counter, "cached copies (ARC and cache devices) dropped because the writer of a volume this node follows changed their blocks";
        l2_log_forgotten: Counter, "cache-device logs emptied (or, where that failed, recorded in l2-format to be formatted): of a device removed or faulted (an I/O error, a failed rebuild), and of a device still rebuilding when a TXG ran";
        l2_hdr_limit_skips: Counter, "feeds skipped because the L2 index reached l2arc_meta_percent";
        l2_rebuild_lowmem: Counter, "entries a rebuild did not restore because the L2 index reached l2arc_meta_percent";
        memory_indirect_count: Counter, "times the ARC shrank because available memory fell below zfs_arc_sys_free";
        memory_available_bytes: Gauge in Bytes, "available memory minus zfs_arc_sys_free at the last check (0 when below)";
        memory_trims: Counter, "times freed memory was given back to the system because the process held far more than the cache accounts for";
        iohits: Counter, "reads that joined a read of the same block already in flight";
        backing_reads: Counter, "backing-store reads issued by the cache";
    }
}

stats! {
    /// Counters of the write path.
    pub struct WriteStats<AtomicU64> {
        txg_syncs: Counter, "TXGs synced";
        txg_last_sync_us: Gauge in Micros, "duration of the last TXG sync";
        txg_sync_us: Counter in Micros, "total duration of TXG syncs";
        txg_last_sync_bytes: Gauge in Bytes, "bytes the last TXG wrote";
        txg_blocks_written: Counter, "blocks written by TXG syncs";
        txg_sync_waits: Counter, "sync writes and FLUSHes made durable by syncing a TXG (no usable log device)";
        txg_sync_errors: Counter, "volumes whose TXG failed (a backing-store write or flush error, or tombstones that could not be made durable)";
        dmu_tx_delay: Counter, "writes the throttle delayed";
        dmu_tx_delay_us: Counter in Micros, "total throttle delay";
        dmu_tx_dirty_over_max: Counter, "writes that waited at the dirty limit";
        write_partial_deferred: Counter, "pieces of async writes that joined a pending partial write, acknowledged before their block was read (larch's)";
        write_partial_merges: Counter, "blocks read (or covered) and merged with the partial writes waiting for them (larch's)";
        write_partial_errors: Counter, "merges whose block read failed, failing the volume (larch's)";
        volume_failure_record_errors: Counter, "volume failures the pool's state directory could not record: after a restart those volumes' lost blocks would read as older bytes (larch's)";
        zil_commit_count: Counter, "log blocks written for sync writes and FLUSHes (each a group commit: one write and one flush for every record waiting)";
        zil_itx_count: Counter, "records written to the log device";
        zil_itx_copied_bytes: Counter in Bytes, "bytes of record data written to the log device";
        zil_commit_us: Counter in Micros, "total time of log commits";
    }
}

stats! {
    /// Stats the engine computes when asked, rather than counts: each a plain value,
    /// filled in by `Engine::arcstats`.
    #[derive(Clone, Copy)]
    pub struct ComputedStats<u64> {
        dirty_bytes: Gauge in Bytes, "bytes dirty in the open and the syncing TXG, and held by partial writes waiting for their merge";
        dirty_data_max: Gauge in Bytes, "the dirty limit in force";
        write_partial_pending: Gauge, "blocks with partial writes waiting for their merge (larch's)";
        zil_itx_pending: Gauge, "writes waiting for a sync write or FLUSH to put them in the log: at most one per block of the open and the syncing TXG (larch's)";
        txg_open: Gauge, "the open TXG";
        txg_synced: Gauge, "the newest TXG on the backing stores";
        l2_hdr_size: Gauge in Bytes, "DRAM held by the L2 index";
        install_queued_bytes: Gauge in Bytes, "bytes of reads that ended and wait for their ARC shard's next lock hold to enter the ARC (not in size; the report's own pass then installs them) (larch's)";
        mrc_size: Gauge in Bytes, "DRAM held by the sampled access logs of the miss-ratio curves (larch's)";
        l2_ndev: Gauge, "cache devices of the pool";
        l2_rebuild_success: Counter, "cache-device rebuilds that completed";
        l2_rebuild_io_errors: Counter, "rebuild reads that failed";
        l2_rebuild_cksum_lb_errors: Counter, "log blocks a rebuild found with a bad checksum";
        l2_rebuild_bufs: Counter, "entries rebuilds restored";
        l2_rebuild_size: Gauge in Bytes, "bytes of the entries the cache devices' rebuilds restored";
        l2_rebuild_log_blks: Counter, "log blocks rebuilds read";
        events_kept: Gauge, "events the pool's event log holds in memory, at most 1,000 (`larch events`; larch's)";
        events_bytes: Gauge in Bytes, "bytes of the events held in memory, as JSON (larch's)";
        events_recorded: Counter, "events recorded since the pool was opened (larch's)";
        events_skipped: Counter, "lines of the event file skipped when it was read at open: torn or damaged (larch's)";
    }
}

/// The declarations of the computed stats.
pub const COMPUTED: &[StatDef] = ComputedStats::STATS;

/// The kind of any arcstat: declared here for the engine's, by the OpenZFS rule for the
/// policy's (sizes, targets and fractions are gauges; events are counters).
pub fn kind_of(name: &str) -> StatKind {
    if let Some(def) = describe(name) {
        return def.kind;
    }
    let policy_gauge = matches!(
        name,
        "c" | "c_min" | "c_max" | "p" | "meta" | "pd" | "pm" | "arc_no_grow" | "hash_elements"
    ) || ["size", "_data", "_metadata"]
        .iter()
        .any(|suffix| name.ends_with(suffix));
    if policy_gauge {
        StatKind::Gauge
    } else {
        StatKind::Counter
    }
}

/// The declaration of one of the engine's own stats.
pub fn describe(name: &str) -> Option<StatDef> {
    EngineStats::STATS
        .iter()
        .chain(WriteStats::STATS)
        .chain(COMPUTED)
        .find(|d| d.name == name)
        .copied()
}

/// The help text and unit of any arcstat: the engine's declaration for its own, the
/// policy's documentation (`larch_policy::stats::describe`) for the ARC's; `None` for a
/// name neither reports.
pub fn document(name: &str) -> Option<(&'static str, StatUnit)> {
    match describe(name) {
        Some(def) => Some((def.help, def.unit)),
        None => larch_policy::stats::describe(name).map(|def| (def.help, def.unit)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_declared_once() {
        let mut names: Vec<&str> = EngineStats::STATS
            .iter()
            .chain(WriteStats::STATS)
            .chain(COMPUTED)
            .map(|d| d.name)
            .collect();
        let all = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all, "a stat is declared twice");
        assert_eq!(kind_of("l2_size"), StatKind::Gauge);
        assert_eq!(kind_of("l2_hits"), StatKind::Counter);
        assert_eq!(kind_of("mru_evictable_data"), StatKind::Gauge);
        assert_eq!(kind_of("mfu_ghost_hits"), StatKind::Counter);
        assert_eq!(kind_of("c"), StatKind::Gauge);
    }

    #[test]
    fn every_arcstat_the_engine_reports_is_declared_or_the_policys() {
        let engine = crate::Engine::new(64 << 20);
        let policy: Vec<String> = larch_policy::Arc::new(larch_policy::ArcConfig::fixed(1 << 20))
            .unwrap()
            .kstats()
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        let reported = engine.arcstats();
        for (name, _) in &reported {
            assert!(
                describe(name).is_some() || policy.contains(name),
                "{name} is reported but declared nowhere"
            );
            assert!(document(name).is_some(), "{name} has no help text");
        }
        assert_eq!(
            document("txg_sync_us"),
            Some(("total duration of TXG syncs", StatUnit::Micros))
        );
        assert_eq!(
            document("mfu_evictable_data").map(|d| d.1),
            Some(StatUnit::Bytes)
        );
        for def in EngineStats::STATS
            .iter()
            .chain(WriteStats::STATS)
            .chain(COMPUTED)
        {
            assert!(
                reported.iter().any(|(name, _)| name == def.name),
                "{} is declared but not reported",
                def.name
            );
        }
        engine.shutdown();
    }
}

//! The tunables' defaults, in one table that the engine and the simulator both read.
//!
//! larch-engine's `tunables` table declares each tunable (its kind, range and help) and
//! takes its default from [`DEFAULTS`], field by field under the tunable's own name;
//! larch-sim's `SimTunables` starts from the same values. The values are larch's, which
//! are OpenZFS's where larch has not changed them (docs/engine.md says where it has).
//!
//! Two defaults are decided where the knowledge is, not here, and so have no field:
//! - `zfs_arc_max`: the pool's ARC size (`arc_max_bytes` in `pool.json`), which the engine
//!   stores when it starts a pool; the simulator's run configuration gives its own.
//! - `zfs_dirty_data_max`: 10% of the machine's RAM, at most
//!   [`DIRTY_DATA_MAX_CAP_BYTES`] (OpenZFS's rule); the engine reads the RAM from
//!   `/proc/meminfo`, and the simulator, which has no machine, takes the cap.

/// At most this much dirty data by default (`zfs_dirty_data_max` is 10% of RAM up to it).
pub const DIRTY_DATA_MAX_CAP_BYTES: u64 = 4 << 30;

/// Every tunable's default but the two decided elsewhere (see the module documentation),
/// by the tunable's name. Sizes are in bytes; flags are `bool`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TunableDefaults {
    /// `zfs_arc_min` (0: chosen from `zfs_arc_max` when used).
    pub zfs_arc_min: u64,
    /// `zfs_arc_policy`: 0 the ARC, 1 larch's refinements of it ([`crate::ArcPolicy`]).
    pub zfs_arc_policy: u64,
    /// `zfs_arc_sys_free` (0: 1/32 of RAM when used).
    pub zfs_arc_sys_free: u64,
    /// `zfs_txg_timeout`, seconds.
    pub zfs_txg_timeout: u64,
    /// `zfs_vdev_async_write_max_active`.
    pub zfs_vdev_async_write_max_active: u64,
    /// `zfs_dirty_data_sync_percent`.
    pub zfs_dirty_data_sync_percent: u64,
    /// `zfs_delay_min_dirty_percent`.
    pub zfs_delay_min_dirty_percent: u64,
    /// `zfs_delay_scale`, ns.
    pub zfs_delay_scale: u64,
    /// `l2arc_write_max`, bytes.
    pub l2arc_write_max: u64,
    /// `l2arc_write_boost`, bytes.
    pub l2arc_write_boost: u64,
    /// `l2arc_headroom`.
    pub l2arc_headroom: u64,
    /// `l2arc_headroom_boost`, percent.
    pub l2arc_headroom_boost: u64,
    /// `l2arc_meta_percent`.
    pub l2arc_meta_percent: u64,
    /// `l2arc_rebuild_blocks_min_l2size`, bytes.
    pub l2arc_rebuild_blocks_min_l2size: u64,
    /// `l2arc_feed_secs`.
    pub l2arc_feed_secs: u64,
    /// `l2arc_feed_min_ms`.
    pub l2arc_feed_min_ms: u64,
    /// `l2arc_feed_again`.
    pub l2arc_feed_again: bool,
    /// `l2arc_feed_follow` (larch's).
    pub l2arc_feed_follow: bool,
    /// `l2arc_noprefetch`.
    pub l2arc_noprefetch: bool,
    /// `l2arc_nowrite` (larch's).
    pub l2arc_nowrite: bool,
    /// `l2arc_io_uring` (larch's).
    pub l2arc_io_uring: bool,
    /// `l2arc_mfuonly`.
    pub l2arc_mfuonly: u64,
    /// `l2arc_admit` (larch's).
    pub l2arc_admit: bool,
    /// `l2arc_enabled` (larch's).
    pub l2arc_enabled: bool,
    /// `l2arc_rebuild_enabled`.
    pub l2arc_rebuild_enabled: bool,
    /// `zfs_prefetch_disable`.
    pub zfs_prefetch_disable: bool,
    /// `zfetch_max_distance`, bytes.
    pub zfetch_max_distance: u64,
    /// `write_partial_defer` (larch's).
    pub write_partial_defer: bool,
    /// `nbd_idle_yield` (larch's).
    pub nbd_idle_yield: bool,
    /// `mrc_sample` (larch's).
    pub mrc_sample: bool,
    /// `object_read_around`, bytes (larch's).
    pub object_read_around: u64,
    /// `object_l2_prefetch` (larch's).
    pub object_l2_prefetch: bool,
}

/// The defaults.
pub const DEFAULTS: TunableDefaults = TunableDefaults {
    zfs_arc_min: 0,
    zfs_arc_policy: 0,
    zfs_arc_sys_free: 0,
    zfs_txg_timeout: 5,
    zfs_vdev_async_write_max_active: 32,
    zfs_dirty_data_sync_percent: 20,
    zfs_delay_min_dirty_percent: 60,
    zfs_delay_scale: 500_000,
    l2arc_write_max: 32 << 20,
    l2arc_write_boost: 32 << 20,
    l2arc_headroom: 8,
    l2arc_headroom_boost: 200,
    l2arc_meta_percent: 33,
    l2arc_rebuild_blocks_min_l2size: 0,
    l2arc_feed_secs: 1,
    l2arc_feed_min_ms: 200,
    l2arc_feed_again: true,
    l2arc_feed_follow: true,
    l2arc_noprefetch: true,
    l2arc_nowrite: true,
    l2arc_io_uring: true,
    l2arc_mfuonly: 0,
    l2arc_admit: false,
    l2arc_enabled: true,
    l2arc_rebuild_enabled: true,
    zfs_prefetch_disable: false,
    zfetch_max_distance: 8 << 20,
    write_partial_defer: true,
    nbd_idle_yield: true,
    mrc_sample: true,
    object_read_around: 64 << 10,
    object_l2_prefetch: true,
};

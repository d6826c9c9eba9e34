//! The larch engine: volumes served over NBD through an ARC in DRAM and persistent L2ARC
//! cache devices, in front of slow backing stores.
//!
//! # Read path
//! A read is split into `volblocksize` blocks. For each block: a buffer in the ARC is a hit
//! (one shard lock of [`engine::SHARDS`], never a global lock); otherwise one reader leads
//! and the others wait for it (concurrent misses share one I/O); the leader reads the
//! cache device if the L2 index has this generation of the block, verifies the bytes
//! against the checksum in the index, and falls back to the backing store on any failure
//! (counted in `l2_cksum_bad`/`l2_io_error`); the block then enters the ARC.
//!
//! # Write path (write-through for now)
//! A write is merged into whole blocks (read-modify-write through the cache for partial
//! blocks). Under the **gate**: every cache-device copy of those blocks is tombstoned and
//! the tombstones are committed (durable); the blocks get new generations and enter the
//! ARC dirty. Then the backing store is written (and flushed for FUA), the blocks become
//! clean, and the client gets its reply. FLUSH is an fdatasync of the backing store, which
//! covers every acknowledged write on every connection.
//!
//! # Why no restart can serve stale data from a cache device
//! 1. A copy enters a cache device's log only in a feed batch, and a feed batch is written
//!    under the gate after checking that each block's generation is still current.
//! 2. A write changes a block's generation only under the gate, after the tombstones for
//!    every indexed copy of the block are durable. So when the backing store receives new
//!    bytes for a block, every logged copy of older bytes is already dead in the log, and
//!    no feed can log an older copy afterwards (it would fail the check in 1).
//! 3. A rebuild applies tombstones (newest first), so it returns only copies whose bytes
//!    were current when the device was last written. Blocks written while a rebuild is
//!    still running are remembered and their restored copies tombstoned instead.
//! 4. If a tombstone cannot be made durable, the device's headers are zeroed (the log is
//!    invalidated) and the device is faulted: a restart formats it empty.
//!
//! The cost: a write of a block that has a cache-device copy waits for one log commit on
//! that device (a small write and a flush); writes of other blocks do not.

pub mod backing;
pub mod engine;
pub mod latency;
pub mod manage;
pub mod pool;
pub mod tunables;
pub mod volume;

pub use backing::{BackingStore, LatencyModel};
pub use engine::{CacheDevice, CacheMode, DeviceIo, DeviceState, Engine, Tunables, VolumeInfo};
pub use latency::{LatencyHistogram, LatencySnapshot};
pub use pool::{
    CacheDeviceConfig, DemoSizes, Pool, PoolConfig, VolumeConfig, create_demo, new_guid,
};
pub use volume::Volume;

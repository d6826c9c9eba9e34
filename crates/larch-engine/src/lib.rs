//! The larch engine: volumes served over NBD through an ARC in DRAM and persistent L2ARC
//! cache devices, in front of slow backing stores.
//!
//! # Read path
//! A read is split into `volblocksize` blocks. For each block: a buffer in the ARC is a hit
//! (one shard lock of [`engine::SHARDS`], never a global lock); otherwise one reader leads
//! and the others wait for it (concurrent misses share one I/O); the leader reads the
//! cache device if the L2 index ([`l2index`]) has a readable copy of the block, verifies
//! the bytes against the checksum in the index, and falls back to the backing store on any
//! failure (counted in `l2_cksum_bad`/`l2_io_error`); the block then enters the ARC.
//!
//! # Write path
//! A write is merged into whole blocks (read-modify-write through the cache for partial
//! blocks). Under the **gate**, each block's cache-device copies leave the L2 index and a
//! tombstone for each is appended to its device's open log block; the block gets a new
//! generation and enters the ARC dirty and the open transaction group. Async writes are
//! acknowledged then; sync writes once their records are in the intent log on the log
//! device, or once their TXG is synced. The syncer writes each TXG to the backing stores
//! after committing the tombstones. `docs/write-path.md` has the details.
//!
//! # Why no restart can serve stale data from a cache device
//! The rule: **before a backing store receives new bytes for a block, every copy of older
//! bytes that a cache-device rebuild could still find is dead in that device's durable
//! log.** Why it holds:
//! 0. Every copy logged on a cache device and not yet passed by its evict hand is either in
//!    the L2 index (readable, or marked bad after a failed read: bad copies stay in the
//!    index for this reason) or has a tombstone appended: a feed or a rebuild that cannot
//!    index a logged copy tombstones it at once.
//! 1. A write appends tombstones for every indexed copy of its blocks (under the gate,
//!    before the new generation exists). A feed batch is written without the gate, but its
//!    placements are indexed under the gate only if their block's generation is still the
//!    one the feed copied; otherwise they are tombstoned (0). The feed holds `feed_io` from
//!    its write until then.
//! 2. Only the syncer writes dirty blocks to backing stores, and it first takes `feed_io`
//!    (waiting out a feed in flight, so the tombstones of 1 are appended) and commits every
//!    device's open log block. So the tombstones of every older copy are durable before
//!    the new bytes are written.
//! 3. A rebuild applies tombstones (newest first), so it returns only copies whose bytes
//!    were current when the device was last written. Blocks written while a rebuild is
//!    still running are remembered and their restored copies tombstoned instead; so are
//!    the blocks an intent-log replay rewrote (their tombstones may not have been durable
//!    at the crash), and the log keeps those records until every rebuild has ended.
//! 4. If a tombstone cannot be made durable, the device's headers are zeroed (the log is
//!    invalidated) and the device is faulted: a restart formats it empty.
//! 5. A cache device added at runtime after any write is formatted, never rebuilt: its
//!    log could hold copies those writes superseded without tombstones.
//!
//! The cost: one log commit (a small write and a flush) per cache device per TXG that
//! superseded copies on it; writes themselves do no cache-device I/O.

pub mod backing;
pub mod engine;
pub mod l2index;
pub mod latency;
pub mod manage;
pub mod pool;
pub mod report;
pub mod tunables;
pub mod units;
pub mod uring;
pub mod volume;

pub use backing::{BackingStore, LatencyModel};
pub use engine::{
    CacheDevice, CacheMode, DeviceIo, DeviceState, Engine, LogHandle, SyncMode, Tunables,
    VolumeInfo, WriteStats,
};
pub use latency::{LatencyHistogram, LatencySnapshot};
pub use pool::{
    CacheDeviceConfig, DemoSizes, Pool, PoolConfig, PoolLock, VolumeConfig, create_demo, new_guid,
    write_private_state_file, write_state_file,
};
pub use report::PoolReport;
pub use volume::Volume;

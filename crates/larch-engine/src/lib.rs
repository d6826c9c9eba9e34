//! The larch engine: volumes served over NBD through an ARC in DRAM and persistent L2ARC
//! cache devices, in front of slow backing stores, with ZFS's write path (dirty data,
//! transaction groups, an intent log on a log device).
//!
//! # Map
//! The engine is a set of parts, each a type whose methods are that part's flows; a flow
//! that spans parts holds (as `Arc`s, wired once when the engine is built) the few other
//! parts it needs. No part's module names [`Engine`], and the crate's modules import one
//! another without a cycle.
//! - [`arc`]: the ARC's shards (policy, buffers, reads in flight, the L2 index) —
//!   `ArcCache`, sized by `ArcSizer`;
//! - [`read`]: the read path — `Reader` (ARC, L2ARC, backing store);
//! - [`l2`]: the L2ARC — `L2Arc`: the cache devices and their add, remove, fault, feed,
//!   rebuild and verified reads;
//! - [`txg`]: the write path — `Txg` (dirty data, TXG state, writes, FLUSH, the throttle's
//!   one dirty-limit rule), its `IntentLog` (the log device, the group commit, replay,
//!   detach), the `Syncer` (its own thread) and `PartialWrites` (writes smaller than a
//!   block, with their merge threads);
//! - [`coherence`]: why no restart serves stale data, and the state that argument relies
//!   on; [`volumes`]: the one table of volumes by slot, and what a volume is
//!   (`volumes::info`);
//! - `run`: what the parts share to run (shutdown, the background runtime, generations);
//!   [`files`]: state files and device locks; [`error`]: the parts' error types;
//! - [`engine`]: the [`Engine`], the assembly: it builds the parts, wires them, owns their
//!   threads (the syncer, the ARC sizer, one feeder per cache device), and hands each
//!   library call to the part whose flow it is;
//! - [`volume`] and [`nbd`]: a volume as clients use it, and served over NBD; [`pool`]
//!   and [`manage`]: a pool's state directory and its changes; [`tunables`], [`stats`],
//!   [`report`]: what a user sets and sees; [`events`]: what happened to the pool, when
//!   (`larch events`), recorded by every part through the one `Events` the engine holds.
//!
//! # Read path
//! A read is split into `volblocksize` blocks. For each block: a buffer in the ARC is a
//! hit (one shard lock of [`arc::SHARDS`], never a global lock); otherwise one reader
//! leads and the others wait for it; the leader reads the cache device if the L2 index
//! has a readable copy, verifies it, and falls back to the backing store on any failure
//! (counted in `l2_cksum_bad`/`l2_io_error`, or `l2_evicted_in_flight` when the ring wrote
//! over the copy during the read); the block then enters the ARC through its shard's
//! install queue (`arc::install`), which the next holder of the shard's lock applies first,
//! so an L2 hit, too, takes one shard lock.
//!
//! # Write path
//! A write is merged into whole blocks, each copied into a buffer of its own. Under the
//! gate, each block's cache-device copies leave the L2 index and get a tombstone queued;
//! the block gets a new generation and enters the ARC dirty and the open TXG. Async
//! writes are acknowledged then; sync writes once their records are in the intent log,
//! or once their TXG is synced. The syncer commits the queued tombstones, then writes the
//! TXG to the backing stores. `docs/write-path.md` has the details; [`coherence`] has the
//! argument that no restart can serve stale data.
//!
//! # Lock order
//! Locks are taken in this order, never against it; two locks of one rank are never held
//! together. Debug builds check every acquisition of the ranked locks ([`lock`]) and panic
//! on the first one out of order.
//! 1. `feed_io` — one feed's I/O at a time, and the syncer's tombstone commit; held
//!    across cache-device I/O, by background work only (feeders, syncer, rebuild end,
//!    device removal), never by a client's request.
//! 2. the gate — orders generation changes (writes) against the indexing of feed batches
//!    and rebuilds. Writers take it briefly; it is never held across device I/O except
//!    while a rebuild puts its restored entries into the index (no I/O, but long for a
//!    big device).
//! 3. the ARC size controller's state, held while it resizes every shard.
//! 4. a cache device's writer — its ring and log I/O (feeds, commits).
//! 5. one ARC shard — policy, buffers, in-flight reads, L2 index. The hit path takes
//!    this one lock and nothing else, and so does an L2 hit: a read that ended queues its
//!    install on the shard's lock-free queue (no lock), which every holder of this lock
//!    applies first, under the same hold and taking nothing else.
//! 6. the coherence sets — the feed watch, the rebuild watch, the tombstone queues.
//! 7. a volume's pending partial writes — writes smaller than a block waiting for the
//!    block's read; a writer reserves its dirty bytes (the TXG state) while holding it.
//! 8. the TXG state — shared by writers and the syncer; never held across I/O.
//! 9. the log device's queue and group commit (`larch_zil::LogDevice`'s state lock,
//!    unranked: another crate's) — writers append their records under the TXG lock;
//!    leaders and waiters take it alone; never held across I/O; nothing is taken while
//!    it is held.
//! 10. leaves — the device list, the volume table, the log device slot, the io_uring
//!     state, fault notes, thread handles, the event log: nothing else is taken while
//!     one is held. So an event may be recorded with locks of ranks 1 to 8 held, never
//!     with a leaf's.
//!
//! Outside the ranks: the statics of the pool's record files in `pool::records`
//! (`DISTRUSTED_LOCK`, `L2_SEQUENCES_LOCK`: one read-modify-write of `l2-format` or
//! `l2-sequences.json` at a time) come after every lock above — the distrust sink takes
//! its static while the engine holds `feed_io` and the sink's slot (a leaf) — and nothing
//! is taken while one is held. The event log's save lock (`events::Events::save`) is
//! taken with no other lock held, before the log's own (a leaf). `l2::uring`'s own
//! mutexes (a ring's submission state, its pool of aligned buffers) are taken by
//! cache-device reads, which hold no other lock,
//! and (the pool's) by the drop of a read's buffer, which may be under a shard's lock when
//! the ARC evicts the block; they take nothing inside. A thread's own ring needs none.
//!
//! The `Volume`'s write stripes (async mutexes per block) come before all of them: a
//! write holds its stripes until its blocks are dirty in the ARC. Before the stripes comes
//! a volume's change lock (`Volume::set_properties`, `Volume::resize`: one change of its
//! properties or size at a time), a plain mutex held across I/O by those calls only; a
//! shrink takes every stripe under it.

pub mod arc;
pub mod backing;
pub mod coherence;
pub mod engine;
pub mod error;
pub mod events;
pub mod files;
pub mod l2;
pub mod latency;
mod lock;
pub mod manage;
pub mod mrc;
pub mod nbd;
pub mod pool;
pub mod read;
pub mod report;
mod run;
pub mod stats;
mod system;
#[cfg(test)]
mod testing;
pub mod tunables;
pub mod txg;
pub use larch_policy::units;
pub mod volume;
pub mod volumes;

pub use arc::{BlockBuf, SHARDS};
pub use backing::{BackingStore, LatencyModel, ZeroMode};
pub use engine::Engine;
pub use error::{
    ChangeError, DetachError, DistrustError, RecordError, SyncError, VolumeTableError, WriteError,
};
pub use events::{Event, EventKind, Events};
pub use l2::{CacheDevice, DeviceIo, DeviceState};
pub use latency::{LatencyHistogram, LatencySnapshot};
pub use pool::{
    CacheDeviceConfig, ConfigLock, DemoSizes, FAILED_VOLUMES_FILE, L2_SEQUENCES_FILE, Pool,
    PoolConfig, PoolLock, VolumeConfig, clear_failed_volume, create_demo, is_object_url, lock_file,
    log_records_to_replay, new_guid, node_name, read_failed_volumes, write_private_state_file,
    write_state_file,
};
pub use report::PoolReport;
pub use stats::{EngineStats, WriteStats};
pub use tunables::Tunables;
pub use txg::LogHandle;
pub use volume::{Volume, VolumeError};
pub use volumes::{
    CacheMode, FailureSink, LogBias, PropertyValue, SyncMode, VolumeEntry, VolumeFailure,
    VolumeInfo, VolumeProps, VolumeSpec,
};

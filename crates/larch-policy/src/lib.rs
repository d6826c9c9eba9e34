//! The ARC as a pure, deterministic state machine: no I/O, no clock, no threads.
//!
//! The daemon and the simulator drive the same code. Callers pass in the time
//! (`now_ms`) with every operation and get back what happened ([`Outcome`]) and what
//! they must do about it ([`Action`]: free this buffer, drop that cache-device copy).
//!
//! # Theory
//!
//! **The paper's ARC** (Megiddo & Modha, FAST 2003) keeps `c` pages in two lists, T1 (seen
//! once recently) and T2 (seen at least twice), and remembers the identities of pages it
//! evicted from each in two ghost lists, B1 and B2. A hit in B1 says T1 was too small and
//! moves the target `p` for T1 up; a hit in B2 moves it down. `|T1| + |B1| <= c` and the
//! whole directory is at most `2c` pages. [`ArcMode::Paper`] is that algorithm, exactly,
//! counted in bytes instead of pages; it exists to validate larch against the paper's
//! published hit ratios.
//!
//! **OpenZFS 2.2+** ([`ArcMode::OpenZfs`]) changes it in ways that matter for a storage
//! cache, and larch follows them (the default configuration, [`ArcConfig::new`], takes two
//! changes from the paper: ghost lists bounded like its directory and ghost hits weighted
//! by its learning rate, undamped; [`ArcConfig::openzfs`] is OpenZFS's balancing exactly;
//! docs/arc.md, "Balancing: three modes"):
//! 1. Blocks have variable sizes and a type, data or metadata. Instead of one `p` there are
//!    three fractions (fixed point, 2^32 = 100%): `meta` (metadata share of `c`), `pd` (MRU
//!    share of data) and `pm` (MRU share of metadata). Ghost hits are accumulated in bytes
//!    per ghost list and type; each eviction pass turns the deltas into damped, capped
//!    adjustments of the three fractions (see [`adapt`]). Data ghost hits weigh 1/5 as much
//!    as metadata ghost hits when balancing `meta` (`zfs_arc_meta_balance` = 500).
//! 2. Eviction order: MRU metadata, MFU metadata, MRU data, MFU data, each down to its
//!    target. Each ghost list is bounded by half the bytes of the other three live lists
//!    (not by `c` as in the paper), which limits false ghost hits.
//! 3. A hit in MRU moves the block to MFU only if it comes more than `ARC_MINTIME` (62 ms)
//!    after the previous access, so a burst of reads of one block is not "frequency". A
//!    block read by a prefetch is not promoted by the demand read that consumes it; a ghost
//!    hit on a prefetched block returns it to MRU, not MFU. Prefetched blocks younger than
//!    `arc_min_prefetch_ms` (1 s) are passed over by eviction (`evict_skip`) while the ARC
//!    is within `c_max`.
//! 4. Dirty blocks (state `anon`) and blocks held by a caller are on no list and are never
//!    evicted. `c` moves between `c_min` and `c_max`: it grows as the cache fills and
//!    shrinks on memory pressure; both are operations here ([`Arc::grow`], [`Arc::shrink`]).
//! 5. A ghost that still has a copy on a cache device becomes `l2c_only` instead of being
//!    forgotten, and a later access to it counts as a new MRU entry.
//!
//! **Where larch differs from OpenZFS**, and why:
//! - Eviction is synchronous: every operation leaves `size <= c` unless everything left is
//!   unevictable (dirty, held, or a young prefetch), in which case `evict_not_enough` counts
//!   it. OpenZFS lets size overshoot `c` and evicts from a background thread; a pure state
//!   machine has no background, and the engine decides when to call it.
//! - A hit moves the block to the head of its list. OpenZFS gets the same effect from
//!   reference counting (a header leaves its list while held and returns to the head);
//!   larch also has holds ([`Arc::hold`] / [`Arc::release`]) with the same meaning.
//! - Block identity is `(volume, block)` plus a **generation**. ZFS is copy-on-write, so an
//!   identity never names two contents; larch overwrites in place, so every write bumps the
//!   generation, and an access with a different generation than the header's finds a stale
//!   header: it is dropped (any cache-device copy with it, [`Action::InvalidateL2`]) and the
//!   access is a miss. See DESIGN.md §4.
//! - Ghost sizes are bounded after every operation, and the bounds are checked by
//!   [`Arc::check_invariants`].
//!
//! **The larch policy** ([`ArcPolicy::Larch`], `zfs_arc_policy=larch`) keeps all of the
//! above and changes four rules, after what S3-FIFO and W-TinyLFU showed: an MFU block
//! counts its hits (up to [`MAX_MARKS`]) and spends one to pass MFU's cold end again
//! instead of leaving (only a hit on an unmarked block moves it to the hot end); while
//! the ARC has room, MRU beyond its target (which starts at
//! 1/32, not 1/2) hands its coldest block to MFU, so a loop or scan longer than the cache
//! cycles through MRU and leaves MFU in place; an MRU ghost hit enters MRU, not MFU,
//! and does not grow MRU's share, when all of MFU was read after its block was; and a
//! miss of a block no ghost remembers enters MFU, displacing MFU's coldest block, when
//! that block has no hit since it entered MFU and a count-min sketch of the reads that
//! found no header (the [`reuse`] sketch, over 4 cache sizes of blocks) counts the missed
//! block read at least [`FREQ_ADMIT_READS`] times and more often: W-TinyLFU's admission
//! duel, where the ghosts' reach ends.
//! docs/arc.md has why, and BENCHMARKS.md "Issue 40" the hit ratios against libCacheSim's
//! policies. Switchable at run time ([`Arc::set_policy`]); the paper's mode has only the
//! ARC.
//!
//! [`Lru`] implements the same [`Policy`] trait as a baseline.
//!
//! Beside the ARC, the crate holds the other decisions the engine and the simulator must
//! make alike: which blocks a feed writes to a cache device and when ([`feed`]), how
//! a cache device's ring places records and where its evict hand goes ([`ring`]), how
//! one ARC is split into independently locked shards ([`shards`]), when reads are
//! sequential enough to read ahead ([`prefetch`]), which blocks were read lately, for the
//! feed's admission rule ([`reuse`]), and how long a writer waits as dirty
//! data nears its limit ([`throttle`]); the latency scale of every histogram
//! ([`buckets`]), so that simulated and measured latencies read alike; and the tunables'
//! defaults ([`tunables`]), so that both start from the same values.

pub mod adapt;
mod arc;
pub mod buckets;
pub mod feed;
mod index;
mod list;
mod lru;
pub mod prefetch;
pub mod reuse;
pub mod ring;
pub mod shards;
pub mod stats;
pub mod testing;
pub mod throttle;
pub mod tunables;
pub mod units;

pub use arc::{
    Arc, ArcConfig, ArcMode, ArcPolicy, BlockInfo, ConfigError, FREQ_ADMIT_READS,
    FREQ_WINDOW_PER_BLOCK, GhostBound, MAX_MARKS, Restore,
};
pub use list::{HEADER_BYTES, KeyHasher};
pub use lru::Lru;
pub use stats::ArcStats;

/// A block of a volume. With the header's generation it is the block's identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockKey {
    /// The volume (its guid or any caller-chosen id).
    pub volume: u64,
    /// The block number within the volume.
    pub block: u64,
}

impl BlockKey {
    /// The key of `block` in `volume`.
    pub fn new(volume: u64, block: u64) -> BlockKey {
        BlockKey { volume, block }
    }
}

/// Data or metadata, as the caller tags a read (OpenZFS `arc_buf_contents_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BufType {
    /// User data.
    Data = 0,
    /// Metadata: balanced separately and preferred by the L2 feed.
    Metadata = 1,
}

/// ARC states. The numbers are OpenZFS's and are persisted in cache-device log entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    /// Dirty: written, not yet on the backing store. Never evicted.
    Anon = 0,
    /// Recently used: seen once (or again within `ARC_MINTIME`).
    Mru = 1,
    /// Identity of a block evicted from MRU.
    MruGhost = 2,
    /// Frequently used: seen again after `ARC_MINTIME`, or after a ghost hit.
    Mfu = 3,
    /// Identity of a block evicted from MFU.
    MfuGhost = 4,
    /// Known only to a cache device: no DRAM copy, no ghost history.
    L2cOnly = 5,
    /// Read with primarycache excluding it: dropped as soon as nobody holds it.
    Uncached = 6,
}

impl State {
    /// All states, in OpenZFS order.
    pub const ALL: [State; 7] = [
        State::Anon,
        State::Mru,
        State::MruGhost,
        State::Mfu,
        State::MfuGhost,
        State::L2cOnly,
        State::Uncached,
    ];

    /// The OpenZFS name of the state, as used in arcstats (`mru_ghost`, `l2c_only`, ...).
    pub fn name(self) -> &'static str {
        match self {
            State::Anon => "anon",
            State::Mru => "mru",
            State::MruGhost => "mru_ghost",
            State::Mfu => "mfu",
            State::MfuGhost => "mfu_ghost",
            State::L2cOnly => "l2c_only",
            State::Uncached => "uncached",
        }
    }

    /// True for states that hold the block's data in DRAM.
    pub fn is_resident(self) -> bool {
        matches!(
            self,
            State::Anon | State::Mru | State::Mfu | State::Uncached
        )
    }
}

/// One read of one block, as the policy sees it.
#[derive(Clone, Copy, Debug)]
pub struct Access {
    /// The block.
    pub key: BlockKey,
    /// The block's current generation (bumped by every write of the block).
    pub generation: u64,
    /// Logical size of the block in bytes.
    pub size_bytes: u32,
    /// Data or metadata.
    pub buf_type: BufType,
    /// A prefetch (read-ahead) rather than a demand read.
    pub prefetch: bool,
    /// The block may be written to a cache device (the volume's secondarycache allows it).
    pub l2cache: bool,
    /// The volume's primarycache excludes the block: keep it only while held.
    pub uncached: bool,
    /// The caller's time in milliseconds; it must not go backwards.
    pub now_ms: u64,
}

impl Access {
    /// A demand read of a data block of `size_bytes`, eligible for the cache device.
    pub fn data(key: BlockKey, size_bytes: u32, now_ms: u64) -> Access {
        Access {
            key,
            generation: 0,
            size_bytes,
            buf_type: BufType::Data,
            prefetch: false,
            l2cache: true,
            uncached: false,
            now_ms,
        }
    }
}

/// What an access found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The data is in DRAM; `state` is where it was found.
    Hit {
        /// The state the block was in before the access.
        state: State,
    },
    /// The data must be read: from the cache device when `on_l2`, else from the backing store.
    /// `found` is the ghost or L2-only header the access found, if any.
    Miss {
        /// The ghost, L2-only or stale state found for the key, if any.
        found: Option<State>,
        /// A valid copy of this generation is on a cache device.
        on_l2: bool,
    },
}

impl Outcome {
    /// True for [`Outcome::Hit`].
    pub fn is_hit(&self) -> bool {
        matches!(self, Outcome::Hit { .. })
    }
}

/// Something the caller must do because of an operation: the policy only decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// The block's data left DRAM: free its buffer. `to` is the state the header moved to
    /// (a ghost, `l2c_only`), or `None` when the header was destroyed.
    Evict {
        /// The block.
        key: BlockKey,
        /// Its generation.
        generation: u64,
        /// The resident state it left.
        from: State,
        /// Where its header went, if anywhere.
        to: Option<State>,
    },
    /// A header without data (ghost or `l2c_only`) was destroyed.
    Forget {
        /// The block.
        key: BlockKey,
        /// Its generation.
        generation: u64,
        /// The state it was in.
        from: State,
    },
    /// The cache-device copy of this generation must no longer be served (the block was
    /// overwritten or its header dropped): write a tombstone, drop the index entry.
    InvalidateL2 {
        /// The block.
        key: BlockKey,
        /// The generation whose copy is invalid.
        generation: u64,
    },
}

/// Hit and miss totals every policy keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HitCounters {
    /// Accesses served from DRAM.
    pub hits: u64,
    /// Accesses that had to read.
    pub misses: u64,
}

/// A replacement policy over variable-size blocks, as the simulator drives it.
pub trait Policy {
    /// A short name (`arc`, `arc-paper`, `lru`).
    fn name(&self) -> &'static str;
    /// One read of one block. Actions are appended to `actions`.
    fn access(&mut self, access: &Access, actions: &mut Vec<Action>) -> Outcome;
    /// Drops the block (trim, or invalidation by the caller).
    fn remove(&mut self, key: &BlockKey, actions: &mut Vec<Action>);
    /// Bytes of data held in DRAM.
    fn resident_bytes(&self) -> u64;
    /// The current target size in bytes (`c` for the ARC).
    fn target_bytes(&self) -> u64;
    /// Number of headers tracked (resident and ghost).
    fn tracked_headers(&self) -> usize;
    /// Hit and miss totals.
    fn counters(&self) -> HitCounters;
    /// Walks every structure and panics with the values if an invariant is broken.
    fn check_invariants(&self);
    /// Named counters and sizes (arcstats for the ARC); empty for policies without them.
    fn kstats(&self) -> Vec<(String, u64)> {
        Vec::new()
    }
    /// A hint that `key` is read next: start loading what its access reads first, while
    /// the caller finishes the access before it. No effect on what the policy decides.
    fn hint_next(&self, _key: &BlockKey) {}
}

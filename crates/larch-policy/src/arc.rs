//! The ARC state machine. The module documentation of the crate holds its theory.
//!
//! One file, because every transition, eviction pass and size update keeps the same
//! private invariants of the header slab, the lists and the per-state sizes
//! ([`Arc::check_invariants`] walks them); what stands alone is elsewhere (`adapt`: the
//! fractions' arithmetic; `list`: the slab and its lists; `stats`: the counters).

use std::fmt;

use crate::adapt::{self, ONE};
use crate::index::prefetch_line;
use crate::list::{
    FLAG_DIRTY, FLAG_HAS_L2, FLAG_L2CACHE, FLAG_PREFETCH, FLAG_UNCACHED, FLAG_WRITTEN, Header,
    List, NIL, Slab, hash_key,
};
use crate::reuse::ReuseSketch;
use crate::{Access, Action, ArcStats, BlockKey, BufType, HitCounters, Outcome, Policy, State};

/// Which balancing the ARC uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArcMode {
    /// OpenZFS 2.2+: `meta`/`pd`/`pm` fractions, `ARC_MINTIME` before MRU → MFU; ghost
    /// bounds, weights and damping as [`ArcConfig`] sets them (the default configuration
    /// takes the paper's; [`ArcConfig::openzfs`] OpenZFS's).
    OpenZfs,
    /// The FAST'03 paper's algorithm with its single target `p`, for validation.
    Paper,
}

/// Which replacement policy runs over the ARC's lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArcPolicy {
    /// The ARC as [`ArcMode`] balances it.
    Arc,
    /// larch's refinements of the ARC (OpenZFS balancing only; the crate documentation,
    /// "The larch policy"): an MFU block counts its hits (up to [`MAX_MARKS`]) and each
    /// lets it pass MFU's cold end once more instead of leaving (a hit moves it to MFU's
    /// hot end only when it has no mark yet); while the ARC has room,
    /// MRU beyond its target hands its coldest block to MFU; an MRU ghost hit whose
    /// block was read before all of MFU was enters MRU and leaves the balance alone; and a
    /// miss no ghost remembers enters MFU when a sketch of such misses counts it read
    /// at least [`FREQ_ADMIT_READS`] times and more often than MFU's coldest, unmarked
    /// block.
    Larch,
}

impl ArcPolicy {
    /// Every policy, in the order of their `zfs_arc_policy` values (0, 1).
    pub const ALL: [ArcPolicy; 2] = [ArcPolicy::Arc, ArcPolicy::Larch];

    /// The policy a `zfs_arc_policy` value names (anything above 1 counts as 1).
    pub fn from_tunable(value: u64) -> ArcPolicy {
        ArcPolicy::ALL[value.min(1) as usize]
    }

    /// Its name, as `zfs_arc_policy` and `larch sim replay --policy` spell it.
    pub fn name(self) -> &'static str {
        match self {
            ArcPolicy::Arc => "arc",
            ArcPolicy::Larch => "larch",
        }
    }
}

/// MRU's starting share of each target (`pd`, `pm`). Under the larch policy MFU is
/// filled while the ARC has room (`fill_mfu`), so MRU starts small (1/32, between
/// W-TinyLFU's 1% window and S3-FIFO's 10% queue) and ghost hits grow it where recency
/// pays; BENCHMARKS.md "Issue 40" has the starting shares measured (0, 1/32, 1/8, 1/2).
fn starting_mru_share(policy: ArcPolicy) -> u64 {
    match policy {
        ArcPolicy::Arc => ONE / 2,
        ArcPolicy::Larch => ONE / 32,
    }
}

/// Most hits an MFU block under [`ArcPolicy::Larch`] keeps count of.
pub const MAX_MARKS: u8 = 3;

/// Under [`ArcPolicy::Larch`], the blocks MFU's admission sketch counts reads of, per block
/// the ARC holds when full: its window. Measured (BENCHMARKS.md "Issue 40"): 2, 4, 8 and
/// 16 won the same cells (26 of 35); 4 had the best mean, at 16 bytes of DRAM per cached
/// block.
pub const FREQ_WINDOW_PER_BLOCK: u64 = 4;

/// Under [`ArcPolicy::Larch`], the reads lately that found no header (the one that misses
/// included) that let a block missing from the ARC and from its ghosts enter MFU
/// (`mfu_sketch_admits`): a block read twice is not yet frequent, and a scan's blocks are
/// read once. Measured: 2 and 4 won 26 and 25 of 35 cells, 3 26 with a better mean.
pub const FREQ_ADMIT_READS: u8 = 3;

/// Sizes and tunables of an [`Arc`]. Defaults are OpenZFS's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArcConfig {
    /// Balancing algorithm.
    pub mode: ArcMode,
    /// Lower bound of the target `c` (`zfs_arc_min`).
    pub c_min_bytes: u64,
    /// Upper bound of the target `c` (`zfs_arc_max`).
    pub c_max_bytes: u64,
    /// An MRU hit later than this after the previous access promotes to MFU (`ARC_MINTIME`, 62 ms).
    pub mfu_min_time_ms: u64,
    /// Prefetched blocks younger than this are not evicted (`zfs_arc_min_prefetch_ms`, 1000).
    pub min_prefetch_ms: u64,
    /// Weight of data ghost hits against metadata ones, in percent (`zfs_arc_meta_balance`, 500).
    pub meta_balance: u64,
    /// Smallest growth step of `c` (OpenZFS: 128 KiB, `SPA_OLD_MAXBLOCKSIZE`).
    pub grow_step_min_bytes: u64,
    /// `c` grows while the size is within this of it (OpenZFS: 2 × 16 MiB).
    pub grow_slack_bytes: u64,
    /// How large the ghost lists may grow (OpenZFS mode only).
    pub ghost_bound: GhostBound,
    /// Weigh ghost hits by the inverse ratio of the ghost list sizes when moving `pd` and
    /// `pm`, as the paper moves `p` (a hit in the smaller ghost list says more). OpenZFS
    /// weighs every ghost-hit byte the same.
    pub ghost_hits_weighted: bool,
    /// Slow the fractions' moves past 20% and 80% (OpenZFS does).
    pub damp_extremes: bool,
    /// The replacement policy over the lists.
    pub policy: ArcPolicy,
}

/// The bound on the ghost lists in [`ArcMode::OpenZfs`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GhostBound {
    /// OpenZFS 2.2+: each ghost list holds at most half the bytes of the other three live
    /// lists (MRU/MFU × data/metadata).
    HalfOfOthers,
    /// The paper's directory bounds: MRU + MRU ghost <= c, and everything <= 2c.
    Directory,
}

impl ArcConfig {
    /// larch's defaults with `c` between `c_min_bytes` and `c_max_bytes`, starting at
    /// `c_min_bytes`: OpenZFS 2.2+ with the paper's ghost sizing and learning rate (the
    /// ghost lists bounded as the paper's directory, ghost hits weighted by the ghost size
    /// ratio, no damping). BENCHMARKS.md has the measurements behind this choice.
    pub fn new(c_min_bytes: u64, c_max_bytes: u64) -> ArcConfig {
        ArcConfig {
            ghost_bound: GhostBound::Directory,
            ghost_hits_weighted: true,
            damp_extremes: false,
            ..ArcConfig::openzfs(c_min_bytes, c_max_bytes)
        }
    }

    /// OpenZFS 2.2+ exactly as it balances (ghost lists at half the rest, equal weights,
    /// damping), with `c` between `c_min_bytes` and `c_max_bytes`.
    pub fn openzfs(c_min_bytes: u64, c_max_bytes: u64) -> ArcConfig {
        ArcConfig {
            mode: ArcMode::OpenZfs,
            c_min_bytes,
            c_max_bytes,
            mfu_min_time_ms: 62,
            min_prefetch_ms: 1000,
            meta_balance: 500,
            grow_step_min_bytes: 128 << 10,
            grow_slack_bytes: 32 << 20,
            ghost_bound: GhostBound::HalfOfOthers,
            ghost_hits_weighted: false,
            damp_extremes: true,
            policy: ArcPolicy::Arc,
        }
    }

    /// OpenZFS defaults with a fixed target: `c_min = c_max = size_bytes`.
    pub fn fixed(size_bytes: u64) -> ArcConfig {
        ArcConfig::new(size_bytes, size_bytes)
    }

    /// OpenZFS 2.2+ balancing (see [`ArcConfig::openzfs`]) with a fixed target.
    pub fn openzfs_fixed(size_bytes: u64) -> ArcConfig {
        ArcConfig::openzfs(size_bytes, size_bytes)
    }

    /// The paper's ARC with a fixed target of `size_bytes`.
    pub fn paper(size_bytes: u64) -> ArcConfig {
        ArcConfig {
            mode: ArcMode::Paper,
            mfu_min_time_ms: 0,
            min_prefetch_ms: 0,
            ..ArcConfig::fixed(size_bytes)
        }
    }

    /// Checks that the values make sense together.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.c_max_bytes == 0 {
            return Err(ConfigError("the ARC size (c_max) must be greater than 0"));
        }
        if self.c_min_bytes > self.c_max_bytes {
            return Err(ConfigError("c_min must not exceed c_max"));
        }
        if self.meta_balance == 0 {
            return Err(ConfigError("meta_balance must be at least 1 (percent)"));
        }
        if self.mode == ArcMode::Paper && self.policy == ArcPolicy::Larch {
            return Err(ConfigError(
                "the larch policy refines the OpenZFS balancing, not the paper's",
            ));
        }
        Ok(())
    }
}

/// A configuration that cannot work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConfigError(pub &'static str);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for ConfigError {}

/// What the policy knows of one block, for callers (the L2 feeder, status tools).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockInfo {
    /// The block.
    pub key: BlockKey,
    /// Its generation.
    pub generation: u64,
    /// Logical size in bytes.
    pub size_bytes: u32,
    /// Data or metadata.
    pub buf_type: BufType,
    /// Current state.
    pub state: State,
    /// Brought in by a prefetch not yet used by a demand read.
    pub prefetch: bool,
    /// Allowed on a cache device.
    pub l2cache: bool,
    /// A copy of this generation is on a cache device.
    pub on_l2: bool,
    /// The contents came from a write and no read has used them since.
    pub written: bool,
    /// Holds currently taken.
    pub refcount: u16,
    /// Its demand reads lately, as the ARC's reuse sketch counts them
    /// ([`Arc::set_reuse_window`]); [`crate::reuse::MAX_COUNT`] when the ARC keeps no
    /// sketch (no evidence against feeding it).
    pub reads: u8,
}

/// What [`Arc::l2_restore`] did with a header rebuilt from a cache device's log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Restore {
    /// A new `l2c_only` header was created.
    Restored,
    /// The block was already known with this generation; it now also points at the L2 copy
    /// (OpenZFS counts these as `l2_rebuild_bufs_precached`).
    AlreadyCached,
    /// The block is known with another generation or is dirty: the L2 copy is stale, ignore it.
    Stale,
}

const DATA: usize = BufType::Data as usize;
const META: usize = BufType::Metadata as usize;

/// The adaptive replacement cache over variable-size blocks. See the crate documentation.
#[derive(Clone)]
pub struct Arc {
    cfg: ArcConfig,
    slab: Slab,
    /// Evictable headers (unheld, clean) per state and type; ghosts always.
    lists: [[List; 2]; 7],
    /// All bytes per state and type, held and dirty included.
    sizes: [[u64; 2]; 7],
    c: u64,
    no_grow: bool,
    meta: u64,
    pd: u64,
    pm: u64,
    /// The paper's target for T1 (MRU), in bytes.
    p: u64,
    /// Ghost-hit bytes, cumulative: [mru_ghost, mfu_ghost][type].
    ghost_hit_bytes: [[u64; 2]; 2],
    /// `ghost_hit_bytes` at the previous adaptation.
    ghost_hit_seen: [[u64; 2]; 2],
    /// Ghost targets computed by the previous eviction pass: [mru_ghost, mfu_ghost][type].
    ghost_target_bytes: [[u64; 2]; 2],
    stats: ArcStats,
    /// The last eviction pass could not reach `c` (everything left was unevictable).
    short: bool,
    /// Demand reads per block lately, for the L2 feed's admission rule (`None`: not kept).
    reuse: Option<Box<ReuseSketch>>,
    /// Under [`ArcPolicy::Larch`], demand reads per block lately that found no header, for
    /// MFU's admission of blocks the ghosts no longer remember (`None` until the ARC first
    /// fills).
    freq: Option<Box<ReuseSketch>>,
}

fn is_listed(state: State, refcount: u16) -> bool {
    match state {
        State::Mru | State::Mfu | State::Uncached => refcount == 0,
        State::MruGhost | State::MfuGhost => true,
        State::Anon | State::L2cOnly => false,
    }
}

impl Arc {
    /// A new, empty ARC.
    pub fn new(cfg: ArcConfig) -> Result<Arc, ConfigError> {
        cfg.validate()?;
        let c = cfg.c_min_bytes.max(1);
        let mru_share = starting_mru_share(cfg.policy);
        Ok(Arc {
            slab: Slab::new(),
            lists: [[List::EMPTY; 2]; 7],
            sizes: [[0; 2]; 7],
            c,
            no_grow: false,
            meta: ONE / 4,
            pd: mru_share,
            pm: mru_share,
            p: 0,
            ghost_hit_bytes: [[0; 2]; 2],
            ghost_hit_seen: [[0; 2]; 2],
            ghost_target_bytes: [[0; 2]; 2],
            stats: ArcStats::default(),
            short: false,
            reuse: None,
            freq: None,
            cfg,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ArcConfig {
        &self.cfg
    }

    /// The event counters.
    pub fn stats(&self) -> &ArcStats {
        &self.stats
    }

    /// The current target size `c` in bytes.
    pub fn c(&self) -> u64 {
        self.c
    }

    /// Bytes of data in DRAM (anon, MRU, MFU and uncached).
    pub fn size(&self) -> u64 {
        [State::Anon, State::Mru, State::Mfu, State::Uncached]
            .iter()
            .map(|&s| self.state_bytes(s))
            .sum()
    }

    /// Bytes (logical) of all blocks in `state`, data and metadata.
    pub fn state_bytes(&self, state: State) -> u64 {
        let s = &self.sizes[state as usize];
        s[DATA] + s[META]
    }

    /// Bytes of `buf_type` blocks in `state`.
    pub fn state_type_bytes(&self, state: State, buf_type: BufType) -> u64 {
        self.sizes[state as usize][buf_type as usize]
    }

    /// What the ARC knows of `key`, if anything.
    pub fn info(&self, key: &BlockKey) -> Option<BlockInfo> {
        self.slab.lookup(key).map(|id| self.block_info(id))
    }

    /// Starts loading what a lookup of `key` reads first (its bucket of the key index),
    /// and the word of each sketch that counts its reads, for a caller that knows its
    /// next key while it still has work to do: a hint to the CPU, with no effect on the
    /// ARC.
    pub fn prefetch(&self, key: &BlockKey) {
        let hash = hash_key(key);
        self.slab.prefetch_hashed(hash);
        for sketch in [&self.reuse, &self.freq].into_iter().flatten() {
            sketch.prefetch_hashed(hash);
        }
    }

    /// The step after [`Arc::prefetch`]: starts loading the header a lookup of `key` would
    /// compare, through the bucket that call asked for (read now, so best called once it
    /// has arrived). A hint to the CPU, with no effect on the ARC.
    pub fn prefetch_header(&self, key: &BlockKey) {
        self.slab.prefetch_headers(key);
    }

    fn block_info(&self, id: u32) -> BlockInfo {
        let h = self.slab.get(id);
        BlockInfo {
            key: h.key,
            generation: h.generation,
            size_bytes: h.size_bytes,
            buf_type: h.buf_type,
            state: h.state,
            prefetch: h.has(FLAG_PREFETCH),
            l2cache: h.has(FLAG_L2CACHE),
            on_l2: h.has(FLAG_HAS_L2),
            written: h.has(FLAG_WRITTEN),
            refcount: h.refcount,
            reads: self
                .reuse
                .as_ref()
                .map_or(crate::reuse::MAX_COUNT, |r| r.count(&h.key)),
        }
    }

    /// The evictable blocks of `state` and `buf_type`, coldest first: where the L2 feeder
    /// looks for blocks about to be evicted.
    pub fn cold_end(
        &self,
        state: State,
        buf_type: BufType,
    ) -> impl Iterator<Item = BlockInfo> + '_ {
        let mut id = self.lists[state as usize][buf_type as usize].tail;
        std::iter::from_fn(move || {
            if id == NIL {
                return None;
            }
            let info = self.block_info(id);
            id = self.slab.get(id).prev;
            Some(info)
        })
    }

    /// The coldest evictable header of `state` and `buf_type` (`NIL`: none), whose cache
    /// line it starts loading: the start of a walk of the cold end one step at a time
    /// ([`crate::feed::select_shards`]).
    pub(crate) fn cold_tail(&self, state: State, buf_type: BufType) -> u32 {
        let id = self.lists[state as usize][buf_type as usize].tail;
        if id != NIL {
            prefetch_line(self.slab.get(id));
        }
        id
    }

    /// What the ARC knows of header `id`, on a list, and the next warmer header of that
    /// list (`NIL`: none), whose cache line it starts loading: a step of the walk
    /// [`Arc::cold_tail`] starts.
    pub(crate) fn cold_step(&self, id: u32) -> (BlockInfo, u32) {
        let prev = self.slab.get(id).prev;
        if prev != NIL {
            prefetch_line(self.slab.get(prev));
        }
        (self.block_info(id), prev)
    }

    // ---- list and size bookkeeping -------------------------------------------------------

    fn detach(&mut self, id: u32) {
        let h = self.slab.get(id);
        let (state, t, size) = (h.state, h.buf_type as usize, u64::from(h.size_bytes));
        if is_listed(state, h.refcount) {
            let mut list = self.lists[state as usize][t];
            self.slab.unlink(&mut list, id);
            self.lists[state as usize][t] = list;
        }
        self.sizes[state as usize][t] -= size;
    }

    fn attach(&mut self, id: u32, state: State) {
        let h = self.slab.get_mut(id);
        h.state = state;
        let (t, size, refcount) = (h.buf_type as usize, u64::from(h.size_bytes), h.refcount);
        if is_listed(state, refcount) {
            let mut list = self.lists[state as usize][t];
            self.slab.push_head(&mut list, id);
            self.lists[state as usize][t] = list;
        }
        self.sizes[state as usize][t] += size;
    }

    fn change_state(&mut self, id: u32, state: State) {
        self.detach(id);
        self.attach(id, state);
    }

    /// Moves a header to the head of its list (a held one is on none: nothing to do).
    fn requeue(&mut self, id: u32) {
        let h = self.slab.get(id);
        let (state, t) = (h.state, h.buf_type as usize);
        if is_listed(state, h.refcount) {
            let mut list = self.lists[state as usize][t];
            self.slab.move_to_head(&mut list, id);
            self.lists[state as usize][t] = list;
        }
    }

    fn destroy(&mut self, id: u32) {
        self.detach(id);
        self.slab.free(id);
    }

    // ---- reads ---------------------------------------------------------------------------

    fn count_access(&mut self, access: &Access, hit: bool) {
        let s = &mut self.stats;
        let counter = match (access.prefetch, access.buf_type, hit) {
            (false, BufType::Data, true) => &mut s.demand_data_hits,
            (false, BufType::Data, false) => &mut s.demand_data_misses,
            (false, BufType::Metadata, true) => &mut s.demand_metadata_hits,
            (false, BufType::Metadata, false) => &mut s.demand_metadata_misses,
            (true, BufType::Data, true) => &mut s.prefetch_data_hits,
            (true, BufType::Data, false) => &mut s.prefetch_data_misses,
            (true, BufType::Metadata, true) => &mut s.prefetch_metadata_hits,
            (true, BufType::Metadata, false) => &mut s.prefetch_metadata_misses,
        };
        *counter += 1;
        if hit {
            s.hits += 1;
        } else {
            s.misses += 1;
        }
        if access.prefetch {
            s.predictive_prefetch += 1;
        }
    }

    /// Applies the prefetch flag rules of `arc_access`; returns whether the header was a prefetch.
    fn update_prefetch_flag(&mut self, id: u32, access: &Access) -> bool {
        let h = self.slab.get_mut(id);
        let was_prefetch = h.has(FLAG_PREFETCH);
        if was_prefetch && !access.prefetch {
            h.flags &= !FLAG_PREFETCH;
            self.stats.demand_hit_predictive_prefetch += 1;
        } else if !was_prefetch && access.prefetch && h.state != State::Anon {
            // A dirty block holds a write's bytes, not a prefetch's: once synced it must
            // not be taken for an unused prefetch (protected from eviction, kept off cache
            // devices by l2arc_noprefetch).
            h.flags |= FLAG_PREFETCH;
        }
        // As OpenZFS: only a block the ARC may keep may go to a cache device.
        if access.l2cache && !access.uncached {
            h.flags |= FLAG_L2CACHE;
        }
        was_prefetch
    }

    /// A demand read joined the read in flight of `key`, a prefetch, which has now brought
    /// the block in: as OpenZFS's `arc_access` on an I/O hit, the block is a demand block
    /// from now on (no longer protected as a young prefetch, fed to cache devices under
    /// `l2arc_noprefetch`, and its next read a plain hit). Counted in
    /// `demand_iohit_predictive_prefetch`, not as a hit: the caller counts I/O hits.
    pub fn demand_joined(&mut self, key: &BlockKey) {
        let Some(id) = self.slab.lookup(key) else {
            return;
        };
        let h = self.slab.get_mut(id);
        if h.has(FLAG_PREFETCH) && h.state.is_resident() {
            h.flags &= !FLAG_PREFETCH;
            self.stats.demand_iohit_predictive_prefetch += 1;
        }
    }

    fn hit(&mut self, id: u32, access: &Access, actions: &mut Vec<Action>) -> Outcome {
        self.count_access(access, true);
        if !access.prefetch {
            self.slab.get_mut(id).flags &= !FLAG_WRITTEN;
        }
        let was_prefetch = self.update_prefetch_flag(id, access);
        let now = access.now_ms;
        let state = self.slab.get(id).state;
        match state {
            State::Anon => self.stats.anon_hits += 1,
            State::Mru => {
                self.stats.mru_hits += 1;
                let last = self.slab.get(id).access_ms;
                if was_prefetch && self.cfg.mode == ArcMode::OpenZfs {
                    self.slab.get_mut(id).access_ms = now;
                    self.requeue(id);
                } else if self.cfg.mode == ArcMode::Paper
                    || now > last.saturating_add(self.cfg.mfu_min_time_ms)
                {
                    let h = self.slab.get_mut(id);
                    h.access_ms = now;
                    h.marks = 0;
                    self.change_state(id, State::Mfu);
                    // The live lists changed, and the ghost bounds with them.
                    self.trim_ghosts(actions);
                } else {
                    // A re-read within ARC_MINTIME is not frequency; the time keeps the first access.
                    self.requeue(id);
                }
            }
            State::Mfu => {
                self.stats.mfu_hits += 1;
                let larch = self.cfg.policy == ArcPolicy::Larch;
                let h = self.slab.get_mut(id);
                h.access_ms = now;
                if larch {
                    // Only the first hit since the block entered MFU (or last passed its
                    // cold end) moves it; later ones add marks where it is, which the
                    // walk at the cold end spends. A hot block then costs a byte's write
                    // per hit, not a list move.
                    let unmarked = h.marks == 0;
                    h.marks = (h.marks + 1).min(MAX_MARKS);
                    if unmarked {
                        self.requeue(id);
                    }
                } else {
                    self.requeue(id);
                }
            }
            State::Uncached => {
                self.stats.uncached_hits += 1;
                self.slab.get_mut(id).access_ms = now;
                self.requeue(id);
            }
            other => unreachable!("hit in non-resident state {other:?}"),
        }
        Outcome::Hit { state }
    }

    /// An access that found a ghost or an `l2c_only` header.
    fn ghost_hit(&mut self, id: u32, access: &Access, actions: &mut Vec<Action>) -> Outcome {
        self.count_access(access, false);
        if !access.prefetch {
            // The bytes come back from a device now: a read uses them.
            self.slab.get_mut(id).flags &= !FLAG_WRITTEN;
        }
        let was_prefetch = self.update_prefetch_flag(id, access);
        let h = self.slab.get(id);
        let (state, size, t, on_l2, last_seq) = (
            h.state,
            u64::from(h.size_bytes),
            h.buf_type as usize,
            h.has(FLAG_HAS_L2),
            h.touch_seq,
        );
        let mut target = match state {
            State::MruGhost => {
                self.stats.mru_ghost_hits += 1;
                if self.cfg.policy == ArcPolicy::Larch
                    && !(was_prefetch && self.cfg.mode == ArcMode::OpenZfs)
                    && !self.mfu_admits(t, last_seq)
                {
                    // Refused: it enters MRU and does not count for the balance either
                    // (growing MRU would take MFU's blocks, reused sooner, for it).
                    self.stats.mfu_refused += 1;
                    State::Mru
                } else {
                    self.ghost_hit_bytes[0][t] += size;
                    if was_prefetch && self.cfg.mode == ArcMode::OpenZfs {
                        State::Mru
                    } else {
                        State::Mfu
                    }
                }
            }
            State::MfuGhost => {
                self.stats.mfu_ghost_hits += 1;
                self.ghost_hit_bytes[1][t] += size;
                State::Mfu
            }
            State::L2cOnly => State::Mru,
            other => unreachable!("ghost hit in {other:?}"),
        };
        if access.uncached {
            target = State::Uncached;
        }
        if self.cfg.mode == ArcMode::Paper {
            self.paper_ghost_hit(state, access, actions);
        }
        self.detach(id);
        let h = self.slab.get_mut(id);
        h.size_bytes = access.size_bytes;
        h.buf_type = access.buf_type;
        h.access_ms = access.now_ms;
        h.marks = 0;
        self.attach(id, target);
        self.maybe_grow(u64::from(access.size_bytes));
        self.evict(access.now_ms, actions);
        Outcome::Miss {
            found: Some(state),
            on_l2,
        }
    }

    /// A miss with no header to go by; `reads` is its count in MFU's admission sketch
    /// (0: not counted).
    fn miss_new(&mut self, access: &Access, reads: u8, actions: &mut Vec<Action>) -> Outcome {
        self.count_access(access, false);
        if self.cfg.mode == ArcMode::Paper {
            self.paper_make_room_for_new(u64::from(access.size_bytes), access.now_ms, actions);
        }
        let mut flags = 0;
        if access.prefetch {
            flags |= FLAG_PREFETCH;
        }
        if access.uncached {
            flags |= FLAG_UNCACHED;
        } else if access.l2cache {
            flags |= FLAG_L2CACHE;
        }
        let id = self.slab.alloc(Header::detached(
            access.key,
            access.generation,
            access.size_bytes,
            access.buf_type,
            flags,
            access.now_ms,
        ));
        let mut state = if access.uncached {
            State::Uncached
        } else {
            State::Mru
        };
        if state == State::Mru && self.cfg.policy == ArcPolicy::Larch {
            let t = access.buf_type as usize;
            if self.mfu_takes_frequent(t, reads) {
                self.stats.mfu_sketch_admits += 1;
                state = State::Mfu;
            } else {
                self.fill_mfu(t, u64::from(access.size_bytes));
            }
        }
        self.attach(id, state);
        self.maybe_grow(u64::from(access.size_bytes));
        self.evict(access.now_ms, actions);
        Outcome::Miss {
            found: None,
            on_l2: false,
        }
    }

    /// Under [`ArcPolicy::Larch`], whether an MRU ghost hit of type `t`, whose block was
    /// last read (or entered MRU) at logical time `last_seq`, enters MFU: only if MFU's
    /// coldest block last moved (was read, entered MFU or passed its cold end) no later.
    /// When all of MFU moved since, taking MFU's coldest for the ghost's block trades a
    /// block with a shorter reuse interval for one with a longer one — a loop longer than
    /// MRU but within the ghost lists' reach does exactly that on every access; the block
    /// enters MRU instead, and the ghost hit does not count for the balance (it would grow
    /// MRU at MFU's expense for the same trade). Logical time (the slab's list-move
    /// sequence, which a ghost keeps from its block's last move: `evict_one`), not the
    /// callers' clock: the decision must not depend on how fast reads come or on a
    /// clock's resolution, nor differ between the daemon and the simulator.
    fn mfu_admits(&self, t: usize, last_seq: u64) -> bool {
        let coldest = self.lists[State::Mfu as usize][t].tail;
        coldest == NIL || self.slab.get(coldest).touch_seq <= last_seq
    }

    /// Under [`ArcPolicy::Larch`], whether a block of type `t` that missed and that no
    /// ghost remembers enters MFU, given its `reads` lately (this one included, as
    /// [`Arc::count_read`] returned them): when it was read at least [`FREQ_ADMIT_READS`]
    /// times and more often than MFU's coldest block,
    /// which has no hit since it entered MFU (no mark) and so is the one it displaces.
    /// This is W-TinyLFU's admission duel, kept to where ARC has no evidence of its own: a
    /// loop or working set longer than the ghost lists reach misses in full on every pass
    /// and would never displace blocks that MFU took while the ARC filled and that are not
    /// read again; a block the ghosts remember goes by their evidence instead.
    fn mfu_takes_frequent(&self, t: usize, reads: u8) -> bool {
        if reads < FREQ_ADMIT_READS {
            return false;
        }
        let Some(freq) = self.freq.as_ref() else {
            return false;
        };
        let coldest = self.lists[State::Mfu as usize][t].tail;
        if coldest == NIL {
            return false;
        }
        let h = self.slab.get(coldest);
        h.marks == 0 && freq.count(&h.key) < reads
    }

    /// Under [`ArcPolicy::Larch`], counts a demand read that found no header in MFU's
    /// admission sketch. The sketch starts when the ARC first fills (until then nothing
    /// is displaced, so no duel is fought) and follows `c` whenever its counters halve.
    /// `hash` is the block key's index hash. Returns the block's count with this read (0:
    /// no sketch kept yet).
    fn count_read(&mut self, hash: u64) -> u8 {
        if self.freq.is_none() {
            if self.size() < self.c {
                return 0;
            }
            self.follow_freq_window();
        }
        let (reads, halved) = self
            .freq
            .as_mut()
            .map_or((0, false), |freq| freq.record_hashed(hash));
        if halved {
            self.follow_freq_window();
        }
        reads
    }

    /// Makes MFU's admission sketch serve the window `c` calls for now (creating it).
    fn follow_freq_window(&mut self) {
        let window = self.freq_window();
        crate::reuse::serve_window(&mut self.freq, window);
    }

    /// The window of MFU's admission sketch: [`FREQ_WINDOW_PER_BLOCK`] times the blocks
    /// of the ARC's mean size (over MRU and MFU) that `c` holds.
    fn freq_window(&self) -> u64 {
        let (mut blocks, mut bytes) = (0, 0);
        for state in [State::Mru, State::Mfu] {
            for list in &self.lists[state as usize] {
                blocks += list.len;
                bytes += list.bytes;
            }
        }
        let mean = (bytes / blocks.max(1)).max(1);
        (self.c / mean).max(1).saturating_mul(FREQ_WINDOW_PER_BLOCK)
    }

    /// Under [`ArcPolicy::Larch`], while the ARC has room for `incoming` more bytes: if MRU
    /// (of type `t`) holds at least its target, its coldest block moves to MFU. So MFU
    /// fills with what arrived while nothing competed for the room, as S3-FIFO's and
    /// W-TinyLFU's main queues do, instead of staying empty until blocks are seen twice:
    /// a loop or scan longer than the cache then cycles through MRU and leaves MFU's
    /// blocks in place. Prefetched blocks stay in MRU (a demand read has not used them).
    fn fill_mfu(&mut self, t: usize, incoming: u64) {
        if self.size().saturating_add(incoming) > self.c {
            return;
        }
        let (share, mru_frac) = if t == META {
            (self.meta, self.pm)
        } else {
            (ONE - self.meta, self.pd)
        };
        let target = adapt::apply(adapt::apply(self.c, share), mru_frac);
        if self.sizes[State::Mru as usize][t] < target {
            return;
        }
        let id = self.lists[State::Mru as usize][t].tail;
        if id == NIL || self.slab.get(id).has(FLAG_PREFETCH) {
            return;
        }
        self.slab.get_mut(id).marks = 0;
        self.change_state(id, State::Mfu);
    }

    /// Drops a header whose generation is older than the caller's: the block was overwritten
    /// behind it, so neither its DRAM nor its cache-device copy may be served.
    fn drop_stale(&mut self, id: u32, actions: &mut Vec<Action>) {
        let h = self.slab.get(id);
        assert!(
            h.refcount == 0 && !h.has(FLAG_DIRTY),
            "access to {:?} generation mismatch on a held or dirty header (refcount {}, flags {:#x})",
            h.key,
            h.refcount,
            h.flags
        );
        self.stats.stale_drops += 1;
        self.forget(id, actions);
    }

    /// Destroys a header, telling the caller what to free.
    fn forget(&mut self, id: u32, actions: &mut Vec<Action>) {
        let h = self.slab.get(id);
        let (key, generation, state) = (h.key, h.generation, h.state);
        if h.has(FLAG_HAS_L2) {
            actions.push(Action::InvalidateL2 { key, generation });
        }
        if state.is_resident() {
            actions.push(Action::Evict {
                key,
                generation,
                from: state,
                to: None,
            });
        } else {
            actions.push(Action::Forget {
                key,
                generation,
                from: state,
            });
        }
        self.destroy(id);
    }

    /// One read of one block. See [`Policy::access`].
    pub fn access(&mut self, access: &Access, actions: &mut Vec<Action>) -> Outcome {
        // One hash of the key serves the index and the sketches.
        let hash = hash_key(&access.key);
        if !access.prefetch
            && let Some(reuse) = self.reuse.as_mut()
        {
            reuse.record_hashed(hash);
        }
        // Under the larch policy a demand read that finds no header is counted in MFU's
        // admission sketch (`count_read`): the sketch remembers what the ghosts do not, and
        // only such a miss asks it (`mfu_takes_frequent`).
        let counted = self.cfg.policy == ArcPolicy::Larch && !access.prefetch;
        if counted && let Some(freq) = self.freq.as_ref() {
            // Start loading its word now, so that it arrives while the lookup waits for
            // the key index.
            freq.prefetch_hashed(hash);
        }
        if let Some(id) = self.slab.lookup_hashed(hash, &access.key) {
            if self.slab.get(id).generation != access.generation {
                self.drop_stale(id, actions);
                let reads = if counted { self.count_read(hash) } else { 0 };
                return self.miss_new(access, reads, actions);
            }
            if self.slab.get(id).state.is_resident() {
                self.hit(id, access, actions)
            } else {
                self.ghost_hit(id, access, actions)
            }
        } else {
            let reads = if counted { self.count_read(hash) } else { 0 };
            self.miss_new(access, reads, actions)
        }
    }

    // ---- holds, writes, removal ------------------------------------------------------------

    /// Takes a hold on a resident block: it cannot be evicted until [`Arc::release`].
    /// Returns false when the block is not in DRAM.
    pub fn hold(&mut self, key: &BlockKey) -> bool {
        let Some(id) = self.slab.lookup(key) else {
            return false;
        };
        if !self.slab.get(id).state.is_resident() {
            return false;
        }
        let state = self.slab.get(id).state;
        self.detach(id);
        let h = self.slab.get_mut(id);
        h.refcount = h.refcount.checked_add(1).expect("refcount overflow");
        self.attach(id, state);
        true
    }

    /// Releases a hold taken by [`Arc::hold`]. An uncached block is dropped with its last hold.
    pub fn release(&mut self, key: &BlockKey, now_ms: u64, actions: &mut Vec<Action>) {
        let id = self
            .slab
            .lookup(key)
            .unwrap_or_else(|| panic!("release of {key:?}, which the ARC does not hold"));
        let h = self.slab.get(id);
        assert!(h.refcount > 0, "release of {key:?} without a hold");
        let state = h.state;
        self.detach(id);
        let h = self.slab.get_mut(id);
        h.refcount -= 1;
        let drop_now = h.refcount == 0 && state == State::Uncached && !h.has(FLAG_PREFETCH);
        self.attach(id, state);
        if drop_now {
            self.forget(id, actions);
        }
        self.evict(now_ms, actions);
    }

    /// A write of a block: it becomes dirty (state anon, never evicted) with `generation`.
    /// Any cache-device copy of the old contents is invalidated.
    pub fn write(
        &mut self,
        key: BlockKey,
        generation: u64,
        size_bytes: u32,
        buf_type: BufType,
        now_ms: u64,
        actions: &mut Vec<Action>,
    ) {
        let id = match self.slab.lookup(&key) {
            Some(id) => {
                let h = self.slab.get(id);
                if h.has(FLAG_HAS_L2) {
                    actions.push(Action::InvalidateL2 {
                        key,
                        generation: h.generation,
                    });
                }
                if h.state.is_resident() && h.generation != generation && h.state != State::Anon {
                    // The clean buffer of the old generation is replaced by the dirty one.
                    actions.push(Action::Evict {
                        key,
                        generation: h.generation,
                        from: h.state,
                        to: None,
                    });
                }
                self.detach(id);
                id
            }
            None => self.slab.alloc(Header::detached(
                key, generation, size_bytes, buf_type, 0, now_ms,
            )),
        };
        let h = self.slab.get_mut(id);
        h.generation = generation;
        h.size_bytes = size_bytes;
        h.buf_type = buf_type;
        h.flags = (h.flags & FLAG_L2CACHE) | FLAG_DIRTY | FLAG_WRITTEN;
        h.access_ms = now_ms;
        // The header was detached above, or is new and not yet counted.
        self.attach(id, State::Anon);
        self.maybe_grow(u64::from(size_bytes));
        self.evict(now_ms, actions);
    }

    /// The write of `generation` reached the backing store: the block is clean and moves
    /// to MRU (OpenZFS `arc_write_done` → `arc_access`). Returns false, and does nothing,
    /// when the block was written again since (another generation is dirty).
    pub fn write_done(
        &mut self,
        key: &BlockKey,
        generation: u64,
        l2cache: bool,
        now_ms: u64,
        actions: &mut Vec<Action>,
    ) -> bool {
        let Some(id) = self.slab.lookup(key) else {
            return false;
        };
        let h = self.slab.get(id);
        if h.generation != generation || h.state != State::Anon {
            return false;
        }
        self.detach(id);
        let h = self.slab.get_mut(id);
        h.flags &= !FLAG_DIRTY;
        if l2cache {
            h.flags |= FLAG_L2CACHE;
        }
        h.access_ms = now_ms;
        self.attach(id, State::Mru);
        self.evict(now_ms, actions);
        true
    }

    /// Drops a block (trim or invalidation). Returns false if it is held (nothing changes).
    pub fn remove(&mut self, key: &BlockKey, actions: &mut Vec<Action>) -> bool {
        let Some(id) = self.slab.lookup(key) else {
            return true;
        };
        if self.slab.get(id).refcount > 0 {
            return false;
        }
        self.forget(id, actions);
        // Live sizes changed, so the ghost bounds did too.
        self.trim_ghosts(actions);
        true
    }

    // ---- the cache device ----------------------------------------------------------------

    /// A copy of `generation` of the block was written to a cache device. Returns false (the
    /// copy must not be indexed) if the block is no longer known with that generation or is dirty.
    pub fn l2_written(&mut self, key: &BlockKey, generation: u64) -> bool {
        let Some(id) = self.slab.lookup(key) else {
            return false;
        };
        let h = self.slab.get_mut(id);
        if h.generation != generation || h.has(FLAG_DIRTY) {
            return false;
        }
        h.flags |= FLAG_HAS_L2;
        true
    }

    /// The cache-device copy of `generation` is gone (overwritten by the ring, or unreadable).
    /// An `l2c_only` header goes with it.
    pub fn l2_evicted(&mut self, key: &BlockKey, generation: u64, actions: &mut Vec<Action>) {
        let Some(id) = self.slab.lookup(key) else {
            return;
        };
        let h = self.slab.get_mut(id);
        if h.generation != generation {
            return;
        }
        h.flags &= !FLAG_HAS_L2;
        if h.state == State::L2cOnly {
            self.stats.deleted += 1;
            self.forget(id, actions);
        }
    }

    /// Restores a header from a cache device's log (rebuild): `l2c_only` unless the block is
    /// already known.
    pub fn l2_restore(
        &mut self,
        key: BlockKey,
        generation: u64,
        size_bytes: u32,
        buf_type: BufType,
        now_ms: u64,
    ) -> Restore {
        if let Some(id) = self.slab.lookup(&key) {
            let h = self.slab.get_mut(id);
            if h.generation != generation || h.has(FLAG_DIRTY) {
                return Restore::Stale;
            }
            h.flags |= FLAG_HAS_L2 | FLAG_L2CACHE;
            return Restore::AlreadyCached;
        }
        let id = self.slab.alloc(Header::detached(
            key,
            generation,
            size_bytes,
            buf_type,
            FLAG_HAS_L2 | FLAG_L2CACHE,
            now_ms,
        ));
        self.attach(id, State::L2cOnly);
        Restore::Restored
    }

    // ---- size control --------------------------------------------------------------------

    /// Switches the replacement policy. Nothing moves: the lists, sizes and fractions stay
    /// as they are, and the new policy's rules apply from the next operation (MFU blocks
    /// start without marks after a switch to [`ArcPolicy::Larch`]). An ARC that tracks
    /// no block yet starts afresh: its MRU shares become the new policy's starting ones,
    /// so switching before the first read is the same as starting with the policy.
    pub fn set_policy(&mut self, policy: ArcPolicy) -> Result<(), ConfigError> {
        let cfg = ArcConfig {
            policy,
            ..self.cfg.clone()
        };
        cfg.validate()?;
        if policy != self.cfg.policy {
            self.slab.clear_marks();
            self.freq = None;
            if self.slab.live() == 0 {
                self.pd = starting_mru_share(policy);
                self.pm = self.pd;
            }
        }
        self.cfg = cfg;
        Ok(())
    }

    /// Keeps a count of each block's demand reads lately, over a window of
    /// `window_blocks` blocks ([`ReuseSketch`]: 4 bytes per block of the window, in
    /// `reuse_sketch_bytes`), which [`BlockInfo::reads`] reports and the L2 feed's
    /// admission rule reads; 0 drops it. A window whose table has the size of the one kept
    /// keeps it and its counts.
    pub fn set_reuse_window(&mut self, window_blocks: u64) {
        if window_blocks == 0 {
            self.reuse = None;
            return;
        }
        crate::reuse::serve_window(&mut self.reuse, window_blocks);
    }

    /// The window of the reuse sketch kept (0: none).
    pub fn reuse_window(&self) -> u64 {
        self.reuse.as_ref().map_or(0, |r| r.window_blocks())
    }

    /// Whether the feed's admission rule should feed blocks read once too: no sketch is
    /// kept, or blocks read once lately were often read again
    /// ([`ReuseSketch::blocks_read_once_return`]).
    pub fn feeds_blocks_read_once(&self) -> bool {
        self.reuse
            .as_ref()
            .is_none_or(|r| r.blocks_read_once_return())
    }

    /// DRAM of the reuse sketch kept (0: none).
    pub fn reuse_sketch_bytes(&self) -> u64 {
        self.reuse.as_ref().map_or(0, |r| r.bytes())
    }

    /// DRAM of MFU's admission sketch under [`ArcPolicy::Larch`] (0: none kept).
    pub fn mfu_sketch_bytes(&self) -> u64 {
        self.freq.as_ref().map_or(0, |r| r.bytes())
    }

    /// Stops (or allows again) the growth of `c`, as OpenZFS does under memory pressure.
    pub fn set_no_grow(&mut self, no_grow: bool) {
        self.no_grow = no_grow;
    }

    /// Grows `c` by at least `bytes` if the cache is nearly full (OpenZFS `arc_adapt`).
    /// Called on every allocation; exposed so callers can grow it explicitly.
    pub fn grow(&mut self, bytes: u64) {
        if self.no_grow || self.c >= self.cfg.c_max_bytes {
            return;
        }
        if self.size().saturating_add(self.cfg.grow_slack_bytes) >= self.c {
            let step = bytes.max(self.cfg.grow_step_min_bytes);
            self.c = self.c.saturating_add(step).min(self.cfg.c_max_bytes);
            self.stats.grow_count += 1;
        }
    }

    fn maybe_grow(&mut self, bytes: u64) {
        if self.c < self.cfg.c_max_bytes {
            self.grow(bytes);
        }
    }

    /// Memory pressure: lowers `c` by `bytes` (not below `c_min`) and evicts down to it.
    pub fn shrink(&mut self, bytes: u64, now_ms: u64, actions: &mut Vec<Action>) {
        let base = self.c.min(self.size());
        self.c = base.saturating_sub(bytes).max(self.cfg.c_min_bytes).max(1);
        self.p = self.p.min(self.c);
        self.stats.shrink_count += 1;
        self.evict(now_ms, actions);
    }

    /// Changes `c_min` and `c_max` (`zfs_arc_min`, `zfs_arc_max`) at runtime.
    pub fn set_limits(
        &mut self,
        c_min_bytes: u64,
        c_max_bytes: u64,
        now_ms: u64,
        actions: &mut Vec<Action>,
    ) -> Result<(), ConfigError> {
        let cfg = ArcConfig {
            c_min_bytes,
            c_max_bytes,
            ..self.cfg.clone()
        };
        cfg.validate()?;
        self.cfg = cfg;
        self.c = self.c.clamp(c_min_bytes.max(1), c_max_bytes);
        self.p = self.p.min(self.c);
        self.evict(now_ms, actions);
        Ok(())
    }

    // ---- eviction ------------------------------------------------------------------------

    fn is_young_prefetch(&self, h: &Header, now_ms: u64) -> bool {
        h.has(FLAG_PREFETCH) && now_ms < h.access_ms.saturating_add(self.cfg.min_prefetch_ms)
    }

    /// Moves one resident header's data out of DRAM.
    fn evict_one(&mut self, id: u32, actions: &mut Vec<Action>) -> u64 {
        let h = self.slab.get(id);
        assert!(
            h.refcount == 0 && !h.has(FLAG_DIRTY),
            "evicting held or dirty {:?} (refcount {}, flags {:#x})",
            h.key,
            h.refcount,
            h.flags
        );
        let (key, generation, from, size) = (h.key, h.generation, h.state, u64::from(h.size_bytes));
        if h.has(FLAG_HAS_L2) {
            self.stats.evict_l2_cached += size;
        } else if h.has(FLAG_L2CACHE) {
            self.stats.evict_l2_eligible += size;
            match from {
                State::Mru => self.stats.evict_l2_eligible_mru += size,
                State::Mfu => self.stats.evict_l2_eligible_mfu += size,
                _ => {}
            }
        } else {
            self.stats.evict_l2_ineligible += size;
        }
        let to = match from {
            State::Mru => Some(State::MruGhost),
            State::Mfu => Some(State::MfuGhost),
            _ => None,
        };
        actions.push(Action::Evict {
            key,
            generation,
            from,
            to,
        });
        match to {
            Some(ghost) => {
                let last_move = self.slab.get(id).touch_seq;
                self.change_state(id, ghost);
                if self.cfg.policy == ArcPolicy::Larch {
                    // The ghost keeps the logical time of its block's last read (or entry
                    // into its list), which `mfu_admits` compares; the ghost list's order
                    // is still that of eviction.
                    self.slab.get_mut(id).touch_seq = last_move;
                }
            }
            None => self.destroy(id),
        }
        size
    }

    /// Evicts up to `bytes` from the cold end of one resident list; returns bytes freed.
    fn evict_list(
        &mut self,
        state: State,
        buf_type: usize,
        bytes: u64,
        now_ms: u64,
        actions: &mut Vec<Action>,
    ) -> u64 {
        let marks = state == State::Mfu && self.cfg.policy == ArcPolicy::Larch;
        let mut freed = 0;
        let mut id = self.lists[state as usize][buf_type].tail;
        while id != NIL && freed < bytes {
            let h = self.slab.get(id);
            let mut prev = h.prev;
            if self.is_young_prefetch(h, now_ms) {
                self.stats.evict_skip += 1;
            } else if marks && h.marks > 0 {
                // Another pass for a block hit while in MFU. Each pass spends a mark, so
                // the walk ends: at worst it goes round the list MAX_MARKS + 1 times,
                // paid for by the hits that set the marks.
                self.slab.get_mut(id).marks -= 1;
                self.requeue(id);
                self.stats.mfu_passes += 1;
                if prev == NIL {
                    prev = self.lists[state as usize][buf_type].tail;
                }
            } else {
                freed += self.evict_one(id, actions);
            }
            id = prev;
        }
        freed
    }

    /// Evicts from the cold end of a list until `bytes` are freed, young prefetches
    /// included (only to keep the ARC within `c_max`).
    fn evict_list_unprotected(
        &mut self,
        state: State,
        buf_type: usize,
        bytes: u64,
        actions: &mut Vec<Action>,
    ) {
        let mut freed = 0;
        while freed < bytes {
            let id = self.lists[state as usize][buf_type].tail;
            if id == NIL {
                break;
            }
            freed += self.evict_one(id, actions);
        }
    }

    /// Drops ghost headers from the cold end of a ghost list until it holds at most
    /// `target` bytes. A ghost with a cache-device copy becomes `l2c_only`.
    fn trim_ghost_list(
        &mut self,
        state: State,
        buf_type: usize,
        target: u64,
        actions: &mut Vec<Action>,
    ) {
        while self.lists[state as usize][buf_type].bytes > target {
            let id = self.lists[state as usize][buf_type].tail;
            self.drop_ghost(id, actions);
        }
    }

    fn drop_ghost(&mut self, id: u32, actions: &mut Vec<Action>) {
        self.stats.deleted += 1;
        if self.slab.get(id).has(FLAG_HAS_L2) {
            self.change_state(id, State::L2cOnly);
        } else {
            self.forget(id, actions);
        }
    }

    /// Drops uncached blocks nobody held that were last read at least half of
    /// `min_prefetch_ms` ago (OpenZFS flushes the uncached state on the same schedule).
    /// A caller that holds an uncached block right after reading it keeps it until release.
    fn flush_uncached(&mut self, now_ms: u64, actions: &mut Vec<Action>) {
        let age_ms = self.cfg.min_prefetch_ms / 2;
        for t in [DATA, META] {
            loop {
                let id = self.lists[State::Uncached as usize][t].tail;
                if id == NIL || now_ms < self.slab.get(id).access_ms.saturating_add(age_ms) {
                    break;
                }
                self.evict_one(id, actions);
            }
        }
    }

    /// Brings the size down to `c` and bounds the ghost lists.
    fn evict(&mut self, now_ms: u64, actions: &mut Vec<Action>) {
        self.flush_uncached(now_ms, actions);
        if self.size() > self.c {
            // Uncached blocks (a volume with primarycache=none or metadata) are dropped
            // first, whatever their age: they must not take the room of cached ones, nor
            // escape the bound because the targeted steps never look at their lists.
            for t in [DATA, META] {
                let over = self.size().saturating_sub(self.c);
                if over == 0 {
                    break;
                }
                self.evict_list(State::Uncached, t, over, now_ms, actions);
            }
        }
        if self.size() > self.c {
            match self.cfg.mode {
                ArcMode::OpenZfs => self.evict_openzfs(now_ms, actions),
                ArcMode::Paper => {
                    while self.size() > self.c && self.paper_replace(false, now_ms, actions) {}
                }
            }
            self.fall_back_evict(now_ms, actions);
        } else {
            self.short = false;
        }
        self.trim_ghosts(actions);
        self.warm_tails();
    }

    /// Starts loading what the next eviction and ghost trim will touch first, while the
    /// caller does other work: the header before each list's tail (the store that makes
    /// it the tail) and, for the ghost lists, the key index bucket of the tail (the
    /// removal of a dropped ghost searches it). The tails themselves were just written
    /// or loaded here. In steady state each access evicts one block and drops one ghost,
    /// so these are the lines the next access waits for otherwise. A hint: no effect on
    /// what the ARC decides.
    fn warm_tails(&self) {
        for state in [State::Mru, State::Mfu, State::MruGhost, State::MfuGhost] {
            for t in [DATA, META] {
                let tail = self.lists[state as usize][t].tail;
                if tail == NIL {
                    continue;
                }
                let h = self.slab.get(tail);
                if h.prev != NIL {
                    prefetch_line(self.slab.get(h.prev));
                }
                if matches!(state, State::MruGhost | State::MfuGhost) {
                    self.slab.prefetch(&h.key);
                }
            }
        }
    }

    /// The four steps of OpenZFS `arc_evict`, with targets from `meta`, `pd` and `pm`.
    fn evict_openzfs(&mut self, now_ms: u64, actions: &mut Vec<Action>) {
        self.adapt_fractions();
        let sz = |s: State, t: usize| self.sizes[s as usize][t] as i64;
        let mrud = sz(State::Mru, DATA) + sz(State::Anon, DATA);
        let mrum = sz(State::Mru, META) + sz(State::Anon, META);
        let mfud = sz(State::Mfu, DATA);
        let mfum = sz(State::Mfu, META);
        let m = mrum + mfum;
        let t = mrud + mfud + m;
        let c = self.c as i64;
        let mut asize = self.size() as i64;
        let mut wt = t - (asize - c);
        let scale = |bytes: i64, frac: u64| adapt::apply(bytes.max(0) as u64, frac) as i64;
        let mut total_evicted = 0i64;

        // 1. MRU metadata down to its share of the metadata target.
        let w = scale(scale(wt, self.meta), self.pm);
        let bytes = self.evict_amount(State::Mru, META, (asize - c).min(mrum - w), now_ms, actions);
        total_evicted += bytes;
        asize -= bytes;
        // 2. MFU metadata so that all metadata fits the metadata target.
        let w = scale(wt, self.meta);
        let bytes = self.evict_amount(State::Mfu, META, (asize - c).min(m - w), now_ms, actions);
        total_evicted += bytes;
        asize -= bytes;
        // 3. MRU data down to its share of what metadata leaves.
        wt -= m - total_evicted;
        let w = scale(wt, self.pd);
        let bytes = self.evict_amount(State::Mru, DATA, (asize - c).min(mrud - w), now_ms, actions);
        asize -= bytes;
        // 4. MFU data: whatever is still over.
        self.evict_amount(State::Mfu, DATA, asize - c, now_ms, actions);
    }

    fn evict_amount(
        &mut self,
        state: State,
        buf_type: usize,
        bytes: i64,
        now_ms: u64,
        actions: &mut Vec<Action>,
    ) -> i64 {
        if bytes <= 0 {
            return 0;
        }
        self.evict_list(state, buf_type, bytes as u64, now_ms, actions) as i64
    }

    /// If the targeted steps left the cache over `c` (their lists were empty, held or young),
    /// evicts from any list, so the size bound holds after every operation.
    fn fall_back_evict(&mut self, now_ms: u64, actions: &mut Vec<Action>) {
        const ORDER: [(State, usize); 6] = [
            (State::Uncached, DATA),
            (State::Uncached, META),
            (State::Mru, DATA),
            (State::Mfu, DATA),
            (State::Mru, META),
            (State::Mfu, META),
        ];
        for (state, t) in ORDER {
            let over = self.size().saturating_sub(self.c);
            if over == 0 {
                break;
            }
            self.evict_list(state, t, over, now_ms, actions);
        }
        // Young prefetches are protected up to `c_max`, not beyond: `zfs_arc_max` bounds
        // the memory the ARC holds whatever the prefetcher brings in (OpenZFS lets the
        // ARC overshoot and throttles allocations instead).
        for (state, t) in ORDER {
            let over = self.size().saturating_sub(self.cfg.c_max_bytes);
            if over == 0 {
                break;
            }
            self.evict_list_unprotected(state, t, over, actions);
        }
        self.short = self.size() > self.c;
        if self.short {
            self.stats.evict_not_enough += 1;
        }
    }

    /// Turns ghost-hit bytes since the previous pass into new `meta`, `pd`, `pm`.
    fn adapt_fractions(&mut self) {
        let mut delta = [[0u64; 2]; 2];
        for (g, row) in delta.iter_mut().enumerate() {
            for (t, d) in row.iter_mut().enumerate() {
                *d = self.ghost_hit_bytes[g][t] - self.ghost_hit_seen[g][t];
                self.ghost_hit_seen[g][t] = self.ghost_hit_bytes[g][t];
            }
        }
        let [[grd, grm], [gfd, gfm]] = delta;
        let [[gsrd, gsrm], [gsfd, gsfm]] = self.ghost_target_bytes;
        let damp = self.cfg.damp_extremes;
        self.meta = adapt::adjust(
            self.meta,
            gsrd + gsrm + gsfd + gsfm,
            grm + gfm,
            grd + gfd,
            self.cfg.meta_balance,
            damp,
        );
        let (grd, gfd, grm, gfm) = if self.cfg.ghost_hits_weighted {
            let g = |s: State, t: usize| self.sizes[s as usize][t].max(1);
            // hits × max(1, other ghost / this ghost), exact to the byte as the paper's δ.
            let w = |hits: u64, other: u64, this: u64| {
                if this >= other {
                    hits
                } else {
                    (u128::from(hits) * u128::from(other) / u128::from(this))
                        .min(u128::from(u64::MAX)) as u64
                }
            };
            (
                w(grd, g(State::MfuGhost, DATA), g(State::MruGhost, DATA)),
                w(gfd, g(State::MruGhost, DATA), g(State::MfuGhost, DATA)),
                w(grm, g(State::MfuGhost, META), g(State::MruGhost, META)),
                w(gfm, g(State::MruGhost, META), g(State::MfuGhost, META)),
            )
        } else {
            (grd, gfd, grm, gfm)
        };
        self.pd = adapt::adjust(self.pd, gsrd + gsfd, grd, gfd, 100, damp);
        self.pm = adapt::adjust(self.pm, gsrm + gsfm, grm, gfm, 100, damp);
    }

    /// The ghost bounds for [mru_ghost, mfu_ghost][type].
    fn ghost_targets(&self) -> [[u64; 2]; 2] {
        match (self.cfg.mode, self.cfg.ghost_bound) {
            (ArcMode::OpenZfs, GhostBound::Directory) => {
                let g = |s: State, t: usize| self.sizes[s as usize][t];
                [
                    [g(State::MruGhost, DATA), g(State::MruGhost, META)],
                    [g(State::MfuGhost, DATA), g(State::MfuGhost, META)],
                ]
            }
            (ArcMode::OpenZfs, GhostBound::HalfOfOthers) => {
                let sz = |s: State, t: usize| self.sizes[s as usize][t];
                let mrud = sz(State::Mru, DATA) + sz(State::Anon, DATA);
                let mrum = sz(State::Mru, META) + sz(State::Anon, META);
                let (mfud, mfum) = (sz(State::Mfu, DATA), sz(State::Mfu, META));
                // Each ghost list holds at most half of the other three live lists.
                [
                    [(mrum + mfud + mfum) / 2, (mrud + mfud + mfum) / 2],
                    [(mrud + mrum + mfum) / 2, (mrud + mrum + mfud) / 2],
                ]
            }
            // The paper's bounds are enforced on insertion (paper_make_room_for_new).
            (ArcMode::Paper, _) => [[u64::MAX; 2]; 2],
        }
    }

    fn trim_ghosts(&mut self, actions: &mut Vec<Action>) {
        if self.cfg.mode == ArcMode::Paper || self.cfg.ghost_bound == GhostBound::Directory {
            // The paper keeps these bounds on insertion; other operations (shrink, writes)
            // can break them, so they are restored here too.
            self.trim_ghosts_directory(actions);
        }
        if self.cfg.mode == ArcMode::Paper {
            return;
        }
        let targets = self.ghost_targets();
        for (g, state) in [State::MruGhost, State::MfuGhost].into_iter().enumerate() {
            for t in [DATA, META] {
                self.trim_ghost_list(state, t, targets[g][t], actions);
            }
        }
        self.ghost_target_bytes = targets;
    }

    /// The paper's directory bounds applied to the OpenZFS lists: MRU + MRU ghost <= c and
    /// the whole directory <= 2c.
    fn trim_ghosts_directory(&mut self, actions: &mut Vec<Action>) {
        let c = self.c;
        while self.state_bytes(State::Mru) + self.state_bytes(State::MruGhost) > c {
            let Some((id, _)) = self.coldest(State::MruGhost) else {
                break;
            };
            self.drop_ghost(id, actions);
        }
        while self.size() + self.state_bytes(State::MruGhost) + self.state_bytes(State::MfuGhost)
            > 2 * c
        {
            let Some((id, _)) = self
                .coldest(State::MfuGhost)
                .or_else(|| self.coldest(State::MruGhost))
            else {
                break;
            };
            self.drop_ghost(id, actions);
        }
    }

    // ---- the paper's ARC ---------------------------------------------------------------------

    /// The colder of the data and metadata tails of `state`.
    fn coldest(&self, state: State) -> Option<(u32, usize)> {
        let lists = &self.lists[state as usize];
        let pick = |t: usize| (lists[t].tail != NIL).then(|| (lists[t].tail, t));
        match (pick(DATA), pick(META)) {
            (Some(d), Some(m)) => {
                let older = self.slab.get(d.0).touch_seq <= self.slab.get(m.0).touch_seq;
                Some(if older { d } else { m })
            }
            (d, m) => d.or(m),
        }
    }

    /// REPLACE(x, p) of the paper: moves the LRU block of T1 or T2 to its ghost list.
    /// Returns false when nothing could be evicted.
    fn paper_replace(&mut self, in_b2: bool, now_ms: u64, actions: &mut Vec<Action>) -> bool {
        let t1 = self.state_bytes(State::Mru);
        let from_t1 = t1 > 0 && (t1 > self.p || (in_b2 && t1 == self.p));
        let (first, second) = if from_t1 {
            (State::Mru, State::Mfu)
        } else {
            (State::Mfu, State::Mru)
        };
        for state in [first, second] {
            if let Some((id, _)) = self.coldest(state)
                && !self.is_young_prefetch(self.slab.get(id), now_ms)
            {
                self.evict_one(id, actions);
                return true;
            }
        }
        false
    }

    /// Cases II and III of the paper: adapt `p` on a ghost hit, then make room.
    fn paper_ghost_hit(&mut self, state: State, access: &Access, actions: &mut Vec<Action>) {
        let size = u64::from(access.size_bytes);
        let b1 = self.state_bytes(State::MruGhost);
        let b2 = self.state_bytes(State::MfuGhost);
        // δ = max(1, |B2|/|B1|) pages, a real number in the paper: kept exact to the byte.
        let scaled = |num: u64, den: u64| {
            if den >= num {
                size
            } else {
                (u128::from(size) * u128::from(num) / u128::from(den.max(1))) as u64
            }
        };
        let in_b2 = match state {
            State::MruGhost => {
                self.p = self.p.saturating_add(scaled(b2, b1)).min(self.c);
                false
            }
            State::MfuGhost => {
                self.p = self.p.saturating_sub(scaled(b1, b2));
                true
            }
            _ => false,
        };
        while self.size() + size > self.c {
            if !self.paper_replace(in_b2, access.now_ms, actions) {
                break;
            }
        }
    }

    /// Case IV of the paper: a block in no list. Keeps |T1|+|B1| <= c and the whole
    /// directory <= 2c, then makes room in the cache.
    fn paper_make_room_for_new(&mut self, size: u64, now_ms: u64, actions: &mut Vec<Action>) {
        let c = self.c;
        let t1 = self.state_bytes(State::Mru);
        let l1 = t1 + self.state_bytes(State::MruGhost);
        if l1 + size > c {
            if t1 < c {
                while self.state_bytes(State::Mru) + self.state_bytes(State::MruGhost) + size > c {
                    let Some((id, _)) = self.coldest(State::MruGhost) else {
                        break;
                    };
                    self.drop_ghost(id, actions);
                }
                while self.size() + size > c {
                    if !self.paper_replace(false, now_ms, actions) {
                        break;
                    }
                }
            } else {
                // T1 alone fills the cache: its LRU block leaves the directory entirely.
                while self.size() + size > c {
                    let Some((id, _)) = self.coldest(State::Mru) else {
                        break;
                    };
                    self.forget(id, actions);
                }
            }
        } else {
            let total =
                self.size() + self.state_bytes(State::MruGhost) + self.state_bytes(State::MfuGhost);
            if total + size > c {
                while self.size()
                    + self.state_bytes(State::MruGhost)
                    + self.state_bytes(State::MfuGhost)
                    + size
                    > 2 * c
                {
                    let Some((id, _)) = self.coldest(State::MfuGhost) else {
                        break;
                    };
                    self.drop_ghost(id, actions);
                }
                while self.size() + size > c {
                    if !self.paper_replace(false, now_ms, actions) {
                        break;
                    }
                }
            }
        }
    }

    // ---- reporting and checking ------------------------------------------------------------

    /// Counters, sizes and targets under their OpenZFS arcstats names (plus a few larch ones,
    /// documented on [`ArcStats`]).
    pub fn kstats(&self) -> Vec<(String, u64)> {
        let s = &self.stats;
        let (first_reads, second_reads) = self
            .reuse
            .as_ref()
            .map_or((0, 0), |r| r.first_and_second_reads());
        let mut out: Vec<(String, u64)> = [
            ("hits", s.hits),
            ("misses", s.misses),
            ("demand_data_hits", s.demand_data_hits),
            ("demand_data_misses", s.demand_data_misses),
            ("demand_metadata_hits", s.demand_metadata_hits),
            ("demand_metadata_misses", s.demand_metadata_misses),
            ("prefetch_data_hits", s.prefetch_data_hits),
            ("prefetch_data_misses", s.prefetch_data_misses),
            ("prefetch_metadata_hits", s.prefetch_metadata_hits),
            ("prefetch_metadata_misses", s.prefetch_metadata_misses),
            ("mru_hits", s.mru_hits),
            ("mru_ghost_hits", s.mru_ghost_hits),
            ("mfu_hits", s.mfu_hits),
            ("mfu_ghost_hits", s.mfu_ghost_hits),
            ("uncached_hits", s.uncached_hits),
            ("anon_hits", s.anon_hits),
            ("deleted", s.deleted),
            ("evict_skip", s.evict_skip),
            ("evict_not_enough", s.evict_not_enough),
            ("evict_l2_cached", s.evict_l2_cached),
            ("evict_l2_eligible", s.evict_l2_eligible),
            ("evict_l2_eligible_mfu", s.evict_l2_eligible_mfu),
            ("evict_l2_eligible_mru", s.evict_l2_eligible_mru),
            ("evict_l2_ineligible", s.evict_l2_ineligible),
            ("predictive_prefetch", s.predictive_prefetch),
            (
                "demand_hit_predictive_prefetch",
                s.demand_hit_predictive_prefetch,
            ),
            (
                "demand_iohit_predictive_prefetch",
                s.demand_iohit_predictive_prefetch,
            ),
            ("stale_drops", s.stale_drops),
            ("mfu_passes", s.mfu_passes),
            ("mfu_refused", s.mfu_refused),
            ("mfu_sketch_admits", s.mfu_sketch_admits),
            ("hash_elements", self.slab.live() as u64),
            ("c", self.c),
            ("c_min", self.cfg.c_min_bytes),
            ("c_max", self.cfg.c_max_bytes),
            ("size", self.size()),
            ("meta", self.meta),
            ("pd", self.pd),
            ("pm", self.pm),
            ("p", self.p),
            ("arc_no_grow", u64::from(self.no_grow)),
            ("hdr_size", (self.slab.live() * crate::HEADER_BYTES) as u64),
            ("reuse_sketch_bytes", self.reuse_sketch_bytes()),
            ("mfu_sketch_bytes", self.mfu_sketch_bytes()),
            ("reuse_first_reads", first_reads),
            ("reuse_second_reads", second_reads),
            (
                "data_size",
                [State::Anon, State::Mru, State::Mfu, State::Uncached]
                    .iter()
                    .map(|&st| self.sizes[st as usize][DATA])
                    .sum(),
            ),
            (
                "metadata_size",
                [State::Anon, State::Mru, State::Mfu, State::Uncached]
                    .iter()
                    .map(|&st| self.sizes[st as usize][META])
                    .sum(),
            ),
        ]
        .into_iter()
        .map(|(name, value)| (name.to_string(), value))
        .collect();
        for state in [
            State::Anon,
            State::Mru,
            State::MruGhost,
            State::Mfu,
            State::MfuGhost,
            State::Uncached,
            State::L2cOnly,
        ] {
            let i = state as usize;
            let name = state.name();
            out.push((
                format!("{name}_size"),
                self.sizes[i][DATA] + self.sizes[i][META],
            ));
            out.push((format!("{name}_data"), self.sizes[i][DATA]));
            out.push((format!("{name}_metadata"), self.sizes[i][META]));
            out.push((format!("{name}_evictable_data"), self.lists[i][DATA].bytes));
            out.push((
                format!("{name}_evictable_metadata"),
                self.lists[i][META].bytes,
            ));
        }
        out
    }

    /// Walks every list and header; panics, with the values, on any broken invariant.
    pub fn check_invariants(&self) {
        let mut sizes = [[0u64; 2]; 7];
        let mut listed = 0u64;
        assert_eq!(
            self.slab.index.len(),
            self.slab.live(),
            "index entries against live headers"
        );
        for id in self.slab.index.iter() {
            let h = self.slab.get(id);
            let key = h.key;
            assert_eq!(
                self.slab.lookup(&key),
                Some(id),
                "index does not find {key:?}"
            );
            sizes[h.state as usize][h.buf_type as usize] += u64::from(h.size_bytes);
            if is_listed(h.state, h.refcount) {
                listed += 1;
            }
            assert_eq!(
                h.has(FLAG_DIRTY),
                h.state == State::Anon,
                "{key:?}: dirty flag {} in state {:?}",
                h.has(FLAG_DIRTY),
                h.state
            );
            if h.state == State::L2cOnly {
                assert!(h.has(FLAG_HAS_L2), "{key:?}: l2c_only without an L2 copy");
            }
            if !h.state.is_resident() {
                assert_eq!(h.refcount, 0, "{key:?}: held in {:?}", h.state);
            }
            assert!(h.marks <= MAX_MARKS, "{key:?}: {} marks", h.marks);
            if self.cfg.policy == ArcPolicy::Arc {
                assert_eq!(h.marks, 0, "{key:?}: marks under the ARC policy");
            }
        }
        assert_eq!(
            sizes, self.sizes,
            "state sizes differ from the sum over headers"
        );
        let mut on_lists = 0u64;
        for state in State::ALL {
            for t in [DATA, META] {
                let list = &self.lists[state as usize][t];
                let ids = self.slab.walk(list);
                assert_eq!(ids.len() as u64, list.len, "{state:?}/{t}: list count");
                let mut bytes = 0;
                for &id in &ids {
                    let h = self.slab.get(id);
                    assert_eq!(h.state, state, "{:?} on the {state:?} list", h.key);
                    assert_eq!(h.buf_type as usize, t, "{:?} on the wrong type list", h.key);
                    assert!(
                        is_listed(h.state, h.refcount),
                        "{:?} listed while held",
                        h.key
                    );
                    bytes += u64::from(h.size_bytes);
                }
                assert_eq!(bytes, list.bytes, "{state:?}/{t}: list bytes");
                on_lists += list.len;
            }
        }
        assert_eq!(on_lists, listed, "listed headers vs list lengths");
        let c = self.c;
        assert!(
            self.cfg.c_min_bytes.max(1).min(self.cfg.c_max_bytes) <= c && c <= self.cfg.c_max_bytes,
            "c {c} outside [{}, {}]",
            self.cfg.c_min_bytes,
            self.cfg.c_max_bytes
        );
        assert!(
            self.size() <= c || self.short,
            "size {} over c {c} without a short eviction",
            self.size()
        );
        assert!(self.meta <= ONE && self.pd <= ONE && self.pm <= ONE);
        let directory =
            self.size() + self.state_bytes(State::MruGhost) + self.state_bytes(State::MfuGhost);
        match (self.cfg.mode, self.cfg.ghost_bound) {
            (ArcMode::OpenZfs, GhostBound::Directory) => {
                let l1 = self.state_bytes(State::Mru) + self.state_bytes(State::MruGhost);
                let ghosts = self.state_bytes(State::MruGhost);
                assert!(l1 <= c || ghosts == 0, "MRU + MRU ghost {l1} over c {c}");
                assert!(
                    directory <= 2 * c || self.short,
                    "directory {directory} over 2c {}",
                    2 * c
                );
            }
            (ArcMode::OpenZfs, GhostBound::HalfOfOthers) => {
                let targets = self.ghost_targets();
                for (g, state) in [State::MruGhost, State::MfuGhost].into_iter().enumerate() {
                    for t in [DATA, META] {
                        let bytes = self.sizes[state as usize][t];
                        assert!(
                            bytes <= targets[g][t],
                            "{state:?}/{t} ghost holds {bytes} over its bound {}",
                            targets[g][t]
                        );
                    }
                }
            }
            (ArcMode::Paper, _) => {
                assert!(self.p <= c, "p {} over c {c}", self.p);
                if !self.short {
                    assert!(
                        directory <= 2 * c,
                        "directory {directory} over 2c {}",
                        2 * c
                    );
                }
            }
        }
    }
}

impl Policy for Arc {
    fn hint_next(&self, key: &BlockKey) {
        self.prefetch(key);
    }

    fn name(&self) -> &'static str {
        match self.cfg.mode {
            _ if self.cfg.policy == ArcPolicy::Larch => "larch",
            ArcMode::Paper => "arc-paper",
            ArcMode::OpenZfs
                if self.cfg == ArcConfig::openzfs(self.cfg.c_min_bytes, self.cfg.c_max_bytes) =>
            {
                "arc-openzfs"
            }
            ArcMode::OpenZfs => "arc",
        }
    }

    fn access(&mut self, access: &Access, actions: &mut Vec<Action>) -> Outcome {
        Arc::access(self, access, actions)
    }

    fn remove(&mut self, key: &BlockKey, actions: &mut Vec<Action>) {
        Arc::remove(self, key, actions);
    }

    fn resident_bytes(&self) -> u64 {
        self.size()
    }

    fn target_bytes(&self) -> u64 {
        self.c
    }

    fn tracked_headers(&self) -> usize {
        self.slab.live()
    }

    fn counters(&self) -> HitCounters {
        HitCounters {
            hits: self.stats.hits,
            misses: self.stats.misses,
        }
    }

    fn check_invariants(&self) {
        Arc::check_invariants(self)
    }

    fn kstats(&self) -> Vec<(String, u64)> {
        Arc::kstats(self)
    }
}

//! The L2 feed's decisions, with no device in sight: which blocks one feed writes to a
//! cache device, in what order and within which budget, and when the next feed runs.
//! The engine turns the result into one sequential write; the simulator runs the same
//! functions against its device models, so both feed alike.
//!
//! The decisions, as OpenZFS's `l2arc_write_buffers` and `l2arc_feed_thread` make them,
//! and where larch differs:
//! 1. **Budget.** A feed writes at most `l2arc_write_max`, plus `l2arc_write_boost` while
//!    the ARC is cold (it has not evicted yet: nothing is lost by writing more), and never
//!    more than one batch of the device may hold ([`batch_data_limit`]). It scans at most `l2arc_headroom` times
//!    that (times `l2arc_headroom_boost` percent) from the cold end of each list: blocks
//!    nearer the hot end are not about to be evicted, so feeding them would waste device
//!    writes.
//! 2. **Order** ([`FEED_ORDER`]): metadata before data (a metadata miss costs more), MFU
//!    before MRU within each, each list from its cold end.
//! 3. **Eligibility** ([`FeedRules`]): the volume allows the cache device
//!    (`secondarycache`); not a prefetched block unless `l2arc_noprefetch=0`; with
//!    `l2arc_mfuonly`, only MFU (1) or MFU data and all metadata (2); not a block whose
//!    contents came from a write no read has used (`l2arc_nowrite`, larch's: a write-once
//!    block would cost a device write and likely never be read). Dirty blocks are on no
//!    list, so they are never fed. The caller skips blocks already on the device.
//! 4. **Pace** ([`next_feed`]): every `l2arc_feed_secs`; again after `l2arc_feed_min_ms`
//!    when the last feed wrote over half its budget (`l2arc_feed_again`); and, larch's
//!    `l2arc_feed_follow`, every `l2arc_feed_min_ms` with that share of the per-second
//!    budget while blocks the feed could have written leave the ARC unfed, so the feed
//!    keeps up with an ARC that turns over faster than once a second, at the same bytes
//!    per second.
//!
//! The tunables reach these decisions one way: the engine's and the simulator's tunables
//! both implement [`FeedTunables`], and [`BudgetRules::from_tunables`],
//! [`PaceRules::from_tunables`] and [`FeedRules::from_tunables`] read them.

use crate::{Arc, BlockInfo, BlockKey, BufType, State};

/// The tunables the feed's decisions read, by their OpenZFS (or larch's) names. The
/// engine's `Tunables` and the simulator's `SimTunables` implement it by handing out
/// their values, so that both turn the same values into the same rules.
pub trait FeedTunables {
    /// `l2arc_write_max`, bytes.
    fn l2arc_write_max(&self) -> u64;
    /// `l2arc_write_boost`, bytes.
    fn l2arc_write_boost(&self) -> u64;
    /// `l2arc_headroom` (0: scan without limit).
    fn l2arc_headroom(&self) -> u64;
    /// `l2arc_headroom_boost`, percent.
    fn l2arc_headroom_boost(&self) -> u64;
    /// `l2arc_feed_secs`.
    fn l2arc_feed_secs(&self) -> u64;
    /// `l2arc_feed_min_ms`.
    fn l2arc_feed_min_ms(&self) -> u64;
    /// `l2arc_feed_again`.
    fn l2arc_feed_again(&self) -> bool;
    /// `l2arc_feed_follow` (larch's).
    fn l2arc_feed_follow(&self) -> bool;
    /// `l2arc_noprefetch`.
    fn l2arc_noprefetch(&self) -> bool;
    /// `l2arc_nowrite` (larch's).
    fn l2arc_nowrite(&self) -> bool;
    /// `l2arc_mfuonly` (0, 1 or 2; see [`MfuOnly::from_tunable`]).
    fn l2arc_mfuonly(&self) -> u64;
    /// `l2arc_admit` (larch's).
    fn l2arc_admit(&self) -> bool;
}

/// The bytes of data one feed may write to a device whose batches may span
/// `max_batch_bytes` of its ring
/// ([`RingSpace::max_batch_bytes`](crate::ring::RingSpace::max_batch_bytes)): three
/// quarters of it. The batch carries
/// more than its records' data within that span (the log blocks that describe them,
/// sector padding, and a ring tail skipped when a record does not fit before the ring's
/// end), and a batch the writer refuses as too long is skipped whole; the quarter kept
/// for those leaves a full feed room to be written.
pub fn batch_data_limit(max_batch_bytes: u64) -> u64 {
    max_batch_bytes / 4 * 3
}

/// The lists a feed scans, in order: metadata first, MFU before MRU.
pub const FEED_ORDER: [(State, BufType); 4] = [
    (State::Mfu, BufType::Metadata),
    (State::Mru, BufType::Metadata),
    (State::Mfu, BufType::Data),
    (State::Mru, BufType::Data),
];

/// What `l2arc_mfuonly` allows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MfuOnly {
    /// 0: MRU and MFU.
    #[default]
    No,
    /// 1: MFU only.
    Yes,
    /// 2: MFU data and all metadata.
    DataOnly,
}

impl MfuOnly {
    /// The mode of an `l2arc_mfuonly` value (anything above 2 counts as 2).
    pub fn from_tunable(value: u64) -> MfuOnly {
        match value {
            0 => MfuOnly::No,
            1 => MfuOnly::Yes,
            _ => MfuOnly::DataOnly,
        }
    }

    fn allows(self, state: State, buf_type: BufType) -> bool {
        match self {
            MfuOnly::No => true,
            MfuOnly::Yes => state == State::Mfu,
            MfuOnly::DataOnly => state == State::Mfu || buf_type == BufType::Metadata,
        }
    }
}

/// Which blocks may be fed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FeedRules {
    /// `l2arc_noprefetch`: skip blocks a prefetch brought in and no demand read used.
    pub noprefetch: bool,
    /// `l2arc_nowrite`: skip blocks whose contents came from a write no read has used.
    pub nowrite: bool,
    /// `l2arc_mfuonly`.
    pub mfu_only: MfuOnly,
    /// `l2arc_admit`: skip blocks read fewer than [`ADMIT_READS`] times lately, as the
    /// ARC's reuse sketch counts them ([`BlockInfo::reads`]).
    pub admit: bool,
}

/// The demand reads lately a block needs to be fed under `l2arc_admit`: one before the
/// read that brought it into the ARC this time. A block read once and never again is
/// most of what a feed wastes (seed 002's random reads over a data set many times the
/// cache); a block read twice within the sketch's memory (five window-fulls of reads,
/// the window being the ARC and its cache devices, [`crate::reuse`]) has shown a reuse
/// distance the cache devices can serve.
pub const ADMIT_READS: u8 = 2;

impl FeedRules {
    /// The rules `tunables` set (decision 3).
    pub fn from_tunables(tunables: &(impl FeedTunables + ?Sized)) -> FeedRules {
        FeedRules {
            noprefetch: tunables.l2arc_noprefetch(),
            nowrite: tunables.l2arc_nowrite(),
            mfu_only: MfuOnly::from_tunable(tunables.l2arc_mfuonly()),
            admit: tunables.l2arc_admit(),
        }
    }

    /// The rules for a feed to a device whose evict hand is still in its `first_sweep`
    /// (nothing on it was overwritten yet): `l2arc_admit` applies only once it is not.
    /// Until the device has filled once, a copy takes room no other copy holds, so feeding
    /// a block read once costs a device write and displaces nothing.
    pub fn for_device(self, first_sweep: bool) -> FeedRules {
        FeedRules {
            admit: self.admit && !first_sweep,
            ..self
        }
    }

    /// The rules for the blocks of `arc`: `l2arc_admit` applies only while blocks read
    /// once are seldom read again ([`Arc::feeds_blocks_read_once`]).
    pub fn for_arc(self, arc: &Arc) -> FeedRules {
        FeedRules {
            admit: self.admit && !arc.feeds_blocks_read_once(),
            ..self
        }
    }
}

/// How much one feed may write and scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeedBudget {
    /// Bytes of blocks to take at most.
    pub write_bytes: u64,
    /// Bytes of list to walk at most (taken or not).
    pub scan_bytes: u64,
}

/// The tunables that size a feed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BudgetRules {
    /// `l2arc_write_max`.
    pub write_max_bytes: u64,
    /// `l2arc_write_boost`.
    pub write_boost_bytes: u64,
    /// `l2arc_headroom` (0: scan without limit).
    pub headroom: u64,
    /// `l2arc_headroom_boost`, percent.
    pub headroom_boost_percent: u64,
}

impl BudgetRules {
    /// The rules `tunables` set (decision 1).
    pub fn from_tunables(tunables: &(impl FeedTunables + ?Sized)) -> BudgetRules {
        BudgetRules {
            write_max_bytes: tunables.l2arc_write_max(),
            write_boost_bytes: tunables.l2arc_write_boost(),
            headroom: tunables.l2arc_headroom(),
            headroom_boost_percent: tunables.l2arc_headroom_boost(),
        }
    }
}

impl FeedBudget {
    /// The budget of the next feed (decision 1): `pace_bytes` is what [`next_feed`] allows
    /// (`l2arc_write_max` and its share when following), boosted while the ARC is cold,
    /// cut to `batch_limit_bytes` (what one batch of the device may carry,
    /// [`batch_data_limit`]).
    pub fn new(rules: &BudgetRules, pace_bytes: u64, batch_limit_bytes: u64) -> FeedBudget {
        let write_bytes = pace_bytes.min(batch_limit_bytes);
        let scan_bytes = if rules.headroom == 0 {
            u64::MAX
        } else {
            write_bytes
                .saturating_mul(rules.headroom)
                .saturating_mul(rules.headroom_boost_percent)
                / 100
        };
        FeedBudget {
            write_bytes,
            scan_bytes,
        }
    }

    /// The share of one of `parts` independently scanned ARCs (the engine's shards): the
    /// same limits divided evenly, at least one byte each.
    pub fn split(&self, parts: u64) -> FeedBudget {
        let parts = parts.max(1);
        FeedBudget {
            write_bytes: (self.write_bytes / parts).max(1),
            scan_bytes: (self.scan_bytes / parts).max(1),
        }
    }
}

/// One block chosen for a feed, as the ARC described it when it was chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeedPick {
    /// The block.
    pub key: BlockKey,
    /// The generation whose bytes are to be written.
    pub generation: u64,
    /// Its size.
    pub size_bytes: u32,
    /// MRU or MFU.
    pub state: State,
    /// Data or metadata.
    pub buf_type: BufType,
    /// Brought in by a prefetch.
    pub prefetch: bool,
}

impl FeedPick {
    /// The pick of the block `info` describes, found on the list of `state` and `buf_type`.
    fn of(info: &BlockInfo, state: State, buf_type: BufType) -> FeedPick {
        FeedPick {
            key: info.key,
            generation: info.generation,
            size_bytes: info.size_bytes,
            state,
            buf_type,
            prefetch: info.prefetch,
        }
    }
}

/// Chooses the blocks of one ARC to feed (decisions 1-3): walks the lists of
/// [`FEED_ORDER`] from their cold ends, appending to `out` every eligible block for which
/// `skip` says false (the caller skips blocks already on the device, or whose bytes it
/// does not hold, or applies a rule of its own to what the ARC knows of the block), until `budget` is spent. The taken bytes add up over the lists; the
/// scan depth is per list, as in OpenZFS's `l2arc_write_buffers` (a long MFU list whose
/// cold end is already on the device must not hide MRU's from the feed). A list is left
/// at its first block past either limit.
pub fn select(
    arc: &Arc,
    rules: &FeedRules,
    budget: &FeedBudget,
    mut skip: impl FnMut(&BlockInfo) -> bool,
    out: &mut Vec<FeedPick>,
) {
    let mut taken = 0u64;
    let rules = &rules.for_arc(arc);
    for (state, buf_type) in FEED_ORDER {
        if !rules.mfu_only.allows(state, buf_type) {
            continue;
        }
        let mut scanned = 0u64;
        for info in arc.cold_end(state, buf_type) {
            scanned += u64::from(info.size_bytes);
            if scanned > budget.scan_bytes || taken >= budget.write_bytes {
                break;
            }
            if !is_picked(&info, rules) || skip(&info) {
                continue;
            }
            taken += u64::from(info.size_bytes);
            out.push(FeedPick::of(&info, state, buf_type));
        }
    }
}

/// [`select`] over the shards of one ARC, each with `budget`: the picks of `arcs[0]`,
/// then of `arcs[1]`, and so on, as one `select` after another appends them. Why: a step
/// down a list's cold end waits for memory (the next header is known only once this one
/// is loaded), and a feed walks four lists in each shard; the shards' walks are
/// independent, so this one takes a step of each shard's walk in turn, starting to load
/// the next header of each as it goes, and their waits overlap. `skip` is asked in
/// another order than `select` asks it, so it must answer the same whenever it is asked
/// about a block. `scratch` holds each shard's picks until they are appended in order
/// (kept by the caller, so that a feed allocates nothing once warm).
pub fn select_shards(
    arcs: &[Arc],
    rules: &FeedRules,
    budget: &FeedBudget,
    mut skip: impl FnMut(&BlockInfo) -> bool,
    scratch: &mut Vec<Vec<FeedPick>>,
    out: &mut Vec<FeedPick>,
) {
    scratch.resize_with(scratch.len().max(arcs.len()), Vec::new);
    let mut walks: Vec<Walk> = (0..arcs.len()).map(|_| Walk::START).collect();
    // Each shard's rules, once: the shards do not change during the walk.
    let shard_rules: Vec<FeedRules> = arcs.iter().map(|arc| rules.for_arc(arc)).collect();
    let mut active = arcs.len();
    while active > 0 {
        active = 0;
        for (s, walk) in walks.iter_mut().enumerate() {
            if walk.step(
                &arcs[s],
                &shard_rules[s],
                budget,
                &mut skip,
                &mut scratch[s],
            ) {
                active += 1;
            }
        }
    }
    for picks in &mut scratch[..arcs.len()] {
        out.append(picks);
    }
}

/// Where one shard's walk of [`select_shards`] is: the list of [`FEED_ORDER`] it walks
/// (`FEED_ORDER.len()`: done), the header it visits next on it, and the bytes it has
/// scanned on that list and taken over all of them (as [`select`] counts them).
struct Walk {
    list: usize,
    id: u32,
    scanned: u64,
    taken: u64,
}

impl Walk {
    /// Before the first list: `id` is `NIL`, so the first step starts a list.
    const START: Walk = Walk {
        list: usize::MAX,
        id: crate::list::NIL,
        scanned: 0,
        taken: 0,
    };

    /// One step: starts the next allowed list with a header (its first header is visited
    /// at the next step, once loaded), or visits one header. `rules` are `arc`'s
    /// ([`FeedRules::for_arc`]). Returns false when the walk is done.
    fn step(
        &mut self,
        arc: &Arc,
        rules: &FeedRules,
        budget: &FeedBudget,
        skip: &mut impl FnMut(&BlockInfo) -> bool,
        out: &mut Vec<FeedPick>,
    ) -> bool {
        if self.id == crate::list::NIL {
            loop {
                self.list = self.list.wrapping_add(1);
                let Some(&(state, buf_type)) = FEED_ORDER.get(self.list) else {
                    return false;
                };
                if rules.mfu_only.allows(state, buf_type) {
                    self.scanned = 0;
                    self.id = arc.cold_tail(state, buf_type);
                    if self.id != crate::list::NIL {
                        return true;
                    }
                }
            }
        }
        let (state, buf_type) = FEED_ORDER[self.list];
        let (info, prev) = arc.cold_step(self.id);
        self.scanned += u64::from(info.size_bytes);
        if self.scanned > budget.scan_bytes || self.taken >= budget.write_bytes {
            // The list is left here; the next step starts the next one.
            self.id = crate::list::NIL;
            return true;
        }
        self.id = prev;
        if is_picked(&info, rules) && !skip(&info) {
            self.taken += u64::from(info.size_bytes);
            out.push(FeedPick::of(&info, state, buf_type));
        }
        true
    }
}

/// Decision 3 for one block, before the caller's `skip`.
fn is_picked(info: &BlockInfo, rules: &FeedRules) -> bool {
    let skipped_prefetch = rules.noprefetch && info.prefetch;
    let skipped_write = rules.nowrite && info.written;
    let skipped_unread = rules.admit && info.reads < ADMIT_READS;
    info.l2cache && !info.on_l2 && !skipped_prefetch && !skipped_write && !skipped_unread
}

/// The tunables of decision 4.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PaceRules {
    /// `l2arc_feed_secs`.
    pub feed_secs: u64,
    /// `l2arc_feed_min_ms`.
    pub feed_min_ms: u64,
    /// `l2arc_feed_again`.
    pub feed_again: bool,
    /// `l2arc_feed_follow`.
    pub feed_follow: bool,
}

impl PaceRules {
    /// The rules `tunables` set (decision 4).
    pub fn from_tunables(tunables: &(impl FeedTunables + ?Sized)) -> PaceRules {
        PaceRules {
            feed_secs: tunables.l2arc_feed_secs(),
            feed_min_ms: tunables.l2arc_feed_min_ms(),
            feed_again: tunables.l2arc_feed_again(),
            feed_follow: tunables.l2arc_feed_follow(),
        }
    }
}

/// When the next feed comes and how much it may write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeedPace {
    /// Milliseconds until the next feed.
    pub wait_ms: u64,
    /// Its write budget before the device's batch limit (see [`FeedBudget::new`]).
    pub budget_bytes: u64,
}

/// Decision 4: the next feed after one that wrote `wrote_bytes` of a `budget_bytes`
/// budget, `behind` when blocks the feed could have written left the ARC since.
pub fn next_feed(rules: &PaceRules, budget_bytes: u64, wrote_bytes: u64, behind: bool) -> FeedPace {
    let min_ms = rules.feed_min_ms.max(1);
    let interval_ms = rules.feed_secs.max(1).saturating_mul(1000);
    if rules.feed_again && wrote_bytes > budget_bytes / 2 {
        return FeedPace {
            wait_ms: min_ms,
            budget_bytes,
        };
    }
    if rules.feed_follow && behind && min_ms < interval_ms {
        return FeedPace {
            wait_ms: min_ms,
            budget_bytes: (budget_bytes.saturating_mul(min_ms) / interval_ms).max(4096),
        };
    }
    FeedPace {
        wait_ms: interval_ms,
        budget_bytes,
    }
}

/// The write budget of a feed before pacing: `l2arc_write_max`, plus `l2arc_write_boost`
/// while the ARC has not evicted anything (OpenZFS `arc_warm`).
pub fn write_allowance(rules: &BudgetRules, arc_warm: bool) -> u64 {
    let base = rules.write_max_bytes.max(4096);
    if arc_warm {
        base
    } else {
        base.saturating_add(rules.write_boost_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Access, Action, ArcConfig};

    const BLOCK: u32 = 8192;

    /// An ARC with blocks 0..n read once (MRU) and blocks of `mfu` read twice, far apart.
    fn arc_with(n: u64, mfu: &[u64]) -> Arc {
        let mut arc = Arc::new(ArcConfig::new(1 << 20, 64 << 20)).unwrap();
        let mut actions = Vec::new();
        for b in 0..n {
            arc.access(&Access::data(BlockKey::new(1, b), BLOCK, 0), &mut actions);
        }
        for &b in mfu {
            arc.access(
                &Access::data(BlockKey::new(1, b), BLOCK, 1000),
                &mut actions,
            );
        }
        arc
    }

    fn rules() -> FeedRules {
        FeedRules {
            noprefetch: true,
            nowrite: true,
            mfu_only: MfuOnly::No,
            admit: false,
        }
    }

    fn unlimited() -> FeedBudget {
        FeedBudget {
            write_bytes: u64::MAX,
            scan_bytes: u64::MAX,
        }
    }

    fn picked(arc: &Arc, rules: &FeedRules, budget: &FeedBudget) -> Vec<u64> {
        let mut out = Vec::new();
        select(arc, rules, budget, |_| false, &mut out);
        out.iter().map(|p| p.key.block).collect()
    }

    /// An ARC from `ops` (block, metadata, prefetch, time in seconds): reads, some of
    /// them again later (MFU), some by a prefetch.
    fn arc_from(ops: &[(u8, bool, bool, u8)]) -> Arc {
        let mut arc = Arc::new(ArcConfig::new(1 << 20, 64 << 20)).unwrap();
        let mut actions = Vec::new();
        for &(block, metadata, prefetch, seconds) in ops {
            let mut access = Access::data(BlockKey::new(1, u64::from(block)), BLOCK, 0);
            if metadata {
                access.buf_type = BufType::Metadata;
            }
            access.prefetch = prefetch;
            access.now_ms = u64::from(seconds) * 1000;
            arc.access(&access, &mut actions);
        }
        arc
    }

    proptest::proptest! {
        #[test]
        fn select_shards_picks_what_select_picks_shard_after_shard(
            shards in proptest::collection::vec(
                proptest::collection::vec((0u8..64, proptest::bool::ANY, proptest::bool::ANY, 0u8..4), 0..80),
                0..5,
            ),
            write_blocks in 1u64..40,
            scan_blocks in 1u64..60,
            mfu_only in 0u8..3,
            noprefetch in proptest::bool::ANY,
            skip_every in 1u64..5,
        ) {
            let arcs: Vec<Arc> = shards.iter().map(|ops| arc_from(ops)).collect();
            let rules = FeedRules {
                noprefetch,
                nowrite: true,
                mfu_only: [MfuOnly::No, MfuOnly::Yes, MfuOnly::DataOnly][usize::from(mfu_only)],
                admit: false,
            };
            let budget = FeedBudget {
                write_bytes: write_blocks * u64::from(BLOCK),
                scan_bytes: scan_blocks * u64::from(BLOCK),
            };
            let skip = |i: &BlockInfo| i.key.block % skip_every == 1;
            let mut one_by_one = Vec::new();
            for arc in &arcs {
                select(arc, &rules, &budget, skip, &mut one_by_one);
            }
            let mut interleaved = Vec::new();
            select_shards(&arcs, &rules, &budget, skip, &mut Vec::new(), &mut interleaved);
            proptest::prop_assert_eq!(interleaved, one_by_one);
        }
    }

    #[test]
    fn mfu_comes_first_then_mru_each_from_its_cold_end() {
        let arc = arc_with(6, &[4, 1]);
        // MFU cold end: 4 (promoted first), then 1; MRU cold end: 0, 2, 3, 5.
        assert_eq!(picked(&arc, &rules(), &unlimited()), vec![4, 1, 0, 2, 3, 5]);
        let mfu = FeedRules {
            mfu_only: MfuOnly::Yes,
            ..rules()
        };
        assert_eq!(picked(&arc, &mfu, &unlimited()), vec![4, 1]);
    }

    #[test]
    fn the_budget_bounds_what_is_taken_and_what_is_scanned() {
        let arc = arc_with(10, &[]);
        let two = FeedBudget {
            write_bytes: 2 * u64::from(BLOCK),
            scan_bytes: u64::MAX,
        };
        assert_eq!(picked(&arc, &rules(), &two), vec![0, 1]);
        // Scanning stops after three blocks even though the first two are skipped.
        let shallow = FeedBudget {
            write_bytes: u64::MAX,
            scan_bytes: 3 * u64::from(BLOCK),
        };
        let mut out = Vec::new();
        select(&arc, &rules(), &shallow, |i| i.key.block < 2, &mut out);
        assert_eq!(out.iter().map(|p| p.key.block).collect::<Vec<_>>(), vec![2]);
    }

    #[test]
    fn the_scan_depth_is_per_list_so_a_fed_mfu_does_not_hide_mru() {
        // MFU holds blocks 0..8 (already on the device, say); MRU holds 8..12.
        let mfu: Vec<u64> = (0..8).collect();
        let arc = arc_with(12, &mfu);
        let shallow = FeedBudget {
            write_bytes: u64::MAX,
            scan_bytes: 4 * u64::from(BLOCK),
        };
        let mut out = Vec::new();
        select(&arc, &rules(), &shallow, |i| i.key.block < 8, &mut out);
        // MFU's scan stops after four blocks, all skipped; MRU gets a scan of its own.
        let picked: Vec<u64> = out.iter().map(|p| p.key.block).collect();
        assert_eq!(picked, vec![8, 9, 10, 11]);
        // What is taken still adds up over the lists.
        let two = FeedBudget {
            write_bytes: 2 * u64::from(BLOCK),
            scan_bytes: u64::MAX,
        };
        let mut out = Vec::new();
        select(&arc, &rules(), &two, |i| i.key.block < 6, &mut out);
        let picked: Vec<u64> = out.iter().map(|p| p.key.block).collect();
        assert_eq!(picked, vec![6, 7]);
    }

    #[test]
    fn prefetched_written_and_uncacheable_blocks_are_not_fed() {
        let mut arc = Arc::new(ArcConfig::new(1 << 20, 64 << 20)).unwrap();
        let mut actions = Vec::new();
        let prefetched = Access {
            prefetch: true,
            ..Access::data(BlockKey::new(1, 0), BLOCK, 0)
        };
        arc.access(&prefetched, &mut actions);
        let no_l2 = Access {
            l2cache: false,
            ..Access::data(BlockKey::new(1, 1), BLOCK, 0)
        };
        arc.access(&no_l2, &mut actions);
        arc.write(
            BlockKey::new(1, 2),
            7,
            BLOCK,
            BufType::Data,
            0,
            &mut actions,
        );
        arc.write_done(&BlockKey::new(1, 2), 7, true, 0, &mut actions);
        arc.access(&Access::data(BlockKey::new(1, 3), BLOCK, 0), &mut actions);
        assert_eq!(picked(&arc, &rules(), &unlimited()), vec![3]);
        let permissive = FeedRules {
            noprefetch: false,
            nowrite: false,
            mfu_only: MfuOnly::No,
            admit: false,
        };
        let mut all = picked(&arc, &permissive, &unlimited());
        all.sort_unstable();
        assert_eq!(all, vec![0, 2, 3]);
    }

    #[test]
    fn admission_feeds_only_blocks_read_twice_lately_once_the_device_has_filled() {
        let mut arc = Arc::new(ArcConfig::fixed(u64::from(BLOCK) * 64)).unwrap();
        let mut actions = Vec::new();
        let read = |arc: &mut Arc, block: u64, actions: &mut Vec<Action>| {
            arc.access(&Access::data(BlockKey::new(1, block), BLOCK, 0), actions);
        };
        // Without a sketch the rule has no evidence and skips nothing.
        read(&mut arc, 1, &mut actions);
        let admit = FeedRules {
            admit: true,
            ..rules()
        };
        assert_eq!(picked(&arc, &admit, &unlimited()), vec![1]);
        arc.set_reuse_window(1024);
        // Block 1's read came before the sketch: it counts from now on. Many blocks read
        // once and not again, so that blocks read once are not fed.
        for block in 100..120 {
            read(&mut arc, block, &mut actions);
        }
        for block in [1, 2, 3, 3] {
            read(&mut arc, block, &mut actions);
        }
        assert!(!arc.feeds_blocks_read_once());
        let mut twice = picked(&arc, &admit, &unlimited());
        twice.sort_unstable();
        assert_eq!(twice, vec![3], "only block 3 was read twice since");
        read(&mut arc, 2, &mut actions);
        let mut now = picked(&arc, &admit, &unlimited());
        now.sort_unstable();
        assert_eq!(now, vec![2, 3]);
        // A device still in its first sweep takes everything the other rules allow.
        let everything: Vec<u64> = [1, 2, 3].into_iter().chain(100..120).collect();
        let mut first = picked(&arc, &admit.for_device(true), &unlimited());
        first.sort_unstable();
        assert_eq!(first, everything);
        assert_eq!(admit.for_device(false), admit);
        // Once blocks read once are often read again (a quarter of them: 2 and 3, then
        // 100 to 103, against 23 read once), they are fed too.
        for block in 100..103 {
            read(&mut arc, block, &mut actions);
        }
        assert!(!arc.feeds_blocks_read_once(), "5 of 23");
        read(&mut arc, 103, &mut actions);
        assert!(arc.feeds_blocks_read_once(), "6 of 23");
        let mut open = picked(&arc, &admit, &unlimited());
        open.sort_unstable();
        assert_eq!(open, everything);
        // A prefetch is not a read of the block's data by a client.
        arc.access(
            &Access {
                prefetch: true,
                ..Access::data(BlockKey::new(1, 4), BLOCK, 0)
            },
            &mut actions,
        );
        arc.access(&Access::data(BlockKey::new(1, 4), BLOCK, 0), &mut actions);
        assert_eq!(arc.info(&BlockKey::new(1, 4)).unwrap().reads, 1);
        assert!(arc.reuse_sketch_bytes() > 0);
        arc.set_reuse_window(0);
        assert_eq!(arc.reuse_sketch_bytes(), 0);
        assert_eq!(
            arc.info(&BlockKey::new(1, 4)).unwrap().reads,
            crate::reuse::MAX_COUNT
        );
    }

    #[test]
    fn budgets_follow_the_tunables() {
        let rules = BudgetRules {
            write_max_bytes: 32 << 20,
            write_boost_bytes: 32 << 20,
            headroom: 8,
            headroom_boost_percent: 200,
        };
        assert_eq!(write_allowance(&rules, false), 64 << 20);
        assert_eq!(write_allowance(&rules, true), 32 << 20);
        let b = FeedBudget::new(&rules, 32 << 20, 16 << 20);
        assert_eq!(b.write_bytes, 16 << 20, "cut to the batch limit");
        assert_eq!(b.scan_bytes, (16 << 20) * 16, "headroom 8 x 200%");
        let split = b.split(16);
        assert_eq!(split.write_bytes, 1 << 20);
        let open = FeedBudget::new(
            &BudgetRules {
                headroom: 0,
                ..rules
            },
            1 << 20,
            u64::MAX,
        );
        assert_eq!(open.scan_bytes, u64::MAX);
    }

    /// Tunables as a caller holds them: every value distinct, so that a swapped pair shows.
    struct Values;

    impl FeedTunables for Values {
        fn l2arc_write_max(&self) -> u64 {
            1
        }
        fn l2arc_write_boost(&self) -> u64 {
            2
        }
        fn l2arc_headroom(&self) -> u64 {
            3
        }
        fn l2arc_headroom_boost(&self) -> u64 {
            4
        }
        fn l2arc_feed_secs(&self) -> u64 {
            5
        }
        fn l2arc_feed_min_ms(&self) -> u64 {
            6
        }
        fn l2arc_feed_again(&self) -> bool {
            true
        }
        fn l2arc_feed_follow(&self) -> bool {
            false
        }
        fn l2arc_noprefetch(&self) -> bool {
            false
        }
        fn l2arc_nowrite(&self) -> bool {
            true
        }
        fn l2arc_mfuonly(&self) -> u64 {
            2
        }
        fn l2arc_admit(&self) -> bool {
            true
        }
    }

    #[test]
    fn the_rules_read_each_tunable_by_its_name() {
        let budget = BudgetRules::from_tunables(&Values);
        assert_eq!(
            budget,
            BudgetRules {
                write_max_bytes: 1,
                write_boost_bytes: 2,
                headroom: 3,
                headroom_boost_percent: 4,
            }
        );
        let pace = PaceRules::from_tunables(&Values);
        assert_eq!(
            pace,
            PaceRules {
                feed_secs: 5,
                feed_min_ms: 6,
                feed_again: true,
                feed_follow: false,
            }
        );
        let eligible = FeedRules::from_tunables(&Values);
        assert_eq!(
            eligible,
            FeedRules {
                noprefetch: false,
                nowrite: true,
                mfu_only: MfuOnly::DataOnly,
                admit: true,
            }
        );
    }

    #[test]
    fn a_batch_keeps_a_quarter_of_its_span_for_log_blocks_padding_and_the_tail() {
        let ring = crate::ring::RingSpace::new(64 << 20, 4096);
        assert_eq!(ring.max_batch_bytes(), 16 << 20);
        assert_eq!(batch_data_limit(ring.max_batch_bytes()), 12 << 20);
        // Rounded down to whole quarters: never more than three quarters.
        assert_eq!(batch_data_limit(7), 3);
    }

    #[test]
    fn the_feed_follows_a_fast_arc_at_the_same_bytes_per_second() {
        let rules = PaceRules {
            feed_secs: 1,
            feed_min_ms: 200,
            feed_again: true,
            feed_follow: true,
        };
        let budget = 32 << 20;
        let quiet = next_feed(&rules, budget, 1 << 20, false);
        assert_eq!((quiet.wait_ms, quiet.budget_bytes), (1000, budget));
        // OpenZFS's feed again: a full feed comes back after l2arc_feed_min_ms.
        let again = next_feed(&rules, budget, budget, false);
        assert_eq!((again.wait_ms, again.budget_bytes), (200, budget));
        // Behind the ARC: a fifth of the budget every 200 ms.
        let behind = next_feed(&rules, budget, 1 << 20, true);
        assert_eq!((behind.wait_ms, behind.budget_bytes), (200, budget / 5));
        // Following off, or a minimum interval as long as the interval: no change.
        let off = PaceRules {
            feed_follow: false,
            ..rules
        };
        assert_eq!(next_feed(&off, budget, 1 << 20, true), quiet);
        let slow = PaceRules {
            feed_min_ms: 1000,
            ..rules
        };
        assert_eq!(next_feed(&slow, budget, 1 << 20, true), quiet);
    }
}

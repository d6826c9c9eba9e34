//! The larch policy ([`ArcPolicy::Larch`]): MFU marks and passes, MFU filled while the ARC
//! has room, a loop longer than the cache, the switch at run time, and the bound on what a
//! scan takes from MFU under both policies.

use larch_policy::testing::kstat;
use larch_policy::{
    Access, Arc, ArcConfig, ArcMode, ArcPolicy, BlockKey, MAX_MARKS, Policy, State,
};
use proptest::prelude::*;

const BLOCK: u32 = 4096;
/// Far apart enough that every second access promotes (ARC_MINTIME is 62 ms).
const STEP_MS: u64 = 100;

fn key(block: u64) -> BlockKey {
    BlockKey::new(1, block)
}

fn larch(blocks: u64) -> Arc {
    Arc::new(ArcConfig {
        policy: ArcPolicy::Larch,
        ..ArcConfig::fixed(blocks * u64::from(BLOCK))
    })
    .unwrap()
}

struct Clock(u64);

impl Clock {
    fn read(&mut self, arc: &mut Arc, block: u64) -> bool {
        self.0 += STEP_MS;
        let mut actions = Vec::new();
        let hit = arc
            .access(&Access::data(key(block), BLOCK, self.0), &mut actions)
            .is_hit();
        arc.check_invariants();
        hit
    }
}

fn state(arc: &Arc, block: u64) -> Option<State> {
    arc.info(&key(block)).map(|i| i.state)
}

#[test]
fn mfu_fills_while_the_arc_has_room_then_new_blocks_cycle_through_mru() {
    let mut arc = larch(8);
    let mut clock = Clock(0);
    for b in 0..8 {
        assert!(!clock.read(&mut arc, b));
    }
    // MRU's target is 1/32 of 8 blocks, less than one: each new block handed the one
    // before it to MFU while there was room.
    for b in 0..7 {
        assert_eq!(state(&arc, b), Some(State::Mfu), "block {b}");
    }
    assert_eq!(state(&arc, 7), Some(State::Mru));
    // Full now: new blocks go through MRU and leave from it, MFU keeps its blocks.
    for b in 100..110 {
        assert!(!clock.read(&mut arc, b));
    }
    for b in 0..7 {
        assert_eq!(
            state(&arc, b),
            Some(State::Mfu),
            "block {b} after the new ones"
        );
        assert!(clock.read(&mut arc, b), "block {b} still hits");
    }
    assert_eq!(state(&arc, 109), Some(State::Mru));
    assert_eq!(state(&arc, 108), Some(State::MruGhost));
}

#[test]
fn the_arc_policy_leaves_mfu_empty_until_a_block_is_seen_twice() {
    let mut arc = Arc::new(ArcConfig::fixed(8 * u64::from(BLOCK))).unwrap();
    let mut clock = Clock(0);
    for b in 0..8 {
        clock.read(&mut arc, b);
    }
    assert_eq!(arc.state_bytes(State::Mfu), 0);
    assert_eq!(kstat(&arc, "mfu_passes"), 0);
}

#[test]
fn mfu_hits_earn_passes_at_the_cold_end() {
    let mut arc = larch(4);
    let mut clock = Clock(0);
    // Block 0 goes to MFU first (block 1 hands it over) and is hit twice there: two
    // marks. Blocks 1 and 2 follow it into MFU unmarked, and 3 is promoted by a hit,
    // which leaves MRU empty. MFU from hot to cold: 3, 2, 1, 0.
    clock.read(&mut arc, 0);
    clock.read(&mut arc, 1);
    assert!(clock.read(&mut arc, 0));
    assert!(clock.read(&mut arc, 0));
    clock.read(&mut arc, 2);
    clock.read(&mut arc, 3);
    assert!(clock.read(&mut arc, 3));
    assert_eq!(arc.state_bytes(State::Mru), 0);
    assert_eq!(arc.state_bytes(State::Mfu), 4 * u64::from(BLOCK));
    // Three blocks pass through MRU into its ghost list, then come back: each ghost hit
    // enters MFU, which gives up a block for it.
    for ghost in 200..203 {
        clock.read(&mut arc, ghost);
    }
    for ghost in 200..203 {
        assert_eq!(state(&arc, ghost), Some(State::MruGhost));
    }
    for ghost in 200..203 {
        assert!(!clock.read(&mut arc, ghost));
        assert_eq!(state(&arc, ghost), Some(State::Mfu));
    }
    // Block 0 was MFU's coldest but spent a mark and passed; 1, 2 and 3 left.
    assert_eq!(state(&arc, 0), Some(State::Mfu), "the marked block stayed");
    assert_eq!(kstat(&arc, "mfu_passes"), 1);
    for b in 1..4 {
        assert_eq!(state(&arc, b), Some(State::MfuGhost), "block {b}");
    }
}

#[test]
fn an_mfu_hit_moves_an_unmarked_block_and_only_marks_a_marked_one() {
    let mut arc = larch(4);
    let mut clock = Clock(0);
    for b in 0..4 {
        clock.read(&mut arc, b);
    }
    assert!(clock.read(&mut arc, 3));
    let mfu = |arc: &Arc| -> Vec<u64> {
        arc.cold_end(State::Mfu, larch_policy::BufType::Data)
            .map(|i| i.key.block)
            .collect()
    };
    let before = mfu(&arc);
    assert_eq!(before.len(), 4, "{before:?}");
    // The coldest, unmarked, goes to the hot end with its first mark.
    let coldest = before[0];
    assert!(clock.read(&mut arc, coldest));
    let after_one = mfu(&arc);
    assert_eq!(after_one.last(), Some(&coldest), "{after_one:?}");
    // Marked, its next hits only add marks: no list move (S3-FIFO's main queue, and what
    // keeps hits of hot blocks as cheap as under the ARC).
    let next = after_one[0];
    assert!(clock.read(&mut arc, next));
    let moved = mfu(&arc);
    assert!(clock.read(&mut arc, coldest));
    assert!(clock.read(&mut arc, coldest));
    assert_eq!(mfu(&arc), moved, "a marked block stays where it is");
    assert_eq!(moved.last(), Some(&next));
}

#[test]
fn an_mru_ghost_hit_does_not_take_the_place_of_blocks_read_since() {
    let mut arc = larch(4);
    let mut clock = Clock(0);
    for b in 0..4 {
        clock.read(&mut arc, b);
    }
    // Block 3 leaves MRU for 10 and becomes a ghost; then all of MFU (0, 1, 2) is read.
    clock.read(&mut arc, 10);
    assert_eq!(state(&arc, 3), Some(State::MruGhost));
    for b in 0..3 {
        assert!(clock.read(&mut arc, b));
    }
    // Its ghost hit would push out a block read after it: it enters MRU instead.
    assert!(!clock.read(&mut arc, 3));
    assert_eq!(state(&arc, 3), Some(State::Mru));
    assert_eq!(kstat(&arc, "mfu_refused"), 1);
    assert_eq!(kstat(&arc, "mru_ghost_hits"), 1);
    for b in 0..3 {
        assert_eq!(state(&arc, b), Some(State::Mfu), "block {b}");
    }
}

/// Hits of a loop over `blocks` blocks repeated `passes` times.
fn loop_hits(arc: &mut Arc, blocks: u64, passes: u64) -> u64 {
    let mut clock = Clock(0);
    let mut hits = 0;
    for _ in 0..passes {
        for b in 0..blocks {
            hits += u64::from(clock.read(arc, b));
        }
    }
    hits
}

#[test]
fn a_loop_longer_than_the_cache_keeps_hitting_under_larch_not_under_arc() {
    // Longer than the ghost lists reach too (2 x the cache): no ghost hits.
    let (cache, blocks, passes) = (100, 250, 10);
    let mut arc = Arc::new(ArcConfig::fixed(cache * u64::from(BLOCK))).unwrap();
    assert_eq!(
        loop_hits(&mut arc, blocks, passes),
        0,
        "the ARC is LRU here"
    );
    let mut arc = larch(cache);
    let hits = loop_hits(&mut arc, blocks, passes);
    // The offline optimum keeps cache - 1 blocks for good: (cache - 1) hits per pass
    // after the first. MFU holds what filled it, MRU (its 1/32) cycles.
    let optimum = (cache - 1) * (passes - 1);
    assert!(
        hits * 10 >= optimum * 9,
        "{hits} hits, the optimum {optimum}"
    );
}

#[test]
fn a_loop_within_the_ghost_lists_reach_keeps_hitting_too() {
    // 1.5 x the cache: every access past MRU is a ghost hit. Those that would push out
    // MFU blocks read since are refused and do not grow MRU, so MFU stays in place.
    let (cache, blocks, passes) = (100, 150, 10);
    let mut arc = larch(cache);
    let hits = loop_hits(&mut arc, blocks, passes);
    let optimum = (cache - 1) * (passes - 1);
    assert!(
        hits * 10 >= optimum * 8,
        "{hits} hits, the optimum {optimum}"
    );
    assert!(kstat(&arc, "mfu_refused") > 0);
    let mut arc = Arc::new(ArcConfig::fixed(cache * u64::from(BLOCK))).unwrap();
    assert_eq!(
        loop_hits(&mut arc, blocks, passes),
        0,
        "the ARC is LRU here"
    );
}

#[test]
fn a_loop_beyond_the_ghosts_reach_displaces_mfu_blocks_never_read_again() {
    // MFU fills with blocks that are never read again; then a loop over 2.5 x the cache
    // of other blocks: no ghost hit ever, so only MFU's admission sketch can tell that the
    // loop's blocks are read over and over.
    let (cache, blocks, passes) = (100, 250, 10);
    let mut arc = larch(cache);
    let mut clock = Clock(0);
    for b in 0..cache {
        clock.read(&mut arc, 10_000 + b);
    }
    assert_eq!(
        kstat(&arc, "mfu_sketch_bytes"),
        0,
        "kept once the ARC is full"
    );
    let mut hits = 0;
    for pass in 0..passes {
        for b in 0..blocks {
            let hit = clock.read(&mut arc, b);
            if pass >= 5 {
                hits += u64::from(hit);
            }
        }
    }
    assert!(kstat(&arc, "mfu_sketch_bytes") > 0);
    assert!(kstat(&arc, "mfu_sketch_admits") > 0);
    assert_eq!(
        kstat(&arc, "mru_ghost_hits") + kstat(&arc, "mfu_ghost_hits"),
        0
    );
    let left = (0..cache)
        .filter(|b| state(&arc, 10_000 + b) == Some(State::Mfu))
        .count();
    assert!(left < 10, "{left} blocks read once still in MFU");
    // Over the last five passes, at least 80% of what keeping cache - 1 of the loop's
    // blocks for good would hit.
    let optimum = (cache - 1) * 5;
    assert!(
        hits * 10 >= optimum * 8,
        "{hits} hits, the optimum {optimum}"
    );
}

#[test]
fn the_policy_switches_at_run_time_without_moving_a_block() {
    let mut arc = larch(8);
    let mut clock = Clock(0);
    for b in 0..8 {
        clock.read(&mut arc, b);
    }
    clock.read(&mut arc, 0);
    assert_eq!(arc.info(&key(0)).map(|i| i.state), Some(State::Mfu));
    let before: Vec<_> = (0..8).map(|b| state(&arc, b)).collect();
    let sizes = (arc.size(), arc.c(), Policy::tracked_headers(&arc));
    arc.set_policy(ArcPolicy::Arc).unwrap();
    arc.check_invariants(); // which includes: no marks under the ARC policy
    assert_eq!(Policy::name(&arc), "arc");
    assert_eq!((0..8).map(|b| state(&arc, b)).collect::<Vec<_>>(), before);
    assert_eq!((arc.size(), arc.c(), Policy::tracked_headers(&arc)), sizes);
    arc.set_policy(ArcPolicy::Larch).unwrap();
    assert_eq!(Policy::name(&arc), "larch");
    assert!(clock.read(&mut arc, 0));
}

#[test]
fn the_papers_mode_has_only_the_arc() {
    let cfg = ArcConfig {
        policy: ArcPolicy::Larch,
        ..ArcConfig::paper(1 << 20)
    };
    assert!(Arc::new(cfg).is_err());
    let mut arc = Arc::new(ArcConfig::paper(1 << 20)).unwrap();
    assert!(arc.set_policy(ArcPolicy::Larch).is_err());
    assert_eq!(arc.config().mode, ArcMode::Paper);
    assert_eq!(arc.config().policy, ArcPolicy::Arc);
}

#[test]
fn marks_never_pass_their_bound() {
    let mut arc = larch(4);
    let mut clock = Clock(0);
    for b in 0..4 {
        clock.read(&mut arc, b);
    }
    for _ in 0..10 {
        clock.read(&mut arc, 0);
    }
    arc.check_invariants(); // walks every header: marks <= MAX_MARKS
    assert_eq!(MAX_MARKS, 3);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// A scan of blocks never seen takes from MFU at most what MRU lacked of its target
    /// when the scan began (plus one block): no ghost hits, so the fractions stay put and
    /// each new block makes room in MRU. Under both policies.
    #[test]
    fn a_scan_takes_from_mfu_at_most_mrus_shortfall(
        warm in proptest::collection::vec(0u64..64, 0..600),
        scan in 1u64..400,
        larch_policy in any::<bool>(),
    ) {
        let policy = if larch_policy { ArcPolicy::Larch } else { ArcPolicy::Arc };
        let mut arc = Arc::new(ArcConfig {
            policy,
            ..ArcConfig::fixed(32 * u64::from(BLOCK))
        })
        .unwrap();
        let mut clock = Clock(0);
        for b in warm {
            clock.read(&mut arc, b);
        }
        // The first scan read applies the ghost hits of the warm-up to the balance; from
        // then on nothing moves it. With no metadata MRU's target is pd x c.
        clock.read(&mut arc, 999_999);
        let kstats: std::collections::HashMap<String, u64> = arc.kstats().into_iter().collect();
        let mru_target = ((u128::from(arc.c()) * u128::from(kstats["pd"])) >> 32) as u64;
        let shortfall = mru_target.saturating_sub(arc.state_bytes(State::Mru));
        let mfu_before = arc.state_bytes(State::Mfu);
        let full = arc.size() >= arc.c();
        for b in 0..scan {
            clock.read(&mut arc, 1_000_000 + b);
        }
        let mfu_after = arc.state_bytes(State::Mfu);
        if full {
            prop_assert!(
                mfu_before.saturating_sub(mfu_after) <= shortfall + u64::from(BLOCK),
                "MFU {} -> {}, MRU shortfall {}", mfu_before, mfu_after, shortfall
            );
        }
    }
}

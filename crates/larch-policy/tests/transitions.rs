//! One test per state transition of the ARC (reference: OpenZFS `arc_access`, `arc_evict_hdr`),
//! plus size control, adaptation, and scan resistance.

use larch_policy::testing::kstat;
use larch_policy::{
    Access, Action, Arc, ArcConfig, BlockKey, BufType, Lru, Outcome, Policy, Restore, State,
};

const BLOCK: u32 = 4096;

fn key(block: u64) -> BlockKey {
    BlockKey::new(1, block)
}

fn read(block: u64, now_ms: u64) -> Access {
    Access::data(key(block), BLOCK, now_ms)
}

fn arc_of_blocks(blocks: u64) -> Arc {
    Arc::new(ArcConfig::fixed(blocks * u64::from(BLOCK))).unwrap()
}

fn state(arc: &Arc, block: u64) -> Option<State> {
    arc.info(&key(block)).map(|i| i.state)
}

fn access(arc: &mut Arc, a: Access) -> (Outcome, Vec<Action>) {
    let mut actions = Vec::new();
    let outcome = arc.access(&a, &mut actions);
    arc.check_invariants();
    (outcome, actions)
}

/// Fills the cache with blocks 100.. so that earlier blocks are evicted, far in the future.
fn flood(arc: &mut Arc, count: u64, now_ms: u64) {
    for b in 0..count {
        access(arc, read(100 + b, now_ms));
    }
}

#[test]
fn new_block_enters_mru() {
    let mut arc = arc_of_blocks(8);
    let (outcome, actions) = access(&mut arc, read(1, 0));
    assert_eq!(
        outcome,
        Outcome::Miss {
            found: None,
            on_l2: false
        }
    );
    assert!(actions.is_empty());
    assert_eq!(state(&arc, 1), Some(State::Mru));
    assert_eq!(arc.stats().misses, 1);
}

#[test]
fn mru_hit_within_mintime_stays_in_mru_then_promotes() {
    let mut arc = arc_of_blocks(8);
    access(&mut arc, read(1, 1000));
    let (outcome, _) = access(&mut arc, read(1, 1030));
    assert_eq!(outcome, Outcome::Hit { state: State::Mru });
    assert_eq!(state(&arc, 1), Some(State::Mru), "30 ms < ARC_MINTIME");
    // The 62 ms count from the first access, not from the re-read.
    access(&mut arc, read(1, 1063));
    assert_eq!(state(&arc, 1), Some(State::Mfu));
    assert_eq!(arc.stats().mru_hits, 2);
}

#[test]
fn paper_mode_promotes_on_any_second_access() {
    let mut arc = Arc::new(ArcConfig::paper(8 * u64::from(BLOCK))).unwrap();
    access(&mut arc, read(1, 0));
    access(&mut arc, read(1, 0));
    assert_eq!(state(&arc, 1), Some(State::Mfu));
}

#[test]
fn mfu_hit_stays_in_mfu() {
    let mut arc = arc_of_blocks(8);
    access(&mut arc, read(1, 0));
    access(&mut arc, read(1, 100));
    let (outcome, _) = access(&mut arc, read(1, 200));
    assert_eq!(outcome, Outcome::Hit { state: State::Mfu });
    assert_eq!(state(&arc, 1), Some(State::Mfu));
    assert_eq!(arc.stats().mfu_hits, 1);
}

#[test]
fn demand_hit_on_prefetch_clears_the_flag_without_promotion() {
    let mut arc = arc_of_blocks(8);
    access(
        &mut arc,
        Access {
            prefetch: true,
            ..read(1, 0)
        },
    );
    assert!(arc.info(&key(1)).unwrap().prefetch);
    access(&mut arc, read(1, 500));
    let info = arc.info(&key(1)).unwrap();
    assert_eq!(
        info.state,
        State::Mru,
        "a prefetched block is not promoted by its first use"
    );
    assert!(!info.prefetch);
    assert_eq!(arc.stats().demand_hit_predictive_prefetch, 1);
    assert_eq!(arc.stats().prefetch_data_misses, 1);
    assert_eq!(arc.stats().demand_data_hits, 1);
}

#[test]
fn eviction_moves_mru_to_mru_ghost() {
    let mut arc = arc_of_blocks(4);
    access(&mut arc, read(1, 0));
    let mut evicted = Vec::new();
    for b in 0..4 {
        let (_, actions) = access(&mut arc, read(100 + b, 10));
        evicted.extend(actions);
    }
    assert!(evicted.contains(&Action::Evict {
        key: key(1),
        generation: 0,
        from: State::Mru,
        to: Some(State::MruGhost)
    }));
    assert!(arc.size() <= arc.c());
}

/// Puts blocks 200.. into MFU (two reads far apart), leaving room in MRU for ghosts.
fn warm_mfu(arc: &mut Arc, count: u64) {
    for b in 0..count {
        access(arc, read(200 + b, 0));
        access(arc, read(200 + b, 100));
    }
}

#[test]
fn mru_ghost_hit_goes_to_mfu_and_counts() {
    let mut arc = arc_of_blocks(4);
    warm_mfu(&mut arc, 2);
    access(&mut arc, read(1, 200));
    flood(&mut arc, 2, 300);
    assert_eq!(state(&arc, 1), Some(State::MruGhost));
    let (outcome, _) = access(&mut arc, read(1, 5000));
    assert_eq!(
        outcome,
        Outcome::Miss {
            found: Some(State::MruGhost),
            on_l2: false
        }
    );
    assert_eq!(state(&arc, 1), Some(State::Mfu));
    assert_eq!(arc.stats().mru_ghost_hits, 1);
}

#[test]
fn mru_ghost_hit_of_a_prefetch_returns_to_mru() {
    let mut arc = arc_of_blocks(4);
    warm_mfu(&mut arc, 2);
    let prefetch = Access {
        prefetch: true,
        ..read(1, 200)
    };
    access(&mut arc, prefetch);
    flood(&mut arc, 2, 5000);
    assert_eq!(state(&arc, 1), Some(State::MruGhost));
    access(
        &mut arc,
        Access {
            now_ms: 9000,
            ..prefetch
        },
    );
    assert_eq!(state(&arc, 1), Some(State::Mru));
}

#[test]
fn mfu_eviction_and_mfu_ghost_hit() {
    let mut arc = arc_of_blocks(4);
    access(&mut arc, read(1, 0));
    access(&mut arc, read(1, 100));
    assert_eq!(state(&arc, 1), Some(State::Mfu));
    // Other blocks read twice fill MFU until block 1 ages out of it.
    let mut b = 0;
    while state(&arc, 1) == Some(State::Mfu) && b < 16 {
        access(&mut arc, read(100 + b, 1000 + b * 200));
        access(&mut arc, read(100 + b, 1100 + b * 200));
        b += 1;
    }
    assert_eq!(state(&arc, 1), Some(State::MfuGhost));
    access(&mut arc, read(1, 10_000));
    assert_eq!(state(&arc, 1), Some(State::Mfu));
    assert_eq!(arc.stats().mfu_ghost_hits, 1);
}

#[test]
fn ghost_with_l2_copy_becomes_l2c_only_and_returns_to_mru() {
    let mut arc = arc_of_blocks(4);
    access(&mut arc, read(1, 0));
    assert!(arc.l2_written(&key(1), 0));
    // Push block 1 out of DRAM and then out of the ghost list.
    for b in 0..64 {
        access(&mut arc, read(100 + b, 10));
    }
    assert_eq!(state(&arc, 1), Some(State::L2cOnly));
    let (outcome, _) = access(&mut arc, read(1, 20));
    assert_eq!(
        outcome,
        Outcome::Miss {
            found: Some(State::L2cOnly),
            on_l2: true
        }
    );
    assert_eq!(state(&arc, 1), Some(State::Mru));
}

#[test]
fn l2_eviction_forgets_l2c_only_headers() {
    let mut arc = arc_of_blocks(4);
    assert_eq!(
        arc.l2_restore(key(7), 3, BLOCK, BufType::Data, 0),
        Restore::Restored
    );
    assert_eq!(state(&arc, 7), Some(State::L2cOnly));
    let mut actions = Vec::new();
    arc.l2_evicted(&key(7), 3, &mut actions);
    assert_eq!(state(&arc, 7), None);
    assert_eq!(
        actions,
        vec![Action::Forget {
            key: key(7),
            generation: 3,
            from: State::L2cOnly
        }]
    );
    arc.check_invariants();
}

#[test]
fn restore_of_known_or_stale_blocks() {
    let mut arc = arc_of_blocks(4);
    access(&mut arc, read(1, 0));
    assert_eq!(
        arc.l2_restore(key(1), 0, BLOCK, BufType::Data, 0),
        Restore::AlreadyCached
    );
    assert!(arc.info(&key(1)).unwrap().on_l2);
    assert_eq!(
        arc.l2_restore(key(1), 5, BLOCK, BufType::Data, 0),
        Restore::Stale
    );
    arc.check_invariants();
}

#[test]
fn uncached_blocks_leave_with_their_last_hold() {
    let mut arc = arc_of_blocks(8);
    let a = Access {
        uncached: true,
        ..read(1, 0)
    };
    let mut actions = Vec::new();
    arc.access(&a, &mut actions);
    assert_eq!(state(&arc, 1), Some(State::Uncached));
    assert!(arc.hold(&key(1)));
    arc.release(&key(1), 1, &mut actions);
    assert_eq!(state(&arc, 1), None);
    assert!(actions.iter().any(|a| matches!(
        a,
        Action::Evict {
            from: State::Uncached,
            to: None,
            ..
        }
    )));
    arc.check_invariants();
}

#[test]
fn uncached_blocks_go_first_and_never_push_the_size_past_the_limit() {
    // Blocks 0..6 are cached (read twice: MFU); then a stream of uncached reads, all
    // within the same millisecond (too young for the timed flush), ten times the ARC.
    let mut arc = arc_of_blocks(8);
    for b in 0..6 {
        access(&mut arc, read(b, 0));
        access(&mut arc, read(b, 100));
    }
    for b in 0..80 {
        let a = Access {
            uncached: true,
            ..read(1000 + b, 200)
        };
        access(&mut arc, a);
        // Before, uncached blocks were not among the lists eviction takes from: the
        // cached blocks went first, and then the size passed zfs_arc_max.
        assert!(
            arc.size() <= arc.c(),
            "{} > {} after {b}",
            arc.size(),
            arc.c()
        );
    }
    for b in 0..6 {
        assert_eq!(state(&arc, b), Some(State::Mfu), "cached block {b}");
    }
}

#[test]
fn an_uncached_block_may_not_go_to_a_cache_device() {
    // OpenZFS sets L2CACHE only for blocks the ARC may keep: primarycache decides first.
    let mut arc = arc_of_blocks(8);
    let a = Access {
        uncached: true,
        l2cache: true,
        ..read(1, 0)
    };
    access(&mut arc, a);
    access(&mut arc, a);
    let info = arc.info(&key(1)).unwrap();
    assert_eq!(info.state, State::Uncached);
    assert!(!info.l2cache, "{info:?}");
}

#[test]
fn a_prefetch_of_a_dirty_block_leaves_it_a_written_block() {
    let mut arc = arc_of_blocks(8);
    let mut actions = Vec::new();
    arc.write(key(1), 1, BLOCK, BufType::Data, 0, &mut actions);
    let prefetch = Access {
        prefetch: true,
        generation: 1,
        ..read(1, 5)
    };
    access(&mut arc, prefetch);
    assert!(arc.write_done(&key(1), 1, true, 10, &mut actions));
    let info = arc.info(&key(1)).unwrap();
    assert_eq!(info.state, State::Mru);
    assert!(
        !info.prefetch,
        "a synced write taken for a prefetch: {info:?}"
    );
    // So the next demand read is an ordinary hit, not a used prefetch.
    access(
        &mut arc,
        Access {
            generation: 1,
            ..read(1, 20)
        },
    );
    assert_eq!(kstat(&arc, "demand_hit_predictive_prefetch"), 0);
}

#[test]
fn a_demand_read_that_joined_a_prefetch_clears_its_flag() {
    let mut arc = arc_of_blocks(8);
    let prefetch = Access {
        prefetch: true,
        ..read(1, 0)
    };
    access(&mut arc, prefetch);
    assert!(arc.info(&key(1)).unwrap().prefetch);
    arc.demand_joined(&key(1));
    assert!(!arc.info(&key(1)).unwrap().prefetch);
    assert_eq!(kstat(&arc, "demand_iohit_predictive_prefetch"), 1);
    assert_eq!(kstat(&arc, "hits"), 0, "an I/O hit is not a hit");
    arc.check_invariants();
}

#[test]
fn dirty_and_held_blocks_are_never_evicted() {
    let mut arc = arc_of_blocks(4);
    let mut actions = Vec::new();
    arc.write(key(1), 1, BLOCK, BufType::Data, 0, &mut actions);
    access(&mut arc, read(2, 0));
    assert!(arc.hold(&key(2)));
    flood(&mut arc, 32, 10);
    assert_eq!(state(&arc, 1), Some(State::Anon));
    assert_eq!(state(&arc, 2), Some(State::Mru));
    assert!(arc.size() <= arc.c());
    // Once written back and released, they age out like any block.
    assert!(arc.write_done(&key(1), 1, true, 20, &mut actions));
    assert_eq!(state(&arc, 1), Some(State::Mru));
    arc.release(&key(2), 20, &mut actions);
    flood(&mut arc, 32, 30);
    assert_ne!(state(&arc, 1), Some(State::Mru));
    assert_ne!(state(&arc, 2), Some(State::Mru));
    arc.check_invariants();
}

#[test]
fn all_unevictable_is_reported_not_hidden() {
    let mut arc = arc_of_blocks(2);
    let mut actions = Vec::new();
    for b in 0..4 {
        arc.write(key(b), 1, BLOCK, BufType::Data, 0, &mut actions);
    }
    assert!(arc.size() > arc.c());
    assert!(arc.stats().evict_not_enough > 0);
    arc.check_invariants();
}

#[test]
fn write_invalidates_the_l2_copy_and_write_done_ignores_old_generations() {
    let mut arc = arc_of_blocks(8);
    access(&mut arc, read(1, 0));
    assert!(arc.l2_written(&key(1), 0));
    let mut actions = Vec::new();
    arc.write(key(1), 1, BLOCK, BufType::Data, 10, &mut actions);
    assert!(actions.contains(&Action::InvalidateL2 {
        key: key(1),
        generation: 0
    }));
    assert!(!arc.info(&key(1)).unwrap().on_l2);
    arc.write(key(1), 2, BLOCK, BufType::Data, 20, &mut actions);
    assert!(
        !arc.write_done(&key(1), 1, true, 30, &mut actions),
        "generation 1 was superseded"
    );
    assert!(arc.write_done(&key(1), 2, true, 30, &mut actions));
    assert!(
        !arc.l2_written(&key(1), 1),
        "a stale copy must not be indexed"
    );
    arc.check_invariants();
}

#[test]
fn stale_generation_is_dropped_with_its_l2_copy() {
    let mut arc = arc_of_blocks(8);
    access(&mut arc, read(1, 0));
    assert!(arc.l2_written(&key(1), 0));
    let (outcome, actions) = access(
        &mut arc,
        Access {
            generation: 1,
            ..read(1, 10)
        },
    );
    assert_eq!(
        outcome,
        Outcome::Miss {
            found: None,
            on_l2: false
        }
    );
    assert!(actions.contains(&Action::InvalidateL2 {
        key: key(1),
        generation: 0
    }));
    assert_eq!(arc.info(&key(1)).unwrap().generation, 1);
    assert_eq!(arc.stats().stale_drops, 1);
}

#[test]
fn young_prefetches_are_skipped_by_eviction() {
    let mut arc = arc_of_blocks(4);
    access(
        &mut arc,
        Access {
            prefetch: true,
            ..read(1, 0)
        },
    );
    flood(&mut arc, 4, 10);
    assert_eq!(
        state(&arc, 1),
        Some(State::Mru),
        "prefetch younger than 1 s"
    );
    assert!(arc.stats().evict_skip > 0);
    flood(&mut arc, 8, 2000);
    assert_ne!(state(&arc, 1), Some(State::Mru));
}

#[test]
fn young_prefetches_never_hold_the_arc_past_c_max() {
    // Nothing but young prefetches: protecting them would take the ARC past c_max.
    let mut arc = arc_of_blocks(4);
    for b in 0..10 {
        access(
            &mut arc,
            Access {
                prefetch: true,
                ..read(b, 0)
            },
        );
        assert!(
            arc.size() <= 4 * u64::from(BLOCK),
            "size {} after {b}",
            arc.size()
        );
    }
    // The newest stay; the oldest went, young as they were.
    assert_eq!(state(&arc, 9), Some(State::Mru));
    assert!(state(&arc, 0).is_none_or(|s| !s.is_resident()));
}

#[test]
fn c_grows_from_c_min_and_shrinks_under_pressure() {
    let mut cfg = ArcConfig::new(8 * u64::from(BLOCK), 64 * u64::from(BLOCK));
    cfg.grow_slack_bytes = u64::from(BLOCK);
    cfg.grow_step_min_bytes = u64::from(BLOCK);
    let mut arc = Arc::new(cfg).unwrap();
    assert_eq!(arc.c(), 8 * u64::from(BLOCK));
    flood(&mut arc, 200, 0);
    assert_eq!(arc.c(), 64 * u64::from(BLOCK), "c grows to c_max");
    let mut actions = Vec::new();
    arc.shrink(16 * u64::from(BLOCK), 10, &mut actions);
    assert_eq!(arc.c(), 48 * u64::from(BLOCK));
    assert!(arc.size() <= arc.c());
    assert!(!actions.is_empty(), "shrinking a full cache evicts");
    arc.shrink(1 << 40, 20, &mut actions);
    assert_eq!(arc.c(), 8 * u64::from(BLOCK), "never below c_min");
    arc.set_no_grow(true);
    flood(&mut arc, 50, 30);
    assert_eq!(arc.c(), 8 * u64::from(BLOCK), "no growth while no_grow");
    assert!(
        arc.set_limits(10, 5, 40, &mut actions).is_err(),
        "c_min > c_max is refused"
    );
    arc.check_invariants();
}

#[test]
fn bad_configs_are_refused() {
    assert!(Arc::new(ArcConfig::fixed(0)).is_err());
    assert!(Arc::new(ArcConfig::new(10, 5)).is_err());
}

#[test]
fn ghost_hits_move_the_mru_data_share() {
    for config in [
        ArcConfig::fixed(64 * u64::from(BLOCK)),
        ArcConfig::openzfs_fixed(64 * u64::from(BLOCK)),
    ] {
        let mut arc = Arc::new(config).unwrap();
        warm_mfu(&mut arc, 32);
        let pd0 = kstat(&arc, "pd");
        // A loop larger than what MRU gets: its blocks come back as MRU ghost hits.
        for round in 0..4 {
            for b in 0..40 {
                access(&mut arc, read(b, 1000 + round * 100_000 + b));
            }
        }
        assert!(arc.stats().mru_ghost_hits > 0);
        assert!(kstat(&arc, "pd") > pd0, "MRU ghost hits raise pd");
    }
}

#[test]
fn kstats_use_openzfs_names() {
    let arc = arc_of_blocks(4);
    for name in [
        "hits",
        "misses",
        "demand_data_hits",
        "prefetch_metadata_misses",
        "mru_ghost_hits",
        "mfu_ghost_hits",
        "deleted",
        "evict_skip",
        "c",
        "c_min",
        "c_max",
        "size",
        "meta",
        "pd",
        "pm",
        "mru_size",
        "mru_evictable_data",
        "mfu_ghost_metadata",
        "anon_size",
        "uncached_size",
    ] {
        kstat(&arc, name);
    }
}

/// A hot set read often, then one pass over blocks ten times the cache, then the hot set
/// again: returns the hot set's hit ratio after the scan.
fn hot_set_hit_ratio_after_scan(policy: &mut dyn Policy) -> (f64, f64) {
    let cache_blocks = policy.target_bytes() / u64::from(BLOCK);
    let hot = cache_blocks / 4;
    let mut actions = Vec::new();
    let mut now = 0;
    let hot_round = |policy: &mut dyn Policy, now: &mut u64| {
        let mut actions = Vec::new();
        let mut hits = 0;
        for b in 0..hot {
            *now += 100;
            if policy.access(&read(b, *now), &mut actions).is_hit() {
                hits += 1;
            }
            actions.clear();
        }
        hits as f64 / hot as f64
    };
    for _ in 0..10 {
        hot_round(policy, &mut now);
    }
    let before = hot_round(policy, &mut now);
    for b in 0..cache_blocks * 10 {
        now += 1;
        policy.access(&read(1_000_000 + b, now), &mut actions);
        actions.clear();
    }
    policy.check_invariants();
    let after = hot_round(policy, &mut now);
    (before, after)
}

#[test]
fn scan_resistance() {
    let bytes = 256 * u64::from(BLOCK);
    for config in [
        ArcConfig::fixed(bytes),
        ArcConfig::openzfs_fixed(bytes),
        ArcConfig::paper(bytes),
    ] {
        let mut arc = Arc::new(config.clone()).unwrap();
        let (before, after) = hot_set_hit_ratio_after_scan(&mut arc);
        assert_eq!(before, 1.0, "{config:?}");
        assert!(
            after >= 0.9,
            "{:?}: hot set hit ratio after scan {after}",
            config.mode
        );
    }
    let mut lru = Lru::new(bytes);
    let (before, after) = hot_set_hit_ratio_after_scan(&mut lru);
    assert_eq!(before, 1.0);
    assert_eq!(after, 0.0, "LRU loses the hot set to the scan");
}

#[test]
fn ghost_without_l2_copy_is_forgotten_when_trimmed() {
    let mut arc = arc_of_blocks(4);
    warm_mfu(&mut arc, 2);
    access(&mut arc, read(1, 200));
    let mut forgotten = false;
    for b in 0..64 {
        let (_, actions) = access(&mut arc, read(100 + b, 300));
        forgotten |= actions.contains(&Action::Forget {
            key: key(1),
            generation: 0,
            from: State::MruGhost,
        });
    }
    assert!(
        forgotten,
        "block 1's ghost was trimmed with a Forget action"
    );
    assert_eq!(state(&arc, 1), None);
    assert!(arc.stats().deleted > 0);
}

#[test]
fn written_blocks_say_so_until_a_demand_read_uses_them() {
    let mut arc = arc_of_blocks(8);
    let mut actions = Vec::new();
    arc.write(key(1), 1, BLOCK, BufType::Data, 0, &mut actions);
    assert!(arc.info(&key(1)).unwrap().written, "dirty after a write");
    assert!(arc.write_done(&key(1), 1, true, 10, &mut actions));
    assert!(arc.info(&key(1)).unwrap().written, "still: nobody read it");
    let mut prefetch = read(1, 20);
    prefetch.prefetch = true;
    prefetch.generation = 1;
    access(&mut arc, prefetch);
    assert!(
        arc.info(&key(1)).unwrap().written,
        "a prefetch does not count"
    );
    let mut demand = read(1, 30);
    demand.generation = 1;
    access(&mut arc, demand);
    assert!(!arc.info(&key(1)).unwrap().written, "a demand read used it");
    access(&mut arc, read(2, 40));
    assert!(
        !arc.info(&key(2)).unwrap().written,
        "read blocks never were"
    );
    arc.write(key(2), 2, BLOCK, BufType::Data, 50, &mut actions);
    assert!(arc.info(&key(2)).unwrap().written, "overwritten");
}

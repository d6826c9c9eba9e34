//! A byte-driven interpreter of random ARC operations, shared by the property tests and the
//! fuzz target: every byte string is a valid sequence of API calls, the interpreter keeps a
//! model of what the caller knows (generations, holds, dirty blocks), and after every
//! operation it checks the ARC's invariants and the actions it returned.

use std::collections::{HashMap, HashSet};

use crate::{
    Access, Action, Arc, ArcConfig, ArcMode, ArcPolicy, BlockKey, BufType, GhostBound, Restore,
    State,
};

/// What the caller side knows, to use the API correctly and to check the actions.
#[derive(Default)]
struct Model {
    generation: HashMap<BlockKey, u64>,
    holds: HashMap<BlockKey, u32>,
    dirty: HashSet<BlockKey>,
}

/// Reads operations from bytes; missing bytes read as 0.
struct Bytes<'a> {
    data: &'a [u8],
    at: usize,
}

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }
    fn done(&self) -> bool {
        self.at >= self.data.len()
    }
}

/// Builds an ARC from the first bytes (mode, sizes) and runs the rest as operations.
/// Panics if any invariant breaks.
pub fn run_ops(data: &[u8]) {
    let mut bytes = Bytes { data, at: 0 };
    let unit = 512u64;
    let c_max = unit * (4 + u64::from(bytes.u8() % 64));
    let c_min = c_max / (1 + u64::from(bytes.u8() % 4));
    let mut cfg = match bytes.u8() % 6 {
        0 => ArcConfig::new(c_min, c_max),
        1 => ArcConfig::openzfs(c_min, c_max),
        2 => ArcConfig::paper(c_max),
        3 => ArcConfig {
            ghost_bound: GhostBound::HalfOfOthers,
            ..ArcConfig::new(c_min, c_max)
        },
        4 => ArcConfig {
            policy: ArcPolicy::Larch,
            ..ArcConfig::new(c_min, c_max)
        },
        _ => ArcConfig {
            policy: ArcPolicy::Larch,
            ..ArcConfig::openzfs(c_min, c_max)
        },
    };
    // Small key spaces make ghost hits and full ghost lists common; big ones make scans.
    let keys = 4 + u64::from(bytes.u8() % 92);
    let time_step_ms = 1 + u64::from(bytes.u8());
    let sizes = 1 + u32::from(bytes.u8() % 4);
    cfg.grow_slack_bytes = unit * 4;
    cfg.grow_step_min_bytes = unit;
    let mut arc = Arc::new(cfg).expect("valid config");
    let mut model = Model::default();
    let mut actions = Vec::new();
    let mut now_ms = 0u64;
    while !bytes.done() {
        now_ms += u64::from(bytes.u8()) % time_step_ms;
        let op = bytes.u8();
        let key = BlockKey::new(u64::from(op >> 7), u64::from(bytes.u8()) % keys);
        let size_bytes = 512 * (1 + u32::from(bytes.u8()) % sizes);
        let buf_type = if bytes.u8().is_multiple_of(4) {
            BufType::Metadata
        } else {
            BufType::Data
        };
        actions.clear();
        let generation = *model.generation.get(&key).unwrap_or(&0);
        let held = model.holds.get(&key).copied().unwrap_or(0);
        match op % 16 {
            0..=5 => {
                let flags = bytes.u8();
                let access = Access {
                    key,
                    generation,
                    size_bytes,
                    buf_type,
                    prefetch: flags & 1 != 0,
                    l2cache: flags & 2 != 0,
                    uncached: flags & 4 != 0 && held == 0,
                    now_ms,
                };
                if held > 0 || model.dirty.contains(&key) {
                    // The caller reads what it holds or wrote with the generation it knows.
                    assert!(arc.access(&access, &mut actions).is_hit());
                } else {
                    arc.access(&access, &mut actions);
                }
            }
            6 => {
                let current = arc.info(&key).is_some_and(|i| i.generation == generation);
                if current && arc.hold(&key) {
                    *model.holds.entry(key).or_default() += 1;
                }
            }
            7 => {
                if held > 0 {
                    arc.release(&key, now_ms, &mut actions);
                    *model.holds.get_mut(&key).expect("held") -= 1;
                }
            }
            8 => {
                let next = generation + 1;
                model.generation.insert(key, next);
                model.dirty.insert(key);
                arc.write(key, next, size_bytes, buf_type, now_ms, &mut actions);
            }
            9 => {
                if model.dirty.remove(&key) {
                    assert!(arc.write_done(&key, generation, true, now_ms, &mut actions));
                }
            }
            10 => {
                if held == 0 && arc.remove(&key, &mut actions) {
                    model.dirty.remove(&key);
                    assert!(arc.info(&key).is_none(), "{key:?} still known after remove");
                }
            }
            11 => {
                arc.l2_written(&key, generation);
            }
            12 => arc.l2_evicted(&key, generation, &mut actions),
            13 => {
                let restored = arc.l2_restore(key, generation, size_bytes, buf_type, now_ms);
                if restored == Restore::Restored {
                    assert_eq!(arc.info(&key).map(|i| i.state), Some(State::L2cOnly));
                }
            }
            14 => {
                // The block is overwritten behind the ARC's back (e.g. by another path):
                // only legal when nobody holds it and it is not dirty here.
                if held == 0 && !model.dirty.contains(&key) {
                    model.generation.insert(key, generation + 1);
                }
            }
            _ => whole_arc_op(&mut bytes, &mut arc, unit, now_ms, &mut actions),
        }
        check_actions(&model, &actions, op % 16 == 8);
        arc.check_invariants();
    }
}

/// An operation on the whole ARC rather than a block: shrink, grow, a switch of policy,
/// new limits.
fn whole_arc_op(
    bytes: &mut Bytes,
    arc: &mut Arc,
    unit: u64,
    now_ms: u64,
    actions: &mut Vec<Action>,
) {
    match bytes.u8() % 4 {
        0 => arc.shrink(unit * u64::from(bytes.u8() % 8), now_ms, actions),
        1 => arc.grow(unit * u64::from(bytes.u8() % 8)),
        2 => {
            // A switch of policy at run time; the paper's mode has only the ARC.
            let policy = match arc.config().policy {
                ArcPolicy::Arc => ArcPolicy::Larch,
                ArcPolicy::Larch => ArcPolicy::Arc,
            };
            let paper = arc.config().mode == ArcMode::Paper;
            assert_eq!(arc.set_policy(policy).is_ok(), !paper);
            // The reuse sketch of `l2arc_admit` on or off with it: a small window, so that
            // its counts halve often. It informs the feed only, never the policy.
            let window = if arc.reuse_window() == 0 { 8 } else { 0 };
            arc.set_reuse_window(window);
            assert_eq!(arc.reuse_window(), window);
        }
        _ => {
            let max = unit * (4 + u64::from(bytes.u8() % 64));
            arc.set_limits(max / 2, max, now_ms, actions)
                .expect("valid limits");
        }
    }
}

/// The arcstat `name` of `arc`; panics if there is none (for tests).
pub fn kstat(arc: &Arc, name: &str) -> u64 {
    arc.kstats()
        .into_iter()
        .find(|(k, _)| k == name)
        .unwrap_or_else(|| panic!("no kstat {name}"))
        .1
}

/// Nothing held or dirty may be evicted; a write may drop only the old clean generation.
fn check_actions(model: &Model, actions: &[Action], was_write: bool) {
    for action in actions {
        if let Action::Evict {
            key, generation, ..
        } = action
        {
            let held = model.holds.get(key).copied().unwrap_or(0) > 0;
            let current = model.generation.get(key).copied().unwrap_or(0);
            if was_write && *generation < current {
                continue;
            }
            assert!(!held, "evicted held block {key:?}");
            assert!(
                !model.dirty.contains(key),
                "evicted dirty block {key:?} (generation {generation})"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_and_short_inputs_run() {
        run_ops(&[]);
        run_ops(&[1, 2, 3]);
        run_ops(&[255; 64]);
    }
}

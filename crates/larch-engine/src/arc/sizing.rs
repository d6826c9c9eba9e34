//! ARC sizing: the limits `zfs_arc_min`/`zfs_arc_max` applied to the shards, and memory
//! pressure (OpenZFS `arc_reap_cb_check`/`arc_reap_cb`): when available memory falls below
//! `zfs_arc_sys_free`, growth stops for `arc_grow_retry` (5 s) and the target shrinks by
//! the shortfall, never below `zfs_arc_min`, at most once per [`SHRINK_INTERVAL`], and the
//! engine then gives what was freed back to the system at once (the allocator would keep
//! it, and the shortfall would not shrink).

use std::time::{Duration, Instant};

use super::{ArcCache, SHARDS};
use crate::lock::{Rank, RankedMutex};
use crate::stats::EngineStats;
use crate::system::meminfo;
use crate::tunables::Tunables;

/// How long the ARC does not grow after memory pressure (OpenZFS `arc_grow_retry`, 5 s).
const ARC_GROW_RETRY: Duration = Duration::from_secs(5);

/// Least time between two shrinks for memory pressure: what a shrink frees shows in
/// MemAvailable only once it is back with the kernel. Shrinking by the whole shortfall on
/// every pass (four a second) before then took the ARC down to `zfs_arc_min` for a squeeze
/// of a few hundred MiB (an ARC review's finding).
const SHRINK_INTERVAL: Duration = Duration::from_secs(1);

/// The automatic `zfs_arc_min` for a `zfs_arc_max`.
pub fn default_arc_min(arc_max_bytes: u64) -> u64 {
    arc_max_bytes.min((32 << 20u64).max(arc_max_bytes / 32))
}

/// The limits in force for these tunables: (`zfs_arc_min`, `zfs_arc_max`), the automatic
/// minimum resolved and the minimum never above the maximum.
pub(crate) fn limits(tunables: &Tunables) -> (u64, u64) {
    let max = tunables.zfs_arc_max().max(SHARDS as u64);
    let min = match tunables.zfs_arc_min() {
        0 => default_arc_min(max),
        n => n.min(max),
    };
    (min, max)
}

/// Resident memory the process may hold beyond what the cache accounts for before
/// [`release_free_memory`] gives freed memory back: the program, thread stacks, requests
/// in flight.
const RESIDENT_SLACK_BYTES: u64 = 64 << 20;

/// The process's resident memory (VmRSS), bytes.
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}

/// Least time between two trims: each takes the allocator's arena locks for a few ms
/// (tens on a fragmented heap of a million blocks), and what it gives back builds up only
/// as fast as requests free memory.
pub(crate) const TRIM_INTERVAL: Duration = Duration::from_secs(10);

/// How the process's allocator gives freed memory back to the system, when the program
/// installed another allocator than the C library's ([`set_free_memory_release`]).
static RELEASE: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Tells the engine how to give freed memory back to the system: for a program whose
/// global allocator is not the C library's `malloc` (the `larch` binary uses jemalloc),
/// whose `malloc_trim` the engine calls otherwise. The first call wins.
pub fn set_free_memory_release(release: fn()) {
    let _ = RELEASE.set(release);
}

/// Gives memory the process freed back to the system when resident memory exceeds what
/// the cache accounts for (`accounted_bytes`: the ARC's data and headers, the L2 index)
/// by more than a slack. glibc's allocator keeps what it frees in its arenas (one per
/// group of threads, each up to its high-water mark) and returns it only from the top of
/// a heap, so a burst of large requests (32 MiB NBD writes copied into 16K blocks) leaves
/// hundreds of MiB resident that nothing uses (measured: 247 MiB resident for a 64 MiB
/// ARC, 80 MiB after `malloc_trim`). `malloc_trim` costs tens of ms on a fragmented heap
/// of a million blocks, so it runs only when resident memory is that far over, and the
/// caller runs it at most every [`TRIM_INTERVAL`]. Returns whether it trimmed. With
/// another allocator it calls what [`set_free_memory_release`] installed; elsewhere than
/// glibc without one it does nothing.
pub(crate) fn release_free_memory(accounted_bytes: u64) -> bool {
    let Some(resident) = resident_bytes() else {
        return false;
    };
    let limit = accounted_bytes + accounted_bytes / 8 + RESIDENT_SLACK_BYTES;
    if resident <= limit {
        return false;
    }
    if let Some(release) = RELEASE.get() {
        release();
        return true;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages of the allocator's own arenas.
    unsafe {
        libc::malloc_trim(0);
    }
    true
}

/// The size controller's state.
pub(crate) struct ArcSizer {
    /// The limits and the replacement policy the shards run with, as last applied.
    applied: RankedMutex<((u64, u64), larch_policy::ArcPolicy)>,
    /// Memory pressure: when it last stopped the ARC from growing, and when it last
    /// shrank it.
    pressure: RankedMutex<Pressure>,
    /// The window of the shards' reuse sketches, as last applied (0: none).
    reuse_window: std::sync::atomic::AtomicU64,
}

#[derive(Default)]
struct Pressure {
    no_grow_since: Option<Instant>,
    shrunk_at: Option<Instant>,
}

impl ArcSizer {
    pub(crate) fn new(limits: (u64, u64)) -> ArcSizer {
        ArcSizer {
            applied: RankedMutex::new(Rank::ArcSizing, (limits, larch_policy::ArcPolicy::Arc)),
            pressure: RankedMutex::new(Rank::ArcSizing, Pressure::default()),
            reuse_window: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Gives every shard a reuse sketch of `window_blocks` blocks (0: none), unless that
    /// is the window applied last: the evidence `l2arc_admit` reads
    /// ([`larch_policy::reuse`]), sized by the caller to the ARC and the cache devices.
    pub(crate) fn apply_reuse_window(&self, arc: &ArcCache, window_blocks: u64) {
        let applied = self
            .reuse_window
            .swap(window_blocks, std::sync::atomic::Ordering::Relaxed);
        if applied != window_blocks {
            for mut shard in arc.shards() {
                shard.arc.set_reuse_window(window_blocks);
            }
        }
    }

    /// One pass (the engine's thread runs it four times a second): applies changed
    /// limits, then reacts to memory pressure. Returns whether it shrank the ARC (the
    /// caller then gives the freed memory back to the system).
    pub(crate) fn adjust(&self, arc: &ArcCache, tunables: &Tunables, stats: &EngineStats) -> bool {
        self.adjust_with(arc, tunables, stats, meminfo())
    }

    /// [`ArcSizer::adjust`] with MemTotal and MemAvailable given.
    pub(super) fn adjust_with(
        &self,
        arc: &ArcCache,
        tunables: &Tunables,
        stats: &EngineStats,
        memory: Option<(u64, u64)>,
    ) -> bool {
        // Reads whose shard nothing else locked since they ended enter the ARC now.
        arc.drain_installs();
        let now = arc.now_ms();
        let limits = limits(tunables);
        let replacement = tunables.zfs_arc_policy();
        {
            let mut applied = self.applied.lock();
            if applied.0 != limits {
                let cfg = larch_policy::shards::shard_config(limits.0, limits.1);
                for mut shard in arc.shards() {
                    shard.with_policy(|policy, actions| {
                        let _ = policy.set_limits(cfg.c_min_bytes, cfg.c_max_bytes, now, actions);
                    });
                }
                applied.0 = limits;
            }
            if applied.1 != replacement {
                for mut shard in arc.shards() {
                    shard.with_policy(|policy, _| {
                        // The shards run OpenZFS's balancing, which has both policies.
                        policy
                            .set_policy(replacement)
                            .expect("the shards' balancing takes either policy");
                    });
                }
                applied.1 = replacement;
            }
        }
        let Some((total, available)) = memory else {
            return false;
        };
        let sys_free = match tunables.zfs_arc_sys_free() {
            0 => total / 32,
            n => n,
        };
        let free = available as i128 - sys_free as i128;
        stats
            .memory_available_bytes
            .store(free.max(0) as u64, std::sync::atomic::Ordering::Relaxed);
        let c: u64 = arc.shards().map(|s| s.arc.c()).sum();
        let mut pressure = self.pressure.lock();
        let shrink_due = pressure
            .shrunk_at
            .is_none_or(|t| t.elapsed() >= SHRINK_INTERVAL);
        if free < 0 && shrink_due {
            // Shrink by the shortfall plus 1/128 of what is above the minimum.
            let to_free = (-free) as u64 + (c.saturating_sub(limits.0) >> 7);
            let per_shard = to_free.div_ceil(SHARDS as u64);
            for mut shard in arc.shards() {
                shard.arc.set_no_grow(true);
                shard.with_policy(|policy, actions| policy.shrink(per_shard, now, actions));
            }
            stats
                .memory_indirect_count
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            pressure.no_grow_since = Some(Instant::now());
            pressure.shrunk_at = Some(Instant::now());
            return true;
        }
        if free < 0 || (free as u64) < c >> 5 {
            // Short (a shrink waits for the last one to show), or close to the line: do
            // not grow (OpenZFS `zfs_arc_no_grow_shift`).
            for mut shard in arc.shards() {
                shard.arc.set_no_grow(true);
            }
            pressure.no_grow_since = Some(Instant::now());
        } else if pressure
            .no_grow_since
            .is_some_and(|t| t.elapsed() >= ARC_GROW_RETRY)
        {
            for mut shard in arc.shards() {
                shard.arc.set_no_grow(false);
            }
            pressure.no_grow_since = None;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shortfall_shrinks_the_arc_once_until_the_freed_memory_can_show() {
        let tunables = Tunables::default();
        tunables
            .set("zfs_arc_max", &(256u64 << 20).to_string())
            .unwrap();
        tunables
            .set("zfs_arc_min", &(32u64 << 20).to_string())
            .unwrap();
        tunables
            .set("zfs_arc_sys_free", &(1u64 << 30).to_string())
            .unwrap();
        let arc = ArcCache::new(32 << 20, 256 << 20);
        let stats = EngineStats::default();
        let sizer = ArcSizer::new(limits(&tunables));
        let c = |arc: &ArcCache| -> u64 { arc.shards().map(|s| s.arc.c()).sum() };
        // Fill it (headers only: the policy's accounting is what a shrink looks at).
        for b in 0..(256u64 << 20) / 8192 {
            let key = larch_policy::BlockKey::new(1, b);
            arc.shard(&key).with_policy(|policy, actions| {
                policy.access(&larch_policy::Access::data(key, 8192, 0), actions);
            });
        }
        let full = c(&arc);
        assert!(full > 200 << 20, "{full}");
        // 64 MiB short of the free memory asked for.
        let squeezed = Some((16u64 << 30, (1u64 << 30) - (64 << 20)));
        assert!(sizer.adjust_with(&arc, &tunables, &stats, squeezed));
        let once = c(&arc);
        assert!(once < full && once >= full - (80 << 20), "{full} -> {once}");
        // The next passes, a quarter of a second apart, see the same MemAvailable (the
        // freed memory is not back yet): they wait. Before, each shrank by 64 MiB more.
        for _ in 0..3 {
            assert!(!sizer.adjust_with(&arc, &tunables, &stats, squeezed));
            assert_eq!(c(&arc), once);
        }
    }

    #[test]
    fn zfs_arc_policy_switches_every_shard_at_the_next_pass() {
        let tunables = Tunables::default();
        let arc = ArcCache::new(32 << 20, 256 << 20);
        let stats = EngineStats::default();
        let sizer = ArcSizer::new(limits(&tunables));
        let policies = |arc: &ArcCache| -> Vec<larch_policy::ArcPolicy> {
            arc.shards().map(|s| s.arc.config().policy).collect()
        };
        sizer.adjust_with(&arc, &tunables, &stats, None);
        assert!(
            policies(&arc)
                .iter()
                .all(|p| *p == larch_policy::ArcPolicy::Arc)
        );
        tunables.set("zfs_arc_policy", "larch").unwrap();
        sizer.adjust_with(&arc, &tunables, &stats, None);
        assert!(
            policies(&arc)
                .iter()
                .all(|p| *p == larch_policy::ArcPolicy::Larch)
        );
        tunables.set("zfs_arc_policy", "0").unwrap();
        sizer.adjust_with(&arc, &tunables, &stats, None);
        assert!(
            policies(&arc)
                .iter()
                .all(|p| *p == larch_policy::ArcPolicy::Arc)
        );
    }

    static RELEASES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    fn count_release() {
        RELEASES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// A program with its own allocator has its release called, once resident memory is
    /// past what the cache accounts for plus the slack, and not below that.
    #[test]
    fn an_installed_release_is_called_when_resident_memory_is_far_over() {
        set_free_memory_release(count_release);
        let before = RELEASES.load(std::sync::atomic::Ordering::SeqCst);
        // Accounting for far more than the process holds: nothing to give back.
        assert!(!release_free_memory(1 << 40));
        assert_eq!(RELEASES.load(std::sync::atomic::Ordering::SeqCst), before);
        // 96 MiB touched, accounting for none of it: past the 64 MiB slack.
        let held = vec![1u8; 96 << 20];
        assert!(release_free_memory(0));
        assert!(RELEASES.load(std::sync::atomic::Ordering::SeqCst) > before);
        drop(std::hint::black_box(held));
    }
}

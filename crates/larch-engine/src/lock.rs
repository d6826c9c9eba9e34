//! Locks with a rank: the engine's lock order, checked.
//!
//! Every lock of the engine has a [`Rank`]; a thread may take a lock only while every
//! lock it already holds has a lower rank. Debug builds check this on every acquisition
//! (a thread-local list of the ranks held) and panic, naming both ranks, on the first
//! acquisition out of order, so a deadlock is caught as soon as a test takes the two
//! locks in the wrong order once, not when two threads happen to race. Release builds
//! keep nothing and check nothing. The order itself, and why it is that way, is in the
//! crate documentation ("Lock order").

use std::sync::{Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

/// The engine's locks, lowest (taken first) to highest. Two locks of one rank are never
/// held together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Rank {
    /// `Coherence::feed_io`: one feed's I/O at a time; the syncer's tombstone commit.
    FeedIo = 1,
    /// `Coherence::gate`: generation changes against feed indexing.
    Gate = 2,
    /// The ARC size controller's state, held while it resizes every shard.
    ArcSizing = 3,
    /// A cache device's writer (`L2Device`): its log and ring I/O.
    DeviceWriter = 4,
    /// One ARC shard: policy, buffers, in-flight reads, L2 index.
    Shard = 5,
    /// The coherence sets: feed watch, rebuild watch, tombstone queues.
    Coherence = 6,
    /// A volume's partial-block writes waiting for their block's read (`txg::partial`).
    Partials = 7,
    /// The TXG state shared by writers and the syncer.
    Txg = 8,
    // 9 is the log device's queue (`larch_zil::LogDevice`'s state lock), another crate's
    // lock and so not ranked here: writers append under the TXG lock, and nothing is
    // taken while it is held.
    /// Everything that takes no other lock while held: tables, fault notes, handles.
    #[default]
    Leaf = 10,
}

#[cfg(debug_assertions)]
mod held {
    use super::Rank;
    use std::cell::RefCell;

    thread_local! {
        static HELD: RefCell<Vec<Rank>> = const { RefCell::new(Vec::new()) };
    }

    pub(super) fn acquire(rank: Rank) {
        HELD.with(|held| {
            let mut held = held.borrow_mut();
            if let Some(&top) = held.iter().max() {
                assert!(
                    top < rank,
                    "lock order: taking {rank:?} while holding {top:?} (held: {held:?})"
                );
            }
            held.push(rank);
        });
    }

    pub(super) fn release(rank: Rank) {
        HELD.with(|held| {
            let mut held = held.borrow_mut();
            if let Some(i) = held.iter().rposition(|&r| r == rank) {
                held.remove(i);
            }
        });
    }
}

#[cfg(not(debug_assertions))]
mod held {
    use super::Rank;

    #[inline(always)]
    pub(super) fn acquire(_rank: Rank) {}

    #[inline(always)]
    pub(super) fn release(_rank: Rank) {}
}

/// Locks taken by this thread, by rank: tests count the locks a flow takes.
#[cfg(test)]
mod taken {
    use super::Rank;
    use std::cell::Cell;

    thread_local! {
        static TAKEN: Cell<[u64; Rank::Leaf as usize + 1]> =
            const { Cell::new([0; Rank::Leaf as usize + 1]) };
    }

    pub(super) fn count(rank: Rank) {
        TAKEN.with(|taken| {
            let mut counts = taken.get();
            counts[rank as usize] += 1;
            taken.set(counts);
        });
    }

    /// How many locks of `rank` this thread has taken so far.
    pub(crate) fn taken(rank: Rank) -> u64 {
        TAKEN.with(|taken| taken.get()[rank as usize])
    }
}

#[cfg(test)]
pub(crate) use taken::taken;

/// Records a rank as held from its creation to its drop.
struct Token(Rank);

impl Token {
    fn take(rank: Rank) -> Token {
        held::acquire(rank);
        #[cfg(test)]
        taken::count(rank);
        Token(rank)
    }
}

impl Drop for Token {
    fn drop(&mut self) {
        held::release(self.0);
    }
}

/// A guard of a ranked lock: the `std` guard, and the rank recorded as held until it drops.
pub(crate) struct Ranked<G> {
    guard: G,
    _token: Token,
}

/// The guard of a [`RankedMutex`].
pub(crate) type RankedGuard<'a, T> = Ranked<MutexGuard<'a, T>>;
/// The shared guard of a [`RankedRwLock`].
pub(crate) type RankedReadGuard<'a, T> = Ranked<RwLockReadGuard<'a, T>>;
/// The exclusive guard of a [`RankedRwLock`].
pub(crate) type RankedWriteGuard<'a, T> = Ranked<RwLockWriteGuard<'a, T>>;

/// Takes a lock of `rank` with `take` (checking the order in debug builds first). A
/// poisoned lock (a panic while it was held) panics: its state may be half-changed.
fn acquire<G, E>(rank: Rank, take: impl FnOnce() -> Result<G, E>) -> Ranked<G> {
    let token = Token::take(rank);
    let guard = take().unwrap_or_else(|_| panic!("{rank:?} lock poisoned by a panic"));
    Ranked {
        guard,
        _token: token,
    }
}

impl<G: std::ops::Deref> std::ops::Deref for Ranked<G> {
    type Target = G::Target;
    fn deref(&self) -> &G::Target {
        &self.guard
    }
}

impl<G: std::ops::DerefMut> std::ops::DerefMut for Ranked<G> {
    fn deref_mut(&mut self) -> &mut G::Target {
        &mut self.guard
    }
}

/// A mutex with a rank.
#[derive(Debug, Default)]
pub(crate) struct RankedMutex<T> {
    rank: Rank,
    inner: Mutex<T>,
}

impl<T> RankedMutex<T> {
    /// A mutex of `rank` holding `value`.
    pub(crate) const fn new(rank: Rank, value: T) -> RankedMutex<T> {
        RankedMutex {
            rank,
            inner: Mutex::new(value),
        }
    }

    /// A leaf mutex (takes no other lock while held).
    pub(crate) const fn leaf(value: T) -> RankedMutex<T> {
        RankedMutex::new(Rank::Leaf, value)
    }

    /// Takes the lock.
    pub(crate) fn lock(&self) -> RankedGuard<'_, T> {
        acquire(self.rank, || self.inner.lock())
    }
}

impl<T> RankedGuard<'_, T> {
    /// Waits on `condvar` for at most `timeout`, releasing the lock meanwhile (it is held
    /// again on return, at the same rank).
    pub(crate) fn wait_timeout(self, condvar: &Condvar, timeout: Duration) -> Self {
        let Ranked { guard, _token } = self;
        let (guard, _) = condvar
            .wait_timeout(guard, timeout)
            .unwrap_or_else(|_| panic!("lock poisoned by a panic"));
        Ranked { guard, _token }
    }
}

/// A reader-writer lock with a rank.
#[derive(Debug, Default)]
pub(crate) struct RankedRwLock<T> {
    rank: Rank,
    inner: RwLock<T>,
}

impl<T> RankedRwLock<T> {
    /// A leaf reader-writer lock holding `value`.
    pub(crate) const fn leaf(value: T) -> RankedRwLock<T> {
        RankedRwLock {
            rank: Rank::Leaf,
            inner: RwLock::new(value),
        }
    }

    /// Shared access.
    pub(crate) fn read(&self) -> RankedReadGuard<'_, T> {
        acquire(self.rank, || self.inner.read())
    }

    /// Exclusive access.
    pub(crate) fn write(&self) -> RankedWriteGuard<'_, T> {
        acquire(self.rank, || self.inner.write())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locks_in_order_are_fine_and_released_ranks_can_be_taken_again() {
        let gate = RankedMutex::new(Rank::Gate, ());
        let shard = RankedMutex::new(Rank::Shard, 0u32);
        let leaf = RankedRwLock::leaf(());
        {
            let _g = gate.lock();
            let mut s = shard.lock();
            *s += 1;
            let _l = leaf.read();
        }
        // Nothing held now: any order of single acquisitions is fine.
        drop(shard.lock());
        drop(gate.lock());
        // Guards dropped out of order release the right ranks.
        let g = gate.lock();
        let s = shard.lock();
        drop(g);
        drop(s);
        drop(gate.lock());
    }

    #[test]
    #[cfg(debug_assertions)]
    fn a_lock_taken_out_of_order_panics_in_debug_builds() {
        let gate = RankedMutex::new(Rank::Gate, ());
        let shard = RankedMutex::new(Rank::Shard, ());
        let result = std::panic::catch_unwind(|| {
            let _s = shard.lock();
            let _g = gate.lock();
        });
        let err = result.expect_err("out of order");
        let text = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(text.contains("taking Gate while holding Shard"), "{text}");
        // Two of one rank are refused too.
        let (one, other) = (
            RankedMutex::new(Rank::Shard, ()),
            RankedMutex::new(Rank::Shard, ()),
        );
        let result = std::panic::catch_unwind(|| {
            let _a = one.lock();
            let _b = other.lock();
        });
        let err = result.expect_err("same rank");
        let text = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(text.contains("taking Shard while holding Shard"), "{text}");
    }
}

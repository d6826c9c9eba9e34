//! Deferred installs: a read that ended hands its block to the shard without taking the
//! shard's lock, and whoever takes that lock next puts the block in the ARC first, under
//! the same hold. So a read from a cache device takes its shard's lock once (the lookup
//! that registered it), not twice.
//!
//! Each shard has a lock-free queue of [`Install`]s beside its lock. A read's leader, once
//! its bytes are in hand (verified, for a cache device's copy), pushes the install, then
//! completes its flight (its waiters get the bytes at once). [`super::ArcCache`] drains the
//! queue every time it takes a shard's lock, before the caller sees the shard, and applies
//! each install with exactly the rules a second lock hold applied before
//! ([`Install::apply`]). Why that is safe:
//!
//! 1. **No stale bytes.** A queued read's flight stays in the shard's table of reads in
//!    flight until its install is drained. A write takes the shard's lock, which drains
//!    first: a read queued before the write is installed before it and then overwritten,
//!    exactly as when the read's second hold came first; a read still going when the write
//!    came is found in the table and invalidated, and its install, drained later, is
//!    dropped. The same holds for every other change of a block under the lock (a TXG's
//!    write done or failed, the L2 index's changes). A block lost to a failed TXG is looked
//!    at by the reader before it queues the install, as before.
//! 2. **No read twice.** A lookup of the block takes the lock, which drains first: it finds
//!    the bytes in the ARC. Until the install is queued the flight is in the table, and the
//!    lookup waits for it; the leader queues before it completes the flight, so that a
//!    lookup that comes after the flight completed finds the bytes, as before.
//! 3. **Memory.** Queued bytes are not in the ARC's `size` until drained, as the bytes of
//!    a read in flight were not before. They are bounded by the reads in flight: every
//!    lookup drains its shard, so a queued install is that of a read which was in flight
//!    at the shard's last lock hold. The arcstat `install_queued_bytes` shows them.
//! 4. **Nothing waits for ever.** The ARC sizer's pass (four a second) drains every shard,
//!    so an install waits at most that long when nothing else takes its shard's lock; the
//!    bytes are the waiters' meanwhile. At shutdown the queues go with the ARC, as its
//!    buffers do: every queued flight was completed already.
//! 5. **Abandoned reads.** A leader whose client went away before the read ended queues
//!    nothing: it takes the lock (which drains) to drop its flight, as before.
//!
//! Nothing relies on a holder of the lock seeing an install queued an instant before: one
//! that does not finds the read's flight still in the table (only a drain takes it out),
//! which serves points 1 and 2 as well. So the queue needs no ordering with the lock.
//!
//! The lock order is unchanged: a drain happens under the shard's lock and takes no other.
//! A drain that meets a push still writing its slot waits for it (spinning, then yielding):
//! the pusher holds no lock and is between two instructions of its own.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use crossbeam_queue::SegQueue;
use larch_policy::Access;

use super::{InFlight, Shard};

/// A read that ended, waiting for its shard's lock to enter the ARC.
pub(crate) struct Install {
    /// The read's access, with the generation its lookup gave and the time the read ended
    /// (not the drain's: a drain after a pause would make a re-read within `ARC_MINTIME`
    /// of the install look like one long after it, and keep it from MFU).
    pub(crate) access: Access,
    /// The read's flight, completed (or about to be): it leaves the table when drained.
    pub(crate) flight: Arc<InFlight>,
    /// The bytes read; `None` when the read failed or the block was lost meanwhile.
    pub(crate) data: Option<Bytes>,
}

impl Install {
    /// Applies the install to its shard, whose lock the caller holds: the flight leaves
    /// the table, and unless a write overtook the read or the block is buffered already,
    /// the bytes enter the ARC.
    fn apply(self, shard: &mut Shard) {
        let Install {
            access,
            flight,
            data,
        } = self;
        shard.end_flight(&access.key, &flight);
        if let Some(bytes) = data {
            shard.install(&access, &flight, bytes);
        }
    }

    /// What it adds to [`Installs::pending`]: one install and its bytes.
    fn pending(&self) -> u64 {
        let bytes = self.data.as_ref().map_or(0, |b| b.len() as u64);
        debug_assert!(bytes < 1 << COUNT_SHIFT, "{bytes} bytes");
        (1 << COUNT_SHIFT) + bytes
    }
}

/// One shard's queue of installs (see the module documentation).
#[derive(Default)]
pub(crate) struct Installs {
    /// The installs queued and not yet drained, and their bytes, in one word (the count
    /// from bit [`COUNT_SHIFT`] up, the bytes below it): every hold of the shard's lock
    /// looks at it, and each install changes it once on the way in and once on the way
    /// out.
    pending: AtomicU64,
    queue: SegQueue<Install>,
}

/// Where the count of queued installs starts in [`Installs::pending`]: 2^40 bytes (1 TiB)
/// below it, 2^24 installs above, far beyond what reads in flight can queue.
const COUNT_SHIFT: u32 = 40;

impl Installs {
    /// Queues an install, without the shard's lock.
    pub(crate) fn push(&self, install: Install) {
        // Counted before the push, so that a drain never takes the count below zero.
        self.pending.fetch_add(install.pending(), Ordering::Relaxed);
        self.queue.push(install);
    }

    /// Whether nothing waits (one load).
    pub(crate) fn is_empty(&self) -> bool {
        self.pending.load(Ordering::Relaxed) == 0
    }

    /// Applies every queued install to `shard`, whose lock the caller holds.
    /// An install counted but not pushed yet is left for the next holder.
    pub(crate) fn drain(&self, shard: &mut Shard) {
        while !self.is_empty() {
            let Some(install) = self.queue.pop() else {
                return;
            };
            self.pending.fetch_sub(install.pending(), Ordering::Relaxed);
            install.apply(shard);
        }
    }

    /// Bytes queued now.
    pub(crate) fn queued_bytes(&self) -> u64 {
        self.pending.load(Ordering::Relaxed) & ((1 << COUNT_SHIFT) - 1)
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use larch_policy::BlockKey;

    use super::super::{ArcCache, BlockBuf, Lookup, sizing};
    use super::*;
    use crate::stats::EngineStats;
    use crate::tunables::Tunables;

    const BLOCK: usize = 8192;

    fn arc() -> ArcCache {
        ArcCache::new(1 << 20, 64 << 20)
    }

    /// Leads a read of `key`, which must not be cached: the access its install will make
    /// (with the generation the lookup gave) and its flight.
    fn lead(arc: &ArcCache, key: BlockKey) -> (Access, Arc<InFlight>) {
        let access = Access::data(key, BLOCK as u32, arc.now_ms());
        match arc.shard(&key).lookup(access, || 1) {
            Lookup::Lead {
                flight, generation, ..
            } => (
                Access {
                    generation,
                    ..access
                },
                flight,
            ),
            _ => panic!("{key:?} is cached or being read"),
        }
    }

    fn bytes(value: u8) -> Bytes {
        Bytes::from(vec![value; BLOCK])
    }

    /// A read that ended waits in its shard's queue, counted, outside the ARC's size; the
    /// next lookup of the block applies it first and finds the bytes (no second read), and
    /// so does any other holder of the lock.
    #[test]
    fn an_ended_read_waits_counted_until_the_next_lock_hold_installs_it() {
        let arc = arc();
        let key = BlockKey::new(1, 0);
        let (access, flight) = lead(&arc, key);
        arc.finish_read(access, Arc::clone(&flight), Some(bytes(1)));
        assert_eq!(arc.install_queued_bytes(), BLOCK as u64);
        let lookup = arc
            .shard(&key)
            .lookup(Access::data(key, BLOCK as u32, arc.now_ms()), || 2);
        assert!(
            matches!(&lookup, Lookup::Hit(b) if b == &bytes(1)),
            "the lookup applied the install and hit"
        );
        assert_eq!(arc.install_queued_bytes(), 0);
        assert_eq!(arc.size_and_headers().0, BLOCK as u64);

        // Another block's install is applied by whoever locks its shard next, whatever
        // for: here the stats' pass over the shards.
        let other = BlockKey::new(1, 1);
        let (access, flight) = lead(&arc, other);
        arc.finish_read(access, flight, Some(bytes(2)));
        assert_eq!(arc.install_queued_bytes(), BLOCK as u64);
        assert_eq!(arc.size_and_headers().0, 2 * BLOCK as u64);
        assert_eq!(arc.install_queued_bytes(), 0);
        assert_eq!(arc.buf_of(&other), Some(bytes(2)));
    }

    /// A write after the read ended, its install still queued: the write's lock hold
    /// installs the read first, then the write replaces it. The ARC ends with the write's
    /// bytes and generation.
    #[test]
    fn a_write_after_a_read_ended_wins_over_its_queued_install() {
        let arc = arc();
        let key = BlockKey::new(1, 0);
        let (access, flight) = lead(&arc, key);
        arc.finish_read(access, flight, Some(bytes(1)));
        let now = arc.now_ms();
        arc.shard(&key)
            .write(key, 5, &BlockBuf::copy_from(&bytes(9)), now);
        assert_eq!(arc.install_queued_bytes(), 0);
        assert_eq!(arc.buf_of(&key), Some(bytes(9)));
        let info = arc.shard(&key).arc.info(&key).expect("written");
        assert_eq!(info.generation, 5);
    }

    /// A write while the read is in flight invalidates it, and its TXG then fails (the
    /// block leaves the ARC): the read's install, queued after all that, must not bring
    /// the old bytes back. The next lookup reads the block again.
    #[test]
    fn a_read_overtaken_by_a_write_is_never_installed() {
        let arc = arc();
        let key = BlockKey::new(1, 0);
        let (access, flight) = lead(&arc, key);
        let now = arc.now_ms();
        arc.shard(&key)
            .write(key, 5, &BlockBuf::copy_from(&bytes(9)), now);
        assert!(flight.invalidated());
        arc.shard(&key).write_failed(key, 5);
        arc.finish_read(access, flight, Some(bytes(1)));
        assert_eq!(arc.buf_of(&key), None, "stale bytes entered the ARC");
        assert_eq!(arc.install_queued_bytes(), 0);
        let lookup = arc
            .shard(&key)
            .lookup(Access::data(key, BLOCK as u32, arc.now_ms()), || 6);
        assert!(matches!(lookup, Lookup::Lead { .. }));
    }

    /// A read that failed queues no bytes, and its flight still leaves the table: the next
    /// lookup leads a read of its own instead of waiting for the failed one.
    #[test]
    fn a_failed_read_leaves_the_table_through_the_queue() {
        let arc = arc();
        let key = BlockKey::new(1, 0);
        let (access, flight) = lead(&arc, key);
        arc.finish_read(access, flight, None);
        assert_eq!(arc.install_queued_bytes(), 0);
        let lookup = arc
            .shard(&key)
            .lookup(Access::data(key, BLOCK as u32, arc.now_ms()), || 2);
        assert!(matches!(lookup, Lookup::Lead { .. }));
    }

    /// An install counted but not pushed yet (its reader between the two) is left for the
    /// next holder, not waited for: a lookup meanwhile finds the read still in flight and
    /// waits for its bytes; once pushed, the next lookup finds them in the ARC.
    #[test]
    fn an_install_being_pushed_is_left_for_the_next_holder() {
        let arc = arc();
        let key = BlockKey::new(1, 0);
        let (access, flight) = lead(&arc, key);
        let install = Install {
            access,
            flight,
            data: Some(bytes(1)),
        };
        let installs = &arc.slots[larch_policy::shards::shard_of(&key)].installs;
        installs
            .pending
            .fetch_add(install.pending(), Ordering::Relaxed);
        let again = || Access::data(key, BLOCK as u32, arc.now_ms());
        let lookup = arc.shard(&key).lookup(again(), || 2);
        assert!(
            matches!(lookup, Lookup::Wait(_)),
            "the read is still in flight"
        );
        installs.queue.push(install);
        let lookup = arc.shard(&key).lookup(again(), || 2);
        assert!(matches!(&lookup, Lookup::Hit(b) if b == &bytes(1)));
        assert_eq!(arc.install_queued_bytes(), 0);
        assert!(installs.is_empty());
    }

    /// The ARC sizer's pass drains every shard: an install whose shard nothing else locks
    /// waits at most until then.
    #[test]
    fn the_arc_sizers_pass_installs_what_waits() {
        let arc = arc();
        let keys: Vec<BlockKey> = (0..64).map(|b| BlockKey::new(1, b)).collect();
        // All in flight at once (a lookup would apply what its shard has queued).
        let reads: Vec<_> = keys.iter().map(|&key| lead(&arc, key)).collect();
        for (i, (access, flight)) in reads.into_iter().enumerate() {
            arc.finish_read(access, flight, Some(bytes(i as u8)));
        }
        assert_eq!(arc.install_queued_bytes(), 64 * BLOCK as u64);
        let tunables = Tunables::default();
        let sizer = sizing::ArcSizer::new(sizing::limits(&tunables));
        sizer.adjust_with(&arc, &tunables, &EngineStats::default(), None);
        assert_eq!(arc.install_queued_bytes(), 0);
        for (i, key) in keys.iter().enumerate() {
            assert_eq!(arc.buf_of(key), Some(bytes(i as u8)));
        }
    }
}
